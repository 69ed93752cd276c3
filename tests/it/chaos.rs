//! The chaos suite: a provider simulator sends a thousand events, each several times,
//! copies interleaved and concurrent, retrying every non-2xx with jittered backoff; an
//! upstream simulator records every attempt and injects faults. For every scenario:
//! every event is acknowledged and reached the upstream (nothing lost), and no event is
//! forwarded again after the gateway saw its 2xx (no duplicate effect) — except across
//! a gateway SIGKILL, the one window the design leaves (a crash between the upstream's
//! 2xx and the store's `complete`), where the repeat carries the same Idempotency-Key.
//! Loopback only; every scenario is bounded in time and stops by itself.

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

const BIN: &str = env!("CARGO_BIN_EXE_hookgate");
const SECRET: &str = "whsec_chaos";

/// What the simulated upstream did with one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Did {
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
struct Faults {
    /// Share of first attempts answered 500.
    fail: f64,
    /// Share of first attempts that stall past the upstream timeout.
    stall: f64,
    /// Share of first attempts whose connection is reset after applying.
    reset: f64,
}

#[derive(Default)]
struct Record {
    /// Every attempt per Idempotency-Key: what the upstream did, and when it arrived.
    attempts: Mutex<HashMap<String, Vec<(Did, Instant)>>>,
    /// The upstream is down: every attempt is answered 500 without applying.
    down: std::sync::atomic::AtomicBool,
}

async fn upstream_sim(faults: Faults, record: Arc<Record>) -> SocketAddr {
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

struct Gateway {
    child: Option<Child>,
    port: u16,
    config: std::path::PathBuf,
}

impl Gateway {
    fn start(
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
    fn start_on(
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
    fn start_to(
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

    fn spawn(&mut self) {
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

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/s", self.port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug, Default)]
struct Counts {
    events: usize,
    copies: usize,
    attempts: u64,
    acked: usize,
    lost: usize,
    duplicate_effects: usize,
    repeats_after_faults: usize,
}

/// Sends `events` events, `copies` each, to the gateways round-robin, until every copy
/// is acknowledged or `limit` passes; `during` runs the scenario's fault meanwhile.
/// When the provider first received `forwarded` for each event.
type ForwardedAt = Arc<Mutex<HashMap<usize, Instant>>>;

async fn provider_sim<F: std::future::Future<Output = ()>>(
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
    let now = hookgate::server::Clock::System.now();
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

fn tally(
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
fn count(
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
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn scenario(
    name: &str,
    faults: Faults,
    events: usize,
    replicas: usize,
    fault: impl AsyncFnOnce(&mut Vec<Gateway>, &mut RedisServer),
) -> Counts {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("dir");
    let mut redis = RedisServer::start_with_aof(true);
    let record = Arc::new(Record::default());
    let upstream = upstream_sim(faults, record.clone()).await;
    let mut gateways: Vec<Gateway> = (0..replicas)
        .map(|i| Gateway::start(dir.path(), &format!("g{i}"), &redis, upstream, "sync"))
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

async fn nothing(_: &mut Vec<Gateway>, _: &mut RedisServer) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_upstream_faults() {
    let c = scenario(
        "upstream: 30% fail first",
        Faults {
            fail: 0.3,
            ..Faults::default()
        },
        1000,
        2,
        nothing,
    )
    .await;
    assert!(
        c.attempts > c.copies as u64,
        "faults made the provider retry"
    );
    // Stalls and resets apply the effect without the gateway seeing a 2xx: the retry
    // repeats it, with the same Idempotency-Key (the window docs/guarantees.md names).
    let c = scenario(
        "upstream: 15% stall past the timeout",
        Faults {
            stall: 0.15,
            ..Faults::default()
        },
        1000,
        2,
        nothing,
    )
    .await;
    assert!(c.repeats_after_faults > 10);
    let c = scenario(
        "upstream: 15% reset after applying",
        Faults {
            reset: 0.15,
            ..Faults::default()
        },
        1000,
        2,
        nothing,
    )
    .await;
    assert!(c.repeats_after_faults > 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_restarts_and_outages() {
    scenario(
        "redis SIGKILLed and restarted (AOF)",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        1000,
        2,
        async |_, redis| {
            tokio::time::sleep(Duration::from_millis(700)).await;
            redis.restart();
        },
    )
    .await;
    scenario(
        "redis unreachable for 2 s",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        1000,
        2,
        async |_, redis| {
            tokio::time::sleep(Duration::from_millis(600)).await;
            redis.stop();
            tokio::time::sleep(Duration::from_secs(2)).await;
            redis.restart();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_a_replica_is_sigkilled_and_restarted() {
    scenario(
        "gateway replica SIGKILLed mid-run and restarted",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        1000,
        2,
        async |gateways, _| {
            tokio::time::sleep(Duration::from_millis(500)).await;
            gateways[0].kill();
            tokio::time::sleep(Duration::from_millis(300)).await;
            gateways[0].spawn();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_three_replicas_on_a_cluster_lose_a_primary() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut cluster = crate::support::redis::RedisCluster::start();
    let dir = tempfile::tempdir().expect("dir");
    let record = Arc::new(Record::default());
    let upstream = upstream_sim(
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        record.clone(),
    )
    .await;
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let store = format!("backend = \"redis\"\ncluster = [{}]", nodes.join(", "));
    let gateways: Vec<Gateway> = (0..3)
        .map(|i| Gateway::start_on(dir.path(), &format!("c{i}"), &store, upstream, "sync"))
        .collect();
    let urls = Arc::new(Mutex::new(
        gateways.iter().map(Gateway::url).collect::<Vec<_>>(),
    ));
    let forwarded_at: ForwardedAt = Arc::default();
    let events = 1000;
    let (acked, attempts) = provider_sim(
        urls,
        events,
        3,
        Duration::from_secs(30),
        forwarded_at.clone(),
        async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            // Kill the primary of one event's slot mid-run and promote its replica.
            let key = "hookgate:stripe:evt_chaos_00150";
            let primary = cluster.primary_of(key);
            cluster.kill(primary);
            tokio::task::block_in_place(|| {
                cluster.wait_failover(key, primary);
            });
        },
    )
    .await;
    let counts = tally(
        &record,
        &acked,
        3,
        attempts,
        &forwarded_at.lock().expect("lock"),
    );
    eprintln!(
        "chaos [three replicas, Redis Cluster, a primary killed and its replica promoted]: {} events, {} copies, {} attempts, {} acknowledged, {} lost, {} duplicate effects, {} repeated with the same Idempotency-Key after a fault",
        counts.events,
        counts.copies,
        counts.attempts,
        counts.acked,
        counts.lost,
        counts.duplicate_effects,
        counts.repeats_after_faults
    );
    assert_eq!(counts.lost, 0, "events lost");
    // Every primary has a replica, so `min_replicas_ack` is 1 without being set: a
    // done record is acknowledged only once the replica holds it, and the replica
    // promoted after the kill answers every later copy `duplicate` (issue 34, 6).
    assert_eq!(
        counts.duplicate_effects, 0,
        "forwarded again after a 2xx across the failover"
    );
    drop(gateways);
}

/// Where a queue scenario keeps its queue.
#[derive(Clone)]
enum QueueOn {
    Redis,
    Disk,
    /// The disk store in this folder (a small filesystem of its own), with a free-space
    /// reserve of 1 MiB.
    DiskIn(std::path::PathBuf),
}

/// Counts for queue routes: the provider is answered at once, so what matters is what
/// reached the upstream. A duplicate effect is an attempt that arrived after the
/// upstream had already answered a 2xx for the event.
fn tally_queue(record: &Record, acked: &[bool], copies: usize, attempts: u64) -> Counts {
    count(record, acked, copies, attempts, |_, tries| {
        tries
            .iter()
            .position(|(d, _)| *d == Did::Ok)
            .map_or(0, |first_ok| tries.len() - first_ok - 1)
    })
}

/// A scenario on queue routes: the provider simulator as before, then the queue is
/// given time to drain before the upstream's record is counted.
async fn queue_scenario(
    name: &str,
    faults: Faults,
    replicas: usize,
    on: QueueOn,
    fault: impl AsyncFnOnce(&mut Vec<Gateway>, &mut RedisServer),
) -> Counts {
    let _turn = ONE_AT_A_TIME.lock().await;
    let events = 1000;
    let dir = tempfile::tempdir().expect("dir");
    let mut redis = RedisServer::start_with_aof(true);
    let record = Arc::new(Record::default());
    let upstream = upstream_sim(faults, record.clone()).await;
    let store = match on {
        QueueOn::Redis => format!("backend = \"redis\"\nurl = \"{}\"", redis.url()),
        QueueOn::Disk => format!(
            "backend = \"disk\"\npath = \"{}\"",
            dir.path().join("queue.db").display()
        ),
        QueueOn::DiskIn(folder) => format!(
            "backend = \"disk\"\npath = \"{}\"\nmin_free_space = \"1MiB\"",
            folder.join("queue.db").display()
        ),
    };
    let mut gateways: Vec<Gateway> = (0..replicas)
        .map(|i| Gateway::start_on(dir.path(), &format!("q{i}"), &store, upstream, "queue"))
        .collect();
    let urls = Arc::new(Mutex::new(
        gateways.iter().map(Gateway::url).collect::<Vec<_>>(),
    ));
    let copies = 3;
    let (acked, attempts) = provider_sim(
        urls,
        events,
        copies,
        Duration::from_secs(25),
        Arc::default(),
        async {
            fault(&mut gateways, &mut redis).await;
        },
    )
    .await;
    // The provider is done; the queue delivers the rest (bounded: a lost event shows
    // as lost, not as a hang).
    let drained = Instant::now() + Duration::from_secs(45);
    loop {
        let all_applied = {
            let all = record.attempts.lock().expect("lock");
            acked.iter().enumerate().all(|(e, a)| {
                !*a || all
                    .get(&format!("evt_chaos_{e:05}"))
                    .is_some_and(|t| t.iter().any(|(d, _)| *d == Did::Ok))
            })
        };
        if all_applied || Instant::now() > drained {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Quiet time in which a repeat would show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let counts = tally_queue(&record, &acked, copies, attempts);
    eprintln!(
        "chaos [queue: {name}]: {} events, {} copies, {} provider attempts, {} acknowledged, {} lost, {} delivered again after a 2xx, {} repeated with the same Idempotency-Key after a fault",
        counts.events,
        counts.copies,
        counts.attempts,
        counts.acked,
        counts.lost,
        counts.duplicate_effects,
        counts.repeats_after_faults,
    );
    assert_eq!(
        counts.acked, counts.events,
        "{name}: every event acknowledged"
    );
    assert_eq!(counts.lost, 0, "{name}: events lost");
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_routes_under_upstream_faults() {
    for (name, faults) in [
        (
            "upstream: 30% fail first",
            Faults {
                fail: 0.3,
                ..Faults::default()
            },
        ),
        (
            "upstream: 15% stall past the timeout, 15% reset after applying",
            Faults {
                stall: 0.15,
                reset: 0.15,
                ..Faults::default()
            },
        ),
    ] {
        let c = queue_scenario(name, faults, 2, QueueOn::Redis, nothing).await;
        assert_eq!(
            c.duplicate_effects, 0,
            "{name}: delivered again after a 2xx"
        );
        // Copies are answered at once, whatever the upstream does; how often the
        // provider still retried (a store call slower than store.timeout on a machine
        // loaded by other tests) is reported above, not asserted: it is timing.
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_routes_through_redis_restarts_and_outages() {
    let c = queue_scenario(
        "redis SIGKILLed and restarted (AOF)",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        2,
        QueueOn::Redis,
        async |_, redis| {
            tokio::time::sleep(Duration::from_millis(700)).await;
            redis.restart();
        },
    )
    .await;
    assert_eq!(c.duplicate_effects, 0);
    let c = queue_scenario(
        "redis unreachable for 2 s",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        2,
        QueueOn::Redis,
        async |_, redis| {
            tokio::time::sleep(Duration::from_millis(600)).await;
            redis.stop();
            tokio::time::sleep(Duration::from_secs(2)).await;
            redis.restart();
        },
    )
    .await;
    assert_eq!(c.duplicate_effects, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_routes_when_a_gateway_is_sigkilled() {
    // An attempt the upstream acknowledged in the instant before the kill, but whose
    // result was never recorded, is delivered again after its lease (same
    // Idempotency-Key): at most one per attempt in flight (16 at once), and on the disk
    // store also the attempts whose results waited for their fsync (at most 50 ms).
    let c = queue_scenario(
        "a replica on Redis SIGKILLed mid-run and restarted",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        2,
        QueueOn::Redis,
        async |gateways, _| {
            tokio::time::sleep(Duration::from_millis(500)).await;
            gateways[0].kill();
            tokio::time::sleep(Duration::from_millis(300)).await;
            gateways[0].spawn();
        },
    )
    .await;
    assert!(c.duplicate_effects <= 16, "{} repeats", c.duplicate_effects);
    let c = queue_scenario(
        "the only gateway, on the disk store, SIGKILLed mid-run and restarted",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        1,
        QueueOn::Disk,
        async |gateways, _| {
            tokio::time::sleep(Duration::from_millis(500)).await;
            gateways[0].kill();
            tokio::time::sleep(Duration::from_millis(300)).await;
            gateways[0].spawn();
        },
    )
    .await;
    // 16 in flight, and what 16 workers can finish in 50 ms against a local upstream.
    assert!(c.duplicate_effects <= 64, "{} repeats", c.duplicate_effects);
}

/// The only gateway, on the disk store, while another process takes its filesystem's
/// last byte for 2 s mid-run: new events are refused (the provider retries), deliveries
/// are held back, and none is delivered again after its 2xx once space is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_routes_when_the_disk_fills_up() {
    let Some(disk) = crate::queue::SmallDisk::mount("32m") else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root; this test runs in CI");
        return;
    };
    let folder = disk.path().to_path_buf();
    let c = queue_scenario(
        "the disk store's filesystem filled to its last byte for 2 s",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        1,
        QueueOn::DiskIn(folder.clone()),
        async |_, _| {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let filler = crate::queue::fill_to_the_last_byte(&folder);
            tokio::time::sleep(Duration::from_secs(2)).await;
            std::fs::remove_file(filler).expect("free the space");
        },
    )
    .await;
    assert_eq!(c.duplicate_effects, 0, "delivered again after a 2xx");
}

/// Fan-out under faults: one route, two destinations with faults of their own, two
/// replicas on Redis, Redis SIGKILLed and restarted (AOF) mid-run. Each destination
/// must get every acknowledged event, none again after a 2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_fanout_each_destination_gets_every_event_once() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let events = 1000;
    let copies = 3;
    let dir = tempfile::tempdir().expect("dir");
    let mut redis = RedisServer::start_with_aof(true);
    let destinations = [
        (
            "destination d0: 30% fail first",
            Faults {
                fail: 0.3,
                ..Faults::default()
            },
        ),
        (
            "destination d1: 10% stall past the timeout, 10% reset after applying",
            Faults {
                stall: 0.1,
                reset: 0.1,
                ..Faults::default()
            },
        ),
    ];
    let mut records = Vec::new();
    let mut upstreams = Vec::new();
    for (_, faults) in &destinations {
        let record = Arc::new(Record::default());
        upstreams.push(upstream_sim(*faults, record.clone()).await);
        records.push(record);
    }
    let store = format!("backend = \"redis\"\nurl = \"{}\"", redis.url());
    let gateways: Vec<Gateway> = (0..2)
        .map(|i| Gateway::start_to(dir.path(), &format!("f{i}"), &store, &upstreams, "queue"))
        .collect();
    let urls = Arc::new(Mutex::new(
        gateways.iter().map(Gateway::url).collect::<Vec<_>>(),
    ));
    let (acked, attempts) = provider_sim(
        urls,
        events,
        copies,
        Duration::from_secs(25),
        Arc::default(),
        async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            redis.restart();
        },
    )
    .await;
    let applied_everywhere = || {
        records.iter().all(|record| {
            let all = record.attempts.lock().expect("lock");
            acked.iter().enumerate().all(|(e, a)| {
                !*a || all
                    .get(&format!("evt_chaos_{e:05}"))
                    .is_some_and(|t| t.iter().any(|(d, _)| *d == Did::Ok))
            })
        })
    };
    let drained = Instant::now() + Duration::from_secs(60);
    while !applied_everywhere() && Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Quiet time in which a repeat would show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for ((name, _), record) in destinations.iter().zip(&records) {
        let counts = tally_queue(record, &acked, copies, attempts);
        eprintln!(
            "chaos [fan-out, {name}]: {} events, {} copies, {} provider attempts, {} acknowledged, {} lost, {} delivered again after a 2xx, {} repeated with the same Idempotency-Key after a fault",
            counts.events,
            counts.copies,
            counts.attempts,
            counts.acked,
            counts.lost,
            counts.duplicate_effects,
            counts.repeats_after_faults,
        );
        assert_eq!(
            counts.acked, counts.events,
            "{name}: every event acknowledged"
        );
        assert_eq!(counts.lost, 0, "{name}: events lost");
        assert_eq!(
            counts.duplicate_effects, 0,
            "{name}: delivered again after a 2xx"
        );
    }
    drop(gateways);
}

/// A Stripe event about one customer (the `order_by` key of the lease scenario).
fn customer_event(id: &str, customer: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"customer":"{customer}"}}}}}}"#
    )
}

/// Two replicas on one Redis whose destination has different `upstream_timeout`s (a
/// rolling change, or a reload on one of them), and an upstream slower than the
/// shorter one's lease: the replica with the longer timeout holds its attempts for as
/// long as they run. No event reaches the upstream twice, and no key has two attempts
/// open at once (the next event of a key arrives only after the first was answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_leases_belong_to_the_attempt_across_replicas_with_different_timeouts() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let redis = RedisServer::start();
    let up = crate::support::Upstream::start().await;
    // Longer than the short replica's whole lease (its timeout + 5 s), shorter than
    // the long replica's timeout.
    let slow = Duration::from_secs(8);
    up.set_delay(slow);
    let config = |timeout: &str| {
        format!(
            r#"[server]
shutdown_grace = "1s"
[store]
backend = "redis"
url = "{}"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream = "{}"
upstream_timeout = "{timeout}"
order_by = "json:/data/object/customer"
retry = {{ initial = "50ms", max_delay = "200ms" }}
"#,
            redis.url(),
            up.url("/ledger")
        )
    };
    let long = crate::support::TestGateway::start(&config("12s")).await;
    let events = [
        ("evt_lease_1", "cus_a"),
        ("evt_lease_2", "cus_a"),
        ("evt_lease_3", "cus_b"),
    ];
    for (id, customer) in events {
        let r = long
            .deliver("stripe", &customer_event(id, customer), id)
            .await;
        assert_eq!(r.outcome(), "queued");
    }
    // The first of each key is in flight at the long replica...
    assert!(
        crate::support::eventually(Duration::from_secs(5), || up.count() == 2).await,
        "the first event of each key reached the upstream"
    );
    // ...when a replica with a 1 s timeout (a 6 s lease) starts polling the same queue.
    up.set_delay(Duration::ZERO);
    let short = crate::support::TestGateway::start(&config("1s")).await;
    assert!(
        crate::support::eventually(Duration::from_secs(20), || events
            .iter()
            .all(|(id, _)| up.effects_for(id) >= 1))
        .await,
        "every event delivered"
    );
    // Time for a repeat to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = up.received();
    let arrivals = |id: &str| -> Vec<Instant> {
        seen.iter()
            .filter(|r| r.header("idempotency-key") == Some(id))
            .map(|r| r.at)
            .collect()
    };
    for (id, _) in events {
        assert_eq!(arrivals(id).len(), 1, "{id} reached the upstream once");
    }
    let (first, second) = (arrivals("evt_lease_1")[0], arrivals("evt_lease_2")[0]);
    assert!(
        second >= first + slow,
        "the second event of a key arrived {:?} after the first, which was open for {slow:?}",
        second - first
    );
    eprintln!(
        "chaos [queue: two replicas, upstream_timeout 12s and 1s, upstream 8s]: 3 events, {} attempts, 0 repeated, key order kept",
        seen.len()
    );
    short.stop().await;
    long.stop().await;
}

/// A replica promotion with `min_replicas_ack = 1`: two gateways on a primary with one
/// replica. Early in the run the destination goes down (so what the primary holds is
/// not delivered from it), the replica is cut off and promoted (`REPLICAOF NO ONE`:
/// every enqueue on the primary is refused 503 and stays there), three seconds later the
/// primary is lost and both gateways restart pointed at the promoted replica, the destination
/// back up. Every event the provider was told 2xx must be delivered: a copy answered
/// `duplicate` while only the primary held the event would be lost here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_routes_through_a_replica_promotion_with_min_replicas_ack() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let name = "a replica promotion with min_replicas_ack";
    let (events, copies) = (1000, 3);
    let dir = tempfile::tempdir().expect("dir");
    let mut primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let record = Arc::new(Record::default());
    let upstream = upstream_sim(
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        record.clone(),
    )
    .await;
    let on_primary = format!(
        "backend = \"redis\"\nurl = \"{}\"\nmin_replicas_ack = 1\nreplica_ack_timeout = \"10ms\"",
        primary.url()
    );
    // The promoted replica has no replica of its own: the operator drops the setting.
    let on_replica = format!("backend = \"redis\"\nurl = \"{}\"", replica.url());
    let mut gateways: Vec<Gateway> = (0..2)
        .map(|i| Gateway::start_on(dir.path(), &format!("m{i}"), &on_primary, upstream, "queue"))
        .collect();
    let urls = Arc::new(Mutex::new(
        gateways.iter().map(Gateway::url).collect::<Vec<_>>(),
    ));
    let (acked, attempts) = provider_sim(
        urls,
        events,
        copies,
        Duration::from_secs(25),
        Arc::default(),
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            record.down.store(true, Ordering::Relaxed);
            // What was delivered before reaches the replica (it is not cut off yet):
            // the link is cut once the replica holds the delivered record of every
            // event the destination answered 2xx (a delivery whose record no replica
            // holds yet is the window docs/guarantees.md names: it is delivered
            // again, with its Idempotency-Key, after a promotion).
            let settled = Instant::now() + Duration::from_secs(20);
            loop {
                let delivered: Vec<String> = {
                    let all = record.attempts.lock().expect("lock");
                    all.iter()
                        .filter(|(_, t)| t.iter().any(|(d, _)| *d == Did::Ok))
                        .map(|(id, _)| id.clone())
                        .collect()
                };
                let on_replica: Vec<Option<f64>> = if delivered.is_empty() {
                    Vec::new()
                } else {
                    replica.cmd(
                        redis::cmd("ZMSCORE")
                            .arg("hookgate:#q:{stripe}:delivered")
                            .arg(&delivered),
                    )
                };
                let missing = on_replica.iter().filter(|at| at.is_none()).count();
                if missing == 0 {
                    break;
                }
                assert!(
                    Instant::now() < settled,
                    "{missing} of {} delivered events never reached the replica",
                    delivered.len()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The link is cut: the replica keeps what it has and takes no more (a
            // frozen replica would not do: on loopback the primary's stream waits in
            // its socket and arrives when it resumes, even after the primary died).
            let _: () = replica.cmd(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
            // Most copies are first sent while it is cut off.
            tokio::time::sleep(Duration::from_millis(3000)).await;
            if std::env::var("CHAOS_DEBUG").is_ok() {
                for (n, r) in [("primary", &primary), ("replica", &replica)] {
                    let keys: i64 = r.cmd(&mut redis::cmd("DBSIZE"));
                    eprintln!("before the primary is lost, {n}: {keys} keys");
                }
            }
            primary.stop();
            for g in &mut gateways {
                g.kill();
                let text = std::fs::read_to_string(&g.config).expect("config");
                std::fs::write(&g.config, text.replace(&on_primary, &on_replica)).expect("config");
                g.spawn();
            }
            record.down.store(false, Ordering::Relaxed);
        },
    )
    .await;
    let drained = Instant::now() + Duration::from_secs(45);
    loop {
        let all_applied = {
            let all = record.attempts.lock().expect("lock");
            acked.iter().enumerate().all(|(e, a)| {
                !*a || all
                    .get(&format!("evt_chaos_{e:05}"))
                    .is_some_and(|t| t.iter().any(|(d, _)| *d == Did::Ok))
            })
        };
        if all_applied || Instant::now() > drained {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Quiet time in which a repeat would show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let counts = tally_queue(&record, &acked, copies, attempts);
    eprintln!(
        "chaos [queue: {name}]: {} events, {} copies, {} provider attempts, {} acknowledged, {} lost, {} delivered again after a 2xx, {} repeated with the same Idempotency-Key after a fault",
        counts.events,
        counts.copies,
        counts.attempts,
        counts.acked,
        counts.lost,
        counts.duplicate_effects,
        counts.repeats_after_faults,
    );
    assert_eq!(
        counts.acked, counts.events,
        "{name}: every event acknowledged"
    );
    assert_eq!(counts.lost, 0, "{name}: events lost");
    assert_eq!(
        counts.duplicate_effects, 0,
        "{name}: delivered again after a 2xx"
    );
    drop(gateways);
}
