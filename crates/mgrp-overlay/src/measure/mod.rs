//! Measuring the links into this node, and serving the neighbours' measurements of
//! the paths out of it.
//!
//! - [`schedule`]: when each link is measured, with no I/O and no clock.
//! - [`method`]: what a method is ([`method::MethodRun`]); one file per method:
//!   [`pathload`], [`pathchirp`], [`badabing`], [`btc`]; [`registry`] lists them.
//! - [`runner`]: the scheduler's thread and each run; [`traffic`]: links waiting for
//!   traffic to ride; [`serve`]: the neighbours' measurements served.

pub mod badabing;
pub mod btc;
pub mod method;
pub mod pathchirp;
pub mod pathload;
pub mod registry;
pub mod runner;
pub mod schedule;
pub mod serve;
pub mod traffic;
