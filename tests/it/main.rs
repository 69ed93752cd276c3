//! hookgate's integration tests: one test binary.
//!
//! Every test that needs Redis starts its own `redis-server` on a free port; every test
//! that forwards runs a stub upstream that records what it receives.

#![expect(
    unreachable_pub,
    reason = "a test binary has no public API; `pub` only spans its modules"
)]

mod admin_security;
mod aws_sns;
mod budgets;
mod chaos;
mod cli;
mod clock;
mod cluster;
mod conformance;
mod deliveries;
mod deliveries_cli;
mod deploy;
mod destinations;
mod docs;
mod eviction;
mod fuzz;
mod inspector;
mod limits;
mod log_security;
mod malformed;
mod on_dead;
mod ops;
mod pipeline;
mod process;
mod queue;
mod queue_conformance;
mod queue_process;
mod redis_extras;
mod replay;
mod replicas;
mod security;
mod sign;
mod stranded;
mod support;
mod testing_api;
mod tls;
mod vectors;
