//! The delivery log in Redis: per route, under the route's hash tag (one cluster
//! slot), five keys:
//!
//! ```text
//! <prefix>#log:{<route>}:ids     sorted set, every score 0: delivery IDs in ID (time) order
//! <prefix>#log:{<route>}:rec     hash: delivery ID → the record, compressed (`Stored::pack`)
//! <prefix>#log:{<route>}:bytes   what the route's records count against its share
//! <prefix>#log:{<route>}:counts  hash: "<minute>|<outcome>" → requests
//! <prefix>#log:{<route>}:tens    hash: "<ten-minute bucket>|<outcome>" → requests (a
//!                                day), and "#floor": the oldest bucket kept
//! ```
//!
//! (`#`: a character no route name holds, so no route's dedup key is one of these;
//! `store/redis/layout.rs`.)
//!
//! One script per route and batch adds the records, then deletes the oldest (`HDEL`
//! and `ZREM`: Redis frees them at once) until the route is within its share of
//! `max_size` (what requests for no route may hold, a 16th, set apart under
//! [`super::UNROUTED`]; the rest divided by the number of routes) and within `keep`. A list
//! across routes reads each route's newest IDs and merges them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

use super::{
    Appended, Batch, Bounds, Buckets, COUNT_MINUTES, COUNT_TENS, DeliveryRecord, ENTRY_OVERHEAD,
    LogPage, LogQuery, NotRecorded, Stored, Width,
};
use crate::store::{RedisStore, StoreError};

/// KEYS: ids, rec, bytes, counts, tens. ARGV: share, keep floor (ms), oldest minute
/// kept, overhead, number of records, oldest ten-minute bucket kept, then (id, json)
/// pairs, then (field, n) pairs.
const APPEND: &str = include_str!("../redis/scripts/log_append.lua");

/// Redis's delivery log.
#[derive(Debug, Clone)]
pub struct RedisLog {
    store: RedisStore,
    bounds: Bounds,
    prefix: String,
    script: Arc<Script>,
    memory: Arc<Mutex<Memory>>,
}

/// The log holds at most this fraction of Redis's `maxmemory` (1/4), whatever
/// `log.max_size` says: the rest is the claims' and events'.
const SHARE_OF_MAXMEMORY: u64 = 4;
/// Past this much of `maxmemory` used (4/5), on any node, the log records nothing
/// and gives back half of what it holds at each write, until Redis is below again:
/// a new event or claim is never refused because of the log.
const PRESSURE: (u64, u64) = (4, 5);
/// How often Redis's memory is read (`INFO memory`), at most.
const MEMORY_EVERY: Duration = Duration::from_secs(1);

/// What the log last read of Redis's memory, and what it holds.
#[derive(Debug, Default)]
struct Memory {
    read_at: Option<Instant>,
    /// The smallest `maxmemory` set on a node (`None`: no limit, or not read).
    limit: Option<u64>,
    /// Some node is past [`PRESSURE`].
    pressed: bool,
    /// What each route's records count, as the last write left it.
    held: HashMap<String, u64>,
}

/// A route's five keys.
struct Keys {
    ids: String,
    rec: String,
    bytes: String,
    counts: String,
    tens: String,
}

/// One route's part of a batch: `(id, json)` records and `(field, n)` counts.
type RouteBatch = (Vec<(String, Vec<u8>)>, Vec<(String, u64)>);

/// Records one script adds at most (about a kilobyte each, compressed): Redis runs a
/// script whole, so a short one holds a claim arriving meanwhile only briefly.
const SCRIPT_RECORDS: usize = 32;

/// IDs read per route and list request at most.
const CHUNK: usize = 1_000;

impl RedisLog {
    pub(super) fn new(store: &RedisStore, bounds: Bounds, prefix: &str) -> Self {
        Self {
            // A connection of its own: the log's scripts never sit in front of a claim
            // on the claims' multiplexed connection.
            store: store.own_connection().unwrap_or_else(|_| store.clone()),
            bounds,
            prefix: prefix.to_owned(),
            script: Arc::new(Script::new(APPEND)),
            memory: Arc::default(),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Redis's memory as last read, read again if that was [`MEMORY_EVERY`] ago:
    /// the smallest `maxmemory` and whether a node is past [`PRESSURE`]. Unreadable
    /// (an ACL refusing `INFO`): no limit known, no pressure.
    async fn watch(&self) -> (Option<u64>, bool) {
        {
            let m = self.memory();
            if m.read_at.is_some_and(|at| at.elapsed() < MEMORY_EVERY) {
                return (m.limit, m.pressed);
            }
        }
        let nodes = self.store.memory().await.unwrap_or_default();
        let limit = nodes.iter().map(|(_, max)| *max).filter(|m| *m > 0).min();
        let pressed = nodes.iter().any(|(used, max)| {
            *max > 0 && used.saturating_mul(PRESSURE.1) >= max.saturating_mul(PRESSURE.0)
        });
        let mut m = self.memory();
        m.read_at = Some(Instant::now());
        m.limit = limit;
        m.pressed = pressed;
        (limit, pressed)
    }

    /// The log's bound: `log.max_size`, or a quarter of Redis's `maxmemory` if that
    /// is less.
    fn max_size(&self, limit: Option<u64>) -> u64 {
        limit.map_or(self.bounds.max_size, |m| {
            self.bounds.max_size.min(m / SHARE_OF_MAXMEMORY)
        })
    }

    /// The warning the start gives when `log.max_size` is more than the log may hold
    /// of Redis's `maxmemory`, if it is.
    pub(super) async fn budget_warning(&self) -> Option<String> {
        let (limit, _) = self.watch().await;
        let limit = limit?;
        (self.bounds.max_size > limit / SHARE_OF_MAXMEMORY).then(|| {
            format!(
                "log.max_size ({} MiB) is more than a quarter of Redis's maxmemory ({} MiB): the log keeps at most {} MiB, and records nothing while Redis is past 80 % of maxmemory (counted as not_recorded, reason redis_memory)",
                self.bounds.max_size >> 20,
                limit >> 20,
                (limit / SHARE_OF_MAXMEMORY) >> 20
            )
        })
    }

    fn keys(&self, route: &str) -> Keys {
        let base = crate::store::redis::log_base(&self.prefix, route, crate::store::redis::LOG);
        Keys {
            ids: format!("{base}ids"),
            rec: format!("{base}rec"),
            bytes: format!("{base}bytes"),
            counts: format!("{base}counts"),
            tens: format!("{base}tens"),
        }
    }

    /// Each route's share of the log's bound, and the share of the records of
    /// requests for no route ([`super::UNROUTED_SHARE`]): the routes divide the rest.
    fn share(max_size: u64, routes: &[String]) -> (u64, u64) {
        let unrouted = max_size / super::UNROUTED_SHARE;
        let named = routes.iter().filter(|r| *r != super::UNROUTED).count();
        ((max_size - unrouted) / named.max(1) as u64, unrouted)
    }

    pub(super) async fn append(
        &self,
        mut batch: Batch,
        routes: &[String],
    ) -> Result<Appended, StoreError> {
        let now = crate::queue::now_ms();
        let keep = u64::try_from(self.bounds.keep.as_millis()).unwrap_or(u64::MAX);
        let floor = now.saturating_sub(keep);
        let old_minute = super::minute_of(now).saturating_sub(COUNT_MINUTES);
        let old_ten = Width::TenMinutes
            .bucket_of(super::minute_of(now))
            .saturating_sub(COUNT_TENS);
        let (limit, pressed) = self.watch().await;
        let (share, unrouted_share) = Self::share(self.max_size(limit), routes);
        // Near maxmemory: nothing recorded, and every route gives back half.
        let appended = if pressed && !batch.records.is_empty() {
            batch.records.clear();
            Appended::NotRecorded(NotRecorded::RedisMemory)
        } else {
            Appended::Written
        };
        let share_of = |route: &str| {
            let share = if route == super::UNROUTED {
                unrouted_share
            } else {
                share
            };
            if pressed {
                self.memory().held.get(route).map_or(share / 2, |b| b / 2)
            } else {
                share
            }
        };
        // An empty batch enforces the bounds on every route (records age out of an
        // idle one); a batch touches only the routes it has records or counts of.
        let mut per_route: HashMap<&str, RouteBatch> =
            if pressed || (batch.records.is_empty() && batch.counts.is_empty()) {
                routes
                    .iter()
                    .map(|r| (r.as_str(), Default::default()))
                    .collect()
            } else {
                HashMap::new()
            };
        for r in &batch.records {
            let Some(head) = r.head() else { continue };
            per_route
                .entry(head.route)
                .or_default()
                .0
                .push((head.delivery_id.to_owned(), r.pack()));
        }
        for ((route, outcome, minute), n) in &batch.counts {
            per_route
                .entry(route.as_str())
                .or_default()
                .1
                .push((format!("{minute}|{outcome}"), *n));
        }
        let mut failed = None;
        // A route's records go in scripts of at most `SCRIPT_RECORDS` each (the counts
        // with the last): Redis runs a script whole, and a claim arriving meanwhile
        // waits for it, so no script of the log may run long.
        let jobs = per_route
            .into_iter()
            .flat_map(|(route, (mut records, counts))| {
                let mut chunks = Vec::new();
                while records.len() > SCRIPT_RECORDS {
                    let rest = records.split_off(SCRIPT_RECORDS);
                    chunks.push((route, std::mem::replace(&mut records, rest), Vec::new()));
                }
                chunks.push((route, records, counts));
                chunks
            });
        for (route, records, counts) in jobs {
            let keys = self.keys(route);
            let script = &self.script;
            let share = share_of(route);
            let result: Result<i64, StoreError> = self
                .store
                .run(|mut c| async move {
                    let mut inv = script.prepare_invoke();
                    inv.key(&keys.ids)
                        .key(&keys.rec)
                        .key(&keys.bytes)
                        .key(&keys.counts)
                        .key(&keys.tens)
                        .arg(share)
                        .arg(floor)
                        .arg(old_minute)
                        .arg(ENTRY_OVERHEAD)
                        .arg(records.len())
                        .arg(old_ten);
                    for (id, json) in &records {
                        inv.arg(id).arg(json.as_slice());
                    }
                    for (field, n) in &counts {
                        inv.arg(field).arg(*n);
                    }
                    inv.invoke_async(&mut c).await
                })
                .await;
            match result {
                Ok(bytes) => {
                    self.memory()
                        .held
                        .insert(route.to_owned(), u64::try_from(bytes).unwrap_or(0));
                }
                Err(e) => failed = Some(e),
            }
        }
        failed.map_or(Ok(appended), Err)
    }

    /// Up to `n` IDs of a route below `upper` and from `lower` on, newest first.
    async fn ids(
        &self,
        route: &str,
        lower: Option<&str>,
        upper: Option<&str>,
        n: usize,
    ) -> Result<Vec<String>, StoreError> {
        let keys = self.keys(route);
        let max = upper.map_or_else(|| "+".to_owned(), |u| format!("({u}"));
        let min = lower.map_or_else(|| "-".to_owned(), |l| format!("[{l}"));
        self.store
            .run(|mut c| async move {
                redis::cmd("ZREVRANGEBYLEX")
                    .arg(&keys.ids)
                    .arg(&max)
                    .arg(&min)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(n)
                    .query_async(&mut c)
                    .await
            })
            .await
    }

    async fn records(&self, route: &str, ids: &[String]) -> Result<Vec<Stored>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys(route);
        let found: Vec<Option<Vec<u8>>> = self
            .store
            .run(|mut c| async move {
                redis::cmd("HMGET")
                    .arg(&keys.rec)
                    .arg(ids)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(found
            .into_iter()
            .flatten()
            .filter_map(|b| Stored::unpack(&b))
            .collect())
    }

    /// Each route's newest IDs in the range, merged: every ID at or above the
    /// frontier (the highest last ID of a route that had more) has been seen, so the
    /// page is taken from those and the next one starts below the frontier.
    pub(super) async fn list(
        &self,
        q: &LogQuery,
        routes: &[String],
    ) -> Result<LogPage, StoreError> {
        let (upper, lower) = (q.upper(), q.lower());
        let wanted: Vec<&String> = routes
            .iter()
            .filter(|r| q.route.as_ref().is_none_or(|w| w == *r))
            .collect();
        let chunk = (q.limit.max(1) * 4).clamp(100, CHUNK);
        let mut frontier: Option<String> = None;
        let mut all: Vec<(String, String)> = Vec::new();
        for route in &wanted {
            let ids = self
                .ids(route, lower.as_deref(), upper.as_deref(), chunk)
                .await?;
            if ids.len() == chunk
                && let Some(last) = ids.last()
                && frontier.as_ref().is_none_or(|f| last > f)
            {
                frontier = Some(last.clone());
            }
            all.extend(ids.into_iter().map(|id| ((*route).clone(), id)));
        }
        all.retain(|(_, id)| frontier.as_ref().is_none_or(|f| id >= f));
        all.sort_by(|a, b| b.1.cmp(&a.1));
        // Records read one route at a time, then put back in ID order.
        let mut by_route: HashMap<&str, Vec<String>> = HashMap::new();
        for (route, id) in &all {
            by_route.entry(route).or_default().push(id.clone());
        }
        let mut records: Vec<Stored> = Vec::with_capacity(all.len());
        for (route, ids) in by_route {
            records.extend(self.records(route, &ids).await?);
        }
        records
            .sort_by_cached_key(|r| std::cmp::Reverse(r.head().map(|h| h.delivery_id.to_owned())));
        let mut page = super::page_from(q, records.iter());
        if page.next_cursor.is_none() {
            page.next_cursor = frontier;
        }
        Ok(page)
    }

    pub(super) async fn get(
        &self,
        id: &str,
        routes: &[String],
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        for route in routes {
            let keys = self.keys(route);
            let found: Option<Vec<u8>> = self
                .store
                .run(|mut c| async move {
                    redis::cmd("HGET")
                        .arg(&keys.rec)
                        .arg(id)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            if let Some(r) = found.and_then(|b| Stored::unpack(&b)) {
                return Ok(r.record(true));
            }
        }
        Ok(None)
    }

    pub(super) async fn counts(
        &self,
        since_minute: u64,
        routes: &[String],
    ) -> Result<HashMap<(String, String), u64>, StoreError> {
        let mut out: HashMap<(String, String), u64> = HashMap::new();
        for route in routes {
            let keys = self.keys(route);
            let all: HashMap<String, u64> = self
                .store
                .run(|mut c| async move {
                    redis::cmd("HGETALL")
                        .arg(&keys.counts)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            for (field, n) in all {
                let Some((minute, outcome)) = field.split_once('|') else {
                    continue;
                };
                if minute.parse::<u64>().is_ok_and(|m| m >= since_minute) {
                    *out.entry((route.clone(), outcome.to_owned())).or_default() += n;
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn buckets(
        &self,
        route: &str,
        width: Width,
        since: u64,
        _routes: &[String],
    ) -> Result<Buckets, StoreError> {
        let keys = self.keys(route);
        let key = match width {
            Width::Minute => keys.counts,
            Width::TenMinutes => keys.tens,
        };
        let all: HashMap<String, u64> = self
            .store
            .run(|mut c| async move { redis::cmd("HGETALL").arg(&key).query_async(&mut c).await })
            .await?;
        let mut out = Buckets::new();
        for (field, n) in all {
            // `#floor` and anything not of the form is skipped.
            let Some((bucket, outcome)) = field.split_once('|') else {
                continue;
            };
            if let Ok(b) = bucket.parse::<u64>()
                && b >= since
            {
                *out.entry((b, outcome.to_owned())).or_default() += n;
            }
        }
        Ok(out)
    }

    pub(super) async fn size(&self, routes: &[String]) -> Result<u64, StoreError> {
        let mut total = 0;
        for route in routes {
            let keys = self.keys(route);
            let n: Option<u64> =
                self.store
                    .run(|mut c| async move {
                        redis::cmd("GET").arg(&keys.bytes).query_async(&mut c).await
                    })
                    .await?;
            total += n.unwrap_or(0);
        }
        Ok(total)
    }
}
