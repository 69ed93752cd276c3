//! The TOML configuration: raw serde structs, then one validation pass into types that
//! cannot hold bad values.
//!
//! Every problem is reported, not just the first, and each message names the file,
//! the line and the key: `config.toml:14: routes[0].secrets[1]: ${STRIPE_SECRET} is not set`.
//! `${VAR}` and `file:PATH` are expanded after parsing, never textually before it, so
//! line numbers stay true and a secret's value cannot inject TOML.

mod raw;
mod size;
mod toml_errors;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::Method;

use crate::provider::standard_webhooks::StandardScheme;
use crate::provider::{EventIdSource, Verifier};
use crate::secret::Secret;
use raw::RawConfig;
use toml_errors::{KeySegment, key_name, key_segments, key_span, toml_error};
use validate::Validator;

/// What to do when the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Answer 503 with `Retry-After`: the provider retries later and nothing is lost.
    Reject,
    /// Forward without a claim (availability over deduplication), and count it.
    Forward,
}

/// How a route hands a verified event to its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Forward while the provider waits and relay the upstream's answer (the default).
    Sync,
    /// Store the event durably, answer 200 `queued` at once, and deliver it with
    /// retries until the upstream answers 2xx (or it is dead).
    Queue,
}

/// Which dedup store to use.
#[derive(Clone, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// A database file on local disk (`path`, relative to the config file).
    Disk {
        path: PathBuf,
    },
    Redis {
        url: String,
    },
    /// Redis Cluster, reached through any of these nodes.
    RedisCluster {
        urls: Vec<String>,
    },
    /// A primary managed by Sentinel: the sentinels' URLs and the master's name.
    RedisSentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Disk { path } => write!(f, "Disk {{ path: {path:?} }}"),
            // The URL may hold a password.
            Self::Redis { .. } => f.write_str("Redis { url: [redacted] }"),
            Self::RedisCluster { urls } => {
                write!(f, "RedisCluster {{ {} nodes: [redacted] }}", urls.len())
            }
            Self::RedisSentinel { sentinels, master } => write!(
                f,
                "RedisSentinel {{ master: {master:?}, {} sentinels: [redacted] }}",
                sentinels.len()
            ),
        }
    }
}

/// `[server]`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub admin_listen: Option<SocketAddr>,
    /// When set, the admin listener answers only requests with
    /// `Authorization: Bearer <token>` (except `/healthz` and `/readyz`, for probes).
    pub admin_token: Option<Secret>,
    /// Largest body accepted, in bytes; larger gets 413 before it is buffered.
    pub max_body: usize,
    /// How long a client may take to send its body (slow senders get 408).
    pub body_timeout: Duration,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for deliveries in progress.
    pub shutdown_grace: Duration,
    /// `pretty` or `json` (the `--log-format` flag overrides it).
    pub log_format: Option<crate::telemetry::LogFormat>,
    /// Largest request head (request line and headers) in bytes; larger gets 431.
    pub max_header_bytes: usize,
    /// Most headers in a request; more gets 431.
    pub max_headers: usize,
    /// Open connections at most; beyond, a new connection gets 503 and is closed.
    pub max_connections: usize,
    /// Deliveries being handled at most; beyond, 503 + Retry-After.
    pub max_in_flight: usize,
    /// TLS on the public listener: certificate chain and key (PEM), re-read on reload.
    pub tls: Option<TlsConfig>,
    /// Bound on a whole request, from its head to the answer (503 + Retry-After beyond;
    /// a forward already under way still settles in the background).
    pub request_timeout: Duration,
    /// A connection with no request in progress is closed after this long (HTTP/1
    /// keep-alive and HTTP/2 alike). Before its first request a connection gets
    /// `header_read_timeout`.
    pub idle_timeout: Duration,
    /// Request bodies being received at once from one client address; beyond, a body
    /// waits for a slot (429 if none frees within `body_timeout`). Bodies being read
    /// never hold delivery capacity (`max_in_flight`).
    pub max_reads_per_client: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Load balancers and proxies whose `X-Forwarded-For` names the client address
    /// (for the per-client limits); any other peer is the client itself.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// `[server.tls]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[store]`.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub backend: Backend,
    pub key_prefix: String,
    /// How long a completed event is remembered.
    pub dedup_ttl: Duration,
    /// The lease of a claim while its delivery is forwarded.
    pub inflight_ttl: Duration,
    pub on_error: OnError,
    /// Bound on every single store call.
    pub timeout: Duration,
    /// PEM of a private CA for `rediss://` (default: the system's roots).
    pub tls_ca: Option<Vec<u8>>,
    /// Claims wait for this many replicas (`WAIT`); 0 = off.
    pub min_replicas_ack: u32,
    pub replica_ack_timeout: Duration,
    /// Disk store: below this much free space on its filesystem, new claims and events
    /// are refused (503) so that what is stored can still be settled and delivered.
    pub min_free_space: u64,
    /// Memory store: at this many records, new claims are refused (503) until records
    /// expire; a live record is never evicted.
    pub max_records: usize,
}

/// One validated `[[routes]]` entry.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub path: String,
    pub methods: Vec<Method>,
    pub verifier: Verifier,
    pub event_id: EventIdSource,
    /// Where the event's type is (the route's `event_type`, else the preset's).
    pub event_type: Option<crate::provider::EventTypeSource>,
    /// `events`: the event types the route takes; others get 200 `filtered`.
    pub events: Option<crate::provider::EventFilter>,
    /// Seconds a signed timestamp may be off; `None` = not checked or not signed.
    pub tolerance: Option<u64>,
    pub on_error: OnError,
    pub public_url: Option<String>,
    pub secret_count: usize,
    /// Failed verifications per second the route absorbs; beyond, its requests get
    /// 429 without being verified until the budget refills.
    pub failure_budget: u32,
    /// `sync` (forward while the provider waits) or `queue` (durable delivery).
    pub delivery: Delivery,
    /// Where its events go: the route's `upstream` (one destination named after the
    /// route), or its `[[routes.destinations]]` (queue routes). Never empty.
    pub destinations: Vec<Arc<Destination>>,
}

impl Route {
    /// The first destination: a sync route's only one, where it forwards.
    pub fn primary(&self) -> &Arc<Destination> {
        &self.destinations[0]
    }

    /// The destination of this name.
    pub fn destination(&self, name: &str) -> Option<&Arc<Destination>> {
        self.destinations.iter().find(|d| d.name == name)
    }

    /// Whether an `events` filter applies: the route's own or a destination's.
    pub fn filters_events(&self) -> bool {
        self.events.is_some() || self.destinations.iter().any(|d| d.events.is_some())
    }

    /// The destinations that take an event of this type (none: it is filtered).
    pub fn destinations_for(&self, event_type: &str) -> Vec<Arc<Destination>> {
        if self.events.as_ref().is_some_and(|f| !f.admits(event_type)) {
            return Vec::new();
        }
        self.destinations
            .iter()
            .filter(|d| d.events.as_ref().is_none_or(|f| f.admits(event_type)))
            .cloned()
            .collect()
    }
}

/// One upstream of a route and how deliveries to it are paced.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The route's name for a route's `upstream`; its own for `[[routes.destinations]]`.
    pub name: String,
    pub upstream: reqwest::Url,
    pub upstream_timeout: Duration,
    /// Re-signs forwarded deliveries with the Standard Webhooks scheme.
    pub forward_signer: Option<StandardScheme>,
    /// `events`: the event types it takes (all when unset).
    pub events: Option<crate::provider::EventFilter>,
    /// Queue routes: the retry schedule.
    pub retry: crate::queue::RetryPolicy,
    /// Queue routes: attempts in flight at once (on Redis, across every replica).
    pub concurrency: usize,
    /// Queue routes: deliveries started at most per window, across every replica.
    pub rate_limit: Option<crate::queue::RateLimit>,
    /// Queue routes: `order_by`, the key whose events are delivered one at a time in
    /// the order the gateway accepted them.
    pub order_by: Option<crate::provider::EventTypeSource>,
    /// What a dead event does to the events of its key behind it.
    pub on_dead: crate::queue::OnDead,
}

/// `[capture]`: write every received delivery as a replay file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    pub dir: PathBuf,
    /// The oldest files are removed beyond this many.
    pub max_files: usize,
}

/// A whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: PathBuf,
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub routes: Vec<Route>,
    pub capture: Option<CaptureConfig>,
}

/// Every problem found in a config file, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            f.write_str(e)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Where environment variables come from: the process, or a map in tests.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<F: Fn(&str) -> Option<String>> Env for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// Reads and validates a config file against the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigErrors(vec![format!("{}: cannot read: {e}", path.display())]))?;
    parse(&text, path, &ProcessEnv)
}

/// Validates config text; `path` names the file in messages and anchors `file:` paths.
///
/// Every problem is reported in one run, in line order: unknown keys along with bad
/// values, unset variables and unknown providers. Only a file that is not TOML, or a
/// value of the wrong type, stops at the first error.
pub fn parse(text: &str, path: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let parse_error = |e: toml::de::Error| ConfigErrors(vec![toml_error(&file, text, &e)]);
    let document = toml::de::DeTable::parse(text).map_err(parse_error)?;
    let mut unknown: Vec<Vec<KeySegment>> = Vec::new();
    let raw: RawConfig =
        serde_ignored::deserialize(toml::Deserializer::from(document.clone()), |p| {
            unknown.push(key_segments(&p))
        })
        .map_err(parse_error)?;
    let mut v = Validator {
        file,
        text,
        base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        env,
        errors: Vec::new(),
        dedup_line: None,
    };
    for segments in &unknown {
        let line = key_span(document.get_ref(), segments).map_or(1, |span| v.line(span));
        v.err_at(line, &key_name(segments), "unknown key");
    }
    let cfg = v.config(raw, path);
    if v.errors.is_empty() {
        cfg.ok_or_else(|| ConfigErrors(vec!["invalid configuration".into()]))
    } else {
        // Stable: messages of one line keep the order they were found in.
        v.errors.sort_by_key(|(line, _)| *line);
        Err(ConfigErrors(v.errors.into_iter().map(|(_, e)| e).collect()))
    }
}

#[cfg(test)]
mod tests;
