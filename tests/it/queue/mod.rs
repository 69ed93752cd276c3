//! Queue routes (`delivery = "queue"`): durable delivery in process and with the real
//! binary, destinations (fan-out, filters, limits, per-key order), `on_dead`, queues no
//! route names, and what a gateway leaves to the next.

mod controls;
pub mod delivery;
mod destinations;
mod handover;
mod on_dead;
mod process;
mod pull;
mod stranded;
