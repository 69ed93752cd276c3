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
//! the disk store's line index (`RouteIndex` in `store/disk/queue/index/route.rs`) kept in Redis.
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
//!
//! Here, [`QueueStore`] for [`RedisStore`]; beside it, the keys of a destination queue
//! (`keys.rs`), the scripts (`scripts.rs`, Lua in `store/redis/scripts/`), what an
//! operator's calls are made of (`operator.rs`), and pacing (`pacing.rs`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng as _;

use self::keys::Keys;
use self::scripts::{
    DROP_SCRIPT, ENQUEUE_SCRIPT, FINISH_SCRIPT, FORGET_SCRIPT, GIVE_BACK_SCRIPT,
    RELEASE_BLOCKED_SCRIPT, RENEW_SCRIPT, TAKE_SCRIPT, UNTAKE_SCRIPT,
};
use super::{RedisStore, invoke_then_wait, millis, too_few_replicas};
use crate::queue::now_ms;
use crate::store::{
    Claim, Depth, Enqueued, Envelope, Fanout, Finish, Leased, QueueRef, QueueStore, State, Status,
    StoreError, StoredEvent, Summary, Target,
};

mod keys;
mod operator;
mod pacing;
mod scripts;

/// Due retries moved from `delayed` into the stream per `take_due`.
const PROMOTE: usize = 100;
/// Event IDs read from an index per `list` (the rest is not scanned).
const SCAN_BOUND: usize = 10_000;
/// Hashes read per pipeline.
const CHUNK: usize = 256;
/// How long an entry stays pending before a take looks at whether its lease ran out
/// (or the taker's own lease, if shorter). Holders renew more often than this
/// (`worker::RENEW_EVERY`), so an entry idle this long mostly has a holder that
/// stopped; one whose lease still runs is left to its holder.
const RECLAIM_IDLE: Duration = Duration::from_secs(3);
/// Pending entries of this process an untake looks at, at most.
const UNTAKE_SCAN: usize = 10_000;

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
            Finish::Retry(_, at) | Finish::Probe(_, at) => ("retry", at.saturating_sub(now)),
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
            Target::Some(ids) => {
                let mut n = 0;
                for page in ids.chunks(CHUNK) {
                    n += self
                        .requeue(&k, page, |s| {
                            matches!(s.state, State::Dead | State::Retrying)
                        })
                        .await?
                        .0;
                }
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
            Target::Some(ids) => {
                let mut n = 0;
                for page in ids.chunks(CHUNK) {
                    n += self.purge_ids(&k, page, "any").await?.0;
                }
                Ok(n)
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumers_are_unique_per_store() {
        assert_ne!(QueueState::new().consumer, QueueState::new().consumer);
    }
}
