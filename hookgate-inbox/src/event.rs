//! One event as the handler receives it: a row of the inbox table.

use std::fmt;
use std::time::SystemTime;

use tokio_postgres::Row;

/// An event the gateway accepted, read from its inbox row.
///
/// `Debug` shows the header names and the body's length only: headers and bodies may
/// carry what a log must not.
#[derive(Clone)]
#[non_exhaustive]
pub struct Event {
    /// The row's `id`: acceptance order. Per order key, events are applied in this order.
    pub id: i64,
    /// The hookgate route that received it.
    pub route: String,
    /// The provider's event ID (unique per route).
    pub event_id: String,
    /// The provider's event type, when it gives one.
    pub event_type: Option<String>,
    /// The order key (`order_by` of the destination), or `None` when the event is
    /// unordered.
    pub order_key: Option<String>,
    /// The route's provider, e.g. `stripe`.
    pub provider: String,
    /// When the gateway accepted the delivery.
    pub received_at: SystemTime,
    /// The headers hookgate would forward, name → value. A value that is not a JSON
    /// string in the row is given as its JSON text.
    pub headers: Vec<(String, String)>,
    /// The body, the bytes that came.
    pub body: Vec<u8>,
}

impl Event {
    /// The first header of this name, compared without regard to ASCII case.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Reads the columns of the "next event" query, in its order.
    pub(crate) fn from_row(row: &Row) -> Result<Self, tokio_postgres::Error> {
        let headers: serde_json::Value = row.try_get(7)?;
        Ok(Self {
            id: row.try_get(0)?,
            route: row.try_get(1)?,
            event_id: row.try_get(2)?,
            event_type: row.try_get(3)?,
            order_key: row.try_get(4)?,
            provider: row.try_get(5)?,
            received_at: row.try_get(6)?,
            headers: header_pairs(headers),
            body: row.try_get(8)?,
        })
    }
}

/// The `headers` object as pairs; anything but an object has no headers (the gateway
/// always writes an object).
fn header_pairs(headers: serde_json::Value) -> Vec<(String, String)> {
    match headers {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(name, value)| match value {
                serde_json::Value::String(s) => (name, s),
                other => (name, other.to_string()),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Event")
            .field("id", &self.id)
            .field("route", &self.route)
            .field("event_id", &self.event_id)
            .field("event_type", &self.event_type)
            .field("order_key", &self.order_key)
            .field("provider", &self.provider)
            .field("received_at", &self.received_at)
            .field("headers", &names)
            .field("body_len", &self.body.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_that_are_not_strings_keep_their_json_text() {
        let pairs = header_pairs(serde_json::json!({"a": "1", "b": ["x", "y"], "c": 2}));
        assert_eq!(
            pairs,
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "[\"x\",\"y\"]".to_owned()),
                ("c".to_owned(), "2".to_owned()),
            ]
        );
        assert!(header_pairs(serde_json::json!(["a"])).is_empty());
    }
}
