//! Capture, sign and replay: the fixtures through a gateway on Redis, a capture
//! replayed with `--resign`, `--expect` failing the command, and a capture directory
//! that cannot be written.

use std::process::Command;
use std::time::Duration;

use hookgate::replay::Replay;
use hookgate::time::Clock;

use crate::support::{RedisServer, TestGateway, Upstream, store_toml};

const BIN: &str = env!("CARGO_BIN_EXE_hookgate");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
/// The fixtures' signing time plus five seconds.
const FIXTURE_NOW: u64 = 1_767_225_600;

fn fixture_routes(upstream: &Upstream, secrets: Option<&str>) -> String {
    let routes = [
        (
            "stripe",
            "/webhooks/stripe",
            "stripe",
            "whsec_fixture_stripe",
        ),
        (
            "github",
            "/webhooks/github",
            "github",
            "fixture-github-secret",
        ),
        (
            "shopify",
            "/webhooks/shopify",
            "shopify",
            "fixture-shopify-secret",
        ),
        ("slack", "/webhooks/slack", "slack", "fixture-slack-secret"),
        (
            "billing",
            "/webhooks/billing",
            "standard_webhooks",
            "whsec_Zml4dHVyZS1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQ=",
        ),
    ];
    routes
        .iter()
        .map(|(name, path, provider, secret)| {
            format!(
                "[[routes]]\nname = \"{name}\"\npath = \"{path}\"\nprovider = \"{provider}\"\nsecrets = [\"{}\"]\nupstream = \"{}\"\n",
                secrets.unwrap_or(secret),
                upstream.url(&format!("/{name}"))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn replay_cmd(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("replay")
        .args(args)
        .output()
        .expect("run replay");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_replayed_on_redis_first_copy_forwarded_rest_duplicates() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let cfg = format!(
        "{}\n{}",
        store_toml(Some(&redis), "dedup_ttl = \"3d\""),
        fixture_routes(&up, None)
    );
    let gw = TestGateway::start_with_clock(&cfg, Clock::Fixed(FIXTURE_NOW)).await;
    let base = gw.base_url();
    let (code, out) = tokio::task::spawn_blocking(move || {
        replay_cmd(&[
            FIXTURES,
            "--target",
            &base,
            "--copies",
            "3",
            "--concurrency",
            "1",
            "--expect",
            "forwarded",
        ])
    })
    .await
    .expect("replay");
    assert_eq!(code, 0, "{out}");
    let files = hookgate::replay::collect(&[FIXTURES.into()]).expect("fixtures");
    let fixtures = files;
    assert!(fixtures.len() >= 15, "{} fixtures", fixtures.len());
    assert_eq!(
        up.count(),
        fixtures.len(),
        "each fixture reached the upstream exactly once"
    );
    // Every outcome names where it was sent.
    let base = gw.base_url();
    assert!(
        out.contains(&format!(
            "copy 1: POST {base}/webhooks/stripe → 200 forwarded to the upstream"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "copy 2: POST {base}/webhooks/stripe → 200 duplicate: acknowledged, not forwarded"
        )),
        "{out}"
    );
    let summary = out.lines().last().unwrap_or_default();
    assert_eq!(
        summary,
        format!(
            "{} files, {} requests: {} forwarded, {} duplicate; 0 unexpected",
            fixtures.len(),
            fixtures.len() * 3,
            fixtures.len(),
            fixtures.len() * 2
        )
    );

    // Told the wrong outcome, the command fails; told the right one, it passes.
    let base = gw.base_url();
    let stripe = format!("{FIXTURES}/stripe");
    let (code, out) = tokio::task::spawn_blocking(move || {
        replay_cmd(&[&stripe, "--target", &base, "--expect", "forwarded"])
    })
    .await
    .expect("replay");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("UNEXPECTED: expected forwarded, got duplicate"),
        "{out}"
    );
    let base = gw.base_url();
    let stripe = format!("{FIXTURES}/stripe");
    let (code, out) = tokio::task::spawn_blocking(move || {
        replay_cmd(&[
            &stripe,
            "--target",
            &base,
            "--expect",
            "duplicate",
            "--json",
        ])
    })
    .await
    .expect("replay");
    assert_eq!(code, 0, "{out}");
    let last: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("json summary");
    assert_eq!(last["unexpected"], 0);
    assert_eq!(last["summary"]["duplicate"], 3);
    let first: serde_json::Value =
        serde_json::from_str(out.lines().next().unwrap_or_default()).expect("json line");
    assert_eq!(first["verdict"], "duplicate");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_replayed_with_resign_reaches_the_upstream_as_it_first_did() {
    let dir = tempfile::tempdir().expect("dir");
    let captures = dir.path().join("captures");
    let first_up = Upstream::start().await;
    let cfg = format!(
        "[capture]\ndir = \"{}\"\nmax_files = 100\n{}",
        captures.display(),
        fixture_routes(&first_up, None)
    );
    let first = TestGateway::start(&cfg).await;
    // Live deliveries, signed now with the production secrets.
    let stripe =
        r#"{"id":"evt_capture_1","type":"charge.refunded","data":{"object":{"amount":500}}}"#;
    let github = r#"{"action":"closed","number":9}"#;
    assert_eq!(
        first.deliver("stripe", stripe, "x").await.outcome(),
        "forwarded"
    );
    assert_eq!(
        first
            .deliver("github", github, "gh-capture-1")
            .await
            .outcome(),
        "forwarded"
    );
    assert!(
        crate::support::eventually(Duration::from_secs(5), || std::fs::read_dir(&captures)
            .map(|d| d.count())
            .unwrap_or(0)
            == 2)
        .await
    );
    first.stop().await;
    let files = hookgate::replay::collect(std::slice::from_ref(&captures)).expect("captures");
    assert_eq!(files.len(), 2, "no temporary or partial files");
    let captured = Replay::load(&files[0]).expect("load");
    assert_eq!(captured.outcome.as_deref(), Some("forwarded"));
    assert_eq!(captured.status, Some(200));
    assert!(captured.received_at > 0);
    // Each capture names the event's type, where its preset puts it (this synthetic
    // GitHub delivery has no X-GitHub-Event header, so it has none).
    let mut types: Vec<Option<String>> = files
        .iter()
        .map(|f| Replay::load(f).expect("load").event_type)
        .collect();
    types.sort();
    assert_eq!(types, [None, Some("charge.refunded".into())]);

    // A second gateway with a test secret: replay the captures re-signed for it.
    let second_up = Upstream::start().await;
    let second = TestGateway::start(&fixture_routes(
        &second_up,
        Some("dGVzdC1zZWNyZXQtZm9yLWNp"),
    ))
    .await;
    let base = second.base_url();
    let capture_dir = captures.display().to_string();
    let (code, out) = tokio::task::spawn_blocking(move || {
        replay_cmd(&[
            &capture_dir,
            "--target",
            &base,
            "--resign",
            "dGVzdC1zZWNyZXQtZm9yLWNp",
            "--expect",
            "forwarded",
        ])
    })
    .await
    .expect("replay");
    assert_eq!(code, 0, "{out}");
    let (a, b) = (first_up.received(), second_up.received());
    assert_eq!(b.len(), 2);
    for original in &a {
        let id = original.header("idempotency-key").expect("id");
        let again = b
            .iter()
            .find(|r| r.header("idempotency-key") == Some(id))
            .expect("replayed");
        assert_eq!(again.body, original.body, "body byte-identical");
        assert_eq!(again.uri, original.uri);
        // Every header but the re-signed signature and per-hop ones is identical.
        let skip = [
            "stripe-signature",
            "x-hub-signature-256",
            "traceparent",
            "x-forwarded-for",
            "user-agent",
            "accept",
            "host",
        ];
        for (name, value) in &original.headers {
            if skip.contains(&name.as_str()) {
                continue;
            }
            assert_eq!(again.headers.get(name), Some(value), "header {name}");
        }
        let signed = ["stripe-signature", "x-hub-signature-256"];
        assert!(
            signed.iter().any(|h| again.headers.contains_key(*h)),
            "the replay carries a fresh signature"
        );
    }
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_capture_directory_does_not_break_serving() {
    let dir = tempfile::tempdir().expect("dir");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").expect("write");
    let up = Upstream::start().await;
    let cfg = format!(
        "[capture]\ndir = \"{}/captures\"\n{}",
        blocker.display(),
        fixture_routes(&up, None)
    );
    let gw = TestGateway::start(&cfg).await;
    for i in 0..5 {
        let body = format!(r#"{{"id":"evt_nocap_{i}"}}"#);
        assert_eq!(
            gw.deliver("stripe", &body, "x").await.outcome(),
            "forwarded"
        );
    }
    assert_eq!(up.count(), 5);
    let mut failed = 0.0;
    for _ in 0..50 {
        failed = gw
            .metric("hookgate_captures_total{result=\"failed\"}")
            .await;
        if failed == 5.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(failed, 5.0, "every failed capture is counted");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_are_bounded_by_max_files() {
    let dir = tempfile::tempdir().expect("dir");
    let up = Upstream::start().await;
    let cfg = format!(
        "[capture]\ndir = \"{}\"\nmax_files = 3\n{}",
        dir.path().display(),
        fixture_routes(&up, None)
    );
    let gw = TestGateway::start(&cfg).await;
    for i in 0..7 {
        let _ = gw
            .deliver("stripe", &format!(r#"{{"id":"evt_bound_{i}"}}"#), "x")
            .await;
    }
    let mut written = 0.0;
    for _ in 0..50 {
        written = gw
            .metric("hookgate_captures_total{result=\"written\"}")
            .await;
        if written == 7.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(written, 7.0);
    let left = hookgate::replay::collect(&[dir.path().to_path_buf()]).expect("files");
    assert_eq!(left.len(), 3, "the oldest captures were removed");
    let newest = Replay::load(left.last().expect("file")).expect("load");
    assert!(newest.body.unwrap_or_default().contains("evt_bound_6"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_never_hold_credential_headers() {
    let dir = tempfile::tempdir().expect("dir");
    let up = Upstream::start().await;
    let cfg = format!(
        "[capture]\ndir = \"{}\"\n[[routes]]\nname = \"gitlab\"\npath = \"/gitlab\"\nprovider = \"gitlab\"\nsecrets = [\"glpat-capture-secret\"]\nupstream = \"{}\"\n",
        dir.path().display(),
        up.url("/gl")
    );
    let gw = TestGateway::start(&cfg).await;
    let headers = vec![
        (
            "x-gitlab-token".to_string(),
            "glpat-capture-secret".to_string(),
        ),
        ("idempotency-key".to_string(), "gl-1".to_string()),
        (
            "authorization".to_string(),
            "Basic dXNlcjpwYXNz".to_string(),
        ),
    ];
    let r = crate::support::post(
        &gw.url("/gitlab"),
        &headers,
        br#"{"object_kind":"push"}"#.to_vec(),
    )
    .await;
    assert_eq!(r.outcome(), "forwarded");
    let mut files = Vec::new();
    for _ in 0..50 {
        files = hookgate::replay::collect(&[dir.path().to_path_buf()]).expect("files");
        if !files.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(&files[0]).expect("capture");
    assert!(
        !text.contains("glpat-capture-secret") && !text.contains("dXNlcjpwYXNz"),
        "{text}"
    );
    assert!(text.contains("[redacted]"));
    gw.stop().await;
}

/// The flow a newcomer tries first: sign a body file for a provider, then replay the
/// file at the route's URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_a_body_file_then_replay_it_at_a_route_url() {
    let dir = tempfile::tempdir().expect("dir");
    let body = r#"{"action":"opened","number":1}"#;
    std::fs::write(dir.path().join("body.json"), body).expect("body");
    let up = Upstream::start().await;
    let cfg = format!(
        "{}\n[[routes]]\nname = \"github\"\npath = \"/webhooks/github\"\nprovider = \"github\"\nsecrets = [\"s\"]\nupstream = \"{}\"\n",
        store_toml(None, ""),
        up.url("/github")
    );
    let gw = TestGateway::start(&cfg).await;

    // `body.json` names a file: its content is signed, not the file's name.
    for (arg, id) in [("body.json", "e1"), ("@body.json", "e2")] {
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .args([
                "sign",
                "--provider",
                "github",
                "--secret",
                "s",
                "--event-id",
                id,
                arg,
            ])
            .output()
            .expect("run sign");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.path().join(format!("{id}.json")), &out.stdout).expect("write");
        let r = Replay::load(&dir.path().join(format!("{id}.json"))).expect("replay file");
        assert_eq!(r.body_bytes(), body.as_bytes(), "{arg}");
        assert_eq!(
            r.path, "",
            "signed without a route, the file has no path of its own"
        );
    }

    let route_url = gw.url("/webhooks/github");
    let file = dir.path().join("e1.json").display().to_string();
    let (code, out) = {
        let (file, url) = (file.clone(), route_url.clone());
        tokio::task::spawn_blocking(move || replay_cmd(&[&file, "--target", &url]))
            .await
            .expect("replay")
    };
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "copy 1: POST {route_url} → 200 forwarded to the upstream"
        )),
        "{out}"
    );
    assert_eq!(up.count(), 1);
    assert_eq!(up.received()[0].body.as_ref(), body.as_bytes());

    // Every spelling of the gateway's outcome name is accepted; the summary prints
    // the gateway's own.
    for spelling in ["in_flight", "in-flight", "inflight"] {
        let (file, url) = (file.clone(), route_url.clone());
        let (code, out) = tokio::task::spawn_blocking(move || {
            replay_cmd(&[&file, "--target", &url, "--expect", spelling])
        })
        .await
        .expect("replay");
        assert_eq!(code, 1, "a duplicate is not in_flight: {out}");
        assert!(
            out.contains("UNEXPECTED: expected in_flight, got duplicate"),
            "{out}"
        );
    }

    // The gateway's base URL cannot say which route a path-less file is for.
    let (code, out) = {
        let (file, base) = (file.clone(), gw.base_url());
        tokio::task::spawn_blocking(move || replay_cmd(&[&file, "--target", &base]))
            .await
            .expect("replay")
    };
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("this file records no path; give --target the route's URL"),
        "{out}"
    );

    // A 404 is a mistake in --target: an error exit, unless rejections are expected.
    let wrong = gw.url("/webhooks/nope");
    for (expect, want) in [(None, 1), (Some("rejected"), 0)] {
        let (file, url) = (file.clone(), wrong.clone());
        let (code, out) = tokio::task::spawn_blocking(move || {
            let mut args = vec![file.as_str(), "--target", url.as_str()];
            if let Some(e) = expect {
                args.extend(["--expect", e]);
            }
            replay_cmd(&args)
        })
        .await
        .expect("replay");
        assert_eq!(code, want, "{out}");
        assert!(out.contains(&format!("POST {wrong} → 404")), "{out}");
    }
    assert_eq!(
        up.count(),
        1,
        "nothing but the first delivery reached the upstream"
    );
    gw.stop().await;
}

/// docs/testing.md's CI recipe on real captures: a folder that mixes providers (one
/// secret each, `--resign ROUTE=SECRET` or `--config`) and holds the providers' own
/// copies of an event: `--expect first` passes (each event's first file forwarded,
/// its copies duplicates) where `--expect forwarded` fails on the copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_mixing_providers_and_copies_pass_the_ci_recipe() {
    let dir = tempfile::tempdir().expect("dir");
    let captures = dir.path().join("captures");
    let first_up = Upstream::start().await;
    let cfg = format!(
        "[capture]\ndir = \"{}\"\nmax_files = 100\n{}",
        captures.display(),
        fixture_routes(&first_up, None)
    );
    let live = TestGateway::start(&cfg).await;
    let stripe = r#"{"id":"evt_ci_1","type":"invoice.paid","data":{"object":{"amount":700}}}"#;
    let github = r#"{"action":"opened","number":12}"#;
    // Each provider delivers, then delivers the same event again (its retry).
    for want in ["forwarded", "duplicate"] {
        assert_eq!(live.deliver("stripe", stripe, "x").await.outcome(), want);
        assert_eq!(
            live.deliver("github", github, "gh-ci-1").await.outcome(),
            want
        );
    }
    assert!(
        crate::support::eventually(Duration::from_secs(5), || std::fs::read_dir(&captures)
            .map(|d| d.count())
            .unwrap_or(0)
            == 4)
        .await,
        "the copies are captured too"
    );
    live.stop().await;

    // CI: a gateway with a test secret per route (as a test config would have).
    let test_secrets = [
        ("stripe", "whsec_ci_stripe"),
        ("github", "ci-github-secret"),
    ];
    let up = Upstream::start().await;
    let routes: String = test_secrets
        .iter()
        .map(|(name, secret)| {
            format!(
                "[[routes]]\nname = \"{name}\"\npath = \"/webhooks/{name}\"\nprovider = \"{name}\"\nsecrets = [\"{secret}\"]\nupstream = \"{}\"\n",
                up.url(&format!("/{name}"))
            )
        })
        .collect();
    let config_path = dir.path().join("ci.toml");
    std::fs::write(&config_path, &routes).expect("config");
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            replay_cmd(&args)
        })
    };
    let folder = captures.display().to_string();
    let resign: Vec<String> = test_secrets
        .iter()
        .flat_map(|(r, s)| ["--resign".to_owned(), format!("{r}={s}")])
        .collect();

    // `--expect forwarded` on the providers' copies: exit 1, naming them.
    let gw = TestGateway::start(&routes).await;
    let mut args = vec![folder.clone(), "--target".into(), gw.base_url()];
    args.extend(resign.clone());
    args.extend(["--expect".into(), "forwarded".into()]);
    let (code, out) = run(args).await.expect("replay");
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("UNEXPECTED").count(), 2, "{out}");
    gw.stop().await;

    // The recipe: `--resign ROUTE=SECRET` for each provider and `--expect first`.
    let gw = TestGateway::start(&routes).await;
    let mut args = vec![folder.clone(), "--target".into(), gw.base_url()];
    args.extend(resign);
    args.extend(["--expect".into(), "first".into()]);
    let (code, out) = run(args).await.expect("replay");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("4 files, 4 requests: 2 forwarded, 2 duplicate; 0 unexpected"),
        "{out}"
    );
    gw.stop().await;

    // The same with `--config`: each file re-signed as its route in the test config.
    let gw = TestGateway::start(&routes).await;
    let args = vec![
        folder.clone(),
        "--target".into(),
        gw.base_url(),
        "--config".into(),
        config_path.display().to_string(),
        "--expect".into(),
        "first".into(),
    ];
    let (code, out) = run(args).await.expect("replay");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("2 forwarded, 2 duplicate; 0 unexpected"),
        "{out}"
    );
    gw.stop().await;
    // Each event reached the handler once per run (three gateways, each its own
    // store), never its copies.
    assert_eq!(up.effects_for("evt_ci_1"), 3);
    // GitHub's own ID is not signed: the gateway keys its deliveries on the body.
    let github_effects = up.received().iter().filter(|r| r.uri == "/github").count();
    assert_eq!(github_effects, 3);
}
