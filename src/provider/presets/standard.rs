//! Standard Webhooks and the Svix-hosted providers that send it under `svix-*`
//! headers ([`StandardScheme`]): HMAC-SHA256 (`v1`) or Ed25519 (`v1a`) over
//! `id.timestamp.body`. OpenAI, Polar, Replicate, Brex, Lithic, incident.io, Render and
//! Pleo send it under the spec's own `webhook-*` names; Stytch under `svix-*`.

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

/// A row whose provider documents no event-type field.
const fn untyped(mut spec: PresetSpec) -> PresetSpec {
    spec.event_type = None;
    spec
}

/// Polar's SDK base64-encodes the secret before handing it to a Standard Webhooks
/// library, which decodes it again: the HMAC key is the secret's own bytes
/// (`polar_whs_…`). A `whsec_` secret is a plain Standard Webhooks one.
fn build_polar(b: &Build<'_>) -> Result<Scheme, String> {
    let keys = b
        .texts()?
        .into_iter()
        .map(|t| {
            if t.starts_with(b"whsec_") {
                SwKey::parse(t)
            } else if t.is_empty() {
                Err("the Polar secret is empty".into())
            } else {
                Ok(SwKey::Hmac(MacKey::new(Algorithm::Sha256, t)))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Scheme::Standard(StandardScheme::with_prefix(
        "webhook", keys,
    )))
}

fn build(b: &Build<'_>, header_prefix: &str) -> Result<Scheme, String> {
    let keys = b
        .texts()?
        .into_iter()
        .map(SwKey::parse)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Scheme::Standard(StandardScheme::with_prefix(
        header_prefix,
        keys,
    )))
}
