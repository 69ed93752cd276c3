//! The chaos suite: a provider simulator sends a thousand events, each several times,
//! copies interleaved and concurrent, retrying every non-2xx with jittered backoff; an
//! upstream simulator records every attempt and injects faults. For every scenario:
//! every event is acknowledged and reached the upstream (nothing lost), and no event is
//! forwarded again after the gateway saw its 2xx (no duplicate effect) — except across
//! a gateway SIGKILL, the one window the design leaves (a crash between the upstream's
//! 2xx and the store's `complete`), where the repeat carries the same Idempotency-Key.
//! Loopback only; every scenario is bounded in time and stops by itself.
//!
//! `harness.rs` holds the simulators and the gateways; `sync.rs` and `queue.rs` the
//! scenarios on sync and on queue routes.

mod harness;
mod queue;
mod sync;
