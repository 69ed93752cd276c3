//! Presets that sign nothing, or (monday.com) sign a JWT that does not cover the
//! body: hookgate compares the shared value they offer in constant time. Where the
//! provider lets the operator name the header (Okta, New Relic, Datadog, …), a route
//! names it with `auth_header`. See "What the token presets protect against" in
//! `docs/providers.md`.

use http::{HeaderName, StatusCode};

use super::{Auth, CredentialAt};
use super::{DefaultId as Id, EventTypeAt as Type, PresetSpec};
use crate::provider::Scheme;
use crate::provider::event_id::CustomId;
use crate::provider::handshake::{FixedReply, Handshake};
use crate::provider::special::{Special, basic_auth_header};

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "gitlab",
        auth: Auth::Token,
        scheme: "static token compare",
        headers: "X-Gitlab-Token",
        credential: "string",
        credential_at: &[CredentialAt::Header("x-gitlab-token")],
        event_id: Id::Header(&["idempotency-key", "x-gitlab-event-uuid"]),
        event_type: None,
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::Token {
                header: HeaderName::from_static("x-gitlab-token"),
                values: b.raw()?,
            }))
        },
    },
    basic_auth("postmark", Id::Custom(CustomId::PostmarkRecord), None),
    header_token(
        "okta",
        Id::Custom(CustomId::OktaEvents),
        None,
        Handshake::Okta,
    ),
    PresetSpec {
        name: "figma",
        auth: Auth::Token,
        scheme: "passcode in the body",
        headers: "body passcode",
        credential: "string",
        credential_at: &[CredentialAt::Json("/passcode")],
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event_type")),
        tolerance: None,
        handshake: Handshake::Figma,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::Passcode { values: b.raw()? })),
    },
    basic_auth("chargebee", Id::Json("/id"), None),
    basic_auth("pipedrive", Id::BodySha256, None),
    PresetSpec {
        name: "monday",
        auth: Auth::Token,
        scheme: "JWT HS256 in Authorization (the body is not covered)",
        headers: "Authorization",
        credential: "string",
        credential_at: &[CredentialAt::Header("authorization")],
        event_id: Id::Json("/event/triggerUuid"),
        event_type: None,
        tolerance: None,
        handshake: Handshake::Monday,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::Monday { keys: b.sha256()? })),
    },
    PresetSpec {
        name: "mailchimp",
        auth: Auth::Token,
        scheme: "token in the URL query (?token=)",
        headers: "query token",
        credential: "string",
        credential_at: &[CredentialAt::Query("token")],
        event_id: Id::BodySha256,
        event_type: None,
        tolerance: None,
        handshake: Handshake::Mailchimp,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::QueryToken { values: b.raw()? })),
    },
    PresetSpec {
        name: "msgraph",
        auth: Auth::Token,
        scheme: "clientState in every notification",
        headers: "body value[].clientState",
        credential: "string",
        credential_at: &[CredentialAt::JsonEach("/value", "clientState")],
        event_id: Id::BodySha256,
        event_type: None,
        tolerance: None,
        handshake: Handshake::MsGraph,
        reply: Some(FixedReply {
            status: StatusCode::ACCEPTED,
            body: "",
        }),
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::ClientState { values: b.raw()? })),
    },
    // Fourth round: the Bot API's setWebhook `secret_token`, sent back in every
    // update's X-Telegram-Bot-Api-Secret-Token header; Telegram signs nothing.
    PresetSpec {
        name: "telegram",
        auth: Auth::Token,
        scheme: "static token compare (setWebhook secret_token)",
        headers: "X-Telegram-Bot-Api-Secret-Token",
        credential_at: &[CredentialAt::Header("x-telegram-bot-api-secret-token")],
        event_id: Id::Json("/update_id"),
        build: |b| {
            Ok(Scheme::Special(Special::Token {
                header: HeaderName::from_static("x-telegram-bot-api-secret-token"),
                values: b.raw()?,
            }))
        },
        ..super::BASE
    },
    // Issue 42, group 4: nothing signed; the credential is compared in
    // constant time. Mixpanel and SparkPost send HTTP Basic auth; the others send
    // whatever header the operator sets up on their side (`auth_header`).
    basic_auth("mixpanel", Id::BodySha256, Some(Type::Json("/action"))),
    basic_auth("sparkpost", Id::BodySha256, None),
    header_token("new_relic", Id::BodySha256, None, Handshake::None),
    header_token("fillout", Id::BodySha256, None, Handshake::None),
    header_token("zapier", Id::BodySha256, None, Handshake::None),
    header_token(
        "bigcommerce",
        Id::BodySha256,
        Some(Type::Json("/scope")),
        Handshake::None,
    ),
    header_token("datadog", Id::BodySha256, None, Handshake::None),
    header_token(
        "brevo",
        Id::BodySha256,
        Some(Type::Json("/event")),
        Handshake::None,
    ),
];

/// A provider that sends a credential in a header the operator names on its side
/// (Okta's "Authentication field", New Relic's custom header, …): the route's
/// `auth_header`, `Authorization` by default. Each credential is the header's whole
/// value: a string as is, `{ username, password }` as HTTP Basic auth, `{ bearer }`
/// as a Bearer token.
const fn header_token(
    name: &'static str,
    event_id: Id,
    event_type: Option<Type>,
    handshake: Handshake,
) -> PresetSpec {
    PresetSpec {
        name,
        auth: Auth::Token,
        scheme: "static header compare (the route's auth_header, default Authorization)",
        headers: "Authorization (or auth_header)",
        credential: "the header's value, { username, password } or { bearer }",
        credential_at: &[CredentialAt::Header("authorization")],
        event_id,
        event_type,
        handshake,
        auth_header: Some("authorization"),
        build: |b| {
            Ok(Scheme::Special(Special::Token {
                header: b.token_header("authorization"),
                values: b.header_values()?,
            }))
        },
        ..super::BASE
    }
}

/// A provider that sends HTTP Basic auth with the configured `user:password`.
const fn basic_auth(name: &'static str, event_id: Id, event_type: Option<Type>) -> PresetSpec {
    PresetSpec {
        name,
        auth: Auth::Token,
        scheme: "HTTP Basic auth (user:password as configured)",
        headers: "Authorization",
        credential: "user:password",
        credential_at: &[CredentialAt::Header("authorization")],
        event_id,
        event_type,
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::BasicAuth {
                values: b.texts()?.into_iter().map(basic_auth_header).collect(),
            }))
        },
    }
}
