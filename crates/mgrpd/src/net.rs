//! The daemon's sockets and how packets leave through them: probes (pacer thread),
//! continuations and riders sent unchanged (dispatcher, TUN reader), riders
//! written into the TUN (receivers). The loopback data path hands what it sends to
//! a sink the loopback receiver drains instead.

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;

use mgrp_core::WallTime;
use mgrp_core::ip;
use mgrp_core::planner::Transmit;
use mgrp_core::wire;
use socket2::{SockAddr, Socket};
use tracing::{debug, warn};
use tun_rs::SyncDevice;

use crate::config::Config;
use crate::counters::{Counters, bump};
use crate::endpoints::Endpoints;
use crate::keyring::Keyring;
use crate::sent::SentLog;
use crate::sys;

/// Where a receiver writes riders.
#[derive(Clone)]
pub(crate) enum TunWriter {
    Kernel {
        tun: Arc<SyncDevice>,
        /// Whether TUN frames carry a virtio-net header (offloads on).
        vnet: bool,
    },
    /// The loopback data path writes riders nowhere.
    Nowhere,
}

impl std::fmt::Debug for TunWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kernel { vnet, .. } => f.debug_struct("Kernel").field("vnet", vnet).finish(),
            Self::Nowhere => f.write_str("Nowhere"),
        }
    }
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kernel { v6, .. } => f
                .debug_struct("Kernel")
                .field("ipv6", &v6.is_some())
                .finish_non_exhaustive(),
            Self::Loopback(_) => f.write_str("Loopback"),
        }
    }
}

impl TunWriter {
    pub(crate) fn write(&self, rider: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Kernel { tun, vnet: false } => tun.send(rider),
            Self::Kernel { tun, vnet: true } => {
                // With offloads every frame starts with a virtio-net header; all zeros
                // says: no segmentation, checksum already complete. Written with the
                // rider in one writev, so the rider is not copied.
                const NO_OFFLOAD: [u8; tun_rs::VIRTIO_NET_HDR_LEN] =
                    [0; tun_rs::VIRTIO_NET_HDR_LEN];
                let frame = [
                    std::io::IoSlice::new(&NO_OFFLOAD),
                    std::io::IoSlice::new(rider),
                ];
                tun.send_vectored(&frame)
                    .map(|n| n.saturating_sub(tun_rs::VIRTIO_NET_HDR_LEN))
            }
            Self::Nowhere => Ok(rider.len()),
        }
    }
}

/// The sending sockets of one address family.
#[derive(Debug)]
struct Family {
    /// Probes leave through this, and only probes: with kernel transmit stamps on,
    /// each stamp's id names its probe.
    probe: Socket,
    /// Continuations leave through this.
    mgrp: Socket,
    /// Riders sent unchanged (they bring their own IP header).
    raw: Socket,
    /// Everything to and from UDP peers, when there are any: probes ask for their
    /// transmit stamps one by one, so nothing else it sends is stamped.
    udp: Option<Socket>,
}

impl Family {
    fn open(config: &Config, v6: bool) -> std::io::Result<Self> {
        let (protocol, mark) = (config.protocol, config.fwmark);
        Ok(Self {
            probe: sys::mgrp_send_socket(v6, protocol, mark)?,
            mgrp: sys::mgrp_send_socket(v6, protocol, mark)?,
            raw: sys::raw_ip_socket(v6, mark)?,
            udp: None,
        })
    }
}

/// How long a UDP receiver waits for a datagram before it looks for shutdown.
const UDP_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// Where the data path's packets go.
enum Io {
    /// The real thing: a TUN device and raw sockets.
    Kernel {
        tun: Arc<SyncDevice>,
        v4: Family,
        v6: Option<Family>,
    },
    /// In-process: MGRP packets sent are received at once by this same daemon, as if
    /// from the peer they were sent to; riders are counted instead of written to a
    /// TUN. Runs without privileges, for testing the API and the pipeline end to end.
    Loopback(mpsc::Sender<Looped>),
}

/// An MGRP packet the loopback data path sent, as the loopback receiver takes it in.
#[derive(Debug)]
pub(crate) struct Looped {
    /// The peer it was sent to, and as whose packet it is received, so that each
    /// peer's riders keep their own ids apart in reassembly.
    pub(crate) peer: IpAddr,
    pub(crate) packet: Vec<u8>,
    /// Its length with the IP header it would have had.
    pub(crate) ip_len: usize,
    /// When it was sent: its receive stamp.
    pub(crate) at: WallTime,
}

/// Where the loopback receiver takes in what the loopback data path sent; it ends
/// once the data path is gone.
pub(crate) type LoopbackSource = mpsc::Receiver<Looped>;

/// The daemon's sending side.
#[derive(Debug)]
pub(crate) struct Net {
    io: Io,
    /// Whether probes get kernel transmit stamps.
    kernel_stamps: bool,
    /// Seals packets for peers with a key.
    pub(crate) keyring: Arc<Keyring>,
    counters: Arc<Counters>,
    config: Arc<Config>,
    /// Where the UDP peers are.
    endpoints: Arc<Endpoints>,
    /// The id of the next rider sent whole in continuations (its top bit is set).
    tunnel_ids: AtomicU32,
    /// Set once the kernel has refused a segmented UDP send: batches go one datagram
    /// at a time from then on.
    no_udp_segmentation: std::sync::atomic::AtomicBool,
    /// What MGRP packets went where lately, for telling an ICMP error about one of
    /// them from a forged one.
    sent: SentLog,
}

/// The transmit-stamp id of probe `seq` of train `transaction`: unique among the
/// probes of the last 65,536 trains.
pub(crate) fn tx_id(transaction: u32, seq: u16) -> u32 {
    (transaction << 16) | u32::from(seq)
}

impl Net {
    /// Opens the sockets the data path needs.
    pub(crate) fn open(
        config: &Arc<Config>,
        tun: Arc<SyncDevice>,
        counters: Arc<Counters>,
    ) -> anyhow::Result<Self> {
        let peering = config.peering();
        let mut v4 = Family::open(config, false).map_err(|e| {
            anyhow::anyhow!(
                "cannot open raw IPv4 sockets for protocol {}: {e}; run mgrpd as root (it needs CAP_NET_RAW)",
                config.protocol
            )
        })?;
        let mut v6 = Family::open(config, true).ok();
        if peering.encap.any_udp() {
            let port = peering.udp.port;
            v4.udp = Some(
                sys::udp_socket(false, port, config.fwmark, UDP_READ_TIMEOUT).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot open UDP port {port} for MGRP: {e}; is another mgrpd or program using it? choose another with --encap udp:PORT (and tell the peers)"
                    )
                })?,
            );
            if let Some(f) = v6.as_mut() {
                match sys::udp_socket(true, port, config.fwmark, UDP_READ_TIMEOUT) {
                    Ok(s) => f.udp = Some(s),
                    Err(e) => warn!(
                        "no IPv6 UDP socket on port {port} ({e}); IPv6 UDP peers cannot be reached"
                    ),
                }
            }
        }
        let tx_ids = config.kernel_departures && sys::kernel_takes_tx_ids();
        if config.kernel_departures && !tx_ids {
            warn!(
                "this kernel cannot name transmit stamps per send (SCM_TS_OPT_ID, Linux 6.13): reports carry the daemon's departure stamps only"
            );
        }
        let kernel_stamps = tx_ids
            && std::iter::once(&v4)
                .chain(&v6)
                .try_for_each(|f| {
                    sys::enable_tx_stamps(&f.probe)?;
                    f.udp.iter().try_for_each(sys::enable_tx_stamp_reports)
                })
                .map_err(|e| {
                    warn!("cannot enable kernel transmit stamps: {e}; reports carry the daemon's stamps only");
                })
                .is_ok();
        Ok(Self::with_io(
            Io::Kernel { tun, v4, v6 },
            kernel_stamps,
            config,
            counters,
        ))
    }

    /// The data path over `io`, with its keyring and endpoints.
    fn with_io(io: Io, kernel_stamps: bool, config: &Arc<Config>, counters: Arc<Counters>) -> Self {
        let endpoints = Arc::new(Endpoints::new(config.clone()));
        Self {
            io,
            kernel_stamps,
            keyring: Arc::new(Keyring::new(
                config.clone(),
                endpoints.clone(),
                counters.clone(),
            )),
            counters,
            config: config.clone(),
            endpoints,
            tunnel_ids: AtomicU32::new(initial_tunnel_id()),
            no_udp_segmentation: std::sync::atomic::AtomicBool::new(false),
            sent: SentLog::default(),
        }
    }

    /// A data path that loops back: what it sends comes out of the source returned
    /// with it.
    pub(crate) fn loopback(
        config: &Arc<Config>,
        counters: Arc<Counters>,
    ) -> (Self, LoopbackSource) {
        let (sink, source) = mpsc::channel();
        (
            Self::with_io(Io::Loopback(sink), false, config, counters),
            source,
        )
    }

    /// The TUN device, unless the data path loops back.
    pub(crate) fn tun(&self) -> Option<&Arc<SyncDevice>> {
        match &self.io {
            Io::Kernel { tun, .. } => Some(tun),
            Io::Loopback(_) => None,
        }
    }

    /// Whether probes get kernel transmit stamps.
    pub(crate) fn kernel_stamps(&self) -> bool {
        self.kernel_stamps
    }

    fn family(&self, peer: IpAddr) -> std::io::Result<&Family> {
        match (&self.io, peer) {
            (Io::Kernel { v4, .. }, IpAddr::V4(_)) => Ok(v4),
            (Io::Kernel { v6: Some(f), .. }, IpAddr::V6(_)) => Ok(f),
            _ => Err(std::io::Error::other("no IPv6 raw socket")),
        }
    }

    fn kernel_family(&self, v6: bool) -> Option<&Family> {
        match (&self.io, v6) {
            (Io::Kernel { v4, .. }, false) => Some(v4),
            (Io::Kernel { v6: Some(f), .. }, true) => Some(f),
            _ => None,
        }
    }

    /// The error queues to watch for one family: the probe socket's (ICMP errors and
    /// transmit stamps), the continuation socket's (ICMP errors) and the UDP socket's
    /// (both), if there is one.
    pub(crate) fn error_fds(&self, v6: bool) -> Vec<BorrowedFd<'_>> {
        self.kernel_family(v6).map_or_else(Vec::new, |f| {
            [Some(&f.probe), Some(&f.mgrp), f.udp.as_ref()]
                .into_iter()
                .flatten()
                .map(AsFd::as_fd)
                .collect()
        })
    }

    /// The error queues that transmit stamps of probes reach for one family.
    pub(crate) fn stamp_fds(&self, v6: bool) -> Vec<BorrowedFd<'_>> {
        self.kernel_family(v6).map_or_else(Vec::new, |f| {
            [Some(&f.probe), f.udp.as_ref()]
                .into_iter()
                .flatten()
                .map(AsFd::as_fd)
                .collect()
        })
    }

    /// The UDP socket of one family, if UDP peers are configured.
    pub(crate) fn udp_socket(&self, v6: bool) -> Option<&Socket> {
        self.kernel_family(v6).and_then(|f| f.udp.as_ref())
    }

    /// Where the UDP peers are.
    pub(crate) fn endpoints(&self) -> &Arc<Endpoints> {
        &self.endpoints
    }

    /// The UDP socket and the endpoint to send `peer`'s packets to.
    fn udp_target(&self, peer: IpAddr) -> std::io::Result<(&Socket, SockAddr)> {
        let at = self.endpoints.endpoint(peer).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!(
                    "peer {peer} roams and has not been heard from yet, so its endpoint is unknown"
                ),
            )
        })?;
        let socket = self
            .udp_socket(at.is_ipv6())
            .ok_or_else(|| std::io::Error::other(format!("no UDP socket for {at}")))?;
        Ok((socket, at.into()))
    }

    /// Notes that `packet` is about to leave for `to`, so an ICMP error quoting it is
    /// known for one about this daemon's packet.
    fn note_sent(&self, to: &SockAddr, packet: &[u8]) {
        if let Some(to) = to.as_socket() {
            self.sent.note(to, packet);
        }
    }

    /// Whether an ICMP error about a packet sent to `to` that quotes `quoted` is
    /// about an MGRP packet this daemon sent there lately.
    pub(crate) fn sent_recently(&self, to: std::net::SocketAddr, quoted: &[u8]) -> bool {
        self.sent.sent_recently(to, quoted)
    }

    /// Sends probe `seq` of train `transaction` (on the pacer thread).
    pub(crate) fn send_probe(
        &self,
        peer: IpAddr,
        packet: &[u8],
        transaction: u32,
        seq: u16,
    ) -> std::io::Result<usize> {
        if let Io::Loopback(_) = self.io {
            return self.send_mgrp(peer, packet);
        }
        if self.endpoints.is_udp(peer) {
            let (socket, at) = self.udp_target(peer)?;
            self.note_sent(&at, packet);
            return send_again_if_reported(|| {
                if self.kernel_stamps {
                    sys::send_with_tx_id(socket, packet, &at, tx_id(transaction, seq), true)
                } else {
                    socket.send_to(packet, &at)
                }
            });
        }
        let socket = &self.family(peer)?.probe;
        let dst = sys::raw_dest(peer);
        self.note_sent(&dst, packet);
        send_again_if_reported(|| {
            if self.kernel_stamps {
                sys::send_with_tx_id(socket, packet, &dst, tx_id(transaction, seq), false)
            } else {
                socket.send_to(packet, &dst)
            }
        })
    }

    /// Sends an MGRP packet that is not a probe.
    fn send_mgrp(&self, peer: IpAddr, packet: &[u8]) -> std::io::Result<usize> {
        match &self.io {
            Io::Kernel { .. } if self.endpoints.is_udp(peer) => {
                let (socket, at) = self.udp_target(peer)?;
                self.note_sent(&at, packet);
                send_again_if_reported(|| socket.send_to(packet, &at))
            }
            Io::Kernel { .. } => {
                let socket = &self.family(peer)?.mgrp;
                let dst = sys::raw_dest(peer);
                self.note_sent(&dst, packet);
                send_again_if_reported(|| socket.send_to(packet, &dst))
            }
            Io::Loopback(sink) => {
                let looped = Looped {
                    peer,
                    packet: packet.to_vec(),
                    ip_len: packet.len() + if peer.is_ipv4() { 20 } else { 40 },
                    at: mgrp_rt::wall_now(),
                };
                sink.send(looped)
                    .map_err(|_| std::io::Error::other("the loopback receiver is gone"))?;
                Ok(packet.len())
            }
        }
    }

    fn send_raw(&self, pkt: &[u8], dst: IpAddr) -> std::io::Result<usize> {
        match &self.io {
            Io::Kernel { .. } => self.family(dst)?.raw.send_to(pkt, &sys::raw_dest(dst)),
            Io::Loopback(_) => Ok(pkt.len()),
        }
    }

    /// Sends a packet on unchanged through the raw socket, and counts it; a packet
    /// whose peer is reached over UDP goes whole in continuations instead.
    pub(crate) fn send_unchanged(&self, pkt: &[u8]) {
        let peering = self.config.peering();
        let c = &self.counters;
        let Some(dst) = ip::destination(pkt) else {
            bump(&c.unchanged_send_errors);
            return;
        };
        let peer = peering.peer_of(dst);
        if self.endpoints.is_udp(peer) {
            self.tunnel(peer, pkt);
            return;
        }
        match self.send_raw(pkt, dst) {
            Ok(_) => bump(&c.unchanged_sent),
            Err(e) => {
                bump(&c.unchanged_send_errors);
                debug!("sending a packet unchanged to {dst} failed: {e}");
            }
        }
    }

    /// Sends what the endpoint released: a rider unchanged, or a continuation (stamped
    /// and sealed here).
    pub(crate) fn send_transmit(&self, peer: IpAddr, t: Transmit) {
        let c = &self.counters;
        match t {
            Transmit::Unchanged(pkt) if self.wraps(peer, &pkt) => self.tunnel(peer, &pkt),
            Transmit::Unchanged(pkt) => self.send_unchanged(&pkt),
            Transmit::Continuation(mut pkt) => {
                pkt.set_sender_time(mgrp_rt::wall_now());
                self.keyring.seal(peer, &mut pkt);
                match self.send_mgrp(peer, pkt.as_bytes()) {
                    Ok(_) => bump(&c.continuations_sent),
                    Err(e) => {
                        bump(&c.continuation_send_errors);
                        debug!("sending a continuation to {peer} failed: {e}");
                    }
                }
            }
        }
    }
}

/// Whether a send or receive failed only because an ICMP error for an earlier send
/// was pending on the socket: with `IP_RECVERR` (which the liveness threads need) a
/// socket reports it once, on its next call, whatever that call is about. Every error
/// number the kernel makes of an ICMP or ICMPv6 error is here: a firewall's
/// "administratively prohibited" is `EACCES` (ICMPv6 destination unreachable codes 1,
/// 5, 6), a failed source route `EOPNOTSUPP`, a host isolated `ENONET`. Some of them a
/// send can also make itself (no route: `ENETUNREACH`), which costs it a few tries.
pub(crate) fn is_reported_icmp_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::ENOPROTOOPT
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::EPROTO
                | libc::EMSGSIZE
                | libc::EACCES
                | libc::EOPNOTSUPP
                | libc::ENONET
        )
    )
}

/// How many reported errors in a row a send takes before it gives up, for errors
/// that only an ICMP message reports on these sockets (port or protocol unreachable:
/// a peer's daemon gone). A host answers every datagram sent to it so, one error
/// each, as fast as it takes them in, unless its kernel limits its ICMP rate: a
/// segmented send of [`MAX_SEGMENTS`] datagrams brings that many errors back in a
/// burst, and any thread's next send on the same socket meets them one after the
/// other. A bound of a few bursts keeps the other peers' packets from being lost
/// for them.
const MOST_PEER_GONE_IN_A_ROW: u32 = 4 * MAX_SEGMENTS as u32;

/// How many other reported errors in a row a send takes: a route missing or a packet
/// too big makes the same error synchronously, again at every attempt.
const MOST_OTHER_REPORTED_IN_A_ROW: u32 = 3;

/// Sends with `send`, again while an attempt fails only because an ICMP error about
/// an earlier packet was pending (a peer's daemon gone must not cost the packets of
/// the others sent through the same socket).
fn send_again_if_reported<T>(mut send: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let mut reported = 0;
    loop {
        match send() {
            Err(e) if is_reported_icmp_error(&e) && reported < most_in_a_row(&e) => reported += 1,
            r => return r,
        }
    }
}

/// How many errors like `e` in a row [`send_again_if_reported`] takes.
fn most_in_a_row(e: &std::io::Error) -> u32 {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED | libc::ENOPROTOOPT) => MOST_PEER_GONE_IN_A_ROW,
        _ => MOST_OTHER_REPORTED_IN_A_ROW,
    }
}

/// Where the ids of riders sent whole in continuations start: differs between lives
/// of the daemon, like the planners' ids.
fn initial_tunnel_id() -> u32 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::process::id()) as u32
}

/// Most datagrams one segmented send carries (the kernel's `UDP_MAX_SEGMENTS`).
const MAX_SEGMENTS: usize = 64;
/// Most bytes one segmented send carries: a UDP payload's limit, with room for the
/// IPv6 header.
const MAX_SEGMENTED_BYTES: usize = 65_000;

/// Continuations for one UDP peer gathered to leave in one system call (UDP
/// segmentation offload): all as long as the first but the last, which may be
/// shorter. A burst of TCP segments from the TUN is a run of equal packets, so it
/// leaves as few sends instead of one per packet.
#[derive(Debug, Default)]
pub(crate) struct TunnelBatch {
    peer: Option<IpAddr>,
    buf: Vec<u8>,
    segment: usize,
    count: usize,
    /// A shorter datagram ends the batch.
    closed: bool,
    /// Riders whose last continuation is in the batch: counted sent or failed with it.
    riders: u64,
}

impl Net {
    /// Sends `rider` to a peer reached over UDP, which would not take it as it came
    /// (a NAT or firewall passes only the UDP flow): whole, in as many continuations
    /// as the path needs, under an id of the tunneled riders' own. Counted like a
    /// packet sent unchanged.
    fn tunnel(&self, peer: IpAddr, rider: &[u8]) {
        let mut batch = TunnelBatch::default();
        self.tunnel_batched(&mut batch, peer, rider);
        self.flush_tunnel(&mut batch);
    }

    /// Whether a packet that goes to `peer` without riding a probe must still go
    /// wrapped in continuations: when the peer is reached over UDP (a path that takes
    /// only MGRP), and when the peer is not where the packet is bound (it came from a
    /// next-hop device, and the peer relays it on; sent as it came, it would take the
    /// kernel's way to its destination instead).
    fn wraps(&self, peer: IpAddr, pkt: &[u8]) -> bool {
        self.endpoints.is_udp(peer)
            || ip::destination(pkt).is_some_and(|dst| self.config.peer_of(dst) != peer)
    }

    /// Sends `pkt` on unchanged to `peer`: into `batch` when it goes wrapped (sent by
    /// [`Self::flush_tunnel`] or the next packet that does not fit it), else at once.
    pub(crate) fn send_unchanged_batched(&self, batch: &mut TunnelBatch, peer: IpAddr, pkt: &[u8]) {
        if self.wraps(peer, pkt) {
            self.tunnel_batched(batch, peer, pkt);
        } else {
            self.send_unchanged(pkt);
        }
    }

    /// Adds the continuations that carry `rider` to `peer` to `batch`, sending what
    /// the batch held first when they do not fit it.
    pub(crate) fn tunnel_batched(&self, batch: &mut TunnelBatch, peer: IpAddr, rider: &[u8]) {
        let packets = match self.continuations(peer, rider) {
            Ok(p) => p,
            Err(e) => {
                bump(&self.counters.unchanged_send_errors);
                debug!("cannot put a packet to {peer} in continuations: {e}");
                return;
            }
        };
        for p in &packets {
            let fits = batch.count > 0
                && batch.peer == Some(peer)
                && !batch.closed
                && p.len() <= batch.segment
                && batch.count < MAX_SEGMENTS
                && batch.buf.len() + p.len() <= MAX_SEGMENTED_BYTES;
            if !fits {
                self.flush_tunnel(batch);
                batch.peer = Some(peer);
                batch.segment = p.len();
            }
            batch.closed = p.len() < batch.segment;
            batch.buf.extend_from_slice(p);
            batch.count += 1;
        }
        batch.riders += 1;
    }

    /// Sends what `batch` holds, in one system call where the kernel segments UDP,
    /// and counts its riders sent or failed.
    pub(crate) fn flush_tunnel(&self, batch: &mut TunnelBatch) {
        let riders = std::mem::take(&mut batch.riders);
        let Some(peer) = batch.peer.take() else {
            return;
        };
        let result = self.send_continuations(peer, &batch.buf, batch.segment, batch.count);
        batch.buf.clear();
        batch.count = 0;
        batch.closed = false;
        let c = &self.counters;
        match result {
            Ok(()) => c.unchanged_sent.fetch_add(riders, Ordering::Relaxed),
            Err(e) => {
                debug!("sending packets in continuations to {peer} failed: {e}");
                c.unchanged_send_errors.fetch_add(riders, Ordering::Relaxed)
            }
        };
    }

    fn send_continuations(
        &self,
        peer: IpAddr,
        buf: &[u8],
        segment: usize,
        count: usize,
    ) -> std::io::Result<()> {
        if count > 1
            && matches!(self.io, Io::Kernel { .. })
            && self.endpoints.is_udp(peer)
            && !self.no_udp_segmentation.load(Ordering::Relaxed)
        {
            let (socket, at) = self.udp_target(peer)?;
            for datagram in buf.chunks(segment.max(1)) {
                self.note_sent(&at, datagram);
            }
            match send_again_if_reported(|| sys::send_segmented(socket, buf, &at, segment as u16)) {
                Ok(_) => {
                    bump(&self.counters.segmented_sends);
                    self.counters
                        .segmented_datagrams
                        .fetch_add(count as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                    ) =>
                {
                    self.no_udp_segmentation.store(true, Ordering::Relaxed);
                    warn!(
                        "the kernel does not segment UDP here ({e}): continuations go one datagram per system call"
                    );
                }
                Err(e) => return Err(e),
            }
        }
        for p in buf.chunks(segment.max(1)) {
            self.send_mgrp(peer, p)?;
        }
        Ok(())
    }

    /// The continuations, sealed, that carry `rider` to `peer`.
    fn continuations(&self, peer: IpAddr, rider: &[u8]) -> std::io::Result<Vec<Vec<u8>>> {
        let peering = self.config.peering();
        let rider_len = u16::try_from(rider.len())
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| std::io::Error::other("a rider of no bytes or over 64 KB"))?;
        let path = peering.encap.path(peer, self.config.mtu);
        let trailer = self.config.policy.trailer_len;
        // Whole when it fits (a route to a UDP peer has that as its MTU, see
        // `Config::route_mtu`), else in pieces, whose descriptors are longer.
        let room = if rider.len() <= path.whole_rider_room(trailer) {
            rider.len()
        } else {
            path.piece_room(trailer).max(1)
        };
        let id = wire::TUNNELED_RIDER_ID | self.tunnel_ids.fetch_add(1, Ordering::Relaxed);
        let now = mgrp_rt::wall_now();
        rider
            .chunks(room)
            .enumerate()
            .map(|(i, data)| {
                let repr = wire::Repr {
                    version: path.wire,
                    header: wire::Header::continuation(),
                    tool_header: &[],
                    chunks: vec![wire::Chunk {
                        rider_id: id,
                        offset: (i * room) as u16,
                        rider_len,
                        data,
                    }],
                    trailer_len: trailer,
                };
                let mut packet = repr
                    .emit_into(vec![0u8; repr.buffer_len()])
                    .map_err(std::io::Error::other)?;
                packet.set_sender_time(now);
                self.keyring.seal(peer, &mut packet);
                Ok(packet.into_inner())
            })
            .collect()
    }

    /// Sends `peer` a keepalive, so that the NAT in front of this host keeps its
    /// mapping and the peer learns where this host is.
    pub(crate) fn send_keepalive(&self, peer: IpAddr) -> std::io::Result<()> {
        let peering = self.config.peering();
        let repr = wire::Repr {
            version: peering.encap.wire_for_peer(peer),
            header: wire::Header::keepalive(),
            tool_header: &[],
            chunks: Vec::new(),
            trailer_len: self.config.policy.trailer_len,
        };
        let mut packet = repr
            .emit_into(vec![0u8; repr.buffer_len()])
            .map_err(std::io::Error::other)?;
        packet.set_sender_time(mgrp_rt::wall_now());
        self.keyring.seal(peer, &mut packet);
        self.send_mgrp(peer, packet.as_bytes()).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A send that fails with `errno` `fails` times, then succeeds: what
    /// [`send_again_if_reported`] makes of it, and how many attempts it made.
    fn attempts(errno: i32, fails: u32) -> (bool, u32) {
        let mut made = 0;
        let r = send_again_if_reported(|| {
            made += 1;
            if made <= fails {
                Err(std::io::Error::from_raw_os_error(errno))
            } else {
                Ok(())
            }
        });
        (r.is_ok(), made)
    }

    #[test]
    fn a_gone_peers_burst_of_errors_costs_no_send() {
        for errno in [libc::ECONNREFUSED, libc::ENOPROTOOPT] {
            // Every error of two whole segmented sends, and then some.
            assert_eq!(attempts(errno, 2 * MAX_SEGMENTS as u32), (true, 129));
            assert_eq!(
                attempts(errno, MOST_PEER_GONE_IN_A_ROW),
                (true, MOST_PEER_GONE_IN_A_ROW + 1)
            );
            // Not forever.
            assert_eq!(
                attempts(errno, u32::MAX),
                (false, MOST_PEER_GONE_IN_A_ROW + 1)
            );
        }
    }

    #[test]
    fn errors_a_send_can_make_itself_are_tried_a_few_times() {
        for errno in [libc::EHOSTUNREACH, libc::ENETUNREACH, libc::EMSGSIZE] {
            assert_eq!(attempts(errno, 3), (true, 4));
            assert_eq!(attempts(errno, u32::MAX), (false, 4));
        }
        // Not a reported error at all: the first attempt's answer stands.
        assert_eq!(attempts(libc::EBADF, u32::MAX), (false, 1));
        assert_eq!(attempts(libc::EBADF, 0), (true, 1));
    }
}
