//! The disk store's queue: events and their delivery status in the same database file
//! as the dedup records, written by the same writer thread in the same group commits.
//!
//! Here, [`QueueStore`] for [`DiskStore`]; beside it, the queue's tables
//! (`tables.rs`), the writer's operations on them (`ops.rs`), and the in-memory index
//! of what is due when (`index/`).

use std::time::Duration;

use super::{DiskStore, Op, Reply, backend};
use crate::queue::now_ms;
use crate::store::{
    Claim, DedupKey, Depth, Enqueued, Envelope, Fanout, Finish, Leased, QueueRef, QueueStore,
    State, Status, StoreError, StoredEvent, Summary, Target,
};

mod index;
mod ops;
mod tables;

pub(super) use self::index::Index;
pub(super) use self::ops::{QOp, QReply, apply, held_copy};
pub(super) use self::tables::{EVENTS, STATUS, decode_status};
use self::tables::{StatusRecord, get_event, get_status, qkey, split};

/// Events a list looks at, at most.
const LIST_SCAN: usize = 10_000;
/// How long an enqueue holds its key against sync claims at most (it lets go when it
/// ends; this bounds a hold whose task vanished without dropping it).
const ENQUEUE_HOLD: Duration = Duration::from_secs(30);
/// Events an operator's retry or purge changes per transaction: a long list of dead
/// events goes in several, so the writer never stops for long.
const PER_OPERATION: usize = 500;

/// A destination's namespace in the queue tables and the index: the key prefix and
/// the queue's name (the route's, with `/<destination>` for a named destination), so
/// that two prefixes sharing a file never see each other's events.
pub(super) fn space(q: &QueueRef<'_>) -> String {
    format!("{}{}", q.prefix, q.name())
}

fn unexpected() -> StoreError {
    StoreError::Backend("unexpected reply".into())
}

fn summary(id: &str, rec: &StatusRecord) -> Summary {
    Summary {
        destination: None,
        event_id: id.to_owned(),
        event_type: rec.event_type.clone(),
        state: rec.status.state,
        attempts: rec.status.attempts,
        received_at_ms: rec.rx,
        next_at_ms: rec.status.next_at_ms,
        last_result: rec.status.history.last().map(|a| a.result.to_string()),
        last_status: rec.status.history.last().and_then(|a| a.status),
        last_at_ms: rec.status.history.last().map(|a| a.at_ms),
    }
}

impl DiskStore {
    async fn queue_call(&self, op: QOp) -> Result<QReply, StoreError> {
        match self.call(Op::Queue(op)).await? {
            Reply::Queue(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.inner
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads what a list or a lease needs; the writer is not involved.
    fn read<T>(
        &self,
        f: impl FnOnce(
            &redb::ReadOnlyTable<u64, &[u8]>,
            &redb::ReadOnlyTable<&str, &[u8]>,
        ) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        use redb::ReadableDatabase as _;
        let txn = self.inner.shared.get()?.begin_read().map_err(backend)?;
        let events = txn.open_table(EVENTS).map_err(backend)?;
        let status = txn.open_table(STATUS).map_err(backend)?;
        f(&events, &status)
    }

    /// The IDs a retry or purge acts on, in chunks of [`PER_OPERATION`].
    fn targets(&self, q: &QueueRef<'_>, target: &Target) -> Vec<Vec<String>> {
        match target {
            Target::One(id) => vec![vec![id.clone()]],
            Target::Some(ids) => ids.chunks(PER_OPERATION).map(<[String]>::to_vec).collect(),
            Target::AllDead => self
                .index()
                .dead(&space(q))
                .chunks(PER_OPERATION)
                .map(<[String]>::to_vec)
                .collect(),
        }
    }
}

impl QueueStore for DiskStore {
    async fn enqueue_to(
        &self,
        fanout: &Fanout<'_>,
        event: &StoredEvent,
        dedup_ttl: Duration,
    ) -> Result<Enqueued, StoreError> {
        let env = &event.envelope;
        let dedup = DedupKey::new(fanout.prefix, fanout.route, &env.event_id);
        // A sync claim of the same key is in flight (the route was switched by a
        // reload): a copy, as it would have been found in the file.
        let Some(_hold) = self.inner.claims.hold(dedup.as_str(), ENQUEUE_HOLD) else {
            return Ok(Enqueued::Existing(Claim::InFlight));
        };
        let op = QOp::Enqueue {
            dedup,
            all: fanout.all.iter().map(|d| space(&fanout.queue(d))).collect(),
            to: fanout
                .to
                .iter()
                .map(|(d, key)| (space(&fanout.queue(d)), key.clone()))
                .collect(),
            event_id: env.event_id.clone(),
            fingerprint: env.fingerprint.clone(),
            rx: env.received_at_ms,
            event_type: env.event_type.clone(),
            bytes: event.encode(),
            ttl: dedup_ttl,
        };
        match self.queue_call(op).await? {
            QReply::Enqueued(e) => Ok(e),
            _ => Err(unexpected()),
        }
    }

    async fn take_due(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Leased>, StoreError> {
        let taken = self.index().take(&space(q), max, lease);
        if taken.is_empty() {
            return Ok(Vec::new());
        }
        let space = space(q);
        let read = self.read(|events, status| {
            let mut out = Vec::with_capacity(taken.len());
            let mut aside = Vec::new();
            for (id, token) in &taken {
                let k = qkey(&space, id);
                let read = get_status(status, &k).and_then(|rec| {
                    let event = match &rec {
                        Some(r) => get_event(events, r.seq, &k)?,
                        None => None,
                    };
                    Ok((event, rec))
                });
                match read {
                    // The index hands out only events the file has as queued or
                    // retrying (see `RouteIndex::pinned`).
                    Ok((Some(event), Some(rec)))
                        if matches!(rec.status.state, State::Queued | State::Retrying) =>
                    {
                        out.push(Leased {
                            event,
                            status: rec.status,
                            lease: token.clone(),
                        });
                    }
                    // Purged since it was taken: the purge's change, applied once it
                    // committed, takes it (and this lease) out of the index.
                    Ok((_, None)) => {}
                    Ok((_, Some(rec)))
                        if !matches!(rec.status.state, State::Queued | State::Retrying) =>
                    {
                        tracing::error!(route = q.route, event_id = %id, state = rec.status.state.as_str(), "disk store: the queue's index had an event due that its file does not; it was set aside (a bug: please report it)");
                        aside.push(id.clone());
                    }
                    // An unreadable event (or one without its body) is set aside
                    // (logged, left in the file for `purge`), so that it does not hold
                    // back the rest of its queue.
                    Ok(_) | Err(StoreError::Corrupt(_)) => {
                        tracing::warn!(route = q.route, event_id = %id, "disk store: an unreadable queued event was set aside (hookgate events purge removes it)");
                        aside.push(id.clone());
                    }
                    // A read that failed (not a record that cannot be decoded): the
                    // lease is given back, and the event is due again at once.
                    Err(e) => {
                        tracing::warn!(route = q.route, event_id = %id, error = %e, "disk store: reading a queued event failed; it is due again");
                        self.index().give_back(&space, id);
                    }
                }
            }
            Ok((out, aside))
        });
        let mut index = self.index();
        match read {
            Ok((out, aside)) => {
                for id in aside {
                    index.set_aside(&space, &id);
                }
                Ok(out)
            }
            Err(e) => {
                // Nothing was handed out: the events are due again at once.
                for (id, _) in &taken {
                    index.give_back(&space, id);
                }
                Err(e)
            }
        }
    }

    async fn renew(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let id = &leased.event.envelope.event_id;
        Ok(self.index().renew(&space(q), id, &leased.lease, lease))
    }

    async fn give_back(&self, q: &QueueRef<'_>, leased: &Leased) -> Result<bool, StoreError> {
        let (space, id) = (space(q), &leased.event.envelope.event_id);
        let mut index = self.index();
        if !index.holds(&space, id, &leased.lease) {
            return Ok(false);
        }
        index.give_back(&space, id);
        Ok(true)
    }

    async fn finish(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        end: &Finish,
        dedup_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut status = leased.status.clone();
        status.record(end);
        let id = &leased.event.envelope.event_id;
        let op = QOp::Finish {
            route: space(q),
            id: id.clone(),
            lease: leased.lease.clone(),
            status,
            ttl: dedup_ttl,
        };
        match self.queue_call(op).await? {
            QReply::Finished(done) => Ok(done),
            _ => Err(unexpected()),
        }
    }

    async fn list(
        &self,
        q: &QueueRef<'_>,
        state: Option<State>,
        limit: usize,
    ) -> Result<Vec<Summary>, StoreError> {
        let ids = match state {
            Some(State::Dead) => self.index().dead(&space(q)),
            Some(State::Delivered) => Vec::new(),
            _ => self.index().undelivered(&space(q), LIST_SCAN),
        };
        let route = space(q);
        let route = route.as_str();
        self.read(|_, status| {
            let mut out = Vec::new();
            if state == Some(State::Delivered) {
                let start = qkey(route, "");
                for entry in status.range(start.as_str()..).map_err(backend)? {
                    let (k, v) = entry.map_err(backend)?;
                    let Some((r, id)) = split(k.value()) else {
                        break;
                    };
                    if r != route || out.len() >= limit {
                        break;
                    }
                    if let Some((rec, expires)) = decode_status(v.value())
                        && rec.status.state == State::Delivered
                        && expires > now_ms()
                    {
                        out.push(summary(id, &rec));
                    }
                }
                out.sort_by_key(|s| s.received_at_ms);
                return Ok(out);
            }
            for id in &ids {
                if out.len() >= limit {
                    break;
                }
                if let Some(rec) = get_status(status, &qkey(route, id))?
                    && state.is_none_or(|s| s == rec.status.state)
                {
                    out.push(summary(id, &rec));
                }
            }
            Ok(out)
        })
    }

    async fn show(
        &self,
        q: &QueueRef<'_>,
        event_id: &str,
    ) -> Result<Option<(Envelope, Status)>, StoreError> {
        let k = qkey(&space(q), event_id);
        self.read(|events, status| {
            let Some(rec) = get_status(status, &k)? else {
                return Ok(None);
            };
            let envelope = match get_event(events, rec.seq, &k)? {
                Some(ev) => ev.envelope,
                // Delivered: what the status keeps.
                None => Envelope {
                    event_id: event_id.to_owned(),
                    event_type: rec.event_type.clone(),
                    fingerprint: rec.fp.clone(),
                    method: String::new(),
                    headers: Vec::new(),
                    query: None,
                    peer: String::new(),
                    received_at_ms: rec.rx,
                    trace: None,
                },
            };
            Ok(Some((envelope, rec.status)))
        })
    }

    async fn retry(&self, q: &QueueRef<'_>, target: &Target) -> Result<u64, StoreError> {
        let mut n = 0;
        for ids in self.targets(q, target) {
            let op = QOp::Requeue {
                route: space(q),
                ids,
            };
            match self.queue_call(op).await? {
                QReply::Count(c) => n += c,
                _ => return Err(unexpected()),
            }
        }
        Ok(n)
    }

    async fn purge(&self, q: &QueueRef<'_>, target: &Target) -> Result<u64, StoreError> {
        let mut n = 0;
        for ids in self.targets(q, target) {
            let op = QOp::Purge {
                space: space(q),
                prefix: q.prefix.to_owned(),
                route: q.route.to_owned(),
                ids,
            };
            match self.queue_call(op).await? {
                QReply::Count(c) => n += c,
                _ => return Err(unexpected()),
            }
        }
        Ok(n)
    }

    async fn release_blocked(&self, q: &QueueRef<'_>) -> Result<u64, StoreError> {
        let mut n = 0;
        for ids in self.targets(q, &Target::AllDead) {
            let op = QOp::ReleaseBlocked {
                route: space(q),
                ids,
            };
            match self.queue_call(op).await? {
                QReply::Count(c) => n += c,
                _ => return Err(unexpected()),
            }
        }
        Ok(n)
    }

    async fn forget_delivered(&self, q: &QueueRef<'_>, event_id: &str) -> Result<bool, StoreError> {
        let op = QOp::ForgetDelivered {
            space: space(q),
            prefix: q.prefix.to_owned(),
            route: q.route.to_owned(),
            id: event_id.to_owned(),
        };
        match self.queue_call(op).await? {
            QReply::Count(n) => Ok(n > 0),
            _ => Err(unexpected()),
        }
    }

    async fn depth(&self, q: &QueueRef<'_>) -> Result<Depth, StoreError> {
        Ok(self.index().depth(&space(q)))
    }
}

#[cfg(test)]
mod tests {
    use super::tables::FAILING_READS;
    use super::*;

    pub(super) fn event(id: &str) -> StoredEvent {
        StoredEvent {
            envelope: Envelope {
                event_id: id.to_owned(),
                event_type: None,
                fingerprint: "fp".into(),
                method: "POST".into(),
                headers: Vec::new(),
                query: None,
                peer: "127.0.0.1".into(),
                received_at_ms: now_ms(),
                trace: None,
            },
            body: bytes::Bytes::from_static(b"{}"),
        }
    }

    #[tokio::test]
    async fn an_enqueue_and_a_sync_claim_of_one_key_never_both_go_ahead() {
        use crate::store::DedupStore as _;
        let dir = tempfile::tempdir().expect("dir");
        let s = DiskStore::open(&dir.path().join("h.db")).expect("open");
        let q = QueueRef::new("t:", "r", "r");
        let key = DedupKey::new("t:", "r", "e1");
        // A sync claim in flight (a reload switched the route to queue meanwhile).
        let Ok(Claim::Claimed(token)) = s.claim(&key, "fp", Duration::from_secs(60)).await else {
            panic!("claim");
        };
        assert_eq!(
            s.enqueue(&q, &event("e1"), Duration::from_secs(60)).await,
            Ok(Enqueued::Existing(Claim::InFlight)),
            "the copy is in flight"
        );
        s.release(&key, &token, "fp").await.expect("release");
        assert_eq!(
            s.enqueue(&q, &event("e1"), Duration::from_secs(60)).await,
            Ok(Enqueued::Queued)
        );
        // The enqueue let go of the key once it was done.
        assert_eq!(s.inner.claims.len(), 0);
        // While an enqueue holds the key, a sync claim finds it in flight.
        let held = s.inner.claims.hold(key.as_str(), Duration::from_secs(60));
        assert!(held.is_some());
        assert_eq!(
            s.claim(&key, "fp", Duration::from_secs(60)).await,
            Ok(Claim::InFlight)
        );
        // Two copies being enqueued at once both go on to the writer.
        let other = s.inner.claims.hold(key.as_str(), Duration::from_secs(60));
        assert!(
            other.is_some(),
            "a second enqueue of the key is not held back"
        );
        drop(other);
        drop(held);
        assert_eq!(s.inner.claims.len(), 0);
    }

    #[tokio::test]
    async fn a_failed_read_in_take_due_gives_the_event_back_instead_of_setting_it_aside() {
        let dir = tempfile::tempdir().expect("dir");
        let s = DiskStore::open(&dir.path().join("h.db")).expect("open");
        let q = QueueRef::new("t:", "r", "r");
        let ttl = Duration::from_secs(60);
        s.enqueue(&q, &event("e1"), ttl).await.expect("enqueue");
        FAILING_READS.with(|n| n.set(1));
        let first = s.take_due(&q, 10, ttl).await.expect("take");
        assert!(first.is_empty(), "the read failed: nothing handed out");
        let again = s.take_due(&q, 10, ttl).await.expect("take");
        assert_eq!(again.len(), 1, "due again at once, not set aside");
        assert_eq!(again[0].event.envelope.event_id, "e1");
    }
}
