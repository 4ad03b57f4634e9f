//! The `btc-rs` tool: `snd` serves measurements (the workspace's shared sender, which
//! serves every tool's receivers), `rcv` measures the path from a sender: the narrow
//! link's capacity from packet bunches, then squeezed pairs at that capacity, and
//! prints both with the pairs' histograms. Programs that measure for themselves call
//! [`measure`].

mod cli;
mod plot;
mod rcv;
mod receiver;

pub use plot::histograms;
pub use receiver::{MeasureOptions, Measurement, measure};

/// The tool's name, in the sender's log and in messages.
pub(crate) const TOOL: &str = "btc-rs";

/// The probe header's kind for a capacity bunch (`mgrp_tool::kind`).
pub const BUNCH_KIND: u8 = mgrp_tool::kind::tool(4);
/// The probe header's kind for a batch of squeezed pairs.
pub const PAIRS_KIND: u8 = mgrp_tool::kind::tool(5);

mgrp_tool::tool!(TOOL, cli::Cli, cli::RcvArgs, rcv::run);
