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
