//! Reloading the config while the gateway runs (SIGHUP, the admin listener's `POST
//! /reload`): the new file is checked, then routes, secrets, upstreams, certificates
//! and the admin listener's tokens are swapped at once. The checks a reload and the start share live
//! here too: stored queues no route names (`hookgate_queue_stranded`), the routes
//! whose queues may hold events ([`QueueHistory`]), and the lines dead events hold
//! under `on_dead = "skip"`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::Notify;

use crate::config::{self, Backend, ConfigErrors};
use crate::observe::metrics::{Metrics, QueueLabel, ResultLabel};
use crate::state::{QueueHistory, Routing};
use crate::store::Store;
use crate::tls;

/// What a reload reads and swaps. Built in `app.rs`; the admin listener and the
/// SIGHUP handler hold it.
#[derive(Debug)]
pub struct Reloader {
    /// The config file.
    pub(crate) source: PathBuf,
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// The store backend and the listen addresses as the gateway started: a reload
    /// does not change them (a warning says so).
    pub(crate) backend: Backend,
    pub(crate) listen: SocketAddr,
    pub(crate) admin_listen: Option<SocketAddr>,
    /// `[telemetry]` as the gateway started: the exporter is set at start.
    pub(crate) telemetry: crate::config::TelemetryConfig,
    /// The public listener's TLS config (shared with `ingress::Ingress`): new
    /// certificates are swapped in.
    pub(crate) tls: Arc<ArcSwapOption<tokio_rustls::rustls::ServerConfig>>,
    pub(crate) queue_history: Arc<QueueHistory>,
    /// The queues `hookgate_queue_stranded` counted last (`stranded.rs`), so that one no
    /// longer stranded is set back to 0.
    pub(crate) stranded_seen: Mutex<HashSet<String>>,
    /// Wakes the delivery workers: lines dead events held were released.
    pub(crate) wake: Arc<Notify>,
    /// The admin listener's tokens and roles: swapped with the routes.
    pub(crate) access: Arc<ArcSwap<crate::admin::Access>>,
}

impl Reloader {
    /// The current routing snapshot.
    fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    /// Re-reads the config file and swaps routes, secrets and upstreams atomically.
    /// An invalid file keeps the running config; the error says why. The listeners
    /// and the store backend are not changed by a reload (a warning says so). A reload
    /// that would strand stored events is refused too (`stranded.rs`): a changed
    /// `store.key_prefix`, or a route or destination removed (or renamed) while its
    /// queue still holds events.
    pub(crate) async fn reload(&self) -> Result<usize, ConfigErrors> {
        let result = match config::load_for_reload(&self.source) {
            Ok(cfg) => {
                let refused = crate::store::health::stranded::reload_refusals(
                    &self.store,
                    &self.routing(),
                    &cfg,
                )
                .await;
                let mut refused = refused;
                // A listener that asks for a token is not opened by a reload: a file
                // that lost its tokens would let anyone who reaches it operate.
                if !self.access.load().is_open() && !cfg.server.admin_protected() {
                    refused.push(format!(
                        "{}: server.admin_token and server.admin_tokens: the running admin listener asks for a token and the new config sets none; a reload does not open it (restart to)",
                        self.source.display()
                    ));
                }
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
        if cfg.server.listen != self.listen || cfg.server.admin_listen != self.admin_listen {
            tracing::warn!("reload: listen addresses changed; they take effect only on restart");
        }
        if cfg.telemetry != self.telemetry {
            tracing::warn!("reload: [telemetry] changed; it takes effect only on restart");
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
        if self.admin_listen.is_some() {
            self.access
                .store(Arc::new(crate::admin::Access::of(&cfg.server)));
        }
        self.queue_history.note_queue_routes(cfg.routes.iter());
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

    /// Adds the routes of the queues the store holds (at start: a route switched to
    /// sync while the gateway was stopped).
    pub(crate) async fn note_stored_queues(&self) {
        let prefix = self.routing().store_cfg.key_prefix.clone();
        let stored =
            tokio::time::timeout(Duration::from_secs(10), self.store.stored_queues(&prefix)).await;
        if let Ok(Ok(stored)) = stored {
            self.queue_history
                .remember(stored.into_iter().map(|(route, _)| route));
        }
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
            self.wake.notify_waiters();
        }
    }

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
