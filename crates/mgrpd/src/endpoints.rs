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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use mgrp_core::planner::Encap;
use mgrp_core::requester::Requester;
use mgrp_core::wire::Packet;

use crate::config::{Config, Peering};

/// Datagrams from an endpoint no peer is known at that are tried against roaming
/// peers' keys, per second at most, in all. Under `auth = 3` only a datagram whose key
/// index names a roaming peer's key is tried, with a tag check per address of this
/// host's; under 2 or 1, each costs a check per roaming peer (and key, and address),
/// so a flood of them could otherwise take the receiver whole and the known peers'
/// packets with it. Beyond, such a datagram is dropped unopened (`trials_refused`).
pub const TRIALS_PER_SECOND: u32 = 64;

/// The same, per source (an IPv4 address, an IPv6 /64): one host cannot take the
/// whole second's share.
pub const TRIALS_PER_SOURCE_PER_SECOND: u32 = 4;

/// Sources counted per second at most; beyond, new ones share the global
/// bound only.
const MAX_TRIAL_SOURCES: usize = 4096;

/// Why a datagram names no peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unknown {
    /// Its endpoint is no peer's and no roaming peer's key opens it.
    NoPeer,
    /// Its endpoint is no peer's, and this second's trials were spent.
    OverTrials,
}

/// This second's trials: (second, in all, per source).
#[derive(Debug, Default)]
struct Trials {
    second: u64,
    all: u32,
    per: HashMap<Requester, u32>,
}

impl Trials {
    /// Whether one more datagram from `from` may be tried in second `now`.
    fn take(&mut self, now: u64, from: IpAddr) -> bool {
        let from = Requester::of(from, 64);
        if self.second != now {
            self.second = now;
            self.all = 0;
            self.per.clear();
        }
        if self.all >= TRIALS_PER_SECOND {
            return false;
        }
        let full = self.per.len() >= MAX_TRIAL_SOURCES;
        match self.per.get_mut(&from) {
            Some(n) if *n >= TRIALS_PER_SOURCE_PER_SECOND => return false,
            Some(n) => *n += 1,
            None if full => {}
            None => {
                self.per.insert(from, 1);
            }
        }
        self.all += 1;
        true
    }
}

/// The endpoints of the UDP peers.
#[derive(Debug)]
pub(crate) struct Endpoints {
    /// Datagrams tried against the roaming peers' keys this second.
    trials: Mutex<Trials>,
    config: Arc<Config>,
    /// Endpoints learned from authenticated packets, by peer.
    learned: RwLock<HashMap<IpAddr, SocketAddr>>,
    /// The roaming peers, whose keys are tried on a packet from an endpoint no peer
    /// is known at.
    roaming: RwLock<Vec<IpAddr>>,
    /// Whether any peer is reached over UDP: without one, the senders' question
    /// costs a load, not a table lookup.
    any: AtomicBool,
}

impl Endpoints {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        let endpoints = Self {
            any: AtomicBool::new(false),
            config,
            learned: RwLock::default(),
            roaming: RwLock::default(),
            trials: Mutex::default(),
        };
        endpoints.reshape();
        endpoints
    }

    /// Takes the UDP peers in force after a reload: who roams, and whether any peer
    /// is reached over UDP. An endpoint learned for a peer that no longer roams is
    /// forgotten (its configured one, if any, holds).
    pub(crate) fn reshape(&self) {
        let peering = self.config.peering();
        let roaming = peering.udp.roaming();
        self.any.store(peering.encap.any_udp(), Ordering::Relaxed);
        self.learned
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|peer, _| roaming.contains(peer));
        *self.roaming.write().unwrap_or_else(PoisonError::into_inner) = roaming;
    }

    /// Whether MGRP packets to `peer` go over UDP.
    pub(crate) fn is_udp(&self, peer: IpAddr) -> bool {
        self.any.load(Ordering::Relaxed) && Self::is_udp_in(&self.config.peering(), peer)
    }

    /// Whether `peering`, once loaded, sends MGRP packets to `peer` over UDP.
    fn is_udp_in(peering: &Peering, peer: IpAddr) -> bool {
        peering.encap.for_peer(peer) == Encap::Udp
    }

    /// Where `peer`'s packets go now, if anywhere is known.
    pub(crate) fn endpoint(&self, peer: IpAddr) -> Option<SocketAddr> {
        let peering = self.config.peering();
        let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
        learned
            .get(&peer)
            .copied()
            .or_else(|| peering.udp.configured_endpoint(peer))
    }

    /// The peer a datagram from `from` comes from: the peer last heard from there
    /// or configured there, else the peer whose own address it is, else the roaming
    /// peer `roaming` finds `payload` sealed by (parsed only then), with the counter
    /// its tag gave. `roaming` asks before each round of tag checks, and is let
    /// within [`TRIALS_PER_SECOND`] and [`TRIALS_PER_SOURCE_PER_SECOND`].
    pub(crate) fn identify(
        &self,
        from: SocketAddr,
        payload: &[u8],
        roaming: impl FnOnce(&Packet<&[u8]>, &mut dyn FnMut() -> bool) -> Option<(IpAddr, u64)>,
    ) -> Result<(IpAddr, Option<u64>), Unknown> {
        let peering = self.config.peering();
        {
            let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((peer, _)) = learned.iter().find(|(_, at)| **at == from) {
                return Ok((*peer, None));
            }
        }
        if let Some(p) = peering.udp.peers.iter().find(|p| p.endpoint == Some(from)) {
            return Ok((p.prefix.addr(), None));
        }
        let ip = from.ip();
        if peering.peers.is_peer(ip) && Self::is_udp_in(&peering, ip) {
            return Ok((ip, None));
        }
        if self
            .roaming
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
        {
            return Err(Unknown::NoPeer);
        }
        let packet = Packet::new_checked(payload).map_err(|_| Unknown::NoPeer)?;
        let second = mgrp_rt::mono_now().as_nanos() / 1_000_000_000;
        let mut refused = false;
        let mut may_try = || {
            let ok = mgrp_rt::lock(&self.trials).take(second, ip);
            refused |= !ok;
            ok
        };
        match roaming(&packet, &mut may_try) {
            Some((peer, counter)) => Ok((peer, Some(counter))),
            None if refused => Err(Unknown::OverTrials),
            None => Err(Unknown::NoPeer),
        }
    }

    /// The peer whose packets go to `at`, for an ICMP error about one of them.
    pub(crate) fn peer_at(&self, at: SocketAddr) -> Option<IpAddr> {
        let peering = self.config.peering();
        let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
        learned
            .iter()
            .find(|(_, a)| **a == at)
            .map(|(p, _)| *p)
            .or_else(|| {
                peering
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
        if !self
            .roaming
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&peer)
        {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_are_bounded_per_source_and_in_all_each_second() {
        let mut t = Trials::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..TRIALS_PER_SOURCE_PER_SECOND {
            assert!(t.take(1, a));
        }
        assert!(!t.take(1, a), "one source's share of the second is spent");
        let mut others = 0;
        while t.take(1, IpAddr::from([198, 51, 100, (others % 250) as u8 + 1])) {
            others += 1;
        }
        assert_eq!(others + TRIALS_PER_SOURCE_PER_SECOND, TRIALS_PER_SECOND);
        // The next second starts afresh.
        assert!(t.take(2, a));
    }
}
