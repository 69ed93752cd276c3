//! The queue's tables in the database file, and how their values are encoded and read.
//!
//! Tables (keys are `<key prefix><route>\n<event id>`: neither holds a newline):
//! - `queue_bodies`: the event (envelope and body) until it is delivered, under a
//!   sequence number (its status names it);
//! - `queue_status`: 8 bytes of expiry (Unix ms, big-endian; `u64::MAX` while
//!   undelivered) + a JSON [`StatusRecord`].

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::store::disk::backend;
use crate::store::{Status, StoreError, StoredEvent};

/// Events (envelope and body) under a sequence number in acceptance order: consecutive
/// enqueues append to the same pages instead of each copying a page of its own.
pub(in crate::store::disk) const EVENTS: TableDefinition<u64, &[u8]> =
    TableDefinition::new("queue_bodies");
pub(in crate::store::disk) const STATUS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("queue_status");

/// An event's status as stored, with what the index and a duplicate check need.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::store::disk) struct StatusRecord {
    #[serde(rename = "s")]
    pub status: Status,
    pub fp: String,
    /// Unix ms when it was received.
    pub rx: u64,
    /// The event's type (kept after delivery, when the event itself is gone).
    #[serde(default, rename = "t", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Where the event is in `queue_bodies`.
    #[serde(default, rename = "n")]
    pub seq: u64,
}

pub(super) fn qkey(route: &str, id: &str) -> String {
    format!("{route}\n{id}")
}

pub(super) fn split(qkey: &str) -> Option<(&str, &str)> {
    qkey.split_once('\n')
}

pub(super) fn encode_status(rec: &StatusRecord, expires_ms: u64) -> Vec<u8> {
    let json = serde_json::to_vec(rec).unwrap_or_default();
    let mut v = Vec::with_capacity(8 + json.len());
    v.extend_from_slice(&expires_ms.to_be_bytes());
    v.extend_from_slice(&json);
    v
}

pub(in crate::store::disk) fn decode_status(bytes: &[u8]) -> Option<(StatusRecord, u64)> {
    let (expiry, json) = bytes.split_at_checked(8)?;
    let expires_ms = u64::from_be_bytes(expiry.try_into().ok()?);
    Some((serde_json::from_slice(json).ok()?, expires_ms))
}

pub(super) fn read_status(
    status: &impl ReadableTable<&'static str, &'static [u8]>,
    k: &str,
) -> Result<Option<(StatusRecord, u64)>, StoreError> {
    match status.get(k).map_err(backend)? {
        None => Ok(None),
        Some(v) => decode_status(v.value())
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(k.replace('\n', ":"))),
    }
}

#[cfg(test)]
thread_local! {
    /// Reads of a queued event's status that fail (on this thread) before reading
    /// again: a test's way to inject a transient read error.
    pub(super) static FAILING_READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

pub(super) fn get_status(
    status: &redb::ReadOnlyTable<&str, &[u8]>,
    k: &str,
) -> Result<Option<StatusRecord>, StoreError> {
    #[cfg(test)]
    if FAILING_READS.with(|n| n.replace(n.get().saturating_sub(1)) > 0) {
        return Err(StoreError::Backend("an injected read error".into()));
    }
    Ok(read_status(status, k)?.map(|(rec, _)| rec))
}

pub(super) fn get_event(
    events: &redb::ReadOnlyTable<u64, &[u8]>,
    seq: u64,
    k: &str,
) -> Result<Option<StoredEvent>, StoreError> {
    match events.get(seq).map_err(backend)? {
        None => Ok(None),
        Some(v) => StoredEvent::decode(v.value())
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(k.replace('\n', ":"))),
    }
}
