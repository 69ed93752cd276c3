//! The disk store's pacing ([`Pacing`]): one process owns the file, so a route's rate
//! limit and pause are kept in memory, and its own per-route bound is the whole
//! concurrency limit.

use std::time::Duration;

use super::{DiskStore, mono_ms, queue::space};
use crate::queue::RateLimit;
use crate::store::{Pacing, QueueRef, StoreError};

/// A route's recent delivery starts and pause, for its `rate_limit`. On the monotonic
/// clock ([`mono_ms`]): nothing of it is stored.
#[derive(Debug, Default)]
pub(super) struct Limiter {
    /// (monotonic ms, token) of the starts within the counted window, oldest first.
    starts: std::collections::VecDeque<(u64, u64)>,
    paused_until_ms: u64,
    next_token: u64,
}

impl Limiter {
    fn take(&mut self, limit: &RateLimit, now: u64) -> Result<String, Duration> {
        if self.paused_until_ms > now {
            return Err(Duration::from_millis(self.paused_until_ms - now));
        }
        let window = u64::try_from(limit.counted_over().as_millis()).unwrap_or(u64::MAX);
        while self.starts.front().is_some_and(|(t, _)| *t + window <= now) {
            self.starts.pop_front();
        }
        if self.starts.len() < limit.count as usize {
            self.next_token += 1;
            self.starts.push_back((now, self.next_token));
            return Ok(self.next_token.to_string());
        }
        let oldest = self.starts.front().map_or(now, |(t, _)| *t);
        Err(Duration::from_millis(
            (oldest + window).saturating_sub(now).max(1),
        ))
    }
}

impl DiskStore {
    /// Runs `f` on a route's limiter, under its lock.
    fn limiter<T>(&self, q: &QueueRef<'_>, f: impl FnOnce(&mut Limiter) -> T) -> T {
        let mut limits = self
            .inner
            .limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(limits.entry(space(q)).or_default())
    }
}

impl Pacing for DiskStore {
    async fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> Result<Result<String, Duration>, StoreError> {
        Ok(self.limiter(q, |l| l.take(limit, mono_ms())))
    }

    async fn rate_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        if let Ok(token) = token.parse::<u64>() {
            self.limiter(q, |l| l.starts.retain(|(_, t)| *t != token));
        }
        Ok(())
    }

    async fn slot_take(
        &self,
        _q: &QueueRef<'_>,
        _max: usize,
        want: usize,
        _lease: Duration,
    ) -> Result<Vec<String>, StoreError> {
        // One process owns the file: its own per-route bound is the whole limit.
        Ok(vec![String::new(); want])
    }

    async fn slot_return(&self, _q: &QueueRef<'_>, _token: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn pause(&self, q: &QueueRef<'_>, wait: Duration) -> Result<(), StoreError> {
        let until = mono_ms().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        self.limiter(q, |l| l.paused_until_ms = l.paused_until_ms.max(until));
        Ok(())
    }
}
