//! hookgate: a webhook receiver gateway.
//!
//! It verifies each provider's signature, deduplicates deliveries on the provider's
//! event ID with an atomic claim in a store (embedded, or Redis shared by replicas),
//! forwards only the first delivery to the upstream handler, and acknowledges every
//! replay with 200.
//!
//! # Layout
//!
//! [`app`] puts a gateway together from its config and runs it; the other modules
//! follow the path of a request:
//!
//! - [`server`]: the public listener ([`server::listen`] is the one accept loop) and
//!   the per-request pipeline; [`server::respond`] is the one table that turns every
//!   [`server::respond::Answer`] into status, headers and body.
//! - [`admin`]: the admin listener. It parses each request once and answers from a
//!   table of its own (`router.rs`), a file per group of endpoints (probes, keys,
//!   handshakes, the queues' events, the delivery log and its live stream, replay,
//!   the overview, the inspector page); [`admin::api`] holds its answers' types, which
//!   [`cli`] reads back.
//! - [`provider`]: signature schemes and the preset catalogue (one declaration per
//!   preset), turning a request into a [`provider::VerifiedDelivery`].
//! - [`store`]: one layer for everything stored. Its contracts — claims
//!   ([`store::DedupStore`]), the queue of durable delivery ([`store::QueueStore`], with
//!   the stored event, its status and a destination's [`store::QueueRef`]) and pacing
//!   ([`store::Pacing`]: rate limits, concurrency slots, pauses) — and their memory,
//!   disk and Redis implementations, each backend with a claims half and a queue half;
//!   [`store::Store::connect`] picks one from the config.
//! - [`queue`]: delivery policy only — the retry schedule, rate limits, `on_dead`, the
//!   order key — which [`config`] reads without touching storage.
//! - [`delivery`]: the queue's path. Its workers take due events, run each attempt
//!   under a lease (`attempt.rs`), and hand the event to a
//!   [`delivery::destination::Destination`], the contract every kind of destination
//!   implements (HTTP first): the worker knows nothing of HTTP. It reads the gateway
//!   through a [`delivery::WorkerContext`] of its own, not the listeners' state.
//! - [`state`]: what every subsystem reads — the routing snapshot a reload swaps, and
//!   the clock.
//! - [`forward`]: the pooled upstream client.
//! - [`config`]: the TOML file as data — parsed, then validated section by section;
//!   it depends on nothing that serves ([`tls`] loads certificates for both).
//! - [`capture`], [`replay`], [`sign`]: capturing deliveries, replay files, signing.
//! - `redact`: the one rule for which headers and query parameters captures and the
//!   delivery log never show.
//! - `testing` (with the `testing` feature): a gateway and a recording upstream for
//!   your own test suites; a production build carries none of it.
//! - [`cli`] (a file per command), [`telemetry`], [`shutdown`]: the binary's plumbing;
//!   [`upstream`]: the demo handler of `hookgate upstream`.
//!
//! A request's path reads in that order: [`server`] → [`provider`] (verify) →
//! [`store`] (claim) → [`forward`] → [`store`] (complete or release) →
//! [`server::respond`]; on a queue route, [`store`] (enqueue) → [`server::respond`], and
//! later [`delivery`] → its [`delivery::destination`] ([`forward`] over HTTP) →
//! [`store`] (finish). Imports go one way: [`config`] → [`queue`]; [`store`] →
//! [`config`], [`queue`]; [`config`] imports nothing from [`server`]; [`delivery`]
//! imports nothing from [`server`] (it reads [`state`] and its own context).

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
pub mod replay;
mod retry;
pub mod secret;
pub mod server;
pub mod shutdown;
pub mod sign;
pub mod state;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod time;
pub mod tls;
pub mod upstream;
