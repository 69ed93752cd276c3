//! Notifications: written for a target (`format = "slack"` or `"json"`), signed with
//! Standard Webhooks when it has a `secret`, and sent through the store's durable
//! queue: one queue per `[[alerts]]` section (route `#alerts`, which no route's name
//! can be), each notification an event whose ID names the incident and its state — so
//! a notification two replicas decide is stored once, and one that fails is retried
//! on [`RETRY`] until it is delivered (or, after a day, dead: `hookgate_queue_*` do
//! not show it, the log says so). The memory store keeps no queue: there each is sent
//! directly, tried [`DIRECT_TRIES`] times.

use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{AlertsContext, Pending};
use crate::admin::api::rfc3339;
use crate::config::alerts::{AlertFormat, AlertTarget};
use crate::queue::RetryPolicy;
use crate::store::{
    Attempt, AttemptResult, Envelope, Finish, QueueRef, QueueStore as _, StoreError, StoredEvent,
};

/// How long one notification's request may take.
pub(super) const TIMEOUT: Duration = Duration::from_secs(10);
/// The queues' route: `#` is no route name's.
pub const ALERTS_ROUTE: &str = "#alerts";
/// A queued notification's schedule.
const RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 100,
    initial: Duration::from_secs(2),
    max_delay: Duration::from_secs(600),
    max_age: Duration::from_secs(24 * 3600),
};
/// How long a notification's ID is remembered (a copy within it is stored once).
const DEDUP: Duration = Duration::from_secs(7 * 24 * 3600);
/// Notifications taken per target per round.
const BATCH: usize = 16;
/// Tries of a notification sent directly (memory store, `store_trouble`).
const DIRECT_TRIES: u32 = 8;

/// The notification's ID: its incident and state (`breaker_open.open.<opened>.<route>.<destination>`).
fn event_id(p: &Pending) -> String {
    let i = &p.incident;
    format!(
        "{}.{}.{}.{}.{}",
        i.kind,
        p.state,
        i.opened_at_ms,
        i.route.as_deref().unwrap_or("-"),
        i.destination.as_deref().unwrap_or("-")
    )
}

/// The body a target gets.
fn body(target: &AlertTarget, p: &Pending) -> Vec<u8> {
    let i = &p.incident;
    let subject = match (&i.route, &i.destination) {
        (Some(r), Some(d)) if !crate::config::is_own_destination(r, d) => format!("{r}/{d}"),
        (Some(r), _) => r.clone(),
        (None, _) => "the store".to_owned(),
    };
    let value = match target.format {
        AlertFormat::Json => json!({
            "kind": i.kind,
            "state": p.state,
            "route": i.route,
            "destination": i.destination,
            "opened_at": rfc3339(i.opened_at_ms),
            "resolved_at": p.resolved_at_ms.map(rfc3339),
            "message": i.message,
            "id": event_id(p),
        }),
        AlertFormat::Slack => {
            let text = if p.state == "open" {
                format!(
                    ":rotating_light: hookgate: {} on {subject}. {}",
                    i.kind, i.message
                )
            } else {
                let open_for = p
                    .resolved_at_ms
                    .unwrap_or(i.opened_at_ms)
                    .saturating_sub(i.opened_at_ms);
                format!(
                    ":white_check_mark: hookgate: resolved: {} on {subject} (open {}).",
                    i.kind,
                    humantime::format_duration(Duration::from_secs(open_for / 1000))
                )
            };
            json!({ "text": text })
        }
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

/// The targets a notification goes to.
fn targets_of<'a>(
    targets: &'a [AlertTarget],
    p: &Pending,
) -> impl Iterator<Item = &'a AlertTarget> {
    let kind = crate::config::alerts::IncidentKind::parse(&p.incident.kind);
    targets
        .iter()
        .filter(move |t| kind.is_some_and(|k| t.on.contains(&k)))
}

fn queue<'a>(prefix: &'a str, target: &'a AlertTarget) -> QueueRef<'a> {
    QueueRef::new(prefix, ALERTS_ROUTE, &target.name)
}

/// Puts each notification of the outbox into its targets' queues (a copy already
/// there is a duplicate, not a second notification); on the memory store, sends them.
pub(super) async fn queue_outbox(
    ctx: &AlertsContext,
    outbox: &[Pending],
) -> Result<(), StoreError> {
    let routing = ctx.routing();
    for p in outbox {
        tracing::warn!(kind = %p.incident.kind, state = %p.state, route = p.incident.route.as_deref().unwrap_or("-"), destination = p.incident.destination.as_deref().unwrap_or("-"), message = %p.incident.message, "alerts: incident {}", p.state);
        if !ctx.store.keeps_queues() {
            send_direct(ctx, p.clone());
            continue;
        }
        for target in targets_of(&routing.alerts, p) {
            let q = queue(&routing.store_cfg.key_prefix, target);
            let now = crate::time::now_ms();
            let body = body(target, p);
            let event = StoredEvent {
                envelope: Envelope {
                    event_id: event_id(p),
                    event_type: Some(p.incident.kind.clone()),
                    fingerprint: hex::encode(sha2_short(&body)),
                    method: "POST".into(),
                    headers: Vec::new(),
                    query: None,
                    peer: "hookgate".into(),
                    received_at_ms: now,
                    trace: None,
                },
                body: Bytes::from(body),
            };
            ctx.store.enqueue(&q, &event, DEDUP).await?;
        }
    }
    Ok(())
}

fn sha2_short(body: &[u8]) -> [u8; 8] {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(body);
    let mut out = [0; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// Sends what is due in every target's queue.
pub(super) async fn send_due(ctx: &AlertsContext, stop: &CancellationToken) {
    if !ctx.store.keeps_queues() {
        return;
    }
    let routing = ctx.routing();
    for target in routing.alerts.iter() {
        let q = queue(&routing.store_cfg.key_prefix, target);
        let Ok(batch) = ctx.store.take_due(&q, BATCH, TIMEOUT * 3).await else {
            continue;
        };
        for leased in batch {
            if stop.is_cancelled() {
                // Not sent: due again at once for the next start.
                let _ = ctx.store.give_back(&q, &leased).await;
                continue;
            }
            let id = leased.event.envelope.event_id.clone();
            let attempt = send(&ctx.client, target, &id, leased.event.body.clone()).await;
            let end = if attempt.result == AttemptResult::Delivered {
                Finish::Delivered(attempt)
            } else {
                let now = crate::time::now_ms();
                let jitter: f64 = rand::rng().random();
                match RETRY.after_failure(
                    &leased.status,
                    leased.event.envelope.received_at_ms,
                    now,
                    None,
                    jitter,
                    |_, _| 0,
                ) {
                    Ok(at) => {
                        tracing::warn!(alerts = %target.name, notification = %id, result = attempt.result.as_str(), status = attempt.status, "alerts: a notification could not be delivered; it is tried again");
                        Finish::Retry(attempt, at)
                    }
                    Err(why) => {
                        tracing::error!(alerts = %target.name, notification = %id, reason = %why, "alerts: a notification could not be delivered for a day; it is dropped");
                        Finish::Dead(attempt, why)
                    }
                }
            };
            if let Err(e) = ctx.store.finish(&q, &leased, &end, DEDUP).await {
                tracing::warn!(alerts = %target.name, error = %e, "alerts: a notification's attempt could not be recorded; it is tried again after its lease");
            }
        }
    }
}

/// One notification's request.
async fn send(client: &reqwest::Client, target: &AlertTarget, id: &str, body: Bytes) -> Attempt {
    let started = Instant::now();
    let at_ms = crate::time::now_ms();
    let mut req = client
        .post(target.to.clone())
        .header("content-type", "application/json")
        .header("idempotency-key", id);
    if let Some(signer) = &target.signer
        && let Some(headers) = signer.sign(id, crate::time::now_secs(), &body)
    {
        for (name, value) in headers {
            req = req.header(name, value);
        }
    }
    let (result, status, error) = match req.body(body).send().await {
        Ok(r) => {
            let s = r.status();
            let result = if s.is_success() {
                AttemptResult::Delivered
            } else if s.is_client_error() {
                AttemptResult::Http4xx
            } else {
                AttemptResult::Http5xx
            };
            (result, Some(s.as_u16()), None)
        }
        Err(e) => {
            let result = if e.is_timeout() {
                AttemptResult::Timeout
            } else if e.is_connect() {
                AttemptResult::Connect
            } else {
                AttemptResult::Broken
            };
            (result, None, Some(crate::forward::error_chain(&e)))
        }
    };
    Attempt {
        at_ms,
        status,
        result,
        error,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        kind: None,
        receipt: None,
    }
}

/// Sends a notification to its targets now, each tried up to [`DIRECT_TRIES`] times
/// in the background.
pub(super) fn send_direct(ctx: &AlertsContext, p: Pending) {
    let routing = ctx.routing();
    for target in targets_of(&routing.alerts, &p) {
        let (client, target) = (ctx.client.clone(), target.clone());
        let (id, body) = (event_id(&p), Bytes::from(body(&target, &p)));
        tokio::spawn(async move {
            let mut wait = Duration::from_secs(1);
            for _ in 0..DIRECT_TRIES {
                let a = send(&client, &target, &id, body.clone()).await;
                if a.result == AttemptResult::Delivered {
                    return;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(60));
            }
            tracing::error!(alerts = %target.name, notification = %id, "alerts: a notification could not be delivered; it is dropped");
        });
    }
}
