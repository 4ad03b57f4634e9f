//! btc-rs: the narrow link's capacity from packet bunches and where queues form
//! from squeezed pairs (the shape the transfer-rate prediction needs), each run
//! afresh: the capacity is not carried over, a path may change under the overlay.

use std::time::Duration;

use mgrp_views::estimate::{Estimate, RunOutcome, Shape};

use super::method::{Class, Gives, MethodRun, Run, RunCost, cut_short, refused};

/// btc-rs's capacity and squeezed pairs.
#[derive(Debug)]
pub struct Btc;

impl MethodRun for Btc {
    fn name(&self) -> &'static str {
        "btc"
    }

    fn gives(&self) -> Gives {
        Gives::PathShape
    }

    // Its bunches fill the path for as long as they run.
    // bunches and 1000 squeezed pairs, 0.228 MB in 8.4 s (docs/btc/results.md); 30 s at most.
    fn cost(&self) -> RunCost {
        RunCost {
            bytes: 228_000,
            time_limit: Duration::from_secs(30),
        }
    }

    fn class(&self) -> Class {
        Class::Exclusive
    }

    fn run(&self, run: &Run<'_>) -> (Estimate, RunOutcome) {
        let opts = btc_rs::tool::MeasureOptions {
            session: run.session.clone(),
            seed: mgrp_rt::wall_now().as_nanos(),
            ..btc_rs::tool::MeasureOptions::new(run.from.to_string(), run.transport)
        };
        let result = btc_rs::tool::measure(&opts, run.stop);
        let mut e = run.blank();
        let outcome = match result {
            Ok(m) => {
                e.probe_bytes = m.probe_bytes;
                e.rider_bytes = m.rider_bytes;
                if let Some(o) = cut_short(&mut e, &m.end) {
                    o
                } else if let Some(capacity_bps) = m.capacity_bps {
                    e.converged = true;
                    e.streams = opts.capacity.bunches;
                    e.shape = Some(Shape {
                        capacity_bps,
                        class: m.squeeze.as_ref().map(|q| q.class),
                        score: m.squeeze.as_ref().map(|q| q.score),
                        squeezed: m.squeeze.as_ref().map(|q| q.squeezed),
                        pairs_skipped: m.squeeze_skipped.clone(),
                        rtt_s: m.rtt.as_secs_f64(),
                    });
                    RunOutcome::Estimate
                } else if run.stopping() {
                    e.error = Some("the node stopped during the run".into());
                    RunOutcome::Error
                } else {
                    e.error = Some(
                    "no capacity: no two consecutive packets of a bunch arrived apart (loss, or a link that batches packets)"
                        .into(),
                );
                    RunOutcome::CrossTraffic
                }
            }
            Err(err) => refused(&mut e, err),
        };
        (e, outcome)
    }
}
