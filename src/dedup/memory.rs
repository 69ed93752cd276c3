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

    fn put(&mut self, key: &str, entry: Entry, now: Instant) {
        self.writes += 1;
        if self.writes >= SWEEP_EVERY {
            self.writes = 0;
            self.map.retain(|_, e| e.live(now));
        }
        self.map.insert(key.into(), entry);
    }
}

#[derive(Debug)]
struct Inner {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    metrics: crate::telemetry::StoreMetrics,
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
    /// An empty store.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
                hasher: RandomState::new(),
                metrics: crate::telemetry::StoreMetrics::default(),
            }),
        }
    }

    /// The store's metric handles.
    pub fn metrics(&self) -> crate::telemetry::StoreMetrics {
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
        let mut shard = self.shard(key);
        if let Some(e) = shard.live(key.as_str(), now) {
            return Ok(e.record.as_existing());
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
        );
        Ok(Claim::Claimed(token))
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
        let done = Record::done(token, fingerprint);
        shard.put(
            key.as_str(),
            Entry {
                record: done,
                expires_at: now + ttl,
            },
            now,
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
                shard.map.remove(key.as_str());
                Ok(Settled::Applied)
            }
            Some(_) => Ok(Settled::NotOwner),
        }
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        Ok(shard.map.remove(key.as_str()).is_some_and(|e| e.live(now)))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
