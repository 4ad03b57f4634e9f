//! The Measurement Overlay (the MGRP paper's §3.2 and §5): one `mgrp-overlay` per
//! node, beside that node's mgrpd, measures the paths into the node from its
//! neighbours continuously with pathload-rs, pathChirp, badabing or btc-rs over MGRP (or
//! plain UDP as the baseline), predicts what a bulk TCP transfer from each neighbour
//! will get, serves as the sending side for its neighbours' measurements, and keeps
//! the estimates for applications. How to run it, its API and its metrics are in the
//! repository's `docs/overlay.md`. What the API serves is `mgrp_views`; route control
//! is `mgrp_route`.
//!
//! Rooms, by level: each imports only the rooms above it in this list (the
//! workspace's `tests/module_graph.rs` holds it).
//! - [`measure`]: when each link is measured (the schedule, no I/O and no clock), and
//!   one file per method behind one trait, with their registry.
//! - [`config`]: the TOML file, checked (its `check` module is what every section
//!   shares); it names methods and schedules.
//! - [`derive`](mod@derive): the transfer-rate prediction, passive estimates and packet timing,
//!   from runs and flows, no I/O.
//! - [`features`]: what the configuration asks of the process (sockets, capabilities,
//!   commands), checked at start.
//! - [`state`]: what the threads and the API share; each link's history on disk.
//! - [`threads`]: the node's threads that run the methods, serve the neighbours'
//!   measurements, watch the traffic and poll the neighbours, writing into the state.
//! - [`api`]: the HTTP API, `/metrics` and the status page.
//! - [`node`]: the node wired — its threads started and stopped.
//! - [`service`]: all of it on a runtime until a signal; [`cli`]: the command.

pub mod api;
pub mod cli;
pub mod config;
pub mod derive;
pub mod features;
pub mod matrix;
pub mod measure;
pub mod mesh;
pub mod node;
pub mod service;
pub mod state;
pub mod threads;
