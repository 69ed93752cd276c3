//! Where an event's type is (`invoice.paid`, `pull_request.opened`, `orders/create`):
//! the preset's place, or the route's `event_type = "header:NAME" | "json:/pointer"`.
//! The type is read from the verified delivery and shown in its log line, its replay
//! file and a queued event's record.

use std::borrow::Cow;
use std::fmt;

use http::{HeaderMap, HeaderName};

use super::json_pointer::Pointer;
use super::presets::EventTypeAt;

/// Longest event type kept; a longer one is cut (it is a label, not a key).
const MAX_LEN: usize = 200;

/// Where a route reads the event type from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventTypeSource {
    Header(HeaderName),
    Json(Pointer),
    /// A header, then `.` and a JSON field when the body has it (GitHub's
    /// `X-GitHub-Event` and `action`: `pull_request.opened`).
    HeaderAndJson(HeaderName, Pointer),
}

impl EventTypeSource {
    /// `header:NAME` or `json:/pointer`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(name) = s.strip_prefix("header:") {
            return HeaderName::try_from(name.trim())
                .map(Self::Header)
                .map_err(|_| format!("{name:?} is not a header name"));
        }
        if let Some(pointer) = s.strip_prefix("json:") {
            if pointer.is_empty() || pointer.starts_with('/') {
                return Ok(Self::Json(pointer.into()));
            }
            return Err(format!(
                "{pointer:?} is not a JSON pointer (it starts with '/')"
            ));
        }
        Err(format!("{s:?}: use \"header:NAME\" or \"json:/pointer\""))
    }

    /// A preset's place.
    pub fn of(at: EventTypeAt) -> Self {
        match at {
            EventTypeAt::Header(h) => Self::Header(HeaderName::from_static(h)),
            EventTypeAt::Json(p) => Self::Json(p.into()),
            EventTypeAt::HeaderAndJson(h, p) => {
                Self::HeaderAndJson(HeaderName::from_static(h), p.into())
            }
        }
    }

    /// The event type of a delivery, if it has one: printable ASCII, at most 200 bytes.
    pub fn extract(&self, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        self.extract_read(headers, body, None)
    }

    /// The JSON pointer it reads, if any: a route reads it in the same walk over the
    /// body as its event ID (`provider::BodyFields`).
    pub fn json_pointer(&self) -> Option<&Pointer> {
        match self {
            Self::Json(p) | Self::HeaderAndJson(_, p) => Some(p),
            Self::Header(_) => None,
        }
    }

    /// [`extract`](Self::extract), with the value at [`json_pointer`](Self::json_pointer)
    /// already read when `read` is `Some`.
    pub fn extract_read(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        read: Option<Option<&str>>,
    ) -> Option<String> {
        let raw = self.raw_read(headers, body, read)?;
        let clean: String = raw
            .chars()
            .filter(|c| c.is_ascii_graphic() || *c == ' ')
            .take(MAX_LEN)
            .collect();
        (!clean.is_empty()).then_some(clean)
    }

    /// The value as the delivery has it, not cleaned or cut (an `order_by` key: two
    /// keys must stay two keys).
    pub fn raw(&self, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        self.raw_read(headers, body, None).map(Cow::into_owned)
    }

    /// [`raw`](Self::raw), with the value at [`json_pointer`](Self::json_pointer)
    /// already read when `read` is `Some`; borrowed where it can be.
    pub fn raw_read<'a>(
        &self,
        headers: &'a HeaderMap,
        body: &[u8],
        read: Option<Option<&'a str>>,
    ) -> Option<Cow<'a, str>> {
        let json = |p: &Pointer| match read {
            Some(value) => value.map(Cow::Borrowed),
            None => p.read(body).map(Cow::Owned),
        };
        let header = |h: &HeaderName| {
            headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        let raw = match self {
            Self::Header(h) => Cow::Borrowed(header(h)?),
            Self::Json(p) => json(p)?,
            Self::HeaderAndJson(h, p) => {
                let first = header(h)?;
                match json(p) {
                    Some(second) if !second.is_empty() => Cow::Owned(format!("{first}.{second}")),
                    _ => Cow::Borrowed(first),
                }
            }
        };
        (!raw.is_empty()).then_some(raw)
    }
}

/// A route's `events = ["invoice.*", "customer.subscription.*"]`: the event types it
/// takes. `*` matches any run of characters (dots and slashes included); nothing else is
/// special. A pattern takes the types it matches and their dotted sub-types:
/// `pull_request` takes `pull_request` and `pull_request.opened`, `invoice` takes
/// `invoice.paid`. Hand-written: a glob crate would bring character classes and path
/// rules that event types do not need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFilter {
    patterns: Vec<String>,
}

impl EventFilter {
    /// A filter of these patterns (at least one, none empty).
    pub fn new(patterns: Vec<String>) -> Result<Self, String> {
        if patterns.is_empty() {
            return Err("name at least one event type (\"*\" takes all)".into());
        }
        if patterns.iter().any(|p| p.trim().is_empty()) {
            return Err("an empty pattern matches nothing".into());
        }
        Ok(Self { patterns })
    }

    /// Whether an event of this type is taken: a pattern matches it or the type it is
    /// a dotted sub-type of.
    pub fn admits(&self, event_type: &str) -> bool {
        self.patterns.iter().any(|p| admits(p, event_type))
    }

    /// The patterns that can take none of `names` (a provider's event names) nor any
    /// dotted sub-type of one: a typo, or another provider's vocabulary. A pattern
    /// whose part before its first `.` has a `*` may take anything, and is kept out.
    pub fn unmatched<'a>(&'a self, names: &[&str]) -> Vec<&'a str> {
        self.patterns
            .iter()
            .map(String::as_str)
            .filter(|p| !names.iter().any(|n| could_take(p, n)))
            .collect()
    }

    /// The patterns, as configured.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

/// `pattern` matches `event_type`, or the part of it before one of its dots.
fn admits(pattern: &str, event_type: &str) -> bool {
    glob(pattern, event_type)
        || event_type
            .match_indices('.')
            .any(|(i, _)| glob(pattern, &event_type[..i]))
}

/// Whether `pattern` can take the event `name` or one of its dotted sub-types.
fn could_take(pattern: &str, name: &str) -> bool {
    let head = pattern.split_once('.').map_or(pattern, |(head, _)| head);
    head.contains('*') || glob(head, name)
}

/// The event names a provider sends, where it publishes the whole list: `(the
/// provider, the names)`. Each may come with a dotted sub-type (GitHub's `action`).
pub fn known_names(source: &EventTypeSource) -> Option<(&'static str, &'static [&'static str])> {
    match source {
        EventTypeSource::HeaderAndJson(h, _) | EventTypeSource::Header(h)
            if h.as_str() == "x-github-event" =>
        {
            Some(("GitHub", GITHUB_EVENTS))
        }
        _ => None,
    }
}

/// The values of GitHub's `X-GitHub-Event` header, from its "Webhook events and
/// payloads" reference.
const GITHUB_EVENTS: &[&str] = &[
    "branch_protection_configuration",
    "branch_protection_rule",
    "check_run",
    "check_suite",
    "code_scanning_alert",
    "commit_comment",
    "create",
    "custom_property",
    "custom_property_values",
    "delete",
    "dependabot_alert",
    "deploy_key",
    "deployment",
    "deployment_protection_rule",
    "deployment_review",
    "deployment_status",
    "discussion",
    "discussion_comment",
    "fork",
    "github_app_authorization",
    "gollum",
    "installation",
    "installation_repositories",
    "installation_target",
    "issue_comment",
    "issue_dependencies",
    "issues",
    "label",
    "marketplace_purchase",
    "member",
    "membership",
    "merge_group",
    "meta",
    "milestone",
    "org_block",
    "organization",
    "package",
    "page_build",
    "personal_access_token_request",
    "ping",
    "project",
    "project_card",
    "project_column",
    "projects_v2",
    "projects_v2_item",
    "projects_v2_status_update",
    "public",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "pull_request_review_thread",
    "push",
    "registry_package",
    "release",
    "repository",
    "repository_advisory",
    "repository_dispatch",
    "repository_import",
    "repository_ruleset",
    "repository_vulnerability_alert",
    "secret_scanning_alert",
    "secret_scanning_alert_location",
    "secret_scanning_scan",
    "security_advisory",
    "security_and_analysis",
    "sponsorship",
    "star",
    "status",
    "sub_issues",
    "team",
    "team_add",
    "watch",
    "workflow_dispatch",
    "workflow_job",
    "workflow_run",
];

/// `*`-only wildcard matching, iterative with backtracking to the last `*`.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

impl fmt::Display for EventTypeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(h) => write!(f, "header:{h}"),
            Self::Json(p) => write!(f, "json:{p}"),
            Self::HeaderAndJson(h, p) => write!(f, "header:{h} + json:{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(*n, http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn types_are_read_from_headers_and_bodies() {
        let stripe = EventTypeSource::parse("json:/type").expect("parse");
        assert_eq!(
            stripe.extract(
                &HeaderMap::new(),
                br#"{"id":"evt_1","type":"invoice.paid"}"#
            ),
            Some("invoice.paid".into())
        );
        let shopify = EventTypeSource::parse("header:X-Shopify-Topic").expect("parse");
        assert_eq!(
            shopify.extract(&headers(&[("x-shopify-topic", "orders/create")]), b"{}"),
            Some("orders/create".into())
        );
        assert_eq!(shopify.extract(&HeaderMap::new(), b"{}"), None);
        assert_eq!(stripe.extract(&HeaderMap::new(), b"not json"), None);
    }

    #[test]
    fn github_joins_the_event_and_its_action() {
        let gh = EventTypeSource::of(EventTypeAt::HeaderAndJson("x-github-event", "/action"));
        let h = headers(&[("x-github-event", "pull_request")]);
        assert_eq!(
            gh.extract(&h, br#"{"action":"opened","number":1}"#),
            Some("pull_request.opened".into())
        );
        let push = headers(&[("x-github-event", "push")]);
        assert_eq!(gh.extract(&push, br#"{"ref":"main"}"#), Some("push".into()));
        assert_eq!(gh.to_string(), "header:x-github-event + json:/action");
    }

    #[test]
    fn filters_match_with_stars_only() {
        let f = EventFilter::new(vec!["invoice.*".into(), "customer.subscription.*".into()])
            .expect("filter");
        assert!(f.admits("invoice.paid"));
        assert!(f.admits("customer.subscription.updated"));
        assert!(!f.admits("customer.created"));
        assert!(!f.admits("invoice"));
        assert!(f.admits("invoice.paid.late"));
        let all = EventFilter::new(vec!["*".into()]).expect("filter");
        assert!(all.admits("anything/at.all"));
        let mid = EventFilter::new(vec!["orders/*/paid".into()]).expect("filter");
        assert!(mid.admits("orders/x/y/paid"));
        assert!(!mid.admits("orders/paid"));
        assert!(
            EventFilter::new(vec!["pull_request".into()])
                .expect("f")
                .admits("pull_request")
        );
        // A type takes its dotted sub-types: GitHub's names take their actions.
        let gh = EventFilter::new(vec!["push".into(), "pull_request".into()]).expect("f");
        assert!(gh.admits("pull_request.opened"));
        assert!(gh.admits("push"));
        assert!(!gh.admits("pull_request_review.submitted"));
        assert!(!gh.admits("pushed"));
        let stripe = EventFilter::new(vec!["customer".into()]).expect("f");
        assert!(stripe.admits("customer.subscription.created"));
        assert!(!stripe.admits("customers.created"));
        assert!(EventFilter::new(vec![]).is_err());
        assert!(EventFilter::new(vec![" ".into()]).is_err());
    }

    #[test]
    fn patterns_that_can_take_no_event_the_provider_sends_are_found() {
        let gh = EventTypeSource::of(EventTypeAt::HeaderAndJson("x-github-event", "/action"));
        let (who, names) = known_names(&gh).expect("GitHub publishes its events");
        assert_eq!(who, "GitHub");
        let f = EventFilter::new(
            [
                "push",
                "pull_request.opened",
                "pull_requests",
                "issue.*",
                "*.created",
                "check_*",
            ]
            .map(String::from)
            .to_vec(),
        )
        .expect("filter");
        assert_eq!(f.unmatched(names), ["pull_requests", "issue.*"]);
        let stripe = EventTypeSource::of(EventTypeAt::Json("/type"));
        assert!(known_names(&stripe).is_none());
    }

    #[test]
    fn bad_sources_and_unprintable_types_are_refused_or_cleaned() {
        assert!(EventTypeSource::parse("body:/type").is_err());
        assert!(EventTypeSource::parse("json:type").is_err());
        assert!(EventTypeSource::parse("header:bad header").is_err());
        let s = EventTypeSource::parse("json:/t").expect("parse");
        let long = format!(r#"{{"t":"{}"}}"#, "a".repeat(500));
        assert_eq!(
            s.extract(&HeaderMap::new(), long.as_bytes())
                .map(|t| t.len()),
            Some(200)
        );
        assert_eq!(
            s.extract(&HeaderMap::new(), br#"{"t":"a\u0000b\nc"}"#),
            Some("abc".into())
        );
    }
}
