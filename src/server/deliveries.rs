//! The delivery log's admin endpoints (behind the admin listener's guard; the fields
//! and answers are described in docs/operations.md, "The delivery log"):
//!
//! - `GET /deliveries?route=&outcome=&event_type=&event_id=&since=&before=&limit=&cursor=`
//!   — records newest first, without body and answer, and `next_cursor`;
//! - `GET /deliveries/<id>` — one record, with its queue event's per-destination state
//!   on a queue route;
//! - `GET /deliveries/stream?<the same filters>` — Server-Sent Events, one `delivery`
//!   event per new record, a `: keepalive` comment every 15 s;
//! - `POST /deliveries/<id>/replay[?destination=NAME]` — the recorded delivery again,
//!   to the route's upstream (sync) or its destinations' queues, recorded as a replay:
//!   only where the config sends that event type (the destinations whose `events`
//!   admit it), or to the one `destination` names; a copy's record (`duplicate`,
//!   `in_flight`, `mismatch`) replays the accepted delivery's record instead, never
//!   the copy's own headers;
//! - `GET /overview` — each route's requests by outcome in the last hour and its
//!   queues' depth.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;

use super::AppState;
use crate::config::{Delivery, Route};
use crate::pipeline::respond::{Resp, admin as json};
use crate::store::Store;
use crate::store::log::{DeliveryRecord, LogQuery, minute_of, new_delivery_id};
use crate::store::{
    DedupStore as _, Enqueued, Envelope, Fanout, QueueStore as _, StoredEvent, Target,
};

/// The frames of a live stream.
pub(crate) type SseStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static>,
>;

/// A body the admin listener answers with: a whole one, or a live stream.
pub(crate) type AdminBody = Either<Full<Bytes>, StreamBody<SseStream>>;

/// A live stream's comment when nothing happened for this long (proxies and browsers
/// close silent connections).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Live streams open at once, over every client; beyond, 503.
pub(crate) const MAX_STREAMS: usize = 16;
/// A live stream that has sent no record for this long is ended (an inspector's page
/// reconnects by itself): an open reader holds its slot only while records flow.
const STREAM_IDLE: Duration = Duration::from_secs(600);
/// Records a list answers at most, and by default.
const MAX_LIMIT: usize = 500;
const DEFAULT_LIMIT: usize = 50;

/// Whether a path is one of these endpoints.
pub(crate) fn serves(path: &str) -> bool {
    path == "/overview" || path == "/deliveries" || path.starts_with("/deliveries/")
}

/// Whether a request is for the live stream (answered with a streaming body).
pub(crate) fn is_stream<B>(req: &Request<B>) -> bool {
    req.method() == Method::GET && req.uri().path() == "/deliveries/stream"
}

fn error(status: StatusCode, msg: impl Into<String>) -> Resp {
    json(status, serde_json::json!({ "error": msg.into() }))
}

fn unavailable(e: &crate::store::StoreError) -> Resp {
    tracing::warn!(error = %e, "delivery log: an admin request failed: the store did not answer");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "store unavailable, retry later",
    )
}

fn params(query: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// A time bound: Unix milliseconds, or RFC 3339.
fn time(v: &str) -> Option<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .or_else(|| crate::provider::timestamp::rfc3339_ms(v))
}

/// The filters of a list or a stream; an error names the bad parameter.
fn query_of(p: &HashMap<String, String>) -> Result<LogQuery, String> {
    let text = |k: &str| p.get(k).filter(|v| !v.is_empty()).cloned();
    let bound = |k: &str| -> Result<Option<u64>, String> {
        match text(k) {
            None => Ok(None),
            Some(v) => time(&v)
                .map(Some)
                .ok_or_else(|| format!("{k}={v:?}: use Unix milliseconds or RFC 3339")),
        }
    };
    let limit = match text("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => return Err(format!("limit={v:?}: use 1 to {MAX_LIMIT}")),
        },
    };
    Ok(LogQuery {
        route: text("route"),
        outcome: text("outcome"),
        event_type: text("event_type"),
        event_id: text("event_id"),
        since: bound("since")?,
        before: bound("before")?,
        cursor: text("cursor"),
        limit,
    })
}

/// Answers the endpoints but the stream.
pub(crate) async fn handle<B>(state: &Arc<AppState>, req: Request<B>) -> Resp {
    let path = req.uri().path().to_owned();
    let p = params(req.uri().query());
    let routes = state.recorder.route_names();
    let log = &state.recorder.log;
    match (req.method(), path.as_str()) {
        (&Method::GET, "/overview") => overview(state, &routes).await,
        (&Method::GET, "/deliveries") => {
            let q = match query_of(&p) {
                Ok(q) => q,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            match log.list(&q, &routes).await {
                Ok(page) => json(
                    StatusCode::OK,
                    serde_json::json!({
                        "deliveries": page.records.iter().map(DeliveryRecord::summary).collect::<Vec<_>>(),
                        "next_cursor": page.next_cursor,
                    }),
                ),
                Err(e) => unavailable(&e),
            }
        }
        (method, _) => match (method, one_delivery(&path)) {
            (&Method::POST, Some((id, Some("replay")))) => {
                replay(state, id, p.get("destination").map(String::as_str), &routes).await
            }
            (&Method::GET, Some((id, None))) => show(state, id, &routes).await,
            _ => error(
                StatusCode::NOT_FOUND,
                "use GET /deliveries, /deliveries/<id>, /deliveries/stream, /overview or POST /deliveries/<id>/replay",
            ),
        },
    }
}

/// `/deliveries/<id>` as `(id, None)` and `/deliveries/<id>/<action>` as
/// `(id, Some(action))`; any other path (no ID, an empty segment, more segments) is
/// `None`. Split, never sliced: no path can make it panic.
fn one_delivery(path: &str) -> Option<(&str, Option<&str>)> {
    let rest = path.strip_prefix("/deliveries/")?;
    let mut segments = rest.split('/');
    let id = segments.next().filter(|id| !id.is_empty())?;
    let action = match segments.next() {
        None => None,
        Some(a) if !a.is_empty() => Some(a),
        Some(_) => return None,
    };
    segments.next().is_none().then_some((id, action))
}

/// `GET /deliveries/<id>`: one record, with its queue event's state on a queue route.
async fn show(state: &Arc<AppState>, id: &str, routes: &[String]) -> Resp {
    match state.recorder.log.get(id, routes).await {
        Ok(Some(r)) => {
            let mut body = serde_json::to_value(&r).unwrap_or_default();
            if let Some(link) = &r.queue {
                match destinations(state, &link.route, &link.event_id).await {
                    Ok(d) => body["destinations"] = d,
                    Err(e) => return unavailable(&e),
                }
            }
            json(StatusCode::OK, body)
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "no such delivery in the log"),
        Err(e) => unavailable(&e),
    }
}

/// The queue event's state in each of its route's destinations.
async fn destinations(
    state: &AppState,
    route: &str,
    event_id: &str,
) -> Result<serde_json::Value, crate::store::StoreError> {
    let routing = state.routing();
    let Some(config) = routing.routes.values().find(|r| r.name == route) else {
        return Ok(serde_json::Value::Array(Vec::new()));
    };
    if matches!(state.store(), Store::Memory(_)) {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    let mut out = Vec::new();
    for d in &config.destinations {
        let q = routing.queue(route, &d.name);
        if let Some((env, status)) = state.store().show(&q, event_id).await? {
            let mut v = super::admin::event_json(route, Some(d.name.clone()), &env, &status);
            v["destination"] = serde_json::Value::String(d.name.clone());
            out.push(v);
        }
    }
    Ok(serde_json::Value::Array(out))
}

async fn overview(state: &AppState, routes: &[String]) -> Resp {
    let now = crate::queue::now_ms();
    let counts = match state
        .recorder
        .log
        .counts(minute_of(now).saturating_sub(59), routes)
        .await
    {
        Ok(c) => c,
        Err(e) => return unavailable(&e),
    };
    let routing = state.routing();
    let mut configured: Vec<&Arc<Route>> = routing.routes.values().collect();
    configured.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for r in configured {
        let last_hour: serde_json::Map<String, serde_json::Value> = counts
            .iter()
            .filter(|((route, _), _)| *route == r.name)
            .map(|((_, outcome), n)| (outcome.clone(), serde_json::json!(n)))
            .collect();
        let mut queues = Vec::new();
        if r.delivery == Delivery::Queue && !matches!(state.store(), Store::Memory(_)) {
            for d in &r.destinations {
                let q = routing.queue(&r.name, &d.name);
                match state.store().depth(&q).await {
                    Ok(depth) => queues.push(serde_json::json!({
                        "destination": d.name,
                        "depth": depth.waiting,
                        "dead": depth.dead,
                        "oldest_undelivered_age_ms": depth.oldest_received_ms.map(|t| now.saturating_sub(t)),
                    })),
                    Err(e) => return unavailable(&e),
                }
            }
        }
        out.push(serde_json::json!({
            "route": r.name,
            "provider": r.verifier.preset().name(),
            "delivery": if r.delivery == Delivery::Queue { "queue" } else { "sync" },
            "last_hour": last_hour,
            "queues": queues,
        }));
    }
    json(
        StatusCode::OK,
        serde_json::json!({
            "routes": out,
            "log": { "enabled": state.recorder.cfg.enabled },
        }),
    )
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
    state: &AppState,
    clicked: &DeliveryRecord,
    routes: &[String],
) -> Result<Option<DeliveryRecord>, crate::store::StoreError> {
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
/// `Err`: why it goes nowhere (or no such destination), and the status.
fn replay_targets(
    route: &Route,
    event_type: Option<&str>,
    destination: Option<&str>,
) -> Result<Vec<Arc<crate::config::Destination>>, (StatusCode, String)> {
    if let Some(d) = destination {
        return route
            .destination(d)
            .map(|d| vec![d.clone()])
            .ok_or_else(|| {
                (
                    StatusCode::NOT_FOUND,
                    format!("route {:?} has no destination {d:?}", route.name),
                )
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
        return Err((
            StatusCode::CONFLICT,
            format!(
                "route {:?}'s events filters send {what} nowhere (a new delivery of it is answered filtered): {nothing}; name one destination with ?destination=NAME to send it there anyway",
                route.name
            ),
        ));
    }
    Ok(targets)
}

async fn replay(
    state: &Arc<AppState>,
    id: &str,
    destination: Option<&str>,
    routes: &[String],
) -> Resp {
    let clicked = match state.recorder.log.get(id, routes).await {
        Ok(Some(r)) => r,
        Ok(None) => return error(StatusCode::NOT_FOUND, "no such delivery in the log"),
        Err(e) => return unavailable(&e),
    };
    let original = match accepted_record(state, &clicked, routes).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error(
                StatusCode::CONFLICT,
                format!(
                    "delivery {id} is a copy ({}) of event {:?} on route {:?}: a replay sends the accepted delivery's record (its headers, its body), and the log no longer holds it: nothing was replayed",
                    clicked.outcome,
                    clicked.event_id.as_deref().unwrap_or_default(),
                    clicked.route
                ),
            );
        }
        Err(e) => return unavailable(&e),
    };
    let (Some(body), Some(event_id), false) = (
        replay_body(&original),
        original.event_id.clone(),
        original.body_truncated,
    ) else {
        return error(
            StatusCode::CONFLICT,
            "the log holds no whole body of this delivery (refused, log.bodies = \"none\", or cut at log.max_body): it cannot be replayed",
        );
    };
    let routing = state.routing();
    let Some(route) = routing
        .routes
        .values()
        .find(|r| r.name == original.route)
        .cloned()
    else {
        return error(
            StatusCode::NOT_FOUND,
            format!("route {:?} is no longer configured", original.route),
        );
    };
    let targets = match replay_targets(&route, original.event_type.as_deref(), destination) {
        Ok(t) => t,
        Err((status, why)) => return error(status, why),
    };
    let headers = replay_headers(&original);
    let method = Method::from_bytes(original.method.as_bytes()).unwrap_or(Method::POST);
    let query = original.path.split_once('?').map(|(_, q)| q.to_owned());
    let started = std::time::Instant::now();
    let received_at = crate::queue::now_ms();
    let mut sent_to: Vec<String> = targets.iter().map(|d| d.name.clone()).collect();
    let (outcome, status, answer) = if route.delivery == Delivery::Queue {
        let names: Vec<&str> = targets.iter().map(|d| d.name.as_str()).collect();
        let parts = Parts {
            headers: &headers,
            body: &body,
            method: &method,
            original: &original,
        };
        match requeue(state, &route, &event_id, &names, &parts).await {
            Ok(Ok(queued)) => {
                sent_to = queued;
                (
                    "queued",
                    200,
                    serde_json::json!({ "status": "queued", "event_id": event_id, "destinations": sent_to.len() })
                        .to_string(),
                )
            }
            Ok(Err(resp)) => return resp,
            Err(e) => return unavailable(&e),
        }
    } else {
        let eid = crate::provider::EventId::new(&event_id);
        let out = crate::forward::Outbound {
            method: method.clone(),
            headers: &headers,
            body: body.clone(),
            query: query.as_deref(),
            event_id: &eid,
            peer: std::net::IpAddr::from([127, 0, 0, 1]),
            now: state.clock.now(),
        };
        // A sync route has one destination: its upstream.
        match state.forwarder.send(&route, &targets[0], out).await {
            Ok(up) => (
                if up.status.is_success() {
                    "forwarded"
                } else {
                    "upstream_rejected"
                },
                up.status.as_u16(),
                String::from_utf8_lossy(&up.body[..up.body.len().min(4096)]).into_owned(),
            ),
            Err(e) => (
                "upstream_error",
                crate::pipeline::respond::response(
                    crate::pipeline::respond::Answer::UpstreamFailed(
                        crate::pipeline::respond::UpstreamFailure::from(&e),
                    ),
                )
                .status()
                .as_u16(),
                e.to_string(),
            ),
        }
    };
    let replay_of = original.delivery_id.clone();
    let record = DeliveryRecord {
        delivery_id: new_delivery_id(received_at),
        received_at,
        peer: "admin".to_owned(),
        status,
        outcome: outcome.to_owned(),
        answer: Some(answer),
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        reason: None,
        replay_of: Some(replay_of.clone()),
        ..original
    };
    let new_id = record.delivery_id.clone();
    tracing::info!(route = %record.route, event_id, replay_of, clicked = id, outcome, "delivery replayed by an operator");
    state.recorder.push(&record);
    json(
        StatusCode::OK,
        serde_json::json!({
            "replayed": true,
            "delivery_id": new_id,
            "replay_of": replay_of,
            "outcome": outcome,
            "status": status,
            "destinations": sent_to,
        }),
    )
}

/// The parts of the recorded request a replay sends again.
struct Parts<'a> {
    headers: &'a HeaderMap,
    body: &'a Bytes,
    method: &'a Method,
    original: &'a DeliveryRecord,
}

/// Queues a recorded event again for these destinations of the route: a dead or
/// retrying event is due now; a delivered one (or one no longer stored) is stored
/// again. `Ok(Ok(names))`: the destinations it is queued for now; `Ok(Err(resp))`:
/// nothing was queued (the store already held the event in a way no replay may
/// undo, such as the record of a filtered delivery), answered 409.
async fn requeue(
    state: &AppState,
    route: &Route,
    event_id: &str,
    names: &[&str],
    parts: &Parts<'_>,
) -> Result<Result<Vec<String>, Resp>, crate::store::StoreError> {
    let routing = state.routing();
    let store = state.store();
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
        let (headers, body, original) = (parts.headers, parts.body, parts.original);
        let event = StoredEvent {
            envelope: Envelope {
                event_id: event_id.to_owned(),
                event_type: original.event_type.clone(),
                fingerprint: crate::provider::Fingerprint::of(body).short_hex(),
                method: parts.method.as_str().to_owned(),
                headers: Envelope::store_headers(headers),
                query: original.path.split_once('?').map(|(_, q)| q.to_owned()),
                peer: original
                    .peer
                    .parse::<std::net::SocketAddr>()
                    .map_or_else(|_| original.peer.clone(), |a| a.ip().to_string()),
                received_at_ms: crate::queue::now_ms(),
            },
            body: body.clone(),
        };
        let fanout = Fanout {
            prefix: &routing.store_cfg.key_prefix,
            route: &route.name,
            all: again.clone(),
            to: again
                .iter()
                .map(|d| {
                    let key = route
                        .destination(d)
                        .and_then(|d| d.order_by.as_ref())
                        .and_then(|o| o.raw(headers, body))
                        .map(|v| crate::queue::order_key(&v));
                    (*d, key)
                })
                .collect(),
        };
        // The route's record of the event (the disk store's, or a filtered
        // delivery's) would make the enqueue a copy and store nothing: the operator's
        // replay lets go of it, and the enqueue writes it again. A provider's copy in
        // between is still one: the destinations that hold the event answer for it.
        let key = crate::store::DedupKey::new(&routing.store_cfg.key_prefix, &route.name, event_id);
        store.forget(&key).await?;
        match store
            .enqueue_to(&fanout, &event, routing.store_cfg.dedup_ttl)
            .await?
        {
            Enqueued::Queued => queued.extend(again.iter().map(|d| (*d).to_owned())),
            // Already there: queued only where it still waits (not delivered).
            Enqueued::Existing(_) => {
                for d in &again {
                    let q = routing.queue(&route.name, d);
                    let waits = store
                        .show(&q, event_id)
                        .await?
                        .is_some_and(|(_, s)| s.state != crate::store::State::Delivered);
                    if waits {
                        queued.push((*d).to_owned());
                    }
                }
            }
        }
    }
    if queued.is_empty() {
        return Ok(Err(error(
            StatusCode::CONFLICT,
            format!(
                "nothing was queued: the store already holds event {event_id:?} of route {:?} for the dedup window (a filtered delivery's record, or a copy being settled), and no destination took it again",
                route.name
            ),
        )));
    }
    state.deliveries.notify_waiters();
    Ok(Ok(queued))
}

/// A live stream's place in the recorder's writes.
struct Live {
    rx: tokio::sync::broadcast::Receiver<crate::observe::recorder::Written>,
    closing: tokio_util::sync::CancellationToken,
    /// Whether the stream's first frame (`: open`) went out.
    open: bool,
    /// The write being sent, and the next of its records.
    write: Option<(crate::observe::recorder::Written, usize)>,
    /// The number of the record expected next: a write that starts further on
    /// follows writes this stream skipped.
    next: Option<u64>,
    /// How long the stream stays open without sending a record.
    idle: Duration,
    /// When it last sent one (or opened).
    quiet_since: tokio::time::Instant,
    /// The stream's place among the `MAX_STREAMS`, held until it ends.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Live {
    /// The next frame: a record that passes `q`, a `lagged` event with the number of
    /// records skipped, or a keep-alive; `None` when the stream was idle for `idle`
    /// or the gateway stops.
    async fn next_frame(&mut self, q: &LogQuery) -> Option<Bytes> {
        use tokio::sync::broadcast::error::RecvError;
        if !self.open {
            // Sent at once, so the client sees the stream is open.
            self.open = true;
            return Some(Bytes::from_static(b": open\n\n"));
        }
        loop {
            if let Some((w, i)) = &mut self.write {
                while let Some(r) = w.records.get(*i) {
                    *i += 1;
                    if let Some(v) = r.view().filter(|v| q.matches(v)) {
                        self.quiet_since = tokio::time::Instant::now();
                        let data = v.record(false).summary().to_string();
                        return Some(Bytes::from(format!("event: delivery\ndata: {data}\n\n")));
                    }
                }
                self.write = None;
            }
            let ends = self.quiet_since + self.idle;
            let wait = KEEPALIVE.min(ends.saturating_duration_since(tokio::time::Instant::now()));
            if wait.is_zero() {
                return None;
            }
            let next = tokio::select! {
                () = self.closing.cancelled() => return None,
                r = tokio::time::timeout(wait, self.rx.recv()) => r,
            };
            match next {
                Err(_) if tokio::time::Instant::now() >= ends => return None,
                Err(_) => return Some(Bytes::from_static(b": keepalive\n\n")),
                Ok(Ok(w)) => {
                    let skipped = self.next.map_or(0, |n| w.first.saturating_sub(n));
                    self.next = Some(w.first + w.records.len() as u64);
                    self.write = Some((w, 0));
                    // Fell behind: some records were skipped; the page reloads the
                    // list to catch up.
                    if skipped > 0 {
                        return Some(Bytes::from(format!("event: lagged\ndata: {skipped}\n\n")));
                    }
                }
                // The next write received tells how many records were skipped.
                Ok(Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) => return None,
            }
        }
    }
}

/// The live stream: each new record that passes the filters as a `delivery` event.
pub(crate) fn stream<B>(state: &Arc<AppState>, req: &Request<B>) -> Response<AdminBody> {
    let q = match query_of(&params(req.uri().query())) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e).map(Either::Left),
    };
    let Ok(slot) = state.live_streams.clone().try_acquire_owned() else {
        let mut resp = error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_STREAMS} live streams are open already: retry later"),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return resp.map(Either::Left);
    };
    let frames = live_frames(
        state.recorder.subscribe(),
        state.recorder.closing.clone(),
        q,
        STREAM_IDLE,
        slot,
    );
    let mut resp = Response::new(Either::Right(StreamBody::new(frames)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// A live stream's frames: an `open` comment at once, then each record `q` matches,
/// a `lagged` event with the number of records skipped when the stream fell more than
/// the recorder's backlog of writes behind, a keep-alive comment every [`KEEPALIVE`]
/// without a record, and the end after `idle` without one (or when the gateway
/// closes). `slot` is held until the end.
fn live_frames(
    rx: tokio::sync::broadcast::Receiver<crate::observe::recorder::Written>,
    closing: tokio_util::sync::CancellationToken,
    q: LogQuery,
    idle: Duration,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> SseStream {
    let live = Live {
        rx,
        closing,
        open: false,
        write: None,
        next: None,
        idle,
        quiet_since: tokio::time::Instant::now(),
        _slot: slot,
    };
    Box::pin(futures_util::stream::unfold(live, move |mut live| {
        let q = q.clone();
        async move {
            let frame = live.next_frame(&q).await?;
            Some((Ok(Frame::data(frame)), live))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_live_stream_keeps_alive_then_ends_and_frees_its_slot() {
        let (_tx, rx) = tokio::sync::broadcast::channel(4);
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let slot = slots.clone().try_acquire_owned().expect("slot");
        let started = tokio::time::Instant::now();
        let mut frames = live_frames(
            rx,
            tokio_util::sync::CancellationToken::new(),
            LogQuery::default(),
            Duration::from_secs(60),
            slot,
        );
        let mut seen = Vec::new();
        while let Some(Ok(frame)) = frames.next().await {
            let data = frame.into_data().unwrap_or_default();
            seen.push(String::from_utf8_lossy(&data).into_owned());
        }
        assert_eq!(seen[0], ": open\n\n");
        assert_eq!(
            seen.len(),
            1 + 3,
            "keep-alives at 15, 30 and 45 s: {seen:?}"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(60),
            "ended when idle"
        );
        drop(frames);
        assert_eq!(slots.available_permits(), 1, "its slot is free again");
    }
}
