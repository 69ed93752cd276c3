//! The real `hookgate` binary: `check`, `sign`, a crash mid-forward, and shutdown.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{RedisServer, Upstream, post, stripe_body};

const BIN: &str = env!("CARGO_BIN_EXE_hookgate");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
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

    // A syntax error names the line too.
    let path = write_config(&dir, "[server]\nlisten = \"127.0.0.1:1\"\nbogus_key = 1\n");
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
    assert!(err.contains("bogus_key"), "{err}");

    // serve refuses a broken config the same way, without starting.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(1));
}

struct Gateway {
    child: Child,
    port: u16,
}

impl Gateway {
    fn spawn(config: &std::path::Path, port: u16) -> Self {
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hookgate");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "gateway did not start listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signed(config: &std::path::Path, body: &str) -> Vec<(String, String)> {
    let out = Command::new(BIN)
        .args(["sign", "--route", "stripe", "--config"])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_slow_forward_finish_and_exits_0() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(800));
    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"5s\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
            up.url("/up")
        ),
    );
    let body = stripe_body("evt_term");
    let headers = signed(&cfg, &body);
    let mut gw = Gateway::spawn(&cfg, port);
    let url = gw.url("/s");
    let pending = tokio::spawn(async move { post(&url, &headers, body.into_bytes()).await });
    assert!(crate::support::eventually(Duration::from_secs(5), || up.count() == 1).await);
    let pid = gw.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let r = pending.await.expect("request");
    assert_eq!(
        (r.status, r.outcome()),
        (200, "forwarded"),
        "the in-flight delivery completes"
    );
    let status = tokio::task::spawn_blocking(move || {
        let s = gw.child.wait();
        (s, gw)
    })
    .await
    .expect("wait");
    assert_eq!(status.0.expect("exit").code(), Some(0));
}
