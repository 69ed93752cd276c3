//! The TOML configuration: raw serde structs, then one validation pass into types that
//! cannot hold bad values.
//!
//! Every problem is reported, not just the first, and each message names the file,
//! the line and the key: `config.toml:14: routes[0].secrets[1]: ${STRIPE_SECRET} is not set`.
//! `${VAR}` and `file:PATH` are expanded after parsing, never textually before it, so
//! line numbers stay true and a secret's value cannot inject TOML.

pub mod alerts;
mod raw;
mod size;
mod target;
mod toml_errors;
mod validate;

use std::collections::HashMap;
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
use toml_errors::{
    KeySegment, key_name, key_segments, key_span, path_at, redact_unexpected, remove_key,
    toml_error,
};
use validate::Validator;

pub use target::{
    AmqpTarget, NatsTarget, PostgresTarget, PullTarget, RedisStreamTarget, ServerUrl, Target,
    Template,
};

/// What to do when the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Answer 503 with `Retry-After`: the provider retries later and nothing is lost.
    Reject,
    /// Forward without a claim (availability over deduplication), and count it.
    Forward,
}

/// How a route hands a verified event to its upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Forward while the provider waits and relay the upstream's answer (the default).
    #[default]
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
    /// `[[server.admin_tokens]]`: named tokens, each with its role. With any token
    /// set (this or `admin_token`), the admin listener answers only requests that
    /// present one (but the probes'); a reload swaps them.
    pub admin_tokens: Vec<AdminToken>,
    /// Largest body accepted, in bytes; larger gets 413 before it is buffered.
    pub max_body: usize,
    /// How long a client may take to send its body (slow senders get 408).
    pub body_timeout: Duration,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for deliveries in progress.
    pub shutdown_grace: Duration,
    /// `pretty` or `json` (the `--log-format` flag overrides it).
    pub log_format: Option<LogFormat>,
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
    /// Host names the admin listener answers to, besides IP addresses and `localhost`
    /// (a request naming any other host is refused: DNS rebinding).
    pub admin_hosts: Vec<String>,
    /// Open connections from one client address at most (public listener); beyond, a
    /// new connection from it gets 503 and is closed.
    pub max_connections_per_client: usize,
    /// Request body bytes being received at once, over every client; a request whose
    /// body would go past it gets 503 + `Retry-After`.
    pub max_body_bytes_in_flight: usize,
}

/// One of `[[server.admin_tokens]]`: who presents the token (the audit names them)
/// and what they may do. `Debug` shows the token as `[redacted]` ([`Secret`]).
#[derive(Debug, Clone)]
pub struct AdminToken {
    pub name: String,
    pub token: Secret,
    pub role: AdminRole,
}

/// What an admin token may do: `read` (lists, details, the inspector, metrics, the
/// audit) or `operate` (also every endpoint that changes state or hands over a
/// secret). Ordered: `Operate` includes `Read`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AdminRole {
    Read,
    Operate,
}

impl AdminRole {
    /// The role as written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
        }
    }
}

/// The name `server.admin_token` acts under (the audit records it): no named token
/// may take it while `admin_token` is set.
pub const ADMIN_TOKEN_NAME: &str = "admin";

impl ServerConfig {
    /// Whether the admin listener asks for a token: `admin_token` or any named one.
    pub fn admin_protected(&self) -> bool {
        self.admin_token.is_some() || !self.admin_tokens.is_empty()
    }
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
    /// Claims, done records, events and results wait for this many replicas (`WAIT`);
    /// 0 = off; `None` (unset): one while every primary has a replica connected.
    pub min_replicas_ack: Option<u32>,
    pub replica_ack_timeout: Duration,
    /// Serve queue routes on a Redis whose `maxmemory-policy` evicts keys. Off by
    /// default: `allkeys-*` evicts queued events (loss), `volatile-*` dedup records and
    /// delivered records (duplicates); the gateway refuses to start (and `/readyz`
    /// answers 503) until the policy is `noeviction` or the operator sets this.
    pub allow_eviction: bool,
    /// Disk store: below this much free space on its filesystem, new claims and events
    /// are refused (503) so that what is stored can still be settled and delivered.
    pub min_free_space: u64,
    /// Memory store: at this many records, new claims are refused (503) until records
    /// expire; a live record is never evicted.
    pub max_records: usize,
}

impl StoreConfig {
    /// `max_records` when unset.
    pub const DEFAULT_MAX_RECORDS: usize = 1_000_000;
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
    /// The JSON fields of a body it reads once the signature has passed (event ID,
    /// event type, `order_by` keys), in one walk.
    pub body_fields: crate::provider::BodyFields,
    /// `silence`: no verified delivery for this long opens `provider_silent`.
    pub silence: Option<Duration>,
    /// `refusals`: too many refusals of one outcome open `refusals`.
    pub refusals: Option<alerts::RefusalRule>,
}

impl Route {
    /// The first destination: a sync route's only one, where it forwards.
    pub fn primary(&self) -> &Arc<Destination> {
        &self.destinations[0]
    }

    /// Whether the route's one destination is its own ([`is_own_destination`]): the
    /// route has `upstream`, or a single destination named after it.
    pub fn only_own_destination(&self) -> bool {
        self.destinations.len() == 1 && is_own_destination(&self.name, &self.primary().name)
    }

    /// The destination of this name.
    pub fn destination(&self, name: &str) -> Option<&Arc<Destination>> {
        self.destinations.iter().find(|d| d.name == name)
    }

    /// Whether an `events` filter applies: the route's own or a destination's.
    pub fn filters_events(&self) -> bool {
        self.events.is_some() || self.destinations.iter().any(|d| d.events.is_some())
    }

    /// The destinations that take an event whose type cannot be read: those without
    /// an `events` filter (a filter admits only what it can see), none when the route
    /// itself filters.
    pub fn destinations_for_untyped(&self) -> Vec<Arc<Destination>> {
        if self.events.is_some() {
            return Vec::new();
        }
        self.destinations
            .iter()
            .filter(|d| d.events.is_none())
            .cloned()
            .collect()
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

/// Whether `destination` is its route's own: the destination a route's `upstream`
/// makes, named after the route. Its queue is the one the route had before it had
/// destinations (`QueueRef::name` is the route's name), and deliveries to it carry no
/// `Hookgate-Destination` header. The one place this test is written.
pub fn is_own_destination(route: &str, destination: &str) -> bool {
    destination == route
}

/// One destination of a route and how deliveries to it are paced.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The route's name for a route's own (`upstream`, `postgres`, …, on the route);
    /// its own for `[[routes.destinations]]`.
    pub name: String,
    /// Its kind and where it is.
    pub target: Target,
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
    /// Queue routes: the breaker (`None`: `breaker = false`).
    pub breaker: Option<crate::queue::Breaker>,
}

impl Destination {
    /// The upstream URL of an HTTP destination.
    pub fn upstream(&self) -> Option<&reqwest::Url> {
        match &self.target {
            Target::Http(u) => Some(u),
            _ => None,
        }
    }
}

/// `[capture]`: write every received delivery as a replay file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    pub dir: PathBuf,
    /// The oldest files are removed beyond this many.
    pub max_files: usize,
    /// The oldest files are removed beyond this many bytes in all.
    pub max_bytes: u64,
    /// Whether requests the gateway refused (bad signature, stale, too large, no
    /// route…) are captured too; by default only verified deliveries are.
    pub refused: bool,
    /// Capture deliveries sent by `hookgate replay` too (default: no, so replay →
    /// capture → replay does not multiply the files).
    pub replays: bool,
}

impl CaptureConfig {
    /// `max_bytes` when unset: 256 MiB.
    pub const MAX_BYTES: u64 = 256 << 20;

    /// A capture into `dir` with the default bounds (`serve --capture DIR`).
    pub fn into_dir(dir: PathBuf) -> Self {
        Self {
            dir,
            max_files: 10_000,
            max_bytes: Self::MAX_BYTES,
            refused: false,
            replays: false,
        }
    }
}

/// A whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: PathBuf,
    pub server: ServerConfig,
    pub store: StoreConfig,
    /// In the order the file lists them; [`Config::route`] finds one by name.
    pub routes: Vec<Route>,
    pub capture: Option<CaptureConfig>,
    /// `[log]`: the delivery log the admin listener shows (`/deliveries`).
    pub log: LogConfig,
    /// `[[alerts]]`: where incidents are sent.
    pub alerts: Vec<alerts::AlertTarget>,
    /// `[telemetry]`: where spans are exported, if anywhere (read at start; a reload
    /// keeps the exporter the gateway started with).
    pub telemetry: TelemetryConfig,
    /// Each route's place in `routes`, by name (names are unique).
    by_name: HashMap<String, usize>,
}

impl Config {
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per section of the file, each validated on its own"
    )]
    fn new(
        source: PathBuf,
        server: ServerConfig,
        store: StoreConfig,
        routes: Vec<Route>,
        capture: Option<CaptureConfig>,
        log: LogConfig,
        alerts: Vec<alerts::AlertTarget>,
        telemetry: TelemetryConfig,
    ) -> Self {
        let by_name = routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), i))
            .collect();
        Self {
            source,
            server,
            store,
            routes,
            capture,
            log,
            alerts,
            telemetry,
            by_name,
        }
    }

    /// The route of this name.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.by_name
            .get(name)
            .and_then(|&i| self.routes.get(i))
            .filter(|r| r.name == name)
    }
}

pub use validate::log::{LogBodies, LogConfig};
pub use validate::telemetry::TelemetryConfig;

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Every key the config file accepts, by the table it is written in (`""`: the top
/// level; `"routes.destinations"`: each `[[routes.destinations]]`): the parser's own
/// list, which a test holds the documentation to.
pub fn keys() -> Vec<(&'static str, &'static [&'static str])> {
    raw::tables()
        .into_iter()
        .map(|(table, _, keys)| (table, keys))
        .collect()
}

/// The known key of the unknown key's table nearest to it, when close enough to be a
/// typo of it (`upstream_timout` → `upstream_timeout`).
fn nearest_key(segments: &[KeySegment]) -> Option<&'static str> {
    let (KeySegment::Key(last), table) = segments.split_last()? else {
        return None;
    };
    let table: Vec<&str> = table
        .iter()
        .filter_map(|s| match s {
            KeySegment::Key(k) => Some(k.as_str()),
            KeySegment::Index(_) => None,
        })
        .collect();
    let table = table.join(".");
    let (_, _, keys) = raw::tables().into_iter().find(|(t, _, _)| *t == table)?;
    crate::provider::catalogue::nearest(last, keys.iter().copied())
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

    /// Said after "`${VAR}` is not set": why this environment may lack it.
    fn unset_note(&self) -> &'static str {
        ""
    }
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

/// The process environment as a reload sees it: the one the gateway started with.
struct EnvAtStart;

impl Env for EnvAtStart {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn unset_note(&self) -> &'static str {
        " in the gateway's environment, which is read once, when it starts: a reload does not see a variable exported since. Restart the gateway with it set, or keep the secret in a file (`file:PATH`), which every reload reads again"
    }
}

/// [`load`] for a reload: an unset `${VAR}` says that the environment is the one the
/// gateway started with, and points at `file:` secrets, which a reload re-reads.
pub fn load_for_reload(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigErrors(vec![format!("{}: cannot read: {e}", path.display())]))?;
    parse(&text, path, &EnvAtStart)
}

/// Reads and validates a config file for a command that uses one route and does not
/// talk to the store (`sign --route`, and the admin client's commands): the other
/// routes are skipped and the store's problems left out, so their unset `${VAR}`s are
/// no error. `None`: no route at all, only the `[server]` section.
pub fn load_only(path: &Path, route: Option<&str>) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigErrors(vec![format!("{}: cannot read: {e}", path.display())]))?;
    parse_with(&text, path, &ProcessEnv, Some(route))
}

/// Validates config text; `path` names the file in messages and anchors `file:` paths.
///
/// Every problem is reported in one run, in line order: unknown keys along with bad
/// values, missing keys, values of the wrong type, unset variables and unknown
/// providers. Only a file that is not TOML stops at the first error.
pub fn parse(text: &str, path: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    parse_with(text, path, env, None)
}

/// The index of the route a key path is under (`routes[3]…`), if any.
fn route_index(path: &[KeySegment]) -> Option<usize> {
    match path {
        [KeySegment::Key(k), KeySegment::Index(j), ..] if k == "routes" => Some(*j),
        _ => None,
    }
}

/// Values of the wrong type reported in one run before giving up on the rest.
const MAX_TYPE_ERRORS: usize = 64;

/// [`parse`]; `only` = `Some(route)` validates just that route (none with `Some(None)`).
fn parse_with(
    text: &str,
    path: &Path,
    env: &dyn Env,
    only: Option<Option<&str>>,
) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let parse_error = |e: toml::de::Error| ConfigErrors(vec![toml_error(&file, text, &e)]);
    let mut document = toml::de::DeTable::parse(text).map_err(parse_error)?;
    let mut unknown: Vec<Vec<KeySegment>> = Vec::new();
    // A value of the wrong type stops serde. Its key is reported like any other
    // problem, taken out of the document, and the rest parsed again, so one mistake
    // never hides the others.
    let mut wrong: Vec<(usize, String, Option<usize>)> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    let raw: RawConfig = loop {
        unknown.clear();
        let parsed: Result<RawConfig, _> =
            serde_ignored::deserialize(toml::Deserializer::from(document.clone()), |p| {
                unknown.push(key_segments(&p))
            });
        let e = match parsed {
            Ok(raw) => break raw,
            Err(e) => e,
        };
        let (Some(span), true) = (e.span(), wrong.len() < MAX_TYPE_ERRORS) else {
            return Err(parse_error(e));
        };
        let Some(at) = path_at(document.get_ref(), span.start) else {
            return Err(parse_error(e));
        };
        if !remove_key(document.get_mut(), &at) {
            return Err(parse_error(e));
        }
        let start = span.start.min(text.len());
        let line = 1 + text.as_bytes()[..start]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        let key = key_name(&at);
        let message = redact_unexpected(e.message().trim_end());
        wrong.push((
            line,
            format!("{file}:{line}: {key}: {message}"),
            route_index(&at),
        ));
        // The key holding the bad value is gone: not "missing" on top of "wrong".
        let last_key = at
            .iter()
            .rposition(|s| matches!(s, KeySegment::Key(_)))
            .map_or(at.len(), |i| i + 1);
        removed.push(key_name(&at[..last_key]));
    };
    // A command that uses one route reports nothing about the others.
    let skipped = |index: Option<usize>| match (only, index) {
        (Some(wanted), Some(j)) => {
            let name = raw
                .routes
                .get(j)
                .map(|r| r.get_ref().name.get_ref().as_str());
            wanted.is_none() || name != wanted
        }
        _ => false,
    };
    unknown.retain(|segments| !skipped(route_index(segments)));
    let wrong: Vec<(usize, String)> = wrong
        .into_iter()
        .filter(|(_, _, j)| !skipped(*j))
        .map(|(line, msg, _)| (line, msg))
        .collect();
    let mut v = Validator {
        file,
        text,
        base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        env,
        errors: wrong,
        dedup_line: None,
        removed,
        only: only.map(|o| o.map(str::to_owned)),
    };
    for segments in &unknown {
        let line = key_span(document.get_ref(), segments).map_or(1, |span| v.line(span));
        let hint = nearest_key(segments)
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        v.err_at(line, &key_name(segments), format_args!("unknown key{hint}"));
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

/// An upstream URL as every output shows it: `user:password@` and the values of the
/// query (`?code=…`, `?sig=…`) replaced with `[redacted]`, after `${VAR}` expansion
/// put whatever they hold there. The scheme, host, port, path and parameter names
/// stay, which is what an operator checks.
pub fn redacted_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    if !u.username().is_empty() || u.password().is_some() {
        let _ = u.set_username("[redacted]");
        let _ = u.set_password(None);
    }
    if u.query().is_some() {
        let names: Vec<String> = u.query_pairs().map(|(n, _)| n.into_owned()).collect();
        let query = names
            .iter()
            .map(|n| format!("{n}=[redacted]"))
            .collect::<Vec<_>>()
            .join("&");
        u.set_query(Some(&query));
    }
    // `[` and `]` are percent-encoded in the userinfo; written plainly for people.
    u.to_string()
        .replacen("%5Bredacted%5D@", "[redacted]@", 1)
        .replace("=%5Bredacted%5D", "=[redacted]")
}

/// [`redacted_url`] for text that may not parse as a URL: the userinfo (between
/// `://` and the next `@` before any `/`) and everything after `?` are replaced.
pub fn redacted_url_text(text: &str) -> String {
    if let Ok(u) = reqwest::Url::parse(text) {
        return redacted_url(&u);
    }
    let mut out = text.to_owned();
    if let Some(q) = out.find('?') {
        out.truncate(q);
        out.push_str("?[redacted]");
    }
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let authority_end = out[start..].find('/').map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..authority_end].rfind('@') {
            out.replace_range(start..start + at, "[redacted]");
        }
    }
    out
}

#[cfg(test)]
mod redaction_tests {
    #[test]
    fn credentials_in_upstream_urls_are_redacted() {
        let u = reqwest::Url::parse("https://bob:hunter2@up.example:8443/hook?code=s3cr3t&x=1")
            .expect("url");
        let shown = super::redacted_url(&u);
        assert_eq!(
            shown,
            "https://[redacted]@up.example:8443/hook?code=[redacted]&x=[redacted]"
        );
        assert_eq!(
            super::redacted_url_text("http://bob:pw@[bad/x?code=1"),
            "http://[redacted]@[bad/x?[redacted]"
        );
        let plain = reqwest::Url::parse("http://127.0.0.1:3000/stripe").expect("url");
        assert_eq!(super::redacted_url(&plain), "http://127.0.0.1:3000/stripe");
    }
}
