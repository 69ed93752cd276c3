//! What an operator's calls on a queue (`list`, `show`, `retry`, `purge`,
//! `release_blocked`) are made of: hashes read in pipelines, pages of an index, and
//! events queued again by compare-and-set on their status.

use std::future::Future;

use super::keys::Keys;
use super::scripts::{PURGE_SCRIPT, REQUEUE_SCRIPT};
use super::{CHUNK, decode_status, to_json};
use crate::queue::now_ms;
use crate::store::redis::RedisStore;
use crate::store::{Status, StoreError};

/// Reads of a status before a compare-and-set gives up on a racing writer.
const CAS_TRIES: usize = 3;

/// Two fields of one hash (`HMGET`), each absent or raw bytes.
pub(super) type Pair = (Option<Vec<u8>>, Option<Vec<u8>>);

impl RedisStore {
    /// `HMGET key env status` for each ID, in pipelines of [`CHUNK`].
    pub(super) async fn env_status(
        &self,
        k: &Keys,
        ids: &[String],
    ) -> Result<Vec<Pair>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("HMGET").arg(k.ev(id)).arg("env").arg("status");
            }
            let pipe = &pipe;
            let part: Vec<Pair> = self
                .run(|mut c| async move { pipe.query_async(&mut c).await })
                .await?;
            out.extend(part);
        }
        Ok(out)
    }

    /// `HMGET key status lease` for each ID, in one pipeline.
    pub(super) async fn status_lease(
        &self,
        k: &Keys,
        ids: &[String],
    ) -> Result<Vec<Pair>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET").arg(k.ev(id)).arg("status").arg("lease");
        }
        let pipe = &pipe;
        self.run(|mut c| async move { pipe.query_async(&mut c).await })
            .await
    }

    /// A page of an index, by rank.
    pub(super) async fn index_page(
        &self,
        index: &str,
        from: usize,
        count: usize,
    ) -> Result<Vec<String>, StoreError> {
        let to = from.saturating_add(count).saturating_sub(1);
        self.run(|mut c| async move {
            redis::cmd("ZRANGE")
                .arg(index)
                .arg(from)
                .arg(to)
                .query_async(&mut c)
                .await
        })
        .await
    }

    /// Pages through a queue's dead events, [`CHUNK`] at a time, oldest first: `act`
    /// acts on a page and returns how many events it counts and how many of the page
    /// left the dead index (requeued, purged, gone), so that the next page starts after
    /// those that stayed. Returns the count over every page.
    pub(super) async fn each_dead_page<F, Fut>(
        &self,
        k: &Keys,
        mut act: F,
    ) -> Result<u64, StoreError>
    where
        F: FnMut(Vec<String>) -> Fut,
        Fut: Future<Output = Result<(u64, u64), StoreError>>,
    {
        let (mut total, mut from) = (0, 0usize);
        loop {
            let page = self.index_page(&k.dead(), from, CHUNK).await?;
            if page.is_empty() {
                return Ok(total);
            }
            let len = page.len();
            let (n, left) = act(page).await?;
            total += n;
            from += len.saturating_sub(usize::try_from(left).unwrap_or(usize::MAX));
        }
    }

    /// Requeues those of `ids` that `eligible` accepts, each by compare-and-set on its
    /// status, re-reading the ones that changed meanwhile up to [`CAS_TRIES`] times.
    /// Returns `(requeued, dropped from the indexes as gone)`.
    pub(super) async fn requeue(
        &self,
        k: &Keys,
        ids: &[String],
        eligible: impl Fn(&Status) -> bool,
    ) -> Result<(u64, u64), StoreError> {
        let (mut requeued, mut gone) = (0, 0);
        let mut pending: Vec<String> = ids.to_vec();
        for _ in 0..CAS_TRIES {
            if pending.is_empty() {
                break;
            }
            let read = self.status_lease(k, &pending).await?;
            let now = now_ms();
            let mut ops: Vec<(String, Vec<u8>, String, String)> = Vec::new();
            for (id, (status, lease)) in pending.iter().zip(read) {
                let Some(raw) = status else {
                    ops.push((id.clone(), Vec::new(), String::new(), String::new()));
                    continue;
                };
                if lease.is_some() {
                    continue;
                }
                let mut st = decode_status(&raw, &k.ev(id))?;
                if !eligible(&st) {
                    continue;
                }
                st.requeue(now);
                let line = st.order_key.as_deref().map_or(String::new(), |o| k.line(o));
                ops.push((id.clone(), raw, to_json(&st)?, line));
            }
            if ops.is_empty() {
                break;
            }
            let mut inv = REQUEUE_SCRIPT.prepare_invoke();
            inv.key(k.stream())
                .key(k.dead())
                .key(k.delayed())
                .key(k.all());
            for (id, old, new, line) in &ops {
                inv.key(k.ev(id))
                    .arg(id)
                    .arg(old.as_slice())
                    .arg(new)
                    .arg(line);
            }
            let inv = &inv;
            let results: Vec<i64> = self
                .run(|mut c| async move { inv.invoke_async(&mut c).await })
                .await?;
            let mut raced = Vec::new();
            for ((id, old, _, _), r) in ops.into_iter().zip(results) {
                match r {
                    1 => requeued += 1,
                    2 => gone += 1,
                    // Changed between the read and the write: read it again (a gone
                    // event that came back is not retried).
                    _ if !old.is_empty() => raced.push(id),
                    _ => {}
                }
            }
            pending = raced;
        }
        Ok((requeued, gone))
    }

    /// Runs the purge script on some IDs: `(purged, dropped from the dead index)`.
    pub(super) async fn purge_ids(
        &self,
        k: &Keys,
        ids: &[String],
        mode: &str,
    ) -> Result<(u64, u64), StoreError> {
        let mut inv = PURGE_SCRIPT.prepare_invoke();
        inv.key(k.all())
            .key(k.dead())
            .key(k.delayed())
            .key(k.stream())
            .arg(mode)
            .arg(k.ev_prefix());
        for id in ids {
            inv.key(k.ev(id)).arg(id);
        }
        let inv = &inv;
        self.run(|mut c| async move { inv.invoke_async(&mut c).await })
            .await
    }
}
