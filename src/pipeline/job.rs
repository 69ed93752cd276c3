//! The job: the verified delivery through the store and the upstream. Claim →
//! forward → settle on a sync route, enqueue on a queue route; `on_error` decided in
//! one place.
//!
//! Its two steps that reach past the gateway, [`forward`] and [`enqueue`], are
//! functions over plain parts (an [`Event`], the route, a destination, the store or
//! the forwarder): the admin listener's replay sends a recorded delivery again with
//! the same two.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method};
use opentelemetry::trace::SpanKind;
use tracing::Instrument as _;

use super::Ctx;
use super::PipelineContext;
use super::respond::{Answer, Outcome, UpstreamFailure};
use super::run_to_completion::RunToCompletion;
use super::verify::Verified;
use crate::config::{Delivery, Destination, OnError, Route};
use crate::delivery::destination::Via;
use crate::forward::{ForwardError, Outbound, UpstreamResponse};
use crate::observe::RequestRecord;
use crate::observe::traces::Span;
use crate::provider::EventId;
use crate::retry::{Backoff, retry_until};
use crate::state::Routing;
use crate::store::{
    Claim, DedupKey, DedupStore, Enqueued, Envelope, Fanout, QueueStore as _, Settled, Store,
    StoreError, StoredEvent, Token,
};

/// One event in plain parts, as [`forward`] sends it and [`enqueue`] stores it: the
/// pipeline's verified delivery, or the request a replay rebuilt from the delivery
/// log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event<'a> {
    pub(crate) id: &'a EventId,
    /// Its type, as the queue stores it (a forward does not read it).
    pub(crate) event_type: Option<&'a str>,
    pub(crate) method: &'a Method,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a Bytes,
    pub(crate) query: Option<&'a str>,
    /// The `traceparent` of the delivery span that accepted it, which a queue keeps
    /// for its attempts' spans (telemetry on; `None` otherwise).
    pub(crate) trace: Option<&'a str>,
}

/// Sends `event` to `destination`, one of `route`'s: over the pooled client to an
/// HTTP upstream, from `peer` (`X-Forwarded-For`), with `forward_secret` signatures
/// dated `now`; into its server for the other kinds, answered as an upstream would
/// (200 with what the server said, or the forward's error).
pub(crate) async fn forward(
    via: Via<'_>,
    route: &Route,
    destination: &Destination,
    event: &Event<'_>,
    peer: IpAddr,
    now: u64,
) -> Result<UpstreamResponse, ForwardError> {
    if destination.upstream().is_none() {
        let stored = stored(event, String::new(), peer.to_string());
        return crate::delivery::destination::Destination::of(via, route, destination)
            .deliver(&stored)
            .await
            .relayed(destination.target.kind());
    }
    let out = Outbound {
        method: event.method.clone(),
        headers: event.headers,
        body: event.body.clone(),
        query: event.query,
        event_id: event.id,
        peer,
        now,
    };
    via.forwarder.send(route, destination, out).await
}

/// `event` as a queue stores it (and a destination of another kind takes it):
/// received now from `peer`, with its body's `fingerprint`.
fn stored(event: &Event<'_>, fingerprint: String, peer: String) -> StoredEvent {
    StoredEvent {
        envelope: Envelope {
            event_id: event.id.as_str().to_owned(),
            event_type: event.event_type.map(str::to_owned),
            fingerprint,
            method: event.method.as_str().to_owned(),
            headers: Envelope::store_headers(event.headers),
            query: event.query.map(str::to_owned),
            peer,
            received_at_ms: crate::time::now_ms(),
            trace: event.trace.map(str::to_owned),
        },
        body: event.body.clone(),
    }
}

/// Stores `event` with its claim in one durable step, for the destinations `fanout`
/// names: received now from `peer`, with its body's `fingerprint` (what a copy is
/// checked against), its record kept `dedup_ttl` once delivered.
pub(crate) async fn enqueue(
    store: &Store,
    fanout: &Fanout<'_>,
    event: &Event<'_>,
    fingerprint: String,
    peer: String,
    dedup_ttl: Duration,
) -> Result<Enqueued, StoreError> {
    store
        .enqueue_to(fanout, &stored(event, fingerprint, peer), dedup_ttl)
        .await
}

/// `event`'s key in `destination`'s per-key order (`order_by`), if it has one. `read`:
/// its JSON part when the verifying walk over the body already read it.
pub(crate) fn order_key(
    destination: &Destination,
    event: &Event<'_>,
    read: Option<Option<&str>>,
) -> Option<String> {
    let order_by = destination.order_by.as_ref()?;
    let raw = order_by.raw_read(event.headers, event.body, read)?;
    Some(crate::queue::order_key(&raw))
}

/// The job: the verified delivery through the store and the upstream (claim and
/// forward, or enqueue), and the route's fixed reply in place of the answer.
pub(super) async fn job(
    state: &Arc<PipelineContext>,
    ctx: Ctx,
    verified: Verified,
    rec: &mut RequestRecord,
    span: Span,
) -> Answer {
    // From the claim on, the work must run to the end even if the provider hangs up
    // (hyper then drops this future): it runs inline, tracked so shutdown waits for
    // it, and moves to a task of its own only if it is dropped unfinished.
    let fixed = ctx.route.verifier.fixed_reply().cloned();
    let unsigned_id = verified.delivery.unsigned_id().map(ToString::to_string);
    let job = Job {
        state: state.clone(),
        ctx,
        verified,
        span,
    };
    let (answer, detail) =
        RunToCompletion::new(state.settles.track_future(job.run().in_current_span())).await;
    // The provider's own ID, when unsigned, is only named in the log: the key is the
    // signed bytes' digest.
    rec.detail = detail.or_else(|| {
        unsigned_id
            .as_ref()
            .map(|id| format!("unsigned provider id {id}"))
    });
    rec.provider_delivery_id = unsigned_id;
    match (fixed, answer.outcome()) {
        (
            Some(reply),
            outcome @ (Outcome::Forwarded
            | Outcome::ForwardedUnclaimed
            | Outcome::Duplicate
            | Outcome::Queued
            | Outcome::Filtered),
        ) => Answer::Fixed { reply, outcome },
        _ => answer,
    }
}

/// A verified delivery on its way through the store and the upstream.
struct Job {
    state: Arc<PipelineContext>,
    ctx: Ctx,
    verified: Verified,
    /// The delivery's span, the parent of each stage's (telemetry off: nothing).
    span: Span,
}

impl Job {
    async fn run(self) -> (Answer, Option<String>) {
        let st = &self.state;
        let cfg = &self.ctx.routing.store_cfg;
        if let Some(tx) = self.verified.delivery.transmission_id()
            && let Some(refused) = self.transmission_guard(tx.as_str()).await
        {
            return refused;
        }
        if self
            .verified
            .destinations
            .as_ref()
            .is_some_and(Vec::is_empty)
        {
            return self.filter_out().await;
        }
        if self.ctx.route.delivery == Delivery::Queue {
            // Redis may evict queued events (maxmemory-policy): refused, not lost.
            if let Some((why, known)) = st.eviction.refusal_or_unknown(&self.ctx.routing)
                && (known || self.ctx.route.on_error == OnError::Reject)
            {
                return (Answer::StoreUnavailable, Some(why));
            }
            if self.ctx.route.filters_events()
                && st.store.queue_skips_claims()
                && let Some(copy) = self.filtered_before().await
            {
                return copy;
            }
            return self.enqueue().await;
        }
        if st.queue_history.had_queue(&self.ctx.route.name)
            && let Some(copy) = self.queued_before().await
        {
            return copy;
        }
        let id = self.verified.delivery.event_id().as_str();
        let key = DedupKey::new(&cfg.key_prefix, &self.ctx.route.name, id);
        let fp = self.verified.delivery.fingerprint().short_hex();
        let t = Instant::now();
        let span = self.span.child("claim");
        let claim = st.store.claim(&key, &fp, cfg.inflight_ttl).await;
        st.metrics.store_call("claim", t.elapsed().as_secs_f64());
        claimed(&span, &claim);
        drop(span);
        match claim {
            Ok(Claim::Claimed(token)) => {
                let result = self.forward().await;
                let acknowledged = matches!(&result, Ok(r) if r.status.is_success());
                let detail = result.as_ref().err().map(ToString::to_string);
                let span = self.span.child("settle");
                span.set_str(
                    "hookgate.settle",
                    if acknowledged { "complete" } else { "release" },
                );
                settle(
                    st.clone(),
                    self.ctx.routing.clone(),
                    key,
                    token,
                    fp,
                    acknowledged,
                )
                .await;
                drop(span);
                (relayed(result, false), detail)
            }
            Ok(earlier) => (copy_of(earlier, &fp, id), None),
            Err(e) => match self.ctx.route.on_error {
                OnError::Reject => (Answer::StoreUnavailable, Some(e.to_string())),
                OnError::Forward => {
                    st.unclaimed_forwards.fetch_add(1, Ordering::Relaxed);
                    let result = self.forward().await;
                    let detail = Some(format!("{e}; forwarded without a claim"));
                    (relayed(result, true), detail)
                }
            },
        }
    }

    /// Queue routes: stores the event with its claim in one durable step and answers
    /// 200 `queued`; the route's workers deliver it (`delivery`).
    async fn enqueue(self) -> (Answer, Option<String>) {
        let st = &self.state;
        let cfg = &self.ctx.routing.store_cfg;
        let id = self.verified.delivery.event_id().as_str();
        let fp = self.verified.delivery.fingerprint().short_hex();
        let fanout = Fanout {
            prefix: &cfg.key_prefix,
            route: &self.ctx.route.name,
            all: self
                .ctx
                .route
                .destinations
                .iter()
                .map(|d| d.name.as_str())
                .collect(),
            to: self
                .verified
                .destinations
                .as_deref()
                .unwrap_or(&self.ctx.route.destinations)
                .iter()
                .map(|d| (d.name.as_str(), self.order_key(d)))
                .collect(),
        };
        let peer = self.ctx.peer.ip().to_string();
        let t = Instant::now();
        let span = self.span.child("enqueue");
        // The record keeps the delivery span's context: each attempt's span, however
        // much later, joins its trace and links to it.
        let accepted = self.span.traceparent();
        let event = Event {
            trace: accepted.as_deref(),
            ..self.event()
        };
        let stored = enqueue(&st.store, &fanout, &event, fp.clone(), peer, cfg.dedup_ttl).await;
        st.metrics.store_call("enqueue", t.elapsed().as_secs_f64());
        match &stored {
            Ok(Enqueued::Queued) => span.set_str("hookgate.enqueue", "queued"),
            Ok(Enqueued::Existing(_)) => span.set_str("hookgate.enqueue", "existing"),
            Err(e) => span.fail(e),
        }
        drop(span);
        let event_id = id.to_owned();
        match stored {
            Ok(Enqueued::Queued) => {
                st.wake.notify_one();
                (Answer::Queued { event_id }, None)
            }
            Ok(Enqueued::Existing(earlier)) => (copy_of(earlier, &fp, &event_id), None),
            // A route with several destinations or per-key order never forwards
            // without a claim (validation sets or refuses `on_error` there).
            // An enqueue that may have run (a timeout, a connection lost after the call
            // was sent) may have stored the event: forwarded now, the queue would
            // deliver it again. The provider's retry finds it, or stores it.
            Err(e) if !e.wrote_nothing() => (
                Answer::StoreUnavailable,
                Some(format!(
                    "{e}; not forwarded without a claim: the event may have been stored"
                )),
            ),
            Err(e) => match self.ctx.route.on_error {
                OnError::Reject => (Answer::StoreUnavailable, Some(e.to_string())),
                OnError::Forward => {
                    st.unclaimed_forwards.fetch_add(1, Ordering::Relaxed);
                    let result = self.forward().await;
                    let detail = Some(format!("{e}; forwarded without a claim"));
                    (relayed(result, true), detail)
                }
            },
        }
    }

    /// The event's key in `d`'s per-key order (`order_by`), if `d` has one: its JSON
    /// part as read in the verifying walk over the body.
    fn order_key(&self, d: &Arc<Destination>) -> Option<String> {
        d.order_by.as_ref()?;
        let route = &self.ctx.route;
        let read = route
            .destinations
            .iter()
            .position(|r| Arc::ptr_eq(r, d))
            .and_then(|i| route.body_fields.order_by(i, &self.verified.fields));
        order_key(d, &self.event(), read)
    }

    /// The delivery in plain parts, for [`forward`] and [`enqueue`].
    fn event(&self) -> Event<'_> {
        Event {
            id: self.verified.delivery.event_id(),
            event_type: self.verified.event_type.as_deref(),
            method: &self.ctx.method,
            headers: &self.ctx.headers,
            body: &self.ctx.body,
            query: self.ctx.query.as_deref(),
            trace: None,
        }
    }

    /// A delivery no destination takes: its event ID is recorded as done for the dedup
    /// window (claimed, then completed at once), and it is answered `filtered`. A copy
    /// already recorded is answered as such.
    async fn filter_out(&self) -> (Answer, Option<String>) {
        let st = &self.state;
        let cfg = &self.ctx.routing.store_cfg;
        let id = self.verified.delivery.event_id().as_str();
        let key = DedupKey::new(&cfg.key_prefix, &self.ctx.route.name, id);
        let fp = self.verified.delivery.fingerprint().short_hex();
        let filtered = Answer::Filtered {
            event_id: id.to_owned(),
            event_type: self.verified.event_type.clone().unwrap_or_default(),
        };
        let untyped = self.verified.event_type.is_none().then(|| {
            "no event type in the delivery: only destinations without a filter take it".to_owned()
        });
        match st.store.claim(&key, &fp, cfg.inflight_ttl).await {
            Ok(Claim::Claimed(token)) => {
                if let Err(e) = st.store.complete(&key, &token, &fp, cfg.dedup_ttl).await {
                    // Its lease runs out; a copy is filtered (or recorded) again then.
                    tracing::warn!(key = %key, error = %e, "recording a filtered event failed");
                }
                (filtered, untyped)
            }
            Ok(earlier) => (copy_of(earlier, &fp, id), None),
            Err(e) => match self.ctx.route.on_error {
                OnError::Reject => (Answer::StoreUnavailable, Some(e.to_string())),
                // Nothing is forwarded either way: acknowledge it, unrecorded.
                OnError::Forward => (filtered, Some(format!("{e}; filtered, not recorded"))),
            },
        }
    }

    /// On a queue route that filters events, an event filtered before (its record is
    /// the sync dedup key, which the Redis queue does not read) is a copy: the same
    /// signed bytes with another type header are not a new event.
    async fn filtered_before(&self) -> Option<(Answer, Option<String>)> {
        let cfg = &self.ctx.routing.store_cfg;
        let id = self.verified.delivery.event_id().as_str();
        let key = DedupKey::new(&cfg.key_prefix, &self.ctx.route.name, id);
        let fp = self.verified.delivery.fingerprint().short_hex();
        match self.state.store.peek(&key).await {
            Ok(Some(earlier)) => Some((copy_of(earlier, &fp, id), None)),
            Ok(None) => None,
            Err(e) => Some((Answer::StoreUnavailable, Some(e.to_string()))),
        }
    }

    /// On a sync route that was a queue route (a reload switched it, or its queues
    /// held events at start): an event one of its destinations' queues holds, in any
    /// state, is a copy. The queue delivers it (or did); the sync claim's key, which
    /// the queue does not write (Redis) or keeps only for `dedup_ttl` (disk), cannot
    /// say so.
    async fn queued_before(&self) -> Option<(Answer, Option<String>)> {
        use crate::store::QueueStore as _;
        let id = self.verified.delivery.event_id().as_str();
        let fp = self.verified.delivery.fingerprint().short_hex();
        for dest in &self.ctx.route.destinations {
            let q = self.ctx.routing.queue(&self.ctx.route.name, &dest.name);
            match self.state.store.show(&q, id).await {
                Ok(Some((envelope, _))) => {
                    let earlier = Claim::Done {
                        fingerprint: envelope.fingerprint,
                    };
                    return Some((copy_of(earlier, &fp, id), None));
                }
                Ok(None) => {}
                Err(e) => return Some((Answer::StoreUnavailable, Some(e.to_string()))),
            }
        }
        None
    }

    /// Records which body a signed transmission ID carried, and refuses another
    /// body under it (422): PayPal signs only the body's CRC-32, so a capture's
    /// headers fit any body with the same CRC. One atomic claim on its own key; the
    /// event's claim follows as usual. `None` means go on.
    async fn transmission_guard(&self, tx: &str) -> Option<(Answer, Option<String>)> {
        let st = &self.state;
        let cfg = &self.ctx.routing.store_cfg;
        let key = DedupKey::transmission(&cfg.key_prefix, &self.ctx.route.name, tx);
        let fp = self.verified.delivery.fingerprint().short_hex();
        match st.store.claim(&key, &fp, cfg.inflight_ttl).await {
            Ok(Claim::Claimed(token)) => {
                // Kept for the dedup window whatever the forward does: a retry of this
                // transmission carries the same body, and matches. If this fails, the
                // lease expires and the next copy records the body again.
                if let Err(e) = st.store.complete(&key, &token, &fp, cfg.dedup_ttl).await {
                    tracing::warn!(key = %key, error = %e, "recording the transmission's body failed; its lease expires");
                }
                None
            }
            Ok(Claim::Done { fingerprint }) if fingerprint == fp => None,
            Ok(Claim::Done { .. }) => Some((
                Answer::TransmissionMismatch,
                Some(format!("transmission id {tx} already carried another body")),
            )),
            Ok(Claim::InFlight) => Some((
                Answer::InFlight {
                    event_id: self.verified.delivery.event_id().to_string(),
                },
                None,
            )),
            Err(e) => match self.ctx.route.on_error {
                OnError::Reject => Some((Answer::StoreUnavailable, Some(e.to_string()))),
                // The route chose availability over the store's checks.
                OnError::Forward => None,
            },
        }
    }

    async fn forward(&self) -> Result<UpstreamResponse, ForwardError> {
        let t = Instant::now();
        let destination = self.ctx.route.primary();
        let span = self.span.child_of_kind("forward", SpanKind::Client);
        // Telemetry on: the handler's spans continue the forward's, not the caller's.
        let headers = span.traceparent_header().map(|tp| {
            let mut h = self.ctx.headers.clone();
            h.insert(super::TRACEPARENT, tp);
            h
        });
        let event = Event {
            headers: headers.as_ref().unwrap_or(&self.ctx.headers),
            ..self.event()
        };
        let result = forward(
            self.state.via(&self.ctx.routing),
            &self.ctx.route,
            destination,
            &event,
            self.ctx.peer.ip(),
            self.ctx.now,
        )
        .await;
        self.state
            .metrics
            .upstream(&self.ctx.route_metrics, t.elapsed().as_secs_f64());
        if span.is_live() {
            forwarded(&span, &destination.name, &result);
        }
        result
    }
}

/// A claim span's attributes: what the store answered.
fn claimed(span: &Span, claim: &Result<Claim, StoreError>) {
    match claim {
        Ok(Claim::Claimed(_)) => span.set_str("hookgate.claim", "claimed"),
        Ok(Claim::Done { .. }) => span.set_str("hookgate.claim", "done"),
        Ok(Claim::InFlight) => span.set_str("hookgate.claim", "in_flight"),
        Err(e) => span.fail(e),
    }
}

/// A forward span's attributes: the destination, and the upstream's status or why
/// there was none.
pub(crate) fn forwarded(
    span: &Span,
    destination: &str,
    result: &Result<UpstreamResponse, ForwardError>,
) {
    span.set_str("hookgate.destination", destination);
    match result {
        Ok(r) => {
            span.set_i64("http.response.status_code", i64::from(r.status.as_u16()));
            if !r.status.is_success() {
                span.fail(r.status);
            }
        }
        Err(e) => span.fail(e),
    }
}

/// The answer to a copy of an event the store already holds (sync claim or queue):
/// a duplicate of the same body, another body under its ID, or one still in flight.
fn copy_of(earlier: Claim, fp: &str, id: &str) -> Answer {
    let event_id = id.to_owned();
    match earlier {
        Claim::Done { fingerprint } if fingerprint == fp => Answer::Duplicate { event_id },
        Claim::Done { .. } => Answer::Mismatch { event_id },
        Claim::InFlight | Claim::Claimed(_) => Answer::InFlight { event_id },
    }
}

/// The answer to a forward: the upstream's own, relayed, or 502/504.
pub(crate) fn relayed(result: Result<UpstreamResponse, ForwardError>, unclaimed: bool) -> Answer {
    match result {
        Ok(upstream) => Answer::Relayed {
            upstream,
            unclaimed,
        },
        Err(e) => Answer::UpstreamFailed(UpstreamFailure::from(&e)),
    }
}

/// Completes (after a 2xx) or releases the claim. The first attempt is awaited so the
/// provider's answer follows the store's state; if it fails, retries continue in a
/// tracked background task for up to `inflight_ttl`, after which the lease decides.
async fn settle(
    st: Arc<PipelineContext>,
    routing: Arc<Routing>,
    key: DedupKey,
    token: Token,
    fp: String,
    acknowledged: bool,
) {
    if settle_once(&st, &routing, &key, &token, &fp, acknowledged).await {
        return;
    }
    let tracker = st.settles.clone();
    tracker.spawn(
        async move {
            let deadline = Instant::now() + routing.store_cfg.inflight_ttl;
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
            // The first try was the request's own: the next comes after a wait.
            tokio::time::sleep(backoff.next_wait()).await;
            let once = || async { settle_once(&st, &routing, &key, &token, &fp, acknowledged).await.then_some(()).ok_or(()) };
            if retry_until(deadline, backoff, once).await.is_ok() {
                return;
            }
            tracing::error!(
                key = %key,
                acknowledged,
                "gave up settling the claim; it expires with its lease (a retry may then be forwarded again, with the same Idempotency-Key)"
            );
        }
        .in_current_span(),
    );
}

/// One settle attempt; true when there is nothing left to do.
async fn settle_once(
    st: &PipelineContext,
    routing: &Routing,
    key: &DedupKey,
    token: &Token,
    fp: &str,
    acknowledged: bool,
) -> bool {
    let t = Instant::now();
    let result = if acknowledged {
        st.store
            .complete(key, token, fp, routing.store_cfg.dedup_ttl)
            .await
    } else {
        st.store.release(key, token, fp).await
    };
    st.metrics.store_call(
        if acknowledged { "complete" } else { "release" },
        t.elapsed().as_secs_f64(),
    );
    match result {
        Ok(Settled::Applied) => true,
        Ok(Settled::NotOwner) => {
            tracing::warn!(key = %key, acknowledged, "the key is held by another claim; left alone");
            true
        }
        Err(e) => {
            tracing::warn!(key = %key, acknowledged, error = %e, "settling the claim failed; retrying");
            false
        }
    }
}
