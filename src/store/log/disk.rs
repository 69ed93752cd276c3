//! The delivery log in the disk store's database file: a table of records by ID, a
//! table of per-minute counts, and the byte total. The log writes its own
//! transactions from a blocking task, one per batch (redb serialises them with the
//! store's writer; a batch holds the file's write lock for the time it takes to
//! insert its records). Log commits skip the fsync until a second has passed or an
//! eighth of `max_size` was written since the last one: a crash loses at most that
//! much of the log, never a delivery.
//!
//! Deleted records' pages go back to redb's free list and the next writes reuse them
//! (those freed by a commit without fsync only after the next durable one: hence the
//! bound on what is written between two), so the file stops growing once the log is
//! full: it stays within `max_size` plus the margin the README states.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableDatabase as _, ReadableTable as _, TableDefinition};

use super::{Batch, Bounds, COUNT_MINUTES, DeliveryRecord, LogPage, LogQuery};
use crate::store::{DiskStore, StoreError};

/// delivery ID → the record's JSON.
const LOG: TableDefinition<&str, &[u8]> = TableDefinition::new("log");
/// `bytes` → what the records count against `max_size`.
const META: TableDefinition<&str, u64> = TableDefinition::new("log_meta");
/// (minute, `route\noutcome`) → requests.
const COUNTS: TableDefinition<(u64, &str), u64> = TableDefinition::new("log_counts");

/// How often a log commit is made durable at least.
const SYNC_EVERY: Duration = Duration::from_secs(1);

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("delivery log: {e}"))
}

/// The disk store's log.
#[derive(Debug, Clone)]
pub struct DiskLog {
    store: DiskStore,
    bounds: Bounds,
    /// When the last durable log commit was, and the bytes written since.
    synced: Arc<Mutex<(Instant, u64)>>,
}

impl DiskLog {
    pub(super) fn open(store: &DiskStore, bounds: Bounds) -> Result<Self, StoreError> {
        let db = store.database()?;
        let txn = db.begin_write().map_err(backend)?;
        txn.open_table(LOG).map_err(backend)?;
        txn.open_table(META).map_err(backend)?;
        txn.open_table(COUNTS).map_err(backend)?;
        txn.commit().map_err(backend)?;
        Ok(Self {
            store: store.clone(),
            bounds,
            synced: Arc::new(Mutex::new((Instant::now(), 0))),
        })
    }

    /// Runs `f` on the database in a blocking task.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.store.database()?;
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(backend)?
    }

    pub(super) async fn append(&self, batch: Batch, _routes: &[String]) -> Result<(), StoreError> {
        let bounds = self.bounds;
        let written: u64 = batch
            .records
            .iter()
            .map(|r| super::ENTRY_OVERHEAD + r.body.as_ref().map_or(0, |b| b.len() as u64))
            .sum();
        let durable = {
            let mut synced = self
                .synced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            synced.1 += written;
            if synced.0.elapsed() >= SYNC_EVERY || synced.1 >= bounds.max_size / 8 {
                *synced = (Instant::now(), 0);
                true
            } else {
                false
            }
        };
        self.blocking(move |db| {
            // Encoded before the transaction: the file's write lock, which the store's
            // writer needs for every claim and event, is held only for the inserts.
            let encoded: Vec<(&str, Vec<u8>)> = batch
                .records
                .iter()
                .map(|r| (r.delivery_id.as_str(), r.encode()))
                .collect();
            let mut txn = db.begin_write().map_err(backend)?;
            if !durable {
                txn.set_durability(Durability::None).map_err(backend)?;
            }
            let now = crate::queue::now_ms();
            {
                let mut log = txn.open_table(LOG).map_err(backend)?;
                let mut meta = txn.open_table(META).map_err(backend)?;
                let mut bytes = meta.get("bytes").map_err(backend)?.map_or(0, |v| v.value());
                for (id, json) in &encoded {
                    let old = log
                        .insert(*id, json.as_slice())
                        .map_err(backend)?
                        .map(|v| v.value().len());
                    bytes += DeliveryRecord::cost(json.len());
                    if let Some(len) = old {
                        bytes = bytes.saturating_sub(DeliveryRecord::cost(len));
                    }
                }
                let floor = bounds.keep_floor(now);
                loop {
                    let first = log
                        .first()
                        .map_err(backend)?
                        .map(|(k, v)| (k.value() >= floor.as_str(), v.value().len()));
                    match first {
                        Some((fresh, len)) if !fresh || bytes > bounds.max_size => {
                            log.pop_first().map_err(backend)?;
                            bytes = bytes.saturating_sub(DeliveryRecord::cost(len));
                        }
                        _ => break,
                    }
                }
                meta.insert("bytes", bytes).map_err(backend)?;
                let mut counts = txn.open_table(COUNTS).map_err(backend)?;
                for ((route, outcome, minute), n) in &batch.counts {
                    let key = format!("{route}\n{outcome}");
                    let had = counts
                        .get((*minute, key.as_str()))
                        .map_err(backend)?
                        .map_or(0, |v| v.value());
                    counts
                        .insert((*minute, key.as_str()), had + n)
                        .map_err(backend)?;
                }
                let old_minute = super::minute_of(now).saturating_sub(COUNT_MINUTES);
                counts
                    .retain_in((0, "")..(old_minute, ""), |_, _| false)
                    .map_err(backend)?;
            }
            txn.commit().map_err(backend)
        })
        .await
    }

    pub(super) async fn list(
        &self,
        q: &LogQuery,
        _routes: &[String],
    ) -> Result<LogPage, StoreError> {
        let q = q.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let log = txn.open_table(LOG).map_err(backend)?;
            let lower = q.lower().unwrap_or_default();
            let range = match q.upper() {
                Some(u) => log.range(lower.as_str()..u.as_str()),
                None => log.range(lower.as_str()..),
            }
            .map_err(backend)?;
            let records = range
                .rev()
                .map_while(Result::ok)
                .filter_map(|(_, v)| DeliveryRecord::decode(v.value()));
            Ok(super::page_from(&q, records))
        })
        .await
    }

    pub(super) async fn get(
        &self,
        id: &str,
        _routes: &[String],
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        let id = id.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let log = txn.open_table(LOG).map_err(backend)?;
            let found = log.get(id.as_str()).map_err(backend)?;
            Ok(found.and_then(|v| DeliveryRecord::decode(v.value())))
        })
        .await
    }

    pub(super) async fn counts(
        &self,
        since_minute: u64,
        _routes: &[String],
    ) -> Result<HashMap<(String, String), u64>, StoreError> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let counts = txn.open_table(COUNTS).map_err(backend)?;
            let mut out: HashMap<(String, String), u64> = HashMap::new();
            for entry in counts.range((since_minute, "")..).map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                let (_, key) = k.value();
                if let Some((route, outcome)) = key.split_once('\n') {
                    *out.entry((route.to_owned(), outcome.to_owned()))
                        .or_default() += v.value();
                }
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn size(&self, _routes: &[String]) -> Result<u64, StoreError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(backend)?;
            let meta = txn.open_table(META).map_err(backend)?;
            Ok(meta.get("bytes").map_err(backend)?.map_or(0, |v| v.value()))
        })
        .await
    }
}
