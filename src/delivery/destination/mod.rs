//! Where an attempt delivers an event: the contract between the delivery workers and
//! each kind of destination. The worker (leases, retries, dead letters, per-key order,
//! rate limits, pauses) knows only this: it hands a destination the stored event and
//! learns an [`Answer`]: delivered, refused, failed (and tried again on the schedule),
//! and whether the destination asks every delivery to it to slow down.
//!
//! HTTP is the first kind (`http.rs`). A kind is a variant of [`Destination`] rather
//! than a trait object: the set is closed and known at build time, and `async fn`
//! cannot be called through `dyn` (as for the store's `Store`).

mod http;

use std::time::Duration;

use crate::forward::Forwarder;
use crate::state::Clock;
use crate::store::{AttemptResult, StoredEvent};

pub use self::http::Http;

/// What one attempt came to, as the destination reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Delivered; refused by the destination ([`AttemptResult::Http4xx`] over HTTP);
    /// or failed (the others). Every result but `Delivered` is tried again on the
    /// destination's schedule until `max_attempts` or `max_age`.
    pub result: AttemptResult,
    /// The destination's own status code, where it has one.
    pub status: Option<u16>,
    /// Why the destination could not be reached or did not answer in time.
    pub error: Option<String>,
    /// When the destination asked for this event to come back.
    pub retry_after: Option<Duration>,
    /// The destination asks for every delivery to it to wait this long (on a
    /// destination with a `rate_limit`, the worker pauses it).
    pub slow_down: Option<Duration>,
}

impl Answer {
    /// The event is delivered.
    pub fn delivered(status: Option<u16>) -> Self {
        Self {
            result: AttemptResult::Delivered,
            status,
            error: None,
            retry_after: None,
            slow_down: None,
        }
    }

    /// The destination could not be reached, or did not answer whole or in time.
    pub fn failed(result: AttemptResult, error: String) -> Self {
        Self {
            result,
            status: None,
            error: Some(error),
            retry_after: None,
            slow_down: None,
        }
    }
}

/// A destination as the worker sees it, with what it needs to deliver (borrowed from
/// the attempt's routing snapshot).
#[derive(Debug)]
pub enum Destination<'a> {
    Http(Http<'a>),
}

impl<'a> Destination<'a> {
    /// The destination `dest` of `route` names.
    pub fn of(
        forwarder: &'a Forwarder,
        clock: Clock,
        route: &'a crate::config::Route,
        dest: &'a crate::config::Destination,
    ) -> Self {
        Self::Http(Http::new(forwarder, clock, route, dest))
    }

    /// Delivers one stored event, once; what came of it.
    pub async fn deliver(&self, event: &StoredEvent) -> Answer {
        match self {
            Self::Http(h) => h.deliver(event).await,
        }
    }
}
