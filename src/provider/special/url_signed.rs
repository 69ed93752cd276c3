//! Signatures that cover the URL the provider called: Twilio (URL + sorted form
//! parameters, or `bodySHA256`), Mandrill (URL + sorted form fields), HubSpot (v3:
//! method + URI + body + timestamp; v1/v2: SHA-256 of secret + …), Contentful (the
//! canonical request) and Plivo (V3: URL + sorted parameters + nonce; V2: URL + nonce).

use http::{HeaderName, Method};
use sha2::{Digest, Sha256};

use super::{b64, first, form, form_once, h, need, sha256_hex, split_url};
use crate::provider::mac::{MacKey, ct_eq, decode_base64};
use crate::provider::timestamp::{TsFormat, check_window};
use crate::provider::{Inbound, VerifyError, header_once};
use crate::secret::Secret;

pub(super) fn verify_twilio(keys: &[MacKey], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let sig = decode_base64(need(hs, "x-twilio-signature")?)
        .ok_or(VerifyError::Malformed("x-twilio-signature".into()))?;
    let u = url(req)?;
    let query = u.split_once('?').map(|(_, q)| q).unwrap_or_default();
    let mut params: Vec<(String, String)> = Vec::new();
    if let Some((_, want)) =
        form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "bodySHA256")
    {
        if !ct_eq(sha256_hex(req.body).as_bytes(), want.as_bytes()) {
            return Err(VerifyError::BadSignature);
        }
    } else if req.method == Method::POST {
        params = form(req.body);
    }
    let tail = twilio_params(params);
    let variants = twilio_url_variants(u);
    first(keys, |k| {
        variants
            .iter()
            .any(|v| k.tag(&[v.as_bytes(), tail.as_bytes()]).matches(&sig))
    })
}

pub(super) fn sign_twilio(keys: &[MacKey], req: &Inbound<'_>) -> Option<Vec<(HeaderName, String)>> {
    let u = req.url?;
    let params = if u.contains("bodySHA256=") {
        Vec::new()
    } else {
        form(req.body)
    };
    let tail = twilio_params(params);
    Some(vec![(
        h("x-twilio-signature"),
        b64(keys.first()?, &[u.as_bytes(), tail.as_bytes()]),
    )])
}

pub(super) fn verify_mandrill(keys: &[MacKey], req: &Inbound<'_>) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let sig = decode_base64(need(hs, "x-mandrill-signature")?)
        .ok_or(VerifyError::Malformed("x-mandrill-signature".into()))?;
    form_fields_once(&form(req.body))?;
    let tail = mandrill_params(req.body);
    let u = url(req)?;
    first(keys, |k| {
        k.tag(&[u.as_bytes(), tail.as_bytes()]).matches(&sig)
    })
}

pub(super) fn sign_mandrill(
    keys: &[MacKey],
    req: &Inbound<'_>,
) -> Option<Vec<(HeaderName, String)>> {
    let tail = mandrill_params(req.body);
    Some(vec![(
        h("x-mandrill-signature"),
        b64(keys.first()?, &[req.url?.as_bytes(), tail.as_bytes()]),
    )])
}

pub(super) fn verify_hubspot(
    keys: &[MacKey],
    raw: &[Secret],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let method = req.method.as_str().as_bytes();
    if let Ok(sig) = need(hs, "x-hubspot-signature-v3") {
        let sig =
            decode_base64(sig).ok_or(VerifyError::Malformed("x-hubspot-signature-v3".into()))?;
        let ts = need(hs, "x-hubspot-request-timestamp")?;
        let ts_ms = TsFormat::Millis.parse_ms(ts)?;
        let uri = hubspot_uri(req.url.ok_or(VerifyError::NeedsPublicUrl("HubSpot v3"))?);
        let i = first(keys, |k| {
            k.tag(&[method, uri.as_bytes(), req.body, ts.as_bytes()])
                .matches(&sig)
        })?;
        check_window(ts_ms, now, tol)?;
        return Ok(i);
    }
    let sig = hex::decode(need(hs, "x-hubspot-signature")?)
        .map_err(|_| VerifyError::Malformed("x-hubspot-signature".into()))?;
    let version = need(hs, "x-hubspot-signature-version")
        .unwrap_or("v1")
        .to_ascii_lowercase();
    if version == "v2" && req.url.is_none() {
        return Err(VerifyError::NeedsPublicUrl("HubSpot v2"));
    }
    let u = req.url.unwrap_or_default();
    first(raw, |s| {
        let digest = match version.as_str() {
            "v1" => Sha256::new()
                .chain_update(s.expose())
                .chain_update(req.body)
                .finalize(),
            "v2" => Sha256::new()
                .chain_update(s.expose())
                .chain_update(method)
                .chain_update(u.as_bytes())
                .chain_update(req.body)
                .finalize(),
            _ => return false,
        };
        ct_eq(&digest, &sig)
    })
}

pub(super) fn sign_hubspot(
    keys: &[MacKey],
    raw: &[Secret],
    req: &Inbound<'_>,
    now: u64,
) -> Option<Vec<(HeaderName, String)>> {
    let Some(url) = req.url else {
        // No public_url: v1, the body-only signature (SHA-256 of secret + body).
        let digest = Sha256::new()
            .chain_update(raw.first()?.expose())
            .chain_update(req.body)
            .finalize();
        return Some(vec![
            (h("x-hubspot-signature"), hex::encode(digest)),
            (h("x-hubspot-signature-version"), "v1".to_owned()),
        ]);
    };
    let ts = now.saturating_mul(1000).to_string();
    let uri = hubspot_uri(url);
    let sig = b64(
        keys.first()?,
        &[
            req.method.as_str().as_bytes(),
            uri.as_bytes(),
            req.body,
            ts.as_bytes(),
        ],
    );
    Some(vec![
        (h("x-hubspot-signature-v3"), sig),
        (h("x-hubspot-request-timestamp"), ts),
    ])
}

pub(super) fn verify_contentful(
    keys: &[MacKey],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let sig = hex::decode(need(hs, "x-contentful-signature")?)
        .map_err(|_| VerifyError::Malformed("x-contentful-signature".into()))?;
    let signed: Vec<String> = need(hs, "x-contentful-signed-headers")?
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    let ts = need(hs, "x-contentful-timestamp")?;
    let ts_ms = TsFormat::Millis.parse_ms(ts)?;
    let tol_ms = tol.map(|t| t.saturating_mul(1000));
    if let Some(t) = tol_ms {
        let now_ms = now.saturating_mul(1000);
        if now_ms.saturating_sub(ts_ms) >= t {
            return Err(VerifyError::TimestampTooOld {
                by_ms: now_ms.saturating_sub(ts_ms) - t,
            });
        }
        if ts_ms.saturating_sub(now_ms) > t {
            return Err(VerifyError::TimestampInFuture {
                by_ms: ts_ms.saturating_sub(now_ms) - t,
            });
        }
    }
    let mut picked = std::collections::BTreeMap::new();
    for name in &signed {
        let Ok(hname) = HeaderName::try_from(name.as_str()) else {
            continue;
        };
        if hs.contains_key(&hname) {
            // A signed header sent twice is refused, not guessed at.
            picked.insert(name.clone(), header_once(hs, &hname)?.to_owned());
        }
    }
    picked.insert("x-contentful-timestamp".into(), ts.to_owned());
    let names: Vec<String> = picked.keys().cloned().collect();
    picked.insert("x-contentful-signed-headers".into(), names.join(","));
    let canon_headers: Vec<String> = picked.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    let u = url(req)?;
    let path = split_url(u).map(|(.., rest)| rest).unwrap_or("/");
    let path = path.split('#').next().unwrap_or(path);
    let head = format!(
        "{}\n{}\n{}\n",
        req.method.as_str(),
        contentful_path(path),
        canon_headers.join(";")
    );
    first(keys, |k| k.tag(&[head.as_bytes(), req.body]).matches(&sig))
}

pub(super) fn sign_contentful(
    keys: &[MacKey],
    req: &Inbound<'_>,
    now: u64,
) -> Option<Vec<(HeaderName, String)>> {
    let ts = now.saturating_mul(1000).to_string();
    let path = split_url(req.url?)
        .map(|(.., rest)| rest)
        .unwrap_or_default();
    let head = format!(
        "{}\n{}\nx-contentful-signed-headers:x-contentful-signed-headers,x-contentful-timestamp;x-contentful-timestamp:{ts}\n",
        req.method.as_str(),
        contentful_path(path)
    );
    let sig = hex::encode(keys.first()?.tag(&[head.as_bytes(), req.body]).as_bytes());
    Some(vec![
        (h("x-contentful-signature"), sig),
        (
            h("x-contentful-signed-headers"),
            "x-contentful-signed-headers,x-contentful-timestamp".into(),
        ),
        (h("x-contentful-timestamp"), ts),
    ])
}

/// Refuses a form that names any field twice (Mandrill signs each key with its
/// first value only, so a second copy would be unsigned).
fn form_fields_once(fields: &[(String, String)]) -> Result<(), VerifyError> {
    let mut names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(VerifyError::Duplicated(w[0].to_owned())),
        None => Ok(()),
    }
}

/// Twilio's signed parameters: name + each distinct value, names sorted, values
/// sorted per name.
fn twilio_params(mut params: Vec<(String, String)>) -> String {
    params.sort();
    params.dedup();
    params.iter().map(|(k, v)| format!("{k}{v}")).collect()
}

/// Mandrill's signed parameters: each key + its first value, keys sorted.
fn mandrill_params(body: &[u8]) -> String {
    let mut params = form(body);
    params.sort_by(|a, b| a.0.cmp(&b.0));
    params.dedup_by(|a, b| a.0 == b.0);
    params.iter().map(|(k, v)| format!("{k}{v}")).collect()
}

/// The URL as signed: `public_url` plus the query as received.
fn url<'a>(req: &Inbound<'a>) -> Result<&'a str, VerifyError> {
    req.url.ok_or(VerifyError::Malformed("public_url".into()))
}

/// Twilio signs the URL either with or without the default port; try both.
fn twilio_url_variants(u: &str) -> Vec<String> {
    let Some((scheme, userinfo, host, port, rest)) = split_url(u) else {
        return vec![u.to_owned()];
    };
    let host = host.to_ascii_lowercase();
    let port = port.map(str::to_owned).unwrap_or_else(|| {
        if scheme == "https" {
            "443".into()
        } else {
            "80".into()
        }
    });
    vec![
        format!("{scheme}://{userinfo}{host}{rest}"),
        format!("{scheme}://{userinfo}{host}:{port}{rest}"),
    ]
}

/// HubSpot decodes these escapes in the URI before signing (v3).
fn hubspot_uri(uri: &str) -> String {
    const KEEP: &[(&str, char)] = &[
        ("%3A", ':'),
        ("%2F", '/'),
        ("%3F", '?'),
        ("%40", '@'),
        ("%21", '!'),
        ("%24", '$'),
        ("%27", '\''),
        ("%28", '('),
        ("%29", ')'),
        ("%2A", '*'),
        ("%2C", ','),
        ("%3B", ';'),
    ];
    let mut out = String::with_capacity(uri.len());
    let mut i = 0;
    while i < uri.len() {
        let rest = &uri[i..];
        if rest.starts_with('%') && rest.len() >= 3 && rest.is_char_boundary(3) {
            let esc = rest[..3].to_ascii_uppercase();
            if let Some((_, c)) = KEEP.iter().find(|(e, _)| *e == esc) {
                out.push(*c);
                i += 3;
                continue;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8().max(1);
    }
    out
}

/// Contentful's path canonicalisation (encodeURI over the path, with the query first
/// escaped as querystring.escape does), byte for byte as their toolkit computes it.
fn contentful_path(path: &str) -> String {
    const URI_KEEP: &str =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'()";
    fn pct(s: &str, keep: &str) -> String {
        let mut out = String::new();
        for c in s.chars() {
            if keep.contains(c) {
                out.push(c);
            } else {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
        out
    }
    let (pathname, search) = path.split_once('?').unwrap_or((path, ""));
    let joined = if search.is_empty() {
        pathname.to_owned()
    } else {
        format!("{pathname}?{}", pct(search, URI_KEEP))
    };
    pct(&joined, &format!("{URI_KEEP};,/?:@&=+$#"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_helpers() {
        assert_eq!(
            twilio_url_variants("https://Example.com/x?y=1"),
            vec![
                "https://example.com/x?y=1".to_string(),
                "https://example.com:443/x?y=1".to_string()
            ]
        );
        assert_eq!(
            hubspot_uri("https://h.io/a%3Ab%40c%2fd%20e"),
            "https://h.io/a:b@c/d%20e"
        );
        assert_eq!(
            contentful_path("/a b?x=1&y=é"),
            "/a%20b?x%253D1%2526y%253D%25C3%25A9"
        );
        assert!(split_url("nourl").is_none());
    }
}

/// Plivo: `X-Plivo-Signature-V3` (several joined by `,` while auth tokens rotate) is
/// base64 HMAC-SHA256 of [`plivo_v3_string`] + `.` + `X-Plivo-Signature-V3-Nonce`.
/// A request with no V3 header may carry `X-Plivo-Signature-V2`, base64 HMAC-SHA256 of
/// the URL without its query + `X-Plivo-Signature-V2-Nonce`; V2 covers neither the
/// body nor the query, so it is checked only for keys that accept it.
pub(super) fn verify_plivo(
    keys: &[(MacKey, bool)],
    req: &Inbound<'_>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let u = url(req)?;
    let decode_all = |name: &'static str, v: &str| {
        let sigs: Vec<Vec<u8>> = v
            .split(',')
            .filter_map(|s| decode_base64(s.trim()))
            .collect();
        if sigs.is_empty() {
            Err(VerifyError::Malformed(name.into()))
        } else {
            Ok(sigs)
        }
    };
    if hs.contains_key("x-plivo-signature-v3") {
        let sigs = decode_all("x-plivo-signature-v3", need(hs, "x-plivo-signature-v3")?)?;
        let nonce = need(hs, "x-plivo-signature-v3-nonce")?;
        let signed = plivo_v3_string(req.method == Method::GET, u, req.body);
        return first(keys, |(k, _)| {
            k.tag(&[signed.as_bytes(), b".", nonce.as_bytes()])
                .matches_any(&sigs)
        });
    }
    let sigs = decode_all("x-plivo-signature-v2", need(hs, "x-plivo-signature-v2")?)?;
    let nonce = need(hs, "x-plivo-signature-v2-nonce")?;
    let base = u.split_once('?').map_or(u, |(b, _)| b);
    first(keys, |(k, v2)| {
        *v2 && k
            .tag(&[base.as_bytes(), nonce.as_bytes()])
            .matches_any(&sigs)
    })
}

/// What Plivo's V3 signs before the nonce (its SDKs' `construct_get_url` /
/// `construct_post_url`): the URL without its query; then, if there are query or form
/// parameters, `?` and the query parameters sorted by name (values sorted too) as
/// `name=value` joined by `&`; then `.` if there are both; then every form parameter,
/// sorted, as `name` + `value` with no separator. Names and values are decoded. A GET
/// has no form: its parameters are all in the query.
pub fn plivo_v3_string(get: bool, url: &str, body: &[u8]) -> String {
    use std::collections::BTreeMap;
    fn collect(src: &[u8], into: &mut BTreeMap<String, Vec<String>>) {
        for (k, v) in form_urlencoded::parse(src) {
            into.entry(k.into_owned()).or_default().push(v.into_owned());
        }
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut query_params = BTreeMap::new();
    collect(query.as_bytes(), &mut query_params);
    let mut form_params = BTreeMap::new();
    if !get {
        collect(body, &mut form_params);
    }
    let sorted = |vs: &Vec<String>| {
        let mut vs = vs.clone();
        vs.sort();
        vs
    };
    let query_string = query_params
        .iter()
        .flat_map(|(k, vs)| sorted(vs).into_iter().map(move |v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join("&");
    let mut out = base.to_owned();
    if !query_string.is_empty() || !form_params.is_empty() {
        out.push('?');
        out.push_str(&query_string);
    }
    if !query_string.is_empty() && !form_params.is_empty() {
        out.push('.');
    }
    for (k, vs) in &form_params {
        for v in sorted(vs) {
            out.push_str(k);
            out.push_str(&v);
        }
    }
    out
}

pub(super) fn sign_plivo(
    keys: &[(MacKey, bool)],
    req: &Inbound<'_>,
) -> Option<Vec<(HeaderName, String)>> {
    let (key, _) = keys.first()?;
    let u = req.url?;
    let nonce = "hookgate-test-nonce";
    let signed = plivo_v3_string(req.method == Method::GET, u, req.body);
    Some(vec![
        (
            h("x-plivo-signature-v3"),
            b64(key, &[signed.as_bytes(), b".", nonce.as_bytes()]),
        ),
        (h("x-plivo-signature-v3-nonce"), nonce.to_owned()),
    ])
}

#[cfg(test)]
mod plivo_tests {
    use super::*;

    #[test]
    fn v3_string_follows_plivos_construction() {
        let base = "https://example.com/answer";
        assert_eq!(plivo_v3_string(false, base, b""), base);
        assert_eq!(
            plivo_v3_string(false, base, b"b=2&a=1&a=0"),
            format!("{base}?a0a1b2")
        );
        assert_eq!(
            plivo_v3_string(false, &format!("{base}?z=1&y=%20"), b"b=2"),
            format!("{base}?y= &z=1.b2")
        );
        assert_eq!(
            plivo_v3_string(true, &format!("{base}?z=1&y=2"), b"ignored=1"),
            format!("{base}?y=2&z=1")
        );
    }
}

/// Mercado Pago: `x-signature: ts=<seconds>,v1=<hex>`, the HMAC-SHA256 under the
/// secret of the manifest [`mercado_pago_manifest`] (the query's `data.id`,
/// `x-request-id`, `ts`). Mercado Pago's own sources disagree on the case of `data.id`
/// (its docs lower-case an alphanumeric one, its Node SDK signs it as received): the
/// manifest is tried as received, then lower-cased. The body is not signed: a body
/// whose `data.id` differs from the signed one is refused (it names another resource
/// than the signature does); the rest of it is the sender's.
pub(super) fn verify_mercado_pago(
    keys: &[MacKey],
    req: &Inbound<'_>,
    now: u64,
    tol: Option<u64>,
) -> Result<usize, VerifyError> {
    let hs = req.headers;
    let (ts, sig) = mercado_pago_signature(need(hs, "x-signature")?)?;
    // Sent twice, it is refused: a handler might read the copy that was not signed.
    let request_id = if hs.contains_key("x-request-id") {
        Some(need(hs, "x-request-id")?.trim()).filter(|s| !s.is_empty())
    } else {
        None
    };
    let query = form(req.query.unwrap_or_default().as_bytes());
    let data_id = form_once(&query, "data.id")?
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let mut manifests = vec![mercado_pago_manifest(data_id, request_id, ts)];
    if let Some(id) = data_id.filter(|id| id.bytes().any(|b| b.is_ascii_uppercase())) {
        let lower = id.to_ascii_lowercase();
        manifests.push(mercado_pago_manifest(Some(&lower), request_id, ts));
    }
    let i = first(keys, |k| {
        manifests
            .iter()
            .any(|m| k.tag(&[m.as_bytes()]).matches(&sig))
    })?;
    check_window(TsFormat::Seconds.parse_ms(ts)?, now, tol)?;
    // The body's own data.id, where it has one, must be the signed one.
    if let Some(body_id) = super::json(req.body).and_then(|j| j.pointer("/data/id").cloned()) {
        let body_id = super::str_of(Some(&body_id));
        if !data_id.is_some_and(|id| id.eq_ignore_ascii_case(&body_id)) {
            return Err(VerifyError::BadSignature);
        }
    }
    Ok(i)
}

/// `ts` and the decoded `v1` of an `x-signature` header (`ts=…,v1=…`, any order,
/// other keys ignored).
fn mercado_pago_signature(v: &str) -> Result<(&str, Vec<u8>), VerifyError> {
    let bad = || VerifyError::Malformed("x-signature".into());
    let (mut ts, mut v1) = (None, None);
    for part in v.split(',') {
        let Some((k, val)) = part.split_once('=') else {
            continue;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "ts" => ts = Some(val.trim()),
            "v1" => v1 = Some(val.trim()),
            _ => {}
        }
    }
    let ts = ts
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(bad)?;
    let sig = hex::decode(v1.ok_or_else(bad)?).map_err(|_| bad())?;
    Ok((ts, sig))
}

/// What Mercado Pago signs: `id:<data.id>;request-id:<x-request-id>;ts:<ts>;`, a part
/// left out when its value is absent (its SDK's `buildManifest`).
fn mercado_pago_manifest(data_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
    let mut out = String::new();
    if let Some(id) = data_id {
        out.push_str(&format!("id:{id};"));
    }
    if let Some(r) = request_id {
        out.push_str(&format!("request-id:{r};"));
    }
    out.push_str(&format!("ts:{ts};"));
    out
}

/// Signs as Mercado Pago would at `now`: the query's `data.id` and the request's
/// `x-request-id` (`hookgate sign` puts the event ID there).
pub(super) fn sign_mercado_pago(
    keys: &[MacKey],
    req: &Inbound<'_>,
    now: u64,
) -> Option<Vec<(HeaderName, String)>> {
    let query = form(req.query.unwrap_or_default().as_bytes());
    let data_id = query
        .iter()
        .find(|(k, _)| k == "data.id")
        .map(|(_, v)| v.trim())
        .filter(|s| !s.is_empty());
    let request_id = req
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let ts = now.to_string();
    let manifest = mercado_pago_manifest(data_id, request_id, &ts);
    let sig = hex::encode(keys.first()?.tag(&[manifest.as_bytes()]).as_bytes());
    Some(vec![(h("x-signature"), format!("ts={ts},v1={sig}"))])
}

#[cfg(test)]
mod mercado_pago_tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;
    use crate::provider::mac::Algorithm;

    #[test]
    fn manifest_leaves_out_absent_parts() {
        assert_eq!(
            mercado_pago_manifest(Some("123"), Some("r-1"), "1700000000"),
            "id:123;request-id:r-1;ts:1700000000;"
        );
        assert_eq!(
            mercado_pago_manifest(None, Some("r-1"), "1"),
            "request-id:r-1;ts:1;"
        );
        assert_eq!(mercado_pago_manifest(None, None, "1"), "ts:1;");
    }

    #[test]
    fn upper_case_ids_verify_as_received_or_lower_cased() {
        let key = MacKey::new(Algorithm::Sha256, b"your_secret_key_here");
        let ts = "1742505638";
        let rid = "2066ca19-c6f1-498a-be75-1923005edd06";
        let verify = |signed_id: &str, query: &str, body: &[u8]| {
            let m = mercado_pago_manifest(Some(signed_id), Some(rid), ts);
            let sig = hex::encode(key.tag(&[m.as_bytes()]).as_bytes());
            let mut hs = HeaderMap::new();
            hs.insert(
                "x-signature",
                HeaderValue::from_str(&format!("ts={ts},v1={sig}")).expect("value"),
            );
            hs.insert("x-request-id", HeaderValue::from_static(rid));
            verify_mercado_pago(
                std::slice::from_ref(&key),
                &Inbound {
                    method: &Method::POST,
                    headers: &hs,
                    body,
                    query: Some(query),
                    url: None,
                },
                1_742_505_640,
                Some(300),
            )
        };
        let q = "data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3&type=order";
        assert_eq!(verify("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", q, b"{}"), Ok(0));
        assert_eq!(verify("ord01jq4s4ky8hwq6na5pxb65b3d3", q, b"{}"), Ok(0));
        assert_eq!(
            verify(
                "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3",
                q,
                br#"{"data":{"id":"ORD0"}}"#
            ),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(verify("other", q, b"{}"), Err(VerifyError::BadSignature));
    }
}
