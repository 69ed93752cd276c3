//! The gateway's vocabulary of what happened, low in the house: every room (the
//! pipeline, the delivery workers, the store, the delivery log, metrics) imports these,
//! and they import nothing of the gateway's.
//!
//! - [`Outcome`]: what happened to one request on the public listener; its label in
//!   logs, metrics (`hookgate_deliveries_total{outcome}`) and the `hookgate-outcome`
//!   header.
//! - [`AttemptResult`]: how one delivery attempt of a queued event ended, as stored in
//!   an event's history and shown by `hookgate events show`, the admin API and
//!   `hookgate_delivery_attempts_total{result}`: each variant keeps the lowercase name
//!   those have always used.
//! - [`LeftQueue`]: how an event left its queue (`hookgate_queue_deliveries_total`).
//!
//! Each is a typed metric label ([`EncodeLabelValue`]): its name, never a string built
//! at the call site.

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use serde::{Deserialize, Serialize};

/// What happened to one delivery; also its log and metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Forwarded,
    /// Stored durably for delivery by the route's workers (`delivery = "queue"`).
    Queued,
    /// Authentic, but of an event type the route does not take (`events`).
    Filtered,
    /// Forwarded without a claim because the store was down and `on_error = "forward"`.
    ForwardedUnclaimed,
    UpstreamRejected,
    UpstreamError,
    Duplicate,
    InFlight,
    Mismatch,
    Handshake,
    /// A set-up request handing over a secret the route will not take.
    HandshakeRefused,
    NoRoute,
    MethodNotAllowed,
    TooLarge,
    BodyTimeout,
    BadBody,
    Rejected(&'static str),
    NoEventId,
    StoreError,
    /// Too many deliveries in progress (`server.max_in_flight`).
    Overloaded,
    /// The client's failed-verification budget on the route is spent.
    RateLimited,
    /// The client is sending more bodies at once than `server.max_reads_per_client`.
    ClientBusy,
    /// The whole request exceeded `server.request_timeout`.
    RequestTimeout,
}

impl Outcome {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Queued => "queued",
            Self::Filtered => "filtered",
            Self::ForwardedUnclaimed => "forwarded_unclaimed",
            Self::UpstreamRejected => "upstream_rejected",
            Self::UpstreamError => "upstream_error",
            Self::Duplicate => "duplicate",
            Self::InFlight => "in_flight",
            Self::Mismatch => "mismatch",
            Self::Handshake => "handshake",
            Self::HandshakeRefused => "handshake_refused",
            Self::NoRoute => "no_route",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::TooLarge => "too_large",
            Self::BodyTimeout => "body_timeout",
            Self::BadBody => "bad_body",
            Self::Rejected(reason) => reason,
            Self::NoEventId => "no_event_id",
            Self::StoreError => "store_error",
            Self::Overloaded => "overloaded",
            Self::RateLimited => "rate_limited",
            Self::ClientBusy => "client_busy",
            Self::RequestTimeout => "request_timeout",
        }
    }

    /// Why a request refused before or after verification was, in words an
    /// integrator can act on (a [`crate::provider::Rejection`] has its own words).
    pub fn reason(self, max_body: usize) -> Option<String> {
        Some(match self {
            Outcome::MethodNotAllowed => "the route does not take this method".to_owned(),
            Outcome::TooLarge => format!("the body is larger than server.max_body ({max_body} bytes)"),
            Outcome::BodyTimeout => "the body did not arrive within server.body_timeout".to_owned(),
            Outcome::BadBody => "the body could not be read (the connection broke)".to_owned(),
            Outcome::RateLimited => {
                "this client's failed verifications on the route spent its budget; it refills within a minute".to_owned()
            }
            Outcome::ClientBusy => {
                "this client is sending more bodies at once than server.max_reads_per_client".to_owned()
            }
            Outcome::Overloaded => "the gateway was at server.max_in_flight deliveries".to_owned(),
            Outcome::RequestTimeout => "the request took longer than server.request_timeout".to_owned(),
            Outcome::Mismatch => {
                "this event ID was seen before with another body: the copy was refused".to_owned()
            }
            Outcome::HandshakeRefused => {
                "a set-up request handed over a signing secret the route does not take".to_owned()
            }
            _ => return None,
        })
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// How an event left its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeftQueue {
    Delivered,
    /// Out of attempts or age (`max_attempts`, `max_age`).
    Dead,
}

impl LeftQueue {
    /// Both, in the order the metrics list them.
    pub const ALL: [Self; 2] = [Self::Delivered, Self::Dead];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }
}

impl EncodeLabelValue for LeftQueue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// How one delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AttemptResult {
    /// The upstream answered 2xx.
    #[serde(rename = "delivered")]
    Delivered,
    /// The upstream answered 4xx (retried like any other failure).
    #[serde(rename = "http_4xx")]
    Http4xx,
    /// The upstream answered another status that is not 2xx.
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// No answer within `upstream_timeout`.
    #[serde(rename = "timeout")]
    Timeout,
    /// The upstream could not be reached.
    #[serde(rename = "connect")]
    Connect,
    /// The connection broke before a whole answer came.
    #[serde(rename = "broken")]
    Broken,
    /// A destination server of another kind answered and did not take the event (no
    /// inbox table, no stream for the subject, an unroutable or nacked message).
    #[serde(rename = "refused")]
    Refused,
    /// A result this version does not know, written by a newer one (a rolling
    /// upgrade): the record still reads, and the attempt shows as `other`.
    #[serde(rename = "other", other)]
    Other,
}

impl AttemptResult {
    /// Every result, in the order the metrics list them.
    pub const ALL: [Self; 7] = [
        Self::Delivered,
        Self::Http4xx,
        Self::Http5xx,
        Self::Timeout,
        Self::Connect,
        Self::Broken,
        Self::Refused,
    ];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Http4xx => "http_4xx",
            Self::Http5xx => "http_5xx",
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::Broken => "broken",
            Self::Refused => "refused",
            Self::Other => "other",
        }
    }
}

impl EncodeLabelValue for AttemptResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

impl std::fmt::Display for AttemptResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AttemptResult {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not an attempt result"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_written_by_a_newer_version_still_reads() {
        let r: AttemptResult = serde_json::from_str("\"tls\"").expect("reads");
        assert_eq!(r, AttemptResult::Other);
    }

    #[test]
    fn each_result_is_stored_and_parsed_under_its_name() {
        for r in AttemptResult::ALL {
            let json = serde_json::to_string(&r).expect("serializes");
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<AttemptResult>(&json).ok(), Some(r));
            assert_eq!(r.as_str().parse::<AttemptResult>(), Ok(r));
        }
        assert!("http_3xx".parse::<AttemptResult>().is_err());
    }
}
