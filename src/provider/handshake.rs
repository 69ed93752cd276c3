//! Set-up exchanges a provider performs that the gateway answers itself. A handshake
//! is never forwarded and never claims a key.
//!
//! Some are checked *before* verification because the provider does not sign them
//! (Meta's `GET hub.challenge`, Dropbox's challenge, Asana's `X-Hook-Secret`, …); the
//! rest only after the signature passed (Slack, Discord, Twitch, Zoom, Xero, Okta, …).

use bytes::Bytes;
use http::{HeaderName, Method, StatusCode};
use serde_json::Value;
use sha2::Digest as _;

use super::mac::{Algorithm, MacKey, ct_eq};
use super::{Credential, Inbound, Scheme, VerifyError, header_once};
use crate::secret::Secret;

/// The gateway's own reply to a handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeReply {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, String)>,
    pub body: Bytes,
    /// A signing secret the provider handed over in its set-up request (Asana's
    /// `X-Hook-Secret`, Notion's `verification_token`): the operator must configure it,
    /// so the gateway keeps it for the admin listener — never for the log.
    pub handed_secret: Option<Secret>,
}

impl HandshakeReply {
    pub(crate) fn empty(status: StatusCode) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            handed_secret: None,
        }
    }

    fn text(body: String) -> Self {
        Self {
            status: StatusCode::OK,
            headers: vec![(http::header::CONTENT_TYPE, "text/plain".into())],
            body: body.into(),
            handed_secret: None,
        }
    }

    fn json(v: &Value) -> Self {
        Self {
            status: StatusCode::OK,
            headers: vec![(http::header::CONTENT_TYPE, "application/json".into())],
            body: serde_json::to_vec(v).unwrap_or_default().into(),
            handed_secret: None,
        }
    }
}

/// The answer a provider requires for a delivered event, instead of the upstream's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedReply {
    pub status: StatusCode,
    pub body: &'static str,
}

/// Which handshake a preset answers.
#[derive(Debug, Clone)]
pub enum Handshake {
    None,
    /// Signed `{"type":"url_verification"}`: reply `{"challenge":…}`.
    Slack,
    /// Interaction PING (`type` 1) → `{"type":1}`; webhook-event PING (`type` 0) → 204.
    Discord,
    /// `Twitch-Eventsub-Message-Type: webhook_callback_verification` → the challenge as text.
    Twitch,
    /// `endpoint.url_validation` → `plainToken` and its HMAC as `encryptedToken`.
    Zoom,
    /// `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…` → the challenge.
    Meta {
        verify_tokens: Vec<Secret>,
    },
    /// `GET ?challenge=…` → the challenge as text, with `X-Content-Type-Options: nosniff`.
    Dropbox,
    /// Onfleet's URL validation: `GET ?check=…` → the value as text (with 200; Onfleet
    /// refuses 204).
    Onfleet,
    /// `X-Hook-Secret` → echoed back (the operator then configures it as the secret).
    Asana,
    /// The unsigned creation ping `webhook_id=N` → 200.
    WooCommerce,
    /// The `{"verification_token":…}` set-up request → 200 (the token is kept for the
    /// admin listener's `GET /handshakes/<route>`: the operator pastes it back into
    /// Notion and into the route's secrets).
    Notion,
    /// Intent to Receive (a signed body with no events) → 200 with an empty body.
    Xero,
    /// `HEAD` when the webhook is created → 200 (Trello, Mandrill).
    Head,
    /// `GET ?bt_challenge=…` → `public_key|hex(HMAC-SHA1(SHA1(private_key), challenge))`.
    Braintree {
        keys: Vec<(String, MacKey)>,
    },
    /// X's challenge-response check: `GET ?crc_token=…` → `{"response_token":
    /// "sha256=<base64 HMAC-SHA256 of the token under the consumer secret>"}`.
    XCrc {
        keys: Vec<MacKey>,
    },
    /// `?validationToken=…` on subscription → the token as text.
    MsGraph,
    /// `GET` when the webhook is saved (after the URL token check) → 200.
    Mailchimp,
    /// `GET` with `X-Okta-Verification-Challenge` (after the auth check) → `{"verification":…}`.
    Okta,
    /// Unsigned `{"challenge":…}` → echoed as JSON.
    Monday,
    /// `event_type: PING` (after the passcode check) → 200.
    Figma,
    /// eBay's `GET ?challenge_code=…` → `{"challengeResponse": hex(SHA-256(code +
    /// verification token + endpoint))}`, the endpoint being the route's `public_url`.
    Ebay {
        verification_tokens: Vec<Secret>,
    },
    /// A signed SNS `SubscriptionConfirmation` → 200, confirmed by fetching its
    /// `SubscribeURL` (or logged, `confirm = "manual"`); `UnsubscribeConfirmation` → 200.
    AwsSns,
}

fn query_param(req: &Inbound<'_>, name: &str) -> Option<String> {
    form_urlencoded::parse(req.query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn json(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

impl Handshake {
    /// This handshake as a route answers it: the keyed ones (Meta's verify tokens,
    /// Braintree's keys) take their keys from the route's credentials; the rest are
    /// as declared.
    pub fn with_keys(&self, creds: &[Credential]) -> Result<Self, String> {
        Ok(match self {
            Self::Meta { .. } => Self::Meta {
                verify_tokens: creds
                    .iter()
                    .map(|c| Ok(Secret::new(c.part("verify_token")?.to_vec())))
                    .collect::<Result<_, String>>()?,
            },
            Self::Braintree { .. } => Self::Braintree {
                keys: braintree_keys(creds)?,
            },
            Self::Ebay { .. } => Self::Ebay {
                verification_tokens: creds
                    .iter()
                    .filter_map(|c| c.part("verification_token").ok())
                    .map(|t| Secret::new(t.to_vec()))
                    .collect(),
            },
            Self::XCrc { .. } => Self::XCrc {
                keys: creds
                    .iter()
                    .map(|c| Ok(MacKey::new(Algorithm::Sha256, c.text()?)))
                    .collect::<Result<_, String>>()?,
            },
            other => other.clone(),
        })
    }

    /// Whether the provider hands out the signing secret in this handshake (Asana,
    /// Notion): a route may then start with no secret.
    pub fn hands_over_secret(&self) -> bool {
        matches!(self, Self::Asana | Self::Notion)
    }

    /// A description for `hookgate providers`.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::None => "—",
            Self::Slack => "url_verification → challenge",
            Self::Discord => "PING → {\"type\":1} / 204",
            Self::Twitch => "webhook_callback_verification → challenge",
            Self::Zoom => "endpoint.url_validation → encryptedToken",
            Self::Meta { .. } => "GET hub.challenge (verify_token)",
            Self::Dropbox => "GET challenge echo",
            Self::Onfleet => "GET check echo",
            Self::Asana => "X-Hook-Secret echo",
            Self::WooCommerce => "unsigned webhook_id ping → 200",
            Self::Notion => "verification_token → 200 (token on the admin listener)",
            Self::Xero => "Intent to Receive → 200",
            Self::Head => "HEAD → 200",
            Self::Braintree { .. } => "GET bt_challenge → signed reply",
            Self::XCrc { .. } => "GET crc_token → response_token (HMAC)",
            Self::MsGraph => "validationToken echo",
            Self::Mailchimp => "GET → 200",
            Self::Okta => "GET X-Okta-Verification-Challenge",
            Self::Monday => "{\"challenge\"} echo",
            Self::Figma => "PING → 200",
            Self::AwsSns => "SubscriptionConfirmation → 200, SubscribeURL fetched (or logged)",
            Self::Ebay { .. } => "GET challenge_code → challengeResponse (verification_token)",
        }
    }

    /// The HTTP method the handshake arrives with when it is not POST: a route of the
    /// preset accepts it by default.
    pub fn method(&self) -> Option<Method> {
        match self {
            Self::Meta { .. }
            | Self::Dropbox
            | Self::Onfleet
            | Self::Braintree { .. }
            | Self::XCrc { .. }
            | Self::Mailchimp
            | Self::Okta
            | Self::Ebay { .. } => Some(Method::GET),
            Self::Head => Some(Method::HEAD),
            _ => None,
        }
    }

    /// Handshakes answered before (or instead of) signature verification.
    pub fn before(&self, req: &Inbound<'_>) -> Result<Option<HandshakeReply>, VerifyError> {
        let reply = match self {
            Self::Meta { verify_tokens } if req.method == Method::GET => {
                let mode = query_param(req, "hub.mode").unwrap_or_default();
                let token = query_param(req, "hub.verify_token").unwrap_or_default();
                let known = verify_tokens
                    .iter()
                    .fold(false, |ok, t| ct_eq(t.expose(), token.as_bytes()) | ok);
                if mode != "subscribe" || !known {
                    return Err(VerifyError::BadSignature);
                }
                HandshakeReply::text(query_param(req, "hub.challenge").unwrap_or_default())
            }
            Self::Ebay {
                verification_tokens,
            } if req.method == Method::GET => ebay_challenge(req, verification_tokens)?,
            Self::Dropbox if req.method == Method::GET => echo_query(req, "challenge")?,
            Self::Onfleet if req.method == Method::GET => echo_query(req, "check")?,
            Self::Asana => {
                match header_once(req.headers, &HeaderName::from_static("x-hook-secret")) {
                    Ok(secret) => HandshakeReply {
                        status: StatusCode::OK,
                        headers: vec![(
                            HeaderName::from_static("x-hook-secret"),
                            secret.to_owned(),
                        )],
                        body: Bytes::new(),
                        handed_secret: Some(Secret::new(secret.as_bytes())),
                    },
                    Err(_) => return Ok(None),
                }
            }
            Self::WooCommerce => {
                let unsigned = !req.headers.contains_key("x-wc-webhook-signature");
                let is_ping = req.body.starts_with(b"webhook_id=")
                    && req.body.len() > 11
                    && req.body[11..].iter().all(u8::is_ascii_digit);
                if !(unsigned && is_ping) {
                    return Ok(None);
                }
                HandshakeReply::empty(StatusCode::OK)
            }
            Self::Notion => {
                let Some(Value::Object(map)) = json(req.body) else {
                    return Ok(None);
                };
                if map.len() != 1 || !map.contains_key("verification_token") {
                    return Ok(None);
                }
                let mut reply = HandshakeReply::empty(StatusCode::OK);
                reply.handed_secret = map
                    .get("verification_token")
                    .and_then(Value::as_str)
                    .map(|t| Secret::new(t.as_bytes()));
                reply
            }
            Self::Head if req.method == Method::HEAD => HandshakeReply::empty(StatusCode::OK),
            Self::Braintree { keys } if req.method == Method::GET => {
                let challenge = query_param(req, "bt_challenge").unwrap_or_default();
                let hex_ok = (20..=32).contains(&challenge.len())
                    && challenge
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                let Some((public_key, key)) = keys.first().filter(|_| hex_ok) else {
                    return Err(VerifyError::Malformed("bt_challenge".into()));
                };
                let sig = hex::encode(key.tag(&[challenge.as_bytes()]).as_bytes());
                HandshakeReply::text(format!("{public_key}|{sig}"))
            }
            Self::XCrc { keys } if req.method == Method::GET => x_crc_challenge(req, keys)?,
            Self::MsGraph => match query_param(req, "validationToken") {
                Some(token) => HandshakeReply::text(token),
                None => return Ok(None),
            },
            Self::Monday => {
                let Some(Value::Object(map)) = json(req.body) else {
                    return Ok(None);
                };
                if map.len() != 1 || !map.contains_key("challenge") {
                    return Ok(None);
                }
                HandshakeReply::json(&Value::Object(map))
            }
            _ => return Ok(None),
        };
        Ok(Some(reply))
    }

    /// Handshakes recognised only once the request proved authentic.
    pub fn after(
        &self,
        req: &Inbound<'_>,
        scheme: &Scheme,
        secret_index: usize,
    ) -> Option<HandshakeReply> {
        match self {
            Self::AwsSns => match scheme {
                Scheme::Special(super::special::Special::AwsSns(sns)) => {
                    sns.handshake(req, secret_index)
                }
                _ => None,
            },
            Self::Slack => {
                let j = json(req.body)?;
                if j.get("type")? != "url_verification" {
                    return None;
                }
                Some(HandshakeReply::json(
                    &serde_json::json!({ "challenge": j.get("challenge")? }),
                ))
            }
            Self::Discord => {
                let j = json(req.body)?;
                let kind = j.get("type").and_then(Value::as_i64);
                if j.get("token").is_some() && kind == Some(1) {
                    return Some(HandshakeReply::json(&serde_json::json!({ "type": 1 })));
                }
                let webhook_event = j.get("event").is_some()
                    || (j.get("version").is_some() && j.get("token").is_none());
                (webhook_event && kind == Some(0))
                    .then(|| HandshakeReply::empty(StatusCode::NO_CONTENT))
            }
            Self::Twitch => {
                let kind = header_once(
                    req.headers,
                    &HeaderName::from_static("twitch-eventsub-message-type"),
                )
                .ok()?;
                if kind != "webhook_callback_verification" {
                    return None;
                }
                let challenge = json(req.body)?.get("challenge")?.as_str()?.to_owned();
                Some(HandshakeReply::text(challenge))
            }
            Self::Zoom => {
                let j = json(req.body)?;
                if j.get("event")? != "endpoint.url_validation" {
                    return None;
                }
                let plain = j.pointer("/payload/plainToken")?.as_str()?;
                let Scheme::Hmac(s) = scheme else { return None };
                let key = s.keys.get(secret_index)?;
                let encrypted = hex::encode(key.tag(&[plain.as_bytes()]).as_bytes());
                Some(HandshakeReply::json(
                    &serde_json::json!({ "plainToken": plain, "encryptedToken": encrypted }),
                ))
            }
            Self::Xero => {
                let j = json(req.body)?;
                let empty = j.get("events")?.as_array()?.is_empty();
                empty.then(|| HandshakeReply::empty(StatusCode::OK))
            }
            Self::Mailchimp => {
                (req.method == Method::GET).then(|| HandshakeReply::empty(StatusCode::OK))
            }
            Self::Okta => {
                if req.method != Method::GET {
                    return None;
                }
                let ch = header_once(
                    req.headers,
                    &HeaderName::from_static("x-okta-verification-challenge"),
                )
                .ok()?;
                Some(HandshakeReply::json(
                    &serde_json::json!({ "verification": ch }),
                ))
            }
            Self::Figma => {
                let j = json(req.body)?;
                (j.get("event_type")? == "PING").then(|| HandshakeReply::empty(StatusCode::OK))
            }
            _ => None,
        }
    }
}

/// A query parameter echoed back as text (Dropbox's `challenge`, Onfleet's `check`),
/// with `X-Content-Type-Options: nosniff` so a browser never renders the echo.
fn echo_query(req: &Inbound<'_>, name: &str) -> Result<HandshakeReply, VerifyError> {
    let value = query_param(req, name).ok_or_else(|| VerifyError::MissingHeader(name.into()))?;
    let mut r = HandshakeReply::text(value);
    r.headers.push((
        HeaderName::from_static("x-content-type-options"),
        "nosniff".into(),
    ));
    Ok(r)
}

/// The Braintree handshake/notification key: HMAC-SHA1 keyed with SHA-1(private key).
pub fn braintree_key(private_key: &[u8]) -> MacKey {
    use sha1::{Digest, Sha1};
    MacKey::new(Algorithm::Sha1, &Sha1::digest(private_key))
}

/// Every Braintree credential as `(public_key, key)`.
pub fn braintree_keys(creds: &[Credential]) -> Result<Vec<(String, MacKey)>, String> {
    creds
        .iter()
        .map(|c| {
            Ok((
                c.part_str("public_key")?.to_owned(),
                braintree_key(c.part("private_key")?),
            ))
        })
        .collect()
}

/// eBay's challenge: SHA-256 of the code, the verification token and the endpoint.
fn ebay_challenge(
    req: &Inbound<'_>,
    verification_tokens: &[Secret],
) -> Result<HandshakeReply, VerifyError> {
    let code = query_param(req, "challenge_code")
        .ok_or_else(|| VerifyError::MissingHeader("challenge_code".into()))?;
    // The endpoint eBay hashes is the URL it calls, without the query.
    let endpoint = req
        .url
        .map(|u| u.split_once('?').map_or(u, |(base, _)| base))
        .ok_or(VerifyError::NeedsPublicUrl("eBay challenge"))?;
    let token = verification_tokens
        .first()
        .ok_or_else(|| VerifyError::MissingHeader("verification_token".into()))?;
    let mut h = sha2::Sha256::new();
    h.update(code.as_bytes());
    h.update(token.expose());
    h.update(endpoint.as_bytes());
    Ok(HandshakeReply::json(
        &serde_json::json!({ "challengeResponse": hex::encode(h.finalize()) }),
    ))
}

/// X's CRC check: an HMAC of the token under the key that signs bodies.
fn x_crc_challenge(req: &Inbound<'_>, keys: &[MacKey]) -> Result<HandshakeReply, VerifyError> {
    // The reply is an HMAC of the token under the key that signs bodies: an
    // oracle for any body the token could be. Only token characters are
    // answered (base64/URL-safe, at most 256), so no JSON body can be signed
    // this way.
    let token = query_param(req, "crc_token")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| VerifyError::MissingHeader("crc_token".into()))?;
    if token.len() > 256
        || !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=_-".contains(&b))
    {
        return Err(VerifyError::Malformed("crc_token".into()));
    }
    let key = keys
        .first()
        .ok_or_else(|| VerifyError::Malformed("crc_token".into()))?;
    let tag = super::mac::encode_base64(key.tag(&[token.as_bytes()]).as_bytes());
    Ok(HandshakeReply::json(
        &serde_json::json!({ "response_token": format!("sha256={tag}") }),
    ))
}
