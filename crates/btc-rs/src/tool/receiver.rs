//! The receiver role: capacity bunches, then squeezed pairs, each as probe batches
//! from the sender; [`measure`] is a measurement as a library call, `rcv` prints one.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use mgrp_tool::control::{Batch, Run, Tag};
use mgrp_tool::session::{Bounds, Halt, Method, Next, drive};
use mgrp_tool::{
    BatchError, Exchange, MeasureError, Session, SessionOptions,
    exit::{self, Ending},
};

use crate::capacity::{self, Arrived, Capacity, CapacityConfig};
use crate::squeezed::{self, Kind, PlannedPair, Squeeze, SqueezeConfig};
use crate::tool::{BUNCH_KIND, PAIRS_KIND, TOOL};

/// Pairs per batch (a batch of 250 pairs lasts about 1.5 s at 10 Mbit/s).
const PAIRS_PER_BATCH: usize = 250;

/// What one measurement needs.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureOptions {
    /// Where the sender is and how probes travel.
    pub session: SessionOptions,
    /// The capacity bunches.
    pub capacity: CapacityConfig,
    /// A known capacity, bit/s: no bunches are sent.
    pub capacity_bps: Option<f64>,
    /// Squeezed pairs to send (0: none).
    pub pairs: u32,
    /// IP bytes per squeezed-pair probe.
    pub pair_size: u32,
    /// The sender's pacing resolution, ns.
    pub resolution_ns: u64,
    /// Seed of the pairs' spacing.
    pub seed: u64,
}

impl MeasureOptions {
    /// The tool's defaults for measuring from `sender` over `transport`.
    pub fn new(sender: impl Into<String>, transport: mgrp_tool::Transport) -> Self {
        Self {
            session: SessionOptions {
                // Its probes load the path it measures.
                exclusive: true,
                ..SessionOptions::new(sender, transport, TOOL)
            },
            capacity: CapacityConfig::default(),
            capacity_bps: None,
            pairs: 1000,
            pair_size: 72,
            resolution_ns: 2_000,
            seed: 1,
        }
    }
}

/// A measurement that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// What the bunches said (`None` when the capacity was given).
    pub capacity: Option<Capacity>,
    /// The capacity the pairs were spaced for, bit/s.
    pub capacity_bps: Option<f64>,
    /// What the pairs said (`None` without a capacity or with no pairs asked for).
    pub squeeze: Option<Squeeze>,
    /// Why the pairs were not sent, if they were asked for and were not.
    pub squeeze_skipped: Option<String>,
    /// Probe IP bytes sent.
    pub probe_bytes: u64,
    /// Application bytes that rode in them.
    pub rider_bytes: u64,
    /// The round trip to the sender.
    pub rtt: Duration,
    /// How long it ran.
    pub elapsed: Duration,
    /// How the run ended: the sender's trouble, the probes the kernel did not stamp.
    pub end: Ending,
}

impl Measurement {
    /// The exit status of `rcv` for it.
    pub fn exit_code(&self) -> i32 {
        let measured = if self.capacity_bps.is_none() {
            exit::UNUSABLE
        } else {
            0
        };
        self.end.exit_code(measured)
    }
}

/// Where a run stands.
enum Phase {
    /// The bunches asked for cannot cross the sender's path.
    Refused(String),
    /// Capacity bunches, those answered so far.
    Bunches(Vec<Vec<Arrived>>),
    /// Squeezed pairs: the plan, and each pair's kind and gap so far.
    Pairs {
        cfg: SqueezeConfig,
        plan: Vec<PlannedPair>,
        kinds: Vec<Kind>,
        gaps: Vec<Option<i64>>,
    },
    Done,
}

/// The pairs of the next batch, after the `done` pairs already answered.
fn next_chunk(plan: &[PlannedPair], done: usize) -> &[PlannedPair] {
    &plan[done..(done + PAIRS_PER_BATCH).min(plan.len())]
}

/// btc as a [`Method`]: the capacity bunches, then squeezed pairs at that capacity,
/// a batch of [`PAIRS_PER_BATCH`] pairs at a time.
struct Phases<'a> {
    opts: &'a MeasureOptions,
    max_size: u32,
    phase: Phase,
    m: Measurement,
}

impl Phases<'_> {
    /// Goes on to the pairs once the capacity is known (given, or from the bunches);
    /// the measurement is done when there is none or no pairs are to be sent.
    fn begin_pairs(&mut self) {
        self.phase = Phase::Done;
        let Some(bps) = self.m.capacity_bps else {
            self.m.squeeze_skipped =
                Some("no capacity: no two consecutive bunch packets arrived apart".into());
            return;
        };
        if self.opts.pairs == 0 {
            return;
        }
        let cfg = SqueezeConfig {
            capacity_bps: bps,
            pairs: self.opts.pairs,
            size: self.opts.pair_size,
            resolution_ns: self.opts.resolution_ns,
            seed: self.opts.seed,
            ..SqueezeConfig::new(bps)
        };
        if let Err(e) = cfg.check(mgrp_tool::control::MIN_PROBE_IP_BYTES, self.max_size) {
            self.m.squeeze_skipped = Some(e.0);
            return;
        }
        let plan = cfg.plan();
        self.phase = Phase::Pairs {
            kinds: Vec::with_capacity(plan.len()),
            gaps: Vec::with_capacity(plan.len()),
            cfg,
            plan,
        };
    }

    /// The pairs' verdict on what came back of them.
    fn squeezed(&mut self) {
        if let Phase::Pairs {
            cfg, kinds, gaps, ..
        } = std::mem::replace(&mut self.phase, Phase::Done)
        {
            self.m.squeeze = Some(squeezed::analyse(&cfg, &kinds, &gaps));
        }
    }
}

impl Method for Phases<'_> {
    fn next(&mut self) -> Result<Next, BatchError> {
        Ok(match &self.phase {
            Phase::Refused(why) => return Err(BatchError::SenderFailed(why.clone())),
            Phase::Bunches(got) => {
                let c = self.opts.capacity;
                Next::Ask(Batch {
                    tag: Tag {
                        kind: BUNCH_KIND,
                        fleet: 0,
                        stream: u32::try_from(got.len()).unwrap_or(u32::MAX),
                    },
                    runs: vec![Run {
                        count: c.packets,
                        size: c.size,
                        gap_ns: 0,
                        ride: true,
                    }],
                    lead_ns: 0,
                })
            }
            Phase::Pairs {
                cfg, plan, kinds, ..
            } => {
                let n = kinds.len() / PAIRS_PER_BATCH;
                let chunk = next_chunk(plan, kinds.len());
                let mut runs = Vec::with_capacity(chunk.len() * 2);
                for p in chunk {
                    for gap_ns in [p.before_ns, p.gap_ns] {
                        runs.push(Run {
                            count: 1,
                            size: cfg.size,
                            gap_ns,
                            ride: false,
                        });
                    }
                }
                Next::Ask(Batch {
                    tag: Tag {
                        kind: PAIRS_KIND,
                        fleet: 0,
                        stream: u32::try_from(n).unwrap_or(u32::MAX),
                    },
                    runs,
                    lead_ns: 0,
                })
            }
            Phase::Done => Next::Done,
        })
    }

    fn answer(&mut self, batch: &Batch, x: Exchange, _: &mut Session) -> Result<(), BatchError> {
        self.m.probe_bytes += batch.bytes();
        self.m.rider_bytes += x.report.rider_bytes;
        let c = self.opts.capacity;
        match &mut self.phase {
            Phase::Bunches(got) => {
                got.push(
                    x.arrivals
                        .iter()
                        .map(|a| Arrived {
                            seq: a.seq,
                            at_ns: a.received_ns,
                        })
                        .collect(),
                );
                // The seed waited a round trip between bunches; the exchange took one.
                if got.len() >= c.bunches as usize {
                    let cap = capacity::analyse(got, c.packets, c.size);
                    self.m.capacity_bps = cap.bps;
                    self.m.capacity = Some(cap);
                    self.begin_pairs();
                }
            }
            Phase::Pairs {
                plan, kinds, gaps, ..
            } => {
                let chunk = next_chunk(plan, kinds.len());
                let mut at: Vec<Option<i64>> = vec![None; chunk.len() * 2];
                for a in &x.arrivals {
                    if let Some(slot) = at.get_mut(a.seq as usize) {
                        slot.get_or_insert(a.received_ns);
                    }
                }
                for (i, p) in chunk.iter().enumerate() {
                    kinds.push(p.kind);
                    gaps.push(match (at[2 * i], at[2 * i + 1]) {
                        (Some(a), Some(b)) => Some(b - a),
                        _ => None,
                    });
                }
                if kinds.len() >= plan.len() {
                    self.squeezed();
                }
            }
            Phase::Refused(_) | Phase::Done => {}
        }
        Ok(())
    }

    fn halt(&mut self, why: Halt) {
        // Stopped: the pairs so far are judged; the sender's trouble leaves them be.
        if why == Halt::Interrupted {
            self.squeezed();
        }
    }
}

/// Measures the path from the sender `opts` names, until done or `stop` is set.
pub fn measure(opts: &MeasureOptions, stop: &AtomicBool) -> Result<Measurement, MeasureError> {
    let session = Session::open(&opts.session)?;
    let bounds = Bounds::new(stop, None);
    let c = opts.capacity;
    let max_size = session.max_size();
    let mut method = Phases {
        opts,
        max_size,
        phase: if opts.capacity_bps.is_some() {
            Phase::Done
        } else if c.size > max_size {
            Phase::Refused(format!(
                "bunch packets of {} bytes are over the {} bytes the sender's path carries; use --bunch-size {}",
                c.size, max_size, max_size
            ))
        } else {
            Phase::Bunches(Vec::new())
        },
        m: Measurement {
            capacity: None,
            capacity_bps: opts.capacity_bps,
            squeeze: None,
            squeeze_skipped: None,
            probe_bytes: 0,
            rider_bytes: 0,
            rtt: session.rtt(),
            elapsed: Duration::ZERO,
            end: Ending::default(),
        },
    };
    if opts.capacity_bps.is_some() {
        method.begin_pairs();
    }
    let run = drive(session, &mut method, bounds);
    Ok(Measurement {
        elapsed: run.elapsed,
        end: run.end,
        ..method.m
    })
}
