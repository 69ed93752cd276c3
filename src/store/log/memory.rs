//! The delivery log in the process: records in ID (time) order, the oldest dropped
//! once the log is past `max_size` or `keep`. Dropping a record frees it (unless a
//! reader still holds it for an answer), so the process gives the memory back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::{
    Appended, Batch, Bounds, Buckets, COUNT_MINUTES, COUNT_TENS, Counts, DeliveryRecord, LogPage,
    LogQuery, Stored, Width,
};
use crate::store::StoreError;

/// Bytes counted per record besides its buffer: its slot in the ring (the key, the
/// buffer's handle, its cost) and the allocator's rounding of the buffer, at most an
/// eighth of it (counted in [`cost`]).
const SLOT: u64 = 64;

/// A record's delivery ID as the ring's key: its bytes, padded. IDs the gateway makes
/// are 21 bytes; a bound of another length compares as its bytes would.
type Key = [u8; 24];

fn key(id: &str) -> Key {
    let mut k = [0; 24];
    let n = id.len().min(k.len());
    k[..n].copy_from_slice(&id.as_bytes()[..n]);
    k
}

/// What a record counts against `max_size`.
fn cost(r: &Stored) -> u64 {
    let len = r.len() as u64;
    len + len / 8 + SLOT
}

#[derive(Debug, Default)]
struct Ring {
    /// Records in ID order, each with what it counts against `max_size`. Records come
    /// nearly in order (a write's, within a tenth of a second): each goes in near
    /// the back.
    records: VecDeque<(Key, Stored, u64)>,
    bytes: u64,
    /// Requests per route, outcome and minute (the last [`COUNT_MINUTES`]).
    counts: Counts,
    /// The same per ten minutes (the last [`COUNT_TENS`]).
    tens: Counts,
}

impl Ring {
    /// Where records from `k` on start.
    fn at(&self, k: &Key) -> usize {
        self.records.partition_point(|(have, _, _)| have < k)
    }
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

    pub(super) async fn append(
        &self,
        batch: Batch,
        _routes: &[String],
    ) -> Result<Appended, StoreError> {
        let now = crate::queue::now_ms();
        let floor = key(&self.bounds.keep_floor(now));
        let mut guard = self.lock();
        let ring = &mut *guard;
        for r in batch.records {
            let Some(k) = r.head().map(|h| key(h.delivery_id)) else {
                continue;
            };
            let c = cost(&r);
            ring.bytes += c;
            let at = ring.at(&k);
            match ring.records.get_mut(at) {
                Some(slot) if slot.0 == k => {
                    ring.bytes -= slot.2;
                    *slot = (k, r, c);
                }
                _ => ring.records.insert(at, (k, r, c)),
            }
        }
        while let Some((k, _, c)) = ring.records.front() {
            if ring.bytes <= self.bounds.max_size && *k >= floor {
                break;
            }
            ring.bytes = ring.bytes.saturating_sub(*c);
            ring.records.pop_front();
        }
        let minute = super::minute_of(now).saturating_sub(COUNT_MINUTES);
        super::merge_counts(&mut ring.counts, &batch.counts, minute);
        let ten = Width::TenMinutes
            .bucket_of(super::minute_of(now))
            .saturating_sub(COUNT_TENS);
        super::merge_tens(&mut ring.tens, &batch.counts, ten);
        Ok(Appended::Written)
    }

    pub(super) async fn list(
        &self,
        q: &LogQuery,
        _routes: &[String],
    ) -> Result<LogPage, StoreError> {
        // Handles of the records in range, taken under the lock; read outside it.
        let candidates: Vec<Stored> = {
            let ring = self.lock();
            let start = q.lower().map_or(0, |l| ring.at(&key(&l)));
            let end = q.upper().map_or(ring.records.len(), |u| ring.at(&key(&u)));
            ring.records
                .range(start..end.max(start))
                .rev()
                .take(super::SCAN_BUDGET + 1)
                .map(|(_, r, _)| r.clone())
                .collect()
        };
        Ok(super::page_from(q, candidates.iter()))
    }

    pub(super) async fn get(
        &self,
        id: &str,
        _routes: &[String],
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        let k = key(id);
        let found = {
            let ring = self.lock();
            ring.records
                .get(ring.at(&k))
                .filter(|(have, _, _)| *have == k)
                .map(|(_, r, _)| r.clone())
        };
        Ok(found.and_then(|r| r.record(true)))
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

    pub(super) async fn buckets(
        &self,
        route: &str,
        width: Width,
        since: u64,
        _routes: &[String],
    ) -> Result<Buckets, StoreError> {
        let ring = self.lock();
        let counts = match width {
            Width::Minute => &ring.counts,
            Width::TenMinutes => &ring.tens,
        };
        Ok(super::route_buckets(counts, route, since))
    }

    pub(super) async fn size(&self, _routes: &[String]) -> Result<u64, StoreError> {
        Ok(self.lock().bytes)
    }
}
