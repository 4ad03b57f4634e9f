//! `pathchirp-rs`: the pathChirp available-bandwidth estimator (Ribeiro, Riedi,
//! Baraniuk, Navratil and Cottrell, PAM 2003) on MGRP, with a plain-UDP baseline.
//! How to run the tool and read its output is in the repository's
//! `docs/pathchirp-rs.md`.
//!
//! A chirp is a train whose gaps shrink by the spread factor γ, so its rate sweeps
//! from a low to a high rate in one short train; where the queuing delay starts to
//! grow for good, the chirp has passed the available bandwidth. The library is the
//! estimator, with no I/O and no clock: [`Estimator::next_chirp`] plans each chirp,
//! [`Estimator::handle`] takes its sender and receiver stamps and answers the
//! per-chirp estimate (or why it was discarded), the smoothed estimate and any change
//! of the probing range. [`sim`] is a deterministic simulated path that drives it
//! without a network. The `pathchirp-rs` binary drives it over `mgrp-client` (probe
//! transactions through `mgrpd`) or over plain UDP, through `mgrp-tool`.
//!
//! ```
//! use pathchirp_rs::sim::{Cross, Path, run};
//! use pathchirp_rs::{Config, Estimator};
//!
//! // A 10 Mbit/s token bucket with 4 Mbit/s of constant-rate cross traffic.
//! let mut path = Path::new(10e6, 1540, Cross::Cbr { bps: 4e6, size: 1028 });
//! let mut est = Estimator::new(Config::default()).unwrap();
//! let reports = run(&mut est, &mut path, 100);
//! let last = reports.iter().rev().find_map(|r| r.smoothed).unwrap();
//! assert!((last.bps / path.truth() - 1.0).abs() < 0.1);
//! ```

pub mod analysis;
pub mod estimator;
pub mod params;
pub mod sim;
pub mod tool;

pub use analysis::{ChirpAnalysis, Onset};
pub use estimator::{
    ChirpEstimate, ChirpResult, ChirpSpec, Config, ConfigError, Counts, Discard, Estimator, Report,
    Smoothed,
};
