//! The chaos suite's harness: the provider simulator (events sent several times,
//! retried with jittered backoff), the upstream simulator (every attempt recorded,
//! faults injected), gateways as real processes, and the tally of what was lost and
//! what was forwarded again.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rand::{Rng as _, SeedableRng as _};

use crate::support::{RedisServer, client};

pub const BIN: &str = env!("CARGO_BIN_EXE_hookgate");
pub const SECRET: &str = "whsec_chaos";

/// What the simulated upstream did with one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Did {
    /// Applied and answered 2xx at once.
    Ok,
    /// Answered 500 without applying.
    Failed,
    /// Applied, but answered only after the gateway's timeout.
    Stalled,
    /// Applied, then closed the connection without answering.
    Reset,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Faults {
    /// Share of first attempts answered 500.
    pub fail: f64,
    /// Share of first attempts that stall past the upstream timeout.
    pub stall: f64,
    /// Share of first attempts whose connection is reset after applying.
    pub reset: f64,
}

#[derive(Default)]
pub struct Record {
    /// Every attempt per Idempotency-Key: what the upstream did, and when it arrived.
    pub attempts: Mutex<HashMap<String, Vec<(Did, Instant)>>>,
    /// The upstream is down: every attempt is answered 500 without applying.
    pub down: std::sync::atomic::AtomicBool,
}

pub async fn upstream_sim(faults: Faults, record: Arc<Record>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let rng = Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(11)));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (record, rng) = (record.clone(), rng.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (record, rng) = (record.clone(), rng.clone());
                    async move {
                        // When the attempt reached the upstream: on a busy machine its
                        // body may be read after the gateway gave up on it and another
                        // copy was acknowledged, and it was still sent before that 2xx.
                        let arrived = Instant::now();
                        let key = req
                            .headers()
                            .get("idempotency-key")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let _ = req.into_body().collect().await;
                        let first = record
                            .attempts
                            .lock()
                            .expect("lock")
                            .get(&key)
                            .is_none_or(|a| a.is_empty());
                        let roll: f64 = rng.lock().expect("lock").random();
                        let did = if record.down.load(Ordering::Relaxed) {
                            Did::Failed
                        } else if !first {
                            Did::Ok
                        } else if roll < faults.fail {
                            Did::Failed
                        } else if roll < faults.fail + faults.stall {
                            Did::Stalled
                        } else if roll < faults.fail + faults.stall + faults.reset {
                            Did::Reset
                        } else {
                            Did::Ok
                        };
                        record
                            .attempts
                            .lock()
                            .expect("lock")
                            .entry(key)
                            .or_default()
                            .push((did, arrived));
                        match did {
                            Did::Ok => {
                                Ok(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
                            }
                            Did::Failed => {
                                let mut r =
                                    http::Response::new(Full::new(Bytes::from_static(b"no")));
                                *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                                Ok(r)
                            }
                            Did::Stalled => {
                                tokio::time::sleep(Duration::from_millis(2500)).await;
                                Ok(http::Response::new(Full::new(Bytes::from_static(b"late"))))
                            }
                            // An error from the service makes hyper drop the connection
                            // without an answer: the gateway sees a broken exchange.
                            Did::Reset => Err(std::io::Error::other("reset")),
                        }
                    }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

pub struct Gateway {
    pub child: Option<Child>,
    pub port: u16,
    pub config: std::path::PathBuf,
}

impl Gateway {
    pub fn start(
        dir: &std::path::Path,
        name: &str,
        redis: &RedisServer,
        upstream: SocketAddr,
        delivery: &str,
    ) -> Self {
        let store = format!("backend = \"redis\"\nurl = \"{}\"", redis.url());
        Self::start_on(dir, name, &store, upstream, delivery)
    }

    /// A gateway whose `[store]` holds `store` (`backend = …` and its keys), with its
    /// route's `delivery` (`sync` or `queue`).
    pub fn start_on(
        dir: &std::path::Path,
        name: &str,
        store: &str,
        upstream: SocketAddr,
        delivery: &str,
    ) -> Self {
        Self::start_to(dir, name, store, &[upstream], delivery)
    }

    /// A gateway whose route goes to these upstreams: its `upstream` for one, one
    /// `[[routes.destinations]]` each (`d0`, `d1`, …) for several.
    pub fn start_to(
        dir: &std::path::Path,
        name: &str,
        store: &str,
        upstreams: &[SocketAddr],
        delivery: &str,
    ) -> Self {
        let port = crate::support::free_port();
        let config = dir.join(format!("{name}.toml"));
        // Queue routes retry on the gateway's own fast schedule.
        let retry = if delivery == "queue" {
            // 16 attempts at once over the replicas (on Redis the bound is shared): the
            // stalls hold theirs for the whole upstream_timeout.
            "retry = { initial = \"50ms\", max_delay = \"500ms\" }\nconcurrency = 16\n"
        } else {
            ""
        };
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"2s\"\n[store]\n{store}\ninflight_ttl = \"10s\"\ntimeout = \"500ms\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"{SECRET}\"]\nupstream_timeout = \"2s\"\ndelivery = \"{delivery}\"\n{retry}{}",
                match upstreams {
                    [one] => format!("upstream = \"http://{one}/up\"\n"),
                    several => several
                        .iter()
                        .enumerate()
                        .map(|(i, u)| {
                            format!("[[routes.destinations]]\nname = \"d{i}\"\nupstream = \"http://{u}/up\"\n")
                        })
                        .collect(),
                }
            ),
        )
        .expect("config");
        let mut g = Self {
            child: None,
            port,
            config,
        };
        g.spawn();
        g
    }

    pub fn spawn(&mut self) {
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&self.config)
            .env(
                "RUST_LOG",
                std::env::var("CHAOS_LOG_LEVEL").unwrap_or("warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(match std::env::var("CHAOS_LOGS") {
                Ok(dir) => Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(format!("{dir}/gw-{}.log", self.port))
                        .expect("log"),
                ),
                Err(_) => Stdio::null(),
            })
            .spawn()
            .expect("spawn");
        // Generous: a debug binary on a busy two-core machine.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "gateway on port {} did not start within 30 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/s", self.port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug, Default)]
pub struct Counts {
    pub events: usize,
    pub copies: usize,
    pub attempts: u64,
    pub acked: usize,
    pub lost: usize,
    pub duplicate_effects: usize,
    pub repeats_after_faults: usize,
}

/// Sends `events` events, `copies` each, to the gateways round-robin, until every copy
/// is acknowledged or `limit` passes; `during` runs the scenario's fault meanwhile.
/// When the provider first received `forwarded` for each event.
pub type ForwardedAt = Arc<Mutex<HashMap<usize, Instant>>>;

pub async fn provider_sim<F: std::future::Future<Output = ()>>(
    urls: Arc<Mutex<Vec<String>>>,
    events: usize,
    copies: usize,
    limit: Duration,
    forwarded_at: ForwardedAt,
    during: F,
) -> (Vec<bool>, u64) {
    let route = crate::support::parse_config(&format!(
        "[[routes]]\nname = \"s\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"{SECRET}\"]\nupstream = \"http://127.0.0.1:9/\"\n"
    ))
    .routes
    .remove(0);
    let attempts = Arc::new(AtomicU64::new(0));
    let next_target = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + limit;
    let spread_ms = (events as u64 * 4 / 3).max(400);
    let now = hookgate::time::Clock::System.now();
    let mut tasks = Vec::new();
    for e in 0..events {
        let body = format!(r#"{{"id":"evt_chaos_{e:05}","type":"invoice.paid"}}"#);
        let headers: Vec<(String, String)> = hookgate::sign::headers(
            &route.verifier,
            &route.event_id,
            body.as_bytes(),
            now,
            "x",
            None,
        )
        .expect("sign")
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        for c in 0..copies {
            let (body, headers, urls, attempts, next_target) = (
                body.clone(),
                headers.clone(),
                urls.clone(),
                attempts.clone(),
                next_target.clone(),
            );
            let forwarded_at = forwarded_at.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64((e * 31 + c) as u64);
                // First attempts spread over ~1.3 ms per event (at least 400 ms), so the
                // faults, 0.6–0.7 s in, land mid-run whatever the event count.
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..spread_ms))).await;
                let http = client();
                let mut backoff = 40u64;
                while Instant::now() < deadline {
                    let url = {
                        let u = urls.lock().expect("lock");
                        u[next_target.fetch_add(1, Ordering::Relaxed) % u.len()].clone()
                    };
                    attempts.fetch_add(1, Ordering::Relaxed);
                    let mut req = http
                        .post(&url)
                        .body(body.clone())
                        .timeout(Duration::from_secs(3));
                    for (n, v) in &headers {
                        req = req.header(n.as_str(), v.as_str());
                    }
                    match req.send().await {
                        Ok(r) if r.status().is_success() => {
                            if r.headers()
                                .get("hookgate-outcome")
                                .is_some_and(|v| v == "forwarded")
                            {
                                forwarded_at
                                    .lock()
                                    .expect("lock")
                                    .entry(e)
                                    .or_insert_with(Instant::now);
                            }
                            return true;
                        }
                        Ok(r) if std::env::var("CHAOS_DEBUG").is_ok() => {
                            eprintln!("{} {:?}", r.status(), r.headers().get("hookgate-outcome"))
                        }
                        Err(e) if std::env::var("CHAOS_DEBUG").is_ok() => {
                            eprintln!(
                                "{:?} left: error {e:?}",
                                deadline.saturating_duration_since(Instant::now())
                            )
                        }
                        _ => {}
                    }
                    // Jittered exponential backoff, like a real provider (compressed).
                    tokio::time::sleep(Duration::from_millis(
                        backoff + rng.random_range(0..backoff),
                    ))
                    .await;
                    backoff = (backoff * 2).min(600);
                }
                false
            }));
        }
    }
    during.await;
    let mut acked = vec![false; events];
    for (i, t) in tasks.into_iter().enumerate() {
        if t.await.unwrap_or(false) {
            acked[i / copies] = true;
        }
    }
    (acked, attempts.load(Ordering::Relaxed))
}

pub fn tally(
    record: &Record,
    acked: &[bool],
    copies: usize,
    attempts: u64,
    forwarded_at: &HashMap<usize, Instant>,
) -> Counts {
    // A duplicate effect: the upstream got the event again after the gateway had told
    // the provider it was forwarded (so it knew the event was done).
    count(record, acked, copies, attempts, |e, tries| {
        forwarded_at
            .get(&e)
            .map_or(0, |done| tries.iter().filter(|(_, at)| at > done).count())
    })
}

/// Counts lost events and repeats, with `again(event, attempts)` naming the attempts
/// that count as duplicate effects.
pub fn count(
    record: &Record,
    acked: &[bool],
    copies: usize,
    attempts: u64,
    again: impl Fn(usize, &[(Did, Instant)]) -> usize,
) -> Counts {
    let all = record.attempts.lock().expect("lock");
    let mut c = Counts {
        events: acked.len(),
        copies: acked.len() * copies,
        attempts,
        acked: acked.iter().filter(|a| **a).count(),
        ..Counts::default()
    };
    for (e, was_acked) in acked.iter().enumerate() {
        let key = format!("evt_chaos_{e:05}");
        // In the order the attempts reached the upstream (one whose body was read
        // late is recorded late).
        let mut tries = all.get(&key).cloned().unwrap_or_default();
        tries.sort_by_key(|(_, at)| *at);
        let applied = tries
            .iter()
            .filter(|(d, _)| matches!(d, Did::Ok | Did::Stalled | Did::Reset))
            .count();
        if !*was_acked || applied == 0 {
            c.lost += 1;
        }
        let repeated = again(e, &tries);
        if repeated > 0 {
            eprintln!("chaos: {key} reached the upstream again after its 2xx: {tries:?}");
        }
        c.duplicate_effects += repeated;
        // The window the design leaves: applied, but the gateway never saw the 2xx
        // (a stall past the timeout, a reset, a crash); the retry repeats it with the
        // same Idempotency-Key, which is how the upstream is keyed here.
        c.repeats_after_faults += applied.saturating_sub(1);
    }
    c
}

/// Scenarios run one at a time: they share two cores with their gateways.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn scenario(
    name: &str,
    faults: Faults,
    events: usize,
    replicas: usize,
    fault: impl AsyncFnOnce(&mut Vec<Gateway>, &mut RedisServer),
) -> Counts {
    scenario_on(name, faults, events, replicas, false, fault).await
}

/// [`scenario`], on the disk store (a file of each gateway's own in the scenario's
/// folder) when `on_disk`.
pub async fn scenario_on(
    name: &str,
    faults: Faults,
    events: usize,
    replicas: usize,
    on_disk: bool,
    fault: impl AsyncFnOnce(&mut Vec<Gateway>, &mut RedisServer),
) -> Counts {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("dir");
    let mut redis = RedisServer::start_with_aof(true);
    let record = Arc::new(Record::default());
    let upstream = upstream_sim(faults, record.clone()).await;
    let mut gateways: Vec<Gateway> = (0..replicas)
        .map(|i| {
            let name = format!("g{i}");
            if on_disk {
                let store = format!(
                    "backend = \"disk\"\npath = \"{}\"",
                    dir.path().join(format!("{name}.db")).display()
                );
                Gateway::start_on(dir.path(), &name, &store, upstream, "sync")
            } else {
                Gateway::start(dir.path(), &name, &redis, upstream, "sync")
            }
        })
        .collect();
    let urls = Arc::new(Mutex::new(
        gateways.iter().map(Gateway::url).collect::<Vec<_>>(),
    ));
    let copies = 3;
    let forwarded_at: ForwardedAt = Arc::default();
    let (acked, attempts) = provider_sim(
        urls,
        events,
        copies,
        Duration::from_secs(25),
        forwarded_at.clone(),
        async {
            fault(&mut gateways, &mut redis).await;
        },
    )
    .await;
    let counts = tally(
        &record,
        &acked,
        copies,
        attempts,
        &forwarded_at.lock().expect("lock"),
    );
    eprintln!(
        "chaos [{name}]: {} events, {} copies, {} attempts, {} acknowledged, {} lost, {} duplicate effects, {} repeated with the same Idempotency-Key after a fault",
        counts.events,
        counts.copies,
        counts.attempts,
        counts.acked,
        counts.lost,
        counts.duplicate_effects,
        counts.repeats_after_faults,
    );
    assert_eq!(counts.lost, 0, "{name}: events lost");
    assert_eq!(
        counts.duplicate_effects, 0,
        "{name}: an event was forwarded again after its 2xx"
    );
    counts
}

pub async fn nothing(_: &mut Vec<Gateway>, _: &mut RedisServer) {}

/// The fault of the SIGKILL scenarios: the first gateway killed 0.5 s into the run and
/// started again 0.3 s later.
#[expect(clippy::ptr_arg, reason = "the type of every scenario's fault")]
pub async fn sigkill_the_first_and_restart(gateways: &mut Vec<Gateway>, _: &mut RedisServer) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    gateways[0].kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    gateways[0].spawn();
}
