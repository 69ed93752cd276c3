//! Destinations of every kind: PostgreSQL, NATS, RabbitMQ, Redis Streams, each against a
//! real server the test starts itself; `fixtures` proves those servers keep what they
//! acknowledged across a crash and a restart; `kinds` and `crash` the gateway's side of each kind
//! (`sink` the servers as they use them); `inbox` is the postgres destination's
//! handler side (`hookgate-inbox`, `examples/inbox_handler.rs`).

mod crash;
mod drain;
mod fixtures;
mod inbox;
mod kinds;
mod sink;
