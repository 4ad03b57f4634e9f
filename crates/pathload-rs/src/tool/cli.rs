//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use crate::params::{DEFAULT_MAX_FLEETS, DEFAULT_MAX_SECONDS, STREAM_DURATION_NS};
use clap::{Args, Parser, ValueEnum};
use mgrp_tool::cli::{PeerArgs, Role};

use crate::Mode;
use crate::tool::TOOL;
use crate::tool::receiver::MeasureOptions;

/// pathload's available-bandwidth estimate (SLoPS), over MGRP or plain UDP.
///
/// Run `pathload-rs snd` on the sending host and `pathload-rs rcv --sender HOST` on the
/// receiving one; the receiver drives the measurement and prints the range. Over MGRP
/// (the default) both hosts run mgrpd, and application traffic routed through it rides
/// in the probes; the range is then adjusted for that traffic (MGRP paper §2.4).
///
/// Exit status of `rcv`: 0 range found; any other status means no range (the bounds
/// seen so far are printed as bounds): 3 time or fleet limit reached; 4 rate limit
/// (available bandwidth above the highest rate the sender reaches, printed as a lower
/// bound, or rates that could not be sent); 5 no usable measurement; 6 the sender
/// could not be reached or went away; 7 the sender turned this receiver away (busy) or
/// could not send what it was asked for (its log says why); 1 any other error; 2 bad
/// arguments.
///
/// The guide: docs/pathload-rs.md in the source repository.
#[derive(Debug, Parser)]
#[command(name = "pathload-rs", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Role<RcvArgs>,
}

/// Idle between streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// The original's idle: 9 stream durations (pSLOW).
    Slow,
    /// One round trip (pFAST).
    Fast,
}

/// Measure the path from a sender to this host and print the range.
#[derive(Debug, Args)]
pub(crate) struct RcvArgs {
    #[command(flatten)]
    pub(crate) peer: PeerArgs,
    /// Idle between streams.
    #[arg(long, value_enum, default_value_t = ModeArg::Slow)]
    pub(crate) mode: ModeArg,
    /// Stop after this many seconds; without convergence there is no estimate (exit 3).
    #[arg(long, default_value_t = DEFAULT_MAX_SECONDS)]
    pub(crate) max_time: u64,
    /// Stop after this many fleets; without convergence there is no estimate (exit 3).
    #[arg(long, default_value_t = DEFAULT_MAX_FLEETS)]
    pub(crate) max_fleets: u32,
    /// Resolution ω in Mbit/s (default: 2 % of the initial rate); pathload's -w.
    #[arg(long, short = 'w')]
    pub(crate) resolution: Option<f64>,
    /// Packets per stream, fixed (pathload's K = 100). Default: as many as last
    /// --stream-duration at each stream's rate, at least 100.
    #[arg(long, value_parser = clap::value_parser!(u32).range(40..=3000))]
    pub(crate) packets: Option<u32>,
    /// How long each stream lasts unless --packets fixes its length, in ms. Longer
    /// streams read a token-bucket shaper's rate rather than its burst, at the cost of
    /// more probe bytes and longer runs.
    #[arg(long, value_name = "MS", default_value_t = STREAM_DURATION_NS / 1_000_000, value_parser = clap::value_parser!(u64).range(5..=1000))]
    pub(crate) stream_duration: u64,
    /// Send every stream of a fleet even when its verdict is already certain.
    #[arg(long)]
    pub(crate) full_fleets: bool,
    /// Search by bisection alone, as the original pathload. By default an increasing
    /// fleet's delay growth aims the next fleets just below and above the rate it
    /// points to, which usually converges in fewer fleets (bounds still come only from
    /// fleet verdicts).
    #[arg(long)]
    pub(crate) bisect: bool,
    /// Print JSON lines on standard output: one per fleet, then the result.
    #[arg(long)]
    pub(crate) json: bool,
    /// Draw each fleet's rate and verdict and the converging range into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// Per-stream PCT/PDT and the bounds after every fleet.
    #[arg(short, long)]
    pub(crate) verbose: bool,
}

impl RcvArgs {
    /// The measurement these flags ask for.
    pub(crate) fn options(&self) -> MeasureOptions {
        MeasureOptions {
            session: self.peer.options(TOOL),
            mode: match self.mode {
                ModeArg::Slow => Mode::Slow,
                ModeArg::Fast => Mode::Fast,
            },
            max_time: Duration::from_secs(self.max_time),
            max_fleets: self.max_fleets,
            resolution: self.resolution,
            packets: self.packets,
            stream_duration: Duration::from_millis(self.stream_duration),
            full_fleets: self.full_fleets,
            bisect: self.bisect,
        }
    }
}
