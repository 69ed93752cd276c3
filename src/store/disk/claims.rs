//! The disk store's claims in flight, held in the process rather than in the file.
//!
//! A claim is a lease on one forward by this process: one gateway owns the file, and
//! the forward it guards ends with the process, so the lease has nothing to outlive.
//! Written to the file, every claim waited behind the writer thread's group commits
//! (and their fsyncs) before its forward could start; held here, a claim is a map
//! insert under a lock, after a read of the file for a done record. Only what a
//! provider's 2xx depends on, the done record, goes through the writer, fsynced before
//! the answer. Leases run on the monotonic clock: a step of the wall clock either way
//! changes none. After a restart a copy of an event whose forward was cut off is
//! forwarded again at once (it carries the same `Idempotency-Key`), where a lease in
//! the file made it wait for `inflight_ttl`; a crash cut that forward off either way.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::super::Token;

/// Shards, so that claims on different keys rarely wait for one another.
const SHARDS: usize = 64;
/// Claims taken in a shard between two sweeps of its expired leases.
const SWEEP_EVERY: u32 = 1_024;

/// One claim in flight.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) token: Token,
    /// When the lease runs out, on the process's monotonic clock (`disk::mono_ms`):
    /// a wall clock stepping forward cannot end a lease while its forward is open,
    /// nor one stepping back hold a key longer.
    pub(super) expires: u64,
    /// Its done record is being written: the lease cannot run out meanwhile, so no
    /// other claim takes the key between the write and the answer.
    pub(super) settling: bool,
    /// Held by an enqueue, not a sync claim: other copies being enqueued go on to the
    /// writer, which finds them copies of one another.
    pub(super) enqueue: bool,
}

impl Held {
    /// Whether the claim still holds its key at `now`.
    pub(super) fn holds(&self, now: u64) -> bool {
        self.settling || self.expires > now
    }
}

/// One shard's claims.
#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) held: HashMap<String, Held>,
    taken: u32,
}

impl Shard {
    /// Takes `key` for a new claim, or for an enqueue (the caller checked that nothing
    /// holds it).
    pub(super) fn take(&mut self, key: &str, token: Token, expires: u64, now: u64, enqueue: bool) {
        self.taken = self.taken.wrapping_add(1);
        if self.taken.is_multiple_of(SWEEP_EVERY) {
            // Leases whose holder never settled them (a forward cut off by a panic, a
            // task dropped at shutdown) go once they have run out.
            self.held.retain(|_, h| h.holds(now));
        }
        self.held.insert(
            key.to_owned(),
            Held {
                token,
                expires,
                settling: false,
                enqueue,
            },
        );
    }

    /// Drops `key`'s claim if `token` holds it.
    pub(super) fn drop_if_held_by(&mut self, key: &str, token: &Token) {
        if self.held.get(key).is_some_and(|h| h.token == *token) {
            self.held.remove(key);
        }
    }
}

/// A key held while an event is being enqueued under it (see [`Claims::hold`]); let go
/// when dropped, however the enqueue ends.
pub(super) struct Hold<'a> {
    claims: &'a Claims,
    key: String,
    /// `None` when another enqueue of the key holds it.
    token: Option<Token>,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if let Some(token) = &self.token {
            self.claims
                .shard(&self.key)
                .drop_if_held_by(&self.key, token);
        }
    }
}

/// The claims in flight, by key.
#[derive(Debug)]
pub(super) struct Claims {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for Claims {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Claims {
    /// The shard that holds `key`.
    pub(super) fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        use std::hash::{BuildHasher as _, Hasher as _};
        // A fixed hasher: the shard only spreads the lock, it is never iterated.
        let mut h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .build_hasher();
        h.write(key.as_bytes());
        let i = (h.finish() % SHARDS as u64) as usize;
        self.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `key` while an event is enqueued under it, so a sync claim of the same key
    /// (a route a reload just switched) waits for the enqueue instead of forwarding
    /// beside it; `None` when a claim holds the key already. The writer serialised the
    /// two when claims were written to the file.
    pub(super) fn hold(&self, key: &str, lease: std::time::Duration) -> Option<Hold<'_>> {
        let now = super::mono_ms();
        let mut shard = self.shard(key);
        let token = match shard.held.get(key).filter(|h| h.holds(now)) {
            Some(h) if !h.enqueue => return None,
            // Another copy is being enqueued: the writer orders the two.
            Some(_) => None,
            None => {
                let token = Token::random();
                let until =
                    now.saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX));
                shard.take(key, token.clone(), until, now, true);
                Some(token)
            }
        };
        Some(Hold {
            claims: self,
            key: key.to_owned(),
            token,
        })
    }

    /// How many claims are held (expired ones not yet swept included).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .held
                    .len()
            })
            .sum()
    }
}
