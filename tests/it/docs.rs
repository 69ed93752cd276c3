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
