//! Providers that sign nothing and offer a shared value instead, compared in
//! constant time: a header (GitLab, Okta), HTTP Basic auth (Postmark, Chargebee,
//! Pipedrive), a passcode in the body (Figma), a query token (Mailchimp), every
//! notification's `clientState` (Microsoft Graph), and monday.com's JWT, which does
//! not cover the body.

use http::HeaderName;
use serde_json::Value;

use super::{first, form, form_once, h, json, jwt_hs256, jwt_parts, need, str_of};
use crate::provider::mac::{MacKey, ct_eq, encode_base64};
use crate::provider::{Inbound, VerifyError, header_once};
use crate::secret::Secret;

pub(super) fn verify_token(
    header: &HeaderName,
    values: &[Secret],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let got = header_once(hs, header)?;
    first(values, |v| ct_eq(v.expose(), got.as_bytes()))
}

pub(super) fn verify_basic_auth(
    values: &[Secret],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let got = need(hs, "authorization")?;
    first(values, |v| ct_eq(v.expose(), got.as_bytes()))
}

pub(super) fn verify_passcode(values: &[Secret], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let got = str_of(json(req.body).as_ref().and_then(|j| j.get("passcode")));
    first(values, |v| ct_eq(v.expose(), got.as_bytes()))
}

pub(super) fn verify_query_token(
    values: &[Secret],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let query = form(req.query.unwrap_or_default().as_bytes());
    let got = form_once(&query, "token")?.unwrap_or_default();
    first(values, |v| ct_eq(v.expose(), got.as_bytes()))
}

pub(super) fn verify_client_state(
    values: &[Secret],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let j = json(req.body).ok_or(VerifyError::Malformed("body".into()))?;
    let items: Vec<String> = j
        .get("value")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|i| str_of(i.get("clientState"))).collect())
        .unwrap_or_default();
    if items.is_empty() {
        return Err(VerifyError::MissingHeader("clientState".into()));
    }
    first(values, |v| {
        items.iter().all(|s| ct_eq(v.expose(), s.as_bytes()))
    })
}

pub(super) fn verify_monday(
    keys: &[MacKey],
    req: &Inbound<'_>,
    now: u64,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let auth = need(hs, "authorization")?;
    let token = match auth.get(..7) {
        Some(p) if p.eq_ignore_ascii_case("bearer ") => &auth[7..],
        _ => auth,
    };
    let (header, payload, input, sig) = jwt_parts(token)?;
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return Err(VerifyError::Malformed("authorization".into()));
    }
    let i = first(keys, |k| k.tag(&[input.as_bytes()]).matches(&sig))?;
    let exp = payload.get("exp").and_then(Value::as_u64).unwrap_or(0);
    if exp < now {
        return Err(VerifyError::TimestampTooOld {
            by_ms: (now - exp).saturating_mul(1000),
        });
    }
    Ok(i)
}

pub(super) fn sign_monday(keys: &[MacKey], now: u64) -> Option<Vec<(HeaderName, String)>> {
    let claims = serde_json::json!({ "exp": now + 300 });
    Some(vec![(
        h("authorization"),
        jwt_hs256(keys.first()?, &claims),
    )])
}

/// The first credential as the header value a provider sends (`hookgate sign`);
/// `None` when it is not text a header can carry.
pub(super) fn value(values: &[Secret]) -> Option<String> {
    let v = std::str::from_utf8(values.first()?.expose()).ok()?;
    http::HeaderValue::from_str(v).is_ok().then(|| v.to_owned())
}

/// `"Basic " + base64(user:password)` for a configured `user:password`: the header
/// value is the credential itself, so it is kept as a [`Secret`] (redacted in `Debug`).
pub fn basic_auth_header(credential: &[u8]) -> Secret {
    Secret::new(format!("Basic {}", encode_base64(credential)).into_bytes())
}
