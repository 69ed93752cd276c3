//! HMAC presets whose header layout the template scheme cannot express: Box's two
//! keys, DocuSign's numbered headers, Worldline's key ID, Netlify's JWS over the body's
//! hash, Recharge's plain SHA-256 of secret and body.

use super::Auth;
use super::{DefaultId as Id, EventTypeAt as Type, PresetSpec};
use crate::provider::event_id::CustomId;
use crate::provider::handshake::Handshake;
use crate::provider::mac::{Algorithm, MacKey};
use crate::provider::special::Special;
use crate::provider::{Credential, Scheme};

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "box",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 base64 over body + timestamp, two keys",
        headers: "BOX-SIGNATURE-PRIMARY/SECONDARY, BOX-DELIVERY-TIMESTAMP",
        credential: "{ primary, secondary }",
        credential_at: &[],
        event_id: Id::Json("/id"),
        event_type: None,
        tolerance: Some(600),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .creds
                .iter()
                .map(box_keys)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Scheme::Special(Special::Box { keys }))
        },
    },
    PresetSpec {
        name: "worldline",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 base64 over body, secret chosen by X-GCS-KeyId",
        headers: "X-GCS-Signature, X-GCS-KeyId",
        credential: "{ key_id, secret } per key",
        credential_at: &[],
        event_id: Id::Json("/id"),
        event_type: Some(Type::Json("/type")),
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .creds
                .iter()
                .map(|c| {
                    Ok((
                        c.part_str("key_id")?.to_owned(),
                        MacKey::new(Algorithm::Sha256, c.part("secret")?),
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Worldline { keys }))
        },
    },
    PresetSpec {
        name: "docusign",
        auth: Auth::Signature,
        scheme: "HMAC-SHA256 base64 over body, any of N headers",
        headers: "X-DocuSign-Signature-1..100",
        credential: "string",
        credential_at: &[],
        event_id: Id::BodySha256,
        event_type: None,
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::DocuSign { keys: b.sha256()? })),
    },
    PresetSpec {
        name: "netlify",
        auth: Auth::Signature,
        scheme: "JWS HS256 with iss=netlify and the body's sha256",
        headers: "X-Webhook-Signature",
        credential: "string",
        credential_at: &[],
        event_id: Id::Custom(CustomId::NetlifyDeploy),
        event_type: None,
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::Netlify { keys: b.sha256()? })),
    },
    PresetSpec {
        name: "recharge",
        auth: Auth::Signature,
        scheme: "SHA-256 hex of client secret + body (not an HMAC)",
        headers: "X-Recharge-Hmac-Sha256",
        credential: "string",
        credential_at: &[],
        event_id: Id::BodySha256,
        event_type: Some(Type::Header("x-recharge-topic")),
        tolerance: None,
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| Ok(Scheme::Special(Special::Recharge { secrets: b.raw()? })),
    },
    // Issue 42: Grafana Alerting's webhook contact point with its HMAC settings. Grafana's
    // own source (grafana/alerting `http/hmac.go`) writes the timestamp, then ":", then
    // the body; `ts.body`, which other catalogues list, is not what Grafana signs.
    PresetSpec {
        name: "grafana",
        scheme: "HMAC-SHA256 hex over ts:body (Grafana's own source)",
        headers: "X-Grafana-Alerting-Signature, X-Grafana-Alerting-Timestamp",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/status")),
        tolerance: Some(300),
        build: |b| {
            Ok(super::full(
                "x-grafana-alerting-signature",
                super::plain(""),
                crate::provider::mac::Encoding::Hex,
                crate::provider::Template::parse("{timestamp}:{body}")?,
                crate::provider::hmac_scheme::TimestampSource::Header(
                    http::HeaderName::from_static("x-grafana-alerting-timestamp"),
                ),
                crate::provider::timestamp::TsFormat::Seconds,
                None,
                b.sha256()?,
            ))
        },
        ..super::BASE
    },
];

/// Box's primary and/or secondary key; a plain string is the primary alone.
fn box_keys(c: &Credential) -> Result<(Option<MacKey>, Option<MacKey>), String> {
    match c {
        Credential::Parts(_) => {
            let key = |part| c.part(part).ok().map(|k| MacKey::new(Algorithm::Sha256, k));
            let (p, s) = (key("primary"), key("secondary"));
            if p.is_none() && s.is_none() {
                return Err("the Box credential needs `primary` and/or `secondary`".to_string());
            }
            Ok((p, s))
        }
        Credential::Text(t) => Ok((Some(MacKey::new(Algorithm::Sha256, t.expose())), None)),
    }
}
