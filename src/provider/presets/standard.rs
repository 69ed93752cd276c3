//! Standard Webhooks and the Svix-hosted providers that send it under `svix-*`
//! headers ([`StandardScheme`]): HMAC-SHA256 (`v1`) or Ed25519 (`v1a`) over
//! `id.timestamp.body`. OpenAI, Polar, Replicate, Brex, Lithic, incident.io, Render and
//! Pleo send it under the spec's own `webhook-*` names; Stytch under `svix-*`. The
//! fourth round adds Supabase, Gemini, Etsy, Loops and Dodo Payments (`webhook-*`),
//! Vanta (`svix-*`) and Finch (`finch-*`).

use http::HeaderName;

use super::Auth;
use super::{Build, DefaultId as Id, EventTypeAt as Type, PresetSpec};
use crate::provider::Scheme;
use crate::provider::handshake::Handshake;
use crate::provider::mac::{Algorithm, MacKey};
use crate::provider::standard_webhooks::{StandardScheme, SwKey};

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "standard_webhooks",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 (v1) / Ed25519 (v1a) base64 over id.ts.body",
        headers: "webhook-id, webhook-timestamp, webhook-signature",
        credential: CREDENTIAL,
        credential_at: &[],
        event_id: Id::Header(&["webhook-id"]),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| build(b, "webhook"),
    },
    svix("svix"),
    svix("clerk"),
    svix("resend"),
    // Providers documenting Standard Webhooks under its own `webhook-*` names.
    webhook("openai"),
    PresetSpec {
        name: "polar",
        auth: Auth::Signature,
        scheme: "Standard Webhooks; the secret's own bytes are the key",
        headers: "webhook-id, webhook-timestamp, webhook-signature",
        credential: "the secret as Polar shows it (whsec_<base64> is decoded)",
        credential_at: &[],
        event_id: Id::Header(&["webhook-id"]),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: build_polar,
    },
    webhook("replicate"),
    webhook("brex"),
    webhook("lithic"),
    webhook("incident_io"),
    // Third round. Stytch documents its webhooks as sent by Svix; its payload has no
    // `type` field (the event is source.object_type.action).
    untyped(svix("stytch")),
    // Render's own example receiver verifies `webhook-*` headers with the Standard
    // Webhooks library; its payload carries `type` (`deploy_ended`, …).
    webhook("render"),
    // Pleo documents `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,…`.
    untyped(webhook("pleo")),
    // Fourth round (issue 42, group 1). Each row's source is in `SOURCES`.
    // Supabase Auth hooks: Standard Webhooks; the dashboard shows the secret as
    // `v1,whsec_<base64>`. A hook's kind is the endpoint's, so the body names none.
    untyped(keyed(
        webhook("supabase"),
        "v1,whsec_<base64> as Supabase shows it (whsec_<base64> accepted)",
        build_supabase,
    )),
    // Gemini API static webhooks (HMAC, whsec_ secret); dynamic ones are signed JWTs
    // and are not this preset.
    untyped(webhook("gemini")),
    typed(webhook("etsy"), "/event_type"),
    typed(webhook("loops"), "/eventName"),
    // Vanta's webhooks are sent by Svix under its own header names.
    untyped(svix("vanta")),
    // Finch: the Standard Webhooks construction under `finch-*` names, the secret
    // bare base64 (finch-api-node `Webhooks.verifySignature`).
    finch(),
    webhook("dodopayments"),
    // Increase: its SDKs first verified `Increase-Webhook-Signature: t=<ISO>,v1=<hex>`
    // (custom code, removed in March 2026); the current `events.unwrap` verifies
    // Standard Webhooks. The preset follows the current SDK (see `SOURCES`).
    keyed(
        typed(webhook("increase"), "/category"),
        "the webhook secret as Increase shows it (whsec_<base64> is decoded)",
        build_increase,
    ),
];

const CREDENTIAL: &str = "whsec_<base64> (or whpk_<base64> public key)";

/// A provider that sends Standard Webhooks under `svix-*` headers.
const fn svix(name: &'static str) -> PresetSpec {
    PresetSpec {
        name,
        auth: Auth::Signature,
        scheme: "Standard Webhooks, svix-* headers",
        headers: "svix-id, svix-timestamp, svix-signature",
        credential: CREDENTIAL,
        credential_at: &[],
        event_id: Id::Header(&["svix-id"]),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| build(b, "svix"),
    }
}

/// A provider that sends Standard Webhooks under the spec's own `webhook-*` headers.
const fn webhook(name: &'static str) -> PresetSpec {
    PresetSpec {
        name,
        auth: Auth::Signature,
        scheme: "Standard Webhooks, webhook-* headers",
        headers: "webhook-id, webhook-timestamp, webhook-signature",
        credential: CREDENTIAL,
        credential_at: &[],
        event_id: Id::Header(&["webhook-id"]),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| build(b, "webhook"),
    }
}

/// A row whose credential has its own shape, built by `build`.
const fn keyed(
    mut spec: PresetSpec,
    credential: &'static str,
    build: fn(&Build<'_>) -> Result<Scheme, String>,
) -> PresetSpec {
    spec.credential = credential;
    spec.build = build;
    spec
}

/// Finch's row: the Standard Webhooks construction under `finch-*` names.
const fn finch() -> PresetSpec {
    let mut spec = typed(
        keyed(
            webhook("finch"),
            "the webhook secret, base64 (whsec_<base64> accepted)",
            build_finch,
        ),
        "/event_type",
    );
    spec.scheme = "Standard Webhooks construction, finch-* headers";
    spec.headers = "finch-event-id, finch-timestamp, finch-signature";
    spec.event_id = Id::Header(&["finch-event-id"]);
    spec
}

/// A row whose provider documents its event type at another JSON field.
const fn typed(mut spec: PresetSpec, pointer: &'static str) -> PresetSpec {
    spec.event_type = Some(Type::Json(pointer));
    spec
}

/// A row whose provider documents no event-type field.
const fn untyped(mut spec: PresetSpec) -> PresetSpec {
    spec.event_type = None;
    spec
}

/// Polar's SDK base64-encodes the secret before handing it to a Standard Webhooks
/// library, which decodes it again: the HMAC key is the secret's own bytes
/// (`polar_whs_…`). A `whsec_` secret is a plain Standard Webhooks one.
fn build_polar(b: &Build<'_>) -> Result<Scheme, String> {
    raw_or_whsec(b, "the Polar secret is empty")
}

/// Increase's SDK (`events.unwrap`) hands the client's webhook secret to a Standard
/// Webhooks library as bytes, which keys the HMAC with them as they are; a `whsec_`
/// string is decoded as the spec says.
fn build_increase(b: &Build<'_>) -> Result<Scheme, String> {
    raw_or_whsec(b, "the Increase webhook secret is empty")
}

/// Keys that are a secret's own bytes, unless it is a `whsec_<base64>` one.
fn raw_or_whsec(b: &Build<'_>, empty: &str) -> Result<Scheme, String> {
    let keys = b
        .texts()?
        .into_iter()
        .map(|t| {
            if t.starts_with(b"whsec_") {
                SwKey::parse(t)
            } else if t.is_empty() {
                Err(empty.to_string())
            } else {
                Ok(SwKey::Hmac(MacKey::new(Algorithm::Sha256, t)))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Scheme::Standard(StandardScheme::with_prefix(
        "webhook", keys,
    )))
}

/// Supabase shows the secret as `v1,whsec_<base64>`; its own example strips the
/// `v1,` before handing it to a Standard Webhooks library.
fn build_supabase(b: &Build<'_>) -> Result<Scheme, String> {
    let keys = sw_keys(b, |t| t.strip_prefix(b"v1,").unwrap_or(t))?;
    Ok(Scheme::Standard(StandardScheme::with_prefix(
        "webhook", keys,
    )))
}

/// Finch signs `event-id.timestamp.body` as Standard Webhooks does, under its own
/// header names; the ID header is `finch-event-id`, not `finch-id`.
fn build_finch(b: &Build<'_>) -> Result<Scheme, String> {
    Ok(Scheme::Standard(StandardScheme {
        id_header: HeaderName::from_static("finch-event-id"),
        timestamp_header: HeaderName::from_static("finch-timestamp"),
        signature_header: HeaderName::from_static("finch-signature"),
        keys: sw_keys(b, |t| t)?,
    }))
}

/// Every credential as a Standard Webhooks key, after `unwrap` takes off what the
/// provider adds around `whsec_<base64>`.
fn sw_keys(b: &Build<'_>, unwrap: fn(&[u8]) -> &[u8]) -> Result<Vec<SwKey>, String> {
    b.texts()?
        .into_iter()
        .map(|t| SwKey::parse(unwrap(t)))
        .collect()
}

fn build(b: &Build<'_>, header_prefix: &str) -> Result<Scheme, String> {
    Ok(Scheme::Standard(StandardScheme::with_prefix(
        header_prefix,
        sw_keys(b, |t| t)?,
    )))
}
