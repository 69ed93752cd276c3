//! What the admin listener's endpoints speak: a request parsed once into an
//! [`AdminRequest`] (each segment percent-decoded here and nowhere else), the
//! [`AdminAnswer`] an endpoint gives, and [`response`], which writes each answer's
//! status, headers and body (the live stream's included). The table that names the
//! endpoint for a request is `router.rs`.

use std::collections::HashMap;
use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;
use serde::Serialize;

use super::api::{self, ErrorBody, StatusBody};
use crate::pipeline::respond::admin as json;
use crate::store::StoreError;

/// Records a list of the delivery log answers at most.
pub(crate) const MAX_LIMIT: usize = 500;

/// 503: the store did not answer (its error text goes to the log).
pub(crate) fn unavailable(e: &StoreError) -> AdminAnswer {
    tracing::warn!(error = %e, "delivery log: an admin request failed: the store did not answer");
    AdminAnswer::unavailable("store unavailable, retry later")
}

/// 404 with the log's endpoints.
pub(crate) fn usage() -> AdminAnswer {
    AdminAnswer::not_found(
        "use GET /deliveries, /deliveries/<id>, /deliveries/stream, /overview or POST /deliveries/<id>/replay",
    )
}

/// The frames of a live stream.
pub(crate) type SseStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + 'static>,
>;

/// A body the admin listener answers with: a whole one, or a live stream.
pub(crate) type AdminBody = Either<Full<Bytes>, StreamBody<SseStream>>;

/// One admin request, parsed once: which endpoint, its arguments and its query, each
/// percent-decoded here and nowhere else.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AdminRequest {
    pub(crate) method: Method,
    /// The path as sent: the inspector's assets are named by it.
    pub(crate) path: String,
    /// The path's first segment, as sent: `healthz`, `events`, `keys`, …
    pub(crate) endpoint: String,
    /// The path's later segments, as sent: the delivery log reads its IDs as written
    /// (`/deliveries/<id>/replay`).
    pub(crate) segments: Vec<String>,
    /// The same segments, each percent-decoded: a route, then an event ID or an
    /// action. `/events/a%2Fb/x` has two (`a/b` and `x`); `/events/a/` has `a` and an
    /// empty one.
    pub(crate) args: Vec<String>,
    /// The query's parameters, decoded (the last of a repeated name wins).
    pub(crate) query: HashMap<String, String>,
}

impl AdminRequest {
    pub(crate) fn parse(method: &Method, uri: &http::Uri) -> Self {
        let path = uri.path();
        let trimmed = path.strip_prefix('/').unwrap_or(path);
        let (endpoint, segments): (&str, Vec<String>) = match trimmed.split_once('/') {
            Some((endpoint, rest)) => (endpoint, rest.split('/').map(str::to_owned).collect()),
            None => (trimmed, Vec::new()),
        };
        let query = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
        Self {
            method: method.clone(),
            path: path.to_owned(),
            endpoint: endpoint.to_owned(),
            args: segments.iter().map(|s| decode(s)).collect(),
            segments,
            query,
        }
    }

    /// Everything after the endpoint, decoded: `/handshakes/<route>`'s route.
    pub(crate) fn rest(&self) -> String {
        self.args.join("/")
    }

    /// Everything after the route, decoded, if the path goes on past it: the event ID
    /// of `/keys/<route>/<event id>` and `/events/<route>/<event id>`, or an action.
    pub(crate) fn after_route(&self) -> Option<String> {
        self.args
            .split_first()
            .filter(|(_, rest)| !rest.is_empty())
            .map(|(_, rest)| rest.join("/"))
    }

    /// `/healthz` and `/readyz`, which probes call without a token.
    pub(crate) fn is_probe(&self) -> bool {
        self.method == Method::GET
            && self.args.is_empty()
            && matches!(self.endpoint.as_str(), "healthz" | "readyz")
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// A live stream's frames, as an answer.
pub(crate) struct Frames(pub(crate) SseStream);

impl std::fmt::Debug for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Frames(..)")
    }
}

/// Every answer the admin listener gives; [`response`] is the table that writes each.
#[derive(Debug)]
pub(crate) enum AdminAnswer {
    /// 200 with the endpoint's JSON body.
    Ok(serde_json::Value),
    /// 200 with the metrics in Prometheus text format.
    Metrics(String),
    /// 400: the request names nothing the endpoint can act on.
    BadRequest(serde_json::Value),
    /// 401 with `WWW-Authenticate: Bearer`: the admin token is missing or wrong.
    Unauthorized,
    /// 421 or 403: a request a web page may have sent through an operator's browser.
    Refused(StatusCode, String),
    /// 403 `{"error": why}`: the token's role does not allow the endpoint (a `read`
    /// token on one that changes state or hands over a secret).
    Forbidden(String),
    /// 404: no such endpoint, route, event or delivery.
    NotFound(serde_json::Value),
    /// 409: the request cannot be carried out as things stand (a replay).
    Conflict(serde_json::Value),
    /// 503: not ready, or the store did not answer (its error text is in the log).
    Unavailable(serde_json::Value),
    /// 503 with `Retry-After: 5`: every live stream's slot is taken.
    Busy(serde_json::Value),
    /// The inspector page's asset, or its refusal (`ui.rs` says which headers).
    Page(super::ui::Asset),
    /// 200 `text/event-stream`: the delivery log's live stream.
    Stream(Frames),
}

impl AdminAnswer {
    /// 200 with `body`.
    pub(crate) fn ok(body: &impl Serialize) -> Self {
        Self::Ok(api::to_json(body))
    }

    /// 400 `{"error": why}`.
    pub(crate) fn bad_request(why: impl Into<String>) -> Self {
        Self::BadRequest(api::to_json(&ErrorBody::new(why)))
    }

    /// 404 `{"error": why}`.
    pub(crate) fn not_found(why: impl Into<String>) -> Self {
        Self::NotFound(api::to_json(&ErrorBody::new(why)))
    }

    /// 409 `{"error": why}`.
    pub(crate) fn conflict(why: impl Into<String>) -> Self {
        Self::Conflict(api::to_json(&ErrorBody::new(why)))
    }

    /// 503 `{"error": why}`.
    pub(crate) fn unavailable(why: impl Into<String>) -> Self {
        Self::Unavailable(api::to_json(&ErrorBody::new(why)))
    }
}

/// The table: each answer's status, headers and body.
pub(crate) fn response(answer: AdminAnswer) -> Response<AdminBody> {
    let whole = match answer {
        AdminAnswer::Stream(frames) => return live(frames),
        AdminAnswer::Ok(body) => json(StatusCode::OK, body),
        AdminAnswer::Metrics(text) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        AdminAnswer::BadRequest(body) => json(StatusCode::BAD_REQUEST, body),
        AdminAnswer::Unauthorized => {
            let body = StatusBody::new("an admin token is required (Authorization: Bearer …)");
            let mut r = json(StatusCode::UNAUTHORIZED, api::to_json(&body));
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        AdminAnswer::Refused(status, why) => json(status, api::to_json(&StatusBody::new(why))),
        AdminAnswer::Forbidden(why) => {
            json(StatusCode::FORBIDDEN, api::to_json(&ErrorBody::new(why)))
        }
        AdminAnswer::NotFound(body) => json(StatusCode::NOT_FOUND, body),
        AdminAnswer::Conflict(body) => json(StatusCode::CONFLICT, body),
        AdminAnswer::Unavailable(body) => json(StatusCode::SERVICE_UNAVAILABLE, body),
        AdminAnswer::Busy(body) => {
            let mut r = json(StatusCode::SERVICE_UNAVAILABLE, body);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            r
        }
        AdminAnswer::Page(asset) => asset.response(),
    };
    whole.map(Either::Left)
}

/// A live stream's answer: Server-Sent Events, never cached or buffered by a proxy.
fn live(Frames(frames): Frames) -> Response<AdminBody> {
    let mut resp = Response::new(Either::Right(StreamBody::new(frames)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// A whole answer's body (a probe's: never a stream).
pub(crate) fn whole(body: AdminBody) -> Full<Bytes> {
    match body {
        Either::Left(whole) => whole,
        Either::Right(_) => Full::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: Method, uri: &str) -> AdminRequest {
        AdminRequest::parse(&method, &uri.parse().expect("uri"))
    }

    #[test]
    fn a_request_is_decoded_once_segment_by_segment() {
        let r = parse(
            Method::POST,
            "/events/a%2Fb%20c/retry?event_id=evt%201&destination=x+y",
        );
        assert_eq!(r.endpoint, "events");
        assert_eq!(r.args, ["a/b c", "retry"]);
        assert_eq!(r.after_route().as_deref(), Some("retry"));
        assert_eq!(r.query["event_id"], "evt 1");
        assert_eq!(r.query["destination"], "x y");
        // An event ID may hold slashes, sent as they are or encoded.
        let r = parse(Method::DELETE, "/keys/stripe/a/b%2Fc");
        assert_eq!(r.args[0], "stripe");
        assert_eq!(r.after_route().as_deref(), Some("a/b/c"));
        // Decoded once: an encoded percent sign stays one.
        assert_eq!(parse(Method::GET, "/handshakes/a%2541").rest(), "a%41");
        // The delivery log's segments are also kept as sent.
        let r = parse(Method::GET, "/deliveries/%73tream");
        assert_eq!(
            (r.segments[0].as_str(), r.args[0].as_str()),
            ("%73tream", "stream")
        );
    }

    #[test]
    fn only_the_bare_probe_paths_are_probes() {
        assert!(parse(Method::GET, "/healthz").is_probe());
        assert!(parse(Method::GET, "/readyz?x=1").is_probe());
        assert!(!parse(Method::POST, "/readyz").is_probe());
        assert!(!parse(Method::GET, "/healthz/").is_probe());
        assert!(!parse(Method::GET, "/heal%74hz").is_probe());
        let r = parse(Method::GET, "/events/a/");
        assert_eq!(r.args, ["a", ""]);
        assert_eq!(r.after_route().as_deref(), Some(""));
        assert_eq!(parse(Method::GET, "/events/a").after_route(), None);
    }
}
