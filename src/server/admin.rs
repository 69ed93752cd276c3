//! The admin listener, separate from the public one (bind it to a private address):
//!
//! - `GET /healthz` — the process is alive;
//! - `GET /readyz` — the store answers a PING (503 otherwise), and a Redis store's
//!   `maxmemory-policy` evicts nothing while queue routes are configured (503 naming
//!   the policy otherwise, unless `store.allow_eviction`; reported either way);
//! - `GET /metrics` — Prometheus text format;
//! - `DELETE /keys/<route>/<event id>` — frees one key for a deliberate redelivery
//!   (`hookgate forget` calls it);
//! - `POST /reload` — re-reads the config file (as SIGHUP does);
//! - `GET /handshakes/<route>` — the signing secret a provider handed over in its
//!   set-up request on that route (Asana, Notion), which the operator must configure;
//!   it is never written to the log. Only the first is kept;
//! - `GET /events/<route>`, `GET /events/<route>/<event id>`,
//!   `POST /events/<route>/{retry,purge}?event_id=ID|all_dead=true` — the queue of a
//!   `delivery = "queue"` route (`hookgate events` calls them);
//! - `DELETE /handshakes/<route>` — forgets it, so the next set-up request may hand
//!   over a new one (refused with 409 until then);
//! - `GET /deliveries`, `/deliveries/<id>`, `/deliveries/stream`, `/overview` and
//!   `POST /deliveries/<id>/replay` — the delivery log (`deliveries.rs`);
//! - `GET /ui/` — the inspector page (`ui.rs`): the delivery log, queues and routes in
//!   a browser; it asks for the token itself.
//!
//! With `server.admin_token` set, every endpoint but `/healthz` and `/readyz` (which
//! probes call) requires `Authorization: Bearer <token>`; anything else gets 401.
//!
//! A web page must not be able to use the listener through an operator's browser
//! (cross-site requests, DNS rebinding), token or not: a request whose `Host` is not an
//! IP address, `localhost` or one of `server.admin_hosts` is refused (421), as is one
//! with an `Origin` other than the listener's own or `Sec-Fetch-Site: cross-site` or
//! `same-site` (403); and a `POST` (every state change but `DELETE`, which no page can
//! send cross-site without the listener's consent) must carry `Authorization` or
//! `X-Requested-By`, which no page can add to a cross-site request either (403). The
//! command line sends `X-Requested-By: hookgate`. Connections are bounded (`ADMIN_LIMITS`)
//! and closed when silent or idle, as the public listener's are.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use tokio::net::TcpListener;

use super::{AppState, Routing};
use crate::config::Route;
use crate::provider::EventId;
use crate::store::{DedupKey, DedupStore, QueueStore as _, State, StoreError, Target};

use crate::pipeline::respond::{Resp, admin as json};

/// Whether the request may use an endpoint that changes state or reveals secrets.
fn authorized<B>(state: &AppState, req: &Request<B>) -> bool {
    let Some(token) = &state.server.admin_token else {
        return true;
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    crate::provider::mac::ct_eq(presented, token.expose())
}

/// Connections the admin listener holds open at most (64), from one address (16),
/// and past those, taken for one probe only (16): beyond, a new one is answered 503
/// and closed.
const ADMIN_LIMITS: super::AdminLimits = super::AdminLimits {
    max: 64,
    per_client: 16,
    probes: 16,
};

/// Why a request is refused as one a web page may have sent through an operator's
/// browser, if it is: the status and the reason.
fn browser_refusal<B>(state: &AppState, req: &Request<B>) -> Option<(StatusCode, String)> {
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default()
        .to_ascii_lowercase();
    if !host_is_ours(&host, &state.server.admin_hosts) {
        return Some((
            StatusCode::MISDIRECTED_REQUEST,
            "the admin listener answers to its IP addresses, localhost and server.admin_hosts only"
                .into(),
        ));
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let own = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https") && rest.eq_ignore_ascii_case(&host)
            });
        if !own {
            return Some((
                StatusCode::FORBIDDEN,
                "a request from another origin is refused".into(),
            ));
        }
    }
    let site = req
        .headers()
        .get("sec-fetch-site")
        .map(|v| v.as_bytes().to_ascii_lowercase());
    if matches!(site.as_deref(), Some(b"cross-site" | b"same-site")) {
        return Some((
            StatusCode::FORBIDDEN,
            "a request from another site is refused".into(),
        ));
    }
    if req.method() == Method::POST
        && !req.headers().contains_key(header::AUTHORIZATION)
        && !req.headers().contains_key("x-requested-by")
    {
        return Some((
            StatusCode::FORBIDDEN,
            "a POST to the admin listener needs an X-Requested-By header (any value; hookgate's command line sends it) or Authorization".into(),
        ));
    }
    None
}

/// Whether a `Host` names this listener: an IP address (a page cannot rebind one),
/// `localhost`, or a configured name; with or without a port.
fn host_is_ours(host: &str, names: &[String]) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        return v6
            .split_once(']')
            .is_some_and(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().is_ok());
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.parse::<u16>().is_ok())
            .map_or(host, |(name, _)| name)
    };
    !name.is_empty()
        && (name.parse::<std::net::Ipv4Addr>().is_ok()
            || name == "localhost"
            || names.iter().any(|n| n == name))
}

/// One admin request, parsed once: which endpoint, its arguments and its query, each
/// percent-decoded here and nowhere else.
#[derive(Debug, PartialEq, Eq)]
struct AdminRequest {
    method: Method,
    /// The path's first segment, as sent: `healthz`, `events`, `keys`, …
    endpoint: String,
    /// The path's later segments, each percent-decoded: a route, then an event ID or
    /// an action. `/events/a%2Fb/x` has two (`a/b` and `x`); `/events/a/` has `a` and
    /// an empty one.
    args: Vec<String>,
    /// The query's parameters, decoded (the last of a repeated name wins).
    query: HashMap<String, String>,
}

impl AdminRequest {
    fn parse(method: &Method, uri: &http::Uri) -> Self {
        let path = uri.path();
        let path = path.strip_prefix('/').unwrap_or(path);
        let (endpoint, args) = match path.split_once('/') {
            Some((endpoint, rest)) => (endpoint, rest.split('/').map(decode).collect()),
            None => (path, Vec::new()),
        };
        let query = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
        Self {
            method: method.clone(),
            endpoint: endpoint.to_owned(),
            args,
            query,
        }
    }

    /// Everything after the endpoint, decoded: `/handshakes/<route>`'s route.
    fn rest(&self) -> String {
        self.args.join("/")
    }

    /// Everything after the route, decoded, if the path goes on past it: the event ID
    /// of `/keys/<route>/<event id>` and `/events/<route>/<event id>`, or an action.
    fn after_route(&self) -> Option<String> {
        self.args
            .split_first()
            .filter(|(_, rest)| !rest.is_empty())
            .map(|(_, rest)| rest.join("/"))
    }

    /// `/healthz` and `/readyz`, which probes call without a token.
    fn is_probe(&self) -> bool {
        self.method == Method::GET
            && self.args.is_empty()
            && matches!(self.endpoint.as_str(), "healthz" | "readyz")
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Every answer the admin listener gives; [`response`] is the table that writes each.
#[derive(Debug)]
enum AdminAnswer {
    /// 200 with the endpoint's JSON body.
    Ok(serde_json::Value),
    /// 200 with the metrics in Prometheus text format.
    Metrics(String),
    /// 400: the request names nothing the endpoint can act on.
    BadRequest(serde_json::Value),
    /// 401 with `WWW-Authenticate: Bearer`: the admin token is missing or wrong.
    Unauthorized,
    /// 421 or 403: a request a web page may have sent through an operator's browser.
    Refused(StatusCode, String),
    /// 404: no such endpoint, route or event.
    NotFound(serde_json::Value),
    /// 503: not ready, or the store did not answer (its error text is in the log).
    Unavailable(serde_json::Value),
}

/// `{"error": why}`, the body of most refusals.
fn error(why: impl Into<String>) -> serde_json::Value {
    serde_json::json!({ "error": why.into() })
}

fn response(answer: AdminAnswer) -> Resp {
    match answer {
        AdminAnswer::Ok(body) => json(StatusCode::OK, body),
        AdminAnswer::Metrics(text) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        AdminAnswer::BadRequest(body) => json(StatusCode::BAD_REQUEST, body),
        AdminAnswer::Unauthorized => {
            let mut r = json(
                StatusCode::UNAUTHORIZED,
                serde_json::json!({ "status": "an admin token is required (Authorization: Bearer …)" }),
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            r
        }
        AdminAnswer::Refused(status, why) => json(status, serde_json::json!({ "status": why })),
        AdminAnswer::NotFound(body) => json(StatusCode::NOT_FOUND, body),
        AdminAnswer::Unavailable(body) => json(StatusCode::SERVICE_UNAVAILABLE, body),
    }
}

/// The one guard ahead of every endpoint: a request a web page may have sent is
/// refused, then one without the admin token (but the probes').
fn guard<B>(state: &AppState, http: &Request<B>, req: &AdminRequest) -> Option<AdminAnswer> {
    if let Some((status, why)) = browser_refusal(state, http) {
        return Some(AdminAnswer::Refused(status, why));
    }
    // The inspector page's assets hold nothing secret and must load to ask for the
    // token: past the check above, they need none (`handle` answers every such path
    // from the page, and nothing else).
    let page = super::ui::is_page(http.uri().path());
    (!req.is_probe() && !page && !authorized(state, http)).then_some(AdminAnswer::Unauthorized)
}

/// The admin router: every request but the live stream's, whatever its method and
/// path (each parsed by splitting, never by slicing), answered here; an unknown path
/// gets 404 with a JSON body.
pub(crate) async fn handle<B>(state: Arc<AppState>, http: Request<B>) -> Resp {
    let req = AdminRequest::parse(http.method(), http.uri());
    if let Some(refused) = guard(&state, &http, &req) {
        return response(refused);
    }
    // The inspector page (`ui.rs`).
    if super::ui::is_page(http.uri().path()) {
        return super::ui::serve(http.method(), http.uri().path());
    }
    // The delivery log's endpoints (`deliveries.rs`).
    if super::deliveries::serves(http.uri().path()) {
        return super::deliveries::handle(&state, http).await;
    }
    response(dispatch(&state, &req).await)
}

/// Which endpoint answers: one line each.
async fn dispatch(state: &AppState, req: &AdminRequest) -> AdminAnswer {
    let bare = req.args.is_empty();
    match (&req.method, req.endpoint.as_str()) {
        (&Method::GET, "healthz") if bare => AdminAnswer::Ok(serde_json::json!({ "status": "ok" })),
        (&Method::GET, "readyz") if bare => readyz(state).await,
        (&Method::GET, "metrics") if bare => metrics(state).await,
        (&Method::POST, "reload") if bare => reload(state).await,
        (&Method::GET, "handshakes") if !bare => handed_secret(state, &req.rest()),
        (&Method::DELETE, "handshakes") if !bare => clear_handed_secret(state, &req.rest()),
        (&Method::DELETE, "keys") if !bare => forget(state, req).await,
        (_, "events") if !bare => events(state, req).await,
        _ => AdminAnswer::NotFound(error("not found")),
    }
}

/// `GET /readyz`: the store answers a PING, and evicts nothing queue routes need.
async fn readyz(state: &AppState) -> AdminAnswer {
    let ping = tokio::time::timeout(Duration::from_secs(2), state.store().ping()).await;
    match ping {
        Ok(Ok(())) => {}
        // The store's own error text goes to the log, not into an answer.
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: the store did not answer its ping");
            return AdminAnswer::Unavailable(serde_json::json!({ "status": "store unavailable" }));
        }
        Err(_) => {
            tracing::warn!("readiness: the store's ping timed out");
            return AdminAnswer::Unavailable(serde_json::json!({ "status": "store unavailable" }));
        }
    }
    // The eviction policy, read again: Redis's config may change at runtime. A failed
    // read keeps what was known.
    if let Err(e) = state.check_eviction().await {
        tracing::warn!(error = %e, "readiness: the Redis maxmemory-policy could not be read");
    }
    let routing = state.routing();
    match (state.eviction_refusal(&routing), state.evicting_policy()) {
        (Some(_), policy) => AdminAnswer::Unavailable(serde_json::json!({
            "status": "the store may evict keys: queue routes are refused",
            "maxmemory_policy": policy,
            "fix": "set maxmemory-policy noeviction, or store.allow_eviction = true",
        })),
        (None, Some(policy)) => AdminAnswer::Ok(serde_json::json!({
            "status": "ready",
            "store": state.store().kind(),
            "maxmemory_policy": policy,
            "warning": super::eviction::cost(&policy),
        })),
        (None, None) => {
            AdminAnswer::Ok(serde_json::json!({ "status": "ready", "store": state.store().kind() }))
        }
    }
}

/// `GET /metrics`.
async fn metrics(state: &AppState) -> AdminAnswer {
    crate::delivery::gauges(&state.routing(), state.store(), &state.metrics).await;
    AdminAnswer::Metrics(state.metrics.render())
}

/// `POST /reload`: re-reads the config file, as SIGHUP does.
async fn reload(state: &AppState) -> AdminAnswer {
    match state.reload().await {
        Ok(n) => AdminAnswer::Ok(serde_json::json!({ "status": "reloaded", "routes": n })),
        Err(e) => {
            AdminAnswer::BadRequest(serde_json::json!({ "status": "refused", "errors": e.0 }))
        }
    }
}

/// `GET /handshakes/<route>`: the secret a provider handed over on the route.
fn handed_secret(state: &AppState, route: &str) -> AdminAnswer {
    let handed = state
        .handed_secrets
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(route)
        .cloned();
    match handed {
        Some(h) => AdminAnswer::Ok(serde_json::json!({
            "route": route,
            "secret": String::from_utf8_lossy(h.secret.expose()),
            "received_at": h.received_at,
        })),
        None => AdminAnswer::NotFound(
            serde_json::json!({ "status": "no secret handed over on this route" }),
        ),
    }
}

/// `DELETE /handshakes/<route>`: the next set-up request may hand over a new secret.
fn clear_handed_secret(state: &AppState, route: &str) -> AdminAnswer {
    let cleared = state.clear_handed_secret(route);
    tracing::info!(
        route,
        cleared,
        "handed-over secret cleared on request: the next set-up request may hand over a new one"
    );
    AdminAnswer::Ok(serde_json::json!({ "route": route, "cleared": cleared }))
}

/// `DELETE /keys/<route>/<event id>`: frees one key for a deliberate redelivery.
async fn forget(state: &AppState, req: &AdminRequest) -> AdminAnswer {
    let (Some(route), Some(raw_id)) = (req.args.first(), req.after_route()) else {
        return AdminAnswer::BadRequest(error("use DELETE /keys/<route>/<event id>"));
    };
    let routing = state.routing();
    if routing.route(route).is_none() || raw_id.is_empty() {
        return AdminAnswer::NotFound(error("no such route"));
    }
    let id = EventId::new(&raw_id);
    let key = DedupKey::new(&routing.store_cfg.key_prefix, route, id.as_str());
    let queue_route = routing
        .route(route)
        .filter(|r| r.delivery == crate::config::Delivery::Queue);
    let forgotten = if let Some(r) = queue_route {
        // A queue route: its destinations' delivered records are what answer copies.
        let mut any = Ok(false);
        for d in &r.destinations {
            let q = routing.queue(route, &d.name);
            match state.store().forget_delivered(&q, id.as_str()).await {
                Ok(f) => any = any.map(|a| a || f),
                Err(e) => any = Err(e),
            }
        }
        any
    } else {
        state.store().forget(&key).await
    };
    match forgotten {
        Ok(existed) => {
            tracing::info!(route, event_id = %id, existed, "key forgotten on request: the next delivery of this event is forwarded");
            AdminAnswer::Ok(
                serde_json::json!({ "route": route, "event_id": id.as_str(), "forgotten": existed }),
            )
        }
        Err(e) => {
            tracing::warn!(route, event_id = %id, error = %e, "forgetting a key failed: the store did not answer");
            AdminAnswer::Unavailable(error("dedup store unavailable, retry later"))
        }
    }
}

/// The route and destinations a queue endpoint acts on.
struct Queues<'a> {
    state: &'a AppState,
    routing: Arc<Routing>,
    route: &'a str,
    config: Arc<Route>,
    /// Every destination of the route, or the one `destination=NAME` names.
    destinations: Vec<String>,
    /// Whether answers name the destination (a route with several, or one named apart
    /// from the route).
    named: bool,
}

/// The queue endpoints (`hookgate events` calls them):
/// - `GET /events/<route>?state=dead&limit=100` — events, oldest first;
/// - `GET /events/<route>/<event id>` — one event: attempts, each result, next try;
/// - `POST /events/<route>/retry?event_id=ID` or `?all_dead=true` — queue again;
/// - `POST /events/<route>/purge?event_id=ID` or `?all_dead=true` — delete.
///
/// Each acts on every destination of the route, or on one with `destination=NAME`.
async fn events(state: &AppState, req: &AdminRequest) -> AdminAnswer {
    let queues = match Queues::of(state, req) {
        Ok(q) => q,
        Err(refused) => return refused,
    };
    let tail = req.after_route();
    let result = match (&req.method, tail.as_deref()) {
        (&Method::GET, None) => list_events(&queues, &req.query).await,
        (&Method::GET, Some(id)) => show_event(&queues, id).await,
        (&Method::POST, Some(action @ ("retry" | "purge"))) => {
            act_on_events(&queues, action, &req.query).await
        }
        _ => {
            return AdminAnswer::NotFound(error(
                "use GET /events/<route>[/<event id>] or POST /events/<route>/{retry,purge}?event_id=ID|all_dead=true",
            ));
        }
    };
    result.unwrap_or_else(|e| {
        tracing::warn!(route = queues.route, error = %e, "queue: an admin request failed: the store did not answer");
        AdminAnswer::Unavailable(error("store unavailable, retry later"))
    })
}

impl<'a> Queues<'a> {
    /// The route `/events/<route>` names, or the answer that it has no queue.
    fn of(state: &'a AppState, req: &'a AdminRequest) -> Result<Self, AdminAnswer> {
        let route = req.args.first().map_or("", String::as_str);
        let routing = state.routing();
        // Any configured route: one a reload switched back to sync may still hold events.
        let Some(config) = routing
            .route(route)
            .filter(|_| !matches!(state.store(), crate::store::Store::Memory(_)))
            .cloned()
        else {
            return Err(AdminAnswer::NotFound(error(format!(
                "no queue route named {route:?} (delivery = \"queue\" on a disk or Redis store)"
            ))));
        };
        let named = !config.only_own_destination();
        let destinations: Vec<String> = match req.query.get("destination") {
            None => config.destinations.iter().map(|d| d.name.clone()).collect(),
            Some(d) if config.destination(d).is_some() => vec![d.clone()],
            Some(d) => {
                return Err(AdminAnswer::NotFound(
                    serde_json::json!({ "error": format!("route {route:?} has no destination {d:?}"), "destinations": config.destinations.iter().map(|d| d.name.clone()).collect::<Vec<_>>() }),
                ));
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
async fn list_events(
    q: &Queues<'_>,
    params: &HashMap<String, String>,
) -> Result<AdminAnswer, StoreError> {
    let filter = match params.get("state").map(|s| (s, State::parse(s))) {
        None => None,
        Some((_, Some(s))) => Some(s),
        Some((s, None)) => {
            return Ok(AdminAnswer::BadRequest(error(format!(
                "state {s:?}: use queued, retrying, dead or delivered"
            ))));
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
        match q.state.store().list(&queue, filter, limit).await {
            Ok(events) => all.extend(events.into_iter().map(|mut e| {
                e.destination = q.named.then(|| d.clone());
                e
            })),
            Err(e) => failed = Some(e),
        }
    }
    all.sort_by_key(|e| e.received_at_ms);
    all.truncate(limit);
    match failed {
        Some(e) => Err(e),
        None => Ok(AdminAnswer::Ok(
            serde_json::json!({ "route": q.route, "delivery": if q.config.delivery == crate::config::Delivery::Queue { "queue" } else { "sync" }, "events": all }),
        )),
    }
}

/// `GET /events/<route>/<event id>`: one event, in each destination that holds it.
async fn show_event(q: &Queues<'_>, id: &str) -> Result<AdminAnswer, StoreError> {
    let mut found = Vec::new();
    let mut failed = None;
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        match q.state.store().show(&queue, id).await {
            Ok(Some((env, status))) => found.push((d.clone(), env, status)),
            Ok(None) => {}
            Err(e) => failed = Some(e),
        }
    }
    match (found.first(), failed) {
        (_, Some(e)) => Err(e),
        (None, None) => Ok(AdminAnswer::NotFound(
            serde_json::json!({ "error": "no such event on this route", "event_id": id }),
        )),
        // The first destination's record at the top (as on a route with one), and
        // each destination's under `destinations`.
        (Some((d, env, status)), None) => {
            let dest = |d: &str| q.named.then(|| d.to_owned());
            let mut body = event_json(q.route, dest(d), env, status);
            if q.named {
                body["destinations"] = found
                    .iter()
                    .map(|(d, env, status)| event_json(q.route, dest(d), env, status))
                    .collect();
            }
            Ok(AdminAnswer::Ok(body))
        }
    }
}

/// `POST /events/<route>/{retry,purge}?event_id=ID|all_dead=true`.
async fn act_on_events(
    q: &Queues<'_>,
    action: &str,
    params: &HashMap<String, String>,
) -> Result<AdminAnswer, StoreError> {
    let t = match (params.get("event_id"), params.get("all_dead")) {
        (Some(id), None) if !id.is_empty() => Target::One(id.clone()),
        (None, Some(v)) if v == "true" || v == "1" => Target::AllDead,
        _ => {
            return Ok(AdminAnswer::BadRequest(error(
                "name one event (event_id=ID) or all_dead=true",
            )));
        }
    };
    let store = q.state.store();
    // Every destination is tried, whichever failed.
    let mut done = Ok(0);
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        let n = if action == "retry" {
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
        Target::AllDead => "all_dead",
    };
    tracing::info!(
        route = q.route,
        action,
        events = n,
        target,
        "queue: operator {action}"
    );
    if action == "retry" {
        q.state.deliveries.notify_one();
    }
    let key = if action == "retry" {
        "retried"
    } else {
        "purged"
    };
    Ok(AdminAnswer::Ok(
        serde_json::json!({ "route": q.route, key: n }),
    ))
}

/// One event's record in one destination, as `GET /events/<route>/<id>` shows it.
pub(super) fn event_json(
    route: &str,
    destination: Option<String>,
    env: &crate::store::Envelope,
    status: &crate::store::Status,
) -> serde_json::Value {
    serde_json::json!({
        "route": route,
        "destination": destination,
        "event_id": env.event_id,
        "event_type": env.event_type,
        "state": status.state,
        "attempts": status.attempts,
        "received_at_ms": env.received_at_ms,
        "next_at_ms": status.next_at_ms,
        "dead_reason": status.dead_reason,
        "order_key": status.order_key,
        "history": status.history,
        // An operator's retry: `attempts` counts from here; `history` keeps the earlier.
        "requeued_at_ms": status.requeued_at_ms,
        "method": env.method,
        // Names only: values may carry signatures and tokens.
        // Only those forwarded (not `host`, `content-length`, …).
        "headers": env.headers.iter().filter(|h| crate::forward::is_forwarded(&h.name)).map(|h| h.name.clone()).collect::<Vec<_>>(),
    })
}

/// Serves the admin endpoints until `shutdown` resolves.
pub async fn run(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) {
    super::serve_admin(
        state,
        listener,
        shutdown,
        ADMIN_LIMITS,
        |st, http, _peer| async move {
            // The delivery log's live stream answers with a streaming body.
            if super::deliveries::is_stream(&http) {
                let req = AdminRequest::parse(http.method(), http.uri());
                if guard(&st, &http, &req).is_none() {
                    return super::deliveries::stream(&st, &http);
                }
            }
            handle(st, http).await.map(http_body_util::Either::Left)
        },
        // Past the bounds, probes only.
        |st, http| async move {
            if AdminRequest::parse(http.method(), http.uri()).is_probe() {
                handle(st, http).await
            } else {
                crate::pipeline::respond::response(crate::pipeline::respond::Answer::Overloaded)
            }
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: Method, uri: &str) -> AdminRequest {
        AdminRequest::parse(&method, &uri.parse().expect("uri"))
    }

    #[test]
    fn a_request_is_decoded_once_segment_by_segment() {
        let r = parse(
            Method::POST,
            "/events/a%2Fb%20c/retry?event_id=evt%201&destination=x+y",
        );
        assert_eq!(r.endpoint, "events");
        assert_eq!(r.args, ["a/b c", "retry"]);
        assert_eq!(r.after_route().as_deref(), Some("retry"));
        assert_eq!(r.query["event_id"], "evt 1");
        assert_eq!(r.query["destination"], "x y");
        // An event ID may hold slashes, sent as they are or encoded.
        let r = parse(Method::DELETE, "/keys/stripe/a/b%2Fc");
        assert_eq!(r.args[0], "stripe");
        assert_eq!(r.after_route().as_deref(), Some("a/b/c"));
        // Decoded once: an encoded percent sign stays one.
        assert_eq!(parse(Method::GET, "/handshakes/a%2541").rest(), "a%41");
    }

    #[test]
    fn only_the_bare_probe_paths_are_probes() {
        assert!(parse(Method::GET, "/healthz").is_probe());
        assert!(parse(Method::GET, "/readyz?x=1").is_probe());
        assert!(!parse(Method::POST, "/readyz").is_probe());
        assert!(!parse(Method::GET, "/healthz/").is_probe());
        assert!(!parse(Method::GET, "/heal%74hz").is_probe());
        let r = parse(Method::GET, "/events/a/");
        assert_eq!(r.args, ["a", ""]);
        assert_eq!(r.after_route().as_deref(), Some(""));
        assert_eq!(parse(Method::GET, "/events/a").after_route(), None);
    }
}

/// The router against arbitrary requests: whatever the method and path, it answers
/// (no panic) and, but for the assets that are not JSON by nature (the inspector's
/// page, `/metrics`), with a JSON body.
#[cfg(test)]
mod router_properties {
    use std::sync::Arc;

    use bytes::Bytes;
    use http::{Method, Request, header};
    use http_body_util::{BodyExt as _, Empty};
    use proptest::prelude::*;

    use super::AppState;

    const CONFIG: &str = r#"
[store]
backend = "memory"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "http://127.0.0.1:9/hooks"
"#;

    fn gateway(rt: &tokio::runtime::Runtime) -> Arc<AppState> {
        rt.block_on(async {
            let env = |_: &str| None;
            let cfg = crate::config::parse(CONFIG, std::path::Path::new("test.toml"), &env)
                .unwrap_or_else(|e| panic!("{e}"));
            crate::app::App::build(&cfg, crate::server::Clock::System)
                .expect("gateway state")
                .state()
                .clone()
        })
    }

    /// A path segment: the endpoints' own words, empty ones, broken escapes, and
    /// anything at all percent-encoded (non-ASCII, control characters, slashes) or
    /// very long.
    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            prop::sample::select(vec![
                "deliveries",
                "replay",
                "stream",
                "events",
                "keys",
                "handshakes",
                "ui",
                "overview",
                "healthz",
                "readyz",
                "metrics",
                "reload",
                "retry",
                "purge",
                "stripe",
                "..",
                ".",
                "%",
                "%zz",
                "%FF",
                "%2F",
                "%00",
                "a%2Fb",
                "index.html",
            ])
            .prop_map(str::to_owned),
            any::<String>().prop_map(|s| {
                percent_encoding::utf8_percent_encode(&s, percent_encoding::NON_ALPHANUMERIC)
                    .to_string()
            }),
            "[a-zA-Z0-9._~!$&'()*+,;=:@-]{1,12}",
            (1usize..6000).prop_map(|n| "a".repeat(n)),
        ]
    }

    fn path() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec![
                "",
                "/",
                "/deliveries",
                "/deliveries/",
                "/deliveries/replay",
                "/deliveries//replay",
                "/deliveries/0190a2b3c4d5-00000001",
                "/events",
                "/events/stripe",
                "/keys",
                "/keys/stripe",
                "/handshakes",
                "/ui",
                "/overview",
                "/healthz",
                "/metrics",
                "/reload",
            ]),
            prop_oneof![
                2 => Just(Vec::new()),
                3 => prop::collection::vec(segment(), 1..5),
            ],
            prop::option::of("[a-z_=&%0-9]{0,20}"),
        )
            .prop_map(|(head, segments, query)| {
                let mut p = head.to_owned();
                for s in segments {
                    p.push('/');
                    p.push_str(&s);
                }
                if p.is_empty() {
                    p.push('/');
                }
                if let Some(q) = query {
                    p.push('?');
                    p.push_str(&q);
                }
                p
            })
    }

    fn method() -> impl Strategy<Value = Method> {
        prop_oneof![
            2 => Just(Method::POST),
            1 => Just(Method::GET),
            2 => prop::sample::select(vec![
                Method::GET,
                Method::POST,
                Method::DELETE,
                Method::PUT,
                Method::HEAD,
                Method::OPTIONS,
                Method::PATCH,
            ]),
            1 => "[A-Z]{1,10}".prop_filter_map("a method", |m| Method::from_bytes(m.as_bytes()).ok()),
        ]
    }

    /// The answers that are not JSON by design: the page's assets and the metrics.
    fn not_json_by_design(method: &Method, path: &str, status: u16) -> bool {
        let path = path.split('?').next().unwrap_or_default();
        let read = method == Method::GET || method == Method::HEAD;
        (read && super::super::ui::is_page(path) && status < 400)
            || (method == Method::GET && path == "/metrics" && status == 200)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn every_request_gets_an_answer_and_unknown_paths_json(method in method(), path in path()) {
            static RT: std::sync::OnceLock<(tokio::runtime::Runtime, Arc<AppState>)> = std::sync::OnceLock::new();
            let (rt, state) = RT.get_or_init(|| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("runtime");
                let state = gateway(&rt);
                (rt, state)
            });
            // Only a path the HTTP layer would pass on reaches the router.
            let Ok(uri) = path.parse::<http::Uri>() else {
                return Err(TestCaseError::reject("not a URI"));
            };
            let req = Request::builder()
                .method(method.clone())
                .uri(uri)
                .header(header::HOST, "127.0.0.1")
                .header("x-requested-by", "hookgate-tests")
                .body(Empty::<Bytes>::new())
                .expect("request");
            let resp = rt.block_on(super::handle(state.clone(), req));
            let status = resp.status().as_u16();
            let ctype = resp.headers().get(header::CONTENT_TYPE).cloned();
            let body = rt.block_on(resp.into_body().collect()).map(|b| b.to_bytes()).unwrap_or_default();
            if !not_json_by_design(&method, &path, status) {
                prop_assert_eq!(ctype.as_ref().map(|v| v.as_bytes()), Some(&b"application/json"[..]), "{} {}: {}", method, path, status);
                prop_assert!(
                    serde_json::from_slice::<serde_json::Value>(&body).is_ok(),
                    "{} {}: {} {:?}", method, path, status, String::from_utf8_lossy(&body)
                );
            }
        }
    }

    /// The paths that panicked before, and their neighbours: each answered, 404 JSON.
    #[test]
    fn paths_without_an_id_are_not_found() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let state = gateway(&rt);
        for (method, path) in [
            (Method::POST, "/deliveries/replay"),
            (Method::POST, "/deliveries//replay"),
            (Method::POST, "/deliveries/x/y/replay"),
            (Method::POST, "/deliveries/replay/"),
            (Method::GET, "/deliveries//"),
            (Method::GET, "/deliveries/a/"),
            (Method::POST, "/replay"),
        ] {
            let req = Request::builder()
                .method(method.clone())
                .uri(path)
                .header(header::HOST, "127.0.0.1")
                .header("x-requested-by", "hookgate-tests")
                .body(Empty::<Bytes>::new())
                .expect("request");
            let resp = rt.block_on(super::handle(state.clone(), req));
            assert_eq!(resp.status().as_u16(), 404, "{method} {path}");
            let body = rt
                .block_on(resp.into_body().collect())
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert!(v["error"].is_string(), "{method} {path}: {v}");
        }
    }
}
