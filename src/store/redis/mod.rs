//! The shared store: a Redis server (7.0 or later) that any number of gateway replicas
//! use together.
//!
//! One multiplexed connection per process for claims and queues, reconnected by
//! `ConnectionManager`, and one of the delivery log's own (`own_connection`). Every
//! call is bounded by `op_timeout`: the manager's own response timeout does not make it
//! reconnect to a frozen server, so after a run of timeouts the manager is rebuilt.
//!
//! Here, the topologies (one server, Sentinel, Cluster), the connection and `RedisStore::run`,
//! which bounds every call; beside it:
//! - `dedup.rs`: the claims half ([`DedupStore`](crate::store::DedupStore));
//! - `queue/`: the queue half ([`QueueStore`](crate::store::QueueStore)) and pacing
//!   ([`Pacing`](crate::store::Pacing));
//! - `layout.rs`: where hookgate's own keys live, and the stored queues found by them;
//! - `replicas.rs`: which writes wait for replicas (`min_replicas_ack`);
//! - `info.rs`: the server's memory and eviction policy, from `INFO`;
//! - `scripts/*.lua`: the Lua scripts, loaded with `include_str!`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, IntoConnectionInfo, Script};

mod audit;
mod cells;
mod dedup;
mod info;
mod layout;
mod queue;
mod replicas;

pub use self::info::policy_evicts;
pub(crate) use self::layout::log_base;
pub use self::layout::{AUDIT, INTERNAL, LOG, QUEUES};

use super::StoreError;

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
        /// Shared by the store's connections (`own_connection`): one Sentinel lookup
        /// at a time.
        client: Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>,
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
    /// The queue's per-store state (`queue/`).
    queue: queue::QueueState,
}

impl Inner {
    fn new(target: Target, replicas: replicas::ReplicaAcks, op_timeout: Duration) -> Self {
        Self {
            target,
            replicas,
            timeouts: AtomicU32::new(0),
            op_timeout,
            complete: Script::new(dedup::COMPLETE),
            release: Script::new(dedup::RELEASE),
            claim_wait: Script::new(dedup::CLAIM_WAIT),
            queue: queue::QueueState::new(),
        }
    }
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
            inner: Arc::new(Inner::new(
                Target::Single { client, manager },
                replicas::ReplicaAcks::new(opts.min_replicas_ack, opts.replica_ack_timeout),
                op_timeout,
            )),
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
            inner: Arc::new(Inner::new(
                Target::Cluster {
                    client: Box::new(client),
                    conn: tokio::sync::Mutex::new(None),
                    nodes: urls.len(),
                },
                replicas::ReplicaAcks::new(None, DEFAULT_ACK_TIMEOUT),
                op_timeout,
            )),
        })
    }

    /// The same store on a connection of its own (connected lazily, rebuilt on its own
    /// timeouts): for writers whose large requests must not queue in front of the
    /// claims' on one multiplexed connection, such as the delivery log's batches.
    /// It writes nothing the promise rests on, so it waits for no replica.
    pub(crate) fn own_connection(&self) -> Result<Self, StoreError> {
        let target = match &self.inner.target {
            Target::Single { client, .. } => Target::Single {
                client: client.clone(),
                manager: RwLock::new(manager(client, self.inner.op_timeout)?),
            },
            Target::Sentinel {
                client, sentinels, ..
            } => Target::Sentinel {
                client: Arc::clone(client),
                conn: tokio::sync::Mutex::new(None),
                sentinels: *sentinels,
            },
            Target::Cluster { client, nodes, .. } => Target::Cluster {
                client: client.clone(),
                conn: tokio::sync::Mutex::new(None),
                nodes: *nodes,
            },
        };
        Ok(Self {
            inner: Arc::new(Inner::new(
                target,
                replicas::ReplicaAcks::new(None, DEFAULT_ACK_TIMEOUT),
                self.inner.op_timeout,
            )),
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
            inner: Arc::new(Inner::new(
                Target::Sentinel {
                    client: Arc::new(tokio::sync::Mutex::new(client)),
                    conn: tokio::sync::Mutex::new(None),
                    sentinels: sentinels.len(),
                },
                replicas::ReplicaAcks::new(None, DEFAULT_ACK_TIMEOUT),
                op_timeout,
            )),
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

    /// Whether the store is a Redis Cluster.
    fn is_cluster(&self) -> bool {
        matches!(self.inner.target, Target::Cluster { .. })
    }
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
