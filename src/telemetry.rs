//! Logging: `tracing` with a pretty format on a terminal and JSON on request.
//! `RUST_LOG` overrides the default filter (`info`).

use tracing_subscriber::EnvFilter;

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Installs the global subscriber. Logs go to stderr.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-delivery metrics. Never an event ID: labels stay low-cardinality.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOutcome {
    pub route: String,
    pub outcome: String,
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
pub struct OpLabel {
    pub op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

fn latency() -> Histogram {
    // 0.5 ms … ~16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every metric hookgate exports, registered once and shared by all requests.
#[derive(Debug)]
pub struct Metrics {
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
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric under the `hookgate_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hookgate");
        let deliveries = Family::<RouteOutcome, Counter>::default();
        registry.register(
            "deliveries",
            "Deliveries by route and outcome",
            deliveries.clone(),
        );
        let delivery_seconds =
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency);
        registry.register(
            "delivery_duration_seconds",
            "Time from request to answer",
            delivery_seconds.clone(),
        );
        let upstream_seconds =
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency);
        registry.register(
            "upstream_duration_seconds",
            "Time spent forwarding upstream",
            upstream_seconds.clone(),
        );
        let store_seconds =
            Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency);
        registry.register(
            "store_duration_seconds",
            "Time per dedup store call (claim, complete, release)",
            store_seconds.clone(),
        );
        let in_flight = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "in_flight_deliveries",
            "Deliveries being handled right now",
            in_flight.clone(),
        );
        let matched_secret = Family::<RouteSecret, Counter>::default();
        registry.register(
            "matched_secret",
            "Verified deliveries by which of the route's secrets matched",
            matched_secret.clone(),
        );
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "config_reloads",
            "Config reloads by result (ok, error)",
            reloads.clone(),
        );
        let config_ok = Gauge::<i64, AtomicI64>::default();
        config_ok.set(1);
        registry.register(
            "config_last_reload_ok",
            "1 if the last reload succeeded (or none was tried)",
            config_ok.clone(),
        );
        let captures = Family::<ResultLabel, Counter>::default();
        registry.register(
            "captures",
            "Captured deliveries by result (written, dropped, failed)",
            captures.clone(),
        );
        Self {
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

    /// Counts one delivery.
    pub fn delivery(&self, route: &str, outcome: &str, seconds: f64) {
        self.deliveries
            .get_or_create(&RouteOutcome {
                route: route.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.delivery_seconds
            .get_or_create(&RouteLabel {
                route: route.to_owned(),
            })
            .observe(seconds);
    }

    /// Times one store call.
    pub fn store_call(&self, op: &'static str, seconds: f64) {
        self.store_seconds
            .get_or_create(&OpLabel { op: op.to_owned() })
            .observe(seconds);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
