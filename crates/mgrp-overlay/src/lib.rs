//! The Measurement Overlay (the MGRP paper's §3.2 and §5): one `mgrp-overlay` per
//! node, beside that node's mgrpd, measures the paths into the node from its
//! neighbours continuously with pathload-rs, pathChirp, badabing or btc-rs over MGRP (or
//! plain UDP as the baseline), predicts what a bulk TCP transfer from each neighbour
//! will get, serves as the sending side for its neighbours' measurements, and keeps
//! the estimates for applications. How to run it, its API and its metrics are in the
//! repository's `docs/overlay.md`. What the API serves is `mgrp_views`; route control
//! is `mgrp_route`.
//!
//! Rooms, by job:
//! - [`config`]: the TOML file, checked (its `check` module is what every section
//!   shares).
//! - [`measure`]: when each link is measured, one file per method behind one trait,
//!   the runs, and the neighbours' measurements served.
//! - [`derive`]: the transfer-rate prediction, passive estimates and packet timing.
//! - [`state`]: what the threads and the API share; each link's history on disk.
//! - [`api`]: the HTTP API, `/metrics` and the status page.
//! - [`node`]: the node wired — its threads started and stopped.
//! - [`service`]: all of it on a runtime until a signal; [`cli`]: the command.
//!
//! No file imports in a circle (the workspace's `tests/module_graph.rs` holds it).
//! The rooms are not layered as wholes: `config` reads `measure`'s method registry,
//! `Gives` and schedule timing; `derive`'s pure modules read `config` and `Gives`;
//! `state` reads `config`, `derive` and `measure`'s schedule; and the thread bodies
//! in `measure` (runner, traffic, serve) and `derive` (the neighbours' poll) read
//! `state`.

pub mod api;
pub mod cli;
pub mod config;
pub mod derive;
pub mod measure;
pub mod node;
pub mod service;
pub mod state;
