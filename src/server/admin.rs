//! The admin listener, separate from the public one (bind it to a private address):
//!
//! - `GET /healthz` — the process is alive;
//! - `GET /readyz` — the store answers a PING (503 otherwise);
//! - `GET /metrics` — Prometheus text format;
//! - `DELETE /keys/<route>/<event id>` — frees one key for a deliberate redelivery
//!   (`hookgate forget` calls it);
//! - `POST /reload` — re-reads the config file (as SIGHUP does);
//! - `GET /handshakes/<route>` — the signing secret a provider handed over in its
//!   set-up request on that route (Asana, Notion), which the operator must configure;
//!   it is never written to the log. Only the first is kept;
//! - `DELETE /handshakes/<route>` — forgets it, so the next set-up request may hand
//!   over a new one (refused with 409 until then).
//!
//! With `server.admin_token` set, every endpoint but `/healthz` and `/readyz` (which
//! probes call) requires `Authorization: Bearer <token>`; anything else gets 401.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;

use super::AppState;
use crate::dedup::{DedupKey, DedupStore};
use crate::provider::EventId;

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

async fn handle(state: Arc<AppState>, req: Request<Incoming>) -> Resp {
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
                Ok(Ok(())) => json(
                    StatusCode::OK,
                    serde_json::json!({ "status": "ready", "store": state.store().kind() }),
                ),
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
        (&Method::POST, "/reload") => match state.reload() {
            Ok(n) => json(
                StatusCode::OK,
                serde_json::json!({ "status": "reloaded", "routes": n }),
            ),
            Err(e) => json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "status": "refused", "errors": e.0 }),
            ),
        },
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
            if !routing.routes.values().any(|r| r.name == route) || raw_id.is_empty() {
                return json(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({ "error": "no such route" }),
                );
            }
            let id = EventId::new(&raw_id);
            let key = DedupKey::new(&routing.store_cfg.key_prefix, &route, id.as_str());
            match state.store().forget(&key).await {
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

/// Serves the admin endpoints until `shutdown` resolves.
pub async fn run(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) {
    super::listen::serve_http(listener, shutdown, move |req, _peer| {
        handle(state.clone(), req)
    })
    .await;
}
