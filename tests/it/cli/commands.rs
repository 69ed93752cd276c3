//! The commands a user reaches for after the walk (issue 28, docs/getting-started.md), and what the
//! command line prints from outside data (issue 23, items 11–13), with the real
//! binary against real gateways and upstreams on loopback.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::binary::{BIN, Gateway, write_config};
use crate::support::{TestGateway, Upstream, client, eventually, free_port, post};

/// Runs the binary with `env` set; (success, stdout, stderr).
fn run_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("HOOKGATE_ADMIN_TOKEN")
        .env_remove("HOOKGATE_ADMIN_TOKEN_NAME")
        .env_remove("HOOKGATE_PRIVATE_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run hookgate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(args: &[&str]) -> (bool, String, String) {
    run_env(args, &[])
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Two Stripe routes and a Shopify route whose secret is a variable nobody set.
fn three_routes(extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:{}\"\n{extra}\n\
         [[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"http://127.0.0.1:3000/stripe\"\n\
         [[routes]]\nname = \"shopify\"\npath = \"/webhooks/shopify\"\nprovider = \"shopify\"\nsecrets = [\"${{HOOKGATE_TEST_UNSET_SHOPIFY}}\"]\nupstream = \"http://127.0.0.1:3000/shopify\"\nevents = [\"orders/paid\"]\n",
        free_port()
    )
}

// Issue 28, item 1.
#[test]
fn sign_puts_every_extra_header_into_the_curl_command_and_the_headers() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &three_routes(""));
    let cfg = path_str(&cfg);
    let (ok, curl, err) = run(&[
        "sign",
        "--route",
        "stripe",
        "--config",
        cfg,
        "--header",
        "X-Shopify-Topic: orders/paid",
        "--curl",
        "http://127.0.0.1:8080/webhooks/stripe",
        r#"{"id":"evt_h"}"#,
    ]);
    assert!(ok, "{err}");
    assert!(curl.contains("-H 'X-Shopify-Topic: orders/paid'"), "{curl}");
    let (ok, headers, err) = run(&[
        "sign",
        "--route",
        "stripe",
        "--config",
        cfg,
        "--header",
        "X-Shopify-Topic: orders/paid",
        "--header",
        "content-type: text/plain",
        "--headers",
        r#"{"id":"evt_h"}"#,
    ]);
    assert!(ok, "{err}");
    assert!(
        headers.lines().any(|l| l == "X-Shopify-Topic: orders/paid"),
        "{headers}"
    );
    // A content type given is the one sent: the curl command adds its own only when
    // none is.
    let (_, curl, _) = run(&[
        "sign",
        "--route",
        "stripe",
        "--config",
        cfg,
        "--header",
        "content-type: text/plain",
        "--curl",
        "http://x/",
        "{}",
    ]);
    assert_eq!(curl.matches("content-type").count(), 1, "{curl}");
}

// Issue 28, item 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_for_one_route_needs_only_that_routes_variables() {
    let dir = tempfile::tempdir().expect("dir");
    // The store's URL is a variable nobody set either: neither `sign` nor the admin
    // client talks to the store.
    let cfg = write_config(
        &dir,
        &three_routes("[store]\nbackend = \"redis\"\nurl = \"${HOOKGATE_TEST_UNSET_REDIS}\"\n"),
    );
    let cfg = path_str(&cfg);
    let (ok, out, err) = run(&[
        "sign",
        "--route",
        "stripe",
        "--config",
        cfg,
        "--curl",
        "http://127.0.0.1:8080/webhooks/stripe",
        r#"{"id":"evt_1"}"#,
    ]);
    assert!(ok, "another route's unset variable stopped sign: {err}");
    assert!(out.starts_with("curl "), "{out}");
    // The route whose own variable is unset: nothing on stdout (so `| sh` runs
    // nothing), the reason on stderr, a non-zero exit.
    let (ok, out, err) = run(&[
        "sign",
        "--route",
        "shopify",
        "--config",
        cfg,
        "--curl",
        "http://x/",
        "{}",
    ]);
    assert!(!ok);
    assert_eq!(out, "");
    assert!(err.contains("HOOKGATE_TEST_UNSET_SHOPIFY"), "{err}");
    // The admin client reads the config for the admin listener: another route's
    // variable is no business of it (nothing listens there: it says so instead).
    for args in [
        &["events", "list", "--route", "stripe", "--config", cfg][..],
        &[
            "forget",
            "--route",
            "stripe",
            "--event-id",
            "evt_1",
            "--config",
            cfg,
        ][..],
    ] {
        let (ok, _, err) = run(args);
        assert!(!ok);
        assert!(
            !err.contains("is not set") && err.contains("cannot reach the admin listener"),
            "{args:?}: {err}"
        );
    }
}

// Issue 28, item 3.
#[test]
fn check_lists_a_missing_key_and_a_wrong_type_with_every_other_error() {
    let dir = tempfile::tempdir().expect("dir");
    let text = "[server]\nlisten = \"127.0.0.1:1\"\n\n\
        [[routes]]\nname = \"a\"\npath = \"/a\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"http://127.0.0.1:3000/a\"\nupstream_timout = \"5s\"\n\n\
        [[routes]]\nname = \"b\"\npath = \"/b\"\nprovider = \"stripe\"\nupstream = \"http://127.0.0.1:3000/b\"\n\n\
        [[routes]]\nname = \"c\"\npath = \"/c\"\nprovider = \"stripe\"\nsecrets = [\"${HOOKGATE_TEST_UNSET_C}\"]\nupstream = \"http://127.0.0.1:3000/c\"\n\n\
        [[routes]]\nname = \"d\"\npath = \"/d\"\nprovider = \"stripe\"\nsecrets = \"whsec_not_a_list\"\nupstream = 3000\n";
    let cfg = write_config(&dir, text);
    let (ok, out, err) = run(&["check", "--config", path_str(&cfg)]);
    assert!(!ok, "{out}");
    let file = cfg.display().to_string();
    let lines: Vec<&str> = err.lines().collect();
    for want in [
        format!("{file}:10: routes[0].upstream_timout: unknown key"),
        format!("{file}:12: routes[1].secrets: missing"),
        format!("{file}:22: routes[2].secrets[0]: ${{HOOKGATE_TEST_UNSET_C}} is not set"),
        format!("{file}:29: routes[3].secrets: invalid type: string, expected a sequence"),
        format!("{file}:30: routes[3].upstream: invalid type: integer, expected a string"),
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(&want)),
            "missing {want:?} in:\n{err}"
        );
    }
    assert_eq!(lines.len(), 5, "one line per problem:\n{err}");
    assert!(!err.contains("whsec_not_a_list"), "a value is never echoed");
}

// Issue 28, item 4.
#[test]
fn providers_lists_filters_shows_one_and_suggests_the_nearest() {
    let (ok, all, _) = run(&["providers"]);
    assert!(ok);
    let mut lines = all.lines();
    let head = lines.next().expect("header");
    assert!(
        head.starts_with("PROVIDER") && head.contains("EVENT ID") && head.contains("HANDSHAKE")
    );
    let names: Vec<&str> = all
        .lines()
        .skip(1)
        .filter(|l| !l.contains("preset(s)"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "sorted by name");
    assert!(names.contains(&"github") && names.len() > 50);

    let (ok, some, _) = run(&["providers", "challenge"]);
    assert!(ok);
    assert!(
        some.contains("\nslack ") && !some.contains("\nstripe "),
        "{some}"
    );

    // One preset in full, with a route that `hookgate check` accepts as it is.
    let (ok, one, _) = run(&["providers", "github"]);
    assert!(ok);
    assert!(one.contains("scheme") && one.contains("event id"), "{one}");
    let route = &one[one.find("[[routes]]").expect("a route to paste")..];
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!("[server]\nlisten = \"127.0.0.1:1\"\n{route}"),
    );
    let (ok, _, err) = run_env(
        &["check", "--config", path_str(&cfg)],
        &[("GITHUB_SECRET", "s3cret")],
    );
    assert!(ok, "the pasted route:\n{route}\n{err}");

    let (ok, out, err) = run(&["providers", "githbu"]);
    assert!(!ok);
    assert_eq!(out, "");
    assert!(err.contains("did you mean github?"), "{err}");
}

// Issue 28, item 7.
#[test]
fn check_shows_the_key_a_route_really_deduplicates_on() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        "[server]\nlisten = \"127.0.0.1:1\"\n[[routes]]\nname = \"gh\"\npath = \"/gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\nupstream = \"http://127.0.0.1:3000/gh\"\n[[routes]]\nname = \"st\"\npath = \"/st\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"http://127.0.0.1:3000/st\"\n",
    );
    let (ok, out, err) = run(&["check", "--config", path_str(&cfg)]);
    assert!(ok, "{err}");
    assert!(
        out.contains("event id   sig-<SHA-256 of the signed bytes>, not header:x-github-delivery (the signature does not cover x-github-delivery"),
        "{out}"
    );
    assert!(out.contains("event id   json:/id\n"), "{out}");
}

// Issue 28, item 10: GitHub's delivery IDs are GUIDs.
#[test]
fn sign_makes_guid_delivery_ids_for_github() {
    let (ok, out, err) = run(&[
        "sign",
        "--provider",
        "github",
        "--secret",
        "s",
        "--headers",
        "{}",
    ]);
    assert!(ok, "{err}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("x-github-delivery: "))
        .expect("a delivery ID");
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "{id}");
    assert!(
        id.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()),
        "{id}"
    );
}

// Issue 23, item 13.
#[test]
fn check_never_prints_credentials_of_upstream_urls() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        "[server]\nlisten = \"127.0.0.1:1\"\n[[routes]]\nname = \"a\"\npath = \"/a\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"https://bob:${HOOKGATE_TEST_UP_PASS}@up.example:8443/hook?code=${HOOKGATE_TEST_UP_CODE}&v=2\"\n",
    );
    let (ok, out, err) = run_env(
        &["check", "--config", path_str(&cfg)],
        &[
            ("HOOKGATE_TEST_UP_PASS", "hunter2-pass"),
            ("HOOKGATE_TEST_UP_CODE", "s3cr3t-code"),
        ],
    );
    assert!(ok, "{err}");
    assert!(
        !out.contains("hunter2-pass") && !out.contains("s3cr3t-code") && !out.contains("bob"),
        "{out}"
    );
    assert!(
        out.contains(
            "upstream   https://[redacted]@up.example:8443/hook?code=[redacted]&v=[redacted]"
        ),
        "{out}"
    );
    // Nor does an error about an upstream that is not an http(s) URL.
    let cfg = write_config(
        &dir,
        "[server]\nlisten = \"127.0.0.1:1\"\n[[routes]]\nname = \"a\"\npath = \"/a\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"ftp://bob:hunter2-pass@up.example/x?code=s3cr3t-code\"\n",
    );
    let (ok, out, err) = run(&["check", "--config", path_str(&cfg)]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("routes[0].upstream") && err.contains("[redacted]"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2-pass") && !err.contains("s3cr3t-code"),
        "{err}"
    );
}

// Issue 23, item 12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_sends_only_to_the_target_whatever_path_the_file_records() {
    let target = Upstream::start().await;
    let elsewhere = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let other = elsewhere.url("/x");
    let other_hostport = other
        .trim_start_matches("http://")
        .trim_end_matches("/x")
        .to_owned();
    for (i, path) in [
        format!("@{other_hostport}/x"),
        other.clone(),
        format!("//{other_hostport}/x"),
    ]
    .iter()
    .enumerate()
    {
        let file = dir.path().join(format!("{i}.json"));
        let replay = serde_json::json!({
            "hookgate_replay": 1, "method": "POST", "path": path,
            "headers": [["content-type", "application/json"]], "body": "{\"id\":\"evt_r\"}",
        });
        std::fs::write(&file, replay.to_string()).expect("write");
        let base = target.url("");
        let (ok, out, err) = run(&[
            "replay",
            path_str(&file),
            "--target",
            base.trim_end_matches('/'),
        ]);
        assert!(!ok, "{path}: {out}");
        assert!(
            format!("{out}{err}").contains("refused"),
            "{path}: {out}{err}"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(elsewhere.count(), 0, "nothing went to another host");
    assert_eq!(target.count(), 0);
}

/// A queue route `q` (503 from its upstream, three attempts, ordered by the body's
/// `customer`) and a sync route `s`, on a disk store, run by the real binary.
fn queue_and_sync(port: u16, admin: u16, up: &Upstream) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n[store]\nbackend = \"disk\"\npath = \"state/hookgate.db\"\n\
         [[routes]]\nname = \"qr\"\npath = \"/qr\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\nretry = {{ max_attempts = 3, initial = \"100ms\", max_delay = \"100ms\" }}\norder_by = \"json:/customer\"\non_dead = \"block\"\n\
         [[routes]]\nname = \"s\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
        up.url("/qr"),
        up.url("/s")
    )
}

fn sign_for(cfg: &Path, route: &str, body: &str) -> Vec<(String, String)> {
    let (ok, out, err) = run(&[
        "sign",
        "--headers",
        "--route",
        route,
        "--config",
        path_str(cfg),
        body,
    ]);
    assert!(ok, "{err}");
    out.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

async fn admin_json(admin: u16, path: &str) -> (String, serde_json::Value) {
    let text = client()
        .get(format!("http://127.0.0.1:{admin}{path}"))
        .send()
        .await
        .expect("admin")
        .text()
        .await
        .expect("body");
    let v = serde_json::from_str(&text).unwrap_or_default();
    (text, v)
}

// Issue 28, items 5, 6, 8 and 10; issue 23, item 11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_commands_print_safely_take_prefixes_and_say_what_they_show() {
    let up = Upstream::start().await;
    up.set_status(503);
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &queue_and_sync(port, admin, &up));
    let log = dir.path().join("gateway.log");
    let gw = Gateway::spawn_logging(&cfg, port, "info", Some(&log));
    let admin_url = format!("http://127.0.0.1:{admin}");
    let events = |args: &[&str]| {
        let mut all = vec!["events"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--admin", &admin_url]);
        run(&all)
    };

    // Documented counters are on /metrics from the start, at 0 (item 10).
    let (metrics, _) = admin_json(admin, "/metrics").await;
    for sample in [
        "hookgate_config_reloads_total{result=\"ok\"} 0",
        "hookgate_captures_total{result=\"written\"} 0",
        "hookgate_queue_deliveries_total{route=\"qr\",destination=\"qr\",outcome=\"dead\"} 0",
        "hookgate_queue_lease_lost_total{route=\"qr\",destination=\"qr\",stage=\"sending\"} 0",
        "hookgate_delivery_attempts_total{route=\"qr\",destination=\"qr\",result=\"http_5xx\"} 0",
    ] {
        assert!(metrics.contains(sample), "{sample} absent:\n{metrics}");
    }

    // An order key and an event type carrying terminal escape sequences (item 11).
    let ids = ["evt_prefix_0123456789abcdef", "evt_prefix_0123456789fedcba"];
    for id in ids {
        let body = format!(
            r#"{{"id":"{id}","object":"event","type":"invoice.paid\u001b[2J","customer":"cus\u001b]0;pwned\u0007"}}"#
        );
        let r = post(
            &gw.url("/qr"),
            &sign_for(&cfg, "qr", &body),
            body.into_bytes(),
        )
        .await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
        // JSON answers end with a newline (item 10).
        assert!(r.body.ends_with("}\n"), "{:?}", r.body);
    }
    // The first dies after three attempts and, under on_dead = "block", holds its
    // key's line; the second waits behind it.
    let mut dead = false;
    for _ in 0..100 {
        let (_, v) = admin_json(admin, &format!("/events/qr/{}", ids[0])).await;
        if v["state"] == "dead" {
            dead = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dead, "the first event is dead after three attempts");

    // The list shortens long IDs as the walk shows them (item 8).
    let (ok, list, err) = events(&["list", "--route", "qr"]);
    assert!(ok, "{err}");
    assert!(list.contains(" evt_prefix_0…\n"), "{list}");

    // A unique prefix names one event; an ambiguous one is refused with the choices.
    let (ok, _, err) = events(&["show", "--route", "qr", "--event-id", "evt_prefix_0"]);
    assert!(!ok);
    assert!(
        err.contains("is the start of 2 event IDs") && err.contains(ids[0]) && err.contains(ids[1]),
        "{err}"
    );
    let (ok, shown, err) = events(&[
        "show",
        "--route",
        "qr",
        "--event-id",
        "evt_prefix_0123456789abcdef",
    ]);
    assert!(ok, "{err}");
    assert!(
        shown.starts_with(&format!("event {} on route q", ids[0])),
        "{shown}"
    );
    // Nothing from the body reaches the terminal as a control character (item 11).
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown.contains("cus\\u001b]0;pwned\\u0007"), "{shown}");
    let (ok, json, _) = events(&[
        "show",
        "--route",
        "qr",
        "--event-id",
        "evt_prefix_0123456789abcdef",
        "--json",
    ]);
    assert!(ok && !json.contains('\u{1b}'), "{json:?}");
    assert!(
        serde_json::from_str::<serde_json::Value>(json.trim()).is_ok(),
        "still JSON: {json}"
    );

    // The headers the admin listener lists are those forwarded (item 10).
    let (_, v) = admin_json(admin, &format!("/events/qr/{}", ids[0])).await;
    let names: Vec<&str> = v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter_map(|h| h.as_str())
        .collect();
    assert!(names.contains(&"stripe-signature"), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.eq_ignore_ascii_case("host") || n.eq_ignore_ascii_case("content-length")),
        "{names:?}"
    );

    // After a retry, which count is which (item 6); retry takes a prefix (item 8).
    let (ok, out, err) = events(&[
        "retry",
        "--route",
        "qr",
        "--event-id",
        "evt_prefix_0123456789a",
    ]);
    assert!(ok, "{out}{err}");
    let mut retried = false;
    for _ in 0..100 {
        let (_, v) = admin_json(admin, &format!("/events/qr/{}", ids[0])).await;
        if v["requeued_at_ms"].is_u64() && v["attempts"].as_u64().unwrap_or(0) >= 1 {
            retried = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(retried, "an attempt after the retry");
    let (ok, shown, err) = events(&["show", "--route", "qr", "--event-id", ids[0]]);
    assert!(ok, "{err}");
    assert!(shown.contains("since the operator's retry"), "{shown}");
    assert!(
        shown.contains("(3 before it, listed first below)"),
        "{shown}"
    );
    assert!(shown.contains("-- retried by the operator"), "{shown}");

    // The admin listener's refusals are printed as their message (item 10).
    let (ok, out, err) = events(&["show", "--route", "qr", "--event-id", "evt_nobody"]);
    assert!(!ok);
    assert_eq!(out, "");
    assert_eq!(err.trim(), "hookgate: no such event on this route", "{err}");

    // A sync route is not an empty queue (item 5).
    let (ok, out, err) = events(&["list", "--route", "s"]);
    assert!(!ok, "{out}");
    assert!(err.contains("is not a queue route"), "{err}");

    // The operator's action is logged with the event ID itself (item 10).
    drop(gw);
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains(ids[0]) && !logged.contains("One("),
        "{logged}"
    );
}

// Issue 28, item 9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_deliveries_are_not_captured_and_their_marker_is_not_forwarded() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let captures = dir.path().join("captures");
    let text = format!(
        "[capture]\ndir = \"{}\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
        captures.display(),
        up.url("/up")
    );
    let gw = TestGateway::start(&text).await;
    let cfg = write_config(&dir, &text);
    let (ok, file, err) = run(&[
        "sign",
        "--route",
        "stripe",
        "--config",
        path_str(&cfg),
        &crate::support::stripe_body("evt_replayed"),
    ]);
    assert!(ok, "{err}");
    let replay = dir.path().join("evt_replayed.json");
    std::fs::write(&replay, file).expect("write");
    let (ok, out, err) = run(&[
        "replay",
        path_str(&replay),
        "--target",
        &gw.base_url(),
        "--expect",
        "forwarded",
    ]);
    assert!(ok, "{out}{err}");
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].header(hookgate::replay::REPLAY_HEADER),
        None,
        "stripped"
    );

    // A delivery from the provider is captured; the replay before it was not.
    let r = gw
        .deliver(
            "stripe",
            &crate::support::stripe_body("evt_direct"),
            "evt_direct",
        )
        .await;
    assert_eq!(r.outcome(), "forwarded");
    let files = || {
        std::fs::read_dir(&captures)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(eventually(Duration::from_secs(5), || files().len() == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let only = files();
    assert_eq!(only.len(), 1, "{only:?}");
    let captured = std::fs::read_to_string(&only[0]).expect("capture");
    assert!(captured.contains("evt_direct") && !captured.contains("evt_replayed"));
}

// Issue 23, item 11: the demo upstream prints what it receives, escaped too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_upstream_prints_bodies_without_their_escape_sequences() {
    let port = free_port();
    let mut child = Command::new(BIN)
        .args(["upstream", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn upstream");
    let url = format!("http://127.0.0.1:{port}/x");
    let mut sent = false;
    for _ in 0..50 {
        if client()
            .post(&url)
            .body("{\"note\":\"\u{1b}]0;pwned\u{7}\"}")
            .send()
            .await
            .is_ok()
        {
            sent = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    assert!(sent, "the upstream never answered");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("\\u001b]0;pwned\\u0007"), "{printed}");
    assert!(!printed.contains('\u{1b}'), "{printed:?}");
}

/// The walk (docs/getting-started.md): once the queued event is delivered, `events show` still finds it
/// by the start of its ID (delivered events are kept for the dedup window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_show_takes_the_prefix_of_a_delivered_event() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &queue_and_sync(port, admin, &up));
    let gw = Gateway::spawn(&cfg, port);
    let body = r#"{"id":"evt_delivered_0123456789","object":"event","type":"invoice.paid","customer":"c1"}"#;
    let r = post(
        &gw.url("/qr"),
        &sign_for(&cfg, "qr", body),
        body.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    assert!(
        eventually(Duration::from_secs(10), || up
            .effects_for("evt_delivered_0123456789")
            == 1)
        .await
    );
    let admin_url = format!("http://127.0.0.1:{admin}");
    let mut shown = (false, String::new(), String::new());
    for _ in 0..50 {
        shown = run(&[
            "events",
            "show",
            "--route",
            "qr",
            "--event-id",
            "evt_delivered_01",
            "--admin",
            &admin_url,
        ]);
        if shown.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ok, out, err) = shown;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("evt_delivered_0123456789") && out.contains("delivered"),
        "{out}"
    );
    drop(gw);
}

// Issue 41, "Access": the command line picks a named token from the config file
// (`--token-name`); its role decides, and the audit records the command under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_acts_under_a_named_token() {
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &three_routes(
            "[[server.admin_tokens]]\nname = \"grafana\"\ntoken = \"cli-read-t0ken\"\nrole = \"read\"\n[[server.admin_tokens]]\nname = \"oncall\"\ntoken = \"cli-operate-t0ken\"\nrole = \"operate\"\n[store]\nbackend = \"memory\"\n",
        )
        .replace("${HOOKGATE_TEST_UNSET_SHOPIFY}", "shpss_x"),
    );
    let gw = TestGateway::start_file(&cfg).await;
    let admin = gw.admin_url("");
    let forget = |name: &str| {
        run(&[
            "forget",
            "--route",
            "stripe",
            "--event-id",
            "evt_cli",
            "--admin",
            &admin,
            "--config",
            path_str(&cfg),
            "--token-name",
            name,
        ])
    };
    let (ok, out, err) = forget("oncall");
    assert!(ok, "{out}{err}");
    let (ok, _, err) = forget("grafana");
    assert!(!ok);
    assert!(
        err.contains("operate") && !err.contains("cli-read-t0ken"),
        "{err}"
    );
    let (ok, _, err) = forget("nobody");
    assert!(!ok);
    assert!(
        err.contains("no [[server.admin_tokens]] named \"nobody\""),
        "{err}"
    );
    let audit = || async {
        client()
            .get(gw.admin_url("/audit"))
            .bearer_auth("cli-read-t0ken")
            .send()
            .await
            .expect("audit")
            .text()
            .await
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .unwrap_or_default()
    };
    let mut records = serde_json::Value::Null;
    for _ in 0..200 {
        records = audit().await;
        if records["audit"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(records["audit"][0]["name"], "oncall", "{records}");
    assert_eq!(records["audit"][0]["action"], "forget", "{records}");
    assert_eq!(
        records["audit"].as_array().map(Vec::len),
        Some(1),
        "{records}"
    );
    gw.stop().await;
}

/// `--help` of `check` and `forget` describes every flag: no option line without its
/// text.
#[test]
fn check_and_forget_describe_every_flag() {
    for command in ["check", "forget"] {
        let out = std::process::Command::new(crate::process::binary::BIN)
            .args([command, "--help"])
            .output()
            .expect("help");
        let text = String::from_utf8_lossy(&out.stdout);
        let options: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "Options:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(options.len() >= 2, "{text}");
        for line in options {
            let flag = line.trim_start();
            // `--flag <VALUE>`, then two spaces or more, then what it does.
            let described = flag
                .split_once("  ")
                .is_some_and(|(_, what)| what.trim().len() > 8);
            assert!(
                described,
                "`{command} --help`: {line:?} says nothing:\n{text}"
            );
        }
    }
}
