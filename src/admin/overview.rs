//! `GET /overview`: each route's requests by outcome in the last hour (from the
//! delivery log) and its queues' depth — the inspector's routes page.

use std::sync::Arc;

use super::AdminContext;
use super::api::{LogOverview, Overview, QueueOverview, RouteOverview};
use super::exchange::AdminAnswer;
use crate::config::{Delivery, Route};
use crate::store::QueueStore as _;
use crate::store::log::minute_of;

/// `GET /overview`.
pub(super) async fn overview(state: &AdminContext) -> AdminAnswer {
    let routes = state.recorder.route_names();
    let now = crate::time::now_ms();
    let counts = match state
        .recorder
        .log
        .counts(minute_of(now).saturating_sub(59), &routes)
        .await
    {
        Ok(c) => c,
        Err(e) => return super::exchange::unavailable(&e),
    };
    let routing = state.routing();
    let mut configured: Vec<&Arc<Route>> = routing.routes.values().collect();
    configured.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for r in configured {
        let last_hour = counts
            .iter()
            .filter(|((route, _), _)| *route == r.name)
            .map(|((_, outcome), n)| (outcome.clone(), *n))
            .collect();
        let mut queues = Vec::new();
        if r.delivery == Delivery::Queue && state.store.keeps_queues() {
            for d in &r.destinations {
                let q = routing.queue(&r.name, &d.name);
                match state.store.depth(&q).await {
                    Ok(depth) => queues.push(QueueOverview {
                        destination: d.name.clone(),
                        depth: depth.waiting,
                        dead: depth.dead,
                        oldest_undelivered_age_ms: depth
                            .oldest_received_ms
                            .map(|t| now.saturating_sub(t)),
                    }),
                    Err(e) => return super::exchange::unavailable(&e),
                }
            }
        }
        out.push(RouteOverview {
            route: r.name.clone(),
            provider: r.verifier.preset().name().to_owned(),
            delivery: r.delivery,
            last_hour,
            queues,
            destinations: super::probes::reaches(state, &routing, true)
                .into_iter()
                .filter(|d| d.route == r.name)
                .collect(),
        });
    }
    AdminAnswer::ok(&Overview {
        routes: out,
        log: LogOverview {
            enabled: state.recorder.cfg.enabled,
        },
    })
}
