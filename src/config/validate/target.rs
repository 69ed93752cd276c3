//! A route's or a destination's kind: exactly one of `upstream`, `postgres`, `nats`,
//! `amqp` or `redis_stream`, each checked for what it needs (a URL of its schemes, a
//! table name, templates with known placeholders).

use toml::Spanned;

use super::Validator;
use crate::config::raw::{
    RawAmqp, RawDestination, RawNats, RawPostgres, RawPull, RawRedisStream, RawRoute,
};
use crate::config::target::{
    AmqpTarget, NatsTarget, PostgresTarget, PullTarget, RedisStreamTarget, ServerUrl, Target,
    Template,
};

/// The kind keys of a route or a destination, as written.
pub(super) struct KindKeys<'a> {
    upstream: Option<&'a Spanned<String>>,
    postgres: Option<&'a Spanned<RawPostgres>>,
    nats: Option<&'a Spanned<RawNats>>,
    amqp: Option<&'a Spanned<RawAmqp>>,
    redis_stream: Option<&'a Spanned<RawRedisStream>>,
    pull: Option<&'a Spanned<RawPull>>,
}

/// The keys a destination's kind is named by, in the order messages list them.
pub(super) const KIND_KEYS: &str = "upstream, postgres, nats, amqp, redis_stream or pull";

impl<'a> KindKeys<'a> {
    pub(super) fn of_route(r: &'a RawRoute) -> Self {
        Self {
            upstream: r.upstream.as_ref(),
            postgres: r.postgres.as_ref(),
            nats: r.nats.as_ref(),
            amqp: r.amqp.as_ref(),
            redis_stream: r.redis_stream.as_ref(),
            pull: r.pull.as_ref(),
        }
    }

    pub(super) fn of_destination(d: &'a RawDestination) -> Self {
        Self {
            upstream: d.upstream.as_ref(),
            postgres: d.postgres.as_ref(),
            nats: d.nats.as_ref(),
            amqp: d.amqp.as_ref(),
            redis_stream: d.redis_stream.as_ref(),
            pull: d.pull.as_ref(),
        }
    }

    /// The keys written, with the line each starts on (a span's start).
    fn written(&self) -> Vec<(&'static str, usize)> {
        let mut out = Vec::new();
        let mut add = |name, span: Option<std::ops::Range<usize>>| {
            if let Some(s) = span {
                out.push((name, s.start));
            }
        };
        add("upstream", self.upstream.map(Spanned::span));
        add("postgres", self.postgres.map(Spanned::span));
        add("nats", self.nats.map(Spanned::span));
        add("amqp", self.amqp.map(Spanned::span));
        add("redis_stream", self.redis_stream.map(Spanned::span));
        add("pull", self.pull.map(Spanned::span));
        out
    }

    /// Whether any kind is written.
    pub(super) fn any(&self) -> bool {
        !self.written().is_empty()
    }
}

impl Validator<'_> {
    /// The kind the keys name. `None` when none is written (the caller reports what
    /// is missing), several are (reported here), or the one written is bad (reported).
    pub(super) fn target(
        &mut self,
        keys: &KindKeys<'_>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<Target> {
        let written = keys.written();
        if let [_, (second, at), ..] = written.as_slice() {
            let line = self.line(*at..*at);
            let names: Vec<&str> = written.iter().map(|(n, _)| *n).collect();
            self.err_at(
                line,
                &k(second),
                format_args!(
                    "a destination names exactly one of {KIND_KEYS}; this one names {}",
                    names.join(" and ")
                ),
            );
            return None;
        }
        if let Some(u) = keys.upstream {
            return self.upstream_url(u, &k("upstream")).map(Target::Http);
        }
        if let Some(p) = keys.postgres {
            return self.postgres(p.get_ref(), &|f| k(&format!("postgres.{f}")));
        }
        if let Some(n) = keys.nats {
            return self.nats(n.get_ref(), &|f| k(&format!("nats.{f}")));
        }
        if let Some(a) = keys.amqp {
            return self.amqp(a.get_ref(), &|f| k(&format!("amqp.{f}")));
        }
        if let Some(r) = keys.redis_stream {
            return self.redis_stream(r.get_ref(), &|f| k(&format!("redis_stream.{f}")));
        }
        if let Some(p) = keys.pull {
            return self.pull(p, &|f| k(&format!("pull{f}")));
        }
        None
    }

    /// `pull = true | { token, lease }`.
    fn pull(&mut self, p: &Spanned<RawPull>, k: &dyn Fn(&str) -> String) -> Option<Target> {
        let (token, lease) = match p.get_ref() {
            RawPull::On(true) => (None, None),
            RawPull::On(false) => {
                self.err(p, &k(""), "pull = false names no destination: leave it out, or set upstream, postgres, nats, amqp or redis_stream");
                return None;
            }
            RawPull::Set { token, lease } => (token.clone(), lease.clone()),
        };
        let at = |v: String| Spanned::new(p.span(), v);
        let token = match token.map(at) {
            None => None,
            Some(t) => Some(self.secret(&t, &k(".token"))?),
        };
        let lease = self.duration(&lease.map(at), &k(".lease"), PullTarget::LEASE);
        if !(std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(3600))
            .contains(&lease)
        {
            self.err(p, &k(".lease"), "from 1s to 1h");
        }
        Some(Target::Pull(PullTarget { token, lease }))
    }

    fn postgres(&mut self, p: &RawPostgres, k: &dyn Fn(&str) -> String) -> Option<Target> {
        let url = self.server_url(&p.url, &k("url"), &["postgres", "postgresql"]);
        let written = p
            .table
            .as_ref()
            .map_or(hookgate_inbox::DEFAULT_TABLE, |t| t.get_ref());
        let table = match (hookgate_inbox::TableName::parse(written), &p.table) {
            (Ok(t), _) => Some(t),
            (Err(e), Some(t)) => {
                self.err(t, &k("table"), e);
                None
            }
            (Err(_), None) => None,
        };
        Some(Target::Postgres(PostgresTarget {
            url: url?,
            table: table?,
        }))
    }

    fn nats(&mut self, n: &RawNats, k: &dyn Fn(&str) -> String) -> Option<Target> {
        let url = self.server_url(&n.url, &k("url"), &["nats", "tls"]);
        let subject = self.template(
            n.subject.as_ref(),
            "webhooks.{route}.{event_type}",
            &k("subject"),
            |t| {
                !t.contains(['*', '>', ' '])
                    && !t.starts_with('.')
                    && !t.ends_with('.')
                    && !t.contains("..")
            },
            "a subject has no spaces, no wildcards ('*', '>') and no empty tokens",
        );
        Some(Target::Nats(NatsTarget {
            url: url?,
            subject: subject?,
        }))
    }

    fn amqp(&mut self, a: &RawAmqp, k: &dyn Fn(&str) -> String) -> Option<Target> {
        let url = self.server_url(&a.url, &k("url"), &["amqp", "amqps"]);
        let exchange = a.exchange.get_ref();
        let exchange_ok = exchange.len() <= 255
            && exchange
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
        if !exchange_ok {
            self.err(
                &a.exchange,
                &k("exchange"),
                "an exchange name of letters, digits, '-', '_', '.' and ':' (\"\" is the default exchange)",
            );
        }
        let routing_key = self.template(
            a.routing_key.as_ref(),
            "{route}.{event_type}",
            &k("routing_key"),
            |t| t.len() <= 255,
            "a routing key is at most 255 bytes",
        );
        Some(Target::Amqp(AmqpTarget {
            url: url?,
            exchange: exchange_ok.then(|| exchange.clone())?,
            routing_key: routing_key?,
        }))
    }

    fn redis_stream(&mut self, r: &RawRedisStream, k: &dyn Fn(&str) -> String) -> Option<Target> {
        let url = self.server_url(&r.url, &k("url"), &["redis", "rediss"]);
        let stream = self.template(
            r.stream.as_ref(),
            "webhooks:{route}",
            &k("stream"),
            |t| !t.contains(char::is_whitespace),
            "a stream name has no spaces",
        );
        let maxlen = match &r.maxlen {
            None => Some(None),
            Some(m) => match u64::try_from(*m.get_ref()) {
                Ok(n) if n > 0 => Some(Some(n)),
                _ => {
                    self.err(m, &k("maxlen"), "must be at least 1");
                    None
                }
            },
        };
        Some(Target::RedisStream(RedisStreamTarget {
            url: url?,
            stream: stream?,
            maxlen: maxlen?,
        }))
    }

    /// A template with `{route}` and `{event_type}`, its default when unset; `ok`
    /// checks the literal text (`rule` says what it wants).
    fn template(
        &mut self,
        t: Option<&Spanned<String>>,
        default: &str,
        key: &str,
        ok: impl Fn(&str) -> bool,
        rule: &str,
    ) -> Option<Template> {
        let Some(t) = t else {
            return Template::parse(default).ok();
        };
        match Template::parse(t.get_ref()) {
            Ok(parsed) if ok(&parsed.fill("r", Some("t"))) => Some(parsed),
            Ok(_) => {
                self.err(t, key, format_args!("{:?}: {rule}", t.get_ref()));
                None
            }
            Err(msg) => {
                self.err(t, key, msg);
                None
            }
        }
    }

    /// A server's URL with one of `schemes` and a host; `${VAR}` and `file:` are
    /// expanded. Messages never show its credentials.
    fn server_url(
        &mut self,
        u: &Spanned<String>,
        key: &str,
        schemes: &[&str],
    ) -> Option<ServerUrl> {
        let raw = u.get_ref();
        let text = if raw.contains("${") || raw.starts_with("file:") {
            let s = self.secret(u, key)?;
            String::from_utf8(s.expose().to_vec()).ok()
        } else {
            Some(raw.clone())
        };
        let parsed = text.as_deref().map(reqwest::Url::parse);
        match (text, parsed) {
            (Some(text), Some(Ok(url)))
                if schemes.contains(&url.scheme()) && url.host().is_some() =>
            {
                Some(ServerUrl::new(text))
            }
            _ => {
                let wanted: Vec<String> = schemes.iter().map(|s| format!("{s}://")).collect();
                self.err(
                    u,
                    key,
                    format_args!(
                        "{:?} is not a {} URL with a host",
                        crate::config::redacted_url_text(raw),
                        wanted.join(" or ")
                    ),
                );
                None
            }
        }
    }

    /// An upstream URL: `http://` or `https://`, with a host; `${VAR}` may name the
    /// host per environment.
    pub(super) fn upstream_url(&mut self, u: &Spanned<String>, key: &str) -> Option<reqwest::Url> {
        let text = if u.get_ref().contains("${") {
            self.secret(u, key)
                .map(|s| String::from_utf8_lossy(s.expose()).into_owned())
        } else {
            Some(u.get_ref().clone())
        };
        match text.as_deref().map(reqwest::Url::parse) {
            None => None,
            Some(Ok(url)) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
                Some(url)
            }
            Some(_) => {
                self.err(
                    u,
                    key,
                    // Credentials written in the value stay out of the message.
                    format_args!(
                        "{:?} is not an http:// or https:// URL",
                        crate::config::redacted_url_text(u.get_ref())
                    ),
                );
                None
            }
        }
    }
}
