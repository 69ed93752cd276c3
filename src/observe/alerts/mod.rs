//! Alerts for teams without Prometheus: incidents the gateway watches for itself, each
//! sent once when it opens and once when it resolves, to every `[[alerts]]` section
//! whose `on` names its kind (`notify.rs`), and listed by `GET /alerts`.
//!
//! ```text
//! every EVERY:  look (look.rs)      each subject: firing, clear, or no opinion
//!               settle              incidents cell: firing and absent -> opened
//!                                                   clear and present -> resolved
//!                                   each change's notifications join the outbox,
//!                                   in the same compare-and-set
//!               send (notify.rs)    outbox -> each target's queue (an event ID per
//!                                   notification: a copy is a duplicate), then
//!                                   delivered from there: retried, never lost
//! ```
//!
//! The incidents are one cell of the store (`store/cells.rs`), changed by
//! compare-and-set: on Redis every replica looks, and whichever changes the cell first
//! sends; the others find it changed. Kinds a replica sees for itself
//! (`destination_failing`: its own attempts) resolve only where that replica has seen
//! a delivery since; the others have no opinion. `store_trouble` is about the store
//! itself: it is kept in the process and sent directly (a store in trouble can hold
//! neither the incident nor its notification), once per replica.

mod look;
mod notify;

pub use look::FAILING_AFTER;
pub use notify::ALERTS_ROUTE;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::alerts::IncidentKind;
use crate::delivery::control::Controls;
use crate::observe::metrics::Metrics;
use crate::state::Routing;
use crate::store::{Store, StoreError, StoreMetrics, cells};

/// How often the gateway looks for incidents, and sends what is due.
pub const EVERY: Duration = Duration::from_secs(2);

/// An incident, open or just resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// Unix milliseconds.
    pub opened_at_ms: u64,
    /// What is wrong and what to do, in a sentence.
    pub message: String,
}

fn key(kind: &str, route: Option<&str>, destination: Option<&str>) -> String {
    format!(
        "{kind} {} {}",
        route.unwrap_or("-"),
        destination.unwrap_or("-")
    )
}

/// A notification waiting to be put into the targets' queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pending {
    pub incident: Incident,
    /// `open` or `resolved`.
    pub state: String,
    /// Unix milliseconds when it resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at_ms: Option<u64>,
}

/// The incidents cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Book {
    #[serde(default)]
    open: BTreeMap<String, Incident>,
    /// Notifications decided but not yet queued.
    #[serde(default)]
    outbox: Vec<Pending>,
    /// When each subject last resolved (Unix milliseconds; kept a day).
    #[serde(default)]
    resolved: BTreeMap<String, u64>,
}

/// How long a subject's last resolution is remembered.
const RESOLVED_KEPT_MS: u64 = 24 * 3600 * 1000;

/// What a look found about one subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    Firing(String),
    Clear,
}

/// One subject's finding.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub kind: IncidentKind,
    pub route: Option<String>,
    pub destination: Option<String>,
    pub seen: Seen,
    /// As of when (Unix milliseconds; `u64::MAX`: now, from the store every replica
    /// reads). A finding older than the incident's last change is not heard: a replica
    /// whose last attempt failed before the incident resolved does not open it again.
    pub at_ms: u64,
}

/// What the watcher uses of the gateway.
#[derive(Debug)]
pub struct AlertsContext {
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) store_metrics: StoreMetrics,
    pub(crate) controls: Arc<Controls>,
    /// What the watcher remembers between looks.
    pub(crate) local: Mutex<look::Local>,
    /// `store_trouble`, kept here (not in the store it is about).
    pub(crate) trouble: Mutex<Option<Incident>>,
    pub(crate) client: reqwest::Client,
}

impl AlertsContext {
    pub(crate) fn new(
        routing: Arc<ArcSwap<Routing>>,
        store: Store,
        metrics: Arc<Metrics>,
        controls: Arc<Controls>,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(notify::TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            routing,
            store_metrics: store.metrics(),
            store,
            metrics,
            controls,
            local: Mutex::new(look::Local::new(crate::time::now_ms())),
            trouble: Mutex::new(None),
            client,
        })
    }

    fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }

    fn cell(&self) -> String {
        cells::name(&self.routing().store_cfg.key_prefix, "incidents")
    }

    /// The open incidents, oldest first (`GET /alerts`).
    pub async fn open(&self) -> Result<Vec<Incident>, StoreError> {
        let book: Book = cells::read(&self.store, &self.cell())
            .await?
            .unwrap_or_default();
        let mut all: Vec<Incident> = book.open.into_values().collect();
        all.extend(lock(&self.trouble).clone());
        all.sort_by_key(|i| i.opened_at_ms);
        Ok(all)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Looks, settles and sends every [`EVERY`] until `stop`.
pub async fn watch(ctx: Arc<AlertsContext>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        let now = crate::time::now_ms();
        let findings = look::look(&ctx, now).await;
        if let Err(e) = settle(&ctx, findings, now).await {
            tracing::debug!(error = %e, "alerts: the incidents could not be read or written this time");
        }
        notify::send_due(&ctx, &stop).await;
    }
}

/// Applies the findings to the incidents cell (and `store_trouble` to the process),
/// moving each change's notifications into the outbox, then queues the outbox.
async fn settle(ctx: &AlertsContext, findings: Vec<Finding>, now: u64) -> Result<(), StoreError> {
    let routing = ctx.routing();
    let mut stored = Vec::new();
    for f in findings {
        if f.kind == IncidentKind::StoreTrouble {
            trouble(ctx, &f, now).await;
        } else {
            stored.push(f);
        }
    }
    let configured = |i: &Incident| match (&i.route, &i.destination) {
        (Some(r), Some(d)) => routing.route(r).is_some_and(|r| r.destination(d).is_some()),
        (Some(r), None) => routing.route(r).is_some(),
        _ => true,
    };
    let (_, book) = cells::update(&ctx.store, &ctx.cell(), |old: Option<Book>| {
        let mut book = old.unwrap_or_default();
        for f in &stored {
            let k = key(
                f.kind.as_str(),
                f.route.as_deref(),
                f.destination.as_deref(),
            );
            let opened_at = book.open.get(&k).map(|i| i.opened_at_ms);
            let resolved_at = book.resolved.get(&k).copied().unwrap_or(0);
            match (&f.seen, opened_at) {
                (Seen::Firing(_), None) if f.at_ms <= resolved_at => {}
                (Seen::Clear, Some(at)) if f.at_ms <= at => {}
                (Seen::Firing(message), None) => {
                    let incident = Incident {
                        kind: f.kind.as_str().to_owned(),
                        route: f.route.clone(),
                        destination: f.destination.clone(),
                        opened_at_ms: now,
                        message: message.clone(),
                    };
                    book.outbox.push(Pending {
                        incident: incident.clone(),
                        state: "open".into(),
                        resolved_at_ms: None,
                    });
                    book.open.insert(k, incident);
                }
                // Still open: said as it was when it opened (the cell is written
                // only when something opens or resolves).
                (Seen::Firing(_), Some(_)) | (Seen::Clear, None) => {}
                (Seen::Clear, Some(_)) => resolve(&mut book, &k, now),
            }
        }
        // A subject a reload removed has nothing left to be wrong with.
        let gone: Vec<String> = book
            .open
            .iter()
            .filter(|(_, i)| !configured(i))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            resolve(&mut book, &k, now);
        }
        book.resolved
            .retain(|_, at| now.saturating_sub(*at) < RESOLVED_KEPT_MS);
        (Some(book), ())
    })
    .await?;
    let book = book.unwrap_or_default();
    if !book.outbox.is_empty() {
        notify::queue_outbox(ctx, &book.outbox).await?;
        let sent = book.outbox.clone();
        cells::update(&ctx.store, &ctx.cell(), |old: Option<Book>| {
            let mut b = old.unwrap_or_default();
            b.outbox.retain(|p| !sent.contains(p));
            (Some(b), ())
        })
        .await?;
    }
    Ok(())
}

fn resolve(book: &mut Book, k: &str, now: u64) {
    if let Some(incident) = book.open.remove(k) {
        book.resolved.insert(k.to_owned(), now);
        book.outbox.push(Pending {
            incident,
            state: "resolved".into(),
            resolved_at_ms: Some(now),
        });
    }
}

/// `store_trouble`, in the process: opened and resolved here, sent directly.
async fn trouble(ctx: &AlertsContext, f: &Finding, now: u64) {
    let change = {
        let mut held = lock(&ctx.trouble);
        match (&f.seen, held.as_ref()) {
            (Seen::Firing(message), None) => {
                let incident = Incident {
                    kind: f.kind.as_str().to_owned(),
                    route: None,
                    destination: None,
                    opened_at_ms: now,
                    message: message.clone(),
                };
                *held = Some(incident.clone());
                Some(Pending {
                    incident,
                    state: "open".into(),
                    resolved_at_ms: None,
                })
            }
            (Seen::Clear, Some(_)) => held.take().map(|incident| Pending {
                incident,
                state: "resolved".into(),
                resolved_at_ms: Some(now),
            }),
            _ => None,
        }
    };
    if let Some(p) = change {
        notify::send_direct(ctx, p);
    }
}
