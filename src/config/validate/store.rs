//! `[store]`: the backend, one function per kind, and the dedup timings. Each rule
//! between keys (a key only one backend reads, replica acks on one primary) has a
//! function of its own.

use std::time::Duration;

use toml::Spanned;

use super::Validator;
use crate::config::raw::{BackendKind, RawStore};
use crate::config::size;
use crate::config::{Backend, OnError, StoreConfig};

/// `store.min_free_space` when unset.
const MIN_FREE: u64 = 64 << 20;

impl Validator<'_> {
    /// `[store]`.
    pub(super) fn store(&mut self, st: RawStore) -> StoreConfig {
        self.dedup_line = st.dedup_ttl.as_ref().map(|d| self.line(d.span()));
        let backend = self.backend(&st);
        self.disk_keys_only_on_disk(&st, &backend);
        self.max_records_only_in_memory(&st, &backend);
        self.replica_acks_need_redis(&st, &backend);
        let min_free_space = self.min_free_space(&st);
        let max_records = self.count(
            &st.max_records,
            "store.max_records",
            StoreConfig::DEFAULT_MAX_RECORDS,
            1,
        );
        StoreConfig {
            backend,
            key_prefix: st.key_prefix.clone().unwrap_or_else(|| "hookgate:".into()),
            dedup_ttl: self.duration(
                &st.dedup_ttl,
                "store.dedup_ttl",
                Duration::from_secs(24 * 3600),
            ),
            inflight_ttl: self.duration(
                &st.inflight_ttl,
                "store.inflight_ttl",
                Duration::from_secs(30),
            ),
            on_error: st.on_error.unwrap_or(OnError::Reject),
            timeout: self.duration(&st.timeout, "store.timeout", Duration::from_millis(1000)),
            tls_ca: self.tls_ca(&st),
            // Unset: the store decides from the topology (store/redis/replicas.rs).
            min_replicas_ack: st.min_replicas_ack.as_ref().map(|n| {
                u32::try_from(self.count(&Some(n.clone()), "store.min_replicas_ack", 0, 0))
                    .unwrap_or(u32::MAX)
            }),
            replica_ack_timeout: self.duration(
                &st.replica_ack_timeout,
                "store.replica_ack_timeout",
                Duration::from_millis(100),
            ),
            allow_eviction: st.allow_eviction.unwrap_or(false),
            min_free_space,
            max_records,
        }
    }

    /// `store.backend` and the keys of that kind of store.
    fn backend(&mut self, st: &RawStore) -> Backend {
        // A value outside the set is reported already; the rest is checked as memory's.
        if self.removed.iter().any(|k| k == "store.backend") {
            return Backend::Memory;
        }
        match st.backend.as_ref().map(|b| (b, *b.get_ref())) {
            None | Some((_, BackendKind::Memory)) => {
                self.redis_keys_only_on_redis(st);
                Backend::Memory
            }
            Some((_, BackendKind::Disk)) => {
                self.redis_keys_only_on_redis(st);
                let path = st
                    .path
                    .as_ref()
                    .map_or("data/hookgate.db", |p| p.get_ref().as_str());
                Backend::Disk {
                    path: self.base.join(path),
                }
            }
            Some((b, BackendKind::Redis)) if st.sentinel.is_some() => self.redis_sentinel(b, st),
            Some((b, BackendKind::Redis))
                if st.cluster.is_some()
                    || st
                        .url
                        .as_ref()
                        .is_some_and(|u| u.get_ref().starts_with("redis+cluster://")) =>
            {
                self.redis_cluster(b, st)
            }
            Some((b, BackendKind::Redis)) => self.redis(b, st),
        }
    }

    /// `backend = "redis"` with `url`: a single primary.
    fn redis(&mut self, b: &Spanned<BackendKind>, st: &RawStore) -> Backend {
        let Some(u) = &st.url else {
            self.err(
                b,
                "store.url",
                "backend = \"redis\" needs url = \"redis://host:port\"",
            );
            return Backend::Memory;
        };
        let Some(url) = self.secret(u, "store.url") else {
            return Backend::Memory;
        };
        let url = String::from_utf8_lossy(url.expose()).into_owned();
        if !(url.starts_with("redis://")
            || url.starts_with("rediss://")
            || url.starts_with("redis+unix://")
            || url.starts_with("unix://"))
        {
            self.err(
                u,
                "store.url",
                "must start with redis:// or rediss:// (or unix:// for a socket)",
            );
        }
        Backend::Redis { url }
    }

    /// `backend = "redis"` with `sentinel`: a primary Sentinel watches over.
    fn redis_sentinel(&mut self, b: &Spanned<BackendKind>, st: &RawStore) -> Backend {
        let mut sentinels = Vec::new();
        if let Some(list) = &st.sentinel {
            for (i, u) in list.get_ref().iter().enumerate() {
                if let Some(v) = self.secret(u, &format!("store.sentinel[{i}]")) {
                    sentinels.push(String::from_utf8_lossy(v.expose()).into_owned());
                }
            }
        }
        if sentinels.is_empty() {
            self.err(
                b,
                "store.sentinel",
                "name at least one sentinel, redis://host:26379",
            );
        }
        let master = match &st.sentinel_master {
            Some(m) => m.get_ref().clone(),
            None => {
                self.err(
                    b,
                    "store.sentinel_master",
                    "the name Sentinel monitors the primary under is required with store.sentinel",
                );
                String::new()
            }
        };
        Backend::RedisSentinel { sentinels, master }
    }

    /// `backend = "redis"` with `cluster`, or `url = "redis+cluster://host:port,…"` (the
    /// redis crate has no cluster URL form, so it is split here).
    fn redis_cluster(&mut self, b: &Spanned<BackendKind>, st: &RawStore) -> Backend {
        let mut urls = Vec::new();
        if let Some(list) = &st.cluster {
            for (i, u) in list.get_ref().iter().enumerate() {
                if let Some(v) = self.secret(u, &format!("store.cluster[{i}]")) {
                    urls.push(String::from_utf8_lossy(v.expose()).into_owned());
                }
            }
        }
        if let Some(u) = &st.url
            && let Some(v) = self.secret(u, "store.url")
        {
            let text = String::from_utf8_lossy(v.expose()).into_owned();
            match text.strip_prefix("redis+cluster://") {
                Some(hosts) => urls.extend(
                    hosts
                        .split(',')
                        .filter(|h| !h.trim().is_empty())
                        .map(|h| format!("redis://{}", h.trim())),
                ),
                None => self.err(
                    u,
                    "store.url",
                    "with store.cluster, leave url out (or write redis+cluster://host:port,host:port)",
                ),
            }
        }
        for u in &urls {
            if !u.starts_with("redis://") {
                self.err(
                    b,
                    "store.cluster",
                    format_args!(
                        "each node is redis://host:port (TLS is not supported yet), got {:?}",
                        u.split('@').next_back().unwrap_or_default()
                    ),
                );
            }
        }
        if urls.is_empty() {
            self.err(b, "store.cluster", "name at least one node of the cluster");
        }
        Backend::RedisCluster { urls }
    }

    /// `url` and `cluster` are Redis' only.
    fn redis_keys_only_on_redis(&mut self, st: &RawStore) {
        if let Some(u) = &st.url {
            self.err(u, "store.url", "is only used with backend = \"redis\"");
        }
        if let Some(c) = &st.cluster {
            self.err(c, "store.cluster", "is only used with backend = \"redis\"");
        }
    }

    /// `path` and `min_free_space` are the disk store's only.
    fn disk_keys_only_on_disk(&mut self, st: &RawStore, backend: &Backend) {
        if matches!(backend, Backend::Disk { .. }) {
            return;
        }
        if let Some(p) = &st.path {
            self.err(p, "store.path", "is only used with backend = \"disk\"");
        }
        if let Some(s) = &st.min_free_space {
            self.err(
                s,
                "store.min_free_space",
                "is only used with backend = \"disk\"",
            );
        }
    }

    /// `max_records` bounds the memory store only.
    fn max_records_only_in_memory(&mut self, st: &RawStore, backend: &Backend) {
        if let (Some(n), false) = (&st.max_records, matches!(backend, Backend::Memory)) {
            self.err(
                n,
                "store.max_records",
                "is only used with backend = \"memory\"",
            );
        }
    }

    /// `min_replicas_ack` (`WAIT`) needs Redis: a single primary, the one Sentinel
    /// names, or each cluster primary (on the connection that wrote).
    fn replica_acks_need_redis(&mut self, st: &RawStore, backend: &Backend) {
        let redis = matches!(
            backend,
            Backend::Redis { .. } | Backend::RedisSentinel { .. } | Backend::RedisCluster { .. }
        );
        if let (Some(n), false) = (&st.min_replicas_ack, redis)
            && *n.get_ref() > 0
        {
            self.err(
                n,
                "store.min_replicas_ack",
                "needs backend = \"redis\" (replicas acknowledge Redis writes)",
            );
        }
    }

    /// `min_free_space`: a size.
    fn min_free_space(&mut self, st: &RawStore) -> u64 {
        let Some(s) = &st.min_free_space else {
            return MIN_FREE;
        };
        match size::parse(s.get_ref()) {
            Some(n) => n as u64,
            None => {
                self.err(
                    s,
                    "store.min_free_space",
                    format_args!("{:?} is not a size like \"64MiB\"", s.get_ref()),
                );
                MIN_FREE
            }
        }
    }

    /// `tls_ca`: a PEM file, relative to the config file.
    fn tls_ca(&mut self, st: &RawStore) -> Option<Vec<u8>> {
        let p = st.tls_ca.as_ref()?;
        match std::fs::read(self.base.join(p.get_ref())) {
            Ok(pem) => Some(pem),
            Err(e) => {
                self.err(
                    p,
                    "store.tls_ca",
                    format_args!("cannot read {}: {e}", p.get_ref()),
                );
                None
            }
        }
    }
}
