//! The audit's store ([`AuditStore`]) on every backend: records read back newest
//! first, paged by `skip`, and the bound holds at its edge (at `keep` nothing goes;
//! one past it, the oldest does).

use std::time::Duration;

use hookgate::store::{AuditStore as _, DiskStore, MemoryStore, RedisStore, Store};

use crate::support::RedisServer;

const SPACE: &str = "hookgate:#audit";

fn id(i: u64) -> String {
    format!("{:012x}-{:08x}", 1_700_000_000_000 + i, i)
}

async fn append(s: &Store, i: u64, keep: usize) {
    let record = format!("{{\"id\":\"{}\",\"n\":{i}}}", id(i));
    s.audit_append(
        SPACE,
        &id(i),
        1_700_000_000_000 + i,
        record.as_bytes(),
        keep,
    )
    .await
    .expect("append");
}

async fn listed(s: &Store, skip: usize, limit: usize) -> Vec<u64> {
    s.audit_list(SPACE, skip, limit)
        .await
        .expect("list")
        .iter()
        .map(|b| {
            let v: serde_json::Value = serde_json::from_slice(b).expect("json");
            v["n"].as_u64().expect("n")
        })
        .collect()
}

async fn lists_newest_first_and_holds_its_bound_at_the_edge(s: &Store) {
    {
        assert!(listed(s, 0, 10).await.is_empty(), "{s:?}: empty at first");
        for i in 0..5 {
            append(s, i, 5).await;
        }
        // At the bound: nothing dropped.
        assert_eq!(listed(s, 0, 10).await, [4, 3, 2, 1, 0], "{s:?}");
        // One past it: the oldest goes, and only it.
        append(s, 5, 5).await;
        assert_eq!(listed(s, 0, 10).await, [5, 4, 3, 2, 1], "{s:?}");
        for i in 6..9 {
            append(s, i, 5).await;
        }
        assert_eq!(listed(s, 0, 10).await, [8, 7, 6, 5, 4], "{s:?}");
        // Pages by skip.
        assert_eq!(listed(s, 0, 2).await, [8, 7], "{s:?}");
        assert_eq!(listed(s, 2, 2).await, [6, 5], "{s:?}");
        assert_eq!(listed(s, 4, 2).await, [4], "{s:?}");
        assert!(listed(s, 5, 2).await.is_empty(), "{s:?}");
        // Written out of order, read in order (two replicas' writes cross).
        append(s, 10, 5).await;
        append(s, 9, 5).await;
        assert_eq!(listed(s, 0, 3).await, [10, 9, 8], "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_holds_its_bound_on_memory() {
    lists_newest_first_and_holds_its_bound_at_the_edge(&Store::Memory(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_holds_its_bound_on_disk() {
    let dir = tempfile::tempdir().expect("dir");
    let disk = DiskStore::open(&dir.path().join("hookgate.db")).expect("open");
    lists_newest_first_and_holds_its_bound_at_the_edge(&Store::Disk(disk)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_holds_its_bound_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2)).expect("store");
    lists_newest_first_and_holds_its_bound_at_the_edge(&Store::Redis(store)).await;
}
