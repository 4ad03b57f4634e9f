//! Piggyback planning for one destination, without I/O and without a clock.
//!
//! The daemon keeps one [`Planner`] per destination and drives it quinn-style:
//!
//! - [`Planner::handle_rider`] queues an application packet with its arrival time;
//! - [`Planner::handle_transaction`] queues a tool's probe train;
//! - [`Planner::poll_probe`] builds the next probe of the train in flight (starting the
//!   next queued train if none is), filled with rider chunks taken from the front of the
//!   queue, and says when it is due; [`Planner::next_deadline`] tells the pacer when the
//!   probe after that is due, so it can build it as late as possible;
//! - [`Planner::handle_probe_sent`] records each departure; after the last one
//!   [`Planner::poll_report`] yields the transaction's report;
//! - [`Planner::poll_transmit`] releases riders that may wait no longer: whole ones
//!   unchanged, and the rest of a rider that already started riding as continuation
//!   packets;
//! - [`Planner::poll_timeout`] says when to call back.
//!
//! Riders leave strictly in arrival order, so at most the rider at the front of the
//! queue is ever partly sent.
//!
//! The size rule holds by construction: a probe's MGRP packet is exactly the requested
//! IP total length minus the destination's IP header length, and chunks only take space
//! that would otherwise be padding.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use crate::stats::{Outcome, PlannerCounters, ProbeDeparture, TransactionReport};
use crate::time::duration_nanos;
use crate::wire::{self, Chunk, Header, Kind, MAX_CHUNKS, Packet, Repr, Version};
use crate::{MonoTime, WallTime};

/// When held riders leave without a train. No default of its own: the paper's
/// policy ([`Policy::default`]) holds always, and a driver chooses for itself (mgrpd
/// holds on demand unless told otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldMode {
    /// Every rider waits up to the hold time for a train, whether or not one is
    /// coming (the paper's behaviour).
    Always,
    /// Riders wait only while a transaction to their destination is queued or in
    /// flight, so traffic sees no added delay when nobody measures.
    OnDemand,
}

/// How many riders one probe may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Packing {
    /// At most one rider chunk per probe (the paper's behaviour).
    #[default]
    OnePerProbe,
    /// As many chunks as fit in the padding.
    Multiple,
}

/// Piggyback policy of a planner.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// How long a rider may wait for a probe (default 10 ms, the paper's `mgrp10`).
    pub hold: Duration,
    /// When riders wait at all.
    pub hold_mode: HoldMode,
    /// Riders per probe.
    pub packing: Packing,
    /// Largest fraction of a train's probes that may carry riders, in `0.0..=1.0`.
    pub max_train_fraction: f64,
    /// If set, only probes with sequence number below this may carry riders (paper
    /// §4.2.2: losses hit the end of a congesting burst, so spare the riders).
    pub first_n: Option<u16>,
    /// Most riders held at once.
    pub max_queued_riders: usize,
    /// Most rider bytes held at once.
    pub max_queued_bytes: usize,
    /// Smallest fragment worth making: a rider is split only if the piece that fits
    /// holds at least this many bytes.
    pub min_fragment: usize,
    /// Length of the authentication trailer reserved in every MGRP packet.
    pub trailer_len: u16,
}

impl Default for Policy {
    /// The paper's policy (`mgrp10`): riders always wait up to 10 ms, one chunk per
    /// probe, every probe may carry riders.
    fn default() -> Self {
        Self {
            hold: Duration::from_millis(10),
            hold_mode: HoldMode::Always,
            packing: Packing::OnePerProbe,
            max_train_fraction: 1.0,
            first_n: None,
            max_queued_riders: 4096,
            max_queued_bytes: 4 << 20,
            min_fragment: 64,
            trailer_len: 0,
        }
    }
}

/// Errors of planner configuration and of submitted transactions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `max_train_fraction` is not within `0.0..=1.0`.
    #[error("max train fraction must be between 0 and 1, got {0}")]
    BadFraction(String),
    /// The path's IP header length or MTU cannot carry an MGRP packet.
    #[error(
        "path MTU {mtu} with {ip_header_len}-byte IP headers leaves no room for an MGRP packet"
    )]
    BadPath {
        /// IP header length.
        ip_header_len: u16,
        /// Path MTU.
        mtu: u16,
    },
    /// The transaction has no probes.
    #[error("a transaction needs at least one probe")]
    EmptyTrain,
    /// The transaction has more probes than a 16-bit sequence number counts.
    #[error("a transaction may have at most 65535 probes, got {0}")]
    TrainTooLong(usize),
    /// A probe is too small for the IP and MGRP headers plus the tool's header.
    #[error(
        "probe {seq} asks for {size} bytes but needs at least {min} (IP and MGRP headers plus its {tool_header_len}-byte tool header); ask for a larger probe or a shorter tool header"
    )]
    ProbeTooSmall {
        /// Sequence number of the probe.
        seq: u16,
        /// Requested IP total length.
        size: u16,
        /// Smallest size that fits.
        min: usize,
        /// Length of its tool header.
        tool_header_len: usize,
    },
    /// A probe is larger than the path MTU.
    #[error("probe {seq} asks for {size} bytes, more than the path MTU of {mtu}")]
    ProbeTooLarge {
        /// Sequence number of the probe.
        seq: u16,
        /// Requested IP total length.
        size: u16,
        /// Path MTU.
        mtu: u16,
    },
}

/// The IP path to one destination, as far as sizes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Length of the IP header MGRP packets travel under (20 for IPv4, 40 for IPv6).
    pub ip_header_len: u16,
    /// Largest IP packet the path carries.
    pub mtu: u16,
    /// The MGRP format version the peer at its end is sent (trains version 2 cannot
    /// number go as version 1; see [`Version::fits`]).
    pub wire: Version,
}

impl Path {
    /// An IPv4 path with the given MTU.
    pub const fn ipv4(mtu: u16) -> Self {
        Self {
            ip_header_len: 20,
            mtu,
            wire: Version::V1,
        }
    }

    /// An IPv6 path with the given MTU.
    pub const fn ipv6(mtu: u16) -> Self {
        Self {
            ip_header_len: 40,
            mtu,
            wire: Version::V1,
        }
    }

    /// The same path with MGRP packets inside UDP datagrams: the UDP header counts
    /// with the IP header, so probes keep their sizes and give it padding.
    pub const fn udp(self) -> Self {
        Self {
            ip_header_len: self.ip_header_len + UDP_HEADER_LEN,
            ..self
        }
    }

    /// The same path with MGRP packets in format `wire`; version 1 if the path's MTU
    /// is over the longest chunk version 2 describes (16383 bytes).
    pub const fn with_wire(self, wire: Version) -> Self {
        let wire = if self.mtu as usize > wire::V2_MAX_CHUNK_LEN {
            Version::V1
        } else {
            wire
        };
        Self { wire, ..self }
    }

    /// The longest rider that fits whole in one continuation on this path, with a
    /// trailer of `trailer_len` bytes: the path's MTU less the IP (and UDP) header,
    /// the continuation header, one descriptor of a whole rider and the trailer. A
    /// route to a UDP peer with this as its MTU makes every packet of it one
    /// continuation.
    pub fn whole_rider_room(&self, trailer_len: u16) -> usize {
        self.room(trailer_len, self.wire.desc_len(0, 1, 1))
    }

    /// The rider bytes each continuation carries when a rider is cut across several
    /// (each piece's descriptor is the longest of the format).
    pub fn piece_room(&self, trailer_len: u16) -> usize {
        self.room(trailer_len, self.wire.max_desc_len())
    }

    fn room(&self, trailer_len: u16, desc_len: usize) -> usize {
        usize::from(self.mtu)
            .saturating_sub(usize::from(self.ip_header_len))
            .saturating_sub(wire::min_packet_len(
                self.wire,
                Kind::Continuation,
                0,
                trailer_len,
            ))
            .saturating_sub(desc_len)
    }
}

/// Length of a UDP header.
pub const UDP_HEADER_LEN: u16 = 8;

/// How MGRP packets travel to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Encap {
    /// As the payload of IP packets of MGRP's own protocol number.
    #[default]
    Raw,
    /// As the payload of UDP datagrams, which NATs and firewalls pass. Riders that do
    /// not ride go in continuations too: a path that passes only UDP would not take
    /// them as they came.
    Udp,
}

/// How MGRP packets travel to each peer, encapsulation and format: as the longest
/// prefix holding it says, else as the default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EncapTable {
    /// For peers no prefix names.
    pub default: Encap,
    /// Per prefix of peers.
    pub per_peer: Vec<(crate::peers::Prefix, Encap)>,
    /// The format for peers no prefix names.
    pub wire_default: Version,
    /// The format per prefix of peers.
    pub wire_per_peer: Vec<(crate::peers::Prefix, Version)>,
}

fn longest<T: Copy>(table: &[(crate::peers::Prefix, T)], peer: std::net::IpAddr, default: T) -> T {
    table
        .iter()
        .filter(|(p, _)| p.contains(peer))
        .max_by_key(|(p, _)| p.len())
        .map_or(default, |(_, e)| *e)
}

impl EncapTable {
    /// How MGRP packets travel to `peer`.
    pub fn for_peer(&self, peer: std::net::IpAddr) -> Encap {
        longest(&self.per_peer, peer, self.default)
    }

    /// The format `peer` is sent.
    pub fn wire_for_peer(&self, peer: std::net::IpAddr) -> Version {
        longest(&self.wire_per_peer, peer, self.wire_default)
    }

    /// Whether any peer is reached over UDP.
    pub fn any_udp(&self) -> bool {
        self.default == Encap::Udp || self.per_peer.iter().any(|(_, e)| *e == Encap::Udp)
    }

    /// The path to `peer` with this MTU.
    pub fn path(&self, peer: std::net::IpAddr, mtu: u16) -> Path {
        let path = if peer.is_ipv4() {
            Path::ipv4(mtu)
        } else {
            Path::ipv6(mtu)
        }
        .with_wire(self.wire_for_peer(peer));
        match self.for_peer(peer) {
            Encap::Raw => path,
            Encap::Udp => path.udp(),
        }
    }
}

/// One probe of a transaction, as the tool specifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The tool's probe header, delivered to the receiving tool.
    pub header: Bytes,
    /// The probe's IP total length on the wire.
    pub size: u16,
    /// Gap before this probe (for the first probe: after the train starts).
    pub gap: Duration,
    /// Whether riders may use this probe's padding.
    pub piggyback: bool,
}

/// A probe transaction: a tool's train for one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// Id, chosen by the daemon and unique among its live transactions.
    pub id: u32,
    /// Measurement port of the sending tool.
    pub src_port: u16,
    /// Measurement port of the receiving tool.
    pub dst_port: u16,
    /// The probes, in sending order.
    pub probes: Vec<ProbeSpec>,
}

/// A probe ready to go: the MGRP packet (without IP header) and when it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeToSend {
    /// Transaction id.
    pub transaction: u32,
    /// Sequence number within the train.
    pub seq: u16,
    /// When it is due (absolute, from the train's start).
    pub deadline: MonoTime,
    /// The MGRP packet, as the checked view it was emitted as: exactly the requested
    /// size minus the IP header. Its sender stamp is zero; write it with
    /// [`Packet::set_sender_time`] right before sending (and seal it after).
    pub packet: Packet<Vec<u8>>,
    /// Rider bytes the probe carries.
    pub rider_bytes: usize,
    /// Rider chunks the probe carries.
    pub rider_chunks: usize,
    /// The whole riders that have a chunk in this probe (shared, not copied). If the
    /// probe cannot be sent, the driver can send these unchanged instead, so that a
    /// failed send does not lose them.
    pub riders: Vec<Bytes>,
}

/// Something to send now that is not a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A rider whose wait is over, to be sent as it came (an IP packet).
    Unchanged(Bytes),
    /// A continuation packet with the rest of a rider that started riding in a probe.
    /// Write its sender stamp like a probe's.
    Continuation(Packet<Vec<u8>>),
}

/// Why a rider was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RiderDrop {
    /// The queue held its most riders or bytes, or its owner's total was reached.
    #[error("rider queue full")]
    QueueFull,
    /// The rider is larger than the path MTU.
    #[error("rider larger than the path MTU")]
    TooLarge,
    /// The rider has no bytes.
    #[error("empty rider")]
    Empty,
}

#[derive(Debug)]
struct Held {
    id: u32,
    arrival: MonoTime,
    data: Bytes,
    /// Bytes already sent in chunks.
    sent: usize,
    continued: bool,
}

#[derive(Debug)]
struct Active {
    tx: Transaction,
    /// The format of its probes.
    wire: Version,
    submitted: MonoTime,
    next_seq: usize,
    next_deadline: MonoTime,
    carry_budget: usize,
    departures: Vec<ProbeDeparture>,
    probes_sent: u16,
    probes_with_riders: u16,
    /// The first departure, once a probe has left.
    first_departed: Option<MonoTime>,
    /// Rider chunks carried, and their bytes.
    chunks_carried: u32,
    bytes_carried: u64,
    /// Rider bytes that arrived since the first departure, and held rider bytes
    /// that left outside probes since then (see
    /// [`TransactionReport::competing_rider_bytes`]).
    arrived_bytes: u64,
    released_bytes: u64,
}

/// The piggyback planner of one destination. See the module docs for the calls.
#[derive(Debug)]
pub struct Planner {
    policy: Policy,
    path: Path,
    riders: VecDeque<Held>,
    queued_bytes: usize,
    next_rider_id: u32,
    /// The id the next rider cut across version-2 packets gets (15 bits).
    next_cut_id: u32,
    pending: VecDeque<(MonoTime, Transaction)>,
    active: Option<Active>,
    reports: VecDeque<TransactionReport>,
    flushing: bool,
    counters: PlannerCounters,
    /// Buffers of sent probes, given back with [`Self::recycle`] and reused, so that
    /// building a probe allocates nothing once a train is under way.
    spare: Spare,
}

/// Reusable buffers of the probe path.
#[derive(Debug)]
struct Spare {
    packets: Vec<Vec<u8>>,
    riders: Vec<Vec<Bytes>>,
    plan: Vec<(usize, usize)>,
    /// Always empty; keeps its capacity between probes.
    chunks: Vec<Chunk<'static>>,
    /// The most chunks a probe can carry.
    most: usize,
}

/// How many spare buffers of each kind a planner keeps.
const SPARE_BUFFERS: usize = 4;

/// An empty vector of another lifetime's chunks that reuses `v`'s allocation (the
/// standard library collects a mapped `IntoIter` in place).
fn relabel<'b>(v: Vec<Chunk<'_>>) -> Vec<Chunk<'b>> {
    debug_assert!(v.is_empty());
    v.into_iter()
        .map(|c| Chunk {
            rider_id: c.rider_id,
            offset: c.offset,
            rider_len: c.rider_len,
            data: &[],
        })
        .collect()
}

impl Planner {
    /// A planner for the destination reached over `path`.
    pub fn new(policy: Policy, path: Path) -> Result<Self, PlanError> {
        if !(0.0..=1.0).contains(&policy.max_train_fraction) {
            return Err(PlanError::BadFraction(
                policy.max_train_fraction.to_string(),
            ));
        }
        let room = usize::from(path.mtu).checked_sub(
            usize::from(path.ip_header_len)
                + wire::min_packet_len(path.wire, Kind::Probe, 0, policy.trailer_len),
        );
        let Some(room) = room.filter(|&r| r > path.wire.max_desc_len()) else {
            return Err(PlanError::BadPath {
                ip_header_len: path.ip_header_len,
                mtu: path.mtu,
            });
        };
        // The most chunks one probe can carry: its buffers are sized for that once.
        let most = match policy.packing {
            Packing::OnePerProbe => 1,
            Packing::Multiple => (room
                / (path.wire.desc_len(0, 1, 1) + policy.min_fragment.max(1)))
            .clamp(1, MAX_CHUNKS),
        };
        let spare = Spare {
            packets: Vec::new(),
            riders: Vec::new(),
            plan: Vec::with_capacity(most),
            chunks: Vec::with_capacity(most),
            most,
        };
        Ok(Self {
            policy,
            path,
            riders: VecDeque::new(),
            queued_bytes: 0,
            next_rider_id: 0,
            next_cut_id: 0,
            pending: VecDeque::new(),
            active: None,
            reports: VecDeque::new(),
            flushing: false,
            counters: PlannerCounters::default(),
            spare,
        })
    }

    /// Takes back a probe's buffers once it was sent, to build later probes in.
    pub fn recycle(&mut self, probe: ProbeToSend) {
        let ProbeToSend {
            packet, mut riders, ..
        } = probe;
        if self.spare.packets.len() < SPARE_BUFFERS {
            let mut packet = packet.into_inner();
            packet.clear();
            self.spare.packets.push(packet);
        }
        if self.spare.riders.len() < SPARE_BUFFERS {
            riders.clear();
            self.spare.riders.push(riders);
        }
    }

    /// Sets the id of the next rider. A daemon starts each planner at an unpredictable
    /// id, so that after a restart its riders are not taken for duplicates of the ones
    /// its previous life sent (receivers remember delivered ids for a while). Planned
    /// riders' ids stay below [`wire::TUNNELED_RIDER_ID`]: its bit is dropped. Version
    /// 2's cut riders start at the id's low 15 bits.
    pub fn set_next_rider_id(&mut self, id: u32) {
        self.next_rider_id = id & !wire::TUNNELED_RIDER_ID;
        self.next_cut_id = id & 0x7fff;
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The counters so far.
    pub fn counters(&self) -> PlannerCounters {
        PlannerCounters {
            riders_held: self.riders.len() as u64,
            ..self.counters
        }
    }

    /// Riders currently held.
    pub fn held_riders(&self) -> usize {
        self.riders.len()
    }

    /// Whether a transaction is queued or in flight.
    pub fn has_transaction(&self) -> bool {
        self.active.is_some() || !self.pending.is_empty()
    }

    /// The smallest IP total length a probe with this tool header may ask for.
    pub fn min_probe_size(&self, tool_header_len: usize) -> usize {
        self.min_probe_size_in(self.path.wire, tool_header_len)
    }

    fn min_probe_size_in(&self, wire: Version, tool_header_len: usize) -> usize {
        usize::from(self.path.ip_header_len)
            + wire::min_packet_len(wire, Kind::Probe, tool_header_len, self.policy.trailer_len)
    }

    /// The format a train goes in: the path's, unless its fields cannot hold the train.
    fn wire_for(&self, tx: &Transaction) -> Version {
        let tool = tx.probes.iter().map(|p| p.header.len()).max().unwrap_or(0);
        if self
            .path
            .wire
            .fits(tx.probes.len(), tool, self.policy.trailer_len)
        {
            self.path.wire
        } else {
            Version::V1
        }
    }

    /// Rider bytes held.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Queues an application packet that arrived at `now`.
    pub fn handle_rider(&mut self, now: MonoTime, data: Bytes) -> Result<(), RiderDrop> {
        self.handle_rider_within(now, data, usize::MAX)
    }

    /// Queues an application packet that arrived at `now` if it fits this planner's
    /// queue and `room`, the bytes its owner still allows over all its planners; a
    /// rider over either bound is dropped as [`RiderDrop::QueueFull`].
    pub fn handle_rider_within(
        &mut self,
        now: MonoTime,
        data: Bytes,
        room: usize,
    ) -> Result<(), RiderDrop> {
        self.counters.riders_in += 1;
        self.counters.rider_bytes_in += data.len() as u64;
        let drop = if data.is_empty() {
            Some(RiderDrop::Empty)
        } else if data.len() > usize::from(self.path.mtu) {
            Some(RiderDrop::TooLarge)
        } else if self.riders.len() >= self.policy.max_queued_riders
            || self.queued_bytes + data.len() > self.policy.max_queued_bytes
            || data.len() > room
        {
            Some(RiderDrop::QueueFull)
        } else {
            None
        };
        if let Some(reason) = drop {
            match reason {
                RiderDrop::Empty => self.counters.riders_dropped_empty += 1,
                RiderDrop::TooLarge => self.counters.riders_dropped_too_large += 1,
                RiderDrop::QueueFull => self.counters.riders_dropped_queue_full += 1,
            }
            return Err(reason);
        }
        if let Some(a) = self.active.as_mut().filter(|a| a.first_departed.is_some()) {
            a.arrived_bytes += data.len() as u64;
        }
        let id = self.next_rider_id;
        self.next_rider_id = self.next_rider_id.wrapping_add(1) & !wire::TUNNELED_RIDER_ID;
        self.queued_bytes += data.len();
        self.riders.push_back(Held {
            id,
            arrival: now,
            data,
            sent: 0,
            continued: false,
        });
        Ok(())
    }

    /// Queues a transaction submitted at `now`, after checking that every probe fits
    /// the path and holds its tool header.
    pub fn handle_transaction(&mut self, now: MonoTime, tx: Transaction) -> Result<(), PlanError> {
        if let Err(e) = self.check_transaction(&tx) {
            self.counters.transactions_rejected += 1;
            return Err(e);
        }
        self.counters.transactions_accepted += 1;
        self.pending.push_back((now, tx));
        Ok(())
    }

    fn check_transaction(&self, tx: &Transaction) -> Result<(), PlanError> {
        if tx.probes.is_empty() {
            return Err(PlanError::EmptyTrain);
        }
        if tx.probes.len() > usize::from(u16::MAX) {
            return Err(PlanError::TrainTooLong(tx.probes.len()));
        }
        let wire = self.wire_for(tx);
        for (seq, p) in (0u16..).zip(&tx.probes) {
            let min = self.min_probe_size_in(wire, p.header.len());
            if usize::from(p.size) < min {
                return Err(PlanError::ProbeTooSmall {
                    seq,
                    size: p.size,
                    min,
                    tool_header_len: p.header.len(),
                });
            }
            if p.size > self.path.mtu {
                return Err(PlanError::ProbeTooLarge {
                    seq,
                    size: p.size,
                    mtu: self.path.mtu,
                });
            }
        }
        Ok(())
    }

    /// Cancels a transaction, queued or in flight. A train in flight stops after the
    /// probes already built; either way its report says [`Outcome::Cancelled`].
    /// Returns whether the transaction was found.
    pub fn cancel_transaction(&mut self, id: u32) -> bool {
        if let Some(pos) = self.pending.iter().position(|(_, t)| t.id == id) {
            if let Some((_, tx)) = self.pending.remove(pos) {
                self.report_unsent(&tx);
            }
            return true;
        }
        if self.active.as_ref().is_some_and(|a| a.tx.id == id) {
            self.finish(Outcome::Cancelled);
            return true;
        }
        false
    }

    /// Stops taking trains and makes every held rider due now: queued transactions and
    /// the one in flight are cancelled (each still gets its report), and
    /// [`Self::poll_transmit`] then releases everything. For a clean shutdown.
    pub fn handle_shutdown(&mut self) {
        self.flushing = true;
        for (_, tx) in std::mem::take(&mut self.pending) {
            self.report_unsent(&tx);
        }
        if self.active.is_some() {
            self.finish(Outcome::Cancelled);
        }
    }

    /// The report of a transaction cancelled before any of its probes left.
    fn report_unsent(&mut self, tx: &Transaction) {
        self.counters.transactions_cancelled += 1;
        self.reports.push_back(TransactionReport::unsent(
            tx.id,
            Outcome::Cancelled,
            tx.probes.len() as u16,
        ));
    }

    /// When the next probe of the train in flight is due, if one is in flight.
    pub fn next_deadline(&self) -> Option<MonoTime> {
        self.active.as_ref().map(|a| a.next_deadline)
    }

    /// The gaps before the first and the second probe of the train that starts next
    /// (the second `None` for a train of one probe), if one is queued and none is in
    /// flight.
    pub fn next_gaps(&self) -> Option<(Duration, Option<Duration>)> {
        if self.active.is_some() {
            return None;
        }
        let probes = &self.pending.front()?.1.probes;
        Some((probes.first()?.gap, probes.get(1).map(|p| p.gap)))
    }

    /// The id of the train in flight, if one is.
    pub fn transaction_in_flight(&self) -> Option<u32> {
        self.active.as_ref().map(|a| a.tx.id)
    }

    /// Starts the next queued train at `now` if none is in flight, and says when its
    /// next probe is due (for a train just started: `now` plus its first gap). Nothing
    /// is built yet, so a pacer can sleep until shortly before the deadline and only then
    /// call [`Self::poll_probe`], letting riders that arrive meanwhile ride.
    pub fn poll_start(&mut self, now: MonoTime) -> Option<MonoTime> {
        if let Some(a) = &self.active {
            return Some(a.next_deadline);
        }
        let (submitted, tx) = self.pending.pop_front()?;
        let n = tx.probes.len();
        let eligible = tx
            .probes
            .iter()
            .enumerate()
            .filter(|(i, p)| p.piggyback && self.policy.first_n.is_none_or(|f| *i < usize::from(f)))
            .count();
        let by_fraction = (self.policy.max_train_fraction * n as f64).floor() as usize;
        let first_gap = tx.probes[0].gap;
        let deadline = now.saturating_add(first_gap);
        self.active = Some(Active {
            wire: self.wire_for(&tx),
            departures: Vec::with_capacity(n),
            first_departed: None,
            chunks_carried: 0,
            bytes_carried: 0,
            arrived_bytes: 0,
            released_bytes: 0,
            next_deadline: deadline,
            next_seq: 0,
            carry_budget: eligible.min(by_fraction),
            probes_sent: 0,
            probes_with_riders: 0,
            submitted,
            tx,
        });
        Some(deadline)
    }

    /// Builds the next probe, starting the next queued train at `now` if none is in
    /// flight. Call it shortly before the probe is due (see [`Self::poll_start`] and
    /// [`Self::next_deadline`]) so riders that arrived meanwhile can ride. Returns `None`
    /// when nothing is queued, or when every probe of the train in flight has been built
    /// and waits for [`Self::handle_probe_sent`].
    pub fn poll_probe(&mut self, now: MonoTime) -> Option<ProbeToSend> {
        self.poll_start(now)?;
        if self
            .active
            .as_ref()
            .is_some_and(|a| a.next_seq >= a.tx.probes.len())
        {
            return None;
        }
        let active = self.active.as_mut()?;
        let seq = active.next_seq;
        let spec = &active.tx.probes[seq];
        let deadline = active.next_deadline;
        let len = usize::from(spec.size) - usize::from(self.path.ip_header_len);
        let may_carry = spec.piggyback
            && active.carry_budget > 0
            && self.policy.first_n.is_none_or(|f| seq < usize::from(f));
        let wire = active.wire;
        let room = len
            - wire::min_packet_len(
                wire,
                Kind::Probe,
                spec.header.len(),
                self.policy.trailer_len,
            );
        let max_chunks = match self.policy.packing {
            Packing::OnePerProbe => 1,
            Packing::Multiple => MAX_CHUNKS,
        };
        let mut plan = std::mem::take(&mut self.spare.plan);
        plan.clear();
        if may_carry {
            plan_chunks(
                &self.riders,
                room,
                max_chunks,
                self.policy.min_fragment,
                wire,
                &mut plan,
            );
            if wire == Version::V2 {
                // Version 2 numbers only riders cut across packets: each gets its id
                // when it is first cut, so the 15 bits wrap as slowly as they can.
                for &(i, take) in &plan {
                    let r = &mut self.riders[i];
                    if r.sent == 0 && take < r.data.len() {
                        r.id = self.next_cut_id;
                        self.next_cut_id = self.next_cut_id.wrapping_add(1) & 0x7fff;
                    }
                }
            }
        }
        let seq16 = seq as u16; // checked: trains have at most u16::MAX probes
        let mut packet = self.spare.packets.pop().unwrap_or_default();
        packet.clear();
        packet.resize(len, 0);
        let mut chunks = relabel(std::mem::take(&mut self.spare.chunks));
        chunks.extend(plan.iter().map(|&(i, take)| {
            let r = &self.riders[i];
            Chunk {
                rider_id: r.id,
                offset: r.sent as u16,
                rider_len: r.data.len() as u16,
                data: &r.data[r.sent..r.sent + take],
            }
        }));
        let repr = Repr {
            version: wire,
            header: Header::probe(
                active.tx.src_port,
                active.tx.dst_port,
                active.tx.id,
                seq16,
                active.tx.probes.len() as u16,
            ),
            tool_header: &spec.header,
            chunks,
            trailer_len: self.policy.trailer_len,
        };
        // The plan never exceeds `room`, which is the packet's padding, nor the
        // chunk limit; the tool header was checked when the train was submitted.
        let packet = repr
            .emit_into(packet)
            .unwrap_or_else(|e| panic!("a planned probe does not fit its packet: {e}"));
        let mut chunks = repr.chunks;
        chunks.clear();
        self.spare.chunks = relabel(chunks);
        let rider_bytes: usize = plan.iter().map(|&(_, take)| take).sum();
        active.chunks_carried += plan.len() as u32;
        active.bytes_carried += rider_bytes as u64;
        if !plan.is_empty() {
            active.carry_budget -= 1;
            active.probes_with_riders += 1;
            self.counters.probes_with_riders += 1;
        }
        self.counters.probes_planned += 1;
        self.counters.rider_bytes_in_probes += rider_bytes as u64;
        active.departures.push(ProbeDeparture {
            seq: seq16,
            deadline,
            departed: None,
            stamp: WallTime::UNIX_EPOCH,
            kernel_queued: None,
            kernel_sent: None,
            rider_bytes: rider_bytes as u32,
        });
        active.next_seq += 1;
        if let Some(next) = active.tx.probes.get(active.next_seq) {
            active.next_deadline = deadline.saturating_add(next.gap);
        }
        let transaction = active.tx.id;
        let mut riders = self
            .spare
            .riders
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.spare.most));
        riders.extend(plan.iter().map(|&(i, _)| self.riders[i].data.clone()));
        self.consume(&plan);
        let rider_chunks = plan.len();
        self.spare.plan = plan;
        Some(ProbeToSend {
            transaction,
            seq: seq16,
            deadline,
            packet,
            rider_bytes,
            rider_chunks,
            riders,
        })
    }

    /// Marks riders' bytes as sent after they were planned into a probe.
    fn consume(&mut self, plan: &[(usize, usize)]) {
        for &(_, take) in plan {
            // Plans always start at the front and go in order.
            let Some(front) = self.riders.front_mut() else {
                break;
            };
            front.sent += take;
            if front.sent == front.data.len() {
                self.complete_front();
            }
        }
    }

    fn complete_front(&mut self) {
        if let Some(r) = self.riders.pop_front() {
            self.queued_bytes -= r.data.len();
            self.counters.riders_piggybacked += 1;
            if r.continued {
                self.counters.riders_finished_by_continuation += 1;
            }
        }
    }

    /// Records that probe `seq` of `transaction` left at `departed` with sender stamp
    /// `stamp`, or failed to leave (`None`). After the train's last probe, its report
    /// becomes available from [`Self::poll_report`].
    pub fn handle_probe_sent(
        &mut self,
        transaction: u32,
        seq: u16,
        departed: Option<(MonoTime, WallTime)>,
    ) {
        let Some(active) = self.active.as_mut().filter(|a| a.tx.id == transaction) else {
            return;
        };
        let Some(d) = active.departures.get_mut(usize::from(seq)) else {
            return;
        };
        if d.departed.is_some() {
            return;
        }
        if let Some((mono, wall)) = departed {
            d.departed = Some(mono);
            active.first_departed.get_or_insert(mono);
            d.stamp = wall;
            active.probes_sent += 1;
        }
        if usize::from(seq) + 1 == active.tx.probes.len() {
            self.finish(Outcome::Completed);
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        let Some(a) = self.active.take() else { return };
        match outcome {
            Outcome::Completed => self.counters.transactions_completed += 1,
            Outcome::Cancelled => self.counters.transactions_cancelled += 1,
        }
        let first = a.departures.iter().find_map(|d| d.departed);
        let last = a.departures.iter().rev().find_map(|d| d.departed);
        self.reports.push_back(TransactionReport {
            transaction: a.tx.id,
            outcome,
            probes_requested: a.tx.probes.len() as u16,
            probes_sent: a.probes_sent,
            probes_with_riders: a.probes_with_riders,
            rider_bytes: a.bytes_carried,
            rider_chunks: a.chunks_carried,
            competing_rider_bytes: a.arrived_bytes.saturating_sub(a.released_bytes),
            queue_ns: first.map_or(0, |f| duration_nanos(f.saturating_since(a.submitted))),
            send_ns: match (first, last) {
                (Some(f), Some(l)) => duration_nanos(l.saturating_since(f)),
                _ => 0,
            },
            departures: a.departures,
            probes_late: 0,
            late_threshold_ns: 0,
            probes_unstamped: 0,
            departure_clock: crate::stats::DepartureClock::Daemon,
            probes_displaced: 0,
        });
    }

    /// The report of a finished transaction, oldest first.
    pub fn poll_report(&mut self) -> Option<TransactionReport> {
        self.reports.pop_front()
    }

    /// Whether the front rider may wait no longer at `now`.
    fn front_due(&self, now: MonoTime) -> bool {
        let Some(front) = self.riders.front() else {
            return false;
        };
        self.flushing
            || (self.policy.hold_mode == HoldMode::OnDemand && !self.has_transaction())
            || now >= front.arrival.saturating_add(self.policy.hold)
    }

    /// Releases the next rider that may wait no longer at `now`: whole riders
    /// unchanged, the rest of a partly sent rider as continuation packets. Call until
    /// it returns `None`.
    pub fn poll_transmit(&mut self, now: MonoTime) -> Option<Transmit> {
        if !self.front_due(now) {
            return None;
        }
        let room = self.continuation_room();
        let front = self.riders.front()?;
        let whole = front.sent == 0;
        // Held bytes that go onto the path outside probes while a train is on it compete
        // with that train (see `TransactionReport::competing_rider_bytes`).
        let onto_path = if whole {
            front.data.len()
        } else {
            (front.data.len() - front.sent).min(room)
        };
        if let Some(a) = self.active.as_mut().filter(|a| a.first_departed.is_some()) {
            a.released_bytes += onto_path as u64;
        }
        if whole {
            let r = self.riders.pop_front()?;
            self.queued_bytes -= r.data.len();
            self.counters.riders_sent_unchanged += 1;
            return Some(Transmit::Unchanged(r.data));
        }
        let front = self.riders.front_mut()?;
        let trailer = self.policy.trailer_len;
        let take = onto_path;
        let chunk = Chunk {
            rider_id: front.id,
            offset: front.sent as u16,
            rider_len: front.data.len() as u16,
            data: &front.data[front.sent..front.sent + take],
        };
        let repr = Repr {
            version: self.path.wire,
            header: Header::continuation(),
            tool_header: &[],
            chunks: vec![chunk],
            trailer_len: trailer,
        };
        let packet = repr
            .emit_into(vec![0u8; repr.buffer_len()])
            .unwrap_or_else(|e| panic!("a continuation does not fit its packet: {e}"));
        front.sent += take;
        front.continued = true;
        self.counters.continuation_packets += 1;
        self.counters.rider_bytes_in_continuations += take as u64;
        if front.sent == front.data.len() {
            self.complete_front();
        }
        Some(Transmit::Continuation(packet))
    }

    /// Rider bytes one continuation packet carries at most.
    fn continuation_room(&self) -> usize {
        usize::from(self.path.mtu)
            - usize::from(self.path.ip_header_len)
            - wire::min_packet_len(
                self.path.wire,
                Kind::Continuation,
                0,
                self.policy.trailer_len,
            )
            - self.path.wire.max_desc_len()
    }

    /// When the front rider falls due, if any rider is held.
    pub fn rider_timeout(&self) -> Option<MonoTime> {
        self.riders.front().map(|r| {
            if self.flushing
                || (self.policy.hold_mode == HoldMode::OnDemand && !self.has_transaction())
            {
                r.arrival
            } else {
                r.arrival.saturating_add(self.policy.hold)
            }
        })
    }

    /// When to call back: the earliest of when the front rider falls due and, with a
    /// transaction waiting or in flight, when its next probe is due (a queued train is
    /// due at once). `None` when there is nothing to wait for.
    pub fn poll_timeout(&self) -> Option<MonoTime> {
        let rider = self.rider_timeout();
        let probe = match &self.active {
            Some(a) => Some(a.next_deadline),
            None => self.pending.front().map(|(submitted, _)| *submitted),
        };
        match (rider, probe) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Chooses chunks for a probe with `room` bytes of padding in format `wire`:
/// `(queue index, bytes)` in queue order, starting at the front. Only the last chunk
/// may be cut short.
fn plan_chunks(
    riders: &VecDeque<Held>,
    mut room: usize,
    max_chunks: usize,
    min_fragment: usize,
    wire: Version,
    plan: &mut Vec<(usize, usize)>,
) {
    for (i, r) in riders.iter().enumerate() {
        if plan.len() == max_chunks {
            break;
        }
        let remaining = r.data.len() - r.sent;
        let rest = wire.desc_len(r.sent, remaining, r.data.len()) + remaining;
        if rest <= room {
            plan.push((i, remaining));
            room -= rest;
            continue;
        }
        // The piece that fits starts the rider or goes on with it, without ending it.
        let cut = wire.desc_len(r.sent, 0, r.data.len());
        if let Some(fits) = room.checked_sub(cut).filter(|&f| f >= min_fragment.max(1)) {
            plan.push((i, fits));
        }
        break;
    }
}

#[cfg(test)]
pub(crate) mod tests;
