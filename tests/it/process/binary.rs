//! The real `hookgate` binary: `check`, `sign`, a crash mid-forward, and shutdown.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::free_port;
use crate::support::{RedisServer, Upstream, client, post, stripe_body};

pub const BIN: &str = env!("CARGO_BIN_EXE_hookgate");

pub fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("hookgate.toml");
    let mut f = std::fs::File::create(&path).expect("create config");
    f.write_all(text.as_bytes()).expect("write config");
    path
}

#[test]
fn check_accepts_the_shipped_config_and_lists_its_routes() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml");
    let out = Command::new(BIN)
        .args(["check", "--config", shipped])
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for route in [
        "route stripe",
        "route github",
        "route shopify",
        "route slack",
        "route billing",
        "route acme",
    ] {
        assert!(stdout.contains(route), "{route} missing from:\n{stdout}");
    }
    assert!(
        !stdout.contains("whsec_demo"),
        "check must not print secrets"
    );
    // Durations as a config writes them (72h, not 3days); each route's methods.
    assert!(
        stdout.contains("dedup_ttl 72h  inflight_ttl 30s"),
        "{stdout}"
    );
    assert!(stdout.contains("tolerance  5m"), "{stdout}");
    assert!(
        stdout.contains("path       /webhooks/stripe (POST)"),
        "{stdout}"
    );
}

#[test]
fn check_reports_every_error_with_file_and_line_and_exits_1() {
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(
        &dir,
        r#"[store]
dedup_ttl = "1m"

[[routes]]
name = "a"
path = "/a"
provider = "stripe"
secrets = ["${HOOKGATE_TEST_UNSET_VARIABLE}"]
upstream = "http://127.0.0.1:9/"

[[routes]]
name = "b"
path = "/b"
provider = "nosuch"
secrets = ["x"]
upstream = "ftp://nowhere"
upstream_timeout = "soon"
"#,
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env_remove("HOOKGATE_TEST_UNSET_VARIABLE")
        .output()
        .expect("run check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let file = path.display().to_string();
    for want in [
        format!("{file}:8: routes[0].secrets[0]: ${{HOOKGATE_TEST_UNSET_VARIABLE}} is not set"),
        format!(
            "{file}:2: store.dedup_ttl: 1m is shorter than twice the tolerance of route \"a\" (300s"
        ),
        format!("{file}:14: routes[1].provider: unknown provider \"nosuch\""),
        format!("{file}:16: routes[1].upstream:"),
        format!("{file}:17: routes[1].upstream_timeout: \"soon\" is not a duration"),
    ] {
        assert!(err.contains(&want), "expected {want:?} in:\n{err}");
    }

    // An unknown key is one more error with its line, not a stop.
    let path = write_config(
        &dir,
        "[server]\nlisten = \"127.0.0.1:1\"\nbogus_key = 1\nmax_body = \"lots\"\n",
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    let file = path.display().to_string();
    assert!(
        err.contains(&format!(
            "{file}:3: server.bogus_key: unknown key\n{file}:4: server.max_body:"
        )),
        "{err}"
    );

    // A syntax error names the line too.
    let path = write_config(&dir, "[server]\nlisten = \"127.0.0.1:1\"\nbogus_key = \n");
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!("{}: TOML parse error at line 3", path.display())),
        "{err}"
    );

    // serve refuses a broken config the same way, without starting.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(1));
}

/// Waits up to 10 s for a process of this test to listen on `port`.
fn wait_listening(port: u16, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the {what} did not start listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub struct Gateway {
    pub child: Child,
    port: u16,
}

impl Gateway {
    pub fn spawn(config: &std::path::Path, port: u16) -> Self {
        Self::spawn_logging(config, port, "warn", None)
    }

    /// Starts the binary; with `log`, its stderr goes to that file.
    pub fn spawn_logging(
        config: &std::path::Path,
        port: u16,
        level: &str,
        log: Option<&std::path::Path>,
    ) -> Self {
        let stderr = match log {
            Some(p) => Stdio::from(std::fs::File::create(p).expect("log file")),
            None => Stdio::null(),
        };
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", level)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn hookgate");
        wait_listening(port, "gateway");
        Self { child, port }
    }

    /// A gateway process started by the caller, once it listens on `port`.
    pub fn adopt(child: Child, port: u16) -> Self {
        wait_listening(port, "gateway");
        Self { child, port }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signed(config: &std::path::Path, body: &str) -> Vec<(String, String)> {
    signed_at(config, body, None)
}

/// `hookgate sign --headers` for the stripe route, at `timestamp` (Unix seconds) or
/// now.
pub fn signed_at(
    config: &std::path::Path,
    body: &str,
    timestamp: Option<u64>,
) -> Vec<(String, String)> {
    let mut cmd = Command::new(BIN);
    cmd.args(["sign", "--headers", "--route", "stripe"]);
    if let Some(t) = timestamp {
        cmd.arg("--timestamp").arg(t.to_string());
    }
    let out = cmd
        .arg("--config")
        .arg(config)
        .arg(body)
        .output()
        .expect("run sign");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_mid_forward_lets_the_retry_through_after_the_lease() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    up.set_delay(Duration::from_secs(5));
    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\ninflight_ttl = \"2s\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\nupstream_timeout = \"1500ms\"\n",
            redis.url(),
            up.url("/up")
        ),
    );
    let body = stripe_body("evt_crash");
    let headers = signed(&cfg, &body);

    let mut first = Gateway::spawn(&cfg, port);
    let url = first.url("/s");
    let (h, b) = (headers.clone(), body.clone());
    let pending = tokio::spawn(async move { post(&url, &h, b.into_bytes()).await });
    assert!(crate::support::eventually(Duration::from_secs(5), || up.count() == 1).await);
    // SIGKILL while the forward is in progress: no settle step runs.
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    let _ = pending.await;
    up.set_delay(Duration::ZERO);

    let second = Gateway::spawn(&cfg, port);
    let r = post(&second.url("/s"), &headers, body.clone().into_bytes()).await;
    assert_eq!(
        r.status, 409,
        "the dead gateway's claim is still leased: {}",
        r.body
    );
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let r = post(&second.url("/s"), &headers, body.clone().into_bytes()).await;
    assert_eq!(
        (r.status, r.outcome()),
        (200, "forwarded"),
        "after inflight_ttl the retry goes through"
    );
    let r = post(&second.url("/s"), &headers, body.into_bytes()).await;
    assert_eq!(r.outcome(), "duplicate");
    assert_eq!(
        up.count_for("evt_crash"),
        2,
        "one lost attempt, one retry; both carry the same Idempotency-Key"
    );
}

/// A gateway config with one Stripe sync route on a disk store in `state/` beside the
/// config.
pub fn disk_sync(port: u16, up: &Upstream) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\nbackend = \"disk\"\npath = \"state/hookgate.db\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
        up.url("/up")
    )
}

/// On the disk store, one gateway with no Redis keeps its dedup window across a
/// `kill -9`: what it acknowledged before is a duplicate after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_store_keeps_the_dedup_window_across_a_kill_9() {
    let up = Upstream::start().await;
    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(&dir, &disk_sync(port, &up));
    let bodies: Vec<String> = (0..20)
        .map(|i| stripe_body(&format!("evt_disk_{i}")))
        .collect();
    let mut first = Gateway::spawn(&cfg, port);
    for body in &bodies {
        let r = post(
            &first.url("/s"),
            &signed(&cfg, body),
            body.clone().into_bytes(),
        )
        .await;
        assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    }
    let _ = first.child.kill();
    let _ = first.child.wait();
    drop(first);
    assert!(
        dir.path().join("state/hookgate.db").exists(),
        "relative to the config file"
    );

    let second = Gateway::spawn(&cfg, port);
    for body in &bodies {
        let r = post(
            &second.url("/s"),
            &signed(&cfg, body),
            body.clone().into_bytes(),
        )
        .await;
        assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    }
    assert_eq!(
        up.count(),
        bodies.len(),
        "each event reached the upstream once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_slow_forwards_finish_exits_0_and_marks_only_2xx_done() {
    let redis = RedisServer::start();
    let ok = Upstream::start().await;
    let failing = Upstream::start().await;
    ok.set_delay(Duration::from_millis(800));
    failing.set_delay(Duration::from_millis(800));
    failing.set_status(500);
    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"5s\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n[[routes]]\nname = \"failing\"\npath = \"/f\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
            redis.url(),
            ok.url("/up"),
            failing.url("/up")
        ),
    );
    let (good, bad) = (stripe_body("evt_term_ok"), stripe_body("evt_term_500"));
    let (hg, hb) = (signed(&cfg, &good), signed(&cfg, &bad));
    let mut gw = Gateway::spawn(&cfg, port);
    let (u1, u2) = (gw.url("/s"), gw.url("/f"));
    let first = tokio::spawn(async move { post(&u1, &hg, good.into_bytes()).await });
    let second = tokio::spawn(async move { post(&u2, &hb, bad.into_bytes()).await });
    assert!(
        crate::support::eventually(Duration::from_secs(5), || ok.count() == 1
            && failing.count() == 1)
        .await
    );
    let pid = gw.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let r = first.await.expect("request");
    assert_eq!(
        (r.status, r.outcome()),
        (200, "forwarded"),
        "the in-flight delivery completes"
    );
    let r = second.await.expect("request");
    assert_eq!(r.status, 500);
    let status = tokio::task::spawn_blocking(move || {
        let s = gw.child.wait();
        (s, gw)
    })
    .await
    .expect("wait");
    assert_eq!(status.0.expect("exit").code(), Some(0));
    let done: Option<String> = redis.cmd(redis::cmd("GET").arg("hookgate:stripe:evt_term_ok"));
    assert!(
        done.is_some_and(|v| v.starts_with("d|")),
        "the 2xx delivery is recorded done"
    );
    let failed: Option<String> = redis.cmd(redis::cmd("GET").arg("hookgate:failing:evt_term_500"));
    assert_eq!(
        failed, None,
        "a delivery whose upstream answered 500 is never left done (nor claimed)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_forget_frees_a_key_and_no_secret_reaches_the_log() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let secrets = ["whsec_log_probe_4f1e2d3c", "gh-log-probe-9a8b7c"];
    let base = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"{}\"]\nupstream = \"{}\"\n",
        secrets[0],
        up.url("/up")
    );
    let cfg = write_config(&dir, &base);
    let log = dir.path().join("hookgate.log");
    let mut gw = Gateway::spawn_logging(&cfg, port, "debug", Some(&log));
    let body = stripe_body("evt_hup");
    let headers = signed(&cfg, &body);
    let signature = headers
        .iter()
        .find(|(n, _)| n == "stripe-signature")
        .map(|(_, v)| v.clone())
        .expect("sig");
    assert_eq!(
        post(&gw.url("/s"), &headers, body.clone().into_bytes())
            .await
            .outcome(),
        "forwarded"
    );
    assert_eq!(
        post(&gw.url("/s"), &headers, b"tampered".to_vec())
            .await
            .status,
        401
    );

    // A new route appears on SIGHUP, without a restart.
    let with_gh = format!(
        "{base}[[routes]]\nname = \"gh\"\npath = \"/g\"\nprovider = \"github\"\nsecrets = [\"{}\"]\nupstream = \"{}\"\n",
        secrets[1],
        up.url("/gh")
    );
    std::fs::write(&cfg, &with_gh).expect("write");
    let pid = gw.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let gh_body = r#"{"zen":"hup"}"#;
    let out = Command::new(BIN)
        .args([
            "sign",
            "--headers",
            "--route",
            "gh",
            "--event-id",
            "gh-1",
            "--config",
        ])
        .arg(&cfg)
        .arg(gh_body)
        .output()
        .expect("sign");
    let gh_headers: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    let mut served = false;
    for _ in 0..50 {
        let r = post(&gw.url("/g"), &gh_headers, gh_body.as_bytes().to_vec()).await;
        if r.outcome() == "forwarded" {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "the route added by SIGHUP is served");

    // A broken file on SIGHUP: the old config keeps serving.
    std::fs::write(&cfg, "[[routes]]\nname = 1\n").expect("write");
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill")
            .success()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        post(&gw.url("/g"), &gh_headers, gh_body.as_bytes().to_vec())
            .await
            .outcome(),
        "duplicate"
    );

    // hookgate forget frees the key through the admin listener.
    std::fs::write(&cfg, &with_gh).expect("write");
    let out = Command::new(BIN)
        .args([
            "forget",
            "--route",
            "stripe",
            "--event-id",
            "evt_hup",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .expect("forget");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("forgot evt_hup on route stripe: its next delivery is forwarded"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        post(&gw.url("/s"), &headers, body.into_bytes())
            .await
            .outcome(),
        "forwarded"
    );
    let probe = Command::new(BIN)
        .args(["probe", &format!("http://127.0.0.1:{admin}/healthz")])
        .status()
        .expect("probe");
    assert!(probe.success());

    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = gw.child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("config reloaded") && text.contains("reload refused"),
        "{text}"
    );
    for secret in secrets {
        assert!(!text.contains(secret), "a secret reached the log:\n{text}");
    }
    let sig_value = signature.split("v1=").nth(1).expect("v1");
    assert!(!text.contains(sig_value), "a signature reached the log");
    // The event type is logged on purpose; nothing else of the body is.
    assert!(
        text.contains("payment_intent.succeeded"),
        "the event type is in the delivery line"
    );
    assert!(
        !text.contains("amount"),
        "a body reached the log below trace"
    );
    // A log file gets plain text; the delivery lines say which secret matched, or none.
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log file:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("outcome=\"forwarded\"") && l.contains("secret=0")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("outcome=\"bad_signature\"") && l.contains("secret=none")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_handed_over_in_a_handshake_reach_the_admin_listener_not_the_log() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n[[routes]]\nname = \"notion\"\npath = \"/n\"\nprovider = \"notion\"\nsecrets = []\nupstream = \"{up}\"\n[[routes]]\nname = \"asana\"\npath = \"/a\"\nprovider = \"asana\"\nsecrets = []\nupstream = \"{up}\"\n",
            up = up.url("/up")
        ),
    );
    let log = dir.path().join("hookgate.log");
    let mut gw = Gateway::spawn_logging(&cfg, port, "debug", Some(&log));
    let (notion_token, asana_secret) = ("secret_notion_probe_51c7", "asana_probe_8d02e6");

    let r = post(
        &gw.url("/n"),
        &[("content-type".into(), "application/json".into())],
        format!(r#"{{"verification_token":"{notion_token}"}}"#).into_bytes(),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (200, "handshake"), "{}", r.body);
    let r = post(
        &gw.url("/a"),
        &[("x-hook-secret".into(), asana_secret.into())],
        Vec::new(),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (200, "handshake"), "{}", r.body);
    assert_eq!(r.header("x-hook-secret"), Some(asana_secret));
    assert_eq!(up.count(), 0, "a handshake is never forwarded");

    let admin_get = |route: &str| {
        let url = format!("http://127.0.0.1:{admin}/handshakes/{route}");
        async move {
            let r = client().get(url).send().await.expect("admin");
            let status = r.status().as_u16();
            let v: serde_json::Value =
                serde_json::from_str(&r.text().await.expect("text")).expect("json");
            (status, v)
        }
    };
    let (status, v) = admin_get("notion").await;
    assert_eq!((status, v["secret"].as_str()), (200, Some(notion_token)));
    let (status, v) = admin_get("asana").await;
    assert_eq!((status, v["secret"].as_str()), (200, Some(asana_secret)));
    let (status, _) = admin_get("stripe").await;
    assert_eq!(status, 404);

    // Until the secret is configured, deliveries are refused.
    let r = post(
        &gw.url("/n"),
        &[("x-notion-signature".into(), "sha256=00".into())],
        br#"{"id":"n1"}"#.to_vec(),
    )
    .await;
    assert_eq!(r.status, 401);

    // SIGTERM: the gateway writes out its buffered log lines as it exits.
    let pid = gw.child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = gw.child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("/handshakes/notion"),
        "the log says where: {text}"
    );
    for secret in [notion_token, asana_secret] {
        assert!(!text.contains(secret), "{secret} reached the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_guards_everything_but_the_probes() {
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let token = "adm_token_probe_7e3b19";
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nadmin_token = \"{token}\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
            up.url("/up")
        ),
    );
    let log = dir.path().join("hookgate.log");
    let mut gw = Gateway::spawn_logging(&cfg, port, "debug", Some(&log));
    let admin_url = format!("http://127.0.0.1:{admin}");
    let get = |path: &str, bearer: Option<&str>| {
        let mut req = client().get(format!("{admin_url}{path}"));
        if let Some(b) = bearer {
            req = req.header("authorization", format!("Bearer {b}"));
        }
        async move {
            let r = req.send().await.expect("admin");
            (
                r.status().as_u16(),
                r.headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().unwrap_or("").to_owned()),
            )
        }
    };
    assert_eq!(get("/healthz", None).await.0, 200, "probes need no token");
    assert_eq!(get("/readyz", None).await.0, 200, "probes need no token");
    assert_eq!(
        get("/metrics", None).await,
        (401, Some("Bearer".to_owned()))
    );
    assert_eq!(get("/metrics", Some("adm_token_probe_7e3b1")).await.0, 401);
    assert_eq!(get("/metrics", Some(token)).await.0, 200);
    assert_eq!(get("/handshakes/stripe", None).await.0, 401);

    let body = stripe_body("evt_admin_token");
    let headers = signed(&cfg, &body);
    for want in ["forwarded", "duplicate"] {
        let r = post(&gw.url("/s"), &headers, body.clone().into_bytes()).await;
        assert_eq!(r.outcome(), want);
    }
    // Without the token, forget is refused; with the config file, it finds the token.
    let forget = |extra: &[&str]| {
        Command::new(BIN)
            .args([
                "forget",
                "--route",
                "stripe",
                "--event-id",
                "evt_admin_token",
            ])
            .args(extra)
            .env_remove("HOOKGATE_ADMIN_TOKEN")
            .output()
            .expect("forget")
            .status
            .code()
    };
    assert_eq!(forget(&["--admin", &admin_url]), Some(1));
    let cfg_arg = cfg.to_string_lossy().into_owned();
    assert_eq!(forget(&["--config", &cfg_arg]), Some(0));
    let r = post(&gw.url("/s"), &headers, body.clone().into_bytes()).await;
    assert_eq!(r.outcome(), "forwarded", "redelivered after forget");
    assert_eq!(up.count_for("evt_admin_token"), 2);

    // SIGTERM: the gateway writes out its buffered log lines as it exits.
    let pid = gw.child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = gw.child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.contains(token), "the admin token reached the log");
}

/// The walk (docs/getting-started.md) in one build: `hookgate upstream` prints what the gateway forwards
/// and answers 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_upstream_prints_what_the_gateway_forwards() {
    let port = free_port();
    let mut upstream = Command::new(BIN)
        .args(["upstream", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn upstream");
    wait_listening(port, "upstream");
    let cfg = format!(
        "[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_walk\"]\nupstream = \"http://127.0.0.1:{port}/stripe\"\n"
    );
    let gw = crate::support::TestGateway::start(&cfg).await;
    let body = stripe_body("evt_walk_1");
    let r = gw.deliver("stripe", &body, "evt_walk_1").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{}", r.body);
    assert_eq!(r.body.trim(), r#"{"received":true}"#);
    gw.stop().await;
    let _ = upstream.kill();
    let out = upstream.wait_with_output().expect("upstream output");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(&format!("upstream listening on http://127.0.0.1:{port}")),
        "{printed}"
    );
    assert!(
        printed.contains("POST /stripe  idempotency-key=evt_walk_1  hookgate-route=stripe"),
        "{printed}"
    );
}

/// Starts `hookgate ARGS` as a shell's background job does: with SIGINT ignored.
fn spawn_as_background_job(args: &[&str]) -> Child {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("trap '' INT; exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn")
}

/// Sends SIGINT and waits (up to 20 s) for the process to end.
fn interrupt_and_wait(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The demo upstream answers a health check on its own port without printing it (so
/// compose can check it), `probe` says on stderr why a check failed, and SIGINT stops
/// the upstream even when it started as a background job (SIGINT ignored).
#[test]
fn the_demo_upstream_has_a_health_check_and_stops_on_sigint_in_the_background() {
    let port = free_port();
    let mut upstream = spawn_as_background_job(&["upstream", &port.to_string()]);
    wait_listening(port, "upstream");
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    let out = Command::new(BIN)
        .args(["probe", &healthz])
        .output()
        .expect("probe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A port nothing listens on: exit 1, and why.
    let closed = format!("http://127.0.0.1:{}/healthz", free_port());
    let out = Command::new(BIN)
        .args(["probe", &closed])
        .output()
        .expect("probe");
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&closed) && said.contains("cannot connect"),
        "{said}"
    );

    let status = interrupt_and_wait(&mut upstream, "hookgate upstream");
    assert!(status.success(), "{status}");
    let out = upstream.wait_with_output().expect("output");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("upstream listening on"), "{printed}");
    assert!(
        !printed.contains("/healthz"),
        "the health check is not printed: {printed}"
    );
}

/// `probe` on an endpoint that answers but not 2xx: exit 1, the status and the
/// answer on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_probe_says_the_status_it_got() {
    let up = Upstream::start().await;
    up.set_status(503);
    let url = up.url("/readyz");
    let out = tokio::process::Command::new(BIN)
        .args(["probe", &url])
        .output()
        .await
        .expect("probe");
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("503"), "{said}");
}

/// `deliveries tail` stops on SIGINT when it runs as a background job too, while it
/// follows the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_tail_stops_on_sigint_in_the_background() {
    use std::io::BufRead as _;
    let up = Upstream::start().await;
    let gw = crate::support::TestGateway::start(&crate::support::stripe_config(&up, "", "")).await;
    let admin = gw.admin_url("");
    let mut tail =
        spawn_as_background_job(&["deliveries", "tail", "--admin", admin.trim_end_matches('/')]);
    let stdout = tail.stdout.take().expect("stdout");
    let status = tokio::task::spawn_blocking(move || {
        // It follows once its header is out (printed when the stream opened).
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("read");
        assert!(!first.trim().is_empty(), "tail printed its header");
        interrupt_and_wait(&mut tail, "hookgate deliveries tail")
    })
    .await
    .expect("join");
    assert!(status.success(), "{status}");
    gw.stop().await;
}

/// `hookgate --version` names the release and the commit it was built from.
#[test]
fn version_names_the_release_and_the_commit() {
    let out = Command::new(BIN).arg("--version").output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!("hookgate {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&want), "{text}");
    let commit = text
        .trim()
        .strip_prefix(&want)
        .and_then(|c| c.strip_suffix(')'))
        .unwrap_or_default();
    // Built from a checkout here: git names the commit.
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git");
    assert_eq!(
        commit,
        String::from_utf8_lossy(&head.stdout).trim(),
        "{text}"
    );
}
