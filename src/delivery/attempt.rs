//! One attempt at one event, under a lease kept while it runs:
//!
//! ```text
//! send:   a rate_limit slot (waited for) → enough lease left? → the destination
//! decide: delivered → Delivered; else Retry at backoff (or the destination's
//!         Retry-After), or Dead once max_attempts or max_age is spent (pure: `decide`)
//! record: finish in the store (retried for the lease's length if the store fails)
//! ```

use std::time::{Duration, Instant};

use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use super::destination::{Answer, Destination as Kind};
use super::{LEASE_MARGIN, WorkerContext};
use crate::config::{Destination, Route};
use crate::observe::metrics::{DestinationOutcome, DestinationResult};
use crate::observe::traces::Span;
use crate::outcome::LeftQueue;
use crate::queue::{OnDead, RateLimit, RetryPolicy, now_ms};
use crate::retry::{Backoff, retry_until};
use crate::state::Routing;
use crate::store::{
    Attempt, AttemptResult, Finish, Leased, Pacing as _, QueueRef, QueueStore as _, Status,
    StoredEvent, StoredHeader,
};
use opentelemetry::trace::SpanKind;

/// How long a delivered attempt's result is retried when the store fails.
const RECORD_DELIVERY_FOR: Duration = Duration::from_secs(300);
/// Waits between tries to record an attempt's result in a store that fails.
const RECORD_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
/// Waits between asks for a rate slot while the store does not answer.
const RATE_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
/// How often an attempt in progress renews its lease (and its concurrency slot).
/// Well under the Redis store's reclaim idle time, so a renewed entry is never even
/// looked at by another taker.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// The shortest wait between two renewals of one lease.
const RENEW_AT_LEAST: Duration = Duration::from_millis(100);
/// The lease an attempt must have left, beyond its `upstream_timeout`, to be sent.
const SEND_MARGIN: Duration = Duration::from_secs(1);

/// The destination an attempt delivers to, with what it needs of the gateway.
pub(super) struct Target<'a> {
    ctx: &'a WorkerContext,
    routing: &'a Routing,
    route: &'a Route,
    dest: &'a Destination,
    pub(super) q: QueueRef<'a>,
    /// An open breaker's probe: a failure costs the event no attempt, a delivery
    /// closes the breaker.
    probe: bool,
}

impl<'a> Target<'a> {
    pub(super) fn new(
        ctx: &'a WorkerContext,
        routing: &'a Routing,
        route: &'a Route,
        dest: &'a Destination,
        probe: bool,
    ) -> Self {
        Self {
            ctx,
            routing,
            route,
            dest,
            q: routing.queue(&route.name, &dest.name),
            probe,
        }
    }

    /// The lease an attempt takes and renews: its `upstream_timeout` and
    /// [`LEASE_MARGIN`].
    fn lease(&self) -> Duration {
        self.dest.upstream_timeout + LEASE_MARGIN
    }

    /// Counts an attempt whose lease could not be kept, at this stage.
    fn count_lease_lost(&self, stage: &str) {
        self.ctx
            .metrics
            .queue_lease_lost
            .get_or_create(&crate::observe::metrics::DestinationStage {
                route: self.route.name.clone(),
                destination: self.dest.name.clone(),
                stage: stage.to_owned(),
            })
            .inc();
    }

    /// Counts and logs an attempt abandoned because its lease could not be kept.
    fn lease_lost(&self, leased: &Leased, stage: &str) {
        self.count_lease_lost(stage);
        tracing::warn!(
            route = %self.route.name,
            destination = %self.dest.name,
            event_id = %leased.event.envelope.event_id,
            stage,
            "queue: the attempt's lease could not be kept (the store did not renew it in time, or the event was purged or taken over); the attempt was abandoned and the event is tried again after the lease (same Idempotency-Key)"
        );
    }
}

/// Where an attempt is, shared with its lease keeper.
#[derive(Debug)]
pub(super) struct Held(std::sync::Mutex<HeldState>);

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
    pub(super) fn new(until: Instant) -> Self {
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
pub(super) async fn attempt(
    to: &Target<'_>,
    leased: Leased,
    slot: Option<&str>,
    held: &Held,
    stop: &CancellationToken,
) {
    let lost = tokio::select! {
        // An attempt that ends as its lease is found lost has ended: it goes first.
        biased;
        () = send_decide_record(to, leased.clone(), held, stop) => None,
        stage = keep_lease(to, &leased, slot, held) => Some(stage),
    };
    if let Some(stage) = lost {
        to.lease_lost(&leased, stage);
    }
}

/// Renews an attempt's lease (and its concurrency slot) every [`RENEW_EVERY`] until
/// the attempt ends. Returns the stage the attempt was in when the lease was lost
/// (the store said so, or no renewal succeeded before it ran out), unless its
/// result was already being recorded: the record then finds out by itself.
async fn keep_lease(
    to: &Target<'_>,
    leased: &Leased,
    slot: Option<&str>,
    held: &Held,
) -> &'static str {
    let store = &to.ctx.store;
    let lease = to.lease();
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
        let renewed = store.renew(&to.q, leased, lease).await;
        if let (Some(token), Ok(true)) = (slot, &renewed) {
            // Not renewed, the slot frees itself when its lease ends: the limit holds
            // again from then on; the attempt goes on.
            let _ = store.slot_renew(&to.q, token, lease).await;
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

/// The three stages of an attempt: send it, decide what follows, record that.
async fn send_decide_record(
    to: &Target<'_>,
    mut leased: Leased,
    held: &Held,
    stop: &CancellationToken,
) {
    let span = to.ctx.traces.attempt(&leased.event.envelope);
    if span.is_live() {
        span.set_str("hookgate.route", &to.route.name);
        span.set_str("hookgate.destination", &to.dest.name);
        span.set_str("hookgate.event_id", &leased.event.envelope.event_id);
        span.set_i64("hookgate.attempt", i64::from(leased.status.attempts) + 1);
    }
    let Some(sent) = send(to, &leased, held, stop, &span).await else {
        span.fail("not sent: the lease was lost or the gateway stopped");
        return;
    };
    let now = Now {
        ms: now_ms(),
        jitter: rand::rng().random(),
    };
    let received_at_ms = leased.event.envelope.received_at_ms;
    // The destination's pauses, for max_age (as this process last read them).
    let control = to
        .ctx
        .controls
        .get(&to.ctx.store, &to.q, now.ms)
        .await
        .unwrap_or_default();
    let held = |from, until| control.held_ms(from, until);
    let end = match decide(
        sent,
        &leased.status,
        received_at_ms,
        &to.dest.retry,
        now,
        held,
    ) {
        Finish::Retry(a, _) | Finish::Dead(a, _) if to.probe => Finish::Probe(a, now.ms),
        end => end,
    };
    report(to, &leased, &end);
    // Under `on_dead = "skip"` a dead event gives its key's line to the next event.
    if matches!(end, Finish::Dead(..)) && to.dest.on_dead == OnDead::Skip {
        leased.status.left_line = leased.status.order_key.take();
    }
    if span.is_live() {
        attempt_attributes(&span, &end);
    }
    let settle = span.child("settle");
    record(to, &leased, &end).await;
    drop(settle);
    span.end();
    let delivered = matches!(end, Finish::Delivered(_));
    to.ctx
        .controls
        .note(&to.q, delivered, end.attempt().result.as_str(), now_ms());
    breaker(to, &end, control.breaker_open(now.ms)).await;
}

/// The breaker's part after an attempt: `failures` consecutive failures open it (the
/// destination pauses itself); a delivery (the probe's, or an attempt's that was
/// already running) closes it.
async fn breaker(to: &Target<'_>, end: &Finish, was_open: bool) {
    let Some(b) = to.dest.breaker else {
        return;
    };
    let delivered = matches!(end, Finish::Delivered(_));
    let (route, destination) = (&to.route.name, &to.dest.name);
    let now = now_ms();
    let store = &to.ctx.store;
    if delivered && (to.probe || was_open) {
        to.ctx.controls.reset(&to.q);
        match super::control::close(store, &to.q, now).await {
            Ok(true) => {
                to.ctx.controls.forget(&to.q);
                to.ctx.wake.notify_one();
                tracing::info!(route = %route, destination = %destination, "queue: the breaker closed: an attempt was delivered; deliveries resume");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(route = %route, destination = %destination, error = %e, "queue: cannot close the breaker; the next probe tries again")
            }
        }
        return;
    }
    if to.probe || was_open {
        return;
    }
    let failures = to.ctx.controls.count(&to.q, delivered);
    if failures < b.failures {
        return;
    }
    match super::control::trip(store, &to.q, b.probe, now).await {
        Ok(opened) => {
            to.ctx.controls.reset(&to.q);
            to.ctx.controls.forget(&to.q);
            if opened {
                tracing::error!(route = %route, destination = %destination, failures, probe = ?b.probe, "queue: the breaker opened after consecutive failed attempts: the destination is paused (events are kept, none is tried but one probe per interval; a delivered probe resumes it; hookgate events resume resumes it now)");
            }
        }
        Err(e) => {
            tracing::warn!(route = %route, destination = %destination, error = %e, "queue: cannot open the breaker; deliveries go on")
        }
    }
}

/// What a sent attempt found: the attempt as it is recorded, and the upstream's
/// `Retry-After`.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    attempt: Attempt,
    retry_after: Option<Duration>,
}

/// Sends the attempt, once the destination's `rate_limit` grants a slot and the lease
/// has enough left for it. `None` when it was not sent (the lease is lost, or the
/// gateway stops while it waits for a slot).
async fn send(
    to: &Target<'_>,
    leased: &Leased,
    held: &Held,
    stop: &CancellationToken,
    attempt: &Span,
) -> Option<Sent> {
    let rate = match &to.dest.rate_limit {
        Some(limit) => {
            let Some(slot) = rate_slot(to, limit, stop).await else {
                // The gateway stops before a slot came: the event is due again at
                // once (another replica, or this one restarted, takes it), not after
                // the lease.
                let _ = to.ctx.store.give_back(&to.q, leased).await;
                return None;
            };
            Some(slot)
        }
        None => None,
    };
    if !enough_lease(to, leased, held).await {
        if let Some(token) = &rate {
            // Not spent: the limit gets it back.
            let _ = to.ctx.store.rate_return(&to.q, token).await;
        }
        to.lease_lost(leased, "before_send");
        return None;
    }
    let via = super::destination::Via {
        forwarder: &to.ctx.forwarder,
        links: &to.ctx.links,
        clock: to.ctx.clock,
        dedup_ttl: to.routing.store_cfg.dedup_ttl,
    };
    let destination = Kind::of(via, to.route, to.dest);
    let started_ms = now_ms();
    let t = Instant::now();
    held.with(|h| h.sent = true);
    let span = attempt.child_of_kind("forward", SpanKind::Client);
    // Telemetry on: the handler's spans continue this attempt's forward.
    let traced = span
        .traceparent()
        .map(|tp| with_traceparent(&leased.event, &tp));
    let answer = destination
        .deliver(traced.as_ref().unwrap_or(&leased.event))
        .await;
    held.with(|h| h.recording = true);
    if span.is_live() {
        span.set_str("hookgate.destination", &to.dest.name);
        if let Some(status) = answer.status {
            span.set_i64("http.response.status_code", i64::from(status));
        }
        if answer.result != AttemptResult::Delivered {
            span.fail(answer.error.as_deref().unwrap_or(answer.result.as_str()));
        }
    }
    drop(span);
    let elapsed = t.elapsed();
    let route_metrics = to.ctx.metrics.route(&to.route.name);
    to.ctx
        .metrics
        .upstream(&route_metrics, elapsed.as_secs_f64());
    if let Some(wait) = answer.slow_down {
        pause_if_asked(to, wait).await;
    }
    let Answer {
        result,
        status,
        error,
        retry_after,
        slow_down: _,
        receipt,
    } = answer;
    let kind = match to.dest.target.kind() {
        "http" => None,
        other => Some(other.to_owned()),
    };
    Some(Sent {
        attempt: Attempt {
            at_ms: started_ms,
            status,
            result,
            error,
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            kind,
            receipt,
        },
        retry_after,
    })
}

/// `event` carrying `traceparent` in place of the one it was stored with (telemetry
/// on: the destination's handler continues the attempt's trace).
fn with_traceparent(event: &StoredEvent, traceparent: &str) -> StoredEvent {
    let mut event = event.clone();
    let headers = &mut event.envelope.headers;
    headers.retain(|h| !h.name.eq_ignore_ascii_case("traceparent"));
    headers.push(StoredHeader {
        name: "traceparent".to_owned(),
        text: Some(traceparent.to_owned()),
        base64: None,
    });
    event
}

/// An attempt span's attributes: how it ended, and what follows.
fn attempt_attributes(span: &Span, end: &Finish) {
    let attempt = end.attempt();
    span.set_str("hookgate.result", attempt.result.as_str());
    if let Some(status) = attempt.status {
        span.set_i64("http.response.status_code", i64::from(status));
    }
    let next = match end {
        Finish::Delivered(_) => "delivered",
        Finish::Retry(..) => "retry",
        Finish::Dead(..) => "dead",
        Finish::Probe(..) => "probe",
    };
    span.set_str("hookgate.next", next);
    if !matches!(end, Finish::Delivered(_)) {
        span.fail(attempt.result.as_str());
    }
}

/// How long a rate slot's grant may take to come back: half the limiter's slack
/// ([`RateLimit::SLACK`]), the rest is for the request to reach the upstream. The
/// limiter counts a delivery from when its slot is granted; on a loaded machine the
/// store's answer can take longer than that, and deliveries granted in different
/// windows would then reach the upstream in the same one. A late grant stays counted
/// (it only makes the limit stricter) and a fresh one is asked for, for up to the
/// limit's window; past it the delivery goes with the slot it has.
const RATE_FRESH: Duration = Duration::from_millis(50);

/// A slot of the destination's `rate_limit`, taken just before the request is sent,
/// waiting for it as long as the limit (or a pause the upstream asked for) says: the
/// lease is kept meanwhile ([`keep_lease`]), so no other worker takes the event, and
/// the attempt ends with it if it is lost. A store that does not answer is asked
/// again. `None` when the gateway stops first (the caller gives the lease back).
async fn rate_slot(to: &Target<'_>, limit: &RateLimit, stop: &CancellationToken) -> Option<String> {
    let mut backoff = RATE_BACKOFF;
    let mut late_since: Option<Instant> = None;
    loop {
        let asked = Instant::now();
        let wait = match to.ctx.store.rate_take(&to.q, limit).await {
            Ok(Ok(token)) if asked.elapsed() <= RATE_FRESH => return Some(token),
            Ok(Ok(token)) => {
                if late_since.get_or_insert(asked).elapsed() >= limit.window {
                    return Some(token);
                }
                continue;
            }
            Ok(Err(wait)) => {
                backoff = RATE_BACKOFF;
                wait
            }
            Err(e) => {
                tracing::debug!(route = %to.route.name, destination = %to.dest.name, error = %e, "queue: cannot take a rate slot; asking again");
                backoff.next_wait()
            }
        };
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Whether the attempt holds enough lease to be sent: its `upstream_timeout` and
/// [`SEND_MARGIN`], renewing it first when less is left (a busy machine, a store
/// slow to renew). An attempt never starts on a lease that could run out before it
/// ends.
async fn enough_lease(to: &Target<'_>, leased: &Leased, held: &Held) -> bool {
    let need = to.dest.upstream_timeout + SEND_MARGIN;
    if held.with(|h| h.until.saturating_duration_since(Instant::now())) >= need {
        return true;
    }
    let lease = to.lease();
    let asked = Instant::now();
    match to.ctx.store.renew(&to.q, leased, lease).await {
        Ok(true) => {
            held.with(|h| h.until = h.until.max(asked + lease));
            true
        }
        _ => false,
    }
}

/// On a rate-limited destination, a destination that asks to slow down (over HTTP, a
/// 429 or 503 with `Retry-After`) pauses every delivery to it, not only this event's
/// (on every replica, on Redis); other destinations go on.
async fn pause_if_asked(to: &Target<'_>, wait: Duration) {
    if to.dest.rate_limit.is_none() {
        return;
    }
    let wait = wait.min(to.dest.retry.max_delay);
    if let Err(e) = to.ctx.store.pause(&to.q, wait).await {
        tracing::warn!(route = %to.route.name, destination = %to.dest.name, error = %e, "queue: cannot record the upstream's Retry-After for the destination");
    }
}

/// What a decision reads of the world: the time, and a random draw for the backoff's
/// jitter.
#[derive(Debug, Clone, Copy)]
struct Now {
    /// Unix milliseconds.
    ms: u64,
    /// In `[0, 1)`.
    jitter: f64,
}

/// What follows an attempt: a 2xx is delivered; anything else is retried on the
/// destination's schedule (at the upstream's `Retry-After` when it sent one), or dead
/// once `max_attempts` or `max_age` is spent. `status` is the event's before this
/// attempt; `received_at_ms`, when the gateway accepted it.
fn decide(
    sent: Sent,
    status: &Status,
    received_at_ms: u64,
    policy: &RetryPolicy,
    now: Now,
    held: impl Fn(u64, u64) -> u64,
) -> Finish {
    let Sent {
        attempt,
        retry_after,
    } = sent;
    if attempt.result == AttemptResult::Delivered {
        return Finish::Delivered(attempt);
    }
    match policy.after_failure(
        status,
        received_at_ms,
        now.ms,
        retry_after,
        now.jitter,
        held,
    ) {
        Ok(at) => Finish::Retry(attempt, at),
        Err(why) => Finish::Dead(attempt, why),
    }
}

/// Counts the attempt and logs how it ended.
fn report(to: &Target<'_>, leased: &Leased, end: &Finish) {
    let attempt = end.attempt();
    to.ctx
        .metrics
        .delivery_attempts
        .get_or_create(&DestinationResult {
            route: to.route.name.clone(),
            destination: to.dest.name.clone(),
            result: attempt.result,
        })
        .inc();
    let (route, destination) = (&to.route.name, &to.dest.name);
    let event_id = &leased.event.envelope.event_id;
    let number = leased.status.attempts + 1;
    let (result, status, error) = (
        attempt.result.as_str(),
        attempt.status,
        attempt.error.as_deref(),
    );
    match end {
        Finish::Delivered(_) => tracing::info!(
            route = %route,
            destination = %destination,
            event_id = %event_id,
            attempt = number,
            result,
            status,
            ms = attempt.duration_ms,
            "queue: delivered"
        ),
        Finish::Retry(_, at) => tracing::warn!(
            route = %route,
            destination = %destination,
            event_id = %event_id,
            attempt = number,
            result,
            status,
            error,
            retry_in_ms = at.saturating_sub(now_ms()),
            "queue: attempt failed; will retry"
        ),
        Finish::Probe(..) => tracing::warn!(
            route = %route,
            destination = %destination,
            event_id = %event_id,
            result,
            status,
            error,
            "queue: the breaker's probe failed; the destination stays paused (the event's attempts are not counted)"
        ),
        Finish::Dead(_, why) => tracing::error!(
            route = %route,
            destination = %destination,
            event_id = %event_id,
            attempt = number,
            result,
            status,
            error,
            reason = %why,
            "queue: attempt failed; the event is dead (hookgate events retry to deliver it again)"
        ),
    }
}

/// Records how the attempt ended. A failed attempt is retried on its schedule anyway:
/// recording it may give up with the lease ([`LEASE_MARGIN`]). A delivery is worth
/// recording for longer ([`RECORD_DELIVERY_FOR`], a store that is down for a while):
/// until it is, the event may be taken again once its lease runs out and delivered
/// twice; a late record under a lost lease changes nothing.
async fn record(to: &Target<'_>, leased: &Leased, end: &Finish) {
    let delivered = matches!(end, Finish::Delivered(_));
    let deadline = Instant::now()
        + if delivered {
            RECORD_DELIVERY_FOR
        } else {
            LEASE_MARGIN
        };
    let (route, event_id) = (&to.route.name, &leased.event.envelope.event_id);
    let dedup_ttl = to.routing.store_cfg.dedup_ttl;
    let recorded = retry_until(deadline, RECORD_BACKOFF, || async {
        let finished = to.ctx.store.finish(&to.q, leased, end, dedup_ttl).await;
        if let Err(e) = &finished {
            tracing::warn!(route = %route, event_id = %event_id, error = %e, "queue: recording the attempt failed");
        }
        finished
    })
    .await;
    match recorded {
        Ok(true) => {
            let outcome = match end {
                Finish::Delivered(_) => LeftQueue::Delivered,
                Finish::Dead(..) => LeftQueue::Dead,
                Finish::Retry(..) | Finish::Probe(..) => return,
            };
            to.ctx
                .metrics
                .queue_deliveries
                .get_or_create(&DestinationOutcome {
                    route: route.clone(),
                    destination: to.dest.name.clone(),
                    outcome,
                })
                .inc();
        }
        Ok(false) => {
            to.count_lease_lost("recording");
            tracing::warn!(route = %route, event_id = %event_id, "queue: the event's lease was lost (purged, or taken by another worker); this attempt's result is not recorded");
        }
        Err(_) => {
            tracing::error!(route = %route, event_id = %event_id, "queue: gave up recording the attempt; the event is tried again when its lease runs out (same Idempotency-Key)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event received at 0, decided at 100 s.
    const NOW: Now = Now {
        ms: 100_000,
        jitter: 1.0,
    };

    fn sent(result: AttemptResult, status: Option<u16>, retry_after: Option<u64>) -> Sent {
        Sent {
            attempt: Attempt {
                at_ms: NOW.ms - 10,
                status,
                result,
                error: None,
                duration_ms: 10,
                kind: None,
                receipt: None,
            },
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    fn after(attempts: u32) -> Status {
        let mut s = Status::queued(0);
        s.attempts = attempts;
        s
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_age: Duration::from_secs(3600),
        }
    }

    fn unpaused(_: u64, _: u64) -> u64 {
        0
    }

    #[test]
    fn a_2xx_is_delivered_even_on_the_last_attempt_past_max_age() {
        let ok = sent(AttemptResult::Delivered, Some(200), None);
        let end = decide(
            ok.clone(),
            &after(4),
            0,
            &policy(),
            Now {
                ms: u64::MAX,
                ..NOW
            },
            unpaused,
        );
        assert_eq!(end, Finish::Delivered(ok.attempt));
    }

    #[test]
    fn every_failure_with_attempts_left_is_retried_after_the_doubling_backoff() {
        for (result, status) in [
            (AttemptResult::Http5xx, Some(503)),
            (AttemptResult::Http4xx, Some(404)),
            (AttemptResult::Timeout, None),
            (AttemptResult::Connect, None),
            (AttemptResult::Broken, None),
        ] {
            let failed = sent(result, status, None);
            let first = decide(failed.clone(), &after(0), 0, &policy(), NOW, unpaused);
            assert_eq!(first, Finish::Retry(failed.attempt.clone(), NOW.ms + 1_000));
            // The third failure waits 4 s (jitter at its top: the whole delay).
            let third = decide(failed.clone(), &after(2), 0, &policy(), NOW, unpaused);
            assert_eq!(third, Finish::Retry(failed.attempt, NOW.ms + 4_000));
        }
        // At the bottom of the jitter, half the delay.
        let low = Now { jitter: 0.0, ..NOW };
        let failed = sent(AttemptResult::Http5xx, Some(500), None);
        let end = decide(failed.clone(), &after(2), 0, &policy(), low, unpaused);
        assert_eq!(end, Finish::Retry(failed.attempt, NOW.ms + 2_000));
    }

    #[test]
    fn the_upstreams_retry_after_sets_the_next_try_within_initial_and_max_delay() {
        let asked = |secs| {
            let s = sent(AttemptResult::Http5xx, Some(429), Some(secs));
            match decide(s, &after(0), 0, &policy(), NOW, unpaused) {
                Finish::Retry(_, at) => at - NOW.ms,
                other => panic!("retried, not {other:?}"),
            }
        };
        assert_eq!(asked(7), 7_000);
        assert_eq!(asked(0), 1_000, "at least initial");
        assert_eq!(asked(600), 60_000, "at most max_delay");
    }

    #[test]
    fn the_last_attempt_or_max_age_makes_the_event_dead_with_its_reason() {
        let failed = sent(AttemptResult::Http5xx, Some(500), None);
        let end = decide(failed.clone(), &after(4), 0, &policy(), NOW, unpaused);
        assert_eq!(
            end,
            Finish::Dead(
                failed.attempt.clone(),
                "5 attempts failed (max_attempts)".into()
            )
        );
        // Received an hour ago: the next try would be past max_age.
        let late = Now {
            ms: 3_600_000,
            ..NOW
        };
        match decide(failed.clone(), &after(0), 0, &policy(), late, unpaused) {
            Finish::Dead(_, why) => assert!(why.contains("max_age"), "{why}"),
            other => panic!("dead, not {other:?}"),
        }
        // Unless the destination was paused for most of that hour.
        assert!(matches!(
            decide(failed, &after(0), 0, &policy(), late, |_, _| 3_000_000),
            Finish::Retry(..)
        ));
        // An operator's retry restarts max_age.
        let mut requeued = after(0);
        requeued.requeue(3_000_000);
        let s = sent(AttemptResult::Timeout, None, None);
        assert!(matches!(
            decide(s, &requeued, 0, &policy(), late, unpaused),
            Finish::Retry(..)
        ));
    }
}
