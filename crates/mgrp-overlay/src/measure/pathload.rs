//! pathload-rs: the available bandwidth's range by fleets of periodic streams, in
//! fast mode (no idle between streams) or slow mode (idle between them, as the
//! original).

use std::time::Duration;

use mgrp_views::estimate::{Estimate, RunOutcome};
use pathload_rs::tool::{MeasureOptions, measure};

use super::method::{Class, Gives, MethodRun, Run, RunCost, cut_short, refused, share};

/// pathload in one mode.
#[derive(Debug)]
pub struct Pathload {
    name: &'static str,
    mode: pathload_rs::Mode,
}

/// `pathload-fast`: no idle between streams.
pub static FAST: Pathload = Pathload {
    name: "pathload-fast",
    mode: pathload_rs::Mode::Fast,
};

/// `pathload-slow`: idle between streams, as the original.
pub static SLOW: Pathload = Pathload {
    name: "pathload-slow",
    mode: pathload_rs::Mode::Slow,
};

impl MethodRun for Pathload {
    fn name(&self) -> &'static str {
        self.name
    }

    fn gives(&self) -> Gives {
        Gives::AvailableBandwidth
    }

    // 3.01 MB in 44 s a run on the prediction experiment's paths (docs/btc/results.md),
    // 60 s at most; the slow mode idles between the same streams, twice as long.
    fn cost(&self) -> RunCost {
        RunCost {
            bytes: 3_010_000,
            time_limit: Duration::from_secs(match self.mode {
                pathload_rs::Mode::Fast => 60,
                pathload_rs::Mode::Slow => 120,
            }),
        }
    }

    // Its fleets fill the path up to the rate they test.
    fn class(&self) -> Class {
        Class::Exclusive
    }

    fn in_default_names(&self) -> bool {
        false
    }

    fn run(&self, run: &Run<'_>) -> (Estimate, RunOutcome) {
        let opts = MeasureOptions {
            session: run.session.clone(),
            mode: self.mode,
            max_time: run.time_limit,
            ..MeasureOptions::new(run.from.to_string(), run.transport)
        };
        // Each fleet's verdict at debug (a dozen lines a run: the rates it tried and
        // each stream's trend, which say why a range lies where it does), each train's
        // and stream's at trace (the event is only serialised when that is on).
        let result = measure(&opts, run.stop, &mut |p| {
            if let pathload_rs::tool::Progress::Event(pathload_rs::estimator::Event::Fleet(f)) = p {
                tracing::debug!(
                    "{}: fleet {} at {:.2} Mbit/s (asked {:.2}, riders {:.2}): {:?}, {:?}, streams {}{}",
                    run.link,
                    f.fleet,
                    f.actual_rate,
                    f.requested_rate,
                    f.competing_rate,
                    f.verdict,
                    f.end,
                    f.trends,
                    if f.hidden_trend { ", hidden trend" } else { "" }
                );
            } else if let pathload_rs::tool::Progress::Event(e) = p {
                tracing::trace!(
                    "{}: {}",
                    run.link,
                    serde_json::to_string(e).unwrap_or_default()
                );
            }
        });
        let mut e = run.blank();
        let outcome = match result {
            Ok(m) => {
                let o = &m.outcome;
                e.stop_reason = serde_json::to_value(o.reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned));
                e.probe_bytes = o.probe_bytes;
                e.riding_probe_bytes = o.riding_probe_bytes;
                e.rider_bytes = o.rider_bytes;
                e.rider_share = share(o.riding_probe_bytes, o.probe_bytes);
                e.adjustment = serde_json::to_value(o.adjustment)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string));
                e.hidden_trend_fleets = Some(o.hidden_trend_fleets);
                e.fleets = o.fleets;
                e.streams = o.streams;
                if let Some(o) = cut_short(&mut e, &m.end) {
                    o
                } else {
                    let outcome = outcome_of(o);
                    match outcome {
                        RunOutcome::Estimate => {
                            e.converged = true;
                            e.low_bps = Some(bps(o.low));
                            e.high_bps = Some(bps(o.high));
                            e.unadjusted_low_bps = Some(bps(o.unadjusted_low));
                            e.unadjusted_high_bps = Some(bps(o.unadjusted_high));
                        }
                        RunOutcome::LowerBound => {
                            // No trend up to the highest rate the sender reached: the
                            // search's lower bound is that rate.
                            e.lower_bound = true;
                            e.low_bps = Some(bps(o.low));
                            e.unadjusted_low_bps = Some(bps(o.unadjusted_low));
                        }
                        _ => e.error = Some(o.reason.describe().to_string()),
                    }
                    outcome
                }
            }
            Err(err) => refused(&mut e, err),
        };
        (e, outcome)
    }
}

/// The outcome of a pathload run that ended as `o` says: a lower bound when the
/// sender found no trend up to the highest rate it reached (its maximum, or the
/// rate it fell short at) and nothing above it.
fn outcome_of(o: &pathload_rs::Outcome) -> RunOutcome {
    use pathload_rs::StopReason as R;
    if o.lower_bound {
        return RunOutcome::LowerBound;
    }
    match o.reason {
        R::UserResolution | R::GreyResolution => RunOutcome::Estimate,
        R::AboveMaxRate => RunOutcome::LowerBound,
        R::FleetLimit | R::TimeLimit => RunOutcome::Limit,
        R::RateUnreachable => RunOutcome::RateUnreachable,
        R::Unusable | R::NoInitialRate => RunOutcome::CrossTraffic,
        R::Interrupted => RunOutcome::Error,
    }
}

/// pathload's Mbit/s as bits per second.
fn bps(mbps: f64) -> f64 {
    mbps * 1e6
}
