//! `hookgate listen`: a gateway's verified deliveries on a developer's machine. It
//! leases the events of a pull destination (`pull = true`) from the gateway's admin
//! listener, sends each to `--forward-to` with the headers hookgate would forward
//! (re-signed with Standard Webhooks with `--resign`), acknowledges a 2xx and gives
//! back anything else as a failed attempt. While it is away (asleep, offline, not
//! started) the events wait in the gateway's queue; it retries the gateway with
//! backoff; on Ctrl-C it gives back every open lease at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use tokio::task::JoinSet;

use super::admin::{AdminArgs, admin_request, enc};
use super::text::printable;
use crate::admin::pull::{LeasesActed, Pulled, PulledEvent};
use crate::provider::EventFilter;
use crate::provider::standard_webhooks::{StandardScheme, SwKey};

/// How long one lease call waits for an event.
const WAIT: &str = "25s";
/// The longest wait between two calls to a gateway that does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Headers not sent on to the local handler (the connection's own).
const NOT_SENT: [&str; 4] = ["host", "content-length", "connection", "transfer-encoding"];

#[derive(Debug, clap::Args)]
pub struct ListenArgs {
    /// The route.
    #[arg(long)]
    route: String,
    /// The route's pull destination (`pull = true`).
    #[arg(long)]
    destination: String,
    /// Where each event is sent, e.g. http://localhost:3000/webhooks/stripe.
    #[arg(long)]
    forward_to: String,
    /// The destination's own token (`pull = { token = … }`), instead of the admin token.
    #[arg(
        long,
        env = "HOOKGATE_PULL_TOKEN",
        hide_env_values = true,
        conflicts_with = "admin_token"
    )]
    pull_token: Option<String>,
    /// Re-sign each event with this Standard Webhooks secret (`whsec_…`), so the local
    /// handler verifies it as in production.
    #[arg(long, hide_env_values = true)]
    resign: Option<String>,
    /// Only events whose type matches this glob are sent; the others are acknowledged
    /// without being sent (printed as skipped).
    #[arg(long)]
    event_type: Option<String>,
    /// Events sent at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[command(flatten)]
    admin: AdminArgs,
}

/// What one event's forward needs.
struct Forward {
    client: reqwest::Client,
    to: String,
    signer: Option<StandardScheme>,
    filter: Option<EventFilter>,
}

/// Runs until Ctrl-C (or SIGTERM); the exit code.
pub(super) async fn run(mut args: ListenArgs) -> anyhow::Result<i32> {
    if let Some(t) = args.pull_token.take() {
        args.admin = args.admin.with_token(t);
    }
    let signer = match &args.resign {
        None => None,
        Some(s) => match SwKey::parse(s.as_bytes()) {
            Ok(k @ SwKey::Hmac(_)) => Some(StandardScheme::with_prefix("webhook", vec![k])),
            _ => {
                eprintln!("hookgate listen: --resign takes a whsec_ signing secret");
                return Ok(2);
            }
        },
    };
    let filter = match &args.event_type {
        None => None,
        Some(g) => match EventFilter::new(vec![g.clone()]) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("hookgate listen: --event-type: {e}");
                return Ok(2);
            }
        },
    };
    let concurrency = args.concurrency.clamp(1, 100);
    let fwd = Arc::new(Forward {
        client: reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(25))
            .build()?,
        to: args.forward_to.clone(),
        signer,
        filter,
    });
    let base = format!("/pull/{}/{}", enc(&args.route), enc(&args.destination));
    eprintln!(
        "hookgate listen: {} → {} (Ctrl-C to stop; events wait in the gateway's queue meanwhile)",
        printable(&format!("{}/{}", args.route, args.destination)),
        printable(&args.forward_to)
    );
    let open: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut backoff = Duration::from_millis(500);
    let mut down = false;
    let stop = stopped();
    tokio::pin!(stop);
    loop {
        while tasks.len() >= concurrency {
            tokio::select! {
                () = &mut stop => return give_back(&args, &base, &open).await,
                _ = tasks.join_next() => {}
            }
        }
        let free = concurrency - tasks.len();
        let path = format!("{base}?max={free}&wait={WAIT}&consumer=hookgate-listen");
        let leased = tokio::select! {
            () = &mut stop => return give_back(&args, &base, &open).await,
            r = call(&args.admin, &path, None) => r,
        };
        let events = match leased.and_then(|body| Ok(serde_json::from_str::<Pulled>(&body)?)) {
            Ok(p) => {
                if down {
                    eprintln!("hookgate listen: the gateway answers again");
                    down = false;
                }
                backoff = Duration::from_millis(500);
                p.events
            }
            Err(e) => {
                let msg = format!("{e:#}");
                if msg.contains("401") || msg.contains("404") {
                    eprintln!("hookgate listen: {}", printable(&msg));
                    return Ok(1);
                }
                if !down {
                    eprintln!(
                        "hookgate listen: {}; trying again (events wait in the gateway's queue)",
                        printable(&msg)
                    );
                    down = true;
                }
                tokio::select! {
                    () = &mut stop => return give_back(&args, &base, &open).await,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        for ev in events {
            open.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(ev.lease.clone());
            let (fwd, open, args_admin) = (fwd.clone(), open.clone(), args.admin.clone());
            let base = base.clone();
            tasks.spawn(async move {
                let lease = ev.lease.clone();
                let action = one(&fwd, ev).await;
                let body = serde_json::json!({ "leases": [lease] }).to_string();
                let path = format!("{base}/{action}");
                // The answer is said when it could not be given: the lease then runs
                // out and the event comes again (same Idempotency-Key).
                match call(&args_admin, &path, Some(body)).await {
                    Ok(b) => {
                        if let Ok(acted) = serde_json::from_str::<LeasesActed>(&b)
                            && !acted.lost.is_empty()
                        {
                            eprintln!("hookgate listen: the lease ran out before the {action}: the event comes again");
                        }
                    }
                    Err(e) => eprintln!("hookgate listen: the {action} did not reach the gateway ({e:#}); the event comes again after its lease"),
                }
                open.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&lease);
            });
        }
    }
}

/// Sends one event to the local handler and prints its line; `ack` or `nack`.
async fn one(fwd: &Forward, ev: PulledEvent) -> &'static str {
    let started = Instant::now();
    let time = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let event_type = ev.event_type.clone().unwrap_or_else(|| "-".into());
    let line = |outcome: &str, status: &str| {
        println!(
            "{time} {outcome:<9} {} {} {status} {}ms",
            printable(&ev.event_id),
            printable(&event_type),
            started.elapsed().as_millis()
        );
    };
    if let Some(f) = &fwd.filter
        && !ev.event_type.as_deref().is_some_and(|t| f.admits(t))
    {
        line("skipped", "-");
        return "ack";
    }
    let Ok(body) = base64::engine::general_purpose::STANDARD.decode(&ev.body) else {
        line("failed", "bad-body");
        return "nack";
    };
    let mut req = fwd.client.post(&fwd.to);
    for (name, value) in &ev.headers {
        let resigned = fwd.signer.is_some() && name.starts_with("webhook-");
        if !NOT_SENT.contains(&name.as_str()) && !resigned {
            req = req.header(name, value);
        }
    }
    if let Some(signer) = &fwd.signer
        && let Some(headers) = signer.sign(&ev.event_id, crate::time::now_secs(), &body)
    {
        for (name, value) in headers {
            req = req.header(name, value);
        }
    }
    match req.body(body).send().await {
        Ok(r) if r.status().is_success() => {
            line("delivered", r.status().as_str());
            "ack"
        }
        Ok(r) => {
            line("failed", r.status().as_str());
            "nack"
        }
        Err(e) => {
            line("failed", if e.is_connect() { "connect" } else { "error" });
            "nack"
        }
    }
}

/// One call to the admin listener: its body on a 2xx, else an error naming the status.
async fn call(admin: &AdminArgs, path: &str, body: Option<String>) -> anyhow::Result<String> {
    let (mut req, base) = admin_request(admin, None, reqwest::Method::POST, path)?;
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let resp = req
        .timeout(Duration::from_secs(40))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the gateway at {base}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        anyhow::bail!("{status}: {}", super::text::admin_error(&text));
    }
    Ok(text)
}

/// Ctrl-C or SIGTERM.
async fn stopped() {
    crate::shutdown::Signals::install().stopped().await;
}

/// Gives back every open lease at once: due again now, no attempt counted.
async fn give_back(
    args: &ListenArgs,
    base: &str,
    open: &Mutex<HashSet<String>>,
) -> anyhow::Result<i32> {
    let leases: Vec<String> = open
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .drain()
        .collect();
    if !leases.is_empty() {
        let body = serde_json::json!({ "leases": leases }).to_string();
        match call(&args.admin, &format!("{base}/release"), Some(body)).await {
            Ok(_) => eprintln!("hookgate listen: gave back {} open lease(s)", leases.len()),
            Err(e) => eprintln!(
                "hookgate listen: could not give back the open leases ({e:#}); they run out by themselves"
            ),
        }
    }
    Ok(0)
}
