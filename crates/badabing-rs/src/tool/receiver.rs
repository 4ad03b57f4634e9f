//! The receiver role: ask the sender for one window of experiments at a time and hand
//! each one's stamps to the estimator. [`measure`] is a measurement as a library call;
//! `rcv` prints one.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mgrp_tool::control::{Batch, Run, Tag, Transport};
use mgrp_tool::session::{Bounds, Method, Next, drive};
use mgrp_tool::{
    BatchError, Exchange, MeasureError, Session, SessionOptions,
    exit::{self, Ending},
};

use crate::tool::{TOOL, WINDOW_KIND};
use crate::{Config, Estimate, Estimator, Window, WindowResult};

/// What one measurement needs.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureOptions {
    /// Where the sender is and how probes travel.
    pub session: SessionOptions,
    /// The estimator's parameters.
    pub config: Config,
    /// The slowest link rate on the path, bit/s (a slot must outlast a probe there).
    pub line_bps: f64,
    /// How long to probe.
    pub duration: Duration,
    /// Report the estimates this often while running.
    pub report_every: Option<Duration>,
}

impl MeasureOptions {
    /// The tool's defaults for probing from `sender` over `transport` for `duration`.
    pub fn new(sender: impl Into<String>, transport: Transport, duration: Duration) -> Self {
        Self {
            session: SessionOptions::new(sender, transport, TOOL),
            config: Config::default(),
            line_bps: 1e9,
            duration,
            report_every: None,
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
    },
    /// The estimates so far, every `report_every`.
    Report {
        /// Time since the run started.
        at: Duration,
        /// The estimates.
        estimate: &'a Estimate,
    },
}

/// A measurement that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The estimates over the whole run.
    pub estimate: Estimate,
    /// Windows sent.
    pub windows: u32,
    /// Time the windows' slots covered, out of `elapsed` (the rest went to the
    /// control exchange between windows).
    pub sampled: Duration,
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
        let measured = if self.estimate.outcomes.total() == 0 {
            exit::UNUSABLE
        } else {
            0
        };
        self.end.exit_code(measured)
    }
}

/// The batch that sends window `w`: each probed slot's first packet a slot's length
/// (or more) after the previous probe's first, the rest back to back; riders allowed.
fn batch(w: &Window) -> Batch {
    let tag = Tag {
        kind: WINDOW_KIND,
        fleet: 0,
        stream: w.id,
    };
    let mut runs = Vec::with_capacity(w.slots.len() * 2);
    for (gap_ns, rest) in w
        .gaps_ns()
        .chunks(w.packets as usize)
        .map(|c| (c[0], c.len() - 1))
    {
        runs.push(Run {
            count: 1,
            size: w.size,
            gap_ns,
            ride: true,
        });
        if rest > 0 {
            runs.push(Run {
                count: u32::try_from(rest).unwrap_or(u32::MAX),
                size: w.size,
                gap_ns: 0,
                ride: true,
            });
        }
    }
    Batch {
        tag,
        runs,
        lead_ns: 0,
    }
}

/// badabing as a [`Method`]: a window of experiments a batch, each one's stamps to
/// the estimator, the estimates reported every `report_every`.
struct Windows<'a> {
    est: Estimator,
    opts: &'a MeasureOptions,
    progress: &'a mut dyn FnMut(Progress<'_>),
    started: Instant,
    next_report: Option<Instant>,
    windows: u32,
    sampled: Duration,
    /// The window being asked for.
    window: Option<Window>,
}

impl Windows<'_> {
    /// The time a window's slots cover.
    fn window_time(&self) -> Duration {
        let c = &self.opts.config;
        Duration::from_nanos(u64::from(c.window_slots) * c.slot_ns)
    }
}

impl Method for Windows<'_> {
    fn next(&mut self) -> Result<Next, BatchError> {
        let w = self.est.next_window();
        if w.slots.is_empty() {
            // No experiment started in this window (small p): its time passes unprobed.
            self.sampled += self.window_time();
            return Ok(Next::Wait(Instant::now() + self.window_time()));
        }
        let b = batch(&w);
        self.window = Some(w);
        Ok(Next::Ask(b))
    }

    fn answer(&mut self, _: &Batch, x: Exchange, _: &mut Session) -> Result<(), BatchError> {
        let Some(w) = self.window.take() else {
            return Ok(());
        };
        self.windows += 1;
        self.sampled += self.window_time();
        self.est.handle(&WindowResult {
            id: w.id,
            sender_stamps: x.report.sender_stamps,
            arrivals: x.arrivals,
            rider_bytes: x.report.rider_bytes,
        });
        if let Some(at) = self.next_report.filter(|&t| Instant::now() >= t) {
            let e = self.est.estimate();
            (self.progress)(Progress::Report {
                at: self.started.elapsed(),
                estimate: &e,
            });
            self.next_report = self.opts.report_every.map(|r| at + r);
        }
        Ok(())
    }
}

/// Probes from the sender `opts` names for `opts.duration`, or until `stop` is set.
pub fn measure(
    opts: &MeasureOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Measurement, MeasureError> {
    let est =
        Estimator::new(opts.config, opts.line_bps).map_err(|e| MeasureError::Failed(e.into()))?;
    let session = Session::open(&opts.session)?;
    if opts.config.size > session.max_size() {
        return Err(MeasureError::Failed(anyhow::anyhow!(
            "probes of {} bytes are over the {} bytes the sender's path carries",
            opts.config.size,
            session.max_size()
        )));
    }
    let rtt = session.rtt();
    progress(Progress::Started { rtt });
    let bounds = Bounds::new(stop, Some(opts.duration));
    let mut method = Windows {
        est,
        opts,
        progress,
        started: bounds.started,
        next_report: opts.report_every.map(|r| bounds.started + r),
        windows: 0,
        sampled: Duration::ZERO,
        window: None,
    };
    let run = drive(session, &mut method, bounds);
    Ok(Measurement {
        estimate: method.est.estimate(),
        windows: method.windows,
        sampled: method.sampled,
        elapsed: run.elapsed,
        rtt,
        end: run.end,
    })
}
