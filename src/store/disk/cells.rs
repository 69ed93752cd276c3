//! The disk store's cells ([`Cells`]): a table of their own, each swap one durable
//! write transaction of its own (cells change rarely: an operator's pause, an
//! incident). redb runs one write transaction at a time, so a swap waits for the
//! writer's batch in progress and the batch for it; it is run on a blocking thread.

use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition};

use super::{DiskStore, backend};
use crate::store::{Cells, StoreError};

/// name → value.
pub(super) const CELLS: TableDefinition<&str, &[u8]> = TableDefinition::new("cells");

impl Cells for DiskStore {
    async fn cell_get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let db = self.inner.shared.get()?;
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let table = match txn.open_table(CELLS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(backend(e)),
            };
            Ok(table
                .get(name.as_str())
                .map_err(backend)?
                .map(|v| v.value().to_vec()))
        })
        .await
        .map_err(backend)?
    }

    async fn cell_swap(
        &self,
        name: &str,
        expect: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let db = self.inner.shared.get()?;
        let shared = self.inner.shared.clone();
        let (name, expect, new) = (
            name.to_owned(),
            expect.map(<[u8]>::to_vec),
            new.map(<[u8]>::to_vec),
        );
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(backend)?;
            {
                let mut table = txn.open_table(CELLS).map_err(backend)?;
                let cur = table
                    .get(name.as_str())
                    .map_err(backend)?
                    .map(|v| v.value().to_vec());
                if cur != expect {
                    return Ok(false);
                }
                match &new {
                    Some(v) => {
                        table.insert(name.as_str(), v.as_slice()).map_err(backend)?;
                    }
                    None => {
                        table.remove(name.as_str()).map_err(backend)?;
                    }
                }
            }
            shared.commit_durably(txn)?;
            Ok(true)
        })
        .await
        .map_err(backend)?
    }
}
