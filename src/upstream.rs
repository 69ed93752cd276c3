//! `hookgate upstream`: a tiny handler for trying the gateway by hand. It prints every
//! request it receives (method, path, the headers the gateway adds, the body) and
//! answers `200 {"received":true}`. It ships in the binary so that the README's walk
//! needs one build, not a second one for an example program.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

/// Where `hookgate upstream ADDR` listens: a port (on 127.0.0.1) or an address.
pub fn parse_listen(arg: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = arg.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    arg.parse()
        .map_err(|_| format!("{arg:?}: give a port (3000) or an address (0.0.0.0:3000)"))
}

/// Serves until the process is stopped; one line on stdout per request.
pub async fn run(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    println!("upstream listening on http://{}", listener.local_addr()?);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning.
                eprintln!("upstream: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
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
                let mut resp =
                    http::Response::new(Full::new(Bytes::from_static(b"{\"received\":true}\n")));
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                Ok::<_, Infallible>(resp)
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
