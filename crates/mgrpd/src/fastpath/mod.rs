//! Traffic that goes on unchanged, as the kernel's own super-packets.
//!
//! A TUN with offloads hands the reader TCP super-packets of up to 64 KB with a
//! virtio-net header. A raw IP socket can only send them one MTU-sized segment at a
//! time: one system call and one trip through the stack per segment. An `AF_PACKET`
//! socket with `PACKET_VNET_HDR` sends the whole super-packet as one GSO packet, which
//! a veth passes on unsegmented and a real NIC segments in hardware (or the kernel
//! segments at the last moment).
//!
//! Such a socket writes below IP, so mgrpd chooses the device and the link-layer
//! destination itself: the route the kernel would take for traffic carrying mgrpd's
//! mark, and the neighbour entry of its next hop. Those are looked up off the data
//! path (`resolve`, a task on the runtime) and kept for a few seconds. Until a
//! destination's path is known, or if its next hop has no neighbour entry yet, its
//! packets take the raw socket as before (which also makes the kernel resolve the
//! neighbour). The super-packets leave through the device's queueing discipline
//! but not through the host's IP output path: they passed the output hooks already
//! when the application's stack routed them into the TUN.
//!
//! Its parts: the path cache here ([`FastPath`]), the frames it sends and how they are
//! checked, split and checksummed (`frames`), the coalescer that puts released riders
//! back together (`coalesce`), and the netlink lookups that fill the cache (`lookup`).

mod coalesce;
mod frames;
mod lookup;

pub(crate) use coalesce::Coalescer;
pub(crate) use frames::{frame_header, split_frame};
pub(crate) use lookup::resolve;

use frames::{ETH_P_IP, ETH_P_IPV6, F_NEEDS_CSUM, largest_packet};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mgrp_core::ip;
use socket2::Socket;
use tokio::sync::mpsc;
use tracing::debug;
use tun_rs::VirtioNetHdr;

use crate::counters::{Counters, bump};
use crate::sys;

/// How long a resolved path is used before it is looked up again (it stays in use
/// while the new lookup runs).
const FRESH: Duration = Duration::from_secs(5);
/// How long a destination whose path could not be used waits before the next try.
/// Short: the usual reason is a next hop the kernel has not resolved yet, which the
/// packets sent meanwhile through the raw socket make it do.
const RETRY: Duration = Duration::from_millis(100);

/// Where a destination's super-packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkPath {
    ifindex: u32,
    /// The device's MTU: a packet, or a super-packet's segments, larger than this
    /// take the raw socket, whose IP output sends the sender "fragmentation needed".
    mtu: u32,
    /// The Ethernet header without its type (next hop's address, then the device's),
    /// or none for a device without link headers.
    ether: Option<[u8; 12]>,
}

#[derive(Debug)]
enum Entry {
    Resolving {
        since: Instant,
        old: Option<LinkPath>,
    },
    Ready {
        path: LinkPath,
        since: Instant,
    },
    Unusable {
        since: Instant,
    },
}

/// The link-layer sending side for unchanged super-packets.
#[derive(Debug)]
pub(crate) struct FastPath {
    socket: Socket,
    entries: Mutex<HashMap<IpAddr, Entry>>,
    requests: mpsc::UnboundedSender<IpAddr>,
}

/// Most destinations whose paths are kept; beyond it, all are forgotten and looked up
/// again as they are used.
const MAX_ENTRIES: usize = 4096;

impl FastPath {
    /// Opens the socket, marked `mark` like mgrpd's other sockets; `requests` goes to
    /// [`resolve`].
    pub(crate) fn new(requests: mpsc::UnboundedSender<IpAddr>, mark: u32) -> std::io::Result<Self> {
        let socket = sys::link_gso_socket()?;
        socket.set_mark(mark)?;
        Ok(Self {
            socket,
            entries: Mutex::new(HashMap::new()),
            requests,
        })
    }

    /// The path of `dst`, if it is known; asks for a lookup when it is not, or is
    /// getting old.
    pub(crate) fn path(&self, dst: IpAddr) -> Option<LinkPath> {
        let now = Instant::now();
        let mut entries = mgrp_rt::lock(&self.entries);
        let (current, ask) = match entries.get(&dst) {
            Some(Entry::Ready { path, since }) => (Some(*path), now.duration_since(*since) > FRESH),
            Some(Entry::Resolving { since, old }) => {
                // A lookup that never came back is asked for again.
                (*old, now.duration_since(*since) > FRESH)
            }
            Some(Entry::Unusable { since }) => (None, now.duration_since(*since) > RETRY),
            None => (None, true),
        };
        if ask {
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(
                dst,
                Entry::Resolving {
                    since: now,
                    old: current,
                },
            );
            let _ = self.requests.send(dst);
        }
        current
    }

    fn settle(&self, dst: IpAddr, path: Option<LinkPath>) {
        let since = Instant::now();
        let entry = match path {
            Some(path) => Entry::Ready { path, since },
            None => Entry::Unusable { since },
        };
        mgrp_rt::lock(&self.entries).insert(dst, entry);
    }

    /// Forgets `dst`'s path after a send through it failed.
    pub(crate) fn forget(&self, dst: IpAddr) {
        self.settle(dst, None);
    }

    /// Sends a frame of `segments` packets whole along `dst`'s known path and counts
    /// it: the packets as sent unchanged, the frame as a super-packet if it is one.
    /// Returns false, having sent nothing, when no path is known or the send failed
    /// (the path is then forgotten and looked up again); the caller sends the packets
    /// another way.
    pub(crate) fn send_counted(
        &self,
        dst: IpAddr,
        hdr: &VirtioNetHdr,
        packet: &[u8],
        segments: u64,
        counters: &Counters,
    ) -> bool {
        let Some(path) = self.path(dst) else {
            return false;
        };
        if let Err(e) = self.send(&path, hdr, packet) {
            self.forget(dst);
            bump(&counters.link_send_errors);
            debug!("sending a frame to {dst} whole failed: {e}");
            return false;
        }
        counters
            .unchanged_sent
            .fetch_add(segments, std::sync::atomic::Ordering::Relaxed);
        if segments > 1 {
            bump(&counters.super_packets_sent);
        }
        true
    }

    /// Sends an IP packet (a super-packet or a plain one) with the virtio-net header
    /// it was read with from the TUN, along `path`. Refuses (without sending) what
    /// would exceed the device's MTU.
    pub(crate) fn send(
        &self,
        path: &LinkPath,
        hdr: &VirtioNetHdr,
        packet: &[u8],
    ) -> std::io::Result<usize> {
        let largest = largest_packet(hdr, packet);
        if largest > path.mtu as usize {
            return Err(std::io::Error::other(format!(
                "packets of {largest} bytes exceed the device's MTU of {}",
                path.mtu
            )));
        }
        let v6 = ip::version(packet) == Some(6);
        // The TUN's offsets count from the IP header; the socket's from the link
        // header the kernel puts in front.
        let ethertype = if v6 { ETH_P_IPV6 } else { ETH_P_IP };
        let mut link = [0u8; 14];
        let link: &[u8] = match path.ether {
            Some(addresses) => {
                link[..12].copy_from_slice(&addresses);
                link[12..].copy_from_slice(&ethertype.to_be_bytes());
                &link
            }
            None => &[],
        };
        let extra = link.len() as u16;
        let shifted = |x: u16| {
            x.checked_add(extra)
                .ok_or_else(|| std::io::Error::other("virtio-net header offsets overflow"))
        };
        let mut h = *hdr;
        if h.flags & F_NEEDS_CSUM != 0 {
            h.csum_start = shifted(h.csum_start)?;
        }
        if h.hdr_len != 0 {
            h.hdr_len = shifted(h.hdr_len)?;
        }
        // The kernel reads the fields in the host's byte order, as the TUN writes them.
        let mut raw = [0u8; tun_rs::VIRTIO_NET_HDR_LEN];
        h.encode(&mut raw)?;
        sys::send_link(&self.socket, path.ifindex, ethertype, &raw, link, packet)
    }
}
