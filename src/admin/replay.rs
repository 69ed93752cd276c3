//! `POST /deliveries/<id>/replay[?destination=NAME]` — the recorded delivery again, to
//! the route's upstream (sync) or its destinations' queues, recorded as a replay: only
//! where the config sends that event type (the destinations whose `events` admit it),
//! or to the one `destination` names; a copy's record (`duplicate`, `in_flight`,
//! `mismatch`) replays the accepted delivery's record instead, never the copy's own
//! headers.
//!
//! A replay is an operator's deliberate repeat: it goes out with the event's
//! `Idempotency-Key`, without the recorded signatures (the upstream authenticates it by
//! `forward_secret`), from `admin`. It is forwarded and queued by the pipeline's own
//! steps (`pipeline::job`'s `forward` and `enqueue`), so it goes out and is stored as
//! a delivery would be.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::AdminContext;
use super::api::{self, ReplayQueued, Replayed};
use super::exchange::AdminAnswer;
use super::exchange::{MAX_LIMIT, unavailable};
use crate::config::{Delivery, Destination, Route};
use crate::pipeline::job::{self, Event};
use crate::pipeline::respond;
use crate::provider::EventId;
use crate::store::log::{DeliveryRecord, LogQuery, new_delivery_id};
use crate::store::{
    DedupKey, DedupStore as _, Enqueued, Fanout, QueueStore as _, State, StoreError, Target,
};

/// What a replay sends again: the accepted delivery's record, and the request made
/// of it.
struct Parts {
    original: DeliveryRecord,
    event_id: String,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
    query: Option<String>,
}

impl Parts {
    /// The request in plain parts, as the pipeline's job sends and stores one.
    fn event<'a>(&'a self, id: &'a EventId) -> Event<'a> {
        Event {
            id,
            event_type: self.original.event_type.as_deref(),
            method: &self.method,
            headers: &self.headers,
            body: &self.body,
            query: self.query.as_deref(),
            trace: None,
        }
    }
}

/// What became of a replay: as the log records it, and where it went.
struct Sent {
    outcome: &'static str,
    status: u16,
    answer: String,
    to: Vec<String>,
}

/// `POST /deliveries/<id>/replay[?destination=NAME]`.
pub(super) async fn replay(
    state: &AdminContext,
    id: &str,
    destination: Option<&str>,
    routes: &[String],
) -> AdminAnswer {
    let parts = match parts_of(state, id, routes).await {
        Ok(parts) => parts,
        Err(refused) => return refused,
    };
    let routing = state.routing();
    let Some(route) = routing
        .routes
        .values()
        .find(|r| r.name == parts.original.route)
        .cloned()
    else {
        return AdminAnswer::not_found(format!(
            "route {:?} is no longer configured",
            parts.original.route
        ));
    };
    let targets = match replay_targets(&route, parts.original.event_type.as_deref(), destination) {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let started = Instant::now();
    let received_at = crate::time::now_ms();
    let sent = if route.delivery == Delivery::Queue {
        match queue_again(state, &route, &targets, &parts).await {
            Ok(sent) => sent,
            Err(refused) => return refused,
        }
    } else {
        // A sync route has one destination: its upstream.
        forward_again(state, &route, &targets, &parts).await
    };
    let replay_of = parts.original.delivery_id.clone();
    let record = DeliveryRecord {
        delivery_id: new_delivery_id(received_at),
        received_at,
        peer: "admin".to_owned(),
        status: sent.status,
        outcome: sent.outcome.to_owned(),
        answer: Some(sent.answer),
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        reason: None,
        replay_of: Some(replay_of.clone()),
        ..parts.original
    };
    let (event_id, outcome) = (&parts.event_id, sent.outcome);
    tracing::info!(route = %record.route, event_id, replay_of, clicked = id, outcome, "delivery replayed by an operator");
    state.recorder.push(&record);
    AdminAnswer::ok(&Replayed {
        replayed: true,
        delivery_id: record.delivery_id,
        replay_of,
        outcome: outcome.to_owned(),
        status: sent.status,
        destinations: sent.to,
    })
}

/// The record a replay of delivery `id` sends (the accepted delivery's), and the
/// request made of it; or why there is none to send.
async fn parts_of(state: &AdminContext, id: &str, routes: &[String]) -> Result<Parts, AdminAnswer> {
    let clicked = match state.recorder.log.get(id, routes).await {
        Ok(Some(r)) => r,
        Ok(None) => return Err(AdminAnswer::not_found("no such delivery in the log")),
        Err(e) => return Err(unavailable(&e)),
    };
    let original = match accepted_record(state, &clicked, routes).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(AdminAnswer::conflict(format!(
                "delivery {id} is a copy ({}) of event {:?} on route {:?}: a replay sends the accepted delivery's record (its headers, its body), and the log no longer holds it: nothing was replayed",
                clicked.outcome,
                clicked.event_id.as_deref().unwrap_or_default(),
                clicked.route
            )));
        }
        Err(e) => return Err(unavailable(&e)),
    };
    let (Some(body), Some(event_id), false) = (
        replay_body(&original),
        original.event_id.clone(),
        original.body_truncated,
    ) else {
        return Err(AdminAnswer::conflict(
            "the log holds no whole body of this delivery (refused, log.bodies = \"none\", or cut at log.max_body): it cannot be replayed",
        ));
    };
    Ok(Parts {
        event_id,
        method: Method::from_bytes(original.method.as_bytes()).unwrap_or(Method::POST),
        headers: replay_headers(&original),
        body,
        query: original.path.split_once('?').map(|(_, q)| q.to_owned()),
        original,
    })
}

/// The headers a replay sends: the recorded ones but the redacted (signatures,
/// credentials: the upstream authenticates a replay by `forward_secret`).
fn replay_headers(r: &DeliveryRecord) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in &r.headers {
        if v == "[redacted]" {
            continue;
        }
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(n.as_str()), HeaderValue::try_from(v)) {
            h.append(n, v);
        }
    }
    h
}

fn replay_body(r: &DeliveryRecord) -> Option<Bytes> {
    use base64::Engine as _;
    let text = r.body.as_ref()?;
    if r.body_base64 {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()
            .map(Bytes::from)
    } else {
        Some(Bytes::from(text.clone()))
    }
}

/// Outcomes of a request that did not take its event's claim: a copy of an event the
/// gateway already had. Its record holds what the copy's sender sent (any unsigned
/// header, any body under a reused ID), so a replay of it sends the accepted
/// delivery's record instead.
const COPIES: [&str; 3] = ["duplicate", "in_flight", "mismatch"];

/// Outcomes of the request that took its event's claim: the accepted delivery.
const ACCEPTED: [&str; 6] = [
    "forwarded",
    "forwarded_unclaimed",
    "queued",
    "upstream_rejected",
    "upstream_error",
    "filtered",
];

/// Pages (of [`MAX_LIMIT`]) a replay of a copy reads at most looking for the accepted
/// delivery's record.
const SEARCH_PAGES: usize = 20;

/// The record a replay of `clicked` sends: itself, or for a copy the newest record of
/// the accepted delivery of its route and event ID (not itself a replay). `Ok(None)`:
/// the log no longer holds that record.
async fn accepted_record(
    state: &AdminContext,
    clicked: &DeliveryRecord,
    routes: &[String],
) -> Result<Option<DeliveryRecord>, StoreError> {
    if !COPIES.contains(&clicked.outcome.as_str()) {
        return Ok(Some(clicked.clone()));
    }
    let Some(event_id) = clicked.event_id.as_deref() else {
        return Ok(None);
    };
    let log = &state.recorder.log;
    let mut q = LogQuery {
        route: Some(clicked.route.clone()),
        event_id: Some(event_id.to_owned()),
        limit: MAX_LIMIT,
        ..LogQuery::default()
    };
    for _ in 0..SEARCH_PAGES {
        let page = log.list(&q, routes).await?;
        let accepted = page.records.iter().find(|r| {
            r.event_id.as_deref() == Some(event_id)
                && r.replay_of.is_none()
                && ACCEPTED.contains(&r.outcome.as_str())
        });
        if let Some(r) = accepted {
            return log.get(&r.delivery_id, routes).await;
        }
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    Ok(None)
}

/// Where a replay of a recorded event goes: the destination `?destination=` names
/// (whatever its filter: the operator chose it), or the route's destinations whose
/// `events` filters admit the recorded type, as the config sends a new delivery of it.
/// `Err`: why it goes nowhere (404: no such destination; 409: its filters send it
/// nowhere).
fn replay_targets(
    route: &Route,
    event_type: Option<&str>,
    destination: Option<&str>,
) -> Result<Vec<Arc<Destination>>, AdminAnswer> {
    if let Some(d) = destination {
        return route
            .destination(d)
            .map(|d| vec![d.clone()])
            .ok_or_else(|| {
                AdminAnswer::not_found(format!("route {:?} has no destination {d:?}", route.name))
            });
    }
    let targets = match (route.filters_events(), event_type) {
        (false, _) => route.destinations.clone(),
        (true, Some(t)) => route.destinations_for(t),
        (true, None) => route.destinations_for_untyped(),
    };
    if targets.is_empty() {
        let what = event_type.map_or_else(
            || "an event without a readable type".to_owned(),
            |t| format!("event type {t:?}"),
        );
        let nothing = match route.delivery {
            Delivery::Queue => "nothing was queued",
            Delivery::Sync => "nothing was forwarded",
        };
        return Err(AdminAnswer::conflict(format!(
            "route {:?}'s events filters send {what} nowhere (a new delivery of it is answered filtered): {nothing}; name one destination with ?destination=NAME to send it there anyway",
            route.name
        )));
    }
    Ok(targets)
}

/// A replay on a sync route: the recorded request to the route's upstream, relayed
/// as the log records it.
async fn forward_again(
    state: &AdminContext,
    route: &Route,
    targets: &[Arc<Destination>],
    parts: &Parts,
) -> Sent {
    let event_id = EventId::new(&parts.event_id);
    let routing = state.routing.load_full();
    let via = crate::delivery::destination::Via {
        forwarder: &state.forwarder,
        links: &state.links,
        clock: state.clock,
        dedup_ttl: routing.store_cfg.dedup_ttl,
    };
    let result = job::forward(
        via,
        route,
        &targets[0],
        &parts.event(&event_id),
        IpAddr::from([127, 0, 0, 1]),
        state.clock.now(),
    )
    .await;
    let answer = match &result {
        Ok(up) => String::from_utf8_lossy(&up.body[..up.body.len().min(4096)]).into_owned(),
        Err(e) => e.to_string(),
    };
    // Named and written as the pipeline names and writes a forward's answer.
    let relayed = job::relayed(result, /* unclaimed */ false);
    Sent {
        outcome: relayed.outcome().as_str(),
        status: respond::response(relayed).status().as_u16(),
        answer,
        to: targets.iter().map(|d| d.name.clone()).collect(),
    }
}

/// A replay on a queue route: the event queued again for `targets`, or why nothing
/// was (409; 503 when the store did not answer).
async fn queue_again(
    state: &AdminContext,
    route: &Route,
    targets: &[Arc<Destination>],
    parts: &Parts,
) -> Result<Sent, AdminAnswer> {
    let names: Vec<&str> = targets.iter().map(|d| d.name.as_str()).collect();
    let queued = requeue(state, route, &names, parts)
        .await
        .map_err(|e| unavailable(&e))?;
    let event_id = &parts.event_id;
    if queued.is_empty() {
        return Err(AdminAnswer::conflict(format!(
            "nothing was queued: the store already holds event {event_id:?} of route {:?} for the dedup window (a filtered delivery's record, or a copy being settled), and no destination took it again",
            route.name
        )));
    }
    state.wake.notify_waiters();
    let answer = api::to_json(&ReplayQueued {
        status: "queued".into(),
        event_id: event_id.clone(),
        destinations: queued.len(),
    });
    Ok(Sent {
        outcome: "queued",
        status: 200,
        answer: answer.to_string(),
        to: queued,
    })
}

/// Queues a recorded event again for these destinations of the route: a dead or
/// retrying event is due now; a delivered one (or one no longer stored) is stored
/// again. The destinations it is queued for now: none when the store already held the
/// event in a way no replay may undo (such as the record of a filtered delivery).
async fn requeue(
    state: &AdminContext,
    route: &Route,
    names: &[&str],
    parts: &Parts,
) -> Result<Vec<String>, StoreError> {
    let routing = state.routing();
    let store = &state.store;
    let event_id = parts.event_id.as_str();
    let mut queued = Vec::new();
    let mut again = Vec::new();
    for d in names {
        let q = routing.queue(&route.name, d);
        if store.retry(&q, &Target::One(event_id.to_owned())).await? == 0 {
            store.forget_delivered(&q, event_id).await?;
            again.push(*d);
        } else {
            queued.push((*d).to_owned());
        }
    }
    if !again.is_empty() {
        queued.extend(store_again(state, route, &again, parts).await?);
    }
    Ok(queued)
}

/// Stores the recorded event again for `again` (destinations that no longer hold it
/// undelivered): those it is queued for now.
async fn store_again(
    state: &AdminContext,
    route: &Route,
    again: &[&str],
    parts: &Parts,
) -> Result<Vec<String>, StoreError> {
    let routing = state.routing();
    let store = &state.store;
    let id = EventId::new(&parts.event_id);
    let event = parts.event(&id);
    let original = &parts.original;
    let fanout = Fanout {
        prefix: &routing.store_cfg.key_prefix,
        route: &route.name,
        all: again.to_vec(),
        to: again
            .iter()
            .map(|d| {
                let key = route
                    .destination(d)
                    .and_then(|d| job::order_key(d, &event, None));
                (*d, key)
            })
            .collect(),
    };
    // The route's record of the event (the disk store's, or a filtered delivery's)
    // would make the enqueue a copy and store nothing: the operator's replay lets go
    // of it, and the enqueue writes it again. A provider's copy in between is still
    // one: the destinations that hold the event answer for it.
    let event_id = parts.event_id.as_str();
    let key = DedupKey::new(&routing.store_cfg.key_prefix, &route.name, event_id);
    store.forget(&key).await?;
    let peer = original
        .peer
        .parse::<std::net::SocketAddr>()
        .map_or_else(|_| original.peer.clone(), |a| a.ip().to_string());
    let fingerprint = crate::provider::Fingerprint::of(&parts.body).short_hex();
    let mut queued = Vec::new();
    let dedup_ttl = routing.store_cfg.dedup_ttl;
    match job::enqueue(store, &fanout, &event, fingerprint, peer, dedup_ttl).await? {
        Enqueued::Queued => queued.extend(again.iter().map(|d| (*d).to_owned())),
        // Already there: queued only where it still waits (not delivered).
        Enqueued::Existing(_) => {
            for d in again {
                let q = routing.queue(&route.name, d);
                let waits = store
                    .show(&q, event_id)
                    .await?
                    .is_some_and(|(_, s)| s.state != State::Delivered);
                if waits {
                    queued.push((*d).to_owned());
                }
            }
        }
    }
    Ok(queued)
}
