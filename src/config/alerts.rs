//! `[[alerts]]` and a route's `silence` and `refusals`: where hookgate says that
//! something is wrong, and what counts as wrong (`observe/alerts/` watches and sends).

use std::time::Duration;

use crate::provider::standard_webhooks::StandardScheme;

/// What an incident is about. The names are those of `[[alerts]] on`, of a
/// notification's `kind` and of `GET /alerts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IncidentKind {
    /// A queue destination's attempts keep failing.
    DestinationFailing,
    /// A destination's breaker paused it.
    BreakerOpen,
    /// A destination holds dead events.
    DeadLetter,
    /// A route with `silence` received no verified delivery for that long.
    ProviderSilent,
    /// A route's `refusals` rule: too many refusals of one outcome.
    Refusals,
    /// The store does not answer, or cannot write.
    StoreTrouble,
}

impl IncidentKind {
    pub const ALL: [Self; 6] = [
        Self::DestinationFailing,
        Self::BreakerOpen,
        Self::DeadLetter,
        Self::ProviderSilent,
        Self::Refusals,
        Self::StoreTrouble,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::DestinationFailing => "destination_failing",
            Self::BreakerOpen => "breaker_open",
            Self::DeadLetter => "dead_letter",
            Self::ProviderSilent => "provider_silent",
            Self::Refusals => "refusals",
            Self::StoreTrouble => "store_trouble",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// How a notification's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertFormat {
    /// Slack-compatible JSON (`{"text", "blocks"}`): Slack's incoming webhooks,
    /// Mattermost's, Discord's `/slack` endpoints.
    Slack,
    /// The incident as JSON.
    Json,
}

/// One `[[alerts]]` section: where notifications of some kinds go.
#[derive(Debug, Clone)]
pub struct AlertTarget {
    /// `name`, or `alerts-<n>` (its place in the file): its queue's name.
    pub name: String,
    pub to: reqwest::Url,
    pub format: AlertFormat,
    /// `secret`: notifications are signed with Standard Webhooks.
    pub signer: Option<StandardScheme>,
    /// `on`: the kinds it is sent (every kind when unset).
    pub on: Vec<IncidentKind>,
}

/// A route's `refusals = { outcome = "bad_signature", over = 20, within = "5m" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalRule {
    pub outcome: String,
    /// More than this many within `within` open the incident.
    pub over: u64,
    pub within: Duration,
}

/// The outcomes a route's `refusals` rule may count: every answer that is not an
/// acceptance or a copy.
pub const REFUSAL_OUTCOMES: [&str; 20] = [
    "bad_signature",
    "missing_header",
    "malformed_header",
    "stale_timestamp",
    "needs_public_url",
    "certificate_unavailable",
    "no_event_id",
    "method_not_allowed",
    "too_large",
    "body_timeout",
    "bad_body",
    "rate_limited",
    "client_busy",
    "overloaded",
    "request_timeout",
    "mismatch",
    "handshake_refused",
    "store_error",
    "upstream_error",
    "upstream_rejected",
];
