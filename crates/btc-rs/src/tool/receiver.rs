//! The receiver role: capacity bunches, then squeezed pairs, each as probe batches
//! from the sender; [`measure`] is a measurement as a library call, `rcv` prints one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mgrp_tool::control::{Batch, Run, Tag};
use mgrp_tool::{
    BatchError, MeasureError, Session, SessionOptions,
    exit::{self, Ending},
};

use crate::capacity::{self, Arrived, Capacity, CapacityConfig};
use crate::squeezed::{self, Kind, Squeeze, SqueezeConfig};
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

fn exchange(
    session: &mut Session,
    batch: &Batch,
    m: &mut Measurement,
) -> Result<mgrp_tool::Exchange, BatchError> {
    let x = session.exchange(batch)?;
    m.probe_bytes += batch.bytes();
    m.rider_bytes += x.report.rider_bytes;
    Ok(x)
}

/// Measures the path from the sender `opts` names, until done or `stop` is set.
pub fn measure(opts: &MeasureOptions, stop: &AtomicBool) -> Result<Measurement, MeasureError> {
    let mut session = Session::open(&opts.session)?;
    let started = Instant::now();
    let mut m = Measurement {
        capacity: None,
        capacity_bps: opts.capacity_bps,
        squeeze: None,
        squeeze_skipped: None,
        probe_bytes: 0,
        rider_bytes: 0,
        rtt: session.rtt(),
        elapsed: Duration::ZERO,
        end: Ending::default(),
    };
    let result = run_phases(opts, stop, &mut session, &mut m);
    match result {
        Ok(()) => {}
        Err(BatchError::Gone(g)) => m.end.peer_gone = Some(g),
        Err(BatchError::SenderFailed(f)) => m.end.sender_failed = Some(f),
    }
    m.elapsed = started.elapsed();
    session.close();
    Ok(m)
}

fn run_phases(
    opts: &MeasureOptions,
    stop: &AtomicBool,
    session: &mut Session,
    m: &mut Measurement,
) -> Result<(), BatchError> {
    let c = opts.capacity;
    if m.capacity_bps.is_none() {
        if c.size > session.max_size() {
            return Err(BatchError::SenderFailed(format!(
                "bunch packets of {} bytes are over the {} bytes the sender's path carries; use --bunch-size {}",
                c.size,
                session.max_size(),
                session.max_size()
            )));
        }
        let mut bunches = Vec::new();
        for i in 0..c.bunches {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let batch = Batch {
                tag: Tag {
                    kind: BUNCH_KIND,
                    fleet: 0,
                    stream: i,
                },
                runs: vec![Run {
                    count: c.packets,
                    size: c.size,
                    gap_ns: 0,
                    ride: true,
                }],
                lead_ns: 0,
            };
            let x = exchange(session, &batch, m)?;
            bunches.push(
                x.arrivals
                    .iter()
                    .map(|a| Arrived {
                        seq: a.seq,
                        at_ns: a.received_ns,
                    })
                    .collect::<Vec<_>>(),
            );
            // The seed waited a round trip between bunches; the exchange took one.
        }
        let cap = capacity::analyse(&bunches, c.packets, c.size);
        m.capacity_bps = cap.bps;
        m.capacity = Some(cap);
    }
    let Some(bps) = m.capacity_bps else {
        m.squeeze_skipped =
            Some("no capacity: no two consecutive bunch packets arrived apart".into());
        return Ok(());
    };
    if opts.pairs == 0 {
        return Ok(());
    }
    let cfg = SqueezeConfig {
        capacity_bps: bps,
        pairs: opts.pairs,
        size: opts.pair_size,
        resolution_ns: opts.resolution_ns,
        seed: opts.seed,
        ..SqueezeConfig::new(bps)
    };
    if let Err(e) = cfg.check(mgrp_tool::control::MIN_PROBE_IP_BYTES, session.max_size()) {
        m.squeeze_skipped = Some(e.0);
        return Ok(());
    }
    let plan = cfg.plan();
    let mut kinds: Vec<Kind> = Vec::with_capacity(plan.len());
    let mut gaps: Vec<Option<i64>> = Vec::with_capacity(plan.len());
    for (n, chunk) in plan.chunks(PAIRS_PER_BATCH).enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut runs = Vec::with_capacity(chunk.len() * 2);
        for p in chunk {
            runs.push(Run {
                count: 1,
                size: cfg.size,
                gap_ns: p.before_ns,
                ride: false,
            });
            runs.push(Run {
                count: 1,
                size: cfg.size,
                gap_ns: p.gap_ns,
                ride: false,
            });
        }
        let batch = Batch {
            tag: Tag {
                kind: PAIRS_KIND,
                fleet: 0,
                stream: u32::try_from(n).unwrap_or(u32::MAX),
            },
            runs,
            lead_ns: 0,
        };
        let x = exchange(session, &batch, m)?;
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
    }
    m.squeeze = Some(squeezed::analyse(&cfg, &kinds, &gaps));
    Ok(())
}
