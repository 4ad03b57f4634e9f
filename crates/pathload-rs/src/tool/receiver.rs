//! The receiver role: connect to the sender and drive the estimator. [`measure`] is
//! a measurement as a library call (the Measurement Overlay uses it); `rcv` prints
//! one.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::params::{DEFAULT_MAX_FLEETS, DEFAULT_MAX_SECONDS, STREAM_DURATION_NS};
use crate::search::Bounds;
use crate::{
    Action, Config, Estimator, Event, Mode, Outcome, StopReason, StreamResult, StreamSpec,
    TrainResult,
};
use mgrp_tool::control::{Batch, Tag, Transport};
use mgrp_tool::session::{Bounds as RunBounds, Halt, Method, Next, drive};
use mgrp_tool::{BatchError, Exchange, MeasureError, Session, SessionOptions, exit::Ending};

use crate::tool::{TOOL, kind};

/// What one measurement needs: where the sender is, how probes travel, and how long
/// and finely to measure. [`MeasureOptions::new`] gives the tool's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureOptions {
    /// Where the sender is and how probes travel.
    pub session: SessionOptions,
    /// Idle between streams (slow) or not (fast).
    pub mode: Mode,
    /// Longest a run may take; without convergence there is no estimate.
    pub max_time: Duration,
    /// Most fleets a run may take.
    pub max_fleets: u32,
    /// Resolution ω, Mbit/s (default: 2 % of the initial rate).
    pub resolution: Option<f64>,
    /// Packets per stream, fixed; `None` sizes streams by `stream_duration`.
    pub packets: Option<u32>,
    /// How long each stream lasts unless `packets` fixes its length.
    pub stream_duration: Duration,
    /// Send every stream of a fleet even when its verdict is already certain.
    pub full_fleets: bool,
    /// Search by bisection alone, as pathload 1.3.2, instead of aiming fleets where
    /// the delays of an increasing fleet point.
    pub bisect: bool,
}

impl MeasureOptions {
    /// The tool's defaults for a measurement from `sender` over `transport`.
    pub fn new(sender: impl Into<String>, transport: Transport) -> Self {
        Self {
            session: SessionOptions {
                // Its probes load the path it measures.
                exclusive: true,
                ..SessionOptions::new(sender, transport, TOOL)
            },
            mode: Mode::Slow,
            max_time: Duration::from_secs(DEFAULT_MAX_SECONDS),
            max_fleets: DEFAULT_MAX_FLEETS,
            resolution: None,
            packets: None,
            stream_duration: Duration::from_nanos(STREAM_DURATION_NS),
            full_fleets: false,
            bisect: false,
        }
    }
}

/// What a measurement in progress shows its driver.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The sender answered: the round trip and the largest probe its path carries.
    Started {
        /// The smallest of the round trips timed before the run.
        rtt: Duration,
        /// Largest probe, IP bytes.
        max_size: u32,
    },
    /// A stream is about to be asked for.
    Stream {
        /// What it is.
        spec: &'a StreamSpec,
        /// Time since the run started.
        elapsed: Duration,
        /// The search's bounds so far.
        bounds: &'a Bounds,
    },
    /// The estimator's account of what happened.
    Event(&'a Event),
}

/// A measurement that ran, converged or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The estimator's result: the range (if it converged), why it stopped, the
    /// probe and rider bytes.
    pub outcome: Outcome,
    /// How long it took, from the first connection attempt.
    pub elapsed: Duration,
    /// The round trip to the sender.
    pub rtt: Duration,
    /// How the run ended: the sender's trouble, the probes the kernel did not stamp.
    pub end: Ending,
}

impl Measurement {
    /// Whether it gave an estimate.
    pub fn converged(&self) -> bool {
        self.end.clean() && self.outcome.reason.converged()
    }

    /// Why the run stopped before its estimator did, in words, if it did.
    pub fn interruption(&self) -> Option<String> {
        self.end.peer_gone.clone().or_else(|| {
            self.end
                .sender_failed
                .as_ref()
                .map(|f| format!("the sender failed: {f}"))
        })
    }

    /// The tool's exit status for it (0 for an estimate).
    pub fn exit_code(&self) -> i32 {
        let measured = super::exit_for_reason(self.outcome.reason);
        self.end.exit_code(measured)
    }
}

/// Runs one measurement from the sender `opts` names, until it converges, a limit
/// ends it, the sender goes away, or `stop` is set. `progress` sees it go.
pub fn measure(
    opts: &MeasureOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Measurement, MeasureError> {
    let session = Session::open(&opts.session)?;
    Ok(run_measurement(opts, session, stop, progress))
}

/// pathload as a [`Method`]: the estimator's trains and streams as batches, a
/// stream after the idle time that follows the previous one, its events to the
/// progress report.
struct Fleets<'a> {
    est: Estimator,
    progress: &'a mut dyn FnMut(Progress<'_>),
    started: Instant,
    rtt: Duration,
    next_at: Instant,
    /// The idle time after the stream being asked for.
    idle: Duration,
}

impl Method for Fleets<'_> {
    fn next(&mut self) -> Result<Next, BatchError> {
        while let Some(ev) = self.est.poll_event() {
            (self.progress)(Progress::Event(&ev));
        }
        Ok(match self.est.poll_action() {
            Action::Done(_) => Next::Done,
            Action::Train(t) => {
                let tag = Tag {
                    kind: kind::TRAIN,
                    fleet: 0,
                    stream: t.id,
                };
                Next::Ask(Batch::even(tag, t.packets, t.size, 0, 0))
            }
            // Idle after the previous stream; the request itself takes half a round
            // trip to reach the sender.
            Action::Stream(_) if self.next_at > Instant::now() => Next::Wait(self.next_at),
            Action::Stream(s) => {
                self.idle = Duration::from_nanos(s.idle_ns);
                (self.progress)(Progress::Stream {
                    spec: &s,
                    elapsed: self.started.elapsed(),
                    bounds: &self.est.bounds(),
                });
                let tag = Tag {
                    kind: kind::STREAM,
                    fleet: s.fleet,
                    stream: s.stream,
                };
                Next::Ask(Batch::even(
                    tag,
                    s.packets,
                    s.size,
                    s.spacing_ns,
                    s.rider_probes,
                ))
            }
        })
    }

    fn answer(&mut self, batch: &Batch, x: Exchange, _: &mut Session) -> Result<(), BatchError> {
        if batch.tag.kind == kind::TRAIN {
            self.est.handle_train(&TrainResult {
                id: batch.tag.stream,
                sent: x.report.sent,
                arrivals: x.arrivals,
            });
        } else {
            self.next_at = (x.replied + self.idle)
                .checked_sub(self.rtt)
                .unwrap_or(x.replied);
            self.est.handle_stream(&stream_result(x));
        }
        Ok(())
    }

    fn halt(&mut self, why: Halt) {
        self.est.handle_stop(match why {
            Halt::TimeLimit => StopReason::TimeLimit,
            Halt::Interrupted | Halt::Sender => StopReason::Interrupted,
        });
    }
}

fn run_measurement(
    opts: &MeasureOptions,
    session: Session,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Measurement {
    let rtt = session.rtt();
    let max_size = session.max_size();
    let est = Estimator::new(Config {
        mode: opts.mode,
        rtt_ns: u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX),
        omega_mbps: opts.resolution,
        max_size,
        max_fleets: opts.max_fleets,
        early_verdict: !opts.full_fleets,
        aim: !opts.bisect,
        stream_packets: opts.packets,
        stream_duration_ns: u64::try_from(opts.stream_duration.as_nanos()).unwrap_or(u64::MAX),
        ..Config::default()
    });
    progress(Progress::Started { rtt, max_size });
    let bounds = RunBounds {
        stop,
        started: session.started(),
        limit: Some(opts.max_time),
    };
    let mut method = Fleets {
        est,
        progress,
        started: bounds.started,
        rtt,
        next_at: Instant::now(),
        idle: Duration::ZERO,
    };
    let run = drive(session, &mut method, bounds);
    while let Some(ev) = method.est.poll_event() {
        (method.progress)(Progress::Event(&ev));
    }
    // The driver ends when the estimator is done or after it has taken a stop.
    let Action::Done(outcome) = method.est.poll_action() else {
        unreachable!("the estimator runs on after a stop")
    };
    Measurement {
        outcome,
        elapsed: run.elapsed,
        rtt,
        end: run.end,
    }
}

/// A stream's exchange as the estimator takes it.
fn stream_result(x: Exchange) -> StreamResult {
    let r = x.report;
    StreamResult {
        fleet: r.tag.fleet,
        stream: r.tag.stream,
        sent: r.sent,
        sender_stamps: r.stamps(),
        arrivals: x.arrivals,
        competing_rider_bytes: r.competing_rider_bytes,
        rider_bytes: r.rider_bytes,
        riding_probe_bytes: r.riding_probe_bytes,
        kernel_stamps: r.kernel_stamps,
    }
}
