//! The delivery log in the process: records in ID (time) order, the oldest dropped
//! once the log is past `max_size` or `keep`. Dropping a record frees it (unless a
//! reader still holds it for an answer), so the process gives the memory back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::{Batch, Bounds, COUNT_MINUTES, Counts, DeliveryRecord, LogPage, LogQuery};
use crate::store::StoreError;

#[derive(Debug, Default)]
struct Ring {
    /// Each record with what it counts against `max_size`.
    records: BTreeMap<String, (Arc<DeliveryRecord>, u64)>,
    bytes: u64,
    counts: Counts,
}

/// The memory store's log.
#[derive(Debug, Clone)]
pub struct MemoryLog {
    ring: Arc<Mutex<Ring>>,
    bounds: Bounds,
}

impl MemoryLog {
    pub(super) fn new(bounds: Bounds) -> Self {
        Self {
            ring: Arc::default(),
            bounds,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) async fn append(&self, batch: Batch, _routes: &[String]) -> Result<(), StoreError> {
        let now = crate::queue::now_ms();
        let floor = self.bounds.keep_floor(now);
        let mut guard = self.lock();
        let ring = &mut *guard;
        for r in batch.records {
            // What it takes in the process (without encoding it: this runs for every
            // delivery), its key in the map included.
            let cost = DeliveryRecord::cost(r.heap_len() + r.delivery_id.len() + 16);
            let old = ring.records.insert(r.delivery_id.clone(), (r, cost));
            ring.bytes += cost;
            if let Some((_, c)) = old {
                ring.bytes -= c;
            }
        }
        while let Some(entry) = ring.records.first_entry() {
            if ring.bytes <= self.bounds.max_size && *entry.key() >= floor {
                break;
            }
            let (_, cost) = entry.remove();
            ring.bytes = ring.bytes.saturating_sub(cost);
        }
        let minute = super::minute_of(now).saturating_sub(COUNT_MINUTES);
        super::merge_counts(&mut ring.counts, &batch.counts, minute);
        Ok(())
    }

    pub(super) async fn list(
        &self,
        q: &LogQuery,
        _routes: &[String],
    ) -> Result<LogPage, StoreError> {
        // Copies of the Arcs in range, taken under the lock; filtered outside it.
        let (upper, lower) = (q.upper(), q.lower().unwrap_or_default());
        let candidates: Vec<Arc<DeliveryRecord>> = {
            let ring = self.lock();
            let range = match &upper {
                Some(u) => ring.records.range(lower..u.clone()),
                None => ring.records.range(lower..),
            };
            range
                .rev()
                .take(super::SCAN_BUDGET + 1)
                .map(|(_, (r, _))| r.clone())
                .collect()
        };
        Ok(super::page_from(q, candidates.iter().map(|r| &**r)))
    }

    pub(super) async fn get(
        &self,
        id: &str,
        _routes: &[String],
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        Ok(self.lock().records.get(id).map(|(r, _)| (**r).clone()))
    }

    pub(super) async fn counts(
        &self,
        since_minute: u64,
        _routes: &[String],
    ) -> Result<HashMap<(String, String), u64>, StoreError> {
        let mut out: HashMap<(String, String), u64> = HashMap::new();
        for ((route, outcome, minute), n) in &self.lock().counts {
            if *minute >= since_minute {
                *out.entry((route.clone(), outcome.clone())).or_default() += n;
            }
        }
        Ok(out)
    }

    pub(super) async fn size(&self, _routes: &[String]) -> Result<u64, StoreError> {
        Ok(self.lock().bytes)
    }
}
