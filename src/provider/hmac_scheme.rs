//! Every scheme whose signature is an HMAC over a template of the raw body and, where
//! the provider signs them, a timestamp, a message ID, the method or the public URL.
//! Most presets (GitHub, Shopify, Slack, Stripe, Paddle, Mux, Twitch, Zoom, …) and the
//! generic `hmac` provider are data over this one verifier.

use http::{HeaderMap, HeaderName};

use super::mac::{Encoding, MacKey, first_match};
use super::timestamp::TsFormat;
use super::{Inbound, Template, VerifyError, header_once};

/// Where the signatures sit in their header.
#[derive(Debug, Clone)]
pub enum SigFormat {
    /// The header holds signatures directly: `prefix` + encoded tag, several joined
    /// by `separator` when the provider rotates keys that way (`sha256=ab12…`).
    Plain {
        prefix: String,
        separator: Option<String>,
    },
    /// The header is a list of `key=value` items (split on any of `separators`) that
    /// carries the timestamp and one or more signatures (`t=1700000000,v1=ab12…`).
    /// Items with other keys, such as Stripe's `v0`, are ignored; the timestamp may
    /// repeat with the same value (one set per secret), never with another.
    KeyValue {
        separators: &'static [char],
        timestamp_key: &'static str,
        signature_key: &'static str,
    },
    /// `timestamp,signature[,signature…]` (Recurly).
    Positional { separator: char },
}

/// Where the timestamp comes from.
#[derive(Debug, Clone)]
pub enum TimestampSource {
    /// The scheme has no timestamp.
    None,
    /// A header of its own (`X-Slack-Request-Timestamp`).
    Header(HeaderName),
    /// An item of the signature header itself (`t=` in `Stripe-Signature`).
    SignatureHeader,
    /// A field of the signed JSON body (Linear's `webhookTimestamp`). Never a header
    /// the provider also sends unsigned (`Linear-Timestamp`): a window on unsigned
    /// time is bypassed by sending a fresh one with an old capture.
    Json(&'static str),
}

/// A complete HMAC scheme with the route's keys.
#[derive(Debug, Clone)]
pub struct HmacScheme {
    /// Signature header names, tried in order (Shopify uses two names).
    pub headers: Vec<HeaderName>,
    pub format: SigFormat,
    pub encoding: Encoding,
    pub payload: Template,
    pub timestamp: TimestampSource,
    pub ts_format: TsFormat,
    /// The header that fills `{id}` in the payload, if the template uses it.
    pub id_header: Option<HeaderName>,
    /// One keyed MAC per configured secret, in config order.
    pub keys: Vec<MacKey>,
}

/// What passed: which secret matched, and the timestamp (unix ms) if there was one.
#[derive(Debug, Clone, Copy)]
pub struct Matched {
    pub secret_index: usize,
    pub timestamp_ms: Option<u64>,
}

impl HmacScheme {
    /// A plain body HMAC in one header: the most common scheme.
    pub fn body(header: &'static str, prefix: &str, encoding: Encoding, keys: Vec<MacKey>) -> Self {
        Self {
            headers: vec![HeaderName::from_static(header)],
            format: SigFormat::Plain {
                prefix: prefix.into(),
                separator: None,
            },
            encoding,
            payload: Template::body(),
            timestamp: TimestampSource::None,
            ts_format: TsFormat::Seconds,
            id_header: None,
            keys,
        }
    }

    /// Checks the signature of `req`. The timestamp is returned for the caller's
    /// window check; it is trusted only because the signature covers it.
    pub fn verify(&self, req: &Inbound<'_>) -> Result<Matched, VerifyError> {
        let (name, value) = self.signature_header(req.headers)?;
        let mut candidates = Vec::new();
        let mut ts_text: Option<&str> = None;
        let malformed = || VerifyError::Malformed(name.to_string());
        match &self.format {
            SigFormat::Plain { prefix, separator } => {
                let mut push = |item: &str| {
                    if let Some(sig) = item.trim().strip_prefix(prefix.as_str())
                        && let Some(bytes) = self.encoding.decode(sig)
                    {
                        candidates.push(bytes);
                    }
                };
                match separator {
                    Some(sep) => value.split(sep.as_str()).for_each(&mut push),
                    None => push(value),
                }
            }
            SigFormat::KeyValue {
                separators,
                timestamp_key,
                signature_key,
            } => {
                for item in value.split(*separators) {
                    let Some((k, v)) = item.split_once('=') else {
                        continue;
                    };
                    let (k, v) = (k.trim(), v.trim());
                    if k == *timestamp_key {
                        // The same timestamp may repeat (Persona sends one
                        // `t=…,v1=…` set per secret while rotating); two different
                        // ones are ambiguous.
                        if ts_text.is_some_and(|t| t != v) {
                            return Err(malformed());
                        }
                        ts_text = Some(v);
                    } else if k == *signature_key
                        && let Some(bytes) = self.encoding.decode(v)
                    {
                        candidates.push(bytes);
                    }
                }
            }
            SigFormat::Positional { separator } => {
                let mut items = value.split(*separator).map(str::trim);
                ts_text = items.next();
                candidates.extend(items.filter_map(|s| self.encoding.decode(s)));
            }
        }
        if candidates.is_empty() {
            return Err(malformed());
        }

        // The timestamp is part of the MAC input when the template signs `{timestamp}`;
        // a body field is covered because the body is. Only signed time is returned
        // for the window: a window on unsigned time is no window.
        let (ts_text, ts_signed): (Option<String>, bool) = match &self.timestamp {
            TimestampSource::None => (None, false),
            TimestampSource::Header(h) => (
                Some(header_once(req.headers, h)?.to_owned()),
                self.payload.uses_timestamp(),
            ),
            TimestampSource::SignatureHeader => (
                Some(ts_text.ok_or_else(malformed)?.to_owned()),
                self.payload.uses_timestamp(),
            ),
            TimestampSource::Json(ptr) => (
                Some(json_scalar(req.body, ptr).ok_or(VerifyError::BadTimestamp)?),
                false,
            ),
        };
        let covered = match &self.timestamp {
            TimestampSource::Json(_) => self.payload.signs_body(),
            _ => ts_signed,
        };
        let timestamp_ms = ts_text
            .as_deref()
            .filter(|_| covered)
            .map(|t| self.ts_format.parse_ms(t))
            .transpose()?;
        let id = match &self.id_header {
            Some(h) => Some(header_once(req.headers, h)?),
            None => None,
        };
        let signed_ts = if ts_signed { ts_text.as_deref() } else { None };
        let parts = self
            .payload
            .parts(req, signed_ts.map(str::as_bytes), id.map(str::as_bytes));
        let secret_index =
            first_match(&self.keys, &parts, &candidates).ok_or(VerifyError::BadSignature)?;
        Ok(Matched {
            secret_index,
            timestamp_ms,
        })
    }

    fn signature_header<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> Result<(&'a HeaderName, &'a str), VerifyError> {
        for name in &self.headers {
            if headers.contains_key(name) {
                return Ok((name, header_once(headers, name)?));
            }
        }
        let first = self
            .headers
            .first()
            .map(|h| h.to_string())
            .unwrap_or_default();
        Err(VerifyError::MissingHeader(first))
    }

    /// The headers a provider would send with `req`'s body, signed with the first key
    /// (`hookgate sign` and the tests). `timestamp` is in the provider's own format.
    pub fn sign(
        &self,
        req: &Inbound<'_>,
        timestamp: Option<&str>,
        id: Option<&str>,
    ) -> Vec<(HeaderName, String)> {
        let mut out = Vec::new();
        let (Some(key), Some(header)) = (self.keys.first(), self.headers.first()) else {
            return out;
        };
        let signed_ts = match self.timestamp {
            TimestampSource::Header(_) | TimestampSource::SignatureHeader => timestamp,
            _ => None,
        };
        let parts = self
            .payload
            .parts(req, signed_ts.map(str::as_bytes), id.map(str::as_bytes));
        let sig = self.encoding.encode(key.tag(&parts).as_bytes());
        match &self.format {
            SigFormat::Plain { prefix, .. } => out.push((header.clone(), format!("{prefix}{sig}"))),
            SigFormat::KeyValue {
                separators,
                timestamp_key,
                signature_key,
            } => {
                let sep = separators.first().copied().unwrap_or(',');
                out.push((
                    header.clone(),
                    format!(
                        "{timestamp_key}={}{sep}{signature_key}={sig}",
                        timestamp.unwrap_or_default()
                    ),
                ));
            }
            SigFormat::Positional { separator } => {
                out.push((
                    header.clone(),
                    format!("{}{separator}{sig}", timestamp.unwrap_or_default()),
                ));
            }
        }
        if let (TimestampSource::Header(h), Some(ts)) = (&self.timestamp, timestamp) {
            out.push((h.clone(), ts.to_string()));
        }
        if let (Some(h), Some(id)) = (&self.id_header, id) {
            out.push((h.clone(), id.to_string()));
        }
        out
    }
}

/// A string or integer field of a JSON body, as text.
pub fn json_scalar(body: &[u8], pointer: &str) -> Option<String> {
    super::json_pointer::scalar(body, pointer)
}
