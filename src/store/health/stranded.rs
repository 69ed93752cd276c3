//! Queues the store holds that the config does not name: a route or destination removed
//! or renamed while it still had undelivered events, or a changed `store.key_prefix`.
//! Nothing delivers such events, so a reload that would strand them is refused (the
//! message names the queues and their counts); at start, and after each reload, those
//! already stranded are counted by `hookgate_queue_stranded{queue}` and logged.

use std::collections::HashSet;
use std::time::Duration;

use crate::config::{Config, Delivery, Route};
use crate::state::Routing;
use crate::store::{Depth, QueueRef, QueueStore as _, Store, StoreError};

/// A stored queue that holds undelivered events.
#[derive(Debug, Clone)]
pub(crate) struct Stranded {
    /// `<route>` or `<route>/<destination>`.
    pub(crate) queue: String,
    pub(crate) depth: Depth,
}

impl Stranded {
    /// Waiting and dead events.
    pub(crate) fn undelivered(&self) -> u64 {
        self.depth.waiting + self.depth.dead
    }

    /// One line for logs, `hookgate check` and reload refusals.
    pub(crate) fn describe(&self) -> String {
        format!(
            "queue {} holds {} undelivered event(s) ({} waiting, {} dead)",
            self.queue,
            self.undelivered(),
            self.depth.waiting,
            self.depth.dead
        )
    }
}

/// The `(route, destination)` queues a config names (every delivery mode: a route a
/// reload switched to sync still drains its queues).
fn named<'a>(routes: impl IntoIterator<Item = &'a Route>) -> HashSet<(String, String)> {
    routes
        .into_iter()
        .flat_map(|r| {
            r.destinations
                .iter()
                .map(|d| (r.name.clone(), d.name.clone()))
        })
        .collect()
}

/// How many undelivered events a queue holds.
async fn depth_of(
    store: &Store,
    prefix: &str,
    route: &str,
    dest: &str,
) -> Result<Stranded, StoreError> {
    let q = QueueRef::new(prefix, route, dest);
    let depth = store.depth(&q).await?;
    Ok(Stranded {
        queue: q.name().into_owned(),
        depth,
    })
}

/// The queues stored under `prefix` that `routes` do not name and that hold events.
pub(crate) async fn find<'a>(
    store: &Store,
    prefix: &str,
    routes: impl IntoIterator<Item = &'a Route>,
) -> Result<Vec<Stranded>, StoreError> {
    let named = named(routes);
    let mut out = Vec::new();
    for (route, dest) in store.stored_queues(prefix).await? {
        if named.contains(&(route.clone(), dest.clone())) {
            continue;
        }
        let s = depth_of(store, prefix, &route, &dest).await?;
        if s.undelivered() > 0 {
            out.push(s);
        }
    }
    out.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(out)
}

/// Why a reload from `current` to `new` must be refused: a changed key prefix, or a
/// queue the running config names, the new one does not, and that holds events.
pub(crate) async fn reload_refusals(store: &Store, current: &Routing, new: &Config) -> Vec<String> {
    let old_prefix = &current.store_cfg.key_prefix;
    if new.store.key_prefix != *old_prefix {
        return vec![format!(
            "store.key_prefix changed from {old_prefix:?} to {:?}: every queued event and the dedup window stay under the old prefix (nothing would deliver those events, and copies of recent events would be accepted again). A reload keeps the running prefix; restart deliberately if the change is meant",
            new.store.key_prefix
        )];
    }
    let kept = named(&new.routes);
    let mut out = Vec::new();
    for route in current.routes.values() {
        let gone = if new.routes.iter().any(|r| r.name == route.name) {
            "the new config does not name destination"
        } else {
            "the new config has no route of that name, so nothing delivers destination"
        };
        for d in &route.destinations {
            if kept.contains(&(route.name.clone(), d.name.clone())) {
                continue;
            }
            let checked = tokio::time::timeout(
                Duration::from_secs(5),
                depth_of(store, old_prefix, &route.name, &d.name),
            )
            .await;
            match checked {
                Ok(Ok(s)) if s.undelivered() == 0 => {}
                Ok(Ok(s)) => out.push(format!(
                    "routes.{}: {gone} {} and its {}: purge them first (hookgate events purge --route {} --destination {} --all-dead, or --event-id for waiting ones), or keep the destination",
                    route.name,
                    d.name,
                    s.describe(),
                    route.name,
                    d.name
                )),
                // A sync route that never queued has nothing to lose; a queue route's
                // events cannot be vouched for.
                _ if route.delivery != Delivery::Queue => {}
                Ok(Err(e)) => out.push(format!(
                    "routes.{}: {gone} {}, and whether its queue holds events could not be read ({e}); reload again when the store answers",
                    route.name, d.name
                )),
                Err(_) => out.push(format!(
                    "routes.{}: {gone} {}, and reading its queue timed out; reload again when the store answers",
                    route.name, d.name
                )),
            }
        }
    }
    out
}
