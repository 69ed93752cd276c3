//! The shared store: a Redis server (7.0 or later) that any number of gateway replicas
//! use together.
//!
//! One multiplexed connection per process, reconnected by `ConnectionManager`. Every
//! call is bounded by `op_timeout`: the manager's own response timeout does not make it
//! reconnect to a frozen server, so after a run of timeouts the manager is rebuilt.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncCommands, Client, ExistenceCheck, IntoConnectionInfo, Script, SetExpiry, SetOptions,
};

mod layout;
mod queue;
mod replicas;

pub(crate) use self::layout::log_base;
pub use self::layout::{INTERNAL, LOG, QUEUES};

use super::{Claim, DedupKey, DedupStore, Record, Settled, StoreError, Token};

/// Turns an in-flight record into a done record if this claim still holds the key, or
/// records done if the key is gone (the lease ran out and nobody claimed since).
/// Returns 1 when the key holds the done record afterwards, 0 when another claim holds it.
/// With ARGV[4] = `1` (`min_replicas_ack`) a done record already there is written again,
/// unchanged, so that the `WAIT` that follows covers it (see [`CLAIM_WAIT`]).
const COMPLETE: &str = include_str!("scripts/complete.lua");

/// The claim under `min_replicas_ack`: `SET NX GET` as without it, and a done record
/// found is written again, unchanged (`KEEPTTL`). `WAIT` waits for the connection's
/// last write: a copy that found a done record and wrote nothing would be acknowledged
/// at once, even if no replica holds that record (a `complete` whose replication had not
/// happened yet, on this connection or another gateway's). The replication stream is in
/// order, so a replica that acknowledged the rewrite holds the record. ARGV: record,
/// lease ms. Returns the previous value (nil when claimed).
const CLAIM_WAIT: &str = include_str!("scripts/claim_wait.lua");

/// Deletes the key if this claim still holds it. An absent key counts as released.
const RELEASE: &str = include_str!("scripts/release.lua");

/// Consecutive timeouts after which the connection is rebuilt.
const REBUILD_AFTER: u32 = 3;

/// How long a write waits for replicas when the config does not say (`replica_ack_timeout`).
const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_millis(100);

/// A single server (reconnecting manager, rebuilt after repeated timeouts) or a
/// Redis Cluster (the cluster connection follows MOVED/ASK and failovers itself).
enum Target {
    Single {
        client: Client,
        manager: RwLock<ConnectionManager>,
    },
    /// A primary found through Sentinel; re-resolved after repeated failures.
    Sentinel {
        client: Box<tokio::sync::Mutex<redis::sentinel::SentinelClient>>,
        conn: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
        sentinels: usize,
    },
    Cluster {
        client: Box<ClusterClient>,
        conn: tokio::sync::Mutex<Option<ClusterConnection>>,
        nodes: usize,
    },
}

/// The connection one store call uses. Every operation is single-key (a queue's keys
/// share their route's hash tag), so the cluster routes it (scripts included) to the
/// key's slot.
#[derive(Clone)]
pub(crate) enum AnyConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(redis::aio::MultiplexedConnection),
}

impl ConnectionLike for AnyConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Self::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(c) => c.get_db(),
        }
    }
}

/// Options of a single-server store.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// PEM of a private CA that signed the server's certificate (`rediss://`).
    pub tls_ca: Option<Vec<u8>>,
    /// Make each claim wait until this many replicas have it (Redis `WAIT`); `None`:
    /// one while every primary has a replica connected (`replicas.rs`).
    pub min_replicas_ack: Option<u32>,
    /// How long a claim waits for those replicas.
    pub replica_ack_timeout: Duration,
}

struct Inner {
    target: Target,
    /// The replicas writes wait for (`replicas.rs`).
    replicas: replicas::ReplicaAcks,
    timeouts: AtomicU32,
    op_timeout: Duration,
    complete: Script,
    release: Script,
    claim_wait: Script,
    /// The queue's per-store state (`queue.rs`).
    queue: queue::QueueState,
}

/// A Redis-backed store.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: print only where it points.
        let addr = match &self.inner.target {
            Target::Single { client, .. } => client.get_connection_info().addr().to_string(),
            Target::Cluster { nodes, .. } => format!("cluster of {nodes} seed nodes"),
            Target::Sentinel { sentinels, .. } => format!("primary via {sentinels} sentinels"),
        };
        f.debug_struct("RedisStore")
            .field("addr", &addr)
            .field("op_timeout", &self.inner.op_timeout)
            .finish()
    }
}

fn manager(client: &Client, op_timeout: Duration) -> Result<ConnectionManager, StoreError> {
    let cfg = ConnectionManagerConfig::new()
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
        .set_connection_timeout(Some(op_timeout))
        .set_response_timeout(Some(op_timeout));
    ConnectionManager::new_lazy_with_config(client.clone(), cfg).map_err(backend)
}

fn backend(e: redis::RedisError) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// A Redis error after a call was sent: [`StoreError::Refused`] when the call surely
/// did not run (the connection was refused, or the server refused the call before
/// running it), else [`StoreError::Backend`] (it may have run).
fn sent_error(e: redis::RedisError) -> StoreError {
    const NOT_RUN: [&str; 12] = [
        "OOM",
        "READONLY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "MOVED",
        "ASK",
        "TRYAGAIN",
        "LOADING",
        "NOSCRIPT",
        "NOPERM",
        "CROSSSLOT",
        "NOREPLICAS",
    ];
    if e.is_connection_refusal()
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || e.code().is_some_and(|c| NOT_RUN.contains(&c))
    {
        StoreError::Refused(e.to_string())
    } else {
        backend(e)
    }
}

impl RedisStore {
    /// Connects lazily: the first call opens the connection, so a gateway can start
    /// while Redis is still coming up (and answers 503 until it is).
    pub fn new(url: &str, op_timeout: Duration) -> Result<Self, StoreError> {
        Self::with_options(url, op_timeout, &RedisOptions::default())
    }

    /// A single-server store with TLS and replica-acknowledgement options.
    pub fn with_options(
        url: &str,
        op_timeout: Duration,
        opts: &RedisOptions,
    ) -> Result<Self, StoreError> {
        let info = url
            .into_connection_info()
            .map_err(|e| StoreError::Backend(format!("invalid redis url: {:?}", e.kind())))?
            .set_tcp_settings(
                redis::io::tcp::TcpSettings::default()
                    .set_nodelay(true)
                    .set_user_timeout(Duration::from_secs(5)),
            );
        let client = match &opts.tls_ca {
            Some(pem) => Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            None => Client::open(info),
        }
        .map_err(backend)?;
        let manager = RwLock::new(manager(&client, op_timeout)?);
        Ok(Self {
            inner: Arc::new(Inner {
                target: Target::Single { client, manager },
                replicas: replicas::ReplicaAcks::new(
                    opts.min_replicas_ack,
                    opts.replica_ack_timeout,
                ),
                timeouts: AtomicU32::new(0),
                op_timeout,
                complete: Script::new(COMPLETE),
                release: Script::new(RELEASE),
                claim_wait: Script::new(CLAIM_WAIT),
                queue: queue::QueueState::new(),
            }),
        })
    }

    /// Connects to a Redis Cluster through any of its nodes (lazily, on first use).
    /// Cluster defaults have no response timeout and 16 retries with long back-off:
    /// both are bounded here, and every call is still under `op_timeout`.
    pub fn new_cluster(urls: &[String], op_timeout: Duration) -> Result<Self, StoreError> {
        let client = ClusterClient::builder(urls.to_vec())
            .response_timeout(op_timeout)
            .connection_timeout(op_timeout.min(Duration::from_millis(500)))
            .overall_response_timeout(Some(op_timeout))
            .retries(3)
            .build()
            .map_err(backend)?;
        Ok(Self {
            inner: Arc::new(Inner {
                target: Target::Cluster {
                    client: Box::new(client),
                    conn: tokio::sync::Mutex::new(None),
                    nodes: urls.len(),
                },
                replicas: replicas::ReplicaAcks::new(None, DEFAULT_ACK_TIMEOUT),
                timeouts: AtomicU32::new(0),
                op_timeout,
                complete: Script::new(COMPLETE),
                release: Script::new(RELEASE),
                claim_wait: Script::new(CLAIM_WAIT),
                queue: queue::QueueState::new(),
            }),
        })
    }

    /// Writes the promise rests on (the claim, the done record, the enqueue, lease
    /// writes) wait for `n` replicas, for at most `timeout` (`min_replicas_ack`). On a
    /// cluster `WAIT` goes in the same pipeline as the write, so it runs on the
    /// connection to the primary that owns the key's slot; through Sentinel, on the
    /// connection to the primary it names.
    #[must_use]
    pub fn wait_for_replicas(mut self, n: Option<u32>, timeout: Duration) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.replicas = replicas::ReplicaAcks::new(n, timeout);
        }
        self
    }

    /// A store on the primary that Sentinel names for `master`; after repeated
    /// failures (a failover) the primary is looked up again.
    pub fn new_sentinel(
        sentinels: &[String],
        master: &str,
        op_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let client = redis::sentinel::SentinelClient::build(
            sentinels.to_vec(),
            master,
            None,
            redis::sentinel::SentinelServerType::Master,
        )
        .map_err(backend)?;
        Ok(Self {
            inner: Arc::new(Inner {
                target: Target::Sentinel {
                    client: Box::new(tokio::sync::Mutex::new(client)),
                    conn: tokio::sync::Mutex::new(None),
                    sentinels: sentinels.len(),
                },
                replicas: replicas::ReplicaAcks::new(None, DEFAULT_ACK_TIMEOUT),
                timeouts: AtomicU32::new(0),
                op_timeout,
                complete: Script::new(COMPLETE),
                release: Script::new(RELEASE),
                claim_wait: Script::new(CLAIM_WAIT),
                queue: queue::QueueState::new(),
            }),
        })
    }

    async fn conn(&self) -> redis::RedisResult<AnyConn> {
        match &self.inner.target {
            Target::Sentinel { client, conn, .. } => {
                let mut slot = conn.lock().await;
                if let Some(c) = slot.as_ref() {
                    return Ok(AnyConn::Sentinel(c.clone()));
                }
                let c = client.lock().await.get_async_connection().await?;
                *slot = Some(c.clone());
                Ok(AnyConn::Sentinel(c))
            }
            Target::Single { manager, .. } => Ok(AnyConn::Single(match manager.read() {
                Ok(m) => m.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            })),
            Target::Cluster { client, conn, .. } => {
                let mut slot = conn.lock().await;
                if let Some(c) = slot.as_ref() {
                    return Ok(AnyConn::Cluster(c.clone()));
                }
                let c = client.get_async_connection().await?;
                *slot = Some(c.clone());
                Ok(AnyConn::Cluster(c))
            }
        }
    }

    /// The queue's per-store state.
    fn queue_state(&self) -> &queue::QueueState {
        &self.inner.queue
    }

    /// `(replicas, timeout)` when writes must reach replicas (`min_replicas_ack`).
    fn replica_wait(&self) -> Option<(u32, Duration)> {
        self.inner.replicas.wait()
    }

    /// Runs one store call under the timeout, counting consecutive timeouts.
    pub(crate) async fn run<T, F>(&self, f: impl FnOnce(AnyConn) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        // Connecting a cluster may try dead seeds one by one: it gets its own, longer
        // bound; the command itself gets `op_timeout`.
        let conn = match tokio::time::timeout(self.inner.op_timeout * 5, self.conn()).await {
            Ok(Ok(c)) => c,
            // Nothing was sent.
            Ok(Err(e)) => {
                self.note_timeout().await;
                return Err(StoreError::Refused(e.to_string()));
            }
            Err(_) => {
                self.note_timeout().await;
                return Err(StoreError::Refused(format!(
                    "no connection within {:?}",
                    self.inner.op_timeout * 5
                )));
            }
        };
        let out = tokio::time::timeout(self.inner.op_timeout, f(conn)).await;
        match out {
            Ok(Ok(v)) => {
                self.inner.timeouts.store(0, Ordering::Relaxed);
                Ok(v)
            }
            Ok(Err(e)) => {
                // On a cluster any error may mean a topology change (a failover): count
                // it, so a connection that does not recover by itself is rebuilt.
                if e.is_timeout() || !matches!(self.inner.target, Target::Single { .. }) {
                    self.note_timeout().await;
                }
                Err(sent_error(e))
            }
            Err(_) => {
                self.note_timeout().await;
                Err(StoreError::Timeout(self.inner.op_timeout))
            }
        }
    }

    async fn note_timeout(&self) {
        let n = self.inner.timeouts.fetch_add(1, Ordering::Relaxed) + 1;
        let (client, current) = match &self.inner.target {
            Target::Single { client, manager } => (client, manager),
            Target::Sentinel { conn, .. } => {
                if n >= REBUILD_AFTER {
                    *conn.lock().await = None;
                    self.inner.timeouts.store(0, Ordering::Relaxed);
                    tracing::warn!(
                        failures = n,
                        "redis store: asking Sentinel for the primary again after repeated failures"
                    );
                }
                return;
            }
            Target::Cluster { conn, .. } => {
                if n >= REBUILD_AFTER {
                    *conn.lock().await = None;
                    self.inner.timeouts.store(0, Ordering::Relaxed);
                    tracing::warn!(
                        failures = n,
                        "redis cluster store: reconnecting after repeated failures"
                    );
                }
                return;
            }
        };
        if n >= REBUILD_AFTER
            && let Ok(fresh) = manager(client, self.inner.op_timeout)
        {
            if let Ok(mut m) = current.write() {
                *m = fresh;
            }
            self.inner.timeouts.store(0, Ordering::Relaxed);
            tracing::warn!(
                timeouts = n,
                "redis store: rebuilt the connection after repeated timeouts"
            );
        }
    }
}

impl RedisStore {
    /// The server's `maxmemory-policy`, read from `INFO memory` (which answers where
    /// `CONFIG` is renamed or refused). On a cluster `INFO` goes to every primary: the
    /// first policy that evicts is returned, else the first found.
    pub async fn maxmemory_policy(&self) -> Result<String, StoreError> {
        let info: redis::Value = self
            .run(|mut c| async move { redis::cmd("INFO").arg("memory").query_async(&mut c).await })
            .await?;
        let mut found = Vec::new();
        collect_policies(&info, &mut found);
        found
            .iter()
            .find(|p| policy_evicts(p))
            .or_else(|| found.first())
            .cloned()
            .ok_or_else(|| StoreError::Backend("INFO memory names no maxmemory_policy".into()))
    }
}

impl RedisStore {
    /// Each node's `used_memory` and `maxmemory` (0: no limit), from `INFO memory`:
    /// the server's, or every primary's on a cluster.
    pub async fn memory(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let info: redis::Value = self
            .run(|mut c| async move { redis::cmd("INFO").arg("memory").query_async(&mut c).await })
            .await?;
        let mut texts = Vec::new();
        collect_info(&info, &mut texts);
        let nodes: Vec<_> = texts.iter().filter_map(|t| memory_of(t)).collect();
        if nodes.is_empty() {
            return Err(StoreError::Backend(
                "INFO memory names no used_memory and maxmemory".into(),
            ));
        }
        Ok(nodes)
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

    /// Whether the store is a Redis Cluster.
    fn is_cluster(&self) -> bool {
        matches!(self.inner.target, Target::Cluster { .. })
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

/// Whether a `maxmemory-policy` lets Redis evict keys: every policy but `noeviction`.
pub fn policy_evicts(policy: &str) -> bool {
    policy != "noeviction"
}

/// The `maxmemory_policy:` values in an `INFO` answer (one text, or one per node).
fn collect_policies(v: &redis::Value, out: &mut Vec<String>) {
    let mut texts = Vec::new();
    collect_info(v, &mut texts);
    out.extend(texts.iter().flat_map(|t| {
        t.lines()
            .filter_map(|l| l.trim().strip_prefix("maxmemory_policy:"))
            .map(|p| p.trim().to_owned())
    }));
}

/// The text of each node's `INFO` answer (one for a server, one per primary on a
/// cluster).
fn collect_info(v: &redis::Value, out: &mut Vec<String>) {
    match v {
        redis::Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(t) => out.push(t.clone()),
        redis::Value::VerbatimString { text: t, .. } => out.push(t.clone()),
        redis::Value::Map(kv) => {
            for (_, v) in kv {
                collect_info(v, out);
            }
        }
        redis::Value::Array(a) | redis::Value::Set(a) => {
            for v in a {
                collect_info(v, out);
            }
        }
        _ => {}
    }
}

/// A node's `used_memory` and `maxmemory` (0: no limit) from its `INFO memory`.
fn memory_of(info: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("used_memory:")?, field("maxmemory:")?))
}

/// Runs a script, then `WAIT` for `n` replicas for at most `t`, in one pipeline: the
/// script is loaded first (a pipeline does not retry NOSCRIPT), and `WAIT` follows it on
/// the same connection, so it waits for that script's writes. The script's reply, and
/// how many replicas acknowledged them.
async fn invoke_then_wait<T: redis::FromRedisValue>(
    c: &mut AnyConn,
    script: &redis::Script,
    inv: &redis::ScriptInvocation<'_>,
    (n, t): (u32, Duration),
) -> redis::RedisResult<(T, i64)> {
    let (_sha, reply, acked): (String, T, i64) = redis::pipe()
        .load_script(script)
        .invoke_script(inv)
        .cmd("WAIT")
        .arg(n)
        .arg(millis(t))
        .query_async(c)
        .await?;
    Ok((reply, acked))
}

/// The error of a write fewer than `n` replicas acknowledged (`acked`): it may have
/// been applied on the primary.
fn too_few_replicas(what: &'static str, acked: i64, n: u32) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, what, format!("{acked} of {n}")))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl DedupStore for RedisStore {
    async fn claim(
        &self,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let token = Token::random();
        let record = Record::in_flight(&token, fingerprint).encode();
        let opts = SetOptions::default()
            .conditional_set(ExistenceCheck::NX)
            .get(true)
            .with_expiration(SetExpiry::PX(millis(lease)));
        // SET NX GET: claims and reads the current state in one round trip. With
        // min_replicas_ack, WAIT follows in the same pipeline: the claim counts only
        // once that many replicas hold it, so a primary lost right after cannot hand
        // the event to a second copy. A done record found is held to the same bound
        // (CLAIM_WAIT writes it again): a copy is answered 2xx only once replicas hold
        // the record that answers it.
        let wait = self.replica_wait();
        let claim_wait = &self.inner.claim_wait;
        let lease_ms = millis(lease);
        let result = self
            .run(|mut c| async move {
                match wait {
                    None => {
                        c.set_options::<_, _, Option<String>>(key.as_str(), record, opts)
                            .await
                    }
                    Some(wait) => {
                        let mut inv = claim_wait.prepare_invoke();
                        inv.key(key.as_str()).arg(record).arg(lease_ms);
                        let (prev, acked): (Option<String>, i64) =
                            invoke_then_wait(&mut c, claim_wait, &inv, wait).await?;
                        let done = prev.as_deref().is_some_and(|v| v.starts_with("d|"));
                        if (prev.is_none() || done) && acked < i64::from(wait.0) {
                            return Err(too_few_replicas(
                                if done {
                                    "the done record of a copy not acknowledged by enough replicas"
                                } else {
                                    "claim not acknowledged by enough replicas"
                                },
                                acked,
                                wait.0,
                            ));
                        }
                        Ok(prev)
                    }
                }
            })
            .await;
        let prev = match result {
            Ok(prev) => prev,
            Err(e) => {
                // A timed-out command may still run later and leave our claim behind:
                // free it in the background so it does not block the provider's retry.
                let store = self.clone();
                let (key, token, fp) = (key.clone(), token.clone(), fingerprint.to_owned());
                tokio::spawn(async move {
                    tokio::time::sleep(store.inner.op_timeout).await;
                    let _ = store.release(&key, &token, &fp).await;
                });
                return Err(e);
            }
        };
        match prev {
            None => Ok(Claim::Claimed(token)),
            Some(v) => {
                let rec = Record::decode(&v).ok_or_else(|| StoreError::Corrupt(key.to_string()))?;
                if rec.token() == token.as_str() {
                    return Ok(Claim::Claimed(token));
                }
                Ok(rec.as_existing())
            }
        }
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        let in_flight = Record::in_flight(token, fingerprint).encode();
        let done = Record::done(token, fingerprint).encode();
        let script = &self.inner.complete;
        let wait = self.replica_wait();
        let n: i64 = self
            .run(|mut c| async move {
                let mut inv = script.prepare_invoke();
                inv.key(key.as_str())
                    .arg(in_flight)
                    .arg(done)
                    .arg(millis(ttl))
                    .arg(if wait.is_some() { "1" } else { "0" });
                let Some(wait) = wait else {
                    return inv.invoke_async(&mut c).await;
                };
                // With min_replicas_ack the done record must reach replicas too: until
                // it does, settling goes on (and retries write it again), so a primary
                // lost meanwhile does not bring back the in-flight record and let a
                // later copy through.
                let (applied, acked): (i64, i64) =
                    invoke_then_wait(&mut c, script, &inv, wait).await?;
                if applied == 1 && acked < i64::from(wait.0) {
                    return Err(too_few_replicas(
                        "done record not acknowledged by enough replicas",
                        acked,
                        wait.0,
                    ));
                }
                Ok(applied)
            })
            .await?;
        Ok(if n == 1 {
            Settled::Applied
        } else {
            Settled::NotOwner
        })
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        let in_flight = Record::in_flight(token, fingerprint).encode();
        let script = &self.inner.release;
        let n: i64 = self
            .run(|mut c| async move {
                script
                    .key(key.as_str())
                    .arg(in_flight)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(if n == 1 {
            Settled::Applied
        } else {
            Settled::NotOwner
        })
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let n: i64 = self
            .run(|mut c| async move { c.del(key.as_str()).await })
            .await?;
        Ok(n > 0)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run(|mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(|_| ())
    }

    async fn peek(&self, key: &DedupKey) -> Result<Option<Claim>, StoreError> {
        let raw: Option<String> = self
            .run(|mut c| async move { c.get(key.as_str()).await })
            .await?;
        match raw {
            None => Ok(None),
            Some(text) => Record::decode(&text)
                .map(|r| Some(r.as_existing()))
                .ok_or_else(|| StoreError::Corrupt(key.as_str().to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
