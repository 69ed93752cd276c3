//! `hookgate upstream`: a tiny handler for trying the gateway by hand. It prints every
//! request it receives (method, path, the headers the gateway adds, the body) and
//! answers `200 {"received":true}`. It ships in the binary so that the walk
//! (docs/getting-started.md) needs one build, not a second one for an example program.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};

/// Where `hookgate upstream ADDR` listens: a port (on 127.0.0.1) or an address.
pub(super) fn parse_listen(arg: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = arg.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    arg.parse()
        .map_err(|_| format!("{arg:?}: give a port (3000) or an address (0.0.0.0:3000)"))
}

/// Serves until SIGINT or SIGTERM; one line on stdout per request.
pub(super) async fn run(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    // Registered here, not inherited: a background job starts with SIGINT ignored,
    // and Ctrl-C after `fg` or `kill -INT` must still stop it.
    let stop = crate::shutdown::Signals::install();
    println!("upstream listening on http://{}", listener.local_addr()?);
    crate::ingress::listen::serve_http(listener, stop.stopped(), |req, _peer| answer(req)).await;
    Ok(())
}

async fn answer(req: http::Request<hyper::body::Incoming>) -> http::Response<Full<Bytes>> {
    // A health check (compose's, a load balancer's) is answered and not printed.
    if req.method() == http::Method::GET && req.uri().path() == "/healthz" {
        return http::Response::new(Full::new(Bytes::from_static(b"ok\n")));
    }
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
        // The body is the sender's: its control characters are written out, so it
        // cannot drive this terminal.
        super::text::printable(&String::from_utf8_lossy(&body))
    );
    let mut resp = http::Response::new(Full::new(Bytes::from_static(b"{\"received\":true}\n")));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}
