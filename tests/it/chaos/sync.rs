//! Chaos scenarios on sync routes: upstream faults, Redis restarts and outages, a
//! replica SIGKILLed and restarted, three replicas on a cluster losing a primary, and
//! the only gateway on the disk store SIGKILLed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::harness::{
    Faults, ForwardedAt, Gateway, ONE_AT_A_TIME, Record, nothing, provider_sim, scenario,
    scenario_on, sigkill_the_first_and_restart, tally, upstream_sim,
};

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
        sigkill_the_first_and_restart,
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

/// The only gateway, on the disk store, SIGKILLed mid-run and restarted: its done
/// records are in the journal (fsynced before each 2xx) and not yet in the database
/// file, whose last checkpoint is up to a second old. The restart replays them: every
/// copy after a 2xx is a duplicate, and no acknowledged event is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_only_gateway_on_the_disk_store_is_sigkilled_and_restarted() {
    scenario_on(
        "the only gateway, on the disk store, SIGKILLed mid-run and restarted",
        Faults {
            fail: 0.1,
            ..Faults::default()
        },
        1000,
        1,
        true,
        sigkill_the_first_and_restart,
    )
    .await;
}
