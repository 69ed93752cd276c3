//! The delivery log through a gateway: its admin API on every store, its budgets beside
//! the claims and events, and what outsiders send to it. The log backends' own contract
//! is `stores/log_conformance.rs`.

mod budgets;
mod deliveries;
mod security;
