//! `[server]`: the listeners and the limits, a function per key that needs more than
//! a count or a duration.

use std::net::SocketAddr;
use std::time::Duration;

use super::Validator;
use crate::config::raw::{RawServer, is_absent};
use crate::config::{ADMIN_TOKEN_NAME as ADMIN, AdminToken, ServerConfig, TlsConfig, size};
use crate::secret::Secret;

/// `server.max_body` when unset.
const MAX_BODY: usize = 1024 * 1024;
/// `server.max_body_bytes_in_flight` when unset (or at least `max_body`).
const BODY_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;

impl Validator<'_> {
    /// `[server]`.
    pub(super) fn server(&mut self, rs: RawServer) -> ServerConfig {
        let default_listen = SocketAddr::from(([0, 0, 0, 0], 8080));
        let listen = self
            .socket(&rs.listen, "server.listen", Some(default_listen))
            .unwrap_or(default_listen);
        let admin_listen = self.socket(&rs.admin_listen, "server.admin_listen", None);
        let admin_token = rs
            .admin_token
            .as_ref()
            .and_then(|t| self.secret(t, "server.admin_token"));
        self.admin_token_needs_a_listener(&rs);
        let admin_tokens = self.admin_tokens(&rs, admin_token.as_ref());
        let max_body = self.max_body(&rs);
        ServerConfig {
            listen,
            admin_listen,
            admin_token,
            admin_tokens,
            admin_hosts: self.admin_hosts(&rs),
            max_connections_per_client: self.count(
                &rs.max_connections_per_client,
                "server.max_connections_per_client",
                256,
                1,
            ),
            max_body_bytes_in_flight: self.body_bytes_in_flight(&rs, max_body),
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
            log_format: rs.log_format,
            max_header_bytes: self.max_header_bytes(&rs),
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
            trusted_proxies: self.trusted_proxies(&rs),
            tls: self.tls(&rs),
        }
    }

    /// `admin_token` protects the admin listener: without `admin_listen` there is none.
    fn admin_token_needs_a_listener(&mut self, rs: &RawServer) {
        if let (Some(t), None) = (&rs.admin_token, &rs.admin_listen) {
            self.err(
                t,
                "server.admin_token",
                "is set but server.admin_listen is not: there is no admin listener to protect",
            );
        }
    }

    /// `[[server.admin_tokens]]`: each a unique name (not `admin`, which names
    /// `admin_token` in the audit, when that is set), a token (`${VAR}` or `file:`, not
    /// empty) and a role; only beside an admin listener.
    fn admin_tokens(&mut self, rs: &RawServer, admin_token: Option<&Secret>) -> Vec<AdminToken> {
        let mut out: Vec<AdminToken> = Vec::new();
        for (i, t) in rs.admin_tokens.iter().flatten().enumerate() {
            let at = self.line(t.span());
            let k = |field: &str| format!("server.admin_tokens[{i}].{field}");
            if i == 0 && rs.admin_listen.is_none() {
                self.err_at(
                    at,
                    "server.admin_tokens",
                    "are set but server.admin_listen is not: there is no admin listener to protect",
                );
            }
            let t = t.get_ref();
            let name = t.name.get_ref();
            if is_absent(&t.name) {
                self.err_at(at, &k("name"), "missing: the name the audit records");
            } else if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
            {
                self.err(
                    &t.name,
                    &k("name"),
                    format_args!("{name:?}: use up to 64 letters, digits, '-', '_', '.' and '@'"),
                );
            } else if out.iter().any(|o| &o.name == name) {
                self.err(
                    &t.name,
                    &k("name"),
                    format_args!("{name:?} names another of server.admin_tokens"),
                );
            } else if name == ADMIN && rs.admin_token.is_some() {
                self.err(
                    &t.name,
                    &k("name"),
                    "\"admin\" is the name server.admin_token acts under: choose another",
                );
            }
            let token = if is_absent(&t.token) {
                self.err_at(
                    at,
                    &k("token"),
                    "missing: the Bearer token (${VAR} or file:PATH)",
                );
                None
            } else {
                self.secret(&t.token, &k("token"))
            };
            let role = match &t.role {
                Some(r) => Some(*r.get_ref()),
                None => {
                    self.err_at(at, &k("role"), "missing: \"read\" or \"operate\"");
                    None
                }
            };
            let token = token.filter(|token| {
                let same = out.iter().find(|o| o.token.expose() == token.expose()).map(|o| o.name.clone());
                if let Some(other) = same {
                    self.err(
                        &t.token,
                        &k("token"),
                        format_args!("is the token of {other:?} too: each name needs its own (the audit tells them apart by it)"),
                    );
                }
                let is_admin = admin_token.is_some_and(|a| a.expose() == token.expose());
                if is_admin {
                    self.err(&t.token, &k("token"), "is server.admin_token too: each name needs its own");
                }
                true
            });
            if let (Some(token), Some(role)) = (token, role) {
                out.push(AdminToken {
                    name: name.clone(),
                    token,
                    role,
                });
            }
        }
        out
    }

    /// `max_body`: a size above zero.
    fn max_body(&mut self, rs: &RawServer) -> usize {
        let Some(s) = &rs.max_body else {
            return MAX_BODY;
        };
        match size::parse(s.get_ref()) {
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
                MAX_BODY
            }
        }
    }

    /// `max_body_bytes_in_flight`: at least one whole body (`max_body`), below 4 GiB.
    fn body_bytes_in_flight(&mut self, rs: &RawServer, max_body: usize) -> usize {
        let Some(s) = &rs.max_body_bytes_in_flight else {
            return BODY_BYTES_IN_FLIGHT.max(max_body);
        };
        match size::parse(s.get_ref()) {
            Some(n) if n >= max_body && u32::try_from(n).is_ok() => n,
            _ => {
                self.err(
                    s,
                    "server.max_body_bytes_in_flight",
                    format_args!(
                        "{:?}: use a size of at least server.max_body and below 4GiB, like \"64MiB\"",
                        s.get_ref()
                    ),
                );
                BODY_BYTES_IN_FLIGHT
            }
        }
    }

    /// `max_header_bytes`: a size of at least 8 KiB.
    fn max_header_bytes(&mut self, rs: &RawServer) -> usize {
        let Some(v) = &rs.max_header_bytes else {
            return 16 * 1024;
        };
        match size::parse(v.get_ref()) {
            Some(n) if n >= 8192 => n,
            _ => {
                self.err(
                    v,
                    "server.max_header_bytes",
                    "must be a size of at least 8KiB",
                );
                16 * 1024
            }
        }
    }

    /// `admin_hosts`: host names, lowercased.
    fn admin_hosts(&mut self, rs: &RawServer) -> Vec<String> {
        let mut out = Vec::new();
        for (i, h) in rs.admin_hosts.iter().flatten().enumerate() {
            let name = h.get_ref().trim().to_ascii_lowercase();
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
            if valid {
                out.push(name);
            } else {
                self.err(
                    h,
                    &format!("server.admin_hosts[{i}]"),
                    format_args!("{:?} is not a host name", h.get_ref()),
                );
            }
        }
        out
    }

    /// `trusted_proxies`: networks, or addresses (a network of one).
    fn trusted_proxies(&mut self, rs: &RawServer) -> Vec<ipnet::IpNet> {
        let mut out = Vec::new();
        for (i, p) in rs.trusted_proxies.iter().flatten().enumerate() {
            let text = p.get_ref();
            let parsed = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(net) => out.push(net),
                Err(_) => self.err(
                    p,
                    &format!("server.trusted_proxies[{i}]"),
                    format_args!("{text:?} is not an address or a network like \"10.0.0.0/8\""),
                ),
            }
        }
        out
    }

    /// `[server.tls]`: the certificate and key are read (and checked) now.
    fn tls(&mut self, rs: &RawServer) -> Option<TlsConfig> {
        let t = rs.tls.as_ref()?;
        let tls = TlsConfig {
            cert: self.base.join(&t.get_ref().cert),
            key: self.base.join(&t.get_ref().key),
        };
        match crate::tls::server_config(&tls.cert, &tls.key) {
            Ok(_) => Some(tls),
            Err(msg) => {
                self.err(t, "server.tls", msg);
                None
            }
        }
    }
}
