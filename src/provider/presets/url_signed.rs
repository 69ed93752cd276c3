//! Presets whose signature covers the URL the provider called (Twilio, HubSpot,
//! Contentful, Mandrill): a route needs `public_url` (HubSpot's v1 signs no URL, so a
//! HubSpot route without it verifies v1 only).

use http::Method;

use super::{DefaultId as Id, PresetSpec};
use crate::provider::Scheme;
use crate::provider::catalogue::Auth;
use crate::provider::event_id::CustomId;
use crate::provider::handshake::Handshake;
use crate::provider::mac::Algorithm::Sha1;
use crate::provider::special::Special;

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "twilio",
        auth: Auth::Signature,
        scheme: "HMAC-SHA1 base64 over URL + sorted form params (or URL with bodySHA256)",
        headers: "X-Twilio-Signature",
        credential: "string",
        credential_at: &[],
        event_id: Id::Header(&["i-twilio-idempotency-token"]),
        event_type: None,
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: true,
        extra_methods: &[],
        build: |b| {
            Ok(Scheme::Special(Special::Twilio {
                keys: b.keys(Sha1)?,
            }))
        },
    },
    PresetSpec {
        name: "hubspot",
        auth: Auth::Signature,
        scheme: "v3: HMAC-SHA256 base64 over method + uri + body + ts (ms); v2: SHA-256 of secret + method + uri + body (both need `public_url`); v1: SHA-256 of secret + body (no URL)",
        headers: "X-HubSpot-Signature-v3, X-HubSpot-Request-Timestamp",
        credential: "string",
        credential_at: &[],
        event_id: Id::Custom(CustomId::HubspotEvents),
        event_type: None,
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        // v1 signs no URL: a route without public_url verifies v1 only.
        needs_public_url: false,
        // Its v2 signature covers GET deliveries.
        extra_methods: &[Method::GET],
        build: |b| {
            Ok(Scheme::Special(Special::HubSpot {
                keys: b.sha256()?,
                raw: b.raw()?,
            }))
        },
    },
    PresetSpec {
        name: "contentful",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 hex over the canonical request",
        headers: "x-contentful-signature, -signed-headers, -timestamp",
        credential: "string",
        credential_at: &[],
        event_id: Id::Header(&["x-contentful-idempotency-key"]),
        event_type: None,
        tolerance: Some(30),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: true,
        extra_methods: &[],
        build: |b| Ok(Scheme::Special(Special::Contentful { keys: b.sha256()? })),
    },
    PresetSpec {
        name: "mandrill",
        auth: Auth::Signature,
        scheme: "HMAC-SHA1 base64 over URL + sorted form key+value",
        headers: "X-Mandrill-Signature",
        credential: "string",
        credential_at: &[],
        event_id: Id::Custom(CustomId::MandrillEvents),
        event_type: None,
        tolerance: None,
        handshake: Handshake::Head,
        reply: None,
        needs_public_url: true,
        extra_methods: &[],
        build: |b| {
            Ok(Scheme::Special(Special::Mandrill {
                keys: b.keys(Sha1)?,
            }))
        },
    },
];
