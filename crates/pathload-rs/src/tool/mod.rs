//! The `pathload-rs` tool itself: `snd` serves measurements over MGRP or plain UDP,
//! `rcv` drives one and prints the range. The binary is a call to [`main_with_args`];
//! programs that embed the tool (the workspace's demo, which runs it inside network
//! namespaces as itself) call it too. Programs that measure for themselves (the
//! Measurement Overlay) call [`measure`] and serve with [`Server`].

mod cli;
mod output;
mod plot;
mod rcv;
mod receiver;

pub use mgrp_tool::{
    BUSY, MeasureError, Refusal, SenderTraffic, ServeEvent, ServeOptions, Server, sender_traffic,
};
pub use receiver::{MeasureOptions, Measurement, Progress, measure};

use mgrp_tool::exit;

use crate::StopReason;

/// The tool's name, in the sender's log and in messages.
pub(crate) const TOOL: &str = "pathload-rs";

/// pathload's two kinds of probe batch, in the probe header (`mgrp_tool::kind`).
pub(crate) mod kind {
    /// A back-to-back train.
    pub(crate) const TRAIN: u8 = mgrp_tool::kind::tool(0);
    /// A stream at one rate.
    pub(crate) const STREAM: u8 = mgrp_tool::kind::tool(1);
}

/// The exit code for how a run ended.
pub(crate) fn exit_for_reason(r: StopReason) -> i32 {
    match r {
        StopReason::UserResolution | StopReason::GreyResolution => 0,
        StopReason::TimeLimit | StopReason::FleetLimit => exit::LIMIT,
        StopReason::AboveMaxRate | StopReason::RateUnreachable => exit::RATE,
        StopReason::Unusable | StopReason::NoInitialRate => exit::UNUSABLE,
        StopReason::Interrupted => exit::INTERRUPTED,
    }
}

mgrp_tool::tool!(TOOL, cli::Cli, cli::RcvArgs, rcv::run);
