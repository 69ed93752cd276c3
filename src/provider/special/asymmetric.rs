//! Signatures made with a private key the gateway never holds: Discord (Ed25519),
//! SendGrid (ECDSA P-256), Plaid (JWT ES256 over the body's SHA-256) and PayPal (RSA
//! over the transmission and the body's CRC-32). Verifying costs more than an HMAC.

use p256::ecdsa::signature::Verifier as _;
use serde_json::Value;
use sha2::Sha256;

use super::{first, jwt_parts, need, sha256_hex, split_url};
use crate::provider::mac::{ct_eq, decode_base64};
use crate::provider::timestamp::{TsFormat, check_window};
use crate::provider::{Inbound, VerifyError};

pub(super) fn verify_discord(
    keys: &[ed25519_dalek::VerifyingKey],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let sig = hex::decode(need(hs, "x-signature-ed25519")?)
        .map_err(|_| VerifyError::Malformed("x-signature-ed25519".into()))?;
    let ts = need(hs, "x-signature-timestamp")?;
    let sig: [u8; 64] = sig
        .try_into()
        .map_err(|_| VerifyError::Malformed("x-signature-ed25519".into()))?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    let msg = [ts.as_bytes(), req.body].concat();
    let i = first(keys, |k| k.verify_strict(&msg, &sig).is_ok())?;
    if tol.is_some() {
        check_window(TsFormat::Seconds.parse_ms(ts)?, now, tol)?;
    }
    Ok(i)
}

/// Telnyx: `telnyx-signature-ed25519` (base64) over `telnyx-timestamp|body`.
pub(super) fn verify_telnyx(
    keys: &[ed25519_dalek::VerifyingKey],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let name = "telnyx-signature-ed25519";
    let sig: [u8; 64] = crate::provider::mac::decode_base64(need(hs, name)?)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| VerifyError::Malformed(name.into()))?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    let ts = need(hs, "telnyx-timestamp")?;
    let msg = [ts.as_bytes(), b"|", req.body].concat();
    let i = first(keys, |k| k.verify_strict(&msg, &sig).is_ok())?;
    check_window(TsFormat::Seconds.parse_ms(ts)?, now, tol)?;
    Ok(i)
}

pub(super) fn verify_sendgrid(
    keys: &[p256::ecdsa::VerifyingKey],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let name = "x-twilio-email-event-webhook-signature";
    let sig = decode_base64(need(hs, name)?).ok_or(VerifyError::Malformed(name.into()))?;
    let ts = need(hs, "x-twilio-email-event-webhook-timestamp")?;
    let sig =
        p256::ecdsa::Signature::from_der(&sig).map_err(|_| VerifyError::Malformed(name.into()))?;
    let sig = sig.normalize_s();
    let msg = [ts.as_bytes(), req.body].concat();
    let i = first(keys, |k| k.verify(&msg, &sig).is_ok())?;
    if tol.is_some() {
        check_window(TsFormat::Seconds.parse_ms(ts)?, now, tol)?;
    }
    Ok(i)
}

pub(super) fn verify_plaid(
    keys: &[(String, p256::ecdsa::VerifyingKey)],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let (header, payload, input, sig) = jwt_parts(need(hs, "plaid-verification")?)?;
    if header.get("alg").and_then(Value::as_str) != Some("ES256") || sig.len() != 64 {
        return Err(VerifyError::Malformed("plaid-verification".into()));
    }
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let sig = p256::ecdsa::Signature::from_slice(&sig).map_err(|_| VerifyError::BadSignature)?;
    let i = first(keys, |(k, key)| {
        k == kid && key.verify(input.as_bytes(), &sig.normalize_s()).is_ok()
    })?;
    let iat = payload
        .get("iat")
        .and_then(Value::as_u64)
        .ok_or(VerifyError::BadTimestamp)?;
    check_window(iat.saturating_mul(1000), now, tol)?;
    let want = payload
        .get("request_body_sha256")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !ct_eq(sha256_hex(req.body).as_bytes(), want.as_bytes()) {
        return Err(VerifyError::BadSignature);
    }
    Ok(i)
}

pub(super) fn verify_paypal(
    keys: &[(String, rsa::pkcs1v15::VerifyingKey<Sha256>)],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let id = need(hs, "paypal-transmission-id")?;
    let time = need(hs, "paypal-transmission-time")?;
    let sig = decode_base64(need(hs, "paypal-transmission-sig")?)
        .ok_or(VerifyError::Malformed("paypal-transmission-sig".into()))?;
    let cert_url = need(hs, "paypal-cert-url")?;
    if need(hs, "paypal-auth-algo")? != "SHA256withRSA" {
        return Err(VerifyError::Malformed("paypal-auth-algo".into()));
    }
    let on_paypal = split_url(cert_url).is_some_and(|(scheme, _, host, _, _)| {
        scheme == "https" && host.to_ascii_lowercase().ends_with(".paypal.com")
    });
    if !on_paypal {
        return Err(VerifyError::Malformed("paypal-cert-url".into()));
    }
    let sig = rsa::pkcs1v15::Signature::try_from(sig.as_slice())
        .map_err(|_| VerifyError::BadSignature)?;
    let crc = crc32fast::hash(req.body);
    let i = first(keys, |(webhook_id, key)| {
        let msg = format!("{id}|{time}|{webhook_id}|{crc}");
        rsa::signature::Verifier::verify(key, msg.as_bytes(), &sig).is_ok()
    })?;
    // The transmission time is signed: the window bounds how long a capture
    // (whose body is bound only by its CRC-32) stays usable.
    check_window(TsFormat::Iso8601.parse_ms(time)?, now, tol)?;
    Ok(i)
}

/// Circle (v2 notifications): `X-Circle-Signature` is a base64 DER ECDSA P-256 /
/// SHA-256 signature of the body by the key `X-Circle-Key-Id` names; a key ID the
/// route does not hold is refused.
pub(super) fn verify_circle(
    keys: &[(String, p256::ecdsa::VerifyingKey)],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let name = "x-circle-signature";
    let sig = decode_base64(need(hs, name)?)
        .and_then(|der| p256::ecdsa::Signature::from_der(&der).ok())
        .ok_or_else(|| VerifyError::Malformed(name.into()))?;
    let sig = sig.normalize_s();
    let key_id = need(hs, "x-circle-key-id")?;
    first(keys, |(id, key)| {
        id == key_id && key.verify(req.body, &sig).is_ok()
    })
}

/// eBay: `X-EBAY-SIGNATURE` is base64 of JSON `{alg, kid, signature, digest}`; the
/// signature is ECDSA P-256 with SHA-1 (the `digest` eBay's SDKs verify with) over the
/// body, by the key `kid` names. A key ID the route does not hold is refused.
pub(super) fn verify_ebay(
    keys: &[(String, p256::ecdsa::VerifyingKey)],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
    use sha1::Digest as _;
    let name = "x-ebay-signature";
    let bad = || VerifyError::Malformed(name.into());
    let header: Value = decode_base64(need(req.headers, name)?)
        .and_then(|j| serde_json::from_slice(&j).ok())
        .ok_or_else(bad)?;
    let field = |k: &str| header.get(k).and_then(Value::as_str).ok_or_else(bad);
    if !field("alg")?.eq_ignore_ascii_case("ecdsa")
        || !field("digest")?.eq_ignore_ascii_case("sha1")
    {
        return Err(bad());
    }
    let kid = field("kid")?;
    let sig = decode_base64(field("signature")?)
        .and_then(|der| p256::ecdsa::Signature::from_der(&der).ok())
        .ok_or_else(bad)?
        .normalize_s();
    let digest = sha1::Sha1::digest(req.body);
    first(keys, |(id, key)| {
        id == kid && key.verify_prehash(&digest, &sig).is_ok()
    })
}

/// Wise: `X-Signature-SHA256` is a base64 RSA (PKCS#1 v1.5) SHA-256 signature of the
/// body by one of Wise's published keys.
pub(super) fn verify_wise(
    keys: &[rsa::pkcs1v15::VerifyingKey<Sha256>],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let name = "x-signature-sha256";
    let sig = decode_base64(need(req.headers, name)?)
        .and_then(|s| rsa::pkcs1v15::Signature::try_from(s.as_slice()).ok())
        .ok_or_else(|| VerifyError::Malformed(name.into()))?;
    first(keys, |k| {
        rsa::signature::Verifier::verify(k, req.body, &sig).is_ok()
    })
}

/// fal: `X-Fal-Webhook-Signature` is a hex Ed25519 signature of
/// `request_id\nuser_id\ntimestamp\nhex(SHA-256(body))`, the first three from their
/// `X-Fal-Webhook-*` headers; returns the index of the credential whose key matched.
pub(super) fn verify_falai(
    keys: &[(usize, ed25519_dalek::VerifyingKey)],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let name = "x-fal-webhook-signature";
    let sig: [u8; 64] = hex::decode(need(hs, name)?)
        .ok()
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| VerifyError::Malformed(name.into()))?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    let request_id = need(hs, "x-fal-webhook-request-id")?;
    let user_id = need(hs, "x-fal-webhook-user-id")?;
    let ts = need(hs, "x-fal-webhook-timestamp")?;
    let msg = format!("{request_id}\n{user_id}\n{ts}\n{}", sha256_hex(req.body));
    let i = first(keys, |(_, k)| k.verify_strict(msg.as_bytes(), &sig).is_ok())?;
    check_window(TsFormat::Seconds.parse_ms(ts)?, now, tol)?;
    Ok(keys[i].0)
}
