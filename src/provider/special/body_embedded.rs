//! Signatures that travel inside the body: Mailgun (`signature{timestamp,token,
//! signature}`), Adyen (one HMAC per notification item) and Braintree (form
//! `bt_signature` over `bt_payload`). A field that carries a signature, a signed
//! payload or a verdict may appear only once.

use serde_json::Value;

use super::{first, form, form_once, json, str_of};
use crate::provider::mac::{MacKey, ct_eq, encode_base64};
use crate::provider::timestamp::{TsFormat, check_window};
use crate::provider::{Inbound, VerifyError};

pub(super) fn verify_mailgun(
    keys: &[MacKey],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let (ts, token, sig) = match json(req.body) {
        Some(j) if j.get("signature").is_some() => {
            let s = &j["signature"];
            (
                str_of(s.get("timestamp")),
                str_of(s.get("token")),
                str_of(s.get("signature")),
            )
        }
        _ => {
            let f = form(req.body);
            let get = |n: &str| -> Result<String, VerifyError> {
                Ok(form_once(&f, n)?.unwrap_or_default().to_owned())
            };
            (get("timestamp")?, get("token")?, get("signature")?)
        }
    };
    let ts_ms = TsFormat::Seconds.parse_ms(&ts)?;
    let sig = hex::decode(sig).map_err(|_| VerifyError::Malformed("signature".into()))?;
    let i = first(keys, |k| {
        k.tag(&[ts.as_bytes(), token.as_bytes()]).matches(&sig)
    })?;
    check_window(ts_ms, now, tol)?;
    Ok(i)
}

pub(super) fn verify_adyen(keys: &[MacKey], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let j = json(req.body).ok_or(VerifyError::Malformed("body".into()))?;
    let items: Vec<&Value> = j
        .get("notificationItems")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| i.get("NotificationRequestItem"))
                .collect()
        })
        .unwrap_or_default();
    if items.is_empty() {
        return Err(VerifyError::MissingHeader("notificationItems".into()));
    }
    first(keys, |k| {
        items.iter().all(|it| {
            let amount = it.get("amount");
            let fields = [
                str_of(it.get("pspReference")),
                str_of(it.get("originalReference")),
                str_of(it.get("merchantAccountCode")),
                str_of(it.get("merchantReference")),
                str_of(amount.and_then(|a| a.get("value"))),
                str_of(amount.and_then(|a| a.get("currency"))),
                str_of(it.get("eventCode")),
                str_of(it.get("success")),
            ];
            let want = str_of(it.pointer("/additionalData/hmacSignature"));
            let expected = encode_base64(k.tag(&[fields.join(":").as_bytes()]).as_bytes());
            ct_eq(expected.as_bytes(), want.as_bytes())
        })
    })
}

pub(super) fn verify_braintree(
    keys: &[(String, MacKey)],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let f = form(req.body);
    let get = |n: &str| -> Result<String, VerifyError> {
        Ok(form_once(&f, n)?.unwrap_or_default().to_owned())
    };
    let (sig_str, payload) = (get("bt_signature")?, get("bt_payload")?);
    let legal = !payload.is_empty()
        && payload
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=/\n".contains(&b));
    let challenge_like = (20..=40).contains(&payload.len())
        && payload
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !legal || challenge_like {
        return Err(VerifyError::Malformed("bt_payload".into()));
    }
    let pairs: Vec<(&str, &str)> = sig_str
        .split('&')
        .filter_map(|p| p.split_once('|'))
        .collect();
    first(keys, |(public_key, key)| {
        let Some((_, sig)) = pairs.iter().find(|(pk, _)| pk == public_key) else {
            return false;
        };
        let Ok(sig) = hex::decode(sig) else {
            return false;
        };
        let nl = format!("{payload}\n");
        key.tag(&[payload.as_bytes()]).matches(&sig) | key.tag(&[nl.as_bytes()]).matches(&sig)
    })
}
