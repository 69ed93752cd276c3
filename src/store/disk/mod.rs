//! The disk store: an embedded, crash-safe database file, so one gateway with no Redis
//! keeps its dedup window across a restart or a `kill -9`.
//!
//! redb (pure Rust, copy-on-write B-trees, a commit is durable when it returns) rather
//! than an LSM engine such as fjall: the store is small records read-modify-written
//! under one key at a time, which a B-tree with serializable write transactions does
//! directly, with no compaction to tune.
//!
//! One writer thread owns every write. Each store call is an operation sent to it; the
//! thread takes whatever operations are waiting (up to `BATCH`), applies them in
//! order in one write transaction, commits it, and only then answers each caller: a
//! group commit. A batch that completes or forgets is fsynced, so a done record is on
//! disk before the provider gets its 2xx, and a burst shares one fsync. Claims in
//! flight are not written at all: they are leases held in the process (`claims.rs`),
//! so a forward never waits behind the writer to start. A failed commit (a full disk)
//! answers every operation of the batch with an error, and nothing of it is stored.
//!
//! The same file holds the queue of `delivery = "queue"` routes (`queue.rs`): an
//! enqueue is fsynced like a done record; an attempt's result is committed without an
//! fsync and flushed within `FLUSH_AFTER` (or by the next durable batch, or at
//! shutdown). Below `min_free` bytes of free space, new claims and events are refused;
//! after an I/O error the file is reopened and the queue's index rebuilt from it.
//!
//! A record's expiry is wall-clock time stored with it (it must survive a restart);
//! an expired record is absent to every call, and expired records are deleted a bounded
//! number at a time, once a minute.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::queue::now_ms;

use redb::{Database, Durability, ReadableDatabase as _, ReadableTable as _, TableDefinition};

mod claims;
mod queue;

use super::{Claim, DedupKey, DedupStore, Record, Settled, StoreError, Token};

/// key → 8 bytes of expiry (Unix milliseconds, big-endian) + the record's text.
const DEDUP: TableDefinition<&str, &[u8]> = TableDefinition::new("dedup");
/// Operations applied in one transaction at most.
const BATCH: usize = 512;
/// Operations waiting for the writer at most; beyond, a call fails at once (503).
const QUEUE: usize = 16_384;
/// How long an idle writer leaves a commit without an fsync before flushing it.
const FLUSH_AFTER: Duration = Duration::from_millis(50);
/// `(expiry, tag + key)` of every record that expires: the sweep reads the expired
/// ones first, in order, instead of scanning the tables. Tag `d`: a dedup record;
/// `s`: a queue status. A record rewritten with another expiry (a claim completed),
/// or deleted, leaves its old entry behind: the sweep checks the record and drops a
/// stale entry without touching it.
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");
/// Expired records the sweep deletes at most per step. A step runs inside a batch's
/// transaction (or, idle, in one of its own) whenever the last one found more, or
/// [`SWEEP_CHECK`] has passed: small steps keep a batch's wait behind the sweep short,
/// and one per batch keeps up with any write rate the writer sustains.
const SWEEP_STEP: usize = 256;
/// How often an idle writer looks for expired records.
const SWEEP_CHECK: Duration = Duration::from_millis(100);

enum Op {
    Complete {
        key: DedupKey,
        token: Token,
        fingerprint: String,
        ttl: Duration,
    },
    Forget {
        key: DedupKey,
    },
    Queue(queue::QOp),
    /// Nothing to change: the batch it is in is fsynced (graceful shutdown).
    Flush,
}

impl Op {
    /// Whether losing this operation in a crash costs at most a repeated attempt.
    fn may_skip_fsync(&self) -> bool {
        matches!(self, Self::Queue(queue::QOp::Finish { .. }))
    }

    /// A new event: refused while the disk is nearly full (new claims are refused
    /// before they are taken, `DiskStore::admit`).
    fn is_new_work(&self) -> bool {
        matches!(self, Self::Queue(queue::QOp::Enqueue { .. }))
    }
}

enum Reply {
    Settled(Settled),
    Forgot(bool),
    Queue(queue::QReply),
    Flushed,
}

type Answer = tokio::sync::oneshot::Sender<Result<Reply, StoreError>>;

/// An open database file, shared by its writer and readers. Empty while the writer
/// reopens it after an I/O error (redb refuses every later write on a handle that saw
/// one, until it is closed and opened again). The store has one; the delivery log has
/// its own (`store/log/disk.rs`), so that a failed log write never touches the store's.
#[derive(Debug)]
pub(crate) struct DbFile {
    db: std::sync::RwLock<Option<Arc<Database>>>,
    path: PathBuf,
    /// redb's page cache for this file.
    cache: usize,
}

impl DbFile {
    /// Opens (or creates) the file at `path`, its owner's only (it holds bodies and
    /// headers).
    pub(crate) fn open(path: &Path, cache: usize) -> anyhow::Result<Self> {
        let db = open_file(path, cache)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        crate::files::owner_only(path)
            .map_err(|e| anyhow::anyhow!("cannot restrict {} to its owner: {e}", path.display()))?;
        Ok(Self {
            db: std::sync::RwLock::new(Some(Arc::new(db))),
            path: path.to_path_buf(),
            cache,
        })
    }

    pub(crate) fn get(&self) -> Result<Arc<Database>, StoreError> {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                StoreError::Refused(format!("{} is being reopened", self.path.display()))
            })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the handle and opens the file again (redb checks and repairs it). Waits
    /// for readers to let go of the old handle: the file admits one opener.
    pub(crate) fn reopen(&self) -> Result<(), StoreError> {
        let old = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut old) = old {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(still_shared) if Instant::now() < deadline => {
                        old = still_shared;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(still_shared) => {
                        *self
                            .db
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(still_shared);
                        return Err(StoreError::Backend(
                            "the old handle of the file is still in use".into(),
                        ));
                    }
                }
            }
        }
        let db = open_file(&self.path, self.cache)
            .map_err(|e| backend(format!("reopening the file: {e}")))?;
        *self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(db));
        Ok(())
    }

    /// The free space of the file's filesystem (`None` where it cannot be read).
    pub(crate) fn free_space(&self) -> Option<u64> {
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        crate::files::free_space(dir)
    }
}

/// The store's file and what its writer and readers share.
#[derive(Debug)]
struct Shared {
    file: DbFile,
    /// Below this much free space, new claims and events are refused.
    min_free: u64,
    metrics: crate::telemetry::StoreMetrics,
    /// Set while writes fail: new claims are refused (their done records could not
    /// be written).
    failing: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn get(&self) -> Result<Arc<Database>, StoreError> {
        self.file.get()
    }

    fn reopen(&self) -> Result<(), StoreError> {
        self.file.reopen()
    }

    /// Whether the file's filesystem has less than `min_free` bytes available.
    fn low_on_space(&self) -> Option<u64> {
        let free = self.file.free_space()?;
        (free < self.min_free).then_some(free)
    }

    /// The refusal of new work below the free-space reserve.
    fn refused_full(&self, free: u64) -> StoreError {
        self.metrics.refused_full.inc();
        StoreError::Refused(format!(
            "disk nearly full: {} MiB free, below store.min_free_space ({} MiB); new events are refused until space is freed",
            free >> 20,
            self.min_free >> 20
        ))
    }
}

#[derive(Debug)]
struct Inner {
    ops: Mutex<SyncSender<(Op, Answer)>>,
    shared: Arc<Shared>,
    /// What is due when, for the queue (rebuilt from the file at open).
    index: Arc<Mutex<queue::Index>>,
    /// Queue routes' rate limits and pauses (one process owns the file: kept here).
    limits: Mutex<HashMap<String, queue::Limiter>>,
    /// Claims in flight (leases of this process's forwards).
    claims: claims::Claims,
}

/// A store in one database file.
#[derive(Debug, Clone)]
pub struct DiskStore {
    inner: Arc<Inner>,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn encode(record: &Record, expires_ms: u64) -> Vec<u8> {
    let text = record.encode();
    let mut v = Vec::with_capacity(8 + text.len());
    v.extend_from_slice(&expires_ms.to_be_bytes());
    v.extend_from_slice(text.as_bytes());
    v
}

/// The record and its expiry, or `None` for bytes this store did not write.
fn decode(bytes: &[u8]) -> Option<(Record, u64)> {
    let (expiry, text) = bytes.split_at_checked(8)?;
    let expires_ms = u64::from_be_bytes(expiry.try_into().ok()?);
    Some((Record::decode(std::str::from_utf8(text).ok()?)?, expires_ms))
}

/// Pages of the file kept in memory at most. redb's default (1 GiB) would let a queue
/// backlog's bodies fill the process's memory; what is read back is mostly the last
/// written, so a small cache serves it.
const CACHE: usize = 32 << 20;

fn open_file(path: &Path, cache: usize) -> Result<Database, redb::DatabaseError> {
    Database::builder().set_cache_size(cache).create(path)
}

fn expiry(now: u64, d: Duration) -> u64 {
    now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Enters a record that expires at `at` in the [`EXPIRY`] index (`tag`: see there).
fn index_expiry(
    index: &mut redb::Table<(u64, &str), ()>,
    at: u64,
    tag: char,
    key: &str,
) -> Result<(), StoreError> {
    if at == u64::MAX {
        return Ok(());
    }
    let mut k = String::with_capacity(1 + key.len());
    k.push(tag);
    k.push_str(key);
    index.insert((at, k.as_str()), ()).map_err(backend)?;
    Ok(())
}

/// The expiry prefix of a stored record (dedup or status).
fn expiry_of(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// What one sweep step deleted.
#[derive(Debug, Default, Clone, Copy)]
struct Swept {
    dedup: u64,
    status: u64,
    /// The step was full: more may have expired.
    more: bool,
}

/// Deletes up to [`SWEEP_STEP`] expired records (and the bodies of expired statuses,
/// if any are left), in `txn`.
fn sweep_step(txn: &redb::WriteTransaction, now: u64) -> Result<Swept, StoreError> {
    let mut index = txn.open_table(EXPIRY).map_err(backend)?;
    let due: Vec<(u64, String)> = index
        .iter()
        .map_err(backend)?
        .take(SWEEP_STEP)
        .map_while(Result::ok)
        .map(|(k, _)| {
            let (at, key) = k.value();
            (at, key.to_owned())
        })
        .take_while(|(at, _)| *at <= now)
        .collect();
    let mut swept = Swept {
        more: due.len() == SWEEP_STEP,
        ..Swept::default()
    };
    if due.is_empty() {
        return Ok(swept);
    }
    let mut dedup = txn.open_table(DEDUP).map_err(backend)?;
    let mut status = txn.open_table(queue::STATUS).map_err(backend)?;
    let mut events = txn.open_table(queue::EVENTS).map_err(backend)?;
    for (at, tagged) in &due {
        index.remove((*at, tagged.as_str())).map_err(backend)?;
        match tagged.split_at_checked(1) {
            Some(("d", key)) => {
                let expired = dedup
                    .get(key)
                    .map_err(backend)?
                    .is_some_and(|v| expiry_of(v.value()).is_some_and(|e| e <= now));
                if expired {
                    dedup.remove(key).map_err(backend)?;
                    swept.dedup += 1;
                }
            }
            Some(("s", key)) => {
                // Delivered events' records (an undelivered one never expires); their
                // bodies went at delivery, and any left over goes too.
                let expired = status.get(key).map_err(backend)?.and_then(|v| {
                    expiry_of(v.value())
                        .filter(|e| *e <= now)
                        .map(|_| queue::decode_status(v.value()).map_or(0, |(r, _)| r.seq))
                });
                if let Some(seq) = expired {
                    status.remove(key).map_err(backend)?;
                    if seq != 0 {
                        events.remove(seq).map_err(backend)?;
                    }
                    swept.status += 1;
                }
            }
            _ => {}
        }
    }
    Ok(swept)
}

/// Builds the [`EXPIRY`] index of a file written before it existed: once, at open.
fn build_expiry_index(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    let mut index = txn.open_table(EXPIRY).map_err(backend)?;
    let mut n = 0;
    let dedup = txn.open_table(DEDUP).map_err(backend)?;
    for entry in dedup.iter().map_err(backend)? {
        let (k, v) = entry.map_err(backend)?;
        if let Some(at) = expiry_of(v.value()) {
            index_expiry(&mut index, at, 'd', k.value())?;
            n += 1;
        }
    }
    let status = txn.open_table(queue::STATUS).map_err(backend)?;
    for entry in status.iter().map_err(backend)? {
        let (k, v) = entry.map_err(backend)?;
        if let Some(at) = expiry_of(v.value()).filter(|at| *at != u64::MAX) {
            index_expiry(&mut index, at, 's', k.value())?;
            n += 1;
        }
    }
    Ok(n)
}

impl DiskStore {
    /// Opens (or creates) the database at `path`, creating its folder, with the
    /// default free-space reserve (64 MiB).
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        Self::open_with(path, 64 << 20)
    }

    /// Opens (or creates) the database at `path`, creating its folder. A file another
    /// process holds open is refused: one gateway per file. Below `min_free` bytes of
    /// free space, new claims and events are refused with an error (503), so that the
    /// events already stored can still be settled and delivered.
    pub fn open_with(path: &Path, min_free: u64) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::files::private_dir(dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        }
        // Queued events hold bodies and headers (credentials among them): the file is
        // its owner's only, whoever created it.
        let file = DbFile::open(path, CACHE).map_err(|e| anyhow::anyhow!("the store: {e}"))?;
        let db = file.get()?;
        // The table exists from the start, so reads never race its creation.
        let txn = db.begin_write().map_err(|e| anyhow::anyhow!("{e}"))?;
        let indexed = txn
            .list_tables()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .any(|t| redb::TableHandle::name(&t) == redb::TableHandle::name(&EXPIRY));
        for table in [DEDUP, queue::STATUS] {
            txn.open_table(table).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        txn.open_table(queue::EVENTS)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if !indexed {
            let n = build_expiry_index(&txn).map_err(|e| anyhow::anyhow!("{e}"))?;
            if n > 0 {
                tracing::info!(
                    records = n,
                    "disk store: indexed the expiry of the records of an older file"
                );
            }
        }
        txn.commit().map_err(|e| anyhow::anyhow!("{e}"))?;
        let index = Arc::new(Mutex::new(queue::Index::load(&db).map_err(|e| {
            anyhow::anyhow!("cannot read the queue of {}: {e}", path.display())
        })?));
        drop(db);
        let shared = Arc::new(Shared {
            file,
            min_free,
            failing: std::sync::atomic::AtomicBool::new(false),
            metrics: {
                let m = crate::telemetry::StoreMetrics::default();
                // Exported at 0 from the start.
                let _ = (m.expired("dedup"), m.expired("queue_status"));
                m
            },
        });
        let (ops, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let (writer_shared, writer_index) = (shared.clone(), index.clone());
        std::thread::Builder::new()
            .name("hookgate-disk".into())
            .spawn(move || writer(&writer_shared, &writer_index, &rx))
            .map_err(|e| anyhow::anyhow!("cannot start the store's writer: {e}"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                ops: Mutex::new(ops),
                shared,
                index,
                limits: Mutex::default(),
                claims: claims::Claims::default(),
            }),
        })
    }

    /// Makes every commit so far durable: queue attempt results (and claims) are
    /// committed without an fsync, and a stopping gateway must not lose them.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.call(Op::Flush).await.map(|_| ())
    }

    /// The store's metric handles.
    pub fn metrics(&self) -> crate::telemetry::StoreMetrics {
        self.inner.shared.metrics.clone()
    }

    /// The database file.
    /// The destination queues under `prefix` that hold undelivered events, as
    /// `(route, destination)` (from the in-memory index: no read of the file).
    pub fn stored_queues(&self, prefix: &str) -> Vec<(String, String)> {
        let spaces = self
            .inner
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .spaces();
        spaces
            .iter()
            .filter_map(|space| space.strip_prefix(prefix))
            .map(|name| match name.split_once('/') {
                Some((route, destination)) => (route.to_owned(), destination.to_owned()),
                None => (name.to_owned(), name.to_owned()),
            })
            .collect()
    }

    pub fn path(&self) -> &Path {
        self.inner.shared.file.path()
    }

    /// The free-space reserve (`store.min_free_space`).
    pub(crate) fn min_free(&self) -> u64 {
        self.inner.shared.min_free
    }

    /// The open database: the delivery log reads the tables it kept in this file
    /// before it had one of its own (`store/log/disk.rs`), once, at open.
    pub(crate) fn database(&self) -> Result<Arc<Database>, StoreError> {
        self.inner.shared.get()
    }

    async fn call(&self, op: Op) -> Result<Reply, StoreError> {
        let (answer, reply) = tokio::sync::oneshot::channel();
        let sent = self
            .inner
            .ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_send((op, answer));
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(StoreError::Refused(
                    "the disk store's write queue is full".into(),
                ));
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(StoreError::Refused(
                    "the disk store's writer stopped".into(),
                ));
            }
        }
        reply
            .await
            .map_err(|_| StoreError::Backend("the disk store's writer stopped".into()))?
    }
}

/// After a failed write, the writer tries again after this long, doubling each time
/// up to `RETRY_MAX`: a full disk is not freed in microseconds, and a writer that
/// retried at once would spin on it.
const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// While writes keep failing, one summary line at most this often.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The writer thread: batches of operations, one transaction and one fsync each.
fn writer(shared: &Shared, index: &Mutex<queue::Index>, rx: &Receiver<(Op, Answer)>) {
    let mut w = Writer {
        shared,
        index,
        unsynced_since: None,
        unsynced: Vec::new(),
        trouble: None,
        sweep_more: true,
        swept_at: Instant::now(),
    };
    loop {
        let first = match rx.recv_timeout(w.wait()) {
            Ok(op) => Some(op),
            Err(RecvTimeoutError::Timeout) => None,
            // Every handle is gone: the store was dropped.
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let batch = first.map(|first| {
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            batch
        });
        if w.trouble.is_some() && !w.recover() {
            // Nothing is written until the next try: the operations fail at once,
            // but a copy of what the store holds is answered from it.
            if let Some(batch) = batch {
                let refused = StoreError::Refused(
                    "the disk store cannot write (a full disk?); it retries on its own".into(),
                );
                for (op, answer) in batch {
                    let reply = shared
                        .get()
                        .ok()
                        .and_then(|db| held_reply(&db, &op))
                        .map_or_else(|| Err(refused.clone()), Ok);
                    let _ = answer.send(reply);
                }
            }
            continue;
        }
        match batch {
            Some(batch) => w.run(batch),
            None => w.sweep_alone(),
        }
        w.flush_if_due();
    }
}

/// What the writer thread keeps between batches.
struct Writer<'a> {
    shared: &'a Shared,
    index: &'a Mutex<queue::Index>,
    /// Since when commits without an fsync have been waiting for one: a durable batch
    /// makes them durable, and none may wait longer than FLUSH_AFTER (busy or idle).
    unsynced_since: Option<Instant>,
    /// The attempt results among those commits ([`queue::Change::Finished`]). A reopen
    /// rolls the file back to its last durable commit; these are then written again
    /// before any event is handed out, so that a delivered event never becomes due
    /// again. Bounded: a flush empties it, and nothing is added while writes fail.
    unsynced: Vec<queue::Change>,
    /// Set while writes fail.
    trouble: Option<Trouble>,
    /// Whether the last sweep step was full (more records may have expired), and
    /// when it ran.
    sweep_more: bool,
    swept_at: Instant,
}

/// Writes are failing (a full disk, an I/O error): deliveries are held back, the
/// writer tries again after a growing wait, and the log gets one line at the start, a
/// summary at most every [`LOG_EVERY`], and one at the end.
struct Trouble {
    since: Instant,
    failures: u64,
    /// Failures since the last line logged.
    unlogged: u64,
    logged_at: Instant,
    wait: Duration,
    next_try: Instant,
}

impl Writer<'_> {
    fn index(&self) -> std::sync::MutexGuard<'_, queue::Index> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long to wait for the next operation before there is something to do.
    fn wait(&self) -> Duration {
        if let Some(t) = &self.trouble {
            return t.next_try.saturating_duration_since(Instant::now());
        }
        let sweep = if self.sweep_more {
            Duration::ZERO
        } else {
            SWEEP_CHECK.saturating_sub(self.swept_at.elapsed())
        };
        self.unsynced_since.map_or(sweep, |t| {
            FLUSH_AFTER.saturating_sub(t.elapsed()).min(sweep)
        })
    }

    /// Applies a batch and answers its operations.
    fn run(&mut self, batch: Vec<(Op, Answer)>) {
        let db = match self.shared.get() {
            Ok(db) => db,
            Err(e) => {
                for (_, answer) in batch {
                    let _ = answer.send(Err(e.clone()));
                }
                self.failed(&e);
                return;
            }
        };
        // New work (a claim, an event) is refused while space is short; settling and
        // delivering what is stored goes on, and frees space as events are delivered.
        let low = batch
            .iter()
            .any(|(op, _)| op.is_new_work())
            .then(|| self.shared.low_on_space())
            .flatten();
        // Below the reserve, a copy of what the store holds is still answered from it
        // (never refused like a new event); only new events are refused.
        let batch = match low {
            Some(free) => self.refuse_new_work(&db, batch, free),
            None => batch,
        };
        if batch.is_empty() {
            return;
        }
        let durable = !batch.iter().all(|(op, _)| op.may_skip_fsync());
        let mut results = Vec::new();
        let sweep = self.sweep_due();
        let applied = apply(&db, self.index, &batch, &mut results, sweep);
        if applied.is_err() {
            // Nothing of the batch was stored: what its queue operations pinned is free.
            self.index().unpin_all();
        }
        match applied {
            Ok((replies, swept)) => {
                if sweep {
                    self.swept(swept);
                }
                if durable {
                    self.unsynced_since = None;
                    self.unsynced.clear();
                } else {
                    self.unsynced_since.get_or_insert_with(Instant::now);
                    self.unsynced.append(&mut results);
                }
                for ((_, answer), reply) in batch.into_iter().zip(replies) {
                    let _ = answer.send(reply);
                }
            }
            // An unreadable record the batch needed: nothing of it was stored, and
            // the file is fine.
            Err(e @ StoreError::Corrupt(_)) => {
                tracing::error!(error = %e, operations = batch.len(), "the disk store could not commit; nothing of this batch was stored");
                for (_, answer) in batch {
                    let _ = answer.send(Err(e.clone()));
                }
            }
            Err(e) => {
                for (_, answer) in batch {
                    let _ = answer.send(Err(e.clone()));
                }
                drop(db);
                self.failed(&e);
            }
        }
    }

    /// Answers the new work of a batch while free space is below the reserve: a copy of
    /// what the store holds from what it holds, anything else refused. Returns the
    /// rest of the batch (settling and delivering what is stored goes on).
    fn refuse_new_work(
        &self,
        db: &Database,
        batch: Vec<(Op, Answer)>,
        free: u64,
    ) -> Vec<(Op, Answer)> {
        let mut rest = Vec::with_capacity(batch.len());
        for (op, answer) in batch {
            if !op.is_new_work() {
                rest.push((op, answer));
                continue;
            }
            let reply = held_reply(db, &op).map_or_else(|| Err(self.shared.refused_full(free)), Ok);
            let _ = answer.send(reply);
        }
        rest
    }

    fn sweep_due(&self) -> bool {
        self.sweep_more || self.swept_at.elapsed() >= SWEEP_CHECK
    }

    fn swept(&mut self, swept: Swept) {
        self.sweep_more = swept.more;
        self.swept_at = Instant::now();
        let m = &self.shared.metrics;
        if swept.dedup > 0 {
            m.expired("dedup").inc_by(swept.dedup);
        }
        if swept.status > 0 {
            m.expired("queue_status").inc_by(swept.status);
        }
    }

    /// A sweep step in a transaction of its own, when no operation is waiting. Not
    /// fsynced: a deletion lost in a crash is made again (an expired record is absent
    /// to every call anyway).
    fn sweep_alone(&mut self) {
        if !self.sweep_due() {
            return;
        }
        let swept = self.shared.get().and_then(|db| {
            let mut txn = db.begin_write().map_err(backend)?;
            txn.set_durability(Durability::None).map_err(backend)?;
            let swept = sweep_step(&txn, now_ms())?;
            txn.commit().map_err(backend)?;
            Ok(swept)
        });
        match swept {
            Ok(swept) => {
                if swept.dedup + swept.status > 0 {
                    self.unsynced_since.get_or_insert_with(Instant::now);
                }
                self.swept(swept);
            }
            Err(e) => self.failed(&e),
        }
    }

    /// Flushes commits that waited [`FLUSH_AFTER`] for an fsync.
    fn flush_if_due(&mut self) {
        if self.trouble.is_some()
            || self
                .unsynced_since
                .is_none_or(|t| t.elapsed() < FLUSH_AFTER)
        {
            return;
        }
        let flushed = self.shared.get().and_then(|db| {
            let txn = db.begin_write().map_err(backend)?;
            txn.commit().map_err(backend)
        });
        match flushed {
            Ok(()) => {
                self.unsynced_since = None;
                self.unsynced.clear();
            }
            Err(e) => self.failed(&e),
        }
    }

    /// A write failed. Deliveries are held back from now until the writer has written
    /// again (see [`Writer::recover`]); the next try waits.
    fn failed(&mut self, e: &StoreError) {
        self.shared.metrics.write_failures.inc();
        self.shared.metrics.deliveries_held.set(1);
        self.shared
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.index().hold(true);
        let now = Instant::now();
        match &mut self.trouble {
            None => {
                tracing::error!(error = %e, unsynced_results = self.unsynced.len(), "disk store: a write failed; queue deliveries are held back, and new claims and events refused, until the store can write again (it retries on its own)");
                self.trouble = Some(Trouble {
                    since: now,
                    failures: 1,
                    unlogged: 0,
                    logged_at: now,
                    wait: RETRY_FIRST,
                    next_try: now + RETRY_FIRST,
                });
            }
            Some(t) => {
                t.failures += 1;
                t.unlogged += 1;
                t.wait = (t.wait * 2).min(RETRY_MAX);
                t.next_try = now + t.wait;
                if t.logged_at.elapsed() >= LOG_EVERY {
                    tracing::warn!(error = %e, failures = t.unlogged, for_secs = t.since.elapsed().as_secs(), "disk store: still cannot write; queue deliveries held back");
                    t.unlogged = 0;
                    t.logged_at = now;
                }
            }
        }
    }

    /// After failed writes, once the wait is over: reopens the file (a handle that saw
    /// an I/O error refuses every later write), rebuilds the queue's index from it,
    /// writes again the attempt results the reopen lost, and lets deliveries go on.
    /// False while it still cannot write.
    fn recover(&mut self) -> bool {
        if self
            .trouble
            .as_ref()
            .is_some_and(|t| Instant::now() < t.next_try)
        {
            return false;
        }
        let written = self.shared.reopen().and_then(|()| {
            let db = self.shared.get()?;
            self.index().reload(&db);
            // Durable: these results have waited long enough. With none, an empty
            // commit checks that the file can be written again.
            let txn = db.begin_write().map_err(backend)?;
            queue::rewrite(&txn, &self.unsynced)?;
            txn.commit().map_err(backend)
        });
        if let Err(e) = written {
            self.failed(&e);
            return false;
        }
        {
            let index = self.index;
            let mut index = index
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for change in self.unsynced.drain(..) {
                index.replay(change);
            }
            index.hold(false);
        }
        self.unsynced_since = None;
        self.shared.metrics.deliveries_held.set(0);
        self.shared
            .failing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.trouble.take() {
            tracing::warn!(
                failures = t.failures,
                after_secs = t.since.elapsed().as_secs(),
                "disk store: writes succeed again; queue deliveries go on"
            );
        }
        true
    }
}

/// What the store holds of a new claim's or event's key, read without writing: the
/// answer a copy gets (`None`: nothing held, or it cannot be read).
fn held_reply(db: &Database, op: &Op) -> Option<Reply> {
    let txn = db.begin_read().ok()?;
    let now = now_ms();
    match op {
        Op::Queue(q) => {
            let dedup = txn.open_table(DEDUP).ok()?;
            let status = txn.open_table(queue::STATUS).ok()?;
            queue::held_copy(&dedup, &status, q, now)
                .ok()
                .flatten()
                .map(|c| Reply::Queue(queue::QReply::Enqueued(crate::store::Enqueued::Existing(c))))
        }
        _ => None,
    }
}

/// Applies a batch in one write transaction and commits it durably.
fn apply(
    db: &Database,
    index: &Mutex<queue::Index>,
    batch: &[(Op, Answer)],
    unsynced_results: &mut Vec<queue::Change>,
    sweep: bool,
) -> Result<(Vec<Result<Reply, StoreError>>, Swept), StoreError> {
    let mut txn = db.begin_write().map_err(backend)?;
    // A batch of queue attempt results alone is committed without an fsync: it
    // reaches the disk with the next durable batch, or within FLUSH_AFTER (the writer
    // flushes it, busy or idle). Nothing the provider was told depends on it: a lost attempt result means
    // the event is tried again after a restart (a delivered one with the same
    // Idempotency-Key). What must survive — the done record behind every 2xx a
    // provider got, and every queued event — is fsynced before the answer.
    let durable = !batch.iter().all(|(op, _)| op.may_skip_fsync());
    if !durable {
        txn.set_durability(Durability::None).map_err(backend)?;
    }
    let now = now_ms();
    let mut replies = Vec::with_capacity(batch.len());
    let mut changes = Vec::new();
    {
        let mut table = txn.open_table(DEDUP).map_err(backend)?;
        let mut events = txn.open_table(queue::EVENTS).map_err(backend)?;
        let mut status = txn.open_table(queue::STATUS).map_err(backend)?;
        let mut expiries = txn.open_table(EXPIRY).map_err(backend)?;
        for (op, _) in batch {
            let key = match op {
                Op::Complete { key, .. } | Op::Forget { key } => key.as_str(),
                Op::Flush => {
                    replies.push(Ok(Reply::Flushed));
                    continue;
                }
                Op::Queue(q) => {
                    // An unreadable record fails its own operation (found before it
                    // writes anything), not the whole batch.
                    match queue::apply(
                        &mut table,
                        &mut events,
                        &mut status,
                        &mut expiries,
                        index,
                        q,
                        now,
                        &mut changes,
                    ) {
                        Ok(reply) => replies.push(Ok(Reply::Queue(reply))),
                        Err(e @ StoreError::Corrupt(_)) => replies.push(Err(e)),
                        Err(e) => return Err(e),
                    }
                    continue;
                }
            };
            replies.push(Ok(dedup_op(&mut table, &mut expiries, op, key, now)?));
        }
    }
    let swept = if sweep {
        sweep_step(&txn, now)?
    } else {
        Swept::default()
    };
    txn.commit().map_err(backend)?;
    if batch.iter().any(|(op, _)| matches!(op, Op::Queue(_))) {
        let mut index = index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for change in changes {
            if !durable && matches!(change, queue::Change::Finished { .. }) {
                unsynced_results.push(change.clone());
            }
            index.apply(change);
        }
        index.unpin_all();
    }
    Ok((replies, swept))
}

/// Applies a complete or forget to the dedup table.
fn dedup_op(
    table: &mut redb::Table<&'static str, &'static [u8]>,
    expiries: &mut redb::Table<(u64, &'static str), ()>,
    op: &Op,
    key: &str,
    now: u64,
) -> Result<Reply, StoreError> {
    let live = match table.get(key).map_err(backend)? {
        None => None,
        Some(v) => match decode(v.value()) {
            Some((record, expires)) if expires > now => Some(record),
            Some(_) => None,
            None => return Err(StoreError::Corrupt(key.to_owned())),
        },
    };
    Ok(match op {
        Op::Complete {
            token,
            fingerprint,
            ttl,
            ..
        } => match live {
            Some(Record::Done { token: t, .. }) if t == token.as_str() => {
                Reply::Settled(Settled::Applied)
            }
            // Another claim holds the key: leave it alone.
            Some(record) if record.token() != token.as_str() => Reply::Settled(Settled::NotOwner),
            // This claim's in-flight record, or none left (the lease ran out
            // and nobody claimed since): record the effect.
            _ => {
                let done = Record::done(token, fingerprint);
                let at = expiry(now, *ttl);
                table
                    .insert(key, encode(&done, at).as_slice())
                    .map_err(backend)?;
                index_expiry(expiries, at, 'd', key)?;
                Reply::Settled(Settled::Applied)
            }
        },
        Op::Forget { .. } => {
            table.remove(key).map_err(backend)?;
            Reply::Forgot(live.is_some())
        }
        Op::Queue(_) | Op::Flush => {
            return Err(StoreError::Backend("not a claim operation".into()));
        }
    })
}

impl DiskStore {
    /// What the file holds live under `key` (a done record, or the in-flight record
    /// an older version wrote).
    fn stored(&self, key: &DedupKey) -> Result<Option<Record>, StoreError> {
        let txn = self.inner.shared.get()?.begin_read().map_err(backend)?;
        let table = txn.open_table(DEDUP).map_err(backend)?;
        queue::live_record(&table, key, now_ms())
    }

    /// Whether a new claim may be taken: not while writes fail or free space is
    /// below the reserve (its done record could not be written).
    fn admit(&self) -> Result<(), StoreError> {
        let shared = &self.inner.shared;
        if shared.failing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Refused(
                "the disk store cannot write (a full disk?); it retries on its own".into(),
            ));
        }
        // Measured for each new claim (one statfs): a file filled by another process
        // in the last instant still refuses the next claim.
        match shared.low_on_space() {
            Some(free) => Err(shared.refused_full(free)),
            None => Ok(()),
        }
    }
}

impl DedupStore for DiskStore {
    async fn claim(
        &self,
        key: &DedupKey,
        _fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        // The shard stays locked from the look to the take: two copies cannot both
        // find the key free. A done record is written before its claim lets go of the
        // key (`complete`), so a key free here is either done in the file or new.
        let mut shard = self.inner.claims.shard(key.as_str());
        let now = queue::mono_ms();
        if shard.held.get(key.as_str()).is_some_and(|h| h.holds(now)) {
            return Ok(Claim::InFlight);
        }
        if let Some(record) = self.stored(key)? {
            return Ok(record.as_existing());
        }
        self.admit()?;
        let token = Token::random();
        shard.take(key.as_str(), token.clone(), expiry(now, lease), now, false);
        Ok(Claim::Claimed(token))
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        {
            let mut shard = self.inner.claims.shard(key.as_str());
            match shard.held.get_mut(key.as_str()) {
                Some(h) if h.token != *token && h.holds(queue::mono_ms()) => {
                    return Ok(Settled::NotOwner);
                }
                Some(h) if h.token == *token => h.settling = true,
                // Its lease ran out and nobody claimed since: the file decides.
                _ => {}
            }
        }
        let op = Op::Complete {
            key: key.clone(),
            token: token.clone(),
            fingerprint: fingerprint.to_owned(),
            ttl,
        };
        let result = match self.call(op).await {
            Ok(Reply::Settled(s)) => Ok(s),
            Ok(_) => Err(StoreError::Backend("unexpected reply".into())),
            Err(e) => Err(e),
        };
        let mut shard = self.inner.claims.shard(key.as_str());
        match &result {
            // Written: the done record answers copies from now on.
            Ok(_) => shard.drop_if_held_by(key.as_str(), token),
            // Not written: the lease runs on, and a retry of the write may follow.
            Err(_) => {
                if let Some(h) = shard.held.get_mut(key.as_str())
                    && h.token == *token
                {
                    h.settling = false;
                }
            }
        }
        result
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        _fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        let mut shard = self.inner.claims.shard(key.as_str());
        Ok(match shard.held.get(key.as_str()) {
            Some(h) if h.token == *token => {
                shard.held.remove(key.as_str());
                Settled::Applied
            }
            Some(h) if h.holds(queue::mono_ms()) => Settled::NotOwner,
            // Nothing held: a done record (this claim's or another's) is not undone.
            _ => match self.stored(key)? {
                Some(_) => Settled::NotOwner,
                None => Settled::Applied,
            },
        })
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let held = self
            .inner
            .claims
            .shard(key.as_str())
            .held
            .remove(key.as_str())
            .is_some_and(|h| h.holds(queue::mono_ms()));
        match self.call(Op::Forget { key: key.clone() }).await? {
            Reply::Forgot(existed) => Ok(existed || held),
            _ => Err(StoreError::Backend("unexpected reply".into())),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let txn = self.inner.shared.get()?.begin_read().map_err(backend)?;
        txn.open_table(DEDUP).map_err(backend)?;
        Ok(())
    }

    async fn peek(&self, key: &DedupKey) -> Result<Option<Claim>, StoreError> {
        let shard = self.inner.claims.shard(key.as_str());
        if shard
            .held
            .get(key.as_str())
            .is_some_and(|h| h.holds(queue::mono_ms()))
        {
            return Ok(Some(Claim::InFlight));
        }
        Ok(self.stored(key)?.map(|r| r.as_existing()))
    }
}

#[cfg(test)]
mod tests {
    use redb::ReadableTableMetadata as _;

    use super::*;

    #[test]
    fn records_and_their_expiry_round_trip() {
        let r = Record::done(&Token::random(), "fp");
        assert_eq!(decode(&encode(&r, 42)), Some((r, 42)));
        assert_eq!(decode(b"short"), None);
    }

    #[tokio::test]
    async fn expired_records_are_swept() {
        let dir = tempfile::tempdir().expect("dir");
        let s = DiskStore::open(&dir.path().join("h.db")).expect("open");
        for i in 0..50 {
            let k = DedupKey::new("t:", "r", &format!("e{i}"));
            done(&s, &k, Duration::from_millis(1)).await;
        }
        let live = DedupKey::new("t:", "r", "live");
        done(&s, &live, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let db = s.inner.shared.get().expect("open");
        let txn = db.begin_write().expect("write");
        while sweep_step(&txn, now_ms()).expect("sweep").more {}
        txn.commit().expect("commit");
        let txn = db.begin_read().expect("read");
        let table = txn.open_table(DEDUP).expect("table");
        assert_eq!(table.len().expect("len"), 1, "only the live record is left");
    }

    /// Claims `key` and records it done for `ttl`.
    async fn done(s: &DiskStore, key: &DedupKey, ttl: Duration) {
        let Ok(Claim::Claimed(token)) = s.claim(key, "fp", Duration::from_secs(60)).await else {
            panic!("claim");
        };
        assert_eq!(
            s.complete(key, &token, "fp", ttl).await.expect("complete"),
            Settled::Applied
        );
    }

    #[tokio::test]
    async fn claims_in_flight_are_held_in_the_process_and_only_done_records_written() {
        let dir = tempfile::tempdir().expect("dir");
        let s = DiskStore::open(&dir.path().join("h.db")).expect("open");
        let k = DedupKey::new("t:", "r", "e");
        let Ok(Claim::Claimed(token)) = s.claim(&k, "fp", Duration::from_secs(60)).await else {
            panic!("claim");
        };
        assert_eq!(dedup_len(&s), 0, "a claim writes nothing to the file");
        assert_eq!(
            s.claim(&k, "fp", Duration::from_secs(60)).await,
            Ok(Claim::InFlight)
        );
        assert_eq!(s.peek(&k).await, Ok(Some(Claim::InFlight)));
        // Another claim's token settles nothing.
        let other = Token::random();
        assert_eq!(s.release(&k, &other, "fp").await, Ok(Settled::NotOwner));
        assert_eq!(
            s.complete(&k, &other, "fp", Duration::from_secs(60)).await,
            Ok(Settled::NotOwner)
        );
        assert_eq!(dedup_len(&s), 0);
        // Released: free again, still nothing written.
        assert_eq!(s.release(&k, &token, "fp").await, Ok(Settled::Applied));
        let Ok(Claim::Claimed(token)) = s.claim(&k, "fp", Duration::from_secs(60)).await else {
            panic!("claim after release");
        };
        assert_eq!(
            s.complete(&k, &token, "fp", Duration::from_secs(60)).await,
            Ok(Settled::Applied)
        );
        assert_eq!(dedup_len(&s), 1, "the done record is in the file");
        assert_eq!(
            s.inner.claims.len(),
            0,
            "and the claim is gone from the process"
        );
        assert_eq!(
            s.claim(&k, "fp", Duration::from_secs(60)).await,
            Ok(Claim::Done {
                fingerprint: "fp".into()
            })
        );
        // A lease that ran out lets the next claim through; leases nobody settled are
        // swept as more claims are taken.
        let lapsed = DedupKey::new("t:", "r", "lapsed");
        assert!(matches!(
            s.claim(&lapsed, "fp", Duration::from_millis(1)).await,
            Ok(Claim::Claimed(_))
        ));
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(matches!(
            s.claim(&lapsed, "fp", Duration::from_millis(1)).await,
            Ok(Claim::Claimed(_))
        ));
        for i in 0..(64 * 1_024 * 2) {
            let k = DedupKey::new("t:", "r", &format!("x{i}"));
            let _ = s.claim(&k, "fp", Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        for i in 0..(64 * 1_024 * 2) {
            let k = DedupKey::new("t:", "r", &format!("y{i}"));
            let _ = s.claim(&k, "fp", Duration::from_secs(60)).await;
        }
        assert!(
            s.inner.claims.len() < 64 * 1_024 * 3,
            "expired leases were swept: {} held",
            s.inner.claims.len()
        );
    }

    fn dedup_len(s: &DiskStore) -> u64 {
        let db = s.inner.shared.get().expect("open");
        let txn = db.begin_read().expect("read");
        txn.open_table(DEDUP).expect("table").len().expect("len")
    }

    #[tokio::test]
    async fn the_writer_deletes_expired_records_as_they_expire_in_small_steps() {
        let dir = tempfile::tempdir().expect("dir");
        let s = DiskStore::open(&dir.path().join("h.db")).expect("open");
        // More than one step's worth, some forgotten (an expiry entry without its
        // record).
        for i in 0..(SWEEP_STEP * 3) {
            let k = DedupKey::new("t:", "r", &format!("e{i}"));
            done(&s, &k, Duration::from_millis(1)).await;
            if i % 5 == 0 {
                let _ = s.forget(&k).await;
            }
        }
        let live = DedupKey::new("t:", "r", "live");
        done(&s, &live, Duration::from_secs(60)).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while dedup_len(&s) > 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            dedup_len(&s),
            1,
            "only the live record is left, well within a minute"
        );
        assert!(matches!(
            s.claim(&live, "fp", Duration::from_secs(1)).await,
            Ok(Claim::Done { .. })
        ));
        // Every record but the forgotten ones and the live one, each counted once (a
        // record may expire, 1 ms in, and be swept before its forget comes).
        let expired = s.metrics().expired("dedup").get();
        let forgotten = (SWEEP_STEP * 3).div_ceil(5) as u64;
        let records = SWEEP_STEP as u64 * 3 - forgotten;
        assert!(
            (records..=records + forgotten).contains(&expired),
            "{expired} expired"
        );
    }

    #[tokio::test]
    async fn a_file_from_before_the_expiry_index_gets_one_and_is_swept() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("h.db");
        {
            let db = open_file(&path, CACHE).expect("create");
            let txn = db.begin_write().expect("write");
            {
                let mut t = txn.open_table(DEDUP).expect("table");
                let r = Record::done(&Token::random(), "fp");
                for i in 0..100 {
                    let at = if i == 0 { u64::MAX - 1 } else { 1 };
                    t.insert(format!("k{i}").as_str(), encode(&r, at).as_slice())
                        .expect("insert");
                }
            }
            txn.commit().expect("commit");
        }
        let s = DiskStore::open(&path).expect("open");
        let deadline = Instant::now() + Duration::from_secs(5);
        while dedup_len(&s) > 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            dedup_len(&s),
            1,
            "the expired records of the old file are gone"
        );
    }
}
