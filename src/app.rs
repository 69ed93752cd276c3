//! Wiring: the one place a gateway is put together from a config and run. `hookgate
//! serve`, `hookgate::testing` and the benchmark all go through [`App::build`] and
//! [`App::run`], so what runs in a test is what runs in production.
//!
//! Each subsystem gets a context of its own, holding only the handles it uses; where
//! two use the same (the routes, the store, the metrics, the workers' bell), each
//! holds a clone of one handle. Nothing reaches into a shared hub.
//!
//! ```text
//! Config ─► App::build: the store (Store::connect), the forwarder, metrics, routes;
//!           then the contexts: PipelineContext (the request path), Ingress (the
//!           public listener), AdminContext, WorkerContext (the delivery workers),
//!           Reloader (SIGHUP and POST /reload)
//!        ─► App::run(Listeners, shutdown): the public listener (ingress::run), the
//!           admin listener (admin::run) and the delivery workers (delivery::run),
//!           until shutdown; then drain
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use std::sync::atomic::Ordering;

use anyhow::Context as _;
use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use crate::admin::AdminContext;
use crate::config::{Config, ServerConfig};
use crate::delivery::WorkerContext;
use crate::delivery::control::Controls;
use crate::delivery::destination::Links;
use crate::forward::Forwarder;
use crate::ingress::Ingress;
use crate::ingress::limits::ClientConnections;
use crate::observe::Observers;
use crate::observe::alerts::AlertsContext;
use crate::observe::capture::Capture;
use crate::observe::metrics::Metrics;
use crate::observe::recorder::Recorder;
use crate::observe::traces::{SpanCounters, Traces};
use crate::pipeline::PipelineContext;
use crate::pipeline::handed::HandedSecrets;
use crate::pipeline::limits::{BodyBudget, ClientReads, FailureBudgets};
use crate::reload::Reloader;
use crate::state::{Clock, QueueHistory, Routing};
use crate::store::Store;
use crate::store::health::eviction;
use crate::tls;

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
                if !addr.ip().is_loopback() && !server.admin_protected() {
                    tracing::warn!(admin = %addr, "the admin listener is not on a loopback address and has no server.admin_token or server.admin_tokens: anyone who reaches it can reload, retry, purge and read handed-over secrets; set a token");
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

/// A gateway built from its config, ready to run: the context of each subsystem,
/// each holding only the handles it uses (shared where two use the same).
#[derive(Debug, Clone)]
pub struct App {
    pipeline: Arc<PipelineContext>,
    ingress: Arc<Ingress>,
    admin: Arc<AdminContext>,
    workers: Arc<WorkerContext>,
    reloader: Arc<Reloader>,
}

/// What several subsystems share, made once and handed to each context.
struct Shared {
    routing: Arc<ArcSwap<Routing>>,
    store: Store,
    metrics: Arc<Metrics>,
    recorder: Arc<Recorder>,
    forwarder: Forwarder,
    /// The connections to destination servers of other kinds than HTTP.
    links: Arc<Links>,
    /// The destinations' pauses and breakers as this process last read them.
    controls: Arc<Controls>,
    /// The incidents watch and what it sends.
    alerts: Arc<AlertsContext>,
    clock: Clock,
    /// Rung when an event is queued, retried or released, or an attempt ends.
    wake: Arc<Notify>,
    eviction: Arc<eviction::Watch>,
    handed: Arc<HandedSecrets>,
    queue_history: Arc<QueueHistory>,
    /// The queues' depth over the last day, sampled by this process (the charts).
    queue_samples: Arc<crate::delivery::samples::QueueSamples>,
    tls: Arc<ArcSwapOption<tokio_rustls::rustls::ServerConfig>>,
    /// The admin listener's tokens (a reload swaps them).
    access: Arc<ArcSwap<crate::admin::Access>>,
    /// Operators' actions.
    audit: Arc<crate::admin::audit::Audit>,
    /// The spans' exporter (`[telemetry] otlp`), or nothing.
    traces: Traces,
}

impl App {
    /// Builds the gateway: the store the config names (Redis connects lazily), the
    /// forwarding client, metrics and the routes.
    pub fn build(cfg: &Config, clock: Clock) -> anyhow::Result<Self> {
        Self::with_store(cfg, Store::connect(&cfg.store)?, clock)
    }

    /// Builds the gateway on a store made elsewhere (tests).
    pub fn with_store(cfg: &Config, store: Store, clock: Clock) -> anyhow::Result<Self> {
        let mut metrics = Metrics::new();
        metrics.register_store(&store.metrics());
        // `[telemetry] otlp`: the exporter is set here, once (a reload keeps it).
        let span_counters = SpanCounters::default();
        span_counters.register(metrics.registry_mut());
        let traces = Traces::start(&cfg.telemetry, &span_counters)?;
        let routing = Arc::new(ArcSwap::from_pointee(Routing::new(cfg)));
        let recorder = Arc::new(Recorder::new(cfg, &store, &mut metrics, routing.clone())?);
        let audit = Arc::new(crate::admin::audit::Audit::new(
            store.clone(),
            metrics.registry_mut(),
        ));
        let eviction = Arc::new(eviction::Watch::new(&store));
        let capture = match &cfg.capture {
            Some(c) => Some(
                Capture::start(c, cfg.store.min_free_space, metrics.captures.clone())
                    .map(|cap| cap.with_replays(c.replays))
                    .map_err(|e| anyhow::anyhow!("capture dir {}: {e}", c.dir.display()))?,
            ),
            None => None,
        };
        let metrics = Arc::new(metrics);
        let tls = match &cfg.server.tls {
            Some(t) => Some(tls::server_config(&t.cert, &t.key).map_err(|e| anyhow::anyhow!(e))?),
            None => None,
        };
        let controls: Arc<Controls> = Arc::default();
        let alerts = Arc::new(AlertsContext::new(
            routing.clone(),
            store.clone(),
            metrics.clone(),
            controls.clone(),
        )?);
        let shared = Shared {
            handed: Arc::new(HandedSecrets::new(
                metrics.clone(),
                cfg.server.admin_listen.is_some(),
            )),
            routing,
            store,
            metrics,
            recorder,
            forwarder: Forwarder::new()?,
            links: Arc::default(),
            controls,
            alerts,
            clock,
            wake: Arc::new(Notify::new()),
            eviction,
            queue_history: Arc::new(QueueHistory::new(cfg)),
            queue_samples: Arc::default(),
            tls: Arc::new(ArcSwapOption::new(tls)),
            access: Arc::new(ArcSwap::from_pointee(crate::admin::Access::of(&cfg.server))),
            audit,
            traces,
        };
        let pipeline = Arc::new(pipeline_context(cfg, &shared, capture));
        let reloader = Arc::new(reloader(cfg, &shared));
        shared.metrics.start_at_zero(&cfg.routes);
        Ok(Self {
            ingress: Arc::new(Ingress {
                pipeline: pipeline.clone(),
                server: cfg.server.clone(),
                connections: ClientConnections::default(),
                tls: shared.tls.clone(),
            }),
            admin: Arc::new(admin_context(cfg, &shared, reloader.clone())),
            workers: Arc::new(WorkerContext {
                routing: shared.routing.clone(),
                store: shared.store.clone(),
                forwarder: shared.forwarder.clone(),
                links: shared.links.clone(),
                controls: shared.controls.clone(),
                clock: shared.clock,
                metrics: shared.metrics.clone(),
                wake: shared.wake.clone(),
                shutdown_grace: cfg.server.shutdown_grace,
                traces: shared.traces.clone(),
            }),
            pipeline,
            reloader,
        })
    }

    /// The store the gateway runs on.
    pub fn store(&self) -> &Store {
        &self.pipeline.store
    }

    /// What the delivery log counts against `log.max_size` now.
    pub async fn delivery_log_size(&self) -> Result<u64, crate::store::StoreError> {
        let recorder = &self.admin.recorder;
        recorder.log.size(&recorder.route_names()).await
    }

    /// Samples every queue's depth now, as the sampler does every 30 s (tests take
    /// samples when they need them rather than wait).
    pub async fn sample_queues(&self) {
        let admin = &self.admin;
        admin
            .queue_samples
            .sample(&admin.routing(), &admin.store)
            .await;
    }

    /// Deliveries forwarded without a claim because the store was down.
    pub fn unclaimed_forwards(&self) -> u64 {
        self.pipeline.unclaimed_forwards.load(Ordering::Relaxed)
    }

    /// Re-reads the config file and swaps what a reload swaps (SIGHUP).
    pub(crate) fn reloader(&self) -> &Arc<Reloader> {
        &self.reloader
    }

    /// The admin listener's context (its tests).
    #[cfg(test)]
    pub(crate) fn admin(&self) -> &Arc<AdminContext> {
        &self.admin
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
        // routes (store/health/eviction.rs).
        // Boxed: its future is large, and nesting it in `run`'s own overflows the
        // compiler's layout query depth.
        Box::pin(eviction::at_start(
            &self.pipeline.eviction,
            &self.pipeline.store,
            &self.pipeline.routing,
            stop.clone(),
        ))
        .await?;
        // Before anything is served or delivered: a previous version's queues and log
        // on Redis are moved into the current key layout (store/redis/layout.rs), so an
        // upgrade loses no queued event.
        move_previous_layout_at_start(&self, &stop).await;
        // Before anything is served: whether writes wait for replicas, when the config
        // leaves it to the topology (store/redis/replicas.rs); then kept up to date.
        if let Store::Redis(redis) = self.store() {
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
            self.workers.links.clone(),
            self.workers.routing.clone(),
            crate::delivery::destination::CHECK_EVERY,
            stop.clone(),
        ));
        // Queues no route names any more, counted and logged (a bounded scan), and
        // lines dead events hold under `on_dead = "skip"` released; in the background:
        // serving does not wait for them.
        tokio::spawn({
            let app = self.clone();
            async move {
                // Queues of the previous layout that no route names: moved first, so
                // that they are counted as stranded.
                move_unnamed_previous_layout(&app).await;
                app.reloader.count_stranded().await;
                app.reloader.note_stored_queues().await;
                app.reloader.release_blocked_lines().await;
            }
        });
        tokio::spawn({
            let stop = stop.clone();
            async move {
                shutdown.await;
                stop.cancel();
            }
        });
        self.admin.recorder.start(stop.clone());
        // The queues' depth over the last day, for the inspector's charts: a bounded
        // ring per destination (delivery/samples.rs).
        tokio::spawn(crate::delivery::samples::run(
            self.admin.queue_samples.clone(),
            self.admin.routing.clone(),
            self.admin.store.clone(),
            stop.clone(),
        ));
        // Incidents: looked for, opened and resolved, and their notifications sent.
        tokio::spawn(crate::observe::alerts::watch(
            self.admin.alerts.clone(),
            stop.clone(),
        ));
        let admin = listeners.admin.map(|listener| {
            let (admin, stop) = (self.admin.clone(), stop.clone());
            tokio::spawn(crate::admin::run(admin, listener, stop.cancelled_owned()))
        });
        // The delivery workers, started again if they ever stop on their own (a panic):
        // acknowledged events must keep being delivered.
        let workers = tokio::spawn({
            let (ctx, stop) = (self.workers.clone(), stop.clone());
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
        let served = crate::ingress::run(
            self.ingress.clone(),
            listeners.public,
            stop.clone().cancelled_owned(),
        )
        .await;
        // The public listener may end by itself (an error): stop the admin one too.
        stop.cancel();
        if let Some(task) = admin {
            let _ = task.await;
        }
        if let Ok(Err(e)) = workers.await {
            tracing::error!(error = %e, "the delivery workers failed while stopping; queued events stay stored for the next start");
        }
        // Operators' last actions reach the audit's store before it is flushed.
        self.admin
            .audit
            .drain(self.admin.server.shutdown_grace)
            .await;
        self.store().flush().await;
        // The spans of what was drained, exported before the process ends (bounded).
        self.pipeline.traces.shutdown().await;
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
    app: &'a App,
    stop: &'a tokio_util::sync::CancellationToken,
) -> Step<'a> {
    Box::pin(async move {
        let Err(e) = move_previous_layout(app, false).await else {
            return;
        };
        tracing::warn!(error = %e, "redis store: the keys of the previous layout could not be moved yet; trying again in the background");
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                match move_previous_layout(&app, false).await {
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
fn move_unnamed_previous_layout(app: &App) -> Step<'_> {
    Box::pin(async move {
        if let Err(e) = move_previous_layout(app, true).await {
            tracing::warn!(error = %e, "redis store: the queues of the previous layout that no route names could not be moved");
        }
    })
}

/// On Redis, moves what a previous version wrote in the old key layout into the
/// current one: every configured destination's queue and every configured route's
/// log; with `unnamed`, instead the queues found stored in the old layout that no
/// route names (a bounded scan; none on a cluster).
async fn move_previous_layout(app: &App, unnamed: bool) -> Result<(), crate::store::StoreError> {
    let Store::Redis(redis) = app.store() else {
        return Ok(());
    };
    let routing = app.pipeline.routing();
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

/// The request path's context: the shared handles, and the limits only it spends.
fn pipeline_context(cfg: &Config, shared: &Shared, capture: Option<Capture>) -> PipelineContext {
    PipelineContext {
        routing: shared.routing.clone(),
        request_timeout: cfg.server.request_timeout,
        max_body: cfg.server.max_body,
        store: shared.store.clone(),
        forwarder: shared.forwarder.clone(),
        links: shared.links.clone(),
        clock: shared.clock,
        settles: TaskTracker::new(),
        metrics: shared.metrics.clone(),
        observers: Observers {
            metrics: shared.metrics.clone(),
            capture,
            recorder: shared.recorder.clone(),
        },
        unclaimed_forwards: std::sync::atomic::AtomicU64::new(0),
        in_flight: Arc::new(Semaphore::new(cfg.server.max_in_flight)),
        budgets: FailureBudgets::default(),
        reads: ClientReads::default(),
        body_bytes: BodyBudget::new(cfg.server.max_body_bytes_in_flight, cfg.server.max_body),
        handed: shared.handed.clone(),
        wake: shared.wake.clone(),
        eviction: shared.eviction.clone(),
        queue_history: shared.queue_history.clone(),
        traces: shared.traces.clone(),
    }
}

/// What a reload (and the start's checks it shares) reads and swaps.
fn reloader(cfg: &Config, shared: &Shared) -> Reloader {
    Reloader {
        source: cfg.source.clone(),
        routing: shared.routing.clone(),
        store: shared.store.clone(),
        metrics: shared.metrics.clone(),
        backend: cfg.store.backend.clone(),
        listen: cfg.server.listen,
        admin_listen: cfg.server.admin_listen,
        telemetry: cfg.telemetry.clone(),
        tls: shared.tls.clone(),
        queue_history: shared.queue_history.clone(),
        stranded_seen: std::sync::Mutex::default(),
        wake: shared.wake.clone(),
        access: shared.access.clone(),
    }
}

/// The admin listener's context.
fn admin_context(cfg: &Config, shared: &Shared, reloader: Arc<Reloader>) -> AdminContext {
    AdminContext {
        routing: shared.routing.clone(),
        store: shared.store.clone(),
        metrics: shared.metrics.clone(),
        recorder: shared.recorder.clone(),
        eviction: shared.eviction.clone(),
        handed: shared.handed.clone(),
        wake: shared.wake.clone(),
        forwarder: shared.forwarder.clone(),
        links: shared.links.clone(),
        controls: shared.controls.clone(),
        queue_samples: shared.queue_samples.clone(),
        alerts: shared.alerts.clone(),
        pulls: crate::admin::pull::Consumers::default(),
        clock: shared.clock,
        reloader,
        live_streams: Arc::new(Semaphore::new(crate::admin::MAX_STREAMS)),
        server: cfg.server.clone(),
        access: shared.access.clone(),
        audit: shared.audit.clone(),
    }
}
