//! Where a destination delivers: an HTTP upstream, or a server of the handler's own
//! (an inbox table in PostgreSQL, a NATS JetStream subject, a RabbitMQ exchange, a
//! Redis stream). A destination names exactly one.

use std::fmt;

use crate::secret::Secret;

/// A destination's kind and where it is.
#[derive(Debug, Clone)]
pub enum Target {
    /// `upstream = "https://…"`.
    Http(reqwest::Url),
    /// `postgres = { url, table }`.
    Postgres(PostgresTarget),
    /// `nats = { url, subject }`.
    Nats(NatsTarget),
    /// `amqp = { url, exchange, routing_key }`.
    Amqp(AmqpTarget),
    /// `redis_stream = { url, stream, maxlen }`.
    RedisStream(RedisStreamTarget),
    /// `pull = true` or `pull = { token, lease }`: events wait in the queue until a
    /// consumer leases them (`POST /pull/<route>/<destination>`, `hookgate listen`).
    Pull(PullTarget),
}

/// A pull destination's settings.
#[derive(Debug, Clone)]
pub struct PullTarget {
    /// `token`: grants this destination's pull endpoints and nothing else.
    pub token: Option<crate::secret::Secret>,
    /// `lease`: how long a leased event is a consumer's before it is due again.
    pub lease: std::time::Duration,
}

impl PullTarget {
    /// The default `lease`.
    pub const LEASE: std::time::Duration = std::time::Duration::from_secs(30);
}

impl Target {
    /// The kind's name, as the config key writes it (`upstream` is `http`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Postgres(_) => "postgres",
            Self::Nats(_) => "nats",
            Self::Amqp(_) => "amqp",
            Self::RedisStream(_) => "redis_stream",
            Self::Pull(_) => "pull",
        }
    }

    /// The server's address as it may be shown: credentials and query values
    /// replaced by `[redacted]`.
    pub fn shown(&self) -> String {
        match self {
            Self::Http(u) => super::redacted_url(u),
            Self::Postgres(p) => format!("{} table {}", p.url.shown(), p.table),
            Self::Nats(n) => format!("{} subject {}", n.url.shown(), n.subject),
            Self::Amqp(a) => format!(
                "{} exchange {:?} routing key {}",
                a.url.shown(),
                a.exchange,
                a.routing_key
            ),
            Self::RedisStream(r) => format!("{} stream {}", r.url.shown(), r.stream),
            Self::Pull(p) => format!(
                "pulled by consumers (lease {})",
                humantime::format_duration(p.lease)
            ),
        }
    }

    /// The server's URL (credentials in it), for every kind but HTTP.
    pub fn server(&self) -> Option<&ServerUrl> {
        match self {
            Self::Http(_) | Self::Pull(_) => None,
            Self::Postgres(p) => Some(&p.url),
            Self::Nats(n) => Some(&n.url),
            Self::Amqp(a) => Some(&a.url),
            Self::RedisStream(r) => Some(&r.url),
        }
    }
}

/// A server's URL, which may carry a password: `Debug` and [`shown`](Self::shown)
/// print it redacted; [`expose`](Self::expose) is for the one place it connects.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl {
    text: Secret,
    shown: String,
}

impl ServerUrl {
    pub(crate) fn new(text: String) -> Self {
        let shown = super::redacted_url_text(&text);
        Self {
            text: Secret::new(text.into_bytes()),
            shown,
        }
    }

    /// The URL, credentials and all. Call only where the connection is made.
    pub fn expose(&self) -> &str {
        std::str::from_utf8(self.text.expose()).unwrap_or_default()
    }

    /// The URL with its credentials and query values redacted.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The URL's scheme (`postgres`, `tls`, `amqps`, …).
    pub fn scheme(&self) -> &str {
        self.expose().split_once("://").map_or("", |(s, _)| s)
    }
}

impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `postgres = { url = "postgres://…", table = "hookgate_inbox" }`.
#[derive(Debug, Clone)]
pub struct PostgresTarget {
    pub url: ServerUrl,
    /// The inbox table: a plain SQL identifier, or `schema.table`.
    pub table: hookgate_inbox::TableName,
}

/// `nats = { url = "nats://…", subject = "webhooks.{route}.{event_type}" }`.
#[derive(Debug, Clone)]
pub struct NatsTarget {
    pub url: ServerUrl,
    pub subject: Template,
}

/// `amqp = { url = "amqp://…", exchange = "webhooks", routing_key = "{route}.{event_type}" }`.
#[derive(Debug, Clone)]
pub struct AmqpTarget {
    pub url: ServerUrl,
    pub exchange: String,
    pub routing_key: Template,
}

/// `redis_stream = { url = "redis://…", stream = "webhooks:{route}", maxlen = 1000000 }`.
#[derive(Debug, Clone)]
pub struct RedisStreamTarget {
    pub url: ServerUrl,
    pub stream: Template,
    /// `XADD … MAXLEN ~ maxlen`: the stream is trimmed to about this many entries.
    pub maxlen: Option<u64>,
}

/// A subject, routing key or stream name with `{route}` and `{event_type}` filled in
/// per event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(String);

/// What an event with no type fills `{event_type}` with.
pub(crate) const UNTYPED: &str = "untyped";

impl Template {
    /// The placeholders a template may hold.
    pub const PLACEHOLDERS: [&'static str; 2] = ["{route}", "{event_type}"];

    /// A template, or why not: braces only around a known placeholder.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut rest = text;
        while let Some(open) = rest.find(['{', '}']) {
            let tail = &rest[open..];
            match Self::PLACEHOLDERS.iter().find(|p| tail.starts_with(**p)) {
                Some(p) => rest = &tail[p.len()..],
                None => {
                    return Err(format!(
                        "{text:?}: braces only around {{route}} or {{event_type}}"
                    ));
                }
            }
        }
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        Ok(Self(text.to_owned()))
    }

    /// The text with the route's name and the event's type filled in, each made safe
    /// for a subject or key: letters, digits, `-`, `_` and `.` are kept (a type's dots
    /// stay subject tokens), anything else becomes `_`, and empty tokens are not left.
    pub fn fill(&self, route: &str, event_type: Option<&str>) -> String {
        let kind = event_type.map_or(UNTYPED.into(), safe);
        self.0
            .replace("{route}", &safe(route))
            .replace("{event_type}", &kind)
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value made safe for a subject, routing key or stream name (see [`Template::fill`]).
fn safe(value: &str) -> String {
    let mapped: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let tokens: Vec<&str> = mapped.split('.').filter(|t| !t.is_empty()).collect();
    if tokens.is_empty() {
        UNTYPED.to_owned()
    } else {
        tokens.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_fills_in_safe_route_and_type() {
        let t = Template::parse("webhooks.{route}.{event_type}").expect("template");
        assert_eq!(
            t.fill("stripe", Some("invoice.paid")),
            "webhooks.stripe.invoice.paid"
        );
        assert_eq!(
            t.fill("gh", Some("push *>.. x")),
            "webhooks.gh.push___._x",
            "wildcards, spaces and empty tokens never reach a subject"
        );
        assert_eq!(t.fill("gh", None), "webhooks.gh.untyped");
        assert_eq!(t.fill("gh", Some("...")), "webhooks.gh.untyped");
    }

    #[test]
    fn only_known_placeholders_are_taken() {
        assert!(Template::parse("a.{route}").is_ok());
        assert!(Template::parse("a.{tenant}").is_err());
        assert!(Template::parse("a.{route").is_err());
        assert!(Template::parse("a}").is_err());
        assert!(Template::parse("").is_err());
    }

    #[test]
    fn a_server_url_never_shows_its_password() {
        let u = ServerUrl::new("amqp://guest:hunter2@127.0.0.1:5672/%2f".into());
        assert_eq!(format!("{u:?}"), "amqp://[redacted]@127.0.0.1:5672/%2f");
        assert!(!u.shown().contains("hunter2"));
        assert_eq!(u.scheme(), "amqp");
        assert!(u.expose().contains("hunter2"));
    }
}
