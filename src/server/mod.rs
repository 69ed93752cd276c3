//! The gateway's shared state, [`AppState`]: what the public listener's pipeline and
//! the admin listener read (the routes a reload swaps, the store, the limits, the
//! observers), built once from the config, and the operations on it that are the
//! gateway's own: reload, secrets handed over in a set-up handshake, stranded queues.
//! The delivery workers do not read it: they get a [`crate::delivery::WorkerContext`].

mod admin;
pub use crate::ingress::listen;
pub use crate::state::{Clock, Routing};
use crate::tls;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use arc_swap::ArcSwap;

use crate::config::{self, Backend, Config, ConfigErrors, Route, ServerConfig};
use crate::forward::Forwarder;
use crate::observe::capture::Capture;
use crate::observe::metrics::{Metrics, QueueLabel, ResultLabel};
use crate::store::Store;

/// The delivery log's live streams open at once at most: readers that hold a stream
/// open cannot take the admin listener's slots.
pub(crate) const MAX_STREAMS: usize = 16;

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub struct AppState {
    /// Swapped whole on reload; a request keeps the snapshot it started with, so
    /// in-flight deliveries are unaffected.
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    /// Settings fixed at start: the listener and the store are not reloaded.
    pub(crate) server: ServerConfig,
    pub(crate) store: Store,
    pub(crate) backend: Backend,
    pub(crate) forwarder: Forwarder,
    pub(crate) clock: Clock,
    /// Settle steps (complete or release) run as tracked tasks: they outlive a
    /// provider that hangs up, and shutdown waits for them.
    pub(crate) settles: TaskTracker,
    /// The config file, for reloads.
    pub(crate) source: PathBuf,
    pub metrics: Arc<Metrics>,
    /// Where each request's record goes at its end: metrics, capture, delivery log.
    pub(crate) observers: crate::observe::Observers,
    /// Deliveries forwarded without a claim because the store was down.
    pub unclaimed_forwards: AtomicU64,
    /// Bounds the deliveries handled at once (`server.max_in_flight`), from the end
    /// of the body to the end of the forward and its settle.
    pub(crate) in_flight: Arc<tokio::sync::Semaphore>,
    /// Budgets of failed verifications per route and client, on routes whose
    /// verification is expensive.
    pub(crate) budgets: crate::pipeline::limits::FailureBudgets,
    /// Bodies being received, per client (`server.max_reads_per_client`).
    pub(crate) reads: crate::pipeline::limits::ClientReads,
    /// Open public connections by client address (`server.max_connections_per_client`).
    pub(crate) connections: crate::ingress::limits::ClientConnections,
    /// Body bytes being received, over every client and per client
    /// (`server.max_body_bytes_in_flight`).
    pub(crate) body_bytes: crate::pipeline::limits::BodyBudget,
    /// The TLS config of the public listener, swapped on reload (new certificates).
    pub(crate) tls: arc_swap::ArcSwapOption<tokio_rustls::rustls::ServerConfig>,
    /// Signing secrets providers handed over in their set-up handshake, by route, for
    /// the admin listener's `GET /handshakes/<route>` (never logged).
    pub(crate) handed_secrets: std::sync::Mutex<HashMap<String, HandedSecret>>,
    /// Wakes the delivery workers of queue routes: an event was queued, or an attempt
    /// ended and its slot is free.
    pub(crate) deliveries: Arc<tokio::sync::Notify>,
    /// Redis's `maxmemory-policy` as last read (`eviction.rs`): queue routes are refused
    /// while it evicts, unless `store.allow_eviction`.
    pub(crate) eviction: Arc<crate::store::health::eviction::Watch>,
    /// The queues `hookgate_queue_stranded` counted last (`stranded.rs`), so that one no
    /// longer stranded is set back to 0.
    pub(crate) stranded_seen: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The delivery log's recorder (`recorder.rs`; the admin API in `deliveries.rs`).
    pub(crate) recorder: Arc<crate::observe::recorder::Recorder>,
    /// Routes whose destinations' queues may hold their events: every queue route of
    /// a config this process ran, and every route with a stored queue at start. A
    /// sync claim on one of them first looks for the event in those queues
    /// ([`Self::had_queue`]): a route a reload switched back to sync must not forward
    /// a copy of an event its queue holds.
    /// Read on every sync delivery: swapped whole (rarely), never locked.
    pub(crate) queue_history: ArcSwap<std::collections::HashSet<String>>,
    /// The delivery log's live streams open at once (`MAX_STREAMS`):
    /// readers that hold a stream open cannot take the admin listener's slots.
    pub(crate) live_streams: Arc<tokio::sync::Semaphore>,
}

/// A secret a provider handed over during set-up, and when (Unix seconds).
#[derive(Debug, Clone)]
pub(crate) struct HandedSecret {
    pub secret: crate::secret::Secret,
    pub received_at: u64,
}

/// What became of a secret a provider handed over in a set-up request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// The first on this route: kept for the admin listener.
    Kept,
    /// One is already held (until an operator clears it): refused.
    AlreadyHeld,
    /// The route has a configured secret: refused.
    RouteHasSecret,
}

impl Handed {
    fn label(self) -> &'static str {
        match self {
            Self::Kept => "kept",
            Self::AlreadyHeld => "refused_already_held",
            Self::RouteHasSecret => "refused_route_has_secret",
        }
    }
}

impl AppState {
    /// Keeps a signing secret a provider handed over in its set-up request, for the
    /// admin listener — only the first, and only on a route with no configured
    /// secret: the handshake is unauthenticated, so a later one may be anyone's. The
    /// log says where to read it, never what it is; every outcome is counted.
    pub(crate) fn keep_handed_secret(
        &self,
        route: &str,
        configured: bool,
        secret: crate::secret::Secret,
        now: u64,
    ) -> Handed {
        let result = {
            let mut held = self
                .handed_secrets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if configured {
                Handed::RouteHasSecret
            } else if held.contains_key(route) {
                Handed::AlreadyHeld
            } else {
                held.insert(
                    route.to_owned(),
                    HandedSecret {
                        secret,
                        received_at: now,
                    },
                );
                Handed::Kept
            }
        };
        self.metrics
            .handed_secrets
            .get_or_create(&crate::observe::metrics::RouteResult {
                route: route.to_owned(),
                result: result.label().to_owned(),
            })
            .inc();
        match result {
            Handed::Kept => self.log_handed_secret(route),
            Handed::AlreadyHeld => tracing::warn!(
                route,
                "refused a set-up request handing over another signing secret: the route already holds one (clear it with DELETE /handshakes/{route} on the admin listener to accept a new one)"
            ),
            Handed::RouteHasSecret => tracing::warn!(
                route,
                "refused a set-up request handing over a signing secret: the route has a configured secret"
            ),
        }
        result
    }

    /// Forgets the handed-over secret of a route (the operator's `DELETE
    /// /handshakes/<route>`), so the next set-up request may hand over a new one.
    pub(crate) fn clear_handed_secret(&self, route: &str) -> bool {
        self.handed_secrets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(route)
            .is_some()
    }

    fn log_handed_secret(&self, route: &str) {
        if self.server.admin_listen.is_some() {
            tracing::warn!(
                route,
                "the provider handed over its signing secret in a set-up request; read it from the admin listener (GET /handshakes/{route}) and add it to the route's secrets"
            );
        } else {
            tracing::warn!(
                route,
                "the provider handed over its signing secret in a set-up request, but no admin listener is configured to read it from: set server.admin_listen and repeat the provider's set-up"
            );
        }
    }
}

impl AppState {
    /// Builds the state on a given store.
    pub fn with_store(cfg: &Config, store: Store, clock: Clock) -> anyhow::Result<Self> {
        let mut metrics = Metrics::new();
        metrics.register_store(&store.metrics());
        let routing = Arc::new(ArcSwap::from_pointee(Routing::new(cfg)));
        let recorder = Arc::new(crate::observe::recorder::Recorder::new(
            cfg,
            &store,
            &mut metrics,
            routing.clone(),
        )?);
        let eviction = Arc::new(crate::store::health::eviction::Watch::new(&store));
        let capture = match &cfg.capture {
            Some(c) => Some(
                Capture::start(c, cfg.store.min_free_space, metrics.captures.clone())
                    .map(|cap| cap.with_replays(c.replays))
                    .map_err(|e| anyhow::anyhow!("capture dir {}: {e}", c.dir.display()))?,
            ),
            None => None,
        };
        let metrics = Arc::new(metrics);
        Ok(Self {
            observers: crate::observe::Observers {
                metrics: metrics.clone(),
                capture,
                recorder: recorder.clone(),
            },
            routing,
            server: cfg.server.clone(),
            store,
            backend: cfg.store.backend.clone(),
            forwarder: Forwarder::new()?,
            clock,
            settles: TaskTracker::new(),
            source: cfg.source.clone(),
            metrics,
            in_flight: Arc::new(tokio::sync::Semaphore::new(cfg.server.max_in_flight)),
            budgets: crate::pipeline::limits::FailureBudgets::default(),
            reads: crate::pipeline::limits::ClientReads::default(),
            connections: crate::ingress::limits::ClientConnections::default(),
            body_bytes: crate::pipeline::limits::BodyBudget::new(
                cfg.server.max_body_bytes_in_flight,
                cfg.server.max_body,
            ),
            tls: arc_swap::ArcSwapOption::new(match &cfg.server.tls {
                Some(t) => {
                    Some(tls::server_config(&t.cert, &t.key).map_err(|e| anyhow::anyhow!(e))?)
                }
                None => None,
            }),
            unclaimed_forwards: AtomicU64::new(0),
            handed_secrets: std::sync::Mutex::default(),
            deliveries: Arc::new(tokio::sync::Notify::new()),
            eviction,
            stranded_seen: std::sync::Mutex::default(),
            recorder,
            live_streams: Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS)),
            queue_history: ArcSwap::from_pointee(
                cfg.routes
                    .iter()
                    .filter(|r| r.delivery == config::Delivery::Queue)
                    .map(|r| r.name.clone())
                    .collect(),
            ),
        })
    }

    /// The dedup store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// What the delivery log counts against `log.max_size` now.
    pub async fn delivery_log_size(&self) -> Result<u64, crate::store::StoreError> {
        self.recorder.log.size(&self.recorder.route_names()).await
    }

    /// What the delivery workers use of the gateway (`delivery/`).
    pub fn worker_context(&self) -> crate::delivery::WorkerContext {
        crate::delivery::WorkerContext {
            routing: self.routing.clone(),
            store: self.store.clone(),
            forwarder: self.forwarder.clone(),
            clock: self.clock,
            metrics: self.metrics.clone(),
            wake: self.deliveries.clone(),
            shutdown_grace: self.server.shutdown_grace,
        }
    }

    /// The current routing snapshot.
    pub fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// Re-reads the config file and swaps routes, secrets and upstreams atomically.
    /// An invalid file keeps the running config; the error says why. The listeners
    /// and the store backend are not changed by a reload (a warning says so). A reload
    /// that would strand stored events is refused too (`stranded.rs`): a changed
    /// `store.key_prefix`, or a route or destination removed (or renamed) while its
    /// queue still holds events.
    pub async fn reload(&self) -> Result<usize, ConfigErrors> {
        let result = match config::load(&self.source) {
            Ok(cfg) => {
                let refused = crate::store::health::stranded::reload_refusals(
                    &self.store,
                    &self.routing(),
                    &cfg,
                )
                .await;
                if refused.is_empty() {
                    Ok(cfg)
                } else {
                    Err(ConfigErrors(refused))
                }
            }
            Err(e) => Err(e),
        };
        let cfg = match result {
            Ok(cfg) => cfg,
            Err(e) => {
                self.metrics
                    .reloads
                    .get_or_create(&ResultLabel {
                        result: "error".into(),
                    })
                    .inc();
                self.metrics.config_ok.set(0);
                tracing::error!(errors = %e, "reload refused; the running config stays");
                return Err(e);
            }
        };
        if cfg.store.backend != self.backend {
            tracing::warn!("reload: the store backend changed; it takes effect only on restart");
        }
        if cfg.server.listen != self.server.listen
            || cfg.server.admin_listen != self.server.admin_listen
        {
            tracing::warn!("reload: listen addresses changed; they take effect only on restart");
        }
        match (&cfg.server.tls, self.tls.load().is_some()) {
            (Some(t), true) => match tls::server_config(&t.cert, &t.key) {
                Ok(c) => self.tls.store(Some(c)),
                Err(e) => {
                    tracing::error!(error = %e, "reload: the new certificate was refused; the old one stays")
                }
            },
            (None, false) => {}
            _ => tracing::warn!("reload: turning TLS on or off takes effect only on restart"),
        }
        let n = cfg.routes.len();
        self.note_queue_routes(cfg.routes.iter());
        self.routing.store(Arc::new(Routing::new(&cfg)));
        self.metrics
            .reloads
            .get_or_create(&ResultLabel {
                result: "ok".into(),
            })
            .inc();
        self.metrics.config_ok.set(1);
        tracing::info!(routes = n, "config reloaded");
        self.count_stranded().await;
        self.release_blocked_lines().await;
        Ok(n)
    }

    /// Remembers the queue routes among `routes` (see [`AppState::queue_history`]).
    fn note_queue_routes<'a>(&self, routes: impl Iterator<Item = &'a Route>) {
        let names: Vec<String> = routes
            .filter(|r| r.delivery == config::Delivery::Queue)
            .map(|r| r.name.clone())
            .collect();
        self.remember_queues(names);
    }

    /// Adds the routes of the queues the store holds (at start: a route switched to
    /// sync while the gateway was stopped).
    pub(crate) async fn note_stored_queues(&self) {
        let prefix = self.routing().store_cfg.key_prefix.clone();
        let stored =
            tokio::time::timeout(Duration::from_secs(10), self.store.stored_queues(&prefix)).await;
        if let Ok(Ok(stored)) = stored {
            self.remember_queues(stored.into_iter().map(|(route, _)| route).collect());
        }
    }

    fn remember_queues(&self, names: Vec<String>) {
        self.queue_history.rcu(|history| {
            let mut history = (**history).clone();
            history.extend(names.iter().cloned());
            history
        });
    }

    /// Whether `route`'s destinations' queues may hold its events.
    pub(crate) fn had_queue(&self, route: &str) -> bool {
        self.queue_history.load().contains(route)
    }

    /// For every destination with `order_by` and `on_dead = "skip"`: dead events that
    /// still hold their key's line (they died under `on_dead = "block"`) give it to the
    /// next event, as a skip would have. Run at start and after each reload.
    pub(crate) async fn release_blocked_lines(&self) {
        use crate::store::QueueStore as _;
        if !self.store.keeps_queues() {
            return;
        }
        let routing = self.routing();
        let mut released = 0;
        for route in routing.routes.values() {
            for d in &route.destinations {
                if d.order_by.is_none() || d.on_dead != crate::queue::OnDead::Skip {
                    continue;
                }
                let q = routing.queue(&route.name, &d.name);
                match self.store.release_blocked(&q).await {
                    Ok(0) => {}
                    Ok(n) => {
                        released += n;
                        tracing::info!(route = %route.name, destination = %d.name, events = n, "on_dead = \"skip\": dead events gave their keys' lines to the next events");
                    }
                    Err(e) => {
                        tracing::warn!(route = %route.name, destination = %d.name, error = %e, "could not release the lines dead events hold (on_dead = \"skip\"); tried again at the next reload or start");
                    }
                }
            }
        }
        if released > 0 {
            self.deliveries.notify_waiters();
        }
    }
}

impl AppState {
    /// Counts the stranded queues into `hookgate_queue_stranded` (zero for those that
    /// are no longer) and logs each. Bounded in time; a store that does not answer
    /// leaves the gauge as it was.
    pub(crate) async fn count_stranded(&self) {
        let routing = self.routing();
        let prefix = &routing.store_cfg.key_prefix;
        let found = tokio::time::timeout(
            Duration::from_secs(10),
            crate::store::health::stranded::find(
                &self.store,
                prefix,
                routing.routes.values().map(|r| &**r),
            ),
        )
        .await;
        let found = match found {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not look for stored queues that no route names");
                return;
            }
            Err(_) => {
                tracing::warn!("looking for stored queues that no route names timed out");
                return;
            }
        };
        let gauge = &self.metrics.queue_stranded;
        let mut counted = self
            .stranded_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for old in counted.drain() {
            gauge.get_or_create(&QueueLabel { queue: old }).set(0);
        }
        for s in &found {
            tracing::warn!(
                queue = %s.queue,
                waiting = s.depth.waiting,
                dead = s.depth.dead,
                "{}, but no route or destination of the config names it: nothing delivers them (add the route or destination back, or purge them)",
                s.describe()
            );
            gauge
                .get_or_create(&QueueLabel {
                    queue: s.queue.clone(),
                })
                .set(i64::try_from(s.undelivered()).unwrap_or(i64::MAX));
            counted.insert(s.queue.clone());
        }
    }
}
