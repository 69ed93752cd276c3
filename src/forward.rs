//! Forwarding a verified delivery to its route's upstream: the raw body byte for byte,
//! end-to-end headers kept, hop-by-hop headers dropped, and the gateway's own headers
//! added (`Idempotency-Key`, `Hookgate-Event-Id`, `Hookgate-Route`, `X-Forwarded-For`).

use std::net::IpAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

use crate::config::Route;
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

/// The pooled HTTP client every route shares.
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: reqwest::Client,
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

/// Copies the end-to-end headers: drops the hop-by-hop set and whatever `Connection`
/// names.
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
        if HOP_BY_HOP.contains(&n) || named.iter().any(|c| c == n) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

impl Forwarder {
    /// Builds the client: no redirects (a 307 would re-post the signed body elsewhere),
    /// no proxy from the environment, a short idle-pool lifetime (below common upstream
    /// keep-alive timeouts, so a pooled socket is not reused just as the upstream
    /// closes it).
    pub fn new() -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(4))
            .tcp_nodelay(true)
            .build()?;
        Ok(Self { client })
    }

    /// Sends one delivery upstream and reads the answer.
    pub async fn send(
        &self,
        route: &Route,
        out: Outbound<'_>,
    ) -> Result<UpstreamResponse, ForwardError> {
        let mut url = route.upstream.clone();
        if let Some(q) = out.query.filter(|q| !q.is_empty()) {
            let merged = match url.query() {
                Some(existing) if !existing.is_empty() => format!("{existing}&{q}"),
                _ => q.to_owned(),
            };
            url.set_query(Some(&merged));
        }
        let headers = self.outbound_headers(route, &out);
        let result = self
            .client
            .request(out.method, url)
            .headers(headers)
            .body(out.body)
            .timeout(route.upstream_timeout)
            .send()
            .await;
        let mut resp = result.map_err(|e| classify(e, route.upstream_timeout))?;
        let status = resp.status();
        let headers = end_to_end(resp.headers());
        // The status decides the outcome; a body that breaks off after a 2xx status
        // still counts as acknowledged.
        let mut body = BytesMut::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_RELAYED_BODY.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= MAX_RELAYED_BODY {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "upstream response body ended early");
                    break;
                }
            }
        }
        let mut headers = headers;
        headers.remove(header::CONTENT_LENGTH);
        Ok(UpstreamResponse {
            status,
            headers,
            body: body.freeze(),
        })
    }

    fn outbound_headers(&self, route: &Route, out: &Outbound<'_>) -> HeaderMap {
        let mut h = end_to_end(out.headers);
        let id = HeaderValue::from_str(out.event_id.as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        h.insert(HeaderName::from_static("idempotency-key"), id.clone());
        h.insert(HeaderName::from_static("hookgate-event-id"), id);
        if let Ok(v) = HeaderValue::from_str(&route.name) {
            h.insert(HeaderName::from_static("hookgate-route"), v);
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
        if let Some(signer) = &route.forward_signer {
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
}

fn classify(e: reqwest::Error, timeout: Duration) -> ForwardError {
    // A connect timeout is both `is_connect` and `is_timeout`: test connect first, so
    // it is a 502 (nothing reached the upstream), not a 504.
    if e.is_connect() {
        ForwardError::Connect(error_chain(&e))
    } else if e.is_timeout() {
        ForwardError::Timeout(timeout)
    } else {
        ForwardError::Broken(error_chain(&e))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
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
