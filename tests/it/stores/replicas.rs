//! `min_replicas_ack` on a primary with one replica: no copy of an event is answered
//! 2xx before a replica holds what answers it, on queue routes and on sync routes, and
//! an event acknowledged that way survives the replica's promotion.

use std::time::Duration;

use hookgate::store::redis::RedisOptions;
use hookgate::store::{Claim, DedupKey, DedupStore, RedisStore, Store};

use crate::support::{
    RedisServer, TestGateway, Upstream, eventually, store_toml, stripe_body, stripe_config,
};

const WAIT: &str = "min_replicas_ack = 1\nreplica_ack_timeout = \"200ms\"";

/// The replica is frozen (SIGSTOP): the first copy is refused (503) and stays stored on
/// the primary; the provider's retry must be refused too, not answered `duplicate`,
/// until the replica holds the event. Then the primary is lost, the replica promoted,
/// and the event is delivered from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_copy_is_acknowledged_only_once_a_replica_holds_the_event() {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let up = Upstream::start().await;
    // The destination is down while the primary serves: what the promoted replica
    // holds is what gets delivered.
    up.set_status(500);
    let route = "delivery = \"queue\"\nretry = { initial = \"100ms\", max_delay = \"300ms\" }";
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(Some(&primary), WAIT),
        route,
    ))
    .await;
    let id = "evt_promoted";
    let body = stripe_body(id);

    replica.signal("STOP");
    let first = gw.deliver("stripe", &body, id).await;
    eprintln!(
        "replica frozen, first copy: {} {} {}",
        first.status,
        first.outcome(),
        first.body
    );
    assert_eq!(first.status, 503, "no replica acknowledged the event");
    let retry = gw.deliver("stripe", &body, id).await;
    eprintln!(
        "replica frozen, retry: {} {} {}",
        retry.status,
        retry.outcome(),
        retry.body
    );
    assert_eq!(
        retry.status, 503,
        "a copy of an event no replica holds must not be acknowledged"
    );

    replica.signal("CONT");
    let mut answer = None;
    assert!(
        eventually_async(Duration::from_secs(10), async || {
            let r = gw.deliver("stripe", &body, id).await;
            let ok = r.status == 200;
            answer = Some(r);
            ok
        })
        .await,
        "the retry is acknowledged once the replica is back: {answer:?}"
    );
    let answer = answer.expect("an answer");
    eprintln!(
        "replica resumed, retry: {} {} {}",
        answer.status,
        answer.outcome(),
        answer.body
    );
    assert_eq!(answer.outcome(), "duplicate");
    assert_eq!(
        up.effects_for(id),
        0,
        "not delivered while the primary served"
    );
    gw.stop().await;

    // The primary is lost; the replica becomes the primary and a gateway serves from it.
    primary.stop();
    let _: () = replica.cmd(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    up.set_status(200);
    let gw = TestGateway::start(&stripe_config(&up, &store_toml(Some(&replica), ""), route)).await;
    assert!(
        eventually(Duration::from_secs(20), || up.effects_for(id) == 1).await,
        "the promoted replica delivers the event"
    );
    let copy = gw.deliver("stripe", &body, id).await;
    eprintln!(
        "after the promotion, a copy: {} {}",
        copy.status,
        copy.outcome()
    );
    assert_eq!(copy.outcome(), "duplicate");
    gw.stop().await;
}

/// Sync routes: a done record whose write no replica acknowledged keeps the settle step
/// going, and a copy that finds it is refused until a replica holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_copy_is_acknowledged_only_once_a_replica_holds_the_done_record() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let opts = RedisOptions {
        min_replicas_ack: Some(1),
        // Long enough for a replica on a loaded machine; the frozen one never answers.
        replica_ack_timeout: Duration::from_secs(1),
        ..RedisOptions::default()
    };
    let store = Store::Redis(
        RedisStore::with_options(&primary.url(), Duration::from_secs(3), &opts).expect("store"),
    );
    let key = DedupKey::new("t:", "r", "evt_sync_copy");
    let token = match store.claim(&key, "fp", Duration::from_secs(30)).await {
        Ok(Claim::Claimed(token)) => token,
        other => panic!("the claim reaches the replica: {other:?}"),
    };

    replica.signal("STOP");
    let completed = store
        .complete(&key, &token, "fp", Duration::from_secs(600))
        .await;
    eprintln!("replica frozen, complete: {completed:?}");
    assert!(
        completed.is_err(),
        "a done record no replica holds is not settled yet"
    );
    let copy = store.claim(&key, "fp", Duration::from_secs(30)).await;
    eprintln!("replica frozen, a copy's claim: {copy:?}");
    assert!(
        copy.is_err(),
        "a copy is not answered from a done record no replica holds"
    );

    replica.signal("CONT");
    let mut copy = None;
    assert!(
        eventually_async(Duration::from_secs(10), async || {
            let c = store.claim(&key, "fp", Duration::from_secs(30)).await;
            let ok = c.is_ok();
            copy = Some(c);
            ok
        })
        .await
    );
    eprintln!("replica resumed, a copy's claim: {copy:?}");
    assert_eq!(
        copy.and_then(Result::ok),
        Some(Claim::Done {
            fingerprint: "fp".into()
        })
    );
    let on_replica: Option<String> = replica.cmd(redis::cmd("GET").arg(key.as_str()));
    assert!(
        on_replica.is_some_and(|v| v.starts_with("d|")),
        "the replica holds the done record"
    );
}

/// Polls an async condition until it holds or `limit` passes.
async fn eventually_async(limit: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Issue 34, 6: unset, `min_replicas_ack` follows the topology. On a primary with a
/// replica, claims wait for it (frozen: refused 503, nothing forwarded; running again:
/// forwarded); `min_replicas_ack = 0` turns that off; a primary alone waits for none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unset_min_replicas_ack_waits_for_the_replica_a_primary_has() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let up = Upstream::start().await;
    // Long enough for a running replica on a loaded machine; the frozen one never
    // answers, so a claim then waits it out and is refused.
    let ack_timeout = "replica_ack_timeout = \"2s\"\ntimeout = \"3s\"";
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(Some(&primary), ack_timeout),
        "",
    ))
    .await;
    let first = gw
        .deliver("stripe", &stripe_body("evt_auto_1"), "evt_auto_1")
        .await;
    assert_eq!((first.status, first.outcome()), (200, "forwarded"));

    replica.signal("STOP");
    let frozen = gw
        .deliver("stripe", &stripe_body("evt_auto_2"), "evt_auto_2")
        .await;
    eprintln!(
        "unset, replica frozen: {} {} {}",
        frozen.status,
        frozen.outcome(),
        frozen.body
    );
    assert_eq!(
        frozen.status, 503,
        "a claim no replica acknowledged is refused"
    );
    assert_eq!(up.effects_for("evt_auto_2"), 0, "nothing forwarded");

    // Turned off in the config: the frozen replica is not waited for.
    let off = TestGateway::start(&stripe_config(
        &up,
        &store_toml(
            Some(&primary),
            &format!("{ack_timeout}\nmin_replicas_ack = 0"),
        ),
        "",
    ))
    .await;
    let r = off
        .deliver("stripe", &stripe_body("evt_auto_3"), "evt_auto_3")
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));
    off.stop().await;

    replica.signal("CONT");
    let mut answer = None;
    assert!(
        eventually_async(Duration::from_secs(10), async || {
            let r = gw
                .deliver("stripe", &stripe_body("evt_auto_2"), "evt_auto_2")
                .await;
            let ok = r.status == 200;
            answer = Some(r);
            ok
        })
        .await,
        "forwarded once the replica is back: {answer:?}"
    );
    assert_eq!(up.effects_for("evt_auto_2"), 1);
    gw.stop().await;

    // A primary without a replica: nothing to wait for, nothing refused.
    let alone = RedisServer::start();
    let gw = TestGateway::start(&stripe_config(
        &up,
        &store_toml(Some(&alone), ack_timeout),
        "",
    ))
    .await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_auto_4"), "evt_auto_4")
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));
    gw.stop().await;
}
