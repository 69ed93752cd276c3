//! Pacing: how fast a destination's deliveries may start. Its `rate_limit`, its
//! `concurrency` slots (shared by every replica on Redis), and a pause the upstream
//! asked for with `Retry-After`. Kept per destination queue ([`QueueRef`]) by the
//! durable stores, beside their queues.

use std::future::Future;
use std::time::Duration;

use super::{QueueRef, StoreError};
use crate::queue::RateLimit;

/// The pacing contract both durable stores implement.
pub trait Pacing: Send + Sync {
    /// Takes one of the route's `rate_limit` slots (shared by every replica on Redis):
    /// `Ok(token)` when a delivery may start now, `Err(wait)` when the limit (or a pause
    /// the upstream asked for) says how long to wait first.
    fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> impl Future<Output = Result<Result<String, Duration>, StoreError>> + Send;

    /// Gives a slot back unused (nothing was due).
    fn rate_return(
        &self,
        q: &QueueRef<'_>,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Takes up to `want` of the route's `concurrency` slots (`max` in all), each held
    /// until returned or until `lease` runs out (a replica that died): their tokens,
    /// none when all are in use. On Redis the slots are shared by every replica; the
    /// disk store has one process, whose own bound is the limit, and grants them all.
    fn slot_take(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        want: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Extends a slot held by an attempt that is still running to `lease` from now
    /// (shared slots only; the disk store's are this process's own).
    fn slot_renew(
        &self,
        _q: &QueueRef<'_>,
        _token: &str,
        _lease: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async { Ok(()) }
    }

    /// Gives a slot back (the attempt ended, or nothing was due).
    fn slot_return(
        &self,
        q: &QueueRef<'_>,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Holds every delivery of the route for `wait` (the upstream's `Retry-After` on a
    /// 429 or 503): that upstream only is slowed.
    fn pause(
        &self,
        q: &QueueRef<'_>,
        wait: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
