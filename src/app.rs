//! Wiring: the one place a gateway is put together from a config and run. `hookgate
//! serve`, `hookgate::testing` and the benchmark all go through [`App::build`] and
//! [`App::run`], so what runs in a test is what runs in production.
//!
//! ```text
//! Config ─► App::build: the store (Store::connect), the forwarder, metrics, routes
//!        ─► App::run(Listeners, shutdown): the public listener (server::run) and the
//!           admin listener (admin::run), until shutdown; then drain
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::config::{Config, ServerConfig};
use crate::server::{AppState, Clock};
use crate::store::Store;

/// The sockets a gateway serves: the public listener and, when configured, the admin
/// one. Bound before the gateway is built, so a port in use is reported first.
#[derive(Debug)]
pub struct Listeners {
    pub public: TcpListener,
    pub admin: Option<TcpListener>,
}

impl Listeners {
    /// Binds `server.listen` and `server.admin_listen`.
    pub async fn bind(server: &ServerConfig) -> anyhow::Result<Self> {
        let public = TcpListener::bind(server.listen)
            .await
            .with_context(|| format!("cannot listen on {}", server.listen))?;
        let admin = match server.admin_listen {
            Some(addr) => {
                if !addr.ip().is_loopback() && server.admin_token.is_none() {
                    tracing::warn!(admin = %addr, "the admin listener is not on a loopback address and has no server.admin_token: anyone who reaches it can reload, retry, purge and read handed-over secrets; set server.admin_token");
                }
                Some(
                    TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("cannot listen on {addr} (admin)"))?,
                )
            }
            None => None,
        };
        Ok(Self { public, admin })
    }

    /// Both listeners on free ports of 127.0.0.1 (tests and benchmarks).
    pub async fn loopback() -> anyhow::Result<Self> {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Ok(Self {
            public: TcpListener::bind(any).await?,
            admin: Some(TcpListener::bind(any).await?),
        })
    }
}

/// A gateway built from its config, ready to run.
#[derive(Debug, Clone)]
pub struct App {
    state: Arc<AppState>,
}

impl App {
    /// Builds the gateway: the store the config names (Redis connects lazily), the
    /// forwarding client, metrics and the routes.
    pub fn build(cfg: &Config, clock: Clock) -> anyhow::Result<Self> {
        Self::with_store(cfg, Store::connect(&cfg.store)?, clock)
    }

    /// Builds the gateway on a store made elsewhere (tests).
    pub fn with_store(cfg: &Config, store: Store, clock: Clock) -> anyhow::Result<Self> {
        let state = Arc::new(AppState::with_store(cfg, store, clock)?);
        state.metrics.start_at_zero(&cfg.routes);
        Ok(Self { state })
    }

    /// The running state: routes (reloadable), the store, metrics.
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Serves `listeners` until `shutdown` resolves, then stops taking connections and
    /// lets what is in progress finish within `server.shutdown_grace`.
    pub async fn run(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop = tokio_util::sync::CancellationToken::new();
        // Before anything is served: a Redis that may evict queued events refuses queue
        // routes (server/eviction.rs).
        // Boxed: its future is large, and nesting it in `run`'s own overflows the
        // compiler's layout query depth.
        Box::pin(crate::store::health::eviction::at_start(
            &self.state.eviction,
            &self.state.store,
            &self.state.routing,
            stop.clone(),
        ))
        .await?;
        // Before anything is served or delivered: a previous version's queues and log
        // on Redis are moved into the current key layout (store/redis/layout.rs), so an
        // upgrade loses no queued event.
        move_previous_layout_at_start(&self.state, &stop).await;
        // Before anything is served: whether writes wait for replicas, when the config
        // leaves it to the topology (store/redis/replicas.rs); then kept up to date.
        if let Store::Redis(redis) = self.state.store() {
            if let Err(e) = redis.refresh_replica_acks().await {
                tracing::warn!(error = %e, "redis store: the replication topology could not be read yet; writes wait for no replica until it is");
            }
            let (redis, stop) = (redis.clone(), stop.clone());
            tokio::spawn(async move { redis.keep_replica_acks(stop).await });
        }
        // Destination servers of other kinds than HTTP: connected and checked now (each
        // logged reachable or not; one down never stops the gateway: its events wait),
        // then every few seconds, for /readyz and /overview.
        tokio::spawn(crate::delivery::destination::watch(
            self.state.links.clone(),
            self.state.routing.clone(),
            crate::delivery::destination::CHECK_EVERY,
            stop.clone(),
        ));
        // Queues no route names any more, counted and logged (a bounded scan), and
        // lines dead events hold under `on_dead = "skip"` released; in the background:
        // serving does not wait for them.
        tokio::spawn({
            let state = self.state.clone();
            async move {
                // Queues of the previous layout that no route names: moved first, so
                // that they are counted as stranded.
                move_unnamed_previous_layout(&state).await;
                state.count_stranded().await;
                state.note_stored_queues().await;
                state.release_blocked_lines().await;
            }
        });
        tokio::spawn({
            let stop = stop.clone();
            async move {
                shutdown.await;
                stop.cancel();
            }
        });
        self.state.recorder.start(stop.clone());
        let admin = listeners.admin.map(|listener| {
            let (state, stop) = (self.state.clone(), stop.clone());
            tokio::spawn(crate::admin::run(state, listener, stop.cancelled_owned()))
        });
        // The delivery workers, started again if they ever stop on their own (a panic):
        // acknowledged events must keep being delivered.
        let workers = tokio::spawn({
            let (ctx, stop) = (Arc::new(self.state.worker_context()), stop.clone());
            async move {
                loop {
                    let run = tokio::spawn(crate::delivery::run(ctx.clone(), stop.clone()));
                    let ended = run.await;
                    if stop.is_cancelled() {
                        return ended;
                    }
                    tracing::error!(ended = ?ended.err(), "the delivery workers stopped unexpectedly; starting them again");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        });
        let state = self.state.clone();
        let served =
            crate::ingress::run(self.state, listeners.public, stop.clone().cancelled_owned()).await;
        // The public listener may end by itself (an error): stop the admin one too.
        stop.cancel();
        if let Some(task) = admin {
            let _ = task.await;
        }
        if let Ok(Err(e)) = workers.await {
            tracing::error!(error = %e, "the delivery workers failed while stopping; queued events stay stored for the next start");
        }
        state.store().flush().await;
        served
    }
}

/// A future of the start-up steps below, boxed and type-erased (as `eviction::at_start`
/// is boxed): `App::run`'s future, which `main`'s nests, stays as deep as it was.
type Step<'a> = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// [`move_previous_layout`] of the configured queues and logs; a store that does not
/// answer now is tried again in the background every 5 s (the move merges with what
/// was written meanwhile).
fn move_previous_layout_at_start<'a>(
    state: &'a Arc<AppState>,
    stop: &'a tokio_util::sync::CancellationToken,
) -> Step<'a> {
    Box::pin(async move {
        let Err(e) = move_previous_layout(state, false).await else {
            return;
        };
        tracing::warn!(error = %e, "redis store: the keys of the previous layout could not be moved yet; trying again in the background");
        let (state, stop) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                match move_previous_layout(&state, false).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "redis store: moving the keys of the previous layout failed; trying again");
                    }
                }
            }
        });
    })
}

/// [`move_previous_layout`] of the queues no route names (a bounded scan).
fn move_unnamed_previous_layout(state: &AppState) -> Step<'_> {
    Box::pin(async move {
        if let Err(e) = move_previous_layout(state, true).await {
            tracing::warn!(error = %e, "redis store: the queues of the previous layout that no route names could not be moved");
        }
    })
}

/// On Redis, moves what a previous version wrote in the old key layout into the
/// current one: every configured destination's queue and every configured route's
/// log; with `unnamed`, instead the queues found stored in the old layout that no
/// route names (a bounded scan; none on a cluster).
async fn move_previous_layout(
    state: &AppState,
    unnamed: bool,
) -> Result<(), crate::store::StoreError> {
    let Store::Redis(redis) = state.store() else {
        return Ok(());
    };
    let routing = state.routing();
    let prefix = &routing.store_cfg.key_prefix;
    let named: Vec<(String, String)> = routing
        .routes
        .values()
        .flat_map(|r| {
            r.destinations
                .iter()
                .map(|d| (r.name.clone(), d.name.clone()))
        })
        .collect();
    let queues = if unnamed {
        let mut found = redis.old_layout_queues(prefix).await?;
        found.retain(|q| !named.contains(q));
        found
    } else {
        named
    };
    let mut moved = 0;
    for (route, destination) in &queues {
        moved += redis
            .move_queue(&crate::store::QueueRef::new(prefix, route, destination))
            .await?;
    }
    if !unnamed {
        let mut names: Vec<&str> = routing.routes.values().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for route in names {
            moved += redis.move_log(prefix, route).await?;
        }
    }
    if moved > 0 {
        tracing::info!(
            keys = moved,
            "redis store: moved the queues and delivery log of the previous key layout into the current one"
        );
    }
    Ok(())
}
