//! The scheduler under arbitrary sequences of time, starts, ends, "measure now" and
//! traffic reports: a link never runs twice at once, no run starts on a path an
//! exclusive run holds, no more than `max_running` exclusive runs at once, every link
//! that is due is eventually started, and waits never lie in the past. Under a
//! feasible load every link starts within its interval of falling due, however the
//! classes, paths and run lengths fall.

use std::collections::HashSet;
use std::time::Duration;

use mgrp_core::MonoTime;
use mgrp_overlay::measure::schedule::{Class, LinkState, RunEnd, Scheduler, Timing, Wait};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Start,
    End(usize, u8),
    Now(usize),
    Traffic(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..20_000).prop_map(Op::Advance),
        Just(Op::Start),
        (0usize..6, 0u8..3).prop_map(|(i, e)| Op::End(i, e)),
        (0usize..6).prop_map(Op::Now),
        (0usize..6, 0u64..3_000_000).prop_map(|(i, b)| Op::Traffic(i, b)),
    ]
}

fn timing(i: usize) -> Timing {
    Timing {
        interval: Duration::from_millis(1_000 + 700 * i as u64),
        jitter: 0.2,
        backoff: Duration::from_millis(500),
        max_backoff: Duration::from_secs(8),
        ride_min_bps: (i % 3 == 2).then_some(1_000_000),
        ride_max_wait: (i % 6 == 5).then_some(Duration::from_secs(3)),
        path: i % 4,
        passive: false,
        class: if i % 3 == 1 {
            Class::Background
        } else {
            Class::Exclusive
        },
    }
}

fn class(i: usize) -> Class {
    timing(i).class
}

proptest! {
    #[test]
    fn invariants_hold(links in 1usize..6, max_running in 1usize..3, ops in prop::collection::vec(op(), 1..200), seed in any::<u64>()) {
        let mut now = MonoTime::from_nanos(1_000_000_000);
        let mut sch = Scheduler::new((0..links).map(timing).collect(), max_running, now, Duration::from_secs(2), seed);
        let mut running: HashSet<usize> = HashSet::new();
        for op in ops {
            match op {
                Op::Advance(ms) => now = now.saturating_add(Duration::from_millis(ms)),
                Op::Start => {
                    while let Some(i) = sch.poll_start(now) {
                        prop_assert!(
                            !running.iter().any(|&j| j % 4 == i % 4 && class(j) == Class::Exclusive),
                            "link {} started on path {} beside an exclusive run", i, i % 4
                        );
                        prop_assert!(running.insert(i), "link {} started twice", i);
                        prop_assert!(
                            running.iter().filter(|&&j| class(j) == Class::Exclusive).count() <= max_running
                        );
                    }
                    // What still waits says why, truly.
                    for i in 0..links {
                        if let Some(LinkState::Ready { .. }) = sch.state(i) {
                            match sch.waiting_for(i) {
                                Some(Wait::Exclusive(j)) => prop_assert!(
                                    running.contains(&j) && j % 4 == i % 4 && class(j) == Class::Exclusive
                                ),
                                Some(Wait::Node) => prop_assert!(
                                    class(i) == Class::Exclusive
                                        && running.iter().filter(|&&j| class(j) == Class::Exclusive).count() >= max_running
                                ),
                                None => prop_assert!(false, "link {} is due, free to run, and was not started", i),
                            }
                        }
                    }
                }
                Op::End(i, e) => {
                    let i = i % links;
                    let end = match e {
                        0 => RunEnd::Estimate,
                        1 => RunEnd::NoEstimate("limit".into()),
                        _ => RunEnd::PeerDown("refused".into()),
                    };
                    sch.handle_done(i, now, &end);
                    if running.remove(&i) {
                        match sch.state(i) {
                            Some(LinkState::Waiting { due }) => prop_assert!(*due >= now),
                            Some(LinkState::BackingOff { until, .. }) => prop_assert!(*until >= now),
                            other => prop_assert!(false, "after a run: {:?}", other),
                        }
                    }
                }
                Op::Now(i) => {
                    let i = i % links;
                    let r = sch.measure_now(i, now);
                    prop_assert_eq!(r.is_err(), running.contains(&i));
                }
                Op::Traffic(i, bps) => sch.handle_traffic(i % links, bps),
            }
            for i in 0..links {
                let is_running = matches!(sch.state(i), Some(LinkState::Running { .. }));
                prop_assert_eq!(is_running, running.contains(&i));
            }
        }
        // Everything that is not running starts within its longest wait: an interval
        // with jitter, a traffic wait (an interval, or its own bound), or the longest
        // back-off.
        for i in running.drain() {
            sch.handle_done(i, now, &RunEnd::Estimate);
        }
        let horizon = now.saturating_add(Duration::from_secs(40));
        let mut started = HashSet::new();
        let mut t = now;
        while t <= horizon && started.len() < links {
            while let Some(i) = sch.poll_start(t) {
                started.insert(i);
                sch.handle_done(i, t, &RunEnd::Estimate);
            }
            t = t.saturating_add(Duration::from_millis(100));
        }
        prop_assert_eq!(started.len(), links);
    }
}

/// A link of the feasible-load property: its timing and how long each run lasts.
#[derive(Debug, Clone)]
struct Load {
    timing: Timing,
    run: Duration,
}

fn load() -> impl Strategy<Value = Load> {
    (0usize..3, any::<bool>(), 12u64..60, 200u64..2_000).prop_map(
        |(path, exclusive, interval, run_ms)| {
            let interval = Duration::from_secs(interval);
            let (class, run) = if exclusive {
                (Class::Exclusive, Duration::from_millis(run_ms))
            } else {
                // A continuous method runs for much of its interval.
                (
                    Class::Background,
                    interval.mul_f64(0.2 + 0.5 * run_ms as f64 / 2_000.0),
                )
            };
            Load {
                timing: Timing {
                    interval,
                    jitter: 0.1,
                    path,
                    class,
                    ..Timing::default()
                },
                run,
            }
        },
    )
}

proptest! {
    /// Up to six links whose exclusive runs last at most 2 s and whose intervals are at
    /// least 12 s: a link waits at most for one run of each other exclusive link (each
    /// falls due again an interval later, after this one has run), 10 s, so each starts
    /// within its interval of falling due, background ones beside everything else.
    #[test]
    fn under_a_feasible_load_every_link_starts_within_its_interval(
        links in prop::collection::vec(load(), 1..7),
        max_running in 1usize..3,
        seed in any::<u64>(),
    ) {
        let start = MonoTime::from_nanos(1_000_000_000);
        let mut sch = Scheduler::new(
            links.iter().map(|l| l.timing.clone()).collect(),
            max_running,
            start,
            Duration::from_secs(5),
            seed,
        );
        let mut ends: Vec<Option<MonoTime>> = vec![None; links.len()];
        let mut due: Vec<Option<MonoTime>> = vec![None; links.len()];
        let mut runs = vec![0u32; links.len()];
        let horizon = start.saturating_add(Duration::from_secs(600));
        let mut now = start;
        while now <= horizon {
            for (i, end) in ends.iter_mut().enumerate() {
                if end.is_some_and(|e| e <= now) {
                    *end = None;
                    sch.handle_done(i, now, &RunEnd::Estimate);
                }
            }
            for (i, d) in due.iter_mut().enumerate() {
                if let Some(LinkState::Waiting { due }) = sch.state(i) {
                    *d = Some(*due);
                }
            }
            while let Some(i) = sch.poll_start(now) {
                let fell_due = due[i].expect("it waited before");
                let waited = now.saturating_since(fell_due);
                prop_assert!(
                    waited <= links[i].timing.interval,
                    "link {} ({:?}) waited {:?}, over its interval", i, links[i], waited
                );
                runs[i] += 1;
                ends[i] = Some(now.saturating_add(links[i].run));
            }
            now = now.saturating_add(Duration::from_millis(100));
        }
        for (i, n) in runs.iter().enumerate() {
            // 600 s at one run per interval (at most 1.1 × 60 s) and its run length.
            prop_assert!(*n >= 5, "link {} ran only {} times: {:?}", i, n, links[i]);
        }
    }
}
