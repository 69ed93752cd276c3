//! The delivery log in the disk store's database file. Records are written in
//! frames: each write of the recorder (up to 2 048 records gathered over
//! 100 ms) is one value, the records ([`Stored`]) compressed together, and a small
//! index maps each delivery ID to its frame.
//!
//! ```text
//! log_frames   frame number → [FRAME] records (u32) max ID (u8 length, bytes) packed records
//!                             (each: length u32, then its bytes); frames of form 2 hold a
//!                             JSON array of records, as they were written before
//! log_times    (millisecond, frame number) → (): the frames that hold records of a
//!              millisecond (an ID's first 12 hex digits are its millisecond)
//! log_meta     "bytes" → what the frames count against max_size
//! log_counts   (minute, "route\noutcome") → requests
//! log_tens     (ten-minute bucket, "route\noutcome") → requests (the last day)
//! ```
//!
//! Why frames rather than a value per record: records of one route share their field
//! names, headers and most of their body, which a record compressed alone cannot use
//! (a 1 KiB Stripe event's record is 1.4 KiB stored and about 0.1 KiB in a frame:
//! `a_frame_of_stripe_records_takes_a_fraction_of_them`), and one value per write
//! costs far less than one per record. Reading a record decompresses its frame (a few
//! milliseconds for a full one); the admin API reads, the request path never does.
//!
//! The log writes its own transactions from a blocking task, one per frame (redb
//! serialises them with the store's writer). Log commits skip the fsync until a second
//! has passed or an eighth of `max_size` was written since the last one: a crash
//! loses at most that much of the log, never a delivery.
//!
//! Frames go oldest first when the log is over `max_size` or a frame's newest record
//! is older than `keep`. Their pages go back to redb's free list and the next writes
//! reuse them (those freed by a commit without fsync only after the next durable one:
//! hence the bound on what is written between two), so the file stops growing once
//! the log is full: it stays within `max_size` plus the margin docs/operations.md states.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::{
    Database, Durability, ReadableDatabase as _, ReadableTable as _, TableDefinition,
    TableHandle as _,
};

use std::path::{Path, PathBuf};

use super::{
    Appended, Batch, Bounds, Buckets, DeliveryRecord, Encoded, LogPage, LogQuery, NotRecorded,
    Stored, Width,
};
use crate::store::disk::DbFile;
use crate::store::{DiskStore, StoreError};

/// frame number → a frame (see the module's table).
const FRAMES: TableDefinition<u64, &[u8]> = TableDefinition::new("log_frames");
/// (millisecond, frame number) → (): which frames hold records of a millisecond. One
/// entry per frame and millisecond rather than one per record: a write of 800
/// records received over 100 ms adds about 100 entries.
const TIMES: TableDefinition<(u64, u64), ()> = TableDefinition::new("log_times");
/// delivery ID → frame number: the index before [`TIMES`]. Read into it when the
/// store opens, then removed.
/// `bytes` → what the frames count against `max_size`.
const META: TableDefinition<&str, u64> = TableDefinition::new("log_meta");
/// (minute, `route\noutcome`) → requests.
const COUNTS: TableDefinition<(u64, &str), u64> = TableDefinition::new("log_counts");
/// (ten-minute bucket, `route\noutcome`) → requests.
const TENS: TableDefinition<(u64, &str), u64> = TableDefinition::new("log_tens");

/// The first byte of a frame (the form may change; a frame of another form is skipped).
const FRAME: u8 = 3;
/// Bytes counted per record besides its frame's size: its share of the index (counted
/// per record, as if each had an entry: an upper bound).
const ID_ENTRY: u64 = 64;
/// Bytes counted per frame besides its size: its entry and the B-tree around it.
const FRAME_ENTRY: u64 = super::ENTRY_OVERHEAD;

/// How often a log commit is made durable at least.
const SYNC_EVERY: Duration = Duration::from_secs(1);

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("delivery log: {e}"))
}

/// A frame's bytes for `records` (sorted or not), and what it counts against
/// `max_size`.
fn frame(records: &[Stored]) -> Encoded {
    let mut packed = Vec::with_capacity(records.iter().map(|r| 4 + r.len()).sum());
    let mut max_id = "";
    for r in records {
        if let Some(h) = r.head() {
            max_id = max_id.max(h.delivery_id);
        }
        packed.extend_from_slice(&u32::try_from(r.len()).unwrap_or(u32::MAX).to_le_bytes());
        packed.extend_from_slice(r.as_bytes());
    }
    // IDs are 21 bytes; one that is not (a foreign record) is cut, which only makes
    // the frame go a little earlier for `keep`.
    let max_id = &max_id.as_bytes()[..max_id.len().min(usize::from(u8::MAX))];
    let mut out = Vec::with_capacity(1 + 4 + 1 + max_id.len() + 4 + packed.len() / 2);
    out.push(FRAME);
    out.extend_from_slice(
        &u32::try_from(records.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.push(u8::try_from(max_id.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(max_id);
    super::pack_into(&packed, &mut out);
    let cost = frame_cost(out.len(), records.len());
    Encoded { bytes: out, cost }
}

fn frame_cost(len: usize, records: usize) -> u64 {
    len as u64 + FRAME_ENTRY + ID_ENTRY * records as u64
}

/// What a frame's first bytes say: how many records, the newest ID, and where the
/// packed records start.
struct FrameHead<'a> {
    records: usize,
    max_id: &'a str,
    packed: &'a [u8],
}

fn frame_head(bytes: &[u8]) -> Option<FrameHead<'_>> {
    let (&FRAME, rest) = bytes.split_first()? else {
        return None;
    };
    let records = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let id_len = usize::from(*rest.get(4)?);
    let max_id = std::str::from_utf8(rest.get(5..5 + id_len)?).ok()?;
    Some(FrameHead {
        records,
        max_id,
        packed: rest.get(5 + id_len..)?,
    })
}

/// A frame's records (each a slice of the frame's one buffer); `None` if it is
/// damaged.
fn frame_records(bytes: &[u8]) -> Option<Vec<Stored>> {
    let unpacked = super::unpack(frame_head(bytes)?.packed)?;
    let all = bytes::Bytes::from(unpacked);
    let mut out = Vec::new();
    let mut at = 0;
    while at < all.len() {
        let len = u32::from_le_bytes(all.get(at..at + 4)?.try_into().ok()?) as usize;
        let end = at.checked_add(4 + len).filter(|e| *e <= all.len())?;
        out.push(Stored::from_bytes(all.slice(at + 4..end)));
        at = end;
    }
    Some(out)
}

/// The disk store's log.
#[derive(Debug, Clone)]
pub struct DiskLog {
    file: Arc<DbFile>,
    /// The store's free-space reserve (`store.min_free_space`): the log records only
    /// while the volume has [`Self::floor`] free.
    reserve: u64,
    /// What the store has journaled and its file has still to write: taken from the
    /// free space, as far as the log is concerned.
    store_pending: Arc<std::sync::atomic::AtomicU64>,
    store_path: PathBuf,
    bounds: Bounds,
    /// When the last durable log commit was, and the bytes written since.
    synced: Arc<Mutex<(Instant, u64)>>,
}

/// The log's own file beside the store's: `hookgate.redb` → `hookgate.redb.deliveries`.
pub(crate) fn log_path(store: &Path) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(".deliveries");
    store.with_file_name(name)
}

/// The log's floor of free space: it keeps a margin of its own as large as the
/// store's reserve above it, so that records stop well before claims and events are
/// refused.
fn free_space_floor(reserve: u64) -> u64 {
    reserve.saturating_mul(2)
}

/// What the volume can hold of the log beside the store's reserve and the log's
/// margin: what is free now plus what the log's file holds already, less the floor
/// (`None` where free space cannot be read). `hookgate check` and the start warn when
/// `log.max_size` asks for more.
fn room_for_log(store: &Path, reserve: u64) -> Option<u64> {
    // The folder may not exist yet (`hookgate check` before a first start): its
    // nearest ancestor that does is on the volume it will be on.
    let dir = store
        .ancestors()
        .skip(1)
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .find(|d| d.exists())?;
    let free = crate::files::free_space(dir)?;
    let held = std::fs::metadata(log_path(store)).map_or(0, |m| m.len());
    Some((free + held).saturating_sub(free_space_floor(reserve)))
}

/// The warning `hookgate check` and the start give when `max_size` is more than the
/// volume can hold beside the reserve, if it is.
pub(crate) fn max_size_warning(store: &Path, reserve: u64, max_size: u64) -> Option<String> {
    let room = room_for_log(store, reserve)?;
    (max_size > room).then(|| {
        format!(
            "log.max_size ({} MiB) is more than the volume of {} can hold beside store.min_free_space and the log's margin ({} MiB): the log will stop recording (counted as not_recorded, reason disk_reserve) when {} MiB are free; set log.max_size to at most {} MiB to keep the whole log",
            max_size >> 20,
            store.display(),
            free_space_floor(reserve) >> 20,
            free_space_floor(reserve) >> 20,
            room >> 20
        )
    })
}

/// redb's page cache for the log's file: reads are the admin API's, of recent frames.
const LOG_CACHE: usize = 8 << 20;
/// The tables the log kept in the store's file before it had one of its own.
const MOVED: [&str; 4] = ["log_frames", "log_times", "log_meta", "log_counts"];

impl DiskLog {
    pub(super) fn open(store: &DiskStore, bounds: Bounds) -> Result<Self, StoreError> {
        let file = DbFile::open(&log_path(store.path()), LOG_CACHE)
            .map_err(|e| backend(format!("{e:#}")))?;
        let db = file.get()?;
        let txn = db.begin_write().map_err(backend)?;
        txn.open_table(FRAMES).map_err(backend)?;
        txn.open_table(TIMES).map_err(backend)?;
        txn.open_table(META).map_err(backend)?;
        txn.open_table(COUNTS).map_err(backend)?;
        txn.open_table(TENS).map_err(backend)?;
        txn.commit().map_err(backend)?;
        move_out_of_the_store(store.database()?.as_ref(), &db, |txn| {
            store.commit_durably(txn)
        })?;
        drop(db);
        Ok(Self {
            file: Arc::new(file),
            reserve: store.min_free(),
            store_pending: store.pending_bytes(),
            store_path: store.path().to_path_buf(),
            bounds,
            synced: Arc::new(Mutex::new((Instant::now(), 0))),
        })
    }

    /// The warning `log.max_size` gives against the volume, as at open.
    pub(super) fn budget_warning(&self) -> Option<String> {
        max_size_warning(&self.store_path, self.reserve, self.bounds.max_size)
    }

    /// Runs `f` on the database in a blocking task.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.file.get()?;
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(backend)?
    }

    /// Whether the volume has room for a write of `bytes` above the log's floor.
    fn has_room(&self, bytes: u64) -> bool {
        // A commit writes its pages anew (copy on write): twice the frame, at most.
        let pending = self
            .store_pending
            .load(std::sync::atomic::Ordering::Relaxed);
        self.file.free_space().is_none_or(|free| {
            free.saturating_sub(pending)
                >= free_space_floor(self.reserve).saturating_add(bytes.saturating_mul(2))
        })
    }

    /// `records` as one frame (`None` for none).
    pub(super) fn encode(records: &[Stored]) -> Option<Encoded> {
        (!records.is_empty()).then(|| frame(records))
    }

    pub(super) async fn append(
        &self,
        mut batch: Batch,
        _routes: &[String],
    ) -> Result<Appended, StoreError> {
        let bounds = self.bounds;
        let written: u64 = batch
            .records
            .iter()
            .map(|r| super::ENTRY_OVERHEAD + r.len() as u64)
            .sum();
        let frame_len = batch
            .encoded
            .as_ref()
            .map_or(written, |e| e.bytes.len() as u64);
        if !self.has_room(frame_len) {
            return Ok(Appended::NotRecorded(NotRecorded::DiskReserve));
        }
        let durable = {
            let mut synced = self
                .synced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            synced.1 += written;
            if synced.0.elapsed() >= SYNC_EVERY || synced.1 >= bounds.max_size / 8 {
                *synced = (Instant::now(), 0);
                true
            } else {
                false
            }
        };
        let written = self
            .blocking(move |db| {
                // Encoded before the transaction (by the recorder, usually): the file's
                // write lock, which the store's writer needs for every claim and event,
                // is held only for the inserts.
                let encoded = batch
                    .encoded
                    .take()
                    .or_else(|| Self::encode(&batch.records));
                let mut txn = db.begin_write().map_err(backend)?;
                if !durable {
                    txn.set_durability(Durability::None).map_err(backend)?;
                }
                let now = crate::queue::now_ms();
                {
                    let mut frames = txn.open_table(FRAMES).map_err(backend)?;
                    let mut times = txn.open_table(TIMES).map_err(backend)?;
                    let mut meta = txn.open_table(META).map_err(backend)?;
                    let mut bytes = meta.get("bytes").map_err(backend)?.map_or(0, |v| v.value());
                    if let Some(Encoded { bytes: value, cost }) = &encoded {
                        let records = batch.records.iter().filter_map(|r| r.head());
                        put_frame(
                            &mut frames,
                            &mut times,
                            value,
                            records.map(|h| h.delivery_id),
                        )?;
                        bytes += cost;
                    }
                    let floor = bounds.keep_floor(now);
                    bytes = drop_oldest_frames(
                        &mut frames,
                        &mut times,
                        bytes,
                        &floor,
                        bounds.max_size,
                    )?;
                    meta.insert("bytes", bytes).map_err(backend)?;
                    add_counts(&txn, &batch.counts, now)?;
                }
                txn.commit().map_err(backend)
            })
            .await;
        if written.is_err() {
            // redb refuses every write on a handle that saw an I/O error (a full
            // disk): the next write gets a fresh one. The store's file is not touched.
            let file = self.file.clone();
            let _ = tokio::task::spawn_blocking(move || file.reopen()).await;
        }
        written.map(|()| Appended::Written)
    }

    pub(super) async fn list(
        &self,
        q: &LogQuery,
        _routes: &[String],
    ) -> Result<LogPage, StoreError> {
        let q = q.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let times = txn.open_table(TIMES).map_err(backend)?;
            let frames = txn.open_table(FRAMES).map_err(backend)?;
            let lower = q.lower().unwrap_or_default();
            let upper = q.upper();
            // The upper bound's millisecond, inclusive: a cursor's own millisecond
            // may hold older records.
            let last = upper.as_deref().and_then(id_ms).unwrap_or(u64::MAX);
            let first = q.since.unwrap_or(0);
            let range = times
                .range((first, 0)..=(last, u64::MAX))
                .map_err(backend)?
                .rev()
                .map_while(Result::ok)
                .map(|(k, _)| k.value());
            Ok(super::page_from(
                &q,
                newest_first(&frames, range, &lower, upper.as_deref()),
            ))
        })
        .await
    }

    pub(super) async fn get(
        &self,
        id: &str,
        _routes: &[String],
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        let id = id.to_owned();
        self.blocking(move |db| {
            let Some(ms) = id_ms(&id) else {
                return Ok(None);
            };
            let txn = db.begin_read().map_err(backend)?;
            let times = txn.open_table(TIMES).map_err(backend)?;
            let frames = txn.open_table(FRAMES).map_err(backend)?;
            let mut read = FrameCache::default();
            for entry in times.range((ms, 0)..=(ms, u64::MAX)).map_err(backend)? {
                let ((_, number), ()) = (entry.map_err(backend)?.0.value(), ());
                if let Some(r) = read.get(&frames, number, &id) {
                    return Ok(r.record(true));
                }
            }
            Ok(None)
        })
        .await
    }

    pub(super) async fn counts(
        &self,
        since_minute: u64,
        _routes: &[String],
    ) -> Result<HashMap<(String, String), u64>, StoreError> {
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let counts = txn.open_table(COUNTS).map_err(backend)?;
            let mut out: HashMap<(String, String), u64> = HashMap::new();
            for entry in counts.range((since_minute, "")..).map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                let (_, key) = k.value();
                if let Some((route, outcome)) = key.split_once('\n') {
                    *out.entry((route.to_owned(), outcome.to_owned()))
                        .or_default() += v.value();
                }
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn buckets(
        &self,
        route: &str,
        width: Width,
        since: u64,
        _routes: &[String],
    ) -> Result<Buckets, StoreError> {
        let route = route.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let table = txn
                .open_table(match width {
                    Width::Minute => COUNTS,
                    Width::TenMinutes => TENS,
                })
                .map_err(backend)?;
            let mut out = Buckets::new();
            for entry in table.range((since, "")..).map_err(backend)? {
                let (k, v) = entry.map_err(backend)?;
                let (bucket, key) = k.value();
                if let Some((r, outcome)) = key.split_once('\n')
                    && r == route
                {
                    *out.entry((bucket, outcome.to_owned())).or_default() += v.value();
                }
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn size(&self, _routes: &[String]) -> Result<u64, StoreError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(backend)?;
            let meta = txn.open_table(META).map_err(backend)?;
            Ok(meta.get("bytes").map_err(backend)?.map_or(0, |v| v.value()))
        })
        .await
    }
}

/// The millisecond a delivery ID was made in: its first 12 hex digits.
fn id_ms(id: &str) -> Option<u64> {
    u64::from_str_radix(id.get(..12)?, 16).ok()
}

/// Drops the oldest frames while they are past the keep window (their newest ID below
/// `floor`) or the log holds more than `max_size` bytes; what it holds then.
fn drop_oldest_frames(
    frames: &mut redb::Table<u64, &[u8]>,
    times: &mut redb::Table<(u64, u64), ()>,
    mut bytes: u64,
    floor: &str,
    max_size: u64,
) -> Result<u64, StoreError> {
    loop {
        let oldest = frames.first().map_err(backend)?.map(|(k, v)| {
            let value = v.value();
            let head = frame_head(value);
            (
                k.value(),
                head.as_ref().map(|h| h.max_id.to_owned()),
                frame_cost(value.len(), head.map_or(0, |h| h.records)),
            )
        });
        let Some((number, max_id, cost)) = oldest else {
            break;
        };
        let stale = max_id.as_deref().is_none_or(|m| m < floor);
        if !stale && bytes <= max_size {
            break;
        }
        frames.remove(number).map_err(backend)?;
        // The frame's records are of its newest millisecond at most; newer
        // frames' entries in that range (a request that took longer) stay.
        match max_id.as_deref().and_then(id_ms) {
            Some(ms) => times
                .retain_in(..=(ms, u64::MAX), |(_, n), ()| n != number)
                .map_err(backend)?,
            None => times.retain(|(_, n), ()| n != number).map_err(backend)?,
        }
        bytes = bytes.saturating_sub(cost);
    }
    Ok(bytes)
}

/// Adds a write's counts of requests by route, outcome and minute, per minute and per
/// ten minutes, and drops the buckets older than [`super::COUNT_MINUTES`] and
/// [`super::COUNT_TENS`].
fn add_counts(
    txn: &redb::WriteTransaction,
    counts: &super::Counts,
    now: u64,
) -> Result<(), StoreError> {
    for width in [Width::Minute, Width::TenMinutes] {
        let mut table = txn
            .open_table(match width {
                Width::Minute => COUNTS,
                Width::TenMinutes => TENS,
            })
            .map_err(backend)?;
        for ((route, outcome, minute), n) in counts {
            let key = format!("{route}\n{outcome}");
            let bucket = width.bucket_of(*minute);
            let had = table
                .get((bucket, key.as_str()))
                .map_err(backend)?
                .map_or(0, |v| v.value());
            table
                .insert((bucket, key.as_str()), had + n)
                .map_err(backend)?;
        }
        let old = width
            .bucket_of(super::minute_of(now))
            .saturating_sub(width.kept());
        table
            .retain_in((0, "")..(old, ""), |_, _| false)
            .map_err(backend)?;
    }
    Ok(())
}

/// Stores a frame under the next number, and the milliseconds of its records in the
/// index (a record whose ID is not the gateway's cannot be listed or found).
fn put_frame<'a>(
    frames: &mut redb::Table<u64, &[u8]>,
    times: &mut redb::Table<(u64, u64), ()>,
    frame: &[u8],
    records: impl Iterator<Item = &'a str>,
) -> Result<(), StoreError> {
    let number = frames
        .last()
        .map_err(backend)?
        .map_or(0, |(k, _)| k.value() + 1);
    frames.insert(number, frame).map_err(backend)?;
    let mut ms: Vec<u64> = records.filter_map(id_ms).collect();
    ms.sort_unstable();
    ms.dedup();
    for m in ms {
        times.insert((m, number), ()).map_err(backend)?;
    }
    Ok(())
}

/// Records newest first through the index by millisecond: each millisecond's frames
/// are read (each frame once, when first reached), and that millisecond's records
/// within `lower..upper` handed out in ID order, newest first. `times`: the index's
/// (millisecond, frame) entries, newest first.
fn newest_first<'a>(
    frames: &'a redb::ReadOnlyTable<u64, &[u8]>,
    mut times: impl Iterator<Item = (u64, u64)> + 'a,
    lower: &'a str,
    upper: Option<&'a str>,
) -> impl Iterator<Item = Stored> + 'a {
    let mut read = FrameCache::default();
    let mut next = times.next();
    // The current millisecond's records, oldest first: handed out from the end.
    let mut group: Vec<(String, Stored)> = Vec::new();
    std::iter::from_fn(move || {
        loop {
            if let Some((_, r)) = group.pop() {
                return Some(r);
            }
            let (ms, number) = next?;
            let mut numbers = vec![number];
            next = times.next();
            while let Some((_, n)) = next.filter(|(m, _)| *m == ms) {
                numbers.push(n);
                next = times.next();
            }
            for n in numbers {
                group.extend(read.of_ms(frames, n, ms).filter(|(id, _)| {
                    id.as_str() >= lower && upper.is_none_or(|u| id.as_str() < u)
                }));
            }
            group.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
    })
}

/// The frames a read has decoded, by number: their records by delivery ID.
#[derive(Default)]
struct FrameCache {
    frames: HashMap<u64, BTreeMap<String, Stored>>,
}

impl FrameCache {
    /// Frame `number`'s records, decoding it the first time.
    fn frame(
        &mut self,
        frames: &redb::ReadOnlyTable<u64, &[u8]>,
        number: u64,
    ) -> &BTreeMap<String, Stored> {
        self.frames.entry(number).or_insert_with(|| {
            frames
                .get(number)
                .ok()
                .flatten()
                .and_then(|v| frame_records(v.value()))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|r| Some((r.head()?.delivery_id.to_owned(), r)))
                .collect()
        })
    }

    /// The record `id` of frame `number`.
    fn get(
        &mut self,
        frames: &redb::ReadOnlyTable<u64, &[u8]>,
        number: u64,
        id: &str,
    ) -> Option<Stored> {
        self.frame(frames, number).get(id).cloned()
    }

    /// Frame `number`'s records of millisecond `ms`.
    fn of_ms(
        &mut self,
        frames: &redb::ReadOnlyTable<u64, &[u8]>,
        number: u64,
        ms: u64,
    ) -> impl Iterator<Item = (String, Stored)> + '_ {
        let (from, to) = (super::id_floor(ms), super::id_floor(ms.saturating_add(1)));
        self.frame(frames, number)
            .range(from..to)
            .map(|(id, r)| (id.clone(), r.clone()))
    }
}

/// Moves the log's tables out of the store's file, where the log kept them before it
/// had a file of its own: copied into the log's file, then removed from the
/// store's. Runs once, when such a file is opened.
fn move_out_of_the_store(
    store: &Database,
    log: &Database,
    commit_durably: impl FnOnce(redb::WriteTransaction) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let present = |db: &Database| -> Result<bool, StoreError> {
        let txn = db.begin_read().map_err(backend)?;
        let names = txn.list_tables().map_err(backend)?;
        Ok(names.into_iter().any(|t| MOVED.contains(&t.name())))
    };
    if !present(store)? {
        return Ok(());
    }
    let from = store.begin_read().map_err(backend)?;
    let names: Vec<String> = from
        .list_tables()
        .map_err(backend)?
        .map(|t| t.name().to_owned())
        .collect();
    let to = log.begin_write().map_err(backend)?;
    let mut records = 0u64;
    if names.iter().any(|n| n == FRAMES.name()) {
        let (src, mut dst) = (
            from.open_table(FRAMES).map_err(backend)?,
            to.open_table(FRAMES).map_err(backend)?,
        );
        for entry in src.iter().map_err(backend)? {
            let (k, v) = entry.map_err(backend)?;
            records += frame_head(v.value()).map_or(0, |h| h.records as u64);
            dst.insert(k.value(), v.value()).map_err(backend)?;
        }
    }
    if names.iter().any(|n| n == TIMES.name()) {
        let (src, mut dst) = (
            from.open_table(TIMES).map_err(backend)?,
            to.open_table(TIMES).map_err(backend)?,
        );
        for entry in src.iter().map_err(backend)? {
            dst.insert(entry.map_err(backend)?.0.value(), ())
                .map_err(backend)?;
        }
    }
    if names.iter().any(|n| n == META.name()) {
        let (src, mut dst) = (
            from.open_table(META).map_err(backend)?,
            to.open_table(META).map_err(backend)?,
        );
        for entry in src.iter().map_err(backend)? {
            let (k, v) = entry.map_err(backend)?;
            dst.insert(k.value(), v.value()).map_err(backend)?;
        }
    }
    if names.iter().any(|n| n == COUNTS.name()) {
        let (src, mut dst) = (
            from.open_table(COUNTS).map_err(backend)?,
            to.open_table(COUNTS).map_err(backend)?,
        );
        for entry in src.iter().map_err(backend)? {
            let (k, v) = entry.map_err(backend)?;
            dst.insert(k.value(), v.value()).map_err(backend)?;
        }
    }
    to.commit().map_err(backend)?;
    drop(from);
    let txn = store.begin_write().map_err(backend)?;
    txn.delete_table(FRAMES).map_err(backend)?;
    txn.delete_table(TIMES).map_err(backend)?;
    txn.delete_table(META).map_err(backend)?;
    txn.delete_table(COUNTS).map_err(backend)?;
    commit_durably(txn)?;
    tracing::info!(
        records,
        "delivery log: moved out of the store's file into a file of its own"
    );
    Ok(())
}

#[cfg(test)]
mod tests;
