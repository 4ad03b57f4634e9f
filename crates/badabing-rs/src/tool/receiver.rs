//! The receiver role: ask the sender for one window of experiments at a time and hand
//! each one's stamps to the estimator. [`measure`] is a measurement as a library call;
//! `rcv` prints one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mgrp_tool::control::{Batch, Run, Tag, Transport};
use mgrp_tool::{
    BatchError, MeasureError, Session, SessionOptions,
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

/// Probes from the sender `opts` names for `opts.duration`, or until `stop` is set.
pub fn measure(
    opts: &MeasureOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Measurement, MeasureError> {
    let mut est =
        Estimator::new(opts.config, opts.line_bps).map_err(|e| MeasureError::Failed(e.into()))?;
    let mut session = Session::open(&opts.session)?;
    if opts.config.size > session.max_size() {
        return Err(MeasureError::Failed(anyhow::anyhow!(
            "probes of {} bytes are over the {} bytes the sender's path carries",
            opts.config.size,
            session.max_size()
        )));
    }
    let rtt = session.rtt();
    progress(Progress::Started { rtt });
    let started = Instant::now();
    let mut next_report = opts.report_every.map(|r| started + r);
    let (mut gone, mut sender_failed) = (None, None);
    let (mut windows, mut sampled) = (0u32, Duration::ZERO);
    while !stop.load(Ordering::Relaxed) && started.elapsed() < opts.duration {
        let w = est.next_window();
        if w.slots.is_empty() {
            // No experiment started in this window (small p): its time passes unprobed.
            std::thread::sleep(Duration::from_nanos(
                u64::from(opts.config.window_slots) * opts.config.slot_ns,
            ));
            sampled +=
                Duration::from_nanos(u64::from(opts.config.window_slots) * opts.config.slot_ns);
            continue;
        }
        let x = match session.exchange(&batch(&w)) {
            Ok(x) => x,
            Err(BatchError::SenderFailed(f)) => {
                sender_failed = Some(f);
                break;
            }
            Err(BatchError::Gone(g)) => {
                gone = Some(g);
                break;
            }
        };
        windows += 1;
        sampled += Duration::from_nanos(u64::from(opts.config.window_slots) * opts.config.slot_ns);
        est.handle(&WindowResult {
            id: w.id,
            sender_stamps: x.report.sender_stamps,
            arrivals: x.arrivals,
            rider_bytes: x.report.rider_bytes,
        });
        if let Some(at) = next_report.filter(|&t| Instant::now() >= t) {
            let e = est.estimate();
            progress(Progress::Report {
                at: started.elapsed(),
                estimate: &e,
            });
            next_report = opts.report_every.map(|r| at + r);
        }
    }
    let elapsed = started.elapsed();
    let unstamped = session.close();
    Ok(Measurement {
        estimate: est.estimate(),
        windows,
        sampled,
        elapsed,
        rtt,
        end: Ending {
            peer_gone: gone,
            sender_failed,
            unstamped,
        },
    })
}
