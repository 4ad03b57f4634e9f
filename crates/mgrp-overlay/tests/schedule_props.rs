//! The scheduler under arbitrary sequences of time, starts, ends, "measure now" and
//! traffic reports: a link never runs twice at once, nor two links of one path, no more than `max_running` run,
//! every link that is due is eventually started, and waits never lie in the past.

use std::collections::HashSet;
use std::time::Duration;

use mgrp_core::MonoTime;
use mgrp_overlay::measure::schedule::{LinkState, RunEnd, Scheduler, Timing};
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
    }
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
                        prop_assert!(running.insert(i), "link {} started twice", i);
                        prop_assert!(running.len() <= max_running);
                        prop_assert!(
                            running.iter().filter(|&&j| j % 4 == i % 4).count() == 1,
                            "two links of path {} at once", i % 4
                        );
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
