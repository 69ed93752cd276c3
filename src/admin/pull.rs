//! A pull destination's endpoints (`pull = true`): its consumers lease its events
//! instead of the workers pushing them (`hookgate listen` is one such consumer).
//!
//! - `POST /pull/<route>/<destination>?max=N&wait=DURATION` — leases up to `N` (1–100,
//!   10 by default) due events, waiting up to `wait` (at most 60 s) when none is due;
//! - `POST /pull/<route>/<destination>/ack` `{"leases": […]}` — delivered;
//! - `POST /pull/<route>/<destination>/nack` `{"leases": […], "retry_in": "30s"}` — a
//!   failed attempt (the destination's retry schedule and dead letters apply);
//! - `POST /pull/<route>/<destination>/renew` `{"leases": […]}` — the lease again;
//! - `POST /pull/<route>/<destination>/release` `{"leases": […]}` — given back unsent,
//!   due again at once and no attempt counted (a consumer that stops: `hookgate
//!   listen` on Ctrl-C).
//!
//! Authorized by an admin token with role `operate`, or by the destination's own
//! `pull.token`, which grants these endpoints of that destination and nothing else. A lease is the
//! store's (as a worker's): it runs out after the destination's `lease` and the event
//! is due again, for any consumer; only the first event of a key's line is ever due,
//! so a key's next event is not leased while one of its events is open. A lease given
//! as a token is opaque: the event's ID and the store's lease, encoded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde::{Deserialize, Serialize};

use super::AdminContext;
use super::exchange::{AdminAnswer, AdminRequest};
use crate::config::{Destination, PullTarget, Route, Target};
use crate::delivery::destination::message::Message;
use crate::store::{
    Attempt, AttemptResult, Finish, Leased, QueueRef, QueueStore as _, StoreError, StoredEvent,
};

/// Events one lease call takes at most.
const MAX: usize = 100;
/// The longest `wait`.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How often a waiting lease call looks again.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// A request body's size at most (a list of leases).
pub(super) const MAX_BODY: usize = 1 << 20;

/// Each pull destination's consumers and when each last leased (for `/overview`):
/// at most [`CONSUMERS`] per destination, the oldest forgotten.
#[derive(Debug, Default)]
pub(crate) struct Consumers(Mutex<HashMap<String, BTreeMap<String, u64>>>);

/// Consumers remembered per destination.
const CONSUMERS: usize = 32;

impl Consumers {
    fn saw(&self, queue: &str, consumer: &str, now_ms: u64) {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = all.entry(queue.to_owned()).or_default();
        seen.insert(consumer.to_owned(), now_ms);
        if seen.len() > CONSUMERS
            && let Some(oldest) = seen.iter().min_by_key(|(_, t)| **t).map(|(c, _)| c.clone())
        {
            seen.remove(&oldest);
        }
    }

    /// A destination's consumers and when each last leased, most recent first.
    pub(crate) fn of(&self, queue: &str) -> Vec<(String, u64)> {
        let all = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<(String, u64)> = all
            .get(queue)
            .map(|m| m.iter().map(|(c, t)| (c.clone(), *t)).collect())
            .unwrap_or_default();
        out.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
        out
    }
}

/// A leased event, as a consumer gets it.
#[derive(Debug, Serialize, Deserialize)]
pub struct PulledEvent {
    pub event_id: String,
    pub event_type: Option<String>,
    /// The headers hookgate would forward (names in lower case).
    pub headers: BTreeMap<String, String>,
    /// The body as received, base64.
    pub body: String,
    /// Attempts made before this lease.
    pub attempts: u32,
    /// The lease, to ack, nack or renew.
    pub lease: String,
    /// RFC 3339.
    pub lease_until: String,
}

/// `POST /pull/<route>/<destination>`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pulled {
    pub route: String,
    pub destination: String,
    pub events: Vec<PulledEvent>,
}

/// What `ack`, `nack` and `renew` did.
#[derive(Debug, Serialize, Deserialize)]
pub struct LeasesActed {
    /// Leases acted on.
    pub done: u64,
    /// Leases that were lost (ran out and the event went to another consumer, or it
    /// was purged): nothing was changed for them.
    pub lost: Vec<String>,
    /// `renew`: until when the renewed leases hold (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LeasesBody {
    leases: Vec<String>,
    #[serde(default)]
    retry_in: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct LeaseToken {
    /// The event's ID.
    e: String,
    /// The store's lease.
    l: String,
}

fn encode_lease(event_id: &str, lease: &str) -> String {
    let json = serde_json::to_vec(&LeaseToken {
        e: event_id.to_owned(),
        l: lease.to_owned(),
    })
    .unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode_lease(token: &str) -> Option<LeaseToken> {
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim())
        .ok()?;
    serde_json::from_slice(&json).ok()
}

/// The route, destination and pull settings `/pull/<route>/<destination>` names.
fn named<'a>(
    routing: &'a crate::state::Routing,
    req: &AdminRequest,
) -> Option<(
    &'a std::sync::Arc<Route>,
    &'a std::sync::Arc<Destination>,
    &'a PullTarget,
)> {
    let route = routing.route(req.args.first()?)?;
    let dest = route.destination(req.args.get(1)?)?;
    match &dest.target {
        Target::Pull(p) => Some((route, dest, p)),
        _ => None,
    }
}

/// Whether the request may use this destination's endpoints: the destination's own
/// token, or an admin token with role `operate` (a `read` one gets 403); on a
/// listener without admin tokens, anyone, unless the destination has a token.
fn authorized(
    state: &AdminContext,
    req: &AdminRequest,
    pull: &PullTarget,
    presented: Option<&[u8]>,
) -> Result<(), AdminAnswer> {
    let given = presented.unwrap_or_default();
    if pull
        .token
        .as_ref()
        .is_some_and(|t| !given.is_empty() && crate::provider::mac::ct_eq(given, t.expose()))
    {
        return Ok(());
    }
    let access = state.access.load();
    if access.is_open() {
        // No admin token: the listener is open, but a destination with a token of its
        // own wants it.
        return match pull.token {
            Some(_) => Err(AdminAnswer::Unauthorized),
            None => Ok(()),
        };
    }
    match access.identify(presented) {
        Some(c) if c.role == crate::config::AdminRole::Operate => Ok(()),
        Some(c) => {
            state.audit.denied(&c, req);
            Err(super::forbidden(&c, req))
        }
        None => Err(AdminAnswer::Unauthorized),
    }
}

/// `/pull/<route>/<destination>[/…]`. `bearer`: the `Authorization: Bearer` value.
pub(super) async fn answer(
    state: &AdminContext,
    req: &AdminRequest,
    bearer: Option<&[u8]>,
    body: Bytes,
    consumer: &str,
) -> AdminAnswer {
    let routing = state.routing();
    let Some((route, dest, pull)) = named(&routing, req) else {
        // Said only to whom may know the routes: anyone else learns nothing.
        return if state.access.load().identify(bearer).is_some() {
            AdminAnswer::not_found(
                "no pull destination of that name: /pull/<route>/<destination> names a destination with pull = true",
            )
        } else {
            AdminAnswer::Unauthorized
        };
    };
    if let Err(refused) = authorized(state, req, pull, bearer) {
        return refused;
    }
    if req.method != Method::POST {
        return AdminAnswer::not_found("use POST /pull/<route>/<destination>[/ack|nack|renew]");
    }
    let q = routing.queue(&route.name, &dest.name);
    let action = req.args.get(2).map(String::as_str);
    let result = match action {
        None if req.args.len() == 2 => lease(state, &q, route, dest, pull, req, consumer).await,
        Some(a @ ("ack" | "nack" | "renew" | "release")) if req.args.len() == 3 => {
            let parsed: LeasesBody = match serde_json::from_slice(&body) {
                Ok(b) => b,
                Err(e) => {
                    return AdminAnswer::bad_request(format!(
                        "the body: {{\"leases\": [\"<lease>\", …]}}: {e}"
                    ));
                }
            };
            act(state, &q, dest, pull, a, parsed).await
        }
        _ => {
            return AdminAnswer::not_found(
                "use POST /pull/<route>/<destination>[/ack|nack|renew|release]",
            );
        }
    };
    result.unwrap_or_else(|e| super::exchange::unavailable(&e))
}

/// Leases up to `max` due events, waiting up to `wait` for one.
async fn lease(
    state: &AdminContext,
    q: &QueueRef<'_>,
    route: &Route,
    dest: &Destination,
    pull: &PullTarget,
    req: &AdminRequest,
    consumer: &str,
) -> Result<AdminAnswer, StoreError> {
    let max = match req.query.get("max").map(|m| m.parse::<usize>()) {
        None => 10,
        Some(Ok(n)) if (1..=MAX).contains(&n) => n,
        Some(_) => return Ok(AdminAnswer::bad_request(format!("max: 1 to {MAX}"))),
    };
    let wait = match req.query.get("wait").filter(|w| !w.is_empty()) {
        None => Duration::ZERO,
        Some(w) => match humantime::parse_duration(w) {
            Ok(d) if d <= MAX_WAIT => d,
            _ => {
                return Ok(AdminAnswer::bad_request(
                    "wait: a duration of at most 60s (\"30s\")",
                ));
            }
        },
    };
    let now = crate::time::now_ms();
    state.pulls.saw(&q.name(), consumer, now);
    let deadline = tokio::time::Instant::now() + wait;
    let batch = loop {
        let batch = state.store.take_due(q, max, pull.lease).await?;
        if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
            break batch;
        }
        tokio::time::sleep(LOOK_EVERY.min(deadline - tokio::time::Instant::now())).await;
    };
    let until = crate::admin::api::rfc3339(
        crate::time::now_ms().saturating_add(u64::try_from(pull.lease.as_millis()).unwrap_or(0)),
    );
    let events = batch
        .into_iter()
        .map(|l| {
            let m = Message::of(state.clock, route, dest, &l.event);
            PulledEvent {
                event_id: l.event.envelope.event_id.clone(),
                event_type: l.event.envelope.event_type.clone(),
                headers: m.headers.into_iter().collect(),
                body: base64::engine::general_purpose::STANDARD.encode(&l.event.body),
                attempts: l.status.attempts,
                lease: encode_lease(&l.event.envelope.event_id, &l.lease),
                lease_until: until.clone(),
            }
        })
        .collect();
    Ok(AdminAnswer::ok(&Pulled {
        route: route.name.clone(),
        destination: dest.name.clone(),
        events,
    }))
}

/// `ack`, `nack` or `renew` of each lease.
async fn act(
    state: &AdminContext,
    q: &QueueRef<'_>,
    dest: &Destination,
    pull: &PullTarget,
    action: &str,
    body: LeasesBody,
) -> Result<AdminAnswer, StoreError> {
    let retry_in = match body.retry_in.as_deref().map(humantime::parse_duration) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return Ok(AdminAnswer::bad_request("retry_in: a duration (\"30s\")")),
    };
    let (mut done, mut lost) = (0, Vec::new());
    for token in &body.leases {
        let Some(t) = decode_lease(token) else {
            return Ok(AdminAnswer::bad_request(format!(
                "{token:?} is not a lease this gateway gave"
            )));
        };
        let Some((envelope, status)) = state.store.show(q, &t.e).await? else {
            lost.push(token.clone());
            continue;
        };
        let leased = Leased {
            event: StoredEvent {
                envelope,
                body: Bytes::new(),
            },
            status,
            lease: t.l,
        };
        let kept = match action {
            "renew" => state.store.renew(q, &leased, pull.lease).await?,
            "release" => state.store.give_back(q, &leased).await?,
            _ => {
                let end = ending(dest, &leased, action == "ack", retry_in);
                state
                    .store
                    .finish(q, &leased, &end, state.routing().store_cfg.dedup_ttl)
                    .await?
            }
        };
        if kept {
            done += 1;
        } else {
            lost.push(token.clone());
        }
    }

    let lease_until = (action == "renew").then(|| {
        crate::admin::api::rfc3339(
            crate::time::now_ms()
                .saturating_add(u64::try_from(pull.lease.as_millis()).unwrap_or(0)),
        )
    });
    Ok(AdminAnswer::ok(&LeasesActed {
        done,
        lost,
        lease_until,
    }))
}

/// How a consumer's answer ends the attempt: delivered, or a failed attempt on the
/// destination's schedule (`retry_in` instead of its backoff), dead once it is spent.
fn ending(
    dest: &Destination,
    leased: &Leased,
    delivered: bool,
    retry_in: Option<Duration>,
) -> Finish {
    let now = crate::time::now_ms();
    let attempt = Attempt {
        at_ms: now,
        status: None,
        result: if delivered {
            AttemptResult::Delivered
        } else {
            AttemptResult::Refused
        },
        error: (!delivered).then(|| "the consumer gave it back (nack)".to_owned()),
        duration_ms: 0,
        kind: Some("pull".into()),
        receipt: None,
    };
    if delivered {
        return Finish::Delivered(attempt);
    }
    let jitter: f64 = rand::random();
    match dest.retry.after_failure(
        &leased.status,
        leased.event.envelope.received_at_ms,
        now,
        retry_in,
        jitter,
        |_, _| 0,
    ) {
        Ok(at) => Finish::Retry(
            attempt,
            retry_in.map_or(at, |d| {
                now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(0))
            }),
        ),
        Err(why) => Finish::Dead(attempt, why),
    }
}
