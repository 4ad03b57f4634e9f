//! `pathload-rs`: the pathload available-bandwidth estimator (Jain and Dovrolis' SLoPS)
//! on MGRP, with a plain-UDP baseline. How to run the tool and read its output is in
//! the repository's `docs/pathload-rs.md`.
//!
//! The library is the estimator, with no I/O and no clock: feed an [`Estimator`] the
//! sender and receiver stamps of the trains and streams it asks for, and it answers
//! per-stream trends, per-fleet verdicts, the next fleet's rate, and the final range
//! with the reason it stopped. [`sim`] is a deterministic simulated path that drives it
//! without a network. The `pathload-rs` binary drives it over `mgrp-client` (probe
//! transactions through `mgrpd`) or over plain UDP.
//!
//! ```
//! use pathload_rs::sim::{Link, LinkConfig, run};
//! use pathload_rs::{Config, Estimator, Mode};
//!
//! // 10 Mbit/s bottleneck with 4 Mbit/s of cross traffic, simulated.
//! let cfg = LinkConfig { cross_mbps: 4.0, ..LinkConfig::default() };
//! let truth = cfg.truth(228);
//! let mut est = Estimator::new(Config { mode: Mode::Fast, ..Config::default() });
//! let (outcome, _seconds) = run(&mut est, &mut Link::new(cfg));
//! assert!(outcome.low - 0.5 <= truth && truth <= outcome.high + 0.5);
//! ```

pub mod estimator;
pub mod params;
pub mod rate;
pub mod search;
pub mod sim;
pub mod tool;
pub mod trend;

/// The control protocol, shared with the workspace's other tools.
pub use mgrp_tool::control;

pub use estimator::{
    Action, Adjustment, Config, Estimator, Event, FleetEnd, FleetReport, FleetVerdict, Mode,
    Outcome, StopReason, StreamResult, StreamSpec, TrainResult, TrainSpec,
};
pub use trend::{Arrival, StreamAnalysis, Trend};
