//! Traces (`[telemetry] otlp`): one span per delivery, with a child per stage
//! (`verify`, `claim`, `forward` or `enqueue`, `settle`), and one per queue attempt
//! (children `forward` and `settle`) that continues the trace of the delivery that
//! accepted the event and links to it. Exported over OTLP/HTTP (protobuf) to the
//! collector the config names. The span names and attributes are an interface:
//! docs/operations.md, "Traces", lists them.
//!
//! Off (no `otlp`), a [`Traces`] and every `Span` are `None`: no exporter, no
//! thread, and each call here returns at once without allocating (a test counts).
//!
//! On, spans are handed to the SDK's batch processor: a thread of its own that sends
//! a batch every [`EXPORT_EVERY`] or every [`MAX_BATCH`] spans, its queue bounded by
//! [`MAX_QUEUE`]. A delivery never waits for the collector: a span that finds the
//! queue full is dropped and counted (`hookgate_spans_dropped_total`), and the spans
//! of an export the collector does not take (down, refusing, slower than
//! [`EXPORT_TIMEOUT`]) are counted too (`hookgate_spans_export_failed_total`). The
//! export's HTTP request runs on the gateway's runtime (our own reqwest client:
//! rustls, no blocking client, no OpenSSL); the processor's thread only waits for it.
//!
//! Not `tracing-opentelemetry`: a layer of the global subscriber would tie spans to
//! `RUST_LOG` (at `warn` there would be none) and to one global provider, while a
//! test process runs many gateways, each with its own collector. The handles here
//! are passed in, like every other subsystem's.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData,
    SpanExporter, SpanProcessor,
};
use prometheus_client::metrics::counter::Counter;

use crate::config::TelemetryConfig;

/// The most spans waiting for export; past it, spans are dropped (and counted).
pub const MAX_QUEUE: usize = 2048;
/// The most spans in one export request.
pub const MAX_BATCH: usize = 512;
/// How often waiting spans are exported (sooner when a batch is full).
pub const EXPORT_EVERY: Duration = Duration::from_secs(1);
/// How long one export may take (connect, send, answer) before it counts as failed.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful stop waits for the last spans to be exported.
pub const FLUSH_ON_STOP: Duration = Duration::from_secs(5);

/// The counters of what the exporter lost, registered on `/metrics` whether or not
/// telemetry is on (a dashboard finds them at 0).
#[derive(Debug, Clone, Default)]
pub struct SpanCounters {
    /// Spans dropped because [`MAX_QUEUE`] spans were already waiting.
    pub dropped: Counter,
    /// Spans of exports the collector did not take.
    pub export_failed: Counter,
}

impl SpanCounters {
    /// Registers both counters in `registry` (under its `hookgate` prefix).
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "spans_dropped",
            "Spans dropped before export because the export queue was full ([telemetry] otlp)",
            self.dropped.clone(),
        );
        registry.register(
            "spans_export_failed",
            "Spans in exports the collector did not take: unreachable, refused or too slow ([telemetry] otlp)",
            self.export_failed.clone(),
        );
    }
}

/// The gateway's tracer: `None` when telemetry is off. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Traces(Option<Arc<On>>);

struct On {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl fmt::Debug for On {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("On")
    }
}

impl Traces {
    /// Off: no span is ever built.
    pub fn off() -> Self {
        Self(None)
    }

    /// Starts exporting to `cfg.otlp`, if set. Must run inside the gateway's tokio
    /// runtime: exports are sent from it.
    pub fn start(cfg: &TelemetryConfig, counters: &SpanCounters) -> anyhow::Result<Self> {
        let Some(url) = &cfg.otlp else {
            return Ok(Self::off());
        };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("telemetry: exports need a tokio runtime"))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("telemetry: the exporter's HTTP client: {e}"))?;
        use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OnRuntime { http, runtime })
            .with_endpoint(url.as_str())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("telemetry: the OTLP exporter: {e}"))?;
        let pending = Arc::new(AtomicUsize::new(0));
        let exporter = Counted {
            inner: exporter,
            pending: pending.clone(),
            failed: counters.export_failed.clone(),
        };
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUE)
            .with_max_export_batch_size(MAX_BATCH)
            .with_scheduled_delay(EXPORT_EVERY)
            .build();
        let processor = Bounded {
            inner: BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch)
                .build(),
            pending,
            dropped: counters.dropped.clone(),
        };
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", "hookgate"),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .build();
        let provider = SdkTracerProvider::builder()
            // Every delivery is recorded, whatever the provider's traceparent says of
            // its own sampling.
            .with_sampler(Sampler::AlwaysOn)
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("hookgate");
        Ok(Self(Some(Arc::new(On { provider, tracer }))))
    }

    /// Whether spans are built.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The span of one delivery, from its request to its answer: a child of the
    /// provider's trace context when it sent a valid `traceparent`, else the root of a
    /// new trace.
    pub(crate) fn delivery(&self, parent: Option<&[u8]>) -> Span {
        let Some(on) = &self.0 else {
            return Span::OFF;
        };
        let cx = match parent.and_then(span_context) {
            Some(sc) => Context::new().with_remote_span_context(sc),
            None => Context::new(),
        };
        let span = on
            .tracer
            .span_builder("delivery")
            .with_kind(SpanKind::Server)
            .start_with_context(&on.tracer, &cx);
        Span::live(span, &on.tracer)
    }

    /// The span of one queue attempt: a child of the delivery span that accepted the
    /// event (`accepted`, the traceparent its record keeps), linked to it, so the
    /// attempt joins that trace however much later it runs. An event stored without
    /// it (accepted with telemetry off, or by an earlier version) continues the
    /// `traceparent` it was stored with, without a link.
    pub(crate) fn attempt(&self, event: &crate::store::Envelope) -> Span {
        let Some(on) = &self.0 else {
            return Span::OFF;
        };
        let accepted = event
            .trace
            .as_deref()
            .and_then(|t| span_context(t.as_bytes()));
        let stored = || {
            event
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("traceparent"))
                .and_then(|h| h.text.as_deref())
                .and_then(|t| span_context(t.as_bytes()))
        };
        let parent = accepted.clone().or_else(stored);
        let cx = match parent {
            Some(sc) => Context::new().with_remote_span_context(sc),
            None => Context::new(),
        };
        let mut builder = on
            .tracer
            .span_builder("attempt")
            .with_kind(SpanKind::Consumer);
        if let Some(sc) = accepted {
            builder = builder.with_links(vec![Link::new(
                sc,
                vec![KeyValue::new("hookgate.link", "accepted")],
                0,
            )]);
        }
        Span::live(builder.start_with_context(&on.tracer, &cx), &on.tracer)
    }

    /// Exports what is still waiting and stops the exporter, within [`FLUSH_ON_STOP`]
    /// (a graceful stop; the collector being down costs at most that).
    pub async fn shutdown(&self) {
        let Some(on) = &self.0 else {
            return;
        };
        let provider = on.provider.clone();
        // Blocking: the processor's thread exports and is joined; the export itself
        // runs on this runtime, which must keep running meanwhile.
        let stop =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_ON_STOP));
        match tokio::time::timeout(FLUSH_ON_STOP + Duration::from_secs(1), stop).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "telemetry: the last spans could not all be exported")
            }
            _ => tracing::warn!("telemetry: exporting the last spans took too long; stopped"),
        }
    }
}

/// A span being recorded, or nothing at all (telemetry off: [`Span::OFF`], and every
/// method returns at once). Clones share the span; it ends at [`Span::end`] or when
/// the last clone is dropped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Span(Option<Arc<Live>>);

struct Live {
    /// Holds the span (as the active span of a context of its own, its children's
    /// parent).
    cx: Context,
    tracer: SdkTracer,
}

impl fmt::Debug for Live {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Live")
    }
}

impl Span {
    /// Telemetry off.
    pub(crate) const OFF: Span = Span(None);

    fn live(span: opentelemetry_sdk::trace::Span, tracer: &SdkTracer) -> Self {
        Self(Some(Arc::new(Live {
            cx: Context::new().with_span(span),
            tracer: tracer.clone(),
        })))
    }

    /// A child span (internal).
    pub(crate) fn child(&self, name: &'static str) -> Span {
        self.child_of_kind(name, SpanKind::Internal)
    }

    /// A child span of `kind` (`Client` for a forward).
    pub(crate) fn child_of_kind(&self, name: &'static str, kind: SpanKind) -> Span {
        let Some(live) = &self.0 else {
            return Span::OFF;
        };
        let span = live
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .start_with_context(&live.tracer, &live.cx);
        Span::live(span, &live.tracer)
    }

    /// Whether the span is recorded.
    pub(crate) fn is_live(&self) -> bool {
        self.0.is_some()
    }

    /// Sets a text attribute (copied only when recorded).
    pub(crate) fn set_str(&self, key: &'static str, value: &str) {
        if let Some(live) = &self.0 {
            live.cx
                .span()
                .set_attribute(KeyValue::new(key, value.to_owned()));
        }
    }

    /// Sets an integer attribute.
    pub(crate) fn set_i64(&self, key: &'static str, value: i64) {
        if let Some(live) = &self.0 {
            live.cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Marks the span failed, with why (formatted only when recorded).
    pub(crate) fn fail(&self, why: impl fmt::Display) {
        if let Some(live) = &self.0 {
            live.cx.span().set_status(Status::error(why.to_string()));
        }
    }

    /// Ends the span now (a clone kept longer, such as a settle retried in the
    /// background, does not stretch it).
    pub(crate) fn end(&self) {
        if let Some(live) = &self.0 {
            live.cx.span().end();
        }
    }

    /// The span's IDs, when recorded.
    pub(crate) fn context(&self) -> Option<SpanContext> {
        self.0
            .as_ref()
            .map(|live| live.cx.span().span_context().clone())
    }

    /// The W3C `traceparent` naming this span, when recorded: what a handler's spans
    /// continue, and what a queued event's record keeps of the delivery that accepted
    /// it.
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.context().map(|sc| traceparent(&sc))
    }

    /// [`Span::traceparent`] as a header value.
    pub(crate) fn traceparent_header(&self) -> Option<HeaderValue> {
        self.traceparent()
            .and_then(|t| HeaderValue::from_str(&t).ok())
    }
}

/// `00-<trace id>-<span id>-<flags>`.
fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The (remote) span context a W3C `traceparent` names, if it is well formed and
/// names a valid trace and span.
fn span_context(tp: &[u8]) -> Option<SpanContext> {
    let tp = std::str::from_utf8(tp).ok()?.trim();
    let mut parts = tp.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    if flags.len() != 2 || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(version) && hex(trace) && hex(span) && hex(flags)) {
        return None;
    }
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        /* is_remote */ true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// The exporter's HTTP client: reqwest, each request sent from the gateway's runtime
/// (the batch processor's thread has none) and awaited from that thread.
#[derive(Debug)]
struct OnRuntime {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            let response = http.execute(request).await?;
            let (status, headers) = (response.status(), response.headers().clone());
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// The OTLP exporter, counting the spans of every export the collector did not take,
/// and handing back their places in the queue's bound ([`Bounded`]).
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
    failed: Counter,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.pending.fetch_sub(n, Ordering::Relaxed);
        let result = self.inner.export(batch).await;
        if result.is_err() {
            self.failed.inc_by(n as u64);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The batch processor behind a bound of our own: a span that would make more than
/// [`MAX_QUEUE`] wait (counted from its end to its export) is dropped here and
/// counted, before the processor's own queue could drop it without a count.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    pending: Arc<AtomicUsize>,
    dropped: Counter,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUE {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            self.dropped.inc();
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off, a span is one null pointer and nothing is built: each call checks it and
    /// returns (no exporter, no context, no string formatted or copied), and the
    /// whole of a delivery's and an attempt's span work allocates nothing.
    #[test]
    fn the_off_path_allocates_nothing() {
        assert_eq!(std::mem::size_of::<Span>(), std::mem::size_of::<usize>());
        assert_eq!(std::mem::size_of::<Traces>(), std::mem::size_of::<usize>());
        let traces = Traces::off();
        let tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let envelope = crate::store::Envelope {
            event_id: String::new(),
            event_type: None,
            fingerprint: String::new(),
            method: String::new(),
            headers: Vec::new(),
            query: None,
            peer: String::new(),
            received_at_ms: 0,
            trace: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        };
        let counted = allocation_counter::measure(|| {
            let delivery = traces.delivery(Some(tp));
            let verify = delivery.child("verify");
            verify.set_str("hookgate.route", "stripe");
            verify.fail(format_args!("bad_signature {}", 1));
            verify.end();
            let forward = delivery.child_of_kind("forward", SpanKind::Client);
            assert!(forward.traceparent_header().is_none());
            delivery.set_i64("http.response.status_code", 200);
            delivery.end();
            assert!(!delivery.is_live() && delivery.context().is_none());
            let clone = delivery.clone();
            assert!(clone.traceparent().is_none());
            let attempt = traces.attempt(&envelope);
            let settle = attempt.child("settle");
            settle.set_str("hookgate.result", "delivered");
            assert!(!attempt.is_live() && !settle.is_live());
        });
        assert_eq!(counted.count_total, 0, "{counted:?}");
        // The counter counts (its allocator is this test binary's).
        let one = allocation_counter::measure(|| {
            std::hint::black_box(Vec::<u8>::with_capacity(8));
        });
        assert_eq!(one.count_total, 1);
    }

    #[test]
    fn a_traceparent_is_read_as_the_w3c_format_says() {
        let sc = span_context(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        assert_eq!(
            traceparent(&sc),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
            "",
        ] {
            assert!(span_context(bad.as_bytes()).is_none(), "{bad}");
        }
    }
}
