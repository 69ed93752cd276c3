//! `[[routes]]`: one route, its provider, secrets and upstream.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use toml::Spanned;

use super::Validator;
use super::target::{KIND_KEYS, KindKeys};
use crate::config::raw::{RawBreaker, RawCredential, RawDestination, RawRetry, RawRoute};
use crate::config::{Backend, Delivery, Destination, OnError, Route, StoreConfig, Target};
use crate::provider::standard_webhooks::{StandardScheme, SwKey};
use crate::provider::{
    Credential, EventFilter, EventIdSource, EventTypeSource, HmacOptions, Preset, Verifier,
};
use crate::queue::{Breaker, OnDead, RateLimit, RetryPolicy};

/// A route's or a destination's delivery keys, as written.
struct PacingKeys<'a> {
    upstream_timeout: &'a Option<Spanned<String>>,
    forward_secret: &'a Option<Spanned<String>>,
    retry: &'a Option<Spanned<RawRetry>>,
    concurrency: &'a Option<Spanned<i64>>,
    rate_limit: &'a Option<Spanned<String>>,
    order_by: &'a Option<Spanned<String>>,
    on_dead: &'a Option<Spanned<OnDead>>,
    breaker: &'a Option<Spanned<RawBreaker>>,
}

/// Those keys validated: a destination's, or the route's (its destinations' defaults).
#[derive(Clone)]
struct Pacing {
    upstream_timeout: Duration,
    forward_signer: Option<StandardScheme>,
    retry: RetryPolicy,
    concurrency: usize,
    rate_limit: Option<RateLimit>,
    order_by: Option<EventTypeSource>,
    on_dead: OnDead,
    breaker: Option<Breaker>,
    /// `upstream_timeout` is the built-in default, not checked against the store's
    /// lease yet (a route with destinations leaves that to the destinations that
    /// inherit it).
    is_builtin: bool,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            upstream_timeout: Duration::from_secs(10),
            forward_signer: None,
            retry: RetryPolicy::default(),
            concurrency: 8,
            rate_limit: None,
            order_by: None,
            on_dead: OnDead::Skip,
            breaker: Some(Breaker::default()),
            is_builtin: true,
        }
    }
}

impl Pacing {
    fn destination(self, name: String, target: Target, events: Option<EventFilter>) -> Destination {
        Destination {
            name,
            target,
            upstream_timeout: self.upstream_timeout,
            forward_signer: self.forward_signer,
            events,
            retry: self.retry,
            concurrency: self.concurrency,
            rate_limit: self.rate_limit,
            order_by: self.order_by,
            on_dead: self.on_dead,
            breaker: self.breaker,
        }
    }
}

/// The first part of every queue key on Redis, after the key prefix, in the layout
/// before `#q:` (still moved at start): no route may be named so.
const QUEUE_KEYS: &str = "q";

impl Validator<'_> {
    /// One route; `missing` names the required keys not written (already reported).
    pub(super) fn route(
        &mut self,
        i: usize,
        r: RawRoute,
        store: &StoreConfig,
        missing: &[&str],
    ) -> Option<Route> {
        let k = |field: &str| format!("routes[{i}].{field}");
        let errors_before = self.errors.len();

        let name = r.name.get_ref().clone();
        self.route_name(&r.name, missing, &k);
        let path = r.path.get_ref().clone();
        if !missing.contains(&"path") && !path.starts_with('/') || path.contains(['?', '#', ' ']) {
            self.err(
                &r.path,
                &k("path"),
                format_args!("{path:?} must start with '/' and hold no query"),
            );
        }
        let methods = self.methods(&r, &k);
        let preset = self.preset(&r, missing, &k);
        let opts = r.hmac.as_ref().map(|h| h.get_ref());
        if let (Some(h), Some(p)) = (&r.hmac, preset)
            && p != Preset::HMAC
        {
            self.err(h, &k("hmac"), "is only used with provider = \"hmac\"");
        }
        let auth_header = self.auth_header(&r, preset, &k);

        if r.secrets.get_ref().is_empty()
            && !missing.contains(&"secrets")
            && !preset.is_some_and(|p| p.secret_from_handshake())
        {
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
        let events = self.event_filter(
            &r.events,
            &k("events"),
            event_type.is_some() || preset.is_none(),
        );

        let public_url = self.public_url(&r, preset, opts, &k);

        let verifier = self.verifier(
            &r,
            preset,
            opts,
            auth_header.as_ref(),
            &secrets,
            tolerance,
            &k,
        );
        let delivery = self.delivery(&r, store, &k);
        let destinations = self.destinations(&r, delivery, event_type.is_some(), store, &k);
        let on_error = self.on_error(&r, store, &destinations, &k);
        if delivery != Delivery::Queue
            && destinations
                .iter()
                .any(|d| matches!(d.target, Target::Pull(_)))
        {
            let line = self.line(r.name.span());
            self.err_at(line, &k("pull"), "a pull destination holds events until a consumer leases them: it needs delivery = \"queue\"");
        }
        let silence = r
            .silence
            .as_ref()
            .map(|s| self.duration(&Some(s.clone()), &k("silence"), Duration::from_secs(1800)));
        let refusals = self.refusals(&r.refusals, &k);

        if let Some(v) = &verifier {
            self.order_keys_are_signed(&r, v, &k);
        }
        if self.errors.len() > errors_before || !missing.is_empty() {
            return None;
        }
        let (verifier, event_id) = (verifier?, event_id?);
        let body_fields = crate::provider::BodyFields::new(
            &event_id,
            event_type.as_ref(),
            destinations.iter().map(|d| d.order_by.as_ref()),
        );
        Some(Route {
            name,
            path,
            // Unless set, what the preset needs: POST and its handshake's method.
            methods: methods.unwrap_or_else(|| verifier.default_methods()),
            verifier,
            event_id,
            event_type,
            events,
            tolerance,
            on_error,
            public_url,
            secret_count: secrets.len(),
            failure_budget: u32::try_from(self.count(
                &r.failure_budget,
                &k("failure_budget"),
                100,
                1,
            ))
            .unwrap_or(u32::MAX),
            delivery,
            destinations,
            body_fields,
            silence,
            refusals,
        })
    }

    /// A route's name: letters, digits, '-', '_' and '.', and not the queues' prefix.
    fn route_name(&mut self, n: &Spanned<String>, missing: &[&str], k: &dyn Fn(&str) -> String) {
        let name = n.get_ref();
        if !missing.contains(&"name")
            && (name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
        {
            self.err(
                n,
                &k("name"),
                format_args!("{name:?}: use letters, digits, '-', '_' and '.'"),
            );
        } else if name == QUEUE_KEYS {
            // A route's dedup keys are `<prefix><route>:<event id>`; the queues' keys
            // are `<prefix>#q:{<route>}…` now (no route name holds '#': no dedup key is
            // one, store/redis/layout.rs), but they were `<prefix>q:{<route>}…`, and
            // those are moved into the new layout at start: a route named `q` could
            // have its dedup keys taken for a queue's.
            self.err(
                n,
                &k("name"),
                format_args!(
                    "{name:?} is reserved: the queues' keys start with \"{QUEUE_KEYS}:\" (choose another name)"
                ),
            );
        }
    }

    /// `methods`, if written: HTTP methods.
    fn methods(&mut self, r: &RawRoute, k: &dyn Fn(&str) -> String) -> Option<Vec<Method>> {
        let ms = r.methods.as_ref()?;
        let mut out = Vec::new();
        for m in ms {
            match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                Ok(mm) => out.push(mm),
                Err(_) => self.err(
                    m,
                    &k("methods"),
                    format_args!("{:?} is not an HTTP method", m.get_ref()),
                ),
            }
        }
        Some(out)
    }

    /// `provider`: a preset's name (the nearest one suggested).
    fn preset(
        &mut self,
        r: &RawRoute,
        missing: &[&str],
        k: &dyn Fn(&str) -> String,
    ) -> Option<Preset> {
        let preset = Preset::parse(r.provider.get_ref());
        if preset.is_none() && !missing.contains(&"provider") {
            self.err(
                &r.provider,
                &k("provider"),
                format_args!(
                    "unknown provider {:?}{}; `hookgate providers` lists all {} presets",
                    r.provider.get_ref(),
                    Preset::nearest(r.provider.get_ref())
                        .map(|n| format!(" (did you mean {n:?}?)"))
                        .unwrap_or_default(),
                    Preset::NAMES.len()
                ),
            );
        }
        preset
    }

    /// `order_by = "header:NAME"` only on a header the signature covers: anyone who
    /// saw one delivery can send it again with any value in an unsigned header, and
    /// so put it in another key's line (and, under `on_dead = "block"`, hold that
    /// key). A `json:` pointer reads the signed body.
    fn order_keys_are_signed(
        &mut self,
        r: &RawRoute,
        verifier: &crate::provider::Verifier,
        k: &dyn Fn(&str) -> String,
    ) {
        let mut keys: Vec<(&Spanned<String>, String)> = Vec::new();
        if let Some(o) = &r.order_by {
            keys.push((o, k("order_by")));
        }
        if let Some(ds) = &r.destinations {
            for (j, d) in ds.get_ref().iter().enumerate() {
                if let Some(o) = &d.order_by {
                    keys.push((o, k(&format!("destinations[{j}].order_by"))));
                }
            }
        }
        for (o, key) in keys {
            let header = match EventTypeSource::parse(o.get_ref()) {
                Ok(EventTypeSource::Header(h) | EventTypeSource::HeaderAndJson(h, _)) => h,
                _ => continue,
            };
            if !verifier.signs_header(&header) {
                self.err(
                    o,
                    &key,
                    format_args!(
                        "the {header} header is not covered by the signature: anyone who saw one delivery could send it again under another key and join (or hold) that key's line; order by a field of the signed body (\"json:/pointer\")"
                    ),
                );
            }
        }
    }

    /// `delivery`: sync or queue (which needs a durable store).
    fn delivery(
        &mut self,
        r: &RawRoute,
        store: &StoreConfig,
        k: &dyn Fn(&str) -> String,
    ) -> Delivery {
        let Some(d) = &r.delivery else {
            return Delivery::Sync;
        };
        if *d.get_ref() == Delivery::Queue && matches!(store.backend, Backend::Memory) {
            self.err(
                d,
                &k("delivery"),
                "\"queue\" needs a durable store: set [store] backend = \"disk\" (or \"redis\"); the memory store would lose queued events on a restart",
            );
        }
        *d.get_ref()
    }

    /// `on_error`, the route's or else `store.on_error`. A forward without a claim
    /// reaches one upstream, past any key's line: a queue route with several
    /// destinations, or with `order_by`, cannot fail open. Written on such a route,
    /// `"forward"` is an error; inherited from `[store]`, the route rejects (503 +
    /// `Retry-After`: the provider retries).
    fn on_error(
        &mut self,
        r: &RawRoute,
        store: &StoreConfig,
        destinations: &[Arc<Destination>],
        k: &dyn Fn(&str) -> String,
    ) -> OnError {
        let fans_out_or_orders =
            destinations.len() > 1 || destinations.first().is_some_and(|d| d.order_by.is_some());
        match &r.on_error {
            Some(o) if *o.get_ref() == OnError::Forward && fans_out_or_orders => {
                self.err(
                    o,
                    &k("on_error"),
                    "\"forward\" does not apply to a route with several destinations or order_by: a forward without a claim would reach one upstream, or pass its key's line; leave it out (the provider retries on 503)",
                );
                OnError::Reject
            }
            Some(o) => *o.get_ref(),
            None if fans_out_or_orders => OnError::Reject,
            None => store.on_error,
        }
    }

    /// The route's destinations: its `upstream`, as one destination named after the
    /// route, or its `[[routes.destinations]]`. The route's own delivery keys
    /// (`upstream_timeout`, `retry`, `concurrency`, `forward_secret`) are the
    /// destinations' defaults.
    fn destinations(
        &mut self,
        r: &RawRoute,
        delivery: Delivery,
        has_event_type: bool,
        store: &StoreConfig,
        k: &dyn Fn(&str) -> String,
    ) -> Vec<Arc<Destination>> {
        let route_keys = PacingKeys {
            upstream_timeout: &r.upstream_timeout,
            forward_secret: &r.forward_secret,
            retry: &r.retry,
            concurrency: &r.concurrency,
            rate_limit: &r.rate_limit,
            order_by: &r.order_by,
            on_dead: &r.on_dead,
            breaker: &r.breaker,
        };
        let name_line = self.line(r.name.span());
        let base = self.pacing(
            &route_keys,
            k,
            &Pacing::default(),
            (delivery, r.destinations.is_none()),
            store,
            name_line,
        );
        let mut out = Vec::new();
        let own = KindKeys::of_route(r);
        match (own.any(), &r.destinations) {
            (true, None) => {
                if let Some(target) = self.target(&own, k) {
                    out.push(Arc::new(base.destination(r.name.get_ref().clone(), target, None)));
                }
            }
            (true, Some(ds)) => self.err(
                ds,
                &k("destinations"),
                format_args!("a route has either {KIND_KEYS} or [[routes.destinations]], not both"),
            ),
            // Not when the key was written with the wrong type: that is reported.
            (false, None)
                if ["upstream", "postgres", "nats", "amqp", "redis_stream", "pull", "destinations"]
                    .iter()
                    .any(|key| self.removed.contains(&k(key))) => {}
            (false, None) => self.err_at(
                name_line,
                &k("upstream"),
                "missing: set upstream = \"http://…\" (or postgres, nats, amqp, redis_stream, pull; or [[routes.destinations]] on a queue route)",
            ),
            (false, Some(ds)) => {
                self.several_destinations_need_a_queue(ds, delivery, k);
                self.per_destination_keys_are_not_the_routes(r, k);
                for (j, d) in ds.get_ref().iter().enumerate() {
                    let dk = |field: &str| k(&format!("destinations[{j}].{field}"));
                    let name = d.name.get_ref();
                    if name.is_empty()
                        || !name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    {
                        self.err(
                            &d.name,
                            &dk("name"),
                            format_args!("{name:?}: use letters, digits, '-', '_' and '.'"),
                        );
                    } else if ds.get_ref()[..j].iter().any(|o| o.name.get_ref() == name) {
                        self.err(
                            &d.name,
                            &dk("name"),
                            format_args!("{name:?} names another destination of this route"),
                        );
                    }
                    let events = self.event_filter(&d.events, &dk("events"), has_event_type);
                    let keys = PacingKeys {
                        upstream_timeout: &d.upstream_timeout,
                        forward_secret: &d.forward_secret,
                        retry: &d.retry,
                        concurrency: &d.concurrency,
                        rate_limit: &d.rate_limit,
                        order_by: &d.order_by,
                        on_dead: &d.on_dead,
                        breaker: &d.breaker,
                    };
                    let line = self.line(d.name.span());
                    let pacing = self.pacing(&keys, &dk, &base, (delivery, true), store, line);
                    let kinds = KindKeys::of_destination(d);
                    if !kinds.any() {
                        self.err(
                            &d.name,
                            &dk("upstream"),
                            format_args!("missing: a destination names one of {KIND_KEYS}"),
                        );
                    } else if let Some(target) = self.target(&kinds, &dk) {
                        out.push(Arc::new(pacing.destination(name.clone(), target, events)));
                    }
                }
            }
        }
        out
    }

    /// A sync forward relays one upstream's answer: several destinations are a
    /// queue's. And a route lists at least one.
    fn several_destinations_need_a_queue(
        &mut self,
        ds: &Spanned<Vec<RawDestination>>,
        delivery: Delivery,
        k: &dyn Fn(&str) -> String,
    ) {
        if ds.get_ref().len() > 1 && delivery != Delivery::Queue {
            self.err(ds, &k("destinations"), "several destinations need delivery = \"queue\": a sync forward relays one upstream's answer to the provider");
        }
        if ds.get_ref().is_empty() {
            self.err(ds, &k("destinations"), "at least one destination is needed");
        }
    }

    /// `rate_limit`, `order_by` and `on_dead` are no defaults for destinations: each
    /// destination that needs one sets it.
    fn per_destination_keys_are_not_the_routes(
        &mut self,
        r: &RawRoute,
        k: &dyn Fn(&str) -> String,
    ) {
        for (field, set) in [
            ("rate_limit", r.rate_limit.as_ref().map(Spanned::span)),
            ("order_by", r.order_by.as_ref().map(Spanned::span)),
            ("on_dead", r.on_dead.as_ref().map(Spanned::span)),
        ] {
            if let Some(span) = set {
                let line = self.line(span);
                self.err_at(
                    line,
                    &k(field),
                    "set it on each [[routes.destinations]] that needs it",
                );
            }
        }
    }

    /// `on_dead` says what a dead event does to its key's line: without `order_by`
    /// there is none.
    fn on_dead_needs_order_by(&mut self, keys: &PacingKeys<'_>, k: &dyn Fn(&str) -> String) {
        if let Some(d) = keys.on_dead {
            self.err(d, &k("on_dead"), "is only used with order_by");
        }
    }

    /// `events = ["invoice.*", …]`, which needs the route to know the event type.
    pub(super) fn event_filter(
        &mut self,
        list: &Option<Spanned<Vec<String>>>,
        key: &str,
        has_event_type: bool,
    ) -> Option<EventFilter> {
        let list = list.as_ref()?;
        match EventFilter::new(list.get_ref().clone()) {
            Ok(_) if !has_event_type => {
                self.err(
                    list,
                    key,
                    "filters on the event type, and this route has none: set event_type = \"header:NAME\" | \"json:/pointer\"",
                );
                None
            }
            Ok(f) => Some(f),
            Err(msg) => {
                self.err(list, key, msg);
                None
            }
        }
    }

    /// A route's or a destination's delivery keys, over the defaults given.
    fn pacing(
        &mut self,
        keys: &PacingKeys<'_>,
        k: &dyn Fn(&str) -> String,
        defaults: &Pacing,
        (delivery, check_default): (Delivery, bool),
        store: &StoreConfig,
        name_line: usize,
    ) -> Pacing {
        if delivery == Delivery::Sync {
            self.queue_keys_only_on_queue_routes(keys, k);
        }
        let retry = self.retry(keys.retry, k, defaults.retry);
        let concurrency = self.count(keys.concurrency, &k("concurrency"), defaults.concurrency, 1);
        if let Some(c) = keys.concurrency
            && concurrency > 1024
        {
            self.err(
                c,
                &k("concurrency"),
                "at most 1024 attempts at once per destination",
            );
        }
        let rate_limit = match keys.rate_limit {
            None => defaults.rate_limit,
            Some(t) => match crate::queue::RateLimit::parse(t.get_ref()) {
                Ok(l) => Some(l),
                Err(msg) => {
                    self.err(t, &k("rate_limit"), msg);
                    None
                }
            },
        };
        let order_by = match keys.order_by {
            None => defaults.order_by.clone(),
            Some(o) => match EventTypeSource::parse(o.get_ref()) {
                Ok(s) => Some(s),
                Err(msg) => {
                    self.err(o, &k("order_by"), msg);
                    None
                }
            },
        };
        let on_dead = keys
            .on_dead
            .as_ref()
            .map_or(defaults.on_dead, |d| *d.get_ref());
        if order_by.is_none() {
            self.on_dead_needs_order_by(keys, k);
        }
        let upstream_timeout = self.duration(
            keys.upstream_timeout,
            &k("upstream_timeout"),
            defaults.upstream_timeout,
        );
        // An inherited timeout was checked where it was written.
        if keys.upstream_timeout.is_some() || (defaults.is_builtin && check_default) {
            self.sync_forward_fits_its_claim(keys, k, delivery, store, upstream_timeout, name_line);
        }
        let forward_signer = match keys.forward_secret {
            None => defaults.forward_signer.clone(),
            Some(s) => self.forward_signer(s, &k("forward_secret")),
        };
        let breaker = self.breaker(keys.breaker, k, defaults.breaker);
        Pacing {
            upstream_timeout,
            forward_signer,
            retry,
            concurrency,
            rate_limit,
            order_by,
            on_dead,
            breaker,
            is_builtin: keys.upstream_timeout.is_none() && defaults.is_builtin && !check_default,
        }
    }

    /// Pacing keys are a queue's: a sync forward happens while the provider waits.
    fn queue_keys_only_on_queue_routes(
        &mut self,
        keys: &PacingKeys<'_>,
        k: &dyn Fn(&str) -> String,
    ) {
        let queue_only = [
            ("retry", keys.retry.as_ref().map(Spanned::span)),
            ("concurrency", keys.concurrency.as_ref().map(Spanned::span)),
            ("rate_limit", keys.rate_limit.as_ref().map(Spanned::span)),
            ("order_by", keys.order_by.as_ref().map(Spanned::span)),
            ("on_dead", keys.on_dead.as_ref().map(Spanned::span)),
            ("breaker", keys.breaker.as_ref().map(Spanned::span)),
        ];
        for (field, span) in queue_only {
            if let Some(span) = span {
                let line = self.line(span);
                self.err_at(line, &k(field), "is only used with delivery = \"queue\" (a sync forward happens while the provider waits)");
            }
        }
    }

    /// `breaker = { failures, probe }` (either over the defaults given), `true` (the
    /// defaults) or `false` (off).
    fn breaker(
        &mut self,
        raw: &Option<Spanned<RawBreaker>>,
        k: &dyn Fn(&str) -> String,
        d: Option<Breaker>,
    ) -> Option<Breaker> {
        let Some(raw) = raw else {
            return d;
        };
        match raw.get_ref() {
            RawBreaker::On(false) => None,
            RawBreaker::On(true) => Some(d.unwrap_or_default()),
            RawBreaker::Set { failures, probe } => {
                let d = d.unwrap_or_default();
                let (failures, probe) = (
                    failures.map(|v| Spanned::new(raw.span(), v)),
                    probe.clone().map(|v| Spanned::new(raw.span(), v)),
                );
                let (failures, probe) = (&failures, &probe);
                let failures = self.count(failures, &k("breaker.failures"), d.failures as usize, 1);
                let probe = self.duration(probe, &k("breaker.probe"), d.probe);
                if probe < Duration::from_secs(1) {
                    self.err(raw, &k("breaker.probe"), "at least 1s");
                }
                Some(Breaker {
                    failures: u32::try_from(failures).unwrap_or(u32::MAX),
                    probe,
                })
            }
        }
    }

    /// `retry = { … }` over the defaults given.
    fn retry(
        &mut self,
        raw: &Option<Spanned<RawRetry>>,
        k: &dyn Fn(&str) -> String,
        d: RetryPolicy,
    ) -> RetryPolicy {
        let Some(raw) = raw else {
            return d;
        };
        let raw_ref = raw.get_ref();
        let attempts = self.count(
            &raw_ref.max_attempts,
            &k("retry.max_attempts"),
            d.max_attempts as usize,
            1,
        );
        let retry = RetryPolicy {
            max_attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            initial: self.duration(&raw_ref.initial, &k("retry.initial"), d.initial),
            max_delay: self.duration(&raw_ref.max_delay, &k("retry.max_delay"), d.max_delay),
            max_age: self.duration(&raw_ref.max_age, &k("retry.max_age"), d.max_age),
        };
        if retry.max_delay < retry.initial {
            self.err(raw, &k("retry.max_delay"), "must be at least retry.initial");
        }
        retry
    }

    /// A sync forward runs under a claim of `store.inflight_ttl`, which must outlast
    /// it. A queue route's attempts hold a lease of their own (their timeout and a
    /// margin, renewed while they run), never such a claim: the rule is not theirs.
    /// Called for a timeout written here, or the built-in one where it is used.
    fn sync_forward_fits_its_claim(
        &mut self,
        keys: &PacingKeys<'_>,
        k: &dyn Fn(&str) -> String,
        delivery: Delivery,
        store: &StoreConfig,
        upstream_timeout: Duration,
        name_line: usize,
    ) {
        if delivery != Delivery::Sync || store.inflight_ttl > upstream_timeout {
            return;
        }
        let line = keys
            .upstream_timeout
            .as_ref()
            .map_or(name_line, |t| self.line(t.span()));
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
    pub(super) fn forward_signer(
        &mut self,
        s: &Spanned<String>,
        key: &str,
    ) -> Option<StandardScheme> {
        let secret = self.secret(s, key)?;
        match SwKey::parse(secret.expose()) {
            Ok(sw @ SwKey::Hmac(_)) => Some(StandardScheme::with_prefix("webhook", vec![sw])),
            Ok(SwKey::Ed25519(_)) => {
                self.err(s, key, "must be a whsec_ signing secret, not a public key");
                None
            }
            Err(msg) => {
                self.err(s, key, msg);
                None
            }
        }
    }

    /// `auth_header`: the header a token preset reads its credential from, for the
    /// presets whose provider lets the operator name it.
    fn auth_header(
        &mut self,
        r: &RawRoute,
        preset: Option<Preset>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<http::HeaderName> {
        let h = r.auth_header.as_ref()?;
        if let Some(p) = preset.filter(|p| p.auth_header().is_none()) {
            self.err(
                h,
                &k("auth_header"),
                format_args!(
                    "provider {:?} sends its credential in a header of its own; auth_header is for presets whose provider lets the operator name the header (docs/providers.md)",
                    p.name()
                ),
            );
            return None;
        }
        match http::HeaderName::try_from(h.get_ref().trim()) {
            Ok(name) => Some(name),
            Err(_) => {
                self.err(
                    h,
                    &k("auth_header"),
                    format_args!("{:?} is not a header name", h.get_ref()),
                );
                None
            }
        }
    }

    /// The preset's verifier over the route's credentials.
    #[expect(
        clippy::too_many_arguments,
        reason = "the route's keys a verifier is built from, each validated on its own"
    )]
    fn verifier(
        &mut self,
        r: &RawRoute,
        preset: Option<Preset>,
        opts: Option<&HmacOptions>,
        auth_header: Option<&http::HeaderName>,
        secrets: &[Credential],
        tolerance: Option<u64>,
        k: &dyn Fn(&str) -> String,
    ) -> Option<Verifier> {
        match preset {
            Some(p) if !secrets.is_empty() || p.secret_from_handshake() => {
                match p.verifier_with_header(secrets, opts, tolerance, auth_header) {
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
