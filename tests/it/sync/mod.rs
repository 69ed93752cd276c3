//! The public listener and the sync request path: a delivery verified, claimed,
//! forwarded and settled while the provider waits, the limits that keep the listener
//! serving, and TLS.

mod limits;
mod pipeline;
mod security;
mod tls;
