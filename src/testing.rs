//! Test your webhook handlers through a real gateway, in your own test suite.
//!
//! [`Gateway`] runs hookgate in-process on a free port from a config string;
//! [`Recorder`] is an upstream that records what it receives (or point the gateway at
//! your own handler). Send signed deliveries with [`Gateway::deliver`], or replay
//! captured files with [`Gateway::send`].
//!
//! ```no_run
//! use hookgate::testing::{Gateway, Recorder};
//! use hookgate::replay::Replay;
//!
//! # async fn example() {
//! let upstream = Recorder::start().await; // or your own handler's URL
//! let gateway = Gateway::start(&format!(
//!     r#"
//!     [[routes]]
//!     name = "stripe"
//!     path = "/webhooks/stripe"
//!     provider = "stripe"
//!     secrets = ["whsec_test"]
//!     upstream = "{}"
//!     "#,
//!     upstream.url("/stripe")
//! ))
//! .await;
//!
//! // A freshly signed delivery...
//! let body = r#"{"id":"evt_1","type":"invoice.paid"}"#;
//! assert_eq!(gateway.deliver("stripe", body, "evt_1").await.outcome(), "forwarded");
//! assert_eq!(gateway.deliver("stripe", body, "evt_1").await.outcome(), "duplicate");
//!
//! // ...or a captured one, re-signed for the test secret.
//! let mut captured = Replay::load("tests/fixtures/stripe/invoice.paid.json".as_ref()).unwrap();
//! hookgate::sign::resign(&mut captured, None, "whsec_test", hookgate::time::Clock::System.now(), None).unwrap();
//! gateway.send(&captured).await;
//!
//! assert_eq!(upstream.count_for("evt_1"), 1);
//! let seen = upstream.received();
//! assert_eq!(seen[0].body.as_ref(), body.as_bytes());
//! gateway.stop().await;
//! # }
//! ```

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use tokio::net::TcpListener;

use crate::app::{App, Listeners};
use crate::config::{self, Config, ProcessEnv};
use crate::replay::Replay;
use crate::state::Clock;

/// One request as the recorder saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The status the recorder answered it with (a 2xx is an effect).
    pub status: u16,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Debug)]
struct Plan {
    status: u16,
    delay: Duration,
    retry_after: Option<u64>,
    /// Statuses for requests carrying these `Idempotency-Key`s, over `status`.
    per_event: std::collections::HashMap<String, u16>,
}

#[derive(Debug)]
struct RecorderInner {
    received: Mutex<Vec<Received>>,
    plan: Mutex<Plan>,
    /// Requests being answered now, and the most there ever were at once.
    open: Mutex<(usize, usize)>,
}

/// An upstream that records every request and answers as told (200 `{"ok":true}`
/// by default). Dropping it stops accepting connections.
#[derive(Debug)]
pub struct Recorder {
    pub addr: SocketAddr,
    inner: Arc<RecorderInner>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records one request and answers it as planned.
async fn record(
    shared: Arc<RecorderInner>,
    req: http::Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    {
        let mut open = lock(&shared.open);
        open.0 += 1;
        open.1 = open.1.max(open.0);
    }
    let at = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let (status, delay, retry_after) = {
        let p = lock(&shared.plan);
        let key = parts
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok());
        let status = key
            .and_then(|k| p.per_event.get(k).copied())
            .unwrap_or(p.status);
        (status, p.delay, p.retry_after)
    };
    lock(&shared.received).push(Received {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers,
        body,
        status,
        at,
    });
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    lock(&shared.open).0 -= 1;
    let mut r = Response::new(Full::new(Bytes::from_static(br#"{"ok":true}"#)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut()
        .insert("x-upstream", http::HeaderValue::from_static("stub"));
    if let Some(secs) = retry_after {
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    r
}

impl Recorder {
    /// Starts on a free port of 127.0.0.1.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// Starts on a given port (0 = any free one). Panics if it cannot bind: this is
    /// test scaffolding.
    pub async fn start_on(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind the recorder");
        let addr = listener.local_addr().expect("recorder address");
        let inner = Arc::new(RecorderInner {
            received: Mutex::new(Vec::new()),
            plan: Mutex::new(Plan {
                status: 200,
                delay: Duration::ZERO,
                retry_after: None,
                per_event: std::collections::HashMap::new(),
            }),
            open: Mutex::new((0, 0)),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = inner.clone();
        tokio::spawn(crate::ingress::listen::serve_http(
            listener,
            async move {
                let _ = stopped.await;
            },
            move |req, _peer| record(shared.clone(), req),
        ));
        Self {
            addr,
            inner,
            _stop: stop,
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The most requests it was answering at once so far.
    pub fn max_concurrent(&self) -> usize {
        lock(&self.inner.open).1
    }

    /// Answer with this status from now on.
    pub fn set_status(&self, status: u16) {
        lock(&self.inner.plan).status = status;
    }

    /// Answer requests carrying this `Idempotency-Key` with this status from now on
    /// (`None`: as every other request again): one event that its handler refuses.
    pub fn set_status_for(&self, event_id: &str, status: Option<u16>) {
        let mut plan = lock(&self.inner.plan);
        match status {
            Some(s) => plan.per_event.insert(event_id.to_owned(), s),
            None => plan.per_event.remove(event_id),
        };
    }

    /// Send `Retry-After: <secs>` with every answer from now on (`None`: no header).
    pub fn set_retry_after(&self, secs: Option<u64>) {
        lock(&self.inner.plan).retry_after = secs;
    }

    /// Wait this long before answering from now on.
    pub fn set_delay(&self, delay: Duration) {
        lock(&self.inner.plan).delay = delay;
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.inner.received).clone()
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        lock(&self.inner.received).len()
    }

    /// How many requests carrying this `Idempotency-Key` were answered 2xx: the
    /// effects a handler would have had.
    pub fn effects_for(&self, event_id: &str) -> usize {
        lock(&self.inner.received)
            .iter()
            .filter(|r| {
                (200..300).contains(&r.status) && r.header("idempotency-key") == Some(event_id)
            })
            .count()
    }

    /// How many requests were answered 2xx.
    pub fn effects(&self) -> usize {
        lock(&self.inner.received)
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .count()
    }

    /// How many requests arrived carrying this `Idempotency-Key`.
    pub fn count_for(&self, event_id: &str) -> usize {
        lock(&self.inner.received)
            .iter()
            .filter(|r| r.header("idempotency-key") == Some(event_id))
            .count()
    }
}

/// What the gateway answered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `hookgate-outcome` header: forwarded, duplicate, in_flight, bad_signature, …
    pub fn outcome(&self) -> &str {
        self.header("hookgate-outcome").unwrap_or("")
    }
}

/// A client for the gateways and upstreams a test starts on loopback: it follows no
/// redirects, uses no proxy and trusts no built-in certificate roots. Loading the
/// system's roots costs tens of milliseconds per client, which a test that builds one
/// per simulated sender (hundreds) cannot afford; to reach a TLS listener, build your
/// own client with that listener's certificate added.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .tls_certs_only(Vec::<reqwest::Certificate>::new())
        .build()
        .unwrap_or_default()
}

/// Sends a request with these headers and body.
pub async fn send(method: &str, url: &str, headers: &[(String, String)], body: Vec<u8>) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::POST);
    let mut req = client().request(method, url).body(body);
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    let resp = req.send().await.expect("request to the gateway");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Reply {
        status,
        headers,
        body,
    }
}

/// A gateway running in this process on free ports (public and admin).
#[derive(Debug)]
pub struct Gateway {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// The running gateway's handle (its store, its counters).
    pub app: App,
    pub config: Config,
    clock: Clock,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Gateway {
    /// Starts a gateway from config text (`${VAR}` reads the environment). The
    /// config's `listen` addresses are ignored: it binds free ports on 127.0.0.1.
    pub async fn start(config_text: &str) -> Self {
        Self::start_with_clock(config_text, Clock::System).await
    }

    /// Starts a gateway that believes it is `clock` (to verify old captures as of
    /// their own time).
    pub async fn start_with_clock(config_text: &str, clock: Clock) -> Self {
        let config = config::parse(config_text, Path::new("test.toml"), &ProcessEnv)
            .unwrap_or_else(|e| panic!("config invalid:\n{e}"));
        Self::start_config(config, clock).await
    }

    /// Starts a gateway from a config file (reloads re-read it).
    pub async fn start_file(path: &Path) -> Self {
        let config = config::load(path).unwrap_or_else(|e| panic!("{e}"));
        Self::start_config(config, Clock::System).await
    }

    /// Starts a gateway from a validated config.
    pub async fn start_config(config: Config, clock: Clock) -> Self {
        let app = App::build(&config, clock).expect("gateway state");
        let handle = app.clone();
        let listeners = Listeners::loopback().await.expect("bind the gateway");
        let addr = listeners.public.local_addr().expect("addr");
        let admin = listeners
            .admin
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .expect("admin addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(handle.run(listeners, async move {
            let _ = stopped.await;
        }));
        Self {
            addr,
            admin,
            app,
            config,
            clock,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The public listener's base URL, for [`Replay::send`].
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<admin port><path>`.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// The value of one sample of `/metrics` (0 when absent), e.g.
    /// `hookgate_deliveries_total{route="stripe",outcome="forwarded"}`.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = client()
            .get(self.admin_url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .unwrap_or_default();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(sample)
                    .and_then(|rest| rest.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }

    fn route(&self, name: &str) -> &crate::config::Route {
        self.config
            .route(name)
            .unwrap_or_else(|| panic!("no route {name}"))
    }

    /// The headers the route's provider would send with `body`, signed now.
    pub fn sign(&self, route: &str, body: &str, event_id: &str) -> Vec<(String, String)> {
        let r = self.route(route);
        crate::sign::headers(
            &r.verifier,
            &r.event_id,
            body.as_bytes(),
            self.clock.now(),
            event_id,
            r.public_url.as_deref(),
        )
        .expect("sign")
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
    }

    /// Signs and posts a delivery to a route.
    pub async fn deliver(&self, route: &str, body: &str, event_id: &str) -> Reply {
        let path = self.route(route).path.clone();
        let headers = self.sign(route, body, event_id);
        send("POST", &self.url(&path), &headers, body.as_bytes().to_vec()).await
    }

    /// Sends a replay file's delivery as recorded; a file with no path of its own goes
    /// to the route it names.
    pub async fn send(&self, replay: &Replay) -> Reply {
        let headers: Vec<(String, String)> = replay.request_headers().cloned().collect();
        let target = match (replay.path.is_empty(), replay.route.as_deref()) {
            (true, Some(route)) => self.url(&self.route(route).path),
            _ => self.base_url(),
        };
        let url = replay
            .url(&target)
            .expect("a route's URL, or a file with a path");
        send(&replay.method, &url, &headers, replay.body_bytes()).await
    }

    /// Stops the gateway and waits for it (and its settle steps) to finish.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
