//! Who a host counts its limits for: a requester is an IPv4 address, or an IPv6
//! prefix (a /64 by default), since one host or site holds every address of its
//! prefix and could otherwise take a fresh share of every limit from each. The tools'
//! senders, the overlay's API and route control's echo, and mgrpd's trials of unknown
//! datagrams all count so.

use std::net::{IpAddr, Ipv6Addr};

/// One requester: an IPv4 address (IPv4-mapped IPv6 addresses count as IPv4), or the
/// IPv6 prefix of the given length an address lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requester {
    net: IpAddr,
    len: u8,
}

impl Requester {
    /// The requester `addr` belongs to when IPv6 requesters are prefixes of
    /// `ipv6_prefix` bits (at most 128).
    pub fn of(addr: IpAddr, ipv6_prefix: u8) -> Self {
        match addr.to_canonical() {
            IpAddr::V4(a) => Self {
                net: IpAddr::V4(a),
                len: 32,
            },
            IpAddr::V6(a) => {
                let len = ipv6_prefix.min(128);
                let mask = u128::MAX.checked_shl(u32::from(128 - len)).unwrap_or(0);
                Self {
                    net: IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask)),
                    len,
                }
            }
        }
    }

    /// Its first address (the address itself for IPv4).
    pub fn network(&self) -> IpAddr {
        self.net
    }

    /// Its prefix length (32 for IPv4).
    pub fn prefix_len(&self) -> u8 {
        self.len
    }
}

impl std::fmt::Display for Requester {
    /// The address, or for an IPv6 prefix shorter than 128 bits `NETWORK/LEN`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.net {
            IpAddr::V6(n) if self.len < 128 => write!(f, "{n}/{}", self.len),
            n => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_ipv4_address_is_a_requester_of_its_own() {
        let a = Requester::of(ip("192.0.2.1"), 64);
        assert_eq!(a.network(), ip("192.0.2.1"));
        assert_eq!(a.prefix_len(), 32);
        assert_ne!(a, Requester::of(ip("192.0.2.2"), 64));
        assert_eq!(a.to_string(), "192.0.2.1");
    }

    #[test]
    fn ipv6_addresses_of_one_slash_64_are_one_requester() {
        let a = Requester::of(ip("2001:db8:1:2:aaaa::1"), 64);
        let b = Requester::of(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"), 64);
        assert_eq!(a, b);
        assert_eq!(a.network(), ip("2001:db8:1:2::"));
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_ne!(a, Requester::of(ip("2001:db8:1:3::1"), 64));
        // Configurable: a /48 holds both, a /128 tells them apart.
        assert_eq!(
            Requester::of(ip("2001:db8:1:2::1"), 48),
            Requester::of(ip("2001:db8:1:3::1"), 48)
        );
        let exact = Requester::of(ip("2001:db8:1:2::1"), 128);
        assert_ne!(exact, Requester::of(ip("2001:db8:1:2::2"), 128));
        assert_eq!(exact.to_string(), "2001:db8:1:2::1");
        // Out of range is the whole address; 0 is every IPv6 host as one.
        assert_eq!(
            Requester::of(ip("2001:db8::1"), 200),
            Requester::of(ip("2001:db8::1"), 128)
        );
        assert_eq!(
            Requester::of(ip("2001:db8::1"), 0),
            Requester::of(ip("fe80::1"), 0)
        );
    }

    #[test]
    fn ipv4_mapped_ipv6_addresses_count_as_ipv4() {
        let mapped = Requester::of(ip("::ffff:192.0.2.1"), 64);
        assert_eq!(mapped, Requester::of(ip("192.0.2.1"), 64));
        // Not merged into one /64 with the other mapped addresses.
        assert_ne!(mapped, Requester::of(ip("::ffff:192.0.2.2"), 64));
    }
}
