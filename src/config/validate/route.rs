//! `[[routes]]`: one route, its provider, secrets and upstream.

use std::time::Duration;

use http::Method;
use toml::Spanned;

use super::Validator;
use crate::config::raw::{RawCredential, RawRoute};
use crate::config::{Backend, Delivery, Route, StoreConfig};
use crate::provider::standard_webhooks::{StandardScheme, SwKey};
use crate::provider::{
    Credential, EventFilter, EventIdSource, EventTypeSource, HmacOptions, Preset, Verifier,
};
use crate::queue::RetryPolicy;

impl Validator<'_> {
    pub(super) fn route(&mut self, i: usize, r: RawRoute, store: &StoreConfig) -> Option<Route> {
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
        if let (Some(h), Some(p)) = (&r.hmac, preset)
            && p != Preset::HMAC
        {
            self.err(h, &k("hmac"), "is only used with provider = \"hmac\"");
        }

        if r.secrets.get_ref().is_empty() && !preset.is_some_and(|p| p.secret_from_handshake()) {
            self.err(&r.secrets, &k("secrets"), "at least one secret is required");
        }
        let secrets = self.credentials(&r, &k);
        let tolerance = self.tolerance(&r, preset, opts, store, &k);

        let event_id = self.event_id(&r, preset, opts, &k);
        let event_type = match &r.event_type {
            Some(t) => match EventTypeSource::parse(t.get_ref()) {
                Ok(s) => Some(s),
                Err(msg) => {
                    self.err(t, &k("event_type"), msg);
                    None
                }
            },
            None => preset.and_then(Preset::default_event_type),
        };
        let events = match &r.events {
            None => None,
            Some(list) => match EventFilter::new(list.get_ref().clone()) {
                Ok(_) if event_type.is_none() && preset.is_some() => {
                    self.err(
                        list,
                        &k("events"),
                        "filters on the event type, and this route has none: set event_type = \"header:NAME\" | \"json:/pointer\"",
                    );
                    None
                }
                Ok(f) => Some(f),
                Err(msg) => {
                    self.err(list, &k("events"), msg);
                    None
                }
            },
        };

        let (upstream, upstream_timeout) = self.upstream(&r, store, &k);
        let on_error = self.on_error(&r.on_error, &k("on_error"), store.on_error);
        let public_url = self.public_url(&r, preset, opts, &k);
        let forward_signer = self.forward_signer(&r, &k);

        let verifier = self.verifier(&r, preset, opts, &secrets, tolerance, &k);
        let (delivery, retry, concurrency) = self.delivery(&r, store, &k);
        let rate_limit = match &r.rate_limit {
            None => None,
            Some(t) => {
                if delivery != Delivery::Queue {
                    self.err(t, &k("rate_limit"), "is only used with delivery = \"queue\" (a sync forward happens while the provider waits)");
                }
                match crate::queue::RateLimit::parse(t.get_ref()) {
                    Ok(l) => Some(l),
                    Err(msg) => {
                        self.err(t, &k("rate_limit"), msg);
                        None
                    }
                }
            }
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
            event_type,
            events,
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
            delivery,
            retry,
            concurrency,
            rate_limit,
        })
    }

    /// `delivery`, and for queue routes `retry` and `concurrency`.
    fn delivery(
        &mut self,
        r: &RawRoute,
        store: &StoreConfig,
        k: &dyn Fn(&str) -> String,
    ) -> (Delivery, RetryPolicy, usize) {
        let delivery = match r.delivery.as_ref().map(|d| (d, d.get_ref().as_str())) {
            None | Some((_, "sync")) => Delivery::Sync,
            Some((d, "queue")) => {
                if matches!(store.backend, Backend::Memory) {
                    self.err(
                        d,
                        &k("delivery"),
                        "\"queue\" needs a durable store: set [store] backend = \"disk\" (or \"redis\"); the memory store would lose queued events on a restart",
                    );
                }
                Delivery::Queue
            }
            Some((d, other)) => {
                self.err(
                    d,
                    &k("delivery"),
                    format_args!("{other:?}: use \"sync\" or \"queue\""),
                );
                Delivery::Sync
            }
        };
        if delivery == Delivery::Sync {
            if let Some(retry) = &r.retry {
                self.err(retry, &k("retry"), "is only used with delivery = \"queue\"");
            }
            if let Some(c) = &r.concurrency {
                self.err(
                    c,
                    &k("concurrency"),
                    "is only used with delivery = \"queue\"",
                );
            }
        }
        let defaults = RetryPolicy::default();
        let retry = match &r.retry {
            None => defaults,
            Some(raw) => {
                let raw = raw.get_ref();
                let attempts = self.count(
                    &raw.max_attempts,
                    &k("retry.max_attempts"),
                    defaults.max_attempts as usize,
                    1,
                );
                RetryPolicy {
                    max_attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                    initial: self.duration(&raw.initial, &k("retry.initial"), defaults.initial),
                    max_delay: self.duration(
                        &raw.max_delay,
                        &k("retry.max_delay"),
                        defaults.max_delay,
                    ),
                    max_age: self.duration(&raw.max_age, &k("retry.max_age"), defaults.max_age),
                }
            }
        };
        if let Some(raw) = &r.retry
            && retry.max_delay < retry.initial
        {
            self.err(raw, &k("retry.max_delay"), "must be at least retry.initial");
        }
        let concurrency = self.count(&r.concurrency, &k("concurrency"), 8, 1);
        if let Some(c) = &r.concurrency
            && concurrency > 1024
        {
            self.err(
                c,
                &k("concurrency"),
                "at most 1024 attempts at once per route",
            );
        }
        (delivery, retry, concurrency)
    }

    /// The route's credentials: each a text, or a table of named parts.
    fn credentials(&mut self, r: &RawRoute, k: &dyn Fn(&str) -> String) -> Vec<Credential> {
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
        secrets
    }

    /// The timestamp window in seconds (`None`: not checked); it must fit twice in `dedup_ttl`.
    fn tolerance(
        &mut self,
        r: &RawRoute,
        preset: Option<Preset>,
        opts: Option<&HmacOptions>,
        store: &StoreConfig,
        k: &dyn Fn(&str) -> String,
    ) -> Option<u64> {
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
        if let Some(tol) = tolerance
            && store.dedup_ttl < Duration::from_secs(tol.saturating_mul(2))
        {
            let ttl = humantime::format_duration(store.dedup_ttl);
            let why = "a signed request stays acceptable that long either way and must not outlive its dedup key";
            match (&r.tolerance, self.dedup_line) {
                (Some(t), _) => {
                    let line = self.line(t.span());
                    self.err_at(
                        line,
                        &k("tolerance"),
                        format_args!(
                            "{tol}s needs store.dedup_ttl ({ttl}) of at least twice as long: {why}"
                        ),
                    );
                }
                (None, line) => {
                    let line = line.unwrap_or_else(|| self.line(r.name.span()));
                    self.err_at(
                            line,
                            "store.dedup_ttl",
                            format_args!("{ttl} is shorter than twice the tolerance of route {:?} ({tol}s, the provider's default): {why}", r.name.get_ref()),
                        );
                }
            }
        }
        tolerance
    }

    /// Where the event ID is: the route's `event_id`, else the preset's.
    fn event_id(
        &mut self,
        r: &RawRoute,
        preset: Option<Preset>,
        opts: Option<&HmacOptions>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<EventIdSource> {
        match (&r.event_id, preset) {
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
        }
    }

    /// The upstream URL and its timeout, which the claim's lease must outlast.
    fn upstream(
        &mut self,
        r: &RawRoute,
        store: &StoreConfig,
        k: &dyn Fn(&str) -> String,
    ) -> (Option<reqwest::Url>, Duration) {
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
        (upstream, upstream_timeout)
    }

    /// The public URL a URL-signing provider calls (required for those).
    fn public_url(
        &mut self,
        r: &RawRoute,
        preset: Option<Preset>,
        opts: Option<&HmacOptions>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<String> {
        match &r.public_url {
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
        }
    }

    /// `forward_secret`: a Standard Webhooks signing secret to re-sign forwards with.
    fn forward_signer(
        &mut self,
        r: &RawRoute,
        k: &dyn Fn(&str) -> String,
    ) -> Option<StandardScheme> {
        match &r.forward_secret {
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
        }
    }

    /// The preset's verifier over the route's credentials.
    fn verifier(
        &mut self,
        r: &RawRoute,
        preset: Option<Preset>,
        opts: Option<&HmacOptions>,
        secrets: &[Credential],
        tolerance: Option<u64>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<Verifier> {
        match preset {
            Some(p) if !secrets.is_empty() || p.secret_from_handshake() => {
                match p.verifier(secrets, opts, tolerance) {
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
        }
    }
}
