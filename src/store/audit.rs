//! The audit's storage: operators' actions on the admin listener (`admin/audit.rs`
//! says what a record holds), in the store the gateway already runs on, so that every
//! replica on Redis writes and reads one audit, and a disk or Redis store keeps it
//! across restarts (the memory store, for the process's life).
//!
//! The audit is bounded by count: [`KEEP`] newest records, the oldest dropped by the
//! write that goes past it (one transaction on disk, one script on Redis, under one
//! lock in memory). Records are a few hundred bytes (the admin layer bounds each
//! field), so the bound is a few MiB at most. Records are ordered by their ID (the
//! time in 12 hex digits, then a per-process counter: `store::log::new_delivery_id`);
//! on Redis by their time, then their bytes, which start with the ID.
//!
//! ```text
//! audit_append(space, id, at, record, keep)   record stored; the oldest beyond keep dropped
//! audit_list(space, skip, limit)              newest first, `skip` newest left out
//! ```
//!
//! `space` names the audit: on Redis its key (`<prefix>#audit`,
//! `store/redis/layout.rs`); the memory and disk stores hold one audit and ignore it.

use std::future::Future;

use super::StoreError;

/// Records the audit keeps: the newest this many.
pub const KEEP: usize = 10_000;

/// The audit contract every store implements.
pub trait AuditStore: Send + Sync {
    /// Stores one record under `id` (at `at_ms`), then drops the oldest records until
    /// at most `keep` remain.
    fn audit_append(
        &self,
        space: &str,
        id: &str,
        at_ms: u64,
        record: &[u8],
        keep: usize,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// At most `limit` records, newest first, after the `skip` newest.
    fn audit_list(
        &self,
        space: &str,
        skip: usize,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Vec<u8>>, StoreError>> + Send;
}

/// The audit's name in a store: `<prefix>#audit` (the `#` after the prefix keeps it
/// apart from every key a route and an event ID make).
pub fn space(prefix: &str) -> String {
    format!("{prefix}{}", super::redis::AUDIT)
}
