//! The store's own metric handles: a store makes them when it opens (its writer thread
//! counts on them); `telemetry::Metrics::register_store` exports them.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    pub table: String,
}

/// The store's own metric handles. A store makes them when it opens (its writer thread
/// counts on them), and `telemetry::Metrics::register_store` registers them, so that they are
/// exported from the start; a store that has nothing to count leaves them at 0.
#[derive(Clone, Debug, Default)]
pub struct StoreMetrics {
    /// Writes (a commit or a flush) the store could not make, such as on a full disk.
    pub write_failures: Counter,
    /// 1 while queue deliveries are held back because attempt results cannot be made
    /// durable (the disk store, after a failed write, until it writes again).
    pub deliveries_held: Gauge<i64, AtomicI64>,
    /// Expired records deleted, by table.
    pub expired: Family<TableLabel, Counter>,
    /// New claims and events refused because the store is full (`store.min_free_space`
    /// on disk, `store.max_records` in memory).
    pub refused_full: Counter,
}

impl StoreMetrics {
    /// The counter of expired records of `table`.
    pub fn expired(&self, table: &str) -> Counter {
        self.expired
            .get_or_create(&TableLabel {
                table: table.to_owned(),
            })
            .clone()
    }
}
