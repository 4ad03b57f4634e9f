//! The Measurement Overlay (the MGRP paper's §3.2 and §5): one `mgrp-overlay` per
//! node, beside that node's mgrpd, measures the paths into the node from its
//! neighbours continuously with pathload-rs, pathChirp, badabing or btc-rs over MGRP (or
//! plain UDP as the baseline), predicts what a bulk TCP transfer from each neighbour
//! will get, serves as the sending side for its neighbours' measurements, and keeps
//! the estimates for applications. How to run it, its API and its metrics are in the
//! repository's `docs/overlay.md`.
//!
//! - [`config`]: the TOML file, checked.
//! - [`schedule`]: when each link is measured, with no I/O and no clock.
//! - [`btc`]: the transfer-rate prediction per neighbour from the runs and the
//!   neighbour's kernel.
//! - [`passive`]: estimates from the applications' own TCP flows, which stand in
//!   for active runs while they flow.
//! - `store`: each link's history on disk, across restarts.
//! - [`node`]: the node running — its servers, its scheduler's thread, its
//!   measurements — and the state the API reads.
//! - [`http`]: the HTTP API, `/metrics` ([`metrics`]) and the status page ([`page`]).
//! - [`service`]: all of it on a runtime until a signal; [`cli`]: the command.

pub mod btc;
pub mod cli;
pub mod config;
pub mod http;
pub mod metrics;
pub mod node;
pub mod page;
pub mod passive;
pub mod schedule;
pub mod service;
mod store;
pub mod timing;
pub mod tls;
