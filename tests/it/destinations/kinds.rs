//! Every kind of destination beyond HTTP, each against its real server: copies of one
//! delivery (one after another, and at once) leave one row, message or entry, on a
//! queue route and on a sync route; the server stopped mid-run and started again
//! loses nothing and duplicates nothing; per-key order holds; what the server holds
//! carries the forwarded headers and the body as it came.

use std::collections::HashMap;
use std::time::Duration;

use super::sink::{Kind, Sink};
use crate::queue::delivery::admin;
use crate::support::TestGateway;

pub(super) const FAST: &str =
    r#"{ max_attempts = 200, initial = "50ms", max_delay = "300ms", max_age = "1h" }"#;

/// A Stripe queue route on a disk store in `dir` delivering into `sink`, and a sync
/// route (`stripe_sync`) delivering into it too.
pub(super) fn config(sink: &Sink, dir: &std::path::Path, route_extra: &str) -> String {
    let kind = sink.toml();
    format!(
        r#"[server]
shutdown_grace = "2s"
[store]
backend = "disk"
path = "{}"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream_timeout = "3s"
retry = {FAST}
{route_extra}
[[routes.destinations]]
name = "ledger"
{kind}
[[routes]]
name = "stripe_sync"
path = "/webhooks/stripe-sync"
provider = "stripe"
secrets = ["whsec_test"]
upstream_timeout = "3s"
{kind}
"#,
        dir.join("hookgate.db").display()
    )
}

pub(super) fn event(id: &str, customer: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"customer":"{customer}"}}}}}}"#
    )
}

/// Waits until every event of the queue route is delivered (so no attempt is still to
/// come), and returns how many copies of each event ID the server holds.
async fn settled(gw: &TestGateway, sink: &Sink, expected: &[String]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    let mut all_there = false;
    for _ in 0..600 {
        let (_, list) = admin(gw, "GET", "/events/stripe?limit=1000").await;
        let undelivered = list["events"].as_array().map_or(usize::MAX, |e| {
            e.iter().filter(|e| e["state"] != "delivered").count()
        });
        counts = HashMap::new();
        for id in sink.ids().await {
            *counts.entry(id).or_insert(0) += 1;
        }
        all_there = expected.iter().all(|id| counts.contains_key(id));
        if undelivered == 0 && all_there {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(all_there, "not every event reached the server: {counts:?}");
    counts
}

async fn copies_leave_one(kind: Kind) {
    let sink = Sink::start(kind).await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&sink, dir.path(), "")).await;
    let one = "evt_copy_one".to_owned();
    for round in 0..3 {
        let r = gw.deliver("stripe", &event(&one, "cus_1"), &one).await;
        let want = if round == 0 { "queued" } else { "duplicate" };
        assert_eq!(r.outcome(), want, "{}", r.body);
    }
    let many = "evt_copy_many".to_owned();
    let body = event(&many, "cus_1");
    let copies = (0..6).map(|_| gw.deliver("stripe", &body, &many));
    let answers = futures_util::future::join_all(copies).await;
    assert!(answers.iter().all(|r| r.status == 200), "{answers:?}");
    // The sync route: the provider waits for the server's commit.
    let sync = "evt_copy_sync".to_owned();
    let body = event(&sync, "cus_2");
    let copies = (0..4).map(|_| gw.deliver("stripe_sync", &body, &sync));
    let answers = futures_util::future::join_all(copies).await;
    let delivered: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    if delivered.is_empty() {
        let (_, shown) = admin(&gw, "GET", &format!("/events/stripe/{one}")).await;
        panic!("{answers:?}\n{shown}");
    }
    let again = gw.deliver("stripe_sync", &body, &sync).await;
    assert_eq!(again.outcome(), "duplicate", "{}", again.body);
    let counts = settled(&gw, &sink, &[one.clone(), many.clone(), sync.clone()]).await;
    for id in [&one, &many, &sync] {
        assert_eq!(counts.get(id), Some(&1), "{id} held {counts:?}");
    }
    // What the server holds: the body as it came, the forwarded headers.
    let held = sink.held().await;
    let first = held.iter().find(|h| h.event_id == one).expect("held");
    assert_eq!(first.body, event(&one, "cus_1").into_bytes());
    assert_eq!(first.header("idempotency-key"), Some(one.as_str()));
    assert_eq!(first.header("hookgate-route"), Some("stripe"));
    assert_eq!(first.header("hookgate-event-type"), Some("invoice.paid"));
    assert!(first.header("stripe-signature").is_some(), "{first:?}");
    // On a broker the names are the ones consumers look for, written as HTTP writes them.
    if matches!(kind, Kind::Nats | Kind::Amqp) {
        for name in ["Idempotency-Key", "Hookgate-Route", "Hookgate-Event-Type"] {
            assert!(
                first.headers.iter().any(|(n, _)| n == name),
                "{name}: {first:?}"
            );
        }
    }
    // The attempt's record names the kind and what the server said.
    let (status, shown) = admin(&gw, "GET", &format!("/events/stripe/{one}")).await;
    assert_eq!(status, 200, "{shown}");
    let text = shown.to_string();
    assert!(text.contains("\"receipt\""), "{text}");
    gw.stop().await;
}

async fn a_restart_of_the_server_loses_nothing(kind: Kind) -> usize {
    restarted(kind, false).await
}

/// Events queued, the server stopped (or SIGKILLed, with `kill`) once some reached it,
/// more queued while it is down, the server started again: every event reaches it.
/// Returns how many reached it twice.
async fn restarted(kind: Kind, kill: bool) -> usize {
    let mut sink = Sink::start(kind).await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&sink, dir.path(), "")).await;
    let ids: Vec<String> = (0..30).map(|i| format!("evt_restart_{i}")).collect();
    for id in &ids[..10] {
        assert_eq!(
            gw.deliver("stripe", &event(id, "cus_1"), id)
                .await
                .outcome(),
            "queued"
        );
    }
    let mut first_ten = false;
    for _ in 0..300 {
        if sink.ids().await.len() >= 10 {
            first_ten = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(first_ten, "the first events never reached the server");
    if kill {
        sink.kill();
    } else {
        sink.stop();
    }
    for id in &ids[10..] {
        assert_eq!(
            gw.deliver("stripe", &event(id, "cus_1"), id)
                .await
                .outcome(),
            "queued"
        );
    }
    // While it is down the events wait, failed attempts and all.
    let mut failing = false;
    for _ in 0..300 {
        let (_, l) = admin(&gw, "GET", "/events/stripe?state=retrying").await;
        if l["events"].as_array().is_some_and(|e| !e.is_empty()) {
            failing = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(failing, "no attempt failed while the server was down");
    sink.restart();
    let counts = settled(&gw, &sink, &ids).await;
    gw.stop().await;
    let repeated: usize = counts.values().map(|n| n - 1).sum();
    assert_eq!(counts.len(), ids.len(), "{counts:?}");
    repeated
}

async fn per_key_order_holds(kind: Kind) {
    let sink = Sink::start(kind).await;
    let dir = tempfile::tempdir().expect("dir");
    let cfg = config(&sink, dir.path(), "").replace(
        "name = \"ledger\"\n",
        "name = \"ledger\"\norder_by = \"json:/data/object/customer\"\nconcurrency = 8\n",
    );
    let gw = TestGateway::start(&cfg).await;
    let mut sent: HashMap<String, Vec<String>> = HashMap::new();
    let mut all = Vec::new();
    for i in 0..15 {
        for c in ["cus_a", "cus_b", "cus_c"] {
            let id = format!("evt_order_{c}_{i}");
            assert_eq!(
                gw.deliver("stripe", &event(&id, c), &id).await.outcome(),
                "queued"
            );
            sent.entry(c.to_owned()).or_default().push(id.clone());
            all.push(id);
        }
    }
    settled(&gw, &sink, &all).await;
    let held = sink.ids().await;
    for (c, ids) in &sent {
        let order: Vec<&String> = held.iter().filter(|id| id.contains(c.as_str())).collect();
        let want: Vec<&String> = ids.iter().collect();
        assert_eq!(order, want, "{c}'s events out of order");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_copies_leave_one_row() {
    copies_leave_one(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_copies_leave_one_message() {
    copies_leave_one(Kind::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_copies_leave_one_message() {
    copies_leave_one(Kind::Amqp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stream_copies_leave_one_entry() {
    copies_leave_one(Kind::RedisStream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_loses_and_repeats_nothing() {
    assert_eq!(
        a_restart_of_the_server_loses_nothing(Kind::Postgres).await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restarted_loses_and_repeats_nothing() {
    assert_eq!(a_restart_of_the_server_loses_nothing(Kind::Nats).await, 0);
}

/// RabbitMQ keeps no record of message IDs: a publish whose confirm was lost in the
/// stop is published again. Nothing is lost; the repeats are counted (docs/queue.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_restarted_loses_nothing() {
    let repeated = a_restart_of_the_server_loses_nothing(Kind::Amqp).await;
    eprintln!("amqp: {repeated} message(s) published again after the broker's restart");
}

/// The broker SIGKILLed mid-run: publishes whose confirms it never sent are published
/// again. Nothing is lost; the repeats are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_killed_loses_nothing() {
    let repeated = restarted(Kind::Amqp, true).await;
    eprintln!("amqp: {repeated} message(s) published again after the broker was killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stream_restarted_loses_and_repeats_nothing() {
    assert_eq!(
        a_restart_of_the_server_loses_nothing(Kind::RedisStream).await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_per_key_order() {
    per_key_order_holds(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_keeps_per_key_order() {
    per_key_order_holds(Kind::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_keeps_per_key_order() {
    per_key_order_holds(Kind::Amqp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stream_keeps_per_key_order() {
    per_key_order_holds(Kind::RedisStream).await;
}

/// A server that is there but cannot take the event (no inbox table, no stream for the
/// subject, no queue bound for the routing key) refuses each attempt, with a reason;
/// the event waits, and goes in once the operator has fixed the server.
async fn a_server_without_its_place_refuses_until_fixed(kind: Kind) {
    let sink = Sink::start_bare(kind).await;
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&config(&sink, dir.path(), "")).await;
    let id = "evt_refused".to_owned();
    assert_eq!(
        gw.deliver("stripe", &event(&id, "cus_1"), &id)
            .await
            .outcome(),
        "queued"
    );
    let mut refused = serde_json::Value::Null;
    for _ in 0..300 {
        let (_, shown) = admin(&gw, "GET", &format!("/events/stripe/{id}")).await;
        if shown["history"].as_array().is_some_and(|h| !h.is_empty()) {
            refused = shown;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = &refused["history"][0];
    assert_eq!(last["result"], "refused", "{refused}");
    assert_eq!(last["kind"], sink.kind_name(), "{refused}");
    assert!(
        last["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{refused}"
    );
    // The sync route answers 502: the provider tries again later.
    let sync = "evt_refused_sync".to_owned();
    let r = gw
        .deliver("stripe_sync", &event(&sync, "cus_1"), &sync)
        .await;
    assert_eq!(r.status, 502, "{}", r.body);
    sink.prepare().await;
    let counts = settled(&gw, &sink, std::slice::from_ref(&id)).await;
    assert_eq!(counts.get(&id), Some(&1), "{counts:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_the_inbox_table_refuses_until_it_is_made() {
    a_server_without_its_place_refuses_until_fixed(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_without_a_stream_refuses_until_one_captures_the_subject() {
    a_server_without_its_place_refuses_until_fixed(Kind::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_unroutable_is_refused_not_dropped() {
    a_server_without_its_place_refuses_until_fixed(Kind::Amqp).await;
}

/// `/readyz` and `/overview` report each destination's server, reachable or not, and
/// a server that goes down never makes the gateway unready; its password is never
/// shown, there or in `hookgate check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_each_server_and_a_down_one_keeps_the_gateway_ready() {
    let mut sink = Sink::start(Kind::Postgres).await;
    let dir = tempfile::tempdir().expect("dir");
    // A password in the URL (trust auth ignores it): it must never be shown.
    let cfg = config(&sink, dir.path(), "").replace("@127.0.0.1:", ":hunter2@127.0.0.1:");
    assert!(cfg.contains(":hunter2@"), "{cfg}");
    let gw = TestGateway::start(&cfg).await;
    let ready = |gw: &TestGateway| {
        let url = gw.admin_url("/readyz");
        async move { crate::support::send("GET", &url, &[], Vec::new()).await }
    };
    let mut body = serde_json::Value::Null;
    for _ in 0..300 {
        let r = ready(&gw).await;
        assert!(!r.body.contains("hunter2"), "{}", r.body);
        body = serde_json::from_str(&r.body).unwrap_or_default();
        if body["destinations"][0]["reachable"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body["destinations"][0]["reachable"], true, "{body}");
    assert_eq!(body["destinations"][0]["kind"], "postgres", "{body}");
    assert!(
        body["destinations"][0]["target"]
            .as_str()
            .is_some_and(|t| t.contains("[redacted]")),
        "{body}"
    );
    sink.stop();
    let mut down = false;
    for _ in 0..300 {
        let r = ready(&gw).await;
        assert_eq!(
            r.status, 200,
            "a destination down keeps the gateway ready: {}",
            r.body
        );
        let b: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
        if b["destinations"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["reachable"] == false))
        {
            assert!(!r.body.contains("hunter2"), "{}", r.body);
            down = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(down, "the stopped server was never reported unreachable");
    let (_, overview) = admin(&gw, "GET", "/overview").await;
    let text = overview.to_string();
    assert!(
        text.contains("\"kind\":\"postgres\"") && !text.contains("hunter2"),
        "{text}"
    );
    gw.stop().await;
    // `hookgate check` names the kind and redacts the URL's credentials.
    let file = dir.path().join("hookgate.toml");
    std::fs::write(&file, &cfg).expect("write config");
    let out = std::process::Command::new(crate::process::binary::BIN)
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .expect("run check");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains("postgres") && printed.contains("[redacted]"),
        "{printed}"
    );
    assert!(!printed.contains("hunter2"), "{printed}");
}
