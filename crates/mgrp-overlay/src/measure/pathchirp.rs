//! pathChirp: chirps for the run's time limit; each smoothed estimate goes out on
//! the event stream as it comes (at most every `PUBLISH_EVERY`), and the last one is
//! the run's record.

use std::time::Duration;

use mgrp_views::estimate::{Estimate, RunOutcome};

use super::method::{Class, Gives, MethodRun, Run, RunCost, cut_short, refused, share};

/// How often a continuous method's estimate goes out on the event stream while its
/// run goes on.
const PUBLISH_EVERY: Duration = Duration::from_secs(2);

/// pathChirp.
#[derive(Debug)]
pub struct Pathchirp;

impl MethodRun for Pathchirp {
    fn name(&self) -> &'static str {
        "pathchirp"
    }

    fn gives(&self) -> Gives {
        Gives::AvailableBandwidth
    }

    // A chirp's probes are a small share of the path's capacity.
    // 77 MB an hour at 20-s runs every 10 s (docs/overlay.md): 0.64 MB a 20-s run.
    fn cost(&self) -> RunCost {
        RunCost {
            bytes: 640_000,
            time_limit: Duration::from_secs(20),
        }
    }

    fn class(&self) -> Class {
        Class::Background
    }

    fn run(&self, run: &Run<'_>) -> (Estimate, RunOutcome) {
        let opts = pathchirp_rs::tool::MeasureOptions {
            session: run.session.clone(),
            ..pathchirp_rs::tool::MeasureOptions::new(
                run.from.to_string(),
                run.transport,
                run.time_limit,
            )
        };
        let mut published: Option<std::time::Instant> = None;
        let result = pathchirp_rs::tool::measure(&opts, run.stop, &mut |p| {
            let pathchirp_rs::tool::Progress::Chirp { report, .. } = p else {
                return;
            };
            let Some(sm) = report.smoothed else { return };
            if published.is_some_and(|t| t.elapsed() < PUBLISH_EVERY) {
                return;
            }
            published = Some(std::time::Instant::now());
            let mut e = run.blank();
            // Partial estimates are not runs: they take no number of their own.
            e.seq = 0;
            e.partial = true;
            e.outcome = RunOutcome::Estimate;
            e.converged = true;
            e.low_bps = Some(sm.adjusted_bps);
            e.high_bps = Some(sm.adjusted_bps);
            e.unadjusted_low_bps = Some(sm.bps);
            e.unadjusted_high_bps = Some(sm.bps);
            run.publish(e);
        });
        let mut e = run.blank();
        let outcome = match result {
            Ok(m) => {
                let c = &m.counts;
                e.probe_bytes = c.probe_bytes;
                e.riding_probe_bytes = c.riding_probe_bytes;
                e.rider_bytes = c.rider_bytes;
                e.rider_share = share(c.riding_probe_bytes, c.probe_bytes);
                e.streams = u32::try_from(c.chirps).unwrap_or(u32::MAX);
                if let Some(o) = cut_short(&mut e, &m.end) {
                    o
                } else if let Some(sm) = m.last {
                    e.converged = true;
                    e.low_bps = Some(sm.adjusted_bps);
                    e.high_bps = Some(sm.adjusted_bps);
                    e.unadjusted_low_bps = Some(sm.bps);
                    e.unadjusted_high_bps = Some(sm.bps);
                    RunOutcome::Estimate
                } else if c.chirps > 0 {
                    e.error = Some(format!(
                        "no estimate from {} chirps ({} lost a probe, {} reordered, {} coalesced, {} unusable, {} disturbed); a run needs {} usable chirps",
                        c.chirps,
                        c.loss,
                        c.reorder,
                        c.coalesced,
                        c.unusable,
                        c.disturbed,
                        opts.config.smooth
                    ));
                    RunOutcome::CrossTraffic
                } else {
                    e.error = Some("the run ended before a chirp came back".into());
                    RunOutcome::Limit
                }
            }
            Err(err) => refused(&mut e, err),
        };
        (e, outcome)
    }
}
