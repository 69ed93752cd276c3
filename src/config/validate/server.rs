//! `[server]`.

use std::net::SocketAddr;
use std::time::Duration;

use super::Validator;
use crate::config::raw::RawServer;
use crate::config::{ServerConfig, TlsConfig, size};

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
        let admin_hosts = rs
            .admin_hosts
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, h)| {
                let name = h.get_ref().trim().to_ascii_lowercase();
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
                if valid {
                    Some(name)
                } else {
                    self.err(
                        h,
                        &format!("server.admin_hosts[{i}]"),
                        format_args!("{:?} is not a host name", h.get_ref()),
                    );
                    None
                }
            })
            .collect();
        let max_body_bytes_in_flight = match &rs.max_body_bytes_in_flight {
            None => (64 * 1024 * 1024).max(max_body),
            Some(s) => match size::parse(s.get_ref()) {
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
                    64 * 1024 * 1024
                }
            },
        };
        ServerConfig {
            listen,
            admin_listen,
            admin_token,
            admin_hosts,
            max_connections_per_client: self.count(
                &rs.max_connections_per_client,
                "server.max_connections_per_client",
                256,
                1,
            ),
            max_body_bytes_in_flight,
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
                    match crate::tls::server_config(&tls.cert, &tls.key) {
                        Ok(_) => Some(tls),
                        Err(msg) => {
                            self.err(t, "server.tls", msg);
                            None
                        }
                    }
                }
            },
        }
    }
}
