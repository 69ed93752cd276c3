//! How a command reaches a running gateway's admin listener (`forget`, `events`,
//! `deliveries`).

use std::path::PathBuf;

use anyhow::Context as _;

use crate::config;

use super::text;

pub(super) fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A request to a running gateway's admin listener, with its token and the
/// `X-Requested-By` header, and the listener's base URL (for messages).
pub(super) fn admin_request(
    args: &AdminArgs,
    route: Option<&str>,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(reqwest::RequestBuilder, String)> {
    let given = args
        .admin_token
        .clone()
        .map(|t| crate::secret::Secret::new(t.into_bytes()));
    // Only the server section and the named route: another route's unset `${VAR}` is
    // no business of this command. Read when it names the listener or the token.
    let cfg = if args.admin.is_none() || args.token_name.is_some() || given.is_none() {
        Some(config::load_only(&args.config, route).map_err(|e| anyhow::anyhow!("{e}")))
    } else {
        None
    };
    // A name given picks that token; then a token given; then `server.admin_token`.
    let token = match (&args.token_name, given) {
        (Some(name), _) => {
            let cfg = cfg.as_ref().and_then(|c| c.as_ref().ok());
            let found = cfg.and_then(|c| c.server.admin_tokens.iter().find(|t| &t.name == name));
            Some(found.map(|t| t.token.clone()).with_context(|| {
                format!(
                    "{} has no [[server.admin_tokens]] named {name:?} (or cannot be read)",
                    args.config.display()
                )
            })?)
        }
        (None, Some(t)) => Some(t),
        (None, None) => cfg
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .and_then(|c| c.server.admin_token.clone()),
    };
    let base = match &args.admin {
        Some(a) => a.clone(),
        None => {
            let cfg = match cfg {
                Some(Ok(c)) => c,
                Some(Err(e)) => return Err(e),
                None => anyhow::bail!("pass --admin URL"),
            };
            let addr = cfg.server.admin_listen.with_context(|| {
                format!(
                    "{} sets no server.admin_listen; pass --admin URL",
                    args.config.display()
                )
            })?;
            format!("http://{addr}")
        }
    };
    let url = format!("{}{path}", base.trim_end_matches('/'));
    // The admin listener refuses a POST without it (a web page cannot add it to a
    // cross-site request).
    let mut req = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(std::time::Duration::from_secs(5))
        .build()?
        .request(method, &url)
        .header("x-requested-by", "hookgate");
    if let Some(t) = &token {
        let mut value = b"Bearer ".to_vec();
        value.extend_from_slice(t.expose());
        let mut value = reqwest::header::HeaderValue::from_bytes(&value)
            .context("the admin token is not a valid header value")?;
        value.set_sensitive(true);
        req = req.header(reqwest::header::AUTHORIZATION, value);
    }
    Ok((req, base))
}

/// Sends one request to a running gateway's admin listener: whether it answered 2xx,
/// and the body.
pub(super) async fn admin_call(
    args: &AdminArgs,
    route: Option<&str>,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(bool, String)> {
    let (req, base) = admin_request(args, route, method, path)?;
    let resp = req
        .send()
        .await
        .with_context(|| format!("cannot reach the admin listener at {base}"))?;
    let status = resp.status();
    Ok((status.is_success(), resp.text().await.unwrap_or_default()))
}

/// An admin listener's 2xx answer, read as its type (`admin::api`).
pub(super) fn answer<T: serde::de::DeserializeOwned>(body: &str) -> anyhow::Result<T> {
    serde_json::from_str(body).context("the admin listener's answer")
}

/// Prints an admin listener's refusal as its message (not its JSON) on stderr; the
/// exit code.
pub(super) fn admin_failed(body: &str) -> i32 {
    eprintln!("hookgate: {}", text::admin_error(body));
    1
}

/// How a command reaches a running gateway's admin listener.
#[derive(Debug, Clone, clap::Args)]
pub struct AdminArgs {
    /// The config file, to find `server.admin_listen`.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// The admin listener's base URL (overrides the config), e.g. http://127.0.0.1:9090.
    #[arg(long)]
    admin: Option<String>,
    /// The admin listener's token, when it has one (`server.admin_token`; read from
    /// the config file unless given here, in the environment or by --token-name).
    #[arg(long, env = "HOOKGATE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Use the config file's `[[server.admin_tokens]]` entry of this name, over
    /// --admin-token (its role must allow the command: `read` lists and shows,
    /// `operate` also acts); the audit records the command under it.
    #[arg(long, env = "HOOKGATE_ADMIN_TOKEN_NAME")]
    token_name: Option<String>,
}

impl AdminArgs {
    /// The same listener, reached with this token (a pull destination's own).
    pub(super) fn with_token(mut self, token: String) -> Self {
        self.admin_token = Some(token);
        self.token_name = None;
        self
    }
}
