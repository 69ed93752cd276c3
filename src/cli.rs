//! The command line: `serve`, `check`, `providers`, `sign`, `replay`, `forget`,
//! `keygen`, `upstream` and `probe`.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

use crate::app::{App, Listeners};
use crate::config::{self, Backend, Config, OnError};
use crate::provider::{Credential, EventIdSource, Preset};
use crate::replay::{Replay, Verdict};
use crate::secret::Secret;
use crate::server::Clock;
use crate::telemetry::{self, LogFormat};

mod providers;
pub(crate) mod text;

use text::printable;

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Sends one request to a running gateway's admin listener: whether it answered 2xx,
/// and the body.
async fn admin_call(
    args: &AdminArgs,
    route: Option<&str>,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(bool, String)> {
    let mut token = args
        .admin_token
        .clone()
        .map(|t| crate::secret::Secret::new(t.into_bytes()));
    let base = match &args.admin {
        Some(a) => a.clone(),
        None => {
            // Only the server section and the named route: another route's unset
            // `${VAR}` is no business of this command.
            let cfg = config::load_only(&args.config, route).map_err(|e| anyhow::anyhow!("{e}"))?;
            let addr = cfg.server.admin_listen.with_context(|| {
                format!(
                    "{} sets no server.admin_listen; pass --admin URL",
                    args.config.display()
                )
            })?;
            token = token.or(cfg.server.admin_token);
            format!("http://{addr}")
        }
    };
    let url = format!("{}{path}", base.trim_end_matches('/'));
    // The admin listener refuses a POST without it (a web page cannot add it to a
    // cross-site request).
    let mut req = reqwest::Client::builder()
        .no_proxy()
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
    let resp = req
        .send()
        .await
        .with_context(|| format!("cannot reach the admin listener at {base}"))?;
    let status = resp.status();
    Ok((status.is_success(), resp.text().await.unwrap_or_default()))
}

/// `hookgate events …`.
async fn events(action: EventsAction) -> anyhow::Result<i32> {
    match action {
        EventsAction::List {
            route,
            destination,
            state,
            limit,
            json,
            admin,
        } => {
            let mut path = format!(
                "/events/{}?limit={limit}{}",
                enc(&route),
                only(destination.as_deref())
            );
            if let Some(s) = state {
                path.push_str(&format!("&state={}", s.as_str()));
            }
            let (ok, body) = admin_call(&admin, Some(&route), reqwest::Method::GET, &path).await?;
            if !ok {
                return Ok(admin_failed(&body));
            }
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let events: Vec<crate::queue::Summary> =
                serde_json::from_value(v["events"].clone()).unwrap_or_default();
            // A sync route stores nothing: "0 event(s)" would read as an empty queue.
            let sync = v["delivery"].as_str() == Some("sync");
            if sync && events.is_empty() {
                eprintln!(
                    "hookgate events: route {:?} is not a queue route (delivery = \"sync\"): its deliveries are forwarded while the provider waits, never stored; `events` shows routes with delivery = \"queue\"",
                    printable(&route)
                );
                return Ok(1);
            }
            if json {
                println!("{}", printable(body.trim_end()));
            } else {
                print!("{}", events_table(&events, crate::queue::now_ms()));
            }
            if sync {
                eprintln!(
                    "note: route {:?} is now a sync route; these events were stored while it was a queue route",
                    printable(&route)
                );
            }
            Ok(0)
        }
        EventsAction::Show {
            route,
            destination,
            event_id,
            json,
            admin,
        } => {
            let Some(event_id) =
                resolve_id(&admin, &route, destination.as_deref(), &event_id).await?
            else {
                return Ok(1);
            };
            let path = format!(
                "/events/{}/{}?{}",
                enc(&route),
                enc(&event_id),
                only(destination.as_deref())
            );
            let (ok, body) = admin_call(&admin, Some(&route), reqwest::Method::GET, &path).await?;
            if !ok {
                return Ok(admin_failed(&body));
            }
            if json {
                println!("{}", printable(body.trim_end()));
                return Ok(0);
            }
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            print!("{}", event_details(&v, crate::queue::now_ms()));
            Ok(0)
        }
        EventsAction::Retry {
            route,
            destination,
            which,
            admin,
        } => act(&route, destination.as_deref(), "retry", &which, &admin).await,
        EventsAction::Purge {
            route,
            destination,
            which,
            admin,
        } => act(&route, destination.as_deref(), "purge", &which, &admin).await,
    }
}

/// Prints an admin listener's refusal as its message (not its JSON) on stderr; the
/// exit code.
fn admin_failed(body: &str) -> i32 {
    eprintln!("hookgate: {}", text::admin_error(body));
    1
}

/// The whole event ID that `given` is a unique prefix of, as git takes a commit's
/// (`events show|retry|purge`). An ID the route holds as given is taken as it is; a
/// prefix of several is refused with their list; a prefix of none is passed on as it
/// is, for the admin listener to answer. `None`: refused (said on stderr).
async fn resolve_id(
    admin: &AdminArgs,
    route: &str,
    destination: Option<&str>,
    given: &str,
) -> anyhow::Result<Option<String>> {
    // Undelivered events, then delivered ones (kept for the dedup window): `show`
    // looks at either.
    let mut listed: Vec<serde_json::Value> = Vec::new();
    for state in ["", "&state=delivered"] {
        let path = format!(
            "/events/{}?limit=100000{}{state}",
            enc(route),
            only(destination)
        );
        let (ok, body) = admin_call(admin, Some(route), reqwest::Method::GET, &path).await?;
        if !ok {
            admin_failed(&body);
            return Ok(None);
        }
        listed.push(serde_json::from_str(&body).unwrap_or_default());
    }
    let mut ids: Vec<&str> = listed
        .iter()
        .filter_map(|v| v["events"].as_array())
        .flatten()
        .filter_map(|e| e["event_id"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.contains(&given) {
        return Ok(Some(given.to_owned()));
    }
    let matching: Vec<&str> = ids.into_iter().filter(|id| id.starts_with(given)).collect();
    match matching.as_slice() {
        [] => Ok(Some(given.to_owned())),
        [one] => Ok(Some((*one).to_owned())),
        many => {
            eprintln!(
                "hookgate events: {:?} is the start of {} event IDs on route {:?}; give more of it:",
                printable(given),
                many.len(),
                printable(route)
            );
            for id in many.iter().take(20) {
                eprintln!("  {}", printable(id));
            }
            Ok(None)
        }
    }
}

/// The query parameter naming one destination (`&destination=NAME`), or nothing.
fn only(destination: Option<&str>) -> String {
    destination.map_or_else(String::new, |d| format!("&destination={}", enc(d)))
}

async fn act(
    route: &str,
    destination: Option<&str>,
    action: &str,
    which: &Which,
    admin: &AdminArgs,
) -> anyhow::Result<i32> {
    let query = match &which.event_id {
        Some(id) => match resolve_id(admin, route, destination, id).await? {
            Some(id) => format!("event_id={}", enc(&id)),
            None => return Ok(1),
        },
        None => "all_dead=true".to_owned(),
    };
    let path = format!(
        "/events/{}/{action}?{query}{}",
        enc(route),
        only(destination)
    );
    let (ok, body) = admin_call(admin, Some(route), reqwest::Method::POST, &path).await?;
    if !ok {
        return Ok(admin_failed(&body));
    }
    println!("{}", printable(body.trim_end()));
    Ok(0)
}

/// How long ago (or from now) a Unix-millisecond instant is, for people.
fn ago(at_ms: u64, now_ms: u64) -> String {
    let (d, future) = if at_ms > now_ms {
        (at_ms - now_ms, true)
    } else {
        (now_ms - at_ms, false)
    };
    let d = std::time::Duration::from_secs(d / 1000);
    let text = humantime::format_duration(d).to_string();
    let text = if d.is_zero() { "0s".to_owned() } else { text };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// The table `hookgate events list` prints. Event IDs are shortened (`sig-d592421c…`);
/// `events show|retry|purge` take any unique prefix.
fn events_table(events: &[crate::queue::Summary], now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    // A destination column on a route with named destinations.
    let width = events
        .iter()
        .filter_map(|e| e.destination.as_ref().map(|d| printable(d).chars().count()))
        .max()
        .map(|w| w.max("DESTINATION".len()));
    let dest = |name: &str| width.map_or_else(String::new, |w| format!("{:<w$} ", printable(name)));
    // The event ID comes last: some are long (`sig-` and 64 hex digits).
    let _ = writeln!(
        out,
        "{}{:<10} {:>8}  {:<14} {:<14} {:<12} EVENT ID",
        dest("DESTINATION"),
        "STATE",
        "ATTEMPTS",
        "RECEIVED",
        "NEXT TRY",
        "LAST RESULT"
    );
    for e in events {
        let _ = writeln!(
            out,
            "{}{:<10} {:>8}  {:<14} {:<14} {:<12} {}",
            dest(e.destination.as_deref().unwrap_or("")),
            e.state.as_str(),
            e.attempts,
            ago(e.received_at_ms, now_ms),
            e.next_at_ms
                .map_or_else(|| "-".to_owned(), |t| ago(t, now_ms)),
            printable(e.last_result.as_deref().unwrap_or("-")),
            text::short_id(&e.event_id),
        );
    }
    let _ = writeln!(out, "{} event(s)", events.len());
    out
}

/// What `hookgate events show` prints. Every value comes from a delivery or the
/// store, so each is printed through [`printable`].
fn event_details(v: &serde_json::Value, now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let text = |k: &str| printable(v[k].as_str().unwrap_or("-")).into_owned();
    let _ = writeln!(out, "event {} on route {}", text("event_id"), text("route"));
    if let Some(t) = v["event_type"].as_str() {
        let _ = writeln!(out, "type:      {}", printable(t));
    }
    if let Some(d) = v["destination"].as_str() {
        let _ = writeln!(out, "destination: {}", printable(d));
    }
    if let Some(k) = v["order_key"].as_str() {
        let _ = writeln!(
            out,
            "order key: {} (holds its place in the key's line)",
            printable(k)
        );
    }
    let _ = writeln!(out, "state:     {}", text("state"));
    if let Some(why) = v["dead_reason"].as_str() {
        let _ = writeln!(out, "dead:      {}", printable(why));
    }
    if let Some(rx) = v["received_at_ms"].as_u64() {
        let _ = writeln!(out, "received:  {}", ago(rx, now_ms));
    }
    let attempts = v["attempts"].as_u64().unwrap_or(0);
    let history = v["history"].as_array().cloned().unwrap_or_default();
    let at = |a: &serde_json::Value| a["at_ms"].as_u64().unwrap_or(0);
    // After an operator's retry the count starts again; the history keeps what came
    // before, so say which is which.
    let requeued = v["requeued_at_ms"].as_u64();
    match requeued {
        Some(r) => {
            let before = history.iter().filter(|a| at(a) < r).count();
            let _ = writeln!(
                out,
                "attempts:  {attempts} since the operator's retry {} ({before} before it, listed first below)",
                ago(r, now_ms)
            );
        }
        None => {
            let _ = writeln!(out, "attempts:  {attempts}");
        }
    }
    if let Some(next) = v["next_at_ms"].as_u64() {
        let _ = writeln!(out, "next try:  {}", ago(next, now_ms));
    }
    if !history.is_empty() {
        let _ = writeln!(out, "history (oldest first):");
    }
    let mut marked = false;
    for a in &history {
        if let Some(r) = requeued
            && !marked
            && at(a) >= r
        {
            let _ = writeln!(out, "  -- retried by the operator {} --", ago(r, now_ms));
            marked = true;
        }
        let result = printable(a["result"].as_str().unwrap_or("-")).into_owned();
        let status = a["status"]
            .as_u64()
            .map(|s| format!(" {s}"))
            .unwrap_or_default();
        let error = a["error"]
            .as_str()
            .map(|e| format!(": {}", printable(e)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  - {} {result}{status}{error} ({} ms)",
            ago(at(a), now_ms),
            a["duration_ms"].as_u64().unwrap_or(0)
        );
    }
    // The other destinations, one line each (`--destination NAME` shows one in full).
    if let Some(all) = v["destinations"].as_array().filter(|a| a.len() > 1) {
        let _ = writeln!(out, "destinations:");
        for d in all {
            let _ = writeln!(
                out,
                "  {:<16} {:<10} {} attempt(s)",
                printable(d["destination"].as_str().unwrap_or("-")),
                printable(d["state"].as_str().unwrap_or("-")),
                d["attempts"].as_u64().unwrap_or(0)
            );
        }
    }
    out
}

/// hookgate: verify webhook signatures, deduplicate deliveries, forward each event once.
#[derive(Debug, Parser)]
#[command(name = "hookgate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// How a command reaches a running gateway's admin listener.
#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    /// The config file, to find `server.admin_listen`.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// The admin listener's base URL (overrides the config), e.g. http://127.0.0.1:9090.
    #[arg(long)]
    admin: Option<String>,
    /// The admin listener's token, when it has one (`server.admin_token`; read from
    /// the config file unless given here or in the environment).
    #[arg(long, env = "HOOKGATE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
}

/// Which events `retry` and `purge` act on.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// One event.
    #[arg(long)]
    event_id: Option<String>,
    /// Every dead event of the route.
    #[arg(long)]
    all_dead: bool,
}

#[derive(Debug, Subcommand)]
pub enum EventsAction {
    /// Events of a route, oldest first.
    List {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        /// Only events in this state.
        #[arg(long, value_enum)]
        state: Option<crate::queue::State>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print the admin listener's JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One event: its state, every attempt's result, the next try.
    Show {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        #[arg(long)]
        event_id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Queue dead events (or one dead or retrying event) again, due now.
    Retry {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Delete dead events (or one undelivered event) and their dedup records.
    Purge {
        #[arg(long)]
        route: String,
        /// One of the route's destinations (default: all of them).
        #[arg(long)]
        destination: Option<String>,
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve {
        /// The config file.
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
        /// Log format (pretty on a terminal, json for log pipelines); overrides
        /// `server.log_format`.
        #[arg(long, value_enum)]
        log_format: Option<LogFormat>,
        /// Write every received delivery as a replay file into this directory
        /// (overrides `[capture] dir`).
        #[arg(long)]
        capture: Option<PathBuf>,
    },
    /// Free one event's key so its next delivery is forwarded again (a deliberate
    /// redelivery), through the admin listener of a running gateway.
    Forget {
        #[arg(long)]
        route: String,
        #[arg(long)]
        event_id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List, show, retry and purge the events of a queue route (`delivery = "queue"`),
    /// through the admin listener of a running gateway.
    Events {
        #[command(subcommand)]
        action: EventsAction,
    },
    /// Make an Ed25519 key pair for testing a route whose provider signs with one
    /// (discord, telnyx, standard_webhooks v1a): the public key goes into the route's
    /// `secrets`, the private key to `hookgate sign --private-key`.
    Keygen,
    /// A demo upstream for trying the gateway by hand: prints every request it receives
    /// and answers 200 `{"received":true}`.
    Upstream {
        /// A port on 127.0.0.1, or an address such as 0.0.0.0:3000 (containers).
        #[arg(default_value = "3000", value_parser = crate::upstream::parse_listen)]
        listen: std::net::SocketAddr,
    },
    /// GET a URL and exit 0 on a 2xx (a health check that needs no curl in the image).
    Probe {
        #[arg(default_value = "http://127.0.0.1:9090/healthz")]
        url: String,
    },
    /// Validate a config file and print its routes; exit 1 on any error.
    Check {
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
    },
    /// The provider presets as a table (name, scheme, event ID, handshake); with a
    /// word, those that mention it; with a preset's name, that preset in full and a
    /// route to paste.
    Providers {
        /// A preset's name, or a word to look for (`challenge`, `ed25519`, `svix`).
        #[arg(value_name = "NAME-OR-WORD")]
        query: Option<String>,
        /// Print the whole catalogue as Markdown (`docs/providers.md`).
        #[arg(long, conflicts_with = "query")]
        markdown: bool,
    },
    /// Send replay files (captured or signed) to a gateway and report each outcome.
    Replay {
        /// Replay files, or directories of them.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Where to send: the gateway's base URL (http://127.0.0.1:8080), to which each
        /// file's recorded path is appended, or a route's URL
        /// (http://127.0.0.1:8080/webhooks/github), used for every file.
        #[arg(long)]
        target: String,
        /// Re-sign each delivery for this test secret with a fresh timestamp (a
        /// `whsk_` private key for Ed25519 providers: discord, standard_webhooks v1a).
        #[arg(long)]
        resign: Option<String>,
        /// The provider to re-sign as (default: the one the file names).
        #[arg(long, requires = "resign")]
        provider: Option<String>,
        /// The public URL to sign against, for URL-signing providers.
        #[arg(long, requires = "resign")]
        public_url: Option<String>,
        /// Send each delivery this many times.
        #[arg(long, default_value_t = 1)]
        copies: usize,
        /// How many copies are in flight at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Fail (exit 1) unless every delivery ends like this. With --copies N,
        /// `forwarded` means one copy forwarded and the rest duplicates or in flight.
        #[arg(long, value_enum)]
        expect: Option<crate::replay::Verdict>,
        /// One JSON object per line, then a summary object.
        #[arg(long)]
        json: bool,
    },
    /// Sign a body the way a provider would and print the headers, or a curl command.
    Sign {
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
    },
}

/// Runs a parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Serve {
            config,
            log_format,
            capture,
        } => {
            let mut cfg = match config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(1);
                }
            };
            if let Some(dir) = capture {
                cfg.capture = Some(match cfg.capture.take() {
                    Some(c) => config::CaptureConfig { dir, ..c },
                    None => config::CaptureConfig::into_dir(dir),
                });
            }
            let _log = telemetry::init(
                log_format
                    .or(cfg.server.log_format)
                    .unwrap_or(LogFormat::Pretty),
            );
            serve(cfg).await?;
            Ok(0)
        }
        Command::Forget {
            route,
            event_id,
            admin,
        } => {
            let path = format!("/keys/{}/{}", enc(&route), enc(&event_id));
            let (ok, body) =
                admin_call(&admin, Some(&route), reqwest::Method::DELETE, &path).await?;
            if !ok {
                return Ok(admin_failed(&body));
            }
            println!("{}", printable(body.trim_end()));
            Ok(0)
        }
        Command::Events { action } => events(action).await,
        Command::Keygen => {
            let key = crate::sign::PrivateKey::generate();
            println!(
                "private key (hookgate sign --private-key): {}",
                key.to_whsk()
            );
            println!(
                "public key, standard_webhooks:             {}",
                key.public_whpk()
            );
            println!(
                "public key, discord (hex):                 {}",
                key.public_hex()
            );
            println!(
                "public key, telnyx (base64):               {}",
                key.public_for("telnyx")
            );
            Ok(0)
        }
        Command::Upstream { listen } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            crate::upstream::run(listener).await?;
            Ok(0)
        }
        Command::Probe { url } => {
            let client = reqwest::Client::builder()
                .no_proxy()
                .timeout(std::time::Duration::from_secs(3))
                .build()?;
            Ok(match client.get(&url).send().await {
                Ok(r) if r.status().is_success() => 0,
                _ => 1,
            })
        }
        Command::Replay {
            inputs,
            target,
            resign,
            provider,
            public_url,
            copies,
            concurrency,
            expect,
            json,
        } => {
            let opts = ReplayOpts {
                target,
                resign,
                provider,
                public_url,
                copies: copies.max(1),
                concurrency: concurrency.max(1),
                expect,
                json,
            };
            replay_files(&inputs, &opts).await
        }
        Command::Providers { query, markdown } => {
            if markdown {
                print!("{}", crate::provider::catalogue::markdown_table());
                return Ok(0);
            }
            let (out, found) = providers::report(query.as_deref());
            if found {
                print!("{out}");
                Ok(0)
            } else {
                eprint!("{out}");
                Ok(1)
            }
        }
        Command::Check { config } => match config::load(&config) {
            Ok(cfg) => {
                print!("{}", describe(&cfg));
                print!("{}", check_stranded(&cfg).await);
                Ok(0)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(1)
            }
        },
        Command::Sign {
            route,
            config,
            provider,
            secret,
            private_key,
            event_id,
            timestamp,
            curl,
            headers: only_headers,
            path,
            extra_headers,
            url,
            body,
        } => {
            let body = body_argument(&body)?;
            let mut public_url = url;
            let mut replay_path = path;
            let mut route_name = None;
            let private_key = private_key
                .map(|k| crate::sign::PrivateKey::parse(&k))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--private-key: {e}"))?;
            // With a private key and a preset, the route's public key is its public half.
            let secret = match (&private_key, secret, provider.as_deref()) {
                (Some(k), None, Some(p)) => Some(k.public_for(p)),
                (_, s, _) => s,
            };
            let (verifier, id_source) = match (route, provider, secret) {
                (Some(name), _, _) => {
                    // Only this route's `${VAR}`s (and the server's) need to be set.
                    let cfg = config::load_only(&config, Some(&name))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let r = cfg.route(&name).with_context(|| {
                        format!("no route named {name:?} in {}", config.display())
                    })?;
                    public_url = public_url.or_else(|| r.public_url.clone());
                    replay_path = replay_path.or_else(|| Some(r.path.clone()));
                    route_name = Some(r.name.clone());
                    (r.verifier.clone(), r.event_id.clone())
                }
                (None, Some(p), Some(s)) => {
                    let preset = Preset::parse(&p).with_context(|| match Preset::nearest(&p) {
                        Some(n) => format!("unknown provider {p:?}; did you mean {n}?"),
                        None => format!("unknown provider {p:?} (`hookgate providers` lists them)"),
                    })?;
                    if preset == Preset::HMAC {
                        bail!(
                            "the generic hmac provider needs its options: sign with --route NAME from a config file"
                        );
                    }
                    let v = preset
                        .verifier(
                            &[Credential::Text(Secret::new(s.into_bytes()))],
                            None,
                            preset.default_tolerance(None),
                        )
                        .map_err(|e| anyhow::anyhow!(e))?;
                    let ids = preset
                        .default_event_id(None)
                        .unwrap_or(EventIdSource::BodySha256);
                    (v, ids)
                }
                _ => {
                    bail!("give --route NAME, or --provider P with --secret S (or --private-key K)")
                }
            };
            let now = timestamp.unwrap_or_else(|| Clock::System.now());
            let id =
                event_id.unwrap_or_else(|| crate::sign::random_event_id_for(verifier.preset()));
            let headers = match &private_key {
                Some(key) => {
                    crate::sign::headers_ed25519(&verifier, &id_source, &body, now, &id, key)
                }
                None => crate::sign::headers(
                    &verifier,
                    &id_source,
                    &body,
                    now,
                    &id,
                    public_url.as_deref(),
                ),
            }
            .map_err(|e| anyhow::anyhow!(e))?;
            // `--header` goes into every form: replay file, curl command and headers.
            let mut extra: Vec<(String, String)> = Vec::new();
            for h in &extra_headers {
                let (n, v) = h
                    .split_once(':')
                    .with_context(|| format!("--header {h:?}: write `Name: value`"))?;
                extra.push((n.trim().to_owned(), v.trim().to_owned()));
            }
            let has_content_type = extra
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
            match curl {
                Some(url) => {
                    let mut cmd = String::from("curl -sS -i -X POST");
                    for (n, v) in headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), v))
                        .chain(extra.iter().map(|(n, v)| (n.as_str(), v)))
                    {
                        cmd.push_str(&format!(" -H {}", shell_quote(&format!("{n}: {v}"))));
                    }
                    if !has_content_type {
                        cmd.push_str(" -H 'content-type: application/json'");
                    }
                    cmd.push_str(&format!(
                        " --data-binary {} {}",
                        shell_quote(&String::from_utf8_lossy(&body)),
                        shell_quote(&url)
                    ));
                    println!("{cmd}");
                }
                None if only_headers => {
                    for (n, v) in &headers {
                        println!("{n}: {v}");
                    }
                    for (n, v) in &extra {
                        println!("{n}: {v}");
                    }
                }
                None => {
                    let query = public_url
                        .as_deref()
                        .and_then(|u| u.split_once('?'))
                        .map(|(_, q)| q);
                    let mut all: Vec<(String, String)> = headers
                        .iter()
                        .map(|(n, v)| (n.to_string(), v.clone()))
                        .collect();
                    all.extend(extra);
                    if !all
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                    {
                        all.push(("content-type".into(), "application/json".into()));
                    }
                    let mut r = Replay::new(
                        "POST",
                        replay_path.as_deref().unwrap_or(""),
                        query,
                        all,
                        &body,
                    );
                    r.received_at = now.saturating_mul(1000);
                    r.provider = Some(verifier.preset().name().to_owned());
                    r.route = route_name;
                    println!("{}", r.to_json());
                }
            }
            Ok(0)
        }
    }
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

/// Runs the gateway until SIGTERM or SIGINT; SIGHUP reloads the config.
pub async fn serve(cfg: Config) -> anyhow::Result<()> {
    let mut signals = crate::shutdown::Signals::install();
    raise_open_files(&cfg);
    let listeners = Listeners::bind(&cfg.server).await?;
    let app = App::build(&cfg, Clock::System)?;
    tracing::info!(
        listen = %listeners.public.local_addr()?,
        admin = ?cfg.server.admin_listen,
        store = app.state().store().kind(),
        routes = cfg.routes.len(),
        "hookgate serving"
    );
    if matches!(cfg.store.backend, Backend::Memory) {
        tracing::info!(
            "memory store: dedup state is lost on restart and not shared between replicas"
        );
    }
    #[cfg(unix)]
    if let Some(mut hup) = signals.take_hangup() {
        let state = app.state().clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP received: reloading the config");
                let _ = state.reload().await;
            }
        });
    }
    app.run(listeners, signals.stopped()).await
}

/// Raises the soft limit on open files to the hard one (where the system allows it):
/// the common soft limit of 1 024 is below `server.max_connections`, and a gateway at
/// it stops accepting connections. Says so when even the hard limit is below.
fn raise_open_files(cfg: &Config) {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let mut raised = limit;
        if limit.current < limit.maximum {
            raised.current = limit.maximum;
            if setrlimit(Resource::Nofile, raised).is_err() {
                raised = limit;
            }
        }
        let want = cfg.server.max_connections as u64 + 64;
        if let Some(soft) = raised.current
            && soft < want
        {
            tracing::warn!(
                open_files = soft,
                max_connections = cfg.server.max_connections,
                "the open-file limit is below server.max_connections: raise it (systemd: LimitNOFILE; a container: --ulimit nofile) or lower max_connections"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = cfg;
}

/// `hookgate check`: the stored queues under the config's prefix that no route or
/// destination names (their events would never be delivered), when the store can be
/// reached. A disk store's file held by the running gateway cannot be opened: the
/// gateway's reloads check instead.
async fn check_stranded(cfg: &Config) -> String {
    use crate::config::Backend;
    use crate::store::{DiskStore, Store};
    let store = match &cfg.store.backend {
        Backend::Memory => return String::new(),
        Backend::Disk { path } if !path.exists() => return String::new(),
        Backend::Disk { path } => match DiskStore::open_with(path, cfg.store.min_free_space) {
            Ok(s) => Store::Disk(s),
            Err(e) => {
                return format!(
                    "store: could not look for stored queues that no route names: {} could not be opened ({e:#}); if the gateway is running it holds the file, and its reloads check them\n",
                    path.display()
                );
            }
        },
        _ => match Store::connect(&cfg.store) {
            Ok(s) => s,
            Err(e) => {
                return format!(
                    "store: could not look for stored queues that no route names ({e:#})\n"
                );
            }
        },
    };
    let found = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        crate::server::stranded::find(&store, &cfg.store.key_prefix, &cfg.routes),
    )
    .await;
    match found {
        Ok(Ok(found)) if found.is_empty() => {
            "store: every stored queue with events has its route and destination\n".to_owned()
        }
        Ok(Ok(found)) => found
            .iter()
            .map(|s| {
                format!(
                    "store: warning: {}, but no route or destination of this config names it: nothing would deliver them (keep the route or destination, or purge them)\n",
                    s.describe()
                )
            })
            .collect(),
        Ok(Err(e)) => {
            format!("store: could not look for stored queues that no route names ({e})\n")
        }
        Err(_) => "store: could not look for stored queues that no route names (timed out)\n"
            .to_owned(),
    }
}

/// A duration as a config would write it, in its largest whole unit: `72h`, not
/// humantime's `3days`; `90s`, not `1m 30s`.
fn short_duration(d: std::time::Duration) -> String {
    let (s, ms) = (d.as_secs(), d.subsec_millis());
    match (s, ms) {
        (0, ms) => format!("{ms}ms"),
        (s, 0) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// The `check` report: one block per route.
pub fn describe(cfg: &Config) -> String {
    let mut s = format!(
        "{}: ok\nlisten {}  store {}  dedup_ttl {}  inflight_ttl {}  max_body {} bytes\n",
        cfg.source.display(),
        cfg.server.listen,
        match &cfg.store.backend {
            Backend::Memory => "memory".to_owned(),
            Backend::Disk { path } => format!("disk ({})", path.display()),
            Backend::Redis { .. } => "redis".to_owned(),
            Backend::RedisCluster { .. } => "redis cluster".to_owned(),
            Backend::RedisSentinel { .. } => "redis via sentinel".to_owned(),
        },
        short_duration(cfg.store.dedup_ttl),
        short_duration(cfg.store.inflight_ttl),
        cfg.server.max_body,
    );
    for r in &cfg.routes {
        let primary = r.primary();
        let single = r.destinations.len() == 1 && primary.name == r.name;
        let upstream = if single {
            format!(
                "{} (timeout {})",
                config::redacted_url(&primary.upstream),
                short_duration(primary.upstream_timeout)
            )
        } else {
            format!("{} destinations (below)", r.destinations.len())
        };
        s.push_str(&format!(
            "\nroute {}\n  path       {} ({})\n  provider   {}\n  secrets    {}\n  event id   {}\n  tolerance  {}\n  upstream   {}\n  on_error   {}{}\n",
            r.name,
            r.path,
            r.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", "),
            r.verifier.preset().name(),
            r.secret_count,
            event_key(r),
            match r.tolerance {
                Some(t) => short_duration(std::time::Duration::from_secs(t)),
                None if r.verifier.preset().default_tolerance(None).is_some() => "off".to_string(),
                None => "none (the provider signs no timestamp)".to_string(),
            },
            upstream,
            match r.on_error {
                OnError::Reject => "reject",
                OnError::Forward => "forward",
            },
            if single && primary.forward_signer.is_some() { "\n  re-signs   Standard Webhooks (forward_secret)" } else { "" },
        ));
        if let Some(t) = &r.event_type {
            s.push_str(&format!("  event type {t}\n"));
        }
        if let Some(f) = &r.events {
            s.push_str(&format!(
                "  events     {} (others: 200 filtered)\n",
                f.patterns().join(", ")
            ));
        }
        let queue = r.delivery == config::Delivery::Queue;
        if single {
            s.push_str(&match queue {
                false => "  delivery   sync\n".to_owned(),
                true => format!("  delivery   queue ({})\n", pacing(primary)),
            });
            s.push_str(&ordering(primary, "  "));
            continue;
        }
        s.push_str(if queue {
            "  delivery   queue\n"
        } else {
            "  delivery   sync\n"
        });
        for d in &r.destinations {
            s.push_str(&format!(
                "  destination {}\n    upstream   {} (timeout {}){}\n",
                d.name,
                config::redacted_url(&d.upstream),
                short_duration(d.upstream_timeout),
                if d.forward_signer.is_some() {
                    "\n    re-signs   Standard Webhooks (forward_secret)"
                } else {
                    ""
                },
            ));
            if let Some(f) = &d.events {
                s.push_str(&format!(
                    "    events     {} (others: not sent here)\n",
                    f.patterns().join(", ")
                ));
            }
            if queue {
                s.push_str(&format!("    pacing     {}\n", pacing(d)));
                s.push_str(&ordering(d, "    "));
            }
        }
    }
    s
}

/// The key a route deduplicates on, for `hookgate check`: the configured source, or,
/// when that is a header the signature does not cover, the digest of the signed bytes
/// the gateway uses instead, and why.
fn event_key(r: &config::Route) -> String {
    if let EventIdSource::Header(names) = &r.event_id {
        let unsigned: Vec<&str> = names
            .iter()
            .filter(|h| !r.verifier.signs_header(h))
            .map(http::HeaderName::as_str)
            .collect();
        if !unsigned.is_empty() {
            return format!(
                "sig-<SHA-256 of the signed bytes>, not {} (the signature does not cover {}: anyone could change it)",
                r.event_id,
                unsigned.join(" or ")
            );
        }
    }
    r.event_id.to_string()
}

/// A queue destination's limits and retry schedule, for `hookgate check`.
fn pacing(d: &config::Destination) -> String {
    let rate = d.rate_limit.map_or(String::new(), |l| {
        let unit = if l.window.as_secs() >= 60 { "m" } else { "s" };
        format!("; rate limit {}/{unit}", l.count)
    });
    format!(
        "concurrency {}{rate}; retry {} attempts, {} doubling to {}, for at most {}",
        d.concurrency,
        d.retry.max_attempts,
        short_duration(d.retry.initial),
        short_duration(d.retry.max_delay),
        short_duration(d.retry.max_age),
    )
}

/// A destination's per-key order, for `hookgate check`.
fn ordering(d: &config::Destination, indent: &str) -> String {
    match &d.order_by {
        None => String::new(),
        Some(key) => format!(
            "{indent}order by   {key}, one at a time per key (on_dead {})\n",
            match d.on_dead {
                crate::queue::OnDead::Skip => "skip",
                crate::queue::OnDead::Block => "block",
            }
        ),
    }
}

/// The options of `hookgate replay`.
#[derive(Debug)]
struct ReplayOpts {
    target: String,
    resign: Option<String>,
    provider: Option<String>,
    public_url: Option<String>,
    copies: usize,
    concurrency: usize,
    expect: Option<Verdict>,
    json: bool,
}

/// What happened to one file's delivery, over all its copies.
fn overall(verdicts: &[Verdict]) -> Verdict {
    let acked = |v: &Verdict| matches!(v, Verdict::Duplicate | Verdict::InFlight);
    // One copy forwarded (or queued), the rest duplicates or in flight.
    let first = [Verdict::Forwarded, Verdict::Queued]
        .into_iter()
        .find(|f| verdicts.iter().filter(|v| *v == f).count() == 1);
    if let Some(first) = first
        && verdicts.iter().all(|v| *v == first || acked(v))
    {
        first
    } else if verdicts.iter().all(|v| *v == Verdict::Duplicate) {
        Verdict::Duplicate
    } else if verdicts.iter().all(|v| *v == Verdict::Filtered) {
        Verdict::Filtered
    } else if verdicts.iter().all(|v| *v == Verdict::Rejected) {
        Verdict::Rejected
    } else if verdicts.iter().all(|v| *v == Verdict::Handshake) {
        Verdict::Handshake
    } else if verdicts.iter().all(acked) {
        Verdict::InFlight
    } else {
        Verdict::Error
    }
}

async fn replay_files(inputs: &[PathBuf], o: &ReplayOpts) -> anyhow::Result<i32> {
    use futures_util::stream::{self, StreamExt as _};
    let files = crate::replay::collect(inputs)?;
    if files.is_empty() {
        bail!("no replay files in {inputs:?}");
    }
    let client = crate::replay::client();
    let mut totals: std::collections::BTreeMap<Verdict, usize> = std::collections::BTreeMap::new();
    let mut unexpected = 0;
    // A 404 means the target is not a route of the gateway: a mistake in --target, not
    // a verdict on the delivery, unless rejections are what the run expects.
    let mut not_found = 0;
    // Copies that could not be sent at all (no gateway there, no path to send to).
    let mut unsent = 0;
    for file in &files {
        let mut r = Replay::load(file)?;
        if let Some(secret) = &o.resign {
            crate::sign::resign(
                &mut r,
                o.provider.as_deref(),
                secret,
                Clock::System.now(),
                o.public_url.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        }
        let sends = stream::iter(0..o.copies)
            .map(|_| r.send(&client, &o.target))
            .buffer_unordered(o.concurrency)
            .collect::<Vec<_>>()
            .await;
        let mut verdicts = Vec::new();
        for (i, sent) in sends.into_iter().enumerate() {
            let (url, status, verdict, meaning) = match sent {
                Ok(s) => (s.url.clone(), s.status, s.verdict(), s.meaning()),
                Err(e) => {
                    unsent += 1;
                    (String::new(), 0, Verdict::Error, format!("error: {e}"))
                }
            };
            if status == 404 {
                not_found += 1;
            }
            *totals.entry(verdict).or_default() += 1;
            verdicts.push(verdict);
            if o.json {
                println!(
                    "{}",
                    serde_json::json!({ "file": file.display().to_string(), "copy": i + 1, "url": url, "status": status, "verdict": verdict, "meaning": meaning })
                );
            } else if url.is_empty() {
                println!(
                    "{}  copy {}: {}",
                    file.display(),
                    i + 1,
                    printable(&meaning)
                );
            } else {
                // The method, URL and answer come from the file and the target.
                println!(
                    "{}  copy {}: {} {} → {status} {}",
                    file.display(),
                    i + 1,
                    printable(&r.method),
                    printable(&url),
                    printable(&meaning)
                );
            }
        }
        let result = overall(&verdicts);
        if let Some(want) = o.expect
            && result != want
        {
            unexpected += 1;
            if !o.json {
                println!(
                    "{}  UNEXPECTED: expected {want}, got {result}",
                    file.display()
                );
            }
        }
    }
    let summary: Vec<String> = totals.iter().map(|(v, n)| format!("{n} {v}")).collect();
    if o.json {
        println!(
            "{}",
            serde_json::json!({ "summary": totals.iter().map(|(v, n)| (v.as_str(), n)).collect::<std::collections::BTreeMap<_, _>>(), "files": files.len(), "unexpected": unexpected, "not_found": not_found })
        );
    } else {
        println!(
            "{} files, {} requests: {}; {unexpected} unexpected",
            files.len(),
            files.len() * o.copies,
            summary.join(", ")
        );
    }
    if unsent > 0 && o.expect != Some(Verdict::Error) {
        eprintln!("hookgate replay: {unsent} requests could not be sent");
        return Ok(1);
    }
    if not_found > 0 && o.expect != Some(Verdict::Rejected) {
        eprintln!(
            "hookgate replay: {not_found} requests answered 404: no route at that URL. Give --target the \
             gateway's base URL (http://host:port) for files that record their path, or a \
             route's URL (http://host:port/webhooks/<route>); --expect rejected accepts 404s"
        );
        return Ok(1);
    }
    Ok(if unexpected > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_one_delivery_sum_up_to_what_the_first_got() {
        use Verdict::*;
        assert_eq!(overall(&[Forwarded, Duplicate, InFlight]), Forwarded);
        assert_eq!(overall(&[Duplicate, Queued, Duplicate]), Queued);
        assert_eq!(overall(&[Queued, Queued]), Error, "stored twice");
        assert_eq!(overall(&[Forwarded, Queued]), Error);
        assert_eq!(overall(&[Duplicate, Duplicate]), Duplicate);
        assert_eq!(overall(&[Filtered, Filtered]), Filtered);
    }

    #[test]
    fn ages_read_as_people_say_them() {
        assert_eq!(ago(1_000, 61_000), "1m ago");
        assert_eq!(ago(5_000, 1_000), "in 4s");
        assert_eq!(ago(1_000, 1_200), "0s ago");
    }
}
