//! Every view filled: for the JSON held in `tests/golden/`, and for tests of what
//! reads the views (route control) to start from a real serialised answer.

use mgrp_core::heartbeat::HopState;
use mgrp_core::path::{Basis, PathClass};

use crate::estimate::{Estimate, Loss, RunCounts, RunOutcome, Shape};
use crate::link::{LinkState, LinkView, Links, PassiveView};
use crate::passive::{PassiveTcp, PassiveTiming};
use crate::prediction::{
    Available, HistoryInput, Inputs, KernelInput, LinkPrediction, LossInput, Predicted, Prediction,
    ShapeInput,
};
use crate::routes::{
    DestinationView, Hop, HopView, LossSource, MemberView, PathView, RateSource, Reason,
    RoutesView, Score, SwitchView,
};

/// `GET /v1/links` of node east0 with the one link [`link_view`].
pub fn links() -> Links {
    Links {
        node: "east0".into(),
        links: vec![link_view()],
    }
}

/// A run of pathload with every field filled.
pub fn estimate() -> Estimate {
    Estimate {
        link: "n0-mgrp".into(),
        seq: 42,
        started_at: 1_790_000_000.25,
        ended_at: 1_790_000_012.5,
        duration_s: 12.25,
        transport: "mgrp".into(),
        method: "pathload-fast".into(),
        converged: true,
        lower_bound: false,
        outcome: RunOutcome::Estimate,
        stop_reason: Some("user_resolution".into()),
        error: None,
        low_bps: Some(8.5e6),
        high_bps: Some(9.75e6),
        unadjusted_low_bps: Some(10.5e6),
        unadjusted_high_bps: Some(11.75e6),
        adjustment: Some("complete".into()),
        hidden_trend_fleets: Some(0),
        probe_bytes: 1_234_567,
        riding_probe_bytes: 234_567,
        rider_bytes: 123_456,
        rider_share: 0.19,
        fleets: 3,
        streams: 36,
        loss: Some(Loss {
            episode_frequency: 0.0125,
            episode_frequency_ci: 0.005,
            episode_duration_s: Some(0.0625),
            episode_duration_ci_s: Some(0.03125),
            loss_rate: 0.0075,
            experiments: 4159,
        }),
        partial: false,
        shape: Some(Shape {
            capacity_bps: 20e6,
            class: Some(PathClass::TightLikeNarrow),
            score: Some(3),
            squeezed: Some([0.25, 0.5]),
            pairs_skipped: None,
            rtt_s: 0.0405,
        }),
    }
}

/// A link with every field filled (its latest run is [`estimate`]), from 10.0.0.1.
pub fn link_view() -> LinkView {
    let mut runs = RunCounts::default();
    runs.add(RunOutcome::Estimate);
    runs.add(RunOutcome::Estimate);
    runs.add(RunOutcome::Busy);
    LinkView {
        name: "n0-mgrp".into(),
        from: "10.0.0.1:55002".into(),
        neighbour: Some("n0".into()),
        transport: "mgrp".into(),
        method: "pathload-fast".into(),
        interval_s: 60.0,
        class: crate::link::Class::Exclusive,
        ride_min_bps: Some(1_000_000),
        traffic_bps: Some(2_500_000),
        state: LinkState::BackingOff,
        next_run_in_s: Some(4.5),
        waiting_for: Some(crate::link::WaitingFor::Path {
            link: "n0-mgrp-btc".into(),
        }),
        failures: 2,
        peer_down: true,
        last_error: Some("the sender refused: busy".into()),
        latest: Some(estimate()),
        age_s: Some(30.5),
        runs,
        probe_bytes: 9_876_543,
        riding_probe_bytes: 876_543,
        prediction: LinkPrediction(Prediction {
            neighbour: "10.0.0.1".parse().unwrap(),
            prediction: Some(Predicted {
                method: Basis::ScaledAbw,
                bps: 5.5e6,
                low_bps: 4.5e6,
                high_bps: 6.5e6,
                basis: "available bandwidth x 0.57".into(),
                history_weight: Some(0.25),
            }),
            values: vec![Predicted {
                method: Basis::Mathis,
                bps: 12e6,
                low_bps: 11e6,
                high_bps: 13e6,
                basis: "MSS/(RTT sqrt(p))".into(),
                history_weight: None,
            }],
            inputs: Inputs {
                available: Some(Available {
                    low_bps: 8.5e6,
                    high_bps: 9.75e6,
                    lower_bound: false,
                    method: "pathload-fast".into(),
                    link: "n0-mgrp".into(),
                    age_s: 30.5,
                }),
                shape: Some(ShapeInput {
                    capacity_bps: 20e6,
                    class: Some(PathClass::Undecided),
                    score: Some(0),
                    rtt_s: 0.0405,
                    link: "n0-mgrp-btc".into(),
                    age_s: 100.25,
                }),
                loss: Some(LossInput {
                    loss_rate: 0.0075,
                    episode_frequency: 0.0125,
                    link: "n0-mgrp-badabing".into(),
                    age_s: 12.5,
                }),
                kernel: Some(KernelInput {
                    delivery_bps: 7.25e6,
                    bbr_bps: Some(7.5e6),
                    congestion: Some("bbr".into()),
                    min_rtt_s: Some(0.04),
                    rtt_s: 0.045,
                    total_retrans: 17,
                    flows: 2,
                    network_limited: 1,
                    age_s: 1.5,
                }),
                kernel_note: Some("one flow limited by the application".into()),
                history: Some(HistoryInput {
                    bps: 6.75e6,
                    congestion: Some("cubic".into()),
                    min_rtt_s: Some(0.04),
                    total_retrans: 12,
                    seen_s: 8.0,
                    age_s: 1350.0,
                    probes_bps: Some(5.25e6),
                    weight: 0.25,
                    note: "1350 s old of at most 1800 s".into(),
                }),
            },
        }),
        active_always: false,
        passive: Some(PassiveView {
            source: "passive-tcp".into(),
            last: Some(PassiveTcp {
                at: 1_790_000_020.0,
                bps: Some(7.5e6),
                flows: 3,
                network_limited: 1,
                app_limited: 1,
                end_limited: 1,
                from_bytes: 1,
                note: None,
            }),
            age_s: Some(2.5),
            timing: Some(PassiveTiming {
                at: 1_790_000_021.0,
                matched: 1000,
                unmatched: 12,
                not_network_limited: 40,
                retransmitted: 3,
                trains: 25,
                dispersion_bps: Some(9.5e6),
                streams: [4, 5, 6],
                trend_bps: Some(8.75e6),
                trend_low_bps: Some(8.5e6),
                trend_high_bps: None,
                note: Some("few trains".into()),
            }),
            timing_age_s: Some(1.5),
            covered: 5,
            coverage: 0.625,
        }),
    }
}

/// Route control with one member, one destination, one path and two switches.
pub fn routes_view() -> RoutesView {
    let beat = HopState {
        alive: true,
        rtt_s: Some(0.02),
        rtt_var_s: Some(0.002),
        loss: Some(0.01),
        loss_samples: 100,
        lost_in_row: 0,
        sent: 120,
        answered: 119,
        forward_s: Some(0.012),
        back_s: Some(0.008),
        stamps: 10,
        stamped_sent: 12,
        stamped_answered: 12,
    };
    let hop = Hop {
        alive: true,
        rtt_s: Some(0.02),
        loss: Some(0.01),
        loss_source: Some(LossSource::Badabing),
        rate_bps: Some(9e6),
        rate_source: Some(RateSource::Available),
        loss_samples: Some(4000),
        rtt_var_s: Some(0.002),
        forward_s: Some(0.012),
        back_s: Some(0.008),
    };
    let switch = SwitchView {
        prefix: "10.2.0.0/24".into(),
        at: 1_790_000_030.5,
        from: "direct".into(),
        to: "via north".into(),
        reason: Reason::Better {
            ratio: 1.75,
            needed: Some(1.4),
        },
        reason_text: "scores 1.75x".into(),
        from_bps: Some(4e6),
        to_bps: Some(7e6),
    };
    RoutesView {
        node: "west0".into(),
        address: "10.90.0.1".parse().unwrap(),
        eta: 0.5,
        t_ch_s: 30.0,
        rule: Some("confidence".into()),
        model: Some("pftk".into()),
        move_existing: false,
        members: vec![MemberView {
            name: "north".into(),
            address: "10.90.0.2".parse().unwrap(),
            device: Some("mgrp-north".into()),
            heartbeat: Some(beat),
            acks: None,
            api_ok: false,
            api_error: Some("connection refused".into()),
        }],
        destinations: vec![DestinationView {
            prefix: "10.2.0.0/24".into(),
            owner: "east0".into(),
            current: "via north".into(),
            manual: Some("via north".into()),
            since_switch_s: Some(12.5),
            hold_s: Some(9.5),
            better_for_s: Some(1.5),
            switches: 2,
            paths: vec![PathView {
                name: "via north".into(),
                id: 2,
                chosen: true,
                hops: vec![HopView {
                    from: "west0".into(),
                    to: "north".into(),
                    hop,
                }],
                score: Score {
                    alive: true,
                    bps: Some(7e6),
                    rate_bps: Some(9e6),
                    mathis_bps: Some(7e6),
                    rtt_s: Some(0.04),
                    loss: Some(0.02),
                    low_bps: Some(6e6),
                    high_bps: Some(8e6),
                    loss_error: Some(0.004),
                    rtt_error: Some(0.003),
                    basis: "min(rate, mathis)".into(),
                },
                flows: Some(3),
            }],
            recent: vec![
                switch.clone(),
                SwitchView {
                    reason: Reason::AllDown,
                    ..switch
                },
            ],
        }],
        kernel_error: Some("cannot steer".into()),
        at: 1_790_000_031.0,
    }
}

#[cfg(test)]
mod tests {
    //! The JSON of `/v1/links` and `/v1/routes` is what applications and the other
    //! members' route control read: every field of both (and of `/v1/links/NAME`),
    //! filled, serialised and held against the files in `tests/golden/`. A renamed or
    //! retyped field fails here. After a change meant to alter the API, rewrite the
    //! files with `MGRP_BLESS=1 cargo test -p mgrp-views` and say so in the guide's
    //! upgrade notes.

    use std::path::Path;

    use super::*;

    /// `value` serialised, against `tests/golden/NAME.json`.
    fn holds(name: &str, value: &impl serde::Serialize) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(value).unwrap() + "\n";
        if std::env::var_os("MGRP_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
            return;
        }
        let want =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            text == want,
            "{name}: the JSON differs from {}:\n{text}",
            path.display()
        );
    }

    #[test]
    fn links_are_served_as_they_always_were() {
        // `/v1/links` goes out through a JSON value, its keys sorted.
        holds("links", &serde_json::to_value(links()).unwrap());
        // `/v1/links/NAME`: the link alone, its fields in their order.
        holds("link", &link_view());
    }

    #[test]
    fn routes_are_served_as_they_always_were() {
        holds("routes", &routes_view());
    }

    #[test]
    fn a_switch_from_a_path_with_no_score_reads_back() {
        // The best path over one with no score is infinitely better; JSON says null.
        let mut r = routes_view();
        r.destinations[0].recent[0].reason = Reason::Better {
            ratio: f64::INFINITY,
            needed: None,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""ratio":null"#), "{text}");
        assert_eq!(serde_json::from_str::<RoutesView>(&text).unwrap(), r);
    }

    #[test]
    fn what_is_served_reads_back_the_same() {
        let text = serde_json::to_string(&links()).unwrap();
        assert_eq!(serde_json::from_str::<Links>(&text).unwrap(), links());
        let text = serde_json::to_string(&routes_view()).unwrap();
        assert_eq!(
            serde_json::from_str::<RoutesView>(&text).unwrap(),
            routes_view()
        );
    }

    #[test]
    fn the_prediction_reads_from_its_old_key_too() {
        let mut v = serde_json::to_value(link_view()).unwrap();
        assert_eq!(v["prediction"], v["btc"], "both keys say the same");
        let o = v.as_object_mut().unwrap();
        // A member of the release before, which sent `btc` alone.
        let p = o.remove("prediction").unwrap();
        assert_eq!(
            serde_json::from_value::<LinkView>(v.clone()).unwrap(),
            link_view()
        );
        // One that sends only the new key.
        let o = v.as_object_mut().unwrap();
        o.remove("btc");
        o.insert("prediction".into(), p);
        assert_eq!(
            serde_json::from_value::<LinkView>(v.clone()).unwrap(),
            link_view()
        );
        v.as_object_mut().unwrap().remove("prediction");
        let e = serde_json::from_value::<LinkView>(v).unwrap_err();
        assert!(e.to_string().contains("prediction"), "{e}");
        // A route's rate from the prediction, as the release before named it.
        assert_eq!(
            serde_json::from_str::<RateSource>(r#""btc""#).unwrap(),
            RateSource::Prediction
        );
        assert_eq!(
            serde_json::to_string(&RateSource::Prediction).unwrap(),
            r#""prediction""#
        );
    }

    /// A newer node's link, with a prediction by a method this version does not
    /// know, reads: that value is skipped and the prediction to use is none, the
    /// rest as sent. A value by a known method that does not parse is an error.
    #[test]
    fn a_method_added_since_is_skipped() {
        let view = link_view();
        let mut v = serde_json::to_value(&view).unwrap();
        let newer = serde_json::json!({
            "method": "bbr-share",
            "bps": 8e6,
            "low_bps": 8e6,
            "high_bps": 8e6,
            "basis": "BBR's share of a full link",
            "a_field_added_since": 1
        });
        for key in ["prediction", "btc"] {
            v[key]["values"].as_array_mut().unwrap().push(newer.clone());
            v[key]["prediction"] = newer.clone();
        }
        let read: LinkView = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(read.prediction.values, view.prediction.values);
        assert_eq!(read.prediction.prediction, None);
        assert_eq!(read.prediction.inputs, view.prediction.inputs);
        assert_eq!(read.name, view.name);
        for key in ["prediction", "btc"] {
            v[key]["values"][0]["bps"] = serde_json::json!("fast");
        }
        let e = serde_json::from_value::<LinkView>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("whose fields do not parse"), "{e}");
    }
}
