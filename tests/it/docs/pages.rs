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

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The providers section of `docs/configuration.md` names every preset by its key;
/// `docs/providers.md` (checked above against the generated table) has a row for each.
/// This reads the files on disk, so a preset added without its documentation fails here.
#[test]
fn every_preset_is_named_in_the_configuration_page_and_has_a_row_in_providers_md() {
    let page = read("docs/configuration.md");
    let providers = read("docs/providers.md");
    let section = page
        .split("\n## Providers\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/configuration.md has a Providers section");
    let mut missing = Vec::new();
    for p in hookgate::provider::Preset::all() {
        let key = format!("`{}`", p.name());
        if !section.contains(&key) {
            missing.push(format!(
                "{key} is not named in the Providers section of docs/configuration.md"
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
    let manifest: toml::Table = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml parses");
    let default_run = manifest
        .get("package")
        .and_then(|p| p.get("default-run"))
        .and_then(|d| d.as_str());
    assert_eq!(default_run, Some("hookgate"));
    let readme = read("README.md");
    assert!(readme.contains("## Two commands"));
    assert!(readme.contains("cargo run -- serve"));
    assert!(readme.contains("\ntests/run "));
    assert!(read("docs/getting-started.md").contains("cargo run -- serve"));
}

/// The walk (docs/getting-started.md) says how to start afresh (run twice, its second
/// `forwarded` would be a `duplicate`) and that its sample answers are shortened; the
/// README's build time is the measured one.
#[test]
fn the_walk_says_how_to_start_afresh_and_that_answers_are_shortened() {
    let page = read("docs/getting-started.md");
    let walk = page
        .split("# A five-minute walk")
        .nth(1)
        .and_then(|s| s.split("**1. A tiny upstream handler**").next())
        .expect("the walk's introduction");
    assert!(walk.contains("delete the `data/` folder first"), "{walk}");
    assert!(walk.contains("shortened"), "{walk}");
    let readme = read("README.md");
    // Measured on a fresh clone (2 cores), with and without the crates' download.
    assert!(
        readme.contains(
            "measured at 2 min 15 s\non a 2-core machine with the crates already downloaded"
        ),
        "{readme}"
    );
}

/// Whether `page` names `key` as a config key: `` `key` ``, `key = …`, or a table
/// header (`[key]`, `[[key]]`, `[….key]`).
fn names_key(page: &str, key: &str) -> bool {
    [format!("`{key}`"), format!("[{key}]"), format!(".{key}]")]
        .iter()
        .any(|form| page.contains(form.as_str()))
        || page
            .match_indices(&format!("{key} ="))
            .any(|(i, _)| !page[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
}

/// docs/configuration.md names every key the config file accepts (the parser's own
/// list, `hookgate::config::keys()`, which a unit test in `src/config` holds to every
/// raw struct) and every key the shipped `config.toml` sets.
#[test]
fn the_configuration_page_names_every_key() {
    let page = read("docs/configuration.md");
    let mut missing = Vec::new();
    for (table, keys) in hookgate::config::keys() {
        for key in keys {
            if !names_key(&page, key) {
                missing.push(format!("{table}.{key}"));
            }
        }
    }
    fn walk(prefix: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
        match value {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    out.push((prefix.to_owned(), k.clone()));
                    walk(&format!("{prefix}{k}."), v, out);
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|v| walk(prefix, v, out)),
            _ => {}
        }
    }
    let shipped: toml::Value = toml::from_str(&read("config.toml")).expect("config.toml parses");
    let mut set = Vec::new();
    walk("", &shipped, &mut set);
    assert!(set.len() > 20, "{set:?}");
    for (table, key) in set {
        if !names_key(&page, &key) {
            missing.push(format!("{table}{key} (config.toml)"));
        }
    }
    missing.dedup();
    assert!(
        missing.is_empty(),
        "not named in docs/configuration.md: {missing:?}"
    );
}

/// The GitHub heading anchor of a Markdown heading's text.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every relative link of the README and of docs/*.md leads to a file that exists and,
/// with `#anchor`, to a heading of that file.
#[test]
fn links_between_the_pages_resolve() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        let name = page
            .strip_prefix(&root)
            .expect("in the repository")
            .display();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(target) = rest.split(')').next() else {
                continue;
            };
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = match file {
                "" => page.clone(),
                f => page.parent().expect("a folder").join(f),
            };
            if !path.exists() {
                broken.push(format!("{name}: {target}: no such file"));
                continue;
            }
            if fragment.is_empty() || path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let linked = std::fs::read_to_string(&path).expect("linked page");
            let found = linked
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| l.trim_start_matches('#'))
                .any(|h| anchor(h) == fragment);
            if !found {
                broken.push(format!("{name}: {target}: no such heading"));
            }
        }
    }
    assert!(pages.len() > 10, "{pages:?}");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Every metric a gateway exports is in the metrics table of docs/operations.md.
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
    let page = read("docs/operations.md");
    let table = page
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
        "not in the metrics table of docs/operations.md: {missing:?}"
    );
}
