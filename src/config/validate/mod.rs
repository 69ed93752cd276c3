//! One validation pass from the raw config into types that cannot hold bad values:
//! the shared helpers here, one file per section (`server.rs`, `store.rs`, `route.rs`).

mod alerts;
pub(super) mod log;
mod route;
mod server;
mod store;
pub(super) mod target;
pub(super) mod telemetry;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::raw::{RawCapture, RawConfig, RawRoute, is_absent};
use super::{CaptureConfig, Config, Env, Route};
use crate::secret::Secret;

pub(super) struct Validator<'a> {
    pub(super) file: String,
    pub(super) text: &'a str,
    pub(super) base: PathBuf,
    pub(super) env: &'a dyn Env,
    /// Each message with its line, sorted by line before they are reported.
    pub(super) errors: Vec<(usize, String)>,
    /// The line of `store.dedup_ttl`, if set: a route whose tolerance is the preset's
    /// default and too long for it is reported there.
    pub(super) dedup_line: Option<usize>,
    /// Keys taken out of the document because their value had the wrong type: each is
    /// already reported, so it is not reported missing as well.
    pub(super) removed: Vec<String>,
    /// `Some(name)`: validate only the route of that name (`Some(None)`: no route), for
    /// commands that use one route and need none of the others' variables.
    pub(super) only: Option<Option<String>>,
}

impl Validator<'_> {
    pub(super) fn line(&self, span: std::ops::Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        1 + self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
    }

    pub(super) fn err<T>(&mut self, spanned: &Spanned<T>, key: &str, msg: impl fmt::Display) {
        let line = self.line(spanned.span());
        self.err_at(line, key, msg);
    }

    pub(super) fn err_at(&mut self, line: usize, key: &str, msg: impl fmt::Display) {
        self.errors
            .push((line, format!("{}:{line}: {key}: {msg}", self.file)));
    }

    pub(super) fn duration(
        &mut self,
        v: &Option<Spanned<String>>,
        key: &str,
        default: Duration,
    ) -> Duration {
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
                    let note = self.env.unset_note();
                    self.err(s, key, format_args!("${{{name}}} is not set{note}"));
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

    pub(super) fn config(&mut self, raw: RawConfig, path: &Path) -> Option<Config> {
        let server = self.server(raw.server.unwrap_or_default());
        let before_store = self.errors.len();
        let store = self.store(raw.store.unwrap_or_default());
        // A command for one route does not talk to the store (`sign`, and the admin
        // client, which asks the gateway): the store's variables are not its business.
        if self.only.is_some() {
            self.errors.truncate(before_store);
        }

        if raw.routes.is_empty() {
            self.err_at(1, "routes", "no [[routes]] defined");
        }
        // A route `only` does not name is for the caller to report: `sign` says the
        // config has none of that name, the admin listener which routes it serves.
        let mut routes: Vec<Route> = Vec::new();
        for (i, r) in raw.routes.into_iter().enumerate() {
            let at = r.span();
            let mut r = r.into_inner();
            if let Some(only) = &self.only
                && only.as_deref() != Some(r.name.get_ref().as_str())
            {
                continue;
            }
            let missing = self.required_keys(i, &mut r, at);
            let (name_line, path_line) = (self.line(r.name.span()), self.line(r.path.span()));
            if let Some(route) = self.route(i, r, &store, &missing) {
                self.names_and_paths_are_unique(i, &route, &routes, (name_line, path_line));
                routes.push(route);
            }
        }
        let capture = raw.capture.map(|c| self.capture(c));
        let log = self.log(raw.log.unwrap_or_default(), &store.backend);
        let alerts = self.alerts(raw.alerts);
        let telemetry = self.telemetry(raw.telemetry.unwrap_or_default());
        Some(Config::new(
            path.to_path_buf(),
            server,
            store,
            routes,
            capture,
            log,
            alerts,
            telemetry,
        ))
    }

    /// The required keys of route `i` that are not written: one error each, at its
    /// `[[routes]]`, and the route's own span in their place. Their names.
    fn required_keys(
        &mut self,
        i: usize,
        r: &mut RawRoute,
        at: std::ops::Range<usize>,
    ) -> Vec<&'static str> {
        let route_line = self.line(at.clone());
        let mut missing: Vec<&'static str> = Vec::new();
        for (field, absent) in [
            ("name", is_absent(&r.name)),
            ("path", is_absent(&r.path)),
            ("provider", is_absent(&r.provider)),
            ("secrets", is_absent(&r.secrets)),
        ] {
            let key = format!("routes[{i}].{field}");
            if absent && !self.removed.contains(&key) {
                self.err_at(route_line, &key, "missing: every route sets it");
            }
            if absent {
                missing.push(field);
            }
        }
        let here = |v: &mut Spanned<_>| {
            if is_absent(v) {
                *v = Spanned::new(at.clone(), std::mem::take(v.get_mut()));
            }
        };
        here(&mut r.name);
        here(&mut r.path);
        here(&mut r.provider);
        if is_absent(&r.secrets) {
            r.secrets = Spanned::new(at.clone(), Vec::new());
        }
        missing
    }

    /// No two routes share a name (the store's keys, the admin API and the commands
    /// name routes) or a path (a request would match either).
    fn names_and_paths_are_unique(
        &mut self,
        i: usize,
        route: &Route,
        before: &[Route],
        (name_line, path_line): (usize, usize),
    ) {
        if let Some(other) = before.iter().find(|o| o.name == route.name) {
            let msg = format!("name {:?} is used twice", other.name);
            self.err_at(name_line, &format!("routes[{i}].name"), msg);
        } else if let Some(other) = before.iter().find(|o| o.path == route.path) {
            let msg = format!(
                "path {:?} is already served by route {:?}",
                route.path, other.name
            );
            self.err_at(path_line, &format!("routes[{i}].path"), msg);
        }
    }

    /// `[capture]`.
    fn capture(&mut self, c: RawCapture) -> CaptureConfig {
        CaptureConfig {
            dir: self.base.join(c.dir),
            max_files: match c.max_files {
                None => 10_000,
                Some(n) if *n.get_ref() > 0 => usize::try_from(*n.get_ref()).unwrap_or(10_000),
                Some(n) => {
                    self.err(&n, "capture.max_files", "must be at least 1");
                    10_000
                }
            },
            max_bytes: match &c.max_bytes {
                None => CaptureConfig::MAX_BYTES,
                Some(s) => match crate::config::size::parse(s.get_ref()) {
                    Some(n) if n > 0 => n as u64,
                    _ => {
                        self.err(
                            s,
                            "capture.max_bytes",
                            format_args!("{:?} is not a size like \"256MiB\"", s.get_ref()),
                        );
                        CaptureConfig::MAX_BYTES
                    }
                },
            },
            refused: c.refused.unwrap_or(false),
            replays: c.replays.unwrap_or(false),
        }
    }
}
