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
//!   over a new one (refused with 409 until then).
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
//! command line sends `X-Requested-By: hookgate`. Connections are bounded (`ADMIN_CONNECTIONS`)
//! and closed when silent or idle, as the public listener's are.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;

use super::AppState;
use crate::provider::EventId;
use crate::queue::{QueueStore as _, State, Target};
use crate::store::{DedupKey, DedupStore};

use super::respond::{Resp, admin as json};

/// Whether the request may use an endpoint that changes state or reveals secrets.
fn authorized(state: &AppState, req: &Request<Incoming>) -> bool {
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

/// Connections the admin listener holds open at most; beyond, a new one is answered
/// 503 and closed.
const ADMIN_CONNECTIONS: usize = 64;

/// Why a request is refused as one a web page may have sent through an operator's
/// browser, if it is: the status and the reason.
fn browser_refusal(state: &AppState, req: &Request<Incoming>) -> Option<(StatusCode, String)> {
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

async fn handle(state: Arc<AppState>, req: Request<Incoming>) -> Resp {
    if let Some((status, why)) = browser_refusal(&state, &req) {
        return json(status, serde_json::json!({ "status": why }));
    }
    let path = req.uri().path().to_owned();
    let probe = req.method() == Method::GET && matches!(path.as_str(), "/healthz" | "/readyz");
    if !probe && !authorized(&state, &req) {
        let mut r = json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({ "status": "an admin token is required (Authorization: Bearer …)" }),
        );
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return r;
    }
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => json(StatusCode::OK, serde_json::json!({ "status": "ok" })),
        (&Method::GET, "/readyz") => {
            let ping = tokio::time::timeout(Duration::from_secs(2), state.store().ping()).await;
            match ping {
                Ok(Ok(())) => {
                    // The eviction policy, read again: Redis's config may change at
                    // runtime. A failed read keeps what was known.
                    if let Err(e) = state.check_eviction().await {
                        tracing::warn!(error = %e, "readiness: the Redis maxmemory-policy could not be read");
                    }
                    let routing = state.routing();
                    match (state.eviction_refusal(&routing), state.evicting_policy()) {
                        (Some(_), policy) => json(
                            StatusCode::SERVICE_UNAVAILABLE,
                            serde_json::json!({
                                "status": "the store may evict keys: queue routes are refused",
                                "maxmemory_policy": policy,
                                "fix": "set maxmemory-policy noeviction, or store.allow_eviction = true",
                            }),
                        ),
                        (None, Some(policy)) => json(
                            StatusCode::OK,
                            serde_json::json!({
                                "status": "ready",
                                "store": state.store().kind(),
                                "maxmemory_policy": policy,
                                "warning": super::eviction::cost(&policy),
                            }),
                        ),
                        (None, None) => json(
                            StatusCode::OK,
                            serde_json::json!({ "status": "ready", "store": state.store().kind() }),
                        ),
                    }
                }
                // The store's own error text goes to the log, not into an answer.
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "readiness: the store did not answer its ping");
                    json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        serde_json::json!({ "status": "store unavailable" }),
                    )
                }
                Err(_) => {
                    tracing::warn!("readiness: the store's ping timed out");
                    json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        serde_json::json!({ "status": "store unavailable" }),
                    )
                }
            }
        }
        (&Method::GET, "/metrics") => {
            super::worker::gauges(&state).await;
            let mut r = Response::new(Full::new(Bytes::from(state.metrics.render())));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        (&Method::GET, p) if p.starts_with("/handshakes/") => {
            let route = &p["/handshakes/".len()..];
            let handed = state
                .handed_secrets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(route)
                .cloned();
            match handed {
                Some(h) => json(
                    StatusCode::OK,
                    serde_json::json!({
                        "route": route,
                        "secret": String::from_utf8_lossy(h.secret.expose()),
                        "received_at": h.received_at,
                    }),
                ),
                None => json(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({ "status": "no secret handed over on this route" }),
                ),
            }
        }
        (&Method::DELETE, p) if p.starts_with("/handshakes/") => {
            let route = percent_encoding::percent_decode_str(&p["/handshakes/".len()..])
                .decode_utf8_lossy()
                .into_owned();
            let cleared = state.clear_handed_secret(&route);
            tracing::info!(
                route,
                cleared,
                "handed-over secret cleared on request: the next set-up request may hand over a new one"
            );
            json(
                StatusCode::OK,
                serde_json::json!({ "route": route, "cleared": cleared }),
            )
        }
        (&Method::POST, "/reload") => match state.reload().await {
            Ok(n) => json(
                StatusCode::OK,
                serde_json::json!({ "status": "reloaded", "routes": n }),
            ),
            Err(e) => json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "status": "refused", "errors": e.0 }),
            ),
        },
        (method, p) if p.starts_with("/events/") => {
            let query = req.uri().query().unwrap_or_default().to_owned();
            events(&state, method, &p["/events/".len()..], &query).await
        }
        (&Method::DELETE, p) if p.starts_with("/keys/") => {
            let rest = &p["/keys/".len()..];
            let Some((route, raw_id)) = rest.split_once('/') else {
                return json(
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({ "error": "use DELETE /keys/<route>/<event id>" }),
                );
            };
            let route = percent_encoding::percent_decode_str(route)
                .decode_utf8_lossy()
                .into_owned();
            let raw_id = percent_encoding::percent_decode_str(raw_id)
                .decode_utf8_lossy()
                .into_owned();
            let routing = state.routing();
            if routing.route(&route).is_none() || raw_id.is_empty() {
                return json(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({ "error": "no such route" }),
                );
            }
            let id = EventId::new(&raw_id);
            let key = DedupKey::new(&routing.store_cfg.key_prefix, &route, id.as_str());
            let queue_route = routing
                .route(&route)
                .filter(|r| r.delivery == crate::config::Delivery::Queue);
            let forgotten = if let Some(r) = queue_route {
                // A queue route: its destinations' delivered records are what answer
                // copies.
                let mut any = Ok(false);
                for d in &r.destinations {
                    let q = routing.queue(&route, &d.name);
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
                    json(
                        StatusCode::OK,
                        serde_json::json!({ "route": route, "event_id": id.as_str(), "forgotten": existed }),
                    )
                }
                Err(e) => {
                    tracing::warn!(route, event_id = %id, error = %e, "forgetting a key failed: the store did not answer");
                    json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        serde_json::json!({ "error": "dedup store unavailable, retry later" }),
                    )
                }
            }
        }
        _ => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({ "error": "not found" }),
        ),
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The queue endpoints (`hookgate events` calls them):
/// - `GET /events/<route>?state=dead&limit=100` — events, oldest first;
/// - `GET /events/<route>/<event id>` — one event: attempts, each result, next try;
/// - `POST /events/<route>/retry?event_id=ID` or `?all_dead=true` — queue again;
/// - `POST /events/<route>/purge?event_id=ID` or `?all_dead=true` — delete.
///
/// Each acts on every destination of the route, or on one with `destination=NAME`.
async fn events(state: &AppState, method: &Method, rest: &str, query: &str) -> Resp {
    let params: std::collections::HashMap<String, String> =
        form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
    let (route, tail) = match rest.split_once('/') {
        Some((r, t)) => (decode(r), Some(t)),
        None => (decode(rest), None),
    };
    let routing = state.routing();
    // Any configured route: one a reload switched back to sync may still hold events.
    let Some(config) = routing
        .route(&route)
        .filter(|_| !matches!(state.store(), crate::store::Store::Memory(_)))
    else {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({ "error": format!("no queue route named {route:?} (delivery = \"queue\" on a disk or Redis store)") }),
        );
    };
    let named = !(config.destinations.len() == 1 && config.primary().name == route);
    let destinations: Vec<String> = match params.get("destination") {
        None => config.destinations.iter().map(|d| d.name.clone()).collect(),
        Some(d) if config.destination(d).is_some() => vec![d.clone()],
        Some(d) => {
            return json(
                StatusCode::NOT_FOUND,
                serde_json::json!({ "error": format!("route {route:?} has no destination {d:?}"), "destinations": config.destinations.iter().map(|d| d.name.clone()).collect::<Vec<_>>() }),
            );
        }
    };
    let store = state.store();
    let target = || match (params.get("event_id"), params.get("all_dead")) {
        (Some(id), None) if !id.is_empty() => Some(Target::One(id.clone())),
        (None, Some(v)) if v == "true" || v == "1" => Some(Target::AllDead),
        _ => None,
    };
    let result = match (method, tail) {
        (&Method::GET, None) => {
            let filter = match params.get("state").map(|s| (s, State::parse(s))) {
                None => None,
                Some((_, Some(s))) => Some(s),
                Some((s, None)) => {
                    return json(
                        StatusCode::BAD_REQUEST,
                        serde_json::json!({ "error": format!("state {s:?}: use queued, retrying, dead or delivered") }),
                    );
                }
            };
            let limit = params
                .get("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(100);
            let mut all = Vec::new();
            let mut failed = None;
            for d in &destinations {
                let q = routing.queue(&route, d);
                match store.list(&q, filter, limit).await {
                    Ok(events) => all.extend(events.into_iter().map(|mut e| {
                        e.destination = named.then(|| d.clone());
                        e
                    })),
                    Err(e) => failed = Some(e),
                }
            }
            all.sort_by_key(|e| e.received_at_ms);
            all.truncate(limit);
            match failed {
                Some(e) => Err(e),
                None => Ok(json(
                    StatusCode::OK,
                    serde_json::json!({ "route": route, "delivery": if config.delivery == crate::config::Delivery::Queue { "queue" } else { "sync" }, "events": all }),
                )),
            }
        }
        (&Method::GET, Some(id)) => {
            let id = decode(id);
            let mut found = Vec::new();
            let mut failed = None;
            for d in &destinations {
                let q = routing.queue(&route, d);
                match store.show(&q, &id).await {
                    Ok(Some((env, status))) => found.push((d.clone(), env, status)),
                    Ok(None) => {}
                    Err(e) => failed = Some(e),
                }
            }
            match (found.first(), failed) {
                (_, Some(e)) => Err(e),
                (None, None) => Ok(json(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({ "error": "no such event on this route", "event_id": id }),
                )),
                // The first destination's record at the top (as on a route with one),
                // and each destination's under `destinations`.
                (Some((d, env, status)), None) => {
                    let dest = |d: &str| named.then(|| d.to_owned());
                    let mut body = event_json(&route, dest(d), env, status);
                    if named {
                        body["destinations"] = found
                            .iter()
                            .map(|(d, env, status)| event_json(&route, dest(d), env, status))
                            .collect();
                    }
                    Ok(json(StatusCode::OK, body))
                }
            }
        }
        (&Method::POST, Some(action @ ("retry" | "purge"))) => {
            let Some(t) = target() else {
                return json(
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({ "error": "name one event (event_id=ID) or all_dead=true" }),
                );
            };
            let mut done = Ok(0);
            for d in &destinations {
                let q = routing.queue(&route, d);
                let n = if action == "retry" {
                    store.retry(&q, &t).await
                } else {
                    store.purge(&q, &t).await
                };
                done = match (done, n) {
                    (Ok(a), Ok(b)) => Ok(a + b),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
            }
            done.map(|n| {
                let target = match &t {
                    Target::One(id) => id.as_str(),
                    Target::AllDead => "all_dead",
                };
                tracing::info!(
                    route,
                    action,
                    events = n,
                    target,
                    "queue: operator {action}"
                );
                if action == "retry" {
                    state.deliveries.notify_one();
                }
                let key = if action == "retry" {
                    "retried"
                } else {
                    "purged"
                };
                json(
                    StatusCode::OK,
                    serde_json::json!({ "route": route, key: n }),
                )
            })
        }
        _ => {
            return json(
                StatusCode::NOT_FOUND,
                serde_json::json!({ "error": "use GET /events/<route>[/<event id>] or POST /events/<route>/{retry,purge}?event_id=ID|all_dead=true" }),
            );
        }
    };
    result.unwrap_or_else(|e| {
        tracing::warn!(route, error = %e, "queue: an admin request failed: the store did not answer");
        json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "error": "store unavailable, retry later" }),
        )
    })
}

/// One event's record in one destination, as `GET /events/<route>/<id>` shows it.
fn event_json(
    route: &str,
    destination: Option<String>,
    env: &crate::queue::Envelope,
    status: &crate::queue::Status,
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
        ADMIN_CONNECTIONS,
        |st, req, _peer| handle(st, req),
    )
    .await;
}
