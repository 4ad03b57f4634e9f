//! The hidden truth a simulated mesh is judged against: every member's access
//! links, the core between regions, and a share of paths with a bottleneck of
//! their own that nothing else predicts. Fixed before any run (its constants are
//! the model), drawn from a seed.
//!
//! The available bandwidth of the path from `i` into `j` is the least of `i`'s
//! uplink, `j`'s downlink, the core from `i`'s region to `j`'s (none within a
//! region), and the path's own bottleneck where it has one. Each is a capacity
//! drawn log-uniformly times what its load leaves (uniform). The truth stays the
//! same over a run: the age of a value is judged against the goal, not by how
//! much the truth moved meanwhile.

use mgrp_core::draw::Draws;

/// Regions the members are drawn into, uniformly.
pub const REGIONS: usize = 8;
/// Access capacities (each way, drawn apart), bits per second: 10 Mbit/s to 1 Gbit/s.
pub const ACCESS_BPS: (f64, f64) = (10e6, 1e9);
/// The share of an access link its load takes, uniform.
pub const ACCESS_LOAD: (f64, f64) = (0.0, 0.6);
/// What the core leaves between two regions (each way drawn apart): 30 Mbit/s to
/// 1 Gbit/s.
pub const CORE_BPS: (f64, f64) = (30e6, 1e9);
/// The share of paths with a bottleneck of their own (a congested peering, a
/// shaped tunnel), and its available bandwidth: 5 to 500 Mbit/s.
pub const OWN_BOTTLENECK_SHARE: f64 = 0.10;
/// The range of a path's own bottleneck.
pub const OWN_BPS: (f64, f64) = (5e6, 500e6);
/// A run's estimate: the truth times e^N(0, σ) with this σ (pathChirp's per-run
/// errors in the fan-out bench had a median of 2–4 %, with tails to 28 %).
pub const ESTIMATE_SIGMA: f64 = 0.15;
/// The share of runs that end without an estimate.
pub const RUN_FAILS: f64 = 0.03;

/// A mesh's truth.
#[derive(Debug, Clone)]
pub struct Truth {
    /// Each member's region.
    pub region: Vec<usize>,
    /// Available uplink, per member.
    pub up: Vec<f64>,
    /// Available downlink, per member.
    pub down: Vec<f64>,
    /// Available core from region to region (`REGIONS × REGIONS`, the diagonal
    /// unbounded).
    pub core: Vec<f64>,
    /// Paths with a bottleneck of their own: (from, into) → available.
    pub own: std::collections::HashMap<(usize, usize), f64>,
}

fn log_uniform(d: &mut Draws, (lo, hi): (f64, f64)) -> f64 {
    (lo.ln() + d.uniform() * (hi.ln() - lo.ln())).exp()
}

fn uniform(d: &mut Draws, (lo, hi): (f64, f64)) -> f64 {
    lo + d.uniform() * (hi - lo)
}

/// A normal draw (Box–Muller).
pub fn normal(d: &mut Draws) -> f64 {
    let u1 = d.uniform().max(f64::MIN_POSITIVE);
    let u2 = d.uniform();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

impl Truth {
    /// The truth of `n` members, from `seed`.
    pub fn draw(n: usize, seed: u64) -> Self {
        let mut d = Draws::new(seed ^ 0x7275_7468);
        let region = (0..n)
            .map(|_| ((d.uniform() * REGIONS as f64) as usize).min(REGIONS - 1))
            .collect();
        let mut access = || {
            (0..n)
                .map(|_| log_uniform(&mut d, ACCESS_BPS) * (1.0 - uniform(&mut d, ACCESS_LOAD)))
                .collect::<Vec<f64>>()
        };
        let up = access();
        let down = access();
        let mut core = vec![f64::INFINITY; REGIONS * REGIONS];
        for r in 0..REGIONS {
            for s in 0..REGIONS {
                if r != s {
                    core[r * REGIONS + s] = log_uniform(&mut d, CORE_BPS);
                }
            }
        }
        let mut own = std::collections::HashMap::new();
        for i in 0..n {
            for j in 0..n {
                if i != j && d.uniform() < OWN_BOTTLENECK_SHARE {
                    own.insert((i, j), log_uniform(&mut d, OWN_BPS));
                }
            }
        }
        Self {
            region,
            up,
            down,
            core,
            own,
        }
    }

    /// The available bandwidth from `i` into `j`.
    pub fn available(&self, i: usize, j: usize) -> f64 {
        let core = self.core[self.region[i] * REGIONS + self.region[j]];
        let own = self.own.get(&(i, j)).copied().unwrap_or(f64::INFINITY);
        self.up[i].min(self.down[j]).min(core).min(own)
    }
}
