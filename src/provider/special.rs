//! Schemes that are not an HMAC over a template: URL-signing (Twilio, Mandrill,
//! HubSpot, Contentful), several signature headers (Box, DocuSign), asymmetric
//! signatures (Discord Ed25519, SendGrid ECDSA, Plaid JWT ES256, PayPal RSA), JWTs
//! (Netlify, monday.com), signatures inside the body (Mailgun, Adyen, Braintree), and
//! the providers that sign nothing and offer a shared token instead.

use http::{HeaderMap, HeaderName, Method};
use p256::ecdsa::signature::Verifier as _;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::mac::{MacKey, ct_eq, decode_base64, decode_base64url, encode_base64};
use super::timestamp::{TsFormat, check_window};
use super::{Inbound, VerifyError, header_once};

/// The key data of a special scheme, one entry per configured credential.
#[derive(Debug, Clone)]
pub enum Special {
    Twilio {
        keys: Vec<MacKey>,
    },
    Mandrill {
        keys: Vec<MacKey>,
    },
    /// v3 HMAC keys and the raw secrets the v1/v2 SHA-256 scheme concatenates.
    HubSpot {
        keys: Vec<MacKey>,
        raw: Vec<crate::secret::Secret>,
    },
    Contentful {
        keys: Vec<MacKey>,
    },
    Box {
        keys: Vec<(Option<MacKey>, Option<MacKey>)>,
    },
    DocuSign {
        keys: Vec<MacKey>,
    },
    Discord {
        keys: Vec<ed25519_dalek::VerifyingKey>,
    },
    SendGrid {
        keys: Vec<p256::ecdsa::VerifyingKey>,
    },
    Plaid {
        keys: Vec<(String, p256::ecdsa::VerifyingKey)>,
    },
    PayPal {
        keys: Vec<(String, rsa::pkcs1v15::VerifyingKey<Sha256>)>,
    },
    Netlify {
        keys: Vec<MacKey>,
    },
    Monday {
        keys: Vec<MacKey>,
    },
    Mailgun {
        keys: Vec<MacKey>,
    },
    Adyen {
        keys: Vec<MacKey>,
    },
    Braintree {
        keys: Vec<(String, MacKey)>,
    },
    /// A header that must equal one of the configured values (GitLab, Okta).
    Token {
        header: HeaderName,
        values: Vec<crate::secret::Secret>,
    },
    /// HTTP Basic auth with `user:password` as configured (Postmark, Chargebee, Pipedrive).
    BasicAuth {
        values: Vec<crate::secret::Secret>,
    },
    /// A passcode inside the JSON body (Figma).
    Passcode {
        values: Vec<crate::secret::Secret>,
    },
    /// A token in the URL's query string (Mailchimp Marketing).
    QueryToken {
        values: Vec<crate::secret::Secret>,
    },
    /// Every notification's `clientState` (Microsoft Graph).
    ClientState {
        values: Vec<crate::secret::Secret>,
    },
}

fn h(name: &'static str) -> HeaderName {
    HeaderName::from_static(name)
}

fn need<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, VerifyError> {
    header_once(headers, &h(name))
}

fn json(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

/// Index of the first key for which `check` holds.
fn first<T>(keys: &[T], check: impl FnMut(&T) -> bool) -> Result<usize, VerifyError> {
    keys.iter().position(check).ok_or(VerifyError::BadSignature)
}

/// Form fields as (name, value) pairs, in order.
fn form(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The one value of a form field that carries a signature, a signed payload or a
/// verdict: a field sent twice is refused (the gateway would check one copy while a
/// handler might read the other). Absent is `None`.
fn form_once<'f>(
    fields: &'f [(String, String)],
    name: &str,
) -> Result<Option<&'f str>, VerifyError> {
    let mut values = fields.iter().filter(|(k, _)| k == name);
    let first = values.next().map(|(_, v)| v.as_str());
    if values.next().is_some() {
        return Err(VerifyError::Duplicated(name.to_owned()));
    }
    Ok(first)
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

/// Splits `scheme://netloc/rest` into (scheme, userinfo@, host, port, rest).
fn split_url(u: &str) -> Option<(&str, &str, &str, Option<&str>, &str)> {
    let (scheme, after) = u.split_once("://")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (netloc, rest) = after.split_at(end);
    let (userinfo, hostport) = match netloc.rfind('@') {
        Some(i) => (&netloc[..=i], &netloc[i + 1..]),
        None => ("", netloc),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p)),
        _ => (hostport, None),
    };
    Some((scheme, userinfo, host, port, rest))
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

/// Splits a JWT/JWS into its decoded header and payload and the signing input.
fn jwt_parts(token: &str) -> Result<(Value, Value, String, Vec<u8>), VerifyError> {
    let bad = || VerifyError::Malformed("jwt".into());
    let mut it = token.split('.');
    let (Some(h64), Some(p64), Some(s64), None) = (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(bad());
    };
    let header: Value =
        serde_json::from_slice(&decode_base64url(h64).ok_or_else(bad)?).map_err(|_| bad())?;
    let payload: Value =
        serde_json::from_slice(&decode_base64url(p64).ok_or_else(bad)?).map_err(|_| bad())?;
    let sig = decode_base64url(s64).ok_or_else(bad)?;
    Ok((header, payload, format!("{h64}.{p64}"), sig))
}

fn str_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => {
            if *b {
                "True".into()
            } else {
                "False".into()
            }
        }
        _ => String::new(),
    }
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

impl Special {
    /// Verifies `req` at `now` (unix seconds); returns the index of the matching secret.
    pub fn verify(
        &self,
        req: &Inbound<'_>,
        now: u64,
        tol: Option<u64>,
    ) -> Result<usize, VerifyError> {
        let hs = req.headers;
        match self {
            Self::Twilio { keys } => {
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
            Self::Mandrill { keys } => {
                let sig = decode_base64(need(hs, "x-mandrill-signature")?)
                    .ok_or(VerifyError::Malformed("x-mandrill-signature".into()))?;
                form_fields_once(&form(req.body))?;
                let tail = mandrill_params(req.body);
                let u = url(req)?;
                first(keys, |k| {
                    k.tag(&[u.as_bytes(), tail.as_bytes()]).matches(&sig)
                })
            }
            Self::HubSpot { keys, raw } => {
                let method = req.method.as_str().as_bytes();
                if let Ok(sig) = need(hs, "x-hubspot-signature-v3") {
                    let sig = decode_base64(sig)
                        .ok_or(VerifyError::Malformed("x-hubspot-signature-v3".into()))?;
                    let ts = need(hs, "x-hubspot-request-timestamp")?;
                    let ts_ms = TsFormat::Millis.parse_ms(ts)?;
                    let uri =
                        hubspot_uri(req.url.ok_or(VerifyError::NeedsPublicUrl("HubSpot v3"))?);
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
            Self::Contentful { keys } => {
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
                        return Err(VerifyError::TimestampTooOld);
                    }
                    if ts_ms.saturating_sub(now_ms) > t {
                        return Err(VerifyError::TimestampInFuture);
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
                let canon_headers: Vec<String> =
                    picked.iter().map(|(k, v)| format!("{k}:{v}")).collect();
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
            Self::Box { keys } => {
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
            Self::DocuSign { keys } => {
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
            Self::Discord { keys } => {
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
            Self::SendGrid { keys } => {
                let name = "x-twilio-email-event-webhook-signature";
                let sig =
                    decode_base64(need(hs, name)?).ok_or(VerifyError::Malformed(name.into()))?;
                let ts = need(hs, "x-twilio-email-event-webhook-timestamp")?;
                let sig = p256::ecdsa::Signature::from_der(&sig)
                    .map_err(|_| VerifyError::Malformed(name.into()))?;
                let sig = sig.normalize_s();
                let msg = [ts.as_bytes(), req.body].concat();
                let i = first(keys, |k| k.verify(&msg, &sig).is_ok())?;
                if tol.is_some() {
                    check_window(TsFormat::Seconds.parse_ms(ts)?, now, tol)?;
                }
                Ok(i)
            }
            Self::Plaid { keys } => {
                let (header, payload, input, sig) = jwt_parts(need(hs, "plaid-verification")?)?;
                if header.get("alg").and_then(Value::as_str) != Some("ES256") || sig.len() != 64 {
                    return Err(VerifyError::Malformed("plaid-verification".into()));
                }
                let kid = header
                    .get("kid")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let sig = p256::ecdsa::Signature::from_slice(&sig)
                    .map_err(|_| VerifyError::BadSignature)?;
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
            Self::PayPal { keys } => {
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
            Self::Netlify { keys } => {
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
            Self::Monday { keys } => {
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
                    return Err(VerifyError::TimestampTooOld);
                }
                Ok(i)
            }
            Self::Mailgun { keys } => {
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
                let sig =
                    hex::decode(sig).map_err(|_| VerifyError::Malformed("signature".into()))?;
                let i = first(keys, |k| {
                    k.tag(&[ts.as_bytes(), token.as_bytes()]).matches(&sig)
                })?;
                check_window(ts_ms, now, tol)?;
                Ok(i)
            }
            Self::Adyen { keys } => {
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
                        let expected =
                            encode_base64(k.tag(&[fields.join(":").as_bytes()]).as_bytes());
                        ct_eq(expected.as_bytes(), want.as_bytes())
                    })
                })
            }
            Self::Braintree { keys } => {
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
                    key.tag(&[payload.as_bytes()]).matches(&sig)
                        | key.tag(&[nl.as_bytes()]).matches(&sig)
                })
            }
            Self::Token { header, values } => {
                let got = header_once(hs, header)?;
                first(values, |v| ct_eq(v.expose(), got.as_bytes()))
            }
            Self::BasicAuth { values } => {
                let got = need(hs, "authorization")?;
                first(values, |v| ct_eq(v.expose(), got.as_bytes()))
            }
            Self::Passcode { values } => {
                let got = str_of(json(req.body).as_ref().and_then(|j| j.get("passcode")));
                first(values, |v| ct_eq(v.expose(), got.as_bytes()))
            }
            Self::QueryToken { values } => {
                let query = form(req.query.unwrap_or_default().as_bytes());
                let got = form_once(&query, "token")?.unwrap_or_default();
                first(values, |v| ct_eq(v.expose(), got.as_bytes()))
            }
            Self::ClientState { values } => {
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
        }
    }
}

/// `"Basic " + base64(user:password)` for a configured `user:password`: the header
/// value is the credential itself, so it is kept as a [`Secret`](crate::secret::Secret)
/// (redacted in `Debug`).
pub fn basic_auth_header(credential: &[u8]) -> crate::secret::Secret {
    crate::secret::Secret::new(format!("Basic {}", encode_base64(credential)).into_bytes())
}

impl Special {
    /// The headers a provider would send with `req`'s body at `now`, signed with the
    /// first credential; `None` where the signature lives in the body (Mailgun, Adyen,
    /// Braintree) or needs a private key the gateway does not hold.
    pub fn sign(&self, req: &Inbound<'_>, now: u64) -> Option<Vec<(HeaderName, String)>> {
        let b64 = |k: &MacKey, parts: &[&[u8]]| encode_base64(k.tag(parts).as_bytes());
        let jwt = |k: &MacKey, claims: Value| {
            use base64::Engine as _;
            let e = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
            let input = format!(
                "{}.{}",
                e(br#"{"alg":"HS256","typ":"JWT"}"#),
                e(claims.to_string().as_bytes())
            );
            let sig = e(k.tag(&[input.as_bytes()]).as_bytes());
            format!("{input}.{sig}")
        };
        Some(match self {
            Self::Twilio { keys } => {
                let u = req.url?;
                let params = if u.contains("bodySHA256=") {
                    Vec::new()
                } else {
                    form(req.body)
                };
                let tail = twilio_params(params);
                vec![(
                    h("x-twilio-signature"),
                    b64(keys.first()?, &[u.as_bytes(), tail.as_bytes()]),
                )]
            }
            Self::Mandrill { keys } => {
                let tail = mandrill_params(req.body);
                vec![(
                    h("x-mandrill-signature"),
                    b64(keys.first()?, &[req.url?.as_bytes(), tail.as_bytes()]),
                )]
            }
            Self::HubSpot { keys, raw } => {
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
                vec![
                    (h("x-hubspot-signature-v3"), sig),
                    (h("x-hubspot-request-timestamp"), ts),
                ]
            }
            Self::Contentful { keys } => {
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
                vec![
                    (h("x-contentful-signature"), sig),
                    (
                        h("x-contentful-signed-headers"),
                        "x-contentful-signed-headers,x-contentful-timestamp".into(),
                    ),
                    (h("x-contentful-timestamp"), ts),
                ]
            }
            Self::Box { keys } => {
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
                out
            }
            Self::DocuSign { keys } => {
                vec![(h("x-docusign-signature-1"), b64(keys.first()?, &[req.body]))]
            }
            Self::Netlify { keys } => {
                let claims =
                    serde_json::json!({ "iss": "netlify", "sha256": sha256_hex(req.body) });
                vec![(h("x-webhook-signature"), jwt(keys.first()?, claims))]
            }
            Self::Monday { keys } => {
                let claims = serde_json::json!({ "exp": now + 300 });
                vec![(h("authorization"), jwt(keys.first()?, claims))]
            }
            _ => return None,
        })
    }
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

#[cfg(test)]
mod form_tests {
    use super::*;
    use crate::provider::mac::Algorithm;

    #[test]
    fn repeated_verdict_fields_in_forms_and_queries_are_refused() {
        let key = MacKey::new(Algorithm::Sha256, b"mailgun-key");
        let scheme = Special::Mailgun {
            keys: vec![key.clone()],
        };
        let (ts, token) = ("1767225595", "tok");
        let sig = hex::encode(key.tag(&[ts.as_bytes(), token.as_bytes()]).as_bytes());
        let (m, h) = (Method::POST, HeaderMap::new());
        let verify = |body: &str| {
            scheme.verify(
                &Inbound {
                    method: &m,
                    headers: &h,
                    body: body.as_bytes(),
                    query: None,
                    url: None,
                },
                1_767_225_600,
                Some(300),
            )
        };
        let form = format!("timestamp={ts}&token={token}&signature={sig}&event=delivered");
        // Mailchimp's query token, sent twice, is refused too.
        let mailchimp = Special::QueryToken {
            values: vec![crate::secret::Secret::new(b"mc".to_vec())],
        };
        let token = |q: &'static str| {
            mailchimp.verify(
                &Inbound {
                    method: &m,
                    headers: &h,
                    body: b"",
                    query: Some(q),
                    url: None,
                },
                0,
                None,
            )
        };
        assert_eq!(token("token=mc"), Ok(0));
        assert_eq!(
            token("token=mc&token=other"),
            Err(VerifyError::Duplicated("token".into()))
        );
        assert_eq!(verify(&form), Ok(0));
        for extra in ["&signature=00", "&token=other", "&timestamp=1"] {
            assert!(
                matches!(
                    verify(&format!("{form}{extra}")),
                    Err(VerifyError::Duplicated(_))
                ),
                "{extra}"
            );
        }
    }
}
