//! The stores: one conformance suite each for the claims (dedup), the queue and the
//! delivery log, run on every backend; Redis topologies (cluster, TLS, Sentinel,
//! replicas), eviction, key layout, clocks that step, and the disk store's file.

mod audit_conformance;
mod clock;
mod cluster;
pub mod dedup_conformance;
mod eviction;
mod log_conformance;
pub mod queue_conformance;
mod redis_extras;
mod redis_layout;
mod replicas;
mod security;
mod upgrade;
