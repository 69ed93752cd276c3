//! The disk store's queue: events and their delivery status in the same database file
//! as the dedup records, written by the same writer thread in the same group commits.
//!
//! An enqueue is one write transaction that checks the claim, writes the done record,
//! the event and its status, and is fsynced before the provider is answered. What is
//! due when lives in an in-memory index (one process owns the file), rebuilt from the
//! status table when the file is opened, so a restart or a `kill -9` finds every
//! undelivered event again.
//!
//! Tables (keys are `<key prefix><route>\n<event id>`: neither holds a newline):
//! - `queue_bodies`: the event (envelope and body) until it is delivered, under a
//!   sequence number (its status names it);
//! - `queue_status`: 8 bytes of expiry (Unix ms, big-endian; `u64::MAX` while
//!   undelivered) + a JSON [`StatusRecord`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher as _, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::{ReadableTable, Table, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{DiskStore, EXPIRY, Op, Reply, backend, decode, encode, expiry, index_expiry, now_ms};
use crate::queue::RateLimit;
use crate::store::{
    Claim, DedupKey, Depth, Enqueued, Envelope, Fanout, Finish, Leased, Pacing, QueueRef,
    QueueStore, Record, State, Status, StoreError, StoredEvent, Summary, Target, Token,
};

/// Events (envelope and body) under a sequence number in acceptance order: consecutive
/// enqueues append to the same pages instead of each copying a page of its own.
pub(super) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("queue_bodies");
pub(super) const STATUS: TableDefinition<&str, &[u8]> = TableDefinition::new("queue_status");

/// An event's status as stored, with what the index and a duplicate check need.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StatusRecord {
    #[serde(rename = "s")]
    pub status: Status,
    pub fp: String,
    /// Unix ms when it was received.
    pub rx: u64,
    /// The event's type (kept after delivery, when the event itself is gone).
    #[serde(default, rename = "t", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Where the event is in `queue_bodies`.
    #[serde(default, rename = "n")]
    pub seq: u64,
}

pub(super) fn qkey(route: &str, id: &str) -> String {
    format!("{route}\n{id}")
}

fn split(qkey: &str) -> Option<(&str, &str)> {
    qkey.split_once('\n')
}

fn encode_status(rec: &StatusRecord, expires_ms: u64) -> Vec<u8> {
    let json = serde_json::to_vec(rec).unwrap_or_default();
    let mut v = Vec::with_capacity(8 + json.len());
    v.extend_from_slice(&expires_ms.to_be_bytes());
    v.extend_from_slice(&json);
    v
}

pub(super) fn decode_status(bytes: &[u8]) -> Option<(StatusRecord, u64)> {
    let (expiry, json) = bytes.split_at_checked(8)?;
    let expires_ms = u64::from_be_bytes(expiry.try_into().ok()?);
    Some((serde_json::from_slice(json).ok()?, expires_ms))
}

/// A queue operation, applied by the writer thread.
pub(super) enum QOp {
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

pub(super) enum QReply {
    Enqueued(Enqueued),
    Finished(bool),
    Count(u64),
}

/// What a committed operation changes in the index.
#[derive(Debug, Clone)]
pub(super) enum Change {
    Queued {
        route: String,
        id: String,
        rx: u64,
        order_key: Option<String>,
    },
    /// An attempt's result, recorded under its lease. With what was written (the
    /// record's expiry and the body it removed), so that the writer can write it again
    /// after a reopen rolled a commit without an fsync back (see [`rewrite`]).
    Finished {
        route: String,
        id: String,
        lease: String,
        rec: StatusRecord,
        expires: u64,
        removed_body: Option<u64>,
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

/// Due times and states of every undelivered event, by route.
#[derive(Debug, Default)]
pub(super) struct Index {
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

#[derive(Debug)]
struct Lease {
    token: String,
    until: Instant,
}

/// An event ID, allocated once per index however many of its structures name it.
type Id = Arc<str>;

/// What the index keeps of an undelivered event (dead ones included): 16 bytes.
#[derive(Debug, Clone, Copy)]
struct Meta {
    /// Unix ms when it was received (the low 62 bits), and its [`Place`] in its key's
    /// line (the top two): an ordered route's events cost no more than the others'.
    rx_place: u64,
    /// Its next try on the monotonic timeline while it is due, else [`NOT_DUE`].
    due_at: i64,
}

/// [`Meta::due_at`] of an event that is not due (leased, dead, waiting in its line).
const NOT_DUE: i64 = i64::MIN;

/// The bits of [`Meta::rx_place`] that hold the time received: Unix ms up to the year
/// 146 million.
const RX: u64 = (1 << 62) - 1;

/// Where an event stands in its key's line (`order_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
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

    fn rx(&self) -> u64 {
        self.rx_place & RX
    }

    fn place(&self) -> Place {
        match self.rx_place >> 62 {
            0b10 => Place::First,
            0b11 => Place::Behind,
            _ => Place::None,
        }
    }

    fn set_place(&mut self, place: Place) {
        *self = Self {
            due_at: self.due_at,
            ..Self::new(self.rx(), place)
        };
    }
}

/// What the index needs of a status: read from a whole [`StatusRecord`], or from a
/// [`LeanRecord`] at load (the attempt history, most of a record, is never decoded).
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    state: State,
    rx: u64,
    next_at_ms: Option<u64>,
    order_key: Option<&'a str>,
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

/// The fields of a stored [`StatusRecord`] the index is built from: decoding only
/// these keeps a restart's memory independent of each event's history.
#[derive(Debug, Deserialize)]
struct LeanRecord {
    #[serde(rename = "s")]
    status: LeanStatus,
    rx: u64,
    #[serde(default, rename = "n")]
    seq: u64,
}

#[derive(Debug, Deserialize)]
struct LeanStatus {
    state: State,
    #[serde(default)]
    next_at_ms: Option<u64>,
    #[serde(default)]
    order_key: Option<String>,
}

impl LeanRecord {
    fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes.get(8..)?).ok()
    }

    fn entry(&self) -> Entry<'_> {
        Entry {
            state: self.status.state,
            rx: self.rx,
            next_at_ms: self.status.next_at_ms,
            order_key: self.status.order_key.as_deref(),
        }
    }
}

#[derive(Debug, Default)]
struct RouteIndex {
    /// (next try, id) of queued and retrying events that no worker holds, in two
    /// parts: those made due in time order (most: new events, and every event at a
    /// load) in a queue, 24 bytes each, and the others in a sorted set. Next tries are
    /// on the process's monotonic timeline ([`Clock`]): a wall clock stepping back or
    /// forward moves none of them. An entry is valid while its event's
    /// [`Meta::due_at`] names the same time; others are skipped when met, and dropped
    /// all at once when they outnumber the valid ones.
    due: VecDeque<(i64, Id)>,
    due_late: BTreeSet<(i64, Id)>,
    /// Valid entries of `due` and `due_late`.
    due_count: usize,
    /// While a load fills `due` in no order (it is sorted at the end).
    loading: bool,
    /// Every undelivered event, the dead ones included.
    events: HashMap<Id, Meta>,
    leased: HashMap<Id, Lease>,
    /// Undelivered events (dead ones included) by the millisecond they were received:
    /// the oldest one's age, without an entry per event.
    arrivals: BTreeMap<u64, u32>,
    /// (received, id) of the dead events.
    dead: BTreeSet<(u64, Id)>,
    /// Per-key order (`order_by`). A line is named by its key's hash ([`Self::line`]):
    /// two keys of one hash share a line, which keeps the order of each (one of them
    /// waits for the other without need) and never breaks it. Only the first event of
    /// a line is ever due; the rest wait. Each event's [`Place`] is in its [`Meta`],
    /// and a line that holds one event (the common case: a key per customer or per
    /// object) costs only its entry here, 8 bytes.
    lines: HashSet<u64>,
    /// The events behind the first of each line that has more than one, in
    /// acceptance order.
    behind: HashMap<u64, VecDeque<Id>>,
    /// The hash of the lines' keys: random per index, so that no sender can choose
    /// keys that share a line.
    hasher: RandomState,
    /// Events whose state the batch being committed changes, with the due time each
    /// had (or is given meanwhile; [`NOT_DUE`] if none). The writer decides "leased or
    /// not" and pins the event in one step under the index's lock, and applies the
    /// committed change (or, if the batch failed, unpins it) in another: in between,
    /// no worker takes a pinned event, not even one whose lease ran out. So the index
    /// never hands out an event the file says is delivered or dead, and a result is
    /// never committed for a lease that another worker took meanwhile.
    pinned: HashMap<Id, i64>,
}

impl RouteIndex {
    /// The index's copy of an ID, or a new one.
    fn intern(&self, id: &str) -> Id {
        self.events
            .get_key_value(id)
            .map(|(k, _)| k.clone())
            .or_else(|| self.leased.get_key_value(id).map(|(k, _)| k.clone()))
            .unwrap_or_else(|| Id::from(id))
    }

    /// The line of an order key.
    fn line(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn place(&self, id: &str) -> Place {
        self.events.get(id).map_or(Place::None, Meta::place)
    }

    /// Takes a place at the end of line `line` (an undelivered event in no line).
    fn join_line(&mut self, id: &Id, line: u64) {
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
    fn waits_in_line(&self, id: &str) -> bool {
        self.place(id) == Place::Behind
    }

    fn is_dead(&self, id: &Id) -> bool {
        self.events
            .get(id)
            .is_some_and(|m| self.dead.contains(&(m.rx(), id.clone())))
    }

    /// Makes an undelivered event due at `at` (monotonic).
    fn make_due(&mut self, id: &str, at: i64) {
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
    fn not_due(&mut self, id: &str) {
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
    fn pop_due(&mut self, now: i64) -> Option<Id> {
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
    fn leave_line(&mut self, id: &str, line: u64) {
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

    /// At a load: an event alone in its line, its `Meta` holding its sequence number,
    /// takes the line's first place, due when its status says unless dead.
    fn take_first_place(&mut self, id: &str, st: &Entry<'_>, clock: &Clock) {
        let Some(m) = self.events.get_mut(id) else {
            return;
        };
        m.due_at = NOT_DUE;
        m.set_place(Place::First);
        if st.state != State::Dead {
            self.make_due(id, clock.mono_of(st.next_at_ms.unwrap_or(0)));
        }
    }

    /// At a load: the events of a line that holds more than one, listed in
    /// [`Self::behind`] in any order, each `Meta` holding its sequence number, are
    /// sorted into acceptance order; the first takes its place (its due time read
    /// again from its status), the others wait behind it.
    fn order_line(
        &mut self,
        line: u64,
        table: &redb::ReadOnlyTable<&str, &[u8]>,
        route: &str,
        clock: &Clock,
    ) {
        let Some(mut members) = self.behind.remove(&line) else {
            self.lines.remove(&line);
            return;
        };
        members
            .make_contiguous()
            .sort_by_cached_key(|id| self.events.get(id).map_or(i64::MAX, |m| m.due_at));
        for id in &members {
            if let Some(m) = self.events.get_mut(id) {
                m.due_at = NOT_DUE;
                m.set_place(Place::Behind);
            }
        }
        let Some(first) = members.pop_front() else {
            self.lines.remove(&line);
            return;
        };
        if !members.is_empty() {
            self.behind.insert(line, members);
        }
        let rec = table
            .get(qkey(route, &first).as_str())
            .ok()
            .flatten()
            .and_then(|v| LeanRecord::decode(v.value()));
        match rec {
            Some(rec) => self.take_first_place(&first, &rec.entry(), clock),
            // Unreadable now: first in its line (holding it, as a record that cannot
            // be read holds it when taken), not due.
            None => {
                if let Some(m) = self.events.get_mut(&first) {
                    m.set_place(Place::First);
                }
            }
        }
    }

    /// Pins an event (see [`RouteIndex::pinned`]): out of `due` until unpinned.
    fn pin(&mut self, id: &str) -> bool {
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
    fn unpin_all(&mut self) {
        for (id, due) in std::mem::take(&mut self.pinned) {
            if due != NOT_DUE && self.events.contains_key(&id) && !self.leased.contains_key(&id) {
                self.make_due(&id, due);
            }
        }
    }

    /// Drops an event from the index, and its place in its line without a word to
    /// the line (see [`Self::leave_line`] for that). What place it had.
    fn forget(&mut self, id: &str) -> Place {
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
    fn insert(&mut self, id: &Id, rx: u64, place: Place) {
        self.events.insert(id.clone(), Meta::new(rx, place));
        *self.arrivals.entry(rx & RX).or_default() += 1;
    }

    /// Sets an event's state from its status. `was_in` is the line its status named
    /// before (its key's), which it leaves unless the status keeps it there.
    fn set(&mut self, id: &str, was_in: Option<&str>, st: &Entry<'_>, clock: &Clock) {
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

impl Index {
    /// The index of every undelivered event in the status table.
    pub(super) fn load(db: &redb::Database) -> anyhow::Result<Self> {
        use redb::ReadableDatabase as _;
        let mut index = Self {
            loading: true,
            ..Self::default()
        };
        let txn = db.begin_read()?;
        index.next_seq = txn
            .open_table(EVENTS)?
            .last()?
            .map_or(1, |(k, _)| k.value() + 1);
        let table = txn.open_table(STATUS)?;
        let clock = Clock::now();
        // Each route's structures are sized once for its undelivered events, counted
        // first from each record's expiry alone (`u64::MAX` while undelivered): grown
        // by doubling instead, each would leave the buffers it outgrew (a third of
        // the index at 1 000 000 events) to the allocator, still resident once the
        // load is over.
        let mut counts: HashMap<String, usize> = HashMap::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            if v.value().get(..8) != Some(&u64::MAX.to_be_bytes()[..]) {
                continue;
            }
            let Some((route, _)) = split(k.value()) else {
                continue;
            };
            match counts.get_mut(route) {
                Some(n) => *n += 1,
                None => {
                    counts.insert(route.to_owned(), 1);
                }
            }
        }
        for (route, n) in &counts {
            let r = index.route(route);
            r.events.reserve(*n);
            r.due.reserve(*n);
        }
        // Events of an ordered route take their places in their keys' lines in
        // acceptance order (their sequence numbers), so that each line is rebuilt as
        // it was, at no cost beyond the index's own: this pass notes each event's line
        // in `lines` and which lines hold more than one event (`shared`), each event's
        // `Meta` holding its sequence number meanwhile; a second pass places the event
        // alone in its line (most of them, with a key per customer or object) and
        // lists the others, sorted per line afterwards. The others are indexed at once
        // (their order is their due time's).
        let mut shared: HashMap<String, HashSet<u64>> = HashMap::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            let Some((route, id)) = split(k.value()) else {
                continue;
            };
            let Some(rec) = LeanRecord::decode(v.value()) else {
                tracing::warn!(route, "disk store: an unreadable queue status was skipped");
                continue;
            };
            // Past every sequence number a record names, not only past the last body:
            // a delivered record of an older file may still name one whose body is
            // gone, and a new event under that number would be deleted with it.
            index.next_seq = index.next_seq.max(rec.seq + 1);
            if !rec.status.state.undelivered() {
                continue;
            }
            let r = index.route(route);
            let Some(key) = rec.status.order_key.as_deref() else {
                r.set(id, None, &rec.entry(), &clock);
                continue;
            };
            let (line, id) = (r.line(key), Id::from(id));
            r.insert(&id, rec.rx, Place::None);
            if rec.status.state == State::Dead {
                r.dead.insert((rec.rx & RX, id.clone()));
            }
            // Not counted as due (nor in `due`) until placed.
            if let Some(m) = r.events.get_mut(&id) {
                m.due_at = i64::try_from(rec.seq).unwrap_or(i64::MAX);
            }
            let lines = match shared.get_mut(route) {
                Some(lines) => lines,
                None => {
                    // At most a line per undelivered event (the pages a smaller
                    // count leaves unused are never touched, so never resident).
                    r.lines
                        .reserve(counts.get(route).copied().unwrap_or_default());
                    shared.entry(route.to_owned()).or_default()
                }
            };
            if !r.lines.insert(line) {
                lines.insert(line);
            }
        }
        if !shared.is_empty() {
            for entry in table.iter()? {
                let (k, v) = entry?;
                let Some((route, id)) = split(k.value()) else {
                    continue;
                };
                let Some(lines) = shared.get(route) else {
                    continue;
                };
                let Some(rec) = LeanRecord::decode(v.value()) else {
                    continue;
                };
                let (true, Some(key)) = (
                    rec.status.state.undelivered(),
                    rec.status.order_key.as_deref(),
                ) else {
                    continue;
                };
                let r = index.route(route);
                let line = r.line(key);
                if lines.contains(&line) {
                    if let Some((id, _)) = r.events.get_key_value(id) {
                        let id = id.clone();
                        r.behind.entry(line).or_default().push_back(id);
                    }
                } else {
                    r.take_first_place(id, &rec.entry(), &clock);
                }
            }
            for (route, lines) in shared {
                let r = index.route(&route);
                for line in lines {
                    r.order_line(line, &table, &route, &clock);
                }
                r.lines.shrink_to_fit();
            }
        }
        for r in index.routes.values_mut() {
            r.due.make_contiguous().sort_unstable();
            r.loading = false;
        }
        index.loading = false;
        Ok(index)
    }

    /// Rebuilds the index from the file (after a reopen), keeping the leases of events
    /// workers hold now.
    pub(super) fn reload(&mut self, db: &redb::Database) {
        match Self::load(db) {
            Ok(mut fresh) => {
                for (route, old) in &mut self.routes {
                    let r = fresh.route(route);
                    for (id, lease) in old.leased.drain() {
                        if r.events.get(&id).is_some_and(|m| m.due_at != NOT_DUE) {
                            r.not_due(&id);
                            let id = r.intern(&id);
                            r.leased.insert(id, lease);
                        }
                    }
                }
                fresh.held = self.held;
                *self = fresh;
            }
            Err(e) => {
                tracing::error!(error = %e, "disk store: cannot rebuild the queue index after reopening; it is rebuilt at the next start")
            }
        }
    }

    /// Holds deliveries back (see [`Index::held`]), or lets them go on.
    pub(super) fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// A sequence number for a new event.
    fn next_seq(&mut self) -> u64 {
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
    pub(super) fn apply(&mut self, change: Change) {
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

    /// Applies again an attempt's result that a reopen rolled back (see
    /// [`Change::Finished`]), unless another worker has leased the event since: that
    /// attempt's lease stays.
    pub(super) fn replay(&mut self, change: Change) {
        if let Change::Finished {
            route,
            id,
            lease,
            rec,
            was_in,
            ..
        } = change
        {
            let r = self.route(&route);
            if r.leased.get(id.as_str()).is_none_or(|l| l.token == lease) {
                r.set(&id, was_in.as_deref(), &Entry::from(&rec), &Clock::now());
            }
        }
    }

    /// Pins an event whose lease `token` holds (its attempt's result is being
    /// committed): false, and nothing pinned, when another worker took it.
    fn pin_held(&mut self, route: &str, id: &str, token: &str) -> bool {
        let held = self.holds(route, id, token);
        if held {
            self.pin(route, id);
        }
        held
    }

    /// Pins an event no worker holds (an operator's retry): false when one does.
    fn pin_unless_leased(&mut self, route: &str, id: &str) -> bool {
        let free = !self.is_leased(route, id);
        if free {
            self.pin(route, id);
        }
        free
    }

    /// Pins an event (see [`RouteIndex::pinned`]), leased or not.
    fn pin(&mut self, route: &str, id: &str) {
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
    pub(super) fn unpin_all(&mut self) {
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

    fn holds(&self, route: &str, id: &str, token: &str) -> bool {
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
    pub(super) fn spaces(&self) -> Vec<String> {
        self.routes
            .iter()
            .filter(|(_, r)| !r.events.is_empty())
            .map(|(space, _)| space.clone())
            .collect()
    }
}

/// Applies one queue operation inside the batch's write transaction. Index changes are
/// returned, to be applied once the transaction has committed; the events they change
/// are pinned meanwhile (see [`RouteIndex::pinned`]).
#[expect(
    clippy::too_many_arguments,
    reason = "the batch's open tables, each of its own type, and what the batch shares"
)]
pub(super) fn apply<'t>(
    dedup: &mut Table<'t, &'static str, &'static [u8]>,
    events: &mut Table<'t, u64, &'static [u8]>,
    status: &mut Table<'t, &'static str, &'static [u8]>,
    expiries: &mut Table<'t, (u64, &'static str), ()>,
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
    dedup: &'a mut Table<'t, &'static str, &'static [u8]>,
    events: &'a mut Table<'t, u64, &'static [u8]>,
    status: &'a mut Table<'t, &'static str, &'static [u8]>,
    expiries: &'a mut Table<'t, (u64, &'static str), ()>,
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
        if let Some(existing) = held_copy(self.dedup, self.status, op, self.now)? {
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
        let Some((mut rec, _)) = read_status(self.status, &k)? else {
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
        let (expires, removed_body) = if new.state == State::Delivered {
            self.events.remove(rec.seq).map_err(backend)?;
            // It names no body any more (0 is never a body's number).
            let body = std::mem::replace(&mut rec.seq, 0);
            (expiry(self.now, ttl), Some(body))
        } else {
            (u64::MAX, None)
        };
        self.write_status(&k, &rec, expires)?;
        index_expiry(self.expiries, expires, 's', &k)?;
        self.changes.push(Change::Finished {
            route: route.to_owned(),
            id: id.to_owned(),
            lease: lease.to_owned(),
            rec,
            expires,
            removed_body,
            was_in,
        });
        Ok(QReply::Finished(true))
    }

    /// An operator's retry: dead or retrying events no worker holds, queued again.
    fn requeue(&mut self, route: &str, ids: &[String]) -> Result<QReply, StoreError> {
        let mut n = 0;
        for id in ids {
            let k = qkey(route, id);
            let Some((mut rec, _)) = read_status(self.status, &k)? else {
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
        match read_status(self.status, &k)? {
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
            let Some((rec, _)) = read_status(self.status, &k)? else {
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
            let Some((mut rec, _)) = read_status(self.status, &k)? else {
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

/// Writes attempt results again (see [`Change::Finished`]) in the write transaction
/// `txn`: after a reopen the file holds the last durable commit, and these results,
/// committed without an fsync since, are not in it.
pub(super) fn rewrite(txn: &redb::WriteTransaction, results: &[Change]) -> Result<(), StoreError> {
    let mut status = txn.open_table(STATUS).map_err(backend)?;
    let mut events = txn.open_table(EVENTS).map_err(backend)?;
    let mut expiries = txn.open_table(EXPIRY).map_err(backend)?;
    for change in results {
        if let Change::Finished {
            route,
            id,
            rec,
            expires,
            removed_body,
            ..
        } = change
        {
            let k = qkey(route, id);
            status
                .insert(k.as_str(), encode_status(rec, *expires).as_slice())
                .map_err(backend)?;
            index_expiry(&mut expiries, *expires, 's', &k)?;
            if let Some(seq) = removed_body {
                events.remove(*seq).map_err(backend)?;
            }
        }
    }
    Ok(())
}

/// What the store already holds of an enqueue's event, as a claim would find it: its
/// claim (a dedup record of the route), or a copy stored for any destination of the
/// route (any state; a delivered one within its dedup window). Read-only, so that a
/// copy is answered from what is held even when new events are refused (a disk below
/// `min_free_space`, or that cannot be written).
pub(super) fn held_copy(
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

pub(super) fn live_record(
    dedup: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &DedupKey,
    now: u64,
) -> Result<Option<Record>, StoreError> {
    match dedup.get(key.as_str()).map_err(backend)? {
        None => Ok(None),
        Some(v) => match decode(v.value()) {
            Some((record, expires)) if expires > now => Ok(Some(record)),
            Some(_) => Ok(None),
            None => Err(StoreError::Corrupt(key.as_str().to_owned())),
        },
    }
}

fn live_claim(
    dedup: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &DedupKey,
    now: u64,
) -> Result<Option<Claim>, StoreError> {
    Ok(live_record(dedup, key, now)?.map(|r| r.as_existing()))
}

fn read_status(
    status: &impl ReadableTable<&'static str, &'static [u8]>,
    k: &str,
) -> Result<Option<(StatusRecord, u64)>, StoreError> {
    match status.get(k).map_err(backend)? {
        None => Ok(None),
        Some(v) => decode_status(v.value())
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(k.replace('\n', ":"))),
    }
}

/// Milliseconds on the process's monotonic clock (since its first reading): what
/// leases held in the process (the index's, the claims') run on.
pub(super) fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Now, on both clocks. Stored times are wall-clock (Unix ms: they must mean the same
/// after a restart); the index schedules on the monotonic clock, converting a stored
/// time by its distance from the wall clock's now, so that a wall clock stepping back
/// (or forward) after the conversion changes no due time and no order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
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

/// A route's recent delivery starts and pause, for its `rate_limit`. On the monotonic
/// clock ([`mono_ms`]): nothing of it is stored.
#[derive(Debug, Default)]
pub(super) struct Limiter {
    /// (monotonic ms, token) of the starts within the counted window, oldest first.
    starts: std::collections::VecDeque<(u64, u64)>,
    paused_until_ms: u64,
    next_token: u64,
}

impl Limiter {
    fn take(&mut self, limit: &RateLimit, now: u64) -> Result<String, Duration> {
        if self.paused_until_ms > now {
            return Err(Duration::from_millis(self.paused_until_ms - now));
        }
        let window = u64::try_from(limit.counted_over().as_millis()).unwrap_or(u64::MAX);
        while self.starts.front().is_some_and(|(t, _)| *t + window <= now) {
            self.starts.pop_front();
        }
        if self.starts.len() < limit.count as usize {
            self.next_token += 1;
            self.starts.push_back((now, self.next_token));
            return Ok(self.next_token.to_string());
        }
        let oldest = self.starts.front().map_or(now, |(t, _)| *t);
        Err(Duration::from_millis(
            (oldest + window).saturating_sub(now).max(1),
        ))
    }
}

/// Events a list looks at, at most.
const LIST_SCAN: usize = 10_000;
/// How long an enqueue holds its key against sync claims at most (it lets go when it
/// ends; this bounds a hold whose task vanished without dropping it).
const ENQUEUE_HOLD: Duration = Duration::from_secs(30);

/// A destination's namespace in the queue tables and the index: the key prefix and
/// the queue's name (the route's, with `/<destination>` for a named destination), so
/// that two prefixes sharing a file never see each other's events.
fn space(q: &QueueRef<'_>) -> String {
    format!("{}{}", q.prefix, q.name())
}

fn unexpected() -> StoreError {
    StoreError::Backend("unexpected reply".into())
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
}

#[cfg(test)]
thread_local! {
    /// Reads of a queued event's status that fail (on this thread) before reading
    /// again: a test's way to inject a transient read error.
    static FAILING_READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn get_status(
    status: &redb::ReadOnlyTable<&str, &[u8]>,
    k: &str,
) -> Result<Option<StatusRecord>, StoreError> {
    #[cfg(test)]
    if FAILING_READS.with(|n| n.replace(n.get().saturating_sub(1)) > 0) {
        return Err(StoreError::Backend("an injected read error".into()));
    }
    match status.get(k).map_err(backend)? {
        None => Ok(None),
        Some(v) => decode_status(v.value())
            .map(|(rec, _)| Some(rec))
            .ok_or_else(|| StoreError::Corrupt(k.replace('\n', ":"))),
    }
}

fn get_event(
    events: &redb::ReadOnlyTable<u64, &[u8]>,
    seq: u64,
    k: &str,
) -> Result<Option<StoredEvent>, StoreError> {
    match events.get(seq).map_err(backend)? {
        None => Ok(None),
        Some(v) => StoredEvent::decode(v.value())
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(k.replace('\n', ":"))),
    }
}

fn summary(id: &str, rec: &StatusRecord) -> Summary {
    Summary {
        destination: None,
        event_id: id.to_owned(),
        state: rec.status.state,
        attempts: rec.status.attempts,
        received_at_ms: rec.rx,
        next_at_ms: rec.status.next_at_ms,
        last_result: rec.status.history.last().map(|a| a.result.to_string()),
    }
}

/// Events an operator's retry or purge changes per transaction: a long list of dead
/// events goes in several, so the writer never stops for long.
const PER_OPERATION: usize = 500;

impl DiskStore {
    /// Runs `f` on a route's limiter, under its lock.
    fn limiter<T>(&self, q: &QueueRef<'_>, f: impl FnOnce(&mut Limiter) -> T) -> T {
        let mut limits = self
            .inner
            .limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(limits.entry(space(q)).or_default())
    }

    /// The IDs a retry or purge acts on, in chunks of [`PER_OPERATION`].
    fn targets(&self, q: &QueueRef<'_>, target: &Target) -> Vec<Vec<String>> {
        match target {
            Target::One(id) => vec![vec![id.clone()]],
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

impl Pacing for DiskStore {
    async fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> Result<Result<String, Duration>, StoreError> {
        Ok(self.limiter(q, |l| l.take(limit, mono_ms())))
    }

    async fn rate_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        if let Ok(token) = token.parse::<u64>() {
            self.limiter(q, |l| l.starts.retain(|(_, t)| *t != token));
        }
        Ok(())
    }

    async fn slot_take(
        &self,
        _q: &QueueRef<'_>,
        _max: usize,
        want: usize,
        _lease: Duration,
    ) -> Result<Vec<String>, StoreError> {
        // One process owns the file: its own per-route bound is the whole limit.
        Ok(vec![String::new(); want])
    }

    async fn slot_return(&self, _q: &QueueRef<'_>, _token: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn pause(&self, q: &QueueRef<'_>, wait: Duration) -> Result<(), StoreError> {
        let until = mono_ms().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        self.limiter(q, |l| l.paused_until_ms = l.paused_until_ms.max(until));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> StoredEvent {
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

    /// Lines rebuilt by a restart: a key's events in acceptance order, an event
    /// queued again after it died (skipped) at the end of its line, one-event lines due
    /// at once, a dead event under `block` still holding its line.
    #[tokio::test]
    async fn a_restart_rebuilds_every_line_in_acceptance_order() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("h.db");
        let q = QueueRef::new("t:", "r", "r");
        let ttl = Duration::from_secs(60);
        let enqueue = |s: DiskStore, id: &'static str, key: &'static str| async move {
            let fanout = Fanout {
                prefix: "t:",
                route: "r",
                all: vec!["r"],
                to: vec![("r", Some(key.to_owned()))],
            };
            s.enqueue_to(&fanout, &event(id), ttl)
                .await
                .expect("enqueue")
        };
        let dead = || {
            Finish::Dead(
                crate::store::Attempt {
                    at_ms: now_ms(),
                    status: Some(500),
                    result: "http_5xx".parse().expect("result"),
                    error: None,
                    duration_ms: 1,
                },
                "attempts".into(),
            )
        };
        {
            let s = DiskStore::open(&path).expect("open");
            for (id, key) in [("k1", "a"), ("k2", "a"), ("k3", "a"), ("solo", "b")] {
                enqueue(s.clone(), id, key).await;
            }
            enqueue(s.clone(), "blocker", "c").await;
            enqueue(s.clone(), "blocked", "c").await;
            let mut first = s.take_due(&q, 10, ttl).await.expect("take");
            first.sort_by(|a, b| a.event.envelope.event_id.cmp(&b.event.envelope.event_id));
            let ids: Vec<_> = first
                .iter()
                .map(|l| l.event.envelope.event_id.clone())
                .collect();
            assert_eq!(ids, ["blocker", "k1", "solo"]);
            // k1 dies and skips (its line goes on), then is queued again: behind k3.
            let mut k1 = first.remove(1);
            k1.status.left_line = k1.status.order_key.take();
            assert!(s.finish(&q, &k1, &dead(), ttl).await.expect("finish"));
            // blocker dies under `block`: it keeps its line.
            assert!(s.finish(&q, &first[0], &dead(), ttl).await.expect("finish"));
            assert_eq!(
                s.retry(&q, &Target::One("k1".into())).await.expect("retry"),
                1
            );
        }
        let mut reopened = None;
        for _ in 0..100 {
            if let Ok(s) = DiskStore::open(&path) {
                reopened = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let s = reopened.expect("reopen");
        let mut order = Vec::new();
        loop {
            let leased = s.take_due(&q, 10, ttl).await.expect("take");
            let Some(l) = leased.iter().find(|l| l.event.envelope.event_id != "solo") else {
                break;
            };
            assert_eq!(
                leased
                    .iter()
                    .filter(|l| l.event.envelope.event_id != "solo")
                    .count(),
                1
            );
            order.push(l.event.envelope.event_id.clone());
            for l in &leased {
                let delivered = Finish::Delivered(crate::store::Attempt {
                    at_ms: now_ms(),
                    status: Some(200),
                    result: "delivered".parse().expect("result"),
                    error: None,
                    duration_ms: 1,
                });
                assert!(s.finish(&q, l, &delivered, ttl).await.expect("finish"));
            }
        }
        assert_eq!(order, ["k2", "k3", "k1"], "key a's line as it was");
        let index = s.index();
        let r = &index.routes["t:r"];
        assert_eq!(
            (r.lines.len(), r.behind.len(), r.events.len()),
            (1, 1, 2),
            "only key c's line is left: blocker (dead) and blocked behind it"
        );
    }
}
