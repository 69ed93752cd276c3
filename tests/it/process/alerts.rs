//! deploy/prometheus/alerts.yml: the rules pass `promtool check rules`, their unit tests
//! (deploy/prometheus/alerts.test.yml) pass `promtool test rules` with a firing and a
//! quiet case for every rule, and every metric they read is one the gateway exports.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_yaml::Value as Yaml;

use super::deploy::{exported_series, hookgate_names, yaml};

/// Runs `promtool ARGS` in the repository and fails with its output unless it succeeds.
fn promtool(args: &[&str]) {
    let program = crate::support::find_program("promtool", &[]).expect(
        "promtool is not installed: run tests/run, which installs it (Debian's prometheus package)",
    );
    let out = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_checks_the_alert_rules_and_passes_their_tests() {
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy/prometheus/alerts.test.yml")
            .is_file()
    );
    promtool(&["check", "rules", "deploy/prometheus/alerts.yml"]);
    promtool(&["test", "rules", "deploy/prometheus/alerts.test.yml"]);
}

/// The alerting rules of the file.
fn rules() -> Vec<Yaml> {
    let file = yaml("prometheus/alerts.yml");
    let groups = file["groups"].as_sequence().expect("groups");
    assert_eq!(groups.len(), 1, "one group");
    assert_eq!(groups[0]["name"].as_str(), Some("hookgate"));
    let rules = groups[0]["rules"].as_sequence().expect("rules").clone();
    assert!(
        rules.iter().all(|r| r["alert"].is_string()),
        "alerting rules only"
    );
    rules
}

/// Every rule says how bad it is and what to do, and its unit tests hold a case where
/// it fires and one where it must not (promtool tests only the cases written).
#[test]
fn every_alert_is_described_and_tested_firing_and_quiet() {
    let tests = yaml("prometheus/alerts.test.yml");
    let cases: Vec<&Yaml> = tests["tests"]
        .as_sequence()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().into_iter().flatten())
        .collect();
    let rules = rules();
    let mut names = BTreeSet::new();
    for rule in &rules {
        let name = rule["alert"].as_str().expect("alert");
        assert!(names.insert(name), "{name} is defined twice");
        assert!(
            matches!(
                rule["labels"]["severity"].as_str(),
                Some("critical" | "warning")
            ),
            "{name}: severity critical or warning"
        );
        for annotation in ["summary", "description"] {
            let text = rule["annotations"][annotation].as_str().unwrap_or_default();
            assert!(
                text.contains("{{ $labels."),
                "{name}: its {annotation} names its subject ({{{{ $labels.… }}}})"
            );
        }
        let of_rule = cases
            .iter()
            .filter(|c| c["alertname"].as_str() == Some(name));
        let (mut firing, mut quiet) = (0, 0);
        for case in of_rule {
            match case["exp_alerts"].as_sequence().map_or(0, Vec::len) {
                0 => quiet += 1,
                _ => firing += 1,
            }
        }
        assert!(
            firing > 0 && quiet > 0,
            "{name}: alerts.test.yml has {firing} cases where it fires and {quiet} where it must not; it needs both"
        );
    }
    assert!(rules.len() >= 10, "{names:?}");
}

/// Every `hookgate_…` metric the rules read (or their annotations name) is on a live
/// gateway's `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alert_rules_read_only_metrics_the_gateway_exports() {
    let exported = exported_series().await;
    let mut used = BTreeSet::new();
    for rule in rules() {
        let name = rule["alert"].as_str().expect("alert").to_owned();
        let mut texts = vec![rule["expr"].as_str().expect("expr")];
        texts.extend(
            rule["annotations"]
                .as_mapping()
                .expect("annotations")
                .values()
                .filter_map(Yaml::as_str),
        );
        for word in texts.into_iter().flat_map(hookgate_names) {
            assert!(
                exported.contains(word),
                "{name} reads {word}, which /metrics does not export"
            );
            used.insert(word.to_owned());
        }
    }
    assert!(used.len() >= 10, "{used:?}");
}
