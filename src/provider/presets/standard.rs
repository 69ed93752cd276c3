//! Standard Webhooks and the Svix-hosted providers that send it under `svix-*`
//! headers ([`StandardScheme`]): HMAC-SHA256 (`v1`) or Ed25519 (`v1a`) over
//! `id.timestamp.body`.

use super::{Build, DefaultId as Id, EventTypeAt as Type, PresetSpec};
use crate::provider::Scheme;
use crate::provider::catalogue::Auth;
use crate::provider::handshake::Handshake;
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
        build: |b| build(b, "webhook"),
    },
    svix("svix"),
    svix("clerk"),
    svix("resend"),
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
        build: |b| build(b, "svix"),
    }
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
