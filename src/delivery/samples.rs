//! Each queue destination's depth, dead letters and oldest undelivered age over the
//! last day, for the inspector's charts (`GET /overview/series`): the process reads
//! them from the store every [`EVERY`] and keeps the last [`KEPT`] samples of each
//! destination in a ring.
//!
//! Memory bound: a [`Sample`] is 32 bytes (four `u64`), so one destination's ring holds
//! at most 2 880 × 32 B = 90 KiB (a day at one sample per 30 s), plus its map entry;
//! ten destinations take under 1 MiB. A destination no route names any more (a reload)
//! is forgotten at the next sample. The rings are the process's own: each replica
//! samples the shared store itself, and a restart begins with an empty ring.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::Delivery;
use crate::state::Routing;
use crate::store::{QueueStore as _, Store};

/// How often the queues are sampled.
pub const EVERY: Duration = Duration::from_secs(30);
/// Samples kept per destination: a day of them.
pub const KEPT: usize = 2_880;

/// How long one destination's reading may take before the sample skips it (a store
/// that does not answer leaves a gap, never a stalled sampler).
const READ_LIMIT: Duration = Duration::from_secs(2);

/// One destination's queue at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Unix ms.
    pub at_ms: u64,
    /// Queued and retrying events.
    pub waiting: u64,
    pub dead: u64,
    /// The oldest undelivered event's age (0 when none waits).
    pub oldest_age_ms: u64,
}

/// The rings, by `(route, destination)`.
#[derive(Debug, Default)]
pub struct QueueSamples {
    rings: Mutex<HashMap<(String, String), VecDeque<Sample>>>,
}

impl QueueSamples {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), VecDeque<Sample>>> {
        self.rings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a sample to a destination's ring, the oldest going past [`KEPT`].
    pub(crate) fn push(&self, route: &str, destination: &str, sample: Sample) {
        let mut rings = self.lock();
        let ring = rings
            .entry((route.to_owned(), destination.to_owned()))
            .or_default();
        if ring.len() >= KEPT {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// Forgets the destinations not in `named`.
    fn retain(&self, named: &HashSet<(String, String)>) {
        self.lock().retain(|k, _| named.contains(k));
    }

    /// A destination's samples taken at or after `since_ms`, oldest first.
    pub(crate) fn since(&self, route: &str, destination: &str, since_ms: u64) -> Vec<Sample> {
        self.lock()
            .get(&(route.to_owned(), destination.to_owned()))
            .map(|ring| {
                ring.iter()
                    .filter(|s| s.at_ms >= since_ms)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Reads every queue destination's depth now and adds a sample of each.
    pub(crate) async fn sample(&self, routing: &Routing, store: &Store) {
        if !store.keeps_queues() {
            return;
        }
        let mut named = HashSet::new();
        for route in routing.routes.values() {
            if route.delivery != Delivery::Queue {
                continue;
            }
            for d in &route.destinations {
                named.insert((route.name.clone(), d.name.clone()));
                if let Some(s) = read(routing, store, &route.name, &d.name).await {
                    self.push(&route.name, &d.name, s);
                }
            }
        }
        self.retain(&named);
    }
}

/// One destination's queue now, if the store answers within [`READ_LIMIT`].
pub(crate) async fn read(
    routing: &Routing,
    store: &Store,
    route: &str,
    destination: &str,
) -> Option<Sample> {
    let q = routing.queue(route, destination);
    let depth = tokio::time::timeout(READ_LIMIT, store.depth(&q))
        .await
        .ok()?
        .ok()?;
    let now = crate::time::now_ms();
    Some(Sample {
        at_ms: now,
        waiting: depth.waiting,
        dead: depth.dead,
        oldest_age_ms: depth
            .oldest_received_ms
            .map_or(0, |t| now.saturating_sub(t)),
    })
}

/// Samples every [`EVERY`] (the first at once) until `stop`.
pub(crate) async fn run(
    samples: Arc<QueueSamples>,
    routing: Arc<ArcSwap<Routing>>,
    store: Store,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        samples.sample(&routing.load(), &store).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Sample {
        Sample {
            at_ms: ms,
            waiting: ms,
            dead: 0,
            oldest_age_ms: 0,
        }
    }

    #[test]
    fn a_ring_keeps_a_day_of_samples_and_forgets_unnamed_destinations() {
        assert_eq!(std::mem::size_of::<Sample>(), 32, "the bound in the docs");
        let s = QueueSamples::default();
        for i in 0..(KEPT as u64 + 10) {
            s.push("r", "d", at(i));
        }
        s.push("r", "gone", at(1));
        let kept = s.since("r", "d", 0);
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].at_ms, 10, "the oldest went first");
        assert_eq!(s.since("r", "d", KEPT as u64).len(), 10);
        s.retain(&HashSet::from([("r".to_owned(), "d".to_owned())]));
        assert!(s.since("r", "gone", 0).is_empty());
        assert_eq!(s.since("r", "d", 0).len(), KEPT);
    }
}
