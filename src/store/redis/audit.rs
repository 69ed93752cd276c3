//! The Redis store's audit ([`AuditStore`]): one sorted set, `<prefix>#audit`, scored
//! by each record's time; a script adds a record and trims the oldest beyond the
//! bound at once (`scripts/audit_append.lua`), so every replica writes into, and reads,
//! the same bounded audit. One key: one cluster slot.

use std::sync::LazyLock;

use redis::Script;

use super::RedisStore;
use crate::store::StoreError;
use crate::store::audit::AuditStore;

static APPEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/audit_append.lua")));

impl AuditStore for RedisStore {
    async fn audit_append(
        &self,
        space: &str,
        _id: &str,
        at_ms: u64,
        record: &[u8],
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut inv = APPEND.prepare_invoke();
        inv.key(space).arg(at_ms).arg(record).arg(keep);
        let inv = &inv;
        let _: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(())
    }

    async fn audit_list(
        &self,
        space: &str,
        skip: usize,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = space.to_owned();
        self.run(|mut c| async move {
            redis::cmd("ZREVRANGE")
                .arg(&key)
                .arg(skip)
                .arg(skip + limit - 1)
                .query_async::<Vec<Vec<u8>>>(&mut c)
                .await
        })
        .await
    }
}
