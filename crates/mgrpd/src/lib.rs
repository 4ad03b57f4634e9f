//! `mgrpd`, the MGRP daemon. How to run it is in the repository's `docs/mgrpd.md`.
//!
//! Its job: read application packets ("riders") from a TUN device, hand them to the
//! `mgrp-core` endpoint, which plans them into the probe trains that tools submit;
//! pace those trains on a real-time thread onto a raw IP socket (protocol 253 by
//! default); and on the receiving side take riders out of probes, write them back
//! through the TUN and hand the probes, with kernel receive timestamps, to the tools
//! listening for them.
//!
//! The modules, from the bottom up (each imports only from those above it in this
//! list; the workspace's `tests/module_graph.rs` keeps it so, file by file too):
//!
//! - [`config`], [`sent`], [`sys`], [`lifecycle`]: the configuration, what was sent
//!   lately (for telling an ICMP error about it from a forged one), every raw system
//!   call, the shutdown signal.
//! - [`exchange`]: what the threads hand each other — the pacer's queues, requests,
//!   outputs, route events — and [`counters`], which read them.
//! - [`endpoints`], [`keyring`]: where UDP peers are, and the keys, counter and
//!   replay windows of keyed MGRP.
//! - [`net`], [`fastpath`], [`listeners`], [`liveness`], [`routes`]: the sockets,
//!   the link-layer fast path for super-packets, the tools waiting for probes, the
//!   error queues and peers' health, policy routing.
//! - The threads: [`tun_reader`], [`dispatcher`], [`pacer`] (owns the endpoint),
//!   [`receiver`]; [`trains`] and [`server`] (the Unix-socket API); [`demand`]
//!   (routes on demand).
//! - [`daemon`]: how the parts are put together and handed to the threads;
//!   [`tun`], [`privileges`], [`service`]: running it; [`metrics`]: the Prometheus
//!   exporter; [`loopback`]: the unprivileged in-process daemon for tests; [`cli`]:
//!   the command.

// Only `sys` may use `unsafe`, for the few calls nix does not cover.
#![deny(unsafe_code)]

pub mod cli;
pub mod config;
pub mod counters;
pub mod ctl;
pub mod daemon;
pub mod demand;
pub mod dispatcher;
pub mod endpoints;
pub mod exchange;
pub mod fastpath;
#[doc(hidden)]
pub mod fuzzing;
pub mod keepalive;
pub mod keyring;
pub mod lifecycle;
pub mod listeners;
pub mod liveness;
pub mod loopback;
pub mod metrics;
pub mod net;
pub mod pacer;
pub mod privileges;
pub mod receiver;
pub mod routes;
pub mod sent;
pub mod server;
pub mod service;
pub mod sys;
pub mod trains;
pub mod tun;
pub mod tun_reader;

pub use cli::main_with_args;
pub use loopback::LoopbackDaemon;
pub use service::run;
