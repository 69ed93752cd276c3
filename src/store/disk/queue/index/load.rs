//! The index rebuilt from the status table: when the file is opened, and again after
//! the writer reopened it.

use std::collections::{HashMap, HashSet};

use redb::ReadableTable as _;
use serde::Deserialize;

use super::route::{Entry, Id, NOT_DUE, Place, RX, RouteIndex};
use super::{Clock, Index};
use crate::store::State;
use crate::store::disk::queue::tables::{EVENTS, STATUS, qkey, split};

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

impl RouteIndex {
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
}

impl Index {
    /// The index of every undelivered event in the status table.
    pub(in crate::store::disk) fn load(db: &redb::Database) -> anyhow::Result<Self> {
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
        let counts = undelivered_per_route(&table)?;
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
        let shared = index.index_statuses(&table, &counts, &clock)?;
        if !shared.is_empty() {
            index.place_shared_lines(&table, shared, &clock)?;
        }
        for r in index.routes.values_mut() {
            r.due.make_contiguous().sort_unstable();
            r.loading = false;
        }
        index.loading = false;
        Ok(index)
    }

    /// A load's first pass: each undelivered event is indexed, or on an ordered route
    /// noted in its key's line (see [`Index::load`]). Returns the lines that hold more
    /// than one event, by route.
    fn index_statuses(
        &mut self,
        table: &redb::ReadOnlyTable<&str, &[u8]>,
        counts: &HashMap<String, usize>,
        clock: &Clock,
    ) -> anyhow::Result<HashMap<String, HashSet<u64>>> {
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
            self.next_seq = self.next_seq.max(rec.seq + 1);
            if !rec.status.state.undelivered() {
                continue;
            }
            let r = self.route(route);
            let Some(key) = rec.status.order_key.as_deref() else {
                r.set(id, None, &rec.entry(), clock);
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
        Ok(shared)
    }

    /// A load's second pass: an event alone in its line takes the line's first place,
    /// the others are listed, then each shared line is sorted into acceptance order.
    fn place_shared_lines(
        &mut self,
        table: &redb::ReadOnlyTable<&str, &[u8]>,
        shared: HashMap<String, HashSet<u64>>,
        clock: &Clock,
    ) -> anyhow::Result<()> {
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
            let r = self.route(route);
            let line = r.line(key);
            if lines.contains(&line) {
                if let Some((id, _)) = r.events.get_key_value(id) {
                    let id = id.clone();
                    r.behind.entry(line).or_default().push_back(id);
                }
            } else {
                r.take_first_place(id, &rec.entry(), clock);
            }
        }
        for (route, lines) in shared {
            let r = self.route(&route);
            for line in lines {
                r.order_line(line, table, &route, clock);
            }
            r.lines.shrink_to_fit();
        }
        Ok(())
    }

    /// Rebuilds the index from the file (after a reopen), keeping the leases of events
    /// workers hold now.
    pub(in crate::store::disk) fn reload(&mut self, db: &redb::Database) {
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
}

/// Undelivered events per route, counted from each record's expiry alone (`u64::MAX`
/// while undelivered), so that a load sizes each route's structures once.
fn undelivered_per_route(
    table: &redb::ReadOnlyTable<&str, &[u8]>,
) -> anyhow::Result<HashMap<String, usize>> {
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
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::queue::now_ms;
    use crate::store::disk::DiskStore;
    use crate::store::disk::queue::tests::event;
    use crate::store::{Fanout, Finish, QueueRef, QueueStore as _, Target};

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
                    kind: None,
                    receipt: None,
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
                    kind: None,
                    receipt: None,
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
