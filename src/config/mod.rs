//! The TOML configuration: raw serde structs, then one validation pass into types that
//! cannot hold bad values.
//!
//! Every problem is reported, not just the first, and each message names the file,
//! the line and the key: `config.toml:14: routes[0].secrets[1]: ${STRIPE_SECRET} is not set`.
//! `${VAR}` and `file:PATH` are expanded after parsing, never textually before it, so
//! line numbers stay true and a secret's value cannot inject TOML.

mod raw;
mod size;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Method;
use toml::Spanned;

use crate::provider::standard_webhooks::{StandardScheme, SwKey};
use crate::provider::{Credential, EventIdSource, Preset, Verifier};
use crate::secret::Secret;
use raw::{RawConfig, RawCredential, RawRoute};

/// What to do when the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Answer 503 with `Retry-After`: the provider retries later and nothing is lost.
    Reject,
    /// Forward without a claim (availability over deduplication), and count it.
    Forward,
}

/// Which dedup store to use.
#[derive(Clone, PartialEq, Eq)]
pub enum Backend {
    Memory,
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
    /// Request bodies being received at once from one client address; beyond, 429.
    /// Bodies being read never hold delivery capacity (`max_in_flight`).
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
}

/// One validated `[[routes]]` entry.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub path: String,
    pub methods: Vec<Method>,
    pub verifier: Verifier,
    pub event_id: EventIdSource,
    /// Seconds a signed timestamp may be off; `None` = not checked or not signed.
    pub tolerance: Option<u64>,
    pub upstream: reqwest::Url,
    pub upstream_timeout: Duration,
    pub on_error: OnError,
    pub public_url: Option<String>,
    /// Re-signs forwarded deliveries with the Standard Webhooks scheme.
    pub forward_signer: Option<StandardScheme>,
    pub secret_count: usize,
    /// Failed verifications per second the route absorbs; beyond, its requests get
    /// 429 without being verified until the budget refills.
    pub failure_budget: u32,
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

/// One step of the path to a key in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySegment {
    Key(String),
    Index(usize),
}

/// The path of a key serde ignored, without the markers of optional and spanned values.
fn key_segments(path: &serde_ignored::Path<'_>) -> Vec<KeySegment> {
    use serde_ignored::Path as P;
    let mut out = match path {
        P::Root => return Vec::new(),
        P::Seq { parent, .. }
        | P::Map { parent, .. }
        | P::Some { parent }
        | P::NewtypeStruct { parent }
        | P::NewtypeVariant { parent } => key_segments(parent),
    };
    match path {
        P::Seq { index, .. } => out.push(KeySegment::Index(*index)),
        P::Map { key, .. } if !key.starts_with("$__serde_spanned") => {
            out.push(KeySegment::Key(key.clone()));
        }
        _ => {}
    }
    out
}

/// `routes[0].upstream_timout`, as the other messages name keys.
fn key_name(segments: &[KeySegment]) -> String {
    let mut name = String::new();
    for s in segments {
        match s {
            KeySegment::Key(k) if name.is_empty() => name.push_str(k),
            KeySegment::Key(k) => {
                name.push('.');
                name.push_str(k);
            }
            KeySegment::Index(i) => name.push_str(&format!("[{i}]")),
        }
    }
    name
}

/// Where the last key of `segments` is written in the document.
fn key_span(
    table: &toml::de::DeTable<'_>,
    segments: &[KeySegment],
) -> Option<std::ops::Range<usize>> {
    use toml::de::DeValue;
    let (KeySegment::Key(first), rest) = segments.split_first()? else {
        return None;
    };
    let (key, value) = table
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == first.as_str())?;
    let mut value = value.get_ref();
    let mut span = key.span();
    let mut rest = rest;
    while let Some((segment, tail)) = rest.split_first() {
        match (segment, value) {
            (KeySegment::Index(i), DeValue::Array(items)) => {
                let item = items.get(*i)?;
                span = item.span();
                value = item.get_ref();
            }
            (KeySegment::Key(name), DeValue::Table(t)) => {
                let (k, v) = t
                    .iter()
                    .find(|(k, _)| k.get_ref().as_ref() == name.as_str())?;
                span = k.span();
                value = v.get_ref();
            }
            _ => return None,
        }
        rest = tail;
    }
    Some(span)
}

/// A TOML error as `file: TOML parse error at line L, column C: message`, never
/// echoing what was written.
///
/// The toml crate's own `Display` quotes the offending line and serde's "invalid
/// type" messages quote the value (`invalid type: string "whsec_…"`), so a secret
/// written with the wrong type, or on a line with a syntax error, would reach
/// `hookgate check`, the log and the `POST /reload` answer. The position and the
/// kind of value are enough to find the mistake.
fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> String {
    let message = redact_unexpected(e.message().trim_end());
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = &text.as_bytes()[..start];
            let line = 1 + before.iter().filter(|b| **b == b'\n').count();
            let column = 1 + before.iter().rev().take_while(|b| **b != b'\n').count();
            format!("{file}: TOML parse error at line {line}, column {column}: {message}")
        }
        None => format!("{file}: TOML parse error: {message}"),
    }
}

/// Drops the quoted value from serde's "invalid type/value" messages: `invalid type:
/// string "abc", expected a sequence` becomes `invalid type: string, expected a
/// sequence`. Other messages quote only key names and are kept.
fn redact_unexpected(message: &str) -> String {
    if !(message.starts_with("invalid type: ") || message.starts_with("invalid value: ")) {
        return message.to_owned();
    }
    // The expected part is the visitor's own text; the value sits before it.
    let (head, expected) = match message.rsplit_once(", expected ") {
        Some((h, e)) => (h, Some(e)),
        None => (message, None),
    };
    let kind = head
        .find(['`', '"', '\''])
        .map_or(head, |i| &head[..i])
        .trim_end();
    match expected {
        Some(e) => format!("{kind}, expected {e}"),
        None => kind.to_owned(),
    }
}

struct Validator<'a> {
    file: String,
    text: &'a str,
    base: PathBuf,
    env: &'a dyn Env,
    /// Each message with its line, sorted by line before they are reported.
    errors: Vec<(usize, String)>,
    /// The line of `store.dedup_ttl`, if set: a route whose tolerance is the preset's
    /// default and too long for it is reported there.
    dedup_line: Option<usize>,
}

impl Validator<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        1 + self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    }

    fn err<T>(&mut self, spanned: &Spanned<T>, key: &str, msg: impl fmt::Display) {
        let line = self.line(spanned.span());
        self.err_at(line, key, msg);
    }

    fn err_at(&mut self, line: usize, key: &str, msg: impl fmt::Display) {
        self.errors
            .push((line, format!("{}:{line}: {key}: {msg}", self.file)));
    }

    fn duration(&mut self, v: &Option<Spanned<String>>, key: &str, default: Duration) -> Duration {
        match v {
            None => default,
            Some(s) => match humantime::parse_duration(s.get_ref().trim()) {
                Ok(d) if !d.is_zero() => d,
                Ok(_) => {
                    self.err(s, key, "must be longer than zero");
                    default
                }
                Err(e) => {
                    self.err(
                        s,
                        key,
                        format_args!(
                            "{:?} is not a duration ({e}); write e.g. \"30s\", \"5m\", \"24h\"",
                            s.get_ref()
                        ),
                    );
                    default
                }
            },
        }
    }

    fn socket(
        &mut self,
        v: &Option<Spanned<String>>,
        key: &str,
        default: Option<SocketAddr>,
    ) -> Option<SocketAddr> {
        match v {
            None => default,
            Some(s) => match s.get_ref().parse() {
                Ok(a) => Some(a),
                Err(_) => {
                    self.err(
                        s,
                        key,
                        format_args!(
                            "{:?} is not an address like \"127.0.0.1:8080\"",
                            s.get_ref()
                        ),
                    );
                    default
                }
            },
        }
    }

    fn count(&mut self, v: &Option<Spanned<i64>>, key: &str, default: usize, min: usize) -> usize {
        match v {
            None => default,
            Some(n) => match usize::try_from(*n.get_ref()) {
                Ok(x) if x >= min => x,
                _ => {
                    self.err(n, key, format_args!("must be at least {min}"));
                    default
                }
            },
        }
    }

    fn on_error(&mut self, v: &Option<Spanned<String>>, key: &str, default: OnError) -> OnError {
        match v.as_ref().map(|s| (s, s.get_ref().as_str())) {
            None => default,
            Some((_, "reject")) => OnError::Reject,
            Some((_, "forward")) => OnError::Forward,
            Some((s, other)) => {
                self.err(
                    s,
                    key,
                    format_args!("{other:?}: use \"reject\" or \"forward\""),
                );
                default
            }
        }
    }

    /// Expands `${VAR}` anywhere in the value, or reads `file:PATH` (relative to the
    /// config file; one trailing newline removed).
    fn secret(&mut self, s: &Spanned<String>, key: &str) -> Option<Secret> {
        let raw = s.get_ref();
        if let Some(p) = raw.strip_prefix("file:") {
            let path = self.base.join(p);
            return match std::fs::read(&path) {
                Ok(mut bytes) => {
                    if bytes.ends_with(b"\n") {
                        bytes.pop();
                        if bytes.ends_with(b"\r") {
                            bytes.pop();
                        }
                    }
                    if bytes.iter().all(u8::is_ascii_whitespace) {
                        self.err(
                            s,
                            key,
                            format_args!("file {} is empty (or only whitespace)", path.display()),
                        );
                        return None;
                    }
                    Some(Secret::new(bytes))
                }
                Err(e) => {
                    self.err(
                        s,
                        key,
                        format_args!("cannot read secret file {}: {e}", path.display()),
                    );
                    None
                }
            };
        }
        let mut out = String::new();
        let mut rest = raw.as_str();
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                self.err(s, key, "unclosed ${ in value");
                return None;
            };
            let name = &after[..end];
            match self.env.var(name) {
                Some(val) if !val.is_empty() => out.push_str(&val),
                Some(_) => {
                    self.err(s, key, format_args!("${{{name}}} is set but empty"));
                    return None;
                }
                None => {
                    self.err(s, key, format_args!("${{{name}}} is not set"));
                    return None;
                }
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        // A value of only whitespace (an unset-looking `${VAR}` holding a space or a
        // newline) is no key at all: refused like an empty one.
        if out.trim().is_empty() {
            self.err(s, key, "is empty (or only whitespace)");
            return None;
        }
        Some(Secret::new(out.into_bytes()))
    }

    fn config(&mut self, raw: RawConfig, path: &Path) -> Option<Config> {
        let rs = raw.server.unwrap_or_default();
        let default_listen = SocketAddr::from(([0, 0, 0, 0], 8080));
        let listen = self
            .socket(&rs.listen, "server.listen", Some(default_listen))
            .unwrap_or(default_listen);
        let admin_listen = self.socket(&rs.admin_listen, "server.admin_listen", None);
        let admin_token = rs
            .admin_token
            .as_ref()
            .and_then(|t| self.secret(t, "server.admin_token"));
        if let (Some(t), None) = (&rs.admin_token, &rs.admin_listen) {
            self.err(
                t,
                "server.admin_token",
                "is set but server.admin_listen is not: there is no admin listener to protect",
            );
        }
        let max_body = match &rs.max_body {
            None => 1024 * 1024,
            Some(s) => match size::parse(s.get_ref()) {
                Some(n) if n > 0 => n,
                _ => {
                    self.err(
                        s,
                        "server.max_body",
                        format_args!(
                            "{:?} is not a size like \"1MiB\" or \"512KiB\"",
                            s.get_ref()
                        ),
                    );
                    1024 * 1024
                }
            },
        };
        let server = ServerConfig {
            listen,
            admin_listen,
            admin_token,
            max_body,
            body_timeout: self.duration(
                &rs.body_timeout,
                "server.body_timeout",
                Duration::from_secs(30),
            ),
            header_read_timeout: self.duration(
                &rs.header_read_timeout,
                "server.header_read_timeout",
                Duration::from_secs(30),
            ),
            shutdown_grace: self.duration(
                &rs.shutdown_grace,
                "server.shutdown_grace",
                Duration::from_secs(30),
            ),
            log_format: match rs.log_format.as_ref().map(|f| (f, f.get_ref().as_str())) {
                None => None,
                Some((_, "pretty")) => Some(crate::telemetry::LogFormat::Pretty),
                Some((_, "json")) => Some(crate::telemetry::LogFormat::Json),
                Some((f, other)) => {
                    self.err(
                        f,
                        "server.log_format",
                        format_args!("{other:?}: use \"pretty\" or \"json\""),
                    );
                    None
                }
            },
            max_header_bytes: match &rs.max_header_bytes {
                None => 16 * 1024,
                Some(v) => match size::parse(v.get_ref()) {
                    Some(n) if n >= 8192 => n,
                    _ => {
                        self.err(
                            v,
                            "server.max_header_bytes",
                            "must be a size of at least 8KiB",
                        );
                        16 * 1024
                    }
                },
            },
            max_headers: self.count(&rs.max_headers, "server.max_headers", 100, 1),
            max_connections: self.count(&rs.max_connections, "server.max_connections", 10_000, 1),
            max_in_flight: self.count(&rs.max_in_flight, "server.max_in_flight", 1024, 1),
            request_timeout: self.duration(
                &rs.request_timeout,
                "server.request_timeout",
                Duration::from_secs(60),
            ),
            idle_timeout: self.duration(
                &rs.idle_timeout,
                "server.idle_timeout",
                Duration::from_secs(60),
            ),
            max_reads_per_client: self.count(
                &rs.max_reads_per_client,
                "server.max_reads_per_client",
                64,
                1,
            ),
            max_concurrent_streams: u32::try_from(self.count(
                &rs.max_concurrent_streams,
                "server.max_concurrent_streams",
                100,
                1,
            ))
            .unwrap_or(u32::MAX),
            trusted_proxies: rs
                .trusted_proxies
                .iter()
                .flatten()
                .enumerate()
                .filter_map(|(i, p)| {
                    let text = p.get_ref();
                    // A bare address is a network of one.
                    let parsed = text
                        .parse::<ipnet::IpNet>()
                        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
                    match parsed {
                        Ok(net) => Some(net),
                        Err(_) => {
                            self.err(
                                p,
                                &format!("server.trusted_proxies[{i}]"),
                                format_args!(
                                    "{text:?} is not an address or a network like \"10.0.0.0/8\""
                                ),
                            );
                            None
                        }
                    }
                })
                .collect(),
            tls: match &rs.tls {
                None => None,
                Some(t) => {
                    let tls = TlsConfig {
                        cert: self.base.join(&t.get_ref().cert),
                        key: self.base.join(&t.get_ref().key),
                    };
                    match crate::server::tls::server_config(&tls.cert, &tls.key) {
                        Ok(_) => Some(tls),
                        Err(msg) => {
                            self.err(t, "server.tls", msg);
                            None
                        }
                    }
                }
            },
        };

        let st = raw.store.unwrap_or_default();
        self.dedup_line = st.dedup_ttl.as_ref().map(|d| self.line(d.span()));
        let backend = match st.backend.as_ref().map(|b| (b, b.get_ref().as_str())) {
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
                if let Some(u) = &st.url {
                    if let Some(v) = self.secret(u, "store.url") {
                        let text = String::from_utf8_lossy(v.expose()).into_owned();
                        match text.strip_prefix("redis+cluster://") {
                            Some(hosts) => urls.extend(hosts.split(',').filter(|h| !h.trim().is_empty()).map(|h| format!("redis://{}", h.trim()))),
                            None => self.err(u, "store.url", "with store.cluster, leave url out (or write redis+cluster://host:port,host:port)"),
                        }
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
                    format_args!("{other:?}: use \"memory\" or \"redis\""),
                );
                Backend::Memory
            }
        };
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
        };
        if let (
            Some(n),
            Backend::Memory | Backend::RedisCluster { .. } | Backend::RedisSentinel { .. },
        ) = (&st.min_replicas_ack, &store.backend)
        {
            if *n.get_ref() > 0 {
                self.err(
                    n,
                    "store.min_replicas_ack",
                    "is supported with a single Redis primary (backend = \"redis\" with url) only",
                );
            }
        }

        if raw.routes.is_empty() {
            self.err_at(1, "routes", "no [[routes]] defined");
        }
        let mut routes: Vec<Route> = Vec::new();
        for (i, r) in raw.routes.into_iter().enumerate() {
            let (name_line, path_line) = (self.line(r.name.span()), self.line(r.path.span()));
            if let Some(route) = self.route(i, r, &store) {
                if let Some(other) = routes.iter().find(|o| o.name == route.name) {
                    let msg = format!("name {:?} is used twice", other.name);
                    self.err_at(name_line, &format!("routes[{i}].name"), msg);
                } else if let Some(other) = routes.iter().find(|o| o.path == route.path) {
                    let msg = format!(
                        "path {:?} is already served by route {:?}",
                        route.path, other.name
                    );
                    self.err_at(path_line, &format!("routes[{i}].path"), msg);
                }
                routes.push(route);
            }
        }
        let capture = raw.capture.map(|c| CaptureConfig {
            dir: self.base.join(c.dir),
            max_files: match c.max_files {
                None => 10_000,
                Some(n) if *n.get_ref() > 0 => usize::try_from(*n.get_ref()).unwrap_or(10_000),
                Some(n) => {
                    self.err(&n, "capture.max_files", "must be at least 1");
                    10_000
                }
            },
        });
        Some(Config {
            source: path.to_path_buf(),
            server,
            store,
            routes,
            capture,
        })
    }

    fn route(&mut self, i: usize, r: RawRoute, store: &StoreConfig) -> Option<Route> {
        let k = |field: &str| format!("routes[{i}].{field}");
        let errors_before = self.errors.len();

        let name = r.name.get_ref().clone();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            self.err(
                &r.name,
                &k("name"),
                format_args!("{name:?}: use letters, digits, '-', '_' and '.'"),
            );
        }
        let path = r.path.get_ref().clone();
        if !path.starts_with('/') || path.contains(['?', '#', ' ']) {
            self.err(
                &r.path,
                &k("path"),
                format_args!("{path:?} must start with '/' and hold no query"),
            );
        }
        let methods: Option<Vec<Method>> = r.methods.as_ref().map(|ms| {
            ms.iter()
                .filter_map(|m| {
                    match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                        Ok(mm) => Some(mm),
                        Err(_) => {
                            self.err(
                                m,
                                &k("methods"),
                                format_args!("{:?} is not an HTTP method", m.get_ref()),
                            );
                            None
                        }
                    }
                })
                .collect()
        });

        let preset = Preset::parse(r.provider.get_ref());
        if preset.is_none() {
            self.err(
                &r.provider,
                &k("provider"),
                format_args!(
                    "unknown provider {:?}; known: {}",
                    r.provider.get_ref(),
                    Preset::NAMES.join(", ")
                ),
            );
        }
        let opts = r.hmac.as_ref().map(|h| h.get_ref());
        if let (Some(h), Some(p)) = (&r.hmac, preset) {
            if p != Preset::HMAC {
                self.err(h, &k("hmac"), "is only used with provider = \"hmac\"");
            }
        }

        if r.secrets.get_ref().is_empty() && !preset.is_some_and(|p| p.secret_from_handshake()) {
            self.err(&r.secrets, &k("secrets"), "at least one secret is required");
        }
        let mut secrets: Vec<Credential> = Vec::new();
        for (j, c) in r.secrets.get_ref().iter().enumerate() {
            let key = k(&format!("secrets[{j}]"));
            match c.get_ref() {
                RawCredential::Text(t) => {
                    let spanned = Spanned::new(c.span(), t.clone());
                    if let Some(s) = self.secret(&spanned, &key) {
                        secrets.push(Credential::Text(s));
                    }
                }
                RawCredential::Parts(parts) => {
                    let mut out = std::collections::BTreeMap::new();
                    for (name, value) in parts {
                        let spanned = Spanned::new(c.span(), value.clone());
                        if let Some(s) = self.secret(&spanned, &format!("{key}.{name}")) {
                            out.insert(name.clone(), s);
                        }
                    }
                    if out.len() == parts.len() {
                        secrets.push(Credential::Parts(out));
                    }
                }
            }
        }

        let default_tol = preset.and_then(|p| p.default_tolerance(opts));
        let tolerance = match &r.tolerance {
            None => default_tol,
            Some(t) if t.get_ref() == "off" => None,
            Some(t) => {
                if preset.is_some() && default_tol.is_none() {
                    self.err(
                        t,
                        &k("tolerance"),
                        format_args!(
                            "provider {:?} signs no timestamp; remove tolerance",
                            r.provider.get_ref()
                        ),
                    );
                }
                let d = self.duration(&Some(t.clone()), &k("tolerance"), Duration::from_secs(300));
                Some(d.as_secs().max(1))
            }
        };
        if let Some(tol) = tolerance {
            if store.dedup_ttl < Duration::from_secs(tol.saturating_mul(2)) {
                let ttl = humantime::format_duration(store.dedup_ttl);
                let why = "a signed request stays acceptable that long either way and must not outlive its dedup key";
                match (&r.tolerance, self.dedup_line) {
                    (Some(t), _) => {
                        let line = self.line(t.span());
                        self.err_at(line, &k("tolerance"), format_args!("{tol}s needs store.dedup_ttl ({ttl}) of at least twice as long: {why}"));
                    }
                    (None, line) => {
                        let line = line.unwrap_or_else(|| self.line(r.name.span()));
                        self.err_at(
                            line,
                            "store.dedup_ttl",
                            format_args!("{ttl} is shorter than twice the tolerance of route {name:?} ({tol}s, the provider's default): {why}"),
                        );
                    }
                }
            }
        }

        let event_id = match (&r.event_id, preset) {
            (Some(e), _) => match EventIdSource::parse(e.get_ref()) {
                Ok(s) => Some(s),
                Err(msg) => {
                    self.err(e, &k("event_id"), msg);
                    None
                }
            },
            (None, Some(p)) => match p.default_event_id(opts) {
                Some(s) => Some(s),
                None => {
                    self.err(&r.provider, &k("event_id"), "provider \"hmac\" needs event_id = \"header:NAME\" | \"json:/pointer\" | \"body-sha256\" (or hmac.id_header)");
                    None
                }
            },
            (None, None) => None,
        };

        // `${VAR}` may name the upstream host per environment.
        let upstream_text = if r.upstream.get_ref().contains("${") {
            self.secret(&r.upstream, &k("upstream"))
                .map(|s| String::from_utf8_lossy(s.expose()).into_owned())
        } else {
            Some(r.upstream.get_ref().clone())
        };
        let upstream = match upstream_text.as_deref().map(reqwest::Url::parse) {
            None => None,
            Some(Ok(u)) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(u),
            Some(_) => {
                self.err(
                    &r.upstream,
                    &k("upstream"),
                    format_args!(
                        "{:?} is not an http:// or https:// URL",
                        r.upstream.get_ref()
                    ),
                );
                None
            }
        };
        let upstream_timeout = self.duration(
            &r.upstream_timeout,
            &k("upstream_timeout"),
            Duration::from_secs(10),
        );
        if store.inflight_ttl <= upstream_timeout {
            let line = r
                .upstream_timeout
                .as_ref()
                .map(|t| self.line(t.span()))
                .unwrap_or_else(|| self.line(r.name.span()));
            self.err_at(
                line,
                &k("upstream_timeout"),
                format_args!(
                    "store.inflight_ttl ({}) must be longer than upstream_timeout ({}), or a claim could expire while its forward is still running",
                    humantime::format_duration(store.inflight_ttl),
                    humantime::format_duration(upstream_timeout)
                ),
            );
        }
        let on_error = self.on_error(&r.on_error, &k("on_error"), store.on_error);
        let public_url = match &r.public_url {
            None => {
                if let Some(p) = preset.filter(|p| p.needs_public_url(opts)) {
                    self.err(
                        &r.provider,
                        &k("public_url"),
                        format_args!("provider {:?} signs the URL it calls: set public_url = \"https://…\" (without the query)", p.name()),
                    );
                }
                None
            }
            Some(u) => {
                match reqwest::Url::parse(u.get_ref()) {
                    Ok(_) if u.get_ref().contains('?') => {
                        self.err(u, &k("public_url"), "must not hold a query: the gateway appends the query string as received");
                        None
                    }
                    Ok(_) => Some(u.get_ref().clone()),
                    Err(_) => {
                        self.err(u, &k("public_url"), "is not an absolute URL");
                        None
                    }
                }
            }
        };
        let forward_signer = match &r.forward_secret {
            None => None,
            Some(s) => match self.secret(s, &k("forward_secret")) {
                Some(secret) => match SwKey::parse(secret.expose()) {
                    Ok(key @ SwKey::Hmac(_)) => {
                        Some(StandardScheme::with_prefix("webhook", vec![key]))
                    }
                    Ok(SwKey::Ed25519(_)) => {
                        self.err(
                            s,
                            &k("forward_secret"),
                            "must be a whsec_ signing secret, not a public key",
                        );
                        None
                    }
                    Err(msg) => {
                        self.err(s, &k("forward_secret"), msg);
                        None
                    }
                },
                None => None,
            },
        };

        let verifier = match preset {
            Some(p) if !secrets.is_empty() || p.secret_from_handshake() => {
                match p.verifier(&secrets, opts, tolerance) {
                    Ok(v) => Some(v),
                    Err(msg) => {
                        let span_line = r
                            .hmac
                            .as_ref()
                            .map(|h| self.line(h.span()))
                            .unwrap_or_else(|| self.line(r.secrets.span()));
                        self.err_at(
                            span_line,
                            &k(if r.hmac.is_some() { "hmac" } else { "secrets" }),
                            msg,
                        );
                        None
                    }
                }
            }
            _ => None,
        };

        if self.errors.len() > errors_before {
            return None;
        }
        let verifier = verifier?;
        Some(Route {
            name,
            path,
            // Unless set, what the preset needs: POST and its handshake's method.
            methods: methods.unwrap_or_else(|| verifier.default_methods()),
            verifier,
            event_id: event_id?,
            tolerance,
            upstream: upstream?,
            upstream_timeout,
            on_error,
            public_url,
            forward_signer,
            secret_count: secrets.len(),
            failure_budget: u32::try_from(self.count(
                &r.failure_budget,
                &k("failure_budget"),
                100,
                1,
            ))
            .unwrap_or(u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests;
