//! The disk store's audit ([`AuditStore`]): a table of its own, ID → record, each
//! append one durable write transaction that also drops the oldest records beyond the
//! bound (operators' actions are rare: never per event). Run on a blocking thread, as
//! the cells are (`cells.rs`).

use redb::{
    ReadableDatabase as _, ReadableTable as _, ReadableTableMetadata as _, TableDefinition,
};

use super::{DiskStore, backend};
use crate::store::StoreError;
use crate::store::audit::AuditStore;

/// ID → record.
const AUDIT: TableDefinition<&str, &[u8]> = TableDefinition::new("audit");

impl AuditStore for DiskStore {
    async fn audit_append(
        &self,
        _space: &str,
        id: &str,
        _at_ms: u64,
        record: &[u8],
        keep: usize,
    ) -> Result<(), StoreError> {
        let db = self.inner.shared.get()?;
        let shared = self.inner.shared.clone();
        let (id, record) = (id.to_owned(), record.to_vec());
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(backend)?;
            {
                let mut table = txn.open_table(AUDIT).map_err(backend)?;
                table
                    .insert(id.as_str(), record.as_slice())
                    .map_err(backend)?;
                let mut len = table.len().map_err(backend)?;
                while len > keep as u64 {
                    if table.pop_first().map_err(backend)?.is_none() {
                        break;
                    }
                    len -= 1;
                }
            }
            shared.commit_durably(txn)
        })
        .await
        .map_err(backend)?
    }

    async fn audit_list(
        &self,
        _space: &str,
        skip: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let db = self.inner.shared.get()?;
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let table = match txn.open_table(AUDIT) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(backend(e)),
            };
            let mut out = Vec::new();
            for entry in table.iter().map_err(backend)?.rev().skip(skip).take(limit) {
                let (_, v) = entry.map_err(backend)?;
                out.push(v.value().to_vec());
            }
            Ok(out)
        })
        .await
        .map_err(backend)?
    }
}
