//! Generated documentation stays in step with the code.

#[test]
fn docs_providers_md_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/providers.md");
    let generated = hookgate::provider::catalogue::markdown_table();
    assert!(
        on_disk == generated,
        "docs/providers.md is out of date: run `cargo run -q -- providers --markdown > docs/providers.md`"
    );
}

/// The README names every preset by its key; `docs/providers.md` (checked above against
/// the generated table) has a row for each. This reads the files on disk, so a preset
/// added without its documentation fails here.
#[test]
fn every_preset_is_named_in_the_readme_and_has_a_row_in_providers_md() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let providers =
        std::fs::read_to_string(format!("{root}/docs/providers.md")).expect("docs/providers.md");
    let section = readme
        .split("### Providers")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the README has a Providers section");
    let mut missing = Vec::new();
    for p in hookgate::provider::Preset::all() {
        let key = format!("`{}`", p.name());
        if !section.contains(&key) {
            missing.push(format!(
                "{key} is not named in the README's Providers section"
            ));
        }
        if !providers.contains(&format!("| {key} |")) {
            missing.push(format!("{key} has no row in docs/providers.md"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The README's commands say `cargo run -- …`: that keeps working if a second binary
/// ever joins the package only while the package names the gateway as the one `cargo
/// run` runs. The load benchmark is a benchmark target, not a binary.
#[test]
fn cargo_run_runs_the_gateway() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("Cargo.toml");
    let manifest: toml::Table = toml::from_str(&manifest).expect("Cargo.toml parses");
    let default_run = manifest
        .get("package")
        .and_then(|p| p.get("default-run"))
        .and_then(|d| d.as_str());
    assert_eq!(default_run, Some("hookgate"));
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    assert!(readme.contains("cargo run -- serve"));
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

/// The walk says how to start afresh (run twice, its second `forwarded` would be a
/// `duplicate`), that its sample answers are shortened, and the build estimate is the
/// measured one.
#[test]
fn the_walk_says_how_to_start_afresh_and_that_answers_are_shortened() {
    let readme = readme();
    let walk = readme
        .split("## A five-minute walk")
        .nth(1)
        .and_then(|s| s.split("**1. A tiny upstream handler**").next())
        .expect("the walk's introduction");
    assert!(walk.contains("delete the `data/` folder first"), "{walk}");
    assert!(walk.contains("shortened"), "{walk}");
    assert!(!readme.contains("3 to 4\nminutes") && readme.contains("about a minute and\na half"));
}

/// Every metric a gateway exports is in the README's metrics table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exported_metric_is_documented() {
    let dir = tempfile::tempdir().expect("dir");
    let up = crate::support::Upstream::start().await;
    let gw = crate::support::TestGateway::start(&format!(
        "[capture]\ndir = \"{}\"\n[store]\nbackend = \"disk\"\npath = \"{}\"\n[[routes]]\nname = \"qr\"\npath = \"/qr\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\n",
        dir.path().join("captures").display(),
        dir.path().join("h.db").display(),
        up.url("/qr")
    ))
    .await;
    let text = crate::support::client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body");
    let readme = readme();
    let table = readme
        .split("Metrics (labels never carry event IDs):")
        .nth(1)
        .expect("the metrics table");
    let mut missing: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(
            |name| match text.contains(&format!("# TYPE {name} counter")) {
                true => format!("{name}_total"),
                false => name.to_owned(),
            },
        )
        .filter(|name| !table.contains(&format!("`{name}`")))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "not in the README's metrics table: {missing:?}"
    );
}
