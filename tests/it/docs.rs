//! Generated documentation stays in step with the code.

#[test]
fn docs_providers_md_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/providers.md");
    let generated = hookgate::provider::catalogue::markdown_table();
    assert!(
        on_disk == generated,
        "docs/providers.md is out of date: run `cargo run -q -- providers > docs/providers.md`"
    );
}

#[test]
fn every_catalogue_provider_is_documented_in_the_table() {
    let table = hookgate::provider::catalogue::markdown_table();
    for p in hookgate::provider::Preset::all() {
        assert!(
            table.contains(&format!("| `{}` |", p.name())),
            "{} missing",
            p.name()
        );
    }
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
