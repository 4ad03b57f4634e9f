//! The `pathchirp-rs` tool: `snd` serves measurements (the workspace's shared sender,
//! which serves every tool's receivers), `rcv` chirps from a sender and prints the
//! estimates as they come. Programs that measure for themselves (the Measurement
//! Overlay) call [`measure`].

mod cli;
mod plot;
mod rcv;
mod receiver;

pub use receiver::{MeasureOptions, Measurement, Point, Progress, measure};

/// The tool's name, in the sender's log and in messages.
pub(crate) const TOOL: &str = "pathchirp-rs";

/// The probe header's kind for a chirp (`mgrp_tool::kind`).
pub const CHIRP_KIND: u8 = mgrp_tool::kind::tool(2);

mgrp_tool::tool!(TOOL, cli::Cli, cli::RcvArgs, rcv::run);
