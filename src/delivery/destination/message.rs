//! An event as the servers of other kinds take it: its ID, type, route, order key and
//! provider, when it was accepted, the headers hookgate would forward and the body as
//! it came.

use std::net::IpAddr;

use bytes::Bytes;
use http::Method;

use crate::config::{Destination, Route};
use crate::forward::{Outbound, forwarded_headers};
use crate::provider::EventId;
use crate::state::Clock;
use crate::store::StoredEvent;

/// One event, ready for a server of another kind.
#[derive(Debug, Clone)]
pub struct Message {
    pub event_id: String,
    /// `None` when the route knows no type for it.
    pub event_type: Option<String>,
    pub route: String,
    pub provider: &'static str,
    /// The destination's `order_by` key, as the delivery has it.
    pub order_key: Option<String>,
    /// Unix milliseconds when the gateway accepted it.
    pub received_at_ms: u64,
    /// The headers an HTTP delivery would carry (names in lower case), and
    /// `Hookgate-Event-Type` when the event has a type. Values that are not text
    /// are left out.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Message {
    /// The message for a stored event to `dest`.
    pub fn of(clock: Clock, route: &Route, dest: &Destination, event: &StoredEvent) -> Self {
        let env = &event.envelope;
        let received = env.header_map();
        let event_id = EventId::new(&env.event_id);
        let out = outbound(event, &received, &event_id, clock);
        let mut headers: Vec<(String, String)> = forwarded_headers(route, dest, &out)
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        if let Some(t) = &env.event_type {
            headers.push(("hookgate-event-type".into(), t.clone()));
        }
        let order_key = dest
            .order_by
            .as_ref()
            .and_then(|o| o.raw(&received, &event.body));
        Self {
            event_id: env.event_id.clone(),
            event_type: env.event_type.clone(),
            route: route.name.clone(),
            provider: route.verifier.preset().name(),
            order_key,
            received_at_ms: env.received_at_ms,
            headers,
            body: event.body.clone(),
        }
    }

    /// The headers with their names as HTTP writes them (`Idempotency-Key`,
    /// `Hookgate-Route`, `Stripe-Signature`): brokers' header names are compared as
    /// written, and these are the names consumers look for.
    pub fn titled_headers(&self) -> impl Iterator<Item = (String, &str)> {
        self.headers
            .iter()
            .map(|(n, v)| (title_case(n), v.as_str()))
    }

    /// The headers as one JSON object (a repeated name keeps its last value).
    pub fn headers_json(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> = self
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect();
        serde_json::Value::Object(map)
    }
}

/// The request a stored event makes, as a forward sends it (method, headers, query,
/// body, the provider's address, the time signatures are made at).
pub(super) fn outbound<'a>(
    event: &'a StoredEvent,
    received: &'a http::HeaderMap,
    event_id: &'a EventId,
    clock: Clock,
) -> Outbound<'a> {
    let env = &event.envelope;
    Outbound {
        method: Method::from_bytes(env.method.as_bytes()).unwrap_or(Method::POST),
        headers: received,
        body: event.body.clone(),
        query: env.query.as_deref(),
        event_id,
        peer: env
            .peer
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
        now: clock.now(),
    }
}

/// `idempotency-key` as `Idempotency-Key`: each word after a `-` capitalized.
fn title_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_names_are_written_as_http_writes_them() {
        assert_eq!(super::title_case("idempotency-key"), "Idempotency-Key");
        assert_eq!(super::title_case("x-github-event"), "X-Github-Event");
        assert_eq!(
            super::title_case("hookgate-event-type"),
            "Hookgate-Event-Type"
        );
    }
}
