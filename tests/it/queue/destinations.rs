//! Destinations (`[[routes.destinations]]`) of queue routes: fan-out, a filter per
//! destination, rate and concurrency limits per destination across replicas, and
//! per-key order (`order_by`, `on_dead`), on the disk store and on Redis. Replicas are
//! gateways of their own in this process, sharing one Redis.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::queue::delivery::{admin, most_in_any_window};
use crate::support::{RedisServer, TestGateway, Upstream, eventually, post};

/// The `[store]` table: a disk store in `dir`, or the test Redis.
pub(super) fn store(redis: Option<&RedisServer>, dir: &Path) -> String {
    match redis {
        None => format!(
            "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
            dir.join("hookgate.db").display()
        ),
        Some(r) => format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", r.url()),
    }
}

/// A Stripe queue route with a fast retry schedule and these destinations (TOML).
pub(super) fn stripe_route(store: &str, destinations: &str) -> String {
    format!(
        r#"[server]
shutdown_grace = "2s"
{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
upstream_timeout = "2s"
retry = {{ max_attempts = 50, initial = "50ms", max_delay = "200ms", max_age = "1h" }}
breaker = false
{destinations}
"#
    )
}

/// A Stripe event of this type about this customer.
pub(super) fn typed(id: &str, event_type: &str, customer: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"{event_type}","data":{{"object":{{"customer":"{customer}"}}}}}}"#
    )
}

const TYPES: [&str; 4] = [
    "invoice.paid",
    "customer.subscription.updated",
    "charge.refunded",
    "customer.created",
];

async fn fanout_delivers_each_destination_on_its_own(redis: Option<&RedisServer>) {
    let billing = Upstream::start().await;
    let audit = Upstream::start().await;
    audit.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let destinations = format!(
        "[[routes.destinations]]\nname = \"billing\"\nupstream = \"{}\"\nevents = [\"invoice.*\", \"customer.subscription.*\"]\n[[routes.destinations]]\nname = \"audit\"\nupstream = \"{}\"\n",
        billing.url("/billing"),
        audit.url("/audit")
    );
    let gw = TestGateway::start(&stripe_route(&store(redis, dir.path()), &destinations)).await;
    let events: Vec<(String, &str)> = (0..20)
        .map(|i| (format!("evt_fan_{i}"), TYPES[i % TYPES.len()]))
        .collect();
    for (id, t) in &events {
        let body = typed(id, t, "cus_1");
        assert_eq!(gw.deliver("stripe", &body, id).await.outcome(), "queued");
        assert_eq!(gw.deliver("stripe", &body, id).await.outcome(), "duplicate");
    }
    let for_billing: Vec<&String> = events
        .iter()
        .filter(|(_, t)| t.starts_with("invoice.") || t.starts_with("customer.subscription."))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(for_billing.len(), 10);
    // The audit service is down: billing gets its events anyway, each once.
    assert!(
        eventually(Duration::from_secs(10), || for_billing
            .iter()
            .all(|id| billing.effects_for(id) == 1))
        .await
    );
    assert_eq!(billing.count(), 10, "billing gets only its event types");
    let first = &billing.received()[0];
    assert_eq!(first.header("hookgate-destination"), Some("billing"));
    assert_eq!(first.header("hookgate-route"), Some("stripe"));
    assert!(audit.count() > 0, "audit is being tried");
    assert_eq!(audit.effects(), 0);
    assert_eq!(
        gw.metric("hookgate_queue_depth{route=\"stripe\",destination=\"audit\"}")
            .await,
        20.0
    );
    assert_eq!(
        gw.metric("hookgate_queue_depth{route=\"stripe\",destination=\"billing\"}")
            .await,
        0.0
    );
    let (status, listed) = admin(&gw, "GET", "/events/stripe?destination=audit").await;
    assert_eq!(status, 200);
    assert_eq!(listed["events"].as_array().map(Vec::len), Some(20));
    assert_eq!(listed["events"][0]["destination"], "audit");
    let (_, shown) = admin(&gw, "GET", "/events/stripe/evt_fan_0").await;
    let states: HashMap<String, String> = shown["destinations"]
        .as_array()
        .expect("each destination's record")
        .iter()
        .map(|d| {
            (
                d["destination"].as_str().unwrap_or("").to_owned(),
                d["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(states.get("billing").map(String::as_str), Some("delivered"));
    assert_eq!(states.get("audit").map(String::as_str), Some("retrying"));
    let (status, _) = admin(&gw, "GET", "/events/stripe?destination=nosuch").await;
    assert_eq!(status, 404);
    // The command line shows the destination column and acts on one destination.
    let base = gw.admin_url("");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(crate::process::binary::BIN)
            .arg("events")
            .args(args)
            .args(["--route", "stripe", "--admin", base.trim_end_matches('/')])
            .output()
            .expect("run events");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, table) = cli(&["list", "--destination", "audit"]);
    assert!(ok && table.contains("20 event(s)"), "{table}");
    assert!(table.starts_with("DESTINATION"), "{table}");
    let (ok, shown) = cli(&["show", "--event-id", "evt_fan_0"]);
    assert!(ok, "{shown}");
    // Every destination's state first, whichever delivered; then the attempts of the
    // one that has not delivered, in full.
    let lines: Vec<&str> = shown.lines().collect();
    let table = lines
        .iter()
        .position(|l| *l == "destinations:")
        .unwrap_or_else(|| panic!("{shown}"));
    let row = |name: &str| {
        lines[table + 1..table + 3]
            .iter()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} in the table: {shown}"))
            .to_owned()
    };
    assert!(row("billing").contains("delivered"), "{shown}");
    assert!(row("audit").contains("retrying"), "{shown}");
    assert!(
        !lines[..table].iter().any(|l| l.starts_with("state:")),
        "no one destination leads: {shown}"
    );
    let audit_at = lines
        .iter()
        .position(|l| *l == "destination audit:")
        .unwrap_or_else(|| panic!("audit's attempts in full: {shown}"));
    assert!(
        lines[audit_at..].iter().any(|l| l.contains("http_5xx 503")),
        "{shown}"
    );
    assert!(!shown.contains("destination billing:"), "{shown}");

    // Audit comes back: it gets all 20, each once; billing gets nothing again.
    audit.set_status(200);
    assert!(
        eventually(Duration::from_secs(10), || events
            .iter()
            .all(|(id, _)| audit.effects_for(id) == 1))
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(billing.count(), 10);
    assert_eq!(audit.effects(), 20);
    // Still a duplicate once every destination has it.
    let (id, t) = &events[0];
    assert_eq!(
        gw.deliver("stripe", &typed(id, t, "cus_1"), id)
            .await
            .outcome(),
        "duplicate"
    );
    assert_eq!(
        gw.metric("hookgate_queue_deliveries_total{route=\"stripe\",destination=\"audit\",outcome=\"delivered\"}")
            .await,
        20.0
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_on_the_disk_store() {
    fanout_delivers_each_destination_on_its_own(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_on_redis() {
    let redis = RedisServer::start();
    fanout_delivers_each_destination_on_its_own(Some(&redis)).await;
}

async fn filters_send_each_destination_its_types(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = format!(
        r#"{}
[[routes]]
name = "github"
path = "/gh"
provider = "github"
secrets = ["gh-secret"]
delivery = "queue"
[[routes.destinations]]
name = "reviews"
upstream = "{}"
events = ["pull_request", "pull_request_review"]
[[routes.destinations]]
name = "ci"
upstream = "{}"
events = ["push"]

[[routes]]
name = "shopify"
path = "/shop"
provider = "shopify"
secrets = ["shop-secret"]
delivery = "queue"
[[routes.destinations]]
name = "orders"
upstream = "{}"
events = ["orders/*"]
[[routes.destinations]]
name = "crm"
upstream = "{}"
events = ["customers/*", "orders/create"]
"#,
        store(redis, dir.path()),
        up.url("/reviews"),
        up.url("/ci"),
        up.url("/orders"),
        up.url("/crm"),
    );
    let gw = TestGateway::start(&config).await;
    let send = |route: &'static str, header: &'static str, value: &'static str, id: &str| {
        // GitHub's type is the header and the body's `action`, when it has one. The
        // provider's own ID is unsigned: the gateway keys on the signed body, so each
        // body is its own.
        let body = if value == "pull_request" {
            format!(r#"{{"action":"opened","id":"{id}"}}"#)
        } else {
            format!(r#"{{"id":"{id}"}}"#)
        };
        let mut headers = gw.sign(route, &body, id);
        headers.push((header.to_owned(), value.to_owned()));
        let path = if route == "github" { "/gh" } else { "/shop" };
        let url = gw.url(path);
        async move { post(&url, &headers, body.into_bytes()).await }
    };
    let cases = [
        ("github", "X-GitHub-Event", "pull_request", "gh-1", "queued"),
        ("github", "X-GitHub-Event", "push", "gh-2", "queued"),
        ("github", "X-GitHub-Event", "issues", "gh-3", "filtered"),
        // A name takes its dotted sub-types (`pull_request.opened` above), not other
        // names it begins.
        (
            "github",
            "X-GitHub-Event",
            "pull_request_review_comment",
            "gh-4",
            "filtered",
        ),
        (
            "shopify",
            "X-Shopify-Topic",
            "orders/create",
            "sh-1",
            "queued",
        ),
        (
            "shopify",
            "X-Shopify-Topic",
            "orders/paid",
            "sh-2",
            "queued",
        ),
        (
            "shopify",
            "X-Shopify-Topic",
            "customers/update",
            "sh-3",
            "queued",
        ),
        (
            "shopify",
            "X-Shopify-Topic",
            "products/update",
            "sh-4",
            "filtered",
        ),
    ];
    for (route, header, value, id, want) in cases {
        let r = send(route, header, value, id).await;
        assert_eq!(r.outcome(), want, "{route} {value}: {}", r.body);
    }
    // What matches no destination is recorded for the dedup window: a copy is a
    // duplicate, under whatever type header it comes again.
    assert_eq!(
        send("github", "X-GitHub-Event", "issues", "gh-3")
            .await
            .outcome(),
        "duplicate"
    );
    assert_eq!(
        send("github", "X-GitHub-Event", "push", "gh-3")
            .await
            .outcome(),
        "duplicate"
    );
    let wanted: [(&str, &[&str]); 5] = [
        ("/reviews", &["gh-1"]),
        ("/ci", &["gh-2"]),
        ("/orders", &["sh-1", "sh-2"]),
        ("/crm", &["sh-1", "sh-3"]),
        ("/elsewhere", &[]),
    ];
    let total: usize = wanted.iter().map(|(_, ids)| ids.len()).sum();
    assert!(eventually(Duration::from_secs(10), || up.effects() == total).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = up.received();
    for (path, ids) in wanted {
        let mut got: Vec<String> = received
            .iter()
            .filter(|r| r.uri == path)
            .filter_map(|r| {
                r.header("x-github-delivery")
                    .or(r.header("x-shopify-webhook-id"))
                    .map(str::to_owned)
            })
            .collect();
        got.sort();
        assert_eq!(got, ids, "{path} receives exactly its event types");
    }
    let (_, listed) = admin(&gw, "GET", "/events/github").await;
    assert_eq!(
        listed["events"].as_array().map(Vec::len),
        Some(0),
        "a filtered event is not stored (and the delivered are not listed): {listed}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_per_destination_on_the_disk_store() {
    filters_send_each_destination_its_types(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_per_destination_on_redis() {
    let redis = RedisServer::start();
    filters_send_each_destination_its_types(Some(&redis)).await;
}

/// Sends each body to the gateways in turn, `parallel` at a time; each must be queued.
async fn queue_all(gateways: &[&TestGateway], bodies: &[(String, String)], parallel: usize) {
    use futures_util::StreamExt as _;
    let sent: Vec<String> = futures_util::stream::iter(bodies.iter().enumerate())
        .map(|(i, (id, body))| {
            let gw = gateways[i % gateways.len()];
            async move { gw.deliver("stripe", body, id).await.outcome().to_owned() }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    assert!(sent.iter().all(|o| o == "queued"), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destinations_limits_hold_across_two_replicas_with_a_backlog_of_1000() {
    let redis = RedisServer::start();
    let limited = Upstream::start().await;
    let single = Upstream::start().await;
    single.set_delay(Duration::from_millis(20));
    limited.set_status(503);
    single.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    let destinations = format!(
        "[[routes.destinations]]\nname = \"limited\"\nupstream = \"{}\"\nrate_limit = \"100/s\"\nconcurrency = 16\n[[routes.destinations]]\nname = \"single\"\nupstream = \"{}\"\nevents = [\"invoice.*\"]\nconcurrency = 1\n",
        limited.url("/limited"),
        single.url("/single")
    );
    let config = stripe_route(&store(Some(&redis), dir.path()), &destinations);
    let a = TestGateway::start(&config).await;
    let b = TestGateway::start(&config).await;
    let bodies: Vec<(String, String)> = (0..1000)
        .map(|i| {
            let id = format!("evt_bl_{i}");
            // One in 25 is an invoice: 40 for the single-file destination.
            let t = if i % 25 == 0 {
                "invoice.paid"
            } else {
                "charge.refunded"
            };
            let body = typed(&id, t, "cus_1");
            (id, body)
        })
        .collect();
    queue_all(&[&a, &b], &bodies, 16).await;
    // The backlog is there (the upstreams refuse); then both replicas drain it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    limited.set_status(200);
    single.set_status(200);
    let invoices: Vec<&String> = bodies.iter().step_by(25).map(|(id, _)| id).collect();
    assert!(
        eventually(Duration::from_secs(60), || bodies
            .iter()
            .all(|(id, _)| limited.effects_for(id) == 1)
            && invoices.iter().all(|id| single.effects_for(id) == 1))
        .await,
        "limited: {} of 1000, single: {} of 40",
        limited.effects(),
        single.effects()
    );
    let most = most_in_any_window(&limited, Duration::from_secs(1));
    assert!(
        most <= 100,
        "{most} requests within one second (limit 100/s over two replicas)"
    );
    assert!(most >= 50, "the limit is used, not starved: {most}");
    assert_eq!(
        single.max_concurrent(),
        1,
        "concurrency = 1 over two replicas: never two requests open at once"
    );
    assert_eq!(limited.effects(), 1000);
    assert_eq!(single.effects(), 40);
    a.stop().await;
    b.stop().await;
}

/// 20 keys × 50 events, each sent as three copies at once, the keys in parallel; the
/// events of one key one after another (so the gateway's acceptance order is the
/// sending order).
async fn per_key_order_holds(gateways: &[&TestGateway], up: &Upstream) {
    let keys: Vec<String> = (0..20).map(|k| format!("cus_{k:02}")).collect();
    let per_key = 50;
    let sends = keys.iter().enumerate().map(|(k, key)| async move {
        for n in 0..per_key {
            let id = format!("evt_ord_{key}_{n:02}");
            let body = typed(&id, "invoice.paid", key);
            let copies = (0..3).map(|c| {
                let gw = gateways[(k + n + c) % gateways.len()];
                let (id, body) = (id.clone(), body.clone());
                async move { gw.deliver("stripe", &body, &id).await.outcome().to_owned() }
            });
            let outcomes = futures_util::future::join_all(copies).await;
            assert_eq!(
                outcomes.iter().filter(|o| *o == "queued").count(),
                1,
                "{id}: {outcomes:?}"
            );
        }
    });
    futures_util::future::join_all(sends).await;
    let total = keys.len() * per_key;
    assert!(
        eventually(Duration::from_secs(60), || up.effects() >= total).await,
        "{} of {total} delivered",
        up.effects()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = up.received();
    assert_eq!(received.len(), total, "each event once");
    for key in &keys {
        let mine: Vec<&hookgate::testing::Received> = received
            .iter()
            .filter(|r| {
                r.header("idempotency-key")
                    .is_some_and(|id| id.starts_with(&format!("evt_ord_{key}_")))
            })
            .collect();
        let order: Vec<&str> = mine
            .iter()
            .filter_map(|r| r.header("idempotency-key"))
            .collect();
        let want: Vec<String> = (0..per_key)
            .map(|n| format!("evt_ord_{key}_{n:02}"))
            .collect();
        assert_eq!(order, want, "{key}: acceptance order, each once");
        // One at a time: the next arrives only after the previous was answered (the
        // upstream takes 10 ms per request).
        for pair in mine.windows(2) {
            assert!(
                pair[1].at.duration_since(pair[0].at) >= Duration::from_millis(10),
                "{key}: two requests open at once"
            );
        }
    }
    assert!(
        up.max_concurrent() > 1,
        "different keys are delivered in parallel"
    );
}

const ORDERED: &str = "order_by = \"json:/data/object/customer\"\nconcurrency = 8\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_on_the_disk_store() {
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(10));
    let dir = tempfile::tempdir().expect("dir");
    let destinations = format!(
        "[[routes.destinations]]\nname = \"ledger\"\nupstream = \"{}\"\n{ORDERED}",
        up.url("/ledger")
    );
    let gw = TestGateway::start(&stripe_route(&store(None, dir.path()), &destinations)).await;
    per_key_order_holds(&[&gw], &up).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_across_two_replicas_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    up.set_delay(Duration::from_millis(10));
    let dir = tempfile::tempdir().expect("dir");
    // A route's `upstream` is one destination: `order_by` works there too.
    let config = stripe_route(
        &store(Some(&redis), dir.path()),
        &format!("upstream = \"{}\"\n{ORDERED}", up.url("/ledger")),
    );
    let a = TestGateway::start(&config).await;
    let b = TestGateway::start(&config).await;
    per_key_order_holds(&[&a, &b], &up).await;
    a.stop().await;
    b.stop().await;
}

/// Key A's second event fails until it is dead; key B's events all go through.
async fn a_dead_event_and_its_key(redis: Option<&RedisServer>, on_dead: &str) {
    let up = Upstream::start().await;
    up.set_status_for("evt_a1", Some(500));
    let dir = tempfile::tempdir().expect("dir");
    let destinations = format!(
        "[[routes.destinations]]\nname = \"ledger\"\nupstream = \"{}\"\norder_by = \"json:/data/object/customer\"\non_dead = \"{on_dead}\"\nretry = {{ max_attempts = 2, initial = \"50ms\", max_delay = \"100ms\" }}\n",
        up.url("/ledger")
    );
    let gw = TestGateway::start(&stripe_route(&store(redis, dir.path()), &destinations)).await;
    for n in 0..4 {
        for key in ["a", "b"] {
            let id = format!("evt_{key}{n}");
            let body = typed(&id, "invoice.paid", &format!("cus_{key}"));
            assert_eq!(gw.deliver("stripe", &body, &id).await.outcome(), "queued");
        }
    }
    let ids = |key: &str| -> Vec<String> { (0..4).map(|n| format!("evt_{key}{n}")).collect() };
    assert!(
        eventually(Duration::from_secs(10), || ids("b")
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "another key is not held"
    );
    assert!(
        eventually(Duration::from_secs(10), || up.count_for("evt_a1") == 2).await,
        "evt_a1 tried twice"
    );
    let dead = || async { admin(&gw, "GET", "/events/stripe/evt_a1").await.1["state"] == "dead" };
    for _ in 0..100 {
        if dead().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(dead().await);
    assert_eq!(up.effects_for("evt_a0"), 1);
    let after: Vec<String> = ids("a")[2..].to_vec();
    if on_dead == "block" {
        // Held behind the dead event...
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            after.iter().all(|id| up.count_for(id) == 0),
            "held: {after:?}"
        );
        let (_, shown) = admin(&gw, "GET", "/events/stripe/evt_a2").await;
        assert_eq!(shown["state"], "queued");
        // ...until it is retried and delivered; then the rest go, in order.
        up.set_status_for("evt_a1", None);
        let (status, retried) = admin(&gw, "POST", "/events/stripe/retry?event_id=evt_a1").await;
        assert_eq!((status, retried["retried"].as_u64()), (200, Some(1)));
    }
    assert!(
        eventually(Duration::from_secs(10), || after
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "{after:?} delivered"
    );
    let order: Vec<String> = up
        .received()
        .iter()
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .filter(|id| id.starts_with("evt_a") && id != "evt_a1")
        .collect();
    assert_eq!(order, ["evt_a0", "evt_a2", "evt_a3"]);
    let a1 = up.effects_for("evt_a1");
    assert_eq!(a1, usize::from(on_dead == "block"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_blocks_its_key_only_on_the_disk_store() {
    a_dead_event_and_its_key(None, "block").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_blocks_its_key_only_on_redis() {
    let redis = RedisServer::start();
    a_dead_event_and_its_key(Some(&redis), "block").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_is_skipped_by_default() {
    a_dead_event_and_its_key(None, "skip").await;
}

#[test]
fn check_prints_each_destination_with_its_filter_pacing_and_order() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("fanout.toml");
    let config = stripe_route(
        "[store]\nbackend = \"disk\"\npath = \"q.db\"\n",
        "[[routes.destinations]]\nname = \"billing\"\nupstream = \"http://127.0.0.1:3001/b\"\nevents = [\"invoice.*\"]\nrate_limit = \"50/s\"\nconcurrency = 4\norder_by = \"json:/data/object/customer\"\non_dead = \"block\"\n[[routes.destinations]]\nname = \"audit\"\nupstream = \"http://127.0.0.1:3002/a\"\n",
    );
    std::fs::write(&path, config).expect("write");
    let text = check(&path);
    for line in [
        "  upstream   2 destinations (below)",
        "  destination billing",
        "    events     invoice.* (others: not sent here)",
        "    pacing     concurrency 4; rate limit 50/s; retry 50 attempts, 50ms doubling to 200ms, for at most 1h",
        "    order by   json:/data/object/customer, one at a time per key (on_dead block)",
        "  destination audit",
        "    upstream   http://127.0.0.1:3002/a (timeout 2s)",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_store_only_a_plain_queue_route_forwards_unclaimed() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let route = |name: &str, rest: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\n{rest}\n"
        )
    };
    // Written on the ordered or the fan-out route, on_error = "forward" is refused
    // (`hookgate check`); from [store], those two reject.
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"forward\"\n{}{}{}",
        redis.url(),
        route("plain", &format!("upstream = \"{}\"", up.url("/plain"))),
        route(
            "ordered",
            &format!(
                "upstream = \"{}\"\norder_by = \"json:/data/object/customer\"",
                up.url("/ordered")
            )
        ),
        route(
            "fanout",
            &format!(
                "[[routes.destinations]]\nname = \"a\"\nupstream = \"{}\"\n[[routes.destinations]]\nname = \"b\"\nupstream = \"{}\"",
                up.url("/a"),
                up.url("/b")
            )
        ),
    );
    let gw = TestGateway::start(&config).await;
    redis.stop();
    let body = typed("evt_down", "invoice.paid", "cus_1");
    // A call that may have reached Redis before it went down (a broken connection, a
    // timeout) may have stored the event: 503, as the provider retries. One that
    // surely did not (the connection refused) is forwarded.
    // The connection manager tries to reconnect for about five seconds first; calls
    // meanwhile wait and time out (503), as they may have reached Redis.
    let mut forwarded = false;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < until {
        let r = gw.deliver("plain", &body, "evt_down").await;
        if r.outcome() == "forwarded_unclaimed" {
            forwarded = true;
            break;
        }
        assert_eq!((r.status, r.outcome()), (503, "store_error"), "{}", r.body);
    }
    assert!(forwarded, "a retry is forwarded without a claim");
    // A forward without a claim would pass the key's line, or reach one destination
    // of two: the provider is asked to retry instead.
    for name in ["ordered", "fanout"] {
        let r = gw.deliver(name, &body, "evt_down").await;
        assert_eq!(
            (r.status, r.outcome()),
            (503, "store_error"),
            "{name}: {}",
            r.body
        );
        assert!(r.headers.contains_key("retry-after"), "{name}");
    }
    assert_eq!(up.count(), 1, "only the plain route forwarded");
    gw.stop().await;
}

/// An enqueue the gateway gave up on (the store answered after `store.timeout`) may
/// still have run: the event is then stored, and a forward without a claim would
/// deliver it a second time. `on_error = "forward"` forwards only what surely was not
/// stored; this event is answered 503, the queue delivers it once, and the provider's
/// retry is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_that_timed_out_but_ran_is_not_also_forwarded() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n[[routes]]\nname = \"plain\"\npath = \"/plain\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\non_error = \"forward\"\nupstream = \"{}\"\n",
        redis.url(),
        up.url("/plain")
    );
    let gw = TestGateway::start(&config).await;
    // The scripts are loaded (a call that finds its script missing loads it and runs
    // again: given up on, it never does).
    let warm = typed("evt_warm", "invoice.paid", "cus_1");
    assert_eq!(
        gw.deliver("plain", &warm, "evt_warm").await.outcome(),
        "queued"
    );
    assert!(eventually(Duration::from_secs(5), || up.effects_for("evt_warm") == 1).await);
    let body = typed("evt_late", "invoice.paid", "cus_1");
    // Redis is busy for 450 ms (a script that spins): the enqueue times out here at
    // 300 ms, and runs there once the script is done.
    let busy = redis.busy_for(450);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = gw.deliver("plain", &body, "evt_late").await;
    assert_eq!((r.status, r.outcome()), (503, "store_error"), "{}", r.body);
    busy.join().expect("spin");
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_late") == 1).await,
        "the queue delivers the event its late enqueue stored"
    );
    let again = gw.deliver("plain", &body, "evt_late").await;
    assert_eq!(again.outcome(), "duplicate", "{}", again.body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        up.count_for("evt_late"),
        1,
        "delivered once, never forwarded besides"
    );
    gw.stop().await;
}

/// `hookgate check` warns about an `events` pattern that can take nothing GitHub
/// sends (a typo of an event name), and says nothing of the names it does send.
#[test]
fn check_warns_of_a_filter_that_can_match_no_github_event() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("github.toml");
    let config = "[store]\nbackend = \"disk\"\npath = \"q.db\"\n\
        [[routes]]\nname = \"github\"\npath = \"/gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\ndelivery = \"queue\"\n\
        [[routes.destinations]]\nname = \"ci\"\nupstream = \"http://127.0.0.1:3001/ci\"\nevents = [\"push\", \"pull_request\", \"pull_requests.opened\", \"workflow_*\"]\n";
    std::fs::write(&path, config).expect("write");
    let text = check(&path);
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(
        warnings,
        [
            "route github: warning: destination ci: events: \"pull_requests.opened\" can match no event GitHub sends: did you mean \"pull_request\"? (a name takes its dotted sub-types: \"pull_request\" takes \"pull_request.opened\")"
        ],
        "{text}"
    );
}

/// `hookgate check --config PATH`, which must pass: what it printed.
fn check(path: &std::path::Path) -> String {
    let out = std::process::Command::new(crate::process::binary::BIN)
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run check");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text
}
