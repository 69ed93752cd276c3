//! The loop: for each queue route's destinations with free slots, take due events
//! (each with its slot) and run an attempt for each.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::attempt::{Held, Target, attempt};
use super::{LEASE_MARGIN, WorkerContext};
use crate::config::{Delivery, Destination, Route};
use crate::state::Routing;
use crate::store::{Leased, Pacing as _, QueueRef, QueueStore as _};

/// How often each queue route is looked at when nothing wakes the loop: retries that
/// come due, and events another replica queued.
const POLL: Duration = Duration::from_millis(200);
/// Routes in sync mode are looked at for events they queued before a reload every
/// this many rounds (about 5 s).
const SYNC_DRAIN_EVERY: u64 = 25;

/// Runs the delivery workers until `stop` is cancelled, then lets attempts in progress
/// finish within `server.shutdown_grace`.
pub async fn run(ctx: Arc<WorkerContext>, stop: CancellationToken) {
    let attempts = TaskTracker::new();
    // Each route's slots and how many it was made with.
    let mut slots: HashMap<String, (usize, Arc<Semaphore>)> = HashMap::new();
    let mut failing = false;
    let mut tick: u64 = 0;
    while !stop.is_cancelled() {
        let routing = ctx.routing();
        let mut store_failed = false;
        tick = tick.wrapping_add(1);
        for route in routing.routes.values() {
            // A route a reload switched back to sync still drains what it queued,
            // looked at less often.
            let draining = route.delivery != Delivery::Queue;
            if draining && !tick.is_multiple_of(SYNC_DRAIN_EVERY) {
                continue;
            }
            for dest in &route.destinations {
                // A pull destination's events are leased by its consumers (admin/pull.rs).
                if matches!(dest.target, crate::config::Target::Pull(_)) {
                    continue;
                }
                if draining && !has_waiting(&ctx, &routing, route, dest).await {
                    continue;
                }
                let q = routing.queue(&route.name, &dest.name);
                let sem = resized(&mut slots, &q.name(), dest.concurrency);
                let mut free = sem.available_permits();
                if free == 0 {
                    continue;
                }
                let probe = match held(&ctx, &q, dest).await {
                    Hold::Run => false,
                    Hold::Paused => continue,
                    Hold::Probe => {
                        free = 1;
                        true
                    }
                };
                // The slots first, then the events: every event taken has its slot,
                // so none is left leased with nothing to run it.
                let Ok(mut permits) = sem
                    .clone()
                    .try_acquire_many_owned(u32::try_from(free).unwrap_or(u32::MAX))
                else {
                    continue;
                };
                let lease = dest.upstream_timeout + LEASE_MARGIN;
                // The store starts counting the lease after this: ours ends no later.
                let held_until = Instant::now() + lease;
                match take_bounded(&ctx, &q, dest, free, lease).await {
                    Ok(batch) => {
                        for (leased, slot) in batch {
                            let Some(permit) = permits.split(1) else {
                                // Cannot happen (one event per slot taken); given
                                // back rather than left leased if it did.
                                let _ = ctx.store.give_back(&q, &leased).await;
                                continue;
                            };
                            let (cx, rt, stop) = (ctx.clone(), routing.clone(), stop.clone());
                            let (r, d) = (route.clone(), dest.clone());
                            attempts.spawn(async move {
                                let to = Target::new(&cx, &rt, &r, &d, probe);
                                let slot_token = slot.as_deref().filter(|t| !t.is_empty());
                                let held = Held::new(held_until);
                                attempt(&to, leased, slot_token, &held, &stop).await;
                                if let Some(token) = slot {
                                    // Not given back, it frees itself when its lease ends.
                                    let _ = cx.store.slot_return(&to.q, &token).await;
                                }
                                drop(permit);
                                cx.wake.notify_one();
                            });
                        }
                    }
                    Err(e) => {
                        store_failed = true;
                        if !failing {
                            tracing::warn!(route = %route.name, destination = %dest.name, error = %e, "queue: cannot take due events; retrying");
                        }
                    }
                }
            }
        }
        failing = store_failed;
        tokio::select! {
            () = stop.cancelled() => break,
            () = ctx.wake.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
    attempts.close();
    let grace = ctx.shutdown_grace;
    if !attempts.is_empty() {
        tracing::info!(attempts = attempts.len(), grace = ?grace, "queue: letting delivery attempts in progress finish");
    }
    if tokio::time::timeout(grace, attempts.wait()).await.is_err() {
        tracing::warn!(
            "queue: shutdown grace ran out with attempts in progress; their events stay stored and are tried again after the lease"
        );
    }
}

/// What a destination's pause lets the workers do now.
enum Hold {
    /// Not paused: take what is due.
    Run,
    /// Paused (by an operator, or a breaker whose probe is not due): take nothing.
    Paused,
    /// An open breaker's probe, taken by this process: one event.
    Probe,
}

/// Whether the destination is paused ([`control`](super::control)): a pause whose
/// `until` passed is ended here, and the probe of an open breaker taken when due (by
/// one replica). A store that cannot say lets the loop go on: taking due events then
/// fails the same way, or succeeds.
async fn held(ctx: &WorkerContext, q: &QueueRef<'_>, dest: &Destination) -> Hold {
    use super::control;
    let now = crate::time::now_ms();
    let Ok(c) = ctx.controls.get(&ctx.store, q, now).await else {
        return Hold::Run;
    };
    if c.paused.is_some() && c.paused_at(now).is_none() {
        // Its `until` passed: ended for every replica (and its time kept for max_age).
        if control::resume(&ctx.store, q, now).await.is_ok() {
            ctx.controls.forget(q);
            tracing::info!(
                route = q.route,
                destination = q.destination,
                "queue: the destination's pause ended (its until passed); deliveries resume"
            );
        }
        return Hold::Run;
    }
    let Some(p) = c.paused_at(now) else {
        return Hold::Run;
    };
    if !p.breaker {
        return Hold::Paused;
    }
    let Some(b) = dest.breaker else {
        // A reload turned the breaker off: it no longer holds the destination.
        if control::close(&ctx.store, q, now).await.is_ok() {
            ctx.controls.forget(q);
        }
        return Hold::Run;
    };
    if c.probe_at_ms.is_some_and(|t| t > now) {
        return Hold::Paused;
    }
    match control::take_probe(&ctx.store, q, b.probe, now).await {
        Ok(true) => {
            ctx.controls.forget(q);
            Hold::Probe
        }
        _ => Hold::Paused,
    }
}

/// A destination's slots (`concurrency`) in this process. A reload that changes
/// `concurrency` resizes them, counting the attempts still running: more slots are
/// added, or fewer are handed out until enough attempts have ended.
fn resized(
    slots: &mut HashMap<String, (usize, Arc<Semaphore>)>,
    queue: &str,
    want: usize,
) -> Arc<Semaphore> {
    let (size, sem) = slots
        .entry(queue.to_owned())
        .or_insert_with(|| (want, Arc::new(Semaphore::new(want))));
    if *size != want {
        if want > *size {
            sem.add_permits(want - *size);
        } else {
            let fewer = *size - want;
            let owed = fewer - sem.forget_permits(fewer);
            if owed > 0 {
                // Slots in use now: kept as their attempts end.
                let sem = sem.clone();
                let owed = u32::try_from(owed).unwrap_or(u32::MAX);
                tokio::spawn(async move {
                    if let Ok(p) = sem.acquire_many(owed).await {
                        p.forget();
                    }
                });
            }
        }
        *size = want;
    }
    sem.clone()
}

/// Takes up to `max` due events within the destination's `concurrency`: each first
/// takes one of its slots (shared by every replica on Redis), so a backlog never
/// reaches the upstream more at once than it allows. Slots taken when nothing was
/// due are given back. Without slots to share, one call. (The `rate_limit` is the
/// attempt's own business: see [`rate_slot`].)
async fn take_bounded(
    ctx: &WorkerContext,
    q: &QueueRef<'_>,
    dest: &Destination,
    max: usize,
    lease: Duration,
) -> Result<Vec<(Leased, Option<String>)>, crate::store::StoreError> {
    let store = &ctx.store;
    if !store.shares_slots() {
        let batch = store.take_due(q, max, lease).await?;
        return Ok(batch.into_iter().map(|l| (l, None)).collect());
    }
    // Slots for the whole batch in one call, the unused ones back in one each.
    let mut slots = store.slot_take(q, dest.concurrency, max, lease).await?;
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let batch = store.take_due(q, slots.len(), lease).await?;
    for unused in slots.split_off(batch.len()) {
        // Not given back, a slot frees itself when its lease ends; the events taken
        // are run either way (an error here must not drop them while leased).
        if let Err(e) = store.slot_return(q, &unused).await {
            tracing::debug!(route = q.route, error = %e, "queue: an unused concurrency slot could not be given back; it frees itself with its lease");
        }
    }
    Ok(batch
        .into_iter()
        .zip(slots)
        .map(|(l, slot)| (l, Some(slot)))
        .collect())
}

/// Whether a (sync) route's destination has events waiting in its queue.
async fn has_waiting(
    ctx: &WorkerContext,
    routing: &Routing,
    route: &Route,
    dest: &Destination,
) -> bool {
    let q = routing.queue(&route.name, &dest.name);
    matches!(ctx.store.depth(&q).await, Ok(d) if d.waiting > 0)
}
