//! Limits per client address: which address a request comes from, the bodies it is
//! sending at once, and its budget of failed verifications on routes whose
//! verification is expensive. One client's flood spends that client's share, never a
//! route's or the gateway's.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use http::HeaderMap;
use ipnet::IpNet;

/// Entries past this many are pruned of those that no longer hold anything (a full
/// budget, no body being read), so a flood from many addresses cannot grow the maps
/// without bound.
const PRUNE_ABOVE: usize = 10_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The client's address: the peer, unless the peer is one of `trusted` proxies; then
/// the right-most address of `X-Forwarded-For` that is not itself a trusted proxy
/// (the left part of that header is whatever the client wrote, and cannot be trusted).
pub(crate) fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|hop| hop.trim().parse::<IpAddr>())
        .collect::<Result<_, _>>()
        // A malformed hop ends the trust: the peer itself is the client.
        .unwrap_or_default();
    hops.into_iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .unwrap_or(peer)
}

/// Request bodies being received, by client address.
#[derive(Debug, Default)]
pub(crate) struct ClientReads {
    reading: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One body being read; dropping it frees the client's slot.
#[derive(Debug)]
pub(crate) struct ReadSlot {
    reading: Arc<Mutex<HashMap<IpAddr, usize>>>,
    client: IpAddr,
}

impl ClientReads {
    /// A slot for one more body from `client`, unless it already sends `max` at once.
    pub(crate) fn enter(&self, client: IpAddr, max: usize) -> Option<ReadSlot> {
        let mut reading = lock(&self.reading);
        let n = reading.entry(client).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ReadSlot {
            reading: self.reading.clone(),
            client,
        })
    }
}

impl Drop for ReadSlot {
    fn drop(&mut self) {
        let mut reading = lock(&self.reading);
        if let Some(n) = reading.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                reading.remove(&self.client);
            }
        }
    }
}

/// A token bucket: `rate` per second, at most `rate` banked.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Budgets of failed verifications, per route and client address.
#[derive(Debug, Default)]
pub(crate) struct FailureBudgets {
    buckets: Mutex<HashMap<(String, IpAddr), Bucket>>,
}

impl FailureBudgets {
    /// Whether `client` may still spend verification on `route`.
    pub(crate) fn left(&self, route: &str, client: IpAddr, rate: u32) -> bool {
        let mut buckets = lock(&self.buckets);
        let now = Instant::now();
        let rate = f64::from(rate);
        match buckets.get_mut(&(route.to_owned(), client)) {
            // Absent is full.
            None => true,
            Some(b) => {
                b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate).min(rate);
                b.last = now;
                b.tokens >= 1.0
            }
        }
    }

    /// Spends one token of `client`'s budget on `route`.
    pub(crate) fn spend(&self, route: &str, client: IpAddr, rate: u32) {
        let mut buckets = lock(&self.buckets);
        let now = Instant::now();
        if buckets.len() >= PRUNE_ABOVE {
            // A bucket refills completely within a second: older ones hold nothing.
            buckets.retain(|_, b| now.duration_since(b.last) < Duration::from_secs(1));
        }
        let b = buckets.entry((route.to_owned(), client)).or_insert(Bucket {
            tokens: f64::from(rate),
            last: now,
        });
        b.tokens = (b.tokens - 1.0).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append(
                "x-forwarded-for",
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn the_client_is_the_peer_unless_the_peer_is_a_trusted_proxy() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let h = headers(&["198.51.100.7, 203.0.113.9"]);
        // An untrusted peer's header is the client's own words.
        assert_eq!(client_ip(ip("192.0.2.1"), &h, &trusted), ip("192.0.2.1"));
        // Behind a trusted proxy: the right-most address it did not add itself.
        assert_eq!(client_ip(ip("10.1.2.3"), &h, &trusted), ip("203.0.113.9"));
        let chained = headers(&["198.51.100.7", "203.0.113.9, 10.0.0.5"]);
        assert_eq!(
            client_ip(ip("10.1.2.3"), &chained, &trusted),
            ip("203.0.113.9")
        );
        // No header, or a malformed one: the peer.
        assert_eq!(
            client_ip(ip("10.1.2.3"), &HeaderMap::new(), &trusted),
            ip("10.1.2.3")
        );
        let bad = headers(&["203.0.113.9, not-an-ip"]);
        assert_eq!(client_ip(ip("10.1.2.3"), &bad, &trusted), ip("10.1.2.3"));
    }

    #[test]
    fn a_client_reads_at_most_max_bodies_at_once_and_slots_come_back() {
        let reads = ClientReads::default();
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        let first = reads.enter(a, 2).expect("first");
        let _second = reads.enter(a, 2).expect("second");
        assert!(reads.enter(a, 2).is_none(), "a third body from a");
        assert!(reads.enter(b, 2).is_some(), "another client is unaffected");
        drop(first);
        assert!(reads.enter(a, 2).is_some(), "a slot came back");
    }

    #[test]
    fn one_clients_failures_spend_only_its_own_budget() {
        let budgets = FailureBudgets::default();
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for _ in 0..5 {
            assert!(budgets.left("r", a, 5));
            budgets.spend("r", a, 5);
        }
        assert!(!budgets.left("r", a, 5), "a spent its budget");
        assert!(budgets.left("r", b, 5), "b has its own");
        assert!(budgets.left("other", a, 5), "and so has another route");
    }
}
