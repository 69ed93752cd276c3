//! The queue's path (`delivery = "queue"`): delivery workers take due events from the
//! store, hand each to its destination (`destination/`: over HTTP exactly as a sync
//! forward would, with the same headers, `Idempotency-Key`, `forward_secret`,
//! `upstream_timeout`, no redirects), and record how each attempt ended.
//!
//! `worker.rs` is the loop and the slots; `attempt.rs` one attempt's stages;
//! `destination/` the contract between them and each kind of destination. None of it
//! knows of HTTP but `destination/http.rs`.
//!
//! ```text
//! loop: for each queue route with free slots (route.concurrency):
//!         take_due(free, lease = upstream_timeout + LEASE_MARGIN) → one task per event
//!       sleep until woken (an event queued, an attempt ended) or POLL
//! attempt, under a lease kept by keep_lease while it runs:
//!   send:   a rate_limit slot (waited for) → enough lease left? → forward
//!   decide: 2xx → Delivered; else Retry at backoff (or the upstream's Retry-After),
//!           or Dead once max_attempts or max_age is spent   (pure: `decide`)
//!   record: finish in the store (retried for the lease's length if the store fails)
//! ```
//!
//! A lease keeps other workers (other replicas on Redis) off an event while it is
//! tried. It belongs to the attempt: taken for this destination's `upstream_timeout`
//! and `LEASE_MARGIN`, renewed every `RENEW_EVERY` while the attempt runs (a wait for
//! a rate slot included) and while its result is recorded, and an attempt is sent
//! only with at least its timeout of lease left. If this process dies (or stops
//! renewing), the lease runs out and the event is tried again, with the same
//! `Idempotency-Key`; if the lease is found lost while the request is still open (a
//! pause longer than the lease, a purge), the request is abandoned. On shutdown the
//! loop stops taking events, attempts waiting for a rate slot end unsent, attempts in
//! progress get `shutdown_grace`, and whatever is left stays stored for the next
//! start.
//!
//! The `rate_limit` slot is taken where it is spent, just before the request is sent:
//! the limiter counts a delivery from when its slot is granted, so a slot taken
//! earlier (before the lease, the task, the lease check) could let deliveries granted
//! in different windows reach the upstream in the same one.

mod attempt;
pub mod control;
pub mod destination;
pub mod samples;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::Delivery;
use crate::forward::Forwarder;
use crate::observe::metrics::{DestinationLabel, Metrics};
use crate::queue::now_ms;
use crate::state::{Clock, Routing};
use crate::store::{QueueStore as _, Store};

pub use worker::run;

/// A lease outlasts the forward by this much before another worker (another replica,
/// or this one after a restart) may take the event: time to record the attempt.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// What the delivery workers use of the gateway, and nothing more: the routes (swapped
/// whole on reload), the store, the client destinations are reached with, metrics,
/// and the bell that wakes the loop.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    pub(crate) store: Store,
    pub(crate) forwarder: Forwarder,
    /// The connections to destination servers of other kinds than HTTP.
    pub(crate) links: Arc<destination::Links>,
    /// The destinations' pauses and breakers (`control.rs`).
    pub(crate) controls: Arc<control::Controls>,
    pub(crate) clock: Clock,
    pub(crate) metrics: Arc<Metrics>,
    /// Rung when an event is queued or an attempt ends and its slot is free.
    pub(crate) wake: Arc<tokio::sync::Notify>,
    /// How long attempts in progress may go on once the gateway stops.
    pub(crate) shutdown_grace: Duration,
    /// Each attempt's span (`[telemetry] otlp`; off: nothing is built).
    pub(crate) traces: crate::observe::traces::Traces,
}

impl WorkerContext {
    /// The current routing snapshot.
    fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }
}

/// Refreshes each queue route's depth, dead count and oldest age (before `/metrics`
/// is rendered, so a scrape sees the store as it is).
pub(crate) async fn gauges(routing: &Routing, store: &Store, metrics: &Metrics) {
    let mut queues = Vec::new();
    for route in routing.routes.values() {
        if route.delivery == Delivery::Queue {
            queues.extend(
                route
                    .destinations
                    .iter()
                    .map(|d| (route.clone(), d.clone())),
            );
        }
    }
    for (route, dest) in queues {
        let q = routing.queue(&route.name, &dest.name);
        // A store that does not answer leaves the gauges as they were; the scrape goes on.
        let depth = tokio::time::timeout(Duration::from_secs(1), store.depth(&q)).await;
        if let Ok(Ok(depth)) = depth {
            let label = DestinationLabel {
                route: route.name.clone(),
                destination: dest.name.clone(),
            };
            let m = metrics;
            m.queue_depth
                .get_or_create(&label)
                .set(i64::try_from(depth.waiting).unwrap_or(i64::MAX));
            m.queue_dead
                .get_or_create(&label)
                .set(i64::try_from(depth.dead).unwrap_or(i64::MAX));
            let age = depth
                .oldest_received_ms
                .map_or(0, |rx| now_ms().saturating_sub(rx) / 1000);
            m.queue_oldest_age
                .get_or_create(&label)
                .set(i64::try_from(age).unwrap_or(i64::MAX));
        }
        let now = now_ms();
        let control = tokio::time::timeout(Duration::from_secs(1), control::load(store, &q, now));
        if let Ok(Ok(c)) = control.await {
            let label = DestinationLabel {
                route: route.name.clone(),
                destination: dest.name.clone(),
            };
            let paused = c.paused_at(now).is_some();
            metrics
                .destination_paused
                .get_or_create(&label)
                .set(i64::from(paused));
            metrics
                .destination_breaker_open
                .get_or_create(&label)
                .set(i64::from(c.breaker_open(now)));
        }
    }
}
