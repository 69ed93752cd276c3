//! The operator's controls of a queue route's destinations: pause and resume (kept in
//! the store: across a restart, and shared by replicas on Redis), the breaker that
//! pauses a failing destination and probes it, and bulk retry with its plan.

use std::time::Duration;

use super::delivery::admin;
use super::destinations::{store, stripe_route, typed};
use crate::support::{RedisServer, TestGateway, Upstream, eventually};

const PAUSED: &str = "hookgate_destination_paused{route=\"stripe\",destination=\"stripe\"}";
const BREAKER: &str = "hookgate_destination_breaker_open{route=\"stripe\",destination=\"stripe\"}";
/// How old a replica's view of a destination's pause may be (`delivery/control.rs`'s
/// `FRESH`), and a margin: past it, every replica has read the pause.
const SEEN_BY_ALL: Duration = Duration::from_millis(1_300);

/// A Stripe queue route to `up` with its own retry schedule and these keys.
fn own_retry(store: &str, up: &Upstream, retry: &str, extra: &str) -> String {
    format!(
        "[server]\nshutdown_grace = \"2s\"\n{store}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\nupstream_timeout = \"2s\"\nupstream = \"{}\"\nretry = {retry}\n{extra}\n",
        up.url("/ledger")
    )
}

fn ordered(up: &Upstream, extra: &str) -> String {
    format!(
        "upstream = \"{}\"\norder_by = \"json:/data/object/customer\"\nconcurrency = 4\n{extra}",
        up.url("/ledger")
    )
}

/// The order the upstream acknowledged one key's events in.
fn acknowledged(up: &Upstream, prefix: &str) -> Vec<String> {
    up.received()
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .filter(|id| id.starts_with(prefix))
        .collect()
}

/// The route's own destination's entry in `/overview`.
async fn overview_queue(gw: &TestGateway) -> serde_json::Value {
    let (status, v) = admin(gw, "GET", "/overview").await;
    assert_eq!(status, 200, "{v}");
    let route = v["routes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["route"] == "stripe"))
        .cloned()
        .unwrap_or_default();
    route["queues"][0].clone()
}

async fn a_pause_holds_deliveries_until_resumed(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = stripe_route(
        &store(redis, dir.path()),
        &ordered(&up, "rate_limit = \"50/s\"\n"),
    );
    let a = TestGateway::start(&config).await;
    // On Redis, a second replica: it sees the pause made through the first.
    let b = match redis {
        Some(_) => Some(TestGateway::start(&config).await),
        None => None,
    };
    let other = b.as_ref().unwrap_or(&a);
    let (status, paused) = admin(
        &a,
        "POST",
        "/events/stripe/pause?reason=ledger%20deploy&until=1h",
    )
    .await;
    assert_eq!(status, 200, "{paused}");
    let pause = &paused["destinations"][0]["paused"];
    assert_eq!(pause["reason"], "ledger deploy");
    assert_eq!(pause["breaker"], false);
    assert!(
        pause["since"].is_string() && pause["until"].is_string(),
        "{pause}"
    );
    tokio::time::sleep(SEEN_BY_ALL).await;
    let ids: Vec<String> = (0..8)
        .map(|n| format!("evt_p{}{}", ["a", "b"][n % 2], n / 2))
        .collect();
    for id in &ids {
        let key = if id.starts_with("evt_pa") {
            "cus_a"
        } else {
            "cus_b"
        };
        let r = other
            .deliver("stripe", &typed(id, "invoice.paid", key), id)
            .await;
        assert_eq!((r.status, r.outcome()), (200, "queued"), "{}", r.body);
    }
    assert_eq!(a.metric(PAUSED).await, 1.0);
    let queue = overview_queue(other).await;
    assert_eq!(queue["paused"]["reason"], "ledger deploy", "{queue}");
    assert_eq!(queue["depth"], 8, "{queue}");
    let (_, list) = admin(other, "GET", "/events/stripe").await;
    assert_eq!(list["destinations"][0]["paused"]["reason"], "ledger deploy");
    // Nothing is tried while paused: the workers of both replicas had every chance.
    tokio::time::sleep(SEEN_BY_ALL).await;
    assert_eq!(up.count(), 0, "a paused destination is not tried");
    let (status, resumed) = admin(other, "POST", "/events/stripe/resume").await;
    assert_eq!(status, 200, "{resumed}");
    assert!(resumed["destinations"][0]["paused"].is_null(), "{resumed}");
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "every held event delivered once after the resume"
    );
    for key in ["evt_pa", "evt_pb"] {
        let want: Vec<String> = (0..4).map(|n| format!("{key}{n}")).collect();
        assert_eq!(acknowledged(&up, key), want, "per-key order");
    }
    assert_eq!(up.count(), 8, "each once");
    assert_eq!(a.metric(PAUSED).await, 0.0);
    assert!(overview_queue(&a).await["paused"].is_null());
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_deliveries_until_resumed_on_the_disk_store() {
    a_pause_holds_deliveries_until_resumed(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_made_on_one_replica_holds_both_on_redis() {
    let redis = RedisServer::start();
    a_pause_holds_deliveries_until_resumed(Some(&redis)).await;
}

/// On Redis in process (a stopped in-process gateway may still hold a disk store's
/// file lock); the disk store's restart is the real binary's (`process.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_survives_a_restart_and_one_with_until_resumes_by_itself() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = stripe_route(&store(Some(&redis), dir.path()), &ordered(&up, ""));
    let gw = TestGateway::start(&config).await;
    let (status, _) = admin(&gw, "POST", "/events/stripe/pause?reason=migration").await;
    assert_eq!(status, 200);
    let r = gw
        .deliver("stripe", &typed("evt_r1", "invoice.paid", "c"), "evt_r1")
        .await;
    assert_eq!(r.outcome(), "queued");
    gw.stop().await;

    let gw = TestGateway::start(&config).await;
    let queue = overview_queue(&gw).await;
    assert_eq!(queue["paused"]["reason"], "migration", "{queue}");
    assert_eq!(queue["depth"], 1);
    tokio::time::sleep(SEEN_BY_ALL).await;
    assert_eq!(up.count(), 0, "still paused after the restart");
    // A new pause with an end replaces it, and ends by itself.
    let (status, v) = admin(&gw, "POST", "/events/stripe/pause?reason=short&until=2s").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["destinations"][0]["paused"]["reason"], "short");
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_r1") == 1).await,
        "delivered once the pause's until passed"
    );
    assert!(overview_queue(&gw).await["paused"].is_null());
    // Bad input gets a clear answer, and a sync route has nothing to pause.
    for bad in ["until=yesterday", "until=1", "reason=a%0Ab"] {
        let (status, v) = admin(&gw, "POST", &format!("/events/stripe/pause?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(v["error"].is_string());
    }
    let (status, _) = admin(&gw, "POST", "/events/stripe/pause?destination=nope").await;
    assert_eq!(status, 404);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_pauses_a_failing_destination_probes_its_line_heads_and_spends_no_attempts() {
    let up = Upstream::start().await;
    up.set_status(503);
    let dir = tempfile::tempdir().expect("dir");
    // Without the breaker these events would be dead after 4 attempts.
    let config = own_retry(
        &store(None, dir.path()),
        &up,
        "{ max_attempts = 4, initial = \"50ms\", max_delay = \"100ms\", max_age = \"1h\" }",
        "order_by = \"json:/data/object/customer\"\nconcurrency = 4\nbreaker = { failures = 3, probe = \"1s\" }",
    );
    let gw = TestGateway::start(&config).await;
    let ids: Vec<String> = (0..8)
        .map(|n| format!("evt_b{}{}", ["a", "b"][n % 2], n / 2))
        .collect();
    for id in &ids {
        let key = if id.starts_with("evt_ba") {
            "cus_a"
        } else {
            "cus_b"
        };
        let r = gw
            .deliver("stripe", &typed(id, "invoice.paid", key), id)
            .await;
        assert_eq!(r.outcome(), "queued");
    }
    let mut open = false;
    for _ in 0..200 {
        if gw.metric(BREAKER).await == 1.0 {
            open = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(open, "the breaker opened");
    assert_eq!(gw.metric(PAUSED).await, 1.0);
    let queue = overview_queue(&gw).await;
    assert_eq!(queue["paused"]["reason"], "breaker", "{queue}");
    assert_eq!(queue["paused"]["breaker"], true, "{queue}");
    // Probes go on, one per interval, on the heads of the lines only.
    let at_open = up.count();
    assert!(
        eventually(Duration::from_secs(15), || up.count() >= at_open + 4).await,
        "probed"
    );
    let tried: Vec<String> = up
        .received()
        .iter()
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert!(
        tried.iter().all(|id| id == "evt_ba0" || id == "evt_bb0"),
        "only the heads of the lines were tried: {tried:?}"
    );
    let (_, dead) = admin(&gw, "GET", "/events/stripe?state=dead").await;
    assert_eq!(
        dead["events"].as_array().map(Vec::len),
        Some(0),
        "none dead: {dead}"
    );
    let mut attempts = 0;
    let mut history = 0;
    for head in ["evt_ba0", "evt_bb0"] {
        let (_, e) = admin(&gw, "GET", &format!("/events/stripe/{head}")).await;
        assert!(e["attempts"].as_u64().unwrap_or(99) < 4, "{e}");
        attempts += e["attempts"].as_u64().unwrap_or(0);
        history += e["history"].as_array().map_or(0, Vec::len) as u64;
    }
    assert_eq!(history, up.count() as u64, "every try is in the history");
    assert!(
        attempts < history,
        "probes are not counted: {attempts} of {history}"
    );
    // The handler is back: the next probe is delivered and the breaker closes.
    up.set_status(200);
    assert!(
        eventually(Duration::from_secs(15), || ids
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "all delivered once the breaker closed"
    );
    for key in ["evt_ba", "evt_bb"] {
        let want: Vec<String> = (0..4).map(|n| format!("{key}{n}")).collect();
        assert_eq!(acknowledged(&up, key), want, "per-key order");
    }
    assert_eq!(gw.metric(BREAKER).await, 0.0);
    assert_eq!(gw.metric(PAUSED).await, 0.0);
    gw.stop().await;
}

async fn a_plan_matches_what_the_bulk_retry_then_does(redis: Option<&RedisServer>) {
    let up = Upstream::start().await;
    up.set_status(500);
    up.set_status_for("evt_i2", Some(404));
    let dir = tempfile::tempdir().expect("dir");
    let config = own_retry(
        &store(redis, dir.path()),
        &up,
        "{ max_attempts = 1 }",
        "breaker = false",
    );
    let gw = TestGateway::start(&config).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        for (prefix, event_type) in [("evt_i", "invoice.paid"), ("evt_c", "customer.created")] {
            let id = format!("{prefix}{n}");
            let r = gw
                .deliver("stripe", &typed(&id, event_type, "c"), &id)
                .await;
            assert_eq!(r.outcome(), "queued");
            ids.push(id);
        }
    }
    let dead = || async {
        let (_, v) = admin(&gw, "GET", "/events/stripe?state=dead").await;
        v["events"].as_array().map_or(0, Vec::len)
    };
    for _ in 0..200 {
        if dead().await == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead().await, 6, "every event died at its one attempt");
    let filters = "state=dead&event_type=invoice.*&last_result=500";
    let (status, plan) = admin(
        &gw,
        "POST",
        &format!("/events/stripe/retry?{filters}&plan=true"),
    )
    .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        (
            plan["route"].as_str(),
            plan["plan"].as_bool(),
            plan["count"].as_u64()
        ),
        (Some("stripe"), Some(true), Some(2)),
        "{plan}"
    );
    let sample: Vec<&str> = plan["sample"]
        .as_array()
        .map(|s| s.iter().filter_map(|e| e["event_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(sample, ["evt_i0", "evt_i1"]);
    assert_eq!(dead().await, 6, "a plan changes nothing");
    // A window that ends before the failures selects nothing.
    let (_, none) = admin(&gw, "POST", "/events/stripe/retry?until=1000&plan=true").await;
    assert_eq!(none["count"], 0, "{none}");
    up.set_status(200);
    let (status, done) = admin(&gw, "POST", &format!("/events/stripe/retry?{filters}")).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (
            done["plan"].as_bool(),
            done["count"].as_u64(),
            done["retried"].as_u64()
        ),
        (Some(false), Some(2), Some(2)),
        "{done}"
    );
    assert!(
        eventually(Duration::from_secs(10), || up.effects_for("evt_i0") == 1
            && up.effects_for("evt_i1") == 1)
        .await,
        "the planned events were delivered"
    );
    assert_eq!(dead().await, 4, "the others stay dead");
    for other in ["evt_i2", "evt_c0", "evt_c1", "evt_c2"] {
        assert_eq!(up.effects_for(other), 0, "{other} was not in the plan");
    }
    let (status, v) = admin(&gw, "POST", "/events/stripe/retry?state=queued&plan=true").await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = admin(
        &gw,
        "POST",
        "/events/stripe/retry?event_id=evt_c0&state=dead",
    )
    .await;
    assert_eq!(status, 400, "{v}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_matches_what_the_bulk_retry_then_does_on_the_disk_store() {
    a_plan_matches_what_the_bulk_retry_then_does(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_matches_what_the_bulk_retry_then_does_on_redis() {
    let redis = RedisServer::start();
    a_plan_matches_what_the_bulk_retry_then_does(Some(&redis)).await;
}
