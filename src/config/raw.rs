//! The config file as written, before validation. Unknown keys are errors, collected
//! while deserializing (`serde_ignored`) so that they are reported with every other one.
//! Fields that need a post-parse check are `Spanned`, so the message can name the line.
//! Keys with a fixed set of values are enums: a value outside the set is reported by
//! serde, with its key and line, and its message lists the choices
//! (`toml_errors::choices`).

use serde::Deserialize;
use toml::Spanned;

use super::{AdminRole, LogFormat};
use super::{Delivery, OnError};
use crate::provider::HmacOptions;
use crate::queue::OnDead;

#[derive(Debug, Deserialize)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: Option<RawServer>,
    #[serde(default)]
    pub store: Option<RawStore>,
    #[serde(default)]
    pub routes: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    pub capture: Option<RawCapture>,
    #[serde(default)]
    pub log: Option<RawLog>,
    #[serde(default)]
    pub alerts: Vec<Spanned<RawAlert>>,
    #[serde(default)]
    pub telemetry: Option<RawTelemetry>,
}

/// `[telemetry]`: where spans are exported (`config/validate/telemetry.rs`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawTelemetry {
    pub otlp: Option<Spanned<String>>,
}

/// `[[alerts]]` (`config/validate/alerts.rs`).
#[derive(Debug, Deserialize)]
pub(super) struct RawAlert {
    pub name: Option<Spanned<String>>,
    #[serde(default = "absent")]
    pub to: Spanned<String>,
    pub format: Option<Spanned<String>>,
    pub secret: Option<Spanned<String>>,
    pub on: Option<Spanned<Vec<String>>>,
}

/// A route's `refusals = { outcome, over, within }`.
#[derive(Debug, Deserialize)]
pub(super) struct RawRefusals {
    pub outcome: Spanned<String>,
    pub over: Spanned<i64>,
    pub within: Spanned<String>,
}

/// `[log]`: the delivery log (`config/validate/log.rs`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawLog {
    pub enabled: Option<bool>,
    pub keep: Option<Spanned<String>>,
    pub max_size: Option<Spanned<String>>,
    pub bodies: Option<Spanned<String>>,
    pub max_body: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawCapture {
    pub dir: String,
    pub max_files: Option<Spanned<i64>>,
    pub max_bytes: Option<Spanned<String>>,
    pub refused: Option<bool>,
    pub replays: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawServer {
    pub listen: Option<Spanned<String>>,
    pub admin_listen: Option<Spanned<String>>,
    pub admin_token: Option<Spanned<String>>,
    pub admin_tokens: Option<Vec<Spanned<RawAdminToken>>>,
    pub max_body: Option<Spanned<String>>,
    pub body_timeout: Option<Spanned<String>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub shutdown_grace: Option<Spanned<String>>,
    pub log_format: Option<LogFormat>,
    pub max_header_bytes: Option<Spanned<String>>,
    pub max_headers: Option<Spanned<i64>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_in_flight: Option<Spanned<i64>>,
    pub tls: Option<Spanned<RawTls>>,
    pub request_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub max_reads_per_client: Option<Spanned<i64>>,
    pub max_concurrent_streams: Option<Spanned<i64>>,
    pub trusted_proxies: Option<Vec<Spanned<String>>>,
    pub admin_hosts: Option<Vec<Spanned<String>>>,
    pub max_connections_per_client: Option<Spanned<i64>>,
    pub max_body_bytes_in_flight: Option<Spanned<String>>,
}

/// `[[server.admin_tokens]]`: a named admin token and its role
/// (`config/validate/server.rs`).
#[derive(Debug, Deserialize)]
pub(super) struct RawAdminToken {
    #[serde(default = "absent")]
    pub name: Spanned<String>,
    #[serde(default = "absent")]
    pub token: Spanned<String>,
    pub role: Option<Spanned<AdminRole>>,
}

/// `store.backend`: which store; its settings are the `[store]` keys beside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum BackendKind {
    #[default]
    Memory,
    Disk,
    Redis,
}

#[derive(Debug, Deserialize)]
pub(super) struct RawTls {
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawStore {
    pub backend: Option<Spanned<BackendKind>>,
    pub url: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub min_free_space: Option<Spanned<String>>,
    pub max_records: Option<Spanned<i64>>,
    pub cluster: Option<Spanned<Vec<Spanned<String>>>>,
    pub tls_ca: Option<Spanned<String>>,
    pub sentinel: Option<Spanned<Vec<Spanned<String>>>>,
    pub sentinel_master: Option<Spanned<String>>,
    pub min_replicas_ack: Option<Spanned<i64>>,
    pub replica_ack_timeout: Option<Spanned<String>>,
    pub allow_eviction: Option<bool>,
    pub key_prefix: Option<String>,
    pub dedup_ttl: Option<Spanned<String>>,
    pub inflight_ttl: Option<Spanned<String>>,
    pub on_error: Option<OnError>,
    pub timeout: Option<Spanned<String>>,
}

/// The start of the span a required key that is not written gets: serde fills it in
/// with an empty value instead of stopping, and validation reports it as missing
/// with every other problem, at the route's line.
pub(super) const ABSENT: usize = usize::MAX;

fn absent<T: Default>() -> Spanned<T> {
    Spanned::new(ABSENT..ABSENT, T::default())
}

/// Whether a required key was not written (see [`ABSENT`]).
pub(super) fn is_absent<T>(v: &Spanned<T>) -> bool {
    v.span().start == ABSENT
}

#[derive(Debug, Deserialize)]
pub(super) struct RawRoute {
    #[serde(default = "absent")]
    pub name: Spanned<String>,
    #[serde(default = "absent")]
    pub path: Spanned<String>,
    #[serde(default = "absent")]
    pub provider: Spanned<String>,
    #[serde(default = "absent")]
    pub secrets: Spanned<Vec<Spanned<RawCredential>>>,
    pub tolerance: Option<Spanned<String>>,
    pub upstream: Option<Spanned<String>>,
    pub postgres: Option<Spanned<RawPostgres>>,
    pub nats: Option<Spanned<RawNats>>,
    pub amqp: Option<Spanned<RawAmqp>>,
    pub redis_stream: Option<Spanned<RawRedisStream>>,
    pub pull: Option<Spanned<RawPull>>,
    pub upstream_timeout: Option<Spanned<String>>,
    pub event_id: Option<Spanned<String>>,
    pub event_type: Option<Spanned<String>>,
    pub events: Option<Spanned<Vec<String>>>,
    pub public_url: Option<Spanned<String>>,
    pub forward_secret: Option<Spanned<String>>,
    pub methods: Option<Vec<Spanned<String>>>,
    pub on_error: Option<Spanned<OnError>>,
    pub hmac: Option<Spanned<HmacOptions>>,
    /// The header that carries a token preset's credential, where the provider lets
    /// the operator name it (Okta, New Relic, Datadog, …).
    pub auth_header: Option<Spanned<String>>,
    pub failure_budget: Option<Spanned<i64>>,
    pub delivery: Option<Spanned<Delivery>>,
    pub retry: Option<Spanned<RawRetry>>,
    pub concurrency: Option<Spanned<i64>>,
    pub rate_limit: Option<Spanned<String>>,
    pub order_by: Option<Spanned<String>>,
    pub on_dead: Option<Spanned<OnDead>>,
    pub breaker: Option<Spanned<RawBreaker>>,
    pub silence: Option<Spanned<String>>,
    pub refusals: Option<Spanned<RawRefusals>>,
    pub destinations: Option<Spanned<Vec<RawDestination>>>,
}

/// `[[routes.destinations]]`: one of a queue route's destinations.
#[derive(Debug, Deserialize)]
pub(super) struct RawDestination {
    pub name: Spanned<String>,
    pub upstream: Option<Spanned<String>>,
    pub postgres: Option<Spanned<RawPostgres>>,
    pub nats: Option<Spanned<RawNats>>,
    pub amqp: Option<Spanned<RawAmqp>>,
    pub redis_stream: Option<Spanned<RawRedisStream>>,
    pub pull: Option<Spanned<RawPull>>,
    pub upstream_timeout: Option<Spanned<String>>,
    pub events: Option<Spanned<Vec<String>>>,
    pub forward_secret: Option<Spanned<String>>,
    pub retry: Option<Spanned<RawRetry>>,
    pub concurrency: Option<Spanned<i64>>,
    pub rate_limit: Option<Spanned<String>>,
    pub order_by: Option<Spanned<String>>,
    pub on_dead: Option<Spanned<OnDead>>,
    pub breaker: Option<Spanned<RawBreaker>>,
}

/// `breaker = { failures = 10, probe = "30s" }`, or `breaker = false` (off), or
/// `true` (the defaults).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawBreaker {
    On(bool),
    // Plain values: an untagged enum cannot read spans; errors point at `breaker`.
    Set {
        failures: Option<i64>,
        probe: Option<String>,
    },
}

/// `pull = true`, or `pull = { token = "…", lease = "30s" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawPull {
    On(bool),
    // Plain values: an untagged enum cannot read spans; errors point at `pull`.
    Set {
        token: Option<String>,
        lease: Option<String>,
    },
}

/// `postgres = { url = "…", table = "hookgate_inbox" }`.
#[derive(Debug, Deserialize)]
pub(super) struct RawPostgres {
    pub url: Spanned<String>,
    pub table: Option<Spanned<String>>,
}

/// `nats = { url = "nats://…", subject = "webhooks.{route}.{event_type}" }`.
#[derive(Debug, Deserialize)]
pub(super) struct RawNats {
    pub url: Spanned<String>,
    pub subject: Option<Spanned<String>>,
}

/// `amqp = { url = "amqp://…", exchange = "webhooks", routing_key = "{route}.{event_type}" }`.
#[derive(Debug, Deserialize)]
pub(super) struct RawAmqp {
    pub url: Spanned<String>,
    pub exchange: Spanned<String>,
    pub routing_key: Option<Spanned<String>>,
}

/// `redis_stream = { url = "redis://…", stream = "webhooks:{route}", maxlen = 1000000 }`.
#[derive(Debug, Deserialize)]
pub(super) struct RawRedisStream {
    pub url: Spanned<String>,
    pub stream: Option<Spanned<String>>,
    pub maxlen: Option<Spanned<i64>>,
}

/// `retry = { max_attempts = 20, initial = "1s", max_delay = "1h", max_age = "72h" }`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct RawRetry {
    pub max_attempts: Option<Spanned<i64>>,
    pub initial: Option<Spanned<String>>,
    pub max_delay: Option<Spanned<String>>,
    pub max_age: Option<Spanned<String>>,
}

/// A credential as written: a string, or an inline table of named parts
/// (`{ app_secret = "…", verify_token = "…" }`). A hand-written visitor rather than
/// an untagged enum, so a wrong type is reported at the exact key and line.
#[derive(Debug, Clone)]
pub(super) enum RawCredential {
    Text(String),
    Parts(std::collections::BTreeMap<String, String>),
}

impl<'de> Deserialize<'de> for RawCredential {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawCredential;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a secret string, or an inline table of named parts")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawCredential::Text(v.to_owned()))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut parts = std::collections::BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, PartValue>()? {
                    parts.insert(k, v.0);
                }
                Ok(RawCredential::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

/// One part of a credential table: text, or an integer written as text.
struct PartValue(String);

impl<'de> Deserialize<'de> for PartValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = PartValue;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an integer")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(PartValue(v.to_owned()))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(PartValue(v.to_string()))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(PartValue(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Every table of the config file, with the raw struct that reads it and the keys it
/// accepts: the field names serde's derive hands to `deserialize_struct`, renames
/// included, so the list cannot drift from the structs above. `""` is the file's top
/// level; `routes.retry` is also a destination's `retry`.
pub(super) fn tables() -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    fn of<T: for<'de> Deserialize<'de>>(
        table: &'static str,
    ) -> (&'static str, &'static str, &'static [&'static str]) {
        let mut fields: &'static [&'static str] = &[];
        let _ = T::deserialize(FieldNames(&mut fields));
        (table, std::any::type_name::<T>(), fields)
    }
    vec![
        of::<RawConfig>(""),
        of::<RawServer>("server"),
        of::<RawTls>("server.tls"),
        of::<RawAdminToken>("server.admin_tokens"),
        of::<RawStore>("store"),
        of::<RawRoute>("routes"),
        of::<HmacOptions>("routes.hmac"),
        of::<RawRetry>("routes.retry"),
        of::<RawDestination>("routes.destinations"),
        of::<RawPostgres>("routes.postgres"),
        of::<RawNats>("routes.nats"),
        of::<RawAmqp>("routes.amqp"),
        of::<RawRedisStream>("routes.redis_stream"),
        of::<RawCapture>("capture"),
        of::<RawLog>("log"),
        of::<RawAlert>("alerts"),
        of::<RawRefusals>("routes.refusals"),
        of::<RawTelemetry>("telemetry"),
    ]
}

/// A deserializer that deserializes nothing: it keeps the field names a derived
/// `Deserialize` asks a struct for, and stops.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("fields read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
