//! What is due when: the queue's index, in memory (one process owns the file), rebuilt
//! from the status table when the file is opened (`load.rs`), so a restart or a
//! `kill -9` finds every undelivered event again. One [`RouteIndex`] per destination
//! queue (`route.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use self::route::{Entry, Id, Lease, RouteIndex};
use super::tables::StatusRecord;
use crate::queue::now_ms;
use crate::store::disk::mono_ms;
use crate::store::{Depth, Token};

/// What a committed operation changes in the index.
#[derive(Debug, Clone)]
pub(in crate::store::disk) enum Change {
    Queued {
        route: String,
        id: String,
        rx: u64,
        order_key: Option<String>,
    },
    /// An attempt's result, recorded under its lease.
    Finished {
        route: String,
        id: String,
        rec: StatusRecord,
        /// The key of the line the event held before (its status's until then).
        was_in: Option<String>,
    },
    /// Queued again by an operator.
    Requeued {
        route: String,
        id: String,
        rec: StatusRecord,
        was_in: Option<String>,
    },
    Purged {
        route: String,
        id: String,
        was_in: Option<String>,
    },
}

mod load;
mod route;

/// Due times and states of every undelivered event, by route.
#[derive(Debug, Default)]
pub(in crate::store::disk) struct Index {
    routes: HashMap<String, RouteIndex>,
    /// The next event's sequence number.
    next_seq: u64,
    /// Set by the writer while attempt results cannot be made durable (a failing
    /// commit or flush, a full disk) and until those it holds in memory are written
    /// again after a reopen: no event is handed out meanwhile, so that a result the
    /// file lost never turns a delivered event back into a due one.
    held: bool,
    /// While [`Index::load`] builds it (see [`RouteIndex::loading`]).
    loading: bool,
    /// Events pinned by the batch the writer is applying (see [`RouteIndex::pinned`]).
    pins: usize,
}

/// Now, on both clocks. Stored times are wall-clock (Unix ms: they must mean the same
/// after a restart); the index schedules on the monotonic clock, converting a stored
/// time by its distance from the wall clock's now, so that a wall clock stepping back
/// (or forward) after the conversion changes no due time and no order.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall: u64,
    /// [`mono_ms`], signed: a time before the process started is negative.
    mono: i64,
}

impl Clock {
    pub(super) fn now() -> Self {
        Self {
            wall: now_ms(),
            mono: i64::try_from(mono_ms()).unwrap_or(i64::MAX),
        }
    }

    /// A stored wall-clock time on the monotonic timeline.
    fn mono_of(&self, wall_ms: u64) -> i64 {
        let ahead = i128::from(wall_ms) - i128::from(self.wall);
        let at = i128::from(self.mono) + ahead;
        i64::try_from(at).unwrap_or(if at < 0 { i64::MIN } else { i64::MAX })
    }
}

impl Index {
    /// Holds deliveries back (see [`Index::held`]), or lets them go on.
    pub(in crate::store::disk) fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// A sequence number for a new event.
    pub(super) fn next_seq(&mut self) -> u64 {
        let n = self.next_seq.max(1);
        self.next_seq = n + 1;
        n
    }

    fn route(&mut self, route: &str) -> &mut RouteIndex {
        if !self.routes.contains_key(route) {
            self.routes.insert(
                route.to_owned(),
                RouteIndex {
                    loading: self.loading,
                    ..RouteIndex::default()
                },
            );
        }
        self.routes
            .get_mut(route)
            .expect("the route's index was inserted above")
    }

    /// Applies a committed change, and unpins its event: the writer decided when it
    /// pinned it (see [`RouteIndex::pinned`]) that the change is the event's state.
    pub(in crate::store::disk) fn apply(&mut self, change: Change) {
        match change {
            Change::Queued {
                route,
                id,
                rx,
                order_key,
            } => {
                let r = self.route(&route);
                let id = r.intern(&id);
                // (An event the index holds already keeps its place.)
                let place = r.place(&id);
                r.insert(&id, rx, place);
                if let Some(key) = order_key {
                    let line = r.line(&key);
                    r.join_line(&id, line);
                }
                if !r.waits_in_line(&id) {
                    r.make_due(&id, Clock::now().mono);
                }
            }
            Change::Finished {
                route,
                id,
                rec,
                was_in,
                ..
            }
            | Change::Requeued {
                route,
                id,
                rec,
                was_in,
            } => {
                self.unpin(&route, &id);
                self.route(&route)
                    .set(&id, was_in.as_deref(), &Entry::from(&rec), &Clock::now());
            }
            Change::Purged { route, id, was_in } => {
                self.unpin(&route, &id);
                let r = self.route(&route);
                if let Some(key) = was_in {
                    let line = r.line(&key);
                    r.leave_line(&id, line);
                }
                r.forget(&id);
            }
        }
    }

    /// Pins an event whose lease `token` holds (its attempt's result is being
    /// committed): false, and nothing pinned, when another worker took it.
    pub(super) fn pin_held(&mut self, route: &str, id: &str, token: &str) -> bool {
        let held = self.holds(route, id, token);
        if held {
            self.pin(route, id);
        }
        held
    }

    /// Pins an event no worker holds (an operator's retry): false when one does.
    pub(super) fn pin_unless_leased(&mut self, route: &str, id: &str) -> bool {
        let free = !self.is_leased(route, id);
        if free {
            self.pin(route, id);
        }
        free
    }

    /// Pins an event (see [`RouteIndex::pinned`]), leased or not.
    pub(super) fn pin(&mut self, route: &str, id: &str) {
        let added = self.route(route).pin(id);
        self.pins += usize::from(added);
    }

    fn unpin(&mut self, route: &str, id: &str) {
        let unpinned = self
            .routes
            .get_mut(route)
            .and_then(|r| r.pinned.remove(id))
            .is_some();
        self.pins -= usize::from(unpinned);
    }

    /// Unpins what the batch pinned and did not change: all of it when the batch
    /// failed (nothing of it was stored), else what an operation pinned before it
    /// failed on its own.
    pub(in crate::store::disk) fn unpin_all(&mut self) {
        if self.pins == 0 {
            return;
        }
        for r in self.routes.values_mut() {
            r.unpin_all();
        }
        self.pins = 0;
    }

    /// Leases up to `max` due events of a route: `(id, token)`. A lease that ran out
    /// (its worker never finished) is due again.
    pub(super) fn take(
        &mut self,
        route: &str,
        max: usize,
        lease: Duration,
    ) -> Vec<(String, String)> {
        if self.held {
            return Vec::new();
        }
        let now = Clock::now().mono;
        let clock = Instant::now();
        let r = self.route(route);
        let mut out = Vec::new();
        let expired: Vec<Id> = r
            .leased
            .iter()
            .filter(|(id, l)| l.until <= clock && !r.pinned.contains_key(*id))
            .map(|(id, _)| id.clone())
            .take(max)
            .collect();
        for id in expired {
            let token = Token::random().as_str().to_owned();
            out.push((id.to_string(), token.clone()));
            r.leased.insert(
                id,
                Lease {
                    token,
                    until: clock + lease,
                },
            );
        }
        while out.len() < max {
            let Some(id) = r.pop_due(now) else {
                break;
            };
            let token = Token::random().as_str().to_owned();
            out.push((id.to_string(), token.clone()));
            r.leased.insert(
                id,
                Lease {
                    token,
                    until: clock + lease,
                },
            );
        }
        out
    }

    /// Drops the lease on an event whose record cannot be read (or names no body): it
    /// stays, not due, until an operator purges it, so that it does not hold back the
    /// rest of its queue.
    pub(super) fn set_aside(&mut self, route: &str, id: &str) {
        self.route(route).leased.remove(id);
    }

    /// Ends a lease that was never used: the event is due again now.
    pub(super) fn give_back(&mut self, route: &str, id: &str) {
        let r = self.route(route);
        if r.leased.remove(id).is_some() {
            r.make_due(id, Clock::now().mono);
        }
    }

    /// Extends a lease to `lease` from now if `token` still holds it.
    pub(super) fn renew(&mut self, route: &str, id: &str, token: &str, lease: Duration) -> bool {
        match self
            .routes
            .get_mut(route)
            .and_then(|r| r.leased.get_mut(id))
        {
            Some(l) if l.token == token => {
                l.until = Instant::now() + lease;
                true
            }
            _ => false,
        }
    }

    pub(super) fn holds(&self, route: &str, id: &str, token: &str) -> bool {
        self.routes
            .get(route)
            .and_then(|r| r.leased.get(id))
            .is_some_and(|l| l.token == token)
    }

    fn is_leased(&self, route: &str, id: &str) -> bool {
        self.routes
            .get(route)
            .is_some_and(|r| r.leased.contains_key(id))
    }

    /// The dead events' IDs of a route, oldest first.
    pub(super) fn dead(&self, route: &str) -> Vec<String> {
        self.routes
            .get(route)
            .map(|r| r.dead.iter().map(|(_, id)| id.to_string()).collect())
            .unwrap_or_default()
    }

    /// Undelivered IDs of a route, oldest first, at most `max`. Chosen from every
    /// undelivered event (an operator's list, not a hot path: the index keeps no
    /// order by arrival, which would cost an entry per event).
    pub(super) fn undelivered(&self, route: &str, max: usize) -> Vec<String> {
        let Some(r) = self.routes.get(route) else {
            return Vec::new();
        };
        let mut all: Vec<(u64, &Id)> = r.events.iter().map(|(id, m)| (m.rx(), id)).collect();
        if all.len() > max {
            all.select_nth_unstable(max);
            all.truncate(max);
        }
        all.sort_unstable();
        all.into_iter().map(|(_, id)| id.to_string()).collect()
    }

    pub(super) fn depth(&self, route: &str) -> Depth {
        self.routes.get(route).map_or_else(Depth::default, |r| {
            let dead = r.dead.len() as u64;
            Depth {
                waiting: (r.events.len() as u64).saturating_sub(dead),
                dead,
                oldest_received_ms: r.arrivals.first_key_value().map(|(rx, _)| *rx),
            }
        })
    }

    /// The spaces (`<prefix><queue name>`) that hold undelivered events.
    pub(in crate::store::disk) fn spaces(&self) -> Vec<String> {
        self.routes
            .iter()
            .filter(|(_, r)| !r.events.is_empty())
            .map(|(space, _)| space.clone())
            .collect()
    }
}
