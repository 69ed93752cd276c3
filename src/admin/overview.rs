//! `GET /overview`: each route's requests by outcome in the last hour (from the
//! delivery log) and its queues' depth — the inspector's routes page; and
//! `GET /overview/series?route=R&window=1h|1d`: one route's requests by outcome per
//! bucket and its queues' depth over time — the inspector's charts; and
//! `GET /alerts`: the open incidents.
//!
//! The series is bounded whatever is asked: 60 buckets of a minute or 144 of ten
//! minutes (the log's counts, `store/log`), and per destination at most
//! [`MAX_POINTS`] queue samples (the process's ring, `delivery/samples.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::AdminContext;
use super::api::{
    ConsumerView, IncidentView, Incidents, LogOverview, Overview, PauseView, QueueOverview,
    QueueSample, QueueSeries, RouteOverview, Series, SeriesBucket, UnroutedOverview,
};
use super::exchange::AdminAnswer;
use crate::config::{Delivery, Route};
use crate::delivery::samples::{self, Sample};
use crate::store::QueueStore as _;
use crate::store::log::{UNROUTED, Width, minute_of};

/// Queue samples a series answers per destination at most (a day's 2 880 are merged
/// two by two).
pub(crate) const MAX_POINTS: usize = 1_440;

/// `GET /overview`.
pub(super) async fn overview(state: &AdminContext) -> AdminAnswer {
    let routes = state.recorder.route_names();
    let now = crate::time::now_ms();
    let counts = match state
        .recorder
        .log
        .counts(minute_of(now).saturating_sub(59), &routes)
        .await
    {
        Ok(c) => c,
        Err(e) => return super::exchange::unavailable(&e),
    };
    let routing = state.routing();
    let mut configured: Vec<&Arc<Route>> = routing.routes.values().collect();
    configured.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for r in configured {
        let last_hour = counts
            .iter()
            .filter(|((route, _), _)| *route == r.name)
            .map(|((_, outcome), n)| (outcome.clone(), *n))
            .collect();
        let mut queues = Vec::new();
        if r.delivery == Delivery::Queue && state.store.keeps_queues() {
            for d in &r.destinations {
                let q = routing.queue(&r.name, &d.name);
                let found = match state.store.depth(&q).await {
                    Ok(depth) => crate::delivery::control::load(&state.store, &q, now)
                        .await
                        .map(|c| (depth, c)),
                    Err(e) => Err(e),
                };
                match found {
                    Ok((depth, c)) => queues.push(QueueOverview {
                        destination: d.name.clone(),
                        depth: depth.waiting,
                        dead: depth.dead,
                        oldest_undelivered_age_ms: depth
                            .oldest_received_ms
                            .map(|t| now.saturating_sub(t)),
                        paused: c.paused_at(now).map(PauseView::of),
                        consumers: state
                            .pulls
                            .of(&q.name())
                            .into_iter()
                            .map(|(name, at)| ConsumerView {
                                name,
                                last_lease: super::api::rfc3339(at),
                            })
                            .collect(),
                    }),
                    Err(e) => return super::exchange::unavailable(&e),
                }
            }
        }
        let destinations = super::probes::reaches(state, &routing, true)
            .into_iter()
            .filter(|d| d.route == r.name)
            .map(|mut d| {
                d.paused = queues
                    .iter()
                    .find(|q| q.destination == d.destination)
                    .and_then(|q| q.paused.clone());
                d
            })
            .collect();
        out.push(RouteOverview {
            route: r.name.clone(),
            path: r.path.clone(),
            provider: r.verifier.preset().name().to_owned(),
            delivery: r.delivery,
            last_hour,
            queues,
            destinations,
        });
    }
    AdminAnswer::ok(&Overview {
        routes: out,
        log: LogOverview {
            enabled: state.recorder.cfg.enabled,
        },
        unrouted: UnroutedOverview {
            last_hour: counts
                .iter()
                .filter(|((route, _), _)| route == UNROUTED)
                .map(|(_, n)| *n)
                .sum(),
        },
    })
}

/// `GET /overview/series?route=R&window=1h|1d`.
pub(super) async fn series(state: &AdminContext, query: &HashMap<String, String>) -> AdminAnswer {
    let Some(name) = query.get("route").filter(|r| !r.is_empty()) else {
        return AdminAnswer::bad_request(
            "route: name a route (GET /overview/series?route=R&window=1h|1d)",
        );
    };
    let (window, width, buckets) = match query.get("window").map_or("1h", String::as_str) {
        "1h" => ("1h", Width::Minute, 60),
        "1d" => ("1d", Width::TenMinutes, 144),
        other => {
            return AdminAnswer::bad_request(format!("window={other:?}: use 1h or 1d"));
        }
    };
    let routing = state.routing();
    let Some(route) = routing.route(name).cloned() else {
        return AdminAnswer::not_found(format!("no route named {name:?}"));
    };
    let now = crate::time::now_ms();
    let last = width.bucket_of(minute_of(now));
    let first = last + 1 - buckets;
    let routes = state.recorder.route_names();
    let counted = match state
        .recorder
        .log
        .buckets(&route.name, width, first, &routes)
        .await
    {
        Ok(c) => c,
        Err(e) => return super::exchange::unavailable(&e),
    };
    let bucket_ms = width.minutes() * 60_000;
    let mut by_bucket: BTreeMap<u64, BTreeMap<String, u64>> =
        (first..=last).map(|b| (b, BTreeMap::new())).collect();
    for ((b, outcome), n) in counted {
        if let Some(c) = by_bucket.get_mut(&b) {
            *c.entry(outcome).or_default() += n;
        }
    }
    let from_ms = first * bucket_ms;
    let mut queues = Vec::new();
    if route.delivery == Delivery::Queue && state.store.keeps_queues() {
        for d in &route.destinations {
            let mut kept = state.queue_samples.since(&route.name, &d.name, from_ms);
            if let Some(now) = samples::read(&routing, &state.store, &route.name, &d.name).await {
                kept.push(now);
            }
            queues.push(QueueSeries {
                destination: d.name.clone(),
                samples: at_most(&kept, MAX_POINTS),
            });
        }
    }
    AdminAnswer::ok(&Series {
        route: route.name.clone(),
        window: window.to_owned(),
        bucket_ms,
        from_ms,
        to_ms: (last + 1) * bucket_ms,
        buckets: by_bucket
            .into_iter()
            .map(|(b, counts)| SeriesBucket {
                at_ms: b * bucket_ms,
                counts,
            })
            .collect(),
        queues,
        sample_every_ms: u64::try_from(samples::EVERY.as_millis()).unwrap_or(u64::MAX),
    })
}

/// At most `max` samples: consecutive ones merged (each the largest of its group,
/// dated by the group's last), so a spike is never smoothed away.
fn at_most(samples: &[Sample], max: usize) -> Vec<QueueSample> {
    let group = samples.len().div_ceil(max.max(1)).max(1);
    samples
        .chunks(group)
        .filter_map(|g| {
            let last = g.last()?;
            Some(QueueSample {
                at_ms: last.at_ms,
                waiting: g.iter().map(|s| s.waiting).max().unwrap_or(0),
                dead: g.iter().map(|s| s.dead).max().unwrap_or(0),
                oldest_age_ms: g.iter().map(|s| s.oldest_age_ms).max().unwrap_or(0),
            })
        })
        .collect()
}

/// `GET /alerts`: the open incidents, oldest first.
pub(super) async fn alerts(state: &AdminContext) -> AdminAnswer {
    match state.alerts.open().await {
        Ok(open) => AdminAnswer::ok(&Incidents {
            incidents: open.iter().map(IncidentView::of).collect(),
        }),
        Err(e) => super::exchange::unavailable(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_days_samples_are_merged_to_the_bound_keeping_each_peak() {
        let day: Vec<Sample> = (0..samples::KEPT as u64 + 1)
            .map(|i| Sample {
                at_ms: i,
                waiting: u64::from(i == 1001),
                dead: 0,
                oldest_age_ms: i,
            })
            .collect();
        let merged = at_most(&day, MAX_POINTS);
        assert!(merged.len() <= MAX_POINTS, "{}", merged.len());
        assert_eq!(merged.iter().map(|s| s.waiting).sum::<u64>(), 1);
        assert_eq!(merged.last().map(|s| s.at_ms), Some(samples::KEPT as u64));
        let hour = &day[..121];
        assert_eq!(
            at_most(hour, MAX_POINTS).len(),
            121,
            "nothing merged under the bound"
        );
        assert!(at_most(&[], MAX_POINTS).is_empty());
    }
}
