//! One writer thread owns every write. Each store call is an operation sent to it; the
//! thread takes whatever operations are waiting (up to `BATCH`), applies them in
//! order in one write transaction, writes what they wrote to the journal
//! (`journal.rs`), commits the transaction, and only then answers each caller: a
//! group commit. A batch that completes or forgets is fsynced (its journal frame), so
//! a done record is on disk before the provider gets its 2xx, and a burst shares one
//! fsync. Claims in flight are not written at all: they are leases held in the process
//! (`claims.rs`), so a forward never waits behind the writer to start. A failed write
//! (a full disk) answers every operation of the batch with an error.
//!
//! The same file holds the queue of `delivery = "queue"` routes (`queue/`): an
//! enqueue is fsynced like a done record; an attempt's result is journaled without an
//! fsync and flushed within `FLUSH_AFTER` (or by the next durable batch, or at
//! shutdown). A checkpoint makes the database itself durable about once a second.
//! Below `min_free` bytes of free space, new claims and events are refused; after an
//! I/O error the file is reopened, the journal replayed into it and the queue's index
//! rebuilt from it.
//!
//! A record's expiry is wall-clock time stored with it (it must survive a restart);
//! an expired record is absent to every call, and expired records are deleted a bounded
//! number at a time, once a minute.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableDatabase as _, ReadableTable as _};

use super::journal::{self, Effects, Journal};
use super::{
    Answer, DEDUP, EXPIRY, Op, Reply, Shared, backend, dedup::dedup_op, expiry_of, index_expiry,
    queue,
};
use crate::queue::now_ms;
use crate::store::StoreError;

/// Operations applied in one transaction at most.
const BATCH: usize = 512;
/// How long an idle writer leaves a commit without an fsync before flushing it.
const FLUSH_AFTER: Duration = Duration::from_millis(50);
/// Expired records the sweep deletes at most per step. A step runs inside a batch's
/// transaction (or, idle, in one of its own) whenever the last one found more, or
/// [`SWEEP_CHECK`] has passed: small steps keep a batch's wait behind the sweep short,
/// and one per batch keeps up with any write rate the writer sustains.
const SWEEP_STEP: usize = 256;
/// How often an idle writer looks for expired records.
const SWEEP_CHECK: Duration = Duration::from_millis(100);

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
fn sweep_step(
    txn: &redb::WriteTransaction,
    effects: &Effects,
    now: u64,
) -> Result<Swept, StoreError> {
    let mut index = journal::open(txn, EXPIRY, effects)?;
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
    let mut dedup = journal::open(txn, DEDUP, effects)?;
    let mut status = journal::open(txn, queue::STATUS, effects)?;
    let mut events = journal::open(txn, queue::EVENTS, effects)?;
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
pub(super) fn build_expiry_index(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    // At open, before the journal: committed durably with the open's transaction.
    let mut index = journal::open(txn, EXPIRY, &Effects::new())?;
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

/// After a failed write, the writer tries again after this long, doubling each time
/// up to `RETRY_MAX`: a full disk is not freed in microseconds, and a writer that
/// retried at once would spin on it.
const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// While writes keep failing, one summary line at most this often.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The writer thread: batches of operations, one transaction and one fsync each.
pub(super) fn writer(
    shared: &Shared,
    index: &Mutex<queue::Index>,
    journal: Journal,
    rx: &Receiver<(Op, Answer)>,
) {
    let mut w = Writer {
        shared,
        index,
        journal,
        effects: Effects::new(),
        unsynced_since: None,
        trouble: None,
        sweep_more: true,
        swept_at: Instant::now(),
    };
    loop {
        let first = match rx.recv_timeout(w.wait()) {
            Ok(op) => Some(op),
            Err(RecvTimeoutError::Timeout) => None,
            // Every handle is gone: the store was dropped. What the journal holds goes
            // into the file, so the next open has nothing to replay.
            Err(RecvTimeoutError::Disconnected) => {
                if w.trouble.is_none() && w.journal.checkpoint_in().is_some() {
                    let _ = shared.get().and_then(|db| w.journal.checkpoint(&db));
                }
                return;
            }
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
        w.checkpoint_if_due();
        shared
            .pending
            .store(w.journal.pending(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the writer thread keeps between batches.
struct Writer<'a> {
    shared: &'a Shared,
    index: &'a Mutex<queue::Index>,
    journal: Journal,
    /// The writes of the batch in hand (its journal frame).
    effects: Effects,
    /// Since when journal frames without an fsync have been waiting for one: a
    /// durable batch makes them durable, and none may wait longer than FLUSH_AFTER
    /// (busy or idle).
    unsynced_since: Option<Instant>,
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
        let checkpoint = self.journal.checkpoint_in().unwrap_or(sweep).min(sweep);
        self.unsynced_since.map_or(checkpoint, |t| {
            FLUSH_AFTER.saturating_sub(t.elapsed()).min(checkpoint)
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
        let sweep = self.sweep_due();
        let applied = apply(
            &db,
            self.index,
            &mut self.journal,
            &self.effects,
            &batch,
            durable,
            sweep,
        );
        if applied.is_err() {
            // Nothing of the batch was stored: what its queue operations pinned is free.
            self.index().unpin_all();
            self.effects.clear();
        }
        match applied {
            Ok((replies, swept)) => {
                if sweep {
                    self.swept(swept);
                }
                if durable {
                    self.unsynced_since = None;
                } else {
                    self.unsynced_since.get_or_insert_with(Instant::now);
                }
                // A stopping gateway leaves the database durable and nothing to replay,
                // before it is told the store is flushed (what it flushed is durable in
                // the journal either way).
                let flush = batch.iter().any(|(op, _)| matches!(op, Op::Flush));
                let checkpointed = if flush {
                    self.journal.checkpoint(&db)
                } else {
                    Ok(())
                };
                for ((_, answer), reply) in batch.into_iter().zip(replies) {
                    let _ = answer.send(reply);
                }
                if let Err(e) = checkpointed {
                    drop(db);
                    self.failed(&e);
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
        let (journal, effects) = (&mut self.journal, &self.effects);
        let swept = self.shared.get().and_then(|db| {
            let mut txn = db.begin_write().map_err(backend)?;
            txn.set_durability(Durability::None).map_err(backend)?;
            let swept = sweep_step(&txn, effects, now_ms())?;
            if !effects.is_empty() {
                journal.append(effects, false).map_err(backend)?;
            }
            txn.commit().map_err(backend)?;
            Ok(swept)
        });
        effects.clear();
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
        match self.journal.sync() {
            Ok(()) => self.unsynced_since = None,
            Err(e) => self.failed(&backend(e)),
        }
    }

    /// Makes the database durable with every frame so far, when a checkpoint is due,
    /// and starts the journal again.
    fn checkpoint_if_due(&mut self) {
        if self.trouble.is_some() || !self.journal.checkpoint_due() {
            return;
        }
        match self
            .shared
            .get()
            .and_then(|db| self.journal.checkpoint(&db))
        {
            Ok(()) => self.unsynced_since = None,
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
                tracing::error!(error = %e, "disk store: a write failed; queue deliveries are held back, and new claims and events refused, until the store can write again (it retries on its own)");
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
    /// an I/O error refuses every later write; the reopened one holds the last durable
    /// commit), replays the journal into it (every batch committed since, whether its
    /// frame was fsynced or not: the file's pages are read back), checkpoints, rebuilds
    /// the queue's index from it, and lets deliveries go on. False while it still cannot
    /// write.
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
            // A durable commit: it also checks that the file can be written again.
            let replayed = self.journal.replay(&db)?;
            if replayed.frames > 0 {
                tracing::info!(
                    frames = replayed.frames,
                    writes = replayed.records,
                    "disk store: the journal's batches since the last checkpoint written again"
                );
            }
            self.index().reload(&db);
            Ok(())
        });
        if let Err(e) = written {
            self.failed(&e);
            return false;
        }
        self.index().hold(false);
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

/// Applies a batch in one write transaction, writes its journal frame (fsynced when
/// `durable`), and commits the transaction (the next checkpoint makes it durable in
/// the file).
///
/// A batch of queue attempt results alone is journaled without an fsync: it reaches
/// the disk with the next durable batch, or within FLUSH_AFTER (the writer flushes it,
/// busy or idle). Nothing the provider was told depends on it: a lost attempt result
/// (a power cut; a killed process leaves its frame in the file) means the event is
/// tried again after a restart (a delivered one with the same Idempotency-Key). What
/// must survive — the done record behind every 2xx a provider got, and every queued
/// event — is fsynced before the answer.
fn apply(
    db: &Database,
    index: &Mutex<queue::Index>,
    journal: &mut Journal,
    effects: &Effects,
    batch: &[(Op, Answer)],
    durable: bool,
    sweep: bool,
) -> Result<(Vec<Result<Reply, StoreError>>, Swept), StoreError> {
    let mut txn = db.begin_write().map_err(backend)?;
    txn.set_durability(Durability::None).map_err(backend)?;
    let now = now_ms();
    let mut replies = Vec::with_capacity(batch.len());
    let mut changes = Vec::new();
    {
        let mut table = journal::open(&txn, DEDUP, effects)?;
        let mut events = journal::open(&txn, queue::EVENTS, effects)?;
        let mut status = journal::open(&txn, queue::STATUS, effects)?;
        let mut expiries = journal::open(&txn, EXPIRY, effects)?;
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
        sweep_step(&txn, effects, now)?
    } else {
        Swept::default()
    };
    // The batch is in the journal (on disk when durable) before the transaction
    // commits: a write the journal refused is never seen by a reader. A durable batch
    // that wrote nothing still makes the frames before it durable.
    if effects.is_empty() {
        if durable {
            journal.sync().map_err(backend)?;
        }
    } else {
        journal.append(effects, durable).map_err(backend)?;
    }
    txn.commit().map_err(backend)?;
    if batch.iter().any(|(op, _)| matches!(op, Op::Queue(_))) {
        let mut index = index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for change in changes {
            index.apply(change);
        }
        index.unpin_all();
    }
    Ok((replies, swept))
}

#[cfg(test)]
mod tests {
    use redb::ReadableTableMetadata as _;

    use super::super::tests::{dedup_len, done};
    use super::super::{CACHE, DiskStore, encode, file::open_file};
    use super::*;
    use crate::store::{Claim, DedupKey, DedupStore as _, Record, Token};

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
        while sweep_step(&txn, &Effects::new(), now_ms())
            .expect("sweep")
            .more
        {}
        txn.commit().expect("commit");
        let txn = db.begin_read().expect("read");
        let table = txn.open_table(DEDUP).expect("table");
        assert_eq!(table.len().expect("len"), 1, "only the live record is left");
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
    async fn a_flush_leaves_every_record_in_the_file_and_nothing_to_replay() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("h.db");
        let s = DiskStore::open(&path).expect("open");
        for i in 0..20 {
            done(
                &s,
                &DedupKey::new("t:", "r", &format!("e{i}")),
                Duration::from_secs(60),
            )
            .await;
        }
        s.flush().await.expect("flush");
        // The file alone, as the flush left it: what it holds is durable in it.
        let copy = tempfile::tempdir().expect("dir");
        std::fs::copy(&path, copy.path().join("h.db")).expect("copy");
        let c = DiskStore::open(&copy.path().join("h.db")).expect("open the copy");
        assert_eq!(dedup_len(&c), 20);
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
