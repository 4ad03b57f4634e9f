//! The paper's experiments on the namespace testbed: a run of a tool with and
//! without MGRP while applications share the bottleneck ([`experiment`]), the
//! accounting of who used the link over it, the plots that draw the results
//! ([`plot`]), and [`pktrain`], the paper's synthetic packet-train tool.
//!
//! The testbed's hosts and the paper's topology live in `mgrp-testbed`; the
//! `demo` and `reproduce` examples of the workspace's root package drive these.

pub mod experiment;
pub mod medianet;
pub mod meshsim;
pub mod pktrain;
pub mod plot;
