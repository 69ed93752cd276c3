//! What every subsystem reads: the routes and the settings a reload replaces
//! ([`Routing`], swapped whole), and the clock signed timestamps are checked against.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, Route, ServerConfig, StoreConfig};
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
}

impl Routing {
    /// The route of this name.
    pub(crate) fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.by_name.get(name)
    }

    /// A destination's queue in the configured store.
    pub(crate) fn queue<'a>(
        &'a self,
        route: &'a str,
        destination: &'a str,
    ) -> crate::store::QueueRef<'a> {
        crate::store::QueueRef::new(&self.store_cfg.key_prefix, route, destination)
    }

    pub(crate) fn new(cfg: &Config) -> Self {
        let all: Vec<Arc<Route>> = cfg.routes.iter().map(|r| Arc::new(r.clone())).collect();
        Self {
            routes: all.iter().map(|r| (r.path.clone(), r.clone())).collect(),
            by_name: all.into_iter().map(|r| (r.name.clone(), r)).collect(),
            server: cfg.server.clone(),
            store_cfg: cfg.store.clone(),
        }
    }
}
