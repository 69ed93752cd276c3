//! Schemes that are not an HMAC over a template, one module per family:
//! `url_signed` (Twilio, Mandrill, HubSpot, Contentful, Plivo; Mercado Pago's query), `header_hmac` (Box's two
//! keys, DocuSign's numbered headers, Netlify's JWS), `asymmetric` (Discord Ed25519,
//! SendGrid ECDSA, Plaid JWT ES256, PayPal RSA), `body_embedded` (Mailgun, Adyen,
//! Braintree) and `token` (the providers that sign nothing, or a JWT that does not
//! cover the body, and offer a shared value instead). [`Special`] holds the keys and
//! dispatches to the family; the helpers below are shared by several families.

use http::{HeaderMap, HeaderName};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::mac::{MacKey, decode_base64url, encode_base64};
use super::{Inbound, VerifyError, header_once};
use crate::secret::Secret;

mod asymmetric;
mod aws_sns;
mod body_embedded;
mod header_hmac;
mod token;
mod url_signed;

pub use url_signed::plivo_v3_string;

pub use aws_sns::AwsSns;
pub use token::basic_auth_header;

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
        raw: Vec<Secret>,
    },
    Contentful {
        keys: Vec<MacKey>,
    },
    /// Plivo: each auth token, and whether it accepts V2 signatures.
    Plivo {
        keys: Vec<(MacKey, bool)>,
    },
    /// Mercado Pago: HMAC-SHA256 of the query's `data.id`, `x-request-id` and the
    /// timestamp (the body is not signed).
    MercadoPago {
        keys: Vec<MacKey>,
    },
    Box {
        keys: Vec<(Option<MacKey>, Option<MacKey>)>,
    },
    DocuSign {
        keys: Vec<MacKey>,
    },
    /// Worldline: each secret with the key ID `X-GCS-KeyId` names it by.
    Worldline {
        keys: Vec<(String, MacKey)>,
    },
    Discord {
        keys: Vec<ed25519_dalek::VerifyingKey>,
    },
    /// Telnyx: Ed25519 (base64) over `timestamp|body`.
    Telnyx {
        keys: Vec<ed25519_dalek::VerifyingKey>,
    },
    SendGrid {
        keys: Vec<p256::ecdsa::VerifyingKey>,
    },
    /// eBay: each public key with the `kid` its signature header names it by.
    Ebay {
        keys: Vec<(String, p256::ecdsa::VerifyingKey)>,
    },
    /// Circle: each public key with the key ID `X-Circle-Key-Id` names it by.
    Circle {
        keys: Vec<(String, p256::ecdsa::VerifyingKey)>,
    },
    Plaid {
        keys: Vec<(String, p256::ecdsa::VerifyingKey)>,
    },
    PayPal {
        keys: Vec<(String, rsa::pkcs1v15::VerifyingKey<Sha256>)>,
    },
    /// Wise: RSA SHA-256 over the body, by one of Wise's published keys.
    Wise {
        keys: Vec<rsa::pkcs1v15::VerifyingKey<Sha256>>,
    },
    /// fal: Ed25519 over the request ID, user ID, timestamp and the body's SHA-256;
    /// each key with the index of the credential (JWKS) it came from.
    FalAi {
        keys: Vec<(usize, ed25519_dalek::VerifyingKey)>,
    },
    /// Amazon SNS: RSA over the canonical fields, per configured topic.
    AwsSns(AwsSns),
    Netlify {
        keys: Vec<MacKey>,
    },
    /// Recharge: the SHA-256 of the client secret followed by the body (not an HMAC).
    Recharge {
        secrets: Vec<Secret>,
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
        values: Vec<Secret>,
    },
    /// HTTP Basic auth with `user:password` as configured (Postmark, Chargebee, Pipedrive).
    BasicAuth {
        values: Vec<Secret>,
    },
    /// A passcode inside the JSON body (Figma).
    Passcode {
        values: Vec<Secret>,
    },
    /// A token in the URL's query string (Mailchimp Marketing).
    QueryToken {
        values: Vec<Secret>,
    },
    /// Every notification's `clientState` (Microsoft Graph).
    ClientState {
        values: Vec<Secret>,
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

/// An HMAC tag in standard base64.
fn b64(k: &MacKey, parts: &[&[u8]]) -> String {
    encode_base64(k.tag(parts).as_bytes())
}

/// A JWT signed with HS256 over `claims`.
fn jwt_hs256(k: &MacKey, claims: &Value) -> String {
    use base64::Engine as _;
    let e = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let input = format!(
        "{}.{}",
        e(br#"{"alg":"HS256","typ":"JWT"}"#),
        e(claims.to_string().as_bytes())
    );
    let sig = e(k.tag(&[input.as_bytes()]).as_bytes());
    format!("{input}.{sig}")
}

impl Special {
    /// Verifies `req` at `now` (unix seconds); returns the index of the matching secret.
    pub fn verify(
        &self,
        req: &Inbound<'_>,
        now: u64,
        tol: Option<u64>,
    ) -> Result<usize, VerifyError> {
        match self {
            Self::Twilio { keys } => url_signed::verify_twilio(keys, req),
            Self::Mandrill { keys } => url_signed::verify_mandrill(keys, req),
            Self::HubSpot { keys, raw } => url_signed::verify_hubspot(keys, raw, req, now, tol),
            Self::Contentful { keys } => url_signed::verify_contentful(keys, req, now, tol),
            Self::Plivo { keys } => url_signed::verify_plivo(keys, req),
            Self::MercadoPago { keys } => url_signed::verify_mercado_pago(keys, req, now, tol),
            Self::Box { keys } => header_hmac::verify_box(keys, req, now, tol),
            Self::DocuSign { keys } => header_hmac::verify_docusign(keys, req),
            Self::Worldline { keys } => header_hmac::verify_worldline(keys, req),
            Self::Netlify { keys } => header_hmac::verify_netlify(keys, req),
            Self::Recharge { secrets } => header_hmac::verify_recharge(secrets, req),
            Self::Discord { keys } => asymmetric::verify_discord(keys, req, now, tol),
            Self::Telnyx { keys } => asymmetric::verify_telnyx(keys, req, now, tol),
            Self::SendGrid { keys } => asymmetric::verify_sendgrid(keys, req, now, tol),
            Self::Circle { keys } => asymmetric::verify_circle(keys, req),
            Self::Ebay { keys } => asymmetric::verify_ebay(keys, req),
            Self::Plaid { keys } => asymmetric::verify_plaid(keys, req, now, tol),
            Self::PayPal { keys } => asymmetric::verify_paypal(keys, req, now, tol),
            Self::Wise { keys } => asymmetric::verify_wise(keys, req),
            Self::FalAi { keys } => asymmetric::verify_falai(keys, req, now, tol),
            Self::AwsSns(sns) => sns.verify(req, now, tol),
            Self::Mailgun { keys } => body_embedded::verify_mailgun(keys, req, now, tol),
            Self::Adyen { keys } => body_embedded::verify_adyen(keys, req),
            Self::Braintree { keys } => body_embedded::verify_braintree(keys, req),
            Self::Token { header, values } => token::verify_token(header, values, req),
            Self::BasicAuth { values } => token::verify_basic_auth(values, req),
            Self::Passcode { values } => token::verify_passcode(values, req),
            Self::QueryToken { values } => token::verify_query_token(values, req),
            Self::ClientState { values } => token::verify_client_state(values, req),
            Self::Monday { keys } => token::verify_monday(keys, req, now),
        }
    }

    /// The headers a provider would send with `req`'s body at `now`, signed with the
    /// first credential (for a token preset, that credential as its header carries it);
    /// `None` where the signature lives in the body (Mailgun, Adyen, Braintree), needs a
    /// private key the gateway does not hold, or the credential travels elsewhere.
    pub fn sign(&self, req: &Inbound<'_>, now: u64) -> Option<Vec<(HeaderName, String)>> {
        match self {
            Self::Twilio { keys } => url_signed::sign_twilio(keys, req),
            Self::Mandrill { keys } => url_signed::sign_mandrill(keys, req),
            Self::HubSpot { keys, raw } => url_signed::sign_hubspot(keys, raw, req, now),
            Self::Contentful { keys } => url_signed::sign_contentful(keys, req, now),
            Self::Plivo { keys } => url_signed::sign_plivo(keys, req),
            Self::MercadoPago { keys } => url_signed::sign_mercado_pago(keys, req, now),
            Self::Box { keys } => header_hmac::sign_box(keys, req, now),
            Self::DocuSign { keys } => header_hmac::sign_docusign(keys, req),
            Self::Worldline { keys } => header_hmac::sign_worldline(keys, req),
            Self::Netlify { keys } => header_hmac::sign_netlify(keys, req),
            Self::Recharge { secrets } => header_hmac::sign_recharge(secrets, req),
            Self::Monday { keys } => token::sign_monday(keys, now),
            // Nothing is signed: the provider sends the credential itself.
            Self::Token { header, values } => Some(vec![(header.clone(), token::value(values)?)]),
            Self::BasicAuth { values } => Some(vec![(h("authorization"), token::value(values)?)]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod form_tests {
    use http::Method;

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
