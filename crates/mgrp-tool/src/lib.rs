//! What a measurement tool needs besides its estimator: how probes travel and how the
//! two ends talk, the sender every tool shares, and the command line. The workspace's
//! tools (pathload-rs, pathchirp-rs, badabing-rs, btc-rs) are built on it, and so can
//! a tool outside it: `examples/owd-jitter` in the repository is one, in one file.
//!
//! A tool is a sans-IO estimator plus three things from here:
//!
//! - its probe kinds, chosen with [`kind::tool`];
//! - what it measures, a [`session::Method`]: which [`Batch`] to ask for next (runs of
//!   equal probes with a gap before each: a pathload stream, a chirp, a train) and
//!   what to make of the answer, an [`Exchange`] with every probe's send and receive
//!   stamps ([`Arrival`]) and, over MGRP, the application bytes that rode;
//!   [`session::drive`] runs it over a [`Session`] until it is done, the caller stops
//!   it, or the sender goes away;
//! - its command line: [`cli::Tool`] (or the [`tool!`] macro) gives it `snd`, the
//!   shared sender ([`Server`]), and `rcv` with the tool's own flags and the shared
//!   ones ([`cli::PeerArgs`]); [`exit`] and [`json`] print its results the way
//!   the other tools do.
//!
//! The rest of the surface:
//!
//! - [`control`]: the control protocol the two ends speak, line by line ([`conn`]
//!   frames it); [`params`]: probe sizes for a transport.
//! - [`server`]: the sender as a library, with its limits per requester ([`budget`];
//!   [`requester`], `mgrp_core`'s: an IPv4 address or an IPv6 /64).
//! - [`sockdiag`]: this host's TCP connections to a peer, with the kernel's `tcp_info`
//!   ([`tcpinfo`] reads it), on [`netlink`]; a receiver asks the sender about the TCP
//!   flows it sends ([`sender_tcp`]).
//! - [`capture`]: the kernel's stamps of the application's own TCP segments, headers
//!   only; a receiver asks the sender for those it sent ([`sender_stamps`]).
//!
//! How batches travel (MGRP probe transactions through `mgrpd`, or plain UDP paced
//! against absolute deadlines) and the clocks beneath are private.

#![warn(missing_docs)]

pub mod budget;
pub mod capture;
pub mod cli;
pub mod conn;
pub mod control;
pub mod exit;
pub mod json;
pub mod kind;
pub mod netlink;
pub mod params;
#[cfg(feature = "plot")]
pub mod plot;
pub use mgrp_core::requester;
pub mod server;
pub mod session;
pub mod sockdiag;
mod sys;
pub mod tcpinfo;
mod transport;
mod udp_pacer;

pub use control::{Batch, ProbeSpec, Run, SentReport, Tag, Transport};
pub use server::{BUSY, Refusal, ServeEvent, ServeOptions, Server, serve_command};
pub use session::{
    BatchError, Exchange, MeasureError, SenderStamps, SenderTraffic, Session, SessionOptions,
    sender_stamps, sender_tcp, sender_traffic,
};
pub use transport::{Arrival, MAX_QUEUED_PROBES, Seen};
