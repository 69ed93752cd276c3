//! Destinations of every kind: PostgreSQL, NATS, RabbitMQ, Redis Streams, each against a
//! real server the test starts itself; `fixtures` proves those servers keep what they
//! acknowledged across a crash and a restart.

mod crash;
mod fixtures;
mod kinds;
mod sink;
