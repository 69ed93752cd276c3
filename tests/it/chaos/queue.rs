//! Chaos scenarios on queue routes: upstream faults, Redis restarts and outages, a
//! gateway SIGKILLed, the disk filling up, fan-out, leases across replicas with
//! different timeouts, and a replica promotion with `min_replicas_ack`. The provider is
//! answered at once, so what is counted is what reached the upstream.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::harness::{
    Counts, Did, Faults, Gateway, ONE_AT_A_TIME, Record, count, nothing, provider_sim,
    sigkill_the_first_and_restart, upstream_sim,
};
use crate::support::RedisServer;

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
    // Idempotency-Key): at most one per attempt in flight (16 at once). On the disk
    // store, results journaled but not yet fsynced survive a killed process (the
    // journal's pages are the system's), so the bound is the same.
    let c = queue_scenario(
        "a replica on Redis SIGKILLed mid-run and restarted",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        2,
        QueueOn::Redis,
        sigkill_the_first_and_restart,
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
        sigkill_the_first_and_restart,
    )
    .await;
    // 16 in flight; no result journaled before the kill is lost with the process.
    assert!(c.duplicate_effects <= 16, "{} repeats", c.duplicate_effects);
}

/// The only gateway, on the disk store, while another process takes its filesystem's
/// last byte for 2 s mid-run: new events are refused (the provider retries), deliveries
/// are held back, and none is delivered again after its 2xx once space is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_queue_routes_when_the_disk_fills_up() {
    let Some(disk) = crate::queue::delivery::SmallDisk::mount("32m") else {
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
            let filler = crate::queue::delivery::fill_to_the_last_byte(&folder);
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
