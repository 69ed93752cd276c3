//! One conformance suite for the queue contract ([`QueueStore`]), generic over the
//! store: each property a test per store (`<property>_on_<store>`) on the disk store,
//! a single Redis server and a Redis Cluster; two handles on one Redis stand for two
//! replicas. Each call uses route names of its own, so a store may be shared between
//! calls. Lease expiry is tested with short leases and real sleeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hookgate::queue::now_ms;
use hookgate::store::RedisStore;
use hookgate::store::redis::RedisOptions;
use hookgate::store::{
    Attempt, Claim, Enqueued, Envelope, Fanout, Finish, Leased, Pacing, QueueRef, QueueStore,
    State, StoredEvent, StoredHeader, Target,
};

use crate::support::RedisServer;
use crate::support::redis::RedisCluster;

const PREFIX: &str = "qc:";
const LONG: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(300);
/// A lease that runs out while the test sleeps [`PAST_LEASE`].
const SHORT_LEASE: Duration = Duration::from_millis(100);
const PAST_LEASE: Duration = Duration::from_millis(500);

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A route name no earlier call has used (`[A-Za-z0-9._-]`).
pub fn unique_route(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{name}-{nanos}-{}", SEQ.fetch_add(1, Ordering::Relaxed))
}

fn queue(route: &str) -> QueueRef<'_> {
    QueueRef::new(PREFIX, route, route)
}

/// An event whose fingerprint follows its body.
pub fn event(id: &str, body: &[u8], received_at_ms: u64) -> StoredEvent {
    StoredEvent {
        envelope: Envelope {
            event_id: id.to_owned(),
            event_type: Some("invoice.paid".into()),
            fingerprint: format!("fp-{}", hex::encode(body)),
            method: "POST".into(),
            headers: vec![StoredHeader {
                name: "content-type".into(),
                text: Some("application/json".into()),
                base64: None,
            }],
            query: Some("a=1".into()),
            peer: "127.0.0.1".into(),
            received_at_ms,
            trace: None,
        },
        body: bytes::Bytes::copy_from_slice(body),
    }
}

fn attempt(result: &str, status: Option<u16>) -> Attempt {
    Attempt {
        at_ms: now_ms(),
        status,
        result: result.parse().expect("an attempt result"),
        error: None,
        duration_ms: 5,
        kind: None,
        receipt: None,
    }
}

fn delivered() -> Finish {
    Finish::Delivered(attempt("delivered", Some(200)))
}

fn retry_at(at: u64) -> Finish {
    Finish::Retry(attempt("http_5xx", Some(503)), at)
}

fn dead() -> Finish {
    Finish::Dead(
        attempt("http_5xx", Some(500)),
        "3 attempts failed (max_attempts)".into(),
    )
}

fn done(fp: &str) -> Enqueued {
    Enqueued::Existing(Claim::Done {
        fingerprint: fp.to_owned(),
    })
}

async fn enqueue<S: QueueStore>(s: &S, q: &QueueRef<'_>, ev: &StoredEvent) -> Enqueued {
    s.enqueue(q, ev, TTL).await.expect("enqueue")
}

/// One of a route's destinations (not the one named after the route).
fn dest<'a>(route: &'a str, destination: &'a str) -> QueueRef<'a> {
    QueueRef::new(PREFIX, route, destination)
}

/// An event of a route with destinations `all`, going to `to`, unordered.
async fn enqueue_fanout<S: QueueStore>(
    s: &S,
    prefix: &str,
    route: &str,
    all: &[&str],
    to: &[&str],
    ev: &StoredEvent,
) -> Enqueued {
    let fanout = Fanout {
        prefix,
        route,
        all: all.to_vec(),
        to: to.iter().map(|d| (*d, None)).collect(),
    };
    s.enqueue_to(&fanout, ev, TTL).await.expect("enqueue_to")
}

/// An event in one queue with an order key (or none).
async fn enqueue_keyed<S: QueueStore>(
    s: &S,
    q: &QueueRef<'_>,
    ev: &StoredEvent,
    key: Option<&str>,
) -> Enqueued {
    let fanout = Fanout {
        prefix: q.prefix,
        route: q.route,
        all: vec![q.destination],
        to: vec![(q.destination, key.map(str::to_owned))],
    };
    s.enqueue_to(&fanout, ev, TTL).await.expect("enqueue_to")
}

/// The IDs of what is due now, sorted (each taken for a long lease).
async fn due_ids<S: QueueStore>(s: &S, q: &QueueRef<'_>) -> (Vec<String>, Vec<Leased>) {
    let got = take(s, q, LONG).await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|l| l.event.envelope.event_id.clone())
        .collect();
    ids.sort();
    (ids, got)
}

async fn take<S: QueueStore>(s: &S, q: &QueueRef<'_>, lease: Duration) -> Vec<Leased> {
    s.take_due(q, 10, lease).await.expect("take_due")
}

/// Takes exactly one event: `id`.
async fn take_one<S: QueueStore>(s: &S, q: &QueueRef<'_>, id: &str) -> Leased {
    let mut got = take(s, q, LONG).await;
    assert_eq!(got.len(), 1, "one event due: {got:?}");
    let l = got.remove(0);
    assert_eq!(l.event.envelope.event_id, id);
    l
}

async fn ids<S: QueueStore>(s: &S, q: &QueueRef<'_>, state: Option<State>) -> Vec<String> {
    s.list(q, state, 100)
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.event_id)
        .collect()
}

/// The queue contract: everything but a second store handle.
pub async fn queue_conforms<S: QueueStore + Pacing>(s: &S) {
    enqueue_stores_once(s).await;
    delivered_events_stay_duplicates(s).await;
    retries_come_back_when_due(s).await;
    dead_events_are_retried_and_purged(s).await;
    queue_lease_moves(s, s).await;
    queue_leases_are_renewed(s, s).await;
    routes_are_isolated(s).await;
    depth_counts_waiting_and_dead(s).await;
    concurrent_takes_are_exclusive(s).await;
    a_forgotten_delivery_is_accepted_again(s).await;
    rate_limits_count_starts_and_pauses_hold_them(s).await;
    fanout_delivers_to_each_destination_on_its_own(s).await;
    order_lines_deliver_one_at_a_time(s).await;
}

/// A route with destinations a, b and c: an event for a and b is stored once per
/// destination and delivered, or dies, in each on its own; a copy is a duplicate
/// whichever destinations it would go to.
async fn fanout_delivers_to_each_destination_on_its_own<S: QueueStore>(s: &S) {
    let route = unique_route("fanout");
    let (qa, qb, qc) = (dest(&route, "a"), dest(&route, "b"), dest(&route, "c"));
    let all = ["a", "b", "c"];
    let ev = event("evt_f", b"{\"fan\":\"out\"}", now_ms());
    let fp = ev.envelope.fingerprint.clone();
    assert_eq!(
        enqueue_fanout(s, PREFIX, &route, &all, &["a", "b"], &ev).await,
        Enqueued::Queued
    );
    let la = take_one(s, &qa, "evt_f").await;
    assert_eq!(la.event, ev, "a's copy, body intact");
    let lb = take_one(s, &qb, "evt_f").await;
    assert_eq!(lb.event, ev, "b's copy, body intact");
    assert!(
        take(s, &qc, LONG).await.is_empty(),
        "c is not a destination"
    );
    assert!(s.show(&qc, "evt_f").await.expect("show").is_none());

    // A copy is a duplicate, even one that would go to c only; another body under
    // the same ID reports the first body's fingerprint.
    for to in [&["a", "b"][..], &["c"][..]] {
        assert_eq!(
            enqueue_fanout(s, PREFIX, &route, &all, to, &ev).await,
            done(&fp)
        );
    }
    let other = event("evt_f", b"another body", now_ms());
    assert_eq!(
        enqueue_fanout(s, PREFIX, &route, &all, &["c"], &other).await,
        done(&fp)
    );
    assert!(take(s, &qc, LONG).await.is_empty(), "c still has nothing");
    for (q, waiting) in [(&qa, 1), (&qb, 1), (&qc, 0)] {
        let depth = s.depth(q).await.expect("depth");
        assert_eq!((depth.waiting, depth.dead), (waiting, 0), "{}", q.name());
    }

    // Delivered to a: b's copy still waits for its own delivery.
    assert!(s.finish(&qa, &la, &delivered(), TTL).await.expect("finish"));
    let (_, status) = s.show(&qb, "evt_f").await.expect("show").expect("b's copy");
    assert_eq!(status.state, State::Queued);
    assert_eq!(ids(s, &qb, None).await, ["evt_f"]);
    assert_eq!(ids(s, &qa, Some(State::Delivered)).await, ["evt_f"]);
    // Dead in b: a's stays delivered.
    assert!(s.finish(&qb, &lb, &dead(), TTL).await.expect("finish"));
    let (_, status) = s
        .show(&qa, "evt_f")
        .await
        .expect("show")
        .expect("a's record");
    assert_eq!(status.state, State::Delivered);
    assert_eq!(ids(s, &qb, Some(State::Dead)).await, ["evt_f"]);
    for (q, waiting, dead) in [(&qa, 0, 0), (&qb, 0, 1), (&qc, 0, 0)] {
        let depth = s.depth(q).await.expect("depth");
        assert_eq!((depth.waiting, depth.dead), (waiting, dead), "{}", q.name());
    }
    // Both finished: a copy is still a duplicate.
    assert_eq!(
        enqueue_fanout(s, PREFIX, &route, &all, &["a", "b"], &ev).await,
        done(&fp)
    );

    // A destination of another route, or of another prefix, is another queue, and so
    // is the destination named after the route beside a named one.
    let route2 = unique_route("fanout-other");
    assert_eq!(
        enqueue_fanout(s, PREFIX, &route2, &["a"], &["a"], &ev).await,
        Enqueued::Queued
    );
    assert_eq!(
        enqueue_fanout(s, "qc-other:", &route, &all, &["a"], &ev).await,
        Enqueued::Queued
    );
    let elsewhere = QueueRef::new("qc-other:", &route, "a");
    assert_eq!(take_one(s, &dest(&route2, "a"), "evt_f").await.event, ev);
    assert_eq!(take_one(s, &elsewhere, "evt_f").await.event, ev);
    assert!(take(s, &qa, LONG).await.is_empty());
    assert_eq!(ids(s, &qa, Some(State::Delivered)).await, ["evt_f"]);
    let route3 = unique_route("fanout-own");
    let own = [route3.as_str(), "b"];
    assert_eq!(
        enqueue_fanout(s, PREFIX, &route3, &own, &own, &ev).await,
        Enqueued::Queued
    );
    assert_eq!(take_one(s, &queue(&route3), "evt_f").await.event, ev);
    assert_eq!(take_one(s, &dest(&route3, "b"), "evt_f").await.event, ev);
}

/// Per-key order: only the first event of a key's line is due; the next goes when it
/// is delivered, dies under `on_dead = "skip"` (the worker clears its order key) or is
/// purged. A dead event that keeps its key (`on_dead = "block"`) holds its line.
async fn order_lines_deliver_one_at_a_time<S: QueueStore>(s: &S) {
    let route = unique_route("order");
    let q = queue(&route);
    let ev = |id: &str| event(id, id.as_bytes(), now_ms());
    for (id, key) in [
        ("e1", Some("k1")),
        ("e2", Some("k1")),
        ("e3", Some("k1")),
        ("e4", Some("k2")),
        ("e5", None),
    ] {
        assert_eq!(enqueue_keyed(s, &q, &ev(id), key).await, Enqueued::Queued);
    }
    let (due, got) = due_ids(s, &q).await;
    assert_eq!(due, ["e1", "e4", "e5"], "the first of each line, and e5");
    assert_eq!(s.depth(&q).await.expect("depth").waiting, 5);
    let (_, status) = s.show(&q, "e2").await.expect("show").expect("e2");
    assert_eq!(status.state, State::Queued, "waiting in line is queued");
    assert_eq!(status.order_key.as_deref(), Some("k1"));
    for l in &got {
        if l.event.envelope.event_id != "e1" {
            assert!(s.finish(&q, l, &delivered(), TTL).await.expect("finish"));
        }
    }
    assert!(take(s, &q, LONG).await.is_empty(), "e2 waits behind e1");
    let e1 = got
        .iter()
        .find(|l| l.event.envelope.event_id == "e1")
        .expect("e1");
    assert!(s.finish(&q, e1, &delivered(), TTL).await.expect("finish"));

    // e1 delivered: e2 goes, alone.
    let l = take_one(s, &q, "e2").await;
    assert_eq!(l.event.body.as_ref(), b"e2");
    assert!(take(s, &q, LONG).await.is_empty());
    // A retry keeps its place: e2 again, not e3.
    assert!(
        s.finish(&q, &l, &retry_at(now_ms().saturating_sub(1000)), TTL)
            .await
            .expect("finish")
    );
    let mut l = take_one(s, &q, "e2").await;
    assert_eq!(l.status.state, State::Retrying);
    assert!(take(s, &q, LONG).await.is_empty());
    // Dead under `skip` (the worker moves its key aside): e3 goes.
    l.status.left_line = l.status.order_key.take();
    assert!(s.finish(&q, &l, &dead(), TTL).await.expect("finish"));
    let l = take_one(s, &q, "e3").await;
    // Dead under `block`: the line waits, e6 behind it too.
    assert!(s.finish(&q, &l, &dead(), TTL).await.expect("finish"));
    assert_eq!(
        enqueue_keyed(s, &q, &ev("e6"), Some("k1")).await,
        Enqueued::Queued
    );
    assert!(take(s, &q, LONG).await.is_empty(), "e3 dead holds k1");
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (1, 2));
    // An operator's retry of e3: e3 is due, e6 still waits.
    assert_eq!(
        s.retry(&q, &Target::One("e3".into())).await.expect("retry"),
        1
    );
    let l = take_one(s, &q, "e3").await;
    assert_eq!(l.status.state, State::Queued);
    assert!(take(s, &q, LONG).await.is_empty(), "e6 waits behind e3");
    // Dead again, then purged: e6 goes.
    assert!(s.finish(&q, &l, &dead(), TTL).await.expect("finish"));
    assert!(take(s, &q, LONG).await.is_empty());
    assert_eq!(
        s.purge(&q, &Target::One("e3".into())).await.expect("purge"),
        1
    );
    let l = take_one(s, &q, "e6").await;
    assert!(s.finish(&q, &l, &delivered(), TTL).await.expect("finish"));

    // A purge of an event waiting in line takes it out of the line, and the first
    // goes on as it was.
    for id in ["w1", "w2", "w3"] {
        assert_eq!(
            enqueue_keyed(s, &q, &ev(id), Some("k3")).await,
            Enqueued::Queued
        );
    }
    let w1 = take_one(s, &q, "w1").await;
    assert_eq!(
        s.purge(&q, &Target::One("w2".into())).await.expect("purge"),
        1
    );
    assert!(s.show(&q, "w2").await.expect("show").is_none());
    assert!(take(s, &q, LONG).await.is_empty(), "w1 is leased, w3 waits");
    let (_, status) = s.show(&q, "w1").await.expect("show").expect("w1");
    assert_eq!(status.state, State::Queued);
    assert!(s.finish(&q, &w1, &delivered(), TTL).await.expect("finish"));
    let w3 = take_one(s, &q, "w3").await;
    assert!(s.finish(&q, &w3, &delivered(), TTL).await.expect("finish"));
    assert!(take(s, &q, LONG).await.is_empty());
    // e2, dead under `skip`, is left.
    assert_eq!(ids(s, &q, None).await, ["e2"]);

    // Retried by an operator, it takes a place at the end of its key's line again:
    // never beside the key's events, never before the ones accepted meanwhile.
    for id in ["x1", "x2"] {
        assert_eq!(
            enqueue_keyed(s, &q, &ev(id), Some("k1")).await,
            Enqueued::Queued
        );
    }
    let x1 = take_one(s, &q, "x1").await;
    assert_eq!(
        s.retry(&q, &Target::One("e2".into())).await.expect("retry"),
        1
    );
    assert!(
        take(s, &q, LONG).await.is_empty(),
        "e2 waits at the end of k1"
    );
    assert!(s.finish(&q, &x1, &delivered(), TTL).await.expect("finish"));
    let x2 = take_one(s, &q, "x2").await;
    assert!(take(s, &q, LONG).await.is_empty(), "e2 still waits");
    assert!(s.finish(&q, &x2, &delivered(), TTL).await.expect("finish"));
    let e2 = take_one(s, &q, "e2").await;
    assert_eq!(e2.status.order_key.as_deref(), Some("k1"));
    assert!(s.finish(&q, &e2, &delivered(), TTL).await.expect("finish"));
    assert!(ids(s, &q, None).await.is_empty());
}

async fn rate_limits_count_starts_and_pauses_hold_them<S: QueueStore + Pacing>(s: &S) {
    let route = unique_route("rate");
    let q = queue(&route);
    let limit = hookgate::queue::RateLimit::parse("3/s").expect("limit");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        tokens.push(
            s.rate_take(&q, &limit)
                .await
                .expect("take")
                .expect("a slot"),
        );
    }
    let wait = s
        .rate_take(&q, &limit)
        .await
        .expect("take")
        .expect_err("full");
    assert!(wait <= limit.counted_over(), "{wait:?}");
    s.rate_return(&q, &tokens[0]).await.expect("return");
    assert!(
        s.rate_take(&q, &limit).await.expect("take").is_ok(),
        "a returned slot is free"
    );
    // Another route has its own slots.
    let other = unique_route("rate-other");
    assert!(
        s.rate_take(&queue(&other), &limit)
            .await
            .expect("take")
            .is_ok()
    );
    // A pause holds every start, whatever the limit.
    s.pause(&queue(&other), Duration::from_millis(600))
        .await
        .expect("pause");
    let held = s
        .rate_take(&queue(&other), &limit)
        .await
        .expect("take")
        .expect_err("paused");
    assert!(held >= Duration::from_millis(400), "{held:?}");
}

/// `hookgate forget` on a queue route: a delivered event's record goes, so the
/// provider's next copy is delivered again; an undelivered one is left alone.
async fn a_forgotten_delivery_is_accepted_again<S: QueueStore>(s: &S) {
    let route = unique_route("forget");
    let q = queue(&route);
    let ev = event("evt_fg", b"fg", now_ms());
    assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);
    assert!(
        !s.forget_delivered(&q, "evt_fg").await.expect("forget"),
        "still queued"
    );
    let l = take_one(s, &q, "evt_fg").await;
    assert!(s.finish(&q, &l, &delivered(), TTL).await.expect("finish"));
    assert!(s.forget_delivered(&q, "evt_fg").await.expect("forget"));
    assert!(!s.forget_delivered(&q, "evt_nope").await.expect("forget"));
    assert_eq!(
        enqueue(s, &q, &ev).await,
        Enqueued::Queued,
        "a new delivery"
    );
    let again = take_one(s, &q, "evt_fg").await;
    assert_eq!(again.status.attempts, 0);
}

async fn enqueue_stores_once<S: QueueStore>(s: &S) {
    let route = unique_route("enqueue");
    let q = queue(&route);
    let ev = event("evt_1", b"{\"a\":1}", now_ms());
    let fp = ev.envelope.fingerprint.clone();
    assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);
    // A copy is a duplicate; another body under the same ID shows the first body's
    // fingerprint (the gateway answers it 422).
    assert_eq!(enqueue(s, &q, &ev).await, done(&fp));
    let other = event("evt_1", b"{\"a\":2}", now_ms());
    assert_ne!(other.envelope.fingerprint, fp);
    assert_eq!(enqueue(s, &q, &other).await, done(&fp));

    let (env, status) = s.show(&q, "evt_1").await.expect("show").expect("stored");
    assert_eq!(env, ev.envelope);
    assert_eq!(status.state, State::Queued);
    assert_eq!(status.attempts, 0);
    assert!(s.show(&q, "evt_none").await.expect("show").is_none());
    assert_eq!(ids(s, &q, None).await, ["evt_1"]);
    assert_eq!(ids(s, &q, Some(State::Queued)).await, ["evt_1"]);
    assert!(ids(s, &q, Some(State::Dead)).await.is_empty());
    let summary = &s.list(&q, None, 10).await.expect("list")[0];
    assert_eq!(summary.state, State::Queued);
    assert_eq!(summary.received_at_ms, ev.envelope.received_at_ms);

    // Taken once, with its body; not again while leased.
    let l = take_one(s, &q, "evt_1").await;
    assert_eq!(l.event, ev);
    assert_eq!(l.status.state, State::Queued);
    assert!(take(s, &q, LONG).await.is_empty(), "leased: not due again");
    assert!(s.take_due(&q, 0, LONG).await.expect("take 0").is_empty());
    assert!(s.finish(&q, &l, &delivered(), TTL).await.expect("finish"));
}

async fn delivered_events_stay_duplicates<S: QueueStore>(s: &S) {
    let route = unique_route("delivered");
    let q = queue(&route);
    let ev = event("evt_ok", b"ok", now_ms());
    let fp = ev.envelope.fingerprint.clone();
    assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);
    let l = take_one(s, &q, "evt_ok").await;
    assert!(s.finish(&q, &l, &delivered(), TTL).await.expect("finish"));

    let list = s
        .list(&q, Some(State::Delivered), 10)
        .await
        .expect("list delivered");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].event_id, "evt_ok");
    assert_eq!(list[0].state, State::Delivered);
    assert_eq!(list[0].attempts, 1);
    assert_eq!(list[0].last_result.as_deref(), Some("delivered"));
    assert!(ids(s, &q, Some(State::Queued)).await.is_empty());
    assert!(take(s, &q, LONG).await.is_empty(), "the queue is empty");
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (0, 0));
    assert_eq!(depth.oldest_received_ms, None);
    // Still a duplicate within the dedup window.
    assert_eq!(enqueue(s, &q, &ev).await, done(&fp));
    let (_, status) = s.show(&q, "evt_ok").await.expect("show").expect("kept");
    assert_eq!(status.state, State::Delivered);
    // A late second finish of the same lease changes nothing.
    assert!(!s.finish(&q, &l, &dead(), TTL).await.expect("finish again"));
    let (_, status) = s.show(&q, "evt_ok").await.expect("show").expect("kept");
    assert_eq!(status.state, State::Delivered);
}

async fn retries_come_back_when_due<S: QueueStore>(s: &S) {
    let route = unique_route("retry");
    let q = queue(&route);
    let ev = event("evt_r", b"retry me", now_ms());
    assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);

    // Due in the past: taken again at once.
    let l = take_one(s, &q, "evt_r").await;
    assert!(
        s.finish(&q, &l, &retry_at(now_ms().saturating_sub(1000)), TTL)
            .await
            .expect("finish")
    );
    let l = take_one(s, &q, "evt_r").await;
    assert_eq!(l.status.state, State::Retrying);
    assert_eq!(l.status.attempts, 1);
    assert_eq!(l.status.history.len(), 1);
    assert_eq!(l.event, ev);

    // Due in an hour: not taken.
    let at = now_ms() + 3_600_000;
    assert!(s.finish(&q, &l, &retry_at(at), TTL).await.expect("finish"));
    assert!(take(s, &q, LONG).await.is_empty(), "not due yet");
    let list = s
        .list(&q, Some(State::Retrying), 10)
        .await
        .expect("list retrying");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].next_at_ms, Some(at));
    assert_eq!(list[0].attempts, 2);
    assert_eq!(list[0].last_result.as_deref(), Some("http_5xx"));
    assert_eq!(s.depth(&q).await.expect("depth").waiting, 1);

    // An operator's retry makes it due now, attempts counted from zero.
    assert_eq!(
        s.retry(&q, &Target::One("evt_r".into()))
            .await
            .expect("retry"),
        1
    );
    let l = take_one(s, &q, "evt_r").await;
    assert_eq!(l.status.state, State::Queued);
    assert_eq!(l.status.attempts, 0);
    assert_eq!(l.status.history.len(), 2, "the history is kept");
    // Not while it is leased.
    assert_eq!(
        s.retry(&q, &Target::One("evt_r".into()))
            .await
            .expect("retry"),
        0
    );
    assert!(s.finish(&q, &l, &delivered(), TTL).await.expect("finish"));
    // Nor once delivered.
    assert_eq!(
        s.retry(&q, &Target::One("evt_r".into()))
            .await
            .expect("retry"),
        0
    );
}

async fn dead_events_are_retried_and_purged<S: QueueStore>(s: &S) {
    let route = unique_route("dead");
    let q = queue(&route);
    let ev = event("evt_d", b"dead", now_ms());
    assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);
    let l = take_one(s, &q, "evt_d").await;
    assert!(s.finish(&q, &l, &dead(), TTL).await.expect("finish"));
    assert_eq!(ids(s, &q, Some(State::Dead)).await, ["evt_d"]);
    assert_eq!(ids(s, &q, None).await, ["evt_d"], "dead is undelivered");
    let (_, status) = s.show(&q, "evt_d").await.expect("show").expect("kept");
    assert_eq!(status.state, State::Dead);
    assert!(status.dead_reason.is_some());
    assert!(take(s, &q, LONG).await.is_empty(), "dead is not due");
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (0, 1));
    assert_eq!(
        enqueue(s, &q, &ev).await,
        done(&ev.envelope.fingerprint),
        "a dead event is still a duplicate"
    );

    // Retrying a queued or unknown event does nothing.
    let queued = event("evt_q", b"queued", now_ms());
    assert_eq!(enqueue(s, &q, &queued).await, Enqueued::Queued);
    for id in ["evt_q", "evt_none"] {
        assert_eq!(
            s.retry(&q, &Target::One(id.into())).await.expect("retry"),
            0
        );
    }

    // Retry all dead: due again, attempts reset.
    assert_eq!(s.retry(&q, &Target::AllDead).await.expect("retry"), 1);
    assert!(ids(s, &q, Some(State::Dead)).await.is_empty());
    let mut got = take(s, &q, LONG).await;
    got.sort_by(|a, b| a.event.envelope.event_id.cmp(&b.event.envelope.event_id));
    let got_ids: Vec<&str> = got
        .iter()
        .map(|l| l.event.envelope.event_id.as_str())
        .collect();
    assert_eq!(got_ids, ["evt_d", "evt_q"]);
    let (d, q_ev) = (&got[0], &got[1]);
    assert_eq!(d.status.state, State::Queued);
    assert_eq!(d.status.attempts, 0);
    assert_eq!(d.status.history.len(), 1);
    assert_eq!(d.event, ev);

    // Purge one dead event: gone, and a new copy is accepted.
    assert!(s.finish(&q, d, &dead(), TTL).await.expect("finish"));
    assert_eq!(
        s.purge(&q, &Target::One("evt_d".into()))
            .await
            .expect("purge"),
        1
    );
    assert!(s.show(&q, "evt_d").await.expect("show").is_none());
    assert!(ids(s, &q, Some(State::Dead)).await.is_empty());
    assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);

    // A delivered record is not purged (it is no longer in the queue).
    assert!(s.finish(&q, q_ev, &delivered(), TTL).await.expect("finish"));
    assert_eq!(
        s.purge(&q, &Target::One("evt_q".into()))
            .await
            .expect("purge"),
        0
    );
    assert_eq!(
        enqueue(s, &q, &queued).await,
        done(&queued.envelope.fingerprint)
    );

    // Purge all dead: two dead, one waiting, which stays.
    let l = take_one(s, &q, "evt_d").await;
    assert!(s.finish(&q, &l, &dead(), TTL).await.expect("finish"));
    let second = event("evt_d2", b"dead too", now_ms());
    assert_eq!(enqueue(s, &q, &second).await, Enqueued::Queued);
    let l = take_one(s, &q, "evt_d2").await;
    assert!(s.finish(&q, &l, &dead(), TTL).await.expect("finish"));
    let waiting = event("evt_w", b"waiting", now_ms());
    assert_eq!(enqueue(s, &q, &waiting).await, Enqueued::Queued);
    assert_eq!(s.purge(&q, &Target::AllDead).await.expect("purge"), 2);
    assert_eq!(s.purge(&q, &Target::AllDead).await.expect("purge"), 0);
    assert_eq!(ids(s, &q, None).await, ["evt_w"]);
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (1, 0));
    // Purging a waiting event deletes it too.
    assert_eq!(
        s.purge(&q, &Target::One("evt_w".into()))
            .await
            .expect("purge"),
        1
    );
    assert!(
        take(s, &q, LONG).await.is_empty(),
        "a purged event is not taken"
    );
    assert_eq!(enqueue(s, &q, &waiting).await, Enqueued::Queued);
}

/// A lease that ran out moves to the next taker (`second` may be another handle on the
/// same store, or the same one): the first holder's finish is ignored.
pub async fn queue_lease_moves<S: QueueStore>(first: &S, second: &S) {
    let route = unique_route("lease");
    let q = queue(&route);
    let ev = event("evt_l", b"lease", now_ms());
    assert_eq!(enqueue(first, &q, &ev).await, Enqueued::Queued);
    let a = first.take_due(&q, 10, SHORT_LEASE).await.expect("take");
    assert_eq!(a.len(), 1);
    tokio::time::sleep(PAST_LEASE).await;
    let b = second.take_due(&q, 10, SHORT_LEASE).await.expect("take");
    assert_eq!(b.len(), 1, "the lease ran out: taken again");
    assert_eq!(b[0].event, ev);
    assert_ne!(a[0].lease, b[0].lease);

    // The first holder's late finish changes nothing.
    assert!(
        !first
            .finish(&q, &a[0], &delivered(), TTL)
            .await
            .expect("late finish")
    );
    let (_, status) = first.show(&q, "evt_l").await.expect("show").expect("kept");
    assert_eq!(status.state, State::Queued);
    assert_eq!(status.attempts, 0);
    assert!(ids(first, &q, Some(State::Delivered)).await.is_empty());

    // The second's does.
    assert!(
        second
            .finish(&q, &b[0], &delivered(), TTL)
            .await
            .expect("finish")
    );
    assert!(
        !first
            .finish(&q, &a[0], &dead(), TTL)
            .await
            .expect("late finish")
    );
    assert_eq!(ids(first, &q, Some(State::Delivered)).await, ["evt_l"]);
    assert!(take(first, &q, SHORT_LEASE).await.is_empty());
}

/// A lease is the holder's: a taker whose own lease is shorter never cuts it short,
/// and a renewed lease is not taken over however long the attempt runs. Once the
/// holder stops renewing, the event moves on, and the old holder's renewal says so.
pub async fn queue_leases_are_renewed<S: QueueStore>(holder: &S, other: &S) {
    let route = unique_route("renew");
    let q = queue(&route);
    let ev = event("evt_r", b"renew", now_ms());
    assert_eq!(enqueue(holder, &q, &ev).await, Enqueued::Queued);
    let lease = Duration::from_millis(600);
    let mut held = holder.take_due(&q, 10, lease).await.expect("take");
    assert_eq!(held.len(), 1);
    let l = held.remove(0);
    // Another taker with a much shorter lease of its own, for three lease lengths.
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            holder.renew(&q, &l, lease).await.expect("renew"),
            "the holder keeps its lease"
        );
        assert!(
            other
                .take_due(&q, 10, SHORT_LEASE)
                .await
                .expect("take")
                .is_empty(),
            "a renewed lease is not taken over"
        );
    }
    // The holder stops renewing: the lease runs out and the event moves on.
    tokio::time::sleep(lease + PAST_LEASE).await;
    let taken = other.take_due(&q, 10, SHORT_LEASE).await.expect("take");
    assert_eq!(taken.len(), 1, "taken once the lease ran out");
    assert!(
        !holder.renew(&q, &l, lease).await.expect("renew"),
        "the old holder's renewal finds the lease lost"
    );
    assert!(other.renew(&q, &taken[0], LONG).await.expect("renew"));
    assert!(
        other
            .finish(&q, &taken[0], &delivered(), TTL)
            .await
            .expect("finish")
    );
    assert!(
        !other.renew(&q, &taken[0], LONG).await.expect("renew"),
        "a finished attempt holds no lease"
    );
}

async fn routes_are_isolated<S: QueueStore>(s: &S) {
    let (ra, rb) = (unique_route("iso-a"), unique_route("iso-b"));
    let (qa, qb) = (queue(&ra), queue(&rb));
    let a = event("evt_same", b"body a", now_ms());
    let b = event("evt_same", b"body b", now_ms());
    assert_eq!(enqueue(s, &qa, &a).await, Enqueued::Queued);
    assert_eq!(enqueue(s, &qb, &b).await, Enqueued::Queued);
    // Another prefix is another namespace too.
    let other_prefix = QueueRef::new("qc-other:", &ra, &ra);
    assert_eq!(enqueue(s, &other_prefix, &b).await, Enqueued::Queued);
    let only_a = event("evt_a_only", b"a only", now_ms());
    assert_eq!(enqueue(s, &qa, &only_a).await, Enqueued::Queued);

    let got = take(s, &qb, LONG).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event, b);
    assert_eq!(ids(s, &qa, None).await.len(), 2);
    assert_eq!(ids(s, &qb, None).await, ["evt_same"]);
    assert_eq!(s.depth(&qa).await.expect("depth").waiting, 2);
    assert_eq!(s.depth(&qb).await.expect("depth").waiting, 1);
    assert_eq!(
        s.purge(&qa, &Target::One("evt_same".into()))
            .await
            .expect("purge"),
        1
    );
    assert!(s.show(&qb, "evt_same").await.expect("show").is_some());
    assert!(
        s.finish(&qb, &got[0], &delivered(), TTL)
            .await
            .expect("finish")
    );
    assert_eq!(ids(s, &qa, None).await, ["evt_a_only"]);
    let got = take(s, &other_prefix, LONG).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event, b);
}

async fn depth_counts_waiting_and_dead<S: QueueStore>(s: &S) {
    let route = unique_route("depth");
    let q = queue(&route);
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!(
        (depth.waiting, depth.dead, depth.oldest_received_ms),
        (0, 0, None)
    );

    // Listed oldest first, whatever the order they were stored in.
    let base = now_ms() - 10_000;
    let newer = event("evt_new", b"new", base + 2_000);
    let older = event("evt_old", b"old", base);
    assert_eq!(enqueue(s, &q, &newer).await, Enqueued::Queued);
    assert_eq!(enqueue(s, &q, &older).await, Enqueued::Queued);
    assert_eq!(ids(s, &q, None).await, ["evt_old", "evt_new"]);
    assert_eq!(
        s.list(&q, None, 1).await.expect("list").len(),
        1,
        "at most limit"
    );
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (2, 0));
    assert_eq!(depth.oldest_received_ms, Some(base));

    let mut got = take(s, &q, LONG).await;
    assert_eq!(got.len(), 2);
    got.sort_by_key(|l| l.event.envelope.received_at_ms);
    assert!(s.finish(&q, &got[0], &dead(), TTL).await.expect("finish"));
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (1, 1));
    assert_eq!(depth.oldest_received_ms, Some(base));
    assert!(
        s.finish(&q, &got[1], &delivered(), TTL)
            .await
            .expect("finish")
    );
    let depth = s.depth(&q).await.expect("depth");
    assert_eq!((depth.waiting, depth.dead), (0, 1));
    assert_eq!(
        depth.oldest_received_ms,
        Some(base),
        "a dead event is the oldest undelivered"
    );
}

/// Workers taking at once never get the same event: 30 events, six concurrent takers of
/// at most four each, until the queue is empty; every event is taken exactly once.
async fn concurrent_takes_are_exclusive<S: QueueStore>(s: &S) {
    let route = unique_route("concurrent");
    let q = queue(&route);
    for i in 0..30 {
        let ev = event(
            &format!("evt_{i:02}"),
            format!("body {i}").as_bytes(),
            now_ms(),
        );
        assert_eq!(enqueue(s, &q, &ev).await, Enqueued::Queued);
    }
    let q = &q;
    let taken = futures_util::future::join_all((0..6).map(|_| async move {
        let mut mine = Vec::new();
        loop {
            let got = s.take_due(q, 4, LONG).await.expect("take");
            if got.is_empty() {
                return mine;
            }
            mine.extend(got);
        }
    }))
    .await;
    let mut ids: Vec<String> = taken
        .iter()
        .flatten()
        .map(|l| l.event.envelope.event_id.clone())
        .collect();
    ids.sort();
    let expected: Vec<String> = (0..30).map(|i| format!("evt_{i:02}")).collect();
    assert_eq!(ids, expected, "each event taken exactly once");
    for l in taken.iter().flatten() {
        assert!(s.finish(q, l, &delivered(), TTL).await.expect("finish"));
    }
    assert_eq!(s.depth(q).await.expect("depth").waiting, 0);
}

/// On Redis a route's `concurrency` slots are shared: two stores (two replicas) hold
/// at most `max` between them; a slot comes back when returned or when its lease ends.
async fn shared_slots_bound_every_replica<S: QueueStore + Pacing>(a: &S, b: &S) {
    let route = unique_route("slots");
    let q = queue(&route);
    let first = a.slot_take(&q, 3, 1, LONG).await.expect("take");
    assert_eq!(first.len(), 1);
    let more = b.slot_take(&q, 3, 5, SHORT_LEASE).await.expect("take");
    assert_eq!(more.len(), 2, "only what is left of the three");
    assert!(
        a.slot_take(&q, 3, 1, LONG).await.expect("take").is_empty(),
        "all in use"
    );
    a.slot_return(&q, &first[0]).await.expect("return");
    let back = b.slot_take(&q, 3, 2, LONG).await.expect("take");
    assert_eq!(back.len(), 1, "a returned slot");
    assert!(a.slot_take(&q, 3, 1, LONG).await.expect("take").is_empty());
    tokio::time::sleep(PAST_LEASE).await;
    assert_eq!(
        a.slot_take(&q, 3, 5, LONG).await.expect("take").len(),
        2,
        "the short leases ran out: a replica that died frees its slots"
    );
}

// ---- The stores ----

fn redis_store(server: &RedisServer) -> RedisStore {
    RedisStore::new(&server.url(), Duration::from_secs(2)).expect("store")
}

fn disk() -> (tempfile::TempDir, hookgate::store::DiskStore) {
    let dir = tempfile::tempdir().expect("dir");
    let s = hookgate::store::DiskStore::open(&dir.path().join("q.db")).expect("open");
    (dir, s)
}

fn redis() -> (RedisServer, RedisStore) {
    let server = RedisServer::start();
    let s = redis_store(&server);
    (server, s)
}

fn cluster_store(cluster: &RedisCluster) -> RedisStore {
    RedisStore::new_cluster(&cluster.urls(), Duration::from_secs(1)).expect("store")
}

fn redis_cluster() -> (RedisCluster, RedisStore) {
    let cluster = RedisCluster::start();
    let s = cluster_store(&cluster);
    (cluster, s)
}

/// [`queue_lease_moves`] on one handle: the process that holds the file (or a
/// replica) takes an expired lease over itself.
async fn queue_lease_moves_on_one_handle<S: QueueStore>(s: &S) {
    queue_lease_moves(s, s).await;
}

/// [`queue_leases_are_renewed`] on one handle.
async fn queue_leases_are_renewed_on_one_handle<S: QueueStore>(s: &S) {
    queue_leases_are_renewed(s, s).await;
}

/// Each property a test per store, `<property>_on_<store>`, so a failure names its
/// store. What a store needs kept (its folder, its Redis) lives as long as the test.
macro_rules! on_each_store {
    ($($property:ident: $disk:ident, $redis:ident, $cluster:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $disk() {
            let (_held, s) = disk();
            $property(&s).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            let (_held, s) = redis();
            $property(&s).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $cluster() {
            let (_held, s) = redis_cluster();
            $property(&s).await;
        }
    )*};
}

on_each_store! {
    enqueue_stores_once:
        enqueue_stores_once_on_disk,
        enqueue_stores_once_on_redis,
        enqueue_stores_once_on_redis_cluster;
    delivered_events_stay_duplicates:
        delivered_events_stay_duplicates_on_disk,
        delivered_events_stay_duplicates_on_redis,
        delivered_events_stay_duplicates_on_redis_cluster;
    retries_come_back_when_due:
        retries_come_back_when_due_on_disk,
        retries_come_back_when_due_on_redis,
        retries_come_back_when_due_on_redis_cluster;
    dead_events_are_retried_and_purged:
        dead_events_are_retried_and_purged_on_disk,
        dead_events_are_retried_and_purged_on_redis,
        dead_events_are_retried_and_purged_on_redis_cluster;
    queue_lease_moves_on_one_handle:
        queue_lease_moves_on_disk,
        queue_lease_moves_on_redis,
        queue_lease_moves_on_redis_cluster;
    queue_leases_are_renewed_on_one_handle:
        queue_leases_are_renewed_on_disk,
        queue_leases_are_renewed_on_redis,
        queue_leases_are_renewed_on_redis_cluster;
    routes_are_isolated:
        routes_are_isolated_on_disk,
        routes_are_isolated_on_redis,
        routes_are_isolated_on_redis_cluster;
    depth_counts_waiting_and_dead:
        depth_counts_waiting_and_dead_on_disk,
        depth_counts_waiting_and_dead_on_redis,
        depth_counts_waiting_and_dead_on_redis_cluster;
    concurrent_takes_are_exclusive:
        concurrent_takes_are_exclusive_on_disk,
        concurrent_takes_are_exclusive_on_redis,
        concurrent_takes_are_exclusive_on_redis_cluster;
    a_forgotten_delivery_is_accepted_again:
        a_forgotten_delivery_is_accepted_again_on_disk,
        a_forgotten_delivery_is_accepted_again_on_redis,
        a_forgotten_delivery_is_accepted_again_on_redis_cluster;
    rate_limits_count_starts_and_pauses_hold_them:
        rate_limits_count_starts_and_pauses_hold_them_on_disk,
        rate_limits_count_starts_and_pauses_hold_them_on_redis,
        rate_limits_count_starts_and_pauses_hold_them_on_redis_cluster;
    fanout_delivers_to_each_destination_on_its_own:
        fanout_delivers_to_each_destination_on_its_own_on_disk,
        fanout_delivers_to_each_destination_on_its_own_on_redis,
        fanout_delivers_to_each_destination_on_its_own_on_redis_cluster;
    order_lines_deliver_one_at_a_time:
        order_lines_deliver_one_at_a_time_on_disk,
        order_lines_deliver_one_at_a_time_on_redis,
        order_lines_deliver_one_at_a_time_on_redis_cluster;
}

// Two handles on one Redis are two replicas: what one holds, the other sees.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_lease_moves_between_replicas_on_redis() {
    let (server, a) = redis();
    queue_lease_moves(&a, &redis_store(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_lease_moves_between_replicas_on_redis_cluster() {
    let (cluster, a) = redis_cluster();
    queue_lease_moves(&a, &cluster_store(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_leases_are_renewed_between_replicas_on_redis() {
    let (server, a) = redis();
    queue_leases_are_renewed(&a, &redis_store(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_leases_are_renewed_between_replicas_on_redis_cluster() {
    let (cluster, a) = redis_cluster();
    queue_leases_are_renewed(&a, &cluster_store(&cluster)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_slots_bound_every_replica_on_redis() {
    let (server, a) = redis();
    shared_slots_bound_every_replica(&a, &redis_store(&server)).await;
}

/// The Redis layout: a queued event's hash never expires, a delivered one drops its
/// body and expires; a lost consumer group is created again; entries of purged events
/// are cleaned up when they come up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_queue_keeps_its_layout_and_recovers_its_group() {
    let server = RedisServer::start();
    let s = redis_store(&server);
    let route = unique_route("layout");
    let q = queue(&route);
    let key = |suffix: &str| format!("{PREFIX}#q:{{{route}}}:{suffix}");
    let ev = event("evt_x", b"\x00\xffraw", now_ms());
    assert_eq!(enqueue(&s, &q, &ev).await, Enqueued::Queued);
    let ttl: i64 = server.cmd(redis::cmd("PTTL").arg(key("ev:evt_x")));
    assert_eq!(ttl, -1, "an undelivered event never expires");

    // The group is lost (as in a failover that dropped it): it comes back, and the
    // entry is delivered from the start of the stream — once the lease of the attempt
    // that held it has run out: that attempt may still be running.
    let mut first = s.take_due(&q, 10, SHORT_LEASE).await.expect("take");
    assert_eq!(first.len(), 1);
    let l = first.remove(0);
    let _: i64 = server.cmd(
        redis::cmd("XGROUP")
            .arg("DESTROY")
            .arg(key("stream"))
            .arg("hookgate"),
    );
    tokio::time::sleep(PAST_LEASE).await;
    let again = take_one(&s, &q, "evt_x").await;
    assert_eq!(again.event, ev, "raw bytes survive");
    assert!(!s.finish(&q, &l, &delivered(), TTL).await.expect("finish"));
    assert!(
        s.finish(&q, &again, &delivered(), Duration::from_secs(60))
            .await
            .expect("finish")
    );
    let ttl: i64 = server.cmd(redis::cmd("PTTL").arg(key("ev:evt_x")));
    assert!(
        ttl > 0 && ttl <= 60_000,
        "a delivered record expires: {ttl}"
    );
    let body: Option<Vec<u8>> = server.cmd(redis::cmd("HGET").arg(key("ev:evt_x")).arg("body"));
    assert_eq!(body, None, "a delivered record keeps no body");
    let len: i64 = server.cmd(redis::cmd("XLEN").arg(key("stream")));
    assert_eq!(len, 0, "finished entries are deleted");

    // A purged event's entry is skipped and deleted by the next take.
    let ev = event("evt_p", b"purged", now_ms());
    assert_eq!(enqueue(&s, &q, &ev).await, Enqueued::Queued);
    assert_eq!(
        s.purge(&q, &Target::One("evt_p".into()))
            .await
            .expect("purge"),
        1
    );
    assert!(take(&s, &q, LONG).await.is_empty());
    let len: i64 = server.cmd(redis::cmd("XLEN").arg(key("stream")));
    assert_eq!(len, 0);

    // An operator's retry of a retry already moved into the stream adds a second entry
    // for the event: it is leased once, and the extra entry is dropped.
    let first = event("evt_1st", b"first", now_ms() - 1_000);
    let again = event("evt_dup", b"dup", now_ms());
    assert_eq!(enqueue(&s, &q, &again).await, Enqueued::Queued);
    let l = take_one(&s, &q, "evt_dup").await;
    assert!(
        s.finish(&q, &l, &retry_at(now_ms() - 1), TTL)
            .await
            .expect("finish")
    );
    assert_eq!(enqueue(&s, &q, &first).await, Enqueued::Queued);
    // One at a time: the new event is read, the due retry only moved to the stream.
    let one = s.take_due(&q, 1, LONG).await.expect("take");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].event.envelope.event_id, "evt_1st");
    assert_eq!(
        s.retry(&q, &Target::One("evt_dup".into()))
            .await
            .expect("retry"),
        1
    );
    let len: i64 = server.cmd(redis::cmd("XLEN").arg(key("stream")));
    assert_eq!(
        len, 3,
        "the first event's entry and two for the retried one"
    );
    let dup = take_one(&s, &q, "evt_dup").await;
    assert_eq!(dup.status.state, State::Queued);
    assert!(take(&s, &q, LONG).await.is_empty());
    assert!(s.finish(&q, &dup, &delivered(), TTL).await.expect("finish"));
    assert!(
        s.finish(&q, &one[0], &delivered(), TTL)
            .await
            .expect("finish")
    );
    let len: i64 = server.cmd(redis::cmd("XLEN").arg(key("stream")));
    assert_eq!(len, 0);

    // Unreadable data is reported, never a panic.
    let _: i64 = server.cmd(
        redis::cmd("HSET")
            .arg(key("ev:evt_bad"))
            .arg("status")
            .arg("{not json")
            .arg("env")
            .arg("{}"),
    );
    assert!(matches!(
        s.show(&q, "evt_bad").await,
        Err(hookgate::store::StoreError::Corrupt(_))
    ));
    // Due in the stream, it is set aside (reported once), and the route moves on.
    let _: String = server.cmd(
        redis::cmd("XADD")
            .arg(key("stream"))
            .arg("*")
            .arg("id")
            .arg("evt_bad"),
    );
    assert!(matches!(
        s.take_due(&q, 10, LONG).await,
        Err(hookgate::store::StoreError::Corrupt(k)) if k == key("ev:evt_bad")
    ));
    let _: i64 = server.cmd(
        redis::cmd("HSET")
            .arg(key("ev:evt_bad"))
            .arg("status")
            .arg(r#"{"state":"queued","attempts":0}"#),
    );
    let _: String = server.cmd(
        redis::cmd("XADD")
            .arg(key("stream"))
            .arg("*")
            .arg("id")
            .arg("evt_bad"),
    );
    let fine = event("evt_fine", b"fine", now_ms());
    assert_eq!(enqueue(&s, &q, &fine).await, Enqueued::Queued);
    let got = take(&s, &q, LONG).await;
    assert_eq!(got.len(), 1, "the readable event is taken");
    assert_eq!(got[0].event, fine);
    assert!(take(&s, &q, LONG).await.is_empty());
    let len: i64 = server.cmd(redis::cmd("XLEN").arg(key("stream")));
    assert_eq!(len, 1, "only the taken event's entry is left");
    assert_eq!(
        s.purge(&q, &Target::One("evt_bad".into()))
            .await
            .expect("purge"),
        1,
        "an unreadable event can be purged"
    );
}

/// The Redis layout of destinations and lines: a named destination's keys are under
/// `#q:{<route>}/<destination>:`; a key's line is a list of IDs under `o:<key>`, each
/// event's hash names it (`okey`) while it holds a place, and only the first of the
/// line has a stream entry (a stray entry for another is dropped, not delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_queue_keeps_lines_per_destination() {
    let server = RedisServer::start();
    let s = redis_store(&server);
    let route = unique_route("lines");
    let q = dest(&route, "billing");
    let key = |suffix: &str| format!("{PREFIX}#q:{{{route}}}/billing:{suffix}");
    let xlen = || -> i64 { server.cmd(redis::cmd("XLEN").arg(key("stream"))) };
    let line =
        || -> Vec<String> { server.cmd(redis::cmd("LRANGE").arg(key("o:cust")).arg(0).arg(-1)) };
    let okey = |id: &str| -> Option<String> {
        server.cmd(redis::cmd("HGET").arg(key(&format!("ev:{id}"))).arg("okey"))
    };
    for id in ["evt_1", "evt_2"] {
        let ev = event(id, id.as_bytes(), now_ms());
        assert_eq!(
            enqueue_keyed(&s, &q, &ev, Some("cust")).await,
            Enqueued::Queued
        );
    }
    assert_eq!(line(), ["evt_1", "evt_2"]);
    assert_eq!(okey("evt_2"), Some(key("o:cust")));
    assert_eq!(xlen(), 1, "only the first of the line has an entry");

    let _: String = server.cmd(
        redis::cmd("XADD")
            .arg(key("stream"))
            .arg("*")
            .arg("id")
            .arg("evt_2"),
    );
    let first = take_one(&s, &q, "evt_1").await;
    assert_eq!(xlen(), 1, "the stray entry was dropped");
    assert!(
        s.finish(&q, &first, &delivered(), TTL)
            .await
            .expect("finish")
    );
    assert_eq!(okey("evt_1"), None, "a delivered event left its line");
    assert_eq!(line(), ["evt_2"]);
    let second = take_one(&s, &q, "evt_2").await;
    assert!(
        s.finish(&q, &second, &delivered(), TTL)
            .await
            .expect("finish")
    );
    let exists: i64 = server.cmd(redis::cmd("EXISTS").arg(key("o:cust")));
    assert_eq!(exists, 0, "an empty line is gone");
    assert_eq!(xlen(), 0);
}

/// With `min_replicas_ack`, an enqueue no replica acknowledged is an error (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_without_replica_acks_fails() {
    let server = RedisServer::start();
    let opts = RedisOptions {
        min_replicas_ack: Some(1),
        replica_ack_timeout: Duration::from_millis(100),
        ..RedisOptions::default()
    };
    let s = RedisStore::with_options(&server.url(), Duration::from_secs(2), &opts).expect("store");
    let route = unique_route("wait");
    let q = queue(&route);
    let ev = event("evt_w", b"w", now_ms());
    assert!(s.enqueue(&q, &ev, TTL).await.is_err());
    // It was stored on the primary all the same, but no replica holds it: the
    // provider's retry is refused too, not answered as a duplicate.
    assert!(s.enqueue(&q, &ev, TTL).await.is_err());
    let stored: i64 =
        server.cmd(redis::cmd("EXISTS").arg(format!("{PREFIX}#q:{{{route}}}:ev:evt_w")));
    assert_eq!(stored, 1, "kept on the primary, to be delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_queue_survives_a_reopen() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("q.db");
    let q = queue("reopen");
    let ordered = queue("reopen-ordered");
    let seq = queue("reopen-seq");
    {
        let s = hookgate::store::DiskStore::open(&path).expect("open");
        let ev = |i: u32| event(&format!("evt_r{i}"), b"body", now_ms());
        assert_eq!(enqueue(&s, &q, &ev(0)).await, Enqueued::Queued);
        let leased = take_one(&s, &q, "evt_r0").await;
        assert!(
            s.finish(&q, &leased, &delivered(), TTL)
                .await
                .expect("finish")
        );
        // evt_r1 is leased and never finished: the process "dies".
        assert_eq!(enqueue(&s, &q, &ev(1)).await, Enqueued::Queued);
        let _ = take_one(&s, &q, "evt_r1").await;
        assert_eq!(enqueue(&s, &q, &ev(2)).await, Enqueued::Queued);
        // Two events of one key, in another queue: their line is kept in the file.
        for id in ["evt_o1", "evt_o2"] {
            let e = event(id, id.as_bytes(), now_ms());
            assert_eq!(
                enqueue_keyed(&s, &ordered, &e, Some("k")).await,
                Enqueued::Queued
            );
        }
        // The newest event is delivered: its body, the last in the file, goes.
        let last = event("evt_last", b"last", now_ms());
        assert_eq!(enqueue(&s, &seq, &last).await, Enqueued::Queued);
        let leased = take_one(&s, &seq, "evt_last").await;
        assert!(
            s.finish(&seq, &leased, &delivered(), TTL)
                .await
                .expect("finish")
        );
    }
    // The writer thread lets go of the file once the last handle is dropped.
    let mut reopened = None;
    for _ in 0..100 {
        if let Ok(s) = hookgate::store::DiskStore::open(&path) {
            reopened = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = reopened.expect("reopen");
    let mut due: Vec<String> = take(&s, &q, SHORT_LEASE)
        .await
        .into_iter()
        .map(|l| l.event.envelope.event_id)
        .collect();
    due.sort();
    assert_eq!(
        due,
        ["evt_r1", "evt_r2"],
        "undelivered events are due again"
    );
    assert_eq!(ids(&s, &q, Some(State::Delivered)).await, ["evt_r0"]);
    let ev = event("evt_r0", b"body", now_ms());
    assert!(matches!(enqueue(&s, &q, &ev).await, Enqueued::Existing(_)));

    // The line survived: only its first is due, and the second once it is delivered.
    let first = take_one(&s, &ordered, "evt_o1").await;
    assert!(take(&s, &ordered, LONG).await.is_empty(), "evt_o2 waits");
    assert!(
        s.finish(&ordered, &first, &delivered(), TTL)
            .await
            .expect("finish")
    );
    let second = take_one(&s, &ordered, "evt_o2").await;
    assert_eq!(second.status.order_key.as_deref(), Some("k"));

    // A new event never shares a number with a delivered record: forgetting (or the
    // sweep expiring) that record leaves the new event's body in place.
    let fresh = event("evt_new", b"new body", now_ms());
    assert_eq!(enqueue(&s, &seq, &fresh).await, Enqueued::Queued);
    assert!(s.forget_delivered(&seq, "evt_last").await.expect("forget"));
    let l = take_one(&s, &seq, "evt_new").await;
    assert_eq!(l.event.body.as_ref(), b"new body");
}

/// A take that the store runs after the gateway gave up on it (Redis busy longer than
/// `store.timeout`) leases events whose tokens never arrive: they are given back at
/// once, not left untried for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_given_up_on_gives_its_events_back() {
    let server = RedisServer::start();
    let s = RedisStore::new(&server.url(), Duration::from_millis(200)).expect("store");
    let route = unique_route("untake");
    let q = queue(&route);
    // The take script is loaded (a call that finds its script missing loads it in a
    // second round trip).
    assert!(take(&s, &q, LONG).await.is_empty());
    let ev = event("evt_u", b"untake", now_ms());
    assert_eq!(enqueue(&s, &q, &ev).await, Enqueued::Queued);
    let busy = server.busy_for(450);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        s.take_due(&q, 10, LONG).await.is_err(),
        "the take is given up on while Redis is busy"
    );
    busy.join().expect("spin");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = take(&s, &q, LONG).await;
    assert_eq!(again.len(), 1, "given back, due again at once");
    assert_eq!(again[0].event, ev);
}
