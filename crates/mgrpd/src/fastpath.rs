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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use mgrp_core::ip;
use rtnetlink::RouteMessageBuilder;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::link::{LinkAttribute, LinkLayerType};
use rtnetlink::packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourState};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteVia};
use socket2::Socket;
use tokio::sync::mpsc;
use tracing::{debug, info};
use tun_rs::VirtioNetHdr;

use crate::counters::{Counters, bump};
use crate::net::Net;
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
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
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
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(dst, entry);
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

/// The MTU-sized packets a frame stands for, from [`split_frame`].
#[derive(Debug)]
pub(crate) struct Packets<'a> {
    whole: Option<&'a [u8]>,
    bufs: &'a [Vec<u8>],
    sizes: &'a [usize],
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if let Some(p) = self.whole.take() {
            return Some(p);
        }
        let ((b, bufs), (&n, sizes)) = (self.bufs.split_first()?, self.sizes.split_first()?);
        (self.bufs, self.sizes) = (bufs, sizes);
        Some(&b[..n])
    }
}

/// Cuts a frame checked by [`frame_header`] into the packets it stands for, to send
/// through a socket that does no offloads: the packet itself, its checksum completed
/// if the header asks for that, or its segments, split into `bufs`.
pub(crate) fn split_frame<'a>(
    hdr: VirtioNetHdr,
    packet: &'a mut [u8],
    bufs: &'a mut [Vec<u8>],
    sizes: &'a mut [usize],
) -> std::io::Result<Packets<'a>> {
    if hdr.gso_type == GSO_NONE {
        if hdr.flags & F_NEEDS_CSUM != 0 {
            complete_checksum(packet, hdr.csum_start, hdr.csum_offset);
        }
        return Ok(Packets {
            whole: Some(packet),
            bufs: &[],
            sizes: &[],
        });
    }
    let v6 = ip::version(packet) == Some(6);
    let k = tun_rs::gso_split(packet, hdr, bufs, sizes, 0, v6)?;
    Ok(Packets {
        whole: None,
        bufs: &bufs[..k],
        sizes: &sizes[..k],
    })
}

/// The largest packet a frame leaves as: itself, or its largest segment.
fn largest_packet(hdr: &VirtioNetHdr, packet: &[u8]) -> usize {
    if hdr.gso_type == GSO_NONE {
        packet.len()
    } else {
        usize::from(hdr.hdr_len) + usize::from(hdr.gso_size)
    }
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_UDP_L4: u8 = 5;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;
const F_NEEDS_CSUM: u8 = 1;

/// Checks a frame's virtio-net header against its packet, the way the TUN's own
/// readers do (the kernel's `hdr_len` is not to be trusted: recomputed from the
/// transport header), and says how many MTU-sized packets it stands for.
pub(crate) fn frame_header(
    mut hdr: VirtioNetHdr,
    packet: &[u8],
) -> Result<(VirtioNetHdr, u64), String> {
    let len = packet.len();
    if hdr.flags & F_NEEDS_CSUM != 0 {
        let at = usize::from(hdr.csum_start) + usize::from(hdr.csum_offset);
        if at + 2 > len {
            return Err("checksum field beyond the packet".into());
        }
    }
    if hdr.gso_type == GSO_NONE {
        return Ok((hdr, 1));
    }
    if hdr.gso_size == 0 {
        return Err("GSO frame with a segment size of 0".into());
    }
    let v6 = match ip::version(packet) {
        Some(4) => false,
        Some(_) => true,
        None => return Err("GSO frame that is not IP".into()),
    };
    let transport_len = match (hdr.gso_type & !GSO_ECN, v6) {
        (GSO_TCPV4, false) | (GSO_TCPV6, true) => {
            let off = usize::from(hdr.csum_start) + 12;
            let tcp = usize::from(*packet.get(off).ok_or("GSO frame too short")? >> 4) * 4;
            if !(20..=60).contains(&tcp) {
                return Err(format!("TCP header length {tcp}"));
            }
            tcp
        }
        (GSO_UDP_L4, _) if hdr.gso_type & GSO_ECN == 0 => 8,
        (t, _) => return Err(format!("GSO type {t:#x} for IPv{}", if v6 { 6 } else { 4 })),
    };
    let hdr_len = usize::from(hdr.csum_start) + transport_len;
    if hdr_len > len {
        return Err("GSO headers longer than the frame".into());
    }
    hdr.hdr_len = hdr_len as u16;
    let payload = (len - hdr_len) as u64;
    let segments = payload.div_ceil(u64::from(hdr.gso_size)).max(1);
    Ok((hdr, segments))
}

/// Completes the checksum of a packet whose header asks for it, for sending it
/// through a socket that will not.
fn complete_checksum(packet: &mut [u8], start: u16, offset: u16) {
    let at = usize::from(start) + usize::from(offset);
    let initial = u16::from_be_bytes([packet[at], packet[at + 1]]);
    packet[at] = 0;
    packet[at + 1] = 0;
    let sum = !tun_rs::checksum(&packet[usize::from(start)..], u64::from(initial));
    packet[at..at + 2].copy_from_slice(&sum.to_be_bytes());
}

/// Packets that go on unchanged one by one (riders released by the planners), put
/// back together into super-packets before they leave: consecutive TCP segments of
/// one flow in a batch become one GSO packet (the coalescing a TUN's own writer does,
/// `tun_rs::handle_gro`), which then leaves like a super-packet read from the TUN.
#[derive(Debug)]
pub(crate) struct Coalescer {
    fast: std::sync::Arc<FastPath>,
    /// Each packet after room for its virtio-net header.
    bufs: Vec<Vec<u8>>,
    len: usize,
    to_write: Vec<usize>,
    split: Vec<Vec<u8>>,
    sizes: Vec<usize>,
}

/// Packets coalesced at most at once.
const BATCH: usize = 64;
/// Room of each batch buffer: a packet coalesces only into a buffer with room for
/// the whole super-packet.
const ROOM: usize = tun_rs::VIRTIO_NET_HDR_LEN + 65_535;

impl Coalescer {
    pub(crate) fn new(fast: std::sync::Arc<FastPath>, mtu: u16) -> Self {
        // Split packets are at most an MTU.
        let room = tun_rs::VIRTIO_NET_HDR_LEN + usize::from(mtu) + 64;
        Self {
            fast,
            bufs: (0..BATCH).map(|_| Vec::with_capacity(ROOM)).collect(),
            len: 0,
            to_write: Vec::with_capacity(BATCH),
            split: vec![vec![0u8; room]; BATCH],
            sizes: vec![0; BATCH],
        }
    }

    /// Adds a packet; sends the batch first if it is full.
    pub(crate) fn push(&mut self, packet: &[u8], net: &Net, counters: &Counters) {
        if packet.len() < 20 {
            // Not an IP packet anyone could coalesce; it must not make the batch fail.
            net.send_unchanged(packet);
            return;
        }
        if self.len == BATCH {
            self.flush(net, counters);
        }
        let b = &mut self.bufs[self.len];
        b.clear();
        b.resize(tun_rs::VIRTIO_NET_HDR_LEN, 0);
        b.extend_from_slice(packet);
        self.len += 1;
    }

    /// Coalesces and sends what is batched. Each packet is counted once, in
    /// `unchanged_sent` or `unchanged_send_errors`, whether it left inside a
    /// super-packet or alone.
    pub(crate) fn flush(&mut self, net: &Net, counters: &Counters) {
        let n = std::mem::take(&mut self.len);
        if n == 0 {
            return;
        }
        self.to_write.clear();
        let bufs = &mut self.bufs[..n];
        // Fresh tables each time: their entries point into this batch.
        let coalesced = tun_rs::handle_gro(
            bufs,
            tun_rs::VIRTIO_NET_HDR_LEN,
            &mut Default::default(),
            &mut Default::default(),
            false,
            &mut self.to_write,
        );
        if let Err(e) = coalesced {
            // Some buffers may be merged already: resending them could duplicate
            // riders, so the batch counts as failed.
            debug!("coalescing {n} packets failed ({e}); they are dropped");
            counters
                .unchanged_send_errors
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        for &i in &self.to_write {
            let (head, packet) = bufs[i].split_at_mut(tun_rs::VIRTIO_NET_HDR_LEN);
            let checked = VirtioNetHdr::decode(head)
                .map_err(|e| e.to_string())
                .and_then(|h| frame_header(h, packet));
            let Ok((hdr, segments)) = checked else {
                net.send_unchanged(packet);
                continue;
            };
            if ip::destination(packet).is_some_and(|dst| {
                self.fast
                    .send_counted(dst, &hdr, packet, segments, counters)
            }) {
                continue;
            }
            // Apart again, through the raw socket.
            match split_frame(hdr, packet, &mut self.split, &mut self.sizes) {
                Ok(packets) => packets.for_each(|p| net.send_unchanged(p)),
                Err(e) => {
                    debug!("splitting a coalesced packet failed: {e}");
                    counters
                        .unchanged_send_errors
                        .fetch_add(segments, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }
}

/// Looks up the paths the data path asks for, until the daemon stops: the route the
/// kernel takes for `dst` with mgrpd's mark, the device's link type, and its next
/// hop's neighbour entry.
pub(crate) async fn resolve(
    fast: std::sync::Arc<FastPath>,
    mut requests: mpsc::UnboundedReceiver<IpAddr>,
    mark: u32,
) {
    let handle = match rtnetlink::new_connection() {
        Ok((conn, handle, _)) => {
            tokio::spawn(conn);
            handle
        }
        Err(e) => {
            info!("no netlink for the super-packet path ({e}); unchanged packets go one by one");
            return;
        }
    };
    while let Some(dst) = requests.recv().await {
        let path = match lookup(&handle, dst, mark).await {
            Ok(p) => p,
            Err(e) => {
                debug!("no link path to {dst}: {e}");
                None
            }
        };
        debug!("link path to {dst}: {path:?}");
        fast.settle(dst, path);
    }
}

async fn lookup(
    handle: &rtnetlink::Handle,
    dst: IpAddr,
    mark: u32,
) -> Result<Option<LinkPath>, rtnetlink::Error> {
    let msg = match dst {
        IpAddr::V4(a) => RouteMessageBuilder::<std::net::Ipv4Addr>::new()
            .destination_prefix(a, 32)
            .mark(mark)
            .build(),
        IpAddr::V6(a) => RouteMessageBuilder::<std::net::Ipv6Addr>::new()
            .destination_prefix(a, 128)
            .mark(mark)
            .build(),
    };
    let Some(route) = handle.route().get(msg).execute().try_next().await? else {
        return Ok(None);
    };
    let mut oif = None;
    let mut next_hop = dst;
    for a in &route.attributes {
        match a {
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Gateway(RouteAddress::Inet(g)) => next_hop = IpAddr::V4(*g),
            RouteAttribute::Gateway(RouteAddress::Inet6(g)) => next_hop = IpAddr::V6(*g),
            RouteAttribute::Via(RouteVia::Inet(g)) => next_hop = IpAddr::V4(*g),
            RouteAttribute::Via(RouteVia::Inet6(g)) => next_hop = IpAddr::V6(*g),
            _ => {}
        }
    }
    let Some(ifindex) = oif else { return Ok(None) };
    let Some(link) = handle
        .link()
        .get()
        .match_index(ifindex)
        .execute()
        .try_next()
        .await?
    else {
        return Ok(None);
    };
    let Some(mtu) = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Mtu(m) => Some(*m),
        _ => None,
    }) else {
        return Ok(None);
    };
    let own = match link.header.link_layer_type {
        LinkLayerType::Ether => link.attributes.iter().find_map(|a| match a {
            LinkAttribute::Address(m) if m.len() == 6 => Some([m[0], m[1], m[2], m[3], m[4], m[5]]),
            _ => None,
        }),
        // Devices without link headers (tunnels, TUN): no address to find.
        LinkLayerType::None => {
            return Ok(Some(LinkPath {
                ifindex,
                mtu,
                ether: None,
            }));
        }
        // Anything else keeps the raw socket.
        _ => return Ok(None),
    };
    let Some(own) = own else { return Ok(None) };
    let family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let mut neighbours = handle
        .neighbours()
        .get()
        .set_address_family(family)
        .execute();
    while let Some(n) = neighbours.try_next().await? {
        if n.header.ifindex != ifindex {
            continue;
        }
        let usable = !matches!(
            n.header.state,
            NeighbourState::Incomplete | NeighbourState::Failed | NeighbourState::None
        );
        let mut ip = None;
        let mut mac = None;
        for a in &n.attributes {
            match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(x)) => {
                    ip = Some(IpAddr::V4(*x));
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(x)) => {
                    ip = Some(IpAddr::V6(*x));
                }
                NeighbourAttribute::LinkLayerAddress(l) if l.len() == 6 => {
                    mac = Some([l[0], l[1], l[2], l[3], l[4], l[5]]);
                }
                _ => {}
            }
        }
        if usable && ip == Some(next_hop) {
            if let Some(mac) = mac {
                let mut ether = [0u8; 12];
                ether[..6].copy_from_slice(&mac);
                ether[6..].copy_from_slice(&own);
                return Ok(Some(LinkPath {
                    ifindex,
                    mtu,
                    ether: Some(ether),
                }));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4(payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x45;
        p[9] = 6;
        p[20 + 12] = 0x50; // data offset: 5 words
        p
    }

    fn gso(gso_type: u8, gso_size: u16) -> VirtioNetHdr {
        VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            hdr_len: 9999,
            gso_size,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn frames_count_as_their_segments_and_bad_headers_are_refused() {
        // 3000 bytes of payload at 1448 a segment: 3 segments; hdr_len recomputed.
        let (h, n) = frame_header(gso(GSO_TCPV4, 1448), &tcp4(3000)).unwrap();
        assert_eq!((h.hdr_len, n), (40, 3));
        let (_, n) = frame_header(gso(GSO_TCPV4, 1000), &tcp4(3000)).unwrap();
        assert_eq!(n, 3);
        // Not a GSO frame: one packet, whatever its size.
        let (_, n) = frame_header(gso(GSO_NONE, 0), &tcp4(100)).unwrap();
        assert_eq!(n, 1);
        assert!(frame_header(gso(GSO_TCPV4, 0), &tcp4(3000)).is_err());
        assert!(frame_header(gso(GSO_TCPV6, 1448), &tcp4(3000)).is_err());
        let mut bad = tcp4(3000);
        bad[32] = 0x10; // a 4-byte TCP header
        assert!(frame_header(gso(GSO_TCPV4, 1448), &bad).is_err());
        // The checksum field must lie inside the packet.
        assert!(frame_header(gso(GSO_NONE, 0), &tcp4(0)[..30]).is_err());
    }

    #[test]
    fn the_largest_packet_of_a_super_packet_is_one_segment() {
        let (h, _) = frame_header(gso(GSO_TCPV4, 1448), &tcp4(30_000)).unwrap();
        assert_eq!(largest_packet(&h, &tcp4(30_000)), 1488);
        let (h, _) = frame_header(gso(GSO_NONE, 0), &tcp4(1000)).unwrap();
        assert_eq!(largest_packet(&h, &tcp4(1000)), 1040);
    }

    #[test]
    fn frames_split_into_the_packets_they_stand_for() {
        let mut bufs = vec![vec![0u8; 1600]; 8];
        let mut sizes = vec![0; 8];
        let mut frame = tcp4(3000);
        let (h, n) = frame_header(gso(GSO_TCPV4, 1448), &frame).unwrap();
        let lens: Vec<usize> = split_frame(h, &mut frame, &mut bufs, &mut sizes)
            .unwrap()
            .map(<[u8]>::len)
            .collect();
        assert_eq!(lens, [1488, 1488, 144]);
        assert_eq!(lens.len() as u64, n);
        // A plain frame is itself, its checksum completed.
        let mut frame = tcp4(13);
        let (h, _) = frame_header(gso(GSO_NONE, 0), &frame).unwrap();
        let one: Vec<Vec<u8>> = split_frame(h, &mut frame, &mut bufs, &mut sizes)
            .unwrap()
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(one.len(), 1);
        assert_eq!(tun_rs::checksum(&one[0][20..], 0), 0xffff);
    }

    #[test]
    fn a_completed_checksum_verifies() {
        let mut p = tcp4(13);
        p[40..].copy_from_slice(b"hello, riders");
        complete_checksum(&mut p, 20, 16);
        // Summing over the segment, checksum included, gives all ones.
        assert_eq!(tun_rs::checksum(&p[20..], 0), 0xffff);
    }
}
