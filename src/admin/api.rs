//! The admin listener's answers as types: what each endpoint writes and what the
//! command line reads back (`hookgate events`, `deliveries`, `forget`), so the two
//! cannot drift apart. Fields are named as on the wire, which users' scripts, the
//! inspector page and docs/operations.md read: an `Option` without
//! `skip_serializing_if` is written `null` when unknown, one with it is left out.
//!
//! Every answer is written through a [`serde_json::Value`] (`to_json`), whose keys
//! are sorted: the bytes on the wire do not depend on the order of a struct's fields.
//!
//! The delivery log's record ([`DeliveryRecord`]) and a queue event's line
//! ([`EventSummary`]) and attempts ([`Attempt`]) are the store's own types, written as
//! they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

pub use crate::config::Delivery;
pub use crate::store::log::{DeliveryRecord, QueueLink};
pub use crate::store::{Attempt, AttemptResult, State, Summary as EventSummary};

/// An answer as the JSON it is written as (keys sorted).
pub(crate) fn to_json(answer: &impl Serialize) -> serde_json::Value {
    // Every answer here is a map with string keys: it cannot fail.
    serde_json::to_value(answer).unwrap_or_default()
}

/// `{"error": why}`: the body of most refusals (400, 404, 409, 503), with the event
/// or the route's destinations where the refusal names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// `GET /events/<route>/<event id>` of an event the route does not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// `?destination=NAME` naming none of the route's: the ones it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destinations: Option<Vec<String>>,
}

impl ErrorBody {
    /// `{"error": why}`.
    pub fn new(why: impl Into<String>) -> Self {
        Self {
            error: why.into(),
            event_id: None,
            destinations: None,
        }
    }
}

/// `{"status": …}`: `GET /healthz`'s `ok`, a store that did not answer `/readyz`,
/// the guard's refusals and `GET /handshakes/<route>` on a route that holds none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusBody {
    pub status: String,
}

impl StatusBody {
    pub fn new(status: impl Into<String>) -> Self {
        Self {
            status: status.into(),
        }
    }
}

/// `GET /readyz` (200): the store answers; a Redis store's evicting policy (which
/// `store.allow_eviction` or the absence of queue routes lets pass) and its cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// `ready`.
    pub status: String,
    /// `memory`, `disk` or `redis`.
    pub store: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxmemory_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Each destination of another kind than HTTP, and whether its server was
    /// reachable when last seen. One that is not never makes the gateway unready: its
    /// events wait in its queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<DestinationReach>,
}

/// A destination's server as last seen (`/readyz`, `/overview`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationReach {
    pub route: String,
    pub destination: String,
    /// `http`, `postgres`, `nats`, `amqp` or `redis_stream`.
    pub kind: String,
    /// Where it is, credentials redacted.
    pub target: String,
    /// `None` until its server was first tried (HTTP destinations: never).
    pub reachable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix milliseconds when it was last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_at_ms: Option<u64>,
    /// `/overview`, on a queue route: the destination's pause, if it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<PauseView>,
}

/// A destination's pause: `hookgate events pause`, or its breaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseView {
    /// The operator's words, or `breaker`.
    pub reason: String,
    /// RFC 3339.
    pub since: String,
    /// When it resumes by itself (RFC 3339), if it does.
    pub until: Option<String>,
    /// The breaker paused it: one event is probed per interval, and a delivery
    /// resumes it.
    #[serde(default)]
    pub breaker: bool,
}

impl PauseView {
    /// The view of a stored pause.
    pub fn of(p: &crate::delivery::control::Paused) -> Self {
        Self {
            reason: p.reason.clone(),
            since: rfc3339(p.since_ms),
            until: p.until_ms.map(rfc3339),
            breaker: p.breaker,
        }
    }
}

/// Unix milliseconds as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// `GET /alerts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incidents {
    pub incidents: Vec<IncidentView>,
}

/// An open incident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncidentView {
    /// `destination_failing`, `breaker_open`, `dead_letter`, `provider_silent`,
    /// `refusals` or `store_trouble`.
    pub kind: String,
    /// `open`.
    pub state: String,
    pub route: Option<String>,
    pub destination: Option<String>,
    /// RFC 3339.
    pub opened_at: String,
    pub message: String,
}

impl IncidentView {
    pub fn of(i: &crate::observe::alerts::Incident) -> Self {
        Self {
            kind: i.kind.clone(),
            state: "open".into(),
            route: i.route.clone(),
            destination: i.destination.clone(),
            opened_at: rfc3339(i.opened_at_ms),
            message: i.message.clone(),
        }
    }
}

/// One destination's controls: `POST /events/<route>/{pause,resume}`, and
/// `GET /events/<route>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationControl {
    pub destination: String,
    /// `null` while it runs.
    pub paused: Option<PauseView>,
}

/// A pull destination's consumer (`hookgate listen`, a service that pulls).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerView {
    /// Its `consumer` parameter, or its User-Agent.
    pub name: String,
    /// RFC 3339: when it last asked for events.
    pub last_lease: String,
}

/// `POST /events/<route>/{pause,resume}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Controlled {
    pub route: String,
    pub destinations: Vec<DestinationControl>,
}

/// `GET /readyz` (503): Redis may evict what queue routes store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evicting {
    pub status: String,
    pub maxmemory_policy: Option<String>,
    pub fix: String,
}

/// `POST /reload` (200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// `reloaded`.
    pub status: String,
    /// The routes now configured.
    pub routes: usize,
}

/// `POST /reload` (400): the running config stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadRefused {
    /// `refused`.
    pub status: String,
    pub errors: Vec<String>,
}

/// `GET /handshakes/<route>`: the signing secret a provider handed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedSecret {
    pub route: String,
    pub secret: String,
    /// Unix seconds.
    pub received_at: u64,
}

/// `DELETE /handshakes/<route>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeCleared {
    pub route: String,
    /// Whether the route held one.
    pub cleared: bool,
}

/// `DELETE /keys/<route>/<event id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    pub route: String,
    pub event_id: String,
    /// Whether the store held the key.
    pub forgotten: bool,
}

/// `GET /events/<route>`: events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventList {
    pub route: String,
    /// The route's delivery now: a route a reload switched back to sync may still hold
    /// events.
    pub delivery: Delivery,
    pub events: Vec<EventSummary>,
    /// Each destination listed, and whether it is paused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<DestinationControl>,
}

/// One event in one destination: `GET /events/<route>/<event id>`, and each
/// destination's state in `GET /deliveries/<id>` on a queue route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventView {
    pub route: String,
    /// On a route with several destinations (or one named apart from the route).
    pub destination: Option<String>,
    pub event_id: String,
    pub event_type: Option<String>,
    pub state: State,
    /// Attempts since the operator's last retry (all of them without one).
    pub attempts: u32,
    pub received_at_ms: u64,
    pub next_at_ms: Option<u64>,
    pub dead_reason: Option<String>,
    pub order_key: Option<String>,
    /// The last attempts, oldest first (earlier ones than `attempts` counts too).
    #[serde(default)]
    pub history: Vec<Attempt>,
    /// An operator's retry: `attempts` counts from here; `history` keeps the earlier.
    pub requeued_at_ms: Option<u64>,
    pub method: String,
    /// The names of the headers forwarded (never their values: they may carry
    /// signatures and tokens).
    #[serde(default)]
    pub headers: Vec<String>,
    /// On a route with several destinations: the event in each that holds it (the
    /// first at the top).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destinations: Option<Vec<EventView>>,
}

/// `POST /events/<route>/{retry,purge}`: how many events (one of the two counts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsActed {
    pub route: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged: Option<u64>,
}

/// `POST /events/<route>/retry` with filters: what matched (and, without `plan`,
/// what was queued again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRetry {
    pub route: String,
    /// `true`: nothing was changed; `count` is what a retry would queue again.
    pub plan: bool,
    /// Events that matched the filters.
    pub count: u64,
    /// Events queued again (without `plan`): matched events that an attempt was not
    /// holding, or that were not delivered meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<u64>,
    /// Matching events beyond the bound of one call were left out: run it again.
    #[serde(default)]
    pub more: bool,
    /// The first matching events, oldest first.
    pub sample: Vec<EventSummary>,
}

/// `GET /deliveries`: records newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryPage {
    pub deliveries: Vec<DeliverySummary>,
    /// Where the next page starts; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A record as a list and the live stream show it: without `body` and `answer`
/// (read back, both are `None`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DeliverySummary(pub DeliveryRecord);

impl Serialize for DeliverySummary {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.summary().serialize(s)
    }
}

/// `GET /deliveries/<id>`: the whole record and, on a queue route, its event's state
/// in each destination that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryDetail {
    #[serde(flatten)]
    pub record: DeliveryRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destinations: Option<Vec<EventView>>,
}

/// `POST /deliveries/<id>/replay`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// `true`.
    pub replayed: bool,
    /// The replay's own record.
    pub delivery_id: String,
    /// The record replayed: the one named, or for a copy the accepted delivery's.
    pub replay_of: String,
    pub outcome: String,
    pub status: u16,
    /// Where it went: the destinations it is queued for, or the upstream's name.
    pub destinations: Vec<String>,
}

/// The answer a replay into the queues records in the log (as `answer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayQueued {
    /// `queued`.
    pub status: String,
    pub event_id: String,
    /// How many destinations it is queued for.
    pub destinations: usize,
}

/// `GET /overview`: each route's last hour and queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    /// By name.
    pub routes: Vec<RouteOverview>,
    pub log: LogOverview,
    /// Requests for no route (404) in the last hour; the delivery log keeps them under
    /// the route name `#unrouted`.
    #[serde(default)]
    pub unrouted: UnroutedOverview,
}

/// Requests for no route in `GET /overview`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnroutedOverview {
    pub last_hour: u64,
}

/// One route in `GET /overview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteOverview {
    pub route: String,
    /// The path it takes requests on.
    #[serde(default)]
    pub path: String,
    pub provider: String,
    pub delivery: Delivery,
    /// Requests by outcome in the last hour (outcomes without one are left out).
    pub last_hour: BTreeMap<String, u64>,
    /// A queue route's destinations (none on a sync route or a memory store).
    pub queues: Vec<QueueOverview>,
    /// Every destination: its kind, where it is, and its server as last seen.
    #[serde(default)]
    pub destinations: Vec<DestinationReach>,
}

/// One destination's queue in `GET /overview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueOverview {
    pub destination: String,
    /// Queued and retrying events.
    pub depth: u64,
    pub dead: u64,
    pub oldest_undelivered_age_ms: Option<u64>,
    /// `null` while it runs.
    pub paused: Option<PauseView>,
    /// A pull destination's consumers, most recent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<ConsumerView>,
}

/// `GET /overview/series?route=R&window=1h|1d`: a route's requests by outcome per
/// bucket (a minute over the last hour, ten minutes over the last day; every bucket
/// listed, oldest first) and each queue destination's depth over the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    pub route: String,
    /// `1h` or `1d`.
    pub window: String,
    /// A bucket's width.
    pub bucket_ms: u64,
    /// The first bucket's start (Unix ms).
    pub from_ms: u64,
    /// The end of the last bucket (now's bucket, still filling).
    pub to_ms: u64,
    pub buckets: Vec<SeriesBucket>,
    /// A queue route's destinations (none on a sync route or a memory store).
    pub queues: Vec<QueueSeries>,
    /// How often this process samples the queues.
    pub sample_every_ms: u64,
}

/// One bucket of [`Series`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesBucket {
    /// Its start (Unix ms).
    pub at_ms: u64,
    /// Requests by outcome (outcomes without one are left out).
    pub counts: BTreeMap<String, u64>,
}

/// One destination's queue over a [`Series`]' window: this process's samples (at most
/// 1 440; over a day, each the largest of two), then one read now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSeries {
    pub destination: String,
    pub samples: Vec<QueueSample>,
}

/// One sample of [`QueueSeries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSample {
    pub at_ms: u64,
    /// Queued and retrying events.
    pub waiting: u64,
    pub dead: u64,
    /// The oldest undelivered event's age (0 when none waits).
    pub oldest_age_ms: u64,
}

/// Whether the gateway records deliveries (`[log] enabled`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogOverview {
    pub enabled: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> DeliveryRecord {
        DeliveryRecord {
            delivery_id: "0190a2b3c4d5-00000001".into(),
            received_at: 1_764_590_000_123,
            route: "stripe".into(),
            provider: "stripe".into(),
            peer: "127.0.0.1:5000".into(),
            method: "POST".into(),
            path: "/webhooks/stripe?x=1".into(),
            headers: vec![("stripe-signature".into(), "[redacted]".into())],
            body: Some("{\"id\":\"evt_1\"}".into()),
            body_base64: false,
            body_bytes: 14,
            body_truncated: false,
            event_id: Some("evt_1".into()),
            provider_delivery_id: None,
            event_type: Some("invoice.paid".into()),
            outcome: "queued".into(),
            status: 200,
            answer: Some("{\"status\":\"queued\"}".into()),
            duration_us: 120,
            secret: Some("secrets[0]".into()),
            reason: None,
            replay_of: None,
            queue: Some(QueueLink {
                route: "stripe".into(),
                event_id: "evt_1".into(),
            }),
        }
    }

    fn event(destination: Option<&str>) -> EventView {
        EventView {
            route: "stripe".into(),
            destination: destination.map(str::to_owned),
            event_id: "evt_1".into(),
            event_type: None,
            state: State::Retrying,
            attempts: 1,
            received_at_ms: 1_000,
            next_at_ms: Some(2_000),
            dead_reason: None,
            order_key: None,
            history: vec![Attempt {
                at_ms: 1_500,
                status: Some(503),
                result: AttemptResult::Http5xx,
                error: None,
                duration_ms: 7,
                kind: None,
                receipt: None,
            }],
            requeued_at_ms: None,
            method: "POST".into(),
            headers: vec!["content-type".into()],
            destinations: None,
        }
    }

    /// The bytes the endpoints wrote with `json!` before they had types.
    #[test]
    fn answers_are_written_as_before() {
        let text = |v: serde_json::Value| v.to_string();
        assert_eq!(
            text(to_json(&event(None))),
            text(serde_json::json!({
                "route": "stripe", "destination": null, "event_id": "evt_1",
                "event_type": null, "state": "retrying", "attempts": 1,
                "received_at_ms": 1_000, "next_at_ms": 2_000, "dead_reason": null,
                "order_key": null,
                "history": [{"at_ms": 1_500, "status": 503, "result": "http_5xx", "duration_ms": 7}],
                "requeued_at_ms": null, "method": "POST", "headers": ["content-type"],
            }))
        );
        let r = record();
        assert_eq!(
            text(to_json(&DeliverySummary(r.clone()))),
            text(r.summary())
        );
        let mut old = serde_json::to_value(&r).expect("record");
        old["destinations"] = serde_json::json!([to_json(&event(Some("a")))]);
        let detail = DeliveryDetail {
            record: r,
            destinations: Some(vec![event(Some("a"))]),
        };
        assert_eq!(text(to_json(&detail)), text(old));
        assert_eq!(
            text(to_json(&EventsActed {
                route: "stripe".into(),
                retried: Some(2),
                purged: None
            })),
            r#"{"retried":2,"route":"stripe"}"#
        );
        assert_eq!(
            text(to_json(&ErrorBody::new("not found"))),
            r#"{"error":"not found"}"#
        );
    }

    /// The smaller answers, against the `json!` each endpoint wrote before.
    #[test]
    fn small_answers_keep_their_fields() {
        let same = |typed: serde_json::Value, old: serde_json::Value| {
            assert_eq!(typed.to_string(), old.to_string());
        };
        same(
            to_json(&Ready {
                status: "ready".into(),
                store: "redis".into(),
                maxmemory_policy: None,
                warning: None,
                destinations: Vec::new(),
            }),
            serde_json::json!({ "status": "ready", "store": "redis" }),
        );
        same(
            to_json(&Evicting {
                status: "s".into(),
                maxmemory_policy: None,
                fix: "f".into(),
            }),
            serde_json::json!({ "status": "s", "maxmemory_policy": null, "fix": "f" }),
        );
        same(
            to_json(&ErrorBody {
                destinations: Some(vec!["a".into()]),
                ..ErrorBody::new("e")
            }),
            serde_json::json!({ "error": "e", "destinations": ["a"] }),
        );
        same(
            to_json(&Overview {
                routes: vec![RouteOverview {
                    route: "r".into(),
                    path: "/hooks/r".into(),
                    provider: "stripe".into(),
                    delivery: Delivery::Queue,
                    last_hour: BTreeMap::from([("queued".to_owned(), 3)]),
                    queues: vec![QueueOverview {
                        destination: "d".into(),
                        depth: 1,
                        dead: 0,
                        oldest_undelivered_age_ms: None,
                        paused: Some(PauseView {
                            reason: "deploy".into(),
                            since: rfc3339(0),
                            until: None,
                            breaker: false,
                        }),
                        consumers: Vec::new(),
                    }],
                    destinations: Vec::new(),
                }],
                log: LogOverview { enabled: true },
                unrouted: UnroutedOverview { last_hour: 2 },
            }),
            serde_json::json!({
                "routes": [{
                    "route": "r", "path": "/hooks/r", "provider": "stripe", "delivery": "queue",
                    "last_hour": { "queued": 3 },
                    "queues": [{ "destination": "d", "depth": 1, "dead": 0, "oldest_undelivered_age_ms": null,
                        "paused": { "reason": "deploy", "since": "1970-01-01T00:00:00.000Z", "until": null, "breaker": false } }],
                    "destinations": [],
                }],
                "log": { "enabled": true },
                "unrouted": { "last_hour": 2 },
            }),
        );
        same(
            to_json(&EventList {
                route: "r".into(),
                delivery: Delivery::Sync,
                events: Vec::new(),
                destinations: Vec::new(),
            }),
            serde_json::json!({ "route": "r", "delivery": "sync", "events": [] }),
        );
        same(
            to_json(&ReplayQueued {
                status: "queued".into(),
                event_id: "e".into(),
                destinations: 2,
            }),
            serde_json::json!({ "status": "queued", "event_id": "e", "destinations": 2 }),
        );
    }

    /// What the command line reads back is what was written.
    #[test]
    fn answers_read_back_whole() {
        let r = record();
        let detail = DeliveryDetail {
            record: r.clone(),
            destinations: Some(vec![event(Some("a"))]),
        };
        let back: DeliveryDetail =
            serde_json::from_value(to_json(&detail)).expect("a delivery's detail");
        assert_eq!(back, detail);
        let page = DeliveryPage {
            deliveries: vec![DeliverySummary(r.clone())],
            next_cursor: None,
        };
        let back: DeliveryPage = serde_json::from_value(to_json(&page)).expect("a page");
        let summary = &back.deliveries[0].0;
        assert_eq!(
            (summary.body.as_ref(), summary.answer.as_ref()),
            (None, None)
        );
        assert_eq!(summary.event_type, r.event_type);
        let mut named = event(Some("a"));
        named.destinations = Some(vec![event(Some("a")), event(Some("b"))]);
        let back: EventView = serde_json::from_value(to_json(&named)).expect("an event");
        assert_eq!(back, named);
    }
}

/// One operator action, as the audit keeps it (`GET /audit`): who (`name`, `role`),
/// what (`action`, `target`, `detail`), when (`at`) and how it ended (`result`,
/// `status`, `message`). Never a token: the name the token is configured under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Sorts by time (as a delivery ID): the time in 12 hex digits, then a counter.
    pub id: String,
    /// RFC 3339, milliseconds.
    pub at: String,
    /// The token's name (`admin` for `server.admin_token`, `anonymous` on a listener
    /// without tokens).
    pub name: String,
    /// The token's role: `read` or `operate`.
    pub role: String,
    /// `retry`, `purge`, `pause`, `resume`, `replay`, `forget`, `reload`,
    /// `handshake_show`, `handshake_clear`.
    pub action: String,
    /// What it acted on: `<route>` or `<route>/<event id>` (queue actions, forget),
    /// a delivery ID (replay), a route (handshakes), `config` (reload).
    pub target: String,
    /// The request's other parameters, `key=value` joined by `, ` (a destination, a
    /// bulk retry's filters, a pause's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `ok` (2xx), `refused` (4xx: nothing to act on, a conflict) or `failed` (5xx:
    /// the store did not answer).
    pub result: String,
    /// The HTTP status the action was answered with.
    pub status: u16,
    /// What the answer said: its counts (`retried=3`) or its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `GET /audit?limit=&action=&name=&result=`: operator actions, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditList {
    pub audit: Vec<AuditRecord>,
    /// How many records the audit keeps at most (the oldest go first).
    pub keeps: usize,
}
