//! Durable delivery on Redis: [`QueueStore`] for [`RedisStore`], in a Stream with a
//! consumer group per destination queue.
//!
//! Each destination of a route has a queue of its own, under a base of
//! `<prefix>#q:{<route>}:` for the destination named after the route (the keys a route
//! had before it had destinations) and `<prefix>#q:{<route>}/<destination>:` for the
//! others (`#`: a character no route name holds, so no dedup key is one of these;
//! `layout.rs`). Every key of every destination carries the route's hash tag `{<route>}`, so
//! a route's keys share one cluster slot and every script and pipeline below runs on
//! one node, a fan-out to several destinations included:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<base>ev:<id>` | hash | `env` (envelope JSON), `body`, `fp`, `status` (JSON), `lease` (while leased), `okey` (the line's key, while it holds a place in one); the destination's dedup record |
//! | `<base>stream` | stream | due events (field `id`), consumer group `hookgate` |
//! | `<base>delayed` | zset | retrying events by next try (Unix ms) |
//! | `<base>all` | zset | every undelivered event (queued, retrying, dead) by arrival |
//! | `<base>dead` | zset | dead events by arrival |
//! | `<base>delivered` | zset | delivered records by expiry, trimmed when written or listed |
//! | `<base>o:<order key>` | list | per-key order (`order_by`): the IDs holding a place in that key's line, in acceptance order |
//!
//! **Fan-out.** An enqueue is one script over every destination of the route: a hash
//! of the event in any of their queues makes it a duplicate; otherwise each
//! destination it goes to gets its own copy (hash, `all`, stream or line), delivered,
//! retried and dropped on its own.
//!
//! **Per-key order.** An event with an order key is pushed onto its key's line and
//! enters the stream only if it is the line's first; the others wait (queued, in no
//! stream or `delayed`). It leaves the line when it is delivered, dies under
//! `on_dead = "skip"` (the worker clears the status's `order_key`) or is purged; if it
//! was first, the next event of the line goes into the stream then. A dead event that
//! keeps its `order_key` (`on_dead = "block"`) keeps its place, and the line waits
//! until it is retried and delivered, or purged. An operator's retry of an event that
//! waits behind another queues it without a stream entry: it goes in its turn. This is
//! the disk store's line index (`RouteIndex` in `store/disk/queue.rs`) kept in Redis.
//!
//! An undelivered event's hash has no expiry; a delivered one drops its body and
//! expires after `dedup_ttl`, so copies within the window are still duplicates.
//!
//! **Leases.** `take_due` hands out a lease token `<stream entry id>:<nonce>` and writes
//! it into the hash's `lease` field; `finish` applies only if the field still holds that
//! token. A holder that dies leaves its entry pending in the group: once it has been
//! idle for the lease (the taker's lease: every worker of a route uses the route's), a
//! `take_due` anywhere claims it with `XAUTOCLAIM` and writes a fresh token, so the first
//! holder's late `finish` is ignored (`Ok(false)`). An entry whose event was purged,
//! delivered or is dead is acknowledged and deleted when it comes up.
//!
//! Deviations from the first design, with their reasons:
//!
//! - `take_due` is one script (promote due `delayed` members, `XAUTOCLAIM`,
//!   non-blocking `XREADGROUP`, lease each entry) rather than three commands and a lease
//!   script: one round trip per poll (workers poll every queue route), and no window in
//!   which an entry is pending in the group without a lease token. The script builds the
//!   event hash keys from the entry's `id` field: they share the route's hash tag, so
//!   they are in the script's slot (as are the lines that `finish` and `purge` read
//!   from a hash's `okey`). The `XAUTOCLAIM` cursor is kept per stream in the
//!   store, so a long pending list is walked across polls instead of rescanning its
//!   head. A missing group (`NOGROUP`: first use, or lost in a failover) is created in
//!   the script (`XGROUP CREATE … 0 MKSTREAM`) and the call repeated.
//! - `finish` with a lost lease acknowledges the entry only if no other worker holds
//!   that same entry now (`XACK` is group-wide: acknowledging an entry another worker
//!   re-claimed would drop it from the pending list, and if that worker then died the
//!   event would never be taken again).
//! - Two stream entries for one event (an operator's retry of an event whose retry was
//!   just promoted) are collapsed: an entry whose event is leased through another entry
//!   that is still pending is acknowledged and skipped.
//! - An event whose stored data cannot be read is set aside by `take_due` (its entry
//!   acknowledged, the hash kept for `show`/`purge`, a warning logged with its key) so
//!   that one bad record does not stall its route; `take_due` reports `Corrupt` only if
//!   it has nothing else to return. `list`, `show` and `retry` report `Corrupt(key)`.
//! - With `min_replicas_ack`, an enqueue that too few replicas acknowledged is an error
//!   (503), but the event stays stored on the primary: it is delivered. Deleting it
//!   instead could race a worker that already took it and deliver it twice. The
//!   provider's retry finds it, writes it again (its fingerprint, unchanged) and waits
//!   for replicas as the first copy did: it is answered 2xx only once replicas hold the
//!   event, and 503 until then, so no 2xx ever rests on an event only the primary holds.
//!
//! `list` without a state lists the undelivered events (the `all` index); delivered
//! records are listed with `Some(State::Delivered)`.
//!
//! Consumers are named `<host>-<pid>-<random>`, one per store; a consumer left by a
//! process that exited stays in the group (with nothing pending once its entries are
//! claimed) until removed with `XGROUP DELCONSUMER`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use rand::Rng as _;
use redis::Script;

use super::{RedisStore, invoke_then_wait, millis, too_few_replicas};
use crate::queue::{RateLimit, now_ms};
use crate::store::{
    Claim, Depth, Enqueued, Envelope, Fanout, Finish, Leased, Pacing, QueueRef, QueueStore, State,
    Status, StoreError, StoredEvent, Summary, Target,
};

// Out of memory: every script but ENQUEUE is flagged `allow-oom` (Redis 7), so a Redis
// at `maxmemory` (with `maxmemory-policy noeviction`) refuses new events (503) but
// still lets the queue deliver, retry and purge what it holds — which frees memory as
// delivered events drop their bodies. Without the flag, every script would be refused
// and the queue would stall until an operator freed memory by hand.

/// Due retries moved from `delayed` into the stream per `take_due`.
const PROMOTE: usize = 100;
/// Event IDs read from an index per `list` (the rest is not scanned).
const SCAN_BOUND: usize = 10_000;
/// Hashes read per pipeline.
const CHUNK: usize = 256;
/// Reads of a status before a compare-and-set gives up on a racing writer.
const CAS_TRIES: usize = 3;
/// How long an entry stays pending before a take looks at whether its lease ran out
/// (or the taker's own lease, if shorter). Holders renew more often than this
/// (`worker::RENEW_EVERY`), so an entry idle this long mostly has a holder that
/// stopped; one whose lease still runs is left to its holder.
const RECLAIM_IDLE: Duration = Duration::from_secs(3);
/// Pending entries of this process an untake looks at, at most.
const UNTAKE_SCAN: usize = 10_000;

/// KEYS: the event's hash in the queue of every destination of the route (those it
/// goes to included, each once), then per destination it goes to: its event hash,
/// stream, `all` and, when the event has an order key there, its line. ARGV: env,
/// body, fp, event id, received_at, how many hashes to check, `1` when a copy must
/// write (`min_replicas_ack`, else `0`), then per destination it goes to: its status,
/// `1` when it has a line (else `0`).
/// Returns 0 when stored, the stored fingerprint when the event is there, `-i` when the
/// `i`-th hash holds it without one.
///
/// A copy writes the stored fingerprint again, unchanged, when asked to: `WAIT` waits
/// for the connection's last write, so a copy that wrote nothing would be "acknowledged"
/// at once, even when the event it found (written by another connection, or by this
/// one's first copy that `WAIT` refused) has reached no replica. The replication stream
/// is in order: a replica that acknowledged this write holds the event too.
const ENQUEUE: &str = include_str!("scripts/enqueue.lua");

/// Lua for the scripts that end an event's place in its key's line: `leave_line(event
/// hash, event id, stream, delayed, event key prefix)` takes the event out of the line
/// its `okey` names; when it was the first, the next event of the line is due now
/// (unless it is dead, leased or already due, as the disk store's `leave_line`). An ID
/// in a line whose event is gone is dropped from it, so that it holds nothing back.
/// Spliced into a script after its first line (the flags), by [`with_helpers`].
const LEAVE_LINE: &str = include_str!("scripts/leave_line.lua");

/// Lua for every script that reads the time: `clock(key)` is the queue's clock in Unix
/// milliseconds, Redis' `TIME` made never to go back. A step back of the server's
/// clock is absorbed into an offset kept in `key` (readings go on from the highest
/// one seen, at the real rate), so retries, leases, rate windows and pauses written
/// before the step are not postponed by it. The highest reading is written at most
/// once a second (and at a step), so a poll adds no write of its own. A step forward
/// cannot be told from time passing: it brings due times, lease ends and the end of
/// rate windows closer by its size (docs/guarantees.md). Spliced into a script after
/// its first line, by [`with_helpers`].
const CLOCK: &str = include_str!("scripts/clock.lua");

/// KEYS: stream, delayed, the queue's clock. ARGV: max, lease ms, consumer, cursor,
/// nonce, event key prefix, promote limit, reclaim idle ms. Returns `{next cursor,
/// items}`; an item is `{token, key, env, body, status}` for a leased event,
/// `{'corrupt', key}` for one set aside.
///
/// A lease is the event hash's `lease` (the token) and `until` (when it runs out, on
/// the queue's clock): the taker's own lease, renewed by its holder while the attempt
/// runs. An entry pending longer than the reclaim idle time (its holder renews it
/// more often) is looked at again (`XAUTOCLAIM`), and taken only if its lease has
/// run out: a lease is never cut short by another worker's shorter one. An entry of
/// an event that waits in its key's line is dropped, never leased: only the first of
/// a line is delivered, even if a stray entry names another.
const TAKE: &str = include_str!("scripts/take.lua");

/// KEYS: stream. ARGV: consumer, the nonce of a take whose answer was lost, event key
/// prefix, how many pending entries to look at. Gives back what that take leased:
/// each such event's lease is dropped and it is due again at once (a fresh stream
/// entry), instead of waiting for its lease to run out. Returns how many.
const UNTAKE: &str = include_str!("scripts/untake.lua");

/// KEYS: event hash, stream, all, dead, delayed, delivered, the queue's clock. ARGV:
/// lease token, entry id, new status, kind, ttl ms, expiry ms, retry in (ms from now,
/// on the queue's clock), event id, received_at, now, the envelope to keep once
/// delivered (without headers), `1` when the new status keeps its order key (else
/// `0`: the event leaves its line), event key prefix.
/// Returns 1 when applied, 0 when the lease was lost.
const FINISH: &str = include_str!("scripts/finish.lua");

/// KEYS: stream, dead, delayed, all, then event hashes. ARGV: per hash, event id,
/// expected status, new status, and its key's line (or empty). Per event: 1 requeued,
/// 0 changed meanwhile (or leased), 2 gone (dropped from the indexes). An event that
/// waits behind another of its key is queued without a stream entry: it goes in its
/// turn; one that left its line when it died joins it again at the end.
const REQUEUE: &str = include_str!("scripts/requeue.lua");

/// KEYS: all, dead, delayed, stream, then event hashes. ARGV: mode (`dead`: dead
/// events only; `any`: any undelivered one), event key prefix, then the event IDs.
/// Returns `{purged, dropped from the dead index}`. A purged event leaves its key's
/// line, which then goes on.
const PURGE: &str = include_str!("scripts/purge.lua");

/// KEYS: stream, delayed, then event hashes. ARGV: event key prefix, then per hash:
/// event id, expected status, new status (its `order_key` moved to `left_line`).
/// A dead event that still holds its key's line (`on_dead` switched from `block` to
/// `skip`) gives it up, as a skip would have: its status is replaced if unchanged since
/// it was read, and it leaves the line, whose next event is due now. Returns how many.
const RELEASE_BLOCKED: &str = include_str!("scripts/release_blocked.lua");

/// KEYS: event hash, stream, the queue's clock. ARGV: lease token, entry id, consumer,
/// lease ms. Renews a lease to `lease ms` from now; `XCLAIM` with no minimum idle
/// time resets the entry's idle time, so other takers do not even look at it while
/// its holder renews it. Returns 1, or 0 when the lease was lost.
const RENEW: &str = include_str!("scripts/renew.lua");

/// KEYS: the destination's busy set, the queue's clock. ARGV: slot token, lease ms.
/// Extends a concurrency slot that is still held (an attempt that outlasts the lease
/// it took the slot for keeps it).
const SLOT_RENEW: &str = include_str!("scripts/slot_renew.lua");

/// KEYS: event hash, stream. ARGV: lease token, entry id, event id. Gives back a
/// lease that was never used: the entry goes back to the stream as a new one, due now.
const GIVE_BACK: &str = include_str!("scripts/give_back.lua");

/// KEYS: event hash, stream. ARGV: lease token, entry id. Sets a leased entry aside.
const DROP: &str = include_str!("scripts/drop.lua");

/// KEYS: event hash, delivered. ARGV: event id. Deletes a delivered event's record;
/// 1 when it did, 0 when the event is absent or undelivered.
const FORGET: &str = include_str!("scripts/forget.lua");

/// KEYS: the route's start log (zset), its pause key, the queue's clock. ARGV: limit,
/// counted window ms, token. Uses the server's clock, so every replica counts alike.
/// Returns 0 when a delivery may start (the token is logged), else the milliseconds
/// to wait.
const RATE: &str = include_str!("scripts/rate.lua");

/// KEYS: the pause key, the queue's clock. ARGV: wait ms. Extends a pause, never
/// shortens one.
const PAUSE: &str = include_str!("scripts/pause.lua");

/// KEYS: the route's busy set (zset, score = when the slot's lease runs out), the
/// queue's clock. ARGV: max, lease ms, token prefix, want. Takes up to `want` free
/// slots, named `<prefix>:<n>`; returns how many. The set's expiry only grows (a
/// shorter lease must not drop slots that other replicas hold for longer).
const SLOT: &str = include_str!("scripts/slot.lua");

/// A script with the Lua helpers it uses ([`CLOCK`], [`LEAVE_LINE`]) defined after its
/// first line: the flags (`#!lua …`) must stay first.
fn with_helpers(script: &str, helpers: &[&str]) -> String {
    let helpers = helpers.concat();
    match script.split_once('\n') {
        Some((flags, body)) => format!("{flags}\n{helpers}{body}"),
        None => format!("{helpers}{script}"),
    }
}

/// A script with [`CLOCK`].
fn clocked(script: &str) -> Script {
    Script::new(&with_helpers(script, &[CLOCK]))
}

static SLOT_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(SLOT));
static SLOT_RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(SLOT_RENEW));
static RATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(RATE));
static PAUSE_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(PAUSE));
static FORGET_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FORGET));
static ENQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ENQUEUE));
static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(TAKE));
static UNTAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(UNTAKE));
static FINISH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_helpers(FINISH, &[CLOCK, LEAVE_LINE])));
static REQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REQUEUE));
static PURGE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_helpers(PURGE, &[LEAVE_LINE])));
static RELEASE_BLOCKED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_helpers(RELEASE_BLOCKED, &[LEAVE_LINE])));
static DROP_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DROP));
static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(RENEW));
static GIVE_BACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(GIVE_BACK));

/// What a store keeps for its queues: its consumer name and, per stream, where the
/// next `XAUTOCLAIM` resumes.
pub(super) struct QueueState {
    consumer: String,
    cursors: Mutex<HashMap<String, String>>,
}

impl QueueState {
    pub(super) fn new() -> Self {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .unwrap_or_default();
        let host: String = host
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .take(64)
            .collect();
        let host = if host.is_empty() {
            "hookgate".to_owned()
        } else {
            host
        };
        let nonce: [u8; 6] = rand::rng().random();
        Self {
            consumer: format!("{host}-{}-{}", std::process::id(), hex::encode(nonce)),
            cursors: Mutex::new(HashMap::new()),
        }
    }

    fn cursor(&self, stream: &str) -> String {
        let map = match self.cursors.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.get(stream).cloned().unwrap_or_else(|| "0-0".to_owned())
    }

    fn set_cursor(&self, stream: &str, next: String) {
        let mut map = match self.cursors.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.insert(stream.to_owned(), next);
    }
}

/// Two fields of one hash (`HMGET`), each absent or raw bytes.
type Pair = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A destination queue's keys.
struct Keys {
    /// `<prefix>#q:{<route>}:`, or `<prefix>#q:{<route>}/<destination>:` for a
    /// destination not named after the route (`layout.rs`).
    base: String,
}

impl Keys {
    fn new(q: &QueueRef<'_>) -> Self {
        Self {
            base: super::layout::queue_base(q, super::QUEUES),
        }
    }

    fn ev_prefix(&self) -> String {
        format!("{}ev:", self.base)
    }

    fn ev(&self, id: &str) -> String {
        format!("{}ev:{id}", self.base)
    }

    fn stream(&self) -> String {
        format!("{}stream", self.base)
    }

    fn delayed(&self) -> String {
        format!("{}delayed", self.base)
    }

    fn all(&self) -> String {
        format!("{}all", self.base)
    }

    fn dead(&self) -> String {
        format!("{}dead", self.base)
    }

    fn delivered(&self) -> String {
        format!("{}delivered", self.base)
    }

    fn rate(&self) -> String {
        format!("{}rate", self.base)
    }

    fn pause(&self) -> String {
        format!("{}pause", self.base)
    }

    fn busy(&self) -> String {
        format!("{}busy", self.base)
    }

    /// The queue's clock (`CLOCK`): the highest reading and the offset of a step back.
    fn clock(&self) -> String {
        format!("{}clock", self.base)
    }

    /// An order key's line. The key comes after the route's hash tag, so whatever it
    /// holds, the line is in the route's slot.
    fn line(&self, order_key: &str) -> String {
        format!("{}o:{order_key}", self.base)
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(format!("encode: {e}")))
}

fn decode_status(raw: &[u8], key: &str) -> Result<Status, StoreError> {
    serde_json::from_slice(raw).map_err(|_| StoreError::Corrupt(key.to_owned()))
}

fn decode_envelope(raw: &[u8], key: &str) -> Result<Envelope, StoreError> {
    serde_json::from_slice(raw).map_err(|_| StoreError::Corrupt(key.to_owned()))
}

fn nonce() -> String {
    let bytes: [u8; 8] = rand::rng().random();
    hex::encode(bytes)
}

/// A leased item of the take script, decoded.
fn decode_leased(
    key: &str,
    token: Vec<u8>,
    env: Option<Vec<u8>>,
    body: Option<Vec<u8>>,
    status: Option<Vec<u8>>,
) -> Result<Leased, StoreError> {
    let corrupt = || StoreError::Corrupt(key.to_owned());
    let envelope = decode_envelope(&env.ok_or_else(corrupt)?, key)?;
    let status = decode_status(&status.ok_or_else(corrupt)?, key)?;
    let body = body.ok_or_else(corrupt)?;
    let lease = String::from_utf8(token).map_err(|_| corrupt())?;
    Ok(Leased {
        event: StoredEvent {
            envelope,
            body: bytes::Bytes::from(body),
        },
        status,
        lease,
    })
}

impl RedisStore {
    /// `HMGET key env status` for each ID, in pipelines of [`CHUNK`].
    async fn env_status(&self, k: &Keys, ids: &[String]) -> Result<Vec<Pair>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("HMGET").arg(k.ev(id)).arg("env").arg("status");
            }
            let pipe = &pipe;
            let part: Vec<Pair> = self
                .run(|mut c| async move { pipe.query_async(&mut c).await })
                .await?;
            out.extend(part);
        }
        Ok(out)
    }

    /// `HMGET key status lease` for each ID, in one pipeline.
    async fn status_lease(&self, k: &Keys, ids: &[String]) -> Result<Vec<Pair>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET").arg(k.ev(id)).arg("status").arg("lease");
        }
        let pipe = &pipe;
        self.run(|mut c| async move { pipe.query_async(&mut c).await })
            .await
    }

    /// A page of an index, by rank.
    async fn index_page(
        &self,
        index: &str,
        from: usize,
        count: usize,
    ) -> Result<Vec<String>, StoreError> {
        let to = from.saturating_add(count).saturating_sub(1);
        self.run(|mut c| async move {
            redis::cmd("ZRANGE")
                .arg(index)
                .arg(from)
                .arg(to)
                .query_async(&mut c)
                .await
        })
        .await
    }

    /// Pages through a queue's dead events, [`CHUNK`] at a time, oldest first: `act`
    /// acts on a page and returns how many events it counts and how many of the page
    /// left the dead index (requeued, purged, gone), so that the next page starts after
    /// those that stayed. Returns the count over every page.
    async fn each_dead_page<F, Fut>(&self, k: &Keys, mut act: F) -> Result<u64, StoreError>
    where
        F: FnMut(Vec<String>) -> Fut,
        Fut: Future<Output = Result<(u64, u64), StoreError>>,
    {
        let (mut total, mut from) = (0, 0usize);
        loop {
            let page = self.index_page(&k.dead(), from, CHUNK).await?;
            if page.is_empty() {
                return Ok(total);
            }
            let len = page.len();
            let (n, left) = act(page).await?;
            total += n;
            from += len.saturating_sub(usize::try_from(left).unwrap_or(usize::MAX));
        }
    }

    /// Requeues those of `ids` that `eligible` accepts, each by compare-and-set on its
    /// status, re-reading the ones that changed meanwhile up to [`CAS_TRIES`] times.
    /// Returns `(requeued, dropped from the indexes as gone)`.
    async fn requeue(
        &self,
        k: &Keys,
        ids: &[String],
        eligible: impl Fn(&Status) -> bool,
    ) -> Result<(u64, u64), StoreError> {
        let (mut requeued, mut gone) = (0, 0);
        let mut pending: Vec<String> = ids.to_vec();
        for _ in 0..CAS_TRIES {
            if pending.is_empty() {
                break;
            }
            let read = self.status_lease(k, &pending).await?;
            let now = now_ms();
            let mut ops: Vec<(String, Vec<u8>, String, String)> = Vec::new();
            for (id, (status, lease)) in pending.iter().zip(read) {
                let Some(raw) = status else {
                    ops.push((id.clone(), Vec::new(), String::new(), String::new()));
                    continue;
                };
                if lease.is_some() {
                    continue;
                }
                let mut st = decode_status(&raw, &k.ev(id))?;
                if !eligible(&st) {
                    continue;
                }
                st.requeue(now);
                let line = st.order_key.as_deref().map_or(String::new(), |o| k.line(o));
                ops.push((id.clone(), raw, to_json(&st)?, line));
            }
            if ops.is_empty() {
                break;
            }
            let mut inv = REQUEUE_SCRIPT.prepare_invoke();
            inv.key(k.stream())
                .key(k.dead())
                .key(k.delayed())
                .key(k.all());
            for (id, old, new, line) in &ops {
                inv.key(k.ev(id))
                    .arg(id)
                    .arg(old.as_slice())
                    .arg(new)
                    .arg(line);
            }
            let inv = &inv;
            let results: Vec<i64> = self
                .run(|mut c| async move { inv.invoke_async(&mut c).await })
                .await?;
            let mut raced = Vec::new();
            for ((id, old, _, _), r) in ops.into_iter().zip(results) {
                match r {
                    1 => requeued += 1,
                    2 => gone += 1,
                    // Changed between the read and the write: read it again (a gone
                    // event that came back is not retried).
                    _ if !old.is_empty() => raced.push(id),
                    _ => {}
                }
            }
            pending = raced;
        }
        Ok((requeued, gone))
    }

    /// Gives back what a take whose answer was lost leased (best effort: if this fails
    /// too, those events wait for their lease to run out).
    async fn untake(&self, k: &Keys, nonce: &str) {
        let mut inv = UNTAKE_SCRIPT.prepare_invoke();
        inv.key(k.stream())
            .arg(&self.queue_state().consumer)
            .arg(nonce)
            .arg(k.ev_prefix())
            .arg(UNTAKE_SCAN);
        let inv = &inv;
        // Loaded in the same pipeline: sent together, both run even if this call too
        // is given up on (a script missing on the server would otherwise be loaded and
        // run only by a second round trip, which a dropped call never makes).
        match self
            .run(|mut c| async move {
                let (_sha, n): (String, i64) = redis::pipe()
                    .load_script(&UNTAKE_SCRIPT)
                    .invoke_script(inv)
                    .query_async(&mut c)
                    .await?;
                Ok(n)
            })
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                events = n,
                "redis queue: gave back the events of a take whose answer was lost"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "redis queue: cannot give back the events of a take whose answer was lost; they are taken again when their lease runs out")
            }
        }
    }

    /// A token no other slot or start holds: this process's consumer name and a nonce.
    fn fresh_token(&self) -> String {
        format!(
            "{}-{:016x}",
            self.queue_state().consumer,
            rand::rng().random::<u64>()
        )
    }

    /// Removes one member of a sorted set (a rate-limit start or a concurrency slot).
    async fn zrem(&self, key: String, member: &str) -> Result<(), StoreError> {
        let member = member.to_owned();
        self.run(|mut c| async move {
            redis::cmd("ZREM")
                .arg(&key)
                .arg(&member)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Runs the purge script on some IDs: `(purged, dropped from the dead index)`.
    async fn purge_ids(
        &self,
        k: &Keys,
        ids: &[String],
        mode: &str,
    ) -> Result<(u64, u64), StoreError> {
        let mut inv = PURGE_SCRIPT.prepare_invoke();
        inv.key(k.all())
            .key(k.dead())
            .key(k.delayed())
            .key(k.stream())
            .arg(mode)
            .arg(k.ev_prefix());
        for id in ids {
            inv.key(k.ev(id)).arg(id);
        }
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }
}

impl QueueStore for RedisStore {
    async fn enqueue_to(
        &self,
        fanout: &Fanout<'_>,
        event: &StoredEvent,
        _dedup_ttl: Duration,
    ) -> Result<Enqueued, StoreError> {
        let env = &event.envelope;
        let id = &env.event_id;
        // A copy held by any destination of the route is a duplicate, whichever
        // destinations this one goes to.
        let mut check: Vec<String> = Vec::new();
        for d in fanout.all.iter().chain(fanout.to.iter().map(|(d, _)| d)) {
            let key = Keys::new(&fanout.queue(d)).ev(id);
            if !check.contains(&key) {
                check.push(key);
            }
        }
        let Some(first) = check.first().cloned() else {
            return Err(StoreError::Backend(
                "enqueue: the route has no destination".into(),
            ));
        };
        let mut inv = ENQUEUE_SCRIPT.prepare_invoke();
        for key in &check {
            inv.key(key);
        }
        inv.arg(to_json(env)?)
            .arg(event.body.as_ref())
            .arg(&env.fingerprint)
            .arg(id)
            .arg(env.received_at_ms)
            .arg(check.len())
            .arg(if self.replica_wait().is_some() {
                "1"
            } else {
                "0"
            });
        let now = now_ms();
        for (d, order_key) in &fanout.to {
            let k = Keys::new(&fanout.queue(d));
            let mut status = Status::queued(now);
            status.order_key.clone_from(order_key);
            inv.key(k.ev(id)).key(k.stream()).key(k.all());
            if let Some(key) = order_key {
                inv.key(k.line(key));
            }
            inv.arg(to_json(&status)?)
                .arg(if order_key.is_some() { "1" } else { "0" });
        }
        let inv = &inv;
        let wait = self.replica_wait();
        let reply: redis::Value = self
            .run(|mut c| async move {
                let Some(wait) = wait else {
                    return inv.invoke_async(&mut c).await;
                };
                // As a claim does: WAIT in the same pipeline, after the script.
                let (reply, acked): (redis::Value, i64) =
                    invoke_then_wait(&mut c, &ENQUEUE_SCRIPT, inv, wait).await?;
                // A copy of a stored event is held to the same bound as the first: it
                // wrote the event's fingerprint again, and is answered only once
                // replicas hold that write (and so the event).
                let corrupt = matches!(reply, redis::Value::Int(i) if i < 0);
                if !corrupt && acked < i64::from(wait.0) {
                    return Err(too_few_replicas(
                        match reply {
                            redis::Value::Int(0) => "enqueue not acknowledged by enough replicas",
                            _ => "the stored event of a copy not acknowledged by enough replicas",
                        },
                        acked,
                        wait.0,
                    ));
                }
                Ok(reply)
            })
            .await?;
        match reply {
            redis::Value::Int(0) => Ok(Enqueued::Queued),
            redis::Value::BulkString(fp) => Ok(Enqueued::Existing(Claim::Done {
                fingerprint: String::from_utf8(fp).map_err(|_| StoreError::Corrupt(first))?,
            })),
            // The hash that holds the event without a fingerprint.
            redis::Value::Int(i) if i < 0 => Err(StoreError::Corrupt(
                usize::try_from(i.unsigned_abs() - 1)
                    .ok()
                    .and_then(|n| check.get(n).cloned())
                    .unwrap_or(first),
            )),
            _ => Err(StoreError::Corrupt(first)),
        }
    }

    async fn take_due(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Leased>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let k = Keys::new(q);
        let stream = k.stream();
        let state = self.queue_state();
        let nonce = nonce();
        let mut inv = TAKE_SCRIPT.prepare_invoke();
        inv.key(&stream)
            .key(k.delayed())
            .key(k.clock())
            .arg(max)
            .arg(millis(lease))
            .arg(&state.consumer)
            .arg(state.cursor(&stream))
            .arg(&nonce)
            .arg(k.ev_prefix())
            .arg(PROMOTE)
            .arg(millis(RECLAIM_IDLE.min(lease)));
        let inv = &inv;
        type Item = Vec<Option<Vec<u8>>>;
        let taken: Result<(String, Vec<Item>), StoreError> = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await;
        let (next, items) = match taken {
            Ok(t) => t,
            Err(e) => {
                // The script may have run and leased events whose tokens never reached
                // us (a timeout, a connection lost after sending): give them back now
                // rather than after their lease.
                self.untake(&k, &nonce).await;
                return Err(e);
            }
        };
        state.set_cursor(&stream, next);

        let mut out = Vec::with_capacity(items.len());
        let mut corrupt = Vec::new();
        for item in items {
            let mut it = item.into_iter();
            match (it.next(), it.next(), it.next(), it.next(), it.next()) {
                (Some(Some(token)), Some(Some(key)), Some(env), Some(body), Some(status)) => {
                    let key = String::from_utf8_lossy(&key).into_owned();
                    match decode_leased(&key, token.clone(), env, body, status) {
                        Ok(l) => out.push(l),
                        Err(_) => {
                            // Readable enough to lease, not to deliver: set it aside.
                            let entry = String::from_utf8_lossy(&token)
                                .split_once(':')
                                .map(|(e, _)| e.to_owned())
                                .unwrap_or_default();
                            let mut aside = DROP_SCRIPT.prepare_invoke();
                            aside.key(&key).key(&stream).arg(token).arg(entry);
                            let aside = &aside;
                            // Best effort: if this fails, the entry comes up again
                            // after its lease and is set aside then.
                            let _ = self
                                .run(|mut c| async move { aside.invoke_async::<i64>(&mut c).await })
                                .await;
                            corrupt.push(key);
                        }
                    }
                }
                (Some(_), Some(Some(key)), None, _, _) => {
                    corrupt.push(String::from_utf8_lossy(&key).into_owned());
                }
                _ => return Err(StoreError::Corrupt(stream)),
            }
        }
        for key in &corrupt {
            tracing::warn!(
                key = %key,
                "redis queue: set aside an event whose stored data cannot be read (show or purge it)"
            );
        }
        match corrupt.into_iter().next() {
            Some(key) if out.is_empty() => Err(StoreError::Corrupt(key)),
            _ => Ok(out),
        }
    }

    async fn renew(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let k = Keys::new(q);
        let Some((entry, _)) = leased.lease.split_once(':') else {
            return Err(StoreError::Backend(
                "renew: not a lease of the redis queue".into(),
            ));
        };
        let mut inv = RENEW_SCRIPT.prepare_invoke();
        inv.key(k.ev(&leased.event.envelope.event_id))
            .key(k.stream())
            .key(k.clock())
            .arg(&leased.lease)
            .arg(entry)
            .arg(&self.queue_state().consumer)
            .arg(millis(lease));
        let inv = &inv;
        let n: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(n == 1)
    }

    async fn give_back(&self, q: &QueueRef<'_>, leased: &Leased) -> Result<bool, StoreError> {
        let k = Keys::new(q);
        let Some((entry, _)) = leased.lease.split_once(':') else {
            return Err(StoreError::Backend(
                "give back: not a lease of the redis queue".into(),
            ));
        };
        let id = &leased.event.envelope.event_id;
        let mut inv = GIVE_BACK_SCRIPT.prepare_invoke();
        inv.key(k.ev(id))
            .key(k.stream())
            .arg(&leased.lease)
            .arg(entry)
            .arg(id);
        let inv = &inv;
        let n: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(n == 1)
    }

    async fn finish(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        end: &Finish,
        dedup_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let k = Keys::new(q);
        let Some((entry, _)) = leased.lease.split_once(':') else {
            return Err(StoreError::Backend(
                "finish: not a lease of the redis queue".into(),
            ));
        };
        let mut status = leased.status.clone();
        status.record(end);
        let now = now_ms();
        // A retry's due time goes to the store as a delay, counted on the queue's
        // clock: a gateway whose own clock is off schedules nothing late or early.
        let (kind, retry_in) = match end {
            Finish::Delivered(_) => ("delivered", 0),
            Finish::Retry(_, at) => ("retry", at.saturating_sub(now)),
            Finish::Dead(..) => ("dead", 0),
        };
        let ttl = millis(dedup_ttl);
        let env = &leased.event.envelope;
        let mut inv = FINISH_SCRIPT.prepare_invoke();
        inv.key(k.ev(&env.event_id))
            .key(k.stream())
            .key(k.all())
            .key(k.dead())
            .key(k.delayed())
            .key(k.delivered())
            .key(k.clock())
            .arg(&leased.lease)
            .arg(entry)
            .arg(to_json(&status)?)
            .arg(kind)
            .arg(ttl)
            .arg(now.saturating_add(ttl))
            .arg(retry_in)
            .arg(&env.event_id)
            .arg(env.received_at_ms)
            .arg(now)
            // Delivered: the envelope is kept without its headers and query (they may
            // carry the provider's credentials) for `events show`.
            .arg(to_json(&Envelope {
                headers: Vec::new(),
                query: None,
                ..env.clone()
            })?)
            // Without an order key the event leaves its line (delivered, or dead under
            // `on_dead = "skip"`: the worker cleared it); with one it keeps its place.
            .arg(if status.order_key.is_some() { "1" } else { "0" })
            .arg(k.ev_prefix());
        let inv = &inv;
        // A delivery's record waits for replicas as a claim's done record does, so a
        // failover after it does not deliver the event again. It is written either
        // way (the destination has the event): too few acknowledgements are reported,
        // and the window is then the replication lag (docs/guarantees.md).
        let wait = self.replica_wait().filter(|_| kind == "delivered");
        let n: i64 = self
            .run(|mut c| async move {
                let Some(wait) = wait else {
                    return inv.invoke_async(&mut c).await;
                };
                let (n, acked): (i64, i64) =
                    invoke_then_wait(&mut c, &FINISH_SCRIPT, inv, wait).await?;
                if n == 1 && acked < i64::from(wait.0) {
                    tracing::warn!(
                        event_id = %env.event_id,
                        acked,
                        wanted = wait.0,
                        "queue: a delivery's record reached too few replicas in replica_ack_timeout; a failover now would deliver the event again (same Idempotency-Key)"
                    );
                }
                Ok(n)
            })
            .await?;
        Ok(n == 1)
    }

    async fn list(
        &self,
        q: &QueueRef<'_>,
        state: Option<State>,
        limit: usize,
    ) -> Result<Vec<Summary>, StoreError> {
        let k = Keys::new(q);
        let limit = limit.min(SCAN_BOUND);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = match state {
            Some(State::Dead) => self.index_page(&k.dead(), 0, SCAN_BOUND).await?,
            Some(State::Delivered) => {
                let index = k.delivered();
                let index = &index;
                let now = now_ms();
                self.run(|mut c| async move {
                    let (ids,): (Vec<String>,) = redis::pipe()
                        .cmd("ZREMRANGEBYSCORE")
                        .arg(index)
                        .arg("-inf")
                        .arg(now)
                        .ignore()
                        .cmd("ZRANGE")
                        .arg(index)
                        .arg(0)
                        .arg(SCAN_BOUND - 1)
                        .query_async(&mut c)
                        .await?;
                    Ok(ids)
                })
                .await?
            }
            _ => self.index_page(&k.all(), 0, SCAN_BOUND).await?,
        };
        let mut out = Vec::new();
        // Read in chunks, stopping once `limit` summaries are found.
        for chunk in ids.chunks(CHUNK) {
            for (id, row) in chunk.iter().zip(self.env_status(&k, chunk).await?) {
                let (env, status) = match row {
                    (None, None) => continue, // gone since the index was read
                    (Some(env), Some(status)) => (env, status),
                    _ => return Err(StoreError::Corrupt(k.ev(id))),
                };
                let status = decode_status(&status, &k.ev(id))?;
                if state.is_some_and(|s| s != status.state) {
                    continue;
                }
                let env = decode_envelope(&env, &k.ev(id))?;
                out.push(Summary::of(&env, &status));
                if out.len() >= limit {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    async fn show(
        &self,
        q: &QueueRef<'_>,
        event_id: &str,
    ) -> Result<Option<(Envelope, Status)>, StoreError> {
        let k = Keys::new(q);
        let key = k.ev(event_id);
        match self
            .env_status(&k, &[event_id.to_owned()])
            .await?
            .pop()
            .unwrap_or((None, None))
        {
            (None, None) => Ok(None),
            (Some(env), Some(status)) => Ok(Some((
                decode_envelope(&env, &key)?,
                decode_status(&status, &key)?,
            ))),
            _ => Err(StoreError::Corrupt(key)),
        }
    }

    async fn retry(&self, q: &QueueRef<'_>, target: &Target) -> Result<u64, StoreError> {
        let k = Keys::new(q);
        match target {
            Target::One(id) => {
                let (n, _) = self
                    .requeue(&k, std::slice::from_ref(id), |s| {
                        matches!(s.state, State::Dead | State::Retrying)
                    })
                    .await?;
                Ok(n)
            }
            Target::AllDead => {
                // Requeued and gone events leave the dead index.
                let k = &k;
                self.each_dead_page(k, |page| async move {
                    let (n, gone) = self.requeue(k, &page, |s| s.state == State::Dead).await?;
                    Ok((n, n + gone))
                })
                .await
            }
        }
    }

    async fn forget_delivered(&self, q: &QueueRef<'_>, event_id: &str) -> Result<bool, StoreError> {
        let k = Keys::new(q);
        let mut inv = FORGET_SCRIPT.prepare_invoke();
        inv.key(k.ev(event_id)).key(k.delivered()).arg(event_id);
        let inv = &inv;
        let n: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(n == 1)
    }

    async fn purge(&self, q: &QueueRef<'_>, target: &Target) -> Result<u64, StoreError> {
        let k = Keys::new(q);
        match target {
            Target::One(id) => Ok(self.purge_ids(&k, std::slice::from_ref(id), "any").await?.0),
            Target::AllDead => {
                let k = &k;
                self.each_dead_page(
                    k,
                    |page| async move { self.purge_ids(k, &page, "dead").await },
                )
                .await
            }
        }
    }

    async fn release_blocked(&self, q: &QueueRef<'_>) -> Result<u64, StoreError> {
        let k = &Keys::new(q);
        // Released events stay dead, in the index: none leaves it.
        self.each_dead_page(k, |page| async move {
            let mut inv = RELEASE_BLOCKED_SCRIPT.prepare_invoke();
            inv.key(k.stream()).key(k.delayed()).arg(k.ev_prefix());
            let mut any = false;
            for (id, (status, lease)) in page.iter().zip(self.status_lease(k, &page).await?) {
                let Some(raw) = status else { continue };
                if lease.is_some() {
                    continue;
                }
                let mut st = decode_status(&raw, &k.ev(id))?;
                if st.state != State::Dead || st.order_key.is_none() {
                    continue;
                }
                st.left_line = st.order_key.take();
                inv.key(k.ev(id)).arg(id).arg(raw).arg(to_json(&st)?);
                any = true;
            }
            if !any {
                return Ok((0, 0));
            }
            let inv = &inv;
            let n: u64 = self
                .run(|mut c| async move { inv.invoke_async(&mut c).await })
                .await?;
            Ok((n, 0))
        })
        .await
    }

    async fn depth(&self, q: &QueueRef<'_>) -> Result<Depth, StoreError> {
        let k = Keys::new(q);
        let (all, dead) = (k.all(), k.dead());
        let (all_ref, dead_ref) = (&all, &dead);
        let (undelivered, dead_n, oldest): (u64, u64, Vec<String>) = self
            .run(|mut c| async move {
                redis::pipe()
                    .cmd("ZCARD")
                    .arg(all_ref)
                    .cmd("ZCARD")
                    .arg(dead_ref)
                    .cmd("ZRANGE")
                    .arg(all_ref)
                    .arg(0)
                    .arg(0)
                    .arg("WITHSCORES")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        let oldest_received_ms = match oldest.as_slice() {
            [] => None,
            [_, score] => Some(
                score
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| StoreError::Corrupt(all.clone()))? as u64,
            ),
            _ => return Err(StoreError::Corrupt(all)),
        };
        Ok(Depth {
            waiting: undelivered.saturating_sub(dead_n),
            dead: dead_n,
            oldest_received_ms,
        })
    }
}

impl Pacing for RedisStore {
    async fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> Result<Result<String, Duration>, StoreError> {
        let k = Keys::new(q);
        let token = self.fresh_token();
        let mut inv = RATE_SCRIPT.prepare_invoke();
        inv.key(k.rate())
            .key(k.pause())
            .key(k.clock())
            .arg(limit.count)
            .arg(millis(limit.counted_over()))
            .arg(&token);
        let inv = &inv;
        let wait: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(if wait <= 0 {
            Ok(token)
        } else {
            Err(Duration::from_millis(u64::try_from(wait).unwrap_or(1)))
        })
    }

    async fn rate_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        self.zrem(Keys::new(q).rate(), token).await
    }

    async fn slot_take(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        want: usize,
        lease: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let k = Keys::new(q);
        let prefix = self.fresh_token();
        let mut inv = SLOT_SCRIPT.prepare_invoke();
        inv.key(k.busy())
            .key(k.clock())
            .arg(max)
            .arg(millis(lease).max(1))
            .arg(&prefix)
            .arg(want);
        let inv = &inv;
        let taken: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok((1..=taken.max(0))
            .map(|i| format!("{prefix}:{i}"))
            .collect())
    }

    async fn slot_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        self.zrem(Keys::new(q).busy(), token).await
    }

    async fn slot_renew(
        &self,
        q: &QueueRef<'_>,
        token: &str,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let k = Keys::new(q);
        let mut inv = SLOT_RENEW_SCRIPT.prepare_invoke();
        inv.key(k.busy())
            .key(k.clock())
            .arg(token)
            .arg(millis(lease));
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async::<()>(&mut c).await })
            .await
    }

    async fn pause(&self, q: &QueueRef<'_>, wait: Duration) -> Result<(), StoreError> {
        let k = Keys::new(q);
        let mut inv = PAUSE_SCRIPT.prepare_invoke();
        inv.key(k.pause()).key(k.clock()).arg(millis(wait).max(1));
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async::<()>(&mut c).await })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_route_carries_its_hash_tag() {
        let k = Keys::new(&QueueRef::new("hg:", "stripe", "stripe"));
        for key in [
            k.ev("evt_1"),
            k.stream(),
            k.delayed(),
            k.all(),
            k.dead(),
            k.delivered(),
        ] {
            assert!(key.starts_with("hg:#q:{stripe}:"), "{key}");
        }
        assert!(k.ev("evt_1").starts_with(&k.ev_prefix()));
        assert_eq!(k.line("cust_1"), "hg:#q:{stripe}:o:cust_1");
    }

    #[test]
    fn a_named_destination_keeps_the_route_hash_tag() {
        let q = QueueRef::new("hg:", "stripe", "billing");
        let k = Keys::new(&q);
        for key in [
            k.ev("evt_1"),
            k.stream(),
            k.delayed(),
            k.all(),
            k.dead(),
            k.delivered(),
            k.line("cust_1"),
            k.rate(),
            k.pause(),
            k.busy(),
        ] {
            assert!(key.starts_with("hg:#q:{stripe}/billing:"), "{key}");
        }
        // The route's own destination keeps the keys it had before destinations.
        assert_ne!(
            k.stream(),
            Keys::new(&QueueRef::new("hg:", "stripe", "stripe")).stream()
        );
    }

    #[test]
    fn the_line_helper_goes_after_the_flags() {
        let s = with_helpers(FINISH, &[CLOCK, LEAVE_LINE]);
        assert!(s.starts_with("#!lua flags=allow-oom\n"));
        assert!(s.contains("local function leave_line"));
        assert!(s.contains("local function clock"));
        assert!(with_helpers(TAKE, &[CLOCK]).starts_with("#!lua flags=allow-oom\n"));
        assert!(
            with_helpers(RELEASE_BLOCKED, &[LEAVE_LINE]).starts_with("#!lua flags=allow-oom\n")
        );
    }

    #[test]
    fn consumers_are_unique_per_store() {
        assert_ne!(QueueState::new().consumer, QueueState::new().consumer);
    }
}
