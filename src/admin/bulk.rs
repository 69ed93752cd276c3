//! An operator's bulk retry (`hookgate events retry` with filters):
//! `POST /events/<route>/retry?destination=&state=&since=&until=&event_type=&last_result=&plan=true`.
//!
//! The filters select undelivered events: `state` (`dead` or `retrying`; both when
//! unset), `since` and `until` (when the event last failed: its last attempt, or its
//! arrival if it was never tried; Unix milliseconds or RFC 3339), `event_type` (a
//! glob, as a destination's `events` takes), `last_result` (an attempt result such as
//! `http_5xx` or `timeout`, or the destination's status, `500`). With `plan=true`
//! the answer says how many events match and shows the first, changing nothing;
//! without, the same selection is queued again, oldest first, due now: the workers
//! then deliver them at the destination's `rate_limit`, in per-key order.
//!
//! One call takes at most [`BOUND`] events per destination and state (`more` says
//! when some were left: run it again).

use std::collections::HashMap;

use super::api::{BulkRetry, EventSummary};
use super::events::Queues;
use super::exchange::AdminAnswer;
use crate::provider::EventFilter;
use crate::store::{QueueStore as _, State, StoreError, Target};

/// Events listed per destination and state at most: the stores' own bound on a list.
const BOUND: usize = 10_000;
/// Events a plan shows.
const SAMPLE: usize = 20;
/// The parameters that make a retry a bulk retry.
pub(super) const FILTERS: [&str; 6] = [
    "state",
    "since",
    "until",
    "event_type",
    "last_result",
    "plan",
];

/// What a bulk retry selects.
#[derive(Debug)]
struct Selection {
    states: Vec<State>,
    since: Option<u64>,
    until: Option<u64>,
    event_type: Option<EventFilter>,
    last_result: Option<String>,
    plan: bool,
}

impl Selection {
    /// The filters of a request; an error names the bad parameter.
    fn of(p: &HashMap<String, String>) -> Result<Self, String> {
        let text = |k: &str| p.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let states = match text("state") {
            None => vec![State::Dead, State::Retrying],
            Some("dead") => vec![State::Dead],
            Some("retrying") => vec![State::Retrying],
            Some(s) => return Err(format!("state={s:?}: use dead or retrying")),
        };
        let bound = |k: &str| -> Result<Option<u64>, String> {
            text(k)
                .map(|v| {
                    v.parse::<u64>()
                        .ok()
                        .or_else(|| crate::provider::timestamp::rfc3339_ms(v))
                        .ok_or_else(|| format!("{k}={v:?}: use Unix milliseconds or RFC 3339"))
                })
                .transpose()
        };
        let event_type = text("event_type")
            .map(|g| EventFilter::new(vec![g.to_owned()]).map_err(|e| format!("event_type: {e}")))
            .transpose()?;
        let plan = match text("plan") {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(v) => return Err(format!("plan={v:?}: use true or false")),
        };
        Ok(Self {
            states,
            since: bound("since")?,
            until: bound("until")?,
            event_type,
            last_result: text("last_result").map(str::to_owned),
            plan,
        })
    }

    /// Whether an event is selected.
    fn admits(&self, e: &EventSummary) -> bool {
        let failed_at = e.last_at_ms.unwrap_or(e.received_at_ms);
        self.since.is_none_or(|t| failed_at >= t)
            && self.until.is_none_or(|t| failed_at < t)
            && self
                .event_type
                .as_ref()
                .is_none_or(|f| e.event_type.as_deref().is_some_and(|t| f.admits(t)))
            && self.last_result.as_deref().is_none_or(|r| {
                e.last_result.as_deref() == Some(r)
                    || e.last_status.is_some_and(|s| s.to_string() == r)
            })
    }
}

/// `POST /events/<route>/retry` with any of [`FILTERS`].
pub(super) async fn retry(
    q: &Queues<'_>,
    params: &HashMap<String, String>,
) -> Result<AdminAnswer, StoreError> {
    let sel = match Selection::of(params) {
        Ok(s) => s,
        Err(why) => return Ok(AdminAnswer::bad_request(why)),
    };
    let store = &q.state.store;
    let mut matched: Vec<EventSummary> = Vec::new();
    let mut more = false;
    let mut by_destination: Vec<(String, Vec<String>)> = Vec::new();
    for d in &q.destinations {
        let queue = q.routing.queue(q.route, d);
        let mut chosen: Vec<EventSummary> = Vec::new();
        for &state in &sel.states {
            let listed = store.list(&queue, Some(state), BOUND).await?;
            more |= listed.len() >= BOUND;
            chosen.extend(listed.into_iter().filter(|e| sel.admits(e)));
        }
        // Oldest first: each key's events go back into its line in the order they
        // arrived.
        chosen.sort_by_key(|e| e.received_at_ms);
        by_destination.push((
            d.clone(),
            chosen.iter().map(|e| e.event_id.clone()).collect(),
        ));
        matched.extend(chosen.into_iter().map(|mut e| {
            e.destination = q.named.then(|| d.clone());
            e
        }));
    }
    matched.sort_by_key(|e| e.received_at_ms);
    let count = u64::try_from(matched.len()).unwrap_or(u64::MAX);
    let retried = if sel.plan {
        None
    } else {
        let mut n = 0;
        for (d, ids) in by_destination {
            if ids.is_empty() {
                continue;
            }
            let queue = q.routing.queue(q.route, &d);
            n += store.retry(&queue, &Target::Some(ids)).await?;
        }
        tracing::info!(
            route = q.route,
            matched = count,
            retried = n,
            "queue: operator bulk retry"
        );
        q.state.wake.notify_one();
        Some(n)
    };
    matched.truncate(SAMPLE);
    Ok(AdminAnswer::ok(&BulkRetry {
        route: q.route.to_owned(),
        plan: sel.plan,
        count,
        retried,
        more,
        sample: matched,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(event_type: &str, last: Option<(&str, u16, u64)>) -> EventSummary {
        EventSummary {
            destination: None,
            event_id: "e".into(),
            event_type: Some(event_type.into()),
            state: State::Dead,
            attempts: 1,
            received_at_ms: 1_000,
            next_at_ms: None,
            last_result: last.map(|l| l.0.to_owned()),
            last_status: last.map(|l| l.1),
            last_at_ms: last.map(|l| l.2),
        }
    }

    fn params(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn filters_select_by_when_it_failed_its_type_and_its_last_result() {
        let sel = Selection::of(&params(&[
            ("since", "5000"),
            ("until", "2026-01-01T00:00:00Z"),
            ("event_type", "invoice.*"),
            ("last_result", "500"),
        ]))
        .expect("valid");
        assert_eq!(sel.states, vec![State::Dead, State::Retrying]);
        assert!(sel.admits(&summary("invoice.paid", Some(("http_5xx", 500, 6_000)))));
        assert!(!sel.admits(&summary("invoice.paid", Some(("http_5xx", 503, 6_000)))));
        assert!(!sel.admits(&summary("customer.created", Some(("http_5xx", 500, 6_000)))));
        // Failed before `since`; never tried (its arrival counts).
        assert!(!sel.admits(&summary("invoice.paid", Some(("http_5xx", 500, 4_000)))));
        assert!(!sel.admits(&summary("invoice.paid", None)));
        let by_name = Selection::of(&params(&[("last_result", "timeout")])).expect("valid");
        assert!(by_name.admits(&summary("x", Some(("timeout", 0, 1)))));
        for bad in [("state", "queued"), ("since", "noon"), ("plan", "maybe")] {
            assert!(Selection::of(&params(&[bad])).is_err(), "{bad:?}");
        }
    }
}
