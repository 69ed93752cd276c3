//! The embedded store: one process, nothing to install. Its state is lost on restart
//! and not shared between replicas; run several gateways on the `redis` store instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::Expiry;
use moka::future::Cache;
use moka::ops::compute::Op;

use super::{Claim, DedupKey, DedupStore, Record, Settled, StoreError, Token};

#[derive(Debug, Clone)]
struct Entry {
    record: Record,
    /// Checked on every access: moka reclaims expired entries lazily, and a claim must
    /// never see an expired record as live.
    expires_at: Instant,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires_at > now
    }
}

/// Gives every entry the lifetime stored in it. moka's default on update keeps the
/// *remaining* time of the old entry, which would make a 24 h done record vanish with
/// the 30 s lease it replaced.
struct ExpiresAt;

impl Expiry<String, Entry> for ExpiresAt {
    fn expire_after_create(&self, _: &String, v: &Entry, now: Instant) -> Option<Duration> {
        Some(v.expires_at.saturating_duration_since(now))
    }

    fn expire_after_update(
        &self,
        _: &String,
        v: &Entry,
        now: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.expires_at.saturating_duration_since(now))
    }
}

/// An in-process store. Every operation runs under moka's per-key lock
/// (`and_compute_with`), which makes each one atomic with respect to the others on the
/// same key. No capacity bound: evicting a live claim would let a duplicate through.
#[derive(Clone)]
pub struct MemoryStore {
    cache: Arc<Cache<String, Entry>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("entries", &self.cache.entry_count())
            .finish()
    }
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
            cache: Arc::new(Cache::builder().expire_after(ExpiresAt).build()),
        }
    }
}

impl DedupStore for MemoryStore {
    async fn claim(
        &self,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let token = Token::random();
        let now = Instant::now();
        let fresh = Entry {
            record: Record::InFlight {
                token: token.as_str().to_owned(),
                fingerprint: fingerprint.to_owned(),
            },
            expires_at: now + lease,
        };
        let mut existing = None;
        self.cache
            .entry(key.as_str().to_owned())
            .and_compute_with(|cur| {
                let op = match cur.map(|e| e.into_value()) {
                    Some(e) if e.live(now) => {
                        existing = Some(e.record.as_existing());
                        Op::Nop
                    }
                    _ => Op::Put(fresh),
                };
                std::future::ready(op)
            })
            .await;
        Ok(existing.unwrap_or(Claim::Claimed(token)))
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        let now = Instant::now();
        let done = Entry {
            record: Record::Done {
                token: token.as_str().to_owned(),
                fingerprint: fingerprint.to_owned(),
            },
            expires_at: now + ttl,
        };
        let mut settled = Settled::Applied;
        self.cache
            .entry(key.as_str().to_owned())
            .and_compute_with(|cur| {
                let op = match cur.map(|e| e.into_value()) {
                    Some(e) if e.live(now) => match &e.record {
                        Record::InFlight { token: t, .. } if t == token.as_str() => Op::Put(done),
                        Record::Done { token: t, .. } if t == token.as_str() => Op::Nop,
                        _ => {
                            settled = Settled::NotOwner;
                            Op::Nop
                        }
                    },
                    // The lease ran out before the upstream answered, and no other copy
                    // has claimed since: record the effect so later copies are duplicates.
                    _ => Op::Put(done),
                };
                std::future::ready(op)
            })
            .await;
        Ok(settled)
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        _fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        let now = Instant::now();
        let mut settled = Settled::Applied;
        self.cache
            .entry(key.as_str().to_owned())
            .and_compute_with(|cur| {
                let op = match cur.map(|e| e.into_value()) {
                    Some(e) if e.live(now) => match &e.record {
                        Record::InFlight { token: t, .. } if t == token.as_str() => Op::Remove,
                        _ => {
                            settled = Settled::NotOwner;
                            Op::Nop
                        }
                    },
                    _ => Op::Nop,
                };
                std::future::ready(op)
            })
            .await;
        Ok(settled)
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let now = Instant::now();
        Ok(self
            .cache
            .remove(key.as_str())
            .await
            .is_some_and(|e| e.live(now)))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
