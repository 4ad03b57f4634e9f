//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use crate::params::{DEFAULT_MAX_FLEETS, DEFAULT_MAX_SECONDS, STREAM_DURATION_NS};
use clap::{Args, Parser, ValueEnum};
use mgrp_tool::cli::{Millis, PeerArgs, Role, Seconds};

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
    /// Stop after this long (seconds, or 90s, 2m); without convergence there is no
    /// estimate (exit 3).
    #[arg(long, value_name = "DURATION", default_value_t = Seconds(Duration::from_secs(DEFAULT_MAX_SECONDS)))]
    pub(crate) max_time: Seconds,
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
    /// How long each stream lasts unless --packets fixes its length (milliseconds, or
    /// 100ms, 0.5s), 5 ms to 1 s. Longer streams read a token-bucket shaper's rate
    /// rather than its burst, at the cost of more probe bytes and longer runs.
    #[arg(long, value_name = "DURATION", default_value_t = Millis(Duration::from_nanos(STREAM_DURATION_NS)), value_parser = stream_duration)]
    pub(crate) stream_duration: Millis,
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

/// `--stream-duration`: 5 ms to 1 s.
fn stream_duration(text: &str) -> Result<Millis, String> {
    let d: Millis = text.parse()?;
    if (Duration::from_millis(5)..=Duration::from_secs(1)).contains(&d.0) {
        Ok(d)
    } else {
        Err(format!("{d} is not within 5ms to 1s"))
    }
}

impl RcvArgs {
    /// The measurement these flags ask for.
    pub(crate) fn options(&self) -> MeasureOptions {
        MeasureOptions {
            session: mgrp_tool::SessionOptions {
                // Its probes load the path it measures.
                exclusive: true,
                ..self.peer.options(TOOL)
            },
            mode: match self.mode {
                ModeArg::Slow => Mode::Slow,
                ModeArg::Fast => Mode::Fast,
            },
            max_time: self.max_time.0,
            max_fleets: self.max_fleets,
            resolution: self.resolution,
            packets: self.packets,
            stream_duration: self.stream_duration.0,
            full_fleets: self.full_fleets,
            bisect: self.bisect,
        }
    }
}
