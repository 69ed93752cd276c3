//! The Redis store's cells ([`Cells`]): one string key each, swapped by a Lua
//! compare-and-set. Flagged `allow-oom`: an operator can pause a destination, and an
//! incident be recorded, on a Redis that is full (they are a few hundred bytes).

use std::sync::LazyLock;

use redis::Script;

use super::RedisStore;
use crate::store::{Cells, StoreError};

static SWAP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/cell_swap.lua")));

impl Cells for RedisStore {
    async fn cell_get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = name.to_owned();
        self.run(|mut c| async move {
            redis::cmd("GET")
                .arg(&key)
                .query_async::<Option<Vec<u8>>>(&mut c)
                .await
        })
        .await
    }

    async fn cell_swap(
        &self,
        name: &str,
        expect: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let mut inv = SWAP.prepare_invoke();
        inv.key(name)
            .arg(if expect.is_some() { "1" } else { "0" })
            .arg(expect.unwrap_or_default())
            .arg(if new.is_some() { "1" } else { "0" })
            .arg(new.unwrap_or_default());
        let inv = &inv;
        let n: i64 = self
            .run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(n == 1)
    }
}
