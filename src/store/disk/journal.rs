//! The store's journal: a file beside the database (`<path>.journal`) where each batch
//! the writer commits is written, as the table writes it made, before redb commits it.
//!
//! Why: a durable redb commit writes the copy-on-write path of every tree a batch
//! touched (about a dozen pages for a done record) and fsyncs them. A batch written
//! here is one sequential write and one `fdatasync`; redb then commits it with
//! `Durability::None` (readers see it at once, no page is fsynced), and a checkpoint
//! makes redb durable about once a second, for every batch since, in one commit.
//! Measured with `benches/store.rs engines`: about twice the durable batches per
//! second of a durable redb commit each (docs/performance.md). Written by hand: redb
//! has no log of its own, and a write-ahead log in front of it is the few dozen lines
//! below.
//!
//! A frame: the length of what follows the checksum (u32, little-endian), its XXH3-64
//! (u64), the frame's number (u64), then records, each `tag` (the table's number; its
//! high bit set for a removal), key length and value length (u32 each), key, value:
//! the writes as they were made, so applying a frame twice leaves what applying it once
//! does. Replaying every frame from the last checkpoint on, in order, over what redb
//! holds after any crash (its last durable commit, or any later commit) gives what the
//! writer had committed.
//!
//! A checkpoint commits redb durably with the number of the last frame (in the
//! `journal_checkpoint` table), and the journal starts again at the start of its file,
//! written over (never truncated while small: writing over blocks already written
//! changes no metadata, so an `fdatasync` carries the data alone). A replay takes the
//! frames from the start whose length and checksum hold and whose numbers follow on
//! from the checkpoint's, up to the first that does not: a torn last write (never
//! acknowledged: its batch was answered only after its `fdatasync`), zeros, or a frame
//! left from before the checkpoint (its number is lower).
//!
//! The store's other durable commits (cells, the audit log) make redb durable with
//! every batch the writer committed before them, so they `fdatasync` the journal first
//! (`Shared::commit_durably`, through [`Journal::sync_handle`]): otherwise a power cut could take from the journal frames
//! (attempt results, journaled without an fsync) whose writes the file holds, and the
//! replay of the frames before them would mix older records with newer ones (a status
//! replayed as undelivered whose body the file no longer holds).

use std::borrow::Borrow;
use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use redb::{
    AccessGuard, Key, ReadableDatabase as _, StorageError, Table, TableDefinition, TableHandle,
    Value, WriteTransaction,
};

use super::{DEDUP, EXPIRY, backend, queue};
use crate::store::StoreError;

/// In redb, under `""`: the number of the last frame a checkpoint made durable there.
const CHECKPOINTED: TableDefinition<&str, u64> = TableDefinition::new("journal_checkpoint");
/// A checkpoint once the journal passes this size (or half the free-space reserve,
/// when that is less: [`Journal::limit`])...
pub(super) const MAX: u64 = 64 << 20;
/// ... or this long after the last one, when frames were written since.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The journal file's size from its creation: written with zeros once, so that frames
/// are written over blocks the filesystem already holds. A second of small batches
/// fits; the file grows past it when it must (large bodies), and is cut back to its
/// limit at a checkpoint when a large frame took it further.
const START: u64 = 16 << 20;
/// The least journal a checkpoint is forced at, however small the reserve.
const MIN_LIMIT: u64 = 1 << 20;
/// Length (u32), XXH3-64 (u64), the frame's number (u64).
const HEADER: usize = 20;
/// A record's tag, key length and value length.
const RECORD_HEAD: usize = 9;
/// The tag bit of a removal.
const REMOVED: u8 = 0x80;

/// The journal's file name beside the database at `db`.
pub(crate) fn path_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

/// The writes of the batch in hand, in the order they are made (a frame being built:
/// its header's room first). Shared by the batch's open tables.
#[derive(Debug, Clone, Default)]
pub(super) struct Effects(Rc<RefCell<Vec<u8>>>);

impl Effects {
    pub(super) fn new() -> Self {
        Self(Rc::new(RefCell::new(vec![0; HEADER])))
    }

    fn record(&self, tag: u8, key: &[u8], value: &[u8]) {
        let mut buf = self.0.borrow_mut();
        buf.reserve(RECORD_HEAD + key.len() + value.len());
        buf.push(tag);
        // redb refuses keys and values of 4 GiB or more before they get here.
        buf.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
        buf.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(value);
    }

    /// Whether the batch wrote nothing.
    pub(super) fn is_empty(&self) -> bool {
        RefCell::borrow(&self.0).len() <= HEADER
    }

    /// Forgets what was recorded (the batch was not committed).
    pub(super) fn clear(&self) {
        self.0.borrow_mut().truncate(HEADER);
    }
}

/// The number of a table the writer writes in a record, from its name.
fn number(name: &str) -> Option<u8> {
    [
        DEDUP.name(),
        EXPIRY.name(),
        queue::EVENTS.name(),
        queue::STATUS.name(),
    ]
    .iter()
    .position(|n| *n == name)
    .and_then(|i| u8::try_from(i).ok())
}

/// A table open in the writer's transaction whose writes are recorded in the batch's
/// [`Effects`]. Reads go to the table itself ([`std::ops::Deref`]).
pub(super) struct Logged<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    tag: u8,
    effects: Effects,
}

/// Opens `def` in `txn`, its writes recorded in `effects`.
pub(super) fn open<'t, K: Key + 'static, V: Value + 'static>(
    txn: &'t WriteTransaction,
    def: TableDefinition<K, V>,
    effects: &Effects,
) -> Result<Logged<'t, K, V>, StoreError> {
    let tag = number(def.name())
        .ok_or_else(|| StoreError::Backend(format!("table {} is not journaled", def.name())))?;
    Ok(Logged {
        table: txn.open_table(def).map_err(backend)?,
        tag,
        effects: effects.clone(),
    })
}

impl<'t, K: Key + 'static, V: Value + 'static> Logged<'t, K, V> {
    pub(super) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<AccessGuard<'_, V>>, StorageError> {
        self.effects.record(
            self.tag,
            K::as_bytes(key.borrow()).as_ref(),
            V::as_bytes(value.borrow()).as_ref(),
        );
        self.table.insert(key, value)
    }

    pub(super) fn remove<'a>(
        &mut self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<AccessGuard<'_, V>>, StorageError> {
        self.effects
            .record(self.tag | REMOVED, K::as_bytes(key.borrow()).as_ref(), &[]);
        self.table.remove(key)
    }

    /// The table, for what reads a `ReadableTable`.
    pub(super) fn table(&self) -> &Table<'t, K, V> {
        &self.table
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> std::ops::Deref for Logged<'t, K, V> {
    type Target = Table<'t, K, V>;
    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

/// The journal file and where its next frame goes. Owned by the writer thread.
#[derive(Debug)]
pub(super) struct Journal {
    file: File,
    path: PathBuf,
    /// Where the next frame goes.
    at: u64,
    /// The file's size.
    len: u64,
    /// The last frame's number.
    seq: u64,
    /// Frames written since their last `fdatasync`.
    unsynced: bool,
    checkpointed: Instant,
    /// A checkpoint is forced once this much is written since the last: [`MAX`], or
    /// half the free-space reserve when that is less. What the journal holds since the
    /// last checkpoint, the database file still has to write (redb keeps it in memory
    /// until then), so the store counts it as taken from the free space
    /// ([`Journal::pending`]); keeping it below the reserve keeps the checkpoint's
    /// room.
    limit: u64,
}

/// What a replay applied.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Replayed {
    pub(super) frames: u64,
    pub(super) records: u64,
}

impl Journal {
    /// Opens (or creates, its owner's only) the journal of the database at `db`, on a
    /// filesystem whose last `min_free` bytes are the store's reserve.
    pub(super) fn open(db: &Path, min_free: u64) -> std::io::Result<Self> {
        let path = path_of(db);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        crate::files::owner_only(&path)?;
        let len = file.metadata()?.len();
        let mut journal = Self {
            file,
            path,
            at: 0,
            len,
            seq: 0,
            unsynced: false,
            checkpointed: Instant::now(),
            limit: (min_free / 2).clamp(MIN_LIMIT, MAX),
        };
        journal.preallocate(min_free);
        Ok(journal)
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The journal's file for other threads to `fdatasync` before a durable commit of
    /// their own: a sync covers every frame written before it, so every batch the
    /// writer committed before theirs.
    pub(super) fn sync_handle(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    /// Writes zeros up to [`START`], a page at a time (so that the page cache holds the
    /// file in pages, not in large folios a small frame would dirty whole). At most
    /// half the space above the reserve: on a small disk the journal grows as frames
    /// need instead, and the reserve stays for what the store must write.
    fn preallocate(&mut self, min_free: u64) {
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let room =
            crate::files::free_space(dir).map_or(0, |free| free.saturating_sub(min_free) / 2);
        let target = START.min(self.limit).min(self.len + room) & !4095;
        if self.len >= target {
            return;
        }
        let zeros = [0u8; 4096];
        let mut at = self.len;
        while at < target {
            if let Err(e) = self.file.write_all_at(&zeros, at) {
                tracing::warn!(path = %self.path.display(), error = %e, "disk store: cannot write the journal's first blocks; it grows as it is written");
                break;
            }
            at += zeros.len() as u64;
        }
        if self.file.sync_all().is_ok() {
            self.len = at;
        }
    }

    /// Applies the frames that follow the last checkpoint to `db` and checkpoints (a
    /// durable commit): at open, and after a reopen. The journal starts again at the
    /// start of its file.
    pub(super) fn replay(&mut self, db: &redb::Database) -> Result<Replayed, StoreError> {
        let checkpointed = {
            let txn = db.begin_read().map_err(backend)?;
            match txn.open_table(CHECKPOINTED) {
                Ok(t) => t.get("").map_err(backend)?.map(|v| v.value()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(backend(e)),
            }
        };
        // A file that never had a journal (new, or from before the journal) has nothing
        // to replay: its frames are numbered from a random start, so that a journal
        // left beside another file (one deleted and made again) never follows on.
        let fresh = checkpointed.is_none();
        let checkpointed = checkpointed.unwrap_or_else(|| rand::random::<u64>() >> 1);
        let mut replayed = Replayed::default();
        let mut next = checkpointed + 1;
        let mut at = 0;
        let txn = db.begin_write().map_err(backend)?;
        {
            let mut tables = Tables::open(&txn)?;
            while let Some(frame) = (!fresh).then(|| self.read_frame(at, next)).flatten() {
                replayed.records += tables.apply(&frame)?;
                replayed.frames += 1;
                at += (HEADER + frame.len()) as u64;
                next += 1;
            }
            txn.open_table(CHECKPOINTED)
                .map_err(backend)?
                .insert("", next - 1)
                .map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        self.seq = next - 1;
        self.restart();
        Ok(replayed)
    }

    /// The records of the frame at `at` if it is whole and numbered `seq`.
    fn read_frame(&self, at: u64, seq: u64) -> Option<Vec<u8>> {
        let mut header = [0u8; HEADER];
        self.file.read_exact_at(&mut header, at).ok()?;
        let (len, rest) = header.split_at(4);
        let (sum, number) = rest.split_at(8);
        let len = u64::from(u32::from_le_bytes(len.try_into().ok()?));
        if len < 8 || at + 12 + len > self.len {
            return None;
        }
        if u64::from_le_bytes(number.try_into().ok()?) != seq {
            return None;
        }
        let mut covered = vec![0u8; usize::try_from(len).ok()?];
        self.file.read_exact_at(&mut covered, at + 12).ok()?;
        if xxhash_rust::xxh3::xxh3_64(&covered) != u64::from_le_bytes(sum.try_into().ok()?) {
            return None;
        }
        covered.drain(..8);
        Some(covered)
    }

    /// Writes the batch's frame, and `fdatasync`s it (with every frame before it) when
    /// `sync`. Clears `effects` once written. An error leaves
    /// the frame's number free: the next frame takes it, written over what this one
    /// left (a replay stops at a frame whose checksum fails).
    pub(super) fn append(&mut self, effects: &Effects, sync: bool) -> std::io::Result<()> {
        let mut frame = effects.0.borrow_mut();
        let seq = self.seq + 1;
        frame[12..HEADER].copy_from_slice(&seq.to_le_bytes());
        let covered = frame.get(12..).unwrap_or_default();
        let len = u32::try_from(covered.len()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a batch of 4 GiB or more cannot be journaled",
            )
        })?;
        let sum = xxhash_rust::xxh3::xxh3_64(covered);
        frame[..4].copy_from_slice(&len.to_le_bytes());
        frame[4..12].copy_from_slice(&sum.to_le_bytes());
        self.file.write_all_at(&frame, self.at)?;
        let end = self.at + frame.len() as u64;
        self.len = self.len.max(end);
        if sync {
            self.file.sync_data()?;
        }
        self.at = end;
        self.seq = seq;
        self.unsynced = !sync;
        frame.truncate(HEADER);
        Ok(())
    }

    /// `fdatasync`s frames written without one.
    pub(super) fn sync(&mut self) -> std::io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Whether a checkpoint is due: the journal is past its limit, or frames have
    /// waited [`CHECKPOINT_EVERY`].
    pub(super) fn checkpoint_due(&self) -> bool {
        self.at >= self.limit || (self.at > 0 && self.checkpointed.elapsed() >= CHECKPOINT_EVERY)
    }

    /// Bytes written since the last checkpoint: what the database file has still to
    /// write of them at the next, at most about as much.
    pub(super) fn pending(&self) -> u64 {
        self.at
    }

    /// How long until a checkpoint is due (`None`: no frame waits for one).
    pub(super) fn checkpoint_in(&self) -> Option<Duration> {
        (self.at > 0).then(|| CHECKPOINT_EVERY.saturating_sub(self.checkpointed.elapsed()))
    }

    /// Commits redb durably, with every frame so far, and starts the journal again.
    pub(super) fn checkpoint(&mut self, db: &redb::Database) -> Result<(), StoreError> {
        let txn = db.begin_write().map_err(backend)?;
        txn.open_table(CHECKPOINTED)
            .map_err(backend)?
            .insert("", self.seq)
            .map_err(backend)?;
        txn.commit().map_err(backend)?;
        self.restart();
        Ok(())
    }

    /// After a checkpoint: the next frame goes to the start of the file. A file a
    /// large frame took past the journal's limit is cut back to it.
    fn restart(&mut self) {
        self.at = 0;
        self.unsynced = false;
        self.checkpointed = Instant::now();
        if self.len > self.limit && self.file.set_len(self.limit).is_ok() {
            self.len = self.limit;
        }
    }
}

/// The journaled tables, open for a replay.
struct Tables<'t> {
    dedup: Table<'t, &'static str, &'static [u8]>,
    expiry: Table<'t, (u64, &'static str), ()>,
    events: Table<'t, u64, &'static [u8]>,
    status: Table<'t, &'static str, &'static [u8]>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            dedup: txn.open_table(DEDUP).map_err(backend)?,
            expiry: txn.open_table(EXPIRY).map_err(backend)?,
            events: txn.open_table(queue::EVENTS).map_err(backend)?,
            status: txn.open_table(queue::STATUS).map_err(backend)?,
        })
    }

    /// Applies a frame's records; how many.
    fn apply(&mut self, records: &[u8]) -> Result<u64, StoreError> {
        let corrupt = || StoreError::Corrupt("a journal frame's records do not parse".into());
        let mut n = 0;
        let mut at = 0;
        while at < records.len() {
            let head = records.get(at..at + RECORD_HEAD).ok_or_else(corrupt)?;
            let tag = head[0];
            let k = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let v = u32::from_le_bytes([head[5], head[6], head[7], head[8]]) as usize;
            let body = at + RECORD_HEAD;
            let key = records.get(body..body + k).ok_or_else(corrupt)?;
            let value = records.get(body + k..body + k + v).ok_or_else(corrupt)?;
            let value = (tag & REMOVED == 0).then_some(value);
            // Each key was written by this store (the frame's checksum holds): a `&str`
            // key is UTF-8, which redb's decoding expects.
            match tag & !REMOVED {
                0 => redo(&mut self.dedup, utf8(key)?, value),
                1 => redo(&mut self.expiry, key, value),
                2 => redo(&mut self.events, key, value),
                3 => redo(&mut self.status, utf8(key)?, value),
                _ => Err(corrupt()),
            }?;
            at = body + k + v;
            n += 1;
        }
        Ok(n)
    }
}

fn utf8(key: &[u8]) -> Result<&[u8], StoreError> {
    std::str::from_utf8(key)
        .map(str::as_bytes)
        .map_err(|_| StoreError::Corrupt("a journal record's key is not UTF-8".into()))
}

/// Writes one record again: `value` stored under `key`, or `key` removed.
fn redo<K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), StoreError> {
    let key = K::from_bytes(key);
    match value {
        Some(value) => table.insert(key, V::from_bytes(value)).map(drop),
        None => table.remove(key).map(drop),
    }
    .map_err(backend)
}

#[cfg(test)]
mod tests {
    use redb::{Durability, ReadableDatabase as _, ReadableTable as _, ReadableTableMetadata as _};

    use super::super::file::open_file;
    use super::*;

    /// A database and its journal in a folder, written the way the writer writes.
    struct Files {
        dir: tempfile::TempDir,
        db: redb::Database,
        journal: Journal,
    }

    /// The default `store.min_free_space`: a journal limit of [`MAX`] / 2.
    const RESERVE: u64 = 64 << 20;

    fn db_path(dir: &Path) -> PathBuf {
        dir.join("h.db")
    }

    impl Files {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("dir");
            let (db, journal) = open_both(dir.path());
            Self { dir, db, journal }
        }

        /// One batch: `puts` and `removes` in the dedup table, an event body, then the
        /// frame (fsynced) and a commit without durability, as the writer does.
        fn batch(&mut self, puts: &[(&str, &str)], removes: &[&str], body: Option<(u64, &[u8])>) {
            let effects = Effects::new();
            let mut txn = self.db.begin_write().expect("write");
            txn.set_durability(Durability::None).expect("durability");
            {
                let mut dedup = open(&txn, DEDUP, &effects).expect("dedup");
                for (k, v) in puts {
                    dedup.insert(*k, v.as_bytes()).expect("insert");
                }
                for k in removes {
                    dedup.remove(*k).expect("remove");
                }
                let mut expiry = open(&txn, EXPIRY, &effects).expect("expiry");
                for (k, _) in puts {
                    expiry.insert((7, *k), ()).expect("expiry");
                }
                if let Some((seq, bytes)) = body {
                    let mut events = open(&txn, queue::EVENTS, &effects).expect("events");
                    events.insert(seq, bytes).expect("body");
                }
            }
            self.journal.append(&effects, true).expect("append");
            txn.commit().expect("commit");
        }

        /// What a crash would leave: the two files as the system holds them now.
        fn crash_copy(&self) -> tempfile::TempDir {
            let to = tempfile::tempdir().expect("dir");
            for (from, into) in [
                (db_path(self.dir.path()), db_path(to.path())),
                (
                    path_of(&db_path(self.dir.path())),
                    path_of(&db_path(to.path())),
                ),
            ] {
                std::fs::copy(from, into).expect("copy");
            }
            to
        }
    }

    fn open_both(dir: &Path) -> (redb::Database, Journal) {
        let db = open_file(&db_path(dir), 1 << 20).expect("db");
        let txn = db.begin_write().expect("write");
        for t in [DEDUP, queue::STATUS] {
            txn.open_table(t).expect("table");
        }
        txn.open_table(EXPIRY).expect("table");
        txn.open_table(queue::EVENTS).expect("table");
        txn.commit().expect("commit");
        let mut journal = Journal::open(&db_path(dir), RESERVE).expect("journal");
        journal.replay(&db).expect("replay");
        (db, journal)
    }

    fn dedup(db: &redb::Database) -> Vec<(String, String)> {
        let txn = db.begin_read().expect("read");
        let t = txn.open_table(DEDUP).expect("table");
        t.iter()
            .expect("iter")
            .map(|e| {
                let (k, v) = e.expect("entry");
                let v = String::from_utf8(v.value().to_vec()).expect("utf8");
                (k.value().to_owned(), v)
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Opens a crash copy as the store does at open: the database as the crash left it
    /// (its last durable commit), then the journal replayed into it.
    fn reopen(dir: &Path) -> (redb::Database, Replayed, usize) {
        let db = open_file(&db_path(dir), 1 << 20).expect("db");
        let before = dedup(&db).len();
        let mut journal = Journal::open(&db_path(dir), RESERVE).expect("journal");
        let replayed = journal.replay(&db).expect("replay");
        (db, replayed, before)
    }

    #[test]
    fn batches_since_the_checkpoint_are_in_the_journal_alone_and_replayed_from_it() {
        let mut f = Files::new();
        f.batch(&[("a", "1"), ("b", "1")], &[], Some((1, b"body one")));
        f.batch(&[("a", "2")], &["b"], None);
        f.batch(&[("c", "1")], &[], Some((2, &[7u8; 70_000])));
        let copy = f.crash_copy();
        let (db, replayed, before) = reopen(copy.path());
        assert_eq!(before, 0, "no batch was durable in the database");
        assert_eq!(replayed.frames, 3);
        assert_eq!(dedup(&db), pairs(&[("a", "2"), ("c", "1")]));
        let txn = db.begin_read().expect("read");
        let events = txn.open_table(queue::EVENTS).expect("events");
        assert_eq!(events.len().expect("len"), 2);
        let body = events.get(2).expect("get").expect("the large body");
        assert_eq!(body.value(), &[7u8; 70_000][..]);
        let expiry = txn.open_table(EXPIRY).expect("expiry");
        assert_eq!(expiry.len().expect("len"), 3, "(7, a) twice is one entry");
        drop((body, events, expiry, txn));
        // The replay checkpointed: a second crash right after replays nothing.
        drop(db);
        let (db, replayed, _) = reopen(copy.path());
        assert_eq!(replayed.frames, 0);
        assert_eq!(dedup(&db), pairs(&[("a", "2"), ("c", "1")]));
    }

    #[test]
    fn a_torn_last_frame_is_left_out_and_every_frame_before_it_replayed() {
        for tear in ["flip", "zeros", "short"] {
            let mut f = Files::new();
            f.batch(&[("a", "1")], &[], None);
            f.batch(&[("b", "1")], &[], None);
            let end_of_second = f.journal.at;
            f.batch(&[("c", "1"), ("a", "3")], &[], Some((1, &[1u8; 5000])));
            let end = f.journal.at;
            let copy = f.crash_copy();
            let path = path_of(&db_path(copy.path()));
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("journal");
            match tear {
                // A sector of the last frame never written, or written with something
                // else: the checksum fails.
                "flip" => file.write_all_at(&[0xff; 16], end - 100).expect("tear"),
                "zeros" => file
                    .write_all_at(&vec![0; 4096], end_of_second + 30)
                    .expect("tear"),
                // The file ends inside the frame (a journal that was growing).
                _ => file.set_len(end - 1).expect("tear"),
            }
            drop(file);
            let (db, replayed, _) = reopen(copy.path());
            assert_eq!(replayed.frames, 2, "{tear}");
            assert_eq!(dedup(&db), pairs(&[("a", "1"), ("b", "1")]), "{tear}");
        }
    }

    #[test]
    fn frames_left_from_before_a_checkpoint_are_never_replayed() {
        let mut f = Files::new();
        f.batch(&[("a", "old"), ("b", "old")], &[], Some((1, &[0u8; 3000])));
        f.batch(&[("c", "old")], &[], None);
        f.batch(&[("d", "old")], &[], None);
        f.journal.checkpoint(&f.db).expect("checkpoint");
        // Written over the first frame; the second and third stay in the file after it.
        f.batch(&[("a", "new")], &["d"], None);
        let copy = f.crash_copy();
        let (db, replayed, before) = reopen(copy.path());
        assert_eq!(before, 4, "the checkpoint made the first three durable");
        assert_eq!(replayed.frames, 1);
        assert_eq!(
            dedup(&db),
            pairs(&[("a", "new"), ("b", "old"), ("c", "old")])
        );

        // A crash right after a checkpoint: every frame in the file is older than it.
        let mut f = Files::new();
        f.batch(&[("a", "1")], &[], None);
        f.batch(&[("a", "2")], &[], None);
        f.journal.checkpoint(&f.db).expect("checkpoint");
        let copy = f.crash_copy();
        let (db, replayed, before) = reopen(copy.path());
        assert_eq!((before, replayed.frames), (1, 0));
        assert_eq!(dedup(&db), pairs(&[("a", "2")]));
    }

    #[test]
    fn a_database_durable_past_the_checkpoint_gets_the_same_state_from_a_replay() {
        // Another durable commit (a cell, an audit record) made some batches durable
        // in the database before any checkpoint recorded them: replaying them over it
        // writes what it holds already.
        let mut f = Files::new();
        f.batch(&[("a", "1"), ("b", "1")], &[], None);
        f.batch(&[("a", "2")], &["b"], None);
        f.db.begin_write()
            .expect("write")
            .commit()
            .expect("durable");
        f.batch(&[("b", "3")], &[], None);
        let copy = f.crash_copy();
        let (db, replayed, before) = reopen(copy.path());
        assert_eq!(before, 1, "a = 2 was durable");
        assert_eq!(replayed.frames, 3);
        assert_eq!(dedup(&db), pairs(&[("a", "2"), ("b", "3")]));
    }

    #[test]
    fn a_journal_left_beside_a_new_database_file_is_not_replayed_into_it() {
        let mut f = Files::new();
        f.batch(&[("a", "1")], &[], None);
        let copy = f.crash_copy();
        // The database file deleted (an operator starting over), its journal left.
        std::fs::remove_file(db_path(copy.path())).expect("delete");
        let (db, _) = open_both(copy.path());
        assert!(dedup(&db).is_empty());
        // Nor into the file made before it (it has never had a journal either).
        let copy = f.crash_copy();
        let db = open_file(&db_path(copy.path()), 1 << 20).expect("db");
        let txn = db.begin_write().expect("write");
        txn.delete_table(CHECKPOINTED).expect("delete");
        txn.commit().expect("commit");
        let mut journal = Journal::open(&db_path(copy.path()), RESERVE).expect("journal");
        assert_eq!(journal.replay(&db).expect("replay").frames, 0);
        assert!(dedup(&db).is_empty());
    }

    #[test]
    fn a_failed_append_leaves_its_number_to_the_next_frame() {
        let mut f = Files::new();
        f.batch(&[("a", "1")], &[], None);
        // A frame written but never acknowledged (its append failed after the write):
        // the next one, shorter, goes over it with the same number.
        let effects = Effects::new();
        effects.record(0, b"zzz", &[9; 2000]);
        let (at, seq) = (f.journal.at, f.journal.seq);
        f.journal.append(&effects, true).expect("append");
        (f.journal.at, f.journal.seq) = (at, seq);
        f.batch(&[("b", "1")], &[], None);
        let copy = f.crash_copy();
        let (db, replayed, _) = reopen(copy.path());
        assert_eq!(replayed.frames, 2);
        assert_eq!(dedup(&db), pairs(&[("a", "1"), ("b", "1")]));
    }

    #[test]
    fn the_file_is_written_over_from_its_start_and_cut_back_after_a_large_frame() {
        let mut f = Files::new();
        let len = std::fs::metadata(f.journal.path()).expect("meta").len();
        assert_eq!(len, START, "written once at creation");
        let limit = RESERVE / 2;
        assert_eq!(f.journal.limit, limit);
        f.batch(
            &[("a", "1")],
            &[],
            Some((1, &vec![3u8; (limit + (1 << 20)) as usize])),
        );
        assert!(f.journal.checkpoint_due());
        assert!(std::fs::metadata(f.journal.path()).expect("meta").len() > limit);
        f.journal.checkpoint(&f.db).expect("checkpoint");
        assert_eq!(f.journal.at, 0);
        assert_eq!(
            std::fs::metadata(f.journal.path()).expect("meta").len(),
            limit
        );
        f.batch(&[("b", "1")], &[], None);
        let copy = f.crash_copy();
        let (db, replayed, _) = reopen(copy.path());
        assert_eq!(replayed.frames, 1);
        assert_eq!(dedup(&db), pairs(&[("a", "1"), ("b", "1")]));
    }
}
