//! The one place where outcomes become HTTP responses. Bodies the gateway writes are
//! small JSON objects; they never carry secrets or signature material.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::forward::{ForwardError, UpstreamResponse};
use crate::provider::{FixedReply, HandshakeReply, Rejection};

/// The response type of every handler.
pub type Resp = Response<Full<Bytes>>;

/// Says on every answer what the gateway did, for people reading replay output.
pub const OUTCOME_HEADER: HeaderName = HeaderName::from_static("hookgate-outcome");

/// What happened to one delivery; also its log and metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Forwarded,
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
}

/// Seconds a provider is asked to wait before retrying after 409 or 503.
pub const RETRY_AFTER_SECS: u64 = 5;

/// A JSON answer written by the gateway.
pub fn json(status: StatusCode, outcome: Outcome, body: serde_json::Value) -> Resp {
    let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec());
    let mut r = Response::new(Full::new(Bytes::from(bytes)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(OUTCOME_HEADER, HeaderValue::from_static(outcome.as_str()));
    r
}

fn error(status: StatusCode, outcome: Outcome, msg: &str) -> Resp {
    json(status, outcome, serde_json::json!({ "error": msg }))
}

fn retry_after(mut r: Resp) -> Resp {
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    r
}

pub fn no_route() -> Resp {
    error(
        StatusCode::NOT_FOUND,
        Outcome::NoRoute,
        "no route for this path",
    )
}

pub fn method_not_allowed(allow: &str) -> Resp {
    let mut r = error(
        StatusCode::METHOD_NOT_ALLOWED,
        Outcome::MethodNotAllowed,
        "method not allowed",
    );
    if let Ok(v) = HeaderValue::from_str(allow) {
        r.headers_mut().insert(header::ALLOW, v);
    }
    r
}

pub fn too_large(limit: usize) -> Resp {
    json(
        StatusCode::PAYLOAD_TOO_LARGE,
        Outcome::TooLarge,
        serde_json::json!({ "error": "body too large", "max_body": limit }),
    )
}

pub fn body_timeout() -> Resp {
    let mut r = error(
        StatusCode::REQUEST_TIMEOUT,
        Outcome::BodyTimeout,
        "body not received in time",
    );
    // The rest of a trickled body is not worth reading: close the connection.
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

pub fn request_timeout() -> Resp {
    retry_after(error(
        StatusCode::SERVICE_UNAVAILABLE,
        Outcome::RequestTimeout,
        "request took too long, retry later",
    ))
}

pub fn bad_body() -> Resp {
    error(
        StatusCode::BAD_REQUEST,
        Outcome::BadBody,
        "could not read the request body",
    )
}

/// 401 for any verification failure, 400 for a missing event ID. The response names
/// only the class of failure; the detail goes to the log.
pub fn rejected(r: &Rejection) -> (Resp, Outcome) {
    match r {
        Rejection::Verify(e) if e.is_timestamp() => {
            let o = Outcome::Rejected(e.reason());
            (
                error(
                    StatusCode::UNAUTHORIZED,
                    o,
                    "timestamp outside the tolerance",
                ),
                o,
            )
        }
        Rejection::Verify(e) => {
            let o = Outcome::Rejected(e.reason());
            (error(StatusCode::UNAUTHORIZED, o, "invalid signature"), o)
        }
        Rejection::NoEventId => (
            error(
                StatusCode::BAD_REQUEST,
                Outcome::NoEventId,
                "no event id in the delivery",
            ),
            Outcome::NoEventId,
        ),
    }
}

/// 409 to a set-up request that hands over a signing secret the route will not
/// take: one is already held (an operator clears it on the admin listener), or the
/// route has a configured secret. Nothing is echoed, so the provider's set-up fails.
pub fn handed_secret_refused(route_has_secret: bool) -> Resp {
    let why = if route_has_secret {
        "this route has a configured secret; a handed-over secret is refused"
    } else {
        "a secret was already handed over on this route; an operator must clear it first"
    };
    error(StatusCode::CONFLICT, Outcome::HandshakeRefused, why)
}

pub fn handshake(reply: HandshakeReply) -> Resp {
    let mut r = Response::new(Full::new(reply.body));
    *r.status_mut() = reply.status;
    for (name, value) in reply.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().append(name, v);
        }
    }
    r.headers_mut().insert(
        OUTCOME_HEADER,
        HeaderValue::from_static(Outcome::Handshake.as_str()),
    );
    r
}

/// The answer a provider requires for an accepted event (Adyen's `[accepted]`,
/// Microsoft Graph's 202), used for first deliveries and duplicates alike.
pub fn fixed(reply: &FixedReply, outcome: Outcome) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from_static(reply.body.as_bytes())));
    *r.status_mut() = reply.status;
    if !reply.body.is_empty() {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    r.headers_mut()
        .insert(OUTCOME_HEADER, HeaderValue::from_static(outcome.as_str()));
    r
}

pub fn duplicate(event_id: &str) -> Resp {
    json(
        StatusCode::OK,
        Outcome::Duplicate,
        serde_json::json!({ "status": "duplicate", "event_id": event_id }),
    )
}

pub fn mismatch(event_id: &str) -> Resp {
    json(
        StatusCode::UNPROCESSABLE_ENTITY,
        Outcome::Mismatch,
        serde_json::json!({ "error": "event id reused with a different body", "event_id": event_id }),
    )
}

/// A second body under a signed transmission ID already seen (PayPal signs only the
/// body's CRC-32, so such a body is a forgery, not a retry).
pub fn transmission_mismatch() -> Resp {
    error(
        StatusCode::UNPROCESSABLE_ENTITY,
        Outcome::Mismatch,
        "transmission id reused with a different body",
    )
}

pub fn in_flight(event_id: &str) -> Resp {
    retry_after(json(
        StatusCode::CONFLICT,
        Outcome::InFlight,
        serde_json::json!({ "status": "in_flight", "event_id": event_id }),
    ))
}

pub fn store_unavailable() -> Resp {
    retry_after(error(
        StatusCode::SERVICE_UNAVAILABLE,
        Outcome::StoreError,
        "dedup store unavailable, retry later",
    ))
}

/// Relays the upstream's answer, or maps a failed forward to 502/504.
pub fn upstream(
    result: Result<UpstreamResponse, ForwardError>,
    unclaimed: bool,
) -> (Resp, Outcome) {
    match result {
        Ok(up) => {
            let outcome = match (up.status.is_success(), unclaimed) {
                (true, false) => Outcome::Forwarded,
                (true, true) => Outcome::ForwardedUnclaimed,
                (false, _) => Outcome::UpstreamRejected,
            };
            let mut r = Response::new(Full::new(up.body));
            *r.status_mut() = up.status;
            *r.headers_mut() = up.headers;
            r.headers_mut()
                .insert(OUTCOME_HEADER, HeaderValue::from_static(outcome.as_str()));
            (r, outcome)
        }
        Err(ForwardError::Timeout(_)) => (
            error(
                StatusCode::GATEWAY_TIMEOUT,
                Outcome::UpstreamError,
                "upstream timed out",
            ),
            Outcome::UpstreamError,
        ),
        Err(ForwardError::Connect(_)) => (
            error(
                StatusCode::BAD_GATEWAY,
                Outcome::UpstreamError,
                "upstream unreachable",
            ),
            Outcome::UpstreamError,
        ),
        Err(ForwardError::Broken(_)) => (
            error(
                StatusCode::BAD_GATEWAY,
                Outcome::UpstreamError,
                "upstream failed",
            ),
            Outcome::UpstreamError,
        ),
    }
}

pub fn overloaded() -> Resp {
    retry_after(error(
        StatusCode::SERVICE_UNAVAILABLE,
        Outcome::Overloaded,
        "too many deliveries in progress, retry later",
    ))
}

/// The `overloaded` answer as HTTP/1.1 bytes with `connection: close`, for a connection
/// refused before any HTTP is spoken (over `server.max_connections`): the same status,
/// headers and body as [`overloaded`], written straight to the socket.
pub fn overloaded_http1() -> Vec<u8> {
    use futures_util::FutureExt as _;
    use http_body_util::BodyExt as _;
    let (head, body) = overloaded().into_parts();
    // A `Full` body is ready at once: its one frame is already in memory.
    let body = body
        .collect()
        .now_or_never()
        .and_then(Result::ok)
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let r = Response::from_parts(head, ());
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        r.status().as_u16(),
        r.status().canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in r.headers() {
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

pub fn rate_limited() -> Resp {
    retry_after(error(
        StatusCode::TOO_MANY_REQUESTS,
        Outcome::RateLimited,
        "too many failed verifications from this client, retry later",
    ))
}

pub fn client_busy() -> Resp {
    retry_after(error(
        StatusCode::TOO_MANY_REQUESTS,
        Outcome::ClientBusy,
        "too many request bodies in progress from this client, retry later",
    ))
}
