//! The estimator with no I/O and no clock. Time is cut into slots of length Δ; in
//! each slot an experiment starts with probability p and probes that slot and the
//! next (or more, for extended experiments); each probe is N packets back to back.
//! A probed slot is congested if a packet of its probe was lost, or if its queuing
//! delay was near the largest seen around losses. From the experiments' outcomes
//! (y_i, y_{i+1}) come the loss-episode frequency (the share of congested slots) and
//! the mean episode duration.
//!
//! Batches: experiments are planned a window of slots at a time, one probe batch per
//! window; an experiment never crosses a window, and the time between windows (the
//! control exchange) is simply not sampled.

use mgrp_tool::Arrival;
use serde::Serialize;

use crate::params;

/// How the estimator probes and judges. [`Config::default`] gives the defaults in
/// [`crate::params`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Config {
    /// Slot length Δ, ns.
    pub slot_ns: u64,
    /// Probability that an experiment starts in a slot, in (0, 1].
    pub p: f64,
    /// Consecutive slots each experiment probes (2 for basic experiments).
    pub slots_per_experiment: u32,
    /// Packets per probe, back to back.
    pub packets: u32,
    /// IP bytes per packet.
    pub size: u32,
    /// Delay threshold: congested at (1 − α) of the largest delay around losses.
    pub alpha: f64,
    /// "Around losses": within this long of a lost probe, ns.
    pub tau_ns: u64,
    /// Slots per probe batch.
    pub window_slots: u32,
    /// Seed of the experiment process.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            slot_ns: params::SLOT_NS,
            p: params::P,
            slots_per_experiment: params::SLOTS_PER_EXPERIMENT,
            packets: params::PACKETS,
            size: params::SIZE,
            alpha: params::ALPHA,
            tau_ns: params::TAU_NS,
            window_slots: params::WINDOW_SLOTS,
            seed: 1,
        }
    }
}

pub use mgrp_tool::params::ConfigError;

/// The time a probe of `packets` packets of `size` bytes takes to leave at `bps`, ns.
pub fn probe_time_ns(packets: u32, size: u32, bps: f64) -> u64 {
    (f64::from(packets) * f64::from(size) * 8.0 / bps * 1e9) as u64
}

impl Config {
    /// Checks every parameter against the method's limits. `line_bps` is the rate the
    /// probes leave at (the sending host's link), which a slot must outlast.
    pub fn check(&self, line_bps: f64) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError(m));
        if !(self.p > 0.0 && self.p <= 1.0) {
            return bad(format!(
                "p = {} must be in (0, 1]: the probability that an experiment starts in a slot",
                self.p
            ));
        }
        if self.packets == 0 {
            return bad("a probe needs at least 1 packet".into());
        }
        mgrp_tool::params::probe_size(self.size)?;
        let probe = probe_time_ns(self.packets, self.size, line_bps);
        if self.slot_ns <= probe {
            return bad(format!(
                "slot Δ = {} µs is not longer than a probe ({} packets of {} bytes take {} µs at {:.0} Mbit/s): a slot must hold its probe",
                self.slot_ns / 1000,
                self.packets,
                self.size,
                probe / 1000,
                line_bps / 1e6
            ));
        }
        if self.slots_per_experiment < 2 {
            return bad(format!(
                "an experiment probes at least 2 slots (asked {})",
                self.slots_per_experiment
            ));
        }
        if self.window_slots < self.slots_per_experiment {
            return bad(format!(
                "a batch of {} slots cannot hold an experiment of {}",
                self.window_slots, self.slots_per_experiment
            ));
        }
        if u64::from(self.window_slots) * self.slot_ns > mgrp_tool::control::MAX_GAP_NS {
            return bad(format!(
                "a batch of {} slots of {} ms is longer than the {} ms a gap may span",
                self.window_slots,
                self.slot_ns / 1_000_000,
                mgrp_tool::control::MAX_GAP_NS / 1_000_000
            ));
        }
        if !(self.alpha >= 0.0 && self.alpha < 1.0) {
            return bad(format!("α = {} must be in [0, 1)", self.alpha));
        }
        Ok(())
    }
}

/// One window's probes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Window number, from 0.
    pub id: u32,
    /// The probed slots, by their offset in the window, ascending.
    pub slots: Vec<u32>,
    /// Experiments, as the offset of their first slot.
    pub experiments: Vec<u32>,
    /// Packets per probe.
    pub packets: u32,
    /// IP bytes per packet.
    pub size: u32,
    /// Slot length, ns.
    pub slot_ns: u64,
}

impl Window {
    /// Probes in it (packets).
    pub fn probes(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX) * self.packets
    }

    /// Gap before each packet after the first, ns: back to back within a slot's
    /// probe, a slot's length between probes less the time the previous probe's
    /// gaps took (none).
    pub fn gaps_ns(&self) -> Vec<u64> {
        let mut gaps = Vec::with_capacity(self.probes() as usize);
        for (i, &s) in self.slots.iter().enumerate() {
            let first = if i == 0 {
                0
            } else {
                u64::from(s - self.slots[i - 1]) * self.slot_ns
            };
            gaps.push(first);
            gaps.extend(std::iter::repeat_n(0, self.packets as usize - 1));
        }
        gaps
    }
}

/// What came back of a window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WindowResult {
    /// Its number.
    pub id: u32,
    /// Each packet's departure stamp in order, ns (`None` if it did not leave).
    pub sender_stamps: Vec<Option<i64>>,
    /// The packets that arrived.
    pub arrivals: Vec<Arrival>,
    /// Application bytes that rode.
    pub rider_bytes: u64,
}

/// One probed slot.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slot {
    /// When its probe left, ns.
    at: i64,
    /// A packet of it was lost.
    lost: bool,
    /// Its largest one-way delay, ns (clock offset included); `None` if none came.
    owd: Option<i64>,
}

/// Outcome counts of the experiments: (y_i, y_{i+1}).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    /// Neither slot congested.
    pub n00: u64,
    /// The second only: an episode began.
    pub n01: u64,
    /// The first only: an episode ended.
    pub n10: u64,
    /// Both.
    pub n11: u64,
}

impl Outcomes {
    /// Experiments.
    pub fn total(&self) -> u64 {
        self.n00 + self.n01 + self.n10 + self.n11
    }
}

/// The estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Experiments and their outcomes.
    pub outcomes: Outcomes,
    /// Loss-episode frequency: the share of slots congested.
    pub frequency: f64,
    /// Its 95 % confidence half-width.
    pub frequency_ci: f64,
    /// Mean loss-episode duration, slots (`None` without an episode start or end).
    pub duration_slots: Option<f64>,
    /// Its 95 % confidence half-width, slots (delta method).
    pub duration_ci_slots: Option<f64>,
    /// Mean duration, seconds.
    pub duration_s: Option<f64>,
    /// The plain loss rate: packets lost over packets sent.
    pub loss_rate: f64,
    /// Probed slots, and how many of them were congested (by loss, by delay).
    pub slots: u64,
    /// Congested by a lost packet.
    pub congested_by_loss: u64,
    /// Congested by delay alone.
    pub congested_by_delay: u64,
    /// Packets sent and lost.
    pub packets_sent: u64,
    /// Packets lost.
    pub packets_lost: u64,
    /// IP bytes of probes sent.
    pub probe_bytes: u64,
    /// Application bytes that rode.
    pub rider_bytes: u64,
}

/// The estimator.
#[derive(Debug, Clone)]
pub struct Estimator {
    config: Config,
    rng: u64,
    next_id: u32,
    slots: Vec<Slot>,
    /// Each experiment: the indices of its slots in `slots`.
    experiments: Vec<Vec<usize>>,
    pending: Option<Window>,
    packets_sent: u64,
    packets_lost: u64,
    rider_bytes: u64,
}

impl Estimator {
    /// An estimator with `config`, checked against probes leaving at `line_bps`.
    pub fn new(config: Config, line_bps: f64) -> Result<Self, ConfigError> {
        config.check(line_bps)?;
        Ok(Self {
            config,
            rng: config.seed.max(1),
            next_id: 0,
            slots: Vec::new(),
            experiments: Vec::new(),
            pending: None,
            packets_sent: 0,
            packets_lost: 0,
            rider_bytes: 0,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn uniform(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next window to send: in each slot an experiment starts with probability p
    /// (if it fits in the window), and every slot an experiment covers is probed once.
    pub fn next_window(&mut self) -> Window {
        let c = self.config;
        let k = c.slots_per_experiment;
        let mut experiments = Vec::new();
        let mut probed = vec![false; c.window_slots as usize];
        for s in 0..c.window_slots {
            let starts = self.uniform() < c.p;
            if starts && s + k <= c.window_slots {
                experiments.push(s);
                for j in s..s + k {
                    probed[j as usize] = true;
                }
            }
        }
        let slots = (0u32..)
            .zip(&probed)
            .filter(|(_, p)| **p)
            .map(|(s, _)| s)
            .collect();
        let w = Window {
            id: self.next_id,
            slots,
            experiments,
            packets: c.packets,
            size: c.size,
            slot_ns: c.slot_ns,
        };
        self.next_id = self.next_id.wrapping_add(1);
        self.pending = Some(w.clone());
        w
    }

    /// Takes what came back of the last window planned; false if it is not that one.
    pub fn handle(&mut self, r: &WindowResult) -> bool {
        let Some(w) = self.pending.take_if(|w| w.id == r.id) else {
            return false;
        };
        let n = w.packets as usize;
        let mut got: Vec<Option<&Arrival>> = vec![None; w.slots.len() * n];
        for a in &r.arrivals {
            if let Some(slot) = got.get_mut(a.seq as usize) {
                slot.get_or_insert(a);
            }
        }
        let base = self.slots.len();
        for (i, _) in w.slots.iter().enumerate() {
            let mut lost = false;
            let mut owd: Option<i64> = None;
            let mut at = None;
            for (j, arrived) in got.iter().enumerate().skip(i * n).take(n) {
                let sent = r.sender_stamps.get(j).copied().flatten();
                self.packets_sent += 1;
                match (sent, *arrived) {
                    (Some(s), Some(a)) => {
                        at.get_or_insert(s);
                        let d = a.received_ns - s;
                        owd = Some(owd.map_or(d, |o| o.max(d)));
                    }
                    (s, _) => {
                        // A packet that did not leave counts as lost, as it would on
                        // a link.
                        if let Some(s) = s {
                            at.get_or_insert(s);
                        }
                        lost = true;
                        self.packets_lost += 1;
                    }
                }
            }
            self.slots.push(Slot {
                at: at.unwrap_or(i64::MIN),
                lost,
                owd,
            });
        }
        for &e in &w.experiments {
            let first = w.slots.binary_search(&e).unwrap_or(0);
            let k = self.config.slots_per_experiment as usize;
            self.experiments
                .push((base + first..base + first + k).collect());
        }
        self.rider_bytes += r.rider_bytes;
        true
    }

    /// Which probed slots are congested: lost a packet, or (without loss) a queuing
    /// delay at least (1 − α) of the largest seen within τ of a lost probe. Queuing
    /// delay is the one-way delay less the smallest seen, so the clocks' offset
    /// cancels.
    fn congestion(&self) -> (Vec<bool>, u64, u64) {
        let min = self.slots.iter().filter_map(|s| s.owd).min().unwrap_or(0);
        let tau = i64::try_from(self.config.tau_ns).unwrap_or(i64::MAX);
        let losses: Vec<i64> = self
            .slots
            .iter()
            .filter(|s| s.lost && s.at != i64::MIN)
            .map(|s| s.at)
            .collect();
        let near_loss = |t: i64| {
            let i = losses.partition_point(|&l| l < t - tau);
            losses.get(i).is_some_and(|&l| l <= t + tau)
        };
        let max_near = self
            .slots
            .iter()
            .filter(|s| s.at != i64::MIN && near_loss(s.at))
            .filter_map(|s| s.owd)
            .max()
            .map(|d| d - min);
        let (mut by_loss, mut by_delay) = (0, 0);
        let flags = self
            .slots
            .iter()
            .map(|s| {
                if s.lost {
                    by_loss += 1;
                    return true;
                }
                let delayed = match (max_near, s.owd) {
                    (Some(m), Some(d)) if m > 0 => {
                        (d - min) as f64 >= (1.0 - self.config.alpha) * m as f64
                    }
                    _ => false,
                };
                by_delay += u64::from(delayed);
                delayed
            })
            .collect();
        (flags, by_loss, by_delay)
    }

    /// The estimate over every experiment so far.
    pub fn estimate(&self) -> Estimate {
        let (y, by_loss, by_delay) = self.congestion();
        let mut o = Outcomes::default();
        // Per experiment: its share of congested slots (for the frequency) and whether
        // its first two slots differ (for the episode-boundary rate).
        let (mut zf, mut zb) = (Vec::new(), Vec::new());
        for e in &self.experiments {
            let (a, b) = (y[e[0]], y[e[1]]);
            match (a, b) {
                (false, false) => o.n00 += 1,
                (false, true) => o.n01 += 1,
                (true, false) => o.n10 += 1,
                (true, true) => o.n11 += 1,
            }
            zf.push(e.iter().filter(|&&i| y[i]).count() as f64 / e.len() as f64);
            zb.push(if a == b { 0.0 } else { 0.5 });
        }
        let m = o.total() as f64;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (f, b) = (mean(&zf), mean(&zb));
        let cov = |u: &[f64], mu: f64, v: &[f64], mv: f64| {
            if u.len() < 2 {
                return 0.0;
            }
            u.iter()
                .zip(v)
                .map(|(x, y)| (x - mu) * (y - mv))
                .sum::<f64>()
                / (u.len() - 1) as f64
        };
        let (vf, vb, cfb) = (
            cov(&zf, f, &zf, f),
            cov(&zb, b, &zb, b),
            cov(&zf, f, &zb, b),
        );
        let frequency_ci = if m > 0.0 {
            params::Z95 * (vf / m).sqrt()
        } else {
            0.0
        };
        let (duration_slots, duration_ci_slots) = if b > 0.0 {
            let d = f / b;
            let var = (vf / (b * b) + f * f * vb / b.powi(4) - 2.0 * f * cfb / b.powi(3)) / m;
            (Some(d), Some(params::Z95 * var.max(0.0).sqrt()))
        } else {
            (None, None)
        };
        let probe_bytes = self.packets_sent * u64::from(self.config.size);
        Estimate {
            outcomes: o,
            frequency: f,
            frequency_ci,
            duration_slots,
            duration_ci_slots,
            duration_s: duration_slots.map(|d| d * self.config.slot_ns as f64 * 1e-9),
            loss_rate: if self.packets_sent > 0 {
                self.packets_lost as f64 / self.packets_sent as f64
            } else {
                0.0
            },
            slots: self.slots.len() as u64,
            congested_by_loss: by_loss,
            congested_by_delay: by_delay,
            packets_sent: self.packets_sent,
            packets_lost: self.packets_lost,
            probe_bytes,
            rider_bytes: self.rider_bytes,
        }
    }
}

#[cfg(test)]
mod tests;
