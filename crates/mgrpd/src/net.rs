//! The daemon's sockets and how packets leave through them: probes (pacer thread),
//! continuations and riders sent unchanged (dispatcher, TUN reader), riders
//! written into the TUN (receivers). The loopback data path hands what it sends to
//! a sink the loopback receiver drains instead.

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use mgrp_core::WallTime;
use mgrp_core::auth;
use mgrp_core::ip;
use mgrp_core::planner::Transmit;
use mgrp_core::wire::Packet;
use socket2::Socket;
use tracing::{debug, warn};
use tun_rs::SyncDevice;

use crate::config::Config;
use crate::counters::{Counters, bump};
use crate::sys;

/// Writes the counter and tag into MGRP packets' trailers for peers with a key.
#[derive(Debug)]
pub(crate) struct Sealer {
    config: Arc<Config>,
    /// The counter of the next authenticated packet; starts at the clock's nanoseconds
    /// so a restarted daemon's packets are not taken for replays.
    counter: AtomicU64,
}

impl Sealer {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Self {
            config,
            counter: AtomicU64::new(mgrp_rt::wall_now().as_nanos()),
        }
    }

    /// Seals `packet` when its peer has a key; the last step before it is sent.
    pub(crate) fn seal(&self, peer: IpAddr, packet: &mut Packet<Vec<u8>>) {
        if let Some(key) = self.config.keys.key_for(peer) {
            let counter = self.counter.fetch_add(1, Ordering::Relaxed);
            // The planner reserves the trailer whenever keys are configured.
            let _ = auth::seal(key, packet, counter);
        }
    }
}

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
}

impl Family {
    fn open(config: &Config, v6: bool) -> std::io::Result<Self> {
        let (protocol, mark) = (config.protocol, config.fwmark);
        Ok(Self {
            probe: sys::mgrp_send_socket(v6, protocol, mark)?,
            mgrp: sys::mgrp_send_socket(v6, protocol, mark)?,
            raw: sys::raw_ip_socket(v6, mark)?,
        })
    }
}

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
    pub(crate) sealer: Sealer,
    counters: Arc<Counters>,
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
        let v4 = Family::open(config, false).map_err(|e| {
            anyhow::anyhow!(
                "cannot open raw IPv4 sockets for protocol {}: {e}; run mgrpd as root (it needs CAP_NET_RAW)",
                config.protocol
            )
        })?;
        let v6 = Family::open(config, true).ok();
        let tx_ids = config.kernel_departures && sys::kernel_takes_tx_ids();
        if config.kernel_departures && !tx_ids {
            warn!(
                "this kernel cannot name transmit stamps per send (SCM_TS_OPT_ID, Linux 6.13): reports carry the daemon's departure stamps only"
            );
        }
        let kernel_stamps = tx_ids
            && std::iter::once(&v4)
                .chain(&v6)
                .try_for_each(|f| sys::enable_tx_stamps(&f.probe))
                .map_err(|e| {
                    warn!("cannot enable kernel transmit stamps: {e}; reports carry the daemon's stamps only");
                })
                .is_ok();
        Ok(Self {
            io: Io::Kernel { tun, v4, v6 },
            kernel_stamps,
            sealer: Sealer::new(config.clone()),
            counters,
        })
    }

    /// A data path that loops back: what it sends comes out of the source returned
    /// with it.
    pub(crate) fn loopback(
        config: &Arc<Config>,
        counters: Arc<Counters>,
    ) -> (Self, LoopbackSource) {
        let (sink, source) = mpsc::channel();
        let net = Self {
            io: Io::Loopback(sink),
            kernel_stamps: false,
            sealer: Sealer::new(config.clone()),
            counters,
        };
        (net, source)
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

    /// The error queues to watch for one family: the probe socket's (ICMP errors and
    /// transmit stamps) and the continuation socket's (ICMP errors).
    pub(crate) fn error_fds(&self, v6: bool) -> Option<[BorrowedFd<'_>; 2]> {
        let f = match (&self.io, v6) {
            (Io::Kernel { v4, .. }, false) => v4,
            (Io::Kernel { v6: Some(f), .. }, true) => f,
            _ => return None,
        };
        Some([f.probe.as_fd(), f.mgrp.as_fd()])
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
        let socket = &self.family(peer)?.probe;
        let dst = sys::raw_dest(peer);
        if self.kernel_stamps {
            sys::send_with_tx_id(socket, packet, &dst, tx_id(transaction, seq))
        } else {
            socket.send_to(packet, &dst)
        }
    }

    /// Sends an MGRP packet that is not a probe.
    fn send_mgrp(&self, peer: IpAddr, packet: &[u8]) -> std::io::Result<usize> {
        match &self.io {
            Io::Kernel { .. } => self
                .family(peer)?
                .mgrp
                .send_to(packet, &sys::raw_dest(peer)),
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

    /// Sends a packet on unchanged through the raw socket, and counts it.
    pub(crate) fn send_unchanged(&self, pkt: &[u8]) {
        let c = &self.counters;
        let Some(dst) = ip::destination(pkt) else {
            bump(&c.unchanged_send_errors);
            return;
        };
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
            Transmit::Unchanged(pkt) => self.send_unchanged(&pkt),
            Transmit::Continuation(mut pkt) => {
                pkt.set_sender_time(mgrp_rt::wall_now());
                self.sealer.seal(peer, &mut pkt);
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
