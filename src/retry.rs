//! One way to retry a store call that failed: settling a claim (the request path) and
//! recording an attempt (the delivery workers) both call the store again after a wait
//! that doubles, until it answers or a deadline passes; past that deadline a lease
//! decides instead (the claim's `inflight_ttl`, the attempt's lease).

use std::future::Future;
use std::time::{Duration, Instant};

/// Waits between calls that failed: `first`, doubling up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, max: Duration) -> Self {
        Self { next: first, max }
    }

    /// The next wait; the one after is twice as long, up to `max`.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

/// Calls `f` until it succeeds, waiting `backoff` after each failure, and gives up
/// (with the last error) when the next call would start after `deadline`. The first
/// call is made at once, whatever the deadline.
pub(crate) async fn retry_until<T, E, F, Fut>(
    deadline: Instant,
    mut backoff: Backoff,
    mut f: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    loop {
        let e = match f().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let wait = backoff.next_wait();
        if Instant::now() + wait >= deadline {
            return Err(e);
        }
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_their_cap() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
        let waits: Vec<u128> = (0..5).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 300, 300]);
    }

    #[tokio::test]
    async fn a_call_that_keeps_failing_is_tried_until_the_deadline_then_its_error_returned() {
        let start = Instant::now();
        let mut calls = Vec::new();
        let out: Result<(), usize> = retry_until(
            start + Duration::from_secs(2),
            Backoff::new(Duration::from_millis(20), Duration::from_secs(1)),
            || {
                calls.push(start.elapsed());
                let n = calls.len();
                async move { Err(n) }
            },
        )
        .await;
        // At 0, 20, 60, 140, 300, 620 and 1260 ms; the next wait (1 s, the cap) would
        // end past the deadline.
        assert_eq!(out, Err(7));
        let waits: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).collect();
        for (wait, at_least) in waits.iter().zip([20, 40, 80, 160, 320, 640]) {
            assert!(*wait >= Duration::from_millis(at_least), "{waits:?}");
        }
    }

    #[tokio::test]
    async fn the_first_success_ends_the_retries() {
        let mut calls = 0;
        let out = retry_until(
            Instant::now() + Duration::from_secs(60),
            Backoff::new(Duration::from_millis(10), Duration::from_millis(10)),
            || {
                calls += 1;
                let n = calls;
                async move { if n < 3 { Err(()) } else { Ok(n) } }
            },
        )
        .await;
        assert_eq!(out, Ok(3));
    }
}
