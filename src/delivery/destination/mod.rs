//! Where an attempt delivers an event: the contract between the delivery workers and
//! each kind of destination. The worker (leases, retries, dead letters, per-key order,
//! rate limits, pauses) knows only this: it hands a destination the stored event and
//! learns an [`Answer`]: delivered, refused, failed (and tried again on the schedule),
//! and whether the destination asks every delivery to it to slow down.
//!
//! HTTP is the first kind (`http.rs`); the others deliver into a server of the
//! handler's own, each deduplicating there: an inbox table in PostgreSQL
//! (`postgres.rs`), a NATS JetStream subject (`nats.rs`), a RabbitMQ exchange
//! (`amqp.rs`), a Redis stream (`redis_stream.rs`). Their connections are kept in
//! [`Links`] (`links.rs`), made on first use and checked in the background. A kind is
//! a variant of [`Destination`] rather than a trait object: the set is closed and
//! known at build time, and `async fn` cannot be called through `dyn` (as for the
//! store's `Store`).

mod amqp;
mod http;
mod links;
pub(crate) mod message;
mod nats;
mod postgres;
mod redis_stream;

use std::sync::Arc;
use std::time::Duration;

use crate::forward::{ForwardError, Forwarder, UpstreamResponse};
use crate::state::Clock;
use crate::store::{AttemptResult, StoredEvent};

pub use self::http::Http;
pub use self::links::{CHECK_EVERY, Link, Links, Reach, watch};
pub use self::message::Message;

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
    /// What the destination's server said it did (the inbox row's `id`, the stream's
    /// sequence, the confirm), for the attempt's record.
    pub receipt: Option<String>,
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
            receipt: None,
        }
    }

    /// Delivered, and what the server said of it.
    pub fn received(receipt: String) -> Self {
        Self {
            receipt: Some(receipt),
            ..Self::delivered(None)
        }
    }

    /// The server answered and did not take the event (retried on the schedule).
    pub fn refused(error: String) -> Self {
        Self::failed(AttemptResult::Refused, error)
    }

    /// The destination could not be reached, or did not answer whole or in time.
    pub fn failed(result: AttemptResult, error: String) -> Self {
        Self {
            result,
            status: None,
            error: Some(error),
            retry_after: None,
            slow_down: None,
            receipt: None,
        }
    }
}

impl Answer {
    /// The answer as a sync route relays it to the provider: a delivered event is
    /// 200 with what the server said (`{"status": "delivered", "kind", "receipt"}`);
    /// a failed one is the forward's error (502, or 504 for a timeout), and the
    /// provider tries again.
    pub fn relayed(self, kind: &str) -> Result<UpstreamResponse, ForwardError> {
        let error = || {
            self.error
                .clone()
                .unwrap_or_else(|| self.result.to_string())
        };
        match self.result {
            AttemptResult::Delivered => {
                let body = serde_json::json!({
                    "status": "delivered",
                    "kind": kind,
                    "receipt": self.receipt,
                });
                let mut headers = ::http::HeaderMap::new();
                headers.insert(
                    ::http::header::CONTENT_TYPE,
                    ::http::HeaderValue::from_static("application/json"),
                );
                Ok(UpstreamResponse {
                    status: ::http::StatusCode::OK,
                    headers,
                    body: bytes::Bytes::from(body.to_string()),
                })
            }
            AttemptResult::Timeout => Err(ForwardError::Timeout(Duration::ZERO)),
            AttemptResult::Connect => Err(ForwardError::Connect(error())),
            _ => Err(ForwardError::Broken(error())),
        }
    }
}

/// What destinations are reached with: the pooled HTTP client, the connections to the
/// other kinds' servers, the clock signatures are made with, and the dedup window a
/// Redis stream's marker keeps.
#[derive(Debug, Clone, Copy)]
pub struct Via<'a> {
    pub forwarder: &'a Forwarder,
    pub links: &'a Links,
    pub clock: Clock,
    pub dedup_ttl: Duration,
}

/// A destination as the worker sees it, with what it needs to deliver (borrowed from
/// the attempt's routing snapshot).
#[derive(Debug)]
pub enum Destination<'a> {
    Http(Http<'a>),
    /// A server of another kind, through its link.
    Linked(Linked<'a>),
}

/// A destination of a kind other than HTTP: its link, and the event's message.
#[derive(Debug)]
pub struct Linked<'a> {
    link: Arc<Link>,
    via: Via<'a>,
    route: &'a crate::config::Route,
    dest: &'a crate::config::Destination,
}

impl<'a> Destination<'a> {
    /// The destination `dest` of `route` names.
    pub fn of(
        via: Via<'a>,
        route: &'a crate::config::Route,
        dest: &'a crate::config::Destination,
    ) -> Self {
        match via.links.get(&route.name, dest) {
            None => Self::Http(Http::new(via.forwarder, via.clock, route, dest)),
            Some(link) => Self::Linked(Linked {
                link,
                via,
                route,
                dest,
            }),
        }
    }

    /// Delivers one stored event, once, within the destination's `upstream_timeout`;
    /// what came of it.
    pub async fn deliver(&self, event: &StoredEvent) -> Answer {
        match self {
            Self::Http(h) => h.deliver(event).await,
            Self::Linked(l) => {
                let message = Message::of(l.via.clock, l.route, l.dest, event);
                let limit = l.dest.upstream_timeout;
                let sent = l.link.deliver(&l.dest.target, &message, l.via.dedup_ttl);
                let answer = match tokio::time::timeout(limit, sent).await {
                    Ok(answer) => answer,
                    Err(_) => Answer::failed(
                        AttemptResult::Timeout,
                        format!("no answer within {}", humantime::format_duration(limit)),
                    ),
                };
                l.link.saw(&answer);
                answer
            }
        }
    }
}
