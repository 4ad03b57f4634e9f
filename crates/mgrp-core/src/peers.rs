//! Who may put packets into this host.
//!
//! The receiving daemon writes the riders it extracts into its TUN, where the kernel
//! takes them for arriving packets; so, as WireGuard does with its allowed IPs, MGRP
//! packets are taken only from peers, and a rider is written only when its IP header
//! is sound, its source is an address its peer may speak for, and its destination is
//! the address the MGRP packet itself was sent to (or a prefix configured as local).
//! Riders that would be handled again as MGRP, and riders to broadcast, multicast,
//! loopback, link-local or unspecified addresses, never pass. Every refusal names its
//! [`Refusal`] so the daemon can count it.
//!
//! No I/O and no state beyond the configuration: a non-peer's packet is refused from
//! its outer source alone, before anything of it is parsed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ip::Ip;

/// An address prefix such as `10.0.0.0/24` or `fd00::/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a prefix does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The address part is not an IP address.
    #[error("`{0}` is not an IP address or prefix (write e.g. 10.0.0.2, 10.0.0.0/24, fd00::/64)")]
    Address(String),
    /// The length is not a number within the family's bits.
    #[error("prefix length `{0}` is out of range (0-32 for IPv4, 0-128 for IPv6)")]
    Length(String),
}

impl Prefix {
    /// The prefix `addr/len`; host bits are cleared.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(PrefixError::Length(len.to_string()));
        }
        Ok(Self {
            addr: mask(addr, len),
            len,
        })
    }

    /// The prefix holding only `addr`.
    pub fn host(addr: IpAddr) -> Self {
        Self {
            addr,
            len: if addr.is_ipv4() { 32 } else { 128 },
        }
    }

    /// Its network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Its length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether it is the whole address space of its family (`/0`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` lies inside (an IPv4 address never lies inside an IPv6 prefix).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.len) == self.addr
    }
}

fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| PrefixError::Address(s.to_string()))?;
        match l {
            None => Ok(Self::host(addr)),
            Some(l) => {
                let len: u8 = l
                    .trim()
                    .parse()
                    .map_err(|_| PrefixError::Length(l.to_string()))?;
                Self::new(addr, len)
            }
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One peer: the hosts MGRP packets may come from, and what their riders may claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The peer hosts' addresses.
    pub prefix: Prefix,
    /// Rider sources the peer may speak for besides its own address (for a peer that
    /// forwards traffic of a network behind it).
    #[serde(default)]
    pub allowed_sources: Vec<Prefix>,
    /// Destinations beyond this host that the peer may send riders to through it: this
    /// host relays them (the kernel forwards what the TUN hands it). Empty for a peer
    /// that is no member of a relaying overlay: riders to anywhere but this host are
    /// refused, so the daemon is never an open relay.
    #[serde(default)]
    pub relay_to: Vec<Prefix>,
}

impl Peer {
    /// A peer that speaks only for itself.
    pub fn new(prefix: Prefix) -> Self {
        Self {
            prefix,
            allowed_sources: Vec::new(),
            relay_to: Vec::new(),
        }
    }
}

/// Where an admitted rider goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// To this host (the address the MGRP packet was sent to, or a local prefix).
    Here,
    /// On, to a destination its peer may relay through this host.
    Relayed,
}

/// Why a packet or a rider was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The MGRP packet's sender is no peer.
    NotPeer,
    /// The rider is not a sound IP packet (version, header length, total length equal
    /// to the rider's length, IPv4 header checksum).
    Malformed,
    /// The rider's source is not an address its peer may speak for.
    ForeignSource,
    /// The rider's destination is neither the address the MGRP packet was sent to nor a
    /// local prefix.
    ForeignDestination,
    /// The rider is itself an MGRP packet.
    InnerMgrp,
    /// The rider goes to a broadcast, multicast, loopback, link-local or unspecified
    /// address.
    SpecialDestination,
}

/// The peers and local prefixes of a daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers {
    peers: Vec<Peer>,
    local: Vec<Prefix>,
    protocol: u8,
}

impl Peers {
    /// Peers `peers`, local prefixes `local` (rider destinations accepted besides the
    /// address each MGRP packet was sent to), and the MGRP protocol number.
    pub fn new(peers: Vec<Peer>, local: Vec<Prefix>, protocol: u8) -> Self {
        Self {
            peers,
            local,
            protocol,
        }
    }

    /// The peers.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// The local prefixes.
    pub fn local(&self) -> &[Prefix] {
        &self.local
    }

    /// Adds a peer.
    pub fn add_peer(&mut self, peer: Peer) {
        self.peers.push(peer);
    }

    /// Adds a local prefix.
    pub fn add_local(&mut self, prefix: Prefix) {
        self.local.push(prefix);
    }

    /// The peer `ip` belongs to: the one with the longest matching prefix.
    pub fn find(&self, ip: IpAddr) -> Option<&Peer> {
        self.peers
            .iter()
            .filter(|p| p.prefix.contains(ip))
            .max_by_key(|p| p.prefix.len())
    }

    /// Whether `ip` is a peer.
    pub fn is_peer(&self, ip: IpAddr) -> bool {
        self.find(ip).is_some()
    }

    /// Whether the rider `rider`, taken from an MGRP packet that `outer_src` sent to
    /// `outer_dst`, may be written into this host, and whether it stays or is relayed.
    pub fn admit(
        &self,
        outer_src: IpAddr,
        outer_dst: IpAddr,
        rider: &[u8],
    ) -> Result<Admitted, Refusal> {
        let peer = self.find(outer_src).ok_or(Refusal::NotPeer)?;
        let h = Ip::parse_exact(rider).map_err(|_| Refusal::Malformed)?;
        let protocol = h.upper_protocol().map_err(|_| Refusal::Malformed)?;
        let own = h.src == outer_src;
        if !own && !peer.allowed_sources.iter().any(|p| p.contains(h.src)) {
            return Err(Refusal::ForeignSource);
        }
        // A configured local prefix is trusted as written, even a special one.
        let mut admitted = Admitted::Here;
        if !self.local.iter().any(|p| p.contains(h.dst)) {
            if is_special(h.dst) {
                return Err(Refusal::SpecialDestination);
            }
            if h.dst != outer_dst {
                if !peer.relay_to.iter().any(|p| p.contains(h.dst)) {
                    return Err(Refusal::ForeignDestination);
                }
                admitted = Admitted::Relayed;
            }
        }
        if protocol == self.protocol {
            return Err(Refusal::InnerMgrp);
        }
        Ok(admitted)
    }
}

fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            a.is_broadcast()
                || a.is_multicast()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
        }
        IpAddr::V6(a) => {
            a.is_multicast()
                || a.is_loopback()
                || a.is_unspecified()
                || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// An IPv4 packet of `len` bytes with a correct header checksum.
    fn v4(src: &str, dst: &str, proto: u8, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ip(src), ip(dst)) else {
            panic!()
        };
        p[12..16].copy_from_slice(&s.octets());
        p[16..20].copy_from_slice(&d.octets());
        let sum: u32 = p[..20]
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        let ck = !((folded & 0xffff) + (folded >> 16)) as u16;
        p[10..12].copy_from_slice(&ck.to_be_bytes());
        p
    }

    fn v6(src: &str, dst: &str, next: u8, ext: &[u8], len: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[6] = next;
        p[7] = 64;
        let (IpAddr::V6(s), IpAddr::V6(d)) = (ip(src), ip(dst)) else {
            panic!()
        };
        p[8..24].copy_from_slice(&s.octets());
        p[24..40].copy_from_slice(&d.octets());
        p.extend_from_slice(ext);
        p.resize(len.max(p.len()), 0);
        let payload = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&payload.to_be_bytes());
        p
    }

    fn peers() -> Peers {
        Peers::new(
            vec![
                Peer::new("10.0.0.2".parse().unwrap()),
                Peer {
                    prefix: "10.0.1.0/24".parse().unwrap(),
                    allowed_sources: vec!["192.168.5.0/24".parse().unwrap()],
                    relay_to: Vec::new(),
                },
                Peer::new("fd00::2".parse().unwrap()),
            ],
            vec!["10.9.0.0/16".parse().unwrap()],
            253,
        )
    }

    #[test]
    fn prefixes_parse_mask_and_contain() {
        let p: Prefix = "10.1.2.3/16".parse().unwrap();
        assert_eq!(p.to_string(), "10.1.0.0/16");
        assert!(p.contains(ip("10.1.200.9")));
        assert!(!p.contains(ip("10.2.0.1")));
        assert!(!p.contains(ip("::ffff:10.1.0.1")));
        let h: Prefix = "fd00::7".parse().unwrap();
        assert_eq!(h.len(), 128);
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.is_empty() && all.contains(ip("8.8.8.8")));
        assert!(matches!(
            "10.0.0.0/33".parse::<Prefix>(),
            Err(PrefixError::Length(_))
        ));
        assert!(matches!(
            "nope/8".parse::<Prefix>(),
            Err(PrefixError::Address(_))
        ));
        assert!(matches!(
            "10.0.0.0/x".parse::<Prefix>(),
            Err(PrefixError::Length(_))
        ));
        let j: Prefix = serde_json::from_str("\"fd00::/8\"").unwrap();
        assert_eq!(serde_json::to_string(&j).unwrap(), "\"fd00::/8\"");
    }

    #[test]
    fn the_longest_prefix_names_the_peer() {
        let mut p = peers();
        p.peers.push(Peer::new("10.0.0.0/8".parse().unwrap()));
        assert_eq!(p.find(ip("10.0.0.2")).unwrap().prefix.len(), 32);
        assert_eq!(p.find(ip("10.3.0.2")).unwrap().prefix.len(), 8);
        assert!(peers().find(ip("10.0.0.3")).is_none());
    }

    #[test]
    fn a_peers_own_rider_to_us_passes() {
        let p = peers();
        let r = v4("10.0.0.2", "10.0.0.1", 6, 60);
        assert_eq!(
            p.admit(ip("10.0.0.2"), ip("10.0.0.1"), &r),
            Ok(Admitted::Here)
        );
        // To a local prefix too.
        let r = v4("10.0.0.2", "10.9.3.3", 17, 60);
        assert_eq!(
            p.admit(ip("10.0.0.2"), ip("10.0.0.1"), &r),
            Ok(Admitted::Here)
        );
        // A configured local prefix overrides the special-address rule.
        let mut p = p;
        p.add_local("127.0.0.0/8".parse().unwrap());
        let r = v4("10.0.0.2", "127.0.0.1", 17, 60);
        assert_eq!(
            p.admit(ip("10.0.0.2"), ip("10.0.0.1"), &r),
            Ok(Admitted::Here)
        );
    }

    #[test]
    fn each_refusal() {
        let p = peers();
        let (a, me) = (ip("10.0.0.2"), ip("10.0.0.1"));
        let ok = v4("10.0.0.2", "10.0.0.1", 6, 60);
        assert_eq!(p.admit(ip("10.0.0.3"), me, &ok), Err(Refusal::NotPeer));
        // Spoofed inner source.
        let r = v4("10.0.0.7", "10.0.0.1", 6, 60);
        assert_eq!(p.admit(a, me, &r), Err(Refusal::ForeignSource));
        // Another address of ours that the packet was not sent to.
        let r = v4("10.0.0.2", "172.16.0.1", 6, 60);
        assert_eq!(p.admit(a, me, &r), Err(Refusal::ForeignDestination));
        let r = v4("10.0.0.2", "10.0.0.1", 253, 60);
        assert_eq!(p.admit(a, me, &r), Err(Refusal::InnerMgrp));
        for dst in [
            "255.255.255.255",
            "224.0.0.1",
            "127.0.0.1",
            "169.254.1.1",
            "0.0.0.0",
        ] {
            let r = v4("10.0.0.2", dst, 17, 60);
            assert_eq!(
                p.admit(a, me, &r),
                Err(Refusal::SpecialDestination),
                "{dst}"
            );
        }
        // Bad checksum, bad length, bad version, too short.
        let mut r = ok.clone();
        r[10] ^= 1;
        assert_eq!(p.admit(a, me, &r), Err(Refusal::Malformed));
        let mut r = ok.clone();
        r.push(0);
        assert_eq!(p.admit(a, me, &r), Err(Refusal::Malformed));
        let mut r = ok.clone();
        r[0] = 0x55;
        assert_eq!(p.admit(a, me, &r), Err(Refusal::Malformed));
        assert_eq!(p.admit(a, me, &ok[..19]), Err(Refusal::Malformed));
        assert_eq!(p.admit(a, me, &[]), Err(Refusal::Malformed));
        let mut r = ok;
        r[0] = 0x44;
        assert_eq!(p.admit(a, me, &r), Err(Refusal::Malformed));
    }

    #[test]
    fn allowed_sources_widen_a_peer() {
        let p = peers();
        let r = v4("192.168.5.9", "10.0.0.1", 6, 40);
        assert_eq!(
            p.admit(ip("10.0.1.7"), ip("10.0.0.1"), &r),
            Ok(Admitted::Here)
        );
        // Not for another peer.
        assert_eq!(
            p.admit(ip("10.0.0.2"), ip("10.0.0.1"), &r),
            Err(Refusal::ForeignSource)
        );
    }

    #[test]
    fn only_a_member_relays_and_only_to_its_prefixes() {
        let mut p = peers();
        p.peers[0]
            .allowed_sources
            .push("10.7.0.0/24".parse().unwrap());
        p.peers[0].relay_to.push("10.20.0.0/24".parse().unwrap());
        let me = ip("10.0.0.1");
        // The member's own and its network's riders to the relayed prefix go on.
        let r = v4("10.0.0.2", "10.20.0.5", 6, 60);
        assert_eq!(p.admit(ip("10.0.0.2"), me, &r), Ok(Admitted::Relayed));
        let r = v4("10.7.0.3", "10.20.0.5", 6, 60);
        assert_eq!(p.admit(ip("10.0.0.2"), me, &r), Ok(Admitted::Relayed));
        // Nowhere else; to this host as before.
        let r = v4("10.0.0.2", "10.20.1.5", 6, 60);
        assert_eq!(
            p.admit(ip("10.0.0.2"), me, &r),
            Err(Refusal::ForeignDestination)
        );
        let r = v4("10.0.0.2", "10.0.0.1", 6, 60);
        assert_eq!(p.admit(ip("10.0.0.2"), me, &r), Ok(Admitted::Here));
        // Sources it may not speak for are refused before anything is relayed.
        let r = v4("10.8.0.3", "10.20.0.5", 6, 60);
        assert_eq!(p.admit(ip("10.0.0.2"), me, &r), Err(Refusal::ForeignSource));
        // Special destinations never pass, even inside a relayed prefix.
        p.peers[0].relay_to.push("224.0.0.0/4".parse().unwrap());
        let r = v4("10.0.0.2", "224.0.0.9", 17, 60);
        assert_eq!(
            p.admit(ip("10.0.0.2"), me, &r),
            Err(Refusal::SpecialDestination)
        );
        // A peer that is no member relays nothing.
        let r = v4("10.0.1.7", "10.20.0.5", 6, 60);
        assert_eq!(
            p.admit(ip("10.0.1.7"), me, &r),
            Err(Refusal::ForeignDestination)
        );
    }

    #[test]
    fn ipv6_riders() {
        let p = peers();
        let (a, me) = (ip("fd00::2"), ip("fd00::1"));
        assert_eq!(
            p.admit(a, me, &v6("fd00::2", "fd00::1", 6, &[], 80)),
            Ok(Admitted::Here)
        );
        assert_eq!(
            p.admit(a, me, &v6("fd00::9", "fd00::1", 6, &[], 80)),
            Err(Refusal::ForeignSource)
        );
        assert_eq!(
            p.admit(a, me, &v6("fd00::2", "fe80::1", 6, &[], 80)),
            Err(Refusal::SpecialDestination)
        );
        assert_eq!(
            p.admit(a, me, &v6("fd00::2", "ff02::1", 17, &[], 80)),
            Err(Refusal::SpecialDestination)
        );
        // MGRP behind a hop-by-hop and a fragment header.
        let ext = [44, 0, 0, 0, 0, 0, 0, 0, 253, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            p.admit(a, me, &v6("fd00::2", "fd00::1", 0, &ext, 80)),
            Err(Refusal::InnerMgrp)
        );
        // An extension header running past the end.
        let ext = [6, 200];
        assert_eq!(
            p.admit(a, me, &v6("fd00::2", "fd00::1", 60, &ext, 48)),
            Err(Refusal::Malformed)
        );
        let mut r = v6("fd00::2", "fd00::1", 6, &[], 80);
        r.pop();
        assert_eq!(p.admit(a, me, &r), Err(Refusal::Malformed));
    }
}
