//! The `hookgate::testing` example of the docs, run for real.

use hookgate::replay::Replay;
use hookgate::testing::{Gateway, Recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_testing_example_works() {
    let upstream = Recorder::start().await;
    let gateway = Gateway::start(&format!(
        r#"
        [[routes]]
        name = "stripe"
        path = "/webhooks/stripe"
        provider = "stripe"
        secrets = ["whsec_test"]
        upstream = "{}"
        "#,
        upstream.url("/stripe")
    ))
    .await;

    let body = r#"{"id":"evt_1","type":"invoice.paid"}"#;
    assert_eq!(
        gateway.deliver("stripe", body, "evt_1").await.outcome(),
        "forwarded"
    );
    assert_eq!(
        gateway.deliver("stripe", body, "evt_1").await.outcome(),
        "duplicate"
    );

    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/stripe/invoice.paid.json"
    );
    let mut captured = Replay::load(path.as_ref()).expect("fixture");
    hookgate::sign::resign(
        &mut captured,
        None,
        "whsec_test",
        hookgate::time::Clock::System.now(),
        None,
    )
    .expect("resign");
    assert_eq!(gateway.send(&captured).await.outcome(), "forwarded");

    assert_eq!(upstream.count_for("evt_1"), 1);
    let seen = upstream.received();
    assert_eq!(seen[0].body.as_ref(), body.as_bytes());
    assert_eq!(seen[1].body.as_ref(), captured.body_bytes().as_slice());
    gateway.stop().await;
}

/// The fenced block of `lang` that follows `after` in `page`.
fn block_after<'a>(page: &'a str, after: &str, lang: &str) -> &'a str {
    let start = page
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} in the page"));
    let fence = format!("```{lang}\n");
    let open = page[start..]
        .find(&fence)
        .unwrap_or_else(|| panic!("a {lang} block after {after:?}"))
        + start
        + fence.len();
    let close = page[open..].find("```").expect("a closing fence") + open;
    &page[open..close]
}

/// docs/testing.md's example, with its dependency snippet as written, builds in a
/// fresh crate of its own (outside hookgate's workspace): what a user copies works.
#[test]
fn the_documented_testing_example_builds_in_a_fresh_crate() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/testing.md")).expect("docs/testing.md");
    let section = "## 5. From Rust: `hookgate::testing`";
    let deps = block_after(&page, section, "toml");
    let example = block_after(&page, section, "rust");
    let deps = deps.replace(
        "path = \"../hookgate\"",
        &format!("path = {:?}", root.display().to_string()),
    );
    assert!(deps.contains(&root.display().to_string()), "{deps}");
    let dir = tempfile::tempdir().expect("dir");
    let krate = dir.path();
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"webhooks-handler\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n[workspace]\n\n{deps}"
        ),
    )
    .expect("Cargo.toml");
    // The same versions as hookgate's own build, from the local cache.
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).expect("Cargo.lock");
    std::fs::create_dir_all(krate.join("src")).expect("src");
    std::fs::write(krate.join("src/lib.rs"), "").expect("lib.rs");
    std::fs::create_dir_all(krate.join("tests")).expect("tests");
    std::fs::write(krate.join("tests/webhooks.rs"), example).expect("test");
    // A target folder of its own, kept between runs, so a second run is quick and
    // never waits on the suite's own build.
    let target = root.join("target").join("docs-example");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["check", "--tests", "--offline", "--quiet"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(krate)
        .output()
        .expect("cargo check");
    assert!(
        out.status.success(),
        "the example of docs/testing.md does not build as written:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
