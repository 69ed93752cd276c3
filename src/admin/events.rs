//! The queue endpoints (`hookgate events` calls them):
//! - `GET /events/<route>?state=dead&limit=100` — events, oldest first;
//! - `GET /events/<route>/<event id>` — one event: attempts, each result, next try;
//! - `POST /events/<route>/retry?event_id=ID` or `?all_dead=true` — queue again;
//! - `POST /events/<route>/retry?state=&since=&until=&event_type=&last_result=&plan=true`
//!   — a bulk retry, planned first (`bulk.rs`);
//! - `POST /events/<route>/purge?event_id=ID` or `?all_dead=true` — delete;
//! - `POST /events/<route>/pause?reason=&until=` and `/resume` (`controls.rs`).
//!
//! Each acts on every destination of the route, or on one with `destination=NAME`.

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;

use super::AdminContext;
use super::api::{self, ErrorBody, EventList, EventView, EventsActed};
use super::exchange::{AdminAnswer, AdminRequest};
use crate::config::Route;
use crate::state::Routing;
use crate::store::{Envelope, QueueStore as _, State, Status, StoreError, Target};

/// The route and destinations a queue endpoint acts on.
pub(super) struct Queues<'a> {
    pub(super) state: &'a AdminContext,
    pub(super) routing: Arc<Routing>,
    pub(super) route: &'a str,
    pub(super) config: Arc<Route>,
    /// Every destination of the route, or the one `destination=NAME` names.
    pub(super) destinations: Vec<String>,
    /// Whether answers name the destination (a route with several, or one named apart
    /// from the route).
    pub(super) named: bool,
}

/// `/events/<route>[/…]`: the endpoint the method and the rest of the path name.
pub(super) async fn answer(state: &AdminContext, req: &AdminRequest) -> AdminAnswer {
    let queues = match Queues::of(state, req) {
        Ok(q) => q,
        Err(refused) => return refused,
    };
    let tail = req.after_route();
    let result = match (&req.method, tail.as_deref()) {
        (&Method::GET, None) => list(&queues, &req.query).await,
        (&Method::GET, Some(id)) => show(&queues, id).await,
        (&Method::POST, Some("retry"))
            if super::bulk::FILTERS
                .iter()
                .any(|f| req.query.contains_key(*f)) =>
        {
            if req.query.contains_key("event_id") || req.query.contains_key("all_dead") {
                return AdminAnswer::bad_request(
                    "name one event (event_id=ID), all_dead=true, or filters (state, since, until, event_type, last_result), not both",
                );
            }
            super::bulk::retry(&queues, &req.query).await
        }
        (&Method::POST, Some(action @ ("retry" | "purge"))) => {
            act(&queues, action, &req.query).await
        }
        (&Method::POST, Some(action @ ("pause" | "resume"))) => {
            super::controls::answer(&queues, action, &req.query).await
        }
        _ => {
            return AdminAnswer::not_found(
                "use GET /events/<route>[/<event id>] or POST /events/<route>/{retry,purge,pause,resume}",
            );
        }
    };
    result.unwrap_or_else(|e| {
        tracing::warn!(route = queues.route, error = %e, "queue: an admin request failed: the store did not answer");
        AdminAnswer::unavailable("store unavailable, retry later")
    })
}

impl<'a> Queues<'a> {
    /// The route `/events/<route>` names, or the answer that it has no queue.
    fn of(state: &'a AdminContext, req: &'a AdminRequest) -> Result<Self, AdminAnswer> {
        let route = req.args.first().map_or("", String::as_str);
        let routing = state.routing();
        // Any configured route: one a reload switched back to sync may still hold events.
        let Some(config) = routing
            .route(route)
            .filter(|_| state.store.keeps_queues())
            .cloned()
        else {
            return Err(AdminAnswer::not_found(format!(
                "no queue route named {route:?} (delivery = \"queue\" on a disk or Redis store)"
            )));
        };
        let named = !config.only_own_destination();
        let destinations: Vec<String> = match req.query.get("destination") {
            None => config.destinations.iter().map(|d| d.name.clone()).collect(),
            Some(d) if config.destination(d).is_some() => vec![d.clone()],
            Some(d) => {
                return Err(AdminAnswer::NotFound(api::to_json(&ErrorBody {
                    destinations: Some(
                        config.destinations.iter().map(|d| d.name.clone()).collect(),
                    ),
                    ..ErrorBody::new(format!("route {route:?} has no destination {d:?}"))
                })));
            }
        };
        Ok(Self {
            state,
            routing,
            route,
            config,
            destinations,
            named,
        })
    }
}

/// `GET /events/<route>?state=…&limit=…`: events, oldest first.
async fn list(q: &Queues<'_>, params: &HashMap<String, String>) -> Result<AdminAnswer, StoreError> {
    let filter = match params.get("state").map(|s| (s, State::parse(s))) {
        None => None,
        Some((_, Some(s))) => Some(s),
        Some((s, None)) => {
            return Ok(AdminAnswer::bad_request(format!(
                "state {s:?}: use queued, retrying, dead or delivered"
            )));
        }
    };
    let limit = params
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(100);
    let mut all = Vec::new();
    let mut failed = None;
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        match q.state.store.list(&queue, filter, limit).await {
            Ok(events) => all.extend(events.into_iter().map(|mut e| {
                e.destination = q.named.then(|| d.clone());
                e
            })),
            Err(e) => failed = Some(e),
        }
    }
    all.sort_by_key(|e| e.received_at_ms);
    all.truncate(limit);
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(AdminAnswer::ok(&EventList {
        route: q.route.to_owned(),
        delivery: q.config.delivery,
        events: all,
        destinations: super::controls::controls(q, crate::time::now_ms()).await?,
    }))
}

/// `GET /events/<route>/<event id>`: one event, in each destination that holds it.
async fn show(q: &Queues<'_>, id: &str) -> Result<AdminAnswer, StoreError> {
    let mut found = Vec::new();
    let mut failed = None;
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        match q.state.store.show(&queue, id).await {
            Ok(Some((env, status))) => found.push((d.clone(), env, status)),
            Ok(None) => {}
            Err(e) => failed = Some(e),
        }
    }
    match (found.first(), failed) {
        (_, Some(e)) => Err(e),
        (None, None) => Ok(AdminAnswer::NotFound(api::to_json(&ErrorBody {
            event_id: Some(id.to_owned()),
            ..ErrorBody::new("no such event on this route")
        }))),
        // The first destination's record at the top (as on a route with one), and
        // each destination's under `destinations`.
        (Some((d, env, status)), None) => {
            let dest = |d: &str| q.named.then(|| d.to_owned());
            let mut body = event_view(q.route, dest(d), env, status);
            if q.named {
                body.destinations = Some(
                    found
                        .iter()
                        .map(|(d, env, status)| event_view(q.route, dest(d), env, status))
                        .collect(),
                );
            }
            Ok(AdminAnswer::ok(&body))
        }
    }
}

/// `POST /events/<route>/{retry,purge}?event_id=ID|all_dead=true`.
async fn act(
    q: &Queues<'_>,
    action: &str,
    params: &HashMap<String, String>,
) -> Result<AdminAnswer, StoreError> {
    let t = match (params.get("event_id"), params.get("all_dead")) {
        (Some(id), None) if !id.is_empty() => Target::One(id.clone()),
        (None, Some(v)) if v == "true" || v == "1" => Target::AllDead,
        _ => {
            return Ok(AdminAnswer::bad_request(
                "name one event (event_id=ID), all_dead=true, or (to retry) filters: state, since, until, event_type, last_result, plan",
            ));
        }
    };
    let store = &q.state.store;
    let retry = action == "retry";
    // Every destination is tried, whichever failed.
    let mut done = Ok(0);
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        let n = if retry {
            store.retry(&queue, &t).await
        } else {
            store.purge(&queue, &t).await
        };
        done = match (done, n) {
            (Ok(a), Ok(b)) => Ok(a + b),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    let n = done?;
    let target = match &t {
        Target::One(id) => id.as_str(),
        Target::AllDead | Target::Some(_) => "all_dead",
    };
    tracing::info!(
        route = q.route,
        action,
        events = n,
        target,
        "queue: operator {action}"
    );
    if retry {
        q.state.wake.notify_one();
    }
    Ok(AdminAnswer::ok(&EventsActed {
        route: q.route.to_owned(),
        retried: retry.then_some(n),
        purged: (!retry).then_some(n),
    }))
}

/// One event's record in one destination, as `GET /events/<route>/<id>` shows it.
pub(super) fn event_view(
    route: &str,
    destination: Option<String>,
    env: &Envelope,
    status: &Status,
) -> EventView {
    EventView {
        route: route.to_owned(),
        destination,
        event_id: env.event_id.clone(),
        event_type: env.event_type.clone(),
        state: status.state,
        attempts: status.attempts,
        received_at_ms: env.received_at_ms,
        next_at_ms: status.next_at_ms,
        dead_reason: status.dead_reason.clone(),
        order_key: status.order_key.clone(),
        history: status.history.clone(),
        requeued_at_ms: status.requeued_at_ms,
        method: env.method.clone(),
        // Names only: values may carry signatures and tokens.
        // Only those forwarded (not `host`, `content-length`, …).
        headers: env
            .headers
            .iter()
            .filter(|h| crate::forward::is_forwarded(&h.name))
            .map(|h| h.name.clone())
            .collect(),
        destinations: None,
    }
}
