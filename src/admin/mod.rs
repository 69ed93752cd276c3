//! The admin listener, separate from the public one (bind it to a private address):
//!
//! - `GET /healthz` — the process is alive;
//! - `GET /readyz` — the store answers a PING (503 otherwise), and a Redis store's
//!   `maxmemory-policy` evicts nothing while queue routes are configured (503 naming
//!   the policy otherwise, unless `store.allow_eviction`; reported either way);
//! - `GET /metrics` — Prometheus text format (`probes.rs`);
//! - `DELETE /keys/<route>/<event id>` — frees one key for a deliberate redelivery
//!   (`hookgate forget` calls it; `keys.rs`);
//! - `POST /reload` — re-reads the config file (as SIGHUP does; `reload.rs`);
//! - `GET /handshakes/<route>` — the signing secret a provider handed over in its
//!   set-up request on that route (Asana, Notion), which the operator must configure;
//!   it is never written to the log. Only the first is kept;
//!   `DELETE /handshakes/<route>` forgets it, so the next set-up request may hand
//!   over a new one (refused with 409 until then; `handshakes.rs`);
//! - `GET /events/<route>`, `GET /events/<route>/<event id>`,
//!   `POST /events/<route>/{retry,purge}?event_id=ID|all_dead=true` — the queue of a
//!   `delivery = "queue"` route (`hookgate events` calls them; `events.rs`);
//! - `GET /deliveries`, `/deliveries/<id>`, `/deliveries/stream` — the delivery log
//!   (`deliveries.rs`), `POST /deliveries/<id>/replay` (`replay.rs`) and `GET
//!   /overview` (`overview.rs`), and `GET /overview/series?route=&window=1h|1d`: a
//!   route's requests by outcome per bucket and its queues' depth over time, for the
//!   inspector's charts (`overview.rs`);
//! - `GET /ui/` — the inspector page (`ui.rs`): the delivery log, queues and routes in
//!   a browser; it asks for the token itself.
//!
//! `router.rs` is the one table: each request parsed once, the endpoint that answers
//! it, and each answer's status, headers and body. `api.rs` holds the answers' types,
//! which the command line reads back. Every endpoint reads the gateway through an
//! [`AdminContext`] (built in `app.rs`): a reload goes through its
//! [`crate::reload::Reloader`], a replay through the pipeline's own job steps.
//!
//! - `GET /audit?limit=&action=&name=&result=` — operators' actions, newest first
//!   (`audit.rs`).
//!
//! With `server.admin_token` or any of `[[server.admin_tokens]]` set, every endpoint
//! but `/healthz` and `/readyz` (which probes call) and the inspector's assets
//! requires `Authorization: Bearer <token>`; anything else gets 401. A token's role
//! says which endpoints it may use (`access.rs`: `read` reads, `operate` also changes
//! state and hands over secrets); a `read` token elsewhere gets 403. Every operator
//! action is recorded under the token's name (`audit.rs`).
//!
//! A web page must not be able to use the listener through an operator's browser
//! (cross-site requests, DNS rebinding), token or not: a request whose `Host` is not an
//! IP address, `localhost` or one of `server.admin_hosts` is refused (421), as is one
//! with an `Origin` other than the listener's own or `Sec-Fetch-Site: cross-site` or
//! `same-site` (403); and a `POST` (every state change but `DELETE`, which no page can
//! send cross-site without the listener's consent) must carry `Authorization` or
//! `X-Requested-By`, which no page can add to a cross-site request either (403). The
//! command line sends `X-Requested-By: hookgate`. Connections are bounded (`ADMIN_LIMITS`)
//! and closed when silent or idle, as the public listener's are.

pub(crate) mod access;
pub mod api;
pub(crate) mod audit;
mod bulk;
mod controls;
pub(crate) mod deliveries;
mod events;
mod exchange;
mod handshakes;
mod keys;
mod overview;
mod probes;
pub mod pull;
mod reload;
mod replay;
mod router;
mod ui;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Method, Request, StatusCode, header};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;
use crate::forward::Forwarder;
use crate::ingress::connection::{Deadlines, http_builder, refuse, serve_connection};
use crate::ingress::listen;
use crate::observe::metrics::Metrics;
use crate::observe::recorder::Recorder;
use crate::pipeline::handed::HandedSecrets;
use crate::pipeline::respond::{self, Answer};
use crate::reload::Reloader;
use crate::state::{Clock, Routing};
use crate::store::Store;
use crate::store::health::eviction;

pub(crate) use access::Access;
use exchange::{AdminAnswer, AdminRequest};

/// The delivery log's live streams open at once at most: readers that hold a stream
/// open cannot take the admin listener's slots.
pub(crate) const MAX_STREAMS: usize = 16;

/// What the admin listener uses of the gateway, and nothing more (as the delivery
/// workers' [`crate::delivery::WorkerContext`]): built in `app.rs`.
#[derive(Debug)]
pub struct AdminContext {
    /// The routes as the last reload left them.
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// The delivery log's recorder: the log's endpoints read it, a replay is recorded.
    pub(crate) recorder: Arc<Recorder>,
    /// Redis's `maxmemory-policy` as last read, for `/readyz`.
    pub(crate) eviction: Arc<eviction::Watch>,
    /// The signing secrets providers handed over (the pipeline keeps them).
    pub(crate) handed: Arc<HandedSecrets>,
    /// Wakes the delivery workers: an event was retried or replayed.
    pub(crate) wake: Arc<Notify>,
    /// What a replay on a sync route forwards with: the pooled upstream client, and
    /// the clock `forward_secret` signatures are dated by.
    pub(crate) forwarder: Forwarder,
    /// The connections to destination servers of other kinds than HTTP (a replay
    /// reaches them; `/readyz` and `/overview` show what was last seen of them).
    pub(crate) links: Arc<crate::delivery::destination::Links>,
    /// The destinations' pauses as this process last read them (a pause or resume
    /// here is seen by the workers at once).
    pub(crate) controls: Arc<crate::delivery::control::Controls>,
    /// The queues' depth over the last day (`GET /overview/series`).
    pub(crate) queue_samples: Arc<crate::delivery::samples::QueueSamples>,
    /// The incidents watch (`GET /alerts`).
    pub(crate) alerts: Arc<crate::observe::alerts::AlertsContext>,
    /// Pull destinations' consumers and when each last leased.
    pub(crate) pulls: pull::Consumers,
    pub(crate) clock: Clock,
    /// `POST /reload`.
    pub(crate) reloader: Arc<Reloader>,
    /// The delivery log's live streams open at once ([`MAX_STREAMS`]).
    pub(crate) live_streams: Arc<Semaphore>,
    /// The listener's settings as the gateway started (`admin_hosts`, deadlines): a
    /// reload does not change them. Its tokens are in `access`.
    pub(crate) server: ServerConfig,
    /// The tokens and their roles, as the last start or reload set them (a reload
    /// swaps them: `reload.rs`).
    pub(crate) access: Arc<ArcSwap<access::Access>>,
    /// Operators' actions: the log line, the store, the counts.
    pub(crate) audit: Arc<audit::Audit>,
}

impl AdminContext {
    /// The current routing snapshot.
    pub(crate) fn routing(&self) -> Arc<Routing> {
        self.routing.load_full()
    }
}

/// Connections the admin listener holds open at most (64), from one address (16),
/// and past those, taken for one probe only (16): beyond, a new one is answered 503
/// and closed.
const ADMIN_LIMITS: AdminLimits = AdminLimits {
    max: 64,
    per_client: 16,
    probes: 16,
};

/// Serves the admin endpoints until `shutdown` resolves.
pub async fn run(
    state: Arc<AdminContext>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) {
    serve_admin(
        state,
        listener,
        shutdown,
        ADMIN_LIMITS,
        |st, http, _peer| router::handle(st, http),
        // Past the bounds, probes only.
        |st, http| async move {
            if AdminRequest::parse(http.method(), http.uri()).is_probe() {
                router::handle(st, http).await.map(exchange::whole)
            } else {
                respond::response(Answer::Overloaded)
            }
        },
    )
    .await;
}

/// The one guard ahead of every endpoint: a request a web page may have sent is
/// refused, then one without a token (but the probes' and the inspector's assets:
/// 401), then one whose token's role does not allow the endpoint (403). Who made the
/// request, when the endpoint needs a token.
fn guard<B>(
    state: &AdminContext,
    http: &Request<B>,
    req: &AdminRequest,
) -> Result<Option<access::Caller>, AdminAnswer> {
    if let Some((status, why)) = browser_refusal(state, http) {
        return Err(AdminAnswer::Refused(status, why));
    }
    // The inspector page's assets hold nothing secret and must load to ask for the
    // token: past the check above, they need none (the router answers every such path
    // from the page, and nothing else); nor do the probes.
    let Some(needs) = access::required(req) else {
        return Ok(None);
    };
    // A pull destination's endpoints take its own token too: checked there (pull.rs).
    if req.endpoint == "pull" {
        return Ok(None);
    }
    let Some(caller) = state.access.load().identify(bearer(http)) else {
        return Err(AdminAnswer::Unauthorized);
    };
    if caller.role < needs {
        state.audit.denied(&caller, req);
        return Err(forbidden(&caller, req));
    }
    Ok(Some(caller))
}

/// 403 for a token whose role does not allow the request's endpoint.
pub(super) fn forbidden(caller: &access::Caller, req: &AdminRequest) -> AdminAnswer {
    AdminAnswer::Forbidden(format!(
        "the token {:?} has the role {}: {} /{} changes state or hands over a secret, which needs a token with role operate",
        caller.name,
        caller.role.as_str(),
        req.method,
        req.endpoint
    ))
}

/// The `Authorization: Bearer` value a request presents.
fn bearer<B>(req: &Request<B>) -> Option<&[u8]> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
}

/// Why a request is refused as one a web page may have sent through an operator's
/// browser, if it is: the status and the reason.
fn browser_refusal<B>(state: &AdminContext, req: &Request<B>) -> Option<(StatusCode, String)> {
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default()
        .to_ascii_lowercase();
    if !host_is_ours(&host, &state.server.admin_hosts) {
        return Some((
            StatusCode::MISDIRECTED_REQUEST,
            "the admin listener answers to its IP addresses, localhost and server.admin_hosts only"
                .into(),
        ));
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let own = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https") && rest.eq_ignore_ascii_case(&host)
            });
        if !own {
            return Some((
                StatusCode::FORBIDDEN,
                "a request from another origin is refused".into(),
            ));
        }
    }
    let site = req
        .headers()
        .get("sec-fetch-site")
        .map(|v| v.as_bytes().to_ascii_lowercase());
    if matches!(site.as_deref(), Some(b"cross-site" | b"same-site")) {
        return Some((
            StatusCode::FORBIDDEN,
            "a request from another site is refused".into(),
        ));
    }
    if req.method() == Method::POST
        && !req.headers().contains_key(header::AUTHORIZATION)
        && !req.headers().contains_key("x-requested-by")
    {
        return Some((
            StatusCode::FORBIDDEN,
            "a POST to the admin listener needs an X-Requested-By header (any value; hookgate's command line sends it) or Authorization".into(),
        ));
    }
    None
}

/// Whether a `Host` names this listener: an IP address (a page cannot rebind one),
/// `localhost`, or a configured name; with or without a port.
fn host_is_ours(host: &str, names: &[String]) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        return v6
            .split_once(']')
            .is_some_and(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().is_ok());
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.parse::<u16>().is_ok())
            .map_or(host, |(name, _)| name)
    };
    !name.is_empty()
        && (name.parse::<std::net::Ipv4Addr>().is_ok()
            || name == "localhost"
            || names.iter().any(|n| n == name))
}

/// The admin listener's connection bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminLimits {
    /// Connections open at once, over every client.
    pub(crate) max: usize,
    /// Connections open at once from one address (an IPv6 /64), well below `max`:
    /// one address cannot take them all.
    pub(crate) per_client: usize,
    /// Connections past `max` that are read for one probe (`/healthz`, `/readyz`)
    /// and closed, at most this many at once (and a quarter of them per address),
    /// each within [`PROBE_DEADLINE`]: a full listener still answers its probes.
    pub(crate) probes: usize,
}

/// How long a connection taken past the admin listener's bound has to send its
/// probe and read the answer.
const PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// Serves the admin endpoints on `listener` until `shutdown` resolves, with the
/// public listener's deadlines (a silent connection is closed after
/// `header_read_timeout`, an idle one after `idle_timeout`) and the connection bounds
/// of `limits`: silent connections cannot use up the process's descriptors, and one
/// address cannot blind the probes. Past the bound, a connection is read for one
/// request: `probe` answers it (a probe, or 503) and the connection is closed.
pub(crate) async fn serve_admin<H, Fut, B, P, PFut>(
    state: Arc<AdminContext>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    limits: AdminLimits,
    handle: H,
    probe: P,
) where
    H: Fn(Arc<AdminContext>, http::Request<hyper::body::Incoming>, std::net::SocketAddr) -> Fut
        + Clone
        + Send
        + Sync
        + 'static,
    Fut: Future<Output = http::Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    P: Fn(Arc<AdminContext>, http::Request<hyper::body::Incoming>) -> PFut
        + Clone
        + Send
        + Sync
        + 'static,
    PFut: Future<Output = crate::pipeline::respond::Resp> + Send + 'static,
{
    let builder = http_builder(&state.server);
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.max));
    let by_client = crate::ingress::limits::ClientConnections::default();
    let probing = Arc::new(tokio::sync::Semaphore::new(limits.probes));
    let probing_by_client = crate::ingress::limits::ClientConnections::default();
    let closing = tokio_util::sync::CancellationToken::new();
    let open = TaskTracker::new();
    listen::accept_loop(&listener, shutdown, |stream, peer| {
        let client = crate::ingress::limits::client_key(peer.ip());
        let slot = by_client.enter(client, limits.per_client);
        let permit = slot
            .as_ref()
            .and_then(|_| connections.clone().try_acquire_owned().ok());
        let (Some(slot), Some(permit)) = (slot, permit) else {
            // Full, or this address holds its share: one probe, then closed.
            let Some(probe_slot) = probing_by_client.enter(client, (limits.probes / 4).max(1))
            else {
                refuse(stream);
                return;
            };
            let Ok(probe_permit) = probing.clone().try_acquire_owned() else {
                refuse(stream);
                return;
            };
            let (st, probe) = (state.clone(), probe.clone());
            open.spawn(async move {
                let svc = service_fn(move |req| {
                    let (st, probe) = (st.clone(), probe.clone());
                    async move { Ok::<_, std::convert::Infallible>(probe(st, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .timer(TokioTimer::new())
                    .header_read_timeout(PROBE_DEADLINE)
                    .max_buf_size(8 * 1024)
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = tokio::time::timeout(PROBE_DEADLINE, conn).await;
                drop((probe_permit, probe_slot));
            });
            return;
        };
        let (st, builder, closing, handle) = (
            state.clone(),
            builder.clone(),
            closing.clone(),
            handle.clone(),
        );
        open.spawn(async move {
            serve_connection(
                Deadlines::of(&st.server),
                st,
                &builder,
                stream,
                peer,
                closing,
                handle,
            )
            .await;
            drop((permit, slot));
        });
    })
    .await;
    closing.cancel();
    open.close();
    let _ = tokio::time::timeout(state.server.shutdown_grace, open.wait()).await;
}
