//! The `pathload-rs` tool itself: `snd` serves measurements over MGRP or plain UDP,
//! `rcv` drives one and prints the range. The binary is a call to [`main_with_args`];
//! programs that embed the tool (the workspace's demo, which runs it inside network
//! namespaces as itself) call it too. Programs that measure for themselves (the
//! Measurement Overlay) call [`measure`] and serve with [`Server`].

mod cli;
mod conn;
mod output;
mod plot;
mod receiver;
mod sender;
mod sys;
mod transport;

pub use receiver::{
    MeasureError, MeasureOptions, Measurement, Progress, SenderTraffic, measure, sender_traffic,
};
pub use sender::{BUSY, ServeEvent, ServeOptions, Server};

use std::ffi::OsString;

use clap::Parser;

/// Exit codes of `rcv`.
mod exit {
    use crate::StopReason;

    /// Any other error.
    pub(crate) const ERROR: i32 = 1;
    /// A time or fleet limit ended the run before it converged: no estimate, the
    /// bounds seen so far were printed as bounds.
    pub(crate) const LIMIT: i32 = 3;
    /// The available bandwidth is above the highest rate the sender reaches, or the
    /// rates asked for could not be sent.
    pub(crate) const RATE: i32 = 4;
    /// No usable measurement (no back-to-back train came through, or too few usable
    /// streams).
    pub(crate) const UNUSABLE: i32 = 5;
    /// The sender could not be reached or went away.
    pub(crate) const PEER: i32 = 6;
    /// The sender is there but could not send what it was asked for (its mgrpd
    /// refused the train, or a limit there): its log says why.
    pub(crate) const SENDER: i32 = 7;
    /// Interrupted by a signal.
    pub(crate) const INTERRUPTED: i32 = 130;

    /// The exit code for how a run ended.
    pub(crate) fn for_reason(r: StopReason) -> i32 {
        match r {
            StopReason::UserResolution | StopReason::GreyResolution => 0,
            StopReason::TimeLimit | StopReason::FleetLimit => LIMIT,
            StopReason::AboveMaxRate | StopReason::RateUnreachable => RATE,
            StopReason::Unusable | StopReason::NoInitialRate => UNUSABLE,
            StopReason::Interrupted => INTERRUPTED,
        }
    }
}

/// Runs the tool with `args` (the program name first, as `std::env::args_os` gives
/// them) and returns its exit code. Parse errors and `--help` print and exit the
/// process, as a command-line tool does.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = cli::Cli::parse_from(args);
    sys::catch_interrupts();
    match cli.role {
        cli::Role::Snd(args) => match sender::run(&args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("pathload-rs: {e:#}");
                exit::ERROR
            }
        },
        cli::Role::Rcv(args) => receiver::run(&args),
    }
}
