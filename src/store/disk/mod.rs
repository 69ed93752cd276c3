//! The disk store: an embedded, crash-safe database file, so one gateway with no Redis
//! keeps its dedup window across a restart or a `kill -9`.
//!
//! redb (pure Rust, copy-on-write B-trees) rather than an LSM engine such as fjall:
//! the store is small records read-modify-written under one key at a time, which a
//! B-tree with serializable write transactions does directly, with no compaction to
//! tune. A durable redb commit rewrites and fsyncs each touched tree's path, so the
//! batches are made durable in a journal in front of it instead (`journal.rs`), and
//! redb itself at a checkpoint about once a second: measured side by side with fjall
//! (`benches/store.rs engines`), the journal in front of redb came first, and fjall's
//! open fails on a torn write inside its last batch.
//!
//! Here, the handle ([`DiskStore`]) and what opens it; beside it:
//! - `file.rs`: the database file (`DbFile`), shared with the delivery log's file;
//! - `journal.rs`: the journal beside it (`<path>.journal`): each batch's writes,
//!   fsynced before its callers are answered, replayed into the file at open;
//! - `writer.rs`: the writer thread (group commit, flush, the sweep of expired records,
//!   recovery after failed writes);
//! - `dedup.rs` and `claims.rs`: the claims half ([`DedupStore`](crate::store::DedupStore));
//! - `queue/`: the queue half ([`QueueStore`](crate::store::QueueStore)): its tables,
//!   the writer's operations and the in-memory index;
//! - `pacing.rs`: rate limits and pauses ([`Pacing`](crate::store::Pacing)).

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redb::{Database, TableDefinition};

mod audit;
mod cells;
mod claims;
mod dedup;
mod file;
mod journal;
mod pacing;
mod queue;
mod writer;

pub(crate) use self::file::DbFile;

use super::{DedupKey, Record, Settled, StoreError, Token};

/// key → 8 bytes of expiry (Unix milliseconds, big-endian) + the record's text.
const DEDUP: TableDefinition<&str, &[u8]> = TableDefinition::new("dedup");
/// Operations waiting for the writer at most; beyond, a call fails at once (503).
const QUEUE: usize = 16_384;
/// `(expiry, tag + key)` of every record that expires: the sweep reads the expired
/// ones first, in order, instead of scanning the tables. Tag `d`: a dedup record;
/// `s`: a queue status. A record rewritten with another expiry (a claim completed),
/// or deleted, leaves its old entry behind: the sweep checks the record and drops a
/// stale entry without touching it.
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");

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
    /// Nothing to change: the batch it is in is fsynced, and a checkpoint follows it
    /// (graceful shutdown).
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

/// The store's file and what its writer and readers share.
#[derive(Debug)]
struct Shared {
    file: DbFile,
    /// Below this much free space, new claims and events are refused.
    min_free: u64,
    metrics: crate::store::StoreMetrics,
    /// Set while writes fail: new claims are refused (their done records could not
    /// be written).
    failing: std::sync::atomic::AtomicBool,
    /// Bytes journaled since the last checkpoint, which the database file has still to
    /// write: counted as taken from the free space (the delivery log's too).
    pending: Arc<std::sync::atomic::AtomicU64>,
    /// The journal's file, synced before a durable commit made outside the writer.
    journal: std::fs::File,
}

impl Shared {
    fn get(&self) -> Result<Arc<Database>, StoreError> {
        self.file.get()
    }

    fn reopen(&self) -> Result<(), StoreError> {
        self.file.reopen()
    }

    /// Commits a write transaction made outside the writer (a cell, an audit record)
    /// durably. The journal is made durable first, with every batch the commit also
    /// makes durable in the file (`journal.rs`); no batch commits in between, since
    /// `txn` holds the file's one write transaction.
    fn commit_durably(&self, txn: redb::WriteTransaction) -> Result<(), StoreError> {
        self.journal.sync_data().map_err(backend)?;
        txn.commit().map_err(backend)
    }

    /// Whether the file's filesystem has less than `min_free` bytes available, less
    /// what the next checkpoint has still to write.
    fn low_on_space(&self) -> Option<u64> {
        let pending = self.pending.load(std::sync::atomic::Ordering::Relaxed);
        let free = self.file.free_space()?.saturating_sub(pending);
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
    limits: Mutex<HashMap<String, pacing::Limiter>>,
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

fn expiry(now: u64, d: Duration) -> u64 {
    now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Enters a record that expires at `at` in the [`EXPIRY`] index (`tag`: see there).
fn index_expiry(
    index: &mut journal::Logged<'_, (u64, &'static str), ()>,
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

use crate::time::mono_ms;

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
            let n = writer::build_expiry_index(&txn).map_err(|e| anyhow::anyhow!("{e}"))?;
            if n > 0 {
                tracing::info!(
                    records = n,
                    "disk store: indexed the expiry of the records of an older file"
                );
            }
        }
        txn.commit().map_err(|e| anyhow::anyhow!("{e}"))?;
        // Batches committed since the last checkpoint: in the journal only.
        let mut journal = journal::Journal::open(path, min_free).map_err(|e| {
            anyhow::anyhow!("cannot open {}: {e}", journal::path_of(path).display())
        })?;
        let replayed = journal.replay(&db).map_err(|e| {
            anyhow::anyhow!(
                "cannot replay {} into the store: {e}",
                journal.path().display()
            )
        })?;
        if replayed.frames > 0 {
            tracing::info!(
                frames = replayed.frames,
                writes = replayed.records,
                "disk store: the journal's batches since the last checkpoint written again (the gateway did not stop cleanly)"
            );
        }
        let index = Arc::new(Mutex::new(queue::Index::load(&db).map_err(|e| {
            anyhow::anyhow!("cannot read the queue of {}: {e}", path.display())
        })?));
        drop(db);
        let shared = Arc::new(Shared {
            file,
            min_free,
            failing: std::sync::atomic::AtomicBool::new(false),
            pending: Arc::default(),
            journal: journal
                .sync_handle()
                .map_err(|e| anyhow::anyhow!("{}: {e}", journal.path().display()))?,
            metrics: {
                let m = crate::store::StoreMetrics::default();
                // Exported at 0 from the start.
                let _ = (m.expired("dedup"), m.expired("queue_status"));
                m
            },
        });
        let (ops, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let (writer_shared, writer_index) = (shared.clone(), index.clone());
        std::thread::Builder::new()
            .name("hookgate-disk".into())
            .spawn(move || writer::writer(&writer_shared, &writer_index, journal, &rx))
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

    /// Makes every commit so far durable: queue attempt results are journaled without
    /// an fsync, and a stopping gateway must not lose them. The database is
    /// checkpointed too, so the next start has nothing to replay.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.call(Op::Flush).await.map(|_| ())
    }

    /// The store's metric handles.
    pub fn metrics(&self) -> crate::store::StoreMetrics {
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

    /// Bytes journaled since the last checkpoint, kept up to date by the writer: the
    /// database file has still to write them, so what is free on the volume is less by
    /// as much (the delivery log counts it too).
    pub(crate) fn pending_bytes(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.inner.shared.pending.clone()
    }

    /// The open database: the delivery log reads the tables it kept in this file
    /// before it had one of its own (`store/log/disk.rs`), once, at open.
    pub(crate) fn database(&self) -> Result<Arc<Database>, StoreError> {
        self.inner.shared.get()
    }

    /// Commits a write transaction of [`Self::database`] durably, the journal first:
    /// see `Shared::commit_durably`.
    pub(crate) fn commit_durably(&self, txn: redb::WriteTransaction) -> Result<(), StoreError> {
        self.inner.shared.commit_durably(txn)
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

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase as _, ReadableTableMetadata as _};

    use super::*;
    use crate::store::{Claim, DedupStore as _};

    #[test]
    fn records_and_their_expiry_round_trip() {
        let r = Record::done(&Token::random(), "fp");
        assert_eq!(decode(&encode(&r, 42)), Some((r, 42)));
        assert_eq!(decode(b"short"), None);
    }

    /// Claims `key` and records it done for `ttl`.
    pub(super) async fn done(s: &DiskStore, key: &DedupKey, ttl: Duration) {
        let Ok(Claim::Claimed(token)) = s.claim(key, "fp", Duration::from_secs(60)).await else {
            panic!("claim");
        };
        assert_eq!(
            s.complete(key, &token, "fp", ttl).await.expect("complete"),
            Settled::Applied
        );
    }

    pub(super) fn dedup_len(s: &DiskStore) -> u64 {
        let db = s.inner.shared.get().expect("open");
        let txn = db.begin_read().expect("read");
        txn.open_table(DEDUP).expect("table").len().expect("len")
    }
}
