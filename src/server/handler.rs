//! The life of one delivery (see docs/how-it-works.md, "How a delivery is handled"), in three
//! stages over one request context: `admit`, `verify` and the `job`:
//!
//! ```text
//! admit:  route by path (404) → method (405) → read body ≤ max_body (413, 408)
//! verify: signature and timestamp (401) or answer a handshake → event ID (400)
//!           → event type → the destinations its filters leave
//! job:    claim ─ Claimed  → forward → 2xx: complete, else release → relay / 502 / 504
//!               ─ Done     → 200 duplicate, or 422 when the body differs
//!               ─ InFlight → 409 + Retry-After
//!               ─ error    → 503 + Retry-After, or forward unclaimed (on_error = "forward")
//! queue routes: → enqueue (claim + event, one durable step) ─ Queued → 200 queued
//!                                    (delivered by delivery::worker), else as a claim
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use tracing::Instrument as _;

use super::respond::{self, Answer, Outcome, Resp, UpstreamFailure};
use super::{AppState, Routing};
use crate::config::{Delivery, Destination, OnError, Route};
use crate::forward::{ForwardError, Outbound, UpstreamResponse};
use crate::observe::RequestRecord;
use crate::observe::metrics::RouteMetrics;
use crate::provider::{Accepted, BodyValues, Inbound, VerifiedDelivery, accept_reading};
use crate::retry::{Backoff, retry_until};
use crate::store::{
    Claim, DedupKey, DedupStore, Enqueued, Envelope, Fanout, QueueStore as _, Settled, StoredEvent,
    Token,
};

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// A trace ID as 32 lowercase hex digits, kept on the stack: it is only formatted
/// when the delivery's span is enabled.
struct TraceId([u8; 32]);

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Always ASCII hex digits: written by `hex` or copied from a checked header.
        f.write_str(std::str::from_utf8(&self.0).unwrap_or("-"))
    }
}

/// The W3C trace context of a request: the provider's, or a new one (so a delivery
/// can be followed across services). Returns the trace ID for the log, and the new
/// `traceparent` when the provider sent none that is valid: the caller sets it once
/// the delivery log and the capture have copied what the provider sent.
fn trace_context(headers: &HeaderMap) -> (TraceId, Option<HeaderValue>) {
    // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 bytes.
    let valid = headers.get(&TRACEPARENT).and_then(|v| {
        let b = v.as_bytes();
        let well_formed = b.len() == 55
            && b[2] == b'-'
            && b[35] == b'-'
            && b[52] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| matches!(i, 2 | 35 | 52) || c.is_ascii_hexdigit())
            && b[3..35].iter().any(|c| *c != b'0');
        well_formed.then(|| {
            let mut id = [0u8; 32];
            id.copy_from_slice(&b[3..35]);
            TraceId(id)
        })
    });
    if let Some(trace_id) = valid {
        return (trace_id, None);
    }
    use rand::Rng as _;
    let (trace, span): ([u8; 16], [u8; 8]) = (rand::rng().random(), rand::rng().random());
    let mut value = *b"00-00000000000000000000000000000000-0000000000000000-01";
    // Both slices are exactly twice their input's length, so encoding cannot fail.
    let _ = hex::encode_to_slice(trace, &mut value[3..35]);
    let _ = hex::encode_to_slice(span, &mut value[36..52]);
    let mut id = [0u8; 32];
    id.copy_from_slice(&value[3..35]);
    (TraceId(id), HeaderValue::from_bytes(&value).ok())
}

/// Handles one request and writes its log line.
pub(super) async fn handle(
    state: Arc<AppState>,
    mut req: Request<Incoming>,
    peer: SocketAddr,
) -> Resp {
    let (trace_id, traceparent) = trace_context(req.headers());
    let span = tracing::info_span!("delivery", trace_id = %trace_id);
    async move {
        let routing = state.routing();
        let mut rec = state
            .observers
            .begin(&req, peer, &routing.server.trusted_proxies);
        // Set after the copy: the log and the capture show what the provider sent;
        // the upstream gets the trace context.
        if let Some(v) = traceparent {
            req.headers_mut().insert(TRACEPARENT, v);
        }
        let limit = state.server.request_timeout;
        // `rec` is filled in as the pipeline goes, so that even a request cut off by
        // request_timeout is logged with its route and ID.
        let answer = match tokio::time::timeout(limit, pipeline(&state, req, peer, &mut rec)).await
        {
            Ok(answer) => answer,
            Err(_) => Answer::RequestTimeout,
        };
        let outcome = answer.outcome();
        let (resp, body) = respond::response_and_body(answer);
        state.observers.finish(
            rec,
            outcome,
            resp.status().as_u16(),
            &body,
            state.server.max_body,
        );
        resp
    }
    .instrument(span)
    .await
}

/// The stages of a request, like a proxy's phases over one per-request context:
/// [`admit`] builds the context (route, method, limits, body), [`verify`] reads it
/// (signature, event ID, event type, filter), and [`job`] hands it to the store and
/// the upstream (claim and forward, or enqueue). Each stage ends the request with its
/// answer or passes it on; `rec` is filled in as they go, for what the request leaves
/// behind (`observe`).
async fn pipeline(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    peer: SocketAddr,
    rec: &mut RequestRecord,
) -> Answer {
    let ctx = match admit(state, req, peer, rec).await {
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let verified = match verify(state, &ctx, rec) {
        Ok(verified) => verified,
        Err(answer) => return answer,
    };
    job(state, ctx, verified, rec).await
}

/// One admitted request: its route, its client and its whole body, with its share of
/// the gateway's capacity. Built by [`admit`], read by [`verify`], owned by the [`Job`].
struct Ctx {
    routing: Arc<Routing>,
    route: Arc<Route>,
    route_metrics: Arc<RouteMetrics>,
    /// The client as `server.trusted_proxies` tell it: whose budgets it spends.
    client: IpAddr,
    peer: SocketAddr,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
    query: Option<String>,
    now: u64,
    /// The delivery's share of `server.max_in_flight`, released when the job ends.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Admit: the route (404), the method (405), the client's and the gateway's limits
/// (429, 503), and the body under `max_body` and `body_timeout` (413, 408).
async fn admit(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    peer: SocketAddr,
    rec: &mut RequestRecord,
) -> Result<Ctx, Answer> {
    let routing = state.routing();
    let Some(route) = routing.routes.get(req.uri().path()).cloned() else {
        return Err(Answer::NoRoute);
    };
    rec.route = Some(route.name.clone());
    let route_metrics = state.metrics.route(&route.name);
    rec.metrics = Some(route_metrics.clone());
    rec.provider = Some(route.verifier.preset());
    if !route.methods.contains(req.method()) {
        let allow = route
            .methods
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Answer::MethodNotAllowed { allow });
    }

    let client =
        super::limits::client_ip(peer.ip(), req.headers(), &routing.server.trusted_proxies);
    let (parts, body) = req.into_parts();
    // Bodies being read hold a slot of their client's, never delivery capacity: a
    // client that trickles bodies slows itself only. Beyond max_reads_per_client, a
    // body waits for one of its client's to finish, for no longer than body_timeout.
    let Some(reading) = state
        .reads
        .enter(
            client,
            routing.server.max_reads_per_client,
            routing.server.body_timeout,
        )
        .await
    else {
        return Err(Answer::ClientBusy);
    };
    // Bytes being received are bounded over every client and per client, counted as
    // they arrive (a declared length costs the sender nothing).
    let mut receiving = state.body_bytes.body(client);
    let max_body = routing.server.max_body;
    let body = match read_body(body, max_body, routing.server.body_timeout, &mut receiving).await {
        Ok(body) => body,
        Err(Unread::Answer(answer)) => return Err(answer),
        Err(Unread::OverBudget(why)) => {
            rec.detail = Some(why.detail().into());
            return Err(Answer::Overloaded);
        }
    };
    drop(receiving);
    drop(reading);
    // Bounded, never queued: beyond server.max_in_flight the provider retries later.
    // The permit is held until the forward and its settle end, wherever they run.
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return Err(Answer::Overloaded);
    };
    rec.body = Some(body.clone());
    rec.queue = route.delivery == Delivery::Queue;
    Ok(Ctx {
        routing,
        route,
        route_metrics,
        client,
        peer,
        method: parts.method,
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
        now: state.clock.now(),
        _permit: permit,
    })
}

/// What [`verify`] found in an admitted request.
struct Verified {
    delivery: VerifiedDelivery,
    event_type: Option<String>,
    /// The route's destinations this event goes to, when its type's filters leave
    /// some out (`None`: all of them).
    destinations: Option<Vec<Arc<Destination>>>,
    /// The route's JSON fields, read in the walk that found the event ID: the job
    /// takes its destinations' `order_by` keys from them.
    fields: BodyValues,
}

/// Verify: the client's failure budget (429), the signature and timestamp (401) or a
/// handshake, the event ID (400), the event type, and the destinations its filters
/// leave.
#[expect(
    clippy::result_large_err,
    reason = "an answer ends the request: returned once, as the async stages return theirs"
)]
fn verify(state: &Arc<AppState>, ctx: &Ctx, rec: &mut RequestRecord) -> Result<Verified, Answer> {
    let route = &ctx.route;
    let url = route.public_url.as_ref().map(|u| match &ctx.query {
        Some(q) => format!("{u}?{q}"),
        None => u.clone(),
    });
    let inbound = Inbound {
        method: &ctx.method,
        headers: &ctx.headers,
        body: &ctx.body,
        query: ctx.query.as_deref(),
        url: url.as_deref(),
    };
    // Where verification is expensive (the asymmetric schemes), a client's failed
    // verifications spend its budget on the route; once spent, that client's requests
    // are refused before verification until it refills. HMAC costs microseconds and
    // needs no budget: forged requests never stop valid ones.
    let budgeted = route.verifier.is_costly();
    if budgeted
        && !state
            .budgets
            .left(&route.name, ctx.client, route.failure_budget)
    {
        return Err(Answer::RateLimited);
    }
    // The event ID, the event type and the order keys that are JSON fields are read in
    // one walk over the body, after the signature (one walk, not one each).
    let accepted = accept_reading(
        &route.verifier,
        &route.event_id,
        &route.body_fields,
        &inbound,
        ctx.now,
    );
    let (delivery, fields) = match accepted {
        Ok((Accepted::Delivery(d), fields)) => (d, fields),
        Ok((Accepted::Handshake(reply), _)) => return Err(handshake(state, ctx, reply, rec)),
        Err(rejection) => {
            if budgeted && matches!(rejection, crate::provider::Rejection::Verify(_)) {
                state
                    .budgets
                    .spend(&route.name, ctx.client, route.failure_budget);
            }
            rec.detail = Some(rejection.to_string());
            let source = route.event_id.to_string();
            rec.reason = Some(crate::provider::explain(&rejection, rec.provider, &source));
            return Err(Answer::Rejected(rejection));
        }
    };
    rec.event_id = Some(delivery.event_id().to_string());
    let event_type = route.event_type.as_ref().and_then(|t| {
        let read = route.body_fields.event_type(&fields);
        t.extract_read(&ctx.headers, &ctx.body, read)
    });
    // An event type the route does not take (its `events`, or no destination's) is
    // acknowledged and never forwarded or stored; its event ID is recorded as done for
    // the dedup window, because the type is often in a header the signature does not
    // cover: the same signed bytes sent again under another type are a copy, not a new
    // event. A type that cannot be read goes only where no filter applies: a filter
    // admits what it can see, nothing else.
    // `None`: every destination (the common case, no filter: nothing to collect).
    let destinations = match (&event_type, route.filters_events()) {
        (_, false) => None,
        (Some(t), true) => Some(route.destinations_for(t)),
        (None, true) => Some(route.destinations_for_untyped()),
    };
    rec.event_type.clone_from(&event_type);
    rec.secret_index = Some(delivery.secret_index());
    state
        .metrics
        .matched_secret(&ctx.route_metrics, delivery.secret_index());
    Ok(Verified {
        delivery,
        event_type,
        destinations,
        fields,
    })
}

/// A handshake's answer, once a secret it hands over is kept (or refused).
fn handshake(
    state: &Arc<AppState>,
    ctx: &Ctx,
    mut reply: crate::provider::HandshakeReply,
    rec: &mut RequestRecord,
) -> Answer {
    if let Some(secret) = reply.handed_secret.take() {
        let configured = ctx.route.secret_count > 0;
        match state.keep_handed_secret(&ctx.route.name, configured, secret, ctx.now) {
            super::Handed::Kept => {}
            refused => {
                rec.detail = Some(format!("handed-over secret refused: {refused:?}"));
                return Answer::HandshakeRefused {
                    route_has_secret: configured,
                };
            }
        }
    }
    Answer::Handshake(reply)
}

/// The job: the verified delivery through the store and the upstream (claim and
/// forward, or enqueue), and the route's fixed reply in place of the answer.
async fn job(
    state: &Arc<AppState>,
    ctx: Ctx,
    verified: Verified,
    rec: &mut RequestRecord,
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

/// Polls a future in place and, if it is dropped before it has finished, spawns the
/// rest of it on the runtime so it still runs to the end.
///
/// The claim → forward → settle sequence must not stop halfway when the provider hangs
/// up. Spawning every delivery onto its own task guarantees that too, but costs a
/// cross-thread wake-up per request (the idle worker is notified to steal the new
/// task), which the profile showed as a tenth of the gateway's CPU; this keeps the
/// common case inline and pays for a task only on a hang-up. Hand-written: no crate
/// offers "detach on drop" for a future.
struct RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fut: Option<std::pin::Pin<Box<F>>>,
}

impl<F> RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn new(fut: F) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
        }
    }
}

impl<F> std::future::Future for RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        // `Option<Pin<Box<F>>>` is Unpin, so is Self.
        let this = self.get_mut();
        let Some(fut) = this.fut.as_mut() else {
            panic!("RunToCompletion polled after it completed");
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        this.fut = None;
        std::task::Poll::Ready(out)
    }
}

impl<F> Drop for RunToCompletion<F>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(fut) = self.fut.take() {
            // Dropped unfinished: hand the rest to the runtime (the box keeps the
            // future where it was pinned).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(fut);
            }
        }
    }
}

/// Why a body was not read whole.
enum Unread {
    Answer(Answer),
    OverBudget(super::limits::OverBudget),
}

/// Reads the body under the size limit and the body timeout, each frame's bytes held
/// of the body budget as it arrives. A declared `Content-Length` over the limit is
/// refused before anything is read; nothing is set aside for a declared length.
async fn read_body(
    body: Incoming,
    max: usize,
    limit: Duration,
    budget: &mut super::limits::BodyBytes<'_>,
) -> Result<Bytes, Unread> {
    if body.size_hint().upper().is_some_and(|n| n > max as u64) {
        return Err(Unread::Answer(Answer::TooLarge { limit: max }));
    }
    let read = async {
        let mut body = body;
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut len = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame
                .map_err(|_| Unread::Answer(Answer::BadBody))?
                .into_data()
            else {
                continue; // trailers carry nothing of the body
            };
            if data.is_empty() {
                continue;
            }
            len += data.len();
            if len > max {
                return Err(Unread::Answer(Answer::TooLarge { limit: max }));
            }
            budget.grow(data.len()).map_err(Unread::OverBudget)?;
            chunks.push(data);
        }
        Ok(match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.swap_remove(0),
            _ => {
                let mut whole = bytes::BytesMut::with_capacity(len);
                for chunk in chunks {
                    whole.extend_from_slice(&chunk);
                }
                whole.freeze()
            }
        })
    };
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or(Err(Unread::Answer(Answer::BodyTimeout)))
}

/// A verified delivery on its way through the store and the upstream.
struct Job {
    state: Arc<AppState>,
    ctx: Ctx,
    verified: Verified,
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
            if let Some((why, known)) = st.eviction_refusal_or_unknown(&self.ctx.routing)
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
        if st.had_queue(&self.ctx.route.name)
            && let Some(copy) = self.queued_before().await
        {
            return copy;
        }
        let id = self.verified.delivery.event_id().as_str();
        let key = DedupKey::new(&cfg.key_prefix, &self.ctx.route.name, id);
        let fp = self.verified.delivery.fingerprint().short_hex();
        let t = Instant::now();
        let claim = st.store.claim(&key, &fp, cfg.inflight_ttl).await;
        st.metrics.store_call("claim", t.elapsed().as_secs_f64());
        match claim {
            Ok(Claim::Claimed(token)) => {
                let result = self.forward().await;
                let acknowledged = matches!(&result, Ok(r) if r.status.is_success());
                let detail = result.as_ref().err().map(ToString::to_string);
                settle(
                    st.clone(),
                    self.ctx.routing.clone(),
                    key,
                    token,
                    fp,
                    acknowledged,
                )
                .await;
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
        let event = StoredEvent {
            envelope: Envelope {
                event_id: id.to_owned(),
                event_type: self.verified.event_type.clone(),
                fingerprint: fp.clone(),
                method: self.ctx.method.as_str().to_owned(),
                headers: Envelope::store_headers(&self.ctx.headers),
                query: self.ctx.query.clone(),
                peer: self.ctx.peer.ip().to_string(),
                received_at_ms: crate::queue::now_ms(),
            },
            body: self.ctx.body.clone(),
        };
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
        let t = Instant::now();
        let stored = st.store.enqueue_to(&fanout, &event, cfg.dedup_ttl).await;
        st.metrics.store_call("enqueue", t.elapsed().as_secs_f64());
        let event_id = id.to_owned();
        match stored {
            Ok(Enqueued::Queued) => {
                st.deliveries.notify_one();
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
        let order_by = d.order_by.as_ref()?;
        let route = &self.ctx.route;
        let read = route
            .destinations
            .iter()
            .position(|r| Arc::ptr_eq(r, d))
            .and_then(|i| route.body_fields.order_by(i, &self.verified.fields));
        let raw = order_by.raw_read(&self.ctx.headers, &self.ctx.body, read)?;
        Some(crate::queue::order_key(&raw))
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
        let out = Outbound {
            method: self.ctx.method.clone(),
            headers: &self.ctx.headers,
            body: self.ctx.body.clone(),
            query: self.ctx.query.as_deref(),
            event_id: self.verified.delivery.event_id(),
            peer: self.ctx.peer.ip(),
            now: self.ctx.now,
        };
        let t = Instant::now();
        let result = self
            .state
            .forwarder
            .send(&self.ctx.route, self.ctx.route.primary(), out)
            .await;
        self.state
            .metrics
            .upstream(&self.ctx.route_metrics, t.elapsed().as_secs_f64());
        result
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
fn relayed(result: Result<UpstreamResponse, ForwardError>, unclaimed: bool) -> Answer {
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
    st: Arc<AppState>,
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
    st: &AppState,
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
