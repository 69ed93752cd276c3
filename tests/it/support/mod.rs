//! Test support: a real Redis, a stub upstream, an in-process gateway, and a client
//! that sends real signed HTTP requests.

pub mod redis;
pub mod upstream;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hookgate::config::{self, Config};
use hookgate::server::{self, AppState, Clock};

pub use self::redis::RedisServer;
pub use self::upstream::Upstream;

/// A gateway running in this process on a free port.
pub struct TestGateway {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub state: Arc<AppState>,
    pub config: Config,
    clock: Clock,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Parses config text as if it were `test.toml`, with no environment variables.
pub fn parse_config(text: &str) -> Config {
    match config::parse(text, Path::new("test.toml"), &|_: &str| None) {
        Ok(c) => c,
        Err(e) => panic!("test config invalid:\n{e}\n---\n{text}"),
    }
}

impl TestGateway {
    /// Starts a gateway on the system clock.
    pub async fn start(config_text: &str) -> Self {
        Self::start_with_clock(config_text, Clock::System).await
    }

    /// Starts a gateway that believes it is `clock`.
    pub async fn start_with_clock(config_text: &str, clock: Clock) -> Self {
        Self::start_config(parse_config(config_text), clock).await
    }

    /// Starts a gateway from a config file (so that reloads re-read it).
    pub async fn start_file(path: &Path) -> Self {
        let config = config::load(path).unwrap_or_else(|e| panic!("{e}"));
        Self::start_config(config, Clock::System).await
    }

    async fn start_config(config: Config, clock: Clock) -> Self {
        let state = Arc::new(AppState::new(&config, clock).expect("gateway state"));
        let admin_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind admin");
        let admin = admin_listener.local_addr().expect("admin addr");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind gateway");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let admin_stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(server::admin::run(
            state.clone(),
            admin_listener,
            admin_stop.clone().cancelled_owned(),
        ));
        let task = tokio::spawn(server::run(state.clone(), listener, async move {
            let _ = stopped.await;
            admin_stop.cancel();
        }));
        Self {
            addr,
            admin,
            state,
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

    /// `http://127.0.0.1:<admin port><path>`.
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// The value of one sample in the gateway's `/metrics` (0 when absent), e.g.
    /// `metric("hookgate_deliveries_total{route=\"stripe\",outcome=\"forwarded\"}")`.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = client()
            .get(self.admin_url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        text.lines()
            .find_map(|l| {
                l.strip_prefix(sample)
                    .and_then(|rest| rest.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }

    /// Signs `body` as the route named `route` expects, at the gateway's clock.
    pub fn sign(&self, route: &str, body: &str, event_id: &str) -> Vec<(String, String)> {
        let r = self
            .config
            .routes
            .iter()
            .find(|r| r.name == route)
            .unwrap_or_else(|| panic!("no route {route}"));
        hookgate::sign::headers(
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

    /// Signs and posts a delivery to a route; returns (status, headers, body).
    pub async fn deliver(&self, route: &str, body: &str, event_id: &str) -> Reply {
        let path = self
            .config
            .routes
            .iter()
            .find(|r| r.name == route)
            .map(|r| r.path.clone())
            .expect("route");
        let headers = self.sign(route, body, event_id);
        post(&self.url(&path), &headers, body.as_bytes().to_vec()).await
    }

    /// Stops the server and waits for it (and its settle steps) to finish.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// What the gateway answered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `hookgate-outcome` header.
    pub fn outcome(&self) -> &str {
        self.header("hookgate-outcome").unwrap_or("")
    }
}

/// A client that keeps no connections between tests and follows no redirects.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// Sends a request with these headers and body.
pub async fn send(method: &str, url: &str, headers: &[(String, String)], body: Vec<u8>) -> Reply {
    let mut req = client()
        .request(method.parse().expect("method"), url)
        .body(body);
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    let resp = req.send().await.expect("request to gateway");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Reply {
        status,
        headers,
        body,
    }
}

/// POSTs a request.
pub async fn post(url: &str, headers: &[(String, String)], body: Vec<u8>) -> Reply {
    send("POST", url, headers, body).await
}

/// The `[store]` table for the memory store or a test Redis.
pub fn store_toml(redis: Option<&RedisServer>, extra: &str) -> String {
    match redis {
        None => format!("[store]\nbackend = \"memory\"\n{extra}\n"),
        Some(r) => format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\n{extra}\n",
            r.url()
        ),
    }
}

/// A config with one Stripe route (`stripe`, secret `whsec_test`) to `upstream`.
pub fn stripe_config(upstream: &Upstream, store: &str, route_extra: &str) -> String {
    format!(
        r#"{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "{}"
{route_extra}
"#,
        upstream.url("/hooks/stripe")
    )
}

/// A Stripe event body with this ID.
pub fn stripe_body(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"amount":2000}}}}}}"#
    )
}

/// Polls `f` until it is true or `limit` passes.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// Writes raw bytes to the gateway and returns what it answers (up to 5 s).
pub async fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = s.write_all(request).await;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}
