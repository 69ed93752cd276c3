//! Presets signed with a private key the gateway never holds: Discord, Telnyx and fal
//! (Ed25519), SendGrid, Circle and eBay (ECDSA P-256), Plaid (JWT ES256), PayPal, AWS SNS
//! and Wise (RSA). Failed verifications on
//! such routes spend a per-client budget (see `Verifier::is_costly`).

use super::Auth;
use super::{DefaultId as Id, EventTypeAt as Type, PresetSpec};
use crate::provider::event_id::CustomId;
use crate::provider::handshake::Handshake;
use crate::provider::mac::{decode_base64, decode_base64url};
use crate::provider::special::{AwsSns, Special};
use crate::provider::{Credential, Scheme};

pub(super) const PRESETS: &[PresetSpec] = &[
    PresetSpec {
        name: "discord",
        auth: Auth::Signature,
        scheme: "Ed25519 hex over ts + body",
        headers: "X-Signature-Ed25519, X-Signature-Timestamp",
        credential: "public key, hex",
        credential_at: &[],
        event_id: Id::Custom(CustomId::DiscordId),
        event_type: None,
        tolerance: Some(300),
        handshake: Handshake::Discord,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .texts()?
                .into_iter()
                .map(discord_key)
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Discord { keys }))
        },
    },
    PresetSpec {
        name: "telnyx",
        auth: Auth::Signature,
        scheme: "Ed25519 base64 over ts|body",
        headers: "telnyx-signature-ed25519, telnyx-timestamp",
        credential: "public key, base64",
        credential_at: &[],
        event_id: Id::Json("/data/id"),
        event_type: Some(Type::Json("/data/event_type")),
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .texts()?
                .into_iter()
                .map(|t| {
                    let raw = std::str::from_utf8(t)
                        .ok()
                        .and_then(decode_base64)
                        .ok_or("the Telnyx public key must be base64")?;
                    let arr: [u8; 32] = raw
                        .as_slice()
                        .try_into()
                        .map_err(|_| "the Telnyx public key must decode to 32 bytes".to_string())?;
                    ed25519_dalek::VerifyingKey::from_bytes(&arr)
                        .map_err(|_| "the Telnyx public key is not a valid Ed25519 key".to_string())
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Telnyx { keys }))
        },
    },
    PresetSpec {
        name: "sendgrid",
        auth: Auth::Signature,
        scheme: "ECDSA P-256 SHA-256 (DER, base64) over ts + body",
        headers: "X-Twilio-Email-Event-Webhook-Signature, -Timestamp",
        credential: "public key, base64 DER or PEM",
        credential_at: &[],
        event_id: Id::Custom(CustomId::SendgridEvents),
        event_type: None,
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .texts()?
                .into_iter()
                .map(sendgrid_key)
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::SendGrid { keys }))
        },
    },
    PresetSpec {
        name: "plaid",
        auth: Auth::Signature,
        scheme: "JWT ES256 with request_body_sha256 (key: the JWK as a table)",
        headers: "Plaid-Verification",
        credential: "the JWK as a table { kid, x, y, … }",
        credential_at: &[],
        event_id: Id::BodySha256,
        event_type: None,
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .creds
                .iter()
                .map(plaid_key)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Scheme::Special(Special::Plaid { keys }))
        },
    },
    PresetSpec {
        name: "paypal",
        auth: Auth::Signature,
        scheme: "SHA256withRSA over id|time|webhook_id|crc32(body)",
        headers: "PAYPAL-TRANSMISSION-SIG, -ID, -TIME, -CERT-URL, AUTH-ALGO",
        credential: "{ webhook_id, cert_pem }",
        credential_at: &[],
        event_id: Id::Json("/id"),
        event_type: None,
        tolerance: Some(300),
        handshake: Handshake::None,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .creds
                .iter()
                .map(paypal_key)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Scheme::Special(Special::PayPal { keys }))
        },
    },
    PresetSpec {
        name: "ebay",
        auth: Auth::Signature,
        scheme: "ECDSA P-256 SHA-1 over body, key chosen by the kid in X-EBAY-SIGNATURE (base64 JSON)",
        headers: "X-EBAY-SIGNATURE",
        credential: "{ key_id, public_key, verification_token? } per key (PEM, one line accepted)",
        credential_at: &[],
        event_id: Id::Json("/notification/notificationId"),
        event_type: Some(Type::Json("/metadata/topic")),
        tolerance: None,
        handshake: Handshake::Ebay {
            verification_tokens: Vec::new(),
        },
        reply: None,
        // The challenge's answer covers the URL eBay calls.
        needs_public_url: true,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            let keys = b
                .creds
                .iter()
                .map(|c| {
                    Ok((
                        c.part_str("key_id")?.to_owned(),
                        ebay_key(c.part("public_key")?)?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Ebay { keys }))
        },
    },
    PresetSpec {
        name: "circle",
        auth: Auth::Signature,
        scheme: "ECDSA P-256 SHA-256 (DER, base64) over body, key chosen by X-Circle-Key-Id",
        headers: "X-Circle-Signature, X-Circle-Key-Id",
        credential: "{ key_id, public_key } per key (base64 DER or PEM)",
        credential_at: &[],
        event_id: Id::Json("/notificationId"),
        event_type: Some(Type::Json("/notificationType")),
        tolerance: None,
        handshake: Handshake::Head,
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
                        sendgrid_key(c.part("public_key")?)?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Circle { keys }))
        },
    },
    PresetSpec {
        name: "aws_sns",
        auth: Auth::Signature,
        scheme: "RSA SHA-1 (SignatureVersion 1) / SHA-256 (2) over the body's canonical fields, certificate from SNS's host or pinned",
        headers: "body: Signature, SignatureVersion, SigningCertURL",
        credential: "{ topic_arn, cert_pem?, confirm? } per topic",
        credential_at: &[],
        event_id: Id::Json("/MessageId"),
        event_type: Some(Type::Json("/Type")),
        tolerance: Some(3600),
        handshake: Handshake::AwsSns,
        reply: None,
        needs_public_url: false,
        extra_methods: &[],
        auth_header: None,
        build: |b| {
            Ok(Scheme::Special(Special::AwsSns(AwsSns::from_credentials(
                b.creds,
            )?)))
        },
    },
    // Issue 42. Each row cites, in `SOURCES`, the provider's page its scheme was read from.
    PresetSpec {
        name: "wise",
        scheme: "RSA SHA-256 (PKCS#1 v1.5, base64) over body, Wise's published public key",
        headers: "X-Signature-SHA256",
        credential: "public key, PEM (Wise's production or sandbox key)",
        event_id: Id::BodySha256,
        event_type: Some(Type::Json("/event_type")),
        build: |b| {
            let keys = b
                .texts()?
                .into_iter()
                .map(rsa_pem_key)
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Scheme::Special(Special::Wise { keys }))
        },
        ..super::BASE
    },
    PresetSpec {
        name: "falai",
        scheme: "Ed25519 hex over request_id\\nuser_id\\nts\\nsha256hex(body), keys from fal's JWKS",
        headers: "X-Fal-Webhook-Signature, -Request-Id, -User-Id, -Timestamp",
        credential: "fal's JWKS JSON (or one JWK, or its x in base64url)",
        event_id: Id::Json("/request_id"),
        event_type: Some(Type::Json("/status")),
        tolerance: Some(300),
        build: |b| {
            let mut keys = Vec::new();
            for (i, text) in b.texts()?.into_iter().enumerate() {
                keys.extend(ed25519_jwks(text)?.into_iter().map(|k| (i, k)));
            }
            Ok(Scheme::Special(Special::FalAi { keys }))
        },
        ..super::BASE
    },
];

fn discord_key(text: &[u8]) -> Result<ed25519_dalek::VerifyingKey, String> {
    let raw: [u8; 32] = hex::decode(text)
        .ok()
        .and_then(|r| r.try_into().ok())
        .ok_or("the public key must be 32 bytes in hex")?;
    ed25519_dalek::VerifyingKey::from_bytes(&raw)
        .map_err(|_| "not a valid Ed25519 public key".to_string())
}

fn sendgrid_key(text: &[u8]) -> Result<p256::ecdsa::VerifyingKey, String> {
    use p256::pkcs8::DecodePublicKey;
    let text = std::str::from_utf8(text).map_err(|_| "the public key must be text".to_string())?;
    if text.contains("BEGIN") {
        p256::ecdsa::VerifyingKey::from_public_key_pem(text)
            .map_err(|_| "not a P-256 public key (PEM)".to_string())
    } else {
        let der = decode_base64(text).ok_or("the public key must be base64 DER or PEM")?;
        p256::ecdsa::VerifyingKey::from_public_key_der(&der)
            .map_err(|_| "not a P-256 public key (DER)".to_string())
    }
}

fn plaid_key(c: &Credential) -> Result<(String, p256::ecdsa::VerifyingKey), String> {
    let kid = c.part_str("kid")?.to_owned();
    let x = decode_base64url(c.part_str("x")?).ok_or("JWK x must be base64url")?;
    let y = decode_base64url(c.part_str("y")?).ok_or("JWK y must be base64url")?;
    if x.len() != 32 || y.len() != 32 {
        return Err("JWK x and y must be 32 bytes (P-256)".into());
    }
    let point = [&[4u8][..], &x, &y].concat();
    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
        .map_err(|_| "the JWK is not a P-256 point".to_string())?;
    Ok((kid, key))
}

fn paypal_key(
    c: &Credential,
) -> Result<(String, rsa::pkcs1v15::VerifyingKey<sha2::Sha256>), String> {
    use rsa::pkcs8::DecodePublicKey;
    use x509_cert::der::{DecodePem, Encode};
    let webhook_id = c.part_str("webhook_id")?.to_owned();
    let cert = x509_cert::Certificate::from_pem(c.part("cert_pem")?)
        .map_err(|_| "cert_pem is not a PEM certificate".to_string())?;
    let spki = cert
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .map_err(|_| "cannot read the certificate's public key".to_string())?;
    let key = rsa::PublicKey::from_public_key_der(&spki)
        .map_err(|_| "the certificate's key is not RSA".to_string())?;
    Ok((webhook_id, rsa::pkcs1v15::VerifyingKey::new(key)))
}

/// An eBay public key as its Notification API returns it: PEM, possibly on one line
/// (`-----BEGIN PUBLIC KEY-----MFkw…==-----END PUBLIC KEY-----`).
fn ebay_key(text: &[u8]) -> Result<p256::ecdsa::VerifyingKey, String> {
    use p256::pkcs8::DecodePublicKey;
    let der = public_key_der(text).ok_or("the public key must be PEM or base64 DER")?;
    p256::ecdsa::VerifyingKey::from_public_key_der(&der)
        .map_err(|_| "not a P-256 public key".to_string())
}

/// An RSA public key as PEM (`BEGIN PUBLIC KEY`, SubjectPublicKeyInfo), checked with
/// SHA-256 and PKCS#1 v1.5 padding.
fn rsa_pem_key(text: &[u8]) -> Result<rsa::pkcs1v15::VerifyingKey<sha2::Sha256>, String> {
    use rsa::pkcs8::DecodePublicKey;
    let der = public_key_der(text).ok_or("the public key must be PEM (BEGIN PUBLIC KEY)")?;
    let key = rsa::PublicKey::from_public_key_der(&der)
        .map_err(|_| "not an RSA public key".to_string())?;
    Ok(rsa::pkcs1v15::VerifyingKey::new(key))
}

/// The Ed25519 keys of a JWKS (`{"keys":[…]}`), of one JWK, or one key's `x` in
/// base64url: every `OKP`/`Ed25519` key, others skipped; none at all is an error.
fn ed25519_jwks(text: &[u8]) -> Result<Vec<ed25519_dalek::VerifyingKey>, String> {
    let one = |x: &str| -> Result<ed25519_dalek::VerifyingKey, String> {
        let raw: [u8; 32] = decode_base64url(x)
            .and_then(|r| r.try_into().ok())
            .ok_or("an Ed25519 key's x must be 32 bytes in base64url")?;
        ed25519_dalek::VerifyingKey::from_bytes(&raw)
            .map_err(|_| "not a valid Ed25519 public key".to_string())
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(text) else {
        let x = std::str::from_utf8(text).map_err(|_| "the key must be text".to_string())?;
        return Ok(vec![one(x)?]);
    };
    let jwks: Vec<&serde_json::Value> = match json.get("keys").and_then(|k| k.as_array()) {
        Some(keys) => keys.iter().collect(),
        None => vec![&json],
    };
    let keys = jwks
        .into_iter()
        .filter(|k| {
            k.get("kty").and_then(|v| v.as_str()) == Some("OKP")
                && k.get("crv").and_then(|v| v.as_str()) == Some("Ed25519")
        })
        .map(|k| one(k.get("x").and_then(|v| v.as_str()).unwrap_or_default()))
        .collect::<Result<Vec<_>, String>>()?;
    if keys.is_empty() {
        return Err("the JWKS holds no Ed25519 (OKP) key".into());
    }
    Ok(keys)
}

/// The DER of a `BEGIN PUBLIC KEY` PEM, on one line or several (or bare base64 DER).
fn public_key_der(text: &[u8]) -> Option<Vec<u8>> {
    let body: String = std::str::from_utf8(text)
        .ok()?
        .replace("-----BEGIN PUBLIC KEY-----", "")
        .replace("-----END PUBLIC KEY-----", "")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    decode_base64(&body)
}
