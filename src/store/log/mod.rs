//! The delivery log: one record per request to a route, kept in the configured store
//! for `log.keep` and within `log.max_size`, oldest first out.
//!
//! ```text
//! append(batch)            records + per-minute counts; then the oldest records go
//!                          until the log is within max_size and keep
//! list(query)              newest first, filtered, paged by an opaque cursor
//! get(id)                  one record
//! counts(since)            requests per route and outcome since a minute
//! buckets(route, width)    one route's requests per outcome and bucket (a minute for
//!                          the last hour, ten minutes for the last day): the charts
//! retain(now)              the bounds enforced with nothing appended (an idle log)
//! ```
//!
//! Three backends, one file each: `memory.rs` (an ordered ring in the process),
//! `disk.rs` (tables in the disk store's database file: each write's records in one
//! compressed frame, and an index of delivery IDs) and `redis.rs` (per route a sorted
//! index, a hash of records, a byte count and a hash of counts: one cluster slot
//! each). Record IDs sort by time, so every backend lists its records in ID order and
//! drops from the low end (on disk, a frame at a time).
//!
//! Every backend keeps a record as one buffer ([`Stored`], `record.rs`), written on
//! the request's path. What counts against `max_size` is what is stored (the buffers:
//! in memory as they are, compressed one by one in Redis, a write's together on disk)
//! plus bytes for the structures that hold them ([`ENTRY_OVERHEAD`] a record in Redis,
//! `memory.rs` and `disk.rs` say theirs); the store's own overhead beyond that is the
//! margin docs/operations.md states.

mod disk;
mod memory;
mod record;
mod redis;

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

pub use self::disk::DiskLog;
pub(crate) use self::disk::max_size_warning;
pub use self::memory::MemoryLog;
pub use self::record::{Raw, Stored, View};
pub use self::redis::RedisLog;

/// The name requests for no route are recorded under (outcome `no_route`): no
/// route's name can hold `#` (the config refuses it), so none is taken for it. They are
/// kept apart from the routes' records within [`UNROUTED_SHARE`] of the log.
pub const UNROUTED: &str = "#unrouted";

/// The share of `log.max_size` the records of requests for no route may hold (a
/// 16th): in Redis their own key space's bound (the routes divide the rest); on every
/// store, the bytes the recorder writes of them per `log.keep` (`recorder.rs`). A
/// flood of 404s (anyone can send them: a scanner's) never crowds out the routes'
/// records.
pub const UNROUTED_SHARE: u64 = 16;

/// Bytes counted per record besides its stored form: the index entry, the map node, the
/// allocation slack of the structures that hold it.
pub const ENTRY_OVERHEAD: u64 = 256;

/// The tag of a record in Redis that is a [`Stored`] record, LZ4-compressed (1 was a
/// development form, JSON; it is not read).
const LZ4_STORED: u8 = 2;

/// The most a stored record or frame may decode to: the length comes from the store,
/// and a damaged one must not make the reader allocate without limit. A frame holds
/// at most a write's worth of records (4 MiB of bodies, JSON-escaped).
const MAX_DECODED: u32 = 1 << 30;

/// Appends `json` compressed to `out`: its length (4 bytes, little-endian), then an
/// LZ4 block. Webhook bodies are JSON text, and records' field names and headers
/// repeat, so what the log writes and keeps is a fraction of the JSON.
fn pack_into(json: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.resize(
        start + 4 + lz4_flex::block::get_maximum_output_size(json.len()),
        0,
    );
    // The buffer has the most the block can take, so this cannot fail.
    let n = lz4_flex::block::compress_into(json, &mut out[start + 4..]).unwrap_or(0);
    out.truncate(start + 4 + n);
}

/// What [`pack_into`] wrote; `None` if damaged.
fn unpack(packed: &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(packed.get(..4)?.try_into().ok()?);
    if len > MAX_DECODED {
        return None;
    }
    lz4_flex::block::decompress_size_prepended(packed).ok()
}

/// Records a list request reads at most before it answers (a short page with a
/// cursor when filters match few).
const SCAN_BUDGET: usize = 5_000;

/// The queue event a delivery on a queue route stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueLink {
    pub route: String,
    pub event_id: String,
}

/// One request to a route, as the admin API shows it (`docs` name every field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// `<received ms, 12 hex digits>-<8 hex digits>`: sorts by time, unique.
    pub delivery_id: String,
    /// Unix milliseconds.
    pub received_at: u64,
    pub route: String,
    pub provider: String,
    pub peer: String,
    pub method: String,
    /// Path and query as received.
    pub path: String,
    /// Credentials and signatures are `[redacted]`.
    pub headers: Vec<(String, String)>,
    /// `None` when refused, or `log.bodies = "none"`.
    pub body: Option<String>,
    /// Whether `body` is base64 (the body was not UTF-8).
    pub body_base64: bool,
    /// The body's full size.
    pub body_bytes: u64,
    /// Whether `body` was cut at `log.max_body`.
    pub body_truncated: bool,
    pub event_id: Option<String>,
    /// The provider's own delivery ID where the signature does not cover it.
    pub provider_delivery_id: Option<String>,
    pub event_type: Option<String>,
    /// The `hookgate-outcome` value.
    pub outcome: String,
    pub status: u16,
    /// The body the gateway answered (bounded).
    pub answer: Option<String>,
    pub duration_us: u64,
    /// Which secret matched, by name (`secrets[1]`); never the secret.
    pub secret: Option<String>,
    /// Why it was refused, in words an integrator can act on.
    pub reason: Option<String>,
    /// The delivery this one replays (an operator's `POST /deliveries/<id>/replay`).
    pub replay_of: Option<String>,
    pub queue: Option<QueueLink>,
}

impl DeliveryRecord {
    /// The record as the list and the stream show it: without `body` and `answer`.
    pub fn summary(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("body");
            m.remove("answer");
        }
        v
    }
}

impl Stored {
    /// The form Redis keeps: `LZ4_STORED`, then the record compressed (see
    /// `pack_into`). The disk store keeps records in frames instead (`disk.rs`).
    pub fn pack(&self) -> Vec<u8> {
        let mut out = vec![LZ4_STORED];
        pack_into(self.as_bytes(), &mut out);
        out
    }

    /// What [`Stored::pack`] wrote; `None` for bytes this log did not write.
    pub fn unpack(bytes: &[u8]) -> Option<Self> {
        match bytes.split_first()? {
            (&LZ4_STORED, packed) => {
                let stored = Self::from_bytes(unpack(packed)?.into());
                stored.view().is_some().then_some(stored)
            }
            _ => None,
        }
    }
}

/// A new delivery ID for a request received at `ms`: the time in 12 hex digits (sorts
/// until the year 10889), then a per-process random prefix and counter, so IDs of one
/// process in one millisecond stay in order and other replicas' rarely collide.
pub fn new_delivery_id(ms: u64) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: std::sync::OnceLock<AtomicU32> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU32::new(rand::random::<u32>() & 0xffff_0000));
    let n = next.fetch_add(1, Ordering::Relaxed);
    format!("{ms:012x}-{n:08x}")
}

/// The lowest delivery ID of a millisecond (for `since`/`before` bounds and `keep`).
pub fn id_floor(ms: u64) -> String {
    format!("{ms:012x}-")
}

/// What became of a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Written,
    /// Not written, only counted: the log stays within the store's budget.
    NotRecorded(NotRecorded),
}

/// Why a batch's records were not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRecorded {
    /// The disk store's volume is below the log's floor (twice
    /// `store.min_free_space`).
    DiskReserve,
    /// Redis is past 80 % of its `maxmemory`.
    RedisMemory,
}

impl NotRecorded {
    /// The `reason` label of `hookgate_log_not_recorded_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::DiskReserve => "disk_reserve",
            Self::RedisMemory => "redis_memory",
        }
    }
}

/// What a list asks for. Every filter is optional; records come newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    pub route: Option<String>,
    pub outcome: Option<String>,
    pub event_type: Option<String>,
    pub event_id: Option<String>,
    /// Unix ms, inclusive.
    pub since: Option<u64>,
    /// Unix ms, exclusive.
    pub before: Option<u64>,
    /// Only IDs below this one (the previous page's `next_cursor`).
    pub cursor: Option<String>,
    pub limit: usize,
}

impl LogQuery {
    /// Whether a record passes the filters (not the ID bounds).
    pub fn matches(&self, r: &View<'_>) -> bool {
        let eq = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| Some(w) == have)
        };
        eq(&self.route, Some(r.route))
            && eq(&self.outcome, Some(r.outcome))
            && eq(&self.event_type, r.event_type)
            && (self.event_id.is_none()
                || eq(&self.event_id, r.event_id)
                || eq(&self.event_id, r.provider_delivery_id))
            && self.since.is_none_or(|s| r.received_at >= s)
            && self.before.is_none_or(|b| r.received_at < b)
    }

    /// The highest ID (exclusive) a page may hold: the cursor or `before`.
    pub fn upper(&self) -> Option<String> {
        match (&self.cursor, self.before.map(id_floor)) {
            (Some(c), Some(b)) => Some(c.clone().min(b)),
            (Some(c), None) => Some(c.clone()),
            (None, b) => b,
        }
    }

    /// The lowest ID (inclusive) a page may hold: `since`.
    pub fn lower(&self) -> Option<String> {
        self.since.map(id_floor)
    }
}

/// One page of a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogPage {
    pub records: Vec<DeliveryRecord>,
    /// Where the next page starts; `None` at the end.
    pub next_cursor: Option<String>,
}

/// Requests per `(route, outcome)` in one minute (`unix ms / 60 000`).
pub type Counts = HashMap<(String, String, u64), u64>;

/// What one write carries: new records, and the count of every request (recorded or
/// only counted) by route, outcome and minute.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub records: Vec<Stored>,
    pub counts: Counts,
    /// The records in the store's form, made ahead of the write by
    /// [`DeliveryLog::prepare`] (the disk store's frame); made by the write if not.
    pub encoded: Option<Encoded>,
}

/// A batch's records as the disk store keeps them: one frame, and what it counts
/// against `max_size`.
#[derive(Debug, Clone)]
pub struct Encoded {
    bytes: Vec<u8>,
    cost: u64,
}

/// The bounds of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub keep: Duration,
    pub max_size: u64,
}

impl Bounds {
    /// The lowest ID still kept at `now_ms`.
    pub fn keep_floor(&self, now_ms: u64) -> String {
        let keep = u64::try_from(self.keep.as_millis()).unwrap_or(u64::MAX);
        id_floor(now_ms.saturating_sub(keep))
    }
}

/// Minutes of counts kept (the overview shows the last hour).
pub const COUNT_MINUTES: u64 = 61;

/// Ten-minute buckets of counts kept: a day and the bucket under way (the
/// inspector's day chart). Beside the minutes, a route keeps at most
/// `COUNT_MINUTES + COUNT_TENS` (206) counts per outcome it saw: minutes for a day
/// would be 1 441, and a Redis hash scanned at every write.
pub const COUNT_TENS: u64 = 145;

/// The width of a bucket of [`DeliveryLog::buckets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// A minute: kept for [`COUNT_MINUTES`].
    Minute,
    /// Ten minutes: kept for [`COUNT_TENS`] buckets.
    TenMinutes,
}

impl Width {
    /// Minutes a bucket spans.
    pub fn minutes(self) -> u64 {
        match self {
            Self::Minute => 1,
            Self::TenMinutes => 10,
        }
    }

    /// The bucket a minute falls in.
    pub fn bucket_of(self, minute: u64) -> u64 {
        minute / self.minutes()
    }

    /// Buckets kept.
    pub fn kept(self) -> u64 {
        match self {
            Self::Minute => COUNT_MINUTES,
            Self::TenMinutes => COUNT_TENS,
        }
    }
}

/// One route's requests per `(bucket, outcome)`: a bucket is the minute (unix ms /
/// 60 000) divided by its [`Width`]'s minutes.
pub type Buckets = HashMap<(u64, String), u64>;

/// The delivery log of the configured store.
#[derive(Debug, Clone)]
pub enum DeliveryLog {
    Memory(MemoryLog),
    Disk(DiskLog),
    Redis(RedisLog),
}

macro_rules! dispatch {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            DeliveryLog::Memory($l) => $e,
            DeliveryLog::Disk($l) => $e,
            DeliveryLog::Redis($l) => $e,
        }
    };
}

impl DeliveryLog {
    /// The log in `store`, within `bounds`.
    pub fn open(store: &Store, bounds: Bounds, prefix: &str) -> Result<Self, StoreError> {
        Ok(match store {
            Store::Memory(_) => Self::Memory(MemoryLog::new(bounds)),
            Store::Disk(s) => Self::Disk(DiskLog::open(s, bounds)?),
            Store::Redis(s) => Self::Redis(RedisLog::new(s, bounds, prefix)),
        })
    }

    /// Whether this store's batches are prepared before they are written
    /// ([`DeliveryLog::prepare`] does something).
    pub fn prepares(&self) -> bool {
        matches!(self, Self::Disk(_))
    }

    /// Encodes a batch's records for the store, so that the write does only the
    /// store's part (the recorder does this on a thread of its own).
    pub fn prepare(&self, batch: &mut Batch) {
        if let Self::Disk(_) = self {
            batch.encoded = DiskLog::encode(&batch.records);
        }
    }

    /// Stores a batch, then drops the oldest records beyond the bounds. `routes`: the
    /// configured routes (Redis divides `max_size` among them). A log that would take
    /// what the store needs (the disk's free-space reserve, Redis's memory) records
    /// nothing and says why.
    pub async fn append(&self, batch: Batch, routes: &[String]) -> Result<Appended, StoreError> {
        dispatch!(self, l => l.append(batch, routes).await)
    }

    /// Enforces the bounds with nothing new (records age out of an idle log).
    pub async fn retain(&self, routes: &[String]) -> Result<(), StoreError> {
        self.append(Batch::default(), routes).await.map(|_| ())
    }

    /// What the start warns of when `log.max_size` is more than the store can give
    /// the log (the disk's volume beside its reserve, a quarter of Redis's
    /// `maxmemory`), if it is.
    pub async fn budget_warning(&self) -> Option<String> {
        match self {
            Self::Memory(_) => None,
            Self::Disk(l) => l.budget_warning(),
            Self::Redis(l) => l.budget_warning().await,
        }
    }

    /// A page of records, newest first.
    pub async fn list(&self, q: &LogQuery, routes: &[String]) -> Result<LogPage, StoreError> {
        dispatch!(self, l => l.list(q, routes).await)
    }

    /// One record.
    pub async fn get(
        &self,
        id: &str,
        routes: &[String],
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        dispatch!(self, l => l.get(id, routes).await)
    }

    /// Requests per `(route, outcome)` from minute `since_minute` on.
    pub async fn counts(
        &self,
        since_minute: u64,
        routes: &[String],
    ) -> Result<HashMap<(String, String), u64>, StoreError> {
        dispatch!(self, l => l.counts(since_minute, routes).await)
    }

    /// One route's requests per bucket of `width` and outcome, from bucket `since` on
    /// (buckets older than the width keeps are gone: [`Width::kept`]).
    pub async fn buckets(
        &self,
        route: &str,
        width: Width,
        since: u64,
        routes: &[String],
    ) -> Result<Buckets, StoreError> {
        dispatch!(self, l => l.buckets(route, width, since, routes).await)
    }

    /// The bytes the log counts against `max_size` now.
    pub async fn size(&self, routes: &[String]) -> Result<u64, StoreError> {
        dispatch!(self, l => l.size(routes).await)
    }
}

/// A page from records read newest first, in order: stops at `limit` matches or at
/// the scan budget (then the cursor is the last record read). Its records carry no
/// body and no answer (a list shows neither). A record that does not read is skipped.
pub(crate) fn page_from<R: std::borrow::Borrow<Stored>>(
    q: &LogQuery,
    newest_first: impl Iterator<Item = R>,
) -> LogPage {
    let limit = q.limit.max(1);
    let mut records = Vec::new();
    let mut last = None;
    for (read, r) in newest_first.enumerate() {
        if read >= SCAN_BUDGET {
            return LogPage {
                records,
                next_cursor: last,
            };
        }
        let Some(r) = r.borrow().view() else {
            continue;
        };
        last = Some(r.delivery_id.to_owned());
        if q.matches(&r) {
            records.push(r.record(false));
            if records.len() == limit {
                return LogPage {
                    next_cursor: last,
                    records,
                };
            }
        }
    }
    LogPage {
        records,
        next_cursor: None,
    }
}

/// Adds the counts of a batch to per-minute totals and drops minutes before `floor`.
pub(crate) fn merge_counts(into: &mut Counts, add: &Counts, floor: u64) {
    for (k, n) in add {
        *into.entry(k.clone()).or_default() += n;
    }
    into.retain(|(_, _, minute), _| *minute >= floor);
}

/// Adds the counts of a batch to ten-minute totals and drops buckets before `floor`
/// (a ten-minute bucket).
pub(crate) fn merge_tens(into: &mut Counts, add: &Counts, floor: u64) {
    for ((route, outcome, minute), n) in add {
        let ten = Width::TenMinutes.bucket_of(*minute);
        *into
            .entry((route.clone(), outcome.clone(), ten))
            .or_default() += n;
    }
    into.retain(|(_, _, ten), _| *ten >= floor);
}

/// One route's buckets from per-bucket counts of every route.
pub(crate) fn route_buckets(counts: &Counts, route: &str, since: u64) -> Buckets {
    counts
        .iter()
        .filter(|((r, _, b), _)| r == route && *b >= since)
        .map(|((_, o, b), n)| ((*b, o.clone()), *n))
        .collect()
}

/// The current minute (`unix ms / 60 000`).
pub fn minute_of(ms: u64) -> u64 {
    ms / 60_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_and_in_order_within_a_millisecond() {
        let a = new_delivery_id(1_764_590_000_123);
        let b = new_delivery_id(1_764_590_000_123);
        let c = new_delivery_id(1_764_590_000_124);
        assert!(a < b && b < c, "{a} {b} {c}");
        assert_eq!(a.len(), 21);
        assert!(id_floor(1_764_590_000_123) < a);
        assert!(c < id_floor(1_764_590_000_125));
    }

    #[test]
    fn ids_are_the_time_and_a_counter_in_fixed_width_hex() {
        for ms in [
            0,
            1,
            0xabc,
            1_764_590_000_123,
            (1 << 48) - 1,
            1 << 48,
            u64::MAX,
        ] {
            let id = new_delivery_id(ms);
            let (time, n) = id.split_once('-').expect("a dash");
            assert_eq!(time, format!("{ms:012x}"));
            assert_eq!(n.len(), 8, "{id}");
            assert!(u32::from_str_radix(n, 16).is_ok(), "{id}");
        }
    }

    fn record(body: &str) -> DeliveryRecord {
        serde_json::from_value(serde_json::json!({
            "delivery_id": new_delivery_id(1_764_590_000_123),
            "received_at": 1_764_590_000_123_u64,
            "route": "stripe", "provider": "stripe", "peer": "127.0.0.1:5000",
            "method": "POST", "path": "/hooks/stripe",
            "headers": [["content-type", "application/json"], ["stripe-signature", "[redacted]"]],
            "body": body, "body_base64": false, "body_bytes": body.len(), "body_truncated": false,
            "event_id": "evt_1", "provider_delivery_id": null, "event_type": "invoice.paid",
            "outcome": "forwarded", "status": 200, "answer": "{\"ok\":true}", "duration_us": 900,
            "secret": "secrets[0]", "reason": null, "replay_of": null, "queue": null,
        }))
        .expect("a record")
    }

    #[test]
    fn records_are_kept_compressed_in_redis_and_read_back_whole() {
        let body = r#"{"id":"evt_1","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","amount_due":2000,"amount_paid":2000,"currency":"usd","customer":"cus_1","lines":{"object":"list","data":[{"id":"il_1","object":"line_item","amount":1000,"currency":"usd"},{"id":"il_2","object":"line_item","amount":1000,"currency":"usd"}]}}}}"#;
        let r = record(body);
        let stored = Stored::from_record(&r);
        let packed = stored.pack();
        assert_eq!(packed[0], LZ4_STORED);
        assert!(
            packed.len() * 10 < stored.len() * 8,
            "{} bytes packed for {} stored",
            packed.len(),
            stored.len()
        );
        assert_eq!(Stored::unpack(&packed), Some(stored.clone()));
        assert_eq!(stored.record(true), Some(r.clone()));
        assert_eq!(
            Stored::unpack(&b"{}"[..]),
            None,
            "JSON is no form of the log's"
        );
    }

    #[test]
    fn damaged_or_foreign_bytes_unpack_to_nothing() {
        let packed = Stored::from_record(&record("{}")).pack();
        assert_eq!(Stored::unpack(&packed[..packed.len() - 3]), None);
        assert_eq!(Stored::unpack(&[]), None);
        assert_eq!(Stored::unpack(b"not a record"), None);
        // A length beyond any record's is refused before anything is allocated.
        let mut huge = vec![LZ4_STORED];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&packed[5..]);
        assert_eq!(Stored::unpack(&huge), None);
    }

    #[test]
    fn a_page_skips_what_does_not_read_and_filters_the_rest() {
        let a = Stored::from_record(&record("{}"));
        let mut other = record("{}");
        other.route = "github".into();
        let b = Stored::from_record(&other);
        let q = LogQuery {
            route: Some("stripe".into()),
            limit: 10,
            ..LogQuery::default()
        };
        let damaged = Stored::from_bytes(bytes::Bytes::from_static(b"x"));
        let page = page_from(&q, [b, damaged, a].into_iter());
        assert_eq!(page.records.len(), 1);
        assert_eq!(page.records[0].route, "stripe");
        assert_eq!(page.records[0].body, None);
        assert_eq!(page.next_cursor, None);
    }

    #[test]
    fn the_cursor_and_before_both_bound_a_page() {
        let q = LogQuery {
            cursor: Some(id_floor(500)),
            before: Some(300),
            ..LogQuery::default()
        };
        assert_eq!(q.upper(), Some(id_floor(300)));
    }
}
