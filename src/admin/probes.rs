//! What probes and scrapers call: `GET /healthz` (the process is alive), `GET /readyz`
//! (the store answers, and evicts nothing queue routes need) and `GET /metrics`. The
//! first two need no token.

use std::time::Duration;

use super::AdminContext;
use super::api::{Evicting, Ready, StatusBody};
use super::exchange::AdminAnswer;
use crate::store::DedupStore as _;

/// `GET /healthz`.
pub(super) fn healthz() -> AdminAnswer {
    AdminAnswer::ok(&StatusBody::new("ok"))
}

/// `GET /readyz`: the store answers a PING, and evicts nothing queue routes need.
pub(super) async fn readyz(state: &AdminContext) -> AdminAnswer {
    let ping = tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await;
    match ping {
        Ok(Ok(())) => {}
        // The store's own error text goes to the log, not into an answer.
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: the store did not answer its ping");
            return store_unavailable();
        }
        Err(_) => {
            tracing::warn!("readiness: the store's ping timed out");
            return store_unavailable();
        }
    }
    // The eviction policy, read again: Redis's config may change at runtime. A failed
    // read keeps what was known.
    let routing = state.routing();
    if let Err(e) = state.eviction.check(&state.store, &routing).await {
        tracing::warn!(error = %e, "readiness: the Redis maxmemory-policy could not be read");
    }
    match (
        state.eviction.refusal(&routing),
        state.eviction.evicting_policy(),
    ) {
        (Some(_), policy) => AdminAnswer::Unavailable(super::api::to_json(&Evicting {
            status: "the store may evict keys: queue routes are refused".into(),
            maxmemory_policy: policy,
            fix: "set maxmemory-policy noeviction, or store.allow_eviction = true".into(),
        })),
        (None, policy) => AdminAnswer::ok(&Ready {
            status: "ready".into(),
            store: state.store.kind().into(),
            warning: policy
                .as_deref()
                .map(|p| crate::store::health::eviction::cost(p).to_owned()),
            maxmemory_policy: policy,
            destinations: reaches(state, &routing, false),
        }),
    }
}

/// Each destination's server as last seen (only those of other kinds than HTTP unless
/// `all`), by route and destination name. Read from what the background check and
/// the attempts saw: a probe never waits on a destination's server.
pub(super) fn reaches(
    state: &AdminContext,
    routing: &crate::state::Routing,
    all: bool,
) -> Vec<super::api::DestinationReach> {
    let mut routes: Vec<_> = routing.routes.values().collect();
    routes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for r in routes {
        for d in &r.destinations {
            if !all && d.target.server().is_none() {
                continue;
            }
            // A link not made yet (its server not tried) shows as unknown.
            let reach = state.links.existing(&r.name, &d.name).map(|l| l.reach());
            out.push(super::api::DestinationReach {
                route: r.name.clone(),
                destination: d.name.clone(),
                kind: d.target.kind().into(),
                target: d.target.shown(),
                reachable: reach.as_ref().and_then(|r| r.reachable),
                error: reach.as_ref().and_then(|r| r.error.clone()),
                seen_at_ms: reach.map(|r| r.at_ms).filter(|t| *t > 0),
                paused: None,
            });
        }
    }
    out
}

fn store_unavailable() -> AdminAnswer {
    AdminAnswer::Unavailable(super::api::to_json(&StatusBody::new("store unavailable")))
}

/// `GET /metrics`, the queues' gauges read first.
pub(super) async fn metrics(state: &AdminContext) -> AdminAnswer {
    crate::delivery::gauges(&state.routing(), &state.store, &state.metrics).await;
    AdminAnswer::Metrics(state.metrics.render())
}
