//! What every request leaves behind, written from one record in one phase: the log
//! line ([`logging`], `log_line.rs`), the metrics ([`metrics`]), the capture file
//! ([`capture`]) and the delivery log's record (`recorder.rs`). Captures and the log
//! show nothing `redact.rs` hides. With `[telemetry] otlp`, its spans too
//! ([`traces`]: built as the stages go, exported in batches off the request path).

pub mod alerts;
pub mod capture;
pub(crate) mod log_line;
pub mod logging;
pub mod metrics;
pub(crate) mod recorder;
pub(crate) mod redact;
pub mod traces;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request};
use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;
use crate::provider::Preset;

/// One request's record: what it was, copied once when it arrived, and what the
/// pipeline's stages found out, filled in as they go (so that even a request cut off
/// by `request_timeout` is logged with its route and ID). Read once, by [`finish`].
#[derive(Debug)]
pub(crate) struct RequestRecord {
    pub started: Instant,
    /// Unix ms.
    pub received_at: u64,
    pub method: Method,
    pub peer: SocketAddr,
    /// The client as `server.trusted_proxies` tell it (a refused request's budget
    /// is counted against it).
    pub client: IpAddr,
    /// The path, query and headers, copied before the pipeline consumes the request,
    /// when the delivery log or the capture wants them.
    head: Option<Head>,
    /// The capture wants this request, if its outcome does (not a replay, unless
    /// `[capture] replays`).
    capture: bool,
    pub route: Option<String>,
    pub provider: Option<Preset>,
    /// The header the route reads a token from when it is not one the preset names
    /// (`auth_header`): its value is hidden in captures like the preset's own.
    pub credential_header: Option<http::HeaderName>,
    pub event_id: Option<String>,
    /// The event's type, where the route knows where to find it.
    pub event_type: Option<String>,
    /// The log line's detail.
    pub detail: Option<String>,
    pub secret_index: Option<usize>,
    /// The raw body.
    pub body: Option<Bytes>,
    /// Why it was refused, for the delivery log (else the outcome's own words).
    pub reason: Option<String>,
    /// The provider's own unsigned delivery ID.
    pub provider_delivery_id: Option<String>,
    /// Whether the route queues its deliveries.
    pub queue: bool,
    /// The route's metric handles, resolved once per request.
    pub metrics: Option<Arc<metrics::RouteMetrics>>,
}

/// How a request ended: its outcome and its answer (status, the body's bytes), and
/// how long it took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending<'a> {
    pub outcome: Outcome,
    pub status: u16,
    pub answer: &'a [u8],
    pub duration_us: u64,
}

/// A request's path, query and headers, in one buffer (postcard's encoding of
/// [`Parts`]). Its `Debug` leaves the copy out: it is not redacted.
pub(crate) struct Head(Vec<u8>);

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Head({} bytes)", self.0.len())
    }
}

/// What a [`Head`] holds, borrowed from its buffer.
#[derive(Serialize, Deserialize)]
pub(crate) struct Parts<'a> {
    pub path: &'a str,
    #[serde(borrow)]
    pub query: Option<&'a str>,
    #[serde(borrow)]
    pub headers: Vec<(&'a str, &'a str)>,
}

impl Head {
    /// Copies the request's path, query and headers. A value that is not visible
    /// ASCII (rare) is kept as its lossy text.
    fn copy<B>(req: &Request<B>) -> Self {
        let lossy: Vec<String> = req
            .headers()
            .values()
            .filter(|v| v.to_str().is_err())
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        let mut lossy = lossy.iter();
        let headers: Vec<(&str, &str)> = req
            .headers()
            .iter()
            .map(|(n, v)| {
                let v = v.to_str().ok().or_else(|| lossy.next().map(String::as_str));
                (n.as_str(), v.unwrap_or_default())
            })
            .collect();
        let parts = Parts {
            path: req.uri().path(),
            query: req.uri().query(),
            headers,
        };
        let len = 16
            + parts.path.len()
            + parts.query.map_or(0, str::len)
            + parts
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len() + 4)
                .sum::<usize>();
        Self(postcard::to_extend(&parts, Vec::with_capacity(len)).unwrap_or_default())
    }

    /// The parts, borrowed from the buffer.
    pub(crate) fn parts(&self) -> Option<Parts<'_>> {
        postcard::from_bytes(&self.0).ok()
    }
}

/// Where a request's record goes at its end: the metrics, the capture (when
/// configured) and the delivery log; with what the records' words need.
#[derive(Debug)]
pub(crate) struct Observers {
    pub metrics: Arc<metrics::Metrics>,
    pub capture: Option<capture::Capture>,
    pub recorder: Arc<recorder::Recorder>,
}

impl Observers {
    /// The record of a request that just arrived: the copy of its head is made here,
    /// once, if the delivery log or the capture wants it.
    pub(crate) fn begin<B>(
        &self,
        req: &Request<B>,
        peer: SocketAddr,
        trusted: &[ipnet::IpNet],
    ) -> RequestRecord {
        self.metrics.in_flight.inc();
        let capture = self
            .capture
            .as_ref()
            .is_some_and(|c| c.wants(req.headers()));
        let wanted = self.recorder.cfg.enabled || capture;
        RequestRecord {
            started: Instant::now(),
            received_at: crate::time::now_ms(),
            method: req.method().clone(),
            peer,
            client: crate::client::client_ip(peer.ip(), req.headers(), trusted),
            head: wanted.then(|| Head::copy(req)),
            capture,
            route: None,
            provider: None,
            credential_header: None,
            event_id: None,
            event_type: None,
            detail: None,
            secret_index: None,
            body: None,
            reason: None,
            provider_delivery_id: None,
            queue: false,
            metrics: None,
        }
    }

    /// The end of a request, once its answer is known (`status` and `answer`, the
    /// body's bytes): its capture file, its metrics, its log line and its delivery
    /// log record, all from `rec`.
    pub(crate) fn finish(
        &self,
        mut rec: RequestRecord,
        outcome: Outcome,
        status: u16,
        answer: &[u8],
        max_body: usize,
    ) {
        self.capture(&rec, outcome, status);
        self.metrics.in_flight.dec();
        let elapsed = rec.started.elapsed();
        let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let route_metrics = rec.metrics.take().unwrap_or_else(|| {
            self.metrics
                .route(rec.route.as_deref().unwrap_or(logging::NONE))
        });
        self.metrics
            .delivery(&route_metrics, outcome, elapsed.as_secs_f64());
        logging::delivery_line(&rec, outcome, status, elapsed_us);
        if rec.route.is_some() {
            if rec.reason.is_none() {
                rec.reason = outcome.reason(max_body);
            }
            let end = Ending {
                outcome,
                status,
                answer,
                duration_us: elapsed_us,
            };
            self.recorder.record(&rec, &end);
        } else if outcome == Outcome::NoRoute {
            let end = Ending {
                outcome,
                status,
                answer,
                duration_us: elapsed_us,
            };
            self.recorder.record_unrouted(&rec, &end);
        }
    }

    /// Writes the request as a replay file, when the capture wants it: verified
    /// deliveries and handshakes, and refused requests only with `[capture] refused`.
    fn capture(&self, rec: &RequestRecord, outcome: Outcome, status: u16) {
        let Some(capture) = &self.capture else {
            return;
        };
        let verified = rec.event_id.is_some() || outcome == Outcome::Handshake;
        if !rec.capture || !capture.wants_outcome(verified) {
            return;
        }
        let Some(parts) = rec.head.as_ref().and_then(Head::parts) else {
            return;
        };
        let headers = parts
            .headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        let body = rec.body.clone().unwrap_or_default();
        let mut r = crate::replay::Replay::new(
            rec.method.as_str(),
            parts.path,
            parts.query,
            headers,
            &body,
        );
        r.received_at = rec.received_at;
        r.route = rec.route.clone();
        r.provider = rec.provider.map(|p| p.name().to_owned());
        r.outcome = Some(outcome.as_str().to_owned());
        r.status = Some(status);
        r.event_type = rec.event_type.clone();
        // Credentials the route's preset knows, wherever they travel (query, body).
        redact::capture(&mut r, rec.provider);
        if let Some(name) = &rec.credential_header {
            redact::named_header(&mut r, name);
        }
        capture.record(r);
    }
}

impl RequestRecord {
    /// The copy of the request's head, if one was made.
    pub(crate) fn head(&self) -> Option<&Head> {
        self.head.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_of_a_request_is_not_in_debug_output() {
        let req = Request::post("/hooks?token=q-s3cret")
            .header("authorization", "Bearer s3cret-token")
            .body(())
            .expect("request");
        let head = Head::copy(&req);
        let shown = format!("{head:?}");
        assert!(shown.contains("bytes"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let parts = head.parts().expect("parts");
        assert_eq!(parts.path, "/hooks");
        assert_eq!(parts.query, Some("token=q-s3cret"));
        assert_eq!(parts.headers, [("authorization", "Bearer s3cret-token")]);
    }
}
