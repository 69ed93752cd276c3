//! What a gateway leaves to the next when its queue routes change hands: events it
//! leased but did not send are given back at once when it stops, and a copy of an
//! event still queued is a duplicate after a reload switches its route back to sync.
//! In-process gateways on the disk store and on a real Redis.

use std::time::Duration;

use crate::support::{TestGateway, Upstream, eventually, stripe_config};

/// Issue 34, 7: events a worker had leased but not sent were dropped while leased —
/// the rest of a batch, or an attempt waiting for its rate slot when the gateway
/// stopped — so they waited out a whole lease (`upstream_timeout` and a margin)
/// before anyone took them. They are given back at once: with a 40 s lease, a second
/// gateway on the same Redis delivers them well before it could have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_leased_but_not_sent_are_given_back_at_once() {
    let redis = crate::support::RedisServer::start();
    let up = Upstream::start().await;
    let store = format!(
        "[server]\nshutdown_grace = \"2s\"\n[store]\nbackend = \"redis\"\nurl = \"{}\"\n",
        redis.url()
    );
    // One delivery a minute: the first event goes, the rest of the batch waits for
    // its rate slot, leased.
    let route =
        "delivery = \"queue\"\nrate_limit = \"1/m\"\nconcurrency = 8\nupstream_timeout = \"40s\"";
    let first = TestGateway::start(&stripe_config(&up, &store, route)).await;
    let ids: Vec<String> = (0..5).map(|i| format!("evt_given_back_{i}")).collect();
    for id in &ids {
        let r = first
            .deliver("stripe", &crate::support::stripe_body(id), id)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(
        eventually(Duration::from_secs(10), || up.count() == 1).await,
        "the first event is delivered"
    );
    first.stop().await;
    let started = std::time::Instant::now();
    let unlimited = "delivery = \"queue\"\nconcurrency = 8\nupstream_timeout = \"40s\"";
    let second = TestGateway::start(&stripe_config(&up, &store, unlimited)).await;
    // Well within the 40 s lease.
    let delivered = eventually(Duration::from_secs(20), || {
        ids.iter().all(|id| up.count_for(id) >= 1)
    })
    .await;
    eprintln!(
        "delivered by the second gateway after {:?}: {delivered}",
        started.elapsed()
    );
    assert!(delivered, "the leased events were given back");
    for id in &ids {
        assert_eq!(up.count_for(id), 1, "{id} delivered once");
    }
    second.stop().await;
}

/// Issue 34, 3: a reload that switched a queue route back to sync forwarded a copy of
/// an event still queued, and the queue then delivered it again (on disk once the
/// event had been queued longer than `dedup_ttl`, on Redis within it). A sync claim
/// sees the queue's record of the event: the copy is answered `duplicate`.
async fn a_copy_after_a_switch_to_sync_is_a_duplicate(store: &str, wait_past_ttl: bool) {
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    let store = store.replace("DIR", &dir.path().display().to_string());
    let retry = r#"{ max_attempts = 50, initial = "200ms", max_delay = "200ms", max_age = "1h" }"#;
    // The shortest window the config allows: twice a one-second tolerance.
    let queued = stripe_config(
        &up,
        &format!("{store}dedup_ttl = \"2s\"\n"),
        &format!("tolerance = \"1s\"\ndelivery = \"queue\"\nretry = {retry}\nbreaker = false"),
    );
    std::fs::write(&path, &queued).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let ids: Vec<String> = (0..3).map(|i| format!("evt_switch_{i}")).collect();
    for id in &ids {
        let r = gw
            .deliver("stripe", &crate::support::stripe_body(id), id)
            .await;
        assert_eq!(r.outcome(), "queued", "{}", r.body);
    }
    // Attempted, and failing: the events wait in the queue.
    assert!(
        eventually(Duration::from_secs(10), || ids
            .iter()
            .all(|id| up.count_for(id) >= 1))
        .await
    );
    if wait_past_ttl {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let sync = queued
        .replace("delivery = \"queue\"\n", "")
        .replace(&format!("retry = {retry}"), "")
        .replace("breaker = false", "");
    std::fs::write(&path, sync).expect("write");
    let (status, body) = crate::queue::delivery::admin(&gw, "POST", "/reload").await;
    assert_eq!(status, 200, "{body}");
    up.set_status(200);
    for id in &ids {
        let r = gw
            .deliver("stripe", &crate::support::stripe_body(id), id)
            .await;
        assert_eq!(
            r.outcome(),
            "duplicate",
            "{id}, a copy after the switch: {}",
            r.body
        );
    }
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "the queue delivers each"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in &ids {
        assert_eq!(up.effects_for(id), 1, "{id} delivered once");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_after_a_switch_to_sync_is_a_duplicate_on_disk() {
    let store = "[store]\nbackend = \"disk\"\npath = \"DIR/hookgate.db\"\n";
    a_copy_after_a_switch_to_sync_is_a_duplicate(store, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_after_a_switch_to_sync_is_a_duplicate_on_redis() {
    let redis = crate::support::RedisServer::start();
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", redis.url());
    a_copy_after_a_switch_to_sync_is_a_duplicate(&store, false).await;
}
