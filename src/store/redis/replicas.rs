//! Which writes wait for replicas (`store.min_replicas_ack`, Redis `WAIT`).
//!
//! Replication is asynchronous: a primary that dies before its replica received a
//! done record or an event lets a copy through (or loses the event) once the replica
//! is promoted. `WAIT` after the write closes that window, at the cost of a round trip
//! to a replica. A number set in the config is kept whatever the topology does (too
//! few replicas: the write is refused 503). Unset, the store decides by itself: writes
//! wait for one replica while every primary has one connected (a failover is what
//! replicas are for), and for none while a primary runs without any (a primary alone
//! cannot fail over, and waiting would refuse every write). The topology is read with
//! `INFO replication` (every primary on a cluster) before anything is served and then
//! every second.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::RedisStore;
use super::info::collect_info;
use crate::store::StoreError;

/// How often the topology is read again when the store decides.
const REFRESH: Duration = Duration::from_secs(1);

/// The replica acknowledgements writes wait for.
#[derive(Debug)]
pub(super) struct ReplicaAcks {
    /// `min_replicas_ack` as configured; `None`: decided from the topology.
    setting: Option<u32>,
    /// Replicas each write waits for now (0: none).
    now: AtomicU32,
    /// How long a write waits for them (`replica_ack_timeout`).
    timeout: Duration,
}

impl ReplicaAcks {
    pub(super) fn new(setting: Option<u32>, timeout: Duration) -> Self {
        Self {
            setting,
            now: AtomicU32::new(setting.unwrap_or(0)),
            timeout,
        }
    }

    /// `(replicas, timeout)` when writes must reach replicas now.
    pub(super) fn wait(&self) -> Option<(u32, Duration)> {
        let n = self.now.load(Ordering::Relaxed);
        (n > 0).then_some((n, self.timeout))
    }
}

/// Per primary in `INFO replication` texts: how many replicas it has connected.
/// Replicas' own sections (`role:slave`) are skipped.
fn replicas_per_primary(texts: &[String]) -> Vec<u32> {
    texts
        .iter()
        .filter(|t| t.lines().any(|l| l.trim() == "role:master"))
        .map(|t| {
            t.lines()
                .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

impl RedisStore {
    /// Replicas each write waits for now (0: none): for a log line and for tests.
    pub fn replica_acks(&self) -> u32 {
        self.inner.replicas.now.load(Ordering::Relaxed)
    }

    /// When `min_replicas_ack` is not set: reads the topology and makes writes wait
    /// for one replica if every primary has one connected, else for none. A change is
    /// logged. An unreadable topology changes nothing.
    pub async fn refresh_replica_acks(&self) -> Result<(), StoreError> {
        let acks = &self.inner.replicas;
        if acks.setting.is_some() {
            return Ok(());
        }
        let info: redis::Value = self
            .run(|mut c| async move {
                redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        let mut texts = Vec::new();
        collect_info(&info, &mut texts);
        let primaries = replicas_per_primary(&texts);
        if primaries.is_empty() {
            return Err(StoreError::Backend(
                "INFO replication names no primary".into(),
            ));
        }
        let want = u32::from(primaries.iter().all(|&n| n > 0));
        let was = acks.now.swap(want, Ordering::Relaxed);
        if was != want {
            if want > 0 {
                tracing::info!(
                    "redis store: every primary has a replica: claims, done records, events and results wait for one (WAIT; set store.min_replicas_ack = 0 to turn this off)"
                );
            } else {
                tracing::warn!(
                    primaries = primaries.len(),
                    "redis store: a primary has no replica connected: writes no longer wait for replicas until it has one again (a failover now may lose the last writes)"
                );
            }
        }
        Ok(())
    }

    /// [`Self::refresh_replica_acks`] every second until `stop`; nothing to do when
    /// `min_replicas_ack` is set.
    pub async fn keep_replica_acks(&self, stop: tokio_util::sync::CancellationToken) {
        if self.inner.replicas.setting.is_some() {
            return;
        }
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(REFRESH) => {}
            }
            if let Err(e) = self.refresh_replica_acks().await {
                tracing::debug!(error = %e, "redis store: the replication topology could not be read");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_and_their_replicas_are_read_from_info() {
        let primary = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=1,lag=0\r\n".to_owned();
        let alone = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n".to_owned();
        let replica = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n".to_owned();
        assert_eq!(
            replicas_per_primary(&[primary.clone(), replica.clone(), alone]),
            vec![2, 0]
        );
        assert_eq!(replicas_per_primary(&[replica]), Vec::<u32>::new());
        assert_eq!(replicas_per_primary(&[primary]), vec![2]);
    }

    #[test]
    fn a_configured_number_is_kept_and_unset_starts_at_none() {
        let t = Duration::from_millis(100);
        assert_eq!(ReplicaAcks::new(Some(2), t).wait(), Some((2, t)));
        assert_eq!(ReplicaAcks::new(Some(0), t).wait(), None);
        assert_eq!(ReplicaAcks::new(None, t).wait(), None);
    }
}
