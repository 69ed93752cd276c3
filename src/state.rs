//! What every subsystem reads: the routes and the settings a reload replaces
//! ([`Routing`], swapped whole), the routes whose queues may hold events
//! ([`QueueHistory`]), and the clock signed timestamps are checked against.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{Config, Delivery, Route, ServerConfig, StoreConfig};
pub use crate::time::Clock;

/// The part of the state a reload replaces: routes and the settings they use.
#[derive(Debug)]
pub struct Routing {
    /// By path, as requests find them.
    pub(crate) routes: HashMap<String, Arc<Route>>,
    /// The same routes by name, as the admin API finds them ([`Routing::route`]).
    by_name: HashMap<String, Arc<Route>>,
    pub(crate) server: ServerConfig,
    pub(crate) store_cfg: StoreConfig,
    /// `[[alerts]]`: where incidents are sent.
    pub(crate) alerts: Arc<Vec<crate::config::alerts::AlertTarget>>,
}

impl Routing {
    /// The route of this name.
    pub(crate) fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.by_name.get(name)
    }

    pub(crate) fn new(cfg: &Config) -> Self {
        let all: Vec<Arc<Route>> = cfg.routes.iter().map(|r| Arc::new(r.clone())).collect();
        Self {
            routes: all.iter().map(|r| (r.path.clone(), r.clone())).collect(),
            by_name: all.into_iter().map(|r| (r.name.clone(), r)).collect(),
            server: cfg.server.clone(),
            store_cfg: cfg.store.clone(),
            alerts: Arc::new(cfg.alerts.clone()),
        }
    }
}

/// Routes whose destinations' queues may hold their events: every queue route of a
/// config this process ran, and every route with a stored queue at start. A sync
/// claim on one of them first looks for the event in those queues (`had_queue`): a
/// route a reload switched back to sync must not forward a copy of an event its
/// queue holds. Read on every sync delivery: swapped whole (rarely), never locked.
#[derive(Debug)]
pub struct QueueHistory(ArcSwap<HashSet<String>>);

impl QueueHistory {
    /// The queue routes of the config the gateway starts with.
    pub(crate) fn new(cfg: &Config) -> Self {
        Self(ArcSwap::from_pointee(queue_routes(cfg.routes.iter())))
    }

    /// Remembers the queue routes among `routes` (a reload's).
    pub(crate) fn note_queue_routes<'a>(&self, routes: impl Iterator<Item = &'a Route>) {
        self.remember(queue_routes(routes));
    }

    /// Remembers these routes (at start: those with a stored queue).
    pub(crate) fn remember(&self, names: impl IntoIterator<Item = String>) {
        let names: Vec<String> = names.into_iter().collect();
        self.0.rcu(|history| {
            let mut history = (**history).clone();
            history.extend(names.iter().cloned());
            history
        });
    }

    /// Whether `route`'s destinations' queues may hold its events.
    pub(crate) fn had_queue(&self, route: &str) -> bool {
        self.0.load().contains(route)
    }
}

fn queue_routes<'a>(routes: impl Iterator<Item = &'a Route>) -> HashSet<String> {
    routes
        .filter(|r| r.delivery == Delivery::Queue)
        .map(|r| r.name.clone())
        .collect()
}
