//! A tiny upstream handler for trying hookgate by hand: it prints every request it
//! receives and answers 200.
//!
//! ```text
//! cargo run --example upstream            # listens on 127.0.0.1:3000
//! cargo run --example upstream -- 4000    # another port
//! upstream 0.0.0.0:3000                   # any address (containers)
//! ```

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("upstream listening on http://127.0.0.1:{port}");
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            let svc = service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let h = |n: &str| {
                    parts
                        .headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_owned()
                };
                println!(
                    "{} {}  idempotency-key={}  hookgate-route={}  {} bytes: {}",
                    parts.method,
                    parts.uri,
                    h("idempotency-key"),
                    h("hookgate-route"),
                    body.len(),
                    String::from_utf8_lossy(&body)
                );
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                    b"{\"received\":true}\n",
                ))))
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
