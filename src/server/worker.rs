//! Delivery workers of queue routes (`delivery = "queue"`): take due events from the
//! store, forward each exactly as a sync forward would (same headers,
//! `Idempotency-Key`, `forward_secret`, `upstream_timeout`, no redirects), and record
//! how each attempt ended.
//!
//! ```text
//! loop: for each queue route with free slots (route.concurrency):
//!         take_due(free, lease = upstream_timeout + LEASE_MARGIN) → one task per event
//!       sleep until woken (an event queued, an attempt ended) or POLL
//! attempt: forward → 2xx: Delivered
//!                  → else: Retry at backoff (or the upstream's Retry-After), or Dead
//!                    once max_attempts or max_age is spent
//!          → finish in the store (retried for the lease's length if the store fails)
//! ```
//!
//! A lease keeps other workers (other replicas on Redis) off an event while it is
//! tried. It belongs to the attempt: taken for this destination's `upstream_timeout`
//! and `LEASE_MARGIN`, renewed every `RENEW_EVERY` while the attempt runs and while its
//! result is recorded, and an attempt is sent only with at least its timeout of lease
//! left. If this process dies (or stops renewing), the lease runs out and the event is
//! tried again, with the same `Idempotency-Key`; if the lease is found lost while the
//! request is still open (a pause longer than the lease, a purge), the request is
//! abandoned. On shutdown the loop stops taking events, attempts in progress get
//! `shutdown_grace`, and whatever is left stays stored for the next start.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use rand::Rng as _;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{AppState, Routing};
use crate::config::{Delivery, Destination, Route};
use crate::forward::{ForwardError, Outbound, UpstreamResponse};
use crate::provider::EventId;
use crate::queue::{OnDead, now_ms};
use crate::store::{Attempt, Finish, Leased, Pacing as _, QueueRef, QueueStore as _};
use crate::telemetry::{DestinationLabel, DestinationOutcome, DestinationResult};

/// How often each queue route is looked at when nothing wakes the loop: retries that
/// come due, and events another replica queued.
const POLL: Duration = Duration::from_millis(200);
/// How long a delivered attempt's result is retried when the store fails.
const RECORD_DELIVERY_FOR: Duration = Duration::from_secs(300);
/// Routes in sync mode are looked at for events they queued before a reload every
/// this many rounds (about 5 s).
const SYNC_DRAIN_EVERY: u64 = 25;
/// A lease outlasts the forward by this much before another worker (another replica,
/// or this one after a restart) may take the event: time to record the attempt.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// How often an attempt in progress renews its lease (and its concurrency slot).
/// Well under the Redis store's reclaim idle time, so a renewed entry is never even
/// looked at by another taker.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// The shortest wait between two renewals of one lease.
const RENEW_AT_LEAST: Duration = Duration::from_millis(100);
/// The lease an attempt must have left, beyond its `upstream_timeout`, to be sent.
const SEND_MARGIN: Duration = Duration::from_secs(1);

/// Runs the delivery workers until `stop` is cancelled, then lets attempts in progress
/// finish within `server.shutdown_grace`.
pub async fn run(state: Arc<AppState>, stop: CancellationToken) {
    let attempts = TaskTracker::new();
    // Each route's slots and how many it was made with.
    let mut slots: HashMap<String, (usize, Arc<Semaphore>)> = HashMap::new();
    let mut failing = false;
    let mut tick: u64 = 0;
    while !stop.is_cancelled() {
        let routing = state.routing();
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
                if draining && !has_waiting(&state, &routing, route, dest).await {
                    continue;
                }
                let q = routing.queue(&route.name, &dest.name);
                let sem = resized(&mut slots, &q.name(), dest.concurrency);
                let free = sem.available_permits();
                if free == 0 {
                    continue;
                }
                let lease = dest.upstream_timeout + LEASE_MARGIN;
                // The store starts counting the lease after this: ours ends no later.
                let held_until = Instant::now() + lease;
                match take_bounded(&state, &q, dest, free, lease).await {
                    Ok(batch) => {
                        for (leased, slot, rate_asked) in batch {
                            let Ok(permit) = sem.clone().try_acquire_owned() else {
                                break;
                            };
                            let (st, rt) = (state.clone(), routing.clone());
                            let (r, d) = (route.clone(), dest.clone());
                            attempts.spawn(async move {
                                let slot_token = slot.as_deref().filter(|t| !t.is_empty());
                                let held = Held::new(held_until);
                                attempt(&st, &rt, &r, &d, leased, rate_asked, slot_token, &held)
                                    .await;
                                if let Some(token) = slot {
                                    let q = rt.queue(&r.name, &d.name);
                                    // Not given back, it frees itself when its lease ends.
                                    let _ = st.store().slot_return(&q, &token).await;
                                }
                                drop(permit);
                                st.deliveries.notify_one();
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
            () = state.deliveries.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
    attempts.close();
    let grace = state.server.shutdown_grace;
    if !attempts.is_empty() {
        tracing::info!(attempts = attempts.len(), grace = ?grace, "queue: letting delivery attempts in progress finish");
    }
    if tokio::time::timeout(grace, attempts.wait()).await.is_err() {
        tracing::warn!(
            "queue: shutdown grace ran out with attempts in progress; their events stay stored and are tried again after the lease"
        );
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

/// Takes up to `max` due events within the destination's limits: each first takes a
/// slot of its `concurrency` (shared by every replica on Redis) and of its
/// `rate_limit`, so a backlog never reaches the upstream more at once, or faster, than
/// they allow. Slots taken when nothing was due are given back. Without either to
/// share, one call.
async fn take_bounded(
    state: &AppState,
    q: &QueueRef<'_>,
    dest: &Destination,
    max: usize,
    lease: Duration,
) -> Result<Vec<(Leased, Option<String>, Option<Instant>)>, crate::store::StoreError> {
    let store = state.store();
    let shared = store.shares_slots();
    let Some(limit) = &dest.rate_limit else {
        if !shared {
            let batch = store.take_due(q, max, lease).await?;
            return Ok(batch.into_iter().map(|l| (l, None, None)).collect());
        }
        // Slots for the whole batch in one call, the unused ones back in one each.
        let mut slots = store.slot_take(q, dest.concurrency, max, lease).await?;
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let batch = store.take_due(q, slots.len(), lease).await?;
        for unused in slots.split_off(batch.len()) {
            store.slot_return(q, &unused).await?;
        }
        return Ok(batch
            .into_iter()
            .zip(slots)
            .map(|(l, slot)| (l, Some(slot), None))
            .collect());
    };
    // Rate-limited: one event per rate slot, so a slot is never held by nothing.
    let mut out = Vec::new();
    while out.len() < max {
        let slot = if shared {
            match store.slot_take(q, dest.concurrency, 1, lease).await?.pop() {
                Some(token) => Some(token),
                None => break,
            }
        } else {
            None
        };
        let asked = Instant::now();
        let rate = match store.rate_take(q, limit).await? {
            Ok(token) => token,
            Err(_wait) => {
                if let Some(token) = &slot {
                    store.slot_return(q, token).await?;
                }
                break;
            }
        };
        let mut one = store.take_due(q, 1, lease).await?;
        match one.pop() {
            Some(leased) => out.push((leased, slot, Some(asked))),
            None => {
                store.rate_return(q, &rate).await?;
                if let Some(token) = &slot {
                    store.slot_return(q, token).await?;
                }
                break;
            }
        }
    }
    Ok(out)
}

/// How long a rate slot may have been granted before its delivery is sent: half the
/// limiter's slack, the rest is for the request to reach the upstream.
const RATE_FRESH: Duration = Duration::from_millis(50);
/// The longest a leased delivery waits for a fresh rate slot.
const RATE_WAIT: Duration = Duration::from_millis(2500);
const _: () = assert!(RATE_WAIT.as_millis() < LEASE_MARGIN.as_millis());

/// Makes sure the delivery about to be sent holds a rate slot granted less than
/// [`RATE_FRESH`] ago. The limiter counts a delivery from when its slot was granted;
/// on a loaded machine the lease, the task and the connection can take longer than
/// the limiter's slack, and deliveries whose slots were granted in different windows
/// would then reach the upstream in the same one. A stale slot stays counted (it only
/// makes the limit stricter) and a fresh one is taken, waiting for it if need be — but
/// never past [`RATE_WAIT`], well within the event's lease (`upstream_timeout` +
/// [`LEASE_MARGIN`]), so no other worker takes the event meanwhile; past it the
/// delivery goes with the slot it has.
async fn fresh_rate_slot(
    state: &AppState,
    q: &QueueRef<'_>,
    limit: &crate::queue::RateLimit,
    mut asked: Instant,
) {
    let deadline = Instant::now() + RATE_WAIT;
    while asked.elapsed() > RATE_FRESH {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        match state.store().rate_take(q, limit).await {
            Ok(Ok(_token)) => asked = now,
            // Not granted: wait, then ask again.
            Ok(Err(wait)) => {
                tokio::time::sleep(wait.min(deadline.saturating_duration_since(now))).await;
            }
            // The store does not answer: the slot taken before stands.
            Err(_) => return,
        }
    }
}

/// Whether the attempt holds enough lease to be sent: its `upstream_timeout` and
/// [`SEND_MARGIN`], renewing it first when less is left (a wait for a rate slot, a
/// busy machine). An attempt never starts on a lease that could run out before it
/// ends.
async fn enough_lease(
    state: &AppState,
    q: &QueueRef<'_>,
    dest: &Destination,
    leased: &Leased,
    held: &Held,
) -> bool {
    let need = dest.upstream_timeout + SEND_MARGIN;
    if held.with(|h| h.until.saturating_duration_since(Instant::now())) >= need {
        return true;
    }
    let lease = dest.upstream_timeout + LEASE_MARGIN;
    let asked = Instant::now();
    match state.store().renew(q, leased, lease).await {
        Ok(true) => {
            held.with(|h| h.until = h.until.max(asked + lease));
            true
        }
        _ => false,
    }
}

/// Whether a (sync) route's destination has events waiting in its queue.
async fn has_waiting(
    state: &AppState,
    routing: &Routing,
    route: &Route,
    dest: &Destination,
) -> bool {
    let q = routing.queue(&route.name, &dest.name);
    matches!(state.store().depth(&q).await, Ok(d) if d.waiting > 0)
}

/// Refreshes each queue route's depth, dead count and oldest age (before `/metrics`
/// is rendered, so a scrape sees the store as it is).
pub(crate) async fn gauges(state: &AppState) {
    let routing = state.routing();
    let mut queues = Vec::new();
    for route in routing.routes.values() {
        if route.delivery == Delivery::Queue {
            queues.extend(
                route
                    .destinations
                    .iter()
                    .map(|d| (route.clone(), d.clone())),
            );
        }
    }
    for (route, dest) in queues {
        let q = routing.queue(&route.name, &dest.name);
        // A store that does not answer leaves the gauges as they were; the scrape goes on.
        let depth = tokio::time::timeout(Duration::from_secs(1), state.store().depth(&q)).await;
        if let Ok(Ok(depth)) = depth {
            let label = DestinationLabel {
                route: route.name.clone(),
                destination: dest.name.clone(),
            };
            let m = &state.metrics;
            m.queue_depth
                .get_or_create(&label)
                .set(i64::try_from(depth.waiting).unwrap_or(i64::MAX));
            m.queue_dead
                .get_or_create(&label)
                .set(i64::try_from(depth.dead).unwrap_or(i64::MAX));
            let age = depth
                .oldest_received_ms
                .map_or(0, |rx| now_ms().saturating_sub(rx) / 1000);
            m.queue_oldest_age
                .get_or_create(&label)
                .set(i64::try_from(age).unwrap_or(i64::MAX));
        }
    }
}

/// The result label of an attempt, and the upstream's `Retry-After`.
fn classify(result: &Result<UpstreamResponse, ForwardError>) -> (&'static str, Option<Duration>) {
    match result {
        Ok(r) if r.status.is_success() => ("delivered", None),
        Ok(r) => {
            let retry_after = r
                .headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let label = if r.status.is_client_error() {
                "http_4xx"
            } else {
                "http_5xx"
            };
            (label, retry_after)
        }
        Err(ForwardError::Timeout(_)) => ("timeout", None),
        Err(ForwardError::Connect(_)) => ("connect", None),
        Err(ForwardError::Broken(_)) => ("broken", None),
    }
}

/// Where an attempt is, shared with its lease keeper.
#[derive(Debug)]
struct Held(std::sync::Mutex<HeldState>);

#[derive(Debug, Clone, Copy)]
struct HeldState {
    /// When the lease runs out at the latest, on this process's monotonic clock (the
    /// store counts from after each request was sent: its end is no earlier).
    until: Instant,
    /// The request was sent.
    sent: bool,
    /// The request ended and its result is being recorded: nothing left to abandon.
    recording: bool,
}

impl Held {
    fn new(until: Instant) -> Self {
        Self(std::sync::Mutex::new(HeldState {
            until,
            sent: false,
            recording: false,
        }))
    }

    fn with<T>(&self, f: impl FnOnce(&mut HeldState) -> T) -> T {
        f(&mut self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// One attempt at one event, and its record in the store, under a lease kept for as
/// long as it runs.
#[allow(clippy::too_many_arguments)]
async fn attempt(
    state: &AppState,
    routing: &Routing,
    route: &Route,
    dest: &Destination,
    leased: Leased,
    rate_asked: Option<Instant>,
    slot: Option<&str>,
    held: &Held,
) {
    let q = routing.queue(&route.name, &dest.name);
    let lease = dest.upstream_timeout + LEASE_MARGIN;
    let lost = tokio::select! {
        // An attempt that ends as its lease is found lost has ended: it goes first.
        biased;
        () = send_and_record(state, routing, route, dest, leased.clone(), rate_asked, held) => None,
        stage = keep_lease(state, &q, &leased, slot, lease, held) => Some(stage),
    };
    if let Some(stage) = lost {
        lease_lost(state, route, dest, &leased, stage);
    }
}

/// Counts an attempt whose lease could not be kept, at this stage.
fn count_lease_lost(state: &AppState, route: &Route, dest: &Destination, stage: &str) {
    state
        .metrics
        .queue_lease_lost
        .get_or_create(&crate::telemetry::DestinationStage {
            route: route.name.clone(),
            destination: dest.name.clone(),
            stage: stage.to_owned(),
        })
        .inc();
}

/// Counts and logs an attempt abandoned because its lease could not be kept.
fn lease_lost(state: &AppState, route: &Route, dest: &Destination, leased: &Leased, stage: &str) {
    count_lease_lost(state, route, dest, stage);
    tracing::warn!(
        route = %route.name,
        destination = %dest.name,
        event_id = %leased.event.envelope.event_id,
        stage,
        "queue: the attempt's lease could not be kept (the store did not renew it in time, or the event was purged or taken over); the attempt was abandoned and the event is tried again after the lease (same Idempotency-Key)"
    );
}

/// Renews an attempt's lease (and its concurrency slot) every [`RENEW_EVERY`] until
/// the attempt ends. Returns the stage the attempt was in when the lease was lost
/// (the store said so, or no renewal succeeded before it ran out), unless its
/// result was already being recorded: the record then finds out by itself.
async fn keep_lease(
    state: &AppState,
    q: &QueueRef<'_>,
    leased: &Leased,
    slot: Option<&str>,
    lease: Duration,
    held: &Held,
) -> &'static str {
    let store = state.store();
    loop {
        let next = held.with(|h| {
            // Renew early enough that a slow store call still ends before the lease,
            // and never in a tight loop (a store that fails at once, a lease already
            // run out while the result is recorded).
            let now = Instant::now();
            (now + RENEW_EVERY)
                .min(h.until.checked_sub(RENEW_EVERY).unwrap_or(h.until))
                .max(now + RENEW_AT_LEAST)
        });
        tokio::time::sleep_until(next.into()).await;
        let asked = Instant::now();
        let renewed = store.renew(q, leased, lease).await;
        if let (Some(token), Ok(true)) = (slot, &renewed) {
            // Not renewed, the slot frees itself when its lease ends: the limit holds
            // again from then on; the attempt goes on.
            let _ = store.slot_renew(q, token, lease).await;
        }
        let stage = held.with(|h| {
            match &renewed {
                Ok(true) => h.until = asked + lease,
                Ok(false) if !h.recording => return Some(*h),
                Err(_) if !h.recording && Instant::now() >= h.until => return Some(*h),
                _ => {}
            }
            None
        });
        if let Some(h) = stage {
            return if h.sent { "sending" } else { "before_send" };
        }
        if matches!(renewed, Ok(false)) {
            // Lost while recording: the record says so; nothing to abandon.
            return std::future::pending().await;
        }
    }
}

/// Sends one attempt and records how it ended.
async fn send_and_record(
    state: &AppState,
    routing: &Routing,
    route: &Route,
    dest: &Destination,
    mut leased: Leased,
    rate_asked: Option<Instant>,
    held: &Held,
) {
    let env = &leased.event.envelope;
    let headers = env.header_map();
    let event_id = EventId::new(&env.event_id);
    let out = Outbound {
        method: Method::from_bytes(env.method.as_bytes()).unwrap_or(Method::POST),
        headers: &headers,
        body: leased.event.body.clone(),
        query: env.query.as_deref(),
        event_id: &event_id,
        peer: env
            .peer
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
        now: state.clock.now(),
    };
    let q = routing.queue(&route.name, &dest.name);
    if let (Some(limit), Some(asked)) = (&dest.rate_limit, rate_asked) {
        fresh_rate_slot(state, &q, limit, asked).await;
    }
    if !enough_lease(state, &q, dest, &leased, held).await {
        lease_lost(state, route, dest, &leased, "before_send");
        return;
    }
    let started_ms = now_ms();
    let t = Instant::now();
    held.with(|h| h.sent = true);
    let result = state.forwarder.send(route, dest, out).await;
    held.with(|h| h.recording = true);
    let elapsed = t.elapsed();
    let route_metrics = state.metrics.route(&route.name);
    state
        .metrics
        .upstream(&route_metrics, elapsed.as_secs_f64());
    let (label, retry_after) = classify(&result);
    // On a rate-limited destination, a 429 or 503 with Retry-After pauses every
    // delivery to it, not only this event's (on every replica, on Redis); other
    // destinations go on.
    if let (Some(wait), Ok(r), Some(_)) = (retry_after, &result, &dest.rate_limit)
        && matches!(r.status.as_u16(), 429 | 503)
        && let Err(e) = state
            .store()
            .pause(&q, wait.min(dest.retry.max_delay))
            .await
    {
        tracing::warn!(route = %route.name, destination = %dest.name, error = %e, "queue: cannot record the upstream's Retry-After for the destination");
    }
    let attempt = Attempt {
        at_ms: started_ms,
        status: result.as_ref().ok().map(|r| r.status.as_u16()),
        result: label.to_owned(),
        error: result.as_ref().err().map(ToString::to_string),
        duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    };
    let number = leased.status.attempts + 1;
    let end = if label == "delivered" {
        Finish::Delivered(attempt)
    } else {
        let jitter: f64 = rand::rng().random();
        match dest.retry.after_failure(
            &leased.status,
            env.received_at_ms,
            now_ms(),
            retry_after,
            jitter,
        ) {
            Ok(at) => Finish::Retry(attempt, at),
            Err(why) => Finish::Dead(attempt, why),
        }
    };
    state
        .metrics
        .delivery_attempts
        .get_or_create(&DestinationResult {
            route: route.name.clone(),
            destination: dest.name.clone(),
            result: label.to_owned(),
        })
        .inc();
    let (Finish::Delivered(recorded) | Finish::Retry(recorded, _) | Finish::Dead(recorded, _)) =
        &end;
    let (status, error) = (recorded.status, recorded.error.as_deref());
    match &end {
        Finish::Delivered(_) => tracing::info!(
            route = %route.name,
            destination = %dest.name,
            event_id = %env.event_id,
            attempt = number,
            result = label,
            status,
            ms = elapsed.as_millis() as u64,
            "queue: delivered"
        ),
        Finish::Retry(_, at) => tracing::warn!(
            route = %route.name,
            destination = %dest.name,
            event_id = %env.event_id,
            attempt = number,
            result = label,
            status,
            error,
            retry_in_ms = at.saturating_sub(now_ms()),
            "queue: attempt failed; will retry"
        ),
        Finish::Dead(_, why) => tracing::error!(
            route = %route.name,
            destination = %dest.name,
            event_id = %env.event_id,
            attempt = number,
            result = label,
            status,
            error,
            reason = %why,
            "queue: attempt failed; the event is dead (hookgate events retry to deliver it again)"
        ),
    }
    let outcome = match &end {
        Finish::Delivered(_) => Some("delivered"),
        Finish::Dead(..) => Some("dead"),
        Finish::Retry(..) => None,
    };
    // Under `on_dead = "skip"` a dead event gives its key's line to the next event.
    if matches!(end, Finish::Dead(..)) && dest.on_dead == OnDead::Skip {
        leased.status.left_line = leased.status.order_key.take();
    }
    // A failed attempt is retried on its schedule anyway: recording it may give up with
    // the lease. A delivery is worth recording for longer (a store that is down for a
    // while): until it is, the event may be taken again once its lease runs out and
    // delivered twice; a late record under a lost lease changes nothing.
    let deadline = Instant::now()
        + if matches!(end, Finish::Delivered(_)) {
            RECORD_DELIVERY_FOR
        } else {
            LEASE_MARGIN
        };
    let mut delay = Duration::from_millis(50);
    loop {
        match state
            .store()
            .finish(&q, &leased, &end, routing.store_cfg.dedup_ttl)
            .await
        {
            Ok(true) => {
                if let Some(outcome) = outcome {
                    state
                        .metrics
                        .queue_deliveries
                        .get_or_create(&DestinationOutcome {
                            route: route.name.clone(),
                            destination: dest.name.clone(),
                            outcome: outcome.to_owned(),
                        })
                        .inc();
                }
                return;
            }
            Ok(false) => {
                count_lease_lost(state, route, dest, "recording");
                tracing::warn!(route = %route.name, event_id = %env.event_id, "queue: the event's lease was lost (purged, or taken by another worker); this attempt's result is not recorded");
                return;
            }
            Err(e) if Instant::now() + delay < deadline => {
                tracing::warn!(route = %route.name, event_id = %env.event_id, error = %e, "queue: recording the attempt failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::error!(route = %route.name, event_id = %env.event_id, error = %e, "queue: gave up recording the attempt; the event is tried again when its lease runs out (same Idempotency-Key)");
                return;
            }
        }
    }
}
