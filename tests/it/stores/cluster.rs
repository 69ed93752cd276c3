//! Redis Cluster: the store contract holds on a three-primary cluster, across the loss
//! of a primary (its replica promoted) and across a reshard (MOVED/ASK followed), and
//! concurrent copies are forwarded once through several gateways sharing it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use hookgate::store::{Claim, DedupKey, DedupStore, RedisStore, Store};

use crate::support::redis::RedisCluster;
use crate::support::{TestGateway, Upstream, post, stripe_body};

fn cluster_config(cluster: &RedisCluster, upstream: &Upstream) -> String {
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "[store]\nbackend = \"redis\"\ncluster = [{}]\ntimeout = \"1s\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
        nodes.join(", "),
        upstream.url("/up")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_contract_holds_on_a_cluster_and_across_a_failover() {
    let mut cluster = RedisCluster::start();
    let store = Store::Redis(
        RedisStore::new_cluster(&cluster.urls(), Duration::from_secs(1)).expect("store"),
    );
    crate::stores::dedup_conformance::conformance(store.clone()).await;

    // Keys spread over every primary; fifty concurrent claims of one key still pick one.
    let store = Arc::new(store);
    let key = DedupKey::new("hookgate:", "stripe", "evt_cluster_race");
    let claims = join_all((0..50).map(|_| {
        let (s, k) = (store.clone(), key.clone());
        async move { s.claim(&k, "fp", Duration::from_secs(30)).await }
    }))
    .await;
    assert_eq!(
        claims
            .iter()
            .filter(|c| matches!(c, Ok(Claim::Claimed(_))))
            .count(),
        1
    );

    // Record an event as done, then kill the primary that holds it: once its replica
    // is promoted, the store answers again, and the event is still done.
    let done = DedupKey::new("hookgate:", "stripe", "evt_failover");
    let Ok(Claim::Claimed(token)) = store.claim(&done, "fp", Duration::from_secs(30)).await else {
        panic!("claim");
    };
    store
        .complete(&done, &token, "fp", Duration::from_secs(300))
        .await
        .expect("complete");
    // Replication is asynchronous (the window `min_replicas_ack` narrows on a single
    // primary): wait until the replica holds the done record, then lose the primary.
    let key = done.as_str().to_owned();
    let cluster_ref = &cluster;
    tokio::task::block_in_place(|| cluster_ref.wait_replicated(&key, "d|"));
    let primary = cluster.primary_of(done.as_str());
    cluster.kill(primary);
    let key = done.as_str().to_owned();
    let (cluster, promoted) = tokio::task::spawn_blocking(move || {
        let p = cluster.wait_failover(&key, primary);
        (cluster, p)
    })
    .await
    .expect("failover");
    assert_ne!(promoted, primary);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut answer = None;
    while std::time::Instant::now() < deadline {
        if let Ok(c) = store.claim(&done, "fp", Duration::from_secs(30)).await {
            answer = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        answer,
        Some(Claim::Done {
            fingerprint: "fp".into()
        }),
        "after the failover the promoted replica still knows the event is done"
    );
    for i in 0..20 {
        let k = DedupKey::new("hookgate:", "stripe", &format!("evt_after_{i}"));
        assert!(matches!(
            store.claim(&k, "fp", Duration::from_secs(30)).await,
            Ok(Claim::Claimed(_))
        ));
    }
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_one_cluster_forward_each_event_once() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(200));
    let cfg = cluster_config(&cluster, &up);
    let gateways = vec![
        TestGateway::start(&cfg).await,
        TestGateway::start(&cfg).await,
        TestGateway::start(&cfg).await,
    ];
    for e in 0..10 {
        let body = stripe_body(&format!("evt_three_{e}"));
        let headers = gateways[0].sign("stripe", &body, "x");
        let sends = (0..12).map(|i| {
            let url = gateways[i % 3].url("/webhooks/stripe");
            let (h, b) = (headers.clone(), body.clone());
            async move { post(&url, &h, b.into_bytes()).await }
        });
        let replies = join_all(sends).await;
        let forwarded = replies
            .iter()
            .filter(|r| r.outcome() == "forwarded")
            .count();
        assert!(forwarded <= 1, "event {e}: {forwarded} copies forwarded");
        // A store call that timed out on a loaded machine is 503: the retry comes as
        // the provider's would, until the claim it may have left expires
        // (`inflight_ttl`, 30 s) or its forward is done.
        assert!(
            replies.iter().all(|r| matches!(
                r.outcome(),
                "forwarded" | "duplicate" | "in_flight" | "store_error"
            )),
            "{replies:?}"
        );
        if forwarded == 0 {
            let url = gateways[e % 3].url("/webhooks/stripe");
            let mut settled = false;
            for _ in 0..450 {
                let r = post(&url, &headers, body.clone().into_bytes()).await;
                if matches!(r.outcome(), "forwarded" | "duplicate") {
                    settled = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(settled, "event {e}: never forwarded");
        }
        assert_eq!(up.count_for(&format!("evt_three_{e}")), 1);
    }
    for g in gateways {
        g.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_moved_by_a_reshard_are_followed_without_a_restart() {
    let cluster = RedisCluster::start();
    let store = Store::Redis(
        RedisStore::new_cluster(&cluster.urls(), Duration::from_secs(2)).expect("store"),
    );
    let keys: Vec<DedupKey> = (0..200)
        .map(|i| DedupKey::new("hookgate:", "stripe", &format!("evt_reshard_{i}")))
        .collect();
    for k in &keys {
        let Ok(Claim::Claimed(token)) = store.claim(k, "fp", Duration::from_secs(30)).await else {
            panic!("claim {k}");
        };
        store
            .complete(k, &token, "fp", Duration::from_secs(300))
            .await
            .expect("complete");
    }
    // Move a third of the slots of the first primary to another one while the store's
    // connections stay open: its next calls get MOVED (or ASK) and must follow them.
    let names: Vec<String> = keys.iter().map(|k| k.as_str().to_owned()).collect();
    let moved = tokio::task::spawn_blocking(move || {
        let before: Vec<u16> = names.iter().map(|k| cluster.primary_of(k)).collect();
        let n = cluster.reshard(3000);
        let changed = names
            .iter()
            .zip(before)
            .filter(|(k, p)| cluster.primary_of(k) != *p)
            .count();
        (cluster, n, changed)
    })
    .await
    .expect("reshard");
    let (cluster, slots, changed) = moved;
    assert_eq!(slots, 3000);
    assert!(changed > 0, "the reshard moved none of the keys");
    let mut done = 0;
    for k in &keys {
        match store.claim(k, "fp", Duration::from_secs(30)).await {
            Ok(Claim::Done { fingerprint }) if fingerprint == "fp" => done += 1,
            other => panic!("{k} after the reshard: {other:?}"),
        }
    }
    assert_eq!(done, keys.len());
    for i in 0..50 {
        let k = DedupKey::new("hookgate:", "stripe", &format!("evt_after_reshard_{i}"));
        assert!(matches!(
            store.claim(&k, "fp", Duration::from_secs(30)).await,
            Ok(Claim::Claimed(_))
        ));
    }
    drop(cluster);
}

/// The replica of the primary on `primary` (its port), from `CLUSTER NODES`.
fn replica_of(cluster: &RedisCluster, primary: u16) -> u16 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &primary.to_string(), "cluster", "nodes"])
        .output()
        .expect("cluster nodes");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let id_of = |port: u16| {
        text.lines()
            .find(|l| l.contains(&format!("127.0.0.1:{port}@")))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .expect("the node's ID")
    };
    let primary_id = id_of(primary);
    cluster
        .ports
        .iter()
        .copied()
        .find(|p| {
            text.lines().any(|l| {
                l.contains(&format!("127.0.0.1:{p}@"))
                    && l.split_whitespace().nth(3) == Some(primary_id.as_str())
            })
        })
        .expect("the primary has a replica")
}

/// Issue 34, 6: `min_replicas_ack` was refused on a cluster, so a done record could
/// reach a primary and not its replica before a failover. On a cluster `WAIT` runs in
/// the write's pipeline, on the connection to the primary that owns the key: with the
/// replica of that primary frozen, the write fails (503 to the provider, never a 2xx
/// resting on the primary alone); once it runs again, the same delivery is forwarded
/// and its copy is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_ack_waits_for_the_replica_of_the_keys_primary_on_a_cluster() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let config = cluster_config(&cluster, &up).replace(
        "timeout = \"1s\"\n",
        "timeout = \"1s\"\nmin_replicas_ack = 1\nreplica_ack_timeout = \"200ms\"\n",
    );
    let gw = TestGateway::start(&config).await;
    let id = "evt_cluster_wait";
    let key = DedupKey::new("hookgate:", "stripe", id);
    let primary = cluster.primary_of(key.as_str());
    let replica = replica_of(&cluster, primary);
    // Its pid, read while it runs (a frozen server answers nothing).
    let info = std::process::Command::new("redis-cli")
        .args(["-p", &replica.to_string(), "info", "server"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .map(|p| p.trim().to_owned())
        .expect("the replica's pid");
    let stop = |sig: &str| {
        let _ = std::process::Command::new("kill")
            .args([sig, &pid])
            .status();
    };
    stop("-STOP");
    let r = gw.deliver("stripe", &stripe_body(id), id).await;
    stop("-CONT");
    assert_eq!(r.status, 503, "no replica acknowledged: {}", r.body);
    let mut forwarded = None;
    for _ in 0..100 {
        // 503 while refused, `in_flight` until the refused claim is released.
        let r = gw.deliver("stripe", &stripe_body(id), id).await;
        if r.status != 503 && r.outcome() != "in_flight" {
            forwarded = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let forwarded = forwarded.expect("an answer once the replica runs");
    assert!(
        matches!(forwarded.outcome(), "forwarded" | "duplicate"),
        "{}",
        forwarded.body
    );
    let copy = gw.deliver("stripe", &stripe_body(id), id).await;
    assert_eq!(copy.outcome(), "duplicate", "{}", copy.body);
    gw.stop().await;
    drop(cluster);
}
