//! The delivery log's recorder: every request to a route becomes a record, written
//! on the request's path as one buffer ([`Stored`]: a copy of what the log keeps, the
//! credentials already redacted) and handed to a bounded channel; a background task
//! writes them in batches to the store's log (`store/log/`) and then tells the live
//! streams (`GET /deliveries/stream`). Recording never refuses or delays a delivery:
//! a full channel or a failed write drops records, and `hookgate_log_records_total`
//! counts them. Every request is counted in the overview's per-minute counts, recorded
//! or not.
//!
//! The record is a copy, not the request's own parts: those hold the connection's
//! read buffer, which the connection could not reuse while a record waited for the
//! writer. The request's record (`observe::RequestRecord`) holds the one copy of its
//! path, query and headers, made before the pipeline takes the request;
//! [`Recorder::record`] writes the delivery log's record from it when the answer is
//! known.
//!
//! Refused requests (anyone can send them) and copies of a verified delivery
//! (`duplicate`, `in_flight`, `mismatch`: anyone holding one signed capture can send
//! them) are recorded without their body, at most [`REFUSED_BURST`] at once and
//! [`REFUSED_PER_SEC`] a second per route and client (a token bucket; an IPv6 client
//! by its /64, see [`client_key`]); beyond that they are only counted
//! (`not_recorded`), so an outsider cannot fill the log, push the genuine records out
//! of it, or slow the store. A copy's body is the accepted delivery's, which that
//! record keeps. Every record keeps [`HEADER_BYTES`] of header names and values at
//! most; the headers beyond are dropped, and one `[dropped]` entry says how many.
//!
//! Requests for no route (404: a provider set up with a wrong path, or a scanner)
//! are recorded under [`UNROUTED`], with their method, path (no query: it may carry a
//! token, and no route says which), peer, time and a few headers that name the sender
//! ([`UNROUTED_HEADERS`]), never a body: within the refusals' budget per client, and
//! within [`UnroutedBudget`] across all clients, so that they hold at most about a
//! 16th of the log (`UNROUTED_SHARE`) whatever their rate.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{broadcast, mpsc};

use crate::client::client_key;
use crate::config::{LogBodies, LogConfig};
use crate::observe::metrics::ResultLabel;
use crate::observe::redact::REDACTED;
use crate::observe::{Ending, Parts, RequestRecord};
use crate::outcome::Outcome;
use crate::provider::Preset;
use crate::state::Routing;
use crate::store::log::{
    Appended, Batch, Bounds, Counts, DeliveryLog, DeliveryRecord, ENTRY_OVERHEAD, NotRecorded, Raw,
    Stored, UNROUTED, UNROUTED_SHARE, View, minute_of, new_delivery_id,
};

/// How long a batch waits for the preparing thread before the writer takes it back
/// and prepares it itself (see [`Preparer`]).
const PREPARER_PATIENCE: Duration = Duration::from_millis(250);
/// After a batch was taken back, how long the writer prepares batches itself without
/// offering them to the thread (the machine is busy: its CPU time is the
/// deliveries', and the log must keep up).
const PREPARER_BUSY: Duration = Duration::from_secs(2);

/// Records waiting for the writer at most: a tenth of a second's worth at the rates
/// one gateway takes.
const CHANNEL: usize = 16_384;
/// Bytes of records waiting for the writer at most (bodies make records large): part
/// of the log's bound on the gateway's memory (docs/performance.md). The writer starts
/// a write as soon as a write's worth ([`BATCH_BYTES`]) waits, so at 64 KiB bodies
/// this holds several writes' worth, not a whole [`LINGER`].
const QUEUED_BYTES: u64 = 16 << 20;
/// Bytes counted per waiting record besides its buffer.
const QUEUED_OVERHEAD: u64 = 64;
/// Records or bytes one write takes at most. On the disk store a write is a frame and
/// a transaction under the file's write lock: up to a tenth of a second's records
/// (2 048) go in one. Elsewhere 2 048 measured worse than 256 on the memory row
/// (docs/performance.md, "The delivery log's cost").
const BATCH_RECORDS: usize = 256;
const BATCH_RECORDS_FRAMED: usize = 2_048;
const BATCH_BYTES: u64 = 4 << 20;
/// How long the writer gathers records after the first before it writes them: one
/// write a tenth of a second at most under load, rather than one per request. On the
/// disk store each write takes the file's writer lock that claims need too.
const LINGER: Duration = Duration::from_millis(100);
/// How often an idle log is trimmed to `keep`.
const RETAIN_EVERY: Duration = Duration::from_secs(10);
/// How often the counts are written when the log is off (`log.enabled = false`).
const COUNTS_EVERY: Duration = Duration::from_secs(1);
/// Refused requests and copies recorded per route and client: a burst, then this
/// many a second.
pub(crate) const REFUSED_BURST: f64 = 20.0;
pub(crate) const REFUSED_PER_SEC: f64 = 2.0;
/// Clients tracked for that budget at most; beyond, the full buckets are forgotten,
/// and while the table holds only clients still spending theirs, every other client
/// shares one bucket per route.
const BUCKETS: usize = 10_000;
/// How often a full table of buckets is swept of the full ones at most (a sweep
/// reads every entry).
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Bytes of the gateway's answer kept.
const ANSWER_BYTES: usize = 4 << 10;
/// Bytes of header names and values a record keeps at most: a provider's headers
/// are 1 to 3 KiB, and `server.max_header_bytes` (16 KiB by default) bounds a whole
/// request head.
pub(crate) const HEADER_BYTES: usize = 8 << 10;
/// The name of the entry that stands for the headers a record dropped: not a valid
/// header name, so no request can send one, and a replay never sends it.
pub(crate) const DROPPED_HEADERS: &str = "[dropped]";
/// The headers a record of a request for no route keeps (each cut at
/// [`UNROUTED_VALUE`] bytes): enough to tell which provider sent it.
pub(crate) const UNROUTED_HEADERS: [&str; 3] = ["user-agent", "content-type", "content-length"];
/// Bytes of a header value a record of a request for no route keeps at most.
const UNROUTED_VALUE: usize = 256;
/// Bytes of the path a record of a request for no route keeps at most.
const UNROUTED_PATH: usize = 1024;
/// Why a request for no route was refused, in the log's words.
const UNROUTED_REASON: &str = "no route has this path: compare it with the routes' paths (the inspector's Unrouted page shows both)";

/// Live streams' backlog, in writes: each write is one message, whatever its size
/// (up to [`BATCH_RECORDS_FRAMED`] records), so one write never overflows it; a
/// stream more than this many writes behind skips records and says how many.
const LIVE_WRITES: usize = 16;

/// The recorder's metrics (`hookgate_log_*`).
#[derive(Debug, Clone, Default)]
struct LogMetrics {
    /// `written`, `dropped_full` (channel full), `write_failed`, `not_recorded`
    /// (only counted: refused requests and copies over their budget, or every
    /// request with `log.enabled = false`).
    records: Family<ResultLabel, Counter>,
    /// Records the log did not write to stay within the store's budget, by reason
    /// (`disk_reserve`, `redis_memory`).
    not_recorded: Family<ReasonLabel, Counter>,
    queued: Gauge,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
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

impl Bucket {
    fn full(now: Instant) -> Self {
        Self {
            tokens: REFUSED_BURST,
            at: now,
        }
    }

    /// The tokens it holds at `now`.
    fn refilled(&self, now: Instant) -> f64 {
        (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * REFUSED_PER_SEC)
            .min(REFUSED_BURST)
    }

    /// Takes a token if it holds one at `now`.
    fn take(&mut self, now: Instant) -> bool {
        self.tokens = self.refilled(now);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The budget of records for what anyone can send many of (refusals, copies): a
/// bucket per route and client key.
#[derive(Debug, Default)]
struct Budgets {
    buckets: HashMap<(String, IpAddr), Bucket>,
    /// Per route, the bucket every client shares while `buckets` is full of clients
    /// still spending theirs (there are as many as routes).
    overflow: HashMap<String, Bucket>,
    /// When the table was last swept of its full buckets.
    swept: Option<Instant>,
}

impl Budgets {
    /// Whether a request from `client` on `route` may be recorded at `now`.
    fn take(&mut self, route: &str, client: IpAddr, now: Instant) -> bool {
        let key = (route.to_owned(), client_key(client));
        if let Some(b) = self.buckets.get_mut(&key) {
            return b.take(now);
        }
        if self.buckets.len() >= BUCKETS {
            if self
                .swept
                .is_none_or(|t| now.saturating_duration_since(t) >= SWEEP_EVERY)
            {
                self.swept = Some(now);
                self.buckets.retain(|_, b| b.refilled(now) < REFUSED_BURST);
            }
            if self.buckets.len() >= BUCKETS {
                return self
                    .overflow
                    .entry(key.0)
                    .or_insert_with(|| Bucket::full(now))
                    .take(now);
            }
        }
        self.buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(now))
            .take(now)
    }
}

/// The bytes of records of requests for no route the recorder may write, across all
/// clients: a token bucket of bytes that holds a 64th of `log.max_size` and refills a
/// 16th ([`UNROUTED_SHARE`]) per `log.keep`. Records older than `keep` are gone, so such
/// records hold at most `max_size / 64 + max_size / 16` (under 8 %) of the log at any
/// time, however many requests for no route come; beyond, they are only counted.
#[derive(Debug)]
struct UnroutedBudget {
    tokens: f64,
    at: Instant,
    burst: f64,
    per_sec: f64,
}

impl UnroutedBudget {
    #[expect(
        clippy::cast_precision_loss,
        reason = "a byte budget: a rounding of a few bytes in 2^53 changes nothing"
    )]
    fn new(cfg: &LogConfig, now: Instant) -> Self {
        let burst = (cfg.max_size / 64) as f64;
        let keep = cfg.keep.as_secs_f64().max(1.0);
        Self {
            tokens: burst,
            at: now,
            burst,
            per_sec: (cfg.max_size / UNROUTED_SHARE) as f64 / keep,
        }
    }

    /// Takes `bytes` if the bucket holds them at `now`.
    #[expect(
        clippy::cast_precision_loss,
        reason = "a record's size, far below 2^53"
    )]
    fn take(&mut self, bytes: u64, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        let bytes = bytes as f64;
        if self.tokens >= bytes {
            self.tokens -= bytes;
            true
        } else {
            false
        }
    }
}

/// Whether an outcome is that of a copy of a delivery already verified: anyone
/// holding one signed capture can send as many as they like. Not `filtered`: that is
/// the event's first delivery (its ID is claimed and completed at once, so its copies
/// are answered `duplicate`), and its record is the only one with its body.
fn is_copy(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Duplicate | Outcome::InFlight | Outcome::Mismatch
    )
}

/// One write's records, as the live streams get them.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    /// How many records were written before these: a stream that skipped writes
    /// tells how many records it missed.
    pub(crate) first: u64,
    pub(crate) records: Arc<[Stored]>,
}

/// The delivery log's writer side, shared by all requests.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) log: DeliveryLog,
    pub(crate) cfg: LogConfig,
    tx: mpsc::Sender<Stored>,
    rx: Mutex<Option<mpsc::Receiver<Stored>>>,
    queued_bytes: Arc<AtomicU64>,
    /// Woken when a write's worth of bytes ([`BATCH_BYTES`]) waits: the writer ends
    /// its [`LINGER`] early.
    ready: tokio::sync::Notify,
    /// Requests counted since the last write, by route, outcome and minute.
    counts: Mutex<Counts>,
    live: broadcast::Sender<Written>,
    /// Records written so far (numbers the live streams' writes).
    written: AtomicU64,
    budgets: Mutex<Budgets>,
    /// The bytes of records of requests for no route, across all clients.
    unrouted: Mutex<UnroutedBudget>,
    metrics: LogMetrics,
    /// Cancelled when the gateway stops: live streams end.
    pub(crate) closing: tokio_util::sync::CancellationToken,
    /// Set while the next "stops recording" warning is due (once per stop, again
    /// after a write succeeded).
    warn_next: std::sync::atomic::AtomicBool,
    /// The routes (swapped whole on reload): the log's route names, trusted proxies,
    /// a generic route's signature headers.
    routing: Arc<arc_swap::ArcSwap<Routing>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the writer hands the preparing thread: a batch, and where it goes back.
type Job = (Batch, tokio::sync::oneshot::Sender<Batch>);

/// The thread that prepares batches for the store (encodes and compresses the disk
/// store's frame). On Linux it is a `SCHED_IDLE` thread: it runs on CPU time the
/// deliveries leave, and a delivery's thread that wakes takes the core from it at
/// once. So that a saturated machine cannot starve the log, a batch the thread has
/// not started within [`PREPARER_PATIENCE`] is taken back and prepared by the writer
/// task, and so are the batches of the next [`PREPARER_BUSY`]; records are dropped
/// (and counted) only when the recorder's channel is full. The store's transaction
/// runs at normal priority (it holds the file's write lock).
struct Preparer {
    /// At most one job: the writer waits for each batch before it gathers the next.
    job: Arc<(Mutex<Option<Job>>, std::sync::Condvar)>,
    /// When a batch was last taken back: the machine is busy, and the writer
    /// prepares batches itself until [`PREPARER_BUSY`] has passed.
    busy_since: Option<Instant>,
}

impl Preparer {
    fn start(rec: &Arc<Recorder>) -> Self {
        let job: Arc<(Mutex<Option<Job>>, std::sync::Condvar)> = Arc::default();
        let shared = Arc::downgrade(&job);
        let rec = rec.clone();
        let started = std::thread::Builder::new()
            .name("hookgate-log".into())
            .spawn(move || {
                background();
                // Until the writer is gone (its handle holds the only other count).
                while let Some(job) = shared.upgrade() {
                    let next = Self::next(&job);
                    drop(job);
                    if let Some((mut batch, reply)) = next {
                        rec.log.prepare(&mut batch);
                        let _ = reply.send(batch);
                    }
                }
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "the delivery log's preparing thread did not start; the writer prepares its batches");
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

    /// `batch` prepared for the store, on the preparing thread, or here in the
    /// writer task if the thread has not taken it within [`PREPARER_PATIENCE`].
    async fn prepare(&mut self, log: &DeliveryLog, mut batch: Batch) -> Batch {
        if !log.prepares() || self.busy_since.is_some_and(|t| t.elapsed() < PREPARER_BUSY) {
            log.prepare(&mut batch);
            return batch;
        }
        let (reply, prepared) = tokio::sync::oneshot::channel();
        *lock(&self.job.0) = Some((batch, reply));
        self.job.1.notify_one();
        let mut prepared = prepared;
        if let Ok(Ok(batch)) = tokio::time::timeout(PREPARER_PATIENCE, &mut prepared).await {
            return batch;
        }
        let waiting = lock(&self.job.0).take();
        match waiting {
            Some((mut batch, _)) => {
                self.busy_since = Some(Instant::now());
                log.prepare(&mut batch);
                batch
            }
            // The thread has it: it is running.
            None => prepared.await.unwrap_or_default(),
        }
    }
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
        metrics: &mut crate::observe::metrics::Metrics,
        routing: Arc<arc_swap::ArcSwap<Routing>>,
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
            "Delivery log records: written, dropped_full (the recorder's queue was full), write_failed, not_recorded (only counted: refused requests and copies over their budget, or every request with log.enabled = false)",
            m.records.clone(),
        );
        reg.register(
            "log_not_recorded",
            "Delivery log records not written to keep the store's budget, by reason: disk_reserve (the volume is below twice store.min_free_space), redis_memory (Redis is past 80 % of maxmemory)",
            m.not_recorded.clone(),
        );
        for reason in [NotRecorded::DiskReserve, NotRecorded::RedisMemory] {
            m.not_recorded
                .get_or_create(&ReasonLabel {
                    reason: reason.reason().to_owned(),
                })
                .inc_by(0);
        }
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
            ready: tokio::sync::Notify::new(),
            counts: Mutex::default(),
            live: broadcast::channel(LIVE_WRITES).0,
            written: AtomicU64::new(0),
            budgets: Mutex::default(),
            unrouted: Mutex::new(UnroutedBudget::new(&cfg.log, Instant::now())),
            metrics: m,
            closing: tokio_util::sync::CancellationToken::new(),
            warn_next: std::sync::atomic::AtomicBool::new(true),
            routing,
        })
    }

    /// The configured routes' names, and [`UNROUTED`] (the log keeps requests for no
    /// route under that name).
    pub(crate) fn route_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .routing
            .load()
            .routes
            .values()
            .map(|r| r.name.clone())
            .collect();
        names.push(UNROUTED.to_owned());
        names.sort();
        names
    }

    /// New records as they are written, for a live stream.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Written> {
        self.live.subscribe()
    }

    /// Starts the writer task (once); it ends when `stop` is cancelled, after writing
    /// what is queued.
    pub(crate) fn start(self: &Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let Some(mut rx) = lock(&self.rx).take() else {
            return;
        };
        let rec = self.clone();
        tokio::spawn(async move {
            if rec.cfg.enabled
                && let Some(warning) = rec.log.budget_warning().await
            {
                tracing::warn!("{warning}");
            }
            // A write takes an eighth of max_size at most: the store trims the log
            // after each write, so the log never holds much more than max_size.
            let batch_bytes = BATCH_BYTES.min(rec.cfg.max_size / 8).max(1);
            let batch_records = if rec.log.prepares() {
                BATCH_RECORDS_FRAMED
            } else {
                BATCH_RECORDS
            };
            let mut preparer = Preparer::start(&rec);
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
                let mut records = Vec::new();
                let mut bytes = 0;
                if let Some(first) = first {
                    if waited && !stop.is_cancelled() {
                        tokio::select! {
                            () = tokio::time::sleep(LINGER) => {}
                            () = rec.ready.notified() => {}
                            () = stop.cancelled() => {}
                        }
                    }
                    let mut next = Some(first);
                    while let Some(record) = next {
                        bytes += queued_size(&record);
                        records.push(record);
                        next = (records.len() < batch_records && bytes < batch_bytes)
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
                        rec.write(batch).await;
                    }
                    return;
                }
                let mut batch = Batch {
                    records,
                    ..Batch::default()
                };
                if !batch.records.is_empty() {
                    batch = preparer.prepare(&rec.log, batch).await;
                }
                rec.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
                rec.metrics
                    .queued
                    .set(i64::try_from(rx.len()).unwrap_or(i64::MAX));
                // The requests counted until now: those of these records and more.
                batch.counts = std::mem::take(&mut *lock(&rec.counts));
                let idle = batch.records.is_empty() && batch.counts.is_empty();
                if idle && retained.elapsed() < RETAIN_EVERY {
                    continue;
                }
                if idle {
                    retained = Instant::now();
                }
                rec.write(batch).await;
            }
        });
    }

    async fn write(&self, batch: Batch) {
        let routes = self.route_names();
        // Handles for the live streams, if one is open.
        let live: Option<Arc<[Stored]>> = (self.live.receiver_count() > 0
            && !batch.records.is_empty())
        .then(|| batch.records.clone().into());
        let counts = batch.counts.clone();
        let n = batch.records.len() as u64;
        match self.log.append(batch, &routes).await {
            Ok(Appended::Written) => {
                self.metrics.count("written", n);
                self.warn_next.store(true, Ordering::Relaxed);
                let first = self.written.fetch_add(n, Ordering::Relaxed);
                if let Some(records) = live {
                    let _ = self.live.send(Written { first, records });
                }
            }
            Ok(Appended::NotRecorded(why)) => {
                // The log stays within the store's budget: these records are only
                // counted (the counts are kept for the next write).
                self.metrics.count("not_recorded", n);
                self.metrics
                    .not_recorded
                    .get_or_create(&ReasonLabel {
                        reason: why.reason().to_owned(),
                    })
                    .inc_by(n);
                let mut pending = lock(&self.counts);
                for (k, v) in counts {
                    *pending.entry(k).or_default() += v;
                }
                if n > 0 && self.warn_next.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        reason = why.reason(),
                        "the delivery log stops recording to keep the store's budget (the disk's reserve, or Redis's memory); deliveries go on"
                    );
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
    pub(crate) fn push(&self, record: &DeliveryRecord) {
        self.count_only(&record.route, &record.outcome, record.received_at);
        if self.cfg.enabled {
            self.enqueue(Stored::from_record(record));
        }
    }

    /// Hands a record to the writer, or drops it (and counts that) when the writer
    /// is too far behind.
    fn enqueue(&self, record: Stored) {
        let size = queued_size(&record);
        let before = self.queued_bytes.fetch_add(size, Ordering::Relaxed);
        let full = before + size > QUEUED_BYTES || self.tx.try_send(record).is_err();
        if full {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.metrics.count("dropped_full", 1);
        } else if before < BATCH_BYTES && before + size >= BATCH_BYTES {
            self.ready.notify_one();
        }
    }

    /// Counts a request in the overview.
    fn count_only(&self, route: &str, outcome: &str, received_at: u64) {
        count_into(&mut lock(&self.counts), route, outcome, received_at);
    }

    /// Whether a refused request or a copy from `client` on `route` may be recorded
    /// now.
    fn refused_budget(&self, route: &str, client: IpAddr) -> bool {
        lock(&self.budgets).take(route, client, Instant::now())
    }

    /// Records one request to a route, with its answer (`status`, the body's bytes).
    /// Never waits: the record is written to the store by the writer.
    pub(crate) fn record(&self, rec: &RequestRecord, end: &Ending<'_>) {
        let outcome = end.outcome;
        let route = rec.route.as_deref().unwrap_or_default();
        self.count_only(route, outcome.as_str(), rec.received_at);
        let budgeted = rec.event_id.is_none() || is_copy(outcome);
        let recorded = self.cfg.enabled && (!budgeted || self.refused_budget(route, rec.client));
        if !recorded {
            self.metrics.count("not_recorded", 1);
            return;
        }
        if let Some(record) = self.encode(rec, end) {
            self.enqueue(record);
        }
    }

    /// Records one request for no route (404): counted always; recorded (method, path,
    /// peer, time, a few headers, no body) within the refusals' budget of its client
    /// and the [`UnroutedBudget`].
    pub(crate) fn record_unrouted(&self, rec: &RequestRecord, end: &Ending<'_>) {
        self.count_only(UNROUTED, end.outcome.as_str(), rec.received_at);
        let record = (self.cfg.enabled && self.refused_budget(UNROUTED, rec.client))
            .then(|| self.encode_unrouted(rec, end))
            .flatten()
            .filter(|r| lock(&self.unrouted).take(r.len() as u64 + ENTRY_OVERHEAD, Instant::now()));
        match record {
            Some(r) => self.enqueue(r),
            None => self.metrics.count("not_recorded", 1),
        }
    }

    /// The record of a request for no route: no query, no body, only
    /// [`UNROUTED_HEADERS`].
    fn encode_unrouted(&self, rec: &RequestRecord, end: &Ending<'_>) -> Option<Stored> {
        let Parts { path, headers, .. } = rec.head()?.parts()?;
        let headers: Vec<(&str, &str)> = headers
            .into_iter()
            .filter(|(n, _)| UNROUTED_HEADERS.contains(n))
            .map(|(n, v)| (n, cut(v, UNROUTED_VALUE)))
            .collect();
        let delivery_id = new_delivery_id(rec.received_at);
        let peer = rec.peer.to_string();
        Some(Stored::encode(&View {
            delivery_id: &delivery_id,
            received_at: rec.received_at,
            route: UNROUTED,
            provider: "",
            peer: &peer,
            method: rec.method.as_str(),
            path: cut(path, UNROUTED_PATH),
            query: None,
            headers,
            body: None,
            body_bytes: 0,
            body_truncated: false,
            event_id: None,
            provider_delivery_id: None,
            event_type: None,
            outcome: end.outcome.as_str(),
            status: end.status,
            answer: None,
            duration_us: end.duration_us,
            secret: None,
            reason: Some(UNROUTED_REASON),
            replay_of: None,
            queue: None,
        }))
    }

    /// The record of a request: the copy of its head (headers capped at
    /// [`HEADER_BYTES`]), with the credentials and signatures redacted, and what the
    /// pipeline found out.
    fn encode(&self, rec: &RequestRecord, end: &Ending<'_>) -> Option<Stored> {
        let Ending {
            outcome,
            status,
            answer,
            duration_us,
        } = *end;
        let Parts {
            path,
            query,
            headers,
        } = rec.head()?.parts()?;
        let route = rec.route.as_deref().unwrap_or_default();
        let mut dropped = String::new();
        let mut headers = capped(headers.into_iter(), &mut dropped);
        let preset = rec.provider;
        let routing = self.routing.load();
        let signature_headers = routing_signature_headers(&routing, path);
        let hide = crate::observe::redact::Hide::CredentialsAndSignatures;
        for (name, value) in &mut headers {
            if (*name != DROPPED_HEADERS && crate::observe::redact::header(name, preset, hide))
                || signature_headers
                    .iter()
                    .any(|h| h.as_str().eq_ignore_ascii_case(name))
            {
                *value = REDACTED;
            }
        }
        let query = query.map(|q| crate::observe::redact::query(q, preset, hide));
        // A refused request's body is not kept; a copy's is the accepted delivery's:
        // that record keeps it.
        let verified = rec.event_id.is_some();
        let keep_body = self.cfg.bodies == LogBodies::Verified && verified && !is_copy(outcome);
        let full = rec.body.as_deref().filter(|_| keep_body);
        // Redacted (a copy) only where the preset has a credential in the body.
        let redacted = full.and_then(|b| crate::observe::redact::redact_body(b, preset));
        let full = redacted.as_deref().or(full);
        let body = full.map(|b| &b[..b.len().min(self.cfg.max_body)]);
        let answer = &answer[..answer.len().min(ANSWER_BYTES)];
        let delivery_id = new_delivery_id(rec.received_at);
        let peer = rec.peer.to_string();
        let secret = rec.secret_index.map(|i| format!("secrets[{i}]"));
        Some(Stored::encode(&View {
            delivery_id: &delivery_id,
            received_at: rec.received_at,
            route,
            provider: preset.map_or("", Preset::name),
            peer: &peer,
            method: rec.method.as_str(),
            path,
            query: query.as_deref(),
            headers,
            body: body.map(Raw),
            body_bytes: rec.body.as_ref().map_or(0, |b| b.len() as u64),
            body_truncated: full.is_some_and(|b| b.len() > self.cfg.max_body),
            event_id: rec.event_id.as_deref(),
            provider_delivery_id: rec.provider_delivery_id.as_deref(),
            event_type: rec.event_type.as_deref(),
            outcome: outcome.as_str(),
            status,
            answer: (!answer.is_empty()).then_some(Raw(answer)),
            duration_us,
            secret: secret.as_deref(),
            reason: rec.reason.as_deref(),
            replay_of: None,
            queue: rec
                .event_id
                .as_deref()
                .filter(|_| rec.queue)
                .map(|id| (route, id)),
        }))
    }
}

/// `s` cut to at most `max` bytes, at a character's boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a waiting record counts against [`QUEUED_BYTES`].
fn queued_size(r: &Stored) -> u64 {
    r.len() as u64 + QUEUED_OVERHEAD
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

/// The signature headers of a generic `hmac` route (its configured names).
fn routing_signature_headers<'a>(routing: &'a Routing, path: &str) -> &'a [http::HeaderName] {
    let Some(route) = routing.routes.get(path) else {
        return &[];
    };
    match route.verifier.scheme() {
        crate::provider::Scheme::Hmac(s) => &s.headers,
        // A token route's header (`auth_header` may name any) carries the credential.
        _ => route
            .verifier
            .credential_header()
            .map(std::slice::from_ref)
            .unwrap_or_default(),
    }
}

/// The headers a record keeps: in order, each that still fits in [`HEADER_BYTES`]
/// of names and values; when some do not, a last [`DROPPED_HEADERS`] entry whose
/// value (written into `dropped`) says how many and how large.
fn capped<'a>(
    all: impl Iterator<Item = (&'a str, &'a str)>,
    dropped: &'a mut String,
) -> Vec<(&'a str, &'a str)> {
    let mut kept = Vec::new();
    let (mut used, mut n, mut bytes) = (0usize, 0usize, 0usize);
    for (name, value) in all {
        let size = name.len() + value.len();
        if used + size <= HEADER_BYTES {
            used += size;
            kept.push((name, value));
        } else {
            n += 1;
            bytes += size;
        }
    }
    if n > 0 {
        *dropped = format!(
            "{n} more header{} ({bytes} bytes) not recorded: a record keeps {} KiB of headers",
            if n == 1 { "" } else { "s" },
            HEADER_BYTES >> 10
        );
        kept.push((DROPPED_HEADERS, dropped.as_str()));
    }
    kept
}

#[cfg(test)]
mod tests;
