//! Presets whose signature covers the URL the provider called (Twilio, HubSpot,
//! Contentful, Mandrill, Plivo): a route needs `public_url` (HubSpot's v1 signs no URL, so a
//! HubSpot route without it verifies v1 only). Mercado Pago signs one query parameter,
//! `data.id`, read from the query as received (no `public_url` needed).

use http::Method;

use super::Auth;
use super::{DefaultId as Id, EventTypeAt as Type, PresetSpec};
use crate::provider::Scheme;
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
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::Twilio {
                keys: b.keys(Sha1)?,
            }))
        },
    },
    PresetSpec {
        name: "plivo",
        auth: Auth::Signature,
        scheme: "V3: HMAC-SHA256 base64 over URL + sorted params + nonce; V2 (URL + nonce, body not covered) only for tokens with accept_v2",
        headers: "X-Plivo-Signature-V3, -V3-Nonce (X-Plivo-Signature-V2, -V2-Nonce)",
        credential: "auth token, or { auth_token, accept_v2 = \"true\" }",
        credential_at: &[],
        // No event ID: the nonce changes per request, so a delivery is deduplicated on
        // the signed URL and canonical parameters (the nonce is never used as a key).
        event_id: Id::Header(&["x-plivo-signature-v3-nonce", "x-plivo-signature-v2-nonce"]),
        event_type: None,
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: true,
        // Answer and callback URLs may be configured with GET.
        extra_methods: &[Method::GET],
        auth_header: None,
        build: |b| {
            let keys = b
                .creds
                .iter()
                .map(plivo_key)
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Plivo { keys }))
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
        auth_header: None,
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
        auth_header: None,
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
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::Mandrill {
                keys: b.keys(Sha1)?,
            }))
        },
    },
    // Mercado Pago signs the query's data.id, x-request-id and a timestamp, not the
    // body: `token` in the catalogue, like monday's JWT. The key is x-request-id, which
    // the manifest covers (never the body's unsigned `id`); the window bounds how long a
    // captured signature can carry another body.
    PresetSpec {
        name: "mercado_pago",
        auth: Auth::Token,
        scheme: "HMAC-SHA256 hex over `id:<query data.id>;request-id:<x-request-id>;ts:<ts>;` (absent parts left out; data.id as received or lower-cased); the body is not signed, a body data.id must equal the signed one; key: the signed x-request-id",
        headers: "x-signature (ts=…,v1=…), x-request-id, ?data.id",
        credential: "string",
        credential_at: &[],
        event_id: Id::Header(&["x-request-id"]),
        event_type: Some(Type::Json("/type")),
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::MercadoPago { keys: b.sha256()? })),
    },
];

/// A Plivo credential: the auth token, or `{ auth_token, accept_v2 = "true" }` to also
/// accept V2 signatures (which cover neither the body nor the query).
fn plivo_key(
    c: &crate::provider::Credential,
) -> Result<(crate::provider::mac::MacKey, bool), String> {
    use crate::provider::Credential;
    use crate::provider::mac::{Algorithm, MacKey};
    match c {
        Credential::Text(t) => Ok((MacKey::new(Algorithm::Sha256, t.expose()), false)),
        Credential::Parts(parts) => {
            if let Some(other) = parts
                .keys()
                .find(|k| !matches!(k.as_str(), "auth_token" | "accept_v2"))
            {
                return Err(format!(
                    "unknown part `{other}` (plivo takes auth_token and accept_v2)"
                ));
            }
            let v2 = match parts.get("accept_v2").map(|s| s.expose()) {
                None | Some(b"false") => false,
                Some(b"true") => true,
                Some(_) => return Err("accept_v2 must be \"true\" or \"false\"".into()),
            };
            Ok((MacKey::new(Algorithm::Sha256, c.part("auth_token")?), v2))
        }
    }
}
