//! The delivery log's recorder: every request to a route becomes a
//! [`DeliveryRecord`] handed to a bounded channel; a background task writes them in
//! batches to the store's log (`store/log/`) and then tells the live streams
//! (`GET /deliveries/stream`). Recording never refuses or delays a delivery: a full
//! channel or a failed write drops records, and `hookgate_log_records_total` counts
//! them.
//!
//! Refused requests (anyone can send them) are recorded without their body, at most
//! [`REFUSED_BURST`] at once and [`REFUSED_PER_SEC`] a second per route and client (a
//! token bucket); beyond that they are only counted, so an outsider cannot fill the
//! log or slow the store.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{broadcast, mpsc};

use super::AppState;
use super::respond::{Outcome, Resp};
use crate::config::{LogBodies, LogConfig};
use crate::provider::{Preset, Rejection, VerifyError};
use crate::store::log::{
    Batch, Bounds, Counts, DeliveryLog, DeliveryRecord, QueueLink, minute_of, new_delivery_id,
};
use crate::telemetry::ResultLabel;

/// How long a batch waits for the builder thread before the writer takes it back
/// and builds it itself (see [`Builder`]).
const BUILDER_PATIENCE: Duration = Duration::from_millis(250);
/// After a batch was taken back, how long the writer builds batches itself without
/// offering them to the builder (the machine is busy: its CPU time is
/// the deliveries', and the log must keep up).
const BUILDER_BUSY: Duration = Duration::from_secs(2);
/// Records the writer builds between two yields to the requests on its thread, when
/// it builds them itself.
const YIELD_EVERY: usize = 16;

/// Records waiting for the writer at most: a tenth of a second's worth at the rates
/// one gateway takes.
const CHANNEL: usize = 16_384;
/// Bytes of records waiting for the writer at most (bodies make records large).
const QUEUED_BYTES: u64 = 64 << 20;
/// Records or bytes one write takes at most.
const BATCH_RECORDS: usize = 256;
const BATCH_BYTES: u64 = 4 << 20;
/// How long the writer gathers records after the first before it writes them: one
/// write a tenth of a second at most under load, rather than one per request. On the
/// disk store each write takes the file's writer lock that claims need too.
const LINGER: Duration = Duration::from_millis(100);
/// How often an idle log is trimmed to `keep`.
const RETAIN_EVERY: Duration = Duration::from_secs(10);
/// How often the counts are written when the log is off (`log.enabled = false`).
const COUNTS_EVERY: Duration = Duration::from_secs(1);
/// Refused requests recorded per route and client: a burst, then this many a second.
pub(crate) const REFUSED_BURST: f64 = 20.0;
pub(crate) const REFUSED_PER_SEC: f64 = 2.0;
/// Clients tracked for the refused-request budget at most; beyond, the full buckets
/// are forgotten.
const BUCKETS: usize = 10_000;
/// Bytes of the gateway's answer kept.
const ANSWER_BYTES: usize = 4 << 10;
/// Live streams' backlog: a stream that falls further behind skips records.
const LIVE: usize = 1_024;

const REDACTED: &str = "[redacted]";

/// The recorder's metrics (`hookgate_log_*`).
#[derive(Debug, Clone, Default)]
struct LogMetrics {
    /// `written`, `dropped_full` (channel full), `write_failed`, `not_recorded`
    /// (only counted: refused requests over their budget, or every request with
    /// `log.enabled = false`).
    records: Family<ResultLabel, Counter>,
    queued: Gauge,
}

impl LogMetrics {
    fn count(&self, result: &str, n: u64) {
        self.records
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc_by(n);
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The delivery log's writer side, shared by all requests.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) log: DeliveryLog,
    pub(crate) cfg: LogConfig,
    tx: mpsc::Sender<Entry>,
    rx: Mutex<Option<mpsc::Receiver<Entry>>>,
    queued_bytes: Arc<AtomicU64>,
    counts: Mutex<Counts>,
    live: broadcast::Sender<Arc<DeliveryRecord>>,
    buckets: Mutex<HashMap<(String, IpAddr), Bucket>>,
    metrics: LogMetrics,
    /// Cancelled when the gateway stops: live streams end.
    pub(crate) closing: tokio_util::sync::CancellationToken,
}

/// What the recorder keeps of a request before the pipeline consumes it: reference-
/// counted clones, so the request path copies no header, path or body. The record is
/// built from it by the writer, off the request path.
#[derive(Debug)]
pub(crate) struct Seen {
    received_at: u64,
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    peer: SocketAddr,
}

/// A request's record as the request path hands it over; [`Recorder::build`] makes the
/// [`DeliveryRecord`] in the writer.
#[derive(Debug)]
struct Raw {
    seen: Seen,
    done: Done,
    status: u16,
    answer: Bytes,
}

/// What waits for the writer.
#[derive(Debug)]
enum Entry {
    Raw(Box<Raw>),
    /// A record the gateway built itself (an operator's replay).
    Built(Box<DeliveryRecord>),
}

impl Entry {
    /// Roughly what it will take in memory, for the queued-bytes bound.
    fn approx_size(&self, max_body: usize) -> u64 {
        match self {
            Self::Raw(raw) => {
                // An estimate: headers of a webhook delivery are short.
                let headers = raw.seen.headers.len() * 96;
                let body = raw.done.body.as_ref().map_or(0, |b| b.len().min(max_body));
                (headers + body + raw.answer.len().min(ANSWER_BYTES) + 512) as u64
            }
            Self::Built(r) => approx_size(r),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the writer hands the builder: a batch's entries, and where its records go.
type Job = (Vec<Entry>, tokio::sync::oneshot::Sender<(Batch, Counts)>);

/// The thread that builds records from what requests handed over and prepares them
/// for the store (encodes and compresses a frame for the disk store). On Linux it is
/// a `SCHED_IDLE` thread: it runs on CPU time the deliveries leave, and a delivery's
/// thread that wakes takes the core from it at once. So that a saturated machine
/// cannot starve the log, a batch the builder has not started within
/// [`BUILDER_PATIENCE`] is taken back and built by the writer task, between the
/// requests on its thread, and so are the batches of the next [`BUILDER_BUSY`]; records are
/// dropped (and counted) only when the recorder's channel is full. The store's
/// transaction runs at normal priority (it holds the file's write lock).
struct Builder {
    /// At most one job: the writer waits for each batch before it gathers the next.
    job: Arc<(Mutex<Option<Job>>, std::sync::Condvar)>,
    /// When a batch was last taken back: the machine is busy, and the writer builds
    /// batches itself until [`BUILDER_BUSY`] has passed.
    busy_since: Option<Instant>,
}

impl Builder {
    fn start(state: &Arc<AppState>) -> Self {
        let job: Arc<(Mutex<Option<Job>>, std::sync::Condvar)> = Arc::default();
        let shared = Arc::downgrade(&job);
        let state = state.clone();
        let started = std::thread::Builder::new()
            .name("hookgate-log".into())
            .spawn(move || {
                background();
                // Until the writer is gone (its handle holds the only other count).
                while let Some(job) = shared.upgrade() {
                    let next = Self::next(&job);
                    drop(job);
                    if let Some((entries, reply)) = next {
                        let _ = reply.send(build_batch(&state, entries));
                    }
                }
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "the delivery log's builder thread did not start; records are built by the writer");
        }
        Self {
            job,
            busy_since: None,
        }
    }

    /// The next job, waiting up to a second for one.
    fn next(job: &(Mutex<Option<Job>>, std::sync::Condvar)) -> Option<Job> {
        let (slot, ready) = job;
        let slot = lock(slot);
        let (mut slot, _) = ready
            .wait_timeout_while(slot, Duration::from_secs(1), |j| j.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.take()
    }

    /// The batch of `entries`, built on the builder thread, or here in the writer
    /// task if the builder has not taken it within [`BUILDER_PATIENCE`].
    async fn build(&mut self, state: &Arc<AppState>, entries: Vec<Entry>) -> (Batch, Counts) {
        if self.busy_since.is_some_and(|t| t.elapsed() < BUILDER_BUSY) {
            return Self::build_here(state, entries).await;
        }
        let (reply, built) = tokio::sync::oneshot::channel();
        *lock(&self.job.0) = Some((entries, reply));
        self.job.1.notify_one();
        let mut built = built;
        if let Ok(Ok(batch)) = tokio::time::timeout(BUILDER_PATIENCE, &mut built).await {
            return batch;
        }
        let waiting = lock(&self.job.0).take();
        match waiting {
            Some((entries, _)) => {
                self.busy_since = Some(Instant::now());
                Self::build_here(state, entries).await
            }
            // The builder has it: it is running.
            None => built.await.unwrap_or_default(),
        }
    }

    /// Builds a batch in the writer task, letting the requests on its thread run
    /// every [`YIELD_EVERY`] records (building one takes microseconds).
    async fn build_here(state: &Arc<AppState>, entries: Vec<Entry>) -> (Batch, Counts) {
        let mut batch = Batch::default();
        for entry in entries {
            add_built(state, &mut batch, entry);
            if batch.records.len().is_multiple_of(YIELD_EVERY) {
                tokio::task::yield_now().await;
            }
        }
        finish_batch(state, batch)
    }
}

/// Builds the records of a batch, counts them, and encodes them for the store.
fn build_batch(state: &AppState, entries: Vec<Entry>) -> (Batch, Counts) {
    let mut batch = Batch::default();
    for entry in entries {
        add_built(state, &mut batch, entry);
    }
    finish_batch(state, batch)
}

/// Encodes a built batch for the store, and counts its records.
fn finish_batch(state: &AppState, mut batch: Batch) -> (Batch, Counts) {
    state.recorder.log.prepare(&mut batch);
    let mut counts = Counts::default();
    for r in &batch.records {
        count_into(&mut counts, &r.route, &r.outcome, r.received_at);
    }
    (batch, counts)
}

/// Builds the record of `entry` into `batch`.
fn add_built(state: &AppState, batch: &mut Batch, entry: Entry) {
    batch
        .records
        .push(Arc::new(state.recorder.build(state, entry)));
}

/// Makes the calling thread a background one (`SCHED_IDLE` on Linux); a thread that
/// cannot stays as it is.
fn background() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
            thread_native_id,
        };
        let idle = set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Os(thread_priority::ThreadPriorityOsValue::default()),
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        );
        if let Err(e) = idle {
            tracing::debug!(error = ?e, "the delivery log's builder keeps the normal priority");
        }
    }
}

impl Recorder {
    /// The recorder of the log in `store`, registering its metrics.
    pub(crate) fn new(
        cfg: &crate::config::Config,
        store: &crate::store::Store,
        metrics: &mut crate::telemetry::Metrics,
    ) -> anyhow::Result<Self> {
        let bounds = Bounds {
            keep: cfg.log.keep,
            max_size: cfg.log.max_size,
        };
        let log = DeliveryLog::open(store, bounds, &cfg.store.key_prefix)
            .map_err(|e| anyhow::anyhow!("the delivery log: {e}"))?;
        let m = LogMetrics::default();
        let reg = metrics.registry_mut();
        reg.register(
            "log_records",
            "Delivery log records: written, dropped_full (the recorder's queue was full), write_failed, not_recorded (only counted: refused requests over their budget, or every request with log.enabled = false)",
            m.records.clone(),
        );
        reg.register(
            "log_queued",
            "Delivery log records waiting to be written",
            m.queued.clone(),
        );
        for r in ["written", "dropped_full", "write_failed", "not_recorded"] {
            m.count(r, 0);
        }
        let (tx, rx) = mpsc::channel(CHANNEL);
        Ok(Self {
            log,
            cfg: cfg.log.clone(),
            tx,
            rx: Mutex::new(Some(rx)),
            queued_bytes: Arc::default(),
            counts: Mutex::default(),
            live: broadcast::channel(LIVE).0,
            buckets: Mutex::default(),
            metrics: m,
            closing: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// New records as they are written, for a live stream.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<DeliveryRecord>> {
        self.live.subscribe()
    }

    /// Starts the writer task (once); it ends when `stop` is cancelled, after writing
    /// what is queued.
    pub(crate) fn start(state: &Arc<AppState>, stop: tokio_util::sync::CancellationToken) {
        let Some(mut rx) = lock(&state.recorder.rx).take() else {
            return;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let rec = &state.recorder;
            // A write takes an eighth of max_size at most: the store trims the log
            // after each write, so the log never holds much more than max_size.
            let batch_bytes = BATCH_BYTES.min(rec.cfg.max_size / 8).max(1);
            let mut builder = Builder::start(&state);
            // With the log off, no record wakes the writer: it writes the counts
            // every COUNTS_EVERY instead.
            let idle_wait = if rec.cfg.enabled {
                RETAIN_EVERY
            } else {
                COUNTS_EVERY
            };
            let mut retained = Instant::now();
            loop {
                // Records already waiting are written at once; else the first one to
                // come starts a gathering of up to LINGER. The writer sleeps meanwhile
                // rather than waking for each record: a request's hand-over is then a
                // push onto the channel, with no wake-up.
                let (first, waited) = match rx.try_recv() {
                    Ok(r) => (Some(r), false),
                    Err(_) => (
                        tokio::select! {
                            r = rx.recv() => r,
                            () = stop.cancelled() => {
                                rec.closing.cancel();
                                rx.close();
                                rx.recv().await
                            }
                            () = tokio::time::sleep(idle_wait) => None,
                        },
                        true,
                    ),
                };
                let mut entries = Vec::new();
                let mut bytes = 0;
                if let Some(first) = first {
                    if waited && !stop.is_cancelled() {
                        tokio::select! {
                            () = tokio::time::sleep(LINGER) => {}
                            () = stop.cancelled() => {}
                        }
                    }
                    let mut next = Some(first);
                    while let Some(entry) = next {
                        bytes += entry.approx_size(rec.cfg.max_body);
                        entries.push(entry);
                        next = (entries.len() < BATCH_RECORDS && bytes < batch_bytes)
                            .then(|| rx.try_recv().ok())
                            .flatten();
                    }
                } else if rx.is_closed() && rx.is_empty() && stop.is_cancelled() {
                    // Stopping: the last counts, then done.
                    let batch = Batch {
                        counts: std::mem::take(&mut *lock(&rec.counts)),
                        ..Batch::default()
                    };
                    if !batch.counts.is_empty() {
                        rec.write(&state, batch).await;
                    }
                    return;
                }
                let (mut batch, counts) = if entries.is_empty() {
                    (Batch::default(), Counts::default())
                } else {
                    builder.build(&state, entries).await
                };
                rec.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                rec.metrics
                    .queued
                    .set(i64::try_from(rx.len()).unwrap_or(i64::MAX));
                batch.counts = std::mem::take(&mut *lock(&rec.counts));
                for (k, v) in counts {
                    *batch.counts.entry(k).or_default() += v;
                }
                let idle = batch.records.is_empty() && batch.counts.is_empty();
                if idle && retained.elapsed() < RETAIN_EVERY {
                    continue;
                }
                if idle {
                    retained = Instant::now();
                }
                rec.write(&state, batch).await;
            }
        });
    }

    async fn write(&self, state: &AppState, batch: Batch) {
        let routes = route_names(state);
        let records = batch.records.clone();
        let counts = batch.counts.clone();
        let n = records.len() as u64;
        match self.log.append(batch, &routes).await {
            Ok(()) => {
                self.metrics.count("written", n);
                for r in records {
                    let _ = self.live.send(r);
                }
            }
            Err(e) => {
                self.metrics.count("write_failed", n);
                // The counts are kept for the next write.
                let mut pending = lock(&self.counts);
                for (k, v) in counts {
                    *pending.entry(k).or_default() += v;
                }
                tracing::warn!(error = %e, records = n, "the delivery log could not be written; deliveries go on");
            }
        }
    }

    /// Records a delivery the gateway made itself (an operator's replay): counted
    /// and queued like any other, never rate-limited.
    pub(crate) fn push(&self, record: DeliveryRecord) {
        self.enqueue(Entry::Built(Box::new(record)));
    }

    fn enqueue(&self, entry: Entry) {
        let size = entry.approx_size(self.cfg.max_body);
        let dropped = if self.queued_bytes.fetch_add(size, Ordering::Relaxed) + size > QUEUED_BYTES
        {
            Some(entry)
        } else {
            self.tx
                .try_send(entry)
                .err()
                .map(mpsc::error::TrySendError::into_inner)
        };
        if let Some(entry) = dropped {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.metrics.count("dropped_full", 1);
            // Still counted in the overview.
            match entry {
                Entry::Raw(raw) => {
                    self.count_only(
                        &raw.done.route,
                        raw.done.outcome.as_str(),
                        raw.seen.received_at,
                    );
                }
                Entry::Built(r) => self.count_only(&r.route, &r.outcome, r.received_at),
            }
        }
    }

    /// Counts a request in the overview without recording it.
    fn count_only(&self, route: &str, outcome: &str, received_at: u64) {
        count_into(&mut lock(&self.counts), route, outcome, received_at);
    }

    /// What the log needs of a request before the pipeline takes it (no headers when
    /// the log is off: the request is only counted).
    pub(crate) fn seen<B>(&self, req: &Request<B>, peer: SocketAddr, received_at: u64) -> Seen {
        Seen {
            received_at,
            method: req.method().clone(),
            uri: req.uri().clone(),
            headers: if self.cfg.enabled {
                req.headers().clone()
            } else {
                http::HeaderMap::new()
            },
            peer,
        }
    }

    /// Whether a refused request from `client` on `route` may be recorded now.
    fn refused_budget(&self, route: &str, client: IpAddr) -> bool {
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= BUCKETS {
            buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.at).as_secs_f64() * REFUSED_PER_SEC < REFUSED_BURST
            });
            if buckets.len() >= BUCKETS {
                return false;
            }
        }
        let b = buckets.entry((route.to_owned(), client)).or_insert(Bucket {
            tokens: REFUSED_BURST,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * REFUSED_PER_SEC)
            .min(REFUSED_BURST);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Records one request to a route and gives the response back. Never waits, and
    /// copies nothing: the record is built by the writer.
    pub(crate) fn record(&self, state: &AppState, seen: Seen, done: Done, resp: Resp) -> Resp {
        if !self.cfg.enabled {
            self.count_only(&done.route, done.outcome.as_str(), seen.received_at);
            self.metrics.count("not_recorded", 1);
            return resp;
        }
        if done.event_id.is_none() {
            let trusted = &state.routing.load().server.trusted_proxies;
            let client = super::limits::client_ip(seen.peer.ip(), &seen.headers, trusted);
            if !self.refused_budget(&done.route, client) {
                self.count_only(&done.route, done.outcome.as_str(), seen.received_at);
                self.metrics.count("not_recorded", 1);
                return resp;
            }
        }
        let (parts, body) = resp.into_parts();
        let answer = full_bytes(body);
        self.enqueue(Entry::Raw(Box::new(Raw {
            seen,
            done,
            status: parts.status.as_u16(),
            answer: answer.clone(),
        })));
        Resp::from_parts(parts, http_body_util::Full::new(answer))
    }

    /// The record of what waited for the writer.
    fn build(&self, state: &AppState, entry: Entry) -> DeliveryRecord {
        let raw = match entry {
            Entry::Built(r) => return *r,
            Entry::Raw(raw) => *raw,
        };
        let Raw {
            seen,
            done,
            status,
            answer,
        } = raw;
        let keep_body = self.cfg.bodies == LogBodies::Verified && done.event_id.is_some();
        let body = done.body.as_ref().filter(|_| keep_body);
        // The body goes through the capture's redaction only where the preset has a
        // credential in it (redacted whole, then cut to max_body); else it is not copied.
        let in_body = done.provider.is_some_and(|p| {
            p.credential_locations().iter().any(|l| {
                matches!(
                    l,
                    crate::provider::catalogue::CredentialAt::Json(_)
                        | crate::provider::catalogue::CredentialAt::JsonEach(..)
                )
            })
        });
        let headers: Vec<(String, String)> = seen
            .headers
            .iter()
            .map(|(n, v)| {
                // Visible ASCII, nearly always: copied as is; else lossily.
                let v = v.to_str().map_or_else(
                    |_| String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    str::to_owned,
                );
                (n.as_str().to_owned(), v)
            })
            .collect();
        let path = seen.uri.path();
        let mut r = crate::replay::Replay::new(
            seen.method.as_str(),
            path,
            seen.uri.query(),
            headers,
            body.filter(|_| in_body).map(|b| &b[..]).unwrap_or_default(),
        );
        crate::capture::redact(&mut r, done.provider);
        let routing = state.routing();
        let signature_headers = routing_signature_headers(&routing, path);
        for (name, value) in &mut r.headers {
            if is_signature(name)
                || signature_headers
                    .iter()
                    .any(|h| h.as_str().eq_ignore_ascii_case(name))
            {
                *value = REDACTED.to_owned();
            }
        }
        let (text, base64, truncated) = match body {
            None => (None, false, false),
            Some(raw) => {
                let redacted;
                let full: &[u8] = if in_body {
                    redacted = r.body_bytes();
                    &redacted
                } else {
                    raw
                };
                self.body_text(full)
            }
        };
        let path = match &r.query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_owned(),
        };
        let answer = {
            let cut = &answer[..answer.len().min(ANSWER_BYTES)];
            (!cut.is_empty()).then(|| String::from_utf8_lossy(cut).into_owned())
        };
        let queue = done
            .queue
            .then(|| done.event_id.clone())
            .flatten()
            .map(|id| QueueLink {
                route: done.route.clone(),
                event_id: id,
            });
        DeliveryRecord {
            delivery_id: new_delivery_id(seen.received_at),
            received_at: seen.received_at,
            route: done.route,
            provider: done
                .provider
                .map(|p| p.name().to_owned())
                .unwrap_or_default(),
            peer: seen.peer.to_string(),
            method: seen.method.to_string(),
            path,
            headers: r.headers,
            body: text,
            body_base64: base64,
            body_bytes: done.body_len,
            body_truncated: truncated,
            event_id: done.event_id,
            provider_delivery_id: done.provider_delivery_id,
            event_type: done.event_type,
            outcome: done.outcome.as_str().to_owned(),
            status,
            answer,
            duration_us: done.duration_us,
            secret: done.secret_index.map(|i| format!("secrets[{i}]")),
            reason: done.reason,
            replay_of: None,
            queue,
        }
    }

    /// A body as the log keeps it: text (cut to `max_body`, at a character's end), or
    /// base64 when it is not UTF-8; and whether it was cut.
    fn body_text(&self, full: &[u8]) -> (Option<String>, bool, bool) {
        let cut = full.len() > self.cfg.max_body;
        let kept = &full[..full.len().min(self.cfg.max_body)];
        match std::str::from_utf8(kept) {
            Ok(t) => (Some(t.to_owned()), false, cut),
            // Cut inside a character: the valid prefix.
            Err(e) if cut && e.error_len().is_none() => (
                Some(String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned()),
                false,
                true,
            ),
            Err(_) => {
                use base64::Engine as _;
                (
                    Some(base64::engine::general_purpose::STANDARD.encode(kept)),
                    true,
                    cut,
                )
            }
        }
    }
}

/// Counts one request in the per-minute counts by route and outcome.
fn count_into(counts: &mut Counts, route: &str, outcome: &str, received_at: u64) {
    let minute = minute_of(received_at);
    // Few keys wait at once (routes × outcomes × minutes since the last write): a
    // scan finds one without copying the names, which a lookup by key would.
    let pending = counts
        .iter_mut()
        .find(|((r, o, m), _)| *m == minute && r == route && o == outcome);
    match pending {
        Some((_, n)) => *n += 1,
        None => {
            counts.insert((route.to_owned(), outcome.to_owned(), minute), 1);
        }
    }
}

impl AppState {
    /// What the delivery log counts against `log.max_size` now.
    pub async fn delivery_log_size(&self) -> Result<u64, crate::store::StoreError> {
        self.recorder.log.size(&route_names(self)).await
    }
}

/// What the pipeline found out about a request, for its record.
#[derive(Debug)]
pub(crate) struct Done {
    pub route: String,
    pub provider: Option<Preset>,
    pub outcome: Outcome,
    pub event_id: Option<String>,
    pub provider_delivery_id: Option<String>,
    pub event_type: Option<String>,
    pub secret_index: Option<usize>,
    /// The raw body, verified deliveries only.
    pub body: Option<Bytes>,
    /// The body's size, refused or not (0 when it was never read).
    pub body_len: u64,
    pub reason: Option<String>,
    pub duration_us: u64,
    /// Whether the route queues its deliveries.
    pub queue: bool,
}

/// The configured routes' names.
pub(crate) fn route_names(state: &AppState) -> Vec<String> {
    let mut names: Vec<String> = state
        .routing()
        .routes
        .values()
        .map(|r| r.name.clone())
        .collect();
    names.sort();
    names
}

/// The signature headers of a generic `hmac` route (its configured names).
fn routing_signature_headers<'a>(
    routing: &'a super::Routing,
    path: &str,
) -> &'a [http::HeaderName] {
    match routing.routes.get(path).map(|r| r.verifier.scheme()) {
        Some(crate::provider::Scheme::Hmac(s)) => &s.headers,
        _ => &[],
    }
}

/// Whether a header carries a signature or a credential by its name: providers'
/// signature headers all say so (`Stripe-Signature`, `X-Hub-Signature-256`,
/// `X-Shopify-Hmac-Sha256`, `PAYPAL-TRANSMISSION-SIG`, …).
fn is_signature(name: &str) -> bool {
    // Header names come lowercase from the parser: no copy unless one is not. Names
    // are short: a scan of each window is cheaper than a substring searcher.
    let n: std::borrow::Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
        name.to_ascii_lowercase().into()
    } else {
        name.into()
    };
    let n = n.as_bytes();
    [
        "signature",
        "-sig",
        "hmac",
        "token",
        "secret",
        "auth",
        "api-key",
        "apikey",
        "password",
    ]
    .iter()
    .any(|w| n.windows(w.len()).any(|x| x == w.as_bytes()))
}

fn approx_size(r: &DeliveryRecord) -> u64 {
    (r.body.as_ref().map_or(0, String::len)
        + r.answer.as_ref().map_or(0, String::len)
        + r.headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
        + 512) as u64
}

/// The bytes of a response body the gateway built (a `Full`, complete at once).
fn full_bytes(body: http_body_util::Full<Bytes>) -> Bytes {
    use futures_util::FutureExt as _;
    use http_body_util::BodyExt as _;
    body.collect()
        .now_or_never()
        .and_then(Result::ok)
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default()
}

/// Why a request was refused, in words an integrator can act on; never anything about
/// the keys or the signature expected.
pub(crate) fn reason(rejection: &Rejection, preset: Option<Preset>, id_source: &str) -> String {
    let provider = preset.map_or("the provider", Preset::name);
    match rejection {
        Rejection::NoEventId => format!(
            "no event ID in the delivery: the route reads it from {id_source}; set the route's event_id to where {provider} puts it"
        ),
        Rejection::Verify(e) => match e {
            VerifyError::MissingHeader(h) => format!(
                "the {h} header is missing: {provider} signs every delivery with it; is the sender {provider}, and is the route's provider right?"
            ),
            VerifyError::Malformed(h) if h == "body" => format!(
                "the body is not JSON, and the {provider} preset reads what it verifies from a JSON body"
            ),
            VerifyError::Malformed(h) => {
                format!("the {h} header is malformed: it is not in the form {provider} sends")
            }
            VerifyError::Duplicated(h) => {
                format!("the {h} header appears more than once; send it once")
            }
            VerifyError::BadTimestamp => {
                "the signed timestamp is not a timestamp (digits, or a date-time)".to_owned()
            }
            VerifyError::BadSignature => format!(
                "no configured secret matched the signature: check that the route's secrets hold the signing secret {provider} shows for this endpoint (a rotated secret goes in as a second entry), and that nothing between {provider} and the gateway changes the body"
            ),
            VerifyError::TimestampTooOld { by_ms } => format!(
                "the signed timestamp is {} older than the route's tolerance allows: a resent old delivery, or the sender's clock is behind (raise the route's tolerance to accept it)",
                human_ms(*by_ms)
            ),
            VerifyError::TimestampInFuture { by_ms } => format!(
                "the signed timestamp is {} further in the future than the route's tolerance allows: the sender's clock is ahead, or the gateway's is behind",
                human_ms(*by_ms)
            ),
            other => other.to_string(),
        },
    }
}

/// Why a request refused before or after verification was, for outcomes that are no
/// [`Rejection`].
pub(crate) fn outcome_reason(outcome: Outcome, max_body: usize) -> Option<String> {
    Some(match outcome {
        Outcome::MethodNotAllowed => "the route does not take this method".to_owned(),
        Outcome::TooLarge => format!("the body is larger than server.max_body ({max_body} bytes)"),
        Outcome::BodyTimeout => "the body did not arrive within server.body_timeout".to_owned(),
        Outcome::BadBody => "the body could not be read (the connection broke)".to_owned(),
        Outcome::RateLimited => {
            "this client's failed verifications on the route spent its budget; it refills within a minute".to_owned()
        }
        Outcome::ClientBusy => {
            "this client is sending more bodies at once than server.max_reads_per_client".to_owned()
        }
        Outcome::Overloaded => "the gateway was at server.max_in_flight deliveries".to_owned(),
        Outcome::RequestTimeout => "the request took longer than server.request_timeout".to_owned(),
        Outcome::Mismatch => {
            "this event ID was seen before with another body: the copy was refused".to_owned()
        }
        Outcome::HandshakeRefused => {
            "a set-up request handed over a signing secret the route does not take".to_owned()
        }
        _ => return None,
    })
}

/// `1.5 s`, `2 min 5 s`, `3 h 2 min`.
fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms} ms"),
        1..60 => format!("{}.{} s", s, (ms % 1000) / 100),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_counted_by_route_outcome_and_minute() {
        let at = |route: &str, outcome: &str, ms: u64| {
            let r: DeliveryRecord = serde_json::from_value(serde_json::json!({
                "delivery_id": new_delivery_id(ms), "received_at": ms, "route": route,
                "provider": "", "peer": "", "method": "POST", "path": "/", "headers": [],
                "body_base64": false, "body_bytes": 0, "body_truncated": false, "outcome": outcome,
                "status": 200, "duration_us": 0,
            }))
            .expect("a record");
            Arc::new(r)
        };
        let minute = 1_764_590_040_000;
        let records = [
            at("a", "forwarded", minute),
            at("a", "forwarded", minute + 59_999),
            at("a", "forwarded", minute + 60_000),
            at("a", "duplicate", minute),
            at("b", "forwarded", minute + 1),
        ];
        let mut counts = Counts::default();
        for r in &records {
            count_into(&mut counts, &r.route, &r.outcome, r.received_at);
        }
        let key = |route: &str, outcome: &str, ms: u64| {
            (route.to_owned(), outcome.to_owned(), minute_of(ms))
        };
        assert_eq!(counts.len(), 4, "{counts:?}");
        assert_eq!(counts[&key("a", "forwarded", minute)], 2);
        assert_eq!(counts[&key("a", "forwarded", minute + 60_000)], 1);
        assert_eq!(counts[&key("a", "duplicate", minute)], 1);
        assert_eq!(counts[&key("b", "forwarded", minute)], 1);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_builder_thread_runs_in_the_background() {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, thread_schedule_policy,
        };
        let policy = std::thread::spawn(|| {
            background();
            thread_schedule_policy().expect("the policy")
        })
        .join()
        .expect("the thread");
        assert_eq!(
            policy,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
        );
        // The calling thread is not touched.
        assert_eq!(
            thread_schedule_policy().expect("the policy"),
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other)
        );
    }

    #[test]
    fn reasons_say_what_to_fix_and_nothing_about_keys() {
        let stripe = Preset::parse("stripe");
        let missing = reason(
            &Rejection::Verify(VerifyError::MissingHeader("stripe-signature".into())),
            stripe,
            "json:/id",
        );
        assert!(
            missing.contains("stripe-signature header is missing"),
            "{missing}"
        );
        let old = reason(
            &Rejection::Verify(VerifyError::TimestampTooOld { by_ms: 125_000 }),
            stripe,
            "json:/id",
        );
        assert!(old.contains("2 min 5 s older"), "{old}");
        let bad = reason(
            &Rejection::Verify(VerifyError::BadSignature),
            stripe,
            "json:/id",
        );
        assert!(bad.contains("no configured secret matched"), "{bad}");
        let body = reason(
            &Rejection::Verify(VerifyError::Malformed("body".into())),
            stripe,
            "json:/id",
        );
        assert!(body.contains("not JSON"), "{body}");
    }

    #[test]
    fn signature_headers_are_known_by_name() {
        for h in [
            "Stripe-Signature",
            "x-hub-signature-256",
            "X-Shopify-Hmac-Sha256",
            "paypal-transmission-sig",
            "webhook-signature",
            "x-gitlab-token",
        ] {
            assert!(is_signature(h), "{h}");
        }
        for h in ["content-type", "user-agent", "x-github-event"] {
            assert!(!is_signature(h), "{h}");
        }
    }
}
