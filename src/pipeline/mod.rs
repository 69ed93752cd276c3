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
//!
//! The stages read the gateway through a [`PipelineContext`] (built in `app.rs`), never
//! through another house. Beside them: `limits.rs`, the limits a request spends
//! (bodies being read, body bytes, failure budgets); `handed.rs`, the secrets
//! providers hand over in a set-up handshake; `job.rs`'s `forward` and `enqueue`,
//! which the admin listener's replay uses too; `respond.rs`, the one answer table.

mod admit;
pub(crate) mod handed;
pub(crate) mod job;
pub(crate) mod limits;
pub mod respond;
mod run_to_completion;
mod verify;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use hyper::body::Incoming;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use self::handed::HandedSecrets;
use self::limits::{BodyBudget, ClientReads, FailureBudgets};
use self::respond::{Answer, Resp};
use crate::config::Route;
use crate::forward::Forwarder;
use crate::observe::metrics::{Metrics, RouteMetrics};
use crate::observe::traces::{Span, Traces};
use crate::observe::{Observers, RequestRecord};
use crate::outcome::Outcome;
use crate::state::{Clock, QueueHistory, Routing};
use crate::store::Store;
use crate::store::health::eviction;
use tracing::Instrument as _;

use self::admit::admit;
use self::job::job;
use self::verify::verify;

/// What the request path uses of the gateway, and nothing more (as the delivery
/// workers' [`crate::delivery::WorkerContext`]): built in `app.rs`, shared by every
/// connection of the public listener.
#[derive(Debug)]
pub struct PipelineContext {
    /// Swapped whole on reload; a request keeps the snapshot it started with, so
    /// in-flight deliveries are unaffected.
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    /// `server.request_timeout` as the gateway started (a reload does not change it).
    pub(crate) request_timeout: Duration,
    /// `server.max_body` as the gateway started: what a request's record keeps of the
    /// answer at most.
    pub(crate) max_body: usize,
    pub(crate) store: Store,
    pub(crate) forwarder: Forwarder,
    /// The connections to destination servers of other kinds than HTTP.
    pub(crate) links: Arc<crate::delivery::destination::Links>,
    pub(crate) clock: Clock,
    /// Settle steps (complete or release) run as tracked tasks: they outlive a
    /// provider that hangs up, and shutdown waits for them.
    pub(crate) settles: TaskTracker,
    pub(crate) metrics: Arc<Metrics>,
    /// Where each request's record goes at its end: metrics, capture, delivery log.
    pub(crate) observers: Observers,
    /// Deliveries forwarded without a claim because the store was down.
    pub(crate) unclaimed_forwards: AtomicU64,
    /// Bounds the deliveries handled at once (`server.max_in_flight`), from the end
    /// of the body to the end of the forward and its settle.
    pub(crate) in_flight: Arc<Semaphore>,
    /// Budgets of failed verifications per route and client, on routes whose
    /// verification is expensive.
    pub(crate) budgets: FailureBudgets,
    /// Bodies being received, per client (`server.max_reads_per_client`).
    pub(crate) reads: ClientReads,
    /// Body bytes being received, over every client and per client
    /// (`server.max_body_bytes_in_flight`).
    pub(crate) body_bytes: BodyBudget,
    /// Signing secrets providers handed over in their set-up handshake; the admin
    /// listener reads and clears them.
    pub(crate) handed: Arc<HandedSecrets>,
    /// Wakes the delivery workers: an event was queued.
    pub(crate) wake: Arc<Notify>,
    /// Redis's `maxmemory-policy` as last read: queue routes are refused while it
    /// evicts, unless `store.allow_eviction`.
    pub(crate) eviction: Arc<eviction::Watch>,
    /// Routes whose queues may hold their events: a sync claim on one looks there
    /// first.
    pub(crate) queue_history: Arc<QueueHistory>,
    /// The spans of each delivery and its stages (`[telemetry] otlp`; off: nothing
    /// is built).
    pub(crate) traces: Traces,
}

impl PipelineContext {
    /// The current routing snapshot.
    pub(crate) fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// What destinations are reached with, under `routing`'s dedup window.
    pub(crate) fn via<'a>(&'a self, routing: &Routing) -> crate::delivery::destination::Via<'a> {
        crate::delivery::destination::Via {
            forwarder: &self.forwarder,
            links: &self.links,
            clock: self.clock,
            dedup_ttl: routing.store_cfg.dedup_ttl,
        }
    }
}

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
/// can be followed across services), and the delivery's span when telemetry is on (a
/// child of the provider's context, or the root of the new one). Returns the trace ID
/// for the log, the new `traceparent` when the provider sent none that is valid (the
/// caller sets it once the delivery log and the capture have copied what the provider
/// sent; with telemetry on it names the delivery's span), and the span.
fn trace_context(headers: &HeaderMap, traces: &Traces) -> (TraceId, Option<HeaderValue>, Span) {
    // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 bytes.
    let sent = headers.get(&TRACEPARENT).map(HeaderValue::as_bytes);
    let valid = sent.and_then(|b| {
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
        // Off, this is `Span::OFF` at once.
        let span = traces.delivery(sent);
        // On, a context whose parent ID is all zeros (invalid: its trace ID alone
        // passes here) starts a new trace: the log names the one the spans are in.
        if let Some(tp) = span.traceparent_header()
            && tp.as_bytes()[3..35] != trace_id.0
        {
            let mut id = [0u8; 32];
            id.copy_from_slice(&tp.as_bytes()[3..35]);
            return (TraceId(id), None, span);
        }
        return (trace_id, None, span);
    }
    if traces.is_on() {
        let span = traces.delivery(None);
        if let Some(value) = span.traceparent_header() {
            let mut id = [0u8; 32];
            id.copy_from_slice(&value.as_bytes()[3..35]);
            return (TraceId(id), Some(value), span);
        }
    }
    use rand::Rng as _;
    let (trace, span): ([u8; 16], [u8; 8]) = (rand::rng().random(), rand::rng().random());
    let mut value = *b"00-00000000000000000000000000000000-0000000000000000-01";
    // Both slices are exactly twice their input's length, so encoding cannot fail.
    let _ = hex::encode_to_slice(trace, &mut value[3..35]);
    let _ = hex::encode_to_slice(span, &mut value[36..52]);
    let mut id = [0u8; 32];
    id.copy_from_slice(&value[3..35]);
    (TraceId(id), HeaderValue::from_bytes(&value).ok(), Span::OFF)
}

/// Handles one request and writes its log line.
pub(crate) async fn handle(
    state: Arc<PipelineContext>,
    mut req: Request<Incoming>,
    peer: SocketAddr,
) -> Resp {
    let (trace_id, traceparent, delivery) = trace_context(req.headers(), &state.traces);
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
        let limit = state.request_timeout;
        // `rec` is filled in as the pipeline goes, so that even a request cut off by
        // request_timeout is logged with its route and ID.
        let answer =
            match tokio::time::timeout(limit, pipeline(&state, req, peer, &mut rec, &delivery))
                .await
            {
                Ok(answer) => answer,
                Err(_) => Answer::RequestTimeout,
            };
        let outcome = answer.outcome();
        let (resp, body) = respond::response_and_body(answer);
        if delivery.is_live() {
            delivery_attributes(&delivery, &rec, outcome, resp.status().as_u16());
        }
        state
            .observers
            .finish(rec, outcome, resp.status().as_u16(), &body, state.max_body);
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
    state: &Arc<PipelineContext>,
    req: Request<Incoming>,
    peer: SocketAddr,
    rec: &mut RequestRecord,
    delivery: &Span,
) -> Answer {
    let ctx = match admit(state, req, peer, rec).await {
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let span = delivery.child("verify");
    let verified = match verify(state, &ctx, rec) {
        Ok(verified) => verified,
        Err(answer) => {
            span.fail(answer.outcome().as_str());
            return answer;
        }
    };
    drop(span);
    job(state, ctx, verified, rec, delivery.clone()).await
}

/// The delivery span's attributes, from its record once it is answered: the route,
/// the event's ID and type (never a secret, a signature or the body), the outcome and
/// the status.
fn delivery_attributes(span: &Span, rec: &RequestRecord, outcome: Outcome, status: u16) {
    span.set_str("http.request.method", rec.method.as_str());
    if let Some(route) = &rec.route {
        span.set_str("hookgate.route", route);
        span.set_str(
            "hookgate.delivery",
            if rec.queue { "queue" } else { "sync" },
        );
    }
    if let Some(id) = &rec.event_id {
        span.set_str("hookgate.event_id", id);
    }
    if let Some(t) = &rec.event_type {
        span.set_str("hookgate.event_type", t);
    }
    span.set_str("hookgate.outcome", outcome.as_str());
    span.set_i64("http.response.status_code", i64::from(status));
    if status >= 500 {
        span.fail(outcome.as_str());
    }
    span.end();
}

/// One admitted request: its route, its client and its whole body, with its share of
/// the gateway's capacity. Built by [`admit`], read by [`verify`], owned by the [`Job`].
pub(super) struct Ctx {
    pub(super) routing: Arc<Routing>,
    pub(super) route: Arc<Route>,
    pub(super) route_metrics: Arc<RouteMetrics>,
    /// The client as `server.trusted_proxies` tell it: whose budgets it spends.
    pub(super) client: IpAddr,
    pub(super) peer: SocketAddr,
    pub(super) method: Method,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    pub(super) query: Option<String>,
    pub(super) now: u64,
    /// The delivery's share of `server.max_in_flight`, released when the job ends.
    pub(super) _permit: tokio::sync::OwnedSemaphorePermit,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With telemetry off, reading or making the trace context costs what it did
    /// before telemetry existed: nothing for a provider's `traceparent`, the new
    /// header's bytes otherwise.
    #[test]
    fn with_telemetry_off_the_trace_context_allocates_as_before() {
        let traces = Traces::off();
        let mut sent = HeaderMap::new();
        sent.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let counted = allocation_counter::measure(|| {
            let (id, created, span) = trace_context(&sent, &traces);
            assert!(created.is_none() && !span.is_live());
            assert_eq!(id.0[..4], *b"4bf9");
        });
        assert_eq!(counted.count_total, 0, "{counted:?}");
        let none = HeaderMap::new();
        // The thread's random generator is set up on its first use.
        let _ = trace_context(&none, &traces);
        let counted = allocation_counter::measure(|| {
            let (_, created, span) = trace_context(&none, &traces);
            assert!(created.is_some() && !span.is_live());
        });
        assert!(counted.count_total <= 1, "{counted:?}");
    }

    /// With telemetry on, the log's trace ID is always the trace the delivery's span
    /// is in: the provider's, a new one, or a new one when the provider's context is
    /// invalid (a parent ID of zeros).
    #[tokio::test]
    async fn with_telemetry_on_the_log_names_the_spans_trace() {
        let cfg = crate::config::TelemetryConfig {
            // Nothing listens there: the spans are dropped, which is all right here.
            otlp: reqwest::Url::parse("http://127.0.0.1:9/v1/traces").ok(),
        };
        let traces = Traces::start(&cfg, &Default::default()).expect("traces");
        let with = |tp: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(TRACEPARENT, HeaderValue::from_static(tp));
            h
        };
        let trace_of = |span: &Span| span.context().map(|c| c.trace_id().to_string());
        let provider = with("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let (id, created, span) = trace_context(&provider, &traces);
        assert!(created.is_none());
        assert_eq!(id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace_of(&span), Some(id.to_string()));
        let zeros = with("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01");
        let (id, _, span) = trace_context(&zeros, &traces);
        assert_ne!(id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace_of(&span), Some(id.to_string()));
        let (id, created, span) = trace_context(&HeaderMap::new(), &traces);
        let created = created.expect("created");
        assert_eq!(trace_of(&span), Some(id.to_string()));
        assert_eq!(span.traceparent_header(), Some(created));
        traces.shutdown().await;
    }
}
