//! The estimator as a state machine with no I/O and no clock: it plans each chirp
//! (the gaps of its probes and when the next may start), judges what came back
//! (discarding chirps with loss, reordering, stale parameters or coalescence, each
//! counted with its reason), keeps the smoothed estimate over the last n chirps, and
//! moves the probing range when the estimate sits at one of its ends.

use std::collections::VecDeque;

use mgrp_tool::Arrival;
use serde::Serialize;

use crate::analysis::{self, ChirpAnalysis, Params, Unusable};
use crate::params;

/// How the estimator probes and judges. [`Config::default`] gives pathChirp 2.3's
/// defaults (with this project's average rate and onset reading, see
/// [`crate::params`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Config {
    /// Probe size, IP bytes.
    pub size: u32,
    /// Spread factor γ (> 1).
    pub spread: f64,
    /// Lowest rate inside a chirp, bit/s.
    pub low_bps: f64,
    /// Highest rate inside a chirp, bit/s.
    pub high_bps: f64,
    /// Average probing rate, IP bit/s: sets the time between chirps.
    pub avg_bps: f64,
    /// Per-chirp estimates the published one averages.
    pub smooth: usize,
    /// The per-chirp analysis.
    pub analysis: Params,
    /// Move the range when the estimate sits at one of its ends.
    pub adapt: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            size: params::SIZE,
            spread: params::SPREAD,
            low_bps: params::LOW_BPS,
            high_bps: params::HIGH_BPS,
            avg_bps: params::AVG_BPS,
            smooth: params::SMOOTH,
            analysis: Params::default(),
            adapt: true,
        }
    }
}

pub use mgrp_tool::params::ConfigError;

impl Config {
    /// Checks every parameter against the method's limits.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError(m));
        if !(self.spread.is_finite() && self.spread >= params::MIN_SPREAD) {
            return bad(format!(
                "spread factor γ = {} must be at least {} (each gap is the previous one divided by γ, so γ ≤ 1 never speeds up)",
                self.spread,
                params::MIN_SPREAD
            ));
        }
        if !(self.low_bps.is_finite() && self.low_bps > 0.0) {
            return bad(format!("low rate {} bit/s must be above 0", self.low_bps));
        }
        if !(self.high_bps.is_finite() && self.high_bps > self.low_bps * self.spread) {
            return bad(format!(
                "high rate {} bit/s must be above the low rate times γ ({} bit/s), or a chirp has no gap",
                self.high_bps,
                self.low_bps * self.spread
            ));
        }
        if self.high_bps > params::MAX_HIGH_BPS {
            return bad(format!(
                "high rate {} bit/s is above the most a chirp may reach ({} bit/s)",
                self.high_bps,
                params::MAX_HIGH_BPS
            ));
        }
        let (lo, hi) = params::AVG_BPS_BOUNDS;
        if !(self.avg_bps >= lo && self.avg_bps <= hi) {
            return bad(format!(
                "average probing rate {} bit/s must be within {lo}..={hi} bit/s",
                self.avg_bps
            ));
        }
        mgrp_tool::params::probe_size(self.size)?;
        if self.smooth == 0 {
            return bad("the estimate must average at least 1 chirp".into());
        }
        if !(self.analysis.decrease.is_finite() && self.analysis.decrease > 1.0) {
            return bad(format!(
                "decrease factor F = {} must be above 1",
                self.analysis.decrease
            ));
        }
        if self.analysis.busy_period <= 2 {
            return bad(format!(
                "busy-period threshold L = {} must be above 2",
                self.analysis.busy_period
            ));
        }
        Ok(())
    }
}

/// The chirps of one probing range.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    gaps_ns: Vec<u64>,
    period_ns: u64,
    high_bps: f64,
}

/// Gaps from the low rate up by γ until the high rate is reached (at most
/// [`params::MAX_GAPS`], the high rate lowered to fit), and the start-to-start time
/// that keeps the average rate (twice the chirp's duration if that is longer).
fn plan(size: u32, spread: f64, low_bps: f64, high_bps: f64, avg_bps: f64) -> Plan {
    let bits = f64::from(size) * 8.0;
    let mut gap = bits / low_bps;
    let top_gap = bits / high_bps;
    let mut gaps = Vec::new();
    let mut high = high_bps;
    while gap > top_gap * (1.0 + 1e-9) {
        gaps.push((gap * 1e9).round() as u64);
        if gaps.len() >= params::MAX_GAPS {
            high = bits / gap;
            break;
        }
        gap /= spread;
    }
    let duration: u64 = gaps.iter().sum();
    let packets = gaps.len() as f64 + 1.0;
    let mut period = (packets * bits / avg_bps * 1e9) as u64;
    if period <= duration {
        period = 2 * duration;
    }
    Plan {
        gaps_ns: gaps,
        period_ns: period,
        high_bps: high,
    }
}

/// One chirp to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChirpSpec {
    /// Chirp number, from 0.
    pub id: u32,
    /// The range's generation: results of an older one are stale.
    pub generation: u32,
    /// IP bytes per probe.
    pub size: u32,
    /// Gap before each probe after the first, ns.
    pub gaps_ns: Vec<u64>,
    /// Time from this chirp's start to the next one's, ns.
    pub period_ns: u64,
}

impl ChirpSpec {
    /// Probes in it.
    pub fn packets(&self) -> u32 {
        u32::try_from(self.gaps_ns.len() + 1).unwrap_or(u32::MAX)
    }

    /// From the first probe to the last, ns.
    pub fn duration_ns(&self) -> u64 {
        self.gaps_ns.iter().sum()
    }
}

/// What came back of a chirp.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChirpResult {
    /// Its number.
    pub id: u32,
    /// The generation it was planned in.
    pub generation: u32,
    /// Probes the sender sent.
    pub sent: u32,
    /// Each probe's departure stamp, in order, ns (`None` for one that did not leave).
    pub sender_stamps: Vec<Option<i64>>,
    /// The probes that arrived, in the order they came.
    pub arrivals: Vec<Arrival>,
    /// Application bytes kept off the path while the chirp was on it (MGRP §2.4).
    pub competing_rider_bytes: u64,
    /// Application bytes that rode in it.
    pub rider_bytes: u64,
    /// IP bytes of its probes that carried riders.
    pub riding_probe_bytes: u64,
    /// The application traffic the sender's mgrpd routed to this receiver around the
    /// chirp, bit/s (MGRP with riders; `None` otherwise).
    pub routed_bps: Option<f64>,
}

/// Why a chirp gave no estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Discard {
    /// A probe was lost (or never left).
    Loss,
    /// Probes came out of order, twice, or numbered beyond the chirp.
    Reorder,
    /// Planned under a probing range that has changed since.
    Stale,
    /// The receiving interface coalesced so many probes that too few were left.
    Coalesced,
    /// Too few probes, or departure stamps that did not advance.
    Unusable,
    /// A probe of the final queue was held up beyond the path (see
    /// [`crate::analysis::Unusable::Disturbed`]).
    Disturbed,
}

/// A chirp's estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChirpEstimate {
    /// The per-chirp estimate, bit/s.
    pub bps: f64,
    /// Less the application traffic kept off the path while it ran, bit/s.
    pub adjusted_bps: f64,
    /// That application traffic's rate, bit/s.
    pub competing_bps: f64,
    /// The analysis.
    #[serde(skip)]
    pub analysis: ChirpAnalysis,
}

/// The published estimate: the mean of the last n chirps' estimates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Smoothed {
    /// Available bandwidth, bit/s, as measured.
    pub bps: f64,
    /// Less the application traffic that rode (the result over MGRP), bit/s.
    pub adjusted_bps: f64,
    /// Chirps averaged.
    pub chirps: usize,
}

/// What one chirp did to the estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The chirp's number.
    pub id: u32,
    /// Its estimate, or why it gave none.
    pub outcome: Result<ChirpEstimate, Discard>,
    /// The published estimate after it (once n chirps have given one).
    pub smoothed: Option<Smoothed>,
    /// The probing range, if this chirp moved it: (low, high) bit/s.
    pub new_range: Option<(f64, f64)>,
}

/// Chirps and bytes so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Chirps judged.
    pub chirps: u64,
    /// Chirps that gave an estimate.
    pub estimates: u64,
    /// Discarded for loss.
    pub loss: u64,
    /// Discarded for reordering.
    pub reorder: u64,
    /// Discarded as stale.
    pub stale: u64,
    /// Discarded for coalescence.
    pub coalesced: u64,
    /// Discarded as unusable otherwise.
    pub unusable: u64,
    /// Discarded as disturbed beyond the path.
    pub disturbed: u64,
    /// Range changes.
    pub range_changes: u64,
    /// IP bytes of probes sent.
    pub probe_bytes: u64,
    /// Application bytes that rode.
    pub rider_bytes: u64,
    /// IP bytes of probes that carried riders.
    pub riding_probe_bytes: u64,
}

impl Counts {
    /// Chirps discarded, whatever the reason.
    pub fn discarded(&self) -> u64 {
        self.loss + self.reorder + self.stale + self.coalesced + self.unusable + self.disturbed
    }
}

/// The estimator.
#[derive(Debug, Clone)]
pub struct Estimator {
    config: Config,
    low: f64,
    high: f64,
    avg: f64,
    plan: Plan,
    generation: u32,
    next_id: u32,
    window: VecDeque<(f64, f64)>,
    below: u32,
    above: u32,
    counts: Counts,
}

impl Estimator {
    /// An estimator with `config`, checked.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.check()?;
        let p = plan(
            config.size,
            config.spread,
            config.low_bps,
            config.high_bps,
            config.avg_bps,
        );
        Ok(Self {
            low: config.low_bps,
            high: p.high_bps,
            avg: config.avg_bps,
            plan: p,
            config,
            generation: 0,
            next_id: 0,
            window: VecDeque::with_capacity(config.smooth),
            below: 0,
            above: 0,
            counts: Counts::default(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The probing range now: (low, high) bit/s.
    pub fn range(&self) -> (f64, f64) {
        (self.low, self.high)
    }

    /// The average probing rate now, bit/s.
    pub fn avg_bps(&self) -> f64 {
        self.avg
    }

    /// Counts so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The published estimate, once n chirps have given one.
    pub fn smoothed(&self) -> Option<Smoothed> {
        (self.window.len() >= self.config.smooth).then(|| {
            let n = self.window.len() as f64;
            Smoothed {
                bps: self.window.iter().map(|w| w.0).sum::<f64>() / n,
                adjusted_bps: self.window.iter().map(|w| w.1).sum::<f64>() / n,
                chirps: self.window.len(),
            }
        })
    }

    /// The next chirp to send.
    pub fn next_chirp(&mut self) -> ChirpSpec {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        ChirpSpec {
            id,
            generation: self.generation,
            size: self.config.size,
            gaps_ns: self.plan.gaps_ns.clone(),
            period_ns: self.plan.period_ns,
        }
    }

    /// Judges a chirp and updates the estimate.
    pub fn handle(&mut self, r: &ChirpResult) -> Report {
        self.counts.chirps += 1;
        self.counts.probe_bytes += u64::from(r.sent) * u64::from(self.config.size);
        self.counts.rider_bytes += r.rider_bytes;
        self.counts.riding_probe_bytes += r.riding_probe_bytes;
        let outcome = self.judge(r);
        match &outcome {
            Ok(e) => {
                self.counts.estimates += 1;
                if self.window.len() == self.config.smooth {
                    self.window.pop_front();
                }
                self.window.push_back((e.bps, e.adjusted_bps));
            }
            Err(d) => {
                let c = &mut self.counts;
                *match d {
                    Discard::Loss => &mut c.loss,
                    Discard::Reorder => &mut c.reorder,
                    Discard::Stale => &mut c.stale,
                    Discard::Coalesced => &mut c.coalesced,
                    Discard::Unusable => &mut c.unusable,
                    Discard::Disturbed => &mut c.disturbed,
                } += 1;
            }
        }
        let smoothed = if outcome.is_ok() {
            self.smoothed()
        } else {
            None
        };
        let new_range = smoothed.and_then(|s| self.adapt(s.bps));
        Report {
            id: r.id,
            outcome,
            smoothed,
            new_range,
        }
    }

    fn judge(&self, r: &ChirpResult) -> Result<ChirpEstimate, Discard> {
        if r.generation != self.generation {
            return Err(Discard::Stale);
        }
        let n = r.sent as usize;
        if r.sender_stamps.len() != n || r.sender_stamps.iter().any(Option::is_none) {
            return Err(Discard::Loss);
        }
        let mut seen = vec![false; n];
        let mut prev: Option<u32> = None;
        for a in &r.arrivals {
            let i = a.seq as usize;
            if i >= n || seen[i] || prev.is_some_and(|p| a.seq < p) {
                return Err(Discard::Reorder);
            }
            seen[i] = true;
            prev = Some(a.seq);
        }
        if r.arrivals.len() < n {
            return Err(Discard::Loss);
        }
        let sent: Vec<i64> = r.sender_stamps.iter().flatten().copied().collect();
        let received: Vec<i64> = r.arrivals.iter().map(|a| a.received_ns).collect();
        let a = analysis::analyse(self.config.size, &sent, &received, &self.config.analysis)
            .map_err(|u| match u {
                Unusable::Coalesced => Discard::Coalesced,
                Unusable::TooShort => Discard::Unusable,
                Unusable::Disturbed => Discard::Disturbed,
            })?;
        // The application traffic kept off the path while the chirp's tail was on it:
        // what rode in its probes. mgrpd counts the bytes kept off over the whole
        // chirp, but in its slow first half the probes are too few to carry a flow and
        // part of it leaves on its own (there it competes, but the tail's reading does
        // not see it); the rate mgrpd routed to this receiver is the flow's own. The
        // larger of the two (with routes on demand mgrpd sees the flow only around
        // trains, and the chirp's count is the better).
        let span = (sent[n - 1] - sent[0]) as f64 * 1e-9;
        let counted = if span > 0.0 {
            r.competing_rider_bytes as f64 * 8.0 / span
        } else {
            0.0
        };
        let competing_bps = r.routed_bps.map_or(counted, |routed| routed.max(counted));
        Ok(ChirpEstimate {
            bps: a.estimate_bps,
            adjusted_bps: (a.estimate_bps - competing_bps).max(0.0),
            competing_bps,
            analysis: a,
        })
    }

    /// pathChirp's range adaptation: after more than [`params::TRIGGER_COUNT`]
    /// published estimates in a row near one end of the range, the range moves
    /// around that end; the average rate is then kept within a fifth and a tenth of
    /// the new low rate.
    fn adapt(&mut self, mean: f64) -> Option<(f64, f64)> {
        if !self.config.adapt {
            return None;
        }
        self.below = if mean < params::LOW_TRIGGER * self.low {
            self.below + 1
        } else {
            0
        };
        self.above = if mean > params::HIGH_TRIGGER * self.high {
            self.above + 1
        } else {
            0
        };
        let factor = |rate: f64| {
            if rate <= 1e6 {
                params::RANGE_FACTOR.1
            } else {
                params::RANGE_FACTOR.0
            }
        };
        let (low, high) = if self.below > params::TRIGGER_COUNT {
            self.below = 0;
            let f = factor(self.low);
            (self.low / f, self.low * f)
        } else if self.above > params::TRIGGER_COUNT && self.high < 0.9 * params::MAX_HIGH_BPS {
            self.above = 0;
            let f = factor(self.high);
            (self.high / f, self.high * f)
        } else {
            if self.above > params::TRIGGER_COUNT {
                self.above = 0;
            }
            return None;
        };
        let high = high.min(params::MAX_HIGH_BPS);
        let low = low.min(params::MAX_HIGH_BPS / 10.0);
        self.avg = self
            .avg
            .clamp(low / 10.0, low / 5.0)
            .clamp(params::AVG_BPS_BOUNDS.0, params::AVG_BPS_BOUNDS.1);
        self.plan = plan(self.config.size, self.config.spread, low, high, self.avg);
        self.low = low;
        self.high = self.plan.high_bps;
        self.generation = self.generation.wrapping_add(1);
        self.counts.range_changes += 1;
        Some((self.low, self.high))
    }
}

#[cfg(test)]
mod tests;
