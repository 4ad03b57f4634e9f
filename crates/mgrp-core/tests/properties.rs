//! Property tests of the protocol as a whole: the codec round-trips, the IP parser,
//! the size rule, rider conservation, the piggyback limits, and end-to-end delivery
//! of planned riders through reassembly under reordering, duplication and loss.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use mgrp_core::ip::{self, Ip};
use mgrp_core::planner::{
    HoldMode, Packing, Path, Planner, Policy, ProbeSpec, Transaction, Transmit,
};
use mgrp_core::reassembly::{ChunkOutcome, Limits, Reassembler};
use mgrp_core::schedule::Schedule;
use mgrp_core::wire::{
    Chunk, Header, Kind, Packet, Repr, TUNNELED_RIDER_ID, UNNUMBERED_RIDER_ID, V2_TRAILER_LEN,
    Version,
};
use mgrp_core::{MonoTime, WallTime};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------
// Codec

#[derive(Debug, Clone)]
struct OwnedChunk {
    rider_id: u32,
    offset: u16,
    rider_len: u16,
    data: Vec<u8>,
}

fn chunk_strategy() -> impl Strategy<Value = OwnedChunk> {
    (
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 1..120),
        0u16..2000,
        0u16..3000,
        any::<bool>(),
    )
        .prop_map(|(rider_id, data, offset, extra, last)| {
            let end = offset + data.len() as u16;
            let rider_len = if last { end } else { end + extra.max(1) };
            OwnedChunk {
                rider_id,
                offset,
                rider_len,
                data,
            }
        })
}

#[derive(Debug, Clone)]
struct OwnedPacket {
    version: Version,
    header: Header,
    tool_header: Vec<u8>,
    chunks: Vec<OwnedChunk>,
    trailer_len: u16,
    padding: usize,
}

fn packet_strategy() -> impl Strategy<Value = OwnedPacket> {
    let probe = (
        any::<(u16, u16, u32, u64, bool)>(),
        1u16..=u16::MAX,
        any::<u16>(),
        prop::collection::vec(any::<u8>(), 0..80),
        prop::collection::vec(chunk_strategy(), 0..6),
    )
        .prop_map(
            |((src, dst, tx, time, last), train_len, seq, tool, chunks)| {
                let header = Header {
                    kind: Kind::Probe,
                    last_in_train: last,
                    src_port: src,
                    dst_port: dst,
                    transaction: tx,
                    seq: seq % train_len,
                    train_len,
                    sender_time: WallTime::from_nanos(time),
                };
                (header, tool, chunks)
            },
        );
    let continuation =
        (any::<u64>(), prop::collection::vec(chunk_strategy(), 1..4)).prop_map(|(time, chunks)| {
            let header = Header {
                sender_time: WallTime::from_nanos(time),
                ..Header::continuation()
            };
            (header, Vec::new(), chunks)
        });
    (
        prop_oneof![probe, continuation],
        0u16..40,
        0usize..300,
        any::<bool>(),
    )
        .prop_map(
            |((header, tool_header, chunks), trailer_len, padding, v2)| {
                let p = OwnedPacket {
                    version: Version::V1,
                    header,
                    tool_header,
                    chunks,
                    trailer_len,
                    padding,
                };
                if v2 { p.into_v2() } else { p }
            },
        )
}

impl OwnedPacket {
    /// The packet with every field cut to what version 2 holds: a 16-bit transaction,
    /// 12-bit sequence and train length, the stamp's low 32 bits (none outside a probe),
    /// a 24-byte trailer or none, 15-bit rider ids (and the tunneled bit), and no id
    /// on a whole rider.
    fn into_v2(mut self) -> Self {
        let h = &mut self.header;
        h.transaction &= 0xffff;
        if h.kind == Kind::Probe {
            h.train_len = h.train_len % 4095 + 1;
            h.seq %= h.train_len;
            h.sender_time = WallTime::from_nanos(h.sender_time.as_nanos() & 0xffff_ffff);
        } else {
            h.sender_time = WallTime::UNIX_EPOCH;
        }
        self.trailer_len = if self.trailer_len.is_multiple_of(2) {
            0
        } else {
            V2_TRAILER_LEN
        };
        for c in &mut self.chunks {
            let whole = c.offset == 0 && usize::from(c.rider_len) == c.data.len();
            c.rider_id = if whole {
                UNNUMBERED_RIDER_ID
            } else {
                (c.rider_id & TUNNELED_RIDER_ID) | (c.rider_id & 0x7fff)
            };
        }
        self.version = Version::V2;
        self
    }

    fn repr(&self) -> Repr<'_> {
        Repr {
            version: self.version,
            header: self.header,
            tool_header: &self.tool_header,
            chunks: self
                .chunks
                .iter()
                .map(|c| Chunk {
                    rider_id: c.rider_id,
                    offset: c.offset,
                    rider_len: c.rider_len,
                    data: &c.data,
                })
                .collect(),
            trailer_len: self.trailer_len,
        }
    }
}

proptest! {
    #[test]
    fn parse_of_emit_is_identity(p in packet_strategy()) {
        let repr = p.repr();
        let len = repr.buffer_len() + p.padding;
        let mut buf = vec![0x5a; len];
        repr.emit(&mut buf).unwrap();
        prop_assert_eq!(buf.len(), len);
        let view = Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Repr::parse(&view), repr);
        // Padding and trailer are zero.
        let body_end = len - p.padding - usize::from(p.trailer_len);
        prop_assert!(buf[body_end..].iter().all(|&b| b == 0));
    }

    #[test]
    fn truncation_is_always_an_error(p in packet_strategy(), cut in 1usize..400) {
        let repr = p.repr();
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut buf).unwrap();
        let cut = cut.min(buf.len());
        prop_assert!(Packet::new_checked(&buf[..buf.len() - cut]).is_err());
    }

    #[test]
    fn parser_never_panics(data in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(p) = Packet::new_checked(&data[..]) {
            let repr = Repr::parse(&p);
            prop_assert!(repr.buffer_len() <= data.len());
            prop_assert!(data.len() >= p.version().header_len(p.kind()));
        }
    }

    #[test]
    fn ip_parser_never_panics_and_stays_inside(data in prop::collection::vec(any::<u8>(), 0..120), first in any::<u8>()) {
        let mut data = data;
        if let Some(b) = data.first_mut() {
            // Mostly versions 4 and 6, so headers get read past their first byte.
            *b = [0x45, 0x46, 0x60, first][usize::from(first % 4)];
        }
        if let Ok(ip) = Ip::parse(&data) {
            prop_assert!(ip.header_len + ip.payload.len() <= data.len());
            prop_assert_eq!(ip::destination(&data), Some(ip.dst));
            let _ = ip.upper_protocol();
            if let Ok(exact) = Ip::parse_exact(&data) {
                prop_assert_eq!(exact.total_len(), data.len());
            }
        } else {
            prop_assert!(Ip::parse_exact(&data).is_err());
        }
    }

    #[test]
    fn schedule_deadlines_are_prefix_sums(t0 in 0u64..1 << 50, gaps in prop::collection::vec(0u64..10_000_000, 0..50)) {
        let s = Schedule::new(MonoTime::from_nanos(t0), gaps.iter().map(|&g| Duration::from_nanos(g)));
        let mut sum = t0;
        for (i, g) in gaps.iter().enumerate() {
            sum += g;
            prop_assert_eq!(s.deadline(i), Some(MonoTime::from_nanos(sum)));
        }
        let on_time: Vec<_> = (0..gaps.len()).filter_map(|i| s.deadline(i)).collect();
        let t = s.summarize(&on_time, Duration::from_micros(20));
        prop_assert_eq!((t.lateness_max_ns, t.gap_error_max_ns, t.stalls), (0, 0, 0));
    }
}

// ---------------------------------------------------------------------------------
// Planner and reassembly, end to end

const PATH: Path = Path::ipv4(1500);

/// A probe as (size, gap µs, piggyback, tool header length).
type SimProbe = (u16, u64, bool, usize);

#[derive(Debug, Clone)]
struct Scenario {
    policy: Policy,
    /// (arrival µs, length, fill byte)
    riders: Vec<(u64, usize, u8)>,
    /// (submission µs, probes)
    trains: Vec<(u64, Vec<SimProbe>)>,
    /// Drives the shuffling, duplication and loss of MGRP packets.
    seed: u64,
    loss_percent: u64,
    dup_percent: u64,
    wire: Version,
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    (
        0u64..20_000,
        prop_oneof![Just(HoldMode::Always), Just(HoldMode::OnDemand)],
        prop_oneof![Just(Packing::OnePerProbe), Just(Packing::Multiple)],
        prop_oneof![Just(1.0), Just(0.5), Just(0.0), 0.0f64..1.0],
        prop::option::of(0u16..12),
        1usize..200,
        prop_oneof![Just(0u16), 1u16..64],
        1usize..400,
    )
        .prop_map(
            |(
                hold_us,
                hold_mode,
                packing,
                fraction,
                first_n,
                min_fragment,
                trailer_len,
                max_riders,
            )| {
                Policy {
                    hold: Duration::from_micros(hold_us),
                    hold_mode,
                    packing,
                    max_train_fraction: fraction,
                    first_n,
                    max_queued_riders: max_riders,
                    max_queued_bytes: 1 << 20,
                    min_fragment,
                    trailer_len,
                }
            },
        )
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    let riders = prop::collection::vec((0u64..50_000, 1usize..1500, any::<u8>()), 0..120);
    let probe = (
        100u16..=1500,
        0u64..2_000,
        prop::bool::weighted(0.85),
        0usize..20,
    );
    let trains = prop::collection::vec((0u64..50_000, prop::collection::vec(probe, 1..40)), 0..6);
    (
        policy_strategy(),
        riders,
        trains,
        any::<u64>(),
        0u64..30,
        0u64..30,
        prop_oneof![Just(Version::V1), Just(Version::V2)],
    )
        .prop_map(
            |(mut policy, mut riders, mut trains, seed, loss_percent, dup_percent, wire)| {
                riders.sort_by_key(|r| r.0);
                trains.sort_by_key(|t| t.0);
                if wire == Version::V2 && policy.trailer_len != 0 {
                    policy.trailer_len = V2_TRAILER_LEN;
                }
                Scenario {
                    wire,
                    policy,
                    riders,
                    trains,
                    seed,
                    loss_percent,
                    dup_percent,
                }
            },
        )
}

/// A deterministic generator for the network's mischief.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn rider_bytes(len: usize, fill: u8, index: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| fill ^ (i as u8) ^ (index as u8).rotate_left(3))
            .collect::<Vec<_>>(),
    )
}

fn us(n: u64) -> MonoTime {
    MonoTime::from_nanos(n * 1_000)
}

#[derive(Default)]
struct Outcome {
    /// MGRP packets that left: probes and continuations.
    mgrp: Vec<Vec<u8>>,
    unchanged: Vec<Bytes>,
    /// Riders accepted by the planner, in order (in version 1 the k-th has rider id k).
    accepted: Vec<Bytes>,
    /// What left, in order: true for the next MGRP packet, false for the next rider
    /// sent unchanged.
    order: Vec<bool>,
}

impl Outcome {
    /// The accepted rider each chunk of each MGRP packet belongs to. Riders leave in
    /// arrival order, so the packets and unchanged riders, in the order they left,
    /// are the accepted riders in order: a chunk at offset 0 starts the next one, any
    /// other continues the one before.
    fn attribute(&self) -> Vec<Vec<usize>> {
        let (mut next, mut current, mut packets) = (0, None, self.mgrp.iter());
        let mut owners = Vec::new();
        for &is_mgrp in &self.order {
            if !is_mgrp {
                next += 1;
                continue;
            }
            let pkt = packets.next().expect("one packet per entry");
            let mut of = Vec::new();
            for c in Packet::new_checked(&pkt[..]).unwrap().chunks() {
                let owner = if c.offset == 0 {
                    next += 1;
                    next - 1
                } else {
                    current.expect("a chunk past offset 0 continues a started rider")
                };
                current = Some(owner);
                of.push(owner);
            }
            owners.push(of);
        }
        owners
    }
}

fn run(s: &Scenario) -> Result<Outcome, TestCaseError> {
    let mut p = Planner::new(s.policy.clone(), PATH.with_wire(s.wire)).unwrap();
    let mut out = Outcome::default();
    let mut riders = s.riders.iter().enumerate().peekable();
    let mut trains = s.trains.iter().enumerate().peekable();
    let mut now = 0u64;
    let mut train_sizes: HashMap<u32, Vec<(u16, bool)>> = HashMap::new();
    let mut carrying: BTreeMap<u32, usize> = BTreeMap::new();
    for _ in 0..100_000 {
        while let Some((i, &(at, len, fill))) = riders.peek().copied() {
            if at > now {
                break;
            }
            let data = rider_bytes(len, fill, i);
            if p.handle_rider(us(now), data.clone()).is_ok() {
                out.accepted.push(data);
            }
            riders.next();
        }
        while let Some((i, (at, probes))) = trains.peek().copied() {
            if *at > now {
                break;
            }
            let id = i as u32;
            let specs: Vec<ProbeSpec> = probes
                .iter()
                .map(|&(size, gap, piggyback, hdr)| ProbeSpec {
                    header: Bytes::from(vec![0xee; hdr]),
                    size,
                    gap: Duration::from_micros(gap),
                    piggyback,
                })
                .collect();
            let tx = Transaction {
                id,
                src_port: 1,
                dst_port: 2,
                probes: specs,
            };
            if p.handle_transaction(us(now), tx).is_ok() {
                train_sizes.insert(id, probes.iter().map(|&(s, _, pb, _)| (s, pb)).collect());
            }
            trains.next();
        }
        while let Some(t) = p.poll_transmit(us(now)) {
            match t {
                Transmit::Unchanged(b) => {
                    out.unchanged.push(b);
                    out.order.push(false);
                }
                Transmit::Continuation(b) => {
                    out.mgrp.push(b.into_inner());
                    out.order.push(true);
                }
            }
        }
        let probe_due = match p.next_deadline() {
            Some(d) => d <= us(now),
            None => p.has_transaction(),
        };
        if probe_due {
            let probe = p
                .poll_probe(us(now))
                .expect("a transaction is queued or in flight");
            let spec = train_sizes[&probe.transaction][usize::from(probe.seq)];
            // The size rule: exactly the requested IP length, riders or not.
            prop_assert_eq!(probe.packet.len() + 20, usize::from(spec.0));
            let view = Packet::new_checked(probe.packet.as_bytes()).unwrap();
            prop_assert_eq!(view.rider_bytes(), probe.rider_bytes);
            if view.chunk_count() > 0 {
                prop_assert!(spec.1, "rider in a probe whose piggyback flag is off");
                if let Some(n) = s.policy.first_n {
                    prop_assert!(probe.seq < n, "rider beyond the first {} probes", n);
                }
                if s.policy.packing == Packing::OnePerProbe {
                    prop_assert_eq!(view.chunk_count(), 1);
                }
                *carrying.entry(probe.transaction).or_default() += 1;
            }
            let departed = us(now).max(probe.deadline);
            now = departed.as_nanos() / 1_000;
            p.handle_probe_sent(
                probe.transaction,
                probe.seq,
                Some((departed, WallTime::from_nanos(departed.as_nanos()))),
            );
            out.mgrp.push(probe.packet.into_inner());
            out.order.push(true);
            continue;
        }
        prop_assert!(p.counters().riders_accounted(), "{:?}", p.counters());
        let next = [
            riders.peek().map(|(_, r)| r.0),
            trains.peek().map(|(_, t)| t.0),
            p.poll_timeout().map(|t| t.as_nanos().div_ceil(1_000)),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => now = now.max(t),
            None => break,
        }
    }
    prop_assert_eq!(p.held_riders(), 0, "riders left behind");
    prop_assert!(!p.has_transaction());
    // Piggyback limits per train.
    while let Some(report) = p.poll_report() {
        let n = usize::from(report.probes_requested);
        let allowed = (s.policy.max_train_fraction * n as f64).floor() as usize;
        let carried = carrying.get(&report.transaction).copied().unwrap_or(0);
        prop_assert!(
            carried <= allowed,
            "{} of {} probes carried, {} allowed",
            carried,
            n,
            allowed
        );
        prop_assert_eq!(usize::from(report.probes_with_riders), carried);
        prop_assert_eq!(report.probes_sent, report.probes_requested);
    }
    let c = p.counters();
    prop_assert!(c.riders_accounted(), "{:?}", c);
    prop_assert_eq!(c.riders_in, s.riders.len() as u64);
    prop_assert_eq!(
        c.riders_piggybacked + c.riders_sent_unchanged,
        out.accepted.len() as u64
    );
    // Every accepted rider left exactly once: all of its bytes in MGRP packets (each
    // byte once, and right), or whole and unchanged.
    let mut sent_bytes: HashMap<u32, Vec<u8>> = HashMap::new();
    for (pkt, owners) in out.mgrp.iter().zip(out.attribute()) {
        for (ch, owner) in Packet::new_checked(&pkt[..]).unwrap().chunks().zip(owners) {
            if s.wire == Version::V1 {
                prop_assert_eq!(ch.rider_id as usize, owner);
            } else if ch.is_whole() {
                prop_assert_eq!(ch.rider_id, UNNUMBERED_RIDER_ID);
            }
            let original = &out.accepted[owner];
            let at = usize::from(ch.offset);
            prop_assert_eq!(ch.data, &original[at..at + ch.data.len()]);
            let count = sent_bytes
                .entry(owner as u32)
                .or_insert_with(|| vec![0; original.len()]);
            count[at..at + ch.data.len()]
                .iter_mut()
                .for_each(|n| *n += 1);
        }
    }
    prop_assert!(
        sent_bytes.values().all(|n| n.iter().all(|&n| n == 1)),
        "rider bytes not sent exactly once"
    );
    prop_assert_eq!(sent_bytes.len() as u64, c.riders_piggybacked);
    let mut left_unchanged: Vec<&Bytes> = (0..out.accepted.len())
        .filter(|i| !sent_bytes.contains_key(&(*i as u32)))
        .map(|i| &out.accepted[i])
        .collect();
    let mut unchanged: Vec<&Bytes> = out.unchanged.iter().collect();
    left_unchanged.sort();
    unchanged.sort();
    prop_assert_eq!(left_unchanged, unchanged);
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn planned_riders_reassemble_exactly_or_count_as_incomplete(s in scenario_strategy()) {
        let out = run(&s)?;
        // The network: reorder, lose, duplicate.
        let mut rng = Rng(s.seed | 1);
        let owners = out.attribute();
        let mut wire: Vec<(u64, &Vec<u8>, &Vec<usize>)> = Vec::new();
        for (pkt, of) in out.mgrp.iter().zip(&owners) {
            if rng.next() % 100 < s.loss_percent {
                continue;
            }
            wire.push((rng.next(), pkt, of));
            if rng.next() % 100 < s.dup_percent {
                wire.push((rng.next(), pkt, of));
            }
        }
        wire.sort_by_key(|w| w.0);
        // Which bytes of which riders survived the network.
        let mut arrived: HashMap<usize, Vec<bool>> = HashMap::new();
        // Copies of whole version-2 riders that arrived: they carry no id, so a
        // duplicated packet delivers them twice (the documented cost of the lean format).
        let mut unnumbered: HashMap<usize, usize> = HashMap::new();
        for (_, pkt, of) in &wire {
            for (c, &owner) in Packet::new_checked(&pkt[..]).unwrap().chunks().zip(of.iter()) {
                if c.rider_id == UNNUMBERED_RIDER_ID {
                    *unnumbered.entry(owner).or_default() += 1;
                }
                let have = arrived.entry(owner).or_insert_with(|| vec![false; usize::from(c.rider_len)]);
                have[usize::from(c.offset)..usize::from(c.offset) + c.data.len()].fill(true);
            }
        }
        let limits = Limits { per_peer_bytes: 1 << 26, total_bytes: 1 << 26, timeout: Duration::from_secs(3600), remembered: 1 << 20, max_rider_len: usize::from(u16::MAX) };
        let mut r = Reassembler::new(limits);
        let mut delivered: HashMap<usize, usize> = HashMap::new();
        for (_, pkt, of) in &wire {
            for (c, &owner) in Packet::new_checked(&pkt[..]).unwrap().chunks().zip(of.iter()) {
                if let ChunkOutcome::Complete(bytes) = r.handle_chunk(MonoTime::ZERO, 0u8, &c) {
                    let original = &out.accepted[owner];
                    prop_assert_eq!(&bytes[..], &original[..], "rider {} delivered wrong", owner);
                    *delivered.entry(owner).or_default() += 1;
                }
            }
        }
        let complete = arrived.values().filter(|have| have.iter().all(|&b| b)).count();
        prop_assert_eq!(delivered.len(), complete);
        for (owner, n) in &delivered {
            let copies = unnumbered.get(owner).copied().unwrap_or(1);
            prop_assert_eq!(*n, copies, "rider {} delivered {} times", owner, n);
        }
        for (id, have) in &arrived {
            prop_assert_eq!(delivered.contains_key(id), have.iter().all(|&b| b));
        }
        let counters = r.counters();
        prop_assert_eq!(counters.riders_pending as usize, arrived.len() - complete);
        prop_assert_eq!(counters.riders_inconsistent, 0);
    }
}

fn train_request_strategy() -> impl Strategy<Value = mgrp_core::api::TrainRequest> {
    // Few distinct values, so runs of equal probes are common.
    let probe = (
        0u8..3,
        prop::sample::select(vec![100u16, 1500]),
        0u64..3,
        any::<bool>(),
        1u32..4,
    )
        .prop_map(
            |(h, size, gap, piggyback, count)| mgrp_core::api::ProbeRequest {
                header: vec![h; usize::from(h)],
                size,
                gap_ns: gap * 1000,
                piggyback,
                count,
            },
        );
    prop::collection::vec(probe, 0..40).prop_map(|probes| mgrp_core::api::TrainRequest {
        destination: "192.0.2.7".parse().unwrap(),
        src_port: 1,
        dst_port: 2,
        probes,
    })
}

proptest! {
    /// Folding runs changes the request's length, never the train it stands for, and
    /// leaves no two neighbours that could be one.
    #[test]
    fn folded_trains_unfold_to_the_same_probes(t in train_request_strategy()) {
        let before: Vec<_> = t.unfolded().cloned().map(|p| (p.header, p.size, p.gap_ns, p.piggyback)).collect();
        let mut folded = t.clone();
        folded.fold_runs();
        let after: Vec<_> = folded.unfolded().cloned().map(|p| (p.header, p.size, p.gap_ns, p.piggyback)).collect();
        prop_assert_eq!(&before, &after);
        prop_assert_eq!(folded.probe_count(), before.len() as u64);
        for w in folded.probes.windows(2) {
            prop_assert!((&w[0].header, w[0].size, w[0].gap_ns, w[0].piggyback) != (&w[1].header, w[1].size, w[1].gap_ns, w[1].piggyback));
        }
        // And it survives the wire.
        let json = serde_json::to_string(&folded).unwrap();
        let back: mgrp_core::api::TrainRequest = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, folded);
    }
}

proptest! {
    /// The planner keeps the schedule's deadlines (prefix sums of the gaps from the
    /// train's start), however late each probe actually leaves: it accumulates them
    /// one gap at a time, without allocating, and `Schedule` is its reference.
    #[test]
    fn planner_deadlines_are_the_schedules_whatever_the_lateness(
        t0 in 0u64..1 << 40,
        probes in prop::collection::vec((0u64..2_000, 0u64..500), 1..40),
    ) {
        let mut p = Planner::new(Policy::default(), PATH).unwrap();
        let tx = Transaction {
            id: 9,
            src_port: 1,
            dst_port: 2,
            probes: probes
                .iter()
                .map(|&(gap, _)| ProbeSpec {
                    header: Bytes::new(),
                    size: 200,
                    gap: Duration::from_micros(gap),
                    piggyback: true,
                })
                .collect(),
        };
        let start = MonoTime::from_nanos(t0);
        p.handle_transaction(start, tx).unwrap();
        let schedule = Schedule::new(start, probes.iter().map(|&(gap, _)| Duration::from_micros(gap)));
        let mut now = start;
        for (i, &(_, late)) in probes.iter().enumerate() {
            let probe = p.poll_probe(now).expect("a probe is due");
            prop_assert_eq!(Some(probe.deadline), schedule.deadline(i));
            // It leaves late; the next deadline must not move.
            now = probe.deadline.saturating_add(Duration::from_micros(late)).max(now);
            p.handle_probe_sent(9, probe.seq, Some((now, WallTime::from_nanos(1))));
        }
        let report = p.poll_report().expect("a report");
        for (i, d) in report.departures.iter().enumerate() {
            prop_assert_eq!(Some(d.deadline), schedule.deadline(i));
        }
    }
}
