//! Whether Redis may evict what the gateway stores (`maxmemory-policy`).
//!
//! Under `allkeys-*` Redis may evict any key, queued events and their lines included:
//! an acknowledged event would never be delivered. Under `volatile-*` it may evict the
//! keys that expire: dedup records, claims and delivered records, so copies would be
//! forwarded or delivered again. The policy is read with `INFO memory` (which answers
//! where `CONFIG` is renamed or refused) at start, in `/readyz`, and, when Redis does
//! not answer at start, as soon as it does. On an evicting policy, queue routes are
//! refused (the gateway does not start; later, `/readyz` and every enqueue answer 503)
//! unless `store.allow_eviction = true`; a config with sync routes only gets a warning.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::Delivery;
use crate::state::Routing;
use crate::store::redis::policy_evicts;
use crate::store::{DedupStore as _, Store};

/// What the gateway last learnt of the store's eviction policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Not Redis: the memory and disk stores evict nothing.
    NotRedis,
    /// Redis has not answered yet.
    Unknown,
    /// Redis answers but refuses `INFO` (an ACL): not checked.
    Unreadable,
    /// The policy Redis reported.
    Known(String),
}

/// What an evicting policy costs, for messages.
pub(crate) fn cost(policy: &str) -> &'static str {
    if policy.starts_with("allkeys-") {
        "it may evict queued events, which would then never be delivered, and dedup records, so copies would be forwarded again"
    } else {
        "it may evict dedup records, claims and delivered records, so copies of an event would be forwarded or delivered again"
    }
}

fn has_queue_routes(routing: &Routing) -> bool {
    routing
        .routes
        .values()
        .any(|r| r.delivery == Delivery::Queue)
}

/// What the gateway last learnt of the store's eviction policy, shared by the
/// listeners (enqueues, `/readyz`) and the check that reads it again.
#[derive(Debug)]
pub(crate) struct Watch(ArcSwap<Policy>);

impl Watch {
    /// Nothing known yet: a Redis store has not answered; the others evict nothing.
    pub(crate) fn new(store: &Store) -> Self {
        Self(ArcSwap::from_pointee(match store {
            Store::Redis(_) => Policy::Unknown,
            Store::Memory(_) | Store::Disk(_) => Policy::NotRedis,
        }))
    }

    /// Why queue routes are refused now, if they are: the config has some, does not set
    /// `store.allow_eviction`, and Redis's policy evicts.
    pub(crate) fn refusal(&self, routing: &Routing) -> Option<String> {
        match self.refusal_or_unknown(routing) {
            Some((why, /* known */ true)) => Some(why),
            _ => None,
        }
    }

    /// As [`Self::refusal`], and also while the policy is not known yet (Redis
    /// has not answered since the start): `(why, known)`. A queue route that fails
    /// closed waits for the policy; one with `on_error = "forward"` follows its choice.
    pub(crate) fn refusal_or_unknown(&self, routing: &Routing) -> Option<(String, bool)> {
        if routing.store_cfg.allow_eviction || !has_queue_routes(routing) {
            return None;
        }
        match &**self.0.load() {
            Policy::NotRedis | Policy::Unreadable => None,
            Policy::Unknown => Some((
                "the Redis maxmemory-policy is not known yet (the store has not answered since the start); queue routes wait for it".to_owned(),
                false,
            )),
            Policy::Known(p) if policy_evicts(p) => Some((
                format!(
                    "Redis maxmemory-policy is {p}: {}. Queue routes are refused: set maxmemory-policy noeviction on the Redis server, or set store.allow_eviction = true to serve them anyway",
                    cost(p)
                ),
                true,
            )),
            Policy::Known(_) => None,
        }
    }

    /// The evicting policy Redis reported last, if any (for `/readyz`).
    pub(crate) fn evicting_policy(&self) -> Option<String> {
        match &**self.0.load() {
            Policy::Known(p) if policy_evicts(p) => Some(p.clone()),
            _ => None,
        }
    }

    /// Reads the policy again and remembers it; a change is logged. A store that does
    /// not answer leaves what was known.
    pub(crate) async fn check(
        &self,
        store: &Store,
        routing: &Routing,
    ) -> Result<(), crate::store::StoreError> {
        let read =
            match tokio::time::timeout(Duration::from_secs(2), store.maxmemory_policy()).await {
                Ok(Some(r)) => r,
                Ok(None) => {
                    self.0.store(Arc::new(Policy::NotRedis));
                    return Ok(());
                }
                Err(_) => return Err(crate::store::StoreError::Timeout(Duration::from_secs(2))),
            };
        let now = match read {
            Ok(p) => Policy::Known(p),
            // INFO refused, yet the store answers: not checked, said once.
            Err(e) if store.ping().await.is_ok() => {
                if *self.0.load_full() != Policy::Unreadable {
                    tracing::warn!(error = %e, "cannot read the Redis maxmemory-policy (INFO memory was refused); eviction is not checked");
                }
                Policy::Unreadable
            }
            Err(e) => return Err(e),
        };
        let before = self.0.swap(Arc::new(now.clone()));
        if *before != now {
            match (&now, self.refusal(routing)) {
                (_, Some(why)) => tracing::error!("{why}"),
                (Policy::Known(p), None) if policy_evicts(p) => {
                    let why = if has_queue_routes(routing) {
                        "queue routes are served all the same (store.allow_eviction = true)"
                    } else {
                        "the routes are sync: evicted records cost duplicates, not loss"
                    };
                    tracing::warn!("Redis maxmemory-policy is {p}: {}; {why}", cost(p));
                }
                (Policy::Known(p), None) if matches!(*before, Policy::Known(_)) => {
                    tracing::info!("Redis maxmemory-policy is {p} again: it evicts nothing");
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The check at start: refuses to serve queue routes on an evicting policy (the error
/// says why and what to change). When Redis does not answer yet, the gateway starts and
/// a task reads the policy as soon as it does (queue routes answer 503 until then).
pub(crate) async fn at_start(
    watch: &Arc<Watch>,
    store: &Store,
    routing: &Arc<ArcSwap<Routing>>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    match watch.check(store, &routing.load()).await {
        Ok(()) => match watch.refusal(&routing.load()) {
            Some(why) => Err(anyhow::anyhow!("store: {why}")),
            None => Ok(()),
        },
        Err(e) => {
            tracing::warn!(error = %e, "the Redis maxmemory-policy could not be read at start; it is checked as soon as the store answers");
            let (watch, store, routing) = (watch.clone(), store.clone(), routing.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    if watch.check(&store, &routing.load()).await.is_ok() {
                        return;
                    }
                }
            });
            Ok(())
        }
    }
}
