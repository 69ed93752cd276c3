//! `[store]`: the backend and the dedup timings.

use std::time::Duration;

use super::Validator;
use crate::config::raw::RawStore;
use crate::config::size;
use crate::config::{Backend, OnError, StoreConfig};

impl Validator<'_> {
    /// `[store]`.
    pub(super) fn store(&mut self, st: RawStore) -> StoreConfig {
        self.dedup_line = st.dedup_ttl.as_ref().map(|d| self.line(d.span()));
        let backend = match st.backend.as_ref().map(|b| (b, b.get_ref().as_str())) {
            Some((_, "disk")) => {
                if let Some(u) = &st.url {
                    self.err(u, "store.url", "is only used with backend = \"redis\"");
                }
                if let Some(c) = &st.cluster {
                    self.err(c, "store.cluster", "is only used with backend = \"redis\"");
                }
                let path = st
                    .path
                    .as_ref()
                    .map_or("data/hookgate.db", |p| p.get_ref().as_str());
                Backend::Disk {
                    path: self.base.join(path),
                }
            }
            None | Some((_, "memory")) => {
                if let Some(u) = &st.url {
                    self.err(u, "store.url", "is only used with backend = \"redis\"");
                }
                if let Some(c) = &st.cluster {
                    self.err(c, "store.cluster", "is only used with backend = \"redis\"");
                }
                Backend::Memory
            }
            Some((b, "redis")) if st.sentinel.is_some() => {
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
                        self.err(b, "store.sentinel_master", "the name Sentinel monitors the primary under is required with store.sentinel");
                        String::new()
                    }
                };
                Backend::RedisSentinel { sentinels, master }
            }
            Some((b, "redis"))
                if st.cluster.is_some()
                    || st
                        .url
                        .as_ref()
                        .is_some_and(|u| u.get_ref().starts_with("redis+cluster://")) =>
            {
                // Redis Cluster: a list of nodes, or `redis+cluster://host:port,host:port`
                // (the redis crate has no cluster URL form, so it is split here).
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
                            Some(hosts) => urls.extend(hosts.split(',').filter(|h| !h.trim().is_empty()).map(|h| format!("redis://{}", h.trim()))),
                            None => self.err(u, "store.url", "with store.cluster, leave url out (or write redis+cluster://host:port,host:port)"),
                        }
                }
                for u in &urls {
                    if !u.starts_with("redis://") {
                        self.err(b, "store.cluster", format_args!("each node is redis://host:port (TLS is not supported yet), got {:?}", u.split('@').next_back().unwrap_or_default()));
                    }
                }
                if urls.is_empty() {
                    self.err(b, "store.cluster", "name at least one node of the cluster");
                }
                Backend::RedisCluster { urls }
            }
            Some((b, "redis")) => match &st.url {
                Some(u) => match self.secret(u, "store.url") {
                    Some(url) => {
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
                    None => Backend::Memory,
                },
                None => {
                    self.err(
                        b,
                        "store.url",
                        "backend = \"redis\" needs url = \"redis://host:port\"",
                    );
                    Backend::Memory
                }
            },
            Some((b, other)) => {
                self.err(
                    b,
                    "store.backend",
                    format_args!("{other:?}: use \"memory\", \"disk\" or \"redis\""),
                );
                Backend::Memory
            }
        };
        if let (Some(p), false) = (&st.path, matches!(backend, Backend::Disk { .. })) {
            self.err(p, "store.path", "is only used with backend = \"disk\"");
        }
        const MIN_FREE: u64 = 64 << 20;
        let min_free_space = match &st.min_free_space {
            None => MIN_FREE,
            Some(s) => {
                if !matches!(backend, Backend::Disk { .. }) {
                    self.err(
                        s,
                        "store.min_free_space",
                        "is only used with backend = \"disk\"",
                    );
                }
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
        };
        if let (Some(n), false) = (&st.max_records, matches!(backend, Backend::Memory)) {
            self.err(
                n,
                "store.max_records",
                "is only used with backend = \"memory\"",
            );
        }
        let max_records = self.count(
            &st.max_records,
            "store.max_records",
            StoreConfig::DEFAULT_MAX_RECORDS,
            1,
        );
        let store = StoreConfig {
            backend,
            key_prefix: st.key_prefix.unwrap_or_else(|| "hookgate:".into()),
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
            on_error: self.on_error(&st.on_error, "store.on_error", OnError::Reject),
            timeout: self.duration(&st.timeout, "store.timeout", Duration::from_millis(1000)),
            tls_ca: match &st.tls_ca {
                None => None,
                Some(p) => match std::fs::read(self.base.join(p.get_ref())) {
                    Ok(pem) => Some(pem),
                    Err(e) => {
                        self.err(
                            p,
                            "store.tls_ca",
                            format_args!("cannot read {}: {e}", p.get_ref()),
                        );
                        None
                    }
                },
            },
            min_replicas_ack: u32::try_from(self.count(
                &st.min_replicas_ack,
                "store.min_replicas_ack",
                0,
                0,
            ))
            .unwrap_or(u32::MAX),
            replica_ack_timeout: self.duration(
                &st.replica_ack_timeout,
                "store.replica_ack_timeout",
                Duration::from_millis(100),
            ),
            allow_eviction: st.allow_eviction.unwrap_or(false),
            min_free_space,
            max_records,
        };
        if let (
            Some(n),
            Backend::Memory
            | Backend::Disk { .. }
            | Backend::RedisCluster { .. }
            | Backend::RedisSentinel { .. },
        ) = (&st.min_replicas_ack, &store.backend)
            && *n.get_ref() > 0
        {
            self.err(
                n,
                "store.min_replicas_ack",
                "is supported with a single Redis primary (backend = \"redis\" with url) only",
            );
        }
        store
    }
}
