//! Who a request comes from: the client address (through trusted proxies), and the
//! key its per-client budgets are counted under. Read by the listeners' and the
//! pipeline's limits and by the delivery log's budget of refused requests.

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
    fn ipv6_clients_share_their_slash_64() {
        assert_eq!(
            client_key(ip("2001:db8:1:2:aaaa::1")),
            client_key(ip("2001:db8:1:2:bbbb::2"))
        );
        assert_ne!(
            client_key(ip("2001:db8:1:2::1")),
            client_key(ip("2001:db8:1:3::1"))
        );
        assert_eq!(client_key(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(client_key(ip("192.0.2.1")), ip("192.0.2.1"));
    }
}
