//! HMAC signatures in headers that the template scheme cannot express: Box (two keys,
//! one header each), DocuSign (any of `X-DocuSign-Signature-1..N`), Netlify (a JWS
//! HS256 whose claims carry the body's SHA-256) and Recharge (a plain SHA-256 of the
//! secret and the body).

use http::HeaderName;
use serde_json::Value;

use super::{b64, first, h, jwt_hs256, jwt_parts, need, sha256_hex};
use crate::provider::mac::{MacKey, ct_eq, decode_base64};
use crate::provider::timestamp::{TsFormat, check_window};
use crate::provider::{Inbound, VerifyError, header_once};
use crate::secret::Secret;

pub(super) fn verify_box(
    keys: &[(Option<MacKey>, Option<MacKey>)],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    if need(hs, "box-signature-version")? != "1"
        || need(hs, "box-signature-algorithm")? != "HmacSHA256"
    {
        return Err(VerifyError::Malformed("box-signature-version".into()));
    }
    let ts = need(hs, "box-delivery-timestamp")?;
    let ts_ms = TsFormat::Iso8601.parse_ms(ts)?;
    let primary = need(hs, "box-signature-primary")
        .ok()
        .and_then(decode_base64);
    let secondary = need(hs, "box-signature-secondary")
        .ok()
        .and_then(decode_base64);
    let parts: [&[u8]; 2] = [req.body, ts.as_bytes()];
    let i = first(keys, |(p, s)| {
        let check = |k: &Option<MacKey>, sig: &Option<Vec<u8>>| match (k, sig) {
            (Some(k), Some(sig)) => k.tag(&parts).matches(sig),
            _ => false,
        };
        check(p, &primary) | check(s, &secondary)
    })?;
    check_window(ts_ms, now, tol)?;
    Ok(i)
}

pub(super) fn sign_box(
    keys: &[(Option<MacKey>, Option<MacKey>)],
    req: &Inbound<'_>,
    now: u64,
) -> Option<Vec<(HeaderName, String)>> {
    let (primary, secondary) = keys.first()?;
    let ts = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(now),
    )
    .to_string();
    let mut out = vec![
        (h("box-signature-version"), "1".into()),
        (h("box-signature-algorithm"), "HmacSHA256".into()),
        (h("box-delivery-timestamp"), ts.clone()),
    ];
    if let Some(k) = primary {
        out.push((
            h("box-signature-primary"),
            b64(k, &[req.body, ts.as_bytes()]),
        ));
    }
    if let Some(k) = secondary {
        out.push((
            h("box-signature-secondary"),
            b64(k, &[req.body, ts.as_bytes()]),
        ));
    }
    Some(out)
}

pub(super) fn verify_docusign(keys: &[MacKey], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let mut sigs: Vec<Vec<u8>> = Vec::new();
    for name in hs
        .keys()
        .filter(|n| n.as_str().starts_with("x-docusign-signature-"))
    {
        // header_once refuses a name sent twice.
        if let Some(sig) = decode_base64(header_once(hs, name)?) {
            sigs.push(sig);
        }
    }
    if sigs.is_empty() {
        return Err(VerifyError::MissingHeader("x-docusign-signature-1".into()));
    }
    first(keys, |k| {
        let tag = k.tag(&[req.body]);
        tag.matches_any(&sigs)
    })
}

pub(super) fn sign_docusign(
    keys: &[MacKey],
    req: &Inbound<'_>,
) -> Option<Vec<(HeaderName, String)>> {
    Some(vec![(
        h("x-docusign-signature-1"),
        b64(keys.first()?, &[req.body]),
    )])
}

pub(super) fn verify_netlify(keys: &[MacKey], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let (header, payload, input, sig) = jwt_parts(need(hs, "x-webhook-signature")?)?;
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return Err(VerifyError::Malformed("x-webhook-signature".into()));
    }
    let i = first(keys, |k| k.tag(&[input.as_bytes()]).matches(&sig))?;
    let want = payload
        .get("sha256")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if payload.get("iss").and_then(Value::as_str) != Some("netlify")
        || !ct_eq(sha256_hex(req.body).as_bytes(), want.as_bytes())
    {
        return Err(VerifyError::BadSignature);
    }
    Ok(i)
}

pub(super) fn sign_netlify(
    keys: &[MacKey],
    req: &Inbound<'_>,
) -> Option<Vec<(HeaderName, String)>> {
    let claims = serde_json::json!({ "iss": "netlify", "sha256": sha256_hex(req.body) });
    Some(vec![(
        h("x-webhook-signature"),
        jwt_hs256(keys.first()?, &claims),
    )])
}

/// The SHA-256 of `secret ‖ body`, Recharge's `X-Recharge-Hmac-Sha256` (despite the name,
/// not an HMAC: the secret is hashed in front of the body).
fn recharge_digest(secret: &Secret, body: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    Sha256::new()
        .chain_update(secret.expose())
        .chain_update(body)
        .finalize()
        .to_vec()
}

pub(super) fn verify_recharge(secrets: &[Secret], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let name = "x-recharge-hmac-sha256";
    let sig = hex::decode(need(req.headers, name)?.trim())
        .map_err(|_| VerifyError::Malformed(name.into()))?;
    first(secrets, |s| ct_eq(&recharge_digest(s, req.body), &sig))
}

pub(super) fn sign_recharge(
    secrets: &[Secret],
    req: &Inbound<'_>,
) -> Option<Vec<(HeaderName, String)>> {
    let s = secrets.first()?;
    Some(vec![(
        h("x-recharge-hmac-sha256"),
        hex::encode(recharge_digest(s, req.body)),
    )])
}

/// Worldline: `X-GCS-Signature` is the base64 HMAC-SHA256 of the body under the secret
/// whose ID `X-GCS-KeyId` names; a key ID the route does not hold is refused.
pub(super) fn verify_worldline(
    keys: &[(String, MacKey)],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let sig = decode_base64(need(hs, "x-gcs-signature")?)
        .ok_or_else(|| VerifyError::Malformed("x-gcs-signature".into()))?;
    let key_id = need(hs, "x-gcs-keyid")?;
    first(keys, |(id, k)| {
        ct_eq(id.as_bytes(), key_id.as_bytes()) && k.tag(&[req.body]).matches(&sig)
    })
}

pub(super) fn sign_worldline(
    keys: &[(String, MacKey)],
    req: &Inbound<'_>,
) -> Option<Vec<(HeaderName, String)>> {
    let (id, key) = keys.first()?;
    Some(vec![
        (h("x-gcs-signature"), b64(key, &[req.body])),
        (h("x-gcs-keyid"), id.clone()),
    ])
}
