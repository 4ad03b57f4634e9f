//! What measuring the links into this node is, without I/O of its own: when each
//! link is measured and what each method does with a run.
//!
//! - [`schedule`]: when each link is measured, with no I/O and no clock.
//! - [`method`]: what a method is ([`method::MethodRun`]); one file per method:
//!   [`pathload`], [`pathchirp`], [`badabing`], [`btc`]; [`registry`] lists them.
//!
//! Nothing here runs a thread or reads the node's state: the threads that drive the
//! methods are in `crate::threads`.

pub mod badabing;
pub mod btc;
pub mod method;
pub mod pathchirp;
pub mod pathload;
pub mod registry;
pub mod schedule;
