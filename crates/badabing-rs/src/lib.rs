//! `badabing-rs`: badabing's loss-episode estimates (Sommers, Barford, Duffield and
//! Ron, SIGCOMM 2005) on MGRP, with a plain-UDP baseline. How to run the tool and read
//! its output, and which of its defaults could not be verified, is in the
//! repository's `docs/badabing-rs.md`.
//!
//! Loss comes in episodes (a queue overflowing for a while), and what routing and
//! transport need is how often a path is in one and for how long, more than a plain
//! loss rate. badabing probes in slots: an experiment starts in a slot with
//! probability p (so the time between experiments is geometric) and probes that slot
//! and the next, each probe a few packets back to back; a probe is congested if it
//! lost a packet or waited nearly as long as probes did around losses. The library is
//! the estimator, with no I/O and no clock: [`Estimator::next_window`] plans a batch
//! of slots, [`Estimator::handle`] takes its stamps, [`Estimator::estimate`] answers.

pub mod estimator;
pub mod params;
pub mod tool;

pub use estimator::{
    Config, ConfigError, Estimate, Estimator, Outcomes, Window, WindowResult, probe_time_ns,
};
