//! Delivery policy of queue routes (`delivery = "queue"`): when a failed delivery is
//! tried again ([`RetryPolicy`]), how fast deliveries start ([`RateLimit`]), and what a
//! dead event does to the events of its `order_by` key behind it ([`OnDead`],
//! [`order_key`]). `config` reads these; what is stored, and the queue contract, are
//! in the store layer (`store/queue.rs`, `store/pacing.rs`), which reads these too. This
//! module depends on neither.

use serde::Deserialize;
use std::time::Duration;

/// A route's `rate_limit = "50/s"` (or `"/m"`): at most `count` deliveries start in
/// any `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub count: u32,
    pub window: Duration,
}

impl RateLimit {
    /// Slack added to the window, so that deliveries which take different times to
    /// reach the upstream still never arrive more than `count` in one `window`.
    pub const SLACK: Duration = Duration::from_millis(100);

    /// `N/s` or `N/m`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (n, unit) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: write it as \"50/s\" or \"600/m\""))?;
        let count: u32 = n
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{s:?}: the count must be a whole number above 0"))?;
        let window = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            other => return Err(format!("{other:?}: the unit is s or m")),
        };
        Ok(Self { count, window })
    }

    /// The window deliveries are counted over, with its slack.
    pub fn counted_over(&self) -> Duration {
        self.window + Self::SLACK
    }
}

/// Per-key order (`order_by`): what a dead event does to the events behind it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDead {
    /// The next event of the key goes on (the default): one bad event does not stop
    /// its key for good; the dead one waits for an operator.
    #[default]
    Skip,
    /// The key waits until the dead event is retried and delivered, or purged.
    Block,
}

/// Longest order key kept as it is; a longer one is kept as its SHA-256 (hex), so that
/// a body cannot make the store's keys arbitrarily long.
pub const ORDER_KEY_MAX: usize = 128;

/// An order key as stored: the value itself, or the SHA-256 of a long one.
pub fn order_key(value: &str) -> String {
    use sha2::Digest as _;
    if value.len() <= ORDER_KEY_MAX {
        value.to_owned()
    } else {
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(value.as_bytes()))
        )
    }
}

pub use crate::time::now_ms;

/// A destination's breaker: `breaker = { failures = 10, probe = "30s" }`. After
/// `failures` consecutive failed attempts the destination pauses itself, and one
/// event is tried every `probe` until one is delivered (`delivery/control.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    pub failures: u32,
    pub probe: Duration,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            failures: 10,
            probe: Duration::from_secs(30),
        }
    }
}

/// A route's retry schedule: `retry = { max_attempts, initial, max_delay, max_age }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial: Duration,
    pub max_delay: Duration,
    pub max_age: Duration,
}

impl Default for RetryPolicy {
    /// 20 attempts, 1 s doubling to at most 1 h, for at most 72 h: the last try comes
    /// about 8 h after the event arrived (4 to 8 h with jitter), long enough to ride out
    /// a deploy or an outage.
    fn default() -> Self {
        Self {
            max_attempts: 20,
            initial: Duration::from_secs(1),
            max_delay: Duration::from_secs(3600),
            max_age: Duration::from_secs(72 * 3600),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempts + 1`, after `attempts` failures: `initial`
    /// doubled per failure, capped at `max_delay`, with "equal jitter" (between half
    /// and all of it), so events that failed together do not return together.
    pub fn backoff(&self, attempts: u32, jitter: f64) -> Duration {
        let exp = attempts.saturating_sub(1).min(40);
        let full = self
            .initial
            .saturating_mul(2u32.saturating_pow(exp.min(31)))
            .min(self.max_delay);
        let half = full / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// What follows the `attempts`-th failed attempt (this one included): retry at a
    /// time, or dead with a reason. `since_ms` is when the schedule started (the
    /// event's arrival, or an operator's last retry): `max_age` counts from there.
    /// `retry_after` is the upstream's own `Retry-After`, honoured up to `max_delay`.
    pub fn next_try(
        &self,
        attempts: u32,
        since_ms: u64,
        now_ms: u64,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Result<u64, String> {
        if attempts >= self.max_attempts {
            return Err(format!("{attempts} attempts failed (max_attempts)"));
        }
        // The upstream's Retry-After, between `initial` (a `0` must not burn the
        // attempts in a burst) and `max_delay`.
        let delay = match retry_after {
            Some(d) => d.clamp(self.initial, self.max_delay.max(self.initial)),
            None => self.backoff(attempts, jitter),
        };
        let at = now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        let deadline =
            since_ms.saturating_add(u64::try_from(self.max_age.as_millis()).unwrap_or(u64::MAX));
        if at > deadline {
            return Err(format!(
                "next try would be past max_age ({})",
                humantime::format_duration(self.max_age)
            ));
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1, 1.0), Duration::from_secs(1));
        assert_eq!(p.backoff(2, 1.0), Duration::from_secs(2));
        assert_eq!(p.backoff(5, 1.0), Duration::from_secs(16));
        assert_eq!(p.backoff(5, 0.0), Duration::from_secs(8));
        assert_eq!(p.backoff(30, 1.0), Duration::from_secs(3600));
    }

    #[test]
    fn rate_limits_are_counts_per_second_or_minute() {
        assert_eq!(
            RateLimit::parse("50/s"),
            Ok(RateLimit {
                count: 50,
                window: Duration::from_secs(1)
            })
        );
        assert_eq!(
            RateLimit::parse("600/m").map(|r| r.window),
            Ok(Duration::from_secs(60))
        );
        for bad in ["50", "0/s", "x/s", "5/h", "-1/s"] {
            assert!(RateLimit::parse(bad).is_err(), "{bad}");
        }
    }
}
