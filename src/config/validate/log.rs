//! `[log]`: the delivery log — how long it keeps records, how much room it may take,
//! and whether it keeps bodies.

use std::time::Duration;

use super::Validator;
use crate::config::Backend;
use crate::config::raw::RawLog;
use crate::config::size;

/// Which deliveries' bodies the log keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogBodies {
    /// Verified deliveries' bodies (up to `max_body`); refused ones never.
    Verified,
    /// No body at all: only the request line, headers and what became of it.
    None,
}

/// The validated `[log]` section.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `false`: no request is recorded, only counted (for `/overview`).
    pub enabled: bool,
    /// Records older than this are deleted.
    pub keep: Duration,
    /// The most the log may take, in bytes of stored records (see "The delivery log"
    /// in docs/operations.md for what is counted and the margin the store adds).
    pub max_size: u64,
    pub bodies: LogBodies,
    /// Body bytes kept per delivery; a longer body is cut (`body_truncated`).
    pub max_body: usize,
}

impl LogConfig {
    /// The default `keep`.
    pub const KEEP: Duration = Duration::from_secs(3 * 24 * 3600);
    /// The default `max_body`.
    pub const MAX_BODY: usize = 256 << 10;

    /// The default `max_size` on a backend: 64 MiB of process memory on the memory
    /// store, 1 GiB on the disk store and Redis.
    pub fn default_max_size(backend: &Backend) -> u64 {
        match backend {
            Backend::Memory => 64 << 20,
            _ => 1 << 30,
        }
    }

    /// The defaults on a backend.
    pub fn defaults(backend: &Backend) -> Self {
        Self {
            enabled: true,
            keep: Self::KEEP,
            max_size: Self::default_max_size(backend),
            bodies: LogBodies::Verified,
            max_body: Self::MAX_BODY,
        }
    }
}

/// The smallest `max_size` accepted: a record with a whole `max_body` must fit.
const MIN_SIZE: u64 = 64 << 10;

impl Validator<'_> {
    /// `[log]`.
    pub(super) fn log(&mut self, raw: RawLog, backend: &Backend) -> LogConfig {
        let mut cfg = LogConfig::defaults(backend);
        cfg.enabled = raw.enabled.unwrap_or(true);
        cfg.keep = self.duration(&raw.keep, "log.keep", LogConfig::KEEP);
        if let Some(s) = &raw.max_size {
            match size::parse(s.get_ref()) {
                Some(n) if n as u64 >= MIN_SIZE => cfg.max_size = n as u64,
                _ => self.err(
                    s,
                    "log.max_size",
                    format_args!(
                        "{:?}: use a size of at least 64KiB, like \"1GiB\"",
                        s.get_ref()
                    ),
                ),
            }
        }
        if let Some(s) = &raw.max_body {
            match size::parse(s.get_ref()) {
                Some(n) => cfg.max_body = n,
                None => self.err(
                    s,
                    "log.max_body",
                    format_args!(
                        "{:?} is not a size like \"256KiB\" (\"0\" keeps no body)",
                        s.get_ref()
                    ),
                ),
            }
        }
        if let Some(s) = &raw.bodies {
            match s.get_ref().as_str() {
                "verified" => cfg.bodies = LogBodies::Verified,
                "none" => cfg.bodies = LogBodies::None,
                other => self.err(
                    s,
                    "log.bodies",
                    format_args!("{other:?}: use \"verified\" or \"none\""),
                ),
            }
        }
        // A record holds at most max_body of body (with JSON escapes, up to six times
        // that) besides its headers: it must fit the log several times over.
        if cfg.max_body as u64 > cfg.max_size / 4
            && let Some(s) = raw.max_body.as_ref().or(raw.max_size.as_ref())
        {
            let key = if raw.max_body.is_some() {
                "log.max_body"
            } else {
                "log.max_size"
            };
            self.err(
                s,
                key,
                format_args!(
                    "log.max_body ({} bytes) must be at most a quarter of log.max_size ({} bytes)",
                    cfg.max_body, cfg.max_size
                ),
            );
        }
        cfg
    }
}
