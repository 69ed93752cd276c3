//! The queue's Lua scripts (the Lua is in `store/redis/scripts/*.lua`), each with what
//! it takes and returns, and the helpers spliced into those that need them.

use std::sync::LazyLock;

use redis::Script;

// Out of memory: every script but ENQUEUE is flagged `allow-oom` (Redis 7), so a Redis
// at `maxmemory` (with `maxmemory-policy noeviction`) refuses new events (503) but
// still lets the queue deliver, retry and purge what it holds — which frees memory as
// delivered events drop their bodies. Without the flag, every script would be refused
// and the queue would stall until an operator freed memory by hand.

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
const ENQUEUE: &str = include_str!("../scripts/enqueue.lua");

/// Lua for the scripts that end an event's place in its key's line: `leave_line(event
/// hash, event id, stream, delayed, event key prefix)` takes the event out of the line
/// its `okey` names; when it was the first, the next event of the line is due now
/// (unless it is dead, leased or already due, as the disk store's `leave_line`). An ID
/// in a line whose event is gone is dropped from it, so that it holds nothing back.
/// Spliced into a script after its first line (the flags), by [`with_helpers`].
const LEAVE_LINE: &str = include_str!("../scripts/leave_line.lua");

/// Lua for every script that reads the time: `clock(key)` is the queue's clock in Unix
/// milliseconds, Redis' `TIME` made never to go back. A step back of the server's
/// clock is absorbed into an offset kept in `key` (readings go on from the highest
/// one seen, at the real rate), so retries, leases, rate windows and pauses written
/// before the step are not postponed by it. The highest reading is written at most
/// once a second (and at a step), so a poll adds no write of its own. A step forward
/// cannot be told from time passing: it brings due times, lease ends and the end of
/// rate windows closer by its size (docs/guarantees.md). Spliced into a script after
/// its first line, by [`with_helpers`].
const CLOCK: &str = include_str!("../scripts/clock.lua");

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
const TAKE: &str = include_str!("../scripts/take.lua");

/// KEYS: stream. ARGV: consumer, the nonce of a take whose answer was lost, event key
/// prefix, how many pending entries to look at. Gives back what that take leased:
/// each such event's lease is dropped and it is due again at once (a fresh stream
/// entry), instead of waiting for its lease to run out. Returns how many.
const UNTAKE: &str = include_str!("../scripts/untake.lua");

/// KEYS: event hash, stream, all, dead, delayed, delivered, the queue's clock. ARGV:
/// lease token, entry id, new status, kind, ttl ms, expiry ms, retry in (ms from now,
/// on the queue's clock), event id, received_at, now, the envelope to keep once
/// delivered (without headers), `1` when the new status keeps its order key (else
/// `0`: the event leaves its line), event key prefix.
/// Returns 1 when applied, 0 when the lease was lost.
const FINISH: &str = include_str!("../scripts/finish.lua");

/// KEYS: stream, dead, delayed, all, then event hashes. ARGV: per hash, event id,
/// expected status, new status, and its key's line (or empty). Per event: 1 requeued,
/// 0 changed meanwhile (or leased), 2 gone (dropped from the indexes). An event that
/// waits behind another of its key is queued without a stream entry: it goes in its
/// turn; one that left its line when it died joins it again at the end.
const REQUEUE: &str = include_str!("../scripts/requeue.lua");

/// KEYS: all, dead, delayed, stream, then event hashes. ARGV: mode (`dead`: dead
/// events only; `any`: any undelivered one), event key prefix, then the event IDs.
/// Returns `{purged, dropped from the dead index}`. A purged event leaves its key's
/// line, which then goes on.
const PURGE: &str = include_str!("../scripts/purge.lua");

/// KEYS: stream, delayed, then event hashes. ARGV: event key prefix, then per hash:
/// event id, expected status, new status (its `order_key` moved to `left_line`).
/// A dead event that still holds its key's line (`on_dead` switched from `block` to
/// `skip`) gives it up, as a skip would have: its status is replaced if unchanged since
/// it was read, and it leaves the line, whose next event is due now. Returns how many.
const RELEASE_BLOCKED: &str = include_str!("../scripts/release_blocked.lua");

/// KEYS: event hash, stream, the queue's clock. ARGV: lease token, entry id, consumer,
/// lease ms. Renews a lease to `lease ms` from now; `XCLAIM` with no minimum idle
/// time resets the entry's idle time, so other takers do not even look at it while
/// its holder renews it. Returns 1, or 0 when the lease was lost.
const RENEW: &str = include_str!("../scripts/renew.lua");

/// KEYS: event hash, stream. ARGV: lease token, entry id, event id. Gives back a
/// lease that was never used: the entry goes back to the stream as a new one, due now.
const GIVE_BACK: &str = include_str!("../scripts/give_back.lua");

/// KEYS: event hash, stream. ARGV: lease token, entry id. Sets a leased entry aside.
const DROP: &str = include_str!("../scripts/drop.lua");

/// KEYS: event hash, delivered. ARGV: event id. Deletes a delivered event's record;
/// 1 when it did, 0 when the event is absent or undelivered.
const FORGET: &str = include_str!("../scripts/forget.lua");

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
pub(super) fn clocked(script: &str) -> Script {
    Script::new(&with_helpers(script, &[CLOCK]))
}

pub(super) static FORGET_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FORGET));
pub(super) static ENQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ENQUEUE));
pub(super) static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(TAKE));
pub(super) static UNTAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(UNTAKE));
pub(super) static FINISH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_helpers(FINISH, &[CLOCK, LEAVE_LINE])));
pub(super) static REQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REQUEUE));
pub(super) static PURGE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_helpers(PURGE, &[LEAVE_LINE])));
pub(super) static RELEASE_BLOCKED_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_helpers(RELEASE_BLOCKED, &[LEAVE_LINE])));
pub(super) static DROP_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DROP));
pub(super) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| clocked(RENEW));
pub(super) static GIVE_BACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(GIVE_BACK));

#[cfg(test)]
mod tests {
    use super::*;

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
}
