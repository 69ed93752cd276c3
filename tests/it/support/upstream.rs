//! A stub upstream that records every request it receives and answers as told.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Debug, Clone)]
struct Plan {
    status: u16,
    delay: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    received: Mutex<Vec<Received>>,
    plan: Mutex<Option<Plan>>,
}

/// The stub. Dropping it stops the server.
pub struct Upstream {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Upstream {
    /// Starts on a free port, answering 200 `{"ok":true}` at once.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// Starts on a given port (0 = any free one).
    pub async fn start_on(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let inner = Arc::new(Inner::default());
        *inner.plan.lock().expect("lock") = Some(Plan {
            status: 200,
            delay: Duration::ZERO,
        });
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = inner.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    acc = listener.accept() => {
                        let Ok((stream, _)) = acc else { continue };
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                                let shared = shared.clone();
                                async move {
                                    let (parts, body) = req.into_parts();
                                    let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                                    shared.received.lock().expect("lock").push(Received {
                                        method: parts.method.to_string(),
                                        uri: parts.uri.to_string(),
                                        headers: parts.headers,
                                        body,
                                    });
                                    let plan = shared.plan.lock().expect("lock").clone().expect("plan");
                                    if !plan.delay.is_zero() {
                                        tokio::time::sleep(plan.delay).await;
                                    }
                                    let mut r = Response::new(Full::new(Bytes::from_static(br#"{"ok":true}"#)));
                                    *r.status_mut() = StatusCode::from_u16(plan.status).expect("status");
                                    r.headers_mut().insert("x-upstream", "stub".parse().expect("hv"));
                                    Ok::<_, Infallible>(r)
                                }
                            });
                            let _ = auto::Builder::new(TokioExecutor::new())
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
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

    /// Answer with this status from now on.
    pub fn set_status(&self, status: u16) {
        if let Some(p) = self.inner.plan.lock().expect("lock").as_mut() {
            p.status = status;
        }
    }

    /// Wait this long before answering from now on.
    pub fn set_delay(&self, delay: Duration) {
        if let Some(p) = self.inner.plan.lock().expect("lock").as_mut() {
            p.delay = delay;
        }
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().expect("lock").clone()
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        self.inner.received.lock().expect("lock").len()
    }

    /// How many requests arrived carrying this `Idempotency-Key`.
    pub fn count_for(&self, event_id: &str) -> usize {
        self.inner
            .received
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.header("idempotency-key") == Some(event_id))
            .count()
    }
}
