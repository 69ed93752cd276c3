//! Where hookgate's own keys live in Redis, apart from the keys routes name.
//!
//! A route's dedup keys are `<prefix><route>:<event id>` (users read them: their names
//! stay), and its transmission keys `<prefix><route>#tx:<id>`. A route name holds only
//! letters, digits, `-`, `_` and `.` (config validation), so the character after the
//! prefix of any key a route and an event ID produce is one of those. Every internal
//! key space starts with [`INTERNAL`] after the prefix instead, which no route name
//! may hold:
//!
//! ```text
//! <prefix>#q:{<route>}…      the queues (store/redis/queue/)
//! <prefix>#log:{<route>}:…   the delivery log (store/log/redis.rs)
//! <prefix>#audit             operators' actions (store/redis/audit.rs)
//! ```
//!
//! Before, they were `<prefix>q:{<route>}…` and `<prefix>log:{<route>}:…`: event ID
//! `{github}:ids` on a route named `log` was route `github`'s log index. At start,
//! [`RedisStore::move_queue`] and [`RedisStore::move_log`] move what a previous version
//! wrote there into the new spaces (each key by `RENAME`, which keeps its value, its
//! expiry and a stream's consumer group; it stays in its route's cluster slot, the
//! hash tag being the same), merging when a key exists in both. Only keys of the type
//! the old layout gave them are moved: a dedup key a route named `log` wrote under the
//! old log's names is a string, and stays where it is.
//!
//! The queues a prefix holds are found by their keys here too
//! ([`RedisStore::stored_queues`]: a bounded `SCAN`).

use std::sync::LazyLock;

use redis::Script;

use super::{RedisStore, Target};
use crate::store::{QueueRef, StoreError};

/// The first character of every internal key space after the key prefix: not one a
/// route name may hold.
pub const INTERNAL: char = '#';

/// The queues' key space, after the key prefix.
pub const QUEUES: &str = "#q:";

/// The delivery log's key space, after the key prefix.
pub const LOG: &str = "#log:";

/// The audit's key, after the key prefix.
pub const AUDIT: &str = "#audit";

/// The previous version's queue and log spaces (read once at start, and moved).
const OLD_QUEUES: &str = "q:";
const OLD_LOG: &str = "log:";

/// A queue's key base in a space: `<prefix><space>{<route>}:` for the route's own
/// destination, `<prefix><space>{<route>}/<destination>:` for the others.
pub(super) fn queue_base(q: &QueueRef<'_>, space: &str) -> String {
    if q.is_own() {
        format!("{}{space}{{{}}}:", q.prefix, q.route)
    } else {
        format!("{}{space}{{{}}}/{}:", q.prefix, q.route, q.destination)
    }
}

/// A route's log key base in a space: `<prefix><space>{<route>}:`.
pub(crate) fn log_base(prefix: &str, route: &str, space: &str) -> String {
    format!("{prefix}{space}{{{route}}}:")
}

/// Events moved per call of [`MOVE_EVENTS`].
const CHUNK: usize = 500;

/// KEYS: the old and the new `all` (they route the call to the queue's slot). ARGV:
/// old base, new base, the index it walks (`all` or `delivered`), start, count. Moves
/// the event hashes that index names (and the lines their `okey` names, rewriting
/// `okey`); a hash already at the new name wins (it is newer). Returns how many
/// members it read.
const MOVE_EVENTS: &str = include_str!("scripts/move_events.lua");

/// KEYS: the old and the new `all`. ARGV: old base, new base. Moves a queue's own keys
/// (after its events): indexes are merged when both exist, a stream's entries added to
/// the new stream; the pacing keys (rate, busy, pause, clock) already at the new name
/// win.
const MOVE_QUEUE: &str = include_str!("scripts/move_queue.lua");

/// KEYS: the old and the new `ids`. ARGV: old base, new base. Moves a route's log
/// (index, records, byte count, counts), merging when both exist. A key of another type
/// than the log gives it (a dedup record a route named `log` wrote there) stays.
const MOVE_LOG: &str = include_str!("scripts/move_log.lua");

static MOVE_EVENTS_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(MOVE_EVENTS));
static MOVE_QUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(MOVE_QUEUE));
static MOVE_LOG_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(MOVE_LOG));

impl RedisStore {
    /// Moves one destination queue from the previous layout (`<prefix>q:{…}`) into
    /// [`QUEUES`]: its events first, then its indexes and stream. Returns how many
    /// keys of the queue itself were found there (0: nothing to move).
    pub async fn move_queue(&self, q: &QueueRef<'_>) -> Result<i64, StoreError> {
        let (old, new) = (queue_base(q, OLD_QUEUES), queue_base(q, QUEUES));
        let (old_all, new_all) = (format!("{old}all"), format!("{new}all"));
        for index in ["all", "delivered"] {
            let mut start = 0usize;
            loop {
                let mut inv = MOVE_EVENTS_SCRIPT.prepare_invoke();
                inv.key(&old_all)
                    .key(&new_all)
                    .arg(&old)
                    .arg(&new)
                    .arg(index)
                    .arg(start)
                    .arg(CHUNK);
                let inv = &inv;
                let read: usize = self
                    .run(|mut c| async move { inv.invoke_async(&mut c).await })
                    .await?;
                if read < CHUNK {
                    break;
                }
                start += read;
            }
        }
        let mut inv = MOVE_QUEUE_SCRIPT.prepare_invoke();
        inv.key(&old_all).key(&new_all).arg(&old).arg(&new);
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }

    /// Moves one route's delivery log from the previous layout (`<prefix>log:{…}`)
    /// into [`LOG`]. Returns how many of its keys were moved.
    pub async fn move_log(&self, prefix: &str, route: &str) -> Result<i64, StoreError> {
        let (old, new) = (
            log_base(prefix, route, OLD_LOG),
            log_base(prefix, route, LOG),
        );
        let mut inv = MOVE_LOG_SCRIPT.prepare_invoke();
        inv.key(format!("{old}ids"))
            .key(format!("{new}ids"))
            .arg(&old)
            .arg(&new);
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }

    /// The queues stored in the previous layout (a bounded `SCAN`); none on a
    /// cluster (its keys are spread over nodes), where the configured queues are moved
    /// by name.
    pub async fn old_layout_queues(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if self.is_cluster() {
            return Ok(Vec::new());
        }
        self.queues_in(prefix, OLD_QUEUES).await
    }
}

/// SCAN calls (of up to 1000 keys each) when looking for the queues a prefix holds.
const QUEUE_SCAN_CALLS: usize = 1000;

impl RedisStore {
    /// The destination queues stored under `prefix` (found by their `all` index, which
    /// exists while a queue holds undelivered events), as `(route, destination)`. A
    /// bounded `SCAN`, for start, `hookgate check` and reloads only; not on a cluster
    /// (its keys are spread over nodes).
    pub async fn stored_queues(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.queues_in(prefix, QUEUES).await
    }

    /// The destination queues under `<prefix><space>` (the current layout's or the
    /// previous one's).
    async fn queues_in(
        &self,
        prefix: &str,
        space: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if matches!(self.inner.target, Target::Cluster { .. }) {
            return Err(StoreError::Backend(
                "listing the stored queues is not supported on a Redis Cluster".into(),
            ));
        }
        let head = format!("{prefix}{space}{{");
        let pattern = format!("{}*all", glob_escape(&head));
        let pattern = &pattern;
        let mut found = Vec::new();
        let mut cursor = 0u64;
        for _ in 0..QUEUE_SCAN_CALLS {
            let (next, keys): (u64, Vec<String>) = self
                .run(|mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            for key in keys {
                if let Some(q) = key.strip_prefix(&head).and_then(parse_queue_index)
                    && !found.contains(&q)
                {
                    found.push(q);
                }
            }
            if next == 0 {
                return Ok(found);
            }
            cursor = next;
        }
        tracing::warn!(
            calls = QUEUE_SCAN_CALLS,
            "redis store: stopped looking for stored queues after a bounded scan; some may not be listed"
        );
        Ok(found)
    }
}

/// `<route>}:all` or `<route>}/<destination>:all` (a queue's `all` index after
/// `<prefix>#q:{`) as `(route, destination)`; any other key (an event hash or a line
/// whose name ends in `all`) is `None`.
fn parse_queue_index(rest: &str) -> Option<(String, String)> {
    let (route, tail) = rest.split_once('}')?;
    let destination = match tail {
        ":all" => route,
        _ => tail.strip_prefix('/')?.strip_suffix(":all")?,
    };
    let name_ok = |n: &str| !n.is_empty() && !n.contains([':', '/', '{', '}']);
    (name_ok(route) && name_ok(destination)).then(|| (route.to_owned(), destination.to_owned()))
}

/// Escapes the characters `SCAN MATCH` reads as a pattern.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_route_name_can_begin_an_internal_key_space() {
        let q = QueueRef::new("hg:", "github", "github");
        assert_eq!(queue_base(&q, QUEUES), "hg:#q:{github}:");
        let q = QueueRef::new("hg:", "github", "billing");
        assert_eq!(queue_base(&q, QUEUES), "hg:#q:{github}/billing:");
        assert_eq!(log_base("hg:", "github", LOG), "hg:#log:{github}:");
        for space in [QUEUES, LOG] {
            assert!(space.starts_with(INTERNAL));
        }
        // The config refuses a route name that holds it, wherever.
        for name in ["#q", "#log", "a#b", "log#"] {
            let text = format!(
                "[[routes]]\nname = \"{name}\"\npath = \"/h\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"http://127.0.0.1:9/\"\n"
            );
            let env = |_: &str| None;
            let refused = crate::config::parse(&text, std::path::Path::new("t.toml"), &env)
                .err()
                .map(|e| e.to_string());
            assert!(
                refused
                    .as_deref()
                    .is_some_and(|e| e.contains("routes[0].name")),
                "{name}: {refused:?}"
            );
        }
    }

    #[test]
    fn queue_indexes_are_told_from_other_keys() {
        assert_eq!(
            parse_queue_index("stripe}:all"),
            Some(("stripe".into(), "stripe".into()))
        );
        assert_eq!(
            parse_queue_index("stripe}/billing:all"),
            Some(("stripe".into(), "billing".into()))
        );
        for other in [
            "stripe}:o:ball",
            "stripe}:ev:x:all",
            "stripe}/b:ev:x:all",
            "stripe}:ev:all",
        ] {
            assert_eq!(parse_queue_index(other), None, "{other}");
        }
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
