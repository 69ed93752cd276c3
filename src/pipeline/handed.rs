//! Signing secrets providers hand over in their set-up handshake (Asana, Notion): the
//! pipeline keeps the first per route ([`HandedSecrets::keep`]), the admin listener
//! shows and clears it (`GET`/`DELETE /handshakes/<route>`). Never logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::observe::metrics::{Metrics, RouteResult};
use crate::secret::Secret;

/// A secret a provider handed over during set-up, and when (Unix seconds).
#[derive(Debug, Clone)]
pub(crate) struct HandedSecret {
    pub secret: Secret,
    pub received_at: u64,
}

/// What became of a secret a provider handed over in a set-up request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// The first on this route: kept for the admin listener.
    Kept,
    /// One is already held (until an operator clears it): refused.
    AlreadyHeld,
    /// The route has a configured secret: refused.
    RouteHasSecret,
}

impl Handed {
    fn label(self) -> &'static str {
        match self {
            Self::Kept => "kept",
            Self::AlreadyHeld => "refused_already_held",
            Self::RouteHasSecret => "refused_route_has_secret",
        }
    }
}

/// The secrets handed over, by route, for the admin listener's `GET
/// /handshakes/<route>`.
#[derive(Debug)]
pub(crate) struct HandedSecrets {
    held: Mutex<HashMap<String, HandedSecret>>,
    /// Counts every outcome (`hookgate_handed_secrets_total`).
    metrics: Arc<Metrics>,
    /// Whether an admin listener is configured (`server.admin_listen` as the gateway
    /// started): the log says where to read a kept secret, or that nowhere can.
    admin_listener: bool,
}

impl HandedSecrets {
    pub(crate) fn new(metrics: Arc<Metrics>, admin_listener: bool) -> Self {
        Self {
            held: Mutex::default(),
            metrics,
            admin_listener,
        }
    }

    /// Keeps a signing secret a provider handed over in its set-up request, for the
    /// admin listener — only the first, and only on a route with no configured
    /// secret: the handshake is unauthenticated, so a later one may be anyone's. The
    /// log says where to read it, never what it is; every outcome is counted.
    pub(crate) fn keep(&self, route: &str, configured: bool, secret: Secret, now: u64) -> Handed {
        let result = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            if configured {
                Handed::RouteHasSecret
            } else if held.contains_key(route) {
                Handed::AlreadyHeld
            } else {
                held.insert(
                    route.to_owned(),
                    HandedSecret {
                        secret,
                        received_at: now,
                    },
                );
                Handed::Kept
            }
        };
        self.metrics
            .handed_secrets
            .get_or_create(&RouteResult {
                route: route.to_owned(),
                result: result.label().to_owned(),
            })
            .inc();
        match result {
            Handed::Kept => self.log_kept(route),
            Handed::AlreadyHeld => tracing::warn!(
                route,
                "refused a set-up request handing over another signing secret: the route already holds one (clear it with DELETE /handshakes/{route} on the admin listener to accept a new one)"
            ),
            Handed::RouteHasSecret => tracing::warn!(
                route,
                "refused a set-up request handing over a signing secret: the route has a configured secret"
            ),
        }
        result
    }

    /// The secret handed over on `route`, if one is held.
    pub(crate) fn get(&self, route: &str) -> Option<HandedSecret> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(route)
            .cloned()
    }

    /// Forgets the handed-over secret of a route (the operator's `DELETE
    /// /handshakes/<route>`), so the next set-up request may hand over a new one.
    pub(crate) fn clear(&self, route: &str) -> bool {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(route)
            .is_some()
    }

    fn log_kept(&self, route: &str) {
        if self.admin_listener {
            tracing::warn!(
                route,
                "the provider handed over its signing secret in a set-up request; read it from the admin listener (GET /handshakes/{route}) and add it to the route's secrets"
            );
        } else {
            tracing::warn!(
                route,
                "the provider handed over its signing secret in a set-up request, but no admin listener is configured to read it from: set server.admin_listen and repeat the provider's set-up"
            );
        }
    }
}
