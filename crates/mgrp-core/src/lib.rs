//! The Measurement Manager Protocol (MGRP) without I/O and without clocks.
//!
//! Measurement tools hand MGRP whole probe trains; MGRP fills the probes' padding with
//! application packets bound for the same destination ("riders"), sends the train with
//! exact gaps, and on the far side takes the riders out again. This crate holds every
//! piece of that protocol that can be expressed as pure functions and state machines,
//! so it can be tested exhaustively without root, sockets or a real clock:
//!
//! - [`wire`]: the MGRP packet format, a checked zero-copy view plus a parsed
//!   representation that emits into a caller's buffer.
//! - [`planner`]: which rider bytes ride in which probe, when held riders must leave
//!   unchanged, and the per-transaction report, driven by `handle_*` / `poll_*` calls.
//! - [`endpoint`]: the sending side for all destinations at once: planners, the trains
//!   of every client and their turns, routes on demand, reports, the next deadline.
//! - [`reassembly`]: rebuilding riders from chunks that arrive in any order, duplicated
//!   or not at all, within bounded memory.
//! - [`stats`]: what a tool learns about its transaction, and the planner's counters.
//! - [`api`]: the messages of the daemon's Unix-socket API.
//! - [`auth`]: keyed tags and replay protection in the packet trailer.
//! - [`peers`]: which hosts MGRP packets are taken from, and which riders may be
//!   written into this host.
//! - [`requester`]: who a host counts its limits for (an IPv4 address, an IPv6 /64).
//! - [`ratelimit`]: token buckets for the probes and bytes users may submit.
//! - [`traffic`]: how much application traffic goes to each peer, and how fast.
//! - [`exposition`]: metrics in the format a Prometheus scraper asks for.
//! - [`segment`]: a captured TCP segment's headers, for passive packet timing.
//! - [`heartbeat`]: heartbeats between overlay members: a hop's liveness, round trip
//!   and forward loss.
//! - [`tcp`]: what a bulk TCP flow gets from a path's loss and round trip (PFTK).
//! - [`schedule`]: absolute departure deadlines of a train and the summary of how well
//!   a sent train kept them.
//!
//! Time always comes in as an argument: [`MonoTime`] for scheduling, [`WallTime`] for
//! the sender and receiver stamps that end up in probes.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod draw;
pub mod endpoint;
pub mod exposition;
pub mod heartbeat;
pub mod ip;
pub mod pair;
pub mod path;
pub mod peers;
pub mod planner;
pub mod ratelimit;
pub mod reassembly;
pub mod requester;
pub mod schedule;
pub mod segment;
pub mod stats;
pub mod tcp;
mod time;
pub mod traffic;
pub mod wire;

pub use time::{MonoTime, WallTime, parse_duration, parse_duration_within};
