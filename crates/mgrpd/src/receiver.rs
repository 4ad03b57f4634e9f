//! The receivers: one thread per address family reads MGRP packets with kernel
//! timestamps, checks who sent them, reassembles riders and writes those admitted
//! into the TUN, and hands probes to the listening tools. Each receiver owns its
//! reassembler and its peers' replay windows; they share only the counters, the
//! listener registry and the TUN.

use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mgrp_core::WallTime;
use mgrp_core::api::ReceivedProbe;
use mgrp_core::ip::{IPV6_HEADER_LEN, Ip};
use mgrp_core::peers::{Admitted, Refusal};
use mgrp_core::planner::UDP_HEADER_LEN;
use mgrp_core::reassembly::{ChunkOutcome, Reassembler};
use mgrp_core::wire::{Kind, Packet};
use socket2::Socket;
use tracing::{debug, info};

use crate::config::Config;
use crate::counters::{Counters, LimitedLog, ReassemblySlots, SocketError, bump};
use crate::endpoints::{Endpoints, Unknown};
use crate::keyring::{Keyring, Refusal as AuthRefusal, Verdict};
use crate::lifecycle::Lifecycle;
use crate::listeners::Listeners;
use crate::net::TunWriter;
use crate::sys;
use mgrp_core::auth::Scheme;

/// Riders batched for one coalescing write into a TUN with offloads.
struct WriteBatch {
    /// Whether batching is on (a TUN with offloads); otherwise each rider is written
    /// as it completes.
    on: bool,
    /// Each rider after room for its virtio-net header, with room to grow into a
    /// super-packet.
    bufs: Vec<Vec<u8>>,
    len: usize,
    bytes: u64,
    gro: tun_rs::GROTable,
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("on", &self.on)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Riders written together at most.
const WRITE_BATCH: usize = 64;

/// How long a receiver pauses after a receive failed for a reason other than an ICMP
/// error (buffers short, say), so that an error that comes again at once costs a
/// core nothing.
const ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

impl WriteBatch {
    fn new(on: bool) -> Self {
        let n = if on { WRITE_BATCH } else { 0 };
        Self {
            on,
            bufs: (0..n)
                .map(|_| Vec::with_capacity(tun_rs::VIRTIO_NET_HDR_LEN + 65_535))
                .collect(),
            len: 0,
            bytes: 0,
            gro: tun_rs::GROTable::default(),
        }
    }

    fn is_full(&self) -> bool {
        self.on && self.len == self.bufs.len()
    }

    /// Adds a rider; false if batching is off or the batch is full.
    fn push(&mut self, rider: &[u8]) -> bool {
        if !self.on || self.len == self.bufs.len() {
            return false;
        }
        let b = &mut self.bufs[self.len];
        b.clear();
        b.resize(tun_rs::VIRTIO_NET_HDR_LEN, 0);
        b.extend_from_slice(rider);
        self.len += 1;
        self.bytes += rider.len() as u64;
        true
    }

    fn write(&mut self, tun: &TunWriter) -> std::io::Result<()> {
        let n = std::mem::take(&mut self.len);
        self.bytes = 0;
        let TunWriter::Kernel { tun, .. } = tun else {
            return Ok(());
        };
        tun.send_multiple(
            &mut self.gro,
            &mut self.bufs[..n],
            tun_rs::VIRTIO_NET_HDR_LEN,
        )
        .map(drop)
    }
}

/// One receiver's state.
#[derive(Debug)]
pub(crate) struct Receiver {
    config: Arc<Config>,
    counters: Arc<Counters>,
    listeners: Arc<Listeners>,
    tun: TunWriter,
    /// Whether this receives IPv6 (its slot in `reassembly`).
    v6: bool,
    /// Whether this reads the UDP socket (datagrams without IP header, from
    /// endpoints that name their peers through `endpoints`).
    udp: bool,
    endpoints: Arc<Endpoints>,
    reassembly: Arc<ReassemblySlots>,
    reasm: Reassembler<IpAddr>,
    /// Riders waiting to be written together.
    writes: WriteBatch,
    /// Keys and the peers' replay windows, shared with the other receivers.
    keyring: Arc<Keyring>,
    malformed_log: LimitedLog,
    refused_log: LimitedLog,
    not_peer_log: LimitedLog,
    auth_log: LimitedLog,
    /// Receives that failed for a reason other than an ICMP error.
    error_log: LimitedLog,
}

impl Receiver {
    pub(crate) fn new(
        config: Arc<Config>,
        counters: Arc<Counters>,
        listeners: Arc<Listeners>,
        tun: TunWriter,
        reassembly: Arc<ReassemblySlots>,
        (endpoints, keyring): (Arc<Endpoints>, Arc<Keyring>),
        (v6, udp): (bool, bool),
    ) -> Self {
        Self {
            reasm: Reassembler::new(config.reassembly),
            writes: WriteBatch::new(matches!(tun, TunWriter::Kernel { vnet: true, .. })),
            config,
            counters,
            listeners,
            tun,
            v6,
            udp,
            endpoints,
            reassembly,
            keyring,
            malformed_log: LimitedLog::default(),
            refused_log: LimitedLog::default(),
            not_peer_log: LimitedLog::default(),
            auth_log: LimitedLog::default(),
            error_log: LimitedLog::default(),
        }
    }

    /// The receiver thread, until shutdown. Raw IPv4 sockets hand over the IP header
    /// too; raw IPv6 sockets only the payload.
    pub(crate) fn run(mut self, sock: &Socket, life: &Lifecycle) {
        let mut buf = vec![0u8; 65_536];
        let mut cmsgs = sys::recv_cmsg_buffer();
        let fd = sock.as_fd();
        // Whether the last receive found a packet, and how many were taken since the
        // batch was last written.
        let (mut more, mut taken) = (false, 0);
        while !life.is_stopping() {
            // Packets already waiting are taken without blocking, and the riders they
            // carry are written together: before the next wait, and at least every 64
            // packets, so a backlog cannot keep riders waiting.
            let wait = !more || taken >= 64 || self.writes.is_full();
            if wait {
                self.flush_writes();
                taken = 0;
            }
            let r = match sys::recv_stamped(fd, &mut buf, &mut cmsgs, wait) {
                Ok(Some(r)) => {
                    more = true;
                    taken += 1;
                    r
                }
                Ok(None) => {
                    more = false;
                    if wait {
                        self.reasm.handle_timeout(mgrp_rt::mono_now());
                        self.publish();
                    }
                    continue;
                }
                // An ICMP error for something this host sent (a peer's daemon gone,
                // a firewall's refusal: anything a network may send, forged or not)
                // is reported on the next receive of a UDP socket; it says nothing of
                // what arrives, and the liveness thread reads and counts the error
                // itself from the error queue.
                Err(e) if crate::net::is_reported_icmp_error(&e) => {
                    bump(&self.counters.peer_unreachable_reported);
                    continue;
                }
                // Whatever else a network or a short host can make a receive fail
                // with is counted and survived; only a programming error stops.
                Err(e) => match SocketError::of_io(&e) {
                    Some(reason) => {
                        self.counters.socket_error(reason);
                        self.error_log
                            .warn(format_args!("receiving MGRP packets failed: {e}; going on"));
                        // What the host lacks may take a moment to come back.
                        std::thread::sleep(ERROR_PAUSE);
                        continue;
                    }
                    None => {
                        life.fatal(format!("receiving MGRP packets failed: {e}"));
                        return;
                    }
                },
            };
            let data = &buf[..r.len];
            let stamp = r.stamp.unwrap_or_else(mgrp_rt::wall_now);
            if self.udp {
                let from = std::net::SocketAddr::new(r.from, r.port);
                let ip_len = r.len
                    + usize::from(UDP_HEADER_LEN)
                    + if self.v6 { IPV6_HEADER_LEN } else { 20 };
                self.handle_udp(from, r.to, data, ip_len, stamp);
                continue;
            }
            // IPv4 raw sockets deliver the IP header, IPv6 ones only the payload.
            let (payload, ip_len, to) = if self.v6 {
                (data, r.len + IPV6_HEADER_LEN, r.to)
            } else {
                match Ip::parse(data) {
                    Ok(ip) => (ip.payload, r.len, Some(ip.dst)),
                    Err(_) => (&[][..], r.len, None),
                }
            };
            self.handle_mgrp(r.from, None, to, payload, ip_len, stamp);
        }
        self.flush_writes();
    }

    /// Writes the batched riders into the TUN, consecutive TCP segments of one flow
    /// coalesced into one super-packet (as a TUN with offloads takes them).
    fn flush_writes(&mut self) {
        let (n, bytes) = (self.writes.len as u64, self.writes.bytes);
        if n == 0 {
            return;
        }
        let c = &self.counters;
        match self.writes.write(&self.tun) {
            Ok(()) => {
                c.riders_delivered.fetch_add(n, Ordering::Relaxed);
                c.rider_bytes_delivered.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(e) => {
                // Which of the batch made it is not known: all count as failed.
                c.tun_write_errors.fetch_add(n, Ordering::Relaxed);
                debug!("writing {n} riders to the TUN failed: {e}");
            }
        }
    }

    fn publish(&self) {
        self.reassembly
            .publish(self.v6, self.udp, self.reasm.counters());
    }

    /// Whether a peer's packet passes authentication (tag, then replay window), or
    /// needs none; refusals are counted and logged at a limited rate. `Some(true)`:
    /// authentic and the peer's newest.
    fn authentic(
        &mut self,
        from: IpAddr,
        to: Option<IpAddr>,
        packet: &Packet<&[u8]>,
        opened: Option<u64>,
    ) -> Option<bool> {
        let c = &self.counters;
        let (counter, what) = match self.keyring.open(from, to, packet, opened) {
            Verdict::Plain => return Some(false),
            Verdict::Authentic { newest } => return Some(newest),
            Verdict::Refused(why) => match why {
                AuthRefusal::Unauthenticated => (
                    &c.mgrp_unauthenticated,
                    "an unauthenticated packet, but a key is configured for it; give it the same key",
                ),
                AuthRefusal::Replayed => (&c.mgrp_replayed, "a replayed or too old packet"),
                AuthRefusal::BadTag => (
                    &c.mgrp_bad_tag,
                    "a packet with a wrong tag (another key; altered on the way; or it knows this host by an address other than the one its riders come from here: set `source` on this host)",
                ),
                AuthRefusal::Reflected => (
                    &c.mgrp_reflected,
                    "a packet this host sealed for that peer, sent back to it (a reflection on the path)",
                ),
                AuthRefusal::OldScheme(Scheme::V1) => (
                    &c.mgrp_old_auth,
                    "a packet tagged the way mgrpd before keys per direction did (auth 1); upgrade that peer, or set auth = 1 here until every peer is upgraded",
                ),
                AuthRefusal::OldScheme(_) => (
                    &c.mgrp_old_auth,
                    "a packet tagged the way mgrpd before key indexes did (auth 2); upgrade that peer, or set auth = 2 here until every peer is upgraded",
                ),
                AuthRefusal::Unexpected => (
                    &c.mgrp_unexpected_auth,
                    "an authenticated packet, but no key is configured for it; give this mgrpd the same key with --key-file",
                ),
            },
        };
        bump(counter);
        self.auth_log
            .warn(format_args!("dropped {what} from peer {from}"));
        None
    }

    /// Whether a rider may be written into this host. The loopback data path writes
    /// riders nowhere, so it admits every one.
    fn admit(&self, from: IpAddr, to: Option<IpAddr>, rider: &[u8]) -> Result<Admitted, Refusal> {
        match self.tun {
            TunWriter::Kernel { .. } => {
                let to = to.unwrap_or(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED));
                self.config.peering().peers.admit(from, to, rider)
            }
            TunWriter::Nowhere => Ok(Admitted::Here),
        }
    }

    fn count_refusal(&self, from: IpAddr, refusal: Refusal, rider: &[u8]) {
        let c = &self.counters;
        bump(match refusal {
            Refusal::NotPeer => &c.mgrp_not_peer,
            Refusal::Malformed => &c.riders_refused_malformed,
            Refusal::ForeignSource => &c.riders_refused_foreign_source,
            Refusal::ForeignDestination => &c.riders_refused_foreign_destination,
            Refusal::InnerMgrp => &c.riders_refused_inner_mgrp,
            Refusal::SpecialDestination => &c.riders_refused_special_destination,
        });
        self.refused_log.warn(format_args!(
            "refused a rider from peer {from}: {}",
            refusal_words(from, refusal, Ip::parse(rider).ok().as_ref())
        ));
    }

    /// Takes in one UDP datagram from `at`: the MGRP packet of the peer that
    /// endpoint names (see `Endpoints::identify`), else counted as a non-peer's.
    pub(crate) fn handle_udp(
        &mut self,
        at: std::net::SocketAddr,
        to: Option<IpAddr>,
        payload: &[u8],
        ip_len: usize,
        stamp: WallTime,
    ) {
        let keyring = &self.keyring;
        match self.endpoints.identify(at, payload, |p, may_try| {
            keyring.find_roaming(to, p, may_try)
        }) {
            Ok((peer, opened)) => {
                let arrival = Arrival {
                    from: peer,
                    at: Some(at),
                    to,
                    ip_len,
                    stamp,
                };
                self.take_mgrp(arrival, payload, opened);
            }
            Err(unknown) => {
                let c = &self.counters;
                bump(&c.mgrp_received);
                bump(&c.mgrp_not_peer);
                if unknown == Unknown::OverTrials {
                    bump(&c.trials_refused);
                }
                self.not_peer_log.warn(format_args!(
                    "dropped an MGRP datagram from {at}, which is no peer's endpoint and {}",
                    if unknown == Unknown::OverTrials {
                        "came beyond the datagrams tried against the roaming peers' keys this second"
                    } else {
                        "carries no roaming peer's key"
                    }
                ));
            }
        }
    }

    /// Takes in one received MGRP packet, sent by `from` (over UDP: from endpoint
    /// `at`) to `to`: riders admitted by `Peers::admit` to the TUN, the probe to its
    /// listener. Packets from non-peers are counted and dropped unread.
    pub(crate) fn handle_mgrp(
        &mut self,
        from: IpAddr,
        at: Option<std::net::SocketAddr>,
        to: Option<IpAddr>,
        payload: &[u8],
        ip_len: usize,
        stamp: WallTime,
    ) {
        let arrival = Arrival {
            from,
            at,
            to,
            ip_len,
            stamp,
        };
        self.take_mgrp(arrival, payload, None);
    }

    /// [`Self::handle_mgrp`], for a packet whose tag was already checked when
    /// `opened` gives its counter.
    fn take_mgrp(&mut self, arrival: Arrival, payload: &[u8], opened: Option<u64>) {
        let peering = self.config.peering();
        let Arrival {
            from,
            at,
            to,
            ip_len,
            stamp,
        } = arrival;
        let counters = self.counters.clone();
        let c = &*counters;
        bump(&c.mgrp_received);
        if !peering.peers.is_peer(from) {
            bump(&c.mgrp_not_peer);
            self.not_peer_log.warn(format_args!(
                "dropped an MGRP packet from {from}, which is no peer; add it with --peer if it should be one"
            ));
            return;
        }
        let packet = match Packet::new_checked(payload) {
            Ok(p) => p,
            Err(e) => {
                bump(&c.mgrp_malformed);
                self.malformed_log.warn(format_args!(
                    "dropped a malformed MGRP packet from {from}: {e}"
                ));
                return;
            }
        };
        // Before anything of the packet is used.
        let Some(newest) = self.authentic(from, to, &packet, opened) else {
            return;
        };
        // Only an authentic packet of the peer's, newer than any before, moves a
        // roaming peer: not a replay, and not one reordered on the way.
        if let Some(before) = at
            .filter(|_| newest)
            .and_then(|at| self.endpoints.heard(from, at))
        {
            bump(&c.peer_endpoint_changes);
            let at = at.map_or_else(String::new, |a| a.to_string());
            // Only the key's holder can move a peer: not rate-limited.
            match before {
                Some(b) => info!("peer {from} moved from {b} to {at}"),
                None => info!("peer {from} is at {at}"),
            }
        }
        bump(match packet.kind() {
            Kind::Probe => &c.probes_received,
            Kind::Continuation => &c.continuations_received,
            Kind::Keepalive => &c.keepalives_received,
        });
        let now = mgrp_rt::mono_now();
        for chunk in packet.chunks() {
            if let ChunkOutcome::Complete(rider) = self.reasm.handle_chunk(now, from, &chunk) {
                match self.admit(from, to, &rider) {
                    Ok(Admitted::Here) => {}
                    Ok(Admitted::Relayed) => bump(&c.riders_relayed),
                    Err(refusal) => {
                        self.count_refusal(from, refusal, &rider);
                        continue;
                    }
                }
                // A full batch is written first: riders keep their order.
                if self.writes.is_full() {
                    self.flush_writes();
                }
                if !self.writes.push(&rider) {
                    match self.tun.write(&rider) {
                        Ok(_) => {
                            bump(&c.riders_delivered);
                            c.rider_bytes_delivered
                                .fetch_add(rider.len() as u64, Ordering::Relaxed);
                        }
                        Err(e) => {
                            bump(&c.tun_write_errors);
                            debug!("writing a rider to the TUN failed: {e}");
                        }
                    }
                }
            }
        }
        self.publish();
        if packet.kind() == Kind::Probe {
            let probe = ReceivedProbe {
                source: from,
                src_port: packet.src_port(),
                dst_port: packet.dst_port(),
                transaction: packet.transaction(),
                seq: packet.seq(),
                train_len: packet.train_len(),
                size: u16::try_from(ip_len).unwrap_or(u16::MAX),
                header: packet.tool_header().to_vec(),
                sender_time: packet.sender_time_near(stamp),
                receive_time: stamp,
                rider_bytes: u32::try_from(packet.rider_bytes()).unwrap_or(u32::MAX),
            };
            self.listeners.deliver(probe, c);
        }
    }
}

/// Why a rider from `from` was refused, and what would let the next one in, for the
/// log of the receiving host (which the sender's operator may be reading).
fn refusal_words(from: IpAddr, refusal: Refusal, rider: Option<&Ip<'_>>) -> String {
    let (src, dst) = rider.map_or((None, None), |h| (Some(h.src), Some(h.dst)));
    let show = |a: Option<IpAddr>| a.map_or_else(|| "?".to_string(), |a| a.to_string());
    match refusal {
        Refusal::ForeignSource => {
            let src_text = show(src);
            let link_local = match src {
                Some(IpAddr::V4(a)) => a.is_link_local(),
                Some(IpAddr::V6(a)) => a.segments()[0] & 0xffc0 == 0xfe80,
                None => false,
            };
            if link_local {
                format!(
                    "its source {src_text} is the sending host's tunnel address, not {from}: \
                     on {from}, set mgrpd's `source` for this host's [[peers]] table (or --source) \
                     to {from}, the address this host knows it by"
                )
            } else {
                format!(
                    "its source {src_text} is neither {from} nor in that peer's allowed-sources here: \
                     on {from}, traffic to this host must leave from {from} (mgrpd's `source` setting \
                     there), or add {src_text} to allowed-sources in peer {from}'s [[peers]] table here"
                )
            }
        }
        Refusal::ForeignDestination => format!(
            "its destination {} is not the address the MGRP packet came to; \
             add it with --local PREFIX (local-prefixes) if this host owns it",
            show(dst)
        ),
        Refusal::SpecialDestination => format!(
            "its destination {} is a broadcast, multicast, loopback, link-local or unspecified address",
            show(dst)
        ),
        Refusal::InnerMgrp => "it is itself an MGRP packet".to_string(),
        Refusal::Malformed => "it is not a sound IP packet".to_string(),
        Refusal::NotPeer => format!("{from} is not a peer"),
    }
}

/// Where an MGRP packet came from and how: its peer, the UDP endpoint it came from
/// (over UDP), the address it was sent to, its IP length and receive stamp.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    from: IpAddr,
    at: Option<std::net::SocketAddr>,
    to: Option<IpAddr>,
    ip_len: usize,
    stamp: WallTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_rider_says_what_the_sender_should_change() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // A 20-byte IPv4 header (UDP, no payload) from `src` to `dst`.
        let header = |src: &str, dst: &str| {
            let (s, d) = (
                src.parse::<std::net::Ipv4Addr>().unwrap(),
                dst.parse::<std::net::Ipv4Addr>().unwrap(),
            );
            let mut h = vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0];
            h.extend(s.octets());
            h.extend(d.octets());
            h
        };
        let (tun_bytes, other_bytes) = (
            header("169.254.77.1", "10.0.1.2"),
            header("192.0.2.77", "10.0.1.2"),
        );
        let (tun, other) = (
            Ip::parse(&tun_bytes).unwrap(),
            Ip::parse(&other_bytes).unwrap(),
        );
        let from = ip("192.0.2.2");
        let w = refusal_words(from, Refusal::ForeignSource, Some(&tun));
        assert!(
            w.contains("169.254.77.1 is the sending host's tunnel address"),
            "{w}"
        );
        assert!(w.contains("on 192.0.2.2, set mgrpd's `source`"), "{w}");
        let w = refusal_words(from, Refusal::ForeignSource, Some(&other));
        assert!(
            w.contains(
                "add 192.0.2.77 to allowed-sources in peer 192.0.2.2's [[peers]] table here"
            ),
            "{w}"
        );
        let w = refusal_words(from, Refusal::ForeignDestination, Some(&other));
        assert!(
            w.contains("10.0.1.2") && w.contains("--local PREFIX"),
            "{w}"
        );
    }
}
