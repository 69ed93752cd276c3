//! A delivery record as the log keeps it: one buffer, written once, on the request's
//! path, from the request's parts. Every store keeps these buffers as they are (the
//! disk store packs a write's buffers into one compressed frame, Redis keeps each one
//! compressed), and the admin API turns one into a [`DeliveryRecord`] when it reads it.
//!
//! ```text
//! [FORM] the fields of View in postcard's encoding (lengths as varints, then bytes)
//! ```
//!
//! Why a buffer rather than the record's struct: a request's record is written for
//! every delivery and read almost never. As a struct it was some thirty allocations
//! (a string per field and two per header) made on one thread and freed on another;
//! as a buffer it is one, and nothing in it is escaped: the body is kept as the bytes
//! that came, and made text (or base64) only when it is shown. The first fields are
//! the ID, the time and the route, so a store reads those without decoding the rest.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{DeliveryRecord, QueueLink};

/// The first byte of a stored record: the form of what follows.
const FORM: u8 = 1;

/// Bytes as they came (a body, an answer): written as one run of bytes, read without
/// a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(pub &'a [u8]);

impl Serialize for Raw<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a [u8]>::deserialize(d).map(Raw)
    }
}

/// A record's fields, borrowed from where they are: the request's parts when it is
/// written, the stored buffer when it is read. [`DeliveryRecord`] documents each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct View<'a> {
    pub delivery_id: &'a str,
    pub received_at: u64,
    pub route: &'a str,
    pub provider: &'a str,
    pub peer: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    #[serde(borrow)]
    pub query: Option<&'a str>,
    /// Credentials and signatures already `[redacted]`.
    #[serde(borrow)]
    pub headers: Vec<(&'a str, &'a str)>,
    /// The body as received (credentials redacted), cut at `log.max_body`.
    #[serde(borrow)]
    pub body: Option<Raw<'a>>,
    pub body_bytes: u64,
    pub body_truncated: bool,
    #[serde(borrow)]
    pub event_id: Option<&'a str>,
    #[serde(borrow)]
    pub provider_delivery_id: Option<&'a str>,
    #[serde(borrow)]
    pub event_type: Option<&'a str>,
    pub outcome: &'a str,
    pub status: u16,
    #[serde(borrow)]
    pub answer: Option<Raw<'a>>,
    pub duration_us: u64,
    #[serde(borrow)]
    pub secret: Option<&'a str>,
    #[serde(borrow)]
    pub reason: Option<&'a str>,
    #[serde(borrow)]
    pub replay_of: Option<&'a str>,
    /// The queue event's route and ID.
    #[serde(borrow)]
    pub queue: Option<(&'a str, &'a str)>,
}

/// The fields a store needs of every record: the first three of [`View`].
#[derive(Debug, Deserialize)]
pub struct Head<'a> {
    pub delivery_id: &'a str,
    pub received_at: u64,
    pub route: &'a str,
}

impl View<'_> {
    /// The record as the admin API shows it; `with_body`: with its body and answer
    /// (a list shows neither).
    pub fn record(&self, with_body: bool) -> DeliveryRecord {
        let opt = |s: Option<&str>| s.map(str::to_owned);
        let (body, body_base64) = match self.body {
            Some(Raw(b)) => {
                let (text, base64) = body_text(b, self.body_truncated);
                (with_body.then_some(text), base64)
            }
            None => (None, false),
        };
        DeliveryRecord {
            delivery_id: self.delivery_id.to_owned(),
            received_at: self.received_at,
            route: self.route.to_owned(),
            provider: self.provider.to_owned(),
            peer: self.peer.to_owned(),
            method: self.method.to_owned(),
            path: match self.query {
                Some(q) => format!("{}?{q}", self.path),
                None => self.path.to_owned(),
            },
            headers: self
                .headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body,
            body_base64,
            body_bytes: self.body_bytes,
            body_truncated: self.body_truncated,
            event_id: opt(self.event_id),
            provider_delivery_id: opt(self.provider_delivery_id),
            event_type: opt(self.event_type),
            outcome: self.outcome.to_owned(),
            status: self.status,
            answer: self
                .answer
                .filter(|_| with_body)
                .map(|Raw(a)| String::from_utf8_lossy(a).into_owned()),
            duration_us: self.duration_us,
            secret: opt(self.secret),
            reason: opt(self.reason),
            replay_of: opt(self.replay_of),
            queue: self.queue.map(|(route, event_id)| QueueLink {
                route: route.to_owned(),
                event_id: event_id.to_owned(),
            }),
        }
    }

    /// Roughly the bytes the stored form takes (to size its buffer once).
    fn len_hint(&self) -> usize {
        let opt = |s: Option<&str>| s.map_or(1, |s| s.len() + 3);
        let raw = |r: Option<Raw<'_>>| r.map_or(1, |Raw(b)| b.len() + 4);
        64 + self.delivery_id.len()
            + self.route.len()
            + self.provider.len()
            + self.peer.len()
            + self.method.len()
            + self.path.len()
            + opt(self.query)
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len() + 4)
                .sum::<usize>()
            + raw(self.body)
            + opt(self.event_id)
            + opt(self.provider_delivery_id)
            + opt(self.event_type)
            + self.outcome.len()
            + raw(self.answer)
            + opt(self.secret)
            + opt(self.reason)
            + opt(self.replay_of)
            + self.queue.map_or(1, |(r, e)| r.len() + e.len() + 4)
    }
}

/// A body as the API shows it: its text (a cut inside a character drops the
/// character's start), or base64 when it is not UTF-8; and whether it is base64.
fn body_text(b: &[u8], cut: bool) -> (String, bool) {
    match std::str::from_utf8(b) {
        Ok(t) => (t.to_owned(), false),
        Err(e) if cut && e.error_len().is_none() => (
            String::from_utf8_lossy(&b[..e.valid_up_to()]).into_owned(),
            false,
        ),
        Err(_) => {
            use base64::Engine as _;
            (base64::engine::general_purpose::STANDARD.encode(b), true)
        }
    }
}

/// A record in the form every store keeps: see the module's doc.
#[derive(Clone, PartialEq, Eq)]
pub struct Stored(Bytes);

impl fmt::Debug for Stored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stored")
            .field("delivery_id", &self.head().map(|h| h.delivery_id))
            .field("bytes", &self.0.len())
            .finish()
    }
}

impl Stored {
    /// The stored form of `view`.
    pub fn encode(view: &View<'_>) -> Self {
        let mut out = Vec::with_capacity(view.len_hint());
        out.push(FORM);
        // Writing to a vector fails only for types that cannot be encoded; these can.
        let out = postcard::to_extend(view, out).unwrap_or_default();
        Self(Bytes::from(out))
    }

    /// The stored form of a record the gateway has as a [`DeliveryRecord`] (an
    /// operator's replay, a record kept in an older form).
    pub fn from_record(r: &DeliveryRecord) -> Self {
        use base64::Engine as _;
        let decoded;
        let body: Option<&[u8]> = match &r.body {
            Some(b) if r.body_base64 => {
                decoded = base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .unwrap_or_default();
                Some(&decoded)
            }
            Some(b) => Some(b.as_bytes()),
            None => None,
        };
        let (path, query) = match r.path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (r.path.as_str(), None),
        };
        Self::encode(&View {
            delivery_id: &r.delivery_id,
            received_at: r.received_at,
            route: &r.route,
            provider: &r.provider,
            peer: &r.peer,
            method: &r.method,
            path,
            query,
            headers: r
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            body: body.map(Raw),
            body_bytes: r.body_bytes,
            body_truncated: r.body_truncated,
            event_id: r.event_id.as_deref(),
            provider_delivery_id: r.provider_delivery_id.as_deref(),
            event_type: r.event_type.as_deref(),
            outcome: &r.outcome,
            status: r.status,
            answer: r.answer.as_deref().map(|a| Raw(a.as_bytes())),
            duration_us: r.duration_us,
            secret: r.secret.as_deref(),
            reason: r.reason.as_deref(),
            replay_of: r.replay_of.as_deref(),
            queue: r
                .queue
                .as_ref()
                .map(|q| (q.route.as_str(), q.event_id.as_str())),
        })
    }

    /// Bytes a store read back, as they were written (checked when they are read).
    pub fn from_bytes(bytes: Bytes) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every field; `None` if the bytes are damaged or of another form.
    pub fn view(&self) -> Option<View<'_>> {
        match self.0.split_first()? {
            (&FORM, rest) => postcard::from_bytes(rest).ok(),
            _ => None,
        }
    }

    /// The ID, time and route, without decoding the rest.
    pub fn head(&self) -> Option<Head<'_>> {
        match self.0.split_first()? {
            (&FORM, rest) => postcard::take_from_bytes(rest).ok().map(|(h, _)| h),
            _ => None,
        }
    }

    /// The record as the admin API shows it (see [`View::record`]).
    pub fn record(&self, with_body: bool) -> Option<DeliveryRecord> {
        self.view().map(|v| v.record(with_body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(body: &'a [u8], cut: bool) -> View<'a> {
        View {
            delivery_id: "019ad2f0a6fb-00010002",
            received_at: 1_764_590_000_123,
            route: "stripe",
            provider: "stripe",
            peer: "127.0.0.1:5000",
            method: "POST",
            path: "/hooks/stripe",
            query: Some("a=1"),
            headers: vec![
                ("content-type", "application/json"),
                ("stripe-signature", "[redacted]"),
            ],
            body: Some(Raw(body)),
            body_bytes: 4000,
            body_truncated: cut,
            event_id: Some("evt_1"),
            provider_delivery_id: None,
            event_type: Some("invoice.paid"),
            outcome: "forwarded",
            status: 200,
            answer: Some(Raw(b"{\"ok\":true}")),
            duration_us: 900,
            secret: Some("secrets[0]"),
            reason: None,
            replay_of: None,
            queue: Some(("stripe", "evt_1")),
        }
    }

    #[test]
    fn a_record_reads_back_as_it_was_written() {
        let v = view(br#"{"id":"evt_1"}"#, false);
        let stored = Stored::encode(&v);
        assert_eq!(stored.view(), Some(v.clone()));
        let head = stored.head().expect("a head");
        assert_eq!(
            (head.delivery_id, head.received_at, head.route),
            (v.delivery_id, v.received_at, v.route)
        );
        let r = stored.record(true).expect("a record");
        assert_eq!(r.path, "/hooks/stripe?a=1");
        assert_eq!(r.body.as_deref(), Some(r#"{"id":"evt_1"}"#));
        assert_eq!(r.answer.as_deref(), Some(r#"{"ok":true}"#));
        assert_eq!(r.queue.as_ref().map(|q| q.event_id.as_str()), Some("evt_1"));
        // Back through the API's form: the same bytes.
        assert_eq!(Stored::from_record(&r), stored);
        let listed = stored.record(false).expect("a record");
        assert_eq!((listed.body, listed.answer), (None, None));
    }

    #[test]
    fn bodies_are_text_base64_or_cut_at_a_character() {
        let binary = Stored::encode(&view(&[0xff, 0x00, 0x41], false))
            .record(true)
            .expect("a record");
        assert_eq!(
            (binary.body.as_deref(), binary.body_base64),
            (Some("/wBB"), true)
        );
        assert_eq!(
            Stored::from_record(&binary).view().and_then(|v| v.body),
            Some(Raw(&[0xff, 0x00, 0x41][..]))
        );
        // "é" is two bytes; cut after the first.
        let cut = Stored::encode(&view(&[b'a', 0xc3], true))
            .record(true)
            .expect("a record");
        assert_eq!((cut.body.as_deref(), cut.body_base64), (Some("a"), false));
    }

    #[test]
    fn damaged_or_foreign_bytes_read_as_nothing() {
        let stored = Stored::encode(&view(b"{}", false));
        let bytes = stored.as_bytes();
        let cut = Stored::from_bytes(Bytes::copy_from_slice(&bytes[..bytes.len() - 3]));
        assert_eq!(cut.view(), None);
        assert_eq!(Stored::from_bytes(Bytes::new()).view(), None);
        assert!(
            Stored::from_bytes(Bytes::from_static(b"{\"a\":1}"))
                .head()
                .is_none()
        );
        // A length beyond the buffer is refused, not allocated.
        let mut huge = vec![FORM, 0xff, 0xff, 0xff, 0xff, 0x0f];
        huge.extend_from_slice(b"abc");
        assert!(Stored::from_bytes(Bytes::from(huge)).view().is_none());
    }
}
