//! `GET /handshakes/<route>` and `DELETE /handshakes/<route>`: the signing secret a
//! provider handed over in its set-up request on a route (Asana, Notion), which the
//! operator must configure. It is never written to the log; only the first is kept,
//! until the operator clears it.

use super::AdminContext;
use super::api::{HandedSecret, HandshakeCleared, StatusBody};
use super::exchange::AdminAnswer;

/// `GET /handshakes/<route>`: the secret a provider handed over on the route.
pub(super) fn show(state: &AdminContext, route: &str) -> AdminAnswer {
    match state.handed.get(route) {
        Some(h) => AdminAnswer::ok(&HandedSecret {
            route: route.to_owned(),
            secret: String::from_utf8_lossy(h.secret.expose()).into_owned(),
            received_at: h.received_at,
        }),
        None => AdminAnswer::NotFound(super::api::to_json(&StatusBody::new(
            "no secret handed over on this route",
        ))),
    }
}

/// `DELETE /handshakes/<route>`: the next set-up request may hand over a new secret.
pub(super) fn clear(state: &AdminContext, route: &str) -> AdminAnswer {
    let cleared = state.handed.clear(route);
    tracing::info!(
        route,
        cleared,
        "handed-over secret cleared on request: the next set-up request may hand over a new one"
    );
    AdminAnswer::ok(&HandshakeCleared {
        route: route.to_owned(),
        cleared,
    })
}
