//! badabing: loss-episode frequency and duration over the run's time limit.

use std::time::Duration;

use mgrp_views::estimate::{Estimate, Loss, RunOutcome};

use super::method::{Class, Gives, MethodRun, Run, RunCost, cut_short, refused};

/// badabing.
#[derive(Debug)]
pub struct Badabing;

impl MethodRun for Badabing {
    fn name(&self) -> &'static str {
        "badabing"
    }

    fn gives(&self) -> Gives {
        Gives::LossEpisodes
    }

    // Its probes are a small share of the path's capacity.
    // 3.50 MB in its 20 s (docs/btc/results.md).
    fn cost(&self) -> RunCost {
        RunCost {
            bytes: 3_500_000,
            time_limit: Duration::from_secs(20),
        }
    }

    fn class(&self) -> Class {
        Class::Background
    }

    fn run(&self, run: &Run<'_>) -> (Estimate, RunOutcome) {
        let opts = badabing_rs::tool::MeasureOptions {
            session: run.session.clone(),
            config: badabing_rs::Config {
                seed: mgrp_rt::wall_now().as_nanos(),
                ..badabing_rs::Config::default()
            },
            ..badabing_rs::tool::MeasureOptions::new(
                run.from.to_string(),
                run.transport,
                run.time_limit,
            )
        };
        let result = badabing_rs::tool::measure(&opts, run.stop, &mut |_| {});
        let mut e = run.blank();
        let outcome = match result {
            Ok(m) => {
                let b = &m.estimate;
                e.probe_bytes = b.probe_bytes;
                e.rider_bytes = b.rider_bytes;
                e.streams = m.windows;
                let slot = opts.config.slot_ns as f64 * 1e-9;
                if let Some(o) = cut_short(&mut e, &m.end) {
                    o
                } else if b.outcomes.total() > 0 {
                    e.converged = true;
                    e.loss = Some(Loss {
                        episode_frequency: b.frequency,
                        episode_frequency_ci: b.frequency_ci,
                        episode_duration_s: b.duration_s,
                        episode_duration_ci_s: b.duration_ci_slots.map(|d| d * slot),
                        loss_rate: b.loss_rate,
                        experiments: b.outcomes.total(),
                    });
                    RunOutcome::Estimate
                } else {
                    e.error = Some("the run ended before an experiment came back".into());
                    RunOutcome::Limit
                }
            }
            Err(err) => refused(&mut e, err),
        };
        (e, outcome)
    }
}
