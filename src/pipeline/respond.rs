//! The one place where outcomes become HTTP responses. The pipeline (and the listener,
//! and the admin listener) says what happened as an [`Answer`]; [`response`] is the
//! table that turns each into its status, headers and body. Bodies the gateway writes
//! are small JSON objects; they never carry secrets, signature material or a store's
//! error text (that goes to the log).

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::forward::{ForwardError, UpstreamResponse};
pub use crate::outcome::Outcome;
use crate::provider::{FixedReply, HandshakeReply, Rejection};

/// The response type of every handler.
pub type Resp = Response<Full<Bytes>>;

/// Says on every answer what the gateway did, for people reading replay output.
pub const OUTCOME_HEADER: HeaderName = HeaderName::from_static("hookgate-outcome");

/// Seconds a provider is asked to wait before retrying after 409 or 503.
pub const RETRY_AFTER_SECS: u64 = 5;

/// Why a forward failed, as far as the provider's answer is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// Slower than `upstream_timeout`: 504.
    Timeout,
    /// Unreachable: 502.
    Unreachable,
    /// Broke off mid-answer: 502.
    Broken,
}

impl From<&ForwardError> for UpstreamFailure {
    fn from(e: &ForwardError) -> Self {
        match e {
            ForwardError::Timeout(_) => Self::Timeout,
            ForwardError::Connect(_) => Self::Unreachable,
            ForwardError::Broken(_) => Self::Broken,
        }
    }
}

/// Every answer the public listener gives, with what writing it needs.
#[derive(Debug)]
pub enum Answer {
    /// The upstream's own answer, relayed (`forwarded`, `forwarded_unclaimed` when the
    /// store was down and `on_error = "forward"`, or `upstream_rejected`).
    Relayed {
        upstream: UpstreamResponse,
        unclaimed: bool,
    },
    /// The forward failed: 502 or 504.
    UpstreamFailed(UpstreamFailure),
    /// The answer the provider requires for an accepted event (Adyen's `[accepted]`,
    /// Microsoft Graph's 202), for first deliveries and duplicates alike.
    Fixed {
        reply: FixedReply,
        outcome: Outcome,
    },
    /// Stored for delivery (queue routes): 200 at once.
    Queued {
        event_id: String,
    },
    /// Of an event type the route does not take: 200, neither forwarded nor stored.
    Filtered {
        event_id: String,
        event_type: String,
    },
    Duplicate {
        event_id: String,
    },
    /// The event ID was acknowledged with another body.
    Mismatch {
        event_id: String,
    },
    /// A second body under a signed transmission ID already seen (PayPal signs only the
    /// body's CRC-32, so such a body is a forgery, not a retry).
    TransmissionMismatch,
    InFlight {
        event_id: String,
    },
    Handshake(HandshakeReply),
    /// A set-up request handing over a signing secret the route will not take.
    HandshakeRefused {
        route_has_secret: bool,
    },
    NoRoute,
    MethodNotAllowed {
        allow: String,
    },
    TooLarge {
        limit: usize,
    },
    BodyTimeout,
    BadBody,
    Rejected(Rejection),
    StoreUnavailable,
    Overloaded,
    RateLimited,
    ClientBusy,
    RequestTimeout,
}

impl Answer {
    /// What happened, for the log line, the metrics and the `hookgate-outcome` header.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Relayed {
                upstream,
                unclaimed,
            } => match (upstream.status.is_success(), unclaimed) {
                (true, false) => Outcome::Forwarded,
                (true, true) => Outcome::ForwardedUnclaimed,
                (false, _) => Outcome::UpstreamRejected,
            },
            Self::UpstreamFailed(_) => Outcome::UpstreamError,
            Self::Fixed { outcome, .. } => *outcome,
            Self::Duplicate { .. } => Outcome::Duplicate,
            Self::Queued { .. } => Outcome::Queued,
            Self::Filtered { .. } => Outcome::Filtered,
            Self::Mismatch { .. } | Self::TransmissionMismatch => Outcome::Mismatch,
            Self::InFlight { .. } => Outcome::InFlight,
            Self::Handshake(_) => Outcome::Handshake,
            Self::HandshakeRefused { .. } => Outcome::HandshakeRefused,
            Self::NoRoute => Outcome::NoRoute,
            Self::MethodNotAllowed { .. } => Outcome::MethodNotAllowed,
            Self::TooLarge { .. } => Outcome::TooLarge,
            Self::BodyTimeout => Outcome::BodyTimeout,
            Self::BadBody => Outcome::BadBody,
            Self::Rejected(Rejection::Verify(e)) => Outcome::Rejected(e.reason()),
            Self::Rejected(Rejection::NoEventId) => Outcome::NoEventId,
            Self::StoreUnavailable => Outcome::StoreError,
            Self::Overloaded => Outcome::Overloaded,
            Self::RateLimited => Outcome::RateLimited,
            Self::ClientBusy => Outcome::ClientBusy,
            Self::RequestTimeout => Outcome::RequestTimeout,
        }
    }
}

/// The table: each answer's status, headers and body. Every response carries
/// `hookgate-outcome`; the ones that ask the provider to come back carry
/// `Retry-After`.
/// An answer as the table builds it: its body in one buffer.
type Built = Response<Bytes>;

/// The response for `answer`: status, headers and body from the one table.
pub fn response(answer: Answer) -> Resp {
    full(table(answer))
}

/// The response for `answer`, and its body's bytes (shared, not copied) for what
/// records the answer (the delivery log).
pub fn response_and_body(answer: Answer) -> (Resp, Bytes) {
    let (parts, body) = table(answer).into_parts();
    (Response::from_parts(parts, Full::new(body.clone())), body)
}

fn full(r: Built) -> Resp {
    r.map(Full::new)
}

fn table(answer: Answer) -> Built {
    use StatusCode as S;
    let outcome = answer.outcome();
    let error = |status: StatusCode, msg: &str| {
        json_built(status, outcome, serde_json::json!({ "error": msg }))
    };
    match answer {
        Answer::Relayed { upstream, .. } => {
            let mut r = Response::new(upstream.body);
            *r.status_mut() = upstream.status;
            *r.headers_mut() = upstream.headers;
            with_outcome(r, outcome)
        }
        Answer::UpstreamFailed(UpstreamFailure::Timeout) => {
            error(S::GATEWAY_TIMEOUT, "upstream timed out")
        }
        Answer::UpstreamFailed(UpstreamFailure::Unreachable) => {
            error(S::BAD_GATEWAY, "upstream unreachable")
        }
        Answer::UpstreamFailed(UpstreamFailure::Broken) => error(S::BAD_GATEWAY, "upstream failed"),
        Answer::Fixed { reply, .. } => {
            let mut r = Response::new(Bytes::from_static(reply.body.as_bytes()));
            *r.status_mut() = reply.status;
            if !reply.body.is_empty() {
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            }
            with_outcome(r, outcome)
        }
        Answer::Filtered {
            event_id,
            event_type,
        } => json_built(
            S::OK,
            outcome,
            serde_json::json!({ "status": "filtered", "event_id": event_id, "event_type": event_type }),
        ),
        Answer::Queued { event_id } => json_built(
            S::OK,
            outcome,
            serde_json::json!({ "status": "queued", "event_id": event_id }),
        ),
        Answer::Duplicate { event_id } => json_built(
            S::OK,
            outcome,
            serde_json::json!({ "status": "duplicate", "event_id": event_id }),
        ),
        refused => refusal(refused),
    }
}

/// The gateway's own answers that hold a delivery back or refuse it: the rest of
/// [`response`]'s table.
fn refusal(answer: Answer) -> Built {
    use StatusCode as S;
    let outcome = answer.outcome();
    let error = |status: StatusCode, msg: &str| {
        json_built(status, outcome, serde_json::json!({ "error": msg }))
    };
    let later = |status: StatusCode, msg: &str| retry_after(error(status, msg));
    match answer {
        Answer::Mismatch { event_id } => json_built(
            S::UNPROCESSABLE_ENTITY,
            outcome,
            serde_json::json!({ "error": "event id reused with a different body", "event_id": event_id }),
        ),
        Answer::TransmissionMismatch => error(
            S::UNPROCESSABLE_ENTITY,
            "transmission id reused with a different body",
        ),
        Answer::InFlight { event_id } => retry_after(json_built(
            S::CONFLICT,
            outcome,
            serde_json::json!({ "status": "in_flight", "event_id": event_id }),
        )),
        Answer::Handshake(reply) => {
            let mut r = Response::new(reply.body);
            *r.status_mut() = reply.status;
            for (name, value) in reply.headers {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    r.headers_mut().append(name, v);
                }
            }
            with_outcome(r, outcome)
        }
        // Nothing is echoed, so the provider's set-up fails.
        Answer::HandshakeRefused { route_has_secret } => error(
            S::CONFLICT,
            if route_has_secret {
                "this route has a configured secret; a handed-over secret is refused"
            } else {
                "a secret was already handed over on this route; an operator must clear it first"
            },
        ),
        Answer::NoRoute => error(S::NOT_FOUND, "no route for this path"),
        Answer::MethodNotAllowed { allow } => {
            let mut r = error(S::METHOD_NOT_ALLOWED, "method not allowed");
            if let Ok(v) = HeaderValue::from_str(&allow) {
                r.headers_mut().insert(header::ALLOW, v);
            }
            r
        }
        Answer::TooLarge { limit } => json_built(
            S::PAYLOAD_TOO_LARGE,
            outcome,
            serde_json::json!({ "error": "body too large", "max_body": limit }),
        ),
        Answer::BodyTimeout => {
            let mut r = error(S::REQUEST_TIMEOUT, "body not received in time");
            // The rest of a trickled body is not worth reading: close the connection.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
        Answer::BadBody => error(S::BAD_REQUEST, "could not read the request body"),
        // The response names only the class of failure; the detail goes to the log.
        Answer::Rejected(Rejection::Verify(e)) if e.is_timestamp() => {
            error(S::UNAUTHORIZED, "timestamp outside the tolerance")
        }
        // The signing certificate could not be fetched (AWS SNS): the delivery may be
        // genuine, and SNS retries only a 5xx.
        Answer::Rejected(Rejection::Verify(
            crate::provider::VerifyError::CertificateUnavailable,
        )) => later(
            S::SERVICE_UNAVAILABLE,
            "the signing certificate is not available yet, retry later",
        ),
        Answer::Rejected(Rejection::Verify(_)) => error(S::UNAUTHORIZED, "invalid signature"),
        Answer::Rejected(Rejection::NoEventId) => {
            error(S::BAD_REQUEST, "no event id in the delivery")
        }
        Answer::StoreUnavailable => later(
            S::SERVICE_UNAVAILABLE,
            "dedup store unavailable, retry later",
        ),
        Answer::Overloaded => later(
            S::SERVICE_UNAVAILABLE,
            "too many deliveries in progress, retry later",
        ),
        Answer::RateLimited => later(
            S::TOO_MANY_REQUESTS,
            "too many failed verifications from this client, retry later",
        ),
        Answer::ClientBusy => later(
            S::TOO_MANY_REQUESTS,
            "too many request bodies in progress from this client, retry later",
        ),
        Answer::RequestTimeout => {
            later(S::SERVICE_UNAVAILABLE, "request took too long, retry later")
        }
        // The rest of the table is in `response`.
        passed @ (Answer::Relayed { .. }
        | Answer::UpstreamFailed(_)
        | Answer::Fixed { .. }
        | Answer::Filtered { .. }
        | Answer::Queued { .. }
        | Answer::Duplicate { .. }) => table(passed),
    }
}

/// A JSON answer written by the gateway for a delivery.
pub fn json(status: StatusCode, outcome: Outcome, body: serde_json::Value) -> Resp {
    full(json_built(status, outcome, body))
}

fn json_built(status: StatusCode, outcome: Outcome, body: serde_json::Value) -> Built {
    with_outcome(admin_built(status, body), outcome)
}

fn with_outcome(mut r: Built, outcome: Outcome) -> Built {
    r.headers_mut()
        .insert(OUTCOME_HEADER, HeaderValue::from_static(outcome.as_str()));
    r
}

fn retry_after(mut r: Built) -> Built {
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    r
}

/// The `overloaded` answer as HTTP/1.1 bytes with `connection: close`, for a connection
/// refused before any HTTP is spoken (over `server.max_connections`): the same status,
/// headers and body as the table's, written straight to the socket.
pub fn overloaded_http1() -> Vec<u8> {
    let (head, body) = table(Answer::Overloaded).into_parts();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        head.status.as_u16(),
        head.status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &head.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&body);
    out
}

/// A JSON answer without an outcome: the admin listener's (never a store's error
/// text), and the body of every delivery answer above.
pub fn admin(status: StatusCode, body: serde_json::Value) -> Resp {
    full(admin_built(status, body))
}

fn admin_built(status: StatusCode, body: serde_json::Value) -> Built {
    let mut bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec());
    // A newline at the end, so `curl` leaves the shell's prompt on a line of its own.
    bytes.push(b'\n');
    let mut r = Response::new(Bytes::from(bytes));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
