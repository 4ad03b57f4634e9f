//! The `pathchirp-rs` tool: `snd` serves measurements (the workspace's shared sender,
//! which serves every tool's receivers), `rcv` chirps from a sender and prints the
//! estimates as they come. Programs that measure for themselves (the Measurement
//! Overlay) call [`measure`].

mod cli;
mod plot;
mod rcv;
mod receiver;

pub use receiver::{MeasureOptions, Measurement, Point, Progress, measure};

use std::ffi::OsString;

/// The tool's name, in the sender's log and in messages.
pub(crate) const TOOL: &str = "pathchirp-rs";

/// The probe header's kind for a chirp (`mgrp_tool::kind`).
pub const CHIRP_KIND: u8 = mgrp_tool::kind::CHIRP;

/// The command line `pathchirp-rs` reads, with every subcommand and flag (for help texts and
/// the guides' checks).
pub fn command() -> clap::Command {
    <cli::Cli as clap::CommandFactory>::command()
}

/// Runs the tool with `args` (the program name first) and returns its exit code.
/// Parse errors and `--help` print and exit the process, as a command-line tool does.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match mgrp_tool::cli::parse::<cli::Cli, _, _>(TOOL, args) {
        Ok(cli) => cli.role.run(TOOL, rcv::run),
        Err(status) => status,
    }
}
