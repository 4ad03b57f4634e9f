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
    /// The description's `ride-share` and `passive-share`: none unless taken from
    /// a mesh that measured them ([`Shares::of_mesh_run`]).
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

/// The ride and passive shares a real mesh measured, from the `run.json` (schema 1)
/// that `mgrp-overlay`'s `mesh_scale` bench writes: the share of MGRP probe bytes
/// that riders filled, and the share of due runs a passive estimate stood in for
/// (the overlay's own `coverage`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    /// Rider bytes over probe bytes, MGRP runs only.
    pub ride: f64,
    /// Due runs covered over due runs (covered or run).
    pub passive: f64,
    /// What they were taken from: rider bytes, MGRP probe bytes, covered runs,
    /// due runs.
    pub rider_bytes: u64,
    /// See `rider_bytes`.
    pub probe_bytes: u64,
    /// See `rider_bytes`.
    pub covered: u64,
    /// See `rider_bytes`.
    pub due: u64,
}

impl Shares {
    /// The shares of a mesh run's `run.json`; an error names what it lacks.
    pub fn of_mesh_run(run: &serde_json::Value) -> anyhow::Result<Self> {
        use anyhow::{Context as _, bail};
        if run["schema"].as_u64() != Some(1) {
            bail!(
                "not a mesh run of schema 1 (its \"schema\" is {})",
                run["schema"]
            );
        }
        let links = run["links"]
            .as_array()
            .context("the run has no \"links\"")?;
        let (mut rider_bytes, mut probe_bytes, mut covered, mut due) = (0u64, 0u64, 0u64, 0u64);
        for (n, l) in links.iter().enumerate() {
            let runs = l["estimates"]
                .as_array()
                .with_context(|| format!("link {n} has no \"estimates\""))?;
            for r in runs.iter().filter(|r| r["transport"] == "mgrp") {
                let field = |k: &str| {
                    r[k].as_u64()
                        .with_context(|| format!("a run of link {n} has no {k:?}"))
                };
                rider_bytes += field("rider_bytes")?;
                probe_bytes += field("probe_bytes")?;
            }
            due += runs.len() as u64;
            covered += l["link"]["passive"]["covered"].as_u64().unwrap_or(0);
        }
        due += covered;
        if due == 0 {
            bail!("the run has no runs");
        }
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Ok(Self {
            ride: ratio(rider_bytes, probe_bytes),
            passive: ratio(covered, due),
            rider_bytes,
            probe_bytes,
            covered,
            due,
        })
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
    fn shares_are_taken_from_a_mesh_runs_mgrp_runs_and_passive_cover() {
        let run = serde_json::json!({
            "schema": 1,
            "links": [
                {"link": {"passive": {"covered": 3}}, "estimates": [
                    {"transport": "mgrp", "probe_bytes": 1000, "rider_bytes": 100},
                    {"transport": "mgrp", "probe_bytes": 3000, "rider_bytes": 0},
                ]},
                {"link": {"passive": null}, "estimates": [
                    {"transport": "udp", "probe_bytes": 5000, "rider_bytes": 0},
                ]},
            ],
        });
        let s = Shares::of_mesh_run(&run).unwrap();
        assert_eq!(
            (s.rider_bytes, s.probe_bytes, s.covered, s.due),
            (100, 4000, 3, 6)
        );
        assert!((s.ride - 0.025).abs() < 1e-12 && (s.passive - 0.5).abs() < 1e-12);
        let bad = serde_json::json!({"schema": 2, "links": []});
        assert!(
            Shares::of_mesh_run(&bad)
                .unwrap_err()
                .to_string()
                .contains("schema")
        );
        let no_runs = serde_json::json!({"schema": 1, "links": [{"link": {}, "estimates": []}]});
        assert!(
            Shares::of_mesh_run(&no_runs)
                .unwrap_err()
                .to_string()
                .contains("no runs")
        );
        let lacking =
            serde_json::json!({"schema": 1, "links": [{"estimates": [{"transport": "mgrp"}]}]});
        assert!(
            Shares::of_mesh_run(&lacking)
                .unwrap_err()
                .to_string()
                .contains("rider_bytes")
        );
    }

    /// Riders make the same runs cheaper, and passive estimates stand in for a
    /// share of due runs near the one given, costing nothing.
    #[test]
    fn riders_and_passive_cover_take_their_shares() {
        let plain = run::run(&small(6)).unwrap();
        let shared = run::run(&Setup {
            ride_share: 0.2,
            passive_share: 0.3,
            ..small(6)
        })
        .unwrap();
        assert_eq!(plain.rider_bytes_per_hour, 0.0);
        let chirp = &shared.methods["pathchirp"];
        let due = chirp.runs + chirp.covered;
        let covered = chirp.covered as f64 / due as f64;
        assert!((0.2..0.4).contains(&covered), "{chirp:?}");
        let ridden = shared.rider_bytes_per_hour
            / (shared.rider_bytes_per_hour + shared.probe_bytes_per_hour);
        assert!((ridden - 0.2).abs() < 0.01, "{ridden}");
        // What a run sends is the same: riders fill a fifth of it.
        let per_run = |r: &run::Report| {
            let c = &r.methods["pathchirp"];
            c.bytes_per_link_hour * c.links as f64 / c.runs as f64
        };
        assert!((per_run(&shared) / per_run(&plain) - 0.8).abs() < 0.01);
        assert_eq!(plain.methods["pathchirp"].covered, 0);
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
        assert_eq!(r.measured_errors.len(), r.measured_within.1);
        assert_eq!(r.inferred_errors.len(), r.inferred_within.1);
        let within = r.inferred_errors.iter().filter(|&&e| e <= 50.0).count();
        assert_eq!(within, r.inferred_within.0);
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
