//! Pacing on Redis ([`Pacing`]): a destination's rate limit, concurrency slots and
//! pause, kept in Redis so that every replica counts alike, on the queue's clock.

use std::sync::LazyLock;
use std::time::Duration;

use rand::Rng as _;
use redis::Script;

use super::keys::Keys;
use super::scripts::clocked;
use crate::queue::RateLimit;
use crate::store::redis::{RedisStore, millis};
use crate::store::{Pacing, QueueRef, StoreError};

/// KEYS: the destination's busy set, the queue's clock. ARGV: slot token, lease ms.
/// Extends a concurrency slot that is still held (an attempt that outlasts the lease
/// it took the slot for keeps it).
const SLOT_RENEW: &str = include_str!("../scripts/slot_renew.lua");

/// KEYS: the route's start log (zset), its pause key, the queue's clock. ARGV: limit,
/// counted window ms, token. Uses the server's clock, so every replica counts alike.
/// Returns 0 when a delivery may start (the token is logged), else the milliseconds
/// to wait.
const RATE: &str = include_str!("../scripts/rate.lua");

/// KEYS: the pause key, the queue's clock. ARGV: wait ms. Extends a pause, never
/// shortens one.
const PAUSE: &str = include_str!("../scripts/pause.lua");

/// KEYS: the route's busy set (zset, score = when the slot's lease runs out), the
/// queue's clock. ARGV: max, lease ms, token prefix, want. Takes up to `want` free
/// slots, named `<prefix>:<n>`; returns how many. The set's expiry only grows (a
/// shorter lease must not drop slots that other replicas hold for longer).
const SLOT: &str = include_str!("../scripts/slot.lua");

static SLOT_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(SLOT));
static SLOT_RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(SLOT_RENEW));
static RATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(RATE));
static PAUSE_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(PAUSE));

impl RedisStore {
    /// A token no other slot or start holds: this process's consumer name and a nonce.
    fn fresh_token(&self) -> String {
        format!(
            "{}-{:016x}",
            self.queue_state().consumer,
            rand::rng().random::<u64>()
        )
    }

    /// Removes one member of a sorted set (a rate-limit start or a concurrency slot).
    async fn zrem(&self, key: String, member: &str) -> Result<(), StoreError> {
        let member = member.to_owned();
        self.run(|mut c| async move {
            redis::cmd("ZREM")
                .arg(&key)
                .arg(&member)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }
}

impl Pacing for RedisStore {
    async fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> Result<Result<String, Duration>, StoreError> {
        let k = Keys::new(q);
        let token = self.fresh_token();
        let mut inv = RATE_SCRIPT.prepare_invoke();
        inv.key(k.rate())
            .key(k.pause())
            .key(k.clock())
            .arg(limit.count)
            .arg(millis(limit.counted_over()))
            .arg(&token);
        let inv = &inv;
        let wait: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(if wait <= 0 {
            Ok(token)
        } else {
            Err(Duration::from_millis(u64::try_from(wait).unwrap_or(1)))
        })
    }

    async fn rate_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        self.zrem(Keys::new(q).rate(), token).await
    }

    async fn slot_take(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        want: usize,
        lease: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let k = Keys::new(q);
        let prefix = self.fresh_token();
        let mut inv = SLOT_SCRIPT.prepare_invoke();
        inv.key(k.busy())
            .key(k.clock())
            .arg(max)
            .arg(millis(lease).max(1))
            .arg(&prefix)
            .arg(want);
        let inv = &inv;
        let taken: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok((1..=taken.max(0))
            .map(|i| format!("{prefix}:{i}"))
            .collect())
    }

    async fn slot_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        self.zrem(Keys::new(q).busy(), token).await
    }

    async fn slot_renew(
        &self,
        q: &QueueRef<'_>,
        token: &str,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let k = Keys::new(q);
        let mut inv = SLOT_RENEW_SCRIPT.prepare_invoke();
        inv.key(k.busy())
            .key(k.clock())
            .arg(token)
            .arg(millis(lease));
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async::<()>(&mut c).await })
            .await
    }

    async fn pause(&self, q: &QueueRef<'_>, wait: Duration) -> Result<(), StoreError> {
        let k = Keys::new(q);
        let mut inv = PAUSE_SCRIPT.prepare_invoke();
        inv.key(k.pause()).key(k.clock()).arg(millis(wait).max(1));
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async::<()>(&mut c).await })
            .await
    }
}
