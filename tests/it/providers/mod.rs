//! What each provider signs and sends: every vector of every provider, malformed and
//! fuzzed input, AWS SNS certificates and subscriptions, `hookgate sign` per preset, and
//! attacks on what a preset signs.

mod aws_sns;
mod fuzz;
mod malformed;
mod security;
mod sign;
pub mod vectors;
