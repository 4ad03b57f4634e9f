//! What a measuring method is to the overlay: one [`MethodRun`] per method, each in
//! a file of its own beside this one, listed once in [`super::registry`]. A method
//! is handed one [`Run`] (the link's neighbour, transport, time limit and session,
//! the node's stop flag) and gives one [`Estimate`] with its [`RunOutcome`]; the
//! runner records it, logs it and tells the scheduler.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mgrp_tool::SessionOptions;
use mgrp_tool::exit::Ending;
use mgrp_views::estimate::{Estimate, RunOutcome};
use pathload_rs::control::Transport;
use pathload_rs::tool::MeasureError;

pub use super::schedule::Class;
use super::schedule::RunEnd;

/// What a method's estimates give, for what is built on them: the transfer-rate
/// prediction takes the available bandwidth, the loss and the path's shape from the
/// methods that give each; passive estimates stand in for runs of the methods that
/// give the available bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gives {
    /// The available bandwidth: a range, a point or a lower bound (`low_bps`,
    /// `high_bps`).
    AvailableBandwidth,
    /// Loss episodes (`loss`).
    LossEpisodes,
    /// The narrow link's capacity and where queues form (`shape`).
    PathShape,
}

/// What one run of a method costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCost {
    /// Probe bytes of a typical run.
    pub bytes: u64,
    /// The time limit a budget plans its runs with.
    pub time_limit: Duration,
}

/// One way of measuring a link.
pub trait MethodRun: Send + Sync + std::fmt::Debug {
    /// Its name in the configuration (`method = "..."`), the API and the metrics.
    fn name(&self) -> &'static str;

    /// What its estimates give.
    fn gives(&self) -> Gives;

    /// How its runs share a path with other methods' (see [`Class`]): exclusive if
    /// it loads the path, background if it is light.
    fn class(&self) -> Class;

    /// Whether a link left unnamed is named after it too (`FROM-TRANSPORT-METHOD`);
    /// pathload's links are `FROM-TRANSPORT`, as they were before there were others.
    fn in_default_names(&self) -> bool {
        true
    }

    /// What one run costs, for the probe budget a mesh plans
    /// (`mgrp_mesh::budget`): as measured on the namespace paths of the docs,
    /// around 10 Mbit/s; a description gives its own where its paths differ.
    fn cost(&self) -> RunCost;

    /// One run: blocks until it ends, its time limit passes or the node stops.
    fn run(&self, run: &Run<'_>) -> (Estimate, RunOutcome);
}

/// One run of a link, as its method sees it.
pub struct Run<'a> {
    /// The link's name (for logs).
    pub link: &'a str,
    /// The neighbour measured from.
    pub from: IpAddr,
    /// How probes travel.
    pub transport: Transport,
    /// Longest the run may take.
    pub time_limit: Duration,
    /// Where the neighbour serves and how this node receives.
    pub session: SessionOptions,
    /// Set when the node stops: the run ends at its next step.
    pub stop: &'a AtomicBool,
    /// A numbered record of this run with nothing filled in.
    pub blank: &'a dyn Fn() -> Estimate,
    /// Sends a continuous method's estimate out on the event stream while its run
    /// goes on.
    pub publish: &'a dyn Fn(Estimate),
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("link", &self.link)
            .field("from", &self.from)
            .field("transport", &self.transport)
            .field("time_limit", &self.time_limit)
            .finish_non_exhaustive()
    }
}

impl Run<'_> {
    /// A numbered record of this run with nothing filled in.
    pub fn blank(&self) -> Estimate {
        (self.blank)()
    }

    /// Publishes a partial estimate.
    pub fn publish(&self, e: Estimate) {
        (self.publish)(e);
    }

    /// Whether the node is stopping.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The outcome of a run that could not start, with its error set in `e`.
pub(crate) fn refused(e: &mut Estimate, err: MeasureError) -> RunOutcome {
    match err {
        MeasureError::Unreachable(why) => {
            e.error = Some(why);
            RunOutcome::PeerDown
        }
        MeasureError::Busy(why) => {
            e.error = Some(format!("the sender refused: {why}"));
            RunOutcome::Busy
        }
        MeasureError::Refused(why) => {
            e.error = Some(format!("the sender refused: {why}"));
            RunOutcome::SenderFailed
        }
        MeasureError::Failed(err) => {
            e.error = Some(format!("{err:#}"));
            RunOutcome::Error
        }
    }
}

/// The outcome of a run the neighbour cut short, with its error set in `e`.
pub(crate) fn cut_short(e: &mut Estimate, end: &Ending) -> Option<RunOutcome> {
    if let Some(gone) = &end.peer_gone {
        e.error = Some(format!("the neighbour went away: {gone}"));
        Some(RunOutcome::PeerDown)
    } else if let Some(failed) = &end.sender_failed {
        e.error = Some(format!(
            "the neighbour's side failed (see its log): {failed}"
        ));
        Some(RunOutcome::SenderFailed)
    } else {
        None
    }
}

/// Sets the outcome and tells the scheduler what it means.
pub(crate) fn conclude(mut e: Estimate, outcome: RunOutcome) -> (Estimate, RunEnd) {
    e.outcome = outcome;
    let why = || e.error.clone().unwrap_or_default();
    let end = match outcome {
        o if o.answered() => RunEnd::Estimate,
        RunOutcome::PeerDown => RunEnd::PeerDown(why()),
        _ => RunEnd::NoEstimate(why()),
    };
    (e, end)
}

pub(crate) fn share(part: u64, whole: u64) -> f64 {
    if whole > 0 {
        part as f64 / whole as f64
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Estimate {
        Estimate::empty("l", "mgrp", "pathchirp", 1, 10.0, 12.0)
    }

    #[test]
    fn a_run_that_could_not_start_says_why_and_backs_off_accordingly() {
        let cases = [
            (
                MeasureError::Unreachable("10.0.0.1:55002: refused".into()),
                RunOutcome::PeerDown,
            ),
            (
                MeasureError::refusal(format!(
                    "{}: this sender runs 32 measurements, the most it runs at once",
                    mgrp_tool::BUSY
                )),
                RunOutcome::Busy,
            ),
            (
                MeasureError::Refused("its mgrpd refused the train".into()),
                RunOutcome::SenderFailed,
            ),
            (
                MeasureError::Failed(anyhow::anyhow!("no mgrpd socket")),
                RunOutcome::Error,
            ),
        ];
        for (err, want) in cases {
            let mut e = empty();
            assert_eq!(refused(&mut e, err), want);
            assert!(e.error.is_some());
            let (e, end) = conclude(e, want);
            assert_eq!(e.outcome, want);
            match want {
                RunOutcome::PeerDown => assert!(matches!(end, RunEnd::PeerDown(_))),
                _ => assert!(matches!(end, RunEnd::NoEstimate(_)), "{end:?}"),
            }
        }
        let (_, end) = conclude(empty(), RunOutcome::LowerBound);
        assert!(matches!(end, RunEnd::Estimate));
    }

    #[test]
    fn a_neighbour_gone_outranks_its_failure() {
        let mut e = empty();
        let mut end = Ending {
            peer_gone: Some("reset".into()),
            sender_failed: Some("refused".into()),
            unstamped: 0,
        };
        assert_eq!(cut_short(&mut e, &end), Some(RunOutcome::PeerDown));
        assert!(e.error.as_deref().unwrap().contains("went away"));
        end.peer_gone = None;
        assert_eq!(cut_short(&mut e, &end), Some(RunOutcome::SenderFailed));
        assert_eq!(cut_short(&mut e, &Ending::default()), None);
        assert_eq!(share(1, 4), 0.25);
        assert_eq!(share(1, 0), 0.0);
    }
}
