//! Durable delivery (`delivery = "queue"`): the event is stored with its claim in one
//! atomic, durable step, the provider is answered at once, and delivery workers
//! forward it until the upstream acknowledges it with a 2xx.
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
//! Both durable stores implement [`QueueStore`]: the disk store in its database file
//! (`store/disk/queue.rs`), Redis in Streams with a consumer group (`store/redis/queue.rs`).
//! The memory store has no queue: a queue that a restart empties would promise the
//! provider what it cannot keep, so `hookgate check` refuses queue routes on it.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::store::{AttemptResult, Claim, StoreError};

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
        let attempt = match end {
            Finish::Delivered(a) | Finish::Retry(a, _) | Finish::Dead(a, _) => a,
        };
        self.attempts = self.attempts.saturating_add(1);
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
            Finish::Retry(_, at) => {
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
    pub state: State,
    pub attempts: u32,
    pub received_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at_ms: Option<u64>,
    /// The last attempt's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
}

impl Summary {
    /// The summary of an event's envelope and status.
    pub fn of(envelope: &Envelope, status: &Status) -> Self {
        Self {
            destination: None,
            event_id: envelope.event_id.clone(),
            state: status.state,
            attempts: status.attempts,
            received_at_ms: envelope.received_at_ms,
            next_at_ms: status.next_at_ms,
            last_result: status.history.last().map(|a| a.result.to_string()),
        }
    }
}

/// Which events an operator's retry or purge acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    One(String),
    AllDead,
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

    /// Takes one of the route's `rate_limit` slots (shared by every replica on Redis):
    /// `Ok(token)` when a delivery may start now, `Err(wait)` when the limit (or a pause
    /// the upstream asked for) says how long to wait first.
    fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> impl Future<Output = Result<Result<String, Duration>, StoreError>> + Send;

    /// Gives a slot back unused (nothing was due).
    fn rate_return(
        &self,
        q: &QueueRef<'_>,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Takes up to `want` of the route's `concurrency` slots (`max` in all), each held
    /// until returned or until `lease` runs out (a replica that died): their tokens,
    /// none when all are in use. On Redis the slots are shared by every replica; the
    /// disk store has one process, whose own bound is the limit, and grants them all.
    fn slot_take(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        want: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Extends a slot held by an attempt that is still running to `lease` from now
    /// (shared slots only; the disk store's are this process's own).
    fn slot_renew(
        &self,
        _q: &QueueRef<'_>,
        _token: &str,
        _lease: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async { Ok(()) }
    }

    /// Gives a slot back (the attempt ended, or nothing was due).
    fn slot_return(
        &self,
        q: &QueueRef<'_>,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Holds every delivery of the route for `wait` (the upstream's `Retry-After` on a
    /// 429 or 503): that upstream only is slowed.
    fn pause(
        &self,
        q: &QueueRef<'_>,
        wait: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A route's `rate_limit = "50/s"` (or `"/m"`): at most `count` deliveries start in
/// any `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub count: u32,
    pub window: Duration,
}

impl RateLimit {
    /// Slack added to the window, so that deliveries which take different times to
    /// reach the upstream still never arrive more than `count` in one `window`.
    pub const SLACK: Duration = Duration::from_millis(100);

    /// `N/s` or `N/m`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (n, unit) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: write it as \"50/s\" or \"600/m\""))?;
        let count: u32 = n
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{s:?}: the count must be a whole number above 0"))?;
        let window = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            other => return Err(format!("{other:?}: the unit is s or m")),
        };
        Ok(Self { count, window })
    }

    /// The window deliveries are counted over, with its slack.
    pub fn counted_over(&self) -> Duration {
        self.window + Self::SLACK
    }
}

/// One destination's queue within a store. A route with `upstream` has one
/// destination, named after the route; its queue is the route's own (the keys and
/// tables a route had before it had destinations).
#[derive(Debug, Clone, Copy)]
pub struct QueueRef<'a> {
    /// `store.key_prefix`.
    pub prefix: &'a str,
    pub route: &'a str,
    pub destination: &'a str,
}

impl<'a> QueueRef<'a> {
    /// The queue of a route's only destination, named after it.
    pub fn route(prefix: &'a str, route: &'a str) -> Self {
        Self {
            prefix,
            route,
            destination: route,
        }
    }

    /// `<route>` for the destination named after the route, `<route>/<destination>`
    /// for the others. Route names hold no `/`, so no two queues share a name.
    pub fn name(&self) -> std::borrow::Cow<'a, str> {
        if self.destination == self.route {
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
        QueueRef {
            prefix: self.prefix,
            route: self.route,
            destination,
        }
    }
}

/// Per-key order (`order_by`): what a dead event does to the events behind it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDead {
    /// The next event of the key goes on (the default): one bad event does not stop
    /// its key for good; the dead one waits for an operator.
    #[default]
    Skip,
    /// The key waits until the dead event is retried and delivered, or purged.
    Block,
}

/// Longest order key kept as it is; a longer one is kept as its SHA-256 (hex), so that
/// a body cannot make the store's keys arbitrarily long.
pub const ORDER_KEY_MAX: usize = 128;

/// An order key as stored: the value itself, or the SHA-256 of a long one.
pub fn order_key(value: &str) -> String {
    use sha2::Digest as _;
    if value.len() <= ORDER_KEY_MAX {
        value.to_owned()
    } else {
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(value.as_bytes()))
        )
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A route's retry schedule: `retry = { max_attempts, initial, max_delay, max_age }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial: Duration,
    pub max_delay: Duration,
    pub max_age: Duration,
}

impl Default for RetryPolicy {
    /// 20 attempts, 1 s doubling to at most 1 h, for at most 72 h: the last try comes
    /// about 8 h after the event arrived (4 to 8 h with jitter), long enough to ride out
    /// a deploy or an outage.
    fn default() -> Self {
        Self {
            max_attempts: 20,
            initial: Duration::from_secs(1),
            max_delay: Duration::from_secs(3600),
            max_age: Duration::from_secs(72 * 3600),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempts + 1`, after `attempts` failures: `initial`
    /// doubled per failure, capped at `max_delay`, with "equal jitter" (between half
    /// and all of it), so events that failed together do not return together.
    pub fn backoff(&self, attempts: u32, jitter: f64) -> Duration {
        let exp = attempts.saturating_sub(1).min(40);
        let full = self
            .initial
            .saturating_mul(2u32.saturating_pow(exp.min(31)))
            .min(self.max_delay);
        let half = full / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// What follows a failed attempt: retry at a time, or dead with a reason.
    /// `retry_after` is the upstream's own `Retry-After`, honoured up to `max_delay`.
    pub fn after_failure(
        &self,
        status: &Status,
        received_at_ms: u64,
        now_ms: u64,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Result<u64, String> {
        let attempts = status.attempts.saturating_add(1);
        if attempts >= self.max_attempts {
            return Err(format!("{attempts} attempts failed (max_attempts)"));
        }
        // The upstream's Retry-After, between `initial` (a `0` must not burn the
        // attempts in a burst) and `max_delay`.
        let delay = match retry_after {
            Some(d) => d.clamp(self.initial, self.max_delay.max(self.initial)),
            None => self.backoff(attempts, jitter),
        };
        let at = now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        let since = received_at_ms.max(status.requeued_at_ms.unwrap_or(0));
        let deadline =
            since.saturating_add(u64::try_from(self.max_age.as_millis()).unwrap_or(u64::MAX));
        if at > deadline {
            return Err(format!(
                "next try would be past max_age ({})",
                humantime::format_duration(self.max_age)
            ));
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
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
            },
            body: bytes::Bytes::from_static(b"{\"id\":1}\x00\xff"),
        };
        let back = StoredEvent::decode(&ev.encode()).expect("decodes");
        assert_eq!(back, ev);
        assert_eq!(back.envelope.header_map(), headers);
        assert_eq!(StoredEvent::decode(b"\x00\x00\x00\x09{}"), None);
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1, 1.0), Duration::from_secs(1));
        assert_eq!(p.backoff(2, 1.0), Duration::from_secs(2));
        assert_eq!(p.backoff(5, 1.0), Duration::from_secs(16));
        assert_eq!(p.backoff(5, 0.0), Duration::from_secs(8));
        assert_eq!(p.backoff(30, 1.0), Duration::from_secs(3600));
    }

    #[test]
    fn the_last_attempt_or_max_age_makes_an_event_dead() {
        let p = RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        };
        let mut s = Status::queued(0);
        assert!(p.after_failure(&s, 0, 0, None, 0.5).is_ok());
        s.attempts = 2;
        assert!(p.after_failure(&s, 0, 0, None, 0.5).is_err());
        let old = RetryPolicy {
            max_age: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        let s = Status::queued(0);
        assert!(old.after_failure(&s, 0, 9_500, None, 1.0).is_err());
        // The upstream's Retry-After is honoured, up to max_delay and at least initial.
        assert_eq!(
            p.after_failure(&s, 0, 1_000, Some(Duration::from_secs(7)), 0.0),
            Ok(8_000)
        );
        assert_eq!(
            p.after_failure(&s, 0, 1_000, Some(Duration::ZERO), 0.0),
            Ok(2_000)
        );
        // An operator's retry restarts max_age.
        let mut requeued = Status::queued(0);
        requeued.requeue(20_000);
        assert!(old.after_failure(&requeued, 0, 21_000, None, 1.0).is_ok());
    }

    #[test]
    fn rate_limits_are_counts_per_second_or_minute() {
        assert_eq!(
            RateLimit::parse("50/s"),
            Ok(RateLimit {
                count: 50,
                window: Duration::from_secs(1)
            })
        );
        assert_eq!(
            RateLimit::parse("600/m").map(|r| r.window),
            Ok(Duration::from_secs(60))
        );
        for bad in ["50", "0/s", "x/s", "5/h", "-1/s"] {
            assert!(RateLimit::parse(bad).is_err(), "{bad}");
        }
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
        };
        for i in 0..30 {
            s.record(&Finish::Retry(a.clone(), i));
        }
        assert_eq!(s.attempts, 30);
        assert_eq!(s.history.len(), HISTORY);
        s.record(&Finish::Delivered(a));
        assert_eq!(s.state, State::Delivered);
        assert_eq!(s.next_at_ms, None);
    }
}
