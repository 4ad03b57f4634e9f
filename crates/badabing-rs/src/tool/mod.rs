//! The `badabing-rs` tool: `snd` serves measurements (the workspace's shared sender,
//! which serves every tool's receivers), `rcv` probes from a sender in slots and
//! prints the loss-episode estimates as they come. Programs that measure for
//! themselves (the Measurement Overlay) call [`measure`].

mod cli;
mod rcv;
mod receiver;

pub use receiver::{MeasureOptions, Measurement, Progress, measure};

/// The tool's name, in the sender's log and in messages.
pub(crate) const TOOL: &str = "badabing-rs";

/// The probe header's kind for a window of experiments (`mgrp_tool::kind`).
pub const WINDOW_KIND: u8 = mgrp_tool::kind::tool(3);

mgrp_tool::tool!(TOOL, cli::Cli, cli::RcvArgs, rcv::run);
