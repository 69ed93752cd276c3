//! The store layer: every contract the gateway stores through, and its memory, disk and
//! Redis implementations. [`Store`] is the configured one.
//!
//! - Claims ([`DedupStore`], here): one atomic claim per event, with a lease while it
//!   is forwarded and a done record for the dedup window afterwards.
//! - The queue ([`QueueStore`], `queue.rs`): durable delivery's events, their status and
//!   their destinations' queues ([`QueueRef`]).
//! - Pacing ([`Pacing`], `pacing.rs`): a destination's rate limit, concurrency slots and
//!   pauses.
//! - Cells ([`Cells`], `cells.rs`): small shared records of the gateway's own (a
//!   destination's pause and breaker, open incidents), swapped by compare-and-set.
//! - The audit ([`AuditStore`], `audit.rs`): operators' actions, the newest
//!   [`audit::KEEP`].
//!
//! Each backend is a folder split on its seams: the handle and open (`mod.rs`), the
//! claims half (`dedup.rs`), the queue half (`queue/`) and pacing (`disk/pacing.rs`,
//! `redis/queue/pacing.rs`); the disk store's writer thread is `disk/writer.rs`, the
//! Redis Lua `redis/scripts/*.lua`. `memory.rs` keeps claims only (no queue, so no
//! pacing).
//!
//! ```text
//! claim(key, fp, lease)           absent        -> Claimed(token), key = in-flight(token, fp) for `lease`
//!                                 in-flight     -> InFlight
//!                                 done(fp')     -> Done { fingerprint: fp' }
//! complete(key, token, fp, ttl)   in-flight(token) or absent -> done(token, fp) for `ttl`
//! release(key, token)             in-flight(token) -> absent
//! ```
//! `complete` and `release` never touch a key that holds another claim, so a late
//! finisher cannot overwrite the claim of a newer copy. Every implementation runs the
//! same conformance suites (`tests/it/stores/{dedup,queue,log}_conformance.rs`).

pub mod audit;
pub mod cells;
pub mod disk;
pub(crate) mod health;
pub mod log;
pub mod memory;
pub mod metrics;
mod pacing;
mod queue;
pub mod redis;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use rand::Rng as _;

use crate::queue::RateLimit;

pub use self::audit::AuditStore;
pub use self::cells::Cells;
pub use self::disk::DiskStore;
pub use self::memory::MemoryStore;
pub use self::metrics::StoreMetrics;
pub use self::pacing::Pacing;
pub use self::queue::{
    Attempt, Depth, Enqueued, Envelope, Fanout, Finish, HISTORY, Leased, QueueRef, QueueStore,
    State, Status, StoredEvent, StoredHeader, Summary, Target,
};
pub use self::redis::RedisStore;
pub use crate::outcome::AttemptResult;

/// A namespaced store key: `<prefix><route>:<event id>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DedupKey(String);

impl DedupKey {
    /// Builds the key for an event of a route.
    pub fn new(prefix: &str, route: &str, event_id: &str) -> Self {
        Self(format!("{prefix}{route}:{event_id}"))
    }

    /// The key that records which body a signed transmission ID carried:
    /// `<prefix><route>#tx:<id>`. Route names cannot hold `#`, so it never equals an
    /// event's key.
    pub fn transmission(prefix: &str, route: &str, transmission_id: &str) -> Self {
        Self(format!("{prefix}{route}#tx:{transmission_id}"))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A random value that identifies one claim, so only its holder can settle it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh 128-bit token.
    pub fn random() -> Self {
        let bytes: [u8; 16] = rand::rng().random();
        Self(hex::encode(bytes))
    }

    /// The token text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The state a key holds, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    InFlight { token: String, fingerprint: String },
    Done { token: String, fingerprint: String },
}

impl Record {
    /// The in-flight record of a claim.
    pub(crate) fn in_flight(token: &Token, fingerprint: &str) -> Self {
        Self::InFlight {
            token: token.as_str().to_owned(),
            fingerprint: fingerprint.to_owned(),
        }
    }

    /// The done record of a claim.
    pub(crate) fn done(token: &Token, fingerprint: &str) -> Self {
        Self::Done {
            token: token.as_str().to_owned(),
            fingerprint: fingerprint.to_owned(),
        }
    }

    /// The text form stored in Redis: `i|token|fp` or `d|token|fp`.
    pub(crate) fn encode(&self) -> String {
        match self {
            Self::InFlight { token, fingerprint } => format!("i|{token}|{fingerprint}"),
            Self::Done { token, fingerprint } => format!("d|{token}|{fingerprint}"),
        }
    }

    pub(crate) fn decode(s: &str) -> Option<Self> {
        let mut it = s.splitn(3, '|');
        let (state, token, fingerprint) = (it.next()?, it.next()?, it.next()?);
        let (token, fingerprint) = (token.to_owned(), fingerprint.to_owned());
        match state {
            "i" => Some(Self::InFlight { token, fingerprint }),
            "d" => Some(Self::Done { token, fingerprint }),
            _ => None,
        }
    }

    pub(crate) fn token(&self) -> &str {
        match self {
            Self::InFlight { token, .. } | Self::Done { token, .. } => token,
        }
    }

    /// What a new claim finds when this record is already there.
    pub(crate) fn as_existing(&self) -> Claim {
        match self {
            Self::InFlight { .. } => Claim::InFlight,
            Self::Done { fingerprint, .. } => Claim::Done {
                fingerprint: fingerprint.clone(),
            },
        }
    }
}

/// The result of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This copy is the first: forward it, then `complete` or `release` with the token.
    Claimed(Token),
    /// An earlier copy was forwarded and acknowledged; its body had `fingerprint`.
    Done { fingerprint: String },
    /// An earlier copy is being forwarded right now.
    InFlight,
}

/// Whether a settle step changed the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The key now holds what was asked (or already did).
    Applied,
    /// The key holds another claim; it was left alone.
    NotOwner,
}

/// A store call that failed. Each is retryable: the provider retries on 503.
///
/// Whether the call changed anything is known only for [`StoreError::Refused`]: a
/// timeout or a connection lost after the call was sent may hide a call that ran (a
/// Redis command stays queued and runs later), and so may a failed disk commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("store call timed out after {0:?}")]
    Timeout(Duration),
    #[error("store: {0}")]
    Backend(String),
    #[error("store holds an unreadable record under {0}")]
    Corrupt(String),
    /// The call never ran: the store could not be reached, or answered that it would
    /// not run it (out of memory, read-only, a cluster slot elsewhere, a disk store
    /// refusing new events).
    #[error("store: {0}")]
    Refused(String),
}

impl StoreError {
    /// Whether the call certainly wrote nothing.
    pub fn wrote_nothing(&self) -> bool {
        matches!(self, Self::Refused(_))
    }
}

/// The claims contract every store implements.
pub trait DedupStore: Send + Sync {
    /// Atomically claims `key` for `lease`, or reports what holds it.
    fn claim(
        &self,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Marks the claim done for `ttl`, if `token` still holds it (or nothing does).
    fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send;

    /// Frees the claim if `token` still holds it. An absent key counts as freed.
    fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send;

    /// Deletes a key whatever it holds (a deliberate redelivery). True if it existed.
    fn forget(&self, key: &DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Checks the store answers.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// What holds `key` now, as a claim would find it (`None`: nothing), without
    /// claiming it.
    fn peek(
        &self,
        key: &DedupKey,
    ) -> impl Future<Output = Result<Option<Claim>, StoreError>> + Send;
}

/// The configured store. An enum rather than a trait object: the set is closed and
/// `async fn` in traits cannot be called through `dyn`.
#[derive(Debug, Clone)]
pub enum Store {
    Memory(MemoryStore),
    Disk(DiskStore),
    Redis(RedisStore),
}

impl Store {
    /// The store a config names: memory, a database file (disk), or Redis (a single
    /// server, Sentinel or Cluster), which connects lazily on first use.
    pub fn connect(cfg: &crate::config::StoreConfig) -> anyhow::Result<Self> {
        use crate::config::Backend;
        Ok(match &cfg.backend {
            Backend::Memory => Self::Memory(MemoryStore::with_max_records(cfg.max_records)),
            Backend::Disk { path } => Self::Disk(DiskStore::open_with(path, cfg.min_free_space)?),
            Backend::Redis { url } => Self::Redis(RedisStore::with_options(
                url,
                cfg.timeout,
                &redis::RedisOptions {
                    tls_ca: cfg.tls_ca.clone(),
                    min_replicas_ack: cfg.min_replicas_ack,
                    replica_ack_timeout: cfg.replica_ack_timeout,
                },
            )?),
            Backend::RedisSentinel { sentinels, master } => Self::Redis(
                RedisStore::new_sentinel(sentinels, master, cfg.timeout)?
                    .wait_for_replicas(cfg.min_replicas_ack, cfg.replica_ack_timeout),
            ),
            Backend::RedisCluster { urls } => Self::Redis(
                RedisStore::new_cluster(urls, cfg.timeout)?
                    .wait_for_replicas(cfg.min_replicas_ack, cfg.replica_ack_timeout),
            ),
        })
    }
}

impl Store {
    /// The store's metric handles, to register at start.
    pub fn metrics(&self) -> crate::store::StoreMetrics {
        match self {
            Store::Memory(s) => s.metrics(),
            Store::Disk(s) => s.metrics(),
            Store::Redis(_) => crate::store::StoreMetrics::default(),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Memory($s) => $e,
            Store::Disk($s) => $e,
            Store::Redis($s) => $e,
        }
    };
}

impl DedupStore for Store {
    async fn claim(
        &self,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        dispatch!(self, s => s.claim(key, fingerprint, lease).await)
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        dispatch!(self, s => s.complete(key, token, fingerprint, ttl).await)
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        dispatch!(self, s => s.release(key, token, fingerprint).await)
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        dispatch!(self, s => s.forget(key).await)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.ping().await)
    }

    async fn peek(&self, key: &DedupKey) -> Result<Option<Claim>, StoreError> {
        dispatch!(self, s => s.peek(key).await)
    }
}

/// The memory store keeps no queue (`hookgate check` refuses queue routes on it).
fn no_queue() -> StoreError {
    StoreError::Backend("the memory store keeps no queue".into())
}

macro_rules! queue_dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Memory(_) => Err(no_queue()),
            Store::Disk($s) => $e,
            Store::Redis($s) => $e,
        }
    };
}

impl QueueStore for Store {
    async fn enqueue_to(
        &self,
        fanout: &Fanout<'_>,
        event: &StoredEvent,
        dedup_ttl: Duration,
    ) -> Result<Enqueued, StoreError> {
        queue_dispatch!(self, s => s.enqueue_to(fanout, event, dedup_ttl).await)
    }

    async fn take_due(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Leased>, StoreError> {
        queue_dispatch!(self, s => s.take_due(q, max, lease).await)
    }

    async fn renew(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        queue_dispatch!(self, s => s.renew(q, leased, lease).await)
    }

    async fn give_back(&self, q: &QueueRef<'_>, leased: &Leased) -> Result<bool, StoreError> {
        queue_dispatch!(self, s => s.give_back(q, leased).await)
    }

    async fn finish(
        &self,
        q: &QueueRef<'_>,
        leased: &Leased,
        end: &Finish,
        dedup_ttl: Duration,
    ) -> Result<bool, StoreError> {
        queue_dispatch!(self, s => s.finish(q, leased, end, dedup_ttl).await)
    }

    async fn list(
        &self,
        q: &QueueRef<'_>,
        state: Option<State>,
        limit: usize,
    ) -> Result<Vec<Summary>, StoreError> {
        queue_dispatch!(self, s => s.list(q, state, limit).await)
    }

    async fn show(
        &self,
        q: &QueueRef<'_>,
        event_id: &str,
    ) -> Result<Option<(Envelope, Status)>, StoreError> {
        queue_dispatch!(self, s => s.show(q, event_id).await)
    }

    async fn retry(&self, q: &QueueRef<'_>, target: &Target) -> Result<u64, StoreError> {
        queue_dispatch!(self, s => s.retry(q, target).await)
    }

    async fn purge(&self, q: &QueueRef<'_>, target: &Target) -> Result<u64, StoreError> {
        queue_dispatch!(self, s => s.purge(q, target).await)
    }

    async fn release_blocked(&self, q: &QueueRef<'_>) -> Result<u64, StoreError> {
        queue_dispatch!(self, s => s.release_blocked(q).await)
    }

    async fn forget_delivered(&self, q: &QueueRef<'_>, event_id: &str) -> Result<bool, StoreError> {
        queue_dispatch!(self, s => s.forget_delivered(q, event_id).await)
    }

    async fn depth(&self, q: &QueueRef<'_>) -> Result<Depth, StoreError> {
        queue_dispatch!(self, s => s.depth(q).await)
    }
}

impl Cells for Store {
    async fn cell_get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        dispatch!(self, s => s.cell_get(name).await)
    }

    async fn cell_swap(
        &self,
        name: &str,
        expect: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.cell_swap(name, expect, new).await)
    }
}

impl AuditStore for Store {
    async fn audit_append(
        &self,
        space: &str,
        id: &str,
        at_ms: u64,
        record: &[u8],
        keep: usize,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.audit_append(space, id, at_ms, record, keep).await)
    }

    async fn audit_list(
        &self,
        space: &str,
        skip: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        dispatch!(self, s => s.audit_list(space, skip, limit).await)
    }
}

impl Pacing for Store {
    async fn rate_take(
        &self,
        q: &QueueRef<'_>,
        limit: &RateLimit,
    ) -> Result<Result<String, Duration>, StoreError> {
        queue_dispatch!(self, s => s.rate_take(q, limit).await)
    }

    async fn rate_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        queue_dispatch!(self, s => s.rate_return(q, token).await)
    }

    async fn pause(&self, q: &QueueRef<'_>, wait: Duration) -> Result<(), StoreError> {
        queue_dispatch!(self, s => s.pause(q, wait).await)
    }

    async fn slot_take(
        &self,
        q: &QueueRef<'_>,
        max: usize,
        want: usize,
        lease: Duration,
    ) -> Result<Vec<String>, StoreError> {
        queue_dispatch!(self, s => s.slot_take(q, max, want, lease).await)
    }

    async fn slot_return(&self, q: &QueueRef<'_>, token: &str) -> Result<(), StoreError> {
        queue_dispatch!(self, s => s.slot_return(q, token).await)
    }

    async fn slot_renew(
        &self,
        q: &QueueRef<'_>,
        token: &str,
        lease: Duration,
    ) -> Result<(), StoreError> {
        queue_dispatch!(self, s => s.slot_renew(q, token, lease).await)
    }
}

impl Store {
    /// Makes what the store holds durable before the process exits (the disk store
    /// commits attempt results without an fsync; the others have nothing to do).
    pub async fn flush(&self) {
        if let Self::Disk(s) = self
            && let Err(e) = s.flush().await
        {
            tracing::error!(error = %e, "disk store: the last attempt results could not be flushed; those events are tried again at the next start");
        }
    }

    /// Whether the store keeps queues (disk, Redis); the memory store keeps claims
    /// only, so queue routes, their events and their lines are not there to read.
    pub fn keeps_queues(&self) -> bool {
        !matches!(self, Self::Memory(_))
    }

    /// Whether a route's delivery slots are shared with other processes (Redis): the
    /// workers then take one from the store for every attempt.
    pub fn shares_slots(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    /// The destination queues of routes stored under `prefix` that hold undelivered
    /// events, as `(route, destination)` (none on the memory store, which keeps no
    /// queue). The gateway's own queues (their route names start with `#`, which no
    /// route's may: the alerts' notifications) are not among them.
    pub async fn stored_queues(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut all = match self {
            Self::Memory(_) => Vec::new(),
            Self::Disk(s) => s.stored_queues(prefix),
            Self::Redis(s) => s.stored_queues(prefix).await?,
        };
        all.retain(|(route, _)| !route.starts_with('#'));
        Ok(all)
    }

    /// Redis: its `maxmemory-policy` (`None` for the other stores, which evict nothing).
    pub async fn maxmemory_policy(&self) -> Option<Result<String, StoreError>> {
        match self {
            Self::Redis(s) => Some(s.maxmemory_policy().await),
            Self::Memory(_) | Self::Disk(_) => None,
        }
    }

    /// Whether an enqueue does not read the route's claims (its dedup keys): on Redis a
    /// queue's records are its own (they share the route's cluster slot, the claims do
    /// not), while the disk store's enqueue reads the claim first. A record kept only as
    /// a claim (a filtered event) is then looked up before the enqueue.
    pub fn queue_skips_claims(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    /// `memory`, `disk` or `redis`, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Disk(_) => "disk",
            Self::Redis(_) => "redis",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        for r in [
            Record::InFlight {
                token: "t".into(),
                fingerprint: "f".into(),
            },
            Record::Done {
                token: "t".into(),
                fingerprint: "f".into(),
            },
        ] {
            assert_eq!(Record::decode(&r.encode()), Some(r));
        }
        assert_eq!(Record::decode("x|a|b"), None);
        assert_eq!(Record::decode("garbage"), None);
    }

    #[test]
    fn tokens_are_unique() {
        assert_ne!(Token::random(), Token::random());
    }
}
