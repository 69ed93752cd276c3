//! The queue contract (`delivery = "queue"`) and what it stores: the event is stored
//! with its claim in one atomic, durable step, the provider is answered at once, and
//! delivery workers (`delivery/`) forward it until the upstream acknowledges it
//! with a 2xx. When to try again, how fast, and in what order is delivery policy, in
//! `queue/`.
//!
//! ```text
//! enqueue(route, event)      absent or expired        -> stored as queued, 200 queued
//!                            stored, or done in window -> Existing (duplicate / 422)
//! take_due(route, n, lease)  up to n queued/retrying events due now, leased to this
//!                            worker for `lease` (another replica takes them after it)
//! finish(route, lease, ..)   Delivered -> kept as a dedup record for dedup_ttl, body dropped
//!                            Retry     -> retrying, due at next_at
//!                            Dead      -> dead, kept (no expiry) until retried or purged
//! retry / purge              dead (or any) event -> queued again / deleted
//! ```
//!
//! An event's states and what a new copy of it gets:
//!
//! | state | stored | a copy of it |
//! |---|---|---|
//! | `queued` | body, headers, attempts | 200 duplicate (422 with another body) |
//! | `retrying` | the same, with a next try | 200 duplicate |
//! | `dead` | the same, never expires | 200 duplicate |
//! | `delivered` | attempts only, until `dedup_ttl` | 200 duplicate |
//!
//! **Destinations.** A route's events go to its destinations: its `upstream` (one
//! destination named after the route, whose queue is the route's own) or its
//! `[[routes.destinations]]`. Each destination has a queue of its own ([`QueueRef`]);
//! [`QueueStore::enqueue_to`] claims the event once and stores it in the queue of each
//! destination it goes to ([`Fanout`]), in the same atomic step. From there each
//! destination's delivery, retries and dead letters are its own.
//!
//! **Per-key order** (`order_by`). An event stored with an order key takes a place at
//! the end of its key's line in that destination; only the first of a line is ever due.
//! It leaves the line when delivered, when it dies under `on_dead = "skip"` (the worker
//! moves its key to [`Status::left_line`]), or when purged; the next one is then due.
//! A dead event under `on_dead = "block"` keeps its place, and its line waits.
//!
//! Both durable stores implement [`QueueStore`] (and [`Pacing`](super::Pacing)): the disk
//! store in its database file (`store/disk/queue/`), Redis in Streams with a consumer
//! group (`store/redis/queue/`). The memory store has no queue: a queue that a restart
//! empties would promise the provider what it cannot keep, so `hookgate check` refuses
//! queue routes on it.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{AttemptResult, Claim, StoreError};
use crate::queue::RetryPolicy;

/// Where an event is in its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Stored, not tried yet.
    Queued,
    /// Tried and failed; tried again at `next_at`.
    Retrying,
    /// Out of attempts or age; kept until retried or purged.
    Dead,
    /// Acknowledged by the upstream with a 2xx.
    Delivered,
}

impl State {
    /// The lowercase name used in the API, the command line and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Retrying => "retrying",
            Self::Dead => "dead",
            Self::Delivered => "delivered",
        }
    }

    /// Parses the lowercase name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "retrying" => Self::Retrying,
            "dead" => Self::Dead,
            "delivered" => Self::Delivered,
            _ => return None,
        })
    }

    /// Whether the event still waits for a delivery (or an operator).
    pub fn undelivered(self) -> bool {
        self != Self::Delivered
    }
}

/// One header as received. Values that are not UTF-8 (rare, but allowed by HTTP) are
/// kept as base64 so that nothing changes on the way through the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredHeader {
    #[serde(rename = "n")]
    pub name: String,
    #[serde(rename = "v", default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

/// What is forwarded, besides the body: everything a worker needs to make the same
/// request a sync forward would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub event_id: String,
    /// The event's type, where the route knows where to find it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// The short body fingerprint, to tell a copy from another body under the same ID.
    pub fingerprint: String,
    pub method: String,
    pub headers: Vec<StoredHeader>,
    pub query: Option<String>,
    /// The provider's address, for `X-Forwarded-For`.
    pub peer: String,
    /// Unix milliseconds when the gateway accepted it.
    pub received_at_ms: u64,
    /// The W3C `traceparent` of the delivery span that accepted it (`[telemetry]
    /// otlp` on): each attempt's span is its child and links to it. Absent from
    /// events accepted with telemetry off and from earlier versions' records (both
    /// still load); never written when absent, so those records are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl Envelope {
    /// The stored form of a request's headers.
    pub fn store_headers(headers: &http::HeaderMap) -> Vec<StoredHeader> {
        use base64::Engine as _;
        headers
            .iter()
            .map(|(n, v)| match v.to_str() {
                Ok(t) => StoredHeader {
                    name: n.as_str().to_owned(),
                    text: Some(t.to_owned()),
                    base64: None,
                },
                Err(_) => StoredHeader {
                    name: n.as_str().to_owned(),
                    text: None,
                    base64: Some(base64::engine::general_purpose::STANDARD.encode(v.as_bytes())),
                },
            })
            .collect()
    }

    /// The headers as a map again. A header this gateway did not store is skipped.
    pub fn header_map(&self) -> http::HeaderMap {
        use base64::Engine as _;
        let mut map = http::HeaderMap::with_capacity(self.headers.len());
        for h in &self.headers {
            let bytes = match (&h.text, &h.base64) {
                (Some(t), _) => t.as_bytes().to_vec(),
                (None, Some(b)) => match base64::engine::general_purpose::STANDARD.decode(b) {
                    Ok(v) => v,
                    Err(_) => continue,
                },
                (None, None) => continue,
            };
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(h.name.as_bytes()),
                http::HeaderValue::from_bytes(&bytes),
            ) {
                map.append(name, value);
            }
        }
        map
    }
}

/// A stored event: its envelope and its raw body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub envelope: Envelope,
    pub body: bytes::Bytes,
}

impl StoredEvent {
    /// One byte string: the envelope's JSON length (4 bytes, big-endian), the JSON,
    /// then the body as received.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(&self.envelope).unwrap_or_default();
        let mut out = Vec::with_capacity(4 + json.len() + self.body.len());
        out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(&self.body);
        out
    }

    /// The event an [`encode`](Self::encode) wrote, or `None` for other bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (len, rest) = bytes.split_at_checked(4)?;
        let len = usize::try_from(u32::from_be_bytes(len.try_into().ok()?)).ok()?;
        let (json, body) = rest.split_at_checked(len)?;
        Some(Self {
            envelope: serde_json::from_slice(json).ok()?,
            body: bytes::Bytes::copy_from_slice(body),
        })
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Unix milliseconds when it started.
    pub at_ms: u64,
    /// The upstream's status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How it ended (stored as `delivered`, `http_4xx`, `http_5xx`, …).
    pub result: AttemptResult,
    /// The error, when there was no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
    /// The destination's kind, for every kind but HTTP (`postgres`, `nats`, `amqp`,
    /// `redis_stream`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What the destination's server said it did with the event: the inbox row's
    /// `id`, the stream's sequence, the confirm, the stream entry's ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

/// Attempts kept per event (the count goes on; the oldest are dropped).
pub const HISTORY: usize = 20;

/// An event's delivery state, stored beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub state: State,
    /// Attempts made so far.
    pub attempts: u32,
    /// Unix milliseconds of the next try (queued and retrying).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at_ms: Option<u64>,
    /// The last [`HISTORY`] attempts, oldest first.
    #[serde(default)]
    pub history: Vec<Attempt>,
    /// Why it is dead, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    /// Unix ms of the last operator retry: `max_age` counts from here then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeued_at_ms: Option<u64>,
    /// The destination's `order_by` key while the event holds its place in that key's
    /// line: events behind it wait until it is delivered (or dead, with `on_dead =
    /// "skip"`, which the worker marks by clearing this before recording the attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_key: Option<String>,
    /// The key of the line a dead event left (`on_dead = "skip"`): an operator's retry
    /// puts it back at the end of that line, so it never runs beside its key's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_line: Option<String>,
}

impl Status {
    /// A new event's status: queued, due now.
    pub fn queued(now_ms: u64) -> Self {
        Self {
            state: State::Queued,
            attempts: 0,
            next_at_ms: Some(now_ms),
            history: Vec::new(),
            dead_reason: None,
            requeued_at_ms: None,
            order_key: None,
            left_line: None,
        }
    }

    /// Applies an attempt's end.
    pub fn record(&mut self, end: &Finish) {
        let attempt = end.attempt();
        // A breaker's probe costs the event no attempt.
        if !matches!(end, Finish::Probe(..)) {
            self.attempts = self.attempts.saturating_add(1);
        }
        self.history.push(attempt.clone());
        if self.history.len() > HISTORY {
            let extra = self.history.len() - HISTORY;
            self.history.drain(..extra);
        }
        match end {
            Finish::Delivered(_) => {
                self.state = State::Delivered;
                self.next_at_ms = None;
                // The next event of its key may go.
                self.order_key = None;
            }
            Finish::Retry(_, at) | Finish::Probe(_, at) => {
                self.state = State::Retrying;
                self.next_at_ms = Some(*at);
            }
            Finish::Dead(_, why) => {
                self.state = State::Dead;
                self.next_at_ms = None;
                self.dead_reason = Some(why.clone());
            }
        }
    }

    /// Back in the queue, due now (an operator's retry). The schedule starts again:
    /// the attempt count from zero, `max_age` from now; the history is kept. An event
    /// that left its key's line when it died takes a place at the end of it again.
    pub fn requeue(&mut self, now_ms: u64) {
        if self.order_key.is_none() {
            self.order_key = self.left_line.take();
        }
        self.state = State::Queued;
        self.attempts = 0;
        self.next_at_ms = Some(now_ms);
        self.dead_reason = None;
        self.requeued_at_ms = Some(now_ms);
    }
}

/// How an attempt ended, as the worker tells the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// A 2xx: done; kept as a dedup record (without its body) for `dedup_ttl`.
    Delivered(Attempt),
    /// Failed; try again at this Unix millisecond.
    Retry(Attempt, u64),
    /// Failed for the last time (the reason says which limit).
    Dead(Attempt, String),
    /// An open breaker's probe failed: recorded in the event's history, but not
    /// counted against its `max_attempts`; due again at this Unix millisecond (the
    /// destination stays paused).
    Probe(Attempt, u64),
}

impl Finish {
    /// The attempt it records.
    pub fn attempt(&self) -> &Attempt {
        match self {
            Self::Delivered(a) | Self::Retry(a, _) | Self::Dead(a, _) | Self::Probe(a, _) => a,
        }
    }
}

/// What an enqueue found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Stored durably: answer 200 queued.
    Queued,
    /// The event is already there (stored, or delivered within the dedup window), or a
    /// sync claim holds it: answer as a claim that found it.
    Existing(Claim),
}

/// An event a worker holds for one attempt.
#[derive(Debug, Clone)]
pub struct Leased {
    pub event: StoredEvent,
    pub status: Status,
    /// Identifies this lease to the store (a stream entry ID on Redis).
    pub lease: String,
}

/// One line of `hookgate events list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The destination, on a route with several (the admin API fills it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    pub event_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    pub state: State,
    pub attempts: u32,
    pub received_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at_ms: Option<u64>,
    /// The last attempt's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
    /// The last attempt's status, when the destination answered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// Unix milliseconds when the last attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at_ms: Option<u64>,
}

impl Summary {
    /// The summary of an event's envelope and status.
    pub fn of(envelope: &Envelope, status: &Status) -> Self {
        Self {
            destination: None,
            event_id: envelope.event_id.clone(),
            event_type: envelope.event_type.clone(),
            state: status.state,
            attempts: status.attempts,
            received_at_ms: envelope.received_at_ms,
            next_at_ms: status.next_at_ms,
            last_result: status.history.last().map(|a| a.result.to_string()),
            last_status: status.history.last().and_then(|a| a.status),
            last_at_ms: status.history.last().map(|a| a.at_ms),
        }
    }
}

/// Which events an operator's retry or purge acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    One(String),
    AllDead,
    /// These events (an operator's bulk retry), each if it is dead or retrying (a
    /// retry) or undelivered (a purge), in this order.
    Some(Vec<String>),
}

/// A route's queue at a glance, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Queued and retrying events.
    pub waiting: u64,
    pub dead: u64,
    /// Unix milliseconds when the oldest undelivered (waiting or dead) event arrived.
    pub oldest_received_ms: Option<u64>,
}

/// The queue contract both durable stores implement. Every call names the store's key
/// prefix and the route; events are keyed by their event ID within the route.
pub trait QueueStore: Send + Sync {
    /// Stores the event and its claim in one atomic, durable step, in the queue of
    /// each destination it goes to, or reports what is already there (a copy stored
    /// for any of the route's destinations). Returns only once the event is on disk
    /// (or acknowledged by Redis).
    fn enqueue_to(
        &self,
        fanout: &Fanout<'_>,
        event: &StoredEvent,
        dedup_ttl: Duration,
    ) -> impl Future<Output = Result<Enqueued, StoreError>> + Send;

    /// [`enqueue_to`](Self::enqueue_to) one queue, unordered.
    fn enqueue(
        &self,
        q: &QueueRef<'_>,
        event: &StoredEvent,
        dedup_ttl: Duration,
    ) -> impl Future<Output = Result<Enqueued, StoreError>> + Send {
        let fanout = Fanout {
            prefix: q.prefix,
            route: q.route,
            all: vec![q.destination],
            to: vec![(q.destination, None)],
        };
        async move { self.enqueue_to(&fanout, event, dedup_ttl).await }
    }

    /// Up to `max` events due now, each leased to the caller for `lease`: no other
    /// worker (here or on another replica) takes it before the lease runs out.
    fn take_due(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Leased>, StoreError>> + Send;

    /// Extends a lease the caller holds to `lease` from now. A worker renews the lease
    /// of each event it holds while the attempt runs and while its result is being
    /// recorded, so that no other worker (here or on another replica) takes the event
    /// before that attempt has ended, however long it takes and whatever lease the
    /// other workers use. `Ok(false)`: the lease was lost (it ran out and another
    /// worker took the event, or the event was purged); the attempt must not go on.
    fn renew(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Ends a lease whose attempt was never sent (the gateway stops while it waits for
    /// a rate slot, a batch taken for more slots than were free): the event is due
    /// again at once, rather than after the lease. `Ok(false)`: the lease was lost
    /// already.
    fn give_back(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records how a leased attempt ended. A lease that was lost (it ran out and another
    /// worker took the event) is ignored: `Ok(false)`.
    fn finish(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        end: &Finish,
        dedup_ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Events of the route, oldest first, optionally of one state; at most `limit`.
    fn list(
        &self,
        q: &QueueRef<'_>,
        state: Option<State>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Summary>, StoreError>> + Send;

    /// One event's envelope and status.
    fn show(
        &self,
        q: &QueueRef<'_>,
        event_id: &str,
    ) -> impl Future<Output = Result<Option<(Envelope, Status)>, StoreError>> + Send;

    /// Queues dead events again (or one event that is dead or retrying), due now.
    /// Returns how many.
    fn retry(
        &self,
        q: &QueueRef<'_>,
        target: &Target,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes dead events (or one undelivered event) and their dedup records, so a new
    /// copy from the provider is accepted. Returns how many.
    fn purge(
        &self,
        q: &QueueRef<'_>,
        target: &Target,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Releases the lines dead events still hold (`order_by` with `on_dead = "block"`,
    /// then switched to `"skip"`): each such event gives its key's line to the next
    /// event, as a skip would have (its status's `order_key` moves to `left_line`, so an
    /// operator's retry puts it back at the end of the line). Returns how many.
    fn release_blocked(
        &self,
        q: &QueueRef<'_>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Forgets a delivered event (its record of the dedup window), so that the
    /// provider's next copy is accepted and delivered again: a deliberate redelivery
    /// (`hookgate forget`). An undelivered event is left alone (`false`): purge it.
    fn forget_delivered(
        &self,
        q: &QueueRef<'_>,
        event_id: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Waiting and dead counts, and the oldest undelivered event's arrival.
    fn depth(&self, q: &QueueRef<'_>) -> impl Future<Output = Result<Depth, StoreError>> + Send;
}

/// One destination's queue within a store. A route with `upstream` has one
/// destination, named after the route; its queue is the route's own (the keys and
/// tables a route had before it had destinations). Built by [`QueueRef::new`] only.
#[derive(Debug, Clone, Copy)]
pub struct QueueRef<'a> {
    /// `store.key_prefix`.
    pub prefix: &'a str,
    pub route: &'a str,
    pub destination: &'a str,
}

impl<'a> QueueRef<'a> {
    /// The queue of one of a route's destinations (the route's own: `destination` is
    /// the route's name).
    pub fn new(prefix: &'a str, route: &'a str, destination: &'a str) -> Self {
        Self {
            prefix,
            route,
            destination,
        }
    }

    /// Whether this is the queue of the route's own destination
    /// ([`is_own_destination`](crate::config::is_own_destination)).
    pub fn is_own(&self) -> bool {
        crate::config::is_own_destination(self.route, self.destination)
    }

    /// `<route>` for the destination named after the route, `<route>/<destination>`
    /// for the others. Route names hold no `/`, so no two queues share a name.
    pub fn name(&self) -> std::borrow::Cow<'a, str> {
        if self.is_own() {
            std::borrow::Cow::Borrowed(self.route)
        } else {
            std::borrow::Cow::Owned(format!("{}/{}", self.route, self.destination))
        }
    }
}

/// Where one event goes: the route's destinations it matches, each with its order
/// key (`order_by`), and every destination the route has (a copy held by any of
/// them is a duplicate).
#[derive(Debug, Clone)]
pub struct Fanout<'a> {
    pub prefix: &'a str,
    pub route: &'a str,
    pub all: Vec<&'a str>,
    pub to: Vec<(&'a str, Option<String>)>,
}

impl<'a> Fanout<'a> {
    /// The queue of one of the route's destinations.
    pub fn queue(&self, destination: &'a str) -> QueueRef<'a> {
        QueueRef::new(self.prefix, self.route, destination)
    }
}

/// The retry schedule applied to a stored event. It lives here, beside [`Status`], so
/// that `queue/` (delivery policy, where [`RetryPolicy::next_try`] decides) knows
/// nothing of storage.
impl RetryPolicy {
    /// What follows a failed attempt: retry at a time, or dead with a reason.
    /// `retry_after` is the upstream's own `Retry-After`, honoured up to `max_delay`.
    /// `max_age` counts from the event's arrival, or from an operator's last retry,
    /// without the time its destination spent paused since (`held`, from the
    /// destination's pauses: [`Control::held_ms`](crate::delivery::control::Control::held_ms)).
    pub fn after_failure(
        &self,
        status: &Status,
        received_at_ms: u64,
        now_ms: u64,
        retry_after: Option<Duration>,
        jitter: f64,
        held: impl Fn(u64, u64) -> u64,
    ) -> Result<u64, String> {
        let start = received_at_ms.max(status.requeued_at_ms.unwrap_or(0));
        self.next_try(
            status.attempts.saturating_add(1),
            start.saturating_add(held(start, now_ms)),
            now_ms,
            retry_after,
            jitter,
        )
    }
}

impl crate::state::Routing {
    /// A destination's queue in the configured store. (Written here, beside
    /// [`QueueRef`], so the routing snapshot needs nothing of the store.)
    pub(crate) fn queue<'a>(&'a self, route: &'a str, destination: &'a str) -> QueueRef<'a> {
        QueueRef::new(&self.store_cfg.key_prefix, route, destination)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn events_round_trip_with_any_header_bytes() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-text", http::HeaderValue::from_static("plain"));
        headers.insert(
            "x-bytes",
            http::HeaderValue::from_bytes(b"caf\xe9").expect("obs-text"),
        );
        let ev = StoredEvent {
            envelope: Envelope {
                event_id: "evt_1".into(),
                event_type: Some("invoice.paid".into()),
                fingerprint: "ab".into(),
                method: "POST".into(),
                headers: Envelope::store_headers(&headers),
                query: Some("a=1".into()),
                peer: "127.0.0.1".into(),
                received_at_ms: 5,
                trace: None,
            },
            body: bytes::Bytes::from_static(b"{\"id\":1}\x00\xff"),
        };
        let back = StoredEvent::decode(&ev.encode()).expect("decodes");
        assert_eq!(back, ev);
        assert_eq!(back.envelope.header_map(), headers);
        assert_eq!(StoredEvent::decode(b"\x00\x00\x00\x09{}"), None);
    }

    fn no_pause(_: u64, _: u64) -> u64 {
        0
    }

    #[test]
    fn the_last_attempt_or_max_age_makes_an_event_dead() {
        let p = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        let mut s = Status::queued(0);
        assert!(p.after_failure(&s, 0, 0, None, 0.5, no_pause).is_ok());
        s.attempts = 2;
        assert!(p.after_failure(&s, 0, 0, None, 0.5, no_pause).is_err());
        let old = RetryPolicy {
            max_age: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        let s = Status::queued(0);
        assert!(
            old.after_failure(&s, 0, 9_500, None, 1.0, no_pause)
                .is_err()
        );
        // The upstream's Retry-After is honoured, up to max_delay and at least initial.
        assert_eq!(
            p.after_failure(&s, 0, 1_000, Some(Duration::from_secs(7)), 0.0, no_pause),
            Ok(8_000)
        );
        assert_eq!(
            p.after_failure(&s, 0, 1_000, Some(Duration::ZERO), 0.0, no_pause),
            Ok(2_000)
        );
        // An operator's retry restarts max_age.
        let mut requeued = Status::queued(0);
        requeued.requeue(20_000);
        assert!(
            old.after_failure(&requeued, 0, 21_000, None, 1.0, no_pause)
                .is_ok()
        );
        // Time paused is not counted: 9.5 s old, 5 s of it paused.
        assert!(
            old.after_failure(&s, 0, 9_500, None, 1.0, |_, _| 5_000)
                .is_ok()
        );
    }

    #[test]
    fn a_delivered_status_keeps_its_history_bounded() {
        let mut s = Status::queued(0);
        let a = Attempt {
            at_ms: 1,
            status: Some(503),
            result: AttemptResult::Http5xx,
            error: None,
            duration_ms: 3,
            kind: None,
            receipt: None,
        };
        for i in 0..30 {
            s.record(&Finish::Retry(a.clone(), i));
        }
        assert_eq!(s.attempts, 30);
        assert_eq!(s.history.len(), HISTORY);
        s.record(&Finish::Probe(a.clone(), 99));
        assert_eq!(s.attempts, 30, "a probe costs no attempt");
        assert_eq!((s.state, s.next_at_ms), (State::Retrying, Some(99)));
        s.record(&Finish::Delivered(a));
        assert_eq!(s.state, State::Delivered);
        assert_eq!(s.next_at_ms, None);
    }
}
