//! Cells: small records of the gateway's own, shared by every replica on Redis and
//! kept across restarts by the durable stores — a destination's pause and breaker
//! (`delivery/control.rs`), the open incidents alerts are sent for (`observe/alerts`).
//!
//! One operation writes: [`Cells::cell_swap`], a compare-and-set on the cell's whole
//! value, so two replicas that change one cell at once never lose either change (the
//! loser reads again and retries, [`update`]). Cells are few and small (a few hundred
//! bytes each): none expires, and each is written only when an operator or an
//! incident changes it, never per event.
//!
//! ```text
//! cell_get(name)                    -> the value, or None
//! cell_swap(name, expect, new)      holds expect (None: absent) -> new (None: deleted), true
//!                                   anything else              -> unchanged, false
//! ```

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;

/// The cell contract every store implements (the memory store's cells last as long as
/// the process).
pub trait Cells: Send + Sync {
    /// The cell's value, or `None` when it holds nothing.
    fn cell_get(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Writes `new` (deletes the cell for `None`) if it holds exactly `expect` (is
    /// absent for `None`); `Ok(false)`, and nothing written, otherwise.
    fn cell_swap(
        &self,
        name: &str,
        expect: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// How many times [`update`] reads again after losing a race before it gives up.
const TRIES: usize = 32;

/// Reads a cell as JSON (a value this version cannot read counts as absent: it is
/// replaced on the next write).
pub async fn read<T: DeserializeOwned>(
    store: &impl Cells,
    name: &str,
) -> Result<Option<T>, StoreError> {
    Ok(store
        .cell_get(name)
        .await?
        .and_then(|v| serde_json::from_slice(&v).ok()))
}

/// Changes a cell: `change` gets its value (`None`: absent) and returns the new one
/// (`None`: delete) and what to answer, applied by compare-and-set and retried with
/// the value another writer left, so no concurrent change is lost. Returns the
/// answer and the value now stored.
pub async fn update<T, A>(
    store: &impl Cells,
    name: &str,
    mut change: impl FnMut(Option<T>) -> (Option<T>, A),
) -> Result<(A, Option<T>), StoreError>
where
    T: Serialize + DeserializeOwned + Clone,
{
    for _ in 0..TRIES {
        let raw = store.cell_get(name).await?;
        let old = raw.as_deref().and_then(|v| serde_json::from_slice(v).ok());
        let (new, answer) = change(old);
        let bytes = match &new {
            Some(v) => Some(serde_json::to_vec(v).map_err(|e| StoreError::Backend(e.to_string()))?),
            None => None,
        };
        if raw.as_deref() == bytes.as_deref() {
            return Ok((answer, new));
        }
        if store
            .cell_swap(name, raw.as_deref(), bytes.as_deref())
            .await?
        {
            return Ok((answer, new));
        }
    }
    Err(StoreError::Refused(format!(
        "the record {name:?} changed {TRIES} times while it was written; try again"
    )))
}

/// A cell's name in a store: `<prefix>#cell:<what>` (the `#` after the prefix keeps
/// it apart from every key a route and an event ID make, `store/redis/layout.rs`).
pub fn name(prefix: &str, what: &str) -> String {
    format!("{prefix}#cell:{what}")
}
