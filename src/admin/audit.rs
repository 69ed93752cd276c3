//! The audit: every operator action on the admin listener — the token's name, the
//! action, its target, when, and how it ended — written to the process log at once
//! (target `hookgate::audit`), and to the store ([`crate::store::AuditStore`]: shared
//! by every replica on Redis, kept across restarts on disk and Redis, the newest
//! [`KEEP`] records) in the background. `GET /audit` lists it, newest first.
//!
//! Recording never blocks or fails the action: the answer is written before the
//! store is, a record the store does not take (a full Redis, a failing disk, a
//! timeout), or one past [`MAX_WRITING`] writes at once, is lost and counted in
//! `hookgate_audit_not_recorded_total{reason}`, and its log line is there either way.
//! A request refused for its role (403) is logged and counted
//! (`hookgate_admin_actions_total{result="denied"}`) but not stored: a `read` token
//! cannot push operators' records out of the bounded audit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::AdminContext;
use super::access::Caller;
use super::api::{AuditList, AuditRecord};
use super::exchange::{AdminAnswer, AdminRequest, MAX_LIMIT};
use crate::store::audit::{self, AuditStore as _, KEEP};
use crate::store::{Store, StoreError};

/// Audit writes under way at most; past it, a record is counted as lost (`busy`).
const MAX_WRITING: usize = 64;
/// How long one audit write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Records a list reads from the store per call.
const PAGE: usize = 500;
/// A target's, a detail's and a message's length at most (characters).
const MAX_FIELD: usize = 300;

/// `hookgate_admin_actions_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionResult {
    action: String,
    result: String,
}

/// `hookgate_audit_not_recorded_total`'s label: `busy` or `store`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

/// The audit's writer: the log line, the store write in the background, the counts.
#[derive(Debug)]
pub(crate) struct Audit {
    store: Store,
    writing: Arc<Semaphore>,
    tasks: TaskTracker,
    actions: Family<ActionResult, Counter>,
    not_recorded: Family<Reason, Counter>,
}

/// An operator action a request asks for, before it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Action {
    pub(crate) action: &'static str,
    pub(crate) target: String,
    pub(crate) detail: Option<String>,
}

impl Audit {
    /// The audit on `store`, its metrics registered.
    pub(crate) fn new(store: Store, registry: &mut prometheus_client::registry::Registry) -> Self {
        let actions = Family::<ActionResult, Counter>::default();
        registry.register(
            "admin_actions",
            "Operator actions on the admin listener by action and result (ok, refused, failed, denied: a token without the role)",
            actions.clone(),
        );
        let not_recorded = Family::<Reason, Counter>::default();
        registry.register(
            "audit_not_recorded",
            "Operator actions the audit's store did not take (busy: too many writes at once; store: refused, failed or timed out); each is in the process log",
            not_recorded.clone(),
        );
        for reason in ["busy", "store"] {
            drop(not_recorded.get_or_create(&Reason {
                reason: reason.into(),
            }));
        }
        Self {
            store,
            writing: Arc::new(Semaphore::new(MAX_WRITING)),
            tasks: TaskTracker::new(),
            actions,
            not_recorded,
        }
    }

    /// Records an action and how it ended: logged now, stored in the background.
    pub(crate) fn record(
        &self,
        space: String,
        caller: &Caller,
        action: Action,
        answer: &AdminAnswer,
    ) {
        let (result, status, message) = outcome(answer);
        self.count(action.action, result);
        let now = crate::time::now_ms();
        let record = AuditRecord {
            id: crate::store::log::new_delivery_id(now),
            at: super::api::rfc3339(now),
            name: caller.name.clone(),
            role: caller.role.as_str().to_owned(),
            action: action.action.to_owned(),
            target: action.target,
            detail: action.detail,
            result: result.to_owned(),
            status,
            message,
        };
        tracing::info!(
            target: "hookgate::audit",
            name = %record.name,
            role = %record.role,
            action = %record.action,
            target = %record.target,
            detail = record.detail.as_deref().unwrap_or(""),
            result = %record.result,
            status = record.status,
            message = record.message.as_deref().unwrap_or(""),
            "audit: operator {} {}",
            record.action,
            record.result,
        );
        let Ok(permit) = self.writing.clone().try_acquire_owned() else {
            self.lost("busy", &record, None);
            return;
        };
        // The ID first: Redis orders one millisecond's records by their bytes.
        let Ok(bytes) = serde_json::to_vec(&record) else {
            return;
        };
        let (store, lost) = (self.store.clone(), self.not_recorded.clone());
        self.tasks.spawn(async move {
            let write = store.audit_append(&space, &record.id, now, &bytes, KEEP);
            let failed = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(StoreError::Timeout(WRITE_TIMEOUT)),
            };
            if let Some(e) = failed {
                lost.get_or_create(&Reason {
                    reason: "store".into(),
                })
                .inc();
                tracing::warn!(target: "hookgate::audit", id = %record.id, action = %record.action, error = %e, "audit: the store did not take the record (it is in this log only)");
            }
            drop(permit);
        });
    }

    /// A request refused for its role: logged and counted, not stored.
    pub(crate) fn denied(&self, caller: &Caller, req: &AdminRequest) {
        let action = action_of(req).map_or("other", |a| a.action);
        self.count(action, "denied");
        tracing::warn!(
            target: "hookgate::audit",
            name = %caller.name,
            role = caller.role.as_str(),
            method = %req.method,
            endpoint = %clean(&req.endpoint),
            "audit: refused: the token's role does not allow this endpoint"
        );
    }

    fn count(&self, action: &str, result: &str) {
        self.actions
            .get_or_create(&ActionResult {
                action: action.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    fn lost(&self, reason: &str, record: &AuditRecord, e: Option<&StoreError>) {
        self.not_recorded
            .get_or_create(&Reason {
                reason: reason.to_owned(),
            })
            .inc();
        tracing::warn!(target: "hookgate::audit", id = %record.id, action = %record.action, reason, error = e.map(ToString::to_string), "audit: the record was not stored (it is in this log only)");
    }

    /// Waits (within `grace`) for the audit writes under way: at shutdown.
    pub(crate) async fn drain(&self, grace: Duration) {
        self.tasks.close();
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
    }
}

/// The operator action a request asks for, if it is one (`None` for reads, and for
/// requests no endpoint answers).
pub(crate) fn action_of(req: &AdminRequest) -> Option<Action> {
    use http::Method;
    let route = || clean(req.args.first().map_or("", String::as_str));
    let detail = |skip: &[&str]| {
        let mut params: Vec<(&String, &String)> = req
            .query
            .iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .collect();
        params.sort();
        let text = params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        (!text.is_empty()).then(|| clean(&text))
    };
    let (action, target, detail) = match (&req.method, req.endpoint.as_str()) {
        (&Method::POST, "reload") if req.args.is_empty() => ("reload", "config".to_owned(), None),
        (&Method::GET, "handshakes") if !req.args.is_empty() => {
            ("handshake_show", clean(&req.rest()), None)
        }
        (&Method::DELETE, "handshakes") if !req.args.is_empty() => {
            ("handshake_clear", clean(&req.rest()), None)
        }
        (&Method::DELETE, "keys") => (
            "forget",
            clean(&format!(
                "{}/{}",
                route(),
                req.after_route().unwrap_or_default()
            )),
            None,
        ),
        (&Method::POST, "events") => {
            let action = match req.args.get(1).map(String::as_str) {
                Some("retry") => "retry",
                Some("purge") => "purge",
                Some("pause") => "pause",
                Some("resume") => "resume",
                _ => return None,
            };
            if req.args.len() != 2 {
                return None;
            }
            let target = match req.query.get("event_id") {
                Some(id) => clean(&format!("{}/{id}", route())),
                None => route(),
            };
            (action, target, detail(&["event_id"]))
        }
        (&Method::POST, "deliveries") if req.segments.len() == 2 && req.segments[1] == "replay" => {
            ("replay", clean(&req.args[0]), detail(&[]))
        }
        _ => return None,
    };
    Some(Action {
        action,
        target,
        detail,
    })
}

/// A field as the audit keeps it: on one line, at most [`MAX_FIELD`] characters.
fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_FIELD)
        .collect();
    if s.chars().count() > MAX_FIELD {
        out.push('…');
    }
    out
}

/// How an answer ended, as the audit says it: the result, the status, and what the
/// answer said (its counts, or its error).
fn outcome(answer: &AdminAnswer) -> (&'static str, u16, Option<String>) {
    let (status, body) = match answer {
        AdminAnswer::Ok(b) => (200, Some(b)),
        AdminAnswer::BadRequest(b) => (400, Some(b)),
        AdminAnswer::NotFound(b) => (404, Some(b)),
        AdminAnswer::Conflict(b) => (409, Some(b)),
        AdminAnswer::Unavailable(b) | AdminAnswer::Busy(b) => (503, Some(b)),
        AdminAnswer::Unauthorized => (401, None),
        AdminAnswer::Forbidden(_) => (403, None),
        AdminAnswer::Refused(s, _) => (s.as_u16(), None),
        AdminAnswer::Metrics(_) | AdminAnswer::Page(_) | AdminAnswer::Stream(_) => (200, None),
    };
    let result = match status {
        200..=299 => "ok",
        400..=499 => "refused",
        _ => "failed",
    };
    let message = body.and_then(|b| {
        if let Some(e) = b.get("error").and_then(|e| e.as_str()) {
            return Some(clean(e));
        }
        if let Some(errors) = b.get("errors").and_then(|e| e.as_array()) {
            let text: Vec<&str> = errors.iter().filter_map(|e| e.as_str()).collect();
            return Some(clean(&text.join("; ")));
        }
        // The counts an action answers with.
        let counts: Vec<String> = [
            "retried",
            "purged",
            "forgotten",
            "cleared",
            "routes",
            "count",
            "more",
            "plan",
        ]
        .iter()
        .filter_map(|k| {
            b.get(*k)
                .filter(|v| v.is_number() || v.is_boolean())
                .map(|v| format!("{k}={v}"))
        })
        .collect();
        (!counts.is_empty()).then(|| counts.join(", "))
    });
    (result, status, message)
}

/// `GET /audit?limit=&action=&name=&result=`: the newest records first, `limit`
/// (100 by default, at most 500) of those the filters keep.
pub(super) async fn list(state: &AdminContext, req: &AdminRequest) -> AdminAnswer {
    let q: &HashMap<String, String> = &req.query;
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            return AdminAnswer::bad_request(format!("limit: a number from 1 to {MAX_LIMIT}"));
        }
    };
    let want = |k: &str| q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let (action, name, result) = (want("action"), want("name"), want("result"));
    let space = audit::space(&state.routing().store_cfg.key_prefix);
    let mut out: Vec<AuditRecord> = Vec::new();
    let mut skip = 0;
    while out.len() < limit && skip < KEEP {
        let page = match state.store.audit_list(&space, skip, PAGE).await {
            Ok(p) => p,
            Err(e) => return super::exchange::unavailable(&e),
        };
        let n = page.len();
        for bytes in page {
            let Ok(r) = serde_json::from_slice::<AuditRecord>(&bytes) else {
                continue;
            };
            // Records written meanwhile shift the pages: an ID seen is not taken twice.
            let older = out.last().is_none_or(|last| r.id < last.id);
            let keep = older
                && action.is_none_or(|a| a == r.action)
                && name.is_none_or(|n| n == r.name)
                && result.is_none_or(|x| x == r.result);
            if keep && out.len() < limit {
                out.push(r);
            }
        }
        if n < PAGE {
            break;
        }
        skip += n;
    }
    AdminAnswer::ok(&AuditList {
        audit: out,
        keeps: KEEP,
    })
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    fn action(method: Method, uri: &str) -> Option<(String, String, Option<String>)> {
        action_of(&AdminRequest::parse(&method, &uri.parse().expect("uri")))
            .map(|a| (a.action.to_owned(), a.target, a.detail))
    }

    #[test]
    fn each_operator_action_names_its_target() {
        let some =
            |a: &str, t: &str, d: Option<&str>| Some((a.into(), t.into(), d.map(Into::into)));
        assert_eq!(
            action(Method::POST, "/reload"),
            some("reload", "config", None)
        );
        assert_eq!(
            action(
                Method::POST,
                "/events/github/retry?event_id=e%201&destination=ci"
            ),
            some("retry", "github/e 1", Some("destination=ci"))
        );
        assert_eq!(
            action(
                Method::POST,
                "/events/github/retry?state=dead&event_type=push"
            ),
            some("retry", "github", Some("event_type=push, state=dead"))
        );
        assert_eq!(
            action(Method::POST, "/events/github/pause?reason=deploy"),
            some("pause", "github", Some("reason=deploy"))
        );
        assert_eq!(
            action(Method::DELETE, "/keys/stripe/evt_1"),
            some("forget", "stripe/evt_1", None)
        );
        assert_eq!(
            action(Method::POST, "/deliveries/0190-1/replay"),
            some("replay", "0190-1", None)
        );
        assert_eq!(
            action(Method::GET, "/handshakes/asana"),
            some("handshake_show", "asana", None)
        );
        assert_eq!(action(Method::GET, "/events/github"), None);
        assert_eq!(action(Method::POST, "/events/github/nothing"), None);
        assert_eq!(action(Method::POST, "/pull/github/ci"), None);
        // A field on one line, bounded.
        let long = "x".repeat(1000);
        let (_, target, _) = action(Method::DELETE, &format!("/keys/r/{long}%0A")).expect("forget");
        assert!(target.chars().count() <= MAX_FIELD + 1 && !target.contains('\n'));
    }

    #[test]
    fn an_answer_becomes_a_result_and_a_message() {
        let ok = AdminAnswer::Ok(serde_json::json!({"route": "r", "retried": 3}));
        assert_eq!(outcome(&ok), ("ok", 200, Some("retried=3".into())));
        let failed = AdminAnswer::unavailable("store unavailable, retry later");
        assert_eq!(
            outcome(&failed),
            ("failed", 503, Some("store unavailable, retry later".into()))
        );
        let refused =
            AdminAnswer::BadRequest(serde_json::json!({"status": "refused", "errors": ["a", "b"]}));
        assert_eq!(outcome(&refused), ("refused", 400, Some("a; b".into())));
    }
}
