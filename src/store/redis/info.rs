//! What the server says of itself in `INFO`: its memory and its eviction policy (the
//! gateway's checks of Redis's memory budget read these).

use super::RedisStore;
use crate::store::StoreError;

impl RedisStore {
    /// The server's `maxmemory-policy`, read from `INFO memory` (which answers where
    /// `CONFIG` is renamed or refused). On a cluster `INFO` goes to every primary: the
    /// first policy that evicts is returned, else the first found.
    pub async fn maxmemory_policy(&self) -> Result<String, StoreError> {
        let info: redis::Value = self
            .run(|mut c| async move { redis::cmd("INFO").arg("memory").query_async(&mut c).await })
            .await?;
        let mut found = Vec::new();
        collect_policies(&info, &mut found);
        found
            .iter()
            .find(|p| policy_evicts(p))
            .or_else(|| found.first())
            .cloned()
            .ok_or_else(|| StoreError::Backend("INFO memory names no maxmemory_policy".into()))
    }

    /// Each node's `used_memory` and `maxmemory` (0: no limit), from `INFO memory`:
    /// the server's, or every primary's on a cluster.
    pub async fn memory(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let info: redis::Value = self
            .run(|mut c| async move { redis::cmd("INFO").arg("memory").query_async(&mut c).await })
            .await?;
        let mut texts = Vec::new();
        collect_info(&info, &mut texts);
        let nodes: Vec<_> = texts.iter().filter_map(|t| memory_of(t)).collect();
        if nodes.is_empty() {
            return Err(StoreError::Backend(
                "INFO memory names no used_memory and maxmemory".into(),
            ));
        }
        Ok(nodes)
    }
}

/// Whether a `maxmemory-policy` lets Redis evict keys: every policy but `noeviction`.
pub fn policy_evicts(policy: &str) -> bool {
    policy != "noeviction"
}

/// The `maxmemory_policy:` values in an `INFO` answer (one text, or one per node).
fn collect_policies(v: &redis::Value, out: &mut Vec<String>) {
    let mut texts = Vec::new();
    collect_info(v, &mut texts);
    out.extend(texts.iter().flat_map(|t| {
        t.lines()
            .filter_map(|l| l.trim().strip_prefix("maxmemory_policy:"))
            .map(|p| p.trim().to_owned())
    }));
}

/// The text of each node's `INFO` answer (one for a server, one per primary on a
/// cluster).
pub(super) fn collect_info(v: &redis::Value, out: &mut Vec<String>) {
    match v {
        redis::Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(t) => out.push(t.clone()),
        redis::Value::VerbatimString { text: t, .. } => out.push(t.clone()),
        redis::Value::Map(kv) => {
            for (_, v) in kv {
                collect_info(v, out);
            }
        }
        redis::Value::Array(a) | redis::Value::Set(a) => {
            for v in a {
                collect_info(v, out);
            }
        }
        _ => {}
    }
}

/// A node's `used_memory` and `maxmemory` (0: no limit) from its `INFO memory`.
fn memory_of(info: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("used_memory:")?, field("maxmemory:")?))
}
