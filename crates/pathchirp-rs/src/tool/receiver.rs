//! The receiver role: ask the sender for one chirp at a time, at the estimator's
//! pace, and hand each one's stamps to the estimator. [`measure`] is a measurement as
//! a library call; `rcv` prints one.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mgrp_tool::control::{Batch, Run, Tag, Transport};
use mgrp_tool::session::{Bounds, Method, Next, drive};
use mgrp_tool::{
    BatchError, Exchange, MeasureError, Session, SessionOptions,
    exit::{self, Ending},
};
use serde::Serialize;

use crate::tool::{CHIRP_KIND, TOOL};
use crate::{ChirpResult, ChirpSpec, Config, Counts, Estimator, Report, Smoothed, params};

/// What one measurement needs.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureOptions {
    /// Where the sender is and how probes travel.
    pub session: SessionOptions,
    /// The estimator's parameters.
    pub config: Config,
    /// How long to chirp.
    pub duration: Duration,
}

impl MeasureOptions {
    /// The tool's defaults for chirping from `sender` over `transport` for `duration`.
    pub fn new(sender: impl Into<String>, transport: Transport, duration: Duration) -> Self {
        Self {
            session: SessionOptions::new(sender, transport, TOOL),
            config: Config::default(),
            duration,
        }
    }
}

/// What a measurement in progress shows its driver.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The sender answered.
    Started {
        /// The smallest of the round trips timed before the run.
        rtt: Duration,
        /// Largest probe, IP bytes.
        max_size: u32,
    },
    /// A chirp came back and was judged.
    Chirp {
        /// Time since the run started.
        at: Duration,
        /// What was sent.
        spec: &'a ChirpSpec,
        /// What it did to the estimate.
        report: &'a Report,
    },
}

/// One chirp on the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since the run started.
    pub t: f64,
    /// The chirp's estimate, bit/s (`None` if it was discarded).
    pub chirp_bps: Option<f64>,
    /// The published estimate after it, bit/s.
    pub smoothed_bps: Option<f64>,
    /// The same, less the application traffic that rode, bit/s.
    pub adjusted_bps: Option<f64>,
}

/// A measurement that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The last published estimate.
    pub last: Option<Smoothed>,
    /// Every chirp on the time series.
    pub series: Vec<Point>,
    /// Chirps and bytes.
    pub counts: Counts,
    /// The probing range at the end, (low, high) bit/s.
    pub range: (f64, f64),
    /// Seconds from the start to the first published estimate.
    pub first_estimate: Option<f64>,
    /// How long it ran.
    pub elapsed: Duration,
    /// The round trip to the sender.
    pub rtt: Duration,
    /// How the run ended: the sender's trouble, the probes the kernel did not stamp.
    pub end: Ending,
}

impl Measurement {
    /// The exit status of `rcv` for it.
    pub fn exit_code(&self) -> i32 {
        let measured = if self.last.is_none() {
            exit::UNUSABLE
        } else {
            0
        };
        self.end.exit_code(measured)
    }
}

/// The batch that sends `spec`: one run per probe (each gap differs), riders allowed
/// in every probe, after [`params::LEAD_NS`] of quiet.
fn batch(spec: &ChirpSpec) -> Batch {
    let tag = Tag {
        kind: CHIRP_KIND,
        fleet: spec.generation,
        stream: spec.id,
    };
    let runs = std::iter::once(0)
        .chain(spec.gaps_ns.iter().copied())
        .map(|gap_ns| Run {
            count: 1,
            size: spec.size,
            gap_ns,
            ride: true,
        })
        .collect();
    Batch {
        tag,
        runs,
        lead_ns: params::LEAD_NS,
    }
}

/// pathChirp as a [`Method`]: a chirp a batch at the estimator's pace, each one's
/// stamps (and over MGRP the sender's routed traffic) to the estimator, every chirp
/// on the time series.
struct Chirps<'a> {
    est: Estimator,
    opts: &'a MeasureOptions,
    progress: &'a mut dyn FnMut(Progress<'_>),
    started: Instant,
    next_at: Instant,
    series: Vec<Point>,
    first_estimate: Option<f64>,
    /// The chirp being asked for.
    chirp: Option<ChirpSpec>,
}

impl Method for Chirps<'_> {
    fn next(&mut self) -> Result<Next, BatchError> {
        let now = Instant::now();
        if self.next_at > now {
            return Ok(Next::Wait(self.next_at));
        }
        let spec = self.est.next_chirp();
        self.next_at = now + Duration::from_nanos(spec.period_ns);
        let b = batch(&spec);
        self.chirp = Some(spec);
        Ok(Next::Ask(b))
    }

    fn answer(&mut self, _: &Batch, x: Exchange, session: &mut Session) -> Result<(), BatchError> {
        let Some(spec) = self.chirp.take() else {
            return Ok(());
        };
        // Over MGRP with riders, what the sender routes to this host: the flow that
        // rode in the chirp's tail.
        let s = &self.opts.session;
        let routed_bps = if s.transport == Transport::Mgrp && s.piggyback {
            match session.traffic() {
                Ok(t) => Some(t.bytes_per_second as f64 * 8.0),
                Err(BatchError::Gone(g)) => return Err(BatchError::Gone(g)),
                // No mgrpd figures at the sender: the chirp's own count stands.
                Err(BatchError::SenderFailed(_)) => None,
            }
        } else {
            None
        };
        let result = ChirpResult {
            routed_bps,
            id: spec.id,
            generation: spec.generation,
            sent: x.report.sent,
            sender_stamps: x.report.sender_stamps,
            arrivals: x.arrivals,
            competing_rider_bytes: x.report.competing_rider_bytes,
            rider_bytes: x.report.rider_bytes,
            riding_probe_bytes: x.report.riding_probe_bytes,
        };
        let report = self.est.handle(&result);
        let at = self.started.elapsed();
        if report.smoothed.is_some() && self.first_estimate.is_none() {
            self.first_estimate = Some(at.as_secs_f64());
        }
        self.series.push(Point {
            t: at.as_secs_f64(),
            chirp_bps: report.outcome.as_ref().ok().map(|e| e.bps),
            smoothed_bps: report.smoothed.map(|s| s.bps),
            adjusted_bps: report.smoothed.map(|s| s.adjusted_bps),
        });
        (self.progress)(Progress::Chirp {
            at,
            spec: &spec,
            report: &report,
        });
        Ok(())
    }
}

/// Chirps from the sender `opts` names for `opts.duration`, or until `stop` is set.
pub fn measure(
    opts: &MeasureOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Measurement, MeasureError> {
    let mut config = opts.config;
    let mut est = Estimator::new(config).map_err(|e| MeasureError::Failed(e.into()))?;
    let session = Session::open(&opts.session)?;
    if config.size > session.max_size() {
        config.size = session.max_size();
        est = Estimator::new(config).map_err(|e| MeasureError::Failed(e.into()))?;
    }
    let rtt = session.rtt();
    progress(Progress::Started {
        rtt,
        max_size: session.max_size(),
    });
    let bounds = Bounds::new(stop, Some(opts.duration));
    let mut method = Chirps {
        est,
        opts,
        progress,
        started: bounds.started,
        next_at: Instant::now(),
        series: Vec::new(),
        first_estimate: None,
        chirp: None,
    };
    let run = drive(session, &mut method, bounds);
    Ok(Measurement {
        last: method.est.smoothed(),
        series: method.series,
        counts: method.est.counts(),
        range: method.est.range(),
        first_estimate: method.first_estimate,
        elapsed: run.elapsed,
        rtt,
        end: run.end,
    })
}
