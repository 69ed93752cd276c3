//! Signature verification and event-ID extraction: the first step that turns an
//! untrusted request into a [`VerifiedDelivery`], the only thing the dedup and forward
//! steps accept.
//!
//! A provider *preset* is data over a small set of *schemes*: every HMAC-over-a-template
//! provider shares [`hmac_scheme::HmacScheme`], and Standard Webhooks (with its Svix
//! aliases) has [`standard_webhooks::StandardScheme`]. Verification takes the current
//! time as an argument, so tests can verify a captured delivery at its own `now`.

pub mod hmac_scheme;
pub mod mac;
pub mod standard_webhooks;

use std::fmt;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, StatusCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::secret::Secret;
use hmac_scheme::{HmacScheme, SigFormat, TimestampSource};
use mac::{Algorithm, Encoding, MacKey};
use standard_webhooks::{StandardScheme, SwKey};

/// The parts of a request a verifier reads. The body is the raw bytes as received.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    pub query: Option<&'a str>,
}

/// Why a delivery was refused. Each variant is logged with its detail; the response
/// only says which class of check failed, never anything about the keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing header {0}")]
    MissingHeader(String),
    #[error("malformed header {0}")]
    Malformed(String),
    #[error("header {0} appears more than once")]
    Duplicated(String),
    #[error("malformed timestamp")]
    BadTimestamp,
    #[error("no signature matches any configured secret")]
    BadSignature,
    #[error("signed timestamp is older than the tolerance")]
    TimestampTooOld,
    #[error("signed timestamp is further in the future than the tolerance")]
    TimestampInFuture,
}

impl VerifyError {
    /// A short, stable reason for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingHeader(_) => "missing_header",
            Self::Malformed(_) | Self::Duplicated(_) | Self::BadTimestamp => "malformed_header",
            Self::BadSignature => "bad_signature",
            Self::TimestampTooOld | Self::TimestampInFuture => "stale_timestamp",
        }
    }

    /// Whether the signature itself was fine and only its timestamp was out of bounds.
    pub fn is_timestamp(&self) -> bool {
        matches!(self, Self::TimestampTooOld | Self::TimestampInFuture)
    }
}

/// The single value of a header, trimmed. Absent or empty is `MissingHeader`; a header
/// sent twice is refused rather than guessing which copy the provider meant.
pub fn header_once<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<&'h str, VerifyError> {
    let mut values = headers.get_all(name).iter();
    let first = values
        .next()
        .ok_or_else(|| VerifyError::MissingHeader(name.to_string()))?;
    if values.next().is_some() {
        return Err(VerifyError::Duplicated(name.to_string()));
    }
    let text = first
        .to_str()
        .map_err(|_| VerifyError::Malformed(name.to_string()))?
        .trim();
    if text.is_empty() {
        return Err(VerifyError::MissingHeader(name.to_string()));
    }
    Ok(text)
}

/// Parses a decimal unix timestamp: digits only, no sign, no overflow.
pub fn parse_timestamp(s: &str) -> Result<u64, VerifyError> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    s.parse().map_err(|_| VerifyError::BadTimestamp)
}

/// Checks a signed timestamp (unix seconds) against `now` in both directions.
pub fn check_tolerance(ts: u64, now: u64, tolerance: Option<u64>) -> Result<(), VerifyError> {
    let Some(tol) = tolerance else {
        return Ok(());
    };
    if now > ts && now - ts > tol {
        return Err(VerifyError::TimestampTooOld);
    }
    if ts > now && ts - now > tol {
        return Err(VerifyError::TimestampInFuture);
    }
    Ok(())
}

/// One piece of a signed-payload template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Id,
}

/// The bytes a provider signs, as a template over `{body}`, `{timestamp}` and `{id}`
/// (`"v0:{timestamp}:{body}"`). The body is never copied: verification feeds the parts
/// to the MAC one after another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Part>);

impl Template {
    /// Parses a template. Any other `{name}` is an error, so a typo cannot silently
    /// become literal text.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = s;
        let mut literal = Vec::new();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('{') {
                let end = after
                    .find('}')
                    .ok_or_else(|| format!("unclosed '{{' in payload template {s:?}"))?;
                let part = match &after[..end] {
                    "body" => Part::Body,
                    "timestamp" => Part::Timestamp,
                    "id" => Part::Id,
                    other => {
                        return Err(format!(
                            "unknown placeholder {{{other}}} in payload template (use {{body}}, {{timestamp}} or {{id}})"
                        ));
                    }
                };
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(part);
                rest = &after[end + 1..];
            } else {
                let mut chars = rest.chars();
                if let Some(c) = chars.next() {
                    let mut buf = [0u8; 4];
                    literal.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                rest = chars.as_str();
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        if !parts.contains(&Part::Body) {
            return Err("the payload template must contain {body}".into());
        }
        Ok(Self(parts))
    }

    /// Whether the template signs `{timestamp}`.
    pub fn uses_timestamp(&self) -> bool {
        self.0.contains(&Part::Timestamp)
    }

    /// Whether the template signs `{id}`.
    pub fn uses_id(&self) -> bool {
        self.0.contains(&Part::Id)
    }

    /// The byte slices to MAC, in order.
    pub fn parts<'a>(
        &'a self,
        body: &'a [u8],
        ts: Option<&'a [u8]>,
        id: Option<&'a [u8]>,
    ) -> Vec<&'a [u8]> {
        self.0
            .iter()
            .map(|p| match p {
                Part::Literal(l) => l.as_slice(),
                Part::Body => body,
                Part::Timestamp => ts.unwrap_or_default(),
                Part::Id => id.unwrap_or_default(),
            })
            .collect()
    }
}

/// Options of the generic `hmac` provider (`[routes.hmac]` in the config).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HmacOptions {
    /// The header that carries the signature.
    pub header: String,
    /// `sha1`, `sha256` (default) or `sha512`.
    #[serde(default)]
    pub algorithm: Option<String>,
    /// `hex` (default) or `base64`.
    #[serde(default)]
    pub encoding: Option<String>,
    /// Text before the encoded signature, such as `sha256=`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Splits the header into several signatures (key rotation), such as `,` or ` `.
    #[serde(default)]
    pub separator: Option<String>,
    /// Signed bytes, over `{body}`, `{timestamp}` and `{id}`; default `{body}`.
    #[serde(default)]
    pub payload: Option<String>,
    /// The header carrying the unix timestamp in seconds, required by `{timestamp}`.
    #[serde(default)]
    pub timestamp_header: Option<String>,
    /// The header carrying the message ID, required by `{id}`.
    #[serde(default)]
    pub id_header: Option<String>,
}

/// The built-in presets. Names are the provider keys of the provider catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    Stripe,
    GitHub,
    Shopify,
    Slack,
    StandardWebhooks,
    /// Svix and the services that deliver through it (Clerk, Resend): Standard Webhooks
    /// with `svix-*` header names.
    Svix(&'static str),
    Hmac,
}

impl Preset {
    /// Every preset name, for `hookgate check` and error messages.
    pub const NAMES: &'static [&'static str] = &[
        "stripe",
        "github",
        "shopify",
        "slack",
        "standard_webhooks",
        "svix",
        "clerk",
        "resend",
        "hmac",
    ];

    /// Looks a preset up by its provider key.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "stripe" => Self::Stripe,
            "github" => Self::GitHub,
            "shopify" => Self::Shopify,
            "slack" => Self::Slack,
            "standard_webhooks" => Self::StandardWebhooks,
            "svix" => Self::Svix("svix"),
            "clerk" => Self::Svix("clerk"),
            "resend" => Self::Svix("resend"),
            "hmac" => Self::Hmac,
            _ => return None,
        })
    }

    /// The provider key.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::GitHub => "github",
            Self::Shopify => "shopify",
            Self::Slack => "slack",
            Self::StandardWebhooks => "standard_webhooks",
            Self::Svix(name) => name,
            Self::Hmac => "hmac",
        }
    }

    /// The event-ID source when the route sets none (`None` for `hmac` without an
    /// `id_header`: the route must say).
    pub fn default_event_id(self, opts: Option<&HmacOptions>) -> Option<EventIdSource> {
        let h = |names: &[&'static str]| {
            EventIdSource::Header(names.iter().map(|n| HeaderName::from_static(n)).collect())
        };
        Some(match self {
            Self::Stripe => EventIdSource::Json("/id".into()),
            Self::GitHub => h(&["x-github-delivery"]),
            Self::Shopify => h(&["x-shopify-webhook-id", "shopify-webhook-id"]),
            Self::Slack => EventIdSource::Json("/event_id".into()),
            Self::StandardWebhooks => h(&["webhook-id"]),
            Self::Svix(_) => h(&["svix-id"]),
            Self::Hmac => {
                let name = opts?.id_header.as_deref()?;
                EventIdSource::Header(vec![HeaderName::try_from(name).ok()?])
            }
        })
    }

    /// The provider's timestamp window in seconds, or `None` if it signs no timestamp.
    pub fn default_tolerance(self, opts: Option<&HmacOptions>) -> Option<u64> {
        match self {
            Self::Stripe | Self::Slack | Self::StandardWebhooks | Self::Svix(_) => Some(300),
            Self::GitHub | Self::Shopify => None,
            Self::Hmac => opts.and_then(|o| o.timestamp_header.as_ref()).map(|_| 300),
        }
    }

    /// Whether this preset (with these options) signs a timestamp at all.
    pub fn signs_timestamp(self, opts: Option<&HmacOptions>) -> bool {
        self.default_tolerance(opts).is_some()
    }

    /// Builds the verifier for a route from its secrets.
    pub fn verifier(
        self,
        secrets: &[Secret],
        opts: Option<&HmacOptions>,
        tolerance: Option<u64>,
    ) -> Result<Verifier, String> {
        let hmac_keys = |alg: Algorithm| {
            secrets
                .iter()
                .map(|s| MacKey::new(alg, s.expose()))
                .collect::<Vec<_>>()
        };
        let names = |names: &[&'static str]| {
            names
                .iter()
                .map(|n| HeaderName::from_static(n))
                .collect::<Vec<_>>()
        };
        let plain = |prefix: &str, separator: Option<&str>| SigFormat::Plain {
            prefix: prefix.into(),
            separator: separator.map(Into::into),
        };
        let scheme = match self {
            Self::Stripe => Scheme::Hmac(HmacScheme {
                headers: names(&["stripe-signature"]),
                format: SigFormat::KeyValue {
                    item_separator: ',',
                    timestamp_key: "t".into(),
                    signature_key: "v1".into(),
                },
                encoding: Encoding::Hex,
                payload: Template::parse("{timestamp}.{body}")?,
                timestamp: TimestampSource::SignatureHeader,
                id_header: None,
                keys: hmac_keys(Algorithm::Sha256),
            }),
            Self::GitHub => Scheme::Hmac(HmacScheme {
                headers: names(&["x-hub-signature-256"]),
                format: plain("sha256=", None),
                encoding: Encoding::Hex,
                payload: Template::parse("{body}")?,
                timestamp: TimestampSource::None,
                id_header: None,
                keys: hmac_keys(Algorithm::Sha256),
            }),
            Self::Shopify => Scheme::Hmac(HmacScheme {
                headers: names(&["x-shopify-hmac-sha256", "shopify-hmac-sha256"]),
                format: plain("", None),
                encoding: Encoding::Base64,
                payload: Template::parse("{body}")?,
                timestamp: TimestampSource::None,
                id_header: None,
                keys: hmac_keys(Algorithm::Sha256),
            }),
            Self::Slack => Scheme::Hmac(HmacScheme {
                headers: names(&["x-slack-signature"]),
                format: plain("v0=", None),
                encoding: Encoding::Hex,
                payload: Template::parse("v0:{timestamp}:{body}")?,
                timestamp: TimestampSource::Header(HeaderName::from_static(
                    "x-slack-request-timestamp",
                )),
                id_header: None,
                keys: hmac_keys(Algorithm::Sha256),
            }),
            Self::StandardWebhooks | Self::Svix(_) => {
                let keys = secrets
                    .iter()
                    .map(|s| SwKey::parse(s.expose()))
                    .collect::<Result<Vec<_>, _>>()?;
                let prefix = if self == Self::StandardWebhooks {
                    "webhook"
                } else {
                    "svix"
                };
                Scheme::Standard(StandardScheme::with_prefix(prefix, keys))
            }
            Self::Hmac => {
                let o = opts.ok_or("provider \"hmac\" needs an [routes.hmac] table (header, algorithm, encoding, payload)")?;
                Scheme::Hmac(generic_scheme(o, secrets)?)
            }
        };
        let handshake = match self {
            Self::Slack => Handshake::SlackUrlVerification,
            _ => Handshake::None,
        };
        Ok(Verifier {
            preset: self,
            scheme,
            tolerance,
            handshake,
        })
    }
}

fn header_name(what: &str, s: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(s).map_err(|_| format!("{what} {s:?} is not a valid header name"))
}

fn generic_scheme(o: &HmacOptions, secrets: &[Secret]) -> Result<HmacScheme, String> {
    let algorithm = match o.algorithm.as_deref() {
        None => Algorithm::Sha256,
        Some(a) => Algorithm::parse(a)
            .ok_or_else(|| format!("algorithm {a:?}: use sha1, sha256 or sha512"))?,
    };
    let encoding = match o.encoding.as_deref() {
        None => Encoding::Hex,
        Some(e) => {
            Encoding::parse(e).ok_or_else(|| format!("encoding {e:?}: use hex or base64"))?
        }
    };
    let payload = Template::parse(o.payload.as_deref().unwrap_or("{body}"))?;
    let timestamp = match &o.timestamp_header {
        Some(h) => TimestampSource::Header(header_name("timestamp_header", h)?),
        None if payload.uses_timestamp() => {
            return Err(
                "the payload template uses {timestamp} but no timestamp_header is set".into(),
            );
        }
        None => TimestampSource::None,
    };
    let id_header = match &o.id_header {
        Some(h) => Some(header_name("id_header", h)?),
        None if payload.uses_id() => {
            return Err("the payload template uses {id} but no id_header is set".into());
        }
        None => None,
    };
    if matches!(o.separator.as_deref(), Some("")) {
        return Err("separator must not be empty".into());
    }
    Ok(HmacScheme {
        headers: vec![header_name("header", &o.header)?],
        format: SigFormat::Plain {
            prefix: o.prefix.clone().unwrap_or_default(),
            separator: o.separator.clone(),
        },
        encoding,
        payload,
        timestamp,
        id_header,
        keys: secrets
            .iter()
            .map(|s| MacKey::new(algorithm, s.expose()))
            .collect(),
    })
}

/// The signature scheme of a route, with its keys.
#[derive(Debug, Clone)]
pub enum Scheme {
    Hmac(HmacScheme),
    Standard(StandardScheme),
}

/// A set-up exchange a provider performs that must be answered, not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    None,
    /// Slack's signed `{"type":"url_verification","challenge":…}`: reply with the challenge.
    SlackUrlVerification,
}

/// The gateway's own reply to a handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeReply {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Bytes,
}

/// A route's verifier: scheme, keys and timestamp tolerance.
#[derive(Debug, Clone)]
pub struct Verifier {
    preset: Preset,
    scheme: Scheme,
    /// Seconds a signed timestamp may be off, either way; `None` = not checked.
    tolerance: Option<u64>,
    handshake: Handshake,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Authentic; `secret_index` says which of the route's secrets matched.
    Authentic { secret_index: usize },
    /// An authentic handshake, answered by the gateway itself.
    Handshake(HandshakeReply),
}

impl Verifier {
    /// The preset this verifier implements.
    pub fn preset(&self) -> Preset {
        self.preset
    }

    /// The scheme and keys (for signing in tests and `hookgate sign`).
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Verifies `req` as of `now` (unix seconds).
    pub fn verify(&self, req: &Inbound<'_>, now: u64) -> Result<Verdict, VerifyError> {
        let (secret_index, ts) = match &self.scheme {
            Scheme::Hmac(s) => {
                let m = s.verify(req)?;
                (m.secret_index, m.timestamp)
            }
            Scheme::Standard(s) => {
                let (i, ts) = s.verify(req)?;
                (i, Some(ts))
            }
        };
        if let Some(ts) = ts {
            check_tolerance(ts, now, self.tolerance)?;
        }
        match self.handshake {
            Handshake::SlackUrlVerification => {
                if let Some(reply) = slack_url_verification(req.body) {
                    return Ok(Verdict::Handshake(reply));
                }
            }
            Handshake::None => {}
        }
        Ok(Verdict::Authentic { secret_index })
    }
}

fn slack_url_verification(body: &[u8]) -> Option<HandshakeReply> {
    #[derive(Deserialize)]
    struct Challenge<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        #[serde(default)]
        challenge: Option<String>,
    }
    let c: Challenge<'_> = serde_json::from_slice(body).ok()?;
    if c.kind != "url_verification" {
        return None;
    }
    let body = serde_json::to_vec(&serde_json::json!({ "challenge": c.challenge? })).ok()?;
    Some(HandshakeReply {
        status: StatusCode::OK,
        content_type: "application/json",
        body: body.into(),
    })
}

/// Where a route takes the event ID to deduplicate on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventIdSource {
    /// The first of these headers present.
    Header(Vec<HeaderName>),
    /// A JSON pointer into the body (`/data/id`); strings and integers are used.
    Json(String),
    /// The SHA-256 of the raw body: identical bodies are the same event.
    BodySha256,
}

impl EventIdSource {
    /// Parses `header:NAME`, `json:/pointer` or `body-sha256`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(name) = s.strip_prefix("header:") {
            return Ok(Self::Header(vec![header_name(
                "event_id header",
                name.trim(),
            )?]));
        }
        if let Some(ptr) = s.strip_prefix("json:") {
            if !ptr.is_empty() && !ptr.starts_with('/') {
                return Err(format!("json pointer {ptr:?} must start with '/'"));
            }
            return Ok(Self::Json(ptr.to_string()));
        }
        if s == "body-sha256" {
            return Ok(Self::BodySha256);
        }
        Err(format!(
            "event_id {s:?}: use \"header:NAME\", \"json:/pointer\" or \"body-sha256\""
        ))
    }

    /// Extracts the event ID from a verified request.
    pub fn extract(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        fingerprint: &Fingerprint,
    ) -> Option<EventId> {
        let raw = match self {
            Self::Header(names) => names
                .iter()
                .find_map(|n| header_once(headers, n).ok())
                .map(str::to_owned),
            Self::Json(ptr) => {
                let v: serde_json::Value = serde_json::from_slice(body).ok()?;
                match v.pointer(ptr)? {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                    _ => None,
                }
            }
            Self::BodySha256 => Some(fingerprint.full_hex()),
        }?;
        if raw.is_empty() {
            return None;
        }
        Some(EventId::new(&raw))
    }
}

impl fmt::Display for EventIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(names) => {
                let names: Vec<_> = names.iter().map(|n| n.as_str()).collect();
                write!(f, "header:{}", names.join("|"))
            }
            Self::Json(p) => write!(f, "json:{p}"),
            Self::BodySha256 => f.write_str("body-sha256"),
        }
    }
}

/// An event ID safe to use in a store key and a header: printable ASCII up to 200
/// bytes as sent, anything else replaced by its SHA-256 in hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventId(String);

impl EventId {
    /// The longest event ID kept verbatim.
    pub const MAX_VERBATIM: usize = 200;

    /// Normalises a raw event ID.
    pub fn new(raw: &str) -> Self {
        let printable = raw.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if printable && raw.len() <= Self::MAX_VERBATIM {
            Self(raw.to_owned())
        } else {
            Self(hex::encode(Sha256::digest(raw.as_bytes())))
        }
    }

    /// The ID as used in keys and headers.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SHA-256 of a delivery's raw body: a replay with the same ID but another body
/// is refused instead of being acknowledged as a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Hashes a body.
    pub fn of(body: &[u8]) -> Self {
        Self(Sha256::digest(body).into())
    }

    /// The first 128 bits in hex: what the store keeps (enough to tell bodies apart).
    pub fn short_hex(&self) -> String {
        hex::encode(&self.0[..16])
    }

    /// All 256 bits in hex (the `body-sha256` event ID).
    pub fn full_hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// A delivery whose signature and timestamp passed and whose event ID was found. Only
/// [`accept`] builds one, so nothing downstream can deduplicate on an unverified ID.
#[derive(Debug, Clone)]
pub struct VerifiedDelivery {
    event_id: EventId,
    fingerprint: Fingerprint,
    secret_index: usize,
}

impl VerifiedDelivery {
    /// The (normalised) event ID.
    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }

    /// The body's fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Which of the route's secrets matched (0-based, config order).
    pub fn secret_index(&self) -> usize {
        self.secret_index
    }
}

/// What [`accept`] decided.
#[derive(Debug, Clone)]
pub enum Accepted {
    Delivery(VerifiedDelivery),
    Handshake(HandshakeReply),
}

/// Why [`accept`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("no event ID in the delivery")]
    NoEventId,
}

/// Verifies a request and takes its event ID.
pub fn accept(
    verifier: &Verifier,
    id_source: &EventIdSource,
    req: &Inbound<'_>,
    now: u64,
) -> Result<Accepted, Rejection> {
    let secret_index = match verifier.verify(req, now)? {
        Verdict::Authentic { secret_index } => secret_index,
        Verdict::Handshake(reply) => return Ok(Accepted::Handshake(reply)),
    };
    let fingerprint = Fingerprint::of(req.body);
    let event_id = id_source
        .extract(req.headers, req.body, &fingerprint)
        .ok_or(Rejection::NoEventId)?;
    Ok(Accepted::Delivery(VerifiedDelivery {
        event_id,
        fingerprint,
        secret_index,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_must_be_plain_digits_without_overflow() {
        assert_eq!(parse_timestamp("1767225600"), Ok(1_767_225_600));
        for bad in ["", "-1", "+5", "1.5", "12a", "99999999999999999999", " 1"] {
            assert_eq!(
                parse_timestamp(bad),
                Err(VerifyError::BadTimestamp),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tolerance_applies_both_ways() {
        assert!(check_tolerance(1000, 1300, Some(300)).is_ok());
        assert_eq!(
            check_tolerance(1000, 1301, Some(300)),
            Err(VerifyError::TimestampTooOld)
        );
        assert_eq!(
            check_tolerance(1301, 1000, Some(300)),
            Err(VerifyError::TimestampInFuture)
        );
        assert!(check_tolerance(0, u64::MAX, None).is_ok());
    }

    #[test]
    fn template_parses_placeholders_and_rejects_unknown_ones() {
        let t = Template::parse("v0:{timestamp}:{body}").expect("valid");
        assert!(t.uses_timestamp() && !t.uses_id());
        assert_eq!(t.parts(b"B", Some(b"T"), None).concat(), b"v0:T:B");
        assert!(Template::parse("{bdy}").is_err());
        assert!(Template::parse("{timestamp}").is_err());
        assert!(Template::parse("{body").is_err());
    }

    #[test]
    fn long_or_unprintable_event_ids_are_hashed() {
        assert_eq!(EventId::new("evt_1").as_str(), "evt_1");
        assert_eq!(EventId::new("a b").as_str().len(), 64);
        assert_eq!(EventId::new(&"x".repeat(201)).as_str().len(), 64);
        assert_eq!(EventId::new(&"x".repeat(200)).as_str().len(), 200);
    }

    #[test]
    fn event_id_sources_parse() {
        assert_eq!(
            EventIdSource::parse("body-sha256"),
            Ok(EventIdSource::BodySha256)
        );
        assert_eq!(
            EventIdSource::parse("json:/data/id"),
            Ok(EventIdSource::Json("/data/id".into()))
        );
        assert!(EventIdSource::parse("json:data").is_err());
        assert!(EventIdSource::parse("header:bad header").is_err());
        assert!(EventIdSource::parse("query:x").is_err());
    }

    #[test]
    fn duplicated_headers_are_refused() {
        let mut h = HeaderMap::new();
        let name = HeaderName::from_static("x-sig");
        h.append(&name, "a".parse().expect("valid"));
        h.append(&name, "b".parse().expect("valid"));
        assert_eq!(
            header_once(&h, &name),
            Err(VerifyError::Duplicated("x-sig".into()))
        );
    }
}
