//! What the admin listener (`crate::admin`) reads of the state that is private to this
//! module: the guard's settings, fixed at start, and what a replay forwards with. A
//! bridge until the admin listener gets a context of its own, built in `app.rs` as the
//! delivery workers' `WorkerContext` is.

use super::AppState;
use crate::forward::Forwarder;
use crate::secret::Secret;
use crate::state::Clock;

impl AppState {
    /// `server.admin_token` as the gateway started with it (a reload does not change it).
    pub(crate) fn admin_token(&self) -> Option<&Secret> {
        self.server.admin_token.as_ref()
    }

    /// `server.admin_hosts` as the gateway started with them.
    pub(crate) fn admin_hosts(&self) -> &[String] {
        &self.server.admin_hosts
    }

    /// The clock signed timestamps are checked against (a replay's forward reads it).
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// The pooled upstream client.
    pub(crate) fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }
}
