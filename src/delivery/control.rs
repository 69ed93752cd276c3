//! A destination's controls: an operator's pause and the breaker that pauses a
//! failing destination by itself. Both are one record per destination queue in the
//! store's cells ([`Cells`]): shared by every replica on Redis, kept across restarts,
//! changed by compare-and-set so two replicas never undo each other.
//!
//! ```text
//! pause(reason, until)    -> paused (an operator's; replaces a breaker's pause)
//! resume                  -> running; the pause joins `past`
//! trip (breaker)          running -> paused { breaker }, probe due after `probe`
//! take_probe              paused { breaker } and the probe due -> the next probe
//!                         after `probe`, and this replica tries one event now
//! close (breaker)         paused { breaker } -> running (a probe or an attempt
//!                         delivered)
//! until passed            paused -> running (at the next look)
//! ```
//!
//! A paused destination keeps accepting and queueing: its workers take nothing (but
//! the breaker's probe). Time spent paused does not count towards an event's
//! `max_age` ([`Control::held_ms`]), and a failed probe costs its event no attempt
//! (`Finish::Probe`): nothing goes dead because a destination was paused.
//!
//! The workers read a destination's record through [`Controls`], at most [`FRESH`]
//! old: a pause made on another replica stops this one's deliveries within that
//! time (attempts already running end as they would have).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::store::{Cells, QueueRef, StoreError, cells};

/// How old a destination's record the workers act on may be.
pub const FRESH: Duration = Duration::from_secs(1);
/// Ended pauses kept for `max_age` (the most recent).
const PAST_KEPT: usize = 64;
/// The reason a breaker's pause gives.
pub const BREAKER: &str = "breaker";

/// A destination's pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// Why: an operator's words, or `breaker`.
    pub reason: String,
    /// Unix milliseconds.
    pub since_ms: u64,
    /// When it resumes by itself (Unix milliseconds), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// The breaker paused it (probed; a success resumes it).
    #[serde(default)]
    pub breaker: bool,
}

/// A destination's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// An open breaker's next probe (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_at_ms: Option<u64>,
    /// Ended pauses, `(since, until)` in Unix milliseconds, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past: Vec<(u64, u64)>,
}

impl Control {
    /// The pause in force at `now` (one whose `until` has passed is not).
    pub fn paused_at(&self, now_ms: u64) -> Option<&Paused> {
        self.paused
            .as_ref()
            .filter(|p| p.until_ms.is_none_or(|u| u > now_ms))
    }

    /// Whether an open breaker holds the destination at `now`.
    pub fn breaker_open(&self, now_ms: u64) -> bool {
        self.paused_at(now_ms).is_some_and(|p| p.breaker)
    }

    /// How much of `[from, to]` the destination spent paused: what an event's
    /// `max_age` does not count.
    pub fn held_ms(&self, from: u64, to: u64) -> u64 {
        let open = self
            .paused
            .as_ref()
            .map(|p| (p.since_ms, p.until_ms.unwrap_or(u64::MAX)));
        self.past
            .iter()
            .copied()
            .chain(open)
            .map(|(a, b)| b.min(to).saturating_sub(a.max(from)))
            .sum()
    }

    /// Ends the pause at `now` (its time joins `past`).
    fn end_pause(&mut self, now_ms: u64) -> bool {
        let Some(p) = self.paused.take() else {
            return false;
        };
        let end = p.until_ms.map_or(now_ms, |u| u.min(now_ms));
        self.past.push((p.since_ms, end.max(p.since_ms)));
        if self.past.len() > PAST_KEPT {
            let extra = self.past.len() - PAST_KEPT;
            self.past.drain(..extra);
        }
        self.probe_at_ms = None;
        true
    }

    /// A pause whose `until` has passed, ended.
    fn settle(&mut self, now_ms: u64) {
        if self.paused.is_some() && self.paused_at(now_ms).is_none() {
            self.end_pause(now_ms);
        }
    }
}

/// The cell a destination's record is kept in.
fn cell(q: &QueueRef<'_>) -> String {
    cells::name(q.prefix, &format!("control:{}", q.name()))
}

/// A destination's record as stored (a pause whose `until` passed, ended).
pub async fn load(
    store: &impl Cells,
    q: &QueueRef<'_>,
    now_ms: u64,
) -> Result<Control, StoreError> {
    let mut c: Control = cells::read(store, &cell(q)).await?.unwrap_or_default();
    c.settle(now_ms);
    Ok(c)
}

/// Applies `change` to a destination's record; returns what it answered and the record.
async fn change<A>(
    store: &impl Cells,
    q: &QueueRef<'_>,
    now_ms: u64,
    mut f: impl FnMut(&mut Control) -> A,
) -> Result<(A, Control), StoreError> {
    let (a, c) = cells::update(store, &cell(q), |old: Option<Control>| {
        let mut c = old.unwrap_or_default();
        c.settle(now_ms);
        let a = f(&mut c);
        let keep = c != Control::default();
        (keep.then_some(c), a)
    })
    .await?;
    Ok((a, c.unwrap_or_default()))
}

/// An operator's pause: a paused destination keeps its `since` (and a breaker's
/// pause becomes the operator's: it is no longer probed).
pub async fn pause(
    store: &impl Cells,
    q: &QueueRef<'_>,
    reason: &str,
    until_ms: Option<u64>,
    now_ms: u64,
) -> Result<Control, StoreError> {
    let (_, c) = change(store, q, now_ms, |c| {
        let since_ms = c.paused.as_ref().map_or(now_ms, |p| p.since_ms);
        c.paused = Some(Paused {
            reason: reason.to_owned(),
            since_ms,
            until_ms,
            breaker: false,
        });
        c.probe_at_ms = None;
    })
    .await?;
    Ok(c)
}

/// Resumes the destination; `false` when it was not paused.
pub async fn resume(store: &impl Cells, q: &QueueRef<'_>, now_ms: u64) -> Result<bool, StoreError> {
    let (was, _) = change(store, q, now_ms, |c| c.end_pause(now_ms)).await?;
    Ok(was)
}

/// The breaker opens: the destination pauses itself, unless it is paused already.
/// `true` when this call opened it.
pub async fn trip(
    store: &impl Cells,
    q: &QueueRef<'_>,
    probe: Duration,
    now_ms: u64,
) -> Result<bool, StoreError> {
    let (opened, _) = change(store, q, now_ms, |c| {
        if c.paused.is_some() {
            return false;
        }
        c.paused = Some(Paused {
            reason: BREAKER.to_owned(),
            since_ms: now_ms,
            until_ms: None,
            breaker: true,
        });
        c.probe_at_ms = Some(now_ms.saturating_add(ms(probe)));
        true
    })
    .await?;
    Ok(opened)
}

/// Takes an open breaker's probe when it is due: `true` when this caller (of every
/// replica's) tries one event now; the next probe is due `probe` later.
pub async fn take_probe(
    store: &impl Cells,
    q: &QueueRef<'_>,
    probe: Duration,
    now_ms: u64,
) -> Result<bool, StoreError> {
    let (taken, _) = change(store, q, now_ms, |c| {
        let due = c.breaker_open(now_ms) && c.probe_at_ms.is_none_or(|t| t <= now_ms);
        if due {
            c.probe_at_ms = Some(now_ms.saturating_add(ms(probe)));
        }
        due
    })
    .await?;
    Ok(taken)
}

/// A delivery closes an open breaker (an operator's pause stays). `true` when this
/// call closed it.
pub async fn close(store: &impl Cells, q: &QueueRef<'_>, now_ms: u64) -> Result<bool, StoreError> {
    let (closed, _) = change(store, q, now_ms, |c| {
        c.breaker_open(now_ms) && c.end_pause(now_ms)
    })
    .await?;
    Ok(closed)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A process's consecutive failed attempts at a destination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Streak {
    /// Failed attempts in a row (0: the last was delivered).
    pub failed: u32,
    /// The last attempt's result.
    pub last: String,
    /// Unix milliseconds when the last attempt ended.
    pub at_ms: u64,
}

/// This process's view of its destinations' records, at most [`FRESH`] old, and the
/// breaker's count of consecutive failed attempts per destination.
#[derive(Debug, Default)]
pub struct Controls {
    seen: Mutex<HashMap<String, (Instant, Control)>>,
    failures: Mutex<HashMap<String, u32>>,
    /// Per destination: consecutive failed attempts (probes included) and the last
    /// attempt's result, for alerts (`destination_failing`). Absent: this process has
    /// made no attempt there yet.
    streaks: Mutex<HashMap<String, Streak>>,
}

impl Controls {
    /// The destination's record, read from the store when the one held is older than
    /// [`FRESH`].
    pub async fn get(
        &self,
        store: &impl Cells,
        q: &QueueRef<'_>,
        now_ms: u64,
    ) -> Result<Control, StoreError> {
        let name = q.name();
        if let Some((at, c)) = lock(&self.seen).get(name.as_ref())
            && at.elapsed() < FRESH
        {
            let mut c = c.clone();
            c.settle(now_ms);
            return Ok(c);
        }
        let c = load(store, q, now_ms).await?;
        lock(&self.seen).insert(name.into_owned(), (Instant::now(), c.clone()));
        Ok(c)
    }

    /// Forgets the record held, so the next look reads the store (this process
    /// changed it).
    pub fn forget(&self, q: &QueueRef<'_>) {
        lock(&self.seen).remove(q.name().as_ref());
    }

    /// Counts an attempt's end for the breaker: the consecutive failures so far
    /// (0 after a delivery).
    pub fn count(&self, q: &QueueRef<'_>, delivered: bool) -> u32 {
        let mut f = lock(&self.failures);
        let n = f.entry(q.name().into_owned()).or_default();
        *n = if delivered { 0 } else { n.saturating_add(1) };
        *n
    }

    /// Notes an attempt's end for alerts: every attempt, probes included.
    pub fn note(&self, q: &QueueRef<'_>, delivered: bool, result: &str, now_ms: u64) {
        let mut s = lock(&self.streaks);
        let e = s.entry(q.name().into_owned()).or_default();
        e.failed = if delivered {
            0
        } else {
            e.failed.saturating_add(1)
        };
        result.clone_into(&mut e.last);
        e.at_ms = now_ms;
    }

    /// This process's attempts at the destination, as alerts read them; `None` before
    /// its first attempt here.
    pub fn streak(&self, q: &QueueRef<'_>) -> Option<Streak> {
        lock(&self.streaks).get(q.name().as_ref()).cloned()
    }

    /// Starts the count again (the breaker opened or closed, an operator resumed).
    pub fn reset(&self, q: &QueueRef<'_>) {
        lock(&self.failures).remove(q.name().as_ref());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn paused_time_is_held_off_max_age() {
        let mut c = Control {
            past: vec![(100, 200), (1_000, 1_500)],
            ..Control::default()
        };
        assert_eq!(c.held_ms(0, 2_000), 600);
        assert_eq!(c.held_ms(150, 1_200), 250);
        c.paused = Some(Paused {
            reason: "deploy".into(),
            since_ms: 1_800,
            until_ms: None,
            breaker: false,
        });
        assert_eq!(c.held_ms(0, 2_000), 800);
    }

    #[tokio::test]
    async fn a_pause_ends_at_its_until_and_a_breaker_is_probed_once_per_interval() {
        let store = MemoryStore::new();
        let q = QueueRef::new("hg:", "orders", "orders");
        pause(&store, &q, "deploy", Some(5_000), 1_000)
            .await
            .expect("pause");
        let c = load(&store, &q, 2_000).await.expect("load");
        assert_eq!(
            c.paused_at(2_000).map(|p| p.reason.as_str()),
            Some("deploy")
        );
        let c = load(&store, &q, 5_000).await.expect("load");
        assert_eq!(c.paused, None);
        assert_eq!(c.past, vec![(1_000, 5_000)]);

        let probe = Duration::from_secs(30);
        assert!(trip(&store, &q, probe, 10_000).await.expect("trip"));
        assert!(!trip(&store, &q, probe, 10_001).await.expect("trip"));
        assert!(!take_probe(&store, &q, probe, 20_000).await.expect("probe"));
        assert!(take_probe(&store, &q, probe, 40_000).await.expect("probe"));
        assert!(!take_probe(&store, &q, probe, 40_001).await.expect("probe"));
        assert!(close(&store, &q, 41_000).await.expect("close"));
        let c = load(&store, &q, 41_000).await.expect("load");
        assert!(!c.breaker_open(41_000));
        // An operator's pause is not closed by a delivery.
        pause(&store, &q, "deploy", None, 50_000)
            .await
            .expect("pause");
        assert!(!close(&store, &q, 51_000).await.expect("close"));
        assert!(resume(&store, &q, 52_000).await.expect("resume"));
        assert!(!resume(&store, &q, 52_000).await.expect("resume"));
    }
}
