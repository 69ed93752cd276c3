//! A backlog drained into each kind: 1 000 events (`HOOKGATE_DRAIN_EVENTS` to change it)
//! queued while the destination's server is down (a disk store, the default
//! concurrency), then the server comes back and every event must reach it once. The
//! time the drain took is printed as events/s: docs/performance.md's rows per kind
//! come from a release run of these (`HOOKGATE_DRAIN_EVENTS=20000 cargo test --release
//! --test it destinations::drain -- --nocapture --test-threads 1`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::sink::{Kind, Sink};
use crate::support::TestGateway;

/// The backlog's size: 1 000 unless `HOOKGATE_DRAIN_EVENTS` says otherwise.
fn events() -> usize {
    std::env::var("HOOKGATE_DRAIN_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

async fn drains_once(kind: Kind) {
    let total = events();
    let mut sink = Sink::start(kind).await;
    let dir = tempfile::tempdir().expect("dir");
    // The queue route of the kinds' tests, retried quickly (the drain starts within
    // one retry of the server's return) and never dead while the server is down.
    let cfg = super::kinds::config(&sink, dir.path(), "").replace(
        super::kinds::FAST,
        r#"{ max_attempts = 100000, initial = "20ms", max_delay = "40ms", max_age = "1h" }"#,
    );
    sink.stop();
    let gw = TestGateway::start(&cfg).await;
    let ids: Vec<String> = (0..total).map(|i| format!("evt_drain_{i}")).collect();
    let bodies: Vec<String> = ids
        .iter()
        .map(|id| super::kinds::event(id, "cus_1"))
        .collect();
    for (chunk, bodies) in ids.chunks(50).zip(bodies.chunks(50)) {
        let sends = chunk
            .iter()
            .zip(bodies)
            .map(|(id, body)| gw.deliver("stripe", body, id));
        for r in futures_util::future::join_all(sends).await {
            assert_eq!(r.outcome(), "queued", "{}", r.body);
        }
    }
    sink.restart();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    loop {
        let held = sink.count().await;
        if held >= total {
            break;
        }
        assert!(Instant::now() < deadline, "{held} of {total} drained");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    gw.stop().await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for id in sink.ids().await {
        *counts.entry(id).or_insert(0) += 1;
    }
    assert_eq!(counts.len(), total, "every event once");
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    if kind != Kind::Amqp {
        assert!(repeated.is_empty(), "{repeated:?}");
    }
    eprintln!(
        "{kind:?}: {total} events drained in {:.2} s: {:.0} events/s ({} repeated)",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64(),
        repeated.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_drains_a_backlog_once() {
    drains_once(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_drains_a_backlog_once() {
    drains_once(Kind::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_drains_a_backlog_once() {
    drains_once(Kind::Amqp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stream_drains_a_backlog_once() {
    drains_once(Kind::RedisStream).await;
}
