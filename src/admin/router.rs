//! The admin listener's one table. A request is parsed once into an
//! [`AdminRequest`] (`exchange.rs`); [`dispatch`] names the endpoint that answers it,
//! one line each (the delivery log's and the live stream's included); the endpoint
//! says what happened as an [`AdminAnswer`]; and `exchange::response` writes it.
//! Whatever its method and path (each split into segments, never sliced), a request is
//! answered; an unknown path gets 404 with a JSON body.

use std::sync::Arc;

use http::{Method, Request, Response};

use super::AdminContext;
use super::exchange::{AdminAnswer, AdminBody, AdminRequest, response, usage};
use super::{
    audit, deliveries, events, guard, handshakes, keys, overview, probes, pull, reload, replay, ui,
};

/// The admin router: every request, whatever its method and path, answered here.
pub(crate) async fn handle<B>(state: Arc<AdminContext>, http: Request<B>) -> Response<AdminBody>
where
    B: hyper::body::Body<Data = bytes::Bytes> + Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let req = AdminRequest::parse(http.method(), http.uri());
    let answer = match guard(&state, &http, &req) {
        Err(refused) => refused,
        Ok(_) if req.endpoint == "pull" => pull_request(&state, http, &req).await,
        Ok(caller) => {
            let action = caller.as_ref().and(audit::action_of(&req));
            let answer = dispatch(&state, &req).await;
            // After the action, whatever its result: recording never holds it up.
            if let (Some(caller), Some(action)) = (caller, action) {
                let space = crate::store::audit::space(&state.routing().store_cfg.key_prefix);
                state.audit.record(space, &caller, action, &answer);
            }
            answer
        }
    };
    response(answer)
}

/// `/pull/…`: the only endpoints that read a request body (a list of leases), bounded
/// by [`pull::MAX_BODY`] and the listener's request deadline.
async fn pull_request<B>(state: &AdminContext, http: Request<B>, req: &AdminRequest) -> AdminAnswer
where
    B: hyper::body::Body<Data = bytes::Bytes> + Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::BodyExt as _;
    let (parts, body) = http.into_parts();
    let bearer = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    let consumer = req
        .query
        .get("consumer")
        .cloned()
        .or_else(|| {
            parts
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unnamed".to_owned());
    let consumer: String = consumer
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect();
    let read = http_body_util::Limited::new(body, pull::MAX_BODY).collect();
    let body = match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => {
            return AdminAnswer::bad_request(
                "the body could not be read (at most 1 MiB, within 10 s)",
            );
        }
    };
    pull::answer(state, req, bearer, body, &consumer).await
}

/// Which endpoint answers: one line each.
async fn dispatch(state: &Arc<AdminContext>, req: &AdminRequest) -> AdminAnswer {
    let bare = req.args.is_empty();
    match (&req.method, req.endpoint.as_str()) {
        (method, "ui") => AdminAnswer::Page(ui::serve(method, &req.path)),
        (_, "deliveries") => log(state, req).await,
        (&Method::GET, "overview") if bare => overview::overview(state).await,
        (&Method::GET, "overview") if req.args == ["series"] => {
            overview::series(state, &req.query).await
        }
        (&Method::GET, "alerts") if bare => overview::alerts(state).await,
        (&Method::GET, "audit") if bare => audit::list(state, req).await,
        (_, "overview") if bare => usage(),
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

/// The router against arbitrary requests: whatever the method and path, it answers
/// (no panic) and, but for the answers that are not JSON by nature (the inspector's
/// page, `/metrics`, the live stream), with a JSON body.
/// `/deliveries[/…]`: the delivery log's endpoints, by the method and the path's
/// segments (as sent).
async fn log(state: &AdminContext, req: &AdminRequest) -> AdminAnswer {
    let segments: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let routes = state.recorder.route_names();
    match (&req.method, segments.as_slice()) {
        (&Method::GET, []) => deliveries::list(state, &req.query, &routes).await,
        (&Method::GET, ["stream"]) => deliveries::open_stream(state, &req.query),
        (method, _) => match (method, one_delivery(&segments)) {
            (&Method::POST, Some((id, Some("replay")))) => {
                let destination = req.query.get("destination").map(String::as_str);
                replay::replay(state, id, destination, &routes).await
            }
            (&Method::GET, Some((id, None))) => deliveries::show(state, id, &routes).await,
            _ => usage(),
        },
    }
}

/// `<id>` or `<id>/<action>`: one delivery's path.
fn one_delivery<'a>(segments: &[&'a str]) -> Option<(&'a str, Option<&'a str>)> {
    match *segments {
        [id] if !id.is_empty() => Some((id, None)),
        [id, action] if !id.is_empty() && !action.is_empty() => Some((id, Some(action))),
        _ => None,
    }
}

#[cfg(test)]
mod router_properties {
    use std::sync::Arc;

    use bytes::Bytes;
    use http::{Method, Request, header};
    use http_body_util::{BodyExt as _, Empty};
    use proptest::prelude::*;

    use super::AdminContext;

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

    fn gateway(rt: &tokio::runtime::Runtime) -> Arc<AdminContext> {
        rt.block_on(async {
            let env = |_: &str| None;
            let cfg = crate::config::parse(CONFIG, std::path::Path::new("test.toml"), &env)
                .unwrap_or_else(|e| panic!("{e}"));
            crate::app::App::build(&cfg, crate::state::Clock::System)
                .expect("gateway state")
                .admin()
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
                "alerts",
                "audit",
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
        (read && crate::admin::ui::is_page(path) && status < 400)
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
    async fn first_bytes(resp: http::Response<crate::admin::exchange::AdminBody>) -> Bytes {
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
            static RT: std::sync::OnceLock<(tokio::runtime::Runtime, Arc<AdminContext>)> = std::sync::OnceLock::new();
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
