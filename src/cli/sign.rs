//! `hookgate sign`: a body signed the way a provider would, as a replay file, its
//! headers or a curl command.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::config;
use crate::provider::{Credential, EventIdSource, Preset, Verifier};
use crate::replay::Replay;
use crate::secret::Secret;
use crate::sign::PrivateKey;
use crate::state::Clock;

#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// Sign as this route of the config file does (any provider, including hmac).
    #[arg(long, conflicts_with_all = ["provider", "secret"])]
    route: Option<String>,
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// A preset name (stripe, github, shopify, slack, standard_webhooks, svix, ...).
    #[arg(long)]
    provider: Option<String>,
    /// The secret to sign with, as the provider gives it.
    #[arg(long, conflicts_with = "private_key")]
    secret: Option<String>,
    /// An Ed25519 private key, for providers that sign with one (discord, and
    /// standard_webhooks `v1a`): `whsk_<base64>`, 64 hex digits or base64 of the
    /// 32-byte seed. With --route, it must match one of the route's public keys.
    /// `hookgate keygen` makes a pair.
    #[arg(long, env = "HOOKGATE_PRIVATE_KEY", hide_env_values = true)]
    private_key: Option<String>,
    /// The event ID for header-based IDs (default: random).
    #[arg(long)]
    event_id: Option<String>,
    /// Unix timestamp to sign at (default: now).
    #[arg(long)]
    timestamp: Option<u64>,
    /// Print a curl command that posts the body to this URL instead of a replay file.
    #[arg(long, conflicts_with = "headers")]
    curl: Option<String>,
    /// Print only the signature headers, one `Name: value` per line.
    #[arg(long)]
    headers: bool,
    /// The request path recorded in the replay file (default: the route's path; with
    /// --provider, none: `replay --target` then takes the route's URL).
    #[arg(long)]
    path: Option<String>,
    /// An extra header for the replay file, `Name: value` (repeatable), such as
    /// `X-GitHub-Event: push`.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    extra_headers: Vec<String>,
    /// The public URL the provider calls, for URL-signing providers (default: the
    /// route's public_url).
    #[arg(long)]
    url: Option<String>,
    /// The body: the text itself, `@FILE` or the path of a file to read it from, or
    /// `-` to read standard input.
    body: String,
}

/// How to sign: as a configured route or as a preset with a secret.
struct Signer {
    verifier: Verifier,
    id_source: EventIdSource,
    /// The URL signed against (URL-signing providers), and whose query the replay
    /// file records.
    public_url: Option<String>,
    /// The path the replay file records.
    replay_path: Option<String>,
    route_name: Option<String>,
}

pub(super) fn run(args: SignArgs) -> anyhow::Result<i32> {
    let body = body_argument(&args.body)?;
    let private_key = args
        .private_key
        .as_deref()
        .map(PrivateKey::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--private-key: {e}"))?;
    let s = signer(&args, private_key.as_ref())?;
    let now = args.timestamp.unwrap_or_else(|| Clock::System.now());
    let id = args
        .event_id
        .clone()
        .unwrap_or_else(|| crate::sign::random_event_id_for(s.verifier.preset()));
    let headers = match &private_key {
        Some(key) => crate::sign::headers_ed25519(&s.verifier, &s.id_source, &body, now, &id, key),
        None => crate::sign::headers(
            &s.verifier,
            &s.id_source,
            &body,
            now,
            &id,
            s.public_url.as_deref(),
        ),
    }
    .map_err(|e| anyhow::anyhow!(e))?;
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    // `--header` goes into every form: replay file, curl command and headers.
    let mut extra: Vec<(String, String)> = Vec::new();
    for h in &args.extra_headers {
        let (n, v) = h
            .split_once(':')
            .with_context(|| format!("--header {h:?}: write `Name: value`"))?;
        extra.push((n.trim().to_owned(), v.trim().to_owned()));
    }
    match &args.curl {
        Some(url) => println!("{}", curl_command(&headers, &extra, &body, url)),
        None if args.headers => {
            for (n, v) in headers.iter().chain(&extra) {
                println!("{n}: {v}");
            }
        }
        None => println!("{}", replay_file(s, headers, extra, &body, now).to_json()),
    }
    Ok(0)
}

/// The verifier and event ID source to sign with: the route's (`--route`), or the
/// preset's (`--provider` with `--secret` or `--private-key`).
fn signer(args: &SignArgs, private_key: Option<&PrivateKey>) -> anyhow::Result<Signer> {
    // With a private key and a preset, the route's public key is its public half.
    let secret = match (private_key, args.secret.clone(), args.provider.as_deref()) {
        (Some(k), None, Some(p)) => Some(k.public_for(p)),
        (_, s, _) => s,
    };
    match (&args.route, &args.provider, secret) {
        (Some(name), _, _) => {
            // Only this route's `${VAR}`s (and the server's) need to be set.
            let cfg =
                config::load_only(&args.config, Some(name)).map_err(|e| anyhow::anyhow!("{e}"))?;
            let r = cfg
                .route(name)
                .with_context(|| format!("no route named {name:?} in {}", args.config.display()))?;
            Ok(Signer {
                verifier: r.verifier.clone(),
                id_source: r.event_id.clone(),
                public_url: args.url.clone().or_else(|| r.public_url.clone()),
                replay_path: args.path.clone().or_else(|| Some(r.path.clone())),
                route_name: Some(r.name.clone()),
            })
        }
        (None, Some(p), Some(s)) => {
            let preset = Preset::parse(p).with_context(|| match Preset::nearest(p) {
                Some(n) => format!("unknown provider {p:?}; did you mean {n}?"),
                None => format!("unknown provider {p:?} (`hookgate providers` lists them)"),
            })?;
            if preset == Preset::HMAC {
                bail!(
                    "the generic hmac provider needs its options: sign with --route NAME from a config file"
                );
            }
            let verifier = preset
                .verifier(
                    &[Credential::Text(Secret::new(s.into_bytes()))],
                    None,
                    preset.default_tolerance(None),
                )
                .map_err(|e| anyhow::anyhow!(e))?;
            let id_source = preset
                .default_event_id(None)
                .unwrap_or(EventIdSource::BodySha256);
            Ok(Signer {
                verifier,
                id_source,
                public_url: args.url.clone(),
                replay_path: args.path.clone(),
                route_name: None,
            })
        }
        _ => {
            bail!("give --route NAME, or --provider P with --secret S (or --private-key K)")
        }
    }
}

/// `hookgate sign --curl URL`: a curl command that posts the signed body.
fn curl_command(
    headers: &[(String, String)],
    extra: &[(String, String)],
    body: &[u8],
    url: &str,
) -> String {
    let has_content_type = extra
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    let mut cmd = String::from("curl -sS -i -X POST");
    for (n, v) in headers.iter().chain(extra) {
        cmd.push_str(&format!(" -H {}", shell_quote(&format!("{n}: {v}"))));
    }
    if !has_content_type {
        cmd.push_str(" -H 'content-type: application/json'");
    }
    cmd.push_str(&format!(
        " --data-binary {} {}",
        shell_quote(&String::from_utf8_lossy(body)),
        shell_quote(url)
    ));
    cmd
}

/// `hookgate sign`'s replay file, for `hookgate replay`.
fn replay_file(
    s: Signer,
    headers: Vec<(String, String)>,
    extra: Vec<(String, String)>,
    body: &[u8],
    now: u64,
) -> Replay {
    let query = s
        .public_url
        .as_deref()
        .and_then(|u| u.split_once('?'))
        .map(|(_, q)| q);
    let mut all = headers;
    all.extend(extra);
    if !all
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        all.push(("content-type".into(), "application/json".into()));
    }
    let mut r = Replay::new(
        "POST",
        s.replay_path.as_deref().unwrap_or(""),
        query,
        all,
        body,
    );
    r.received_at = now.saturating_mul(1000);
    r.provider = Some(s.verifier.preset().name().to_owned());
    r.route = s.route_name;
    r
}

/// The body argument of `sign`: `-` is standard input, `@FILE` a file, an existing
/// file's path that file (said on stderr, so a literal body is never mistaken for
/// one silently), anything else the body itself.
fn body_argument(arg: &str) -> anyhow::Result<Vec<u8>> {
    if arg == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        return Ok(buf);
    }
    if let Some(file) = arg.strip_prefix('@') {
        return std::fs::read(file).with_context(|| format!("cannot read the body from {file}"));
    }
    let path = std::path::Path::new(arg);
    if !arg.trim_start().starts_with(['{', '[']) && path.is_file() {
        eprintln!("hookgate sign: the body is the content of the file {arg}");
        return std::fs::read(path).with_context(|| format!("cannot read the body from {arg}"));
    }
    Ok(arg.as_bytes().to_vec())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
