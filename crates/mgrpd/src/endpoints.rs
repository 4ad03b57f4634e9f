//! Where UDP peers are: each peer (named by its address, the one its riders and tools
//! know it by) has an endpoint, the address and port its MGRP packets go to and come
//! from. A peer's endpoint is configured, or its own address at the UDP port; a peer
//! that roams (one host with a key of its own) is found where its last authenticated
//! packet came from, as WireGuard finds its peers: behind a NAT that is the NAT's
//! outer address and the port it mapped. Riders are still admitted by the addresses
//! the peer may speak for, never by that outer address.
//!
//! Written by the receivers, read by every sender; a lock held for a map lookup.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, PoisonError, RwLock};

use mgrp_core::planner::Encap;
use mgrp_core::wire::Packet;

use crate::config::Config;

/// The endpoints of the UDP peers.
#[derive(Debug)]
pub(crate) struct Endpoints {
    config: Arc<Config>,
    /// Endpoints learned from authenticated packets, by peer.
    learned: RwLock<HashMap<IpAddr, SocketAddr>>,
    /// The roaming peers, whose keys are tried on a packet from an endpoint no peer
    /// is known at.
    roaming: Vec<IpAddr>,
    /// Whether any peer is reached over UDP: without one, the senders' question
    /// costs a load, not a table lookup.
    any: bool,
}

impl Endpoints {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        let roaming = config
            .udp
            .peers
            .iter()
            .filter(|p| p.roams)
            .map(|p| p.prefix.addr())
            .collect();
        Self {
            any: config.encap.any_udp(),
            config,
            learned: RwLock::default(),
            roaming,
        }
    }

    /// Whether MGRP packets to `peer` go over UDP.
    pub(crate) fn is_udp(&self, peer: IpAddr) -> bool {
        self.any && self.config.encap.for_peer(peer) == Encap::Udp
    }

    /// Where `peer`'s packets go now, if anywhere is known.
    pub(crate) fn endpoint(&self, peer: IpAddr) -> Option<SocketAddr> {
        let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
        learned
            .get(&peer)
            .copied()
            .or_else(|| self.config.udp.configured_endpoint(peer))
    }

    /// The peer a datagram from `from` comes from: the peer last heard from there
    /// or configured there, else the peer whose own address it is, else the roaming
    /// peer `sealed_by` says `payload` is sealed by (parsed only then). `None`: no
    /// peer.
    pub(crate) fn identify(
        &self,
        from: SocketAddr,
        payload: &[u8],
        sealed_by: impl Fn(IpAddr, &Packet<&[u8]>) -> bool,
    ) -> Option<IpAddr> {
        {
            let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((peer, _)) = learned.iter().find(|(_, at)| **at == from) {
                return Some(*peer);
            }
        }
        if let Some(p) = self
            .config
            .udp
            .peers
            .iter()
            .find(|p| p.endpoint == Some(from))
        {
            return Some(p.prefix.addr());
        }
        let ip = from.ip();
        if self.config.peers.is_peer(ip) && self.is_udp(ip) {
            return Some(ip);
        }
        if self.roaming.is_empty() {
            return None;
        }
        let packet = Packet::new_checked(payload).ok()?;
        self.roaming
            .iter()
            .copied()
            .find(|peer| sealed_by(*peer, &packet))
    }

    /// The peer whose packets go to `at`, for an ICMP error about one of them.
    pub(crate) fn peer_at(&self, at: SocketAddr) -> Option<IpAddr> {
        let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
        learned
            .iter()
            .find(|(_, a)| **a == at)
            .map(|(p, _)| *p)
            .or_else(|| {
                self.config
                    .udp
                    .peers
                    .iter()
                    .find(|p| p.endpoint == Some(at))
                    .map(|p| p.prefix.addr())
            })
    }

    /// Records that an authenticated packet of `peer` came from `from`; returns the
    /// endpoint it replaces when it moved. Only roaming peers move.
    pub(crate) fn heard(&self, peer: IpAddr, from: SocketAddr) -> Option<Option<SocketAddr>> {
        if !self.roaming.contains(&peer) {
            return None;
        }
        let before = self.endpoint(peer);
        if before == Some(from) {
            return None;
        }
        let mut learned = self.learned.write().unwrap_or_else(PoisonError::into_inner);
        learned.insert(peer, from);
        Some(before)
    }
}
