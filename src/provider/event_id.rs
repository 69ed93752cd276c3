//! Taking the event ID to deduplicate on, and normalising it into a key-safe form.
//!
//! Batching providers (SendGrid, HubSpot, Meta, Adyen, Okta, Mandrill) put several
//! events in one delivery. Such a delivery is deduplicated as a whole: its key is the
//! single ID when there is one, else `batch-` + SHA-256 (hex) of the IDs joined by
//! newlines, in the order they appear. A retry of the same batch carries the same IDs,
//! so it gets the same key; `Hookgate-Event-Id` carries that key.

use std::borrow::Cow;
use std::fmt;

use http::{HeaderMap, HeaderName};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::header_once;
use super::json_pointer::Pointer;

/// Extractors for providers whose event ID is a list or a composite of fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomId {
    /// Meta: every `messages[].id`, `statuses[]` as `id:status`, and `messaging[].message.mid`.
    MetaMessages,
    /// SendGrid: every event's `sg_event_id`.
    SendgridEvents,
    /// HubSpot: every event's `eventId`.
    HubspotEvents,
    /// Adyen: every item's `pspReference:eventCode:success`.
    AdyenItems,
    /// Okta: every `data.events[].uuid`.
    OktaEvents,
    /// GoCardless, FastSpring: every `events[].id`.
    GocardlessEvents,
    /// Mandrill: every `_id` in the form field `mandrill_events`.
    MandrillEvents,
    /// Postmark: `RecordType:MessageID`.
    PostmarkRecord,
    /// Netlify: `id:state` of the deploy.
    NetlifyDeploy,
    /// Airtable: `webhook.id:timestamp` of the ping.
    AirtablePing,
    /// Zendesk: body `id`, else the `X-Zendesk-Webhook-Invocation-Id` header.
    ZendeskId,
    /// Mailgun: `event-data.id`, else the body hash (form posts carry no ID).
    MailgunEvent,
    /// Discord: body `id`, else the body hash (webhook events carry no ID).
    DiscordId,
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "True".into() } else { "False".into() }),
        _ => None,
    }
}

fn each(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_array).into_iter().flatten()
}

impl CustomId {
    /// A short description for `hookgate providers`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::MetaMessages => "body message ids (batch)",
            Self::SendgridEvents => "each sg_event_id (batch)",
            Self::HubspotEvents => "each eventId (batch)",
            Self::AdyenItems => "each pspReference:eventCode:success (batch)",
            Self::OktaEvents => "each data.events[].uuid (batch)",
            Self::GocardlessEvents => "each events[].id (batch)",
            Self::MandrillEvents => "each mandrill_events[]._id (batch)",
            Self::PostmarkRecord => "body RecordType:MessageID",
            Self::NetlifyDeploy => "body id:state",
            Self::AirtablePing => "body webhook.id:timestamp",
            Self::ZendeskId => "body id | X-Zendesk-Webhook-Invocation-Id",
            Self::MailgunEvent => "body event-data.id | body-sha256",
            Self::DiscordId => "body id | body-sha256",
        }
    }

    /// The header the ID is taken from for this body, if any (Zendesk without a body
    /// `id` falls back to `X-Zendesk-Webhook-Invocation-Id`).
    fn header_used(self, body: &[u8]) -> Option<HeaderName> {
        match self {
            Self::ZendeskId if super::hmac_scheme::json_scalar(body, "/id").is_none() => {
                Some(HeaderName::from_static("x-zendesk-webhook-invocation-id"))
            }
            _ => None,
        }
    }

    fn extract(self, headers: &HeaderMap, body: &[u8]) -> Option<Vec<String>> {
        if self == Self::MandrillEvents {
            let events = form_urlencoded::parse(body)
                .find(|(k, _)| k == "mandrill_events")?
                .1;
            let v: Value = serde_json::from_str(&events).ok()?;
            return each(Some(&v))
                .map(|e| e.get("_id").and_then(scalar))
                .collect();
        }
        let json: Option<Value> = serde_json::from_slice(body).ok();
        let field = |ptr: &str| json.as_ref().and_then(|j| j.pointer(ptr)).and_then(scalar);
        let pair = |a: &str, b: &str| Some(vec![format!("{}:{}", field(a)?, field(b)?)]);
        match self {
            Self::MetaMessages => {
                let j = json.as_ref()?;
                let mut ids = Vec::new();
                for entry in each(j.get("entry")) {
                    for change in each(entry.get("changes")) {
                        let value = change.get("value");
                        for m in each(value.and_then(|v| v.get("messages"))) {
                            ids.push(m.get("id").and_then(scalar)?);
                        }
                        for s in each(value.and_then(|v| v.get("statuses"))) {
                            ids.push(format!(
                                "{}:{}",
                                s.get("id").and_then(scalar)?,
                                s.get("status").and_then(scalar)?
                            ));
                        }
                    }
                    for m in each(entry.get("messaging")) {
                        if let Some(msg) = m.get("message") {
                            ids.push(msg.get("mid").and_then(scalar)?);
                        }
                    }
                }
                Some(ids)
            }
            Self::SendgridEvents => each(json.as_ref())
                .map(|e| e.get("sg_event_id").and_then(scalar))
                .collect(),
            Self::HubspotEvents => each(json.as_ref())
                .map(|e| e.get("eventId").and_then(scalar))
                .collect(),
            Self::AdyenItems => each(json.as_ref().and_then(|j| j.get("notificationItems")))
                .map(|i| {
                    let it = i.get("NotificationRequestItem")?;
                    Some(format!(
                        "{}:{}:{}",
                        it.get("pspReference").and_then(scalar)?,
                        it.get("eventCode").and_then(scalar)?,
                        it.get("success").and_then(scalar)?
                    ))
                })
                .collect(),
            Self::OktaEvents => each(json.as_ref().and_then(|j| j.pointer("/data/events")))
                .map(|e| e.get("uuid").and_then(scalar))
                .collect(),
            Self::GocardlessEvents => each(json.as_ref().and_then(|j| j.get("events")))
                .map(|e| e.get("id").and_then(scalar))
                .collect(),
            Self::PostmarkRecord => pair("/RecordType", "/MessageID"),
            Self::NetlifyDeploy => pair("/id", "/state"),
            Self::AirtablePing => pair("/webhook/id", "/timestamp"),
            Self::ZendeskId => field("/id")
                .or_else(|| {
                    header_once(
                        headers,
                        &HeaderName::from_static("x-zendesk-webhook-invocation-id"),
                    )
                    .ok()
                    .map(str::to_owned)
                })
                .map(|id| vec![id]),
            Self::MailgunEvent => Some(vec![
                field("/event-data/id").unwrap_or_else(|| body_sha256_hex(body)),
            ]),
            Self::DiscordId => Some(vec![field("/id").unwrap_or_else(|| body_sha256_hex(body))]),
            Self::MandrillEvents => None,
        }
    }
}

/// Where a route takes the event ID to deduplicate on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventIdSource {
    /// The first of these headers present.
    Header(Vec<HeaderName>),
    /// A JSON pointer into the body (`/data/id`); strings and integers are used.
    Json(Pointer),
    /// The SHA-256 of the raw body: identical bodies are the same event.
    BodySha256,
    /// A provider-specific list or composite (see [`CustomId`]).
    Custom(CustomId),
}

impl EventIdSource {
    /// Parses `header:NAME`, `json:/pointer` or `body-sha256`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(name) = s.strip_prefix("header:") {
            let name = name.trim();
            return HeaderName::try_from(name)
                .map(|h| Self::Header(vec![h]))
                .map_err(|_| format!("event_id header {name:?} is not a valid header name"));
        }
        if let Some(ptr) = s.strip_prefix("json:") {
            if !ptr.is_empty() && !ptr.starts_with('/') {
                return Err(format!("json pointer {ptr:?} must start with '/'"));
            }
            return Ok(Self::Json(ptr.into()));
        }
        if s == "body-sha256" {
            return Ok(Self::BodySha256);
        }
        Err(format!(
            "event_id {s:?}: use \"header:NAME\", \"json:/pointer\" or \"body-sha256\""
        ))
    }

    /// Headers by name (for presets).
    pub fn headers(names: &[&'static str]) -> Self {
        Self::Header(names.iter().map(|n| HeaderName::from_static(n)).collect())
    }

    /// Extracts the event ID from a verified request.
    pub fn extract(&self, headers: &HeaderMap, body: &[u8]) -> Option<EventId> {
        self.extract_with_origin(headers, body).map(|(id, _)| id)
    }

    /// Extracts the event ID, and the header it came from when it came from one (a
    /// header the signature may not cover: the caller decides whether to trust it).
    pub fn extract_with_origin(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<(EventId, Option<HeaderName>)> {
        self.extract_read(headers, body, None)
    }

    /// The JSON pointer it reads, if any: a route reads it in the same walk over the
    /// body as its event type (`provider::BodyFields`).
    pub fn json_pointer(&self) -> Option<&Pointer> {
        match self {
            Self::Json(p) => Some(p),
            _ => None,
        }
    }

    /// [`extract_with_origin`](Self::extract_with_origin), with the value at
    /// [`json_pointer`](Self::json_pointer) already read when `read` is `Some`.
    pub fn extract_read(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        read: Option<Option<&str>>,
    ) -> Option<(EventId, Option<HeaderName>)> {
        let (raw, origin): (Cow<'_, str>, _) = match self {
            Self::Header(names) => names.iter().find_map(|n| {
                header_once(headers, n)
                    .ok()
                    .map(|v| (Cow::Borrowed(v), Some(n.clone())))
            })?,
            Self::Json(ptr) => match read {
                Some(value) => (Cow::Borrowed(value?), None),
                None => (Cow::Owned(ptr.read(body)?), None),
            },
            Self::BodySha256 => (Cow::Owned(body_sha256_hex(body)), None),
            Self::Custom(c) => {
                let origin = c.header_used(body);
                return Some((EventId::from_list(&c.extract(headers, body)?)?, origin));
            }
        };
        if raw.is_empty() {
            return None;
        }
        Some((EventId::new(&raw), origin))
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
            Self::Custom(c) => f.write_str(c.describe()),
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

    /// The key of a batch: its one ID, or `batch-<sha256 of the IDs joined by \n>`.
    /// `None` for an empty list or an empty ID.
    pub fn from_list(ids: &[String]) -> Option<Self> {
        match ids {
            [] => None,
            [one] if one.is_empty() => None,
            [one] => Some(Self::new(one)),
            many => Some(Self(format!(
                "batch-{}",
                hex::encode(Sha256::digest(many.join("\n").as_bytes()))
            ))),
        }
    }

    /// The ID of a delivery whose provider ID the signature does not cover:
    /// `sig-` + SHA-256 (hex) of the signed bytes it carries (the body, and the URL
    /// where the provider signs it). A replay of the same signed bytes gets the same
    /// ID whatever unsigned ID comes with it, and a chosen unsigned ID can never name
    /// (and so poison) another event's key.
    pub fn signed_content(url: Option<&str>, body: &[u8]) -> Self {
        let mut h = Sha256::new();
        if let Some(u) = url {
            // Length-prefixed, so no URL/body split can collide with another.
            h.update((u.len() as u64).to_be_bytes());
            h.update(u.as_bytes());
        }
        h.update(body);
        Self(format!("sig-{}", hex::encode(h.finalize())))
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

/// The XXH3-128 hash of a delivery's raw body: a replay with the same ID but another
/// body is refused instead of being acknowledged as a duplicate. Not a cryptographic
/// hash, and need not be: it only tells apart bodies the provider itself signed (the
/// docs/how-it-works.md says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u128);

impl Fingerprint {
    /// Hashes a body with XXH3-128. The fingerprint only tells a repeated delivery
    /// from a different body under the same event ID, among bodies the provider
    /// itself signed, so it needs no resistance to a forger (who could not sign the
    /// body anyway) — and the body is already hashed once for its signature: a second
    /// SHA-256 pass was half the gateway's CPU at 64 KiB; XXH3 costs a few percent.
    pub fn of(body: &[u8]) -> Self {
        Self(xxhash_rust::xxh3::xxh3_128(body))
    }

    /// 128 bits in hex: what the store keeps.
    pub fn short_hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

/// The SHA-256 of a body in hex: the event ID of `body-sha256` routes (and the
/// fallback of presets whose payload may lack an ID), stable across versions.
fn body_sha256_hex(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_or_unprintable_event_ids_are_hashed() {
        assert_eq!(EventId::new("evt_1").as_str(), "evt_1");
        assert_eq!(EventId::new("a b").as_str().len(), 64);
        assert_eq!(EventId::new(&"x".repeat(201)).as_str().len(), 64);
        assert_eq!(EventId::new(&"x".repeat(200)).as_str().len(), 200);
    }

    #[test]
    fn batches_get_one_key() {
        assert_eq!(EventId::from_list(&[]), None);
        assert_eq!(
            EventId::from_list(&["a".into()]).map(|e| e.0),
            Some("a".into())
        );
        let two = EventId::from_list(&["a".into(), "b".into()]).expect("key");
        assert!(two.as_str().starts_with("batch-") && two.as_str().len() == 70);
        assert_ne!(Some(two), EventId::from_list(&["b".into(), "a".into()]));
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
}
