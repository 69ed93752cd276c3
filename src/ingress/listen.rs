//! The one accept loop every listener uses — the public one, the admin one, the demo
//! upstream, the test recorder and the benchmark's processes — and a plain HTTP server
//! on top of it for all but the public listener (which adds limits, TLS and deadlines
//! of its own in [`super::run`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};

/// Accepts connections until `shutdown` resolves, handing each (with `TCP_NODELAY`
/// set) to `on_conn`. An accept error — typically EMFILE, out of file descriptors —
/// is logged and backed off for 50 ms instead of spinning.
pub async fn accept_loop(
    listener: &TcpListener,
    shutdown: impl Future<Output = ()>,
    mut on_conn: impl FnMut(TcpStream, SocketAddr),
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    on_conn(stream, peer);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = &mut shutdown => return,
        }
    }
}

/// Serves HTTP/1.1 and HTTP/2 on `listener` until `shutdown`, answering every request
/// with `handler` (which gets the request and the peer's address). Each connection
/// runs on a task of its own.
pub async fn serve_http<F, Fut, B>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    handler: F,
) where
    F: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    accept_loop(&listener, shutdown, |stream, peer| {
        let handler = handler.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req, peer).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    })
    .await;
}
