//! The config file as written, before validation. Unknown keys are errors.
//! Fields that need a post-parse check are `Spanned`, so the message can name the line.

use serde::Deserialize;
use toml::Spanned;

use crate::provider::HmacOptions;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: Option<RawServer>,
    #[serde(default)]
    pub store: Option<RawStore>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<Spanned<String>>,
    pub admin_listen: Option<Spanned<String>>,
    pub max_body: Option<Spanned<String>>,
    pub body_timeout: Option<Spanned<String>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub shutdown_grace: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub backend: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub key_prefix: Option<String>,
    pub dedup_ttl: Option<Spanned<String>>,
    pub inflight_ttl: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub name: Spanned<String>,
    pub path: Spanned<String>,
    pub provider: Spanned<String>,
    pub secrets: Spanned<Vec<Spanned<String>>>,
    pub tolerance: Option<Spanned<String>>,
    pub upstream: Spanned<String>,
    pub upstream_timeout: Option<Spanned<String>>,
    pub event_id: Option<Spanned<String>>,
    pub public_url: Option<Spanned<String>>,
    pub forward_secret: Option<Spanned<String>>,
    pub methods: Option<Vec<Spanned<String>>>,
    pub on_error: Option<Spanned<String>>,
    pub hmac: Option<Spanned<HmacOptions>>,
}
