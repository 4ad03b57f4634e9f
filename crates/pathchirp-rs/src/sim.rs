//! A simulated path for the estimator, deterministic and without a network: one
//! token-bucket shaper (rate and bucket, like Linux's tbf) feeding a FIFO, with
//! constant-rate or Poisson cross traffic, and a fixed propagation delay. Tests,
//! examples and property tests drive the estimator through it.

use mgrp_tool::Arrival;

use crate::{ChirpResult, ChirpSpec, Estimator, Report};

/// Cross traffic at the shaper.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cross {
    /// None.
    None,
    /// Packets of `size` bytes at a constant `bps`.
    Cbr {
        /// Rate, bit/s.
        bps: f64,
        /// IP bytes per packet.
        size: u32,
    },
    /// Packets of `size` bytes with exponential gaps, mean rate `bps`.
    Poisson {
        /// Rate, bit/s.
        bps: f64,
        /// IP bytes per packet.
        size: u32,
    },
}

/// The path.
#[derive(Debug, Clone)]
pub struct Path {
    rate: f64,
    bucket: f64,
    cross: Cross,
    propagation_ns: i64,
    tokens: f64,
    updated: i64,
    free_at: i64,
    next_cross: i64,
    rng: u64,
}

impl Path {
    /// A shaper of `rate_bps` with a bucket of `bucket_bytes`, cross traffic `cross`.
    pub fn new(rate_bps: f64, bucket_bytes: u32, cross: Cross) -> Self {
        Self {
            rate: rate_bps,
            bucket: f64::from(bucket_bytes),
            cross,
            propagation_ns: 1_000_000,
            tokens: f64::from(bucket_bytes),
            updated: 0,
            free_at: 0,
            next_cross: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// The available bandwidth, IP bit/s.
    pub fn truth(&self) -> f64 {
        match self.cross {
            Cross::None => self.rate,
            Cross::Cbr { bps, .. } | Cross::Poisson { bps, .. } => self.rate - bps,
        }
    }

    fn uniform(&mut self) -> f64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Passes one packet of `size` bytes arriving at `t` through the shaper; its
    /// departure.
    fn pass(&mut self, t: i64, size: u32) -> i64 {
        let per_ns = self.rate / 8.0 * 1e-9;
        let start = t.max(self.free_at);
        self.tokens = (self.tokens + (start - self.updated) as f64 * per_ns).min(self.bucket);
        let wait = ((f64::from(size) - self.tokens) / per_ns).max(0.0).ceil() as i64;
        let leave = start + wait;
        self.tokens = (self.tokens + wait as f64 * per_ns - f64::from(size)).max(0.0);
        self.updated = leave;
        self.free_at = leave;
        leave
    }

    /// Cross packets that arrive before `until`.
    fn cross_until(&mut self, until: i64) {
        loop {
            let (bps, size, poisson) = match self.cross {
                Cross::None => return,
                Cross::Cbr { bps, size } => (bps, size, false),
                Cross::Poisson { bps, size } => (bps, size, true),
            };
            if self.next_cross >= until {
                return;
            }
            let t = self.next_cross;
            self.pass(t, size);
            let mean = f64::from(size) * 8.0 / bps * 1e9;
            let gap = if poisson {
                -mean * self.uniform().ln()
            } else {
                mean
            };
            self.next_cross = t + gap.max(1.0) as i64;
        }
    }

    /// Sends probes of `size` bytes, the first at `start_ns`, then after each of
    /// `gaps_ns`; their (departure, arrival) stamps.
    pub fn carry(&mut self, start_ns: i64, size: u32, gaps_ns: &[u64]) -> Vec<(i64, i64)> {
        let mut t = start_ns;
        let mut out = Vec::with_capacity(gaps_ns.len() + 1);
        for k in 0..=gaps_ns.len() {
            if k > 0 {
                t += i64::try_from(gaps_ns[k - 1]).unwrap_or(i64::MAX / 4);
            }
            self.cross_until(t);
            let left = self.pass(t, size);
            out.push((t, left + self.propagation_ns));
        }
        out
    }
}

/// What came back of `spec` with every probe's (departure, arrival) stamps: nothing
/// lost, no rider.
pub fn result(spec: &ChirpSpec, stamps: &[(i64, i64)]) -> ChirpResult {
    ChirpResult {
        id: spec.id,
        generation: spec.generation,
        sent: spec.packets(),
        sender_stamps: stamps.iter().map(|s| Some(s.0)).collect(),
        arrivals: (0u32..)
            .zip(stamps)
            .map(|(seq, s)| Arrival {
                seq,
                sent_ns: s.0,
                received_ns: s.1,
            })
            .collect(),
        ..ChirpResult::default()
    }
}

/// Runs `chirps` chirps of `est` through `path`, each at its period; the reports.
pub fn run(est: &mut Estimator, path: &mut Path, chirps: usize) -> Vec<Report> {
    let mut t = 0i64;
    let mut reports = Vec::with_capacity(chirps);
    for _ in 0..chirps {
        let spec = est.next_chirp();
        let stamps = path.carry(t, spec.size, &spec.gaps_ns);
        reports.push(est.handle(&result(&spec, &stamps)));
        t += i64::try_from(spec.period_ns).unwrap_or(i64::MAX / 4);
    }
    reports
}
