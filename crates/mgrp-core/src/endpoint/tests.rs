use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

use super::*;
use crate::planner::{Encap, HoldMode, Packing};
use crate::reassembly::{ChunkOutcome, Limits, Reassembler};
use crate::wire::{Kind, Packet};

fn ms(n: u64) -> MonoTime {
    MonoTime::from_nanos(n * 1_000_000)
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn peer(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

fn train(n: usize, size: u16, gap: Duration) -> Transaction {
    crate::planner::tests::train(0, n, size, gap)
}

fn endpoint(f: impl FnOnce(&mut EndpointConfig)) -> Endpoint {
    let mut c = EndpointConfig::new(Policy::default(), 1500);
    f(&mut c);
    Endpoint::new(c).unwrap()
}

/// Runs every train to the end at its deadlines, returning the order in which trains
/// (by id) sent their probes and every action on the way.
fn run(e: &mut Endpoint, now: MonoTime) -> (Vec<(IpAddr, u32)>, Vec<Action>) {
    let (sent, actions) = run_costed(e, now, Duration::ZERO);
    let mut order: Vec<(IpAddr, u32)> = Vec::new();
    for s in sent {
        if order.last() != Some(&(s.peer, s.transaction)) {
            order.push((s.peer, s.transaction));
        }
    }
    (order, actions)
}

/// A probe as [`run_costed`] sent it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    peer: IpAddr,
    transaction: u32,
    seq: u16,
    deadline: MonoTime,
    departed: MonoTime,
}

/// Runs every train to the end, each probe sent at its deadline or, when the driver is
/// still busy with the one before, as soon as that is out: each send takes `cost`.
fn run_costed(e: &mut Endpoint, mut now: MonoTime, cost: Duration) -> (Vec<Sent>, Vec<Action>) {
    let mut sent = Vec::new();
    let mut actions = Vec::new();
    for _ in 0..100_000 {
        while let Some(a) = e.poll_action(now) {
            if let Action::RouteIn(p) = a {
                e.handle_routed(p);
            }
            actions.push(a);
        }
        match e.poll_probe_deadline(now) {
            Some(deadline) => {
                now = now.max(deadline);
                let (p, probe) = e.poll_probe(now).expect("a probe is due");
                sent.push(Sent {
                    peer: p,
                    transaction: probe.transaction,
                    seq: probe.seq,
                    deadline: probe.deadline,
                    departed: now,
                });
                let departed = now;
                now = now.saturating_add(cost);
                e.handle_probe_sent(
                    now,
                    probe.transaction,
                    probe.seq,
                    Some((departed, WallTime::from_nanos(departed.as_nanos()))),
                );
            }
            None => match e.poll_timeout() {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => return (sent, actions),
            },
        }
    }
    panic!("the endpoint never settled");
}

fn report_of(actions: &[Action], id: u32) -> &TransactionReport {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Report { report, .. } if report.transaction == id => Some(report),
            _ => None,
        })
        .expect("the train reported")
}

fn reports(actions: &[Action]) -> Vec<(ClientId, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Report { client, report, .. } => Some((*client, report.transaction)),
            _ => None,
        })
        .collect()
}

#[test]
fn with_one_in_flight_destinations_take_turns_and_each_keeps_its_order() {
    let mut e = endpoint(|c| c.max_in_flight = 1);
    let mut ids = BTreeMap::new();
    for i in 0..3 {
        for p in [peer(2), peer(3)] {
            let id = e
                .handle_submit(ms(0), 1, p, train(2, 200, us(100)))
                .unwrap();
            ids.insert(id, (p, i));
        }
    }
    assert_eq!(e.trains(), 6);
    assert_eq!(e.trains_to(peer(2)), 3);
    let (order, actions) = run(&mut e, ms(0));
    let peers: Vec<IpAddr> = order.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        peers,
        [peer(2), peer(3), peer(2), peer(3), peer(2), peer(3)]
    );
    for p in [peer(2), peer(3)] {
        let rounds: Vec<u32> = order
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, id)| ids[id].1)
            .collect();
        assert_eq!(rounds, [0, 1, 2], "{p}: trains in the order they came");
    }
    assert_eq!(reports(&actions).len(), 6);
    assert_eq!(e.trains(), 0);
}

#[test]
fn trains_to_different_destinations_interleave_earliest_deadline_first() {
    let mut e = endpoint(|_| {});
    let mut ids = BTreeMap::new();
    for i in 0..3 {
        for (p, gap) in [(peer(2), us(100)), (peer(3), us(170))] {
            let id = e.handle_submit(ms(0), 1, p, train(10, 200, gap)).unwrap();
            ids.insert(id, (p, i));
        }
    }
    let (sent, actions) = run_costed(&mut e, ms(0), Duration::ZERO);
    assert_eq!(sent.len(), 60);
    // One schedule: probes leave in deadline order, each at its deadline.
    for w in sent.windows(2) {
        assert!(w[0].deadline <= w[1].deadline, "{w:?}");
    }
    assert!(sent.iter().all(|s| s.departed == s.deadline));
    // Each destination's trains in the order they came, one at a time, each probe at
    // its own gap after the one before.
    for (p, gap) in [(peer(2), us(100)), (peer(3), us(170))] {
        let mine: Vec<&Sent> = sent.iter().filter(|s| s.peer == p).collect();
        let rounds: Vec<u32> = mine.iter().map(|s| ids[&s.transaction].1).collect();
        let mut sorted = rounds.clone();
        sorted.sort_unstable();
        assert_eq!(rounds, sorted, "{p}: trains in the order they came");
        for w in mine.windows(2) {
            if w[0].transaction == w[1].transaction {
                assert_eq!(w[1].seq, w[0].seq + 1);
                assert_eq!(w[1].deadline.saturating_since(w[0].deadline), gap);
            }
        }
    }
    // Both first trains started at once, and ran side by side.
    let first = |p: IpAddr| sent.iter().find(|s| s.peer == p).unwrap().deadline;
    assert_eq!(first(peer(2)), ms(0).saturating_add(us(100)));
    assert_eq!(first(peer(3)), ms(0).saturating_add(us(170)));
    let r = reports(&actions);
    assert_eq!(r.len(), 6);
    for (_, id) in r {
        assert_eq!(report_of(&actions, id).probes_displaced, 0);
    }
    assert_eq!(e.counters().probes_displaced, 0);
    assert_eq!(e.trains(), 0);
}

#[test]
fn a_probe_due_while_another_is_sent_is_displaced_and_counted() {
    let mut e = endpoint(|_| {});
    let a = e
        .handle_submit(ms(0), 1, peer(2), train(8, 200, us(100)))
        .unwrap();
    let b = e
        .handle_submit(ms(0), 2, peer(3), train(8, 200, us(100)))
        .unwrap();
    // Due at the same times; a send takes 5 µs.
    let (sent, actions) = run_costed(&mut e, ms(0), us(5));
    assert_eq!(sent.len(), 16);
    let late = |id: u32| {
        sent.iter()
            .filter(|s| s.transaction == id && s.departed > s.deadline)
            .count()
    };
    // The first started wins each tie; the other leaves 5 µs late every time.
    assert_eq!(late(a), 0);
    assert_eq!(late(b), 8);
    assert_eq!(report_of(&actions, a).probes_displaced, 0);
    assert_eq!(report_of(&actions, b).probes_displaced, 8);
    assert_eq!(e.counters().probes_displaced, 8);

    // Due 50 µs apart, a 5 µs send displaces nothing.
    let mut e = endpoint(|_| {});
    let a = e
        .handle_submit(ms(0), 1, peer(2), train(8, 200, us(100)))
        .unwrap();
    let (_, _) = (a, ());
    let mut later = train(8, 200, us(100));
    later.probes[0].gap = us(150);
    let b = e.handle_submit(ms(0), 2, peer(3), later).unwrap();
    let (sent, actions) = run_costed(&mut e, ms(0), us(5));
    assert!(sent.iter().all(|s| s.departed == s.deadline));
    assert_eq!(report_of(&actions, a).probes_displaced, 0);
    assert_eq!(report_of(&actions, b).probes_displaced, 0);
    assert_eq!(e.counters().probes_displaced, 0);
}

#[test]
fn trains_submitted_together_start_two_send_times_apart_and_keep_apart() {
    let mut e = endpoint(|_| {});
    // A first train teaches the endpoint that a send takes 5 µs.
    e.handle_submit(ms(0), 1, peer(9), train(40, 200, us(100)))
        .unwrap();
    run_costed(&mut e, ms(0), us(5));
    assert_eq!(e.send_time(), us(5));
    // Four trains at equal gaps, submitted at once.
    let ids: Vec<u32> = (2..6)
        .map(|n| {
            e.handle_submit(ms(10), 1, peer(n), train(20, 200, us(100)))
                .unwrap()
        })
        .collect();
    let (sent, actions) = run_costed(&mut e, ms(10), us(5));
    let firsts: Vec<MonoTime> = ids
        .iter()
        .map(|id| sent.iter().find(|s| s.transaction == *id).unwrap().deadline)
        .collect();
    for w in firsts.windows(2) {
        assert_eq!(w[1].saturating_since(w[0]), us(10), "{firsts:?}");
    }
    assert!(
        sent.iter().all(|s| s.departed == s.deadline),
        "none left late"
    );
    for id in ids {
        assert_eq!(report_of(&actions, id).probes_displaced, 0);
    }
}

#[test]
fn a_train_started_just_after_anothers_probe_keeps_clear_of_its_phase() {
    let mut e = endpoint(|_| {});
    let a = e
        .handle_submit(ms(0), 1, peer(2), train(40, 200, us(100)))
        .unwrap();
    // Five of A's probes, a send taking 5 µs.
    let mut now = ms(0);
    let mut left = now;
    for _ in 0..5 {
        now = now.max(e.poll_probe_deadline(now).unwrap());
        let (_, p) = e.poll_probe(now).unwrap();
        left = now;
        now = now.saturating_add(us(5));
        e.handle_probe_sent(
            now,
            p.transaction,
            p.seq,
            Some((left, WallTime::from_nanos(left.as_nanos()))),
        );
    }
    // B, at A's gap, comes 2 µs after A's last probe left: started then, each of its
    // probes would fall due while A's is being sent.
    let mut b_train = train(30, 200, us(100));
    b_train.probes[0].gap = Duration::ZERO;
    let b = e.handle_submit(now, 2, peer(3), b_train).unwrap();
    let (sent, actions) = run_costed(&mut e, left.saturating_add(us(2)), us(5));
    let b_sent: Vec<&Sent> = sent.iter().filter(|s| s.transaction == b).collect();
    assert_eq!(b_sent.len(), 30);
    assert!(
        b_sent.iter().all(|s| s.departed == s.deadline),
        "B left late: {b_sent:?}"
    );
    assert_eq!(report_of(&actions, b).probes_displaced, 0);
    assert_eq!(report_of(&actions, a).probes_displaced, 0);
}

#[test]
fn no_more_trains_in_flight_than_allowed() {
    let mut e = endpoint(|c| c.max_in_flight = 2);
    for n in 2..7 {
        e.handle_submit(ms(0), u64::from(n), peer(n), train(5, 200, us(100)))
            .unwrap();
    }
    let mut now = ms(0);
    let mut most = 0;
    let mut done = 0;
    while let Some(deadline) = e.poll_probe_deadline(now) {
        most = most.max(e.in_flight());
        now = now.max(deadline);
        let (_, probe) = e.poll_probe(now).unwrap();
        e.handle_probe_sent(
            now,
            probe.transaction,
            probe.seq,
            Some((now, WallTime::from_nanos(now.as_nanos()))),
        );
        while let Some(a) = e.poll_action(now) {
            done += usize::from(matches!(a, Action::Report { .. }));
        }
    }
    assert_eq!(most, 2);
    assert_eq!(done, 5);
}

#[test]
fn competing_bytes_are_the_trains_own_destinations_traffic() {
    let mut e = endpoint(|c| c.policy.hold = Duration::from_millis(50));
    let a = e
        .handle_submit(ms(0), 1, peer(2), train(20, 1400, us(500)))
        .unwrap();
    let b = e
        .handle_submit(ms(0), 2, peer(3), train(20, 1400, us(500)))
        .unwrap();
    let mut now = ms(0);
    let mut riders = 0u64;
    let mut actions = Vec::new();
    while let Some(deadline) = e.poll_probe_deadline(now) {
        now = now.max(deadline);
        // Traffic to peer 2 only, between the probes of both trains.
        if e.poll_probe(now).is_some_and(|(p, probe)| {
            let seq = probe.seq;
            let id = probe.transaction;
            e.handle_probe_sent(
                now,
                id,
                seq,
                Some((now, WallTime::from_nanos(now.as_nanos()))),
            );
            p == peer(3)
        }) {
            e.handle_rider(now, peer(2), Bytes::from(vec![0x45; 300]))
                .unwrap();
            riders += 300;
        }
        while let Some(a) = e.poll_action(now) {
            actions.push(a);
        }
    }
    assert!(riders > 0);
    assert!(report_of(&actions, a).competing_rider_bytes > 0);
    assert!(report_of(&actions, a).competing_rider_bytes <= riders);
    assert_eq!(
        report_of(&actions, b).competing_rider_bytes,
        0,
        "another destination's traffic does not compete with this train"
    );
}

#[test]
fn bounds_on_trains_per_client_and_in_all() {
    let mut e = endpoint(|c| {
        c.max_trains = 3;
        c.max_trains_per_client = 2;
    });
    e.handle_submit(ms(0), 1, peer(2), train(1, 200, us(0)))
        .unwrap();
    e.handle_submit(ms(0), 1, peer(2), train(1, 200, us(0)))
        .unwrap();
    assert_eq!(
        e.handle_submit(ms(0), 1, peer(2), train(1, 200, us(0))),
        Err(SubmitError::ClientBusy(2))
    );
    e.handle_submit(ms(0), 2, peer(3), train(1, 200, us(0)))
        .unwrap();
    assert_eq!(
        e.handle_submit(ms(0), 3, peer(3), train(1, 200, us(0))),
        Err(SubmitError::Busy(3))
    );
    assert!(matches!(
        e.handle_submit(ms(0), 3, peer(3), train(1, 20, us(0))),
        Err(SubmitError::Busy(3))
    ));
    let c = e.counters();
    assert_eq!((c.trains_accepted, c.trains_refused_busy), (3, 3));
    run(&mut e, ms(0));
    // Room again; a probe too small for its headers is refused as invalid.
    assert!(matches!(
        e.handle_submit(ms(1), 3, peer(3), train(1, 20, us(0))),
        Err(SubmitError::Invalid(PlanError::ProbeTooSmall { .. }))
    ));
    assert_eq!(e.counters().trains_refused_invalid, 1);
}

#[test]
fn riders_beyond_the_destination_bound_go_unchanged() {
    let mut e = endpoint(|c| c.max_destinations = 2);
    for n in 2..5 {
        e.handle_rider(ms(0), peer(n), Bytes::from(vec![0x45; 100]))
            .unwrap();
    }
    assert_eq!(e.destinations(), 2);
    assert_eq!(e.counters().riders_bypassed_too_many_destinations, 1);
    assert_eq!(
        e.poll_action(ms(0)),
        Some(Action::Transmit {
            peer: peer(4),
            transmit: Transmit::Unchanged(Bytes::from(vec![0x45; 100]))
        })
    );
    // The others wait for their hold time.
    assert_eq!(e.poll_action(ms(0)), None);
    assert_eq!(e.held_bytes(), 200);
    assert_eq!(
        e.held_per_destination().collect::<Vec<_>>(),
        [(peer(2), 1, 100), (peer(3), 1, 100)]
    );
    assert_eq!(e.poll_timeout(), Some(ms(10)));
    assert!(matches!(
        e.poll_action(ms(10)),
        Some(Action::Transmit { .. })
    ));
    assert!(matches!(
        e.poll_action(ms(10)),
        Some(Action::Transmit { .. })
    ));
    assert_eq!(e.held_bytes(), 0);
}

#[test]
fn the_total_held_is_bounded() {
    let mut e = endpoint(|c| c.max_held_bytes = 1000);
    for n in 0..4u8 {
        let r = e.handle_rider(ms(0), peer(2 + n % 2), Bytes::from(vec![n; 400]));
        assert_eq!(r.is_ok(), n < 2, "rider {n}");
    }
    assert_eq!(e.held_bytes(), 800);
    assert_eq!(e.planner_counters().riders_dropped_queue_full, 2);
    assert!(e.planner_counters().riders_accounted());
}

#[test]
fn routes_on_demand_come_before_the_train_and_go_after_the_hold() {
    let mut e = endpoint(|c| {
        c.route_on_demand = true;
        c.policy.hold_mode = HoldMode::OnDemand;
    });
    let id = e
        .handle_submit(ms(0), 1, peer(2), train(3, 300, us(100)))
        .unwrap();
    assert_eq!(e.poll_action(ms(0)), Some(Action::RouteIn(peer(2))));
    // Not routed yet: the train waits.
    assert_eq!(e.poll_probe_deadline(ms(1)), None);
    e.handle_routed(peer(2));
    let (order, actions) = run(&mut e, ms(2));
    assert_eq!(order, [(peer(2), id)]);
    let routes: Vec<&Action> = actions
        .iter()
        .filter(|a| matches!(a, Action::RouteOut(_) | Action::RouteIn(_)))
        .collect();
    assert_eq!(routes, [&Action::RouteOut(peer(2))]);
    let c = e.counters();
    assert_eq!((c.routes_in, c.routes_out), (1, 1));
}

#[test]
fn a_train_during_the_hold_keeps_the_route() {
    let mut e = endpoint(|c| {
        c.route_on_demand = true;
        c.policy.hold_mode = HoldMode::OnDemand;
    });
    e.handle_submit(ms(0), 1, peer(2), train(1, 300, us(0)))
        .unwrap();
    e.handle_routed(peer(2));
    while e.poll_action(ms(0)).is_some() {}
    let (p, probe) = {
        e.poll_probe_deadline(ms(0)).unwrap();
        e.poll_probe(ms(0)).unwrap()
    };
    assert_eq!(p, peer(2));
    e.handle_probe_sent(
        ms(0),
        probe.transaction,
        0,
        Some((ms(0), WallTime::from_nanos(0))),
    );
    assert!(matches!(e.poll_action(ms(0)), Some(Action::Report { .. })));
    // 5 ms later (within the 10 ms hold) another train comes: no route change.
    e.handle_submit(ms(5), 1, peer(2), train(1, 300, us(0)))
        .unwrap();
    let (_, actions) = run(&mut e, ms(5));
    let routes: Vec<&Action> = actions
        .iter()
        .filter(|a| matches!(a, Action::RouteOut(_) | Action::RouteIn(_)))
        .collect();
    assert_eq!(
        routes,
        [&Action::RouteOut(peer(2))],
        "one route out, at the end"
    );
}

#[test]
fn cancelled_and_abandoned_trains_report_and_free_their_slots() {
    let mut e = endpoint(|_| {});
    let a = e
        .handle_submit(ms(0), 1, peer(2), train(5, 300, us(100)))
        .unwrap();
    let b = e
        .handle_submit(ms(0), 1, peer(2), train(5, 300, us(100)))
        .unwrap();
    let c = e
        .handle_submit(ms(0), 2, peer(3), train(5, 300, us(100)))
        .unwrap();
    // Start a, send one probe, then cancel it in flight.
    e.poll_probe_deadline(ms(0)).unwrap();
    let (_, probe) = e.poll_probe(ms(0)).unwrap();
    assert_eq!(probe.transaction, a);
    e.handle_probe_sent(ms(0), a, 0, Some((ms(0), WallTime::from_nanos(0))));
    assert!(!e.handle_cancel(ms(0), 2, a), "not client 2's train");
    assert!(e.handle_cancel(ms(0), 1, a));
    e.handle_client_gone(ms(0), 1);
    let (order, actions) = run(&mut e, ms(1));
    assert_eq!(order, [(peer(3), c)]);
    let mut got = reports(&actions);
    got.sort_unstable();
    assert_eq!(got, [(1, a), (1, b), (2, c)]);
    assert_eq!(e.trains(), 0);
    // Client 1 may submit again up to its bound.
    for _ in 0..16 {
        e.handle_submit(ms(2), 1, peer(2), train(1, 300, us(0)))
            .unwrap();
    }
}

#[test]
fn idle_planners_retire_and_keep_counting() {
    let mut e = endpoint(|c| c.planner_idle = Duration::from_secs(30));
    e.handle_rider(ms(0), peer(2), Bytes::from(vec![0x45; 60]))
        .unwrap();
    run(&mut e, ms(0));
    assert_eq!(e.destinations(), 1);
    assert_eq!(e.poll_action(ms(31_000)), None);
    assert_eq!(e.destinations(), 0);
    let c = e.planner_counters();
    assert_eq!((c.riders_in, c.riders_sent_unchanged), (1, 1));
    assert_eq!(e.counters().planners_retired, 1);
}

#[test]
fn shutdown_cancels_trains_and_flushes_riders() {
    let mut e = endpoint(|_| {});
    e.handle_rider(ms(0), peer(2), Bytes::from(vec![0x45; 60]))
        .unwrap();
    let id = e
        .handle_submit(ms(0), 1, peer(3), train(3, 300, us(100)))
        .unwrap();
    e.handle_shutdown(ms(0));
    assert_eq!(
        e.handle_submit(ms(0), 1, peer(3), train(3, 300, us(100))),
        Err(SubmitError::ShuttingDown)
    );
    assert!(!e.is_drained());
    let mut actions = Vec::new();
    while let Some(a) = e.poll_action(ms(0)) {
        actions.push(a);
    }
    assert_eq!(reports(&actions), [(1, id)]);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Transmit {
            transmit: Transmit::Unchanged(_),
            ..
        }
    )));
    assert!(e.is_drained());
    assert_eq!(e.poll_probe_deadline(ms(0)), None);
}

/// A small deterministic generator (xorshift64*), so the simulation needs no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A rider that says who it is: an IPv4-looking packet with its number inside.
fn numbered_rider(n: u32, len: usize) -> Bytes {
    let mut v = vec![0u8; len.max(24)];
    v[0] = 0x45;
    v[20..24].copy_from_slice(&n.to_be_bytes());
    for (i, b) in v[24..].iter_mut().enumerate() {
        *b = (n as usize + i) as u8;
    }
    Bytes::from(v)
}

fn rider_number(data: &[u8]) -> u32 {
    u32::from_be_bytes(data[20..24].try_into().unwrap())
}

/// What the simulated wire and the far sides saw.
#[derive(Default)]
struct Far {
    reassembly: BTreeMap<IpAddr, Reassembler<IpAddr>>,
    delivered: Vec<u32>,
    /// Riders sent as they came.
    unchanged: Vec<u32>,
    probes: Vec<(MonoTime, IpAddr, u32, u16, usize)>,
}

impl Far {
    fn transmit(&mut self, now: MonoTime, to: IpAddr, t: Transmit) {
        match t {
            Transmit::Continuation(pkt) => self.mgrp(now, to, pkt.as_bytes()),
            Transmit::Unchanged(data) => self.unchanged.push(rider_number(&data)),
        }
    }

    fn mgrp(&mut self, now: MonoTime, to: IpAddr, packet: &[u8]) {
        let p = Packet::new_checked(packet).expect("a well-formed MGRP packet");
        let r = self.reassembly.entry(to).or_insert_with(|| {
            Reassembler::new(Limits {
                max_rider_len: 1500,
                timeout: Duration::from_secs(3600),
                ..Limits::default()
            })
        });
        for chunk in p.chunks() {
            if let ChunkOutcome::Complete(rider) = r.handle_chunk(now, to, &chunk) {
                self.delivered.push(rider_number(&rider));
            }
        }
    }
}

/// Many destinations, clients, trains, riders and cancellations under a virtual clock:
/// no rider is lost or altered, probes leave in deadline order at their exact sizes,
/// trains only run while routed, and every accepted train reports once to its client.
#[test]
fn simulation_keeps_every_promise() {
    for seed in 1..=12u64 {
        simulate(seed);
    }
}

fn simulate(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let on_demand = seed.is_multiple_of(2);
    let mut e = endpoint(|c| {
        c.route_on_demand = on_demand;
        c.policy.hold_mode = if on_demand {
            HoldMode::OnDemand
        } else {
            HoldMode::Always
        };
        c.policy.packing = if seed.is_multiple_of(3) {
            Packing::Multiple
        } else {
            Packing::OnePerProbe
        };
        c.max_trains = 12;
        c.max_trains_per_client = 5;
        c.max_destinations = if seed % 2 == 1 { 2 } else { 6 };
        c.max_held_bytes = if seed % 4 == 1 { 6 << 10 } else { 64 << 10 };
        c.planner_idle = Duration::from_millis(300);
        c.max_in_flight = [1, 3, 16][(seed % 3) as usize];
    });
    let peers: Vec<IpAddr> = (2..10).map(peer).collect();
    let mut far = Far::default();
    let mut now = MonoTime::ZERO;
    let mut next_rider = 0u32;
    let mut accepted: BTreeMap<u32, ClientId> = BTreeMap::new();
    let mut reported: HashSet<u32> = HashSet::new();
    let mut routed: HashSet<IpAddr> = HashSet::new();
    let mut pending_routes: Vec<(MonoTime, IpAddr)> = Vec::new();
    let mut last_deadline = MonoTime::ZERO;
    let mut sizes: BTreeMap<u32, Vec<u16>> = BTreeMap::new();
    for step in 0..20_000u32 {
        now = now.saturating_add(Duration::from_micros(rng.below(300)));
        // Routes the driver was asked for come in a little later.
        pending_routes.retain(|(at, p)| {
            if *at <= now {
                routed.insert(*p);
                e.handle_routed(*p);
                false
            } else {
                true
            }
        });
        match rng.below(100) {
            0..=59 => {
                // Traffic moves over the destinations, so some go idle and retire.
                let window = (step / 2500) as usize;
                let p = peers[(window + rng.below(3) as usize) % peers.len()];
                if !on_demand || routed.contains(&p) {
                    let len = 24 + rng.below(1476) as usize;
                    let _ = e.handle_rider(now, p, numbered_rider(next_rider, len));
                    next_rider += 1;
                }
            }
            60..=66 => {
                let client = rng.below(4);
                let window = (step / 2500) as usize;
                let p = peers[(window + rng.below(4) as usize) % peers.len()];
                let n = 1 + rng.below(30) as usize;
                let size = 60 + rng.below(1441) as u16;
                let gap = us(rng.below(400));
                if let Ok(id) = e.handle_submit(now, client, p, train(n, size, gap)) {
                    accepted.insert(id, client);
                    sizes.insert(id, vec![size; n]);
                }
            }
            67 => {
                if let Some((&id, &client)) = accepted.iter().nth(rng.below(4) as usize) {
                    e.handle_cancel(now, client, id);
                }
            }
            68 if step % 50 == 0 => e.handle_client_gone(now, rng.below(4)),
            _ => {}
        }
        // The pacer's turn: actions, then the probe if it is due.
        while let Some(a) = e.poll_action(now) {
            match a {
                Action::Transmit { peer, transmit } => far.transmit(now, peer, transmit),
                Action::Report { client, report, .. } => {
                    assert_eq!(accepted.remove(&report.transaction), Some(client));
                    assert!(reported.insert(report.transaction), "reported twice");
                }
                Action::RouteIn(p) => {
                    assert!(on_demand);
                    pending_routes.push((now.saturating_add(us(500)), p));
                }
                Action::RouteOut(p) => {
                    assert!(routed.remove(&p), "{p} was not routed");
                }
            }
        }
        assert!(e.held_bytes() <= e.config().max_held_bytes);
        let next = e.poll_probe_deadline(now);
        assert!(e.in_flight() <= e.config().max_in_flight);
        if let Some(deadline) = next
            && deadline <= now
        {
            let (p, probe) = e.poll_probe(now).expect("due");
            assert!(!on_demand || routed.contains(&p), "a train ran unrouted");
            assert!(probe.deadline >= last_deadline, "probes out of order");
            last_deadline = probe.deadline;
            let want = sizes[&probe.transaction][usize::from(probe.seq)];
            assert_eq!(probe.packet.len() + 20, usize::from(want), "probe size");
            far.probes
                .push((now, p, probe.transaction, probe.seq, probe.packet.len()));
            let pkt = Packet::new_checked(probe.packet.as_bytes()).unwrap();
            assert_eq!(pkt.kind(), Kind::Probe);
            far.mgrp(now, p, probe.packet.as_bytes());
            // One probe in 50 fails to leave: its riders go unchanged instead.
            let sent = rng.below(50) != 0;
            if !sent {
                for r in &probe.riders {
                    far.unchanged.push(rider_number(r));
                }
            }
            e.handle_probe_sent(
                now,
                probe.transaction,
                probe.seq,
                sent.then(|| (now, WallTime::from_nanos(now.as_nanos()))),
            );
        }
    }
    // Stop: everything held leaves, every train reports.
    e.handle_shutdown(now);
    while let Some(a) = e.poll_action(now) {
        match a {
            Action::Transmit { peer, transmit } => far.transmit(now, peer, transmit),
            Action::Report { client, report, .. } => {
                assert_eq!(accepted.remove(&report.transaction), Some(client));
            }
            Action::RouteIn(_) | Action::RouteOut(_) => {}
        }
    }
    assert!(e.is_drained(), "seed {seed}");
    assert!(accepted.is_empty(), "seed {seed}: trains without a report");
    let c = e.planner_counters();
    assert!(c.riders_accounted(), "seed {seed}: {c:?}");
    assert_eq!(c.riders_held, 0);
    // Every rider arrived once (or twice: a rider of a failed probe may have had
    // pieces in probes that did leave; its unchanged copy then arrives whole), or was
    // dropped for a counted reason.
    let mut arrived: Vec<u32> = far.delivered.clone();
    arrived.extend(&far.unchanged);
    let distinct: HashSet<u32> = arrived.iter().copied().collect();
    let dropped = c.riders_dropped();
    let bypassed = e.counters().riders_bypassed_too_many_destinations;
    assert_eq!(
        distinct.len() as u64 + dropped,
        u64::from(next_rider),
        "seed {seed}: riders lost ({} arrived, {dropped} dropped, {bypassed} bypassed)",
        distinct.len()
    );
    eprintln!(
        "seed {seed}: {next_rider} riders, {} rode, {} unchanged, {dropped} dropped, {bypassed} bypassed, {} trains reported, {} cancelled, {} probes, routes {:?}, retired {}",
        c.riders_piggybacked,
        c.riders_sent_unchanged,
        reported.len(),
        c.transactions_cancelled,
        far.probes.len(),
        (e.counters().routes_in, e.counters().routes_out),
        e.counters().planners_retired,
    );
    assert!(!far.probes.is_empty(), "seed {seed}: no probe left");
    assert!(c.riders_piggybacked > 0, "seed {seed}: nothing rode");
    assert!(
        e.counters().planners_retired > 0,
        "seed {seed}: nothing retired"
    );
    if seed % 2 == 1 {
        assert!(
            bypassed > 0,
            "seed {seed}: the destination bound was never reached"
        );
    }
    if seed % 4 == 1 {
        assert!(dropped > 0, "seed {seed}: the held bound was never reached");
    }
}

#[test]
fn a_new_encap_table_replans_the_idle_destinations_whose_path_it_changes() {
    let mut e = endpoint(|_| {});
    // Peer 2 idle, peer 3 holding a rider, peer 4 idle and unchanged.
    for n in [2, 4] {
        e.handle_rider(ms(0), peer(n), Bytes::from(vec![0x45; 100]))
            .unwrap();
    }
    while e.poll_action(ms(10)).is_some() {}
    e.handle_rider(ms(10), peer(3), Bytes::from(vec![0x45; 100]))
        .unwrap();
    assert_eq!(e.destinations(), 3);
    let udp = |n: u8| (crate::peers::Prefix::host(peer(n)), Encap::Udp);
    let table = EncapTable {
        per_peer: vec![udp(2), udp(3)],
        ..EncapTable::default()
    };
    e.set_encap(table.clone()).unwrap();
    assert_eq!(e.config().encap, table);
    // Peer 2 goes; peer 3 holds a rider and keeps its planner; peer 4's path is
    // the same.
    assert_eq!(e.destinations(), 2);
    assert_eq!(e.counters().planners_retired, 1);
    assert_eq!(
        e.held_per_destination().collect::<Vec<_>>(),
        [(peer(3), 1, 100), (peer(4), 0, 0)]
    );
    // Peer 2 is planned afresh on its next rider; nothing is lost.
    e.handle_rider(ms(20), peer(2), Bytes::from(vec![0x45; 100]))
        .unwrap();
    assert_eq!(e.destinations(), 3);
    assert!(e.planner_counters().riders_accounted());
}
