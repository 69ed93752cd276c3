//! The admin listener's one table. A request is parsed once into an [`AdminRequest`]
//! (each segment percent-decoded here and nowhere else); [`dispatch`] names the
//! endpoint that answers it, one line each; the endpoint says what happened as an
//! [`AdminAnswer`]; and [`response`] writes each answer's status, headers and body —
//! the inspector's assets and the delivery log's live stream included. Whatever its
//! method and path (each split into segments, never sliced), a request is answered;
//! an unknown path gets 404 with a JSON body.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{Either, Full, StreamBody};
use hyper::body::Frame;
use serde::Serialize;

use super::api::{self, ErrorBody, StatusBody};
use super::{deliveries, events, guard, handshakes, keys, overview, probes, reload, ui};
use crate::pipeline::respond::admin as json;
use crate::server::AppState;

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
    /// 404: no such endpoint, route, event or delivery.
    NotFound(serde_json::Value),
    /// 409: the request cannot be carried out as things stand (a replay).
    Conflict(serde_json::Value),
    /// 503: not ready, or the store did not answer (its error text is in the log).
    Unavailable(serde_json::Value),
    /// 503 with `Retry-After: 5`: every live stream's slot is taken.
    Busy(serde_json::Value),
    /// The inspector page's asset, or its refusal (`ui.rs` says which headers).
    Page(ui::Asset),
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

/// The admin router: every request, whatever its method and path, answered here.
pub(crate) async fn handle<B>(state: Arc<AppState>, http: Request<B>) -> Response<AdminBody> {
    let req = AdminRequest::parse(http.method(), http.uri());
    let answer = match guard(&state, &http, &req) {
        Some(refused) => refused,
        None => dispatch(&state, &req).await,
    };
    response(answer)
}

/// Which endpoint answers: one line each.
async fn dispatch(state: &Arc<AppState>, req: &AdminRequest) -> AdminAnswer {
    let bare = req.args.is_empty();
    match (&req.method, req.endpoint.as_str()) {
        (method, "ui") => AdminAnswer::Page(ui::serve(method, &req.path)),
        (_, "deliveries") => deliveries::answer(state, req).await,
        (&Method::GET, "overview") if bare => overview::overview(state).await,
        (_, "overview") if bare => deliveries::usage(),
        (&Method::GET, "healthz") if bare => probes::healthz(),
        (&Method::GET, "readyz") if bare => probes::readyz(state).await,
        (&Method::GET, "metrics") if bare => probes::metrics(state).await,
        (&Method::POST, "reload") if bare => reload::reload(state).await,
        (&Method::GET, "handshakes") if !bare => handshakes::show(state, &req.rest()),
        (&Method::DELETE, "handshakes") if !bare => handshakes::clear(state, &req.rest()),
        (&Method::DELETE, "keys") if !bare => keys::forget(state, req).await,
        (_, "events") if !bare => events::answer(state, req).await,
        _ => AdminAnswer::not_found("not found"),
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

/// The router against arbitrary requests: whatever the method and path, it answers
/// (no panic) and, but for the answers that are not JSON by nature (the inspector's
/// page, `/metrics`, the live stream), with a JSON body.
#[cfg(test)]
mod router_properties {
    use std::sync::Arc;

    use bytes::Bytes;
    use http::{Method, Request, header};
    use http_body_util::{BodyExt as _, Empty};
    use proptest::prelude::*;

    use super::AppState;

    const CONFIG: &str = r#"
[store]
backend = "memory"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "http://127.0.0.1:9/hooks"
"#;

    fn gateway(rt: &tokio::runtime::Runtime) -> Arc<AppState> {
        rt.block_on(async {
            let env = |_: &str| None;
            let cfg = crate::config::parse(CONFIG, std::path::Path::new("test.toml"), &env)
                .unwrap_or_else(|e| panic!("{e}"));
            crate::app::App::build(&cfg, crate::server::Clock::System)
                .expect("gateway state")
                .state()
                .clone()
        })
    }

    /// A path segment: the endpoints' own words, empty ones, broken escapes, and
    /// anything at all percent-encoded (non-ASCII, control characters, slashes) or
    /// very long.
    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            prop::sample::select(vec![
                "deliveries",
                "replay",
                "stream",
                "events",
                "keys",
                "handshakes",
                "ui",
                "overview",
                "healthz",
                "readyz",
                "metrics",
                "reload",
                "retry",
                "purge",
                "stripe",
                "..",
                ".",
                "%",
                "%zz",
                "%FF",
                "%2F",
                "%00",
                "a%2Fb",
                "index.html",
            ])
            .prop_map(str::to_owned),
            any::<String>().prop_map(|s| {
                percent_encoding::utf8_percent_encode(&s, percent_encoding::NON_ALPHANUMERIC)
                    .to_string()
            }),
            "[a-zA-Z0-9._~!$&'()*+,;=:@-]{1,12}",
            (1usize..6000).prop_map(|n| "a".repeat(n)),
        ]
    }

    fn path() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec![
                "",
                "/",
                "/deliveries",
                "/deliveries/",
                "/deliveries/replay",
                "/deliveries//replay",
                "/deliveries/0190a2b3c4d5-00000001",
                "/events",
                "/events/stripe",
                "/keys",
                "/keys/stripe",
                "/handshakes",
                "/ui",
                "/overview",
                "/healthz",
                "/metrics",
                "/reload",
            ]),
            prop_oneof![
                2 => Just(Vec::new()),
                3 => prop::collection::vec(segment(), 1..5),
            ],
            prop::option::of("[a-z_=&%0-9]{0,20}"),
        )
            .prop_map(|(head, segments, query)| {
                let mut p = head.to_owned();
                for s in segments {
                    p.push('/');
                    p.push_str(&s);
                }
                if p.is_empty() {
                    p.push('/');
                }
                if let Some(q) = query {
                    p.push('?');
                    p.push_str(&q);
                }
                p
            })
    }

    fn method() -> impl Strategy<Value = Method> {
        prop_oneof![
            2 => Just(Method::POST),
            1 => Just(Method::GET),
            2 => prop::sample::select(vec![
                Method::GET,
                Method::POST,
                Method::DELETE,
                Method::PUT,
                Method::HEAD,
                Method::OPTIONS,
                Method::PATCH,
            ]),
            1 => "[A-Z]{1,10}".prop_filter_map("a method", |m| Method::from_bytes(m.as_bytes()).ok()),
        ]
    }

    /// The answers that are not JSON by design: the page's assets, the metrics and
    /// the live stream.
    fn not_json_by_design(method: &Method, path: &str, status: u16) -> bool {
        let path = path.split('?').next().unwrap_or_default();
        let read = method == Method::GET || method == Method::HEAD;
        (read && super::super::ui::is_page(path) && status < 400)
            || (method == Method::GET && path == "/metrics" && status == 200)
            || (method == Method::GET && path == "/deliveries/stream" && status == 200)
    }

    /// A request from the command line (a host of ours, `X-Requested-By`).
    fn request(method: &Method, uri: http::Uri) -> Request<Empty<Bytes>> {
        Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(header::HOST, "127.0.0.1")
            .header("x-requested-by", "hookgate-tests")
            .body(Empty::<Bytes>::new())
            .expect("request")
    }

    /// An answer's body: whole, or a live stream's first frame (it goes on for as
    /// long as it is read).
    async fn first_bytes(resp: http::Response<super::AdminBody>) -> Bytes {
        match resp.into_body() {
            http_body_util::Either::Left(whole) => whole
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default(),
            http_body_util::Either::Right(mut live) => match live.frame().await {
                Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
                _ => Bytes::new(),
            },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn every_request_gets_an_answer_and_unknown_paths_json(method in method(), path in path()) {
            static RT: std::sync::OnceLock<(tokio::runtime::Runtime, Arc<AppState>)> = std::sync::OnceLock::new();
            let (rt, state) = RT.get_or_init(|| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("runtime");
                let state = gateway(&rt);
                (rt, state)
            });
            // Only a path the HTTP layer would pass on reaches the router.
            let Ok(uri) = path.parse::<http::Uri>() else {
                return Err(TestCaseError::reject("not a URI"));
            };
            let resp = rt.block_on(super::handle(state.clone(), request(&method, uri)));
            let status = resp.status().as_u16();
            let ctype = resp.headers().get(header::CONTENT_TYPE).cloned();
            let body = rt.block_on(first_bytes(resp));
            if ctype.as_ref().is_some_and(|c| c == "text/event-stream") {
                prop_assert_eq!(&body[..], &b": open\n\n"[..], "{} {}", method, path);
            }
            if !not_json_by_design(&method, &path, status) {
                prop_assert_eq!(ctype.as_ref().map(|v| v.as_bytes()), Some(&b"application/json"[..]), "{} {}: {}", method, path, status);
                prop_assert!(
                    serde_json::from_slice::<serde_json::Value>(&body).is_ok(),
                    "{} {}: {} {:?}", method, path, status, String::from_utf8_lossy(&body)
                );
            }
        }
    }

    /// The paths that panicked before, and their neighbours: each answered, 404 JSON.
    #[test]
    fn paths_without_an_id_are_not_found() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let state = gateway(&rt);
        for (method, path) in [
            (Method::POST, "/deliveries/replay"),
            (Method::POST, "/deliveries//replay"),
            (Method::POST, "/deliveries/x/y/replay"),
            (Method::POST, "/deliveries/replay/"),
            (Method::GET, "/deliveries//"),
            (Method::GET, "/deliveries/a/"),
            (Method::POST, "/replay"),
        ] {
            let uri = http::Uri::from_static(path);
            let resp = rt.block_on(super::handle(state.clone(), request(&method, uri)));
            assert_eq!(resp.status().as_u16(), 404, "{method} {path}");
            let body = rt.block_on(first_bytes(resp));
            let refused: Result<super::super::api::ErrorBody, _> = serde_json::from_slice(&body);
            assert!(
                refused.is_ok(),
                "{method} {path}: {}",
                String::from_utf8_lossy(&body)
            );
        }
    }
}
