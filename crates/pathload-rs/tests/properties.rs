//! Properties of the estimator over arbitrary input: the trend analysis never panics
//! and never yields NaN; the estimator, fed anything at all, never panics, always
//! ends within its fleet limit, and reports a finite, ordered, non-negative range.

use pathload_rs::trend::analyse;
use pathload_rs::{Action, Arrival, Config, Estimator, Mode, StreamResult, TrainResult};
use proptest::prelude::*;

fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
    prop::collection::vec(
        (0u32..400, -1_000_000_000i64..1_000_000_000, any::<i32>()),
        0..400,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(seq, sent_ns, d)| Arrival {
                seq,
                sent_ns,
                received_ns: sent_ns.saturating_add(i64::from(d)),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn analysis_is_total_and_finite(sent in 0u32..400, spacing in 0u64..10_000_000, a in arrivals()) {
        let r = analyse(sent, spacing, &a);
        prop_assert!(r.loss.is_finite() && r.loss <= 1.0);
        if let Some(p) = r.pct {
            prop_assert!((0.0..=1.0).contains(&p));
        }
        if let Some(d) = r.pdt {
            prop_assert!((-1.0..=1.0).contains(&d));
        }
        prop_assert_eq!(r.trend.is_some(), r.pct.is_some());
    }

    #[test]
    fn the_estimator_survives_anything_and_ends_within_its_limit(
        results in prop::collection::vec((arrivals(), prop::collection::vec(any::<i64>(), 0..120), any::<u32>()), 1..60),
        max_fleets in 1u32..6,
        adr_gap in 1_000i64..20_000_000,
        mode in prop::bool::ANY,
    ) {
        let mut e = Estimator::new(Config {
            max_fleets,
            mode: if mode { Mode::Fast } else { Mode::Slow },
            ..Config::default()
        });
        // A good back-to-back train first, so that the fleets are what gets fuzzed.
        e.handle_train(&TrainResult {
            id: 0,
            sent: 51,
            arrivals: (0..51)
                .map(|i| Arrival {
                    seq: i,
                    sent_ns: i64::from(i) * 3_000,
                    received_ns: i64::from(i) * adr_gap,
                })
                .collect(),
        });
        prop_assert!(matches!(e.poll_action(), Action::Stream(_)));
        for (arrivals, stamps, competing) in results {
            match e.poll_action() {
                Action::Done(_) => break,
                Action::Train(t) => e.handle_train(&TrainResult {
                    id: t.id,
                    sent: t.packets,
                    arrivals,
                }),
                Action::Stream(s) => {
                    prop_assert!(s.spacing_ns > 0 && s.size >= 228 && s.rate.is_finite());
                    e.handle_stream(&StreamResult {
                        fleet: s.fleet,
                        stream: s.stream,
                        sent: s.packets,
                        sender_stamps: stamps,
                        arrivals,
                        competing_rider_bytes: u64::from(competing),
                        rider_bytes: u64::from(competing),
                        riding_probe_bytes: 0,
                        kernel_stamps: false,
                    });
                }
            }
            while e.poll_event().is_some() {}
        }
        e.handle_stop(pathload_rs::StopReason::Interrupted);
        let Action::Done(o) = e.poll_action() else {
            panic!("a stopped run is done");
        };
        prop_assert!(o.fleets <= max_fleets);
        for v in [o.low, o.high, o.unadjusted_low, o.unadjusted_high] {
            prop_assert!(v.is_finite() && v >= 0.0, "{o:?}");
        }
        prop_assert!(o.low <= o.high && o.unadjusted_low <= o.unadjusted_high, "{o:?}");
    }
}
