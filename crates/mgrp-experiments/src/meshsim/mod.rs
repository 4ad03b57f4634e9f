//! A mesh of many members simulated without I/O: the description's budget plan,
//! each member's overlay scheduler running it, runs against a hidden truth
//! ([`truth`]), and the pairs not measured inferred from those that are.

pub mod run;
pub mod truth;

use std::time::Duration;

/// The run's setup, fixed before any run.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Members.
    pub members: usize,
    /// The spread group's k: each member measures from 2k others and 2k measure it.
    pub k: usize,
    /// The methods each pair runs (the overlay's names).
    pub methods: Vec<&'static str>,
    /// Members that route for each other (their heartbeats count).
    pub routing: usize,
    /// The description's `node-mb-per-hour`.
    pub node_mb_per_hour: f64,
    /// The description's `age`.
    pub age: Duration,
    /// The description's `ride-share` and `passive-share`: none, until a mesh on
    /// real hosts has measured them.
    pub ride_share: f64,
    /// See `ride_share`.
    pub passive_share: f64,
    /// Whether the description gives each member's region.
    pub regions_given: bool,
    /// Whether inference takes estimates older than the age only where no
    /// fresher one bounds the same.
    pub stale_bounds_last: bool,
    /// Simulated time.
    pub duration: Duration,
    /// Values are judged from this time on (every link has run by then).
    pub judged_from: Duration,
    /// How often every pair's value is sampled.
    pub sample_every: Duration,
    /// The seed of the truth, the schedulers' jitter and the runs' errors.
    pub seed: u64,
}

impl Setup {
    /// The setup of the docs' runs at `members`.
    pub fn fixed(members: usize, seed: u64) -> Self {
        Self {
            members,
            k: 4,
            methods: vec!["pathchirp", "pathload-fast"],
            routing: 8,
            node_mb_per_hour: 100.0,
            age: Duration::from_secs(600),
            ride_share: 0.0,
            passive_share: 0.0,
            regions_given: true,
            stale_bounds_last: true,
            duration: Duration::from_secs(3 * 3600),
            judged_from: Duration::from_secs(3600),
            sample_every: Duration::from_secs(60),
            seed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> Setup {
        Setup {
            duration: Duration::from_secs(5400),
            judged_from: Duration::from_secs(1800),
            ..Setup::fixed(40, seed)
        }
    }

    #[test]
    fn a_run_repeats_from_its_seed_and_another_seed_differs() {
        let a = run::run(&small(3)).unwrap();
        let b = run::run(&small(3)).unwrap();
        let c = run::run(&small(4)).unwrap();
        let key = |r: &run::Report| {
            (
                r.events,
                r.probe_bytes_per_hour.to_bits(),
                r.inferred_within,
                r.ordered,
                r.measured_ages.quantile(0.99),
            )
        };
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
    }

    /// What the run reports holds together: every ordered pair has a value once
    /// the links have run, the measured paths are the spread group's, the probes
    /// spent stay within the nodes' budget, and inference is better than chance.
    #[test]
    fn a_run_accounts_for_every_pair_and_stays_within_its_budget() {
        let s = small(5);
        let r = run::run(&s).unwrap();
        assert_eq!(r.pairs, 40 * 39);
        // Each member measures from 2k others.
        assert_eq!(r.measured_paths, 40 * 2 * s.k);
        assert_eq!(r.without_value, 0);
        assert_eq!(r.measured_within.1 + r.inferred_within.1, r.pairs);
        let samples = (s.duration - s.judged_from).as_secs() / s.sample_every.as_secs() + 1;
        assert_eq!(
            r.measured_ages.count() + r.inferred_ages.count(),
            samples * r.pairs as u64
        );
        // All nodes together spend at most their budgets (each byte counted at
        // both ends), and pathChirp runs about as often as planned.
        let total = r.probe_bytes_per_hour + r.heartbeat_bytes_per_hour + r.poll_bytes_per_hour;
        assert!(
            total * 2.0 <= s.node_mb_per_hour * 1e6 * 40.0 * 1.1,
            "{total}"
        );
        let chirp = &r.methods["pathchirp"];
        let planned_runs_per_hour = chirp.links as f64 * 3600.0 / (chirp.interval.1 + 20.0);
        let hours = (s.duration - s.judged_from).as_secs_f64() / 3600.0;
        assert!(
            chirp.runs as f64 >= planned_runs_per_hour * hours * 0.9,
            "{chirp:?}"
        );
        // Measured paths read within ±50 % nearly always (σ 0.15); inferred ones
        // more often than not.
        assert!(
            r.measured_within.0 * 10 >= r.measured_within.1 * 9,
            "{:?}",
            r.measured_within
        );
        assert!(
            r.inferred_within.0 * 2 > r.inferred_within.1,
            "{:?}",
            r.inferred_within
        );
        assert!(r.ordered.0 * 3 > r.ordered.1 * 2, "{:?}", r.ordered);
    }
}
