//! What the workspace's measurement tools share (pathload-rs, pathChirp, badabing):
//! how probes travel and how the two ends talk, so that a tool is a sans-IO estimator
//! plus a small driver.
//!
//! - [`control`]: the tool-neutral control protocol. The receiver asks for a
//!   [`Batch`] of probes (runs of equal probes with a gap before each: a pathload
//!   stream, a chirp, a badabing experiment) and gets a [`SentReport`] with every
//!   departure stamp and, over MGRP, the application bytes that rode.
//! - [`transport`]: batches over MGRP (probe transactions through `mgrpd` with
//!   `mgrp-client`) or over plain UDP paced against absolute deadlines, and the
//!   listener that hands the receiver each probe with both stamps.
//! - [`server`]: the sender as a library ([`Server`]) and as every tool's `snd`.
//! - [`session`]: the receiver's side, [`Session`]: connect, time the round trip,
//!   then exchange batches one at a time; [`session::drive`] is the loop every
//!   receiver runs, with what a tool measures as its [`session::Method`].
//! - [`sockdiag`]: this host's TCP connections to a peer, with the kernel's `tcp_info`
//!   ([`tcpinfo`] reads it), on [`netlink`], the walk over netlink messages and
//!   attributes; a sender answers a receiver's question about the TCP flows it
//!   sends to it ([`sender_tcp`]).
//! - [`capture`]: the kernel's stamps of the application's own TCP segments to or
//!   from a peer, headers only; a sender hands a receiver those it sent to it
//!   ([`sender_stamps`]), for passive packet timing.
//! - [`requester`] (`mgrp_core`'s, here for the tools): who a sender counts its limits for (an IPv4 address, an IPv6
//!   /64); [`budget`]: what each may take.
//! - [`cli`], [`exit`], [`sys`]: the flags, exit codes, clocks and interrupt flag
//!   every tool's command line uses ([`cli::Tool`], made by [`tool!`]); [`kind`]: the probe kinds a tool chooses for itself.

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
pub mod sys;
pub mod tcpinfo;
pub mod transport;
pub mod udp_pacer;

pub use control::{Batch, ProbeSpec, Run, SentReport, Tag, Transport};
pub use server::{BUSY, ServeEvent, ServeOptions, Server, serve_command};
pub use session::{
    BatchError, Exchange, MeasureError, SenderStamps, SenderTraffic, Session, SessionOptions,
    sender_stamps, sender_tcp, sender_traffic,
};
pub use transport::{Arrival, Seen};
