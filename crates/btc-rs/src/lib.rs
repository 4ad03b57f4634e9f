//! `btc-rs`: what a bulk TCP transfer will get on a path (its bulk transfer
//! capacity, BTC), after Strauss and Kaashoek's comparison of available bandwidth and
//! TCP throughput on the RON testbed. The library has no I/O and no clock:
//!
//! - [`capacity`]: the narrow link's capacity from bunches of large back-to-back
//!   packets (the dispersion of consecutive packets, filtered by the median);
//! - [`squeezed`]: squeezed pairs, pairs of small probes spaced by half the
//!   transmission time of 500 and of 1500 bytes at that capacity, whose received gaps
//!   tell whether queues form at the narrow link or at a faster link elsewhere;
//! - [`model`]: predictions from those and from the other tools' estimates;
//! - [`history`]: an earlier transfer on the path as a prediction, weighed by its age
//!   and by whether the probes say conditions changed since;
//! - [`tcpinfo`]: what the kernel says of a live TCP connection (`tcp_info`), from
//!   `mgrp-tool`, which the senders answer queries with.
//!
//! The `btc-rs` binary ([`tool`]) measures capacity and squeezed pairs over
//! `mgrp-client` (probe transactions through `mgrpd`) or plain UDP, through
//! `mgrp-tool`.

pub mod capacity;
pub mod history;
pub mod model;
pub mod squeezed;
pub mod tool;

pub use mgrp_tool::tcpinfo;
