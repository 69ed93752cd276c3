//! An operator's controls of a queue route's destinations (`hookgate events
//! pause|resume` call them):
//! - `POST /events/<route>/pause?destination=&reason=&until=` — pause (every
//!   destination of the route, or the one named); `until` is an age from now (`30m`),
//!   RFC 3339 or Unix milliseconds;
//! - `POST /events/<route>/resume?destination=` — resume.
//!
//! A paused destination keeps accepting and queueing; its workers take nothing until
//! it resumes (`delivery/control.rs`). Both answer each destination's state.

use std::collections::HashMap;

use super::api::{Controlled, DestinationControl, PauseView};
use super::events::Queues;
use super::exchange::AdminAnswer;
use crate::config::Delivery;
use crate::delivery::control;
use crate::store::StoreError;

/// The reason a pause gives when the operator gave none.
const NO_REASON: &str = "paused by an operator";
/// A reason's length at most (it is shown on every page and line that names the pause).
const MAX_REASON: usize = 500;

/// `POST /events/<route>/pause` and `/resume`.
pub(super) async fn answer(
    q: &Queues<'_>,
    action: &str,
    params: &HashMap<String, String>,
) -> Result<AdminAnswer, StoreError> {
    if q.config.delivery != Delivery::Queue {
        return Ok(AdminAnswer::conflict(format!(
            "route {:?} delivers in sync mode: nothing waits to be paused (deliveries are forwarded while the provider waits)",
            q.route
        )));
    }
    let now = crate::time::now_ms();
    let store = &q.state.store;
    if action == "resume" {
        for d in &q.destinations {
            let queue = q.routing.queue(q.route, d);
            if control::resume(store, &queue, now).await? {
                tracing::info!(route = q.route, destination = %d, "queue: an operator resumed the destination");
            }
            q.state.controls.forget(&queue);
            q.state.controls.reset(&queue);
        }
        q.state.wake.notify_one();
        return states(q, now).await;
    }
    let reason = params
        .get("reason")
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .unwrap_or(NO_REASON);
    if reason.chars().count() > MAX_REASON || reason.chars().any(char::is_control) {
        return Ok(AdminAnswer::bad_request(format!(
            "reason: at most {MAX_REASON} characters, on one line"
        )));
    }
    let until = match params
        .get("until")
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
    {
        None => None,
        Some(u) => match until_of(u, now) {
            Ok(t) => Some(t),
            Err(why) => return Ok(AdminAnswer::bad_request(why)),
        },
    };
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        control::pause(store, &queue, reason, until, now).await?;
        q.state.controls.forget(&queue);
        tracing::info!(route = q.route, destination = %d, reason, until = until.map(super::api::rfc3339), "queue: an operator paused the destination (events are kept and queued)");
    }
    states(q, now).await
}

/// When a pause ends: an age from now (`30m`, `2h`), RFC 3339, or Unix milliseconds;
/// in the future.
fn until_of(v: &str, now_ms: u64) -> Result<u64, String> {
    let at = if let Ok(ms) = v.parse::<u64>() {
        ms
    } else if let Ok(d) = humantime::parse_duration(v) {
        now_ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    } else if let Some(ms) = crate::provider::timestamp::rfc3339_ms(v) {
        ms
    } else {
        return Err(format!(
            "until={v:?}: use a duration from now (30m, 2h), RFC 3339 or Unix milliseconds"
        ));
    };
    if at <= now_ms {
        return Err(format!("until={v:?} is not in the future"));
    }
    Ok(at)
}

/// Each destination's state, as the store holds it now.
pub(super) async fn controls(
    q: &Queues<'_>,
    now_ms: u64,
) -> Result<Vec<DestinationControl>, StoreError> {
    let mut out = Vec::with_capacity(q.destinations.len());
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        let c = control::load(&q.state.store, &queue, now_ms).await?;
        out.push(DestinationControl {
            destination: d.clone(),
            paused: c.paused_at(now_ms).map(PauseView::of),
        });
    }
    Ok(out)
}

async fn states(q: &Queues<'_>, now_ms: u64) -> Result<AdminAnswer, StoreError> {
    Ok(AdminAnswer::ok(&Controlled {
        route: q.route.to_owned(),
        destinations: controls(q, now_ms).await?,
    }))
}

#[cfg(test)]
mod tests {
    use super::until_of;

    #[test]
    fn until_takes_an_age_a_time_or_milliseconds_in_the_future() {
        assert_eq!(until_of("30m", 1_000), Ok(1_801_000));
        assert_eq!(
            until_of("2030-01-01T00:00:00Z", 1_000),
            Ok(1_893_456_000_000)
        );
        assert_eq!(until_of("5000", 1_000), Ok(5_000));
        assert!(until_of("500", 1_000).is_err());
        assert!(until_of("soon", 1_000).is_err());
    }
}
