//! `GET /overview`: each route's requests by outcome in the last hour (from the
//! delivery log) and its queues' depth — the inspector's routes page; and
//! `GET /alerts`: the open incidents.

use std::sync::Arc;

use super::AdminContext;
use super::api::{
    ConsumerView, IncidentView, Incidents, LogOverview, Overview, PauseView, QueueOverview,
    RouteOverview,
};
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
                let found = match state.store.depth(&q).await {
                    Ok(depth) => crate::delivery::control::load(&state.store, &q, now)
                        .await
                        .map(|c| (depth, c)),
                    Err(e) => Err(e),
                };
                match found {
                    Ok((depth, c)) => queues.push(QueueOverview {
                        destination: d.name.clone(),
                        depth: depth.waiting,
                        dead: depth.dead,
                        oldest_undelivered_age_ms: depth
                            .oldest_received_ms
                            .map(|t| now.saturating_sub(t)),
                        paused: c.paused_at(now).map(PauseView::of),
                        consumers: state
                            .pulls
                            .of(&q.name())
                            .into_iter()
                            .map(|(name, at)| ConsumerView {
                                name,
                                last_lease: super::api::rfc3339(at),
                            })
                            .collect(),
                    }),
                    Err(e) => return super::exchange::unavailable(&e),
                }
            }
        }
        let destinations = super::probes::reaches(state, &routing, true)
            .into_iter()
            .filter(|d| d.route == r.name)
            .map(|mut d| {
                d.paused = queues
                    .iter()
                    .find(|q| q.destination == d.destination)
                    .and_then(|q| q.paused.clone());
                d
            })
            .collect();
        out.push(RouteOverview {
            route: r.name.clone(),
            provider: r.verifier.preset().name().to_owned(),
            delivery: r.delivery,
            last_hour,
            queues,
            destinations,
        });
    }
    AdminAnswer::ok(&Overview {
        routes: out,
        log: LogOverview {
            enabled: state.recorder.cfg.enabled,
        },
    })
}

/// `GET /alerts`: the open incidents, oldest first.
pub(super) async fn alerts(state: &AdminContext) -> AdminAnswer {
    match state.alerts.open().await {
        Ok(open) => AdminAnswer::ok(&Incidents {
            incidents: open.iter().map(IncidentView::of).collect(),
        }),
        Err(e) => super::exchange::unavailable(&e),
    }
}
