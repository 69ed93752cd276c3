//! Who a request comes from: the client address (through trusted proxies), and the
//! key its per-client budgets are counted under. Read by the listener's limits and by
//! the delivery log's budget of refused requests.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

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

/// The key a client's per-address limits are counted under: an IPv4 address as it
/// is, an IPv6 address by its /64 prefix (one subscriber's allocation: a /64 holds
/// 2^64 addresses, so counting each alone would give one client that many budgets).
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mask = !0u128 << 64;
                IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
    }
}
