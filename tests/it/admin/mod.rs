//! The admin listener: operating the gateway (metrics, probes, forgetting, reloads),
//! the inspector page in a real browser, and attacks on the admin API and listener.

mod access;
mod api_security;
mod inspector;
mod listener_security;
mod ops;
