//! The HTTP destination: the event is sent as a sync forward sends it (the pooled
//! client in `forward.rs`: same headers, `Idempotency-Key`, `forward_secret`,
//! `upstream_timeout`, no redirects); a 2xx is delivered, a 4xx refused, the rest
//! failed, and a 429 or 503 with `Retry-After` asks the destination's deliveries to
//! slow down.

use std::time::Duration;

use super::Answer;
use crate::config::{Destination, Route};
use crate::forward::{ForwardError, Forwarder, UpstreamResponse};
use crate::provider::EventId;
use crate::state::Clock;
use crate::store::{AttemptResult, StoredEvent};

/// An upstream over HTTP.
#[derive(Debug)]
pub struct Http<'a> {
    forwarder: &'a Forwarder,
    clock: Clock,
    route: &'a Route,
    dest: &'a Destination,
}

impl<'a> Http<'a> {
    pub fn new(
        forwarder: &'a Forwarder,
        clock: Clock,
        route: &'a Route,
        dest: &'a Destination,
    ) -> Self {
        Self {
            forwarder,
            clock,
            route,
            dest,
        }
    }

    /// Sends the event as it was received (method, headers, query, body).
    pub async fn deliver(&self, event: &StoredEvent) -> Answer {
        let env = &event.envelope;
        let headers = env.header_map();
        let event_id = EventId::new(&env.event_id);
        let out = super::message::outbound(event, &headers, &event_id, self.clock);
        answer(&self.forwarder.send(self.route, self.dest, out).await)
    }
}

/// What an upstream's answer (or the forward's error) comes to. `Retry-After` is read
/// in whole seconds.
fn answer(result: &Result<UpstreamResponse, ForwardError>) -> Answer {
    let r = match result {
        Ok(r) => r,
        Err(e) => {
            let kind = match e {
                ForwardError::Timeout(_) => AttemptResult::Timeout,
                ForwardError::Connect(_) => AttemptResult::Connect,
                ForwardError::Broken(_) => AttemptResult::Broken,
            };
            return Answer::failed(kind, e.to_string());
        }
    };
    let status = Some(r.status.as_u16());
    if r.status.is_success() {
        return Answer::delivered(status);
    }
    let retry_after = r
        .headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Answer {
        result: if r.status.is_client_error() {
            AttemptResult::Http4xx
        } else {
            AttemptResult::Http5xx
        },
        status,
        error: None,
        retry_after,
        slow_down: retry_after.filter(|_| matches!(r.status.as_u16(), 429 | 503)),
        receipt: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_errors_are_classified_by_their_stored_result() {
        let answer_to = |status: u16, retry_after: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(v) = retry_after {
                headers.insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from_str(v).expect("value"),
                );
            }
            let a = answer(&Ok(UpstreamResponse {
                status: http::StatusCode::from_u16(status).expect("status"),
                headers,
                body: bytes::Bytes::new(),
            }));
            (a.result, a.retry_after, a.slow_down)
        };
        assert_eq!(
            answer_to(204, Some("5")),
            (AttemptResult::Delivered, None, None)
        );
        assert_eq!(answer_to(404, None), (AttemptResult::Http4xx, None, None));
        let three = Some(Duration::from_secs(3));
        assert_eq!(
            answer_to(429, Some(" 3 ")),
            (AttemptResult::Http4xx, three, three)
        );
        assert_eq!(
            answer_to(400, Some("3")),
            (AttemptResult::Http4xx, three, None),
            "only 429 and 503 ask every delivery to slow down"
        );
        assert_eq!(
            answer_to(503, Some("soon")),
            (AttemptResult::Http5xx, None, None)
        );
        assert_eq!(answer_to(302, None), (AttemptResult::Http5xx, None, None));
        let failed = |e| answer(&Err(e));
        let t = failed(ForwardError::Timeout(Duration::from_secs(1)));
        assert_eq!((t.result, t.status), (AttemptResult::Timeout, None));
        assert!(t.error.is_some());
        assert_eq!(
            failed(ForwardError::Connect("refused".into())).result,
            AttemptResult::Connect
        );
        assert_eq!(
            failed(ForwardError::Broken("reset".into())).result,
            AttemptResult::Broken
        );
    }
}
