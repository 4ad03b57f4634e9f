use super::*;
use crate::wire::Packet;

const PATH: Path = Path::ipv4(1500);

fn ms(n: u64) -> MonoTime {
    MonoTime::from_nanos(n * 1_000_000)
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn rider(len: usize, fill: u8) -> Bytes {
    Bytes::from(vec![fill; len])
}

/// A train of `n` equal probes that allow riders (the endpoint's tests use it too).
pub(crate) fn train(id: u32, n: usize, size: u16, gap: Duration) -> Transaction {
    Transaction {
        id,
        src_port: 7,
        dst_port: 9,
        probes: (0..n)
            .map(|_| ProbeSpec {
                header: Bytes::from_static(b"hdr"),
                size,
                gap,
                piggyback: true,
            })
            .collect(),
    }
}

fn planner(policy: Policy) -> Planner {
    Planner::new(policy, PATH).unwrap()
}

fn send_all(p: &mut Planner, now: MonoTime) -> Vec<ProbeToSend> {
    let mut out = Vec::new();
    while let Some(probe) = p.poll_probe(now) {
        p.handle_probe_sent(
            probe.transaction,
            probe.seq,
            Some((
                probe.deadline,
                WallTime::from_nanos(probe.deadline.as_nanos()),
            )),
        );
        out.push(probe);
    }
    out
}

#[test]
fn probe_has_requested_size_and_carries_a_rider() {
    let mut p = planner(Policy::default());
    p.handle_rider(ms(0), rider(100, 0xab)).unwrap();
    p.handle_transaction(ms(1), train(1, 3, 500, us(200)))
        .unwrap();
    let probes = send_all(&mut p, ms(2));
    assert_eq!(probes.len(), 3);
    for (i, probe) in probes.iter().enumerate() {
        assert_eq!(probe.packet.len(), 500 - 20);
        assert_eq!(
            probe.deadline,
            ms(2).saturating_add(us(200) * (i as u32 + 1))
        );
        let view = Packet::new_checked(probe.packet.as_bytes()).unwrap();
        assert_eq!(view.tool_header(), b"hdr");
        assert_eq!((view.seq(), view.train_len()), (i as u16, 3));
        assert_eq!(view.last_in_train(), i == 2);
    }
    assert_eq!(probes[0].rider_bytes, 100);
    assert_eq!(probes[1].rider_bytes, 0);
    let report = p.poll_report().unwrap();
    assert_eq!(report.outcome, Outcome::Completed);
    assert_eq!((report.probes_sent, report.probes_with_riders), (3, 1));
    assert_eq!(report.rider_bytes, 100);
    // The rider arrived before the first departure: it would not have competed.
    assert_eq!(report.competing_rider_bytes, 0);
    assert_eq!(report.queue_ns, 1_000_000 + 200_000);
    assert_eq!(report.send_ns, 400_000);
    let c = p.counters();
    assert_eq!((c.riders_piggybacked, c.riders_held), (1, 0));
    assert!(c.riders_accounted());
}

#[test]
fn large_rider_is_fragmented_across_probes() {
    let mut p = planner(Policy::default());
    let data: Vec<u8> = (0..1400u16).map(|i| i as u8).collect();
    p.handle_rider(ms(0), Bytes::from(data.clone())).unwrap();
    p.handle_transaction(ms(0), train(1, 5, 600, us(100)))
        .unwrap();
    let probes = send_all(&mut p, ms(0));
    let mut got = vec![0u8; 1400];
    let mut total = 0;
    for probe in &probes {
        let view = Packet::new_checked(probe.packet.as_bytes()).unwrap();
        for c in view.chunks() {
            assert_eq!(c.rider_len, 1400);
            got[usize::from(c.offset)..usize::from(c.offset) + c.data.len()]
                .copy_from_slice(c.data);
            total += c.data.len();
        }
    }
    assert_eq!(total, 1400);
    assert_eq!(got, data);
    // 600 - 20 - 28 - 3 = 549 bytes of room, 537 of data after the descriptor.
    assert_eq!(probes[0].rider_bytes, 537);
    assert_eq!(probes[2].rider_bytes, 1400 - 2 * 537);
    // Every probe that carries a piece of the rider can hand back the whole rider.
    for probe in &probes[..3] {
        assert_eq!(probe.riders, [Bytes::from(data.clone())]);
    }
    assert!(probes[3].riders.is_empty());
    assert_eq!(p.counters().riders_piggybacked, 1);
}

#[test]
fn multiple_packing_fills_a_probe() {
    let mut p = planner(Policy {
        packing: Packing::Multiple,
        ..Policy::default()
    });
    for i in 0..10 {
        p.handle_rider(ms(0), rider(40, i)).unwrap();
    }
    p.handle_transaction(ms(0), train(1, 1, 400, Duration::ZERO))
        .unwrap();
    let probe = p.poll_probe(ms(0)).unwrap();
    // Room 400-20-28-3 = 349: seven 52-byte chunks (364 would not fit) = 6, 6*52 = 312,
    // leaving 37: too little for a 64-byte fragment minimum.
    assert_eq!(probe.rider_chunks, 6);
    assert_eq!(p.held_riders(), 4);
}

#[test]
fn one_per_probe_packing_takes_one_rider() {
    let mut p = planner(Policy::default());
    for i in 0..3 {
        p.handle_rider(ms(0), rider(40, i)).unwrap();
    }
    p.handle_transaction(ms(0), train(1, 2, 400, Duration::ZERO))
        .unwrap();
    let probes = send_all(&mut p, ms(0));
    assert_eq!(
        probes.iter().map(|p| p.rider_chunks).collect::<Vec<_>>(),
        [1, 1]
    );
    assert_eq!(p.held_riders(), 1);
}

#[test]
fn hold_always_waits_then_releases_unchanged() {
    let mut p = planner(Policy::default());
    p.handle_rider(ms(0), rider(50, 1)).unwrap();
    assert_eq!(p.poll_timeout(), Some(ms(10)));
    assert_eq!(p.poll_transmit(ms(9)), None);
    assert_eq!(
        p.poll_transmit(ms(10)),
        Some(Transmit::Unchanged(rider(50, 1)))
    );
    assert_eq!(p.poll_transmit(ms(10)), None);
    let c = p.counters();
    assert_eq!(c.riders_sent_unchanged, 1);
    assert!(c.riders_accounted());
}

#[test]
fn hold_on_demand_releases_at_once_without_a_train() {
    let mut p = planner(Policy {
        hold_mode: HoldMode::OnDemand,
        ..Policy::default()
    });
    p.handle_rider(ms(0), rider(50, 1)).unwrap();
    assert_eq!(p.poll_timeout(), Some(ms(0)));
    assert!(matches!(
        p.poll_transmit(ms(0)),
        Some(Transmit::Unchanged(_))
    ));
    // With a train queued the rider waits for it.
    p.handle_transaction(ms(1), train(1, 2, 500, us(100)))
        .unwrap();
    p.handle_rider(ms(1), rider(50, 2)).unwrap();
    assert_eq!(p.poll_transmit(ms(1)), None);
    let probes = send_all(&mut p, ms(1));
    assert_eq!(probes[0].rider_bytes, 50);
    // After the train, a new rider leaves at once again.
    p.handle_rider(ms(2), rider(50, 3)).unwrap();
    assert!(matches!(
        p.poll_transmit(ms(2)),
        Some(Transmit::Unchanged(_))
    ));
}

#[test]
fn expired_partial_rider_goes_as_continuation() {
    let mut p = planner(Policy::default());
    let data: Vec<u8> = (0..1000u16).map(|i| (i * 7) as u8).collect();
    p.handle_rider(ms(0), Bytes::from(data.clone())).unwrap();
    p.handle_transaction(ms(0), train(1, 1, 300, Duration::ZERO))
        .unwrap();
    let probe = send_all(&mut p, ms(0)).remove(0);
    let first = probe.rider_bytes;
    assert!(first > 0 && first < 1000);
    let Some(Transmit::Continuation(pkt)) = p.poll_transmit(ms(10)) else {
        panic!("expected a continuation packet");
    };
    let view = Packet::new_checked(pkt.as_bytes()).unwrap();
    assert_eq!(view.kind(), Kind::Continuation);
    let c = view.chunks().next().unwrap();
    assert_eq!(usize::from(c.offset), first);
    assert_eq!(c.data, &data[first..]);
    let counters = p.counters();
    assert_eq!(counters.riders_piggybacked, 1);
    assert_eq!(counters.riders_finished_by_continuation, 1);
    assert!(counters.riders_accounted());
}

#[test]
fn fraction_and_first_n_limit_carrying_probes() {
    let policy = Policy {
        max_train_fraction: 0.5,
        ..Policy::default()
    };
    let mut p = planner(policy);
    for i in 0..20 {
        p.handle_rider(ms(0), rider(30, i)).unwrap();
    }
    p.handle_transaction(ms(0), train(1, 10, 300, us(10)))
        .unwrap();
    let probes = send_all(&mut p, ms(0));
    assert_eq!(probes.iter().filter(|p| p.rider_chunks > 0).count(), 5);

    let mut p = planner(Policy {
        first_n: Some(3),
        ..Policy::default()
    });
    for i in 0..20 {
        p.handle_rider(ms(0), rider(30, i)).unwrap();
    }
    p.handle_transaction(ms(0), train(1, 10, 300, us(10)))
        .unwrap();
    let carried: Vec<_> = send_all(&mut p, ms(0))
        .iter()
        .map(|p| p.rider_chunks)
        .collect();
    assert_eq!(carried, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn piggyback_flag_off_keeps_probe_empty() {
    let mut p = planner(Policy::default());
    p.handle_rider(ms(0), rider(30, 1)).unwrap();
    let mut tx = train(1, 2, 300, us(10));
    tx.probes[0].piggyback = false;
    p.handle_transaction(ms(0), tx).unwrap();
    let carried: Vec<_> = send_all(&mut p, ms(0))
        .iter()
        .map(|p| p.rider_chunks)
        .collect();
    assert_eq!(carried, [0, 1]);
}

#[test]
fn competing_bytes_count_riders_that_arrived_during_the_train() {
    let mut p = planner(Policy::default());
    p.handle_rider(ms(0), rider(100, 1)).unwrap();
    p.handle_transaction(ms(0), train(1, 3, 500, us(1000)))
        .unwrap();
    let first = p.poll_probe(ms(0)).unwrap();
    p.handle_probe_sent(1, 0, Some((ms(1), WallTime::from_nanos(1))));
    assert_eq!(first.rider_bytes, 100);
    // Arrives between the first and the last departure.
    p.handle_rider(ms(1), rider(80, 2)).unwrap();
    let second = p.poll_probe(ms(1)).unwrap();
    p.handle_probe_sent(1, 1, Some((ms(2), WallTime::from_nanos(2))));
    let third = p.poll_probe(ms(2)).unwrap();
    p.handle_probe_sent(1, 2, Some((ms(3), WallTime::from_nanos(3))));
    assert_eq!((second.rider_bytes, third.rider_bytes), (80, 0));
    let report = p.poll_report().unwrap();
    assert_eq!(report.rider_bytes, 180);
    assert_eq!(
        report.competing_rider_bytes, 80,
        "the rider that came before the train was off the path before it too"
    );
    assert_eq!(report.departures[1].departed, Some(ms(2)));
    assert_eq!(report.departures[1].stamp, WallTime::from_nanos(2));
}

/// What competes is what the application sent during the train less what went onto
/// the path outside probes meanwhile, whichever probe (if any) carried it: riders held
/// from before the train that ride in it take the place of riders that arrive during
/// it and are still held at its end, and riders that leave unchanged mid-train
/// compete on the path for real.
#[test]
fn competing_bytes_are_what_arrived_during_the_train_less_what_left_unchanged() {
    let mut p = planner(Policy::default());
    assert_eq!(p.policy().hold, Duration::from_millis(10));
    // Two riders held from before the train.
    p.handle_rider(ms(0), rider(150, 1)).unwrap();
    p.handle_rider(ms(1), rider(100, 2)).unwrap();
    // Probes due at 9, 13 and 17 ms, one rider each.
    p.handle_transaction(ms(5), train(1, 3, 300, us(4000)))
        .unwrap();
    let first = p.poll_probe(ms(9)).unwrap();
    p.handle_probe_sent(1, 0, Some((ms(9), WallTime::from_nanos(9))));
    // Two arrive during the train.
    p.handle_rider(ms(10), rider(200, 3)).unwrap();
    p.handle_rider(ms(11), rider(200, 4)).unwrap();
    // The second rider from before falls due at 11 ms and leaves unchanged.
    let released: Vec<_> = std::iter::from_fn(|| p.poll_transmit(ms(11))).collect();
    assert!(matches!(&released[..], [Transmit::Unchanged(d)] if d.len() == 100));
    let second = p.poll_probe(ms(13)).unwrap();
    p.handle_probe_sent(1, 1, Some((ms(13), WallTime::from_nanos(13))));
    // One more arrives and is still held when the train ends.
    p.handle_rider(ms(15), rider(60, 5)).unwrap();
    let third = p.poll_probe(ms(17)).unwrap();
    p.handle_probe_sent(1, 2, Some((ms(17), WallTime::from_nanos(17))));
    assert_eq!(
        [first.rider_bytes, second.rider_bytes, third.rider_bytes],
        [150, 200, 200]
    );
    let report = p.poll_report().unwrap();
    assert_eq!(report.rider_bytes, 550);
    // Arrived during it: 200 + 200 + 60; onto the path outside probes: 100.
    assert_eq!(report.competing_rider_bytes, 360);
    assert_eq!(p.held_riders(), 1);
}

#[test]
fn invalid_transactions_are_refused_with_reasons() {
    let mut p = planner(Policy::default());
    assert_eq!(
        p.handle_transaction(ms(0), train(1, 0, 300, us(1))),
        Err(PlanError::EmptyTrain)
    );
    let err = p
        .handle_transaction(ms(0), train(1, 2, 50, us(1)))
        .unwrap_err();
    assert_eq!(
        err,
        PlanError::ProbeTooSmall {
            seq: 0,
            size: 50,
            min: 51,
            tool_header_len: 3
        }
    );
    assert!(err.to_string().contains("needs at least 51"));
    assert_eq!(
        p.handle_transaction(ms(0), train(1, 2, 1501, us(1))),
        Err(PlanError::ProbeTooLarge {
            seq: 0,
            size: 1501,
            mtu: 1500
        })
    );
    assert_eq!(p.handle_transaction(ms(0), train(1, 1, 51, us(1))), Ok(()));
    let c = p.counters();
    assert_eq!((c.transactions_rejected, c.transactions_accepted), (3, 1));
    assert!(
        Planner::new(
            Policy {
                max_train_fraction: 1.5,
                ..Policy::default()
            },
            PATH
        )
        .is_err()
    );
    assert!(Planner::new(Policy::default(), Path::ipv6(80)).is_err());
}

#[test]
fn drops_are_counted_by_reason() {
    let mut p = planner(Policy {
        max_queued_riders: 2,
        ..Policy::default()
    });
    assert_eq!(p.handle_rider(ms(0), Bytes::new()), Err(RiderDrop::Empty));
    assert_eq!(
        p.handle_rider(ms(0), rider(1501, 0)),
        Err(RiderDrop::TooLarge)
    );
    p.handle_rider(ms(0), rider(10, 0)).unwrap();
    p.handle_rider(ms(0), rider(10, 0)).unwrap();
    assert_eq!(
        p.handle_rider(ms(0), rider(10, 0)),
        Err(RiderDrop::QueueFull)
    );
    let c = p.counters();
    assert_eq!(
        (
            c.riders_dropped_empty,
            c.riders_dropped_too_large,
            c.riders_dropped_queue_full
        ),
        (1, 1, 1)
    );
    assert_eq!(c.riders_held, 2);
    assert!(c.riders_accounted());
}

#[test]
fn a_rider_over_the_owners_room_is_dropped_as_queue_full() {
    let mut p = planner(Policy::default());
    p.handle_rider_within(ms(0), rider(100, 0), 100).unwrap();
    assert_eq!(p.queued_bytes(), 100);
    assert_eq!(
        p.handle_rider_within(ms(0), rider(101, 0), 100),
        Err(RiderDrop::QueueFull)
    );
    assert_eq!(p.queued_bytes(), 100);
    let c = p.counters();
    assert_eq!((c.riders_in, c.riders_dropped_queue_full), (2, 1));
    assert!(c.riders_accounted());
}

#[test]
fn cancel_and_shutdown() {
    let mut p = planner(Policy::default());
    p.handle_transaction(ms(0), train(1, 3, 300, us(10)))
        .unwrap();
    p.handle_transaction(ms(0), train(2, 3, 300, us(10)))
        .unwrap();
    let probe = p.poll_probe(ms(0)).unwrap();
    p.handle_probe_sent(
        probe.transaction,
        probe.seq,
        Some((ms(0), WallTime::from_nanos(5))),
    );
    assert!(p.cancel_transaction(1));
    let report = p.poll_report().unwrap();
    assert_eq!(
        (report.outcome, report.probes_sent, report.probes_requested),
        (Outcome::Cancelled, 1, 3)
    );
    assert!(p.cancel_transaction(2));
    assert!(!p.cancel_transaction(2));
    assert!(p.poll_probe(ms(0)).is_none());
    // A train cancelled while queued still reports, so its submitter is answered.
    let report = p.poll_report().unwrap();
    assert_eq!(
        (report.transaction, report.outcome, report.probes_sent),
        (2, Outcome::Cancelled, 0)
    );

    p.handle_rider(ms(0), rider(10, 1)).unwrap();
    p.handle_transaction(ms(0), train(3, 3, 300, us(10)))
        .unwrap();
    p.handle_shutdown();
    assert!(matches!(
        p.poll_transmit(ms(0)),
        Some(Transmit::Unchanged(_))
    ));
    assert!(p.poll_probe(ms(0)).is_none());
    assert_eq!(
        p.poll_report().map(|r| (r.transaction, r.outcome)),
        Some((3, Outcome::Cancelled))
    );
    assert!(p.counters().riders_accounted());
}

#[test]
fn poll_start_builds_nothing_until_asked() {
    let mut p = planner(Policy::default());
    assert_eq!(p.poll_start(ms(0)), None);
    let mut tx = train(1, 2, 500, us(100));
    tx.probes[0].gap = Duration::from_millis(3);
    p.handle_transaction(ms(0), tx).unwrap();
    assert_eq!(p.poll_start(ms(1)), Some(ms(4)));
    // A rider that arrives before the first probe is built still rides in it.
    p.handle_rider(ms(2), rider(60, 9)).unwrap();
    assert_eq!(p.poll_start(ms(3)), Some(ms(4)));
    let first = p.poll_probe(ms(4)).unwrap();
    assert_eq!((first.deadline, first.rider_bytes), (ms(4), 60));
    let second = p.poll_probe(ms(4)).unwrap();
    // Both probes are built; until the last is reported sent there is nothing more.
    assert_eq!(second.seq, 1);
    assert!(p.poll_probe(ms(4)).is_none());
    p.handle_probe_sent(1, 1, Some((ms(5), WallTime::from_nanos(5))));
    assert!(p.poll_report().is_some());
}

#[test]
fn next_rider_id_is_settable_and_stays_below_the_tunneled_ids() {
    let mut p = planner(Policy::default());
    p.set_next_rider_id(u32::MAX);
    p.handle_rider(ms(0), rider(30, 1)).unwrap();
    p.handle_rider(ms(0), rider(30, 2)).unwrap();
    p.handle_transaction(ms(0), train(1, 2, 300, us(10)))
        .unwrap();
    let ids: Vec<u32> = send_all(&mut p, ms(0))
        .iter()
        .flat_map(|pr| {
            let view = Packet::new_checked(pr.packet.as_bytes()).unwrap();
            view.chunks().map(|c| c.rider_id).collect::<Vec<_>>()
        })
        .collect();
    // The top bit belongs to riders tunneled whole outside planners.
    assert_eq!(ids, [wire::TUNNELED_RIDER_ID - 1, 0]);
}

#[test]
fn udp_paths_give_the_udp_header_padding() {
    let table = EncapTable {
        default: Encap::Raw,
        per_peer: vec![
            ("10.0.0.0/8".parse().unwrap(), Encap::Udp),
            ("10.1.0.0/16".parse().unwrap(), Encap::Raw),
        ],
        ..EncapTable::default()
    };
    let (udp, raw) = ("10.2.0.1".parse().unwrap(), "10.1.0.1".parse().unwrap());
    assert_eq!(table.for_peer(udp), Encap::Udp);
    assert_eq!(
        table.for_peer(raw),
        Encap::Raw,
        "the longest prefix decides"
    );
    assert_eq!(table.for_peer("192.0.2.1".parse().unwrap()), Encap::Raw);
    assert!(table.any_udp() && !EncapTable::default().any_udp());
    assert_eq!(table.path(udp, 1500).ip_header_len, 28);
    assert_eq!(
        table.path("fd00::1".parse().unwrap(), 1500).ip_header_len,
        40
    );
    let mut p = Planner::new(Policy::default(), table.path(udp, 1500)).unwrap();
    p.handle_rider(ms(0), rider(1400, 7)).unwrap();
    p.handle_transaction(ms(0), train(1, 2, 500, us(10)))
        .unwrap();
    for probe in send_all(&mut p, ms(0)) {
        // IP 20 + UDP 8 + MGRP: the size the tool asked for.
        assert_eq!(probe.packet.len(), 500 - 28);
    }
    // What did not ride leaves in continuations no larger than the MTU allows.
    while let Some(t) = p.poll_transmit(ms(10_000)) {
        let Transmit::Continuation(c) = t else {
            panic!("a partly sent rider continues");
        };
        assert!(c.len() + 28 <= 1500);
    }
}

#[test]
fn failed_send_is_not_counted_as_sent() {
    let mut p = planner(Policy::default());
    p.handle_transaction(ms(0), train(1, 2, 300, us(10)))
        .unwrap();
    let a = p.poll_probe(ms(0)).unwrap();
    p.handle_probe_sent(1, a.seq, None);
    let b = p.poll_probe(ms(0)).unwrap();
    p.handle_probe_sent(1, b.seq, Some((ms(1), WallTime::from_nanos(1))));
    let report = p.poll_report().unwrap();
    assert_eq!((report.probes_sent, report.probes_requested), (1, 2));
    assert_eq!(report.departures[0].departed, None);
}

#[test]
fn poll_timeout_covers_probes_and_riders() {
    let mut p = planner(Policy::default());
    assert_eq!(p.poll_timeout(), None);
    p.handle_rider(ms(5), rider(10, 1)).unwrap();
    assert_eq!(p.poll_timeout(), Some(ms(15)));
    p.handle_transaction(ms(6), train(1, 2, 300, us(1000)))
        .unwrap();
    assert_eq!(p.poll_timeout(), Some(ms(6)));
    let probe = p.poll_probe(ms(7)).unwrap();
    assert_eq!(probe.deadline, ms(8));
    assert_eq!(p.next_deadline(), Some(ms(9)));
    assert_eq!(p.poll_timeout(), Some(ms(9)));
}

#[test]
fn version_2_gives_riders_the_bytes_version_1_spends_on_headers() {
    // A 314-byte probe (the paper's pk1 on the link, 300 bytes of IP) with a 3-byte
    // tool header: the largest whole rider that rides is the padding less one header
    // and one descriptor.
    for (wire, fits) in [
        (Version::V1, 300 - 20 - 28 - 12 - 3),
        (Version::V2, 300 - 20 - 16 - 2 - 3),
    ] {
        let path = Path::ipv4(1500).with_wire(wire);
        for (len, rides) in [(fits, true), (fits + 1, false)] {
            let mut p = Planner::new(Policy::default(), path).unwrap();
            p.handle_rider(ms(0), rider(len, 7)).unwrap();
            p.handle_transaction(ms(0), train(1, 1, 300, us(0)))
                .unwrap();
            let probe = p.poll_probe(ms(0)).unwrap();
            assert_eq!(probe.packet.version(), wire);
            assert_eq!(probe.packet.len(), 280);
            let whole = probe.packet.chunks().next().is_some_and(|c| c.is_whole());
            assert_eq!(whole, rides, "{wire:?}, {len} bytes");
        }
    }
}

#[test]
fn version_2_numbers_only_cut_riders_and_trains_it_cannot_hold_go_as_version_1() {
    let path = Path::ipv4(1500).with_wire(Version::V2);
    let mut p = Planner::new(Policy::default(), path).unwrap();
    p.set_next_rider_id(0x1234_5678);
    p.handle_rider(ms(0), rider(1000, 1)).unwrap();
    p.handle_transaction(ms(0), train(1, 2, 600, us(10)))
        .unwrap();
    let first = p.poll_probe(ms(0)).unwrap();
    let c = first.packet.chunks().next().unwrap();
    assert!(!c.is_whole());
    // Cut: numbered from the low 15 bits of the start id.
    assert_eq!(c.rider_id, 0x5678);
    // Too long a train for 12-bit sequence numbers: version 1, whatever the path.
    let mut p = Planner::new(Policy::default(), path).unwrap();
    p.handle_transaction(ms(0), train(1, 4096, 100, us(0)))
        .unwrap();
    assert_eq!(p.poll_probe(ms(0)).unwrap().packet.version(), Version::V1);
    // A whole rider in version 2 has no id.
    let mut p = Planner::new(Policy::default(), path).unwrap();
    p.handle_rider(ms(0), rider(100, 1)).unwrap();
    p.handle_transaction(ms(0), train(1, 1, 600, us(0)))
        .unwrap();
    let probe = p.poll_probe(ms(0)).unwrap();
    assert_eq!(
        probe.packet.chunks().next().unwrap().rider_id,
        wire::UNNUMBERED_RIDER_ID
    );
}

#[test]
fn paths_too_wide_for_version_2_chunks_keep_version_1() {
    assert_eq!(Path::ipv4(9000).with_wire(Version::V2).wire, Version::V2);
    assert_eq!(Path::ipv4(65535).with_wire(Version::V2).wire, Version::V1);
    let mut p = Planner::new(Policy::default(), Path::ipv4(65535).with_wire(Version::V2)).unwrap();
    p.handle_rider(ms(0), rider(20_000, 1)).unwrap();
    p.handle_transaction(ms(0), train(1, 1, 30_000, us(0)))
        .unwrap();
    let probe = p.poll_probe(ms(0)).unwrap();
    assert_eq!(probe.packet.version(), Version::V1);
    assert_eq!(probe.packet.rider_bytes(), 20_000);
}

#[test]
fn a_rider_of_the_whole_room_fills_one_continuation_to_the_mtu() {
    let data = vec![0x45u8; 1500];
    for (path, trailer) in [
        (Path::ipv4(1500).udp().with_wire(Version::V2), 24),
        (Path::ipv4(1500).udp().with_wire(Version::V2), 0),
        (Path::ipv6(1500).udp().with_wire(Version::V1), 24),
        (Path::ipv4(1280).with_wire(Version::V1), 0),
    ] {
        let room = path.whole_rider_room(trailer);
        let whole = |len: usize| Repr {
            version: path.wire,
            header: Header::continuation(),
            tool_header: &[],
            chunks: vec![Chunk {
                rider_id: wire::TUNNELED_RIDER_ID,
                offset: 0,
                rider_len: len as u16,
                data: &data[..len],
            }],
            trailer_len: trailer,
        };
        let ip = usize::from(path.ip_header_len);
        assert_eq!(
            whole(room).buffer_len() + ip,
            usize::from(path.mtu),
            "{path:?}"
        );
        // A piece carries less: its descriptor is the longest.
        let piece = path.piece_room(trailer);
        assert!(piece <= room);
        let first = Repr {
            chunks: vec![Chunk {
                rider_len: (room + 1) as u16,
                ..whole(piece).chunks[0]
            }],
            ..whole(piece)
        };
        assert!(first.buffer_len() + ip <= usize::from(path.mtu), "{path:?}");
    }
    // Version 2 over IPv4 and UDP with a key: 1500 − 28 − 2 − 2 − 24.
    assert_eq!(
        Path::ipv4(1500)
            .udp()
            .with_wire(Version::V2)
            .whole_rider_room(24),
        1444
    );
}
