//! Names the commit the binary is built from, for `hookgate --version`: the
//! `HOOKGATE_COMMIT` variable when set (a container build, which has no `.git`), else
//! what `git` says of the checkout, else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HOOKGATE_COMMIT");
    let commit = std::env::var("HOOKGATE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit);
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = commit.as_deref().map_or("unknown", str::trim);
    println!("cargo:rustc-env=HOOKGATE_VERSION={version} (commit {commit})");
}

/// The checkout's commit, and a rebuild whenever it moves.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD names a branch whose file (or the packed refs) moves with each commit.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    Some(head)
}
