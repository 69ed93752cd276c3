//! hookgate's integration tests: one test binary.
//!
//! Every test that needs Redis starts its own `redis-server` on a free port; every test
//! that forwards runs a stub upstream that records what it receives.
//!
//! A folder per surface, so a test's path says what it exercises
//! (`stores::replicas::a_sync_copy_…`):
//!
//! ```text
//! sync/       the public listener and the sync request path
//! providers/  what each provider signs and sends: vectors, malformed input, signing
//! queue/      queue routes: durable delivery, destinations, the real binary
//! destinations/  destinations of every kind: PostgreSQL, NATS, RabbitMQ, Redis Streams
//! admin/      the admin listener: operations, the inspector page, its attacks
//! log/        the delivery log through a gateway
//! cli/        the command line against real gateways
//! stores/     the stores' contracts on every backend, Redis topologies
//! process/    the real binary: check, crashes, signals; deploy/
//! traces.rs   `[telemetry] otlp`: spans, parents, links and the traceparent
//! chaos/      the chaos suite
//! docs/       the documentation held to the code
//! support/    the shared harness
//! ```

#![expect(
    unreachable_pub,
    reason = "a test binary has no public API; `pub` only spans its modules"
)]

mod admin;
mod alerts;
mod chaos;
mod cli;
mod destinations;
mod docs;
mod log;
mod process;
mod providers;
mod queue;
mod stores;
mod support;
mod sync;
mod traces;
