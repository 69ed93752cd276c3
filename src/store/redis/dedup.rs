//! The Redis store's claims half ([`DedupStore`]): a claim is `SET NX` with the lease as
//! its expiry; `complete` and `release` are scripts that touch the key only while this
//! claim holds it.

use std::time::Duration;

use redis::{AsyncCommands, ExistenceCheck, SetExpiry, SetOptions};

use super::{RedisStore, invoke_then_wait, millis, too_few_replicas};
use crate::store::{Claim, DedupKey, DedupStore, Record, Settled, StoreError, Token};

/// Turns an in-flight record into a done record if this claim still holds the key, or
/// records done if the key is gone (the lease ran out and nobody claimed since).
/// Returns 1 when the key holds the done record afterwards, 0 when another claim holds it.
/// With ARGV[4] = `1` (`min_replicas_ack`) a done record already there is written again,
/// unchanged, so that the `WAIT` that follows covers it (see [`CLAIM_WAIT`]).
pub(super) const COMPLETE: &str = include_str!("scripts/complete.lua");

/// The claim under `min_replicas_ack`: `SET NX GET` as without it, and a done record
/// found is written again, unchanged (`KEEPTTL`). `WAIT` waits for the connection's
/// last write: a copy that found a done record and wrote nothing would be acknowledged
/// at once, even if no replica holds that record (a `complete` whose replication had not
/// happened yet, on this connection or another gateway's). The replication stream is in
/// order, so a replica that acknowledged the rewrite holds the record. ARGV: record,
/// lease ms. Returns the previous value (nil when claimed).
pub(super) const CLAIM_WAIT: &str = include_str!("scripts/claim_wait.lua");

/// Deletes the key if this claim still holds it. An absent key counts as released.
pub(super) const RELEASE: &str = include_str!("scripts/release.lua");

impl DedupStore for RedisStore {
    async fn claim(
        &self,
        key: &DedupKey,
        fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let token = Token::random();
        let record = Record::in_flight(&token, fingerprint).encode();
        let opts = SetOptions::default()
            .conditional_set(ExistenceCheck::NX)
            .get(true)
            .with_expiration(SetExpiry::PX(millis(lease)));
        // SET NX GET: claims and reads the current state in one round trip. With
        // min_replicas_ack, WAIT follows in the same pipeline: the claim counts only
        // once that many replicas hold it, so a primary lost right after cannot hand
        // the event to a second copy. A done record found is held to the same bound
        // (CLAIM_WAIT writes it again): a copy is answered 2xx only once replicas hold
        // the record that answers it.
        let wait = self.replica_wait();
        let claim_wait = &self.inner.claim_wait;
        let lease_ms = millis(lease);
        let result = self
            .run(|mut c| async move {
                match wait {
                    None => {
                        c.set_options::<_, _, Option<String>>(key.as_str(), record, opts)
                            .await
                    }
                    Some(wait) => {
                        let mut inv = claim_wait.prepare_invoke();
                        inv.key(key.as_str()).arg(record).arg(lease_ms);
                        let (prev, acked): (Option<String>, i64) =
                            invoke_then_wait(&mut c, claim_wait, &inv, wait).await?;
                        let done = prev.as_deref().is_some_and(|v| v.starts_with("d|"));
                        if (prev.is_none() || done) && acked < i64::from(wait.0) {
                            return Err(too_few_replicas(
                                if done {
                                    "the done record of a copy not acknowledged by enough replicas"
                                } else {
                                    "claim not acknowledged by enough replicas"
                                },
                                acked,
                                wait.0,
                            ));
                        }
                        Ok(prev)
                    }
                }
            })
            .await;
        let prev = match result {
            Ok(prev) => prev,
            Err(e) => {
                // A timed-out command may still run later and leave our claim behind:
                // free it in the background so it does not block the provider's retry.
                let store = self.clone();
                let (key, token, fp) = (key.clone(), token.clone(), fingerprint.to_owned());
                tokio::spawn(async move {
                    tokio::time::sleep(store.inner.op_timeout).await;
                    let _ = store.release(&key, &token, &fp).await;
                });
                return Err(e);
            }
        };
        match prev {
            None => Ok(Claim::Claimed(token)),
            Some(v) => {
                let rec = Record::decode(&v).ok_or_else(|| StoreError::Corrupt(key.to_string()))?;
                if rec.token() == token.as_str() {
                    return Ok(Claim::Claimed(token));
                }
                Ok(rec.as_existing())
            }
        }
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        let in_flight = Record::in_flight(token, fingerprint).encode();
        let done = Record::done(token, fingerprint).encode();
        let script = &self.inner.complete;
        let wait = self.replica_wait();
        let n: i64 = self
            .run(|mut c| async move {
                let mut inv = script.prepare_invoke();
                inv.key(key.as_str())
                    .arg(in_flight)
                    .arg(done)
                    .arg(millis(ttl))
                    .arg(if wait.is_some() { "1" } else { "0" });
                let Some(wait) = wait else {
                    return inv.invoke_async(&mut c).await;
                };
                // With min_replicas_ack the done record must reach replicas too: until
                // it does, settling goes on (and retries write it again), so a primary
                // lost meanwhile does not bring back the in-flight record and let a
                // later copy through.
                let (applied, acked): (i64, i64) =
                    invoke_then_wait(&mut c, script, &inv, wait).await?;
                if applied == 1 && acked < i64::from(wait.0) {
                    return Err(too_few_replicas(
                        "done record not acknowledged by enough replicas",
                        acked,
                        wait.0,
                    ));
                }
                Ok(applied)
            })
            .await?;
        Ok(if n == 1 {
            Settled::Applied
        } else {
            Settled::NotOwner
        })
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        let in_flight = Record::in_flight(token, fingerprint).encode();
        let script = &self.inner.release;
        let n: i64 = self
            .run(|mut c| async move {
                script
                    .key(key.as_str())
                    .arg(in_flight)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(if n == 1 {
            Settled::Applied
        } else {
            Settled::NotOwner
        })
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let n: i64 = self
            .run(|mut c| async move { c.del(key.as_str()).await })
            .await?;
        Ok(n > 0)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run(|mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(|_| ())
    }

    async fn peek(&self, key: &DedupKey) -> Result<Option<Claim>, StoreError> {
        let raw: Option<String> = self
            .run(|mut c| async move { c.get(key.as_str()).await })
            .await?;
        match raw {
            None => Ok(None),
            Some(text) => Record::decode(&text)
                .map(|r| Some(r.as_existing()))
                .ok_or_else(|| StoreError::Corrupt(key.as_str().to_owned())),
        }
    }
}
