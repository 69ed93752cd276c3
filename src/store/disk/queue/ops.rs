//! The queue's operations, applied by the writer thread inside a batch's write
//! transaction.
//!
//! An enqueue is one write transaction that checks the claim, writes the done record,
//! the event and its status, and is fsynced before the provider is answered.

use std::sync::Mutex;
use std::time::Duration;

use redb::ReadableTable;

use super::index::{Change, Index};
use super::tables::{StatusRecord, encode_status, qkey, read_status};
use super::unexpected;
use crate::store::disk::dedup::live_record;
use crate::store::disk::journal::Logged;
use crate::store::disk::{backend, encode, expiry, index_expiry};
use crate::store::{Claim, DedupKey, Enqueued, Record, State, Status, StoreError, Token};

/// A queue operation, applied by the writer thread.
pub(in crate::store::disk) enum QOp {
    Enqueue {
        dedup: DedupKey,
        /// The queue of every destination of the route: a copy in any is a duplicate.
        all: Vec<String>,
        /// The queues it goes to, each with the event's order key there.
        to: Vec<(String, Option<String>)>,
        event_id: String,
        fingerprint: String,
        /// Unix ms when it was received.
        rx: u64,
        event_type: Option<String>,
        /// The encoded event (`StoredEvent::encode`), made by the caller: the writer
        /// thread is the store's bottleneck and only writes.
        bytes: Vec<u8>,
        ttl: Duration,
    },
    Finish {
        route: String,
        id: String,
        lease: String,
        status: Status,
        ttl: Duration,
    },
    Requeue {
        route: String,
        ids: Vec<String>,
    },
    Purge {
        /// The destination's queue.
        space: String,
        prefix: String,
        route: String,
        ids: Vec<String>,
    },
    /// Dead events that hold their key's line give it up (`on_dead` switched from
    /// `block` to `skip`).
    ReleaseBlocked {
        route: String,
        ids: Vec<String>,
    },
    /// A delivered event's record, so its next copy is accepted.
    ForgetDelivered {
        space: String,
        prefix: String,
        route: String,
        id: String,
    },
}

pub(in crate::store::disk) enum QReply {
    Enqueued(Enqueued),
    Finished(bool),
    Count(u64),
}

/// Applies one queue operation inside the batch's write transaction. Index changes are
/// returned, to be applied once the transaction has committed; the events they change
/// are pinned meanwhile (see [`RouteIndex::pinned`]).
#[expect(
    clippy::too_many_arguments,
    reason = "the batch's open tables, each of its own type, and what the batch shares"
)]
pub(in crate::store::disk) fn apply<'t>(
    dedup: &mut Logged<'t, &'static str, &'static [u8]>,
    events: &mut Logged<'t, u64, &'static [u8]>,
    status: &mut Logged<'t, &'static str, &'static [u8]>,
    expiries: &mut Logged<'t, (u64, &'static str), ()>,
    index: &Mutex<Index>,
    op: &QOp,
    now: u64,
    changes: &mut Vec<Change>,
) -> Result<QReply, StoreError> {
    let mut b = Batch {
        dedup,
        events,
        status,
        expiries,
        index,
        now,
        changes,
    };
    match op {
        QOp::Enqueue { .. } => b.enqueue(op),
        QOp::Finish {
            route,
            id,
            lease,
            status,
            ttl,
        } => b.finish(route, id, lease, status, *ttl),
        QOp::Requeue { route, ids } => b.requeue(route, ids),
        QOp::ForgetDelivered {
            space,
            prefix,
            route,
            id,
        } => b.forget_delivered(space, &DedupKey::new(prefix, route, id), id),
        QOp::Purge {
            space,
            prefix,
            route,
            ids,
        } => b.purge(space, prefix, route, ids),
        QOp::ReleaseBlocked { route, ids } => b.release_blocked(route, ids),
    }
}

/// A batch's open tables, and what its queue operations share.
struct Batch<'a, 't> {
    dedup: &'a mut Logged<'t, &'static str, &'static [u8]>,
    events: &'a mut Logged<'t, u64, &'static [u8]>,
    status: &'a mut Logged<'t, &'static str, &'static [u8]>,
    expiries: &'a mut Logged<'t, (u64, &'static str), ()>,
    index: &'a Mutex<Index>,
    now: u64,
    changes: &'a mut Vec<Change>,
}

impl Batch<'_, '_> {
    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_status(
        &mut self,
        k: &str,
        rec: &StatusRecord,
        expires: u64,
    ) -> Result<(), StoreError> {
        self.status
            .insert(k, encode_status(rec, expires).as_slice())
            .map(drop)
            .map_err(backend)
    }

    /// Claims the event and stores it in the queue of each destination it goes to, or
    /// answers with what is held of it already.
    fn enqueue(&mut self, op: &QOp) -> Result<QReply, StoreError> {
        let QOp::Enqueue {
            dedup: key,
            to,
            event_id,
            fingerprint,
            rx,
            event_type,
            bytes,
            ttl,
            ..
        } = op
        else {
            return Err(unexpected());
        };
        if let Some(existing) = held_copy(self.dedup.table(), self.status.table(), op, self.now)? {
            return Ok(QReply::Enqueued(Enqueued::Existing(existing)));
        }
        let done = Record::done(&Token::random(), fingerprint);
        let at = expiry(self.now, *ttl);
        self.dedup
            .insert(key.as_str(), encode(&done, at).as_slice())
            .map_err(backend)?;
        index_expiry(self.expiries, at, 'd', key.as_str())?;
        // Each destination has its own copy: each is delivered, and dropped when
        // delivered, on its own.
        for (space, order_key) in to {
            let seq = self.index().next_seq();
            self.events.insert(seq, bytes.as_slice()).map_err(backend)?;
            let mut queued = Status::queued(*rx);
            queued.order_key.clone_from(order_key);
            let rec = StatusRecord {
                status: queued,
                fp: fingerprint.clone(),
                rx: *rx,
                event_type: event_type.clone(),
                seq,
            };
            self.write_status(&qkey(space, event_id), &rec, u64::MAX)?;
            self.changes.push(Change::Queued {
                route: space.clone(),
                id: event_id.clone(),
                rx: *rx,
                order_key: order_key.clone(),
            });
        }
        Ok(QReply::Enqueued(Enqueued::Queued))
    }

    /// Records an attempt's result, if its lease still holds the event.
    fn finish(
        &mut self,
        route: &str,
        id: &str,
        lease: &str,
        new: &Status,
        ttl: Duration,
    ) -> Result<QReply, StoreError> {
        let k = qkey(route, id);
        let Some((mut rec, _)) = read_status(self.status.table(), &k)? else {
            return Ok(QReply::Finished(false));
        };
        if !rec.status.state.undelivered() || rec.status.state == State::Dead {
            return Ok(QReply::Finished(false));
        }
        // Leased or not, decided once: a lease that ran out is not taken over until
        // this result is committed (or the batch failed).
        if !self.index().pin_held(route, id, lease) {
            return Ok(QReply::Finished(false));
        }
        let was_in = std::mem::replace(&mut rec.status, new.clone()).order_key;
        // Delivered: the event goes (its status stays, as the dedup record of the
        // window, with its attempts for `hookgate events show`).
        let expires = if new.state == State::Delivered {
            self.events.remove(rec.seq).map_err(backend)?;
            // It names no body any more (0 is never a body's number).
            rec.seq = 0;
            expiry(self.now, ttl)
        } else {
            u64::MAX
        };
        self.write_status(&k, &rec, expires)?;
        index_expiry(self.expiries, expires, 's', &k)?;
        self.changes.push(Change::Finished {
            route: route.to_owned(),
            id: id.to_owned(),
            rec,
            was_in,
        });
        Ok(QReply::Finished(true))
    }

    /// An operator's retry: dead or retrying events no worker holds, queued again.
    fn requeue(&mut self, route: &str, ids: &[String]) -> Result<QReply, StoreError> {
        let mut n = 0;
        for id in ids {
            let k = qkey(route, id);
            let Some((mut rec, _)) = read_status(self.status.table(), &k)? else {
                continue;
            };
            if !matches!(rec.status.state, State::Dead | State::Retrying)
                || !self.index().pin_unless_leased(route, id)
            {
                continue;
            }
            let was_in = rec.status.order_key.clone();
            let rejoins = was_in.is_none() && rec.status.left_line.is_some();
            rec.status.requeue(self.now);
            if rejoins {
                // Back at the end of its key's line: under a new sequence number,
                // so that a restart rebuilds the line in this order too.
                let seq = self.index().next_seq();
                let body = self
                    .events
                    .remove(rec.seq)
                    .map_err(backend)?
                    .map(|v| v.value().to_vec());
                if let Some(body) = body {
                    self.events.insert(seq, body.as_slice()).map_err(backend)?;
                    rec.seq = seq;
                }
            }
            self.write_status(&k, &rec, u64::MAX)?;
            self.changes.push(Change::Requeued {
                route: route.to_owned(),
                id: id.clone(),
                rec,
                was_in,
            });
            n += 1;
        }
        Ok(QReply::Count(n))
    }

    /// Forgets a delivered event, so that its next copy is accepted.
    fn forget_delivered(
        &mut self,
        space: &str,
        key: &DedupKey,
        id: &str,
    ) -> Result<QReply, StoreError> {
        let k = qkey(space, id);
        match read_status(self.status.table(), &k)? {
            Some((rec, _)) if rec.status.state == State::Delivered => {
                self.status.remove(k.as_str()).map_err(backend)?;
                self.events.remove(rec.seq).map_err(backend)?;
                self.dedup.remove(key.as_str()).map_err(backend)?;
                Ok(QReply::Count(1))
            }
            _ => Ok(QReply::Count(0)),
        }
    }

    /// Deletes undelivered events and their claims.
    fn purge(
        &mut self,
        space: &str,
        prefix: &str,
        route: &str,
        ids: &[String],
    ) -> Result<QReply, StoreError> {
        let mut n = 0;
        for id in ids {
            let k = qkey(space, id);
            let Some((rec, _)) = read_status(self.status.table(), &k)? else {
                continue;
            };
            if !rec.status.state.undelivered() {
                continue;
            }
            self.index().pin(space, id);
            self.status.remove(k.as_str()).map_err(backend)?;
            self.events.remove(rec.seq).map_err(backend)?;
            self.dedup
                .remove(DedupKey::new(prefix, route, id).as_str())
                .map_err(backend)?;
            self.changes.push(Change::Purged {
                route: space.to_owned(),
                id: id.clone(),
                was_in: rec.status.order_key,
            });
            n += 1;
        }
        Ok(QReply::Count(n))
    }

    /// Dead events that hold their key's line give it up.
    fn release_blocked(&mut self, route: &str, ids: &[String]) -> Result<QReply, StoreError> {
        let mut n = 0;
        for id in ids {
            let k = qkey(route, id);
            let Some((mut rec, _)) = read_status(self.status.table(), &k)? else {
                continue;
            };
            if rec.status.state != State::Dead || rec.status.order_key.is_none() {
                continue;
            }
            self.index().pin(route, id);
            rec.status.left_line = rec.status.order_key.take();
            self.write_status(&k, &rec, u64::MAX)?;
            // Applied as an operator's change of its status: out of its line, the
            // next event of the key due.
            self.changes.push(Change::Requeued {
                route: route.to_owned(),
                id: id.clone(),
                was_in: rec.status.left_line.clone(),
                rec,
            });
            n += 1;
        }
        Ok(QReply::Count(n))
    }
}

/// What the store already holds of an enqueue's event, as a claim would find it: its
/// claim (a dedup record of the route), or a copy stored for any destination of the
/// route (any state; a delivered one within its dedup window). Read-only, so that a
/// copy is answered from what is held even when new events are refused (a disk below
/// `min_free_space`, or that cannot be written).
pub(in crate::store::disk) fn held_copy(
    dedup: &impl ReadableTable<&'static str, &'static [u8]>,
    status: &impl ReadableTable<&'static str, &'static [u8]>,
    op: &QOp,
    now: u64,
) -> Result<Option<Claim>, StoreError> {
    let QOp::Enqueue {
        dedup: key,
        all,
        to,
        event_id,
        ..
    } = op
    else {
        return Ok(None);
    };
    if let Some(existing) = live_claim(dedup, key, now)? {
        return Ok(Some(existing));
    }
    // (`to` is within `all` when the handler builds it: each queue read once.)
    let extra = to
        .iter()
        .map(|(space, _)| space)
        .filter(|s| !all.contains(s));
    for space in all.iter().chain(extra) {
        if let Some((rec, expires)) = read_status(status, &qkey(space, event_id))?
            && expires > now
        {
            return Ok(Some(Claim::Done {
                fingerprint: rec.fp,
            }));
        }
    }
    Ok(None)
}

fn live_claim(
    dedup: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &DedupKey,
    now: u64,
) -> Result<Option<Claim>, StoreError> {
    Ok(live_record(dedup, key.as_str(), now)?.map(|r| r.as_existing()))
}
