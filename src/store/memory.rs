//! The embedded store: one process, nothing to install. Its state is lost on restart
//! and not shared between replicas; run several gateways on the `redis` store instead.
//!
//! Hand-written rather than a cache crate: the contract needs exactly one atomic
//! read-modify-write per key with an expiry stored in the entry, no eviction (evicting
//! a live claim would let a duplicate through), and nothing else. A sharded map of
//! mutexes does that with a few hundred nanoseconds per operation and a fraction of
//! the memory per entry that the general-purpose cache this replaced (moka) needed,
//! as the benchmark in docs/performance.md measured. No lock is ever held across an
//! `.await`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Claim, DedupKey, DedupStore, Record, Settled, StoreError, Token};

/// Shards: enough that two cores rarely meet on one lock.
const SHARDS: usize = 64;
/// Expired entries are swept from a shard after this many writes to it (amortised:
/// reads and claims already ignore expired entries).
const SWEEP_EVERY: u32 = 4096;

#[derive(Debug, Clone)]
struct Entry {
    record: Record,
    /// Checked on every access, so an expired entry is never seen as live.
    expires_at: Instant,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires_at > now
    }
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Box<str>, Entry>,
    writes: u32,
}

impl Shard {
    fn live(&self, key: &str, now: Instant) -> Option<&Entry> {
        self.map.get(key).filter(|e| e.live(now))
    }

    fn put(&mut self, key: &str, entry: Entry, now: Instant, stored: &AtomicUsize) {
        self.writes += 1;
        if self.writes >= SWEEP_EVERY {
            self.writes = 0;
            self.sweep(now, stored);
        }
        if self.map.insert(key.into(), entry).is_none() {
            stored.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn remove(&mut self, key: &str, stored: &AtomicUsize) -> Option<Entry> {
        let e = self.map.remove(key);
        if e.is_some() {
            stored.fetch_sub(1, Ordering::Relaxed);
        }
        e
    }

    /// Drops the expired entries.
    fn sweep(&mut self, now: Instant, stored: &AtomicUsize) {
        let before = self.map.len();
        self.map.retain(|_, e| e.live(now));
        stored.fetch_sub(before - self.map.len(), Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Inner {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    metrics: crate::store::StoreMetrics,
    /// Entries in the maps, expired ones not yet swept included.
    stored: AtomicUsize,
    /// At this many entries, a new claim is refused: the store never evicts a live
    /// record (that would let a duplicate through), so memory is bounded by refusing.
    max: usize,
    /// When every shard was last swept to make room (at most once a second).
    swept_all_at: Mutex<Option<Instant>>,
    /// The gateway's own records ([`Cells`](super::Cells)), for this process's life.
    cells: Mutex<HashMap<String, Vec<u8>>>,
    /// The audit ([`AuditStore`](super::AuditStore)): ID → record, for this process's
    /// life.
    audit: Mutex<std::collections::BTreeMap<String, Vec<u8>>>,
}

/// An in-process store.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// Records the store keeps at most unless told (`store.max_records`).
    pub const DEFAULT_MAX_RECORDS: usize = crate::config::StoreConfig::DEFAULT_MAX_RECORDS;

    /// An empty store of at most [`Self::DEFAULT_MAX_RECORDS`] records.
    pub fn new() -> Self {
        Self::with_max_records(Self::DEFAULT_MAX_RECORDS)
    }

    /// An empty store that refuses new claims at `max` records (503, as a disk store
    /// below its free-space reserve does), until records expire.
    pub fn with_max_records(max: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
                hasher: RandomState::new(),
                metrics: crate::store::StoreMetrics::default(),
                stored: AtomicUsize::new(0),
                max,
                swept_all_at: Mutex::new(None),
                cells: Mutex::default(),
                audit: Mutex::default(),
            }),
        }
    }

    fn full(&self) -> bool {
        self.inner.stored.load(Ordering::Relaxed) >= self.inner.max
    }

    /// Sweeps every shard, at most once a second: room for new claims is made only
    /// from expired records.
    fn sweep_all(&self, now: Instant) {
        {
            let mut at = self
                .inner
                .swept_all_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if at.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
                return;
            }
            *at = Some(now);
        }
        for shard in &self.inner.shards {
            shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sweep(now, &self.inner.stored);
        }
    }

    /// Claims `key` in its locked shard if it holds no live record and there is room
    /// (a new key) or the key's expired entry is replaced; `None`: no room.
    fn try_claim(
        &self,
        shard: &mut Shard,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
        now: Instant,
    ) -> Option<Claim> {
        if let Some(e) = shard.live(key.as_str(), now) {
            return Some(e.record.as_existing());
        }
        if self.full() && !shard.map.contains_key(key.as_str()) {
            return None;
        }
        let token = Token::random();
        let record = Record::in_flight(&token, fingerprint);
        shard.put(
            key.as_str(),
            Entry {
                record,
                expires_at: now + lease,
            },
            now,
            &self.inner.stored,
        );
        Some(Claim::Claimed(token))
    }

    /// The store's metric handles.
    pub fn metrics(&self) -> crate::store::StoreMetrics {
        self.inner.metrics.clone()
    }

    fn shard(&self, key: &DedupKey) -> MutexGuard<'_, Shard> {
        let i = (self.inner.hasher.hash_one(key.as_str()) as usize) % SHARDS;
        // A panic while holding a shard lock cannot leave an entry half-written
        // (every write is a single insert or remove), so a poisoned lock is safe to use.
        self.inner.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Live entries (for tests and diagnostics).
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.inner
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .map
                    .values()
                    .filter(|e| e.live(now))
                    .count()
            })
            .sum()
    }

    /// Whether no live entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DedupStore for MemoryStore {
    async fn claim(
        &self,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let now = Instant::now();
        {
            let mut shard = self.shard(key);
            if let Some(claim) = self.try_claim(&mut shard, key, fingerprint, lease, now) {
                return Ok(claim);
            }
            shard.sweep(now, &self.inner.stored);
            if let Some(claim) = self.try_claim(&mut shard, key, fingerprint, lease, now) {
                return Ok(claim);
            }
        }
        // Not with a shard's lock held: sweeping locks each shard in turn.
        self.sweep_all(now);
        let mut shard = self.shard(key);
        if let Some(claim) = self.try_claim(&mut shard, key, fingerprint, lease, now) {
            return Ok(claim);
        }
        self.inner.metrics.refused_full.inc();
        Err(StoreError::Refused(format!(
            "the memory store is full: {} records (store.max_records); new deliveries are refused until records expire",
            self.inner.max
        )))
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.live(key.as_str(), now).map(|e| &e.record) {
            Some(Record::Done { token: t, .. }) if t == token.as_str() => {
                return Ok(Settled::Applied);
            }
            Some(Record::InFlight { token: t, .. }) if t == token.as_str() => {}
            // Another claim holds the key: leave it alone.
            Some(_) => return Ok(Settled::NotOwner),
            // The lease ran out before the upstream answered and nobody claimed since:
            // record the effect so later copies are duplicates.
            None => {}
        }
        // Never refused: the record of an effect already applied (in place of the
        // claim's, but for a lease that ran out and was swept).
        let done = Record::done(token, fingerprint);
        shard.put(
            key.as_str(),
            Entry {
                record: done,
                expires_at: now + ttl,
            },
            now,
            &self.inner.stored,
        );
        Ok(Settled::Applied)
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        _fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.live(key.as_str(), now).map(|e| &e.record) {
            None => Ok(Settled::Applied),
            Some(Record::InFlight { token: t, .. }) if t == token.as_str() => {
                shard.remove(key.as_str(), &self.inner.stored);
                Ok(Settled::Applied)
            }
            Some(_) => Ok(Settled::NotOwner),
        }
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        Ok(shard
            .remove(key.as_str(), &self.inner.stored)
            .is_some_and(|e| e.live(now)))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn peek(&self, key: &DedupKey) -> Result<Option<Claim>, StoreError> {
        let shard = self.shard(key);
        Ok(shard
            .live(key.as_str(), Instant::now())
            .map(|e| e.record.as_existing()))
    }
}

impl super::Cells for MemoryStore {
    async fn cell_get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let cells = self
            .inner
            .cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(cells.get(name).cloned())
    }

    async fn cell_swap(
        &self,
        name: &str,
        expect: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let mut cells = self
            .inner
            .cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cells.get(name).map(Vec::as_slice) != expect {
            return Ok(false);
        }
        match new {
            Some(v) => cells.insert(name.to_owned(), v.to_vec()),
            None => cells.remove(name),
        };
        Ok(true)
    }
}

impl super::AuditStore for MemoryStore {
    async fn audit_append(
        &self,
        _space: &str,
        id: &str,
        _at_ms: u64,
        record: &[u8],
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut audit = self
            .inner
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        audit.insert(id.to_owned(), record.to_vec());
        while audit.len() > keep && audit.pop_first().is_some() {}
        Ok(())
    }

    async fn audit_list(
        &self,
        _space: &str,
        skip: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let audit = self
            .inner
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(audit
            .values()
            .rev()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_its_bound_new_claims_are_refused_until_records_expire() {
        let s = MemoryStore::with_max_records(100);
        for i in 0..90 {
            let k = DedupKey::new("t:", "r", &format!("long{i}"));
            assert!(matches!(
                s.claim(&k, "fp", Duration::from_secs(60)).await,
                Ok(Claim::Claimed(_))
            ));
        }
        for i in 0..10 {
            let k = DedupKey::new("t:", "r", &format!("short{i}"));
            assert!(matches!(
                s.claim(&k, "fp", Duration::from_millis(50)).await,
                Ok(Claim::Claimed(_))
            ));
        }
        let k = DedupKey::new("t:", "r", "one_more");
        assert!(s.claim(&k, "fp", Duration::from_secs(60)).await.is_err());
        assert_eq!(s.metrics().refused_full.get(), 1);
        // A copy of a stored event is still answered, and every live record kept.
        let held = DedupKey::new("t:", "r", "long0");
        assert!(matches!(
            s.claim(&held, "fp", Duration::from_secs(60)).await,
            Ok(Claim::InFlight)
        ));
        assert_eq!(s.len(), 100);
        // Expired records make room (a sweep of every shard, at most once a second).
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(matches!(
            s.claim(&k, "fp", Duration::from_secs(60)).await,
            Ok(Claim::Claimed(_))
        ));
        assert_eq!(s.len(), 91);
    }

    #[tokio::test]
    async fn expired_entries_are_swept_by_later_writes() {
        let s = MemoryStore::new();
        for i in 0..100 {
            let k = DedupKey::new("t:", "r", &format!("e{i}"));
            let _ = s.claim(&k, "fp", Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(s.len(), 0, "expired entries are never live");
        for i in 0..(SWEEP_EVERY as usize * SHARDS) {
            let k = DedupKey::new("t:", "r", &format!("x{i}"));
            let _ = s.claim(&k, "fp", Duration::from_secs(60)).await;
        }
        let stored: usize = s
            .inner
            .shards
            .iter()
            .map(|sh| sh.lock().map(|g| g.map.len()).unwrap_or(0))
            .sum();
        assert!(
            stored < SWEEP_EVERY as usize * SHARDS + 100,
            "the expired entries were swept"
        );
    }
}
