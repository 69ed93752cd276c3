//! `hookgate deliveries list|show|tail|replay` (issue 25): the real binary against a
//! gateway with a token on its admin listener, reached by `--admin URL` and by
//! `--config FILE`.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::binary::BIN;
use crate::support::{TestGateway, Upstream, post, stripe_body, stripe_config};

const TOKEN: &str = "deliveries-cli-token";

/// Runs the binary; (success, stdout, stderr).
fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("HOOKGATE_ADMIN_TOKEN")
        .output()
        .expect("run hookgate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_commands_list_show_follow_and_replay_the_log() {
    let up = Upstream::start().await;
    let store = format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"{TOKEN}\"\n[store]\nbackend = \"memory\""
    );
    let gw = TestGateway::start(&stripe_config(&up, &store, "")).await;
    let admin = format!("http://{}", gw.admin);
    // `--config`: the file names the admin listener and its token.
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("hookgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nadmin_listen = \"{}\"\nadmin_token = \"{TOKEN}\"\n\
             [[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\n\
             secrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
            gw.admin,
            up.url("/hooks/stripe")
        ),
    )
    .expect("config");
    let cfg = cfg.to_str().expect("utf-8 path").to_owned();
    let with_admin = |args: &[&str]| {
        let mut all = vec!["deliveries"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--admin", &admin, "--admin-token", TOKEN]);
        run(&all)
    };

    let body = stripe_body("evt_cli_one");
    let r = gw.deliver("stripe", &body, "evt_cli_one").await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let mut forged = gw.sign("stripe", &body, "evt_cli_forged");
    for (n, v) in &mut forged {
        if n.eq_ignore_ascii_case("stripe-signature") {
            *v = v.replace("v1=", "v1=00");
        }
    }
    let r = post(
        &gw.url("/webhooks/stripe"),
        &forged,
        body.clone().into_bytes(),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);

    // The log is written off the request path: wait until both are in it.
    let mut listed = String::new();
    for _ in 0..50 {
        let (ok, out, err) = run(&["deliveries", "list", "--config", &cfg]);
        assert!(ok, "{err}");
        listed = out;
        if listed.contains("bad_signature") && listed.contains("evt_cli_one") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(listed.starts_with("RECEIVED"), "{listed}");
    assert!(listed.contains("2 delivery(ies), newest first"), "{listed}");
    // Newest first: the refused one above the forwarded one.
    let refused_at = listed.find("bad_signature").expect("refused row");
    let forwarded_at = listed.find("forwarded").expect("forwarded row");
    assert!(refused_at < forwarded_at, "{listed}");

    // The filters, as the API's.
    let (ok, out, err) = with_admin(&["list", "--outcome", "bad_signature"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("1 delivery(ies)") && !out.contains("forwarded"),
        "{out}"
    );
    let (ok, out, _) = with_admin(&["list", "--event-id", "evt_cli_one", "--since", "5m"]);
    assert!(ok);
    assert!(
        out.contains("1 delivery(ies)") && out.contains("forwarded"),
        "{out}"
    );
    let (ok, out, _) = with_admin(&["list", "--before", "1h"]);
    assert!(ok);
    assert_eq!(out, "no deliveries match\n");
    let (ok, out, _) = with_admin(&["list", "--limit", "1"]);
    assert!(ok);
    assert!(
        out.contains("1 delivery(ies)") && out.contains("older ones"),
        "{out}"
    );
    let (ok, out, err) = with_admin(&["list", "--since", "yesterday-ish"]);
    assert!(!ok, "{out}");
    assert!(err.contains("since"), "{err}");
    let (ok, json, err) = with_admin(&["list", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let records = v["deliveries"].as_array().expect("deliveries");
    assert_eq!(records.len(), 2, "{json}");
    let id_of = |outcome: &str| {
        records
            .iter()
            .find(|r| r["outcome"] == outcome)
            .and_then(|r| r["delivery_id"].as_str())
            .expect("a record")
            .to_owned()
    };
    let (good, bad) = (id_of("forwarded"), id_of("bad_signature"));

    // Without the token, the admin listener refuses and the command says so.
    let (ok, _, err) = run(&["deliveries", "list", "--admin", &admin]);
    assert!(!ok);
    assert!(err.contains("token"), "{err}");

    // show: the body, pretty; the signature redacted; the refused one's reason.
    let (ok, shown, err) = with_admin(&["show", &good]);
    assert!(ok, "{err}");
    assert!(shown.contains("\"amount\": 2000"), "{shown}");
    // The keys in the order received (id, object, type, data), not sorted.
    let at = |key: &str| shown.find(&format!("\"{key}\": ")).unwrap_or(usize::MAX);
    assert!(
        at("id") < at("object") && at("object") < at("type") && at("type") < at("data"),
        "{shown}"
    );
    assert!(shown.contains("stripe-signature: [redacted]"), "{shown}");
    assert!(!shown.contains("v1="), "{shown}");
    assert!(
        shown.contains("outcome:   forwarded, answered 200"),
        "{shown}"
    );
    let (ok, shown, err) = run(&["deliveries", "show", &bad, "--config", &cfg]);
    assert!(ok, "{err}");
    assert!(shown.contains("refused:   "), "{shown}");
    assert!(shown.contains("recorded without it"), "{shown}");
    let (ok, _, err) = with_admin(&["show", "0000-nothing"]);
    assert!(!ok);
    assert!(err.contains("no such delivery"), "{err}");

    // tail: new deliveries as they come, with the token from the environment.
    let mut child = Command::new(BIN)
        .args([
            "deliveries",
            "tail",
            "--json",
            "--route",
            "stripe",
            "--admin",
            &admin,
        ])
        .env("HOOKGATE_ADMIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tail");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Until the stream is open, a delivery may come before it: send until one shows.
    let mut got = None;
    for i in 0..40 {
        let id = format!("evt_cli_tail_{i}");
        let r = gw.deliver("stripe", &stripe_body(&id), &id).await;
        assert_eq!(r.outcome(), "forwarded", "{}", r.body);
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(250)) {
            got = Some(line);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = got.expect("tail printed a new delivery");
    let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON record a line");
    assert!(
        v["event_id"]
            .as_str()
            .unwrap_or_default()
            .starts_with("evt_cli_tail_"),
        "{line}"
    );
    assert!(v.get("body").is_none(), "{line}");

    // replay: the forwarded one goes to the upstream again, recorded as a replay.
    let before = up.count_for("evt_cli_one");
    let (ok, out, err) = with_admin(&["replay", &good]);
    assert!(ok, "{err}");
    assert!(out.starts_with(&format!("replayed {good} as ")), "{out}");
    assert!(out.trim_end().ends_with("forwarded 200"), "{out}");
    assert_eq!(up.count_for("evt_cli_one"), before + 1);
    let new_id = out
        .split_whitespace()
        .nth(3)
        .expect("the replay's ID")
        .trim_end_matches(':')
        .to_owned();
    let mut replayed = String::new();
    for _ in 0..50 {
        let (_, out, _) = with_admin(&["show", &new_id]);
        replayed = out;
        if replayed.contains("replay of:") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        replayed.contains(&format!("replay of: {good}")),
        "{replayed}"
    );
    // A refused delivery has no body to send.
    let (ok, _, err) = with_admin(&["replay", &bad]);
    assert!(!ok);
    assert!(err.contains("cannot be replayed"), "{err}");
    gw.stop().await;
}

/// `hookgate deliveries replay` with the list's filters: `--plan` names each event
/// once (a copy's record is not a second event), changing nothing; without it each is
/// replayed once, oldest first, recorded with `replay_of`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_plans_then_replays_each_selected_event_once() {
    let up = Upstream::start().await;
    let store = format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"{TOKEN}\"\n[store]\nbackend = \"memory\""
    );
    let gw = TestGateway::start(&stripe_config(&up, &store, "")).await;
    let admin = format!("http://{}", gw.admin);
    let with_admin = |args: &[&str]| {
        let mut all = vec!["deliveries", "replay"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--admin", &admin, "--admin-token", TOKEN]);
        run(&all)
    };
    let typed = |id: &str, t: &str| format!(r#"{{"id":"{id}","object":"event","type":"{t}"}}"#);
    for (id, t) in [
        ("evt_bulk_1", "invoice.paid"),
        ("evt_bulk_2", "invoice.paid"),
        ("evt_bulk_3", "customer.created"),
    ] {
        let r = gw.deliver("stripe", &typed(id, t), id).await;
        assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    }
    let copy = gw
        .deliver("stripe", &typed("evt_bulk_1", "invoice.paid"), "evt_bulk_1")
        .await;
    assert_eq!(copy.outcome(), "duplicate");
    let filters = ["--route", "stripe", "--event-type", "invoice.paid"];
    let mut plan = String::new();
    for _ in 0..50 {
        let (ok, out, err) = with_admin(&[&filters[..], &["--plan"]].concat());
        assert!(ok, "{err}");
        plan = out;
        if plan.starts_with("plan: 2 event(s)") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        plan.starts_with("plan: 2 event(s) would be replayed; nothing was changed"),
        "{plan}"
    );
    assert!(
        plan.contains("evt_bulk_1") && plan.contains("evt_bulk_2") && !plan.contains("evt_bulk_3"),
        "{plan}"
    );
    assert_eq!(up.count(), 3, "a plan sends nothing");
    let (ok, out, err) = with_admin(&filters);
    assert!(ok, "{out}{err}");
    assert!(
        out.trim_end().ends_with("2 replayed, 0 not replayed"),
        "{out}"
    );
    assert_eq!(
        (
            up.count_for("evt_bulk_1"),
            up.count_for("evt_bulk_2"),
            up.count_for("evt_bulk_3")
        ),
        (2, 2, 1),
        "each selected event once more, the others not"
    );
    // Oldest first.
    let order: Vec<String> = up
        .received()
        .iter()
        .skip(3)
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(order, ["evt_bulk_1", "evt_bulk_2"]);
    let (ok, _, err) = with_admin(&[]);
    assert!(!ok, "a bulk replay needs filters");
    assert!(err.contains("filters"), "{err}");
    gw.stop().await;
}
