//! One destination queue's index: its undelivered events, which of them are due and
//! when, their leases, and the lines of per-key order (`order_by`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Arc;
use std::time::Instant;

use super::Clock;
use crate::store::State;
use crate::store::disk::queue::tables::StatusRecord;

#[derive(Debug)]
pub(super) struct Lease {
    pub(super) token: String,
    pub(super) until: Instant,
}

/// An event ID, allocated once per index however many of its structures name it.
pub(super) type Id = Arc<str>;

/// What the index keeps of an undelivered event (dead ones included): 16 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meta {
    /// Unix ms when it was received (the low 62 bits), and its [`Place`] in its key's
    /// line (the top two): an ordered route's events cost no more than the others'.
    rx_place: u64,
    /// Its next try on the monotonic timeline while it is due, else [`NOT_DUE`].
    pub(super) due_at: i64,
}

/// [`Meta::due_at`] of an event that is not due (leased, dead, waiting in its line).
pub(super) const NOT_DUE: i64 = i64::MIN;

/// The bits of [`Meta::rx_place`] that hold the time received: Unix ms up to the year
/// 146 million.
pub(super) const RX: u64 = (1 << 62) - 1;

/// Where an event stands in its key's line (`order_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// In no line.
    None,
    /// The first of its line: the only one of its key that may be due.
    First,
    /// Behind the first of its line, in [`RouteIndex::behind`].
    Behind,
}

impl Meta {
    fn new(rx: u64, place: Place) -> Self {
        let bits = match place {
            Place::None => 0,
            Place::First => 0b10,
            Place::Behind => 0b11,
        };
        Self {
            rx_place: (rx & RX) | (bits << 62),
            due_at: NOT_DUE,
        }
    }

    pub(super) fn rx(&self) -> u64 {
        self.rx_place & RX
    }

    pub(super) fn place(&self) -> Place {
        match self.rx_place >> 62 {
            0b10 => Place::First,
            0b11 => Place::Behind,
            _ => Place::None,
        }
    }

    pub(super) fn set_place(&mut self, place: Place) {
        *self = Self {
            due_at: self.due_at,
            ..Self::new(self.rx(), place)
        };
    }
}

/// What the index needs of a status: read from a whole [`StatusRecord`], or from a
/// [`LeanRecord`] at load (the attempt history, most of a record, is never decoded).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<'a> {
    pub(super) state: State,
    pub(super) rx: u64,
    pub(super) next_at_ms: Option<u64>,
    pub(super) order_key: Option<&'a str>,
}

impl<'a> From<&'a StatusRecord> for Entry<'a> {
    fn from(rec: &'a StatusRecord) -> Self {
        Self {
            state: rec.status.state,
            rx: rec.rx,
            next_at_ms: rec.status.next_at_ms,
            order_key: rec.status.order_key.as_deref(),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct RouteIndex {
    /// (next try, id) of queued and retrying events that no worker holds, in two
    /// parts: those made due in time order (most: new events, and every event at a
    /// load) in a queue, 24 bytes each, and the others in a sorted set. Next tries are
    /// on the process's monotonic timeline ([`Clock`]): a wall clock stepping back or
    /// forward moves none of them. An entry is valid while its event's
    /// [`Meta::due_at`] names the same time; others are skipped when met, and dropped
    /// all at once when they outnumber the valid ones.
    pub(super) due: VecDeque<(i64, Id)>,
    pub(super) due_late: BTreeSet<(i64, Id)>,
    /// Valid entries of `due` and `due_late`.
    pub(super) due_count: usize,
    /// While a load fills `due` in no order (it is sorted at the end).
    pub(super) loading: bool,
    /// Every undelivered event, the dead ones included.
    pub(super) events: HashMap<Id, Meta>,
    pub(super) leased: HashMap<Id, Lease>,
    /// Undelivered events (dead ones included) by the millisecond they were received:
    /// the oldest one's age, without an entry per event.
    pub(super) arrivals: BTreeMap<u64, u32>,
    /// (received, id) of the dead events.
    pub(super) dead: BTreeSet<(u64, Id)>,
    /// Per-key order (`order_by`). A line is named by its key's hash ([`Self::line`]):
    /// two keys of one hash share a line, which keeps the order of each (one of them
    /// waits for the other without need) and never breaks it. Only the first event of
    /// a line is ever due; the rest wait. Each event's [`Place`] is in its [`Meta`],
    /// and a line that holds one event (the common case: a key per customer or per
    /// object) costs only its entry here, 8 bytes.
    pub(super) lines: HashSet<u64>,
    /// The events behind the first of each line that has more than one, in
    /// acceptance order.
    pub(super) behind: HashMap<u64, VecDeque<Id>>,
    /// The hash of the lines' keys: random per index, so that no sender can choose
    /// keys that share a line.
    pub(super) hasher: RandomState,
    /// Events whose state the batch being committed changes, with the due time each
    /// had (or is given meanwhile; [`NOT_DUE`] if none). The writer decides "leased or
    /// not" and pins the event in one step under the index's lock, and applies the
    /// committed change (or, if the batch failed, unpins it) in another: in between,
    /// no worker takes a pinned event, not even one whose lease ran out. So the index
    /// never hands out an event the file says is delivered or dead, and a result is
    /// never committed for a lease that another worker took meanwhile.
    pub(super) pinned: HashMap<Id, i64>,
}

impl RouteIndex {
    /// The index's copy of an ID, or a new one.
    pub(super) fn intern(&self, id: &str) -> Id {
        self.events
            .get_key_value(id)
            .map(|(k, _)| k.clone())
            .or_else(|| self.leased.get_key_value(id).map(|(k, _)| k.clone()))
            .unwrap_or_else(|| Id::from(id))
    }

    /// The line of an order key.
    pub(super) fn line(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    pub(super) fn place(&self, id: &str) -> Place {
        self.events.get(id).map_or(Place::None, Meta::place)
    }

    /// Takes a place at the end of line `line` (an undelivered event in no line).
    pub(super) fn join_line(&mut self, id: &Id, line: u64) {
        if self.place(id) != Place::None {
            return;
        }
        let place = if self.lines.insert(line) {
            Place::First
        } else {
            self.behind.entry(line).or_default().push_back(id.clone());
            Place::Behind
        };
        if let Some(m) = self.events.get_mut(id) {
            m.set_place(place);
        }
    }

    /// Whether an event waits behind another of its key.
    pub(super) fn waits_in_line(&self, id: &str) -> bool {
        self.place(id) == Place::Behind
    }

    fn is_dead(&self, id: &Id) -> bool {
        self.events
            .get(id)
            .is_some_and(|m| self.dead.contains(&(m.rx(), id.clone())))
    }

    /// Makes an undelivered event due at `at` (monotonic).
    pub(super) fn make_due(&mut self, id: &str, at: i64) {
        let at = at.max(NOT_DUE + 1);
        if let Some(due) = self.pinned.get_mut(id) {
            // Made due when unpinned, unless the committed change decides otherwise.
            *due = at;
            return;
        }
        let Some((id, m)) = self.events.get_key_value(id) else {
            return;
        };
        let (id, was_due) = (id.clone(), m.due_at != NOT_DUE);
        if let Some(m) = self.events.get_mut(&id) {
            m.due_at = at;
        }
        if !was_due {
            self.due_count += 1;
        }
        if self.loading || self.due.back().is_none_or(|(last, _)| *last <= at) {
            self.due.push_back((at, id));
        } else {
            self.due_late.insert((at, id));
        }
        self.compact_due();
    }

    /// Takes an event out of `due` (its entry goes stale).
    pub(super) fn not_due(&mut self, id: &str) {
        if let Some(m) = self.events.get_mut(id)
            && m.due_at != NOT_DUE
        {
            m.due_at = NOT_DUE;
            self.due_count -= 1;
        }
    }

    /// Drops the stale entries of `due` once they outnumber the valid ones.
    fn compact_due(&mut self) {
        if self.loading || self.due.len() + self.due_late.len() <= 2 * self.due_count + 1024 {
            return;
        }
        let events = &self.events;
        let valid = |(at, id): &(i64, Id)| events.get(id).is_some_and(|m| m.due_at == *at);
        self.due.retain(valid);
        self.due_late.retain(valid);
    }

    /// The earliest valid due entry, if it is due by `now`, taken out of `due`.
    pub(super) fn pop_due(&mut self, now: i64) -> Option<Id> {
        loop {
            let late_first = match (self.due.front(), self.due_late.first()) {
                (None, None) => return None,
                (Some(a), Some(b)) => b < a,
                (None, Some(_)) => true,
                (Some(_), None) => false,
            };
            let (at, id) = if late_first {
                if self.due_late.first().is_some_and(|(at, _)| *at > now) {
                    return None;
                }
                self.due_late.pop_first()?
            } else {
                if self.due.front().is_some_and(|(at, _)| *at > now) {
                    return None;
                }
                self.due.pop_front()?
            };
            if self.events.get(&id).is_some_and(|m| m.due_at == at) {
                self.not_due(&id);
                return Some(id);
            }
        }
    }

    /// Leaves line `line` (delivered, dead under `on_dead = "skip"`, or purged: the
    /// line its status named until then); when it was first, the next event of the
    /// line is due now. An event in no line leaves none.
    pub(super) fn leave_line(&mut self, id: &str, line: u64) {
        let place = self.place(id);
        if let Some(m) = self.events.get_mut(id) {
            m.set_place(Place::None);
        }
        match place {
            Place::None => {}
            Place::Behind => {
                if let Some(behind) = self.behind.get_mut(&line) {
                    behind.retain(|x| &**x != id);
                    if behind.is_empty() {
                        self.behind.remove(&line);
                    }
                }
            }
            Place::First => {
                let next = self.behind.get_mut(&line).and_then(VecDeque::pop_front);
                if self.behind.get(&line).is_some_and(VecDeque::is_empty) {
                    self.behind.remove(&line);
                }
                let Some(next) = next else {
                    self.lines.remove(&line);
                    return;
                };
                if let Some(m) = self.events.get_mut(&next) {
                    m.set_place(Place::First);
                }
                if self.events.get(&next).is_some_and(|m| m.due_at == NOT_DUE)
                    && !self.is_dead(&next)
                    && !self.leased.contains_key(&next)
                {
                    // Due now (not at its stored arrival time: after the wall clock
                    // stepped back, that would lie ahead on the monotonic timeline).
                    self.make_due(&next, Clock::now().mono);
                }
            }
        }
    }

    /// Pins an event (see [`RouteIndex::pinned`]): out of `due` until unpinned.
    pub(super) fn pin(&mut self, id: &str) -> bool {
        let id = self.intern(id);
        let due = self.events.get(&id).map_or(NOT_DUE, |m| m.due_at);
        self.not_due(&id);
        let mut added = false;
        self.pinned.entry(id).or_insert_with(|| {
            added = true;
            due
        });
        added
    }

    /// Unpins every event: due again at the time each had, or was given meanwhile.
    pub(super) fn unpin_all(&mut self) {
        for (id, due) in std::mem::take(&mut self.pinned) {
            if due != NOT_DUE && self.events.contains_key(&id) && !self.leased.contains_key(&id) {
                self.make_due(&id, due);
            }
        }
    }

    /// Drops an event from the index, and its place in its line without a word to
    /// the line (see [`Self::leave_line`] for that). What place it had.
    pub(super) fn forget(&mut self, id: &str) -> Place {
        self.leased.remove(id);
        self.not_due(id);
        let Some((id, m)) = self.events.remove_entry(id) else {
            return Place::None;
        };
        if let Some(n) = self.arrivals.get_mut(&m.rx()) {
            *n -= 1;
            if *n == 0 {
                self.arrivals.remove(&m.rx());
            }
        }
        self.dead.remove(&(m.rx(), id));
        m.place()
    }

    /// Adds an undelivered event (not due, in `place`).
    pub(super) fn insert(&mut self, id: &Id, rx: u64, place: Place) {
        self.events.insert(id.clone(), Meta::new(rx, place));
        *self.arrivals.entry(rx & RX).or_default() += 1;
    }

    /// Sets an event's state from its status. `was_in` is the line its status named
    /// before (its key's), which it leaves unless the status keeps it there.
    pub(super) fn set(&mut self, id: &str, was_in: Option<&str>, st: &Entry<'_>, clock: &Clock) {
        let id = self.intern(id);
        let stays = st.state.undelivered() && st.order_key.is_some();
        if !stays && let Some(key) = was_in {
            let line = self.line(key);
            self.leave_line(&id, line);
        }
        // An event keeps its place while its status keeps its key.
        let place = self.forget(&id);
        if !st.state.undelivered() {
            return;
        }
        self.insert(&id, st.rx, if stays { place } else { Place::None });
        if let Some(key) = st.order_key {
            let line = self.line(key);
            self.join_line(&id, line);
        }
        match st.state {
            State::Dead => {
                self.dead.insert((st.rx & RX, id));
            }
            State::Queued | State::Retrying if self.waits_in_line(&id) => {}
            State::Queued | State::Retrying => {
                self.make_due(&id, clock.mono_of(st.next_at_ms.unwrap_or(0)));
            }
            State::Delivered => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::now_ms;

    /// Queues `id` in line `line` of `r`, as an enqueue would.
    fn queue_in(r: &mut RouteIndex, id: &str, line: u64) {
        let id = Id::from(id);
        r.insert(&id, now_ms(), Place::None);
        r.join_line(&id, line);
        if !r.waits_in_line(&id) {
            r.make_due(&id, 0);
        }
    }

    fn due_now(r: &mut RouteIndex) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(id) = r.pop_due(i64::MAX) {
            out.push(id.to_string());
        }
        out
    }

    /// Delivered: out of its line (line `line`) and of the index.
    fn deliver(r: &mut RouteIndex, id: &str, line: u64) {
        r.leave_line(id, line);
        r.forget(id);
    }

    #[test]
    fn two_keys_whose_hashes_collide_share_a_line_and_keep_the_order_of_each() {
        // a1, a2 of key A and b1 of key B, whose hash is A's: one line, 7.
        let mut r = RouteIndex::default();
        queue_in(&mut r, "a1", 7);
        queue_in(&mut r, "b1", 7);
        queue_in(&mut r, "a2", 7);
        queue_in(&mut r, "c1", 9);
        assert_eq!(due_now(&mut r), ["a1", "c1"], "the first of each line");
        deliver(&mut r, "a1", 7);
        assert_eq!(
            due_now(&mut r),
            ["b1"],
            "B's event waited, never ran beside A's"
        );
        deliver(&mut r, "b1", 7);
        assert_eq!(due_now(&mut r), ["a2"], "A's second after its first");
        deliver(&mut r, "a2", 7);
        deliver(&mut r, "c1", 9);
        assert!(r.lines.is_empty() && r.behind.is_empty() && r.events.is_empty());
    }

    #[test]
    fn a_line_of_one_event_keeps_nothing_behind_and_a_purge_from_behind_keeps_the_order() {
        let mut r = RouteIndex::default();
        for i in 0..100 {
            queue_in(&mut r, &format!("e{i}"), i);
        }
        assert_eq!(r.lines.len(), 100);
        assert!(r.behind.is_empty(), "no line holds more than its first");
        assert_eq!(due_now(&mut r).len(), 100);
        // A longer line: x2 purged from behind x1; x3 still goes after x1.
        for id in ["x1", "x2", "x3"] {
            queue_in(&mut r, id, 500);
        }
        assert_eq!(due_now(&mut r), ["x1"]);
        deliver(&mut r, "x2", 500);
        assert!(due_now(&mut r).is_empty(), "x3 waits for x1");
        deliver(&mut r, "x1", 500);
        assert_eq!(due_now(&mut r), ["x3"]);
        deliver(&mut r, "x3", 500);
        assert!(!r.lines.contains(&500) && r.behind.is_empty());
    }

    #[test]
    fn an_events_place_lives_in_the_bits_its_receipt_time_leaves() {
        for place in [Place::None, Place::First, Place::Behind] {
            let mut m = Meta::new(1_764_000_000_123, place);
            assert_eq!((m.rx(), m.place()), (1_764_000_000_123, place));
            m.due_at = 42;
            m.set_place(Place::First);
            assert_eq!(
                (m.rx(), m.place(), m.due_at),
                (1_764_000_000_123, Place::First, 42)
            );
        }
        // A time no clock gives (a damaged record) cannot take a place's bits.
        assert_eq!(Meta::new(u64::MAX, Place::None).place(), Place::None);
        assert_eq!(std::mem::size_of::<Meta>(), 16);
    }
}
