//! The metrics every gateway exports (`GET /metrics` on the admin listener): one
//! registry, typed labels (the vocabulary in `outcome.rs`), handles resolved once per
//! route.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;

use crate::outcome::{AttemptResult, LeftQueue, Outcome};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-delivery metrics. Never an event ID: labels stay low-cardinality.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOutcome {
    pub route: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteSecret {
    pub route: String,
    /// The 0-based position of the secret in the route's `secrets` list.
    pub secret: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteResult {
    pub route: String,
    pub result: String,
}

/// A queue in the store, by name (`<route>` or `<route>/<destination>`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

/// A queue route's destination (configured, never read from a delivery).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DestinationLabel {
    pub route: String,
    pub destination: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DestinationResult {
    pub route: String,
    pub destination: String,
    pub result: AttemptResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DestinationOutcome {
    pub route: String,
    pub destination: String,
    pub outcome: LeftQueue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DestinationStage {
    pub route: String,
    pub destination: String,
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

pub use crate::store::metrics::{StoreMetrics, TableLabel};

fn latency() -> Histogram {
    // 0.5 ms … ~16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// One route's metric handles, resolved once: the hot path then counts without
/// building label strings or hashing them into the registry's families.
#[derive(Debug)]
pub struct RouteMetrics {
    route: String,
    outcomes: std::sync::RwLock<std::collections::HashMap<Outcome, Counter>>,
    delivery_seconds: Histogram,
    upstream_seconds: Histogram,
    secrets: std::sync::RwLock<Vec<Counter>>,
}

impl RouteMetrics {
    /// Verified deliveries so far (every secret's matches).
    pub fn verified(&self) -> u64 {
        read(&self.secrets).iter().map(Counter::get).sum()
    }

    /// Deliveries so far with this outcome (its label: `bad_signature`, …).
    pub fn outcome_count(&self, outcome: &str) -> u64 {
        read(&self.outcomes)
            .iter()
            .filter(|(o, _)| o.as_str() == outcome)
            .map(|(_, c)| c.get())
            .sum()
    }
}

fn read<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every metric hookgate exports, registered once and shared by all requests.
#[derive(Debug)]
pub struct Metrics {
    routes: std::sync::RwLock<std::collections::HashMap<String, std::sync::Arc<RouteMetrics>>>,
    store_ops: [Histogram; 4],
    registry: Registry,
    pub deliveries: Family<RouteOutcome, Counter>,
    pub delivery_seconds: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub upstream_seconds: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub store_seconds: Family<OpLabel, Histogram, fn() -> Histogram>,
    pub in_flight: Gauge<i64, AtomicI64>,
    pub matched_secret: Family<RouteSecret, Counter>,
    pub reloads: Family<ResultLabel, Counter>,
    pub config_ok: Gauge<i64, AtomicI64>,
    pub captures: Family<ResultLabel, Counter>,
    /// Secrets handed over in set-up handshakes (Asana, Notion), by route and result
    /// (`kept`, `refused_already_held`, `refused_route_has_secret`).
    pub handed_secrets: Family<RouteResult, Counter>,
    /// Queue routes: events waiting for delivery (queued and retrying), per
    /// destination (a route's `upstream` is a destination named after the route).
    pub queue_depth: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    /// Queue routes: dead events, kept until retried or purged.
    pub queue_dead: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    /// Queue routes: age of the oldest undelivered event, in seconds (0 when none).
    pub queue_oldest_age: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    /// Queue routes: delivery attempts by result (delivered, http_4xx, http_5xx,
    /// timeout, connect, broken).
    pub delivery_attempts: Family<DestinationResult, Counter>,
    /// Queue routes: events that left the queue, by outcome (delivered, dead).
    pub queue_deliveries: Family<DestinationOutcome, Counter>,
    /// Queue routes: attempts whose lease could not be kept, by stage (`before_send`:
    /// not sent; `sending`: the request was abandoned; `recording`: its result was not
    /// recorded). Each is an event another worker may deliver again.
    pub queue_lease_lost: Family<DestinationStage, Counter>,
    /// Undelivered events (waiting and dead) of queues the store holds under the
    /// configured prefix that no route or destination of the config names: nothing
    /// delivers them. Counted at start and after each reload.
    pub queue_stranded: Family<QueueLabel, Gauge<i64, AtomicI64>>,
    /// Queue routes: 1 while the destination is paused (by an operator or its breaker).
    pub destination_paused: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    /// Queue routes: 1 while the destination's breaker holds it paused.
    pub destination_breaker_open: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The queue routes' families, registered together.
struct QueueFamilies {
    queue_depth: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    queue_dead: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    queue_oldest_age: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    delivery_attempts: Family<DestinationResult, Counter>,
    queue_deliveries: Family<DestinationOutcome, Counter>,
    queue_lease_lost: Family<DestinationStage, Counter>,
    queue_stranded: Family<QueueLabel, Gauge<i64, AtomicI64>>,
    destination_paused: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
    destination_breaker_open: Family<DestinationLabel, Gauge<i64, AtomicI64>>,
}

impl QueueFamilies {
    fn register(registry: &mut Registry) -> Self {
        let queue_depth = registered(
            registry,
            "queue_depth",
            "Queue routes: events waiting for delivery (queued and retrying)",
            Family::<DestinationLabel, Gauge<i64, AtomicI64>>::default(),
        );
        let queue_dead = registered(
            registry,
            "queue_dead",
            "Queue routes: dead events, kept until retried or purged",
            Family::<DestinationLabel, Gauge<i64, AtomicI64>>::default(),
        );
        let queue_oldest_age = registered(
            registry,
            "queue_oldest_age_seconds",
            "Queue routes: age of the oldest undelivered event (0 when none)",
            Family::<DestinationLabel, Gauge<i64, AtomicI64>>::default(),
        );
        let delivery_attempts = registered(
            registry,
            "delivery_attempts",
            "Queue routes: delivery attempts by result (delivered, http_4xx, http_5xx, timeout, connect, broken)",
            Family::<DestinationResult, Counter>::default(),
        );
        let queue_deliveries = registered(
            registry,
            "queue_deliveries",
            "Queue routes: events that left the queue, by outcome (delivered, dead)",
            Family::<DestinationOutcome, Counter>::default(),
        );
        let queue_lease_lost = registered(
            registry,
            "queue_lease_lost",
            "Queue routes: attempts whose lease could not be kept, by stage (before_send, sending, recording)",
            Family::<DestinationStage, Counter>::default(),
        );
        let queue_stranded = registered(
            registry,
            "queue_stranded",
            "Undelivered events of stored queues no route or destination of the config names (counted at start and after each reload)",
            Family::<QueueLabel, Gauge<i64, AtomicI64>>::default(),
        );
        let destination_paused = registered(
            registry,
            "destination_paused",
            "Queue routes: 1 while the destination is paused (hookgate events pause, or its breaker); its events are kept and queued",
            Family::<DestinationLabel, Gauge<i64, AtomicI64>>::default(),
        );
        let destination_breaker_open = registered(
            registry,
            "destination_breaker_open",
            "Queue routes: 1 while the destination's breaker holds it paused after consecutive failed attempts (one event is probed per interval)",
            Family::<DestinationLabel, Gauge<i64, AtomicI64>>::default(),
        );
        Self {
            queue_depth,
            queue_dead,
            queue_oldest_age,
            delivery_attempts,
            queue_deliveries,
            queue_lease_lost,
            queue_stranded,
            destination_paused,
            destination_breaker_open,
        }
    }
}

/// Registers `metric` under `name` and hands it back for recording.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// Creates and registers every metric under the `hookgate_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hookgate");
        let deliveries = registered(
            &mut registry,
            "deliveries",
            "Deliveries by route and outcome",
            Family::<RouteOutcome, Counter>::default(),
        );
        let delivery_seconds = registered(
            &mut registry,
            "delivery_duration_seconds",
            "Time from request to answer",
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency),
        );
        let upstream_seconds = registered(
            &mut registry,
            "upstream_duration_seconds",
            "Time spent forwarding upstream",
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency),
        );
        let store_seconds = registered(
            &mut registry,
            "store_duration_seconds",
            "Time per dedup store call (claim, complete, release)",
            Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency),
        );
        let in_flight = registered(
            &mut registry,
            "in_flight_deliveries",
            "Deliveries being handled right now",
            Gauge::<i64, AtomicI64>::default(),
        );
        let matched_secret = registered(
            &mut registry,
            "matched_secret",
            "Verified deliveries by which of the route's secrets matched",
            Family::<RouteSecret, Counter>::default(),
        );
        let reloads = registered(
            &mut registry,
            "config_reloads",
            "Config reloads by result (ok, error)",
            Family::<ResultLabel, Counter>::default(),
        );
        let config_ok = Gauge::<i64, AtomicI64>::default();
        config_ok.set(1);
        registry.register(
            "config_last_reload_ok",
            "1 if the last reload succeeded (or none was tried)",
            config_ok.clone(),
        );
        let store_ops = ["claim", "complete", "release", "enqueue"].map(|op| {
            store_seconds
                .get_or_create(&OpLabel { op: op.to_owned() })
                .clone()
        });
        let captures = registered(
            &mut registry,
            "captures",
            "Captured deliveries by result (written, dropped, failed)",
            Family::<ResultLabel, Counter>::default(),
        );
        let handed_secrets = registered(
            &mut registry,
            "handed_secrets",
            "Secrets handed over in set-up handshakes, by route and result (kept, refused_already_held, refused_route_has_secret)",
            Family::<RouteResult, Counter>::default(),
        );
        let QueueFamilies {
            queue_depth,
            queue_dead,
            queue_oldest_age,
            delivery_attempts,
            queue_deliveries,
            queue_lease_lost,
            queue_stranded,
            destination_paused,
            destination_breaker_open,
        } = QueueFamilies::register(&mut registry);
        Self {
            destination_paused,
            destination_breaker_open,
            queue_lease_lost,
            routes: std::sync::RwLock::default(),
            queue_stranded,
            handed_secrets,
            queue_depth,
            queue_dead,
            queue_oldest_age,
            delivery_attempts,
            queue_deliveries,
            store_ops,
            registry,
            captures,
            deliveries,
            delivery_seconds,
            upstream_seconds,
            store_seconds,
            in_flight,
            matched_secret,
            reloads,
            config_ok,
        }
    }

    /// Creates, at 0, the series an operator alerts on, so they are on `/metrics` from
    /// the start rather than after their first event (a rate over a series that does
    /// not exist yet is no rate): reloads and captures by result, each route's
    /// secrets, and each queue destination's attempts, outcomes and lost leases.
    pub fn start_at_zero(&self, routes: &[crate::config::Route]) {
        for result in ["ok", "error"] {
            drop(self.reloads.get_or_create(&ResultLabel {
                result: result.into(),
            }));
        }
        for result in ["written", "dropped", "failed"] {
            drop(self.captures.get_or_create(&ResultLabel {
                result: result.into(),
            }));
        }
        for r in routes {
            for index in 0..r.secret_count {
                drop(self.matched_secret.get_or_create(&RouteSecret {
                    route: r.name.clone(),
                    secret: index.to_string(),
                }));
            }
            if r.delivery != crate::config::Delivery::Queue {
                continue;
            }
            for d in &r.destinations {
                let (route, destination) = (r.name.clone(), d.name.clone());
                for result in AttemptResult::ALL {
                    drop(self.delivery_attempts.get_or_create(&DestinationResult {
                        route: route.clone(),
                        destination: destination.clone(),
                        result,
                    }));
                }
                for outcome in LeftQueue::ALL {
                    drop(self.queue_deliveries.get_or_create(&DestinationOutcome {
                        route: route.clone(),
                        destination: destination.clone(),
                        outcome,
                    }));
                }
                for stage in ["before_send", "sending", "recording"] {
                    drop(self.queue_lease_lost.get_or_create(&DestinationStage {
                        route: route.clone(),
                        destination: destination.clone(),
                        stage: stage.into(),
                    }));
                }
            }
        }
    }

    /// Registers the store's metrics (see [`StoreMetrics`]); called once, at start.
    /// The registry, for a component that registers its own metrics at start (the
    /// delivery log's recorder).
    pub(crate) fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn register_store(&mut self, store: &StoreMetrics) {
        self.registry.register(
            "store_write_failures",
            "Store writes (commits, flushes) that failed, such as on a full disk",
            store.write_failures.clone(),
        );
        self.registry.register(
            "queue_deliveries_held",
            "1 while queue deliveries are held back because attempt results cannot be made durable (disk store)",
            store.deliveries_held.clone(),
        );
        self.registry.register(
            "store_expired",
            "Expired records deleted by the store, by table",
            store.expired.clone(),
        );
        self.registry.register(
            "store_refused_full",
            "New claims and events refused because the store is full (store.min_free_space, store.max_records)",
            store.refused_full.clone(),
        );
    }

    /// The handles of one route (created on first use).
    pub fn route(&self, route: &str) -> std::sync::Arc<RouteMetrics> {
        if let Some(m) = read(&self.routes).get(route) {
            return m.clone();
        }
        let label = RouteLabel {
            route: route.to_owned(),
        };
        let m = std::sync::Arc::new(RouteMetrics {
            route: route.to_owned(),
            outcomes: std::sync::RwLock::default(),
            delivery_seconds: self.delivery_seconds.get_or_create(&label).clone(),
            upstream_seconds: self.upstream_seconds.get_or_create(&label).clone(),
            secrets: std::sync::RwLock::default(),
        });
        write(&self.routes)
            .entry(route.to_owned())
            .or_insert(m)
            .clone()
    }

    /// Counts one delivery.
    pub fn delivery(&self, route: &RouteMetrics, outcome: Outcome, seconds: f64) {
        let counter = read(&route.outcomes).get(&outcome).cloned();
        let counter = counter.unwrap_or_else(|| {
            let c = self
                .deliveries
                .get_or_create(&RouteOutcome {
                    route: route.route.clone(),
                    outcome,
                })
                .clone();
            write(&route.outcomes).insert(outcome, c.clone());
            c
        });
        counter.inc();
        route.delivery_seconds.observe(seconds);
    }

    /// Counts which secret matched.
    pub fn matched_secret(&self, route: &RouteMetrics, index: usize) {
        if let Some(c) = read(&route.secrets).get(index) {
            c.inc();
            return;
        }
        let mut secrets = write(&route.secrets);
        while secrets.len() <= index {
            let i = secrets.len();
            secrets.push(
                self.matched_secret
                    .get_or_create(&RouteSecret {
                        route: route.route.clone(),
                        secret: i.to_string(),
                    })
                    .clone(),
            );
        }
        secrets[index].inc();
    }

    /// Times one upstream call.
    pub fn upstream(&self, route: &RouteMetrics, seconds: f64) {
        route.upstream_seconds.observe(seconds);
    }

    /// Times one store call: `claim`, `complete`, `release` or `enqueue`.
    pub fn store_call(&self, op: &'static str, seconds: f64) {
        let i = match op {
            "claim" => 0,
            "complete" => 1,
            "release" => 2,
            _ => 3,
        };
        self.store_ops[i].observe(seconds);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
