//! `[telemetry] otlp`: the spans a gateway exports, as a collector decodes them with
//! the official protobuf definitions (support/otlp.rs): a sync delivery's span and its
//! stages', the `traceparent` the upstream gets, queue attempts joined to the
//! delivery that accepted them (across a restart too), nothing at all with telemetry
//! off, and a collector that is down or stalled costing deliveries nothing.

use std::time::{Duration, Instant};

use crate::support::otlp::{Collector, Span};
use crate::support::{TestGateway, Upstream, eventually, post, stripe_body, stripe_config};

/// `[telemetry]` naming the collector at `url`.
fn telemetry(url: &str) -> String {
    format!("\n[telemetry]\notlp = \"{url}\"\n")
}

/// The spans of the trace `trace_id`.
fn of_trace(collector: &Collector, trace_id: &str) -> Vec<Span> {
    collector
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == trace_id)
        .collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span: {spans:#?}");
    found[0]
}

/// The delivery span of `event_id`, once exported.
async fn delivery_of(collector: &Collector, event_id: &str) -> Span {
    let found = eventually(Duration::from_secs(10), || {
        collector
            .named("delivery")
            .iter()
            .any(|s| s.attr("hookgate.event_id") == event_id)
    })
    .await;
    assert!(
        found,
        "no delivery span for {event_id}: {:#?}",
        collector.spans()
    );
    collector
        .named("delivery")
        .into_iter()
        .find(|s| s.attr("hookgate.event_id") == event_id)
        .expect("delivery span")
}

/// A gateway with the Stripe sync route to a new upstream, exporting to `collector`.
async fn sync_gateway(collector: &Collector) -> (Upstream, TestGateway) {
    let up = Upstream::start().await;
    let cfg = stripe_config(&up, "", "") + &telemetry(&collector.url());
    let gw = TestGateway::start(&cfg).await;
    (up, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_delivery_exports_its_span_and_its_stages_and_the_upstream_continues_it() {
    let collector = Collector::start().await;
    let (up, gw) = sync_gateway(&collector).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_trace_sync"), "x")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);

    let delivery = delivery_of(&collector, "evt_trace_sync").await;
    let stages = ["verify", "claim", "forward", "settle"];
    assert!(
        eventually(Duration::from_secs(10), || {
            let spans = of_trace(&collector, &delivery.trace_id);
            stages.iter().all(|n| spans.iter().any(|s| s.name == *n))
        })
        .await,
        "{:#?}",
        collector.spans()
    );
    let spans = of_trace(&collector, &delivery.trace_id);
    // The provider sent no traceparent: the delivery is the root of a new trace.
    assert_eq!(delivery.parent_span_id, "", "{delivery:#?}");
    assert_eq!(delivery.kind, 2, "server");
    assert_eq!(delivery.service, "hookgate");
    assert_eq!(delivery.attr("hookgate.route"), "stripe");
    assert_eq!(delivery.attr("hookgate.delivery"), "sync");
    assert_eq!(delivery.attr("hookgate.outcome"), "forwarded");
    assert_eq!(
        delivery.attr("hookgate.event_type"),
        "payment_intent.succeeded"
    );
    assert_eq!(delivery.attr("http.response.status_code"), "200");
    for name in stages {
        let s = one(&spans, name);
        assert_eq!(s.parent_span_id, delivery.span_id, "{name}: {s:#?}");
        assert_eq!(s.status, 0, "{name} did not fail: {s:#?}");
    }
    assert_eq!(one(&spans, "claim").attr("hookgate.claim"), "claimed");
    assert_eq!(one(&spans, "settle").attr("hookgate.settle"), "complete");
    let forward = one(&spans, "forward");
    assert_eq!(forward.kind, 3, "client");
    assert_eq!(forward.attr("http.response.status_code"), "200");
    assert_eq!(forward.attr("hookgate.destination"), "stripe");
    // Nothing secret on any span: no signature, no secret, no body.
    for s in &spans {
        let all = format!("{:?}", s.attributes);
        assert!(
            !all.contains("whsec_test") && !all.contains("v1=") && !all.contains("amount"),
            "{s:#?}"
        );
    }

    // The upstream continues the trace from the forward span.
    let received = up.received();
    let tp = received[0].header("traceparent").expect("traceparent");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    assert_eq!(parts[1], delivery.trace_id, "{tp}");
    assert_eq!(parts[2], forward.span_id, "{tp}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_traceparent_is_the_delivery_spans_parent() {
    let collector = Collector::start().await;
    let (up, gw) = sync_gateway(&collector).await;
    let body = stripe_body("evt_trace_parent");
    let mut h = gw.sign("stripe", &body, "x");
    let sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    h.push(("traceparent".into(), sent.into()));
    let r = post(&gw.url("/webhooks/stripe"), &h, body.into_bytes()).await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let delivery = delivery_of(&collector, "evt_trace_parent").await;
    assert_eq!(delivery.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(delivery.parent_span_id, "00f067aa0ba902b7");
    // The upstream gets the provider's trace, continued from the gateway's spans.
    let tp = up.received()[0]
        .header("traceparent")
        .map(str::to_owned)
        .expect("traceparent");
    assert!(
        tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && !tp.contains("00f067aa0ba902b7"),
        "{tp}"
    );
    gw.stop().await;
}

/// A queue route on a disk store in `dir`, fast retries, exporting to `collector`.
fn queue_config(up: &Upstream, dir: &std::path::Path, collector: &Collector) -> String {
    crate::queue::delivery::queue_config(
        up,
        dir,
        r#"{ max_attempts = 50, initial = "50ms", max_delay = "200ms", max_age = "1h" }"#,
        "",
    ) + &telemetry(&collector.url())
}

/// The attempt spans of `event_id`.
fn attempts_of(collector: &Collector, event_id: &str) -> Vec<Span> {
    collector
        .named("attempt")
        .into_iter()
        .filter(|s| s.attr("hookgate.event_id") == event_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_attempts_join_and_link_the_delivery_that_accepted_them() {
    let collector = Collector::start().await;
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let gw = TestGateway::start(&queue_config(&up, dir.path(), &collector)).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_trace_queue"), "x")
        .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    // A failed attempt, then one delivered.
    assert!(eventually(Duration::from_secs(10), || up.count() >= 1).await);
    up.set_status(200);
    assert!(eventually(Duration::from_secs(10), || up.effects() >= 1).await);

    let delivery = delivery_of(&collector, "evt_trace_queue").await;
    assert_eq!(delivery.attr("hookgate.outcome"), "queued");
    assert_eq!(delivery.attr("hookgate.delivery"), "queue");
    assert!(
        eventually(Duration::from_secs(10), || {
            let a = attempts_of(&collector, "evt_trace_queue");
            a.iter().any(|s| s.attr("hookgate.next") == "delivered")
                && a.iter().any(|s| s.attr("hookgate.next") == "retry")
        })
        .await,
        "{:#?}",
        collector.spans()
    );
    let spans = of_trace(&collector, &delivery.trace_id);
    let enqueue = one(&spans, "enqueue");
    assert_eq!(enqueue.parent_span_id, delivery.span_id);
    assert_eq!(enqueue.attr("hookgate.enqueue"), "queued");
    let attempts = attempts_of(&collector, "evt_trace_queue");
    for a in &attempts {
        // In the delivery's trace, its child, and linked to it.
        assert_eq!(a.trace_id, delivery.trace_id, "{a:#?}");
        assert_eq!(a.parent_span_id, delivery.span_id, "{a:#?}");
        assert_eq!(a.kind, 5, "consumer");
        assert_eq!(a.links.len(), 1, "{a:#?}");
        assert_eq!(a.links[0].trace_id, delivery.trace_id);
        assert_eq!(a.links[0].span_id, delivery.span_id);
        assert_eq!(a.links[0].attributes["hookgate.link"], "accepted");
        assert_eq!(a.attr("hookgate.route"), "stripe");
        assert_eq!(a.attr("hookgate.destination"), "stripe");
        // Its forward and settle are its children.
        for name in ["forward", "settle"] {
            assert!(
                spans
                    .iter()
                    .any(|s| s.name == name && s.parent_span_id == a.span_id),
                "{name} of {a:#?}"
            );
        }
    }
    let failed = attempts
        .iter()
        .find(|s| s.attr("hookgate.next") == "retry")
        .expect("a failed attempt");
    assert_eq!(failed.attr("http.response.status_code"), "503");
    assert_eq!(failed.status, 2, "error");
    let delivered = attempts
        .iter()
        .find(|s| s.attr("hookgate.next") == "delivered")
        .expect("a delivered attempt");
    assert_eq!(delivered.attr("hookgate.result"), "delivered");
    // The handler continues the delivered attempt's forward.
    let forward = spans
        .iter()
        .find(|s| s.name == "forward" && s.parent_span_id == delivered.span_id)
        .expect("forward");
    let last = up.received().pop().expect("received");
    let tp = last.header("traceparent").expect("traceparent");
    assert_eq!(
        tp,
        format!("00-{}-{}-01", delivery.trace_id, forward.span_id),
        "{tp}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_after_a_restart_still_joins_the_trace_that_accepted_the_event() {
    let collector = Collector::start().await;
    let up = Upstream::start().await;
    up.set_status(503);
    // On Redis: a stopped in-process gateway may still hold a disk store's file lock
    // (the disk store's own attempts are above).
    let redis = crate::support::RedisServer::start();
    let cfg = stripe_config(
        &up,
        &crate::support::store_toml(Some(&redis), ""),
        "delivery = \"queue\"\nbreaker = false\nretry = { max_attempts = 50, initial = \"50ms\", max_delay = \"200ms\", max_age = \"1h\" }",
    ) + &telemetry(&collector.url());
    let gw = TestGateway::start(&cfg).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_trace_restart"), "x")
        .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    assert!(eventually(Duration::from_secs(10), || up.count() >= 1).await);
    // A graceful stop exports what it has (the delivery span among them).
    gw.stop().await;
    let delivery = delivery_of(&collector, "evt_trace_restart").await;

    // The record kept the accepting span's context: a new gateway on the same file
    // delivers the event in that trace.
    up.set_status(200);
    let gw = TestGateway::start(&cfg).await;
    assert!(eventually(Duration::from_secs(10), || up.effects() >= 1).await);
    assert!(
        eventually(Duration::from_secs(10), || {
            attempts_of(&collector, "evt_trace_restart")
                .iter()
                .any(|s| s.attr("hookgate.next") == "delivered")
        })
        .await
    );
    let delivered = attempts_of(&collector, "evt_trace_restart")
        .into_iter()
        .find(|s| s.attr("hookgate.next") == "delivered")
        .expect("delivered attempt");
    assert_eq!(delivered.trace_id, delivery.trace_id);
    assert_eq!(delivered.parent_span_id, delivery.span_id);
    assert_eq!(delivered.links.len(), 1);
    assert_eq!(delivered.links[0].span_id, delivery.span_id);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_off_sends_nothing_and_forwards_the_trace_context_as_before() {
    let collector = Collector::start().await;
    let up = Upstream::start().await;
    // A gateway with telemetry (so an export surely happens) beside one without.
    let on = TestGateway::start(&(stripe_config(&up, "", "") + &telemetry(&collector.url()))).await;
    let off = TestGateway::start(&stripe_config(&up, "", "")).await;
    let body = stripe_body("evt_trace_off");
    let mut h = off.sign("stripe", &body, "x");
    let sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    h.push(("traceparent".into(), sent.into()));
    let r = post(&off.url("/webhooks/stripe"), &h, body.into_bytes()).await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    // Off, the provider's traceparent goes on unchanged, and one is created when it
    // sent none.
    assert_eq!(up.received()[0].header("traceparent"), Some(sent));
    let r = off
        .deliver("stripe", &stripe_body("evt_trace_off2"), "x")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let created = up.received()[1]
        .header("traceparent")
        .map(str::to_owned)
        .expect("created");
    assert_eq!(created.len(), 55, "{created}");
    let r = on
        .deliver("stripe", &stripe_body("evt_trace_on"), "x")
        .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let _ = delivery_of(&collector, "evt_trace_on").await;
    off.stop().await;
    on.stop().await;
    assert!(
        collector
            .spans()
            .iter()
            .all(|s| !s.attr("hookgate.event_id").starts_with("evt_trace_off")),
        "{:#?}",
        collector.spans()
    );
}

/// A port that accepts connections and never answers: an export waits for its
/// timeout.
async fn stalled_collector() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_down_or_stalled_neither_slows_nor_fails_deliveries() {
    let up = Upstream::start().await;
    let down = format!("http://127.0.0.1:{}", crate::support::free_port());
    let (stalled, task) = stalled_collector().await;
    for (which, url) in [("down", down), ("stalled", stalled)] {
        let gw = TestGateway::start(&(stripe_config(&up, "", "") + &telemetry(&url))).await;
        let started = Instant::now();
        for i in 0..20 {
            let id = format!("evt_trace_{which}_{i}");
            let r = gw.deliver("stripe", &stripe_body(&id), "x").await;
            assert_eq!(r.outcome(), "forwarded", "{which}: {}", r.body);
        }
        // Twenty deliveries on loopback: far less than one export's timeout (10 s).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{which}: {:?}",
            started.elapsed()
        );
        if which == "down" {
            // The spans of the failed exports are counted.
            let mut failed = 0.0;
            for _ in 0..100 {
                failed = gw.metric("hookgate_spans_export_failed_total").await;
                if failed > 0.0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(failed > 0.0, "{which}");
        }
        // Stopping waits for the last export at most its bound.
        let stopping = Instant::now();
        gw.stop().await;
        assert!(
            stopping.elapsed() < Duration::from_secs(9),
            "{which}: {:?}",
            stopping.elapsed()
        );
    }
    task.abort();
}

/// The real binary, killed with `-9` while an event waits for its retry: the process
/// started after it delivers the event in the trace that accepted it (the disk
/// store's record kept it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_an_attempt_after_a_kill_9_and_a_restart_joins_the_accepting_trace() {
    use crate::process::binary::{Gateway, signed, write_config};
    let collector = Collector::start().await;
    let up = Upstream::start().await;
    up.set_status(503);
    let (port, admin) = (crate::support::free_port(), crate::support::free_port());
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n[store]\nbackend = \"disk\"\npath = \"state/hookgate.db\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\ndelivery = \"queue\"\nretry = {{ initial = \"100ms\", max_delay = \"300ms\" }}\nbreaker = false\n{}",
            up.url("/up"),
            telemetry(&collector.url())
        ),
    );
    let first = Gateway::spawn(&cfg, port);
    let body = stripe_body("evt_trace_kill");
    let r = post(&first.url("/s"), &signed(&cfg, &body), body.into_bytes()).await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    assert!(eventually(Duration::from_secs(10), || up.count() >= 1).await);
    let delivery = delivery_of(&collector, "evt_trace_kill").await;
    drop(first); // kill -9

    up.set_status(200);
    let _second = Gateway::spawn(&cfg, port);
    assert!(
        eventually(Duration::from_secs(15), || {
            attempts_of(&collector, "evt_trace_kill")
                .iter()
                .any(|s| s.attr("hookgate.next") == "delivered")
        })
        .await,
        "{:#?}",
        collector.spans()
    );
    let delivered = attempts_of(&collector, "evt_trace_kill")
        .into_iter()
        .find(|s| s.attr("hookgate.next") == "delivered")
        .expect("delivered attempt");
    assert_eq!(delivered.trace_id, delivery.trace_id);
    assert_eq!(delivered.parent_span_id, delivery.span_id);
    assert_eq!(delivered.links.len(), 1);
    assert_eq!(delivered.links[0].span_id, delivery.span_id);
    let tp = up.received().pop().expect("received");
    assert!(
        tp.header("traceparent")
            .is_some_and(|t| t.starts_with(&format!("00-{}-", delivery.trace_id))),
        "{:?}",
        tp.header("traceparent")
    );
}
