//! Clocks that step. The gateway's wall clock is stepped with libfaketime (the real
//! binary, `LD_PRELOAD`ed, its fake time read from a file on every call); the monotonic
//! clock is left alone, as a real step leaves it. Redis' own clock cannot be stepped
//! that way (redis-server does not start under libfaketime), so the state a step back
//! of Redis' clock leaves behind is written into a test Redis directly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hookgate::queue::RateLimit;
use hookgate::store::{Pacing as _, QueueRef, RedisStore};

use crate::process::binary::{BIN, signed, write_config};
use crate::support::{RedisServer, Upstream, eventually, free_port, post, stripe_body};

/// libfaketime, as Debian installs it (`tests/run` installs the package).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A wall clock a test can step: a process started with [`FakeClock::env`] reads its
/// offset from the file on every call.
pub struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// A clock at the real time, its control file in `dir`.
    pub fn new(dir: &Path) -> Self {
        let file = dir.join("faketime");
        std::fs::write(&file, "+0").expect("faketime file");
        assert!(
            Path::new(LIBFAKETIME).exists(),
            "libfaketime is not installed: run tests/run, which installs it"
        );
        Self { file }
    }

    /// The environment that puts a process on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), LIBFAKETIME.into()),
            (
                "FAKETIME_TIMESTAMP_FILE".into(),
                self.file.display().to_string(),
            ),
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// Steps the wall clock to `secs` from the real time (negative: back).
    pub fn step(&self, secs: i64) {
        std::fs::write(&self.file, format!("{secs:+}")).expect("faketime file");
    }
}

/// The real binary on a fake clock, killed on drop.
struct Faked(Child);

impl Faked {
    fn spawn(config: &Path, port: u16, clock: &FakeClock) -> Self {
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "warn")
            .envs(clock.env())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hookgate");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "gateway did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child)
    }
}

impl Drop for Faked {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A retry scheduled just before the gateway's wall clock steps back an hour still
/// comes when it was due: on Redis, due times are counted on the store's clock, never
/// on a gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_clock_stepping_back_does_not_hold_retries_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    up.set_status_for("evt_clock_1", Some(503));
    let dir = tempfile::tempdir().expect("dir");
    let clock = FakeClock::new(dir.path());
    let (port, admin) = (free_port(), free_port());
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{}\"\nshutdown_grace = \"1s\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\nupstream_timeout = \"1s\"\ndelivery = \"queue\"\nretry = {{ initial = \"2s\", max_delay = \"2s\" }}\n",
            admin,
            redis.url(),
            up.url("/up")
        ),
    );
    let gw = Faked::spawn(&cfg, port, &clock);
    let body = stripe_body("evt_clock_1");
    let r = post(
        &format!("http://127.0.0.1:{port}/s"),
        &signed(&cfg, &body),
        body.into_bytes(),
    )
    .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    assert!(
        eventually(Duration::from_secs(5), || up.count_for("evt_clock_1") == 1).await,
        "the first attempt failed"
    );
    // Its retry is recorded...
    let shown = format!("http://127.0.0.1:{admin}/events/stripe/evt_clock_1");
    let mut retrying = false;
    for _ in 0..50 {
        let r = crate::support::send("GET", &shown, &[], Vec::new()).await;
        if r.json()["state"] == "retrying" {
            retrying = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(retrying, "the failed attempt is recorded as a retry");
    // The retry is due in 2 s; the gateway's clock goes back an hour meanwhile.
    clock.step(-3600);
    up.set_status_for("evt_clock_1", None);
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_clock_1")
            == 1)
        .await,
        "the retry came when it was due, not an hour later"
    );
    drop(gw);
}

/// What a step back of Redis' clock by an hour leaves behind: rate-limit starts and the
/// queue clock's highest reading an hour ahead of `TIME`. The limit goes on counting
/// from there (one window later, deliveries start again) instead of holding every
/// delivery for an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_clock_stepping_back_does_not_hold_a_rate_limit() {
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2)).expect("store");
    let q = QueueRef::new("hg:", "stripe", "stripe");
    let limit = RateLimit::parse("2/s").expect("limit");
    for _ in 0..2 {
        assert!(store.rate_take(&q, &limit).await.expect("rate").is_ok());
    }
    assert!(store.rate_take(&q, &limit).await.expect("rate").is_err());
    // The clock was an hour ahead when those starts were logged, and steps back now.
    let hour = 3_600_000.0;
    let starts: Vec<(String, f64)> = redis.cmd(
        redis::cmd("ZRANGE")
            .arg("hg:#q:{stripe}:rate")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"),
    );
    assert_eq!(starts.len(), 2);
    for (member, at) in &starts {
        let _: i64 = redis.cmd(
            redis::cmd("ZADD")
                .arg("hg:#q:{stripe}:rate")
                .arg(at + hour)
                .arg(member),
        );
    }
    // Keys expire by Redis' wall clock too: the log would live an hour longer.
    let _: i64 = redis.cmd(
        redis::cmd("PEXPIRE")
            .arg("hg:#q:{stripe}:rate")
            .arg(3_700_000),
    );
    let (secs, micros): (f64, f64) = redis.cmd(&mut redis::cmd("TIME"));
    let hi: Option<f64> = redis.cmd(redis::cmd("HGET").arg("hg:#q:{stripe}:clock").arg("hi"));
    let hi = hi.unwrap_or(secs * 1000.0 + (micros / 1000.0).floor());
    let _: i64 = redis.cmd(
        redis::cmd("HSET")
            .arg("hg:#q:{stripe}:clock")
            .arg("hi")
            .arg(hi + hour),
    );
    assert!(
        store.rate_take(&q, &limit).await.expect("rate").is_err(),
        "the window of those starts is not over yet"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        store.rate_take(&q, &limit).await.expect("rate").is_ok(),
        "one window later, deliveries start again"
    );
}

/// Issue 34, 4: the disk store's claims in flight expired on the wall clock, so a
/// step of +120 s let a copy through while the first forward was still open (two
/// forwards). Leases held in the process run on the monotonic clock: a step forward
/// or back leaves a copy `in_flight`, and the event is forwarded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_never_lets_a_copy_through_an_open_forward_on_disk() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_secs(4));
    let dir = tempfile::tempdir().expect("dir");
    let clock = FakeClock::new(dir.path());
    let port = free_port();
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"1s\"\n[store]\nbackend = \"disk\"\npath = \"{}\"\ninflight_ttl = \"30s\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\nupstream_timeout = \"20s\"\n",
            dir.path().join("hookgate.db").display(),
            up.url("/up")
        ),
    );
    let gw = Faked::spawn(&cfg, port, &clock);
    let url = format!("http://127.0.0.1:{port}/s");
    for (i, step) in [120i64, -120].into_iter().enumerate() {
        clock.step(0);
        let id = format!("evt_clock_claim_{i}");
        let body = stripe_body(&id);
        let headers = signed(&cfg, &body);
        let first = tokio::spawn({
            let (url, headers, body) = (url.clone(), headers.clone(), body.clone());
            async move { post(&url, &headers, body.into_bytes()).await }
        });
        assert!(
            eventually(Duration::from_secs(10), || up.count_for(&id) == 1).await,
            "the first forward is open"
        );
        clock.step(step);
        // Signed again on the stepped clock (the signature's time must be in the
        // tolerance of the gateway's clock).
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .saturating_add_signed(step);
        let copy = post(
            &url,
            &crate::process::binary::signed_at(&cfg, &body, Some(at)),
            body.clone().into_bytes(),
        )
        .await;
        assert_eq!(
            copy.outcome(),
            "in_flight",
            "a copy {step:+} s later, during the forward: {}",
            copy.body
        );
        let first = first.await.expect("first");
        assert_eq!(first.outcome(), "forwarded", "{}", first.body);
        assert_eq!(up.count_for(&id), 1, "forwarded once ({step:+} s)");
    }
    drop(gw);
}
