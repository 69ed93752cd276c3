//! The disk store's claims half ([`DedupStore`]): a claim in flight is a lease held in
//! the process (`claims.rs`), so a forward never waits behind the writer to start; its
//! done record goes through the writer thread, fsynced before the answer.

use std::time::Duration;

use redb::{ReadableDatabase as _, ReadableTable};

use super::journal::Logged;
use super::{DEDUP, DiskStore, Op, Reply, backend, decode, encode, expiry, index_expiry, mono_ms};
use crate::queue::now_ms;
use crate::store::{Claim, DedupKey, DedupStore, Record, Settled, StoreError, Token};

/// Applies a complete or forget to the dedup table.
pub(super) fn dedup_op(
    table: &mut Logged<'_, &'static str, &'static [u8]>,
    expiries: &mut Logged<'_, (u64, &'static str), ()>,
    op: &Op,
    key: &str,
    now: u64,
) -> Result<Reply, StoreError> {
    let live = live_record(table.table(), key, now)?;
    Ok(match op {
        Op::Complete {
            token,
            fingerprint,
            ttl,
            ..
        } => match live {
            Some(Record::Done { token: t, .. }) if t == token.as_str() => {
                Reply::Settled(Settled::Applied)
            }
            // Another claim holds the key: leave it alone.
            Some(record) if record.token() != token.as_str() => Reply::Settled(Settled::NotOwner),
            // This claim's in-flight record, or none left (the lease ran out
            // and nobody claimed since): record the effect.
            _ => {
                let done = Record::done(token, fingerprint);
                let at = expiry(now, *ttl);
                table
                    .insert(key, encode(&done, at).as_slice())
                    .map_err(backend)?;
                index_expiry(expiries, at, 'd', key)?;
                Reply::Settled(Settled::Applied)
            }
        },
        Op::Forget { .. } => {
            table.remove(key).map_err(backend)?;
            Reply::Forgot(live.is_some())
        }
        Op::Queue(_) | Op::Flush => {
            return Err(StoreError::Backend("not a claim operation".into()));
        }
    })
}

pub(super) fn live_record(
    dedup: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
    now: u64,
) -> Result<Option<Record>, StoreError> {
    match dedup.get(key).map_err(backend)? {
        None => Ok(None),
        Some(v) => match decode(v.value()) {
            Some((record, expires)) if expires > now => Ok(Some(record)),
            Some(_) => Ok(None),
            None => Err(StoreError::Corrupt(key.to_owned())),
        },
    }
}

impl DiskStore {
    /// What the file holds live under `key` (a done record, or the in-flight record
    /// an older version wrote).
    fn stored(&self, key: &DedupKey) -> Result<Option<Record>, StoreError> {
        let txn = self.inner.shared.get()?.begin_read().map_err(backend)?;
        let table = txn.open_table(DEDUP).map_err(backend)?;
        live_record(&table, key.as_str(), now_ms())
    }

    /// Whether a new claim may be taken: not while writes fail or free space is
    /// below the reserve (its done record could not be written).
    fn admit(&self) -> Result<(), StoreError> {
        let shared = &self.inner.shared;
        if shared.failing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Refused(
                "the disk store cannot write (a full disk?); it retries on its own".into(),
            ));
        }
        // Measured for each new claim (one statfs): a file filled by another process
        // in the last instant still refuses the next claim.
        match shared.low_on_space() {
            Some(free) => Err(shared.refused_full(free)),
            None => Ok(()),
        }
    }
}

impl DedupStore for DiskStore {
    async fn claim(
        &self,
        key: &DedupKey,
        _fingerprint: &str,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        // The shard stays locked from the look to the take: two copies cannot both
        // find the key free. A done record is written before its claim lets go of the
        // key (`complete`), so a key free here is either done in the file or new.
        let mut shard = self.inner.claims.shard(key.as_str());
        let now = mono_ms();
        if shard.held.get(key.as_str()).is_some_and(|h| h.holds(now)) {
            return Ok(Claim::InFlight);
        }
        if let Some(record) = self.stored(key)? {
            return Ok(record.as_existing());
        }
        self.admit()?;
        let token = Token::random();
        shard.take(key.as_str(), token.clone(), expiry(now, lease), now, false);
        Ok(Claim::Claimed(token))
    }

    async fn complete(
        &self,
        key: &DedupKey,
        token: &Token,
        fingerprint: &str,
        ttl: Duration,
    ) -> Result<Settled, StoreError> {
        {
            let mut shard = self.inner.claims.shard(key.as_str());
            match shard.held.get_mut(key.as_str()) {
                Some(h) if h.token != *token && h.holds(mono_ms()) => {
                    return Ok(Settled::NotOwner);
                }
                Some(h) if h.token == *token => h.settling = true,
                // Its lease ran out and nobody claimed since: the file decides.
                _ => {}
            }
        }
        let op = Op::Complete {
            key: key.clone(),
            token: token.clone(),
            fingerprint: fingerprint.to_owned(),
            ttl,
        };
        let result = match self.call(op).await {
            Ok(Reply::Settled(s)) => Ok(s),
            Ok(_) => Err(StoreError::Backend("unexpected reply".into())),
            Err(e) => Err(e),
        };
        let mut shard = self.inner.claims.shard(key.as_str());
        match &result {
            // Written: the done record answers copies from now on.
            Ok(_) => shard.drop_if_held_by(key.as_str(), token),
            // Not written: the lease runs on, and a retry of the write may follow.
            Err(_) => {
                if let Some(h) = shard.held.get_mut(key.as_str())
                    && h.token == *token
                {
                    h.settling = false;
                }
            }
        }
        result
    }

    async fn release(
        &self,
        key: &DedupKey,
        token: &Token,
        _fingerprint: &str,
    ) -> Result<Settled, StoreError> {
        let mut shard = self.inner.claims.shard(key.as_str());
        Ok(match shard.held.get(key.as_str()) {
            Some(h) if h.token == *token => {
                shard.held.remove(key.as_str());
                Settled::Applied
            }
            Some(h) if h.holds(mono_ms()) => Settled::NotOwner,
            // Nothing held: a done record (this claim's or another's) is not undone.
            _ => match self.stored(key)? {
                Some(_) => Settled::NotOwner,
                None => Settled::Applied,
            },
        })
    }

    async fn forget(&self, key: &DedupKey) -> Result<bool, StoreError> {
        let held = self
            .inner
            .claims
            .shard(key.as_str())
            .held
            .remove(key.as_str())
            .is_some_and(|h| h.holds(mono_ms()));
        match self.call(Op::Forget { key: key.clone() }).await? {
            Reply::Forgot(existed) => Ok(existed || held),
            _ => Err(StoreError::Backend("unexpected reply".into())),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let txn = self.inner.shared.get()?.begin_read().map_err(backend)?;
        txn.open_table(DEDUP).map_err(backend)?;
        Ok(())
    }

    async fn peek(&self, key: &DedupKey) -> Result<Option<Claim>, StoreError> {
        let shard = self.inner.claims.shard(key.as_str());
        if shard
            .held
            .get(key.as_str())
            .is_some_and(|h| h.holds(mono_ms()))
        {
            return Ok(Some(Claim::InFlight));
        }
        Ok(self.stored(key)?.map(|r| r.as_existing()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::dedup_len;
    use super::*;

    #[tokio::test]
    async fn claims_in_flight_are_held_in_the_process_and_only_done_records_written() {
        let dir = tempfile::tempdir().expect("dir");
        let s = DiskStore::open(&dir.path().join("h.db")).expect("open");
        let k = DedupKey::new("t:", "r", "e");
        let Ok(Claim::Claimed(token)) = s.claim(&k, "fp", Duration::from_secs(60)).await else {
            panic!("claim");
        };
        assert_eq!(dedup_len(&s), 0, "a claim writes nothing to the file");
        assert_eq!(
            s.claim(&k, "fp", Duration::from_secs(60)).await,
            Ok(Claim::InFlight)
        );
        assert_eq!(s.peek(&k).await, Ok(Some(Claim::InFlight)));
        // Another claim's token settles nothing.
        let other = Token::random();
        assert_eq!(s.release(&k, &other, "fp").await, Ok(Settled::NotOwner));
        assert_eq!(
            s.complete(&k, &other, "fp", Duration::from_secs(60)).await,
            Ok(Settled::NotOwner)
        );
        assert_eq!(dedup_len(&s), 0);
        // Released: free again, still nothing written.
        assert_eq!(s.release(&k, &token, "fp").await, Ok(Settled::Applied));
        let Ok(Claim::Claimed(token)) = s.claim(&k, "fp", Duration::from_secs(60)).await else {
            panic!("claim after release");
        };
        assert_eq!(
            s.complete(&k, &token, "fp", Duration::from_secs(60)).await,
            Ok(Settled::Applied)
        );
        assert_eq!(dedup_len(&s), 1, "the done record is in the file");
        assert_eq!(
            s.inner.claims.len(),
            0,
            "and the claim is gone from the process"
        );
        assert_eq!(
            s.claim(&k, "fp", Duration::from_secs(60)).await,
            Ok(Claim::Done {
                fingerprint: "fp".into()
            })
        );
        // A lease that ran out lets the next claim through; leases nobody settled are
        // swept as more claims are taken.
        let lapsed = DedupKey::new("t:", "r", "lapsed");
        assert!(matches!(
            s.claim(&lapsed, "fp", Duration::from_millis(1)).await,
            Ok(Claim::Claimed(_))
        ));
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(matches!(
            s.claim(&lapsed, "fp", Duration::from_millis(1)).await,
            Ok(Claim::Claimed(_))
        ));
        for i in 0..(64 * 1_024 * 2) {
            let k = DedupKey::new("t:", "r", &format!("x{i}"));
            let _ = s.claim(&k, "fp", Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        for i in 0..(64 * 1_024 * 2) {
            let k = DedupKey::new("t:", "r", &format!("y{i}"));
            let _ = s.claim(&k, "fp", Duration::from_secs(60)).await;
        }
        assert!(
            s.inner.claims.len() < 64 * 1_024 * 3,
            "expired leases were swept: {} held",
            s.inner.claims.len()
        );
    }
}
