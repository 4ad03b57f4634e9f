//! The TUN reader: application packets routed into the tunnel, handed in batches to
//! the pacer through its lock-free queue, or sent on at once when nothing would hold
//! them (on-demand hold while no train is queued anywhere, a peer that is down, a
//! pacer that is behind).

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use mgrp_core::ip;
use tracing::warn;
use tun_rs::{SyncDevice, VIRTIO_NET_HDR_LEN, VirtioNetHdr};

use crate::config::Config;
use crate::counters::{Counters, bump};
use crate::exchange::{Queues, RiderBatch};
use crate::fastpath::{FastPath, frame_header, split_frame};
use crate::lifecycle::Lifecycle;
use crate::liveness::PeerHealth;
use crate::net::{Net, TunnelBatch};

/// Whether a packet read from the TUN is kernel housekeeping rather than traffic to a
/// peer (multicast, link-local, unspecified).
fn is_housekeeping(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.is_unspecified(),
        IpAddr::V6(a) => {
            a.is_multicast() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// What the TUN reader uses.
#[derive(Debug, Clone)]
pub(crate) struct TunReader {
    pub(crate) config: Arc<Config>,
    pub(crate) queues: Arc<Queues>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) net: Arc<Net>,
    pub(crate) health: Arc<PeerHealth>,
    pub(crate) life: Arc<Lifecycle>,
    /// Where unchanged super-packets leave whole, if it could be set up.
    pub(crate) fast: Option<Arc<FastPath>>,
    /// For a next-hop device: the device read instead of the TUN, and the peer that
    /// gets all of its packets.
    pub(crate) next_hop: Option<NextHop>,
}

/// A next-hop device and its peer.
#[derive(Clone)]
pub(crate) struct NextHop {
    pub(crate) device: Arc<SyncDevice>,
    pub(crate) peer: IpAddr,
}

impl std::fmt::Debug for NextHop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NextHop({})", self.peer)
    }
}

impl TunReader {
    /// The TUN reader thread (does nothing when the data path loops back). With TUN
    /// offloads one read returns a TCP super-packet, split here into its segments: one
    /// system call for up to 64 KB of traffic.
    pub(crate) fn run(&self) {
        let tun = match &self.next_hop {
            Some(hop) => &hop.device,
            None => match self.net.tun() {
                Some(tun) => tun,
                None => return,
            },
        };
        let vnet = self.config.tun_offload;
        let mut original = vec![0u8; VIRTIO_NET_HDR_LEN + 65_535];
        let seg = usize::from(self.config.mtu) + 64;
        let mut bufs = vec![vec![0u8; seg]; tun_rs::IDEAL_BATCH_SIZE];
        let mut sizes = vec![0usize; tun_rs::IDEAL_BATCH_SIZE];
        loop {
            let n = match tun.recv(&mut original) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if self.life.is_stopping() {
                        return;
                    }
                    if e.raw_os_error().is_some() {
                        // Traffic routed into a TUN nobody reads would be black-holed:
                        // better to stop, which takes the TUN and its routes away.
                        self.life.fatal(format!("reading the TUN failed: {e}"));
                        return;
                    }
                    // A malformed frame from the kernel costs that frame, not the reader.
                    bump(&self.counters.tun_frames_dropped);
                    warn!("dropped a TUN frame: {e}");
                    continue;
                }
            };
            if !vnet {
                self.handle_packets(std::iter::once(&original[..n]));
                continue;
            }
            let Some((head, packet)) = original[..n]
                .split_at_mut_checked(VIRTIO_NET_HDR_LEN)
                .filter(|(_, p)| !p.is_empty())
            else {
                bump(&self.counters.tun_frames_dropped);
                warn!("dropped a TUN frame of {n} bytes: shorter than its virtio-net header");
                continue;
            };
            let checked = VirtioNetHdr::decode(head)
                .map_err(|e| e.to_string())
                .and_then(|h| frame_header(h, packet));
            let (hdr, segments) = match checked {
                Ok(x) => x,
                Err(e) => {
                    // A malformed frame from the kernel costs that frame, not the reader.
                    bump(&self.counters.tun_frames_dropped);
                    warn!("dropped a TUN frame: {e}");
                    continue;
                }
            };
            if self.send_whole(&hdr, packet, segments) {
                continue;
            }
            match split_frame(hdr, packet, &mut bufs, &mut sizes) {
                Ok(packets) => self.handle_packets(packets),
                Err(e) => {
                    bump(&self.counters.tun_frames_dropped);
                    warn!("dropped a TUN frame that could not be split: {e}");
                }
            }
        }
    }

    /// Sends a frame on whole, as one super-packet, if it goes on unchanged (nothing
    /// would hold it) and its destination's link path is known; counts it as the
    /// `segments` packets it stands for. Returns whether it was sent.
    fn send_whole(&self, hdr: &VirtioNetHdr, packet: &[u8], segments: u64) -> bool {
        let Some(fast) = &self.fast else { return false };
        // A next-hop device's packets go wrapped to its peer, never on their own way.
        if self.next_hop.is_some() {
            return false;
        }
        let Some(dst) = ip::destination(packet).filter(|d| !is_housekeeping(*d)) else {
            return false;
        };
        let peer = self.config.peer_of(dst);
        // A UDP peer takes only MGRP: its packets go in continuations, segment by
        // segment.
        if self.net.endpoints().is_udp(peer) {
            return false;
        }
        let down = self.health.down(mgrp_rt::mono_now()).contains(&peer);
        let direct = !self.queues.riders_wanted() || self.life.is_stopping();
        if !down && !direct {
            return false;
        }
        if !fast.send_counted(dst, hdr, packet, segments, &self.counters) {
            return false;
        }
        let c = &self.counters;
        // Every segment carries the headers the super-packet has once.
        let bytes = packet.len() as u64 + segments.saturating_sub(1) * u64::from(hdr.hdr_len);
        c.traffic.add(mgrp_rt::mono_now(), peer, segments, bytes);
        let add = |x: &std::sync::atomic::AtomicU64| {
            x.fetch_add(segments, std::sync::atomic::Ordering::Relaxed);
        };
        add(&c.tun_packets_in);
        add(if down {
            &c.riders_bypassed_peer_down
        } else {
            &c.riders_sent_direct
        });
        true
    }

    /// Sends a packet that rides no probe on to `peer`: as it came (or wrapped, for a
    /// UDP peer or a packet bound beyond the peer); from a next-hop device always
    /// wrapped, so that it crosses the peer's daemon even when addressed to the peer
    /// itself (the overlay's heartbeats test the relay that way).
    fn send_on(&self, tunnel: &mut TunnelBatch, peer: IpAddr, pkt: &[u8]) {
        if self.next_hop.is_some() {
            self.net.tunnel_batched(tunnel, peer, pkt);
        } else {
            self.net.send_unchanged_batched(tunnel, peer, pkt);
        }
    }

    /// Takes in a batch of packets read from the TUN: queues them for the pacer, or
    /// sends them on.
    pub(crate) fn handle_packets<'a>(&self, pkts: impl Iterator<Item = &'a [u8]>) {
        let now = mgrp_rt::mono_now();
        let down = self.health.down(now);
        let c = &*self.counters;
        // With on-demand hold and no train anywhere the pacer would release them at
        // once; after shutdown it takes none.
        let direct = !self.queues.riders_wanted() || self.life.is_stopping();
        // The peers in force, loaded once for the batch.
        let peering = self.config.peering();
        let mut riders = Vec::new();
        // Packets in a row for one peer are metered together (one lock), without
        // allocating.
        let mut metered: Option<(IpAddr, u64, u64)> = None;
        // Packets in a row for one UDP peer leave together.
        let mut tunnel = TunnelBatch::default();
        for pkt in pkts {
            bump(&c.tun_packets_in);
            let Some(dst) = ip::destination(pkt).filter(|d| !is_housekeeping(*d)) else {
                bump(&c.tun_ignored);
                continue;
            };
            let peer = match &self.next_hop {
                Some(hop) => hop.peer,
                None => peering.peer_of(dst),
            };
            let len = pkt.len() as u64;
            match &mut metered {
                Some((p, n, bytes)) if *p == peer => {
                    *n += 1;
                    *bytes += len;
                }
                _ => {
                    if let Some((p, n, bytes)) = metered.replace((peer, 1, len)) {
                        c.traffic.add(now, p, n, bytes);
                    }
                }
            }
            if down.contains(&peer) {
                // Its probes are dropped on arrival: riders would be lost with them.
                bump(&c.riders_bypassed_peer_down);
                self.send_on(&mut tunnel, peer, pkt);
                continue;
            }
            if direct {
                bump(&c.riders_sent_direct);
                self.send_on(&mut tunnel, peer, pkt);
                continue;
            }
            // Owned by a counted handle from the start: the pacer clones riders it puts
            // into a probe, and a clone of this is a count, not an allocation.
            riders.push((peer, Bytes::from_owner(pkt.to_vec())));
        }
        if let Some((p, n, bytes)) = metered {
            c.traffic.add(now, p, n, bytes);
        }
        if !riders.is_empty()
            && let Err(batch) = self.queues.push_riders(RiderBatch { at: now, riders })
        {
            // The pacer is behind: these go as they came rather than wait or be
            // lost.
            for (peer, data) in batch.riders {
                bump(&c.riders_bypassed_pacer_busy);
                self.send_on(&mut tunnel, peer, &data);
            }
        }
        self.net.flush_tunnel(&mut tunnel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn housekeeping_destinations() {
        for a in [
            "ff02::2",
            "fe80::1",
            "224.0.0.22",
            "255.255.255.255",
            "0.0.0.0",
        ] {
            assert!(is_housekeeping(a.parse().unwrap()), "{a}");
        }
        for a in ["10.0.0.2", "fd77::2", "2001:db8::1"] {
            assert!(!is_housekeeping(a.parse().unwrap()), "{a}");
        }
    }
}
