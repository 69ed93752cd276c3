//! One connection, on either listener: its deadlines (a silent connection is closed
//! after `header_read_timeout`, an idle one after `idle_timeout`), HTTP/1.1 and HTTP/2
//! as both listeners serve them, and the answer to a connection past a listener's
//! bounds.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;

use crate::config::ServerConfig;

/// When a connection with no request in progress is closed: `header_read_timeout`
/// after it opened if it has sent no request yet (silent connections, a lone HTTP/2
/// preface, a quiet TLS session), `idle_timeout` after its last request otherwise.
#[derive(Debug)]
struct Activity {
    opened: tokio::time::Instant,
    state: std::sync::Mutex<ActivityState>,
}

#[derive(Debug, Default)]
struct ActivityState {
    in_progress: usize,
    last_request_end: Option<tokio::time::Instant>,
}

/// A request in progress on a connection; dropping it (answered, or dropped by a
/// client that hung up) records the end.
struct InProgress(Arc<Activity>);

impl Activity {
    fn new() -> Self {
        Self {
            opened: tokio::time::Instant::now(),
            state: std::sync::Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn begin(self: &Arc<Self>) -> InProgress {
        self.lock().in_progress += 1;
        InProgress(self.clone())
    }

    /// When the connection is idle for too long, if nothing happens before then.
    fn deadline(&self, first_request: Duration, idle: Duration) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let st = self.lock();
        match (st.in_progress, st.last_request_end) {
            // Requests are bounded by their own timeouts; look again later.
            (1.., _) => now + idle,
            (0, None) => self.opened + first_request,
            (0, Some(end)) => end + idle,
        }
    }
}

/// A response body that keeps its request in progress until it is sent.
struct Tracked<B> {
    body: B,
    _busy: InProgress,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.in_progress = st.in_progress.saturating_sub(1);
        st.last_request_end = Some(tokio::time::Instant::now());
    }
}

/// A connection's deadlines (`server.*`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) shutdown_grace: Duration,
}

impl Deadlines {
    pub(crate) fn of(server: &ServerConfig) -> Self {
        Self {
            header_read_timeout: server.header_read_timeout,
            idle_timeout: server.idle_timeout,
            shutdown_grace: server.shutdown_grace,
        }
    }
}

/// Serves one connection until it ends, the gateway shuts down (`closing`), or it sits
/// idle past its deadline (see [`Activity`]). A connection asked to close that does not
/// within `shutdown_grace` (idle) is dropped.
pub(crate) async fn serve_connection<S, I, H, Fut, B>(
    deadlines: Deadlines,
    state: Arc<S>,
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    peer: std::net::SocketAddr,
    closing: tokio_util::sync::CancellationToken,
    handle: H,
) where
    S: Send + Sync + 'static,
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Arc<S>, http::Request<hyper::body::Incoming>, std::net::SocketAddr) -> Fut
        + Clone
        + Send
        + Sync
        + 'static,
    Fut: Future<Output = http::Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let activity = Arc::new(Activity::new());
    let svc = {
        let (state, activity) = (state.clone(), activity.clone());
        service_fn(move |req| {
            let (st, busy) = (state.clone(), activity.begin());
            let handle = handle.clone();
            async move {
                let resp = handle(st, req, peer).await;
                // In progress until its body is sent (a live stream's too).
                Ok::<_, std::convert::Infallible>(resp.map(|body| Tracked { body, _busy: busy }))
            }
        })
    };
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let (first, idle) = (deadlines.header_read_timeout, deadlines.idle_timeout);
    let mut hard_stop: Option<tokio::time::Instant> = None;
    loop {
        let wake = hard_stop.unwrap_or_else(|| activity.deadline(first, idle));
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = closing.cancelled(), if hard_stop.is_none() => {
                // Shutdown: finish what is in progress; the caller bounds the wait.
                conn.as_mut().graceful_shutdown();
                hard_stop = Some(tokio::time::Instant::now() + deadlines.shutdown_grace);
            }
            () = tokio::time::sleep_until(wake) => {
                if hard_stop.is_some() {
                    return;
                }
                if tokio::time::Instant::now() >= activity.deadline(first, idle) {
                    tracing::debug!(%peer, "closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    hard_stop = Some(tokio::time::Instant::now() + Duration::from_secs(5));
                }
            }
        }
    }
}

/// HTTP/1.1 and HTTP/2 as both listeners serve them: the request head bounded in time
/// and size, HTTP/2 streams per connection bounded.
pub(crate) fn http_builder(server: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Without a timer the header read timeout is silently off (slowloris).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(server.header_read_timeout)
        .max_headers(server.max_headers)
        .max_buf_size(server.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(server.max_concurrent_streams)
        .max_header_list_size(u32::try_from(server.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// Answers a connection past a listener's bounds with 503 and closes it, in a task of
/// its own (never queued, never blocking the accept loop).
pub(crate) fn refuse(stream: tokio::net::TcpStream) {
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        let mut stream = stream;
        let _ = stream
            .write_all(&crate::pipeline::respond::overloaded_http1())
            .await;
    });
}
