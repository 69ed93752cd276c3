//! hookgate: a webhook receiver gateway.
//!
//! It verifies each provider's signature, deduplicates deliveries on the provider's
//! event ID with an atomic claim in a store (embedded, or Redis shared by replicas),
//! forwards only the first delivery to the upstream handler, and acknowledges every
//! replay with 200.
//!
//! # Layout
//!
//! [`app`] puts a gateway together from its config and runs it: it builds each house
//! below a context of its own holding only what that house reads (as svix's
//! `WorkerContext`), and [`app::App`] is their composition; nothing reaches into
//! another's rooms or a shared hub. The houses:
//!
//! - [`ingress`]: the public listener — the one accept loop ([`ingress::listen`], which
//!   the admin listener uses too), one connection's deadlines and HTTP settings, the
//!   connections per client address. It reads the gateway through an
//!   [`ingress::Ingress`], and runs each request through the pipeline.
//! - [`pipeline`]: one delivery, stage by stage over one request record: admit (route,
//!   method, limits, body) → verify (signature, event ID and type, filters) → job
//!   (claim → forward → settle, or enqueue); [`pipeline::respond`] is the one table
//!   that turns every answer into status, headers and body. It reads the gateway
//!   through a [`pipeline::PipelineContext`]; the limits a request spends and the
//!   secrets providers hand over in a handshake are its own.
//! - [`observe`]: what every request leaves behind, from one
//!   record in one end-of-request phase: the log line, the metrics, the capture file and
//!   the delivery log's record; one redaction rule for captures and the log. And
//!   [`observe::alerts`]: the incidents the gateway watches for itself (`[[alerts]]`,
//!   `GET /alerts`), sent once when they open and once when they resolve. And
//!   [`observe::traces`]: with `[telemetry] otlp`, the spans of each delivery, its
//!   stages and each queue attempt, exported over OTLP/HTTP off the request path.
//! - [`delivery`]: the queue's path. Its workers take due events, run each attempt
//!   under a lease, and hand the event to a [`delivery::destination::Destination`], the
//!   contract every kind of destination implements: HTTP, an inbox table in
//!   PostgreSQL, NATS JetStream, RabbitMQ, Redis Streams, whose connections
//!   ([`delivery::destination::Links`]) are kept per destination and checked in the
//!   background. The worker knows nothing of any kind. It reads the gateway through a
//!   [`delivery::WorkerContext`]. A destination's pause and breaker are
//!   [`delivery::control`]. The inbox's handler side is a crate of its own,
//!   `hookgate-inbox/`. A pull destination is not pushed to: its consumers lease its
//!   events through the admin listener ([`admin::pull`], `hookgate listen`).
//! - [`admin`]: the admin listener. One table (`router.rs`) names the endpoint for a
//!   request, a file per group of endpoints answers it; [`admin::api`] holds the
//!   answers' types, which [`cli`] decodes. It reads the gateway through an
//!   [`admin::AdminContext`]; a replay is sent and queued by the pipeline's own job
//!   steps. Who may use which endpoint is `access.rs` (tokens and their roles, `read`
//!   or `operate`); every operator action is recorded by `audit.rs` (`GET /audit`).
//! - [`reload`]: the config swapped while the gateway runs (SIGHUP, `POST /reload`),
//!   and the checks it shares with the start (stranded queues, the queue history).
//! - [`store`]: one layer for everything stored. Its contracts — claims
//!   ([`store::DedupStore`]), the queue of durable delivery ([`store::QueueStore`]),
//!   pacing ([`store::Pacing`]), the gateway's own small records ([`store::Cells`],
//!   compare-and-set) and the operators' audit ([`store::AuditStore`], bounded) —
//!   and their memory, disk and Redis implementations, each a folder split on its
//!   seams (Redis's Lua in `store/redis/scripts/`); the delivery log's backends
//!   (`store/log/`); health checks of what a store holds (eviction,
//!   stranded queues); [`store::Store::connect`] picks one from the config.
//! - [`provider`]: signature schemes and the preset catalogue (one declaration per
//!   preset), turning a request into a [`provider::VerifiedDelivery`].
//! - [`config`]: the TOML file as data — parsed, then validated section by section; it
//!   owns every config enum and depends on nothing that serves ([`tls`] loads
//!   certificates for both). [`queue`]: delivery policy only (retry schedule, rate
//!   limits, `on_dead`, the order key), which [`config`] reads.
//!
//! Low in the house, what every room may import: [`outcome`] (the vocabulary of logs,
//! metrics, the log and the API), [`time`] (the one clock), [`state`] (the routing
//! snapshot a reload swaps, the routes whose queues may hold events). Beside them:
//! [`forward`] (the pooled upstream client), [`replay`] and [`sign`] (replay files,
//! signing), `testing` (with the `testing` feature: a gateway and a recording upstream
//! for your own test suites), [`cli`] (a file per command, and the demo handler of
//! `hookgate upstream`), [`shutdown`].
//!
//! A request's path reads in that order: [`ingress`] → [`pipeline`] (admit, verify:
//! [`provider`]) → [`store`] (claim) → [`forward`] → [`store`] (complete or release) →
//! [`pipeline::respond`] → [`observe`]; on a queue route, [`store`] (enqueue) →
//! [`pipeline::respond`], and later [`delivery`] → its destination → [`store`]
//! (finish). The `use crate::…` graph of the houses has no circle: [`app`] imports
//! them all; [`admin`] imports [`pipeline`] (a replay, the handed secrets) and
//! [`reload`]; [`ingress`] imports [`pipeline`]; none of them imports [`app`] (tests
//! aside), and [`pipeline`] imports no listener.

// The public listener's per-connection future nests the whole delivery pipeline; proving
// it `Send` needs more than the default depth of 128.
#![recursion_limit = "256"]

pub mod admin;
pub mod app;
pub mod cli;
mod client;
pub mod config;
pub mod delivery;
mod files;
pub mod forward;
pub mod ingress;
pub mod observe;
pub mod outcome;
pub mod pipeline;
pub mod provider;
pub mod queue;
pub mod reload;
pub mod replay;
mod retry;
pub mod secret;
pub mod shutdown;
pub mod sign;
pub mod state;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod time;
pub mod tls;
