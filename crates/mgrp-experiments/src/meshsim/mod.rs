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
            duration: Duration::from_secs(3 * 3600),
            judged_from: Duration::from_secs(3600),
            sample_every: Duration::from_secs(60),
            seed,
        }
    }
}
