//! Destinations of every kind: PostgreSQL, NATS, RabbitMQ, Redis Streams, each against a
//! real server the test starts itself; `fixtures` proves those servers keep what they
//! acknowledged across a crash and a restart; `inbox` is the postgres destination's
//! handler side (`hookgate-inbox`, `examples/inbox_handler.rs`).

mod fixtures;
mod inbox;
