//! One look at the gateway: for each subject an incident may be about, whether it is
//! firing, clear, or (left out) this replica cannot say.
//!
//! | kind | firing while | clear when |
//! |---|---|---|
//! | `destination_failing` | this replica's last [`FAILING_AFTER`] attempts there failed | its last attempt there was delivered |
//! | `breaker_open` | the destination's breaker holds it | it does not |
//! | `dead_letter` | the destination holds dead events | it holds none |
//! | `provider_silent` | the route's last verified delivery (any replica's) is older than `silence` | one arrived since |
//! | `refusals` | the route's refusals of the rule's outcome (every replica's) within `within` are more than `over` | they are not |
//! | `store_trouble` | the store does not answer, or a write failed, or it refused new events for want of room | it answered and nothing failed for [`STORE_QUIET`] |

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::{AlertsContext, Finding, Seen, lock};
use crate::config::Delivery;
use crate::config::alerts::IncidentKind;
use crate::delivery::control;
use crate::store::{DedupStore as _, QueueStore as _, cells};

/// Consecutive failed attempts that make a destination failing.
pub const FAILING_AFTER: u32 = 3;
/// How long the store answers without a failure before `store_trouble` resolves.
const STORE_QUIET: Duration = Duration::from_secs(10);
/// The refusals' counts are kept per this many milliseconds of time...
const BUCKET_MS: u64 = 10_000;
/// ...for an hour (the longest `within`) and a bucket.
const KEPT_BUCKETS: u64 = 361;
/// How long one look waits for the store per question.
const ASK: Duration = Duration::from_secs(2);

/// What the watcher remembers between looks.
#[derive(Debug)]
pub(crate) struct Local {
    started_ms: u64,
    /// Per route: its verified deliveries counted so far, and when one last came.
    verified: HashMap<String, (u64, u64)>,
    /// Per route and outcome: refusals counted so far.
    refused: HashMap<(String, String), u64>,
    write_failures: u64,
    refused_full: u64,
    /// Since when the store answers without failures.
    store_quiet_since: Option<u64>,
}

impl Local {
    pub(crate) fn new(now_ms: u64) -> Self {
        Self {
            started_ms: now_ms,
            verified: HashMap::new(),
            refused: HashMap::new(),
            write_failures: 0,
            refused_full: 0,
            store_quiet_since: None,
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Everything one look finds.
pub(super) async fn look(ctx: &AlertsContext, now: u64) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(f) = store(ctx, now).await {
        out.push(f);
    }
    let store_ok = lock(&ctx.trouble).is_none();
    if store_ok {
        destinations(ctx, now, &mut out).await;
        routes(ctx, now, &mut out).await;
    }
    out
}

fn finding(kind: IncidentKind, route: &str, destination: Option<&str>, seen: Seen) -> Finding {
    Finding {
        kind,
        route: Some(route.to_owned()),
        destination: destination.map(str::to_owned),
        seen,
        at_ms: u64::MAX,
    }
}

/// `destination_failing`, `breaker_open`, `dead_letter`: each queue destination.
async fn destinations(ctx: &AlertsContext, now: u64, out: &mut Vec<Finding>) {
    if !ctx.store.keeps_queues() {
        return;
    }
    let routing = ctx.routing();
    for route in routing.routes.values() {
        if route.delivery != Delivery::Queue {
            continue;
        }
        for dest in &route.destinations {
            let q = routing.queue(&route.name, &dest.name);
            let name = q.name();
            let (r, d) = (route.name.as_str(), Some(dest.name.as_str()));
            if let Some(streak) = ctx.controls.streak(&q) {
                let (failed, last) = (streak.failed, streak.last);
                // Between one and FAILING_AFTER failures: no opinion yet.
                let seen = match failed {
                    0 => Some(Seen::Clear),
                    n if n >= FAILING_AFTER => Some(Seen::Firing(format!(
                        "{name}: {FAILING_AFTER} or more delivery attempts in a row failed (the last: {last}); its events are kept and retried. See `hookgate events list --route {r} --state retrying`, fix the receiver"
                    ))),
                    _ => None,
                };
                if let Some(seen) = seen {
                    // Said as of this replica's last attempt: an older word than the
                    // incident's last change is not heard (settle).
                    let mut f = finding(IncidentKind::DestinationFailing, r, d, seen);
                    f.at_ms = streak.at_ms;
                    out.push(f);
                }
            }
            if let Ok(Ok(c)) = tokio::time::timeout(ASK, control::load(&ctx.store, &q, now)).await {
                let seen = if c.breaker_open(now) {
                    Seen::Firing(format!(
                        "{name}: its breaker paused it after consecutive failed attempts; one event is tried every probe interval, and a delivery resumes it (`hookgate events resume --route {r}` resumes it now). Nothing is dropped meanwhile"
                    ))
                } else {
                    Seen::Clear
                };
                out.push(finding(IncidentKind::BreakerOpen, r, d, seen));
            }
            if let Ok(Ok(depth)) = tokio::time::timeout(ASK, ctx.store.depth(&q)).await {
                let seen = if depth.dead > 0 {
                    Seen::Firing(format!(
                        "{name}: {} dead event(s) wait for an operator: `hookgate events list --route {r} --state dead`, then `hookgate events retry --route {r} --all-dead` once the receiver is fixed",
                        depth.dead
                    ))
                } else {
                    Seen::Clear
                };
                out.push(finding(IncidentKind::DeadLetter, r, d, seen));
            }
        }
    }
}

/// `provider_silent` and `refusals`: each route that sets `silence` or `refusals`.
async fn routes(ctx: &AlertsContext, now: u64, out: &mut Vec<Finding>) {
    let routing = ctx.routing();
    let prefix = routing.store_cfg.key_prefix.clone();
    for route in routing.routes.values() {
        let r = route.name.as_str();
        let counted = ctx.metrics.route(r);
        if let Some(silence) = route.silence {
            let verified = counted.verified();
            let came = {
                let mut local = lock(&ctx.local);
                let started = local.started_ms;
                let e = local.verified.entry(r.to_owned()).or_insert((0, started));
                if verified > e.0 {
                    *e = (verified, now);
                    true
                } else {
                    false
                }
            };
            let cell = cells::name(&prefix, &format!("seen:{r}"));
            let shared = if came {
                cells::update(&ctx.store, &cell, |old: Option<u64>| {
                    (Some(old.unwrap_or(0).max(now)), ())
                })
                .await
                .map(|(_, v)| v)
            } else {
                cells::read(&ctx.store, &cell).await
            };
            let Ok(shared) = shared else { continue };
            let local_last = lock(&ctx.local).verified.get(r).map_or(0, |e| e.1);
            let last = shared.unwrap_or(0).max(local_last);
            eprintln!(
                "LOOK {r} verified={verified} came={came} shared={shared:?} local_last={local_last} now={now}"
            );
            let seen = if now.saturating_sub(last) > ms(silence) {
                Seen::Firing(format!(
                    "route {r}: no verified delivery for longer than {} (silence): check the provider's webhook settings and its delivery log, and that its requests reach this route (`hookgate deliveries list --route {r}`)",
                    humantime::format_duration(silence)
                ))
            } else {
                Seen::Clear
            };
            out.push(finding(IncidentKind::ProviderSilent, r, None, seen));
        }
        if let Some(rule) = &route.refusals {
            let count = counted.outcome_count(&rule.outcome);
            let delta = {
                let mut local = lock(&ctx.local);
                let e = local
                    .refused
                    .entry((r.to_owned(), rule.outcome.clone()))
                    .or_insert(0);
                let d = count.saturating_sub(*e);
                *e = count;
                d
            };
            // Counts per BUCKET of time, every replica's added up, for an hour.
            let cell = cells::name(&prefix, &format!("refusals:{r}:{}", rule.outcome));
            let bucket = now / BUCKET_MS;
            let buckets = if delta > 0 {
                cells::update(&ctx.store, &cell, |old: Option<BTreeMap<u64, u64>>| {
                    let mut b = old.unwrap_or_default();
                    *b.entry(bucket).or_insert(0) += delta;
                    b.retain(|t, _| *t + KEPT_BUCKETS > bucket);
                    (Some(b), ())
                })
                .await
                .map(|(_, v)| v)
            } else {
                cells::read(&ctx.store, &cell).await
            };
            let Ok(buckets) = buckets else { continue };
            let from = now.saturating_sub(ms(rule.within)) / BUCKET_MS;
            let n: u64 = buckets
                .unwrap_or_default()
                .range(from..)
                .map(|(_, n)| n)
                .sum();
            let seen = if n > rule.over {
                let hint = if rule.outcome == "bad_signature" {
                    " — usually the provider's signing secret was rotated: add the new one to the route's secrets (both are tried) and reload"
                } else {
                    ""
                };
                Seen::Firing(format!(
                    "route {r}: {n} deliveries refused as {} within {} (over {}){hint}; see `hookgate deliveries list --route {r} --outcome {}`",
                    rule.outcome,
                    humantime::format_duration(rule.within),
                    rule.over,
                    rule.outcome
                ))
            } else {
                Seen::Clear
            };
            out.push(finding(IncidentKind::Refusals, r, None, seen));
        }
    }
}

/// `store_trouble`: the store answers a ping, and no write failed since the last look.
async fn store(ctx: &AlertsContext, now: u64) -> Option<Finding> {
    let ping = tokio::time::timeout(ASK, ctx.store.ping()).await;
    let (failures, full) = (
        ctx.store_metrics.write_failures.get(),
        ctx.store_metrics.refused_full.get(),
    );
    let mut local = lock(&ctx.local);
    let new_failures = failures.saturating_sub(local.write_failures);
    let new_full = full.saturating_sub(local.refused_full);
    local.write_failures = failures;
    local.refused_full = full;
    let kind = ctx.store.kind();
    let trouble = match ping {
        Err(_) => Some(format!("the {kind} store did not answer within {ASK:?}")),
        Ok(Err(e)) => Some(format!("the {kind} store fails: {e}")),
        Ok(Ok(())) if new_failures > 0 => Some(format!(
            "the {kind} store could not write ({new_failures} failed write(s)): queue deliveries are held until it writes again; check the disk or Redis"
        )),
        Ok(Ok(())) if new_full > 0 => Some(format!(
            "the {kind} store refused {new_full} new event(s) for want of room (store.min_free_space, store.max_records or Redis maxmemory): free space or memory"
        )),
        Ok(Ok(())) => None,
    };
    let seen = match trouble {
        Some(why) => {
            local.store_quiet_since = None;
            Seen::Firing(format!(
                "{why}; new deliveries may be answered 503 (providers retry them)"
            ))
        }
        None => {
            let since = *local.store_quiet_since.get_or_insert(now);
            if now.saturating_sub(since) < ms(STORE_QUIET) {
                return None;
            }
            Seen::Clear
        }
    };
    Some(Finding {
        kind: IncidentKind::StoreTrouble,
        route: None,
        destination: None,
        seen,
        at_ms: now,
    })
}
