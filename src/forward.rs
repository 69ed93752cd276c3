//! Forwarding a verified delivery to its route's upstream: the raw body byte for byte,
//! end-to-end headers kept, hop-by-hop headers dropped, and the gateway's own headers
//! added (`Idempotency-Key`, `Hookgate-Event-Id`, `Hookgate-Route`, `X-Forwarded-For`).

use std::net::IpAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{Destination, Route};
use crate::provider::EventId;

/// Largest upstream response body relayed to the provider; the rest is dropped.
/// Providers ignore response bodies beyond logging them.
pub const MAX_RELAYED_BODY: usize = 64 * 1024;

/// Why a forward failed. Each one releases the claim so the provider's retry is a
/// fresh attempt.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No connection could be made (refused, DNS, connect timeout): 502.
    #[error("cannot connect to upstream: {0}")]
    Connect(String),
    /// The upstream did not answer within the route's `upstream_timeout`: 504.
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// The connection broke mid-exchange; the upstream may have acted: 502.
    #[error("upstream exchange failed: {0}")]
    Broken(String),
}

/// What the upstream answered.
#[derive(Debug, Clone)]
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// One request to send upstream.
#[derive(Debug)]
pub struct Outbound<'a> {
    pub method: Method,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    pub query: Option<&'a str>,
    pub event_id: &'a EventId,
    pub peer: IpAddr,
    /// Unix seconds, for `forward_secret` signatures.
    pub now: u64,
}

/// The pooled HTTP client every route shares: hyper-util's, used directly (the same
/// stack as the reference proxy; reqwest's extra layers showed per request).
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), plus
/// `Host` and `Content-Length`, which the client sets for the new request.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "host",
    "content-length",
];

/// Whether a header of a received delivery is sent on to the upstream: not the
/// hop-by-hop set, and not the gateway's own marker of a replayed delivery
/// ([`crate::replay::REPLAY_HEADER`]). (`Connection` may name more: see [`end_to_end`].)
pub fn is_forwarded(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !HOP_BY_HOP.contains(&n.as_str()) && n != crate::replay::REPLAY_HEADER
}

/// Copies the end-to-end headers: drops the hop-by-hop set, whatever `Connection`
/// names, and the replay marker.
pub fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len() + 4);
    for (name, value) in headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n)
            || n == crate::replay::REPLAY_HEADER
            || named.iter().any(|c| c == n)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

impl Forwarder {
    /// Builds the client: no redirects (hyper follows none: a 307 would re-post the
    /// signed body elsewhere), no proxy from the environment (hyper reads none), a short
    /// idle-pool lifetime (below common upstream keep-alive timeouts, so a pooled socket
    /// is not reused just as the upstream closes it), TLS with the system's roots and
    /// HTTP/2 when the upstream offers it.
    pub fn new() -> anyhow::Result<Self> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(4))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(https);
        Ok(Self { client })
    }

    /// Sends one delivery to one of the route's destinations and reads the answer,
    /// all within the destination's `upstream_timeout`.
    pub async fn send(
        &self,
        route: &Route,
        to: &Destination,
        out: Outbound<'_>,
    ) -> Result<UpstreamResponse, ForwardError> {
        let Some(upstream) = to.upstream() else {
            return Err(ForwardError::Connect(format!(
                "destination {:?} is not an HTTP upstream",
                to.name
            )));
        };
        let uri = upstream_uri(upstream, out.query)?;
        let headers = forwarded_headers(route, to, &out);
        let mut req = Request::new(Full::new(out.body.clone()));
        *req.method_mut() = out.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        let limit = to.upstream_timeout;
        match tokio::time::timeout(limit, self.exchange(req)).await {
            Ok(result) => result,
            Err(_) => Err(ForwardError::Timeout(limit)),
        }
    }

    async fn exchange(&self, req: Request<Full<Bytes>>) -> Result<UpstreamResponse, ForwardError> {
        let resp = self.client.request(req).await.map_err(|e| {
            if e.is_connect() {
                ForwardError::Connect(error_chain(&e))
            } else {
                ForwardError::Broken(error_chain(&e))
            }
        })?;
        let (parts, mut incoming) = resp.into_parts();
        let mut headers = end_to_end(&parts.headers);
        headers.remove(header::CONTENT_LENGTH);
        // The status decides the outcome; a body that breaks off after a 2xx status
        // still counts as acknowledged.
        let mut body = BytesMut::new();
        while body.len() < MAX_RELAYED_BODY {
            match incoming.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(chunk) = frame.into_data() {
                        let room = MAX_RELAYED_BODY.saturating_sub(body.len());
                        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    }
                }
                None => break,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "upstream response body ended early");
                    break;
                }
            }
        }
        Ok(UpstreamResponse {
            status: parts.status,
            headers,
            body: body.freeze(),
        })
    }
}

/// The headers a delivery carries to a destination: the request's end-to-end headers,
/// `Idempotency-Key` and `Hookgate-Event-Id` (the event ID), `Hookgate-Route`,
/// `Hookgate-Destination` (named destinations only), `X-Forwarded-For`, and the
/// `forward_secret` signature. Every kind of destination carries these.
pub fn forwarded_headers(route: &Route, to: &Destination, out: &Outbound<'_>) -> HeaderMap {
    let mut h = end_to_end(out.headers);
    let id = HeaderValue::from_str(out.event_id.as_str())
        .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
    h.insert(HeaderName::from_static("idempotency-key"), id.clone());
    h.insert(HeaderName::from_static("hookgate-event-id"), id);
    if let Ok(v) = HeaderValue::from_str(&route.name) {
        h.insert(HeaderName::from_static("hookgate-route"), v);
    }
    // Named destinations only; never one the sender wrote.
    let destination = HeaderName::from_static("hookgate-destination");
    h.remove(&destination);
    if !crate::config::is_own_destination(&route.name, &to.name)
        && let Ok(v) = HeaderValue::from_str(&to.name)
    {
        h.insert(destination, v);
    }
    let xff = HeaderName::from_static("x-forwarded-for");
    let peer = out.peer.to_string();
    let chain = match h.get(&xff).and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.trim().is_empty() => format!("{prev}, {peer}"),
        _ => peer,
    };
    if let Ok(v) = HeaderValue::from_str(&chain) {
        h.insert(xff, v);
    }
    if let Some(signer) = &to.forward_signer {
        h.remove(&signer.id_header);
        h.remove(&signer.timestamp_header);
        h.remove(&signer.signature_header);
        if let Some(sig) = signer.sign(out.event_id.as_str(), out.now, &out.body) {
            for (name, value) in sig {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    h.insert(name, v);
                }
            }
        }
    }
    h
}

/// The route's upstream with the received query appended to its own.
fn upstream_uri(upstream: &reqwest::Url, query: Option<&str>) -> Result<Uri, ForwardError> {
    let mut url = upstream.clone();
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        let merged = match url.query() {
            Some(existing) if !existing.is_empty() => format!("{existing}&{q}"),
            _ => q.to_owned(),
        };
        url.set_query(Some(&merged));
    }
    url.as_str()
        .parse::<Uri>()
        .map_err(|e| ForwardError::Connect(format!("upstream URL: {e}")))
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_dropped() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("content-length", "12"),
            ("host", "example"),
            ("te", "trailers"),
            ("stripe-signature", "t=1,v1=ab"),
            ("content-type", "application/json"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let out = end_to_end(&h);
        let names: Vec<_> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["stripe-signature", "content-type"]);
    }
}
