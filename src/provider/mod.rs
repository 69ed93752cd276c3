//! Signature verification and event-ID extraction: the first step that turns an
//! untrusted request into a [`VerifiedDelivery`], the only thing the dedup and forward
//! steps accept.
//!
//! A provider *preset* is data over a small set of *schemes*: every HMAC-over-a-template
//! provider shares [`hmac_scheme::HmacScheme`], Standard Webhooks (with its Svix
//! aliases) has [`standard_webhooks::StandardScheme`], and the rest are
//! [`special::Special`], one module per scheme family. Each preset is declared once,
//! as a row of [`presets`]; [`Preset`] is a handle on that row. Verification takes the
//! current time as an argument, so tests can verify a captured delivery at its own
//! `now`.

pub mod catalogue;
pub mod categories;
pub mod event_id;
pub mod event_type;
pub mod handshake;
pub mod hmac_scheme;
pub mod json_pointer;
pub mod mac;
pub mod presets;
pub mod special;
pub mod standard_webhooks;
pub mod timestamp;

use http::{HeaderMap, HeaderName, Method};
use serde::Deserialize;

use crate::secret::Secret;
pub use catalogue::Preset;
pub use event_id::{CustomId, EventId, EventIdSource, Fingerprint};
pub use event_type::{EventFilter, EventTypeSource};
pub use handshake::{FixedReply, Handshake, HandshakeReply};
use hmac_scheme::HmacScheme;
use special::Special;
use standard_webhooks::StandardScheme;

/// The parts of a request a verifier reads. The body is the raw bytes as received.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    /// The query string as received, without `?`.
    pub query: Option<&'a str>,
    /// The URL the provider called: the route's `public_url` with the query string
    /// appended as received (URL-signing providers sign it).
    pub url: Option<&'a str>,
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
    /// `by_ms`: how far past the tolerance (a clock that is off, or an old delivery
    /// resent); it says nothing about the keys.
    #[error("signed timestamp is older than the tolerance, by {by_ms} ms")]
    TimestampTooOld { by_ms: u64 },
    #[error("signed timestamp is further in the future than the tolerance, by {by_ms} ms")]
    TimestampInFuture { by_ms: u64 },
    /// The delivery uses a signature version that covers the URL, and the route has no
    /// `public_url` to rebuild it from (a HubSpot route set up for v1).
    #[error("{0} signatures cover the URL the provider calls: set public_url on the route")]
    NeedsPublicUrl(&'static str),
    /// The signing certificate could not be fetched (AWS SNS): refused for now, and
    /// the provider's retry tries again.
    #[error("the signing certificate is not available")]
    CertificateUnavailable,
}

impl VerifyError {
    /// A short, stable reason for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingHeader(_) => "missing_header",
            Self::Malformed(_) | Self::Duplicated(_) | Self::BadTimestamp => "malformed_header",
            Self::BadSignature => "bad_signature",
            Self::TimestampTooOld { .. } | Self::TimestampInFuture { .. } => "stale_timestamp",
            Self::NeedsPublicUrl(_) => "needs_public_url",
            Self::CertificateUnavailable => "certificate_unavailable",
        }
    }

    /// Whether the signature itself was fine and only its timestamp was out of bounds.
    pub fn is_timestamp(&self) -> bool {
        matches!(
            self,
            Self::TimestampTooOld { .. } | Self::TimestampInFuture { .. }
        )
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
    timestamp::parse_digits(s)
}

/// Checks a signed timestamp (unix seconds) against `now` in both directions.
pub fn check_tolerance(ts: u64, now: u64, tolerance: Option<u64>) -> Result<(), VerifyError> {
    timestamp::check_window(ts.saturating_mul(1000), now, tolerance)
}

/// One piece of a signed-payload template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Id,
    Method,
    Url,
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
                    "method" => Part::Method,
                    "url" => Part::Url,
                    other => {
                        return Err(format!(
                            "unknown placeholder {{{other}}} in payload template (use {{body}}, {{timestamp}}, {{id}}, {{method}} or {{url}})"
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

    /// Whether the template signs the raw `{body}` (every parsed template does).
    pub fn signs_body(&self) -> bool {
        self.0.contains(&Part::Body)
    }

    /// Whether the template signs the public `{url}`.
    pub fn uses_url(&self) -> bool {
        self.0.contains(&Part::Url)
    }

    /// `{body}` alone.
    pub fn body() -> Self {
        Self(vec![Part::Body])
    }

    /// The byte slices to MAC, in order.
    pub fn parts<'a>(
        &'a self,
        req: &Inbound<'a>,
        ts: Option<&'a [u8]>,
        id: Option<&'a [u8]>,
    ) -> Vec<&'a [u8]> {
        self.0
            .iter()
            .map(|p| match p {
                Part::Literal(l) => l.as_slice(),
                Part::Body => req.body,
                Part::Timestamp => ts.unwrap_or_default(),
                Part::Id => id.unwrap_or_default(),
                Part::Method => req.method.as_str().as_bytes(),
                Part::Url => req.url.unwrap_or_default().as_bytes(),
            })
            .collect()
    }
}

/// Options of the generic `hmac` provider (`[routes.hmac]` in the config).
/// Unknown keys are reported by the config's validation, with the other errors.
#[derive(Debug, Clone, Deserialize)]
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

/// One configured credential: a string as the provider hands it out, or a set of
/// named parts for providers whose credential has several (Meta's
/// `{ app_secret, verify_token }`, Box's `{ primary, secondary }`, a Plaid JWK, …).
#[derive(Debug, Clone)]
pub enum Credential {
    Text(Secret),
    Parts(std::collections::BTreeMap<String, Secret>),
}

impl Credential {
    /// The string form; an error for a credential with parts.
    pub fn text(&self) -> Result<&[u8], String> {
        match self {
            Self::Text(s) => Ok(s.expose()),
            Self::Parts(_) => Err("this provider takes a plain string secret, not a table".into()),
        }
    }

    /// A named part; an error for a string credential or a missing part.
    pub fn part(&self, name: &str) -> Result<&[u8], String> {
        match self {
            Self::Parts(p) => p
                .get(name)
                .map(Secret::expose)
                .ok_or_else(|| format!("the credential table needs a `{name}` entry")),
            Self::Text(_) => Err(format!(
                "this provider takes a table credential with `{name}`"
            )),
        }
    }

    /// A named part as text.
    pub fn part_str(&self, name: &str) -> Result<&str, String> {
        std::str::from_utf8(self.part(name)?).map_err(|_| format!("`{name}` must be text"))
    }
}

/// The signature scheme of a route, with its keys.
#[derive(Debug, Clone)]
pub enum Scheme {
    Hmac(HmacScheme),
    Standard(StandardScheme),
    Special(Special),
}

/// A route's verifier: scheme, keys, timestamp tolerance and handshake.
#[derive(Debug, Clone)]
pub struct Verifier {
    preset: Preset,
    scheme: Scheme,
    /// Seconds a signed timestamp may be off, either way; `None` = not checked.
    tolerance: Option<u64>,
    handshake: Handshake,
    reply: Option<FixedReply>,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Authentic; `secret_index` says which of the route's secrets matched.
    Authentic { secret_index: usize },
    /// A handshake, answered by the gateway itself and never forwarded.
    Handshake(HandshakeReply),
}

impl Verifier {
    pub(crate) fn new(
        preset: Preset,
        scheme: Scheme,
        tolerance: Option<u64>,
        handshake: Handshake,
        reply: Option<FixedReply>,
    ) -> Self {
        Self {
            preset,
            scheme,
            tolerance,
            handshake,
            reply,
        }
    }

    /// The preset this verifier implements.
    pub fn preset(&self) -> Preset {
        self.preset
    }

    /// The methods a route accepts unless it sets `methods`: POST, the method of the
    /// preset's handshake (Meta's `GET hub.challenge`, Trello's `HEAD`, …) and the
    /// preset's extra ones (HubSpot's GET: its v2 signature covers GET deliveries).
    pub fn default_methods(&self) -> Vec<Method> {
        let mut methods = vec![Method::POST];
        methods.extend(self.handshake.method());
        methods.extend(self.preset.spec().extra_methods.iter().cloned());
        methods
    }

    /// Whether verifying costs more than an HMAC: an asymmetric signature (Ed25519,
    /// ECDSA, RSA). Failed verifications on such routes spend a per-client budget.
    pub fn is_costly(&self) -> bool {
        match &self.scheme {
            Scheme::Special(
                special::Special::Discord { .. }
                | special::Special::Telnyx { .. }
                | special::Special::SendGrid { .. }
                | special::Special::Circle { .. }
                | special::Special::Ebay { .. }
                | special::Special::Plaid { .. }
                | special::Special::PayPal { .. }
                | special::Special::Wise { .. }
                | special::Special::FalAi { .. }
                | special::Special::AwsSns(_),
            ) => true,
            Scheme::Standard(s) => s
                .keys
                .iter()
                .any(|k| matches!(k, standard_webhooks::SwKey::Ed25519(_))),
            _ => false,
        }
    }

    /// The header a token route reads its credential from when the route names it
    /// (`auth_header`) or the preset's header is one of its own: captures and the
    /// delivery log hide its value whatever its name.
    pub fn credential_header(&self) -> Option<&HeaderName> {
        match &self.scheme {
            Scheme::Special(Special::Token { header, .. }) => Some(header),
            _ => None,
        }
    }

    /// The handshake this route answers, keys filled in.
    #[cfg(test)]
    pub(crate) fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// The scheme and keys (for signing in tests and `hookgate sign`).
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// The answer the provider requires for a delivered event instead of the
    /// upstream's own (Adyen's `[accepted]`, Microsoft Graph's 202).
    pub fn fixed_reply(&self) -> Option<&FixedReply> {
        self.reply.as_ref()
    }

    /// The key this verifier's route deduplicates on, in words: `source`, or, when that
    /// is a header the signature does not cover, the digest of the signed bytes the
    /// gateway uses instead, and why (`hookgate check`, `hookgate providers`).
    pub fn key_description(&self, source: &EventIdSource) -> String {
        if let EventIdSource::Header(names) = source {
            let unsigned: Vec<&str> = names
                .iter()
                .filter(|h| !self.signs_header(h))
                .map(HeaderName::as_str)
                .collect();
            if !unsigned.is_empty() {
                return format!(
                    "sig-<SHA-256 of the signed bytes>, not {source} (the signature does not cover {}: anyone could change it)",
                    unsigned.join(" or ")
                );
            }
        }
        source.to_string()
    }

    /// Whether the signature covers this header's value, so an event ID taken from
    /// it is the provider's (Standard Webhooks' `webhook-id`, Twitch's message ID, a
    /// generic route whose template signs `{id}`). Anything else is unsigned: anyone
    /// holding one signed request can send it with any value there.
    pub fn signs_header(&self, name: &HeaderName) -> bool {
        match &self.scheme {
            Scheme::Hmac(s) => s.payload.uses_id() && s.id_header.as_ref() == Some(name),
            Scheme::Standard(s) => s.id_header == name,
            // fal signs its request ID header.
            Scheme::Special(Special::FalAi { .. }) => name == "x-fal-webhook-request-id",
            // Mercado Pago's manifest covers x-request-id (and the query's data.id).
            Scheme::Special(Special::MercadoPago { .. }) => name == "x-request-id",
            Scheme::Special(_) => false,
        }
    }

    /// A signed ID of this transmission under which only one body may ever arrive,
    /// for schemes whose signature binds the body only weakly (PayPal signs the
    /// body's CRC-32, which anyone can match with another body).
    pub fn transmission_id(&self, req: &Inbound<'_>) -> Option<EventId> {
        match &self.scheme {
            Scheme::Special(Special::PayPal { .. }) => header_once(
                req.headers,
                &HeaderName::from_static("paypal-transmission-id"),
            )
            .ok()
            .map(EventId::new),
            _ => None,
        }
    }

    /// The bytes the signature binds besides the URL, for the `sig-` key: the raw body,
    /// except where the scheme signs decoded parameters (Plivo V3), whose canonical
    /// string is used instead, so the same parameters encoded another way are the same
    /// delivery, not a new one.
    pub fn signed_content<'a>(&self, req: &Inbound<'a>) -> std::borrow::Cow<'a, [u8]> {
        match &self.scheme {
            Scheme::Special(Special::Plivo { .. })
                if req.headers.contains_key("x-plivo-signature-v3") =>
            {
                let get = req.method == Method::GET;
                let url = req.url.unwrap_or_default();
                std::borrow::Cow::Owned(special::plivo_v3_string(get, url, req.body).into_bytes())
            }
            _ => std::borrow::Cow::Borrowed(req.body),
        }
    }

    /// Whether the signature covers the URL the provider called (with its query).
    pub fn signs_url(&self) -> bool {
        match &self.scheme {
            Scheme::Hmac(s) => s.payload.uses_url(),
            Scheme::Standard(_) => false,
            Scheme::Special(s) => matches!(
                s,
                Special::Twilio { .. }
                    | Special::Mandrill { .. }
                    | Special::HubSpot { .. }
                    | Special::Contentful { .. }
                    | Special::Plivo { .. }
            ),
        }
    }

    /// Verifies `req` as of `now` (unix seconds).
    pub fn verify(&self, req: &Inbound<'_>, now: u64) -> Result<Verdict, VerifyError> {
        if let Some(reply) = self.handshake.before(req)? {
            return Ok(Verdict::Handshake(reply));
        }
        let secret_index = match &self.scheme {
            Scheme::Hmac(s) => {
                let m = s.verify(req)?;
                if let Some(ts) = m.timestamp_ms {
                    timestamp::check_window(ts, now, self.tolerance)?;
                }
                m.secret_index
            }
            Scheme::Standard(s) => {
                let (i, ts) = s.verify(req)?;
                check_tolerance(ts, now, self.tolerance)?;
                i
            }
            Scheme::Special(s) => s.verify(req, now, self.tolerance)?,
        };
        if let Some(reply) = self.handshake.after(req, &self.scheme, secret_index) {
            return Ok(Verdict::Handshake(reply));
        }
        Ok(Verdict::Authentic { secret_index })
    }
}

/// A delivery whose signature and timestamp passed and whose event ID was found. Only
/// [`accept`] builds one, so nothing downstream can deduplicate on an unverified ID.
#[derive(Debug, Clone)]
pub struct VerifiedDelivery {
    event_id: EventId,
    /// The provider's ID when the signature does not cover it (for the log only).
    unsigned_id: Option<EventId>,
    /// A signed transmission ID that must never carry a second body (PayPal).
    transmission_id: Option<EventId>,
    fingerprint: Fingerprint,
    secret_index: usize,
}

impl VerifiedDelivery {
    /// The (normalised) event ID the delivery is deduplicated on: the provider's when
    /// the signature covers it, else [`EventId::signed_content`].
    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }

    /// The provider's event ID when it came from a header the signature does not
    /// cover (GitHub's `X-GitHub-Delivery`, …): logged, never deduplicated on.
    pub fn unsigned_id(&self) -> Option<&EventId> {
        self.unsigned_id.as_ref()
    }

    /// The signed transmission ID under which no other body may be accepted, for
    /// schemes that bind the body weakly (see [`Verifier::transmission_id`]).
    pub fn transmission_id(&self) -> Option<&EventId> {
        self.transmission_id.as_ref()
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

/// What a route reads from a delivery's JSON body besides its signature: the event ID,
/// the event type and each destination's `order_by` key, where they are JSON fields.
/// Built when the config is loaded (the pointers are parsed then), and read in one walk
/// over the body once the signature has passed ([`accept_reading`]), so a body is
/// walked once however many fields the route takes from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyFields {
    pointers: json_pointer::Pointers,
    event_id: Option<usize>,
    event_type: Option<usize>,
    /// Per destination, in the route's order: where its `order_by` key's JSON part is.
    order_by: Vec<Option<usize>>,
}

/// The values one walk over a body found for a route's [`BodyFields`] (none when the
/// route reads nothing from bodies, or the body was not walked).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyValues(Vec<Option<String>>);

impl BodyFields {
    /// The fields of a route with this event ID, event type and destinations'
    /// `order_by` (in the route's order of destinations).
    pub fn new<'a>(
        event_id: &EventIdSource,
        event_type: Option<&EventTypeSource>,
        order_by: impl IntoIterator<Item = Option<&'a EventTypeSource>>,
    ) -> Self {
        let mut pointers = json_pointer::Pointers::default();
        let event_id = event_id.json_pointer().map(|p| pointers.add(p));
        let event_type = event_type
            .and_then(EventTypeSource::json_pointer)
            .map(|p| pointers.add(p));
        let order_by = order_by
            .into_iter()
            .map(|o| {
                o.and_then(EventTypeSource::json_pointer)
                    .map(|p| pointers.add(p))
            })
            .collect();
        Self {
            pointers,
            event_id,
            event_type,
            order_by,
        }
    }

    /// Reads every field in one walk over `body`; without fields, nothing is walked or
    /// allocated.
    pub fn read(&self, body: &[u8]) -> BodyValues {
        BodyValues(self.pointers.read(body))
    }

    /// The event ID's JSON field as `values` has it; `None` when it was not read there
    /// (the ID is not a JSON field, or the body was not walked).
    pub fn event_id<'v>(&self, values: &'v BodyValues) -> Option<Option<&'v str>> {
        values.at(self.event_id)
    }

    /// The event type's JSON field as `values` has it (see [`event_id`](Self::event_id)).
    pub fn event_type<'v>(&self, values: &'v BodyValues) -> Option<Option<&'v str>> {
        values.at(self.event_type)
    }

    /// The JSON field of the `order_by` key of the route's destination at `index`, as
    /// `values` has it (see [`event_id`](Self::event_id)).
    pub fn order_by<'v>(&self, index: usize, values: &'v BodyValues) -> Option<Option<&'v str>> {
        values.at(self.order_by.get(index).copied().flatten())
    }
}

impl BodyValues {
    fn at(&self, index: Option<usize>) -> Option<Option<&str>> {
        index.and_then(|i| self.0.get(i)).map(Option::as_deref)
    }
}

/// Verifies a request and takes its event ID.
pub fn accept(
    verifier: &Verifier,
    id_source: &EventIdSource,
    req: &Inbound<'_>,
    now: u64,
) -> Result<Accepted, Rejection> {
    accept_reading(verifier, id_source, &BodyFields::default(), req, now).map(|(a, _)| a)
}

/// [`accept`] for a route whose [`BodyFields`] are `fields`: once the signature has
/// passed, they are read in one walk over the body (a refused delivery is never
/// walked), the event ID among them, and returned with the delivery.
pub fn accept_reading(
    verifier: &Verifier,
    id_source: &EventIdSource,
    fields: &BodyFields,
    req: &Inbound<'_>,
    now: u64,
) -> Result<(Accepted, BodyValues), Rejection> {
    let secret_index = match verifier.verify(req, now)? {
        Verdict::Authentic { secret_index } => secret_index,
        Verdict::Handshake(reply) => {
            return Ok((Accepted::Handshake(reply), BodyValues::default()));
        }
    };
    let values = fields.read(req.body);
    let (event_id, origin) = id_source
        .extract_read(req.headers, req.body, fields.event_id(&values))
        .ok_or(Rejection::NoEventId)?;
    // An ID from a header the signature does not cover is the sender's choice: the
    // delivery is deduplicated on the signed bytes instead, so the same signed body
    // under a new ID is a replay, and a chosen ID cannot claim another event's key.
    let (event_id, unsigned_id) = match origin {
        Some(h) if !verifier.signs_header(&h) => {
            let url = req.url.filter(|_| verifier.signs_url());
            let signed = verifier.signed_content(req);
            (EventId::signed_content(url, &signed), Some(event_id))
        }
        _ => (event_id, None),
    };
    let fingerprint = Fingerprint::of(req.body);
    let delivery = VerifiedDelivery {
        event_id,
        unsigned_id,
        transmission_id: verifier.transmission_id(req),
        fingerprint,
        secret_index,
    };
    Ok((Accepted::Delivery(delivery), values))
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
            Err(VerifyError::TimestampTooOld { by_ms: 1000 })
        );
        assert_eq!(
            check_tolerance(1301, 1000, Some(300)),
            Err(VerifyError::TimestampInFuture { by_ms: 1000 })
        );
        assert!(check_tolerance(0, u64::MAX, None).is_ok());
    }

    #[test]
    fn template_parses_placeholders_and_rejects_unknown_ones() {
        let t = Template::parse("v0:{timestamp}:{body}").expect("valid");
        assert!(t.uses_timestamp() && !t.uses_id());
        let (m, h) = (Method::POST, HeaderMap::new());
        let req = Inbound {
            method: &m,
            headers: &h,
            body: b"B",
            query: None,
            url: Some("U"),
        };
        assert_eq!(t.parts(&req, Some(b"T"), None).concat(), b"v0:T:B");
        let t = Template::parse("{method}{url}{body}").expect("valid");
        assert_eq!(t.parts(&req, None, None).concat(), b"POSTUB");
        assert!(Template::parse("{bdy}").is_err());
        assert!(Template::parse("{timestamp}").is_err());
        assert!(Template::parse("{body").is_err());
    }

    #[test]
    fn body_fields_read_the_id_the_type_and_order_keys_in_one_walk() {
        let id = EventIdSource::parse("json:/id").expect("id");
        let ty = EventTypeSource::parse("json:/type").expect("type");
        let customer = EventTypeSource::parse("json:/data/customer").expect("order_by");
        let tenant = EventTypeSource::parse("header:x-tenant").expect("order_by");
        let by_id = EventTypeSource::parse("json:/id").expect("order_by");
        let fields = BodyFields::new(
            &id,
            Some(&ty),
            [None, Some(&customer), Some(&tenant), Some(&by_id)],
        );
        assert_eq!(fields.pointers.read(b"{}").len(), 3, "each pointer once");
        let body = br#"{"id":"evt_1","type":"invoice.paid","data":{"customer":"cus_9"}}"#;
        let values = fields.read(body);
        assert_eq!(fields.event_id(&values), Some(Some("evt_1")));
        assert_eq!(fields.event_type(&values), Some(Some("invoice.paid")));
        assert_eq!(fields.order_by(0, &values), None, "no order_by");
        assert_eq!(fields.order_by(1, &values), Some(Some("cus_9")));
        assert_eq!(
            fields.order_by(2, &values),
            None,
            "a header is not read here"
        );
        assert_eq!(fields.order_by(3, &values), Some(Some("evt_1")));
        assert_eq!(fields.order_by(4, &values), None);
        // A field the body lacks was read, and is absent.
        let values = fields.read(br#"{"id":"evt_2"}"#);
        assert_eq!(fields.event_type(&values), Some(None));
        // Values never read leave the reader to read for itself.
        assert_eq!(fields.event_id(&BodyValues::default()), None);
        // A route that reads nothing from bodies never walks them.
        let none = BodyFields::new(&EventIdSource::BodySha256, None, [None]);
        assert!(none.pointers.is_empty());
        assert_eq!(none.read(body), BodyValues::default());
        // The values agree with each source read on its own.
        let h = HeaderMap::new();
        let values = fields.read(body);
        assert_eq!(
            id.extract_read(&h, body, fields.event_id(&values)),
            id.extract_with_origin(&h, body)
        );
        assert_eq!(
            ty.extract_read(&h, body, fields.event_type(&values)),
            ty.extract(&h, body)
        );
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

/// Why a request was refused, in words an integrator can act on; never anything about
/// the keys or the signature expected.
pub(crate) fn explain(rejection: &Rejection, preset: Option<Preset>, id_source: &str) -> String {
    let provider = preset.map_or("the provider", Preset::name);
    match rejection {
        Rejection::NoEventId => format!(
            "no event ID in the delivery: the route reads it from {id_source}; set the route's event_id to where {provider} puts it"
        ),
        Rejection::Verify(e) => match e {
            VerifyError::MissingHeader(h) => format!(
                "the {h} header is missing: {provider} signs every delivery with it; is the sender {provider}, and is the route's provider right?"
            ),
            VerifyError::Malformed(h) if h == "body" => format!(
                "the body is not JSON, and the {provider} preset reads what it verifies from a JSON body"
            ),
            VerifyError::Malformed(h) => {
                format!("the {h} header is malformed: it is not in the form {provider} sends")
            }
            VerifyError::Duplicated(h) => {
                format!("the {h} header appears more than once; send it once")
            }
            VerifyError::BadTimestamp => {
                "the signed timestamp is not a timestamp (digits, or a date-time)".to_owned()
            }
            VerifyError::BadSignature => format!(
                "no configured secret matched the signature: check that the route's secrets hold the signing secret {provider} shows for this endpoint (a rotated secret goes in as a second entry), and that nothing between {provider} and the gateway changes the body"
            ),
            VerifyError::TimestampTooOld { by_ms } => format!(
                "the signed timestamp is {} older than the route's tolerance allows: a captured delivery sent again (the window is what refuses a replay: keep it, and re-sign a capture with `hookgate replay --resign`), or the sender's clock is behind (check the gateway's clock and the provider's status)",
                human_ms(*by_ms)
            ),
            VerifyError::TimestampInFuture { by_ms } => format!(
                "the signed timestamp is {} further in the future than the route's tolerance allows: the sender's clock is ahead, or the gateway's is behind",
                human_ms(*by_ms)
            ),
            other => other.to_string(),
        },
    }
}

/// `1.5 s`, `2 min 5 s`, `3 h 2 min`.
fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms} ms"),
        1..60 => format!("{}.{} s", s, (ms % 1000) / 100),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod explain_tests {
    use super::*;

    #[test]
    fn reasons_say_what_to_fix_and_nothing_about_keys() {
        let stripe = Preset::parse("stripe");
        let missing = explain(
            &Rejection::Verify(VerifyError::MissingHeader("stripe-signature".into())),
            stripe,
            "json:/id",
        );
        assert!(
            missing.contains("stripe-signature header is missing"),
            "{missing}"
        );
        let old = explain(
            &Rejection::Verify(VerifyError::TimestampTooOld { by_ms: 125_000 }),
            stripe,
            "json:/id",
        );
        assert!(old.contains("2 min 5 s older"), "{old}");
        // The window is what refuses a replayed capture: never advise widening it.
        assert!(!old.contains("raise") && !old.contains("widen"), "{old}");
        assert!(old.contains("hookgate replay --resign"), "{old}");
        let bad = explain(
            &Rejection::Verify(VerifyError::BadSignature),
            stripe,
            "json:/id",
        );
        assert!(bad.contains("no configured secret matched"), "{bad}");
        let body = explain(
            &Rejection::Verify(VerifyError::Malformed("body".into())),
            stripe,
            "json:/id",
        );
        assert!(body.contains("not JSON"), "{body}");
    }
}
