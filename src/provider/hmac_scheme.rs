//! Every scheme whose signature is an HMAC over a template of the raw body, an
//! optional timestamp and an optional message ID: GitHub, Shopify, Slack, Stripe and
//! the generic `hmac` provider are all data over this one verifier.

use http::{HeaderMap, HeaderName};

use super::mac::{Encoding, MacKey, first_match};
use super::{Inbound, Template, VerifyError, header_once, parse_timestamp};

/// Where the signatures sit in their header.
#[derive(Debug, Clone)]
pub enum SigFormat {
    /// The header holds signatures directly: `prefix` + encoded tag, several joined
    /// by `separator` when the provider rotates keys that way (`sha256=ab12…`).
    Plain {
        prefix: String,
        separator: Option<String>,
    },
    /// The header is a list of `key=value` items that carries the timestamp and one or
    /// more signatures (`t=1700000000,v1=ab12…,v1=cd34…`). Items with other keys, such as
    /// Stripe's `v0`, are ignored.
    KeyValue {
        item_separator: char,
        timestamp_key: String,
        signature_key: String,
    },
}

/// Where the timestamp that the signature covers comes from.
#[derive(Debug, Clone)]
pub enum TimestampSource {
    /// The scheme signs no timestamp.
    None,
    /// A header of its own (`X-Slack-Request-Timestamp`).
    Header(HeaderName),
    /// An item of the signature header itself (`t=` in `Stripe-Signature`).
    SignatureHeader,
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
    /// The header that fills `{id}` in the payload, if the template uses it.
    pub id_header: Option<HeaderName>,
    /// One keyed MAC per configured secret, in config order.
    pub keys: Vec<MacKey>,
}

/// What passed: which secret matched, and the signed timestamp if there was one.
#[derive(Debug, Clone, Copy)]
pub struct Matched {
    pub secret_index: usize,
    pub timestamp: Option<u64>,
}

impl HmacScheme {
    /// Checks the signature of `req`. The timestamp is returned for the caller's
    /// tolerance check; it is only trusted because it is part of the signed bytes.
    pub fn verify(&self, req: &Inbound<'_>) -> Result<Matched, VerifyError> {
        let (name, value) = self.signature_header(req.headers)?;
        let mut candidates = Vec::new();
        let mut ts_text: Option<&str> = None;
        match &self.format {
            SigFormat::Plain { prefix, separator } => {
                let mut push = |item: &str| {
                    if let Some(sig) = item.trim().strip_prefix(prefix.as_str()) {
                        if let Some(bytes) = self.encoding.decode(sig) {
                            candidates.push(bytes);
                        }
                    }
                };
                match separator {
                    Some(sep) => value.split(sep.as_str()).for_each(&mut push),
                    None => push(value),
                }
            }
            SigFormat::KeyValue {
                item_separator,
                timestamp_key,
                signature_key,
            } => {
                for item in value.split(*item_separator) {
                    let Some((k, v)) = item.split_once('=') else {
                        continue;
                    };
                    let (k, v) = (k.trim(), v.trim());
                    if k == timestamp_key {
                        if ts_text.is_some() {
                            return Err(VerifyError::Malformed(name.to_string()));
                        }
                        ts_text = Some(v);
                    } else if k == signature_key {
                        if let Some(bytes) = self.encoding.decode(v) {
                            candidates.push(bytes);
                        }
                    }
                }
            }
        }
        if candidates.is_empty() {
            return Err(VerifyError::Malformed(name.to_string()));
        }

        let ts_text = match &self.timestamp {
            TimestampSource::None => None,
            TimestampSource::Header(h) => Some(header_once(req.headers, h)?),
            TimestampSource::SignatureHeader => {
                Some(ts_text.ok_or_else(|| VerifyError::Malformed(name.to_string()))?)
            }
        };
        let timestamp = ts_text.map(parse_timestamp).transpose()?;
        let id = match &self.id_header {
            Some(h) => Some(header_once(req.headers, h)?),
            None => None,
        };

        let parts = self
            .payload
            .parts(req.body, ts_text.map(str::as_bytes), id.map(str::as_bytes));
        let secret_index =
            first_match(&self.keys, &parts, &candidates).ok_or(VerifyError::BadSignature)?;
        Ok(Matched {
            secret_index,
            timestamp,
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

    /// Produces the signature header value(s) for `body`, as the provider would send
    /// them; used by `hookgate sign` and the tests.
    pub fn sign(
        &self,
        body: &[u8],
        timestamp: Option<&str>,
        id: Option<&str>,
    ) -> Vec<(HeaderName, String)> {
        let mut out = Vec::new();
        let parts = self
            .payload
            .parts(body, timestamp.map(str::as_bytes), id.map(str::as_bytes));
        let Some(key) = self.keys.first() else {
            return out;
        };
        let sig = self.encoding.encode(key.tag(&parts).as_bytes());
        let Some(header) = self.headers.first() else {
            return out;
        };
        match &self.format {
            SigFormat::Plain { prefix, .. } => out.push((header.clone(), format!("{prefix}{sig}"))),
            SigFormat::KeyValue {
                item_separator,
                timestamp_key,
                signature_key,
            } => out.push((
                header.clone(),
                format!(
                    "{timestamp_key}={}{item_separator}{signature_key}={sig}",
                    timestamp.unwrap_or_default()
                ),
            )),
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
