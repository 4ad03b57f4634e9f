//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use mgrp_tool::cli::{PeerArgs, Role, Seconds};

use crate::analysis::{Onset, Params};
use crate::params;
use crate::tool::TOOL;
use crate::tool::receiver::MeasureOptions;
use crate::{Config, ConfigError};

/// pathChirp's available-bandwidth estimate from exponentially spaced chirps, over
/// MGRP or plain UDP.
///
/// Run `pathchirp-rs snd` (or any of the workspace's tools' `snd`) on the sending host
/// and `pathchirp-rs rcv --sender HOST` on the receiving one. The receiver asks for one
/// chirp at a time and prints the smoothed estimate after every chirp once n chirps
/// have given one; it runs for --duration or until interrupted. Over MGRP (the
/// default) application traffic routed through mgrpd rides in the chirps and the
/// estimate is also given less that traffic (MGRP paper §2.4).
///
/// Exit status of `rcv`: 0 at least one estimate was published; 5 none (every chirp
/// was discarded, or the run was too short for n chirps); 6 the sender could not be
/// reached or went away; 7 the sender turned this receiver away (busy) or could not
/// send a chirp (its log says why); 1 any other error; 2 bad arguments.
///
/// The guide: docs/pathchirp-rs.md in the source repository.
#[derive(Debug, Parser)]
#[command(name = "pathchirp-rs", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Role<RcvArgs>,
}

/// Where the final queue's onset is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnsetArg {
    /// The send rate where the delay starts to rise (pathChirp 2.3).
    FirstRise,
    /// The lower of that and the rate the first queued probes came out at.
    Output,
    /// The lower of the first rise and what the chirp's saturated tail leaves over
    /// (capacity less the cross traffic served during it).
    Tail,
}

/// Chirp from a sender to this host and print the estimates.
#[derive(Debug, Args)]
pub(crate) struct RcvArgs {
    #[command(flatten)]
    pub(crate) peer: PeerArgs,
    /// How long to measure (seconds, or 10m, 1h 30m; pathChirp 2.3's -t).
    #[arg(long, short = 't', value_name = "DURATION", default_value_t = Seconds(Duration::from_secs(600)))]
    pub(crate) duration: Seconds,
    /// Lowest rate inside a chirp, Mbit/s (-l).
    #[arg(long, short = 'l', default_value_t = params::LOW_BPS / 1e6)]
    pub(crate) low: f64,
    /// Highest rate inside a chirp, Mbit/s (-u).
    #[arg(long, short = 'u', default_value_t = params::HIGH_BPS / 1e6)]
    pub(crate) high: f64,
    /// Probe size, IP bytes (pathChirp 2.3's -p counts 28 bytes fewer).
    #[arg(long, short = 'p', default_value_t = params::SIZE)]
    pub(crate) size: u32,
    /// Spread factor γ: each gap is the previous one divided by it (at least 1.05).
    #[arg(long, default_value_t = params::SPREAD)]
    pub(crate) spread: f64,
    /// Average probing rate, Mbit/s of IP bytes (-a): sets the time between chirps.
    #[arg(long, short = 'a', default_value_t = params::AVG_BPS / 1e6)]
    pub(crate) avg: f64,
    /// Per-chirp estimates averaged into each published one (-n).
    #[arg(long, short = 'n', default_value_t = params::SMOOTH)]
    pub(crate) smooth: usize,
    /// Decrease factor F of the excursion test, above 1 (-d).
    #[arg(long, short = 'd', default_value_t = params::DECREASE)]
    pub(crate) decrease: f64,
    /// Busy-period threshold L: packets an excursion must span, above 2 (-b).
    #[arg(long, short = 'b', default_value_t = params::BUSY_PERIOD)]
    pub(crate) busy_period: usize,
    /// How the rate where the final queue begins is read.
    #[arg(long, value_enum, default_value_t = OnsetArg::Tail)]
    pub(crate) onset: OnsetArg,
    /// Keep the probing range fixed instead of moving it when the estimate sits at one
    /// of its ends.
    #[arg(long)]
    pub(crate) no_adapt: bool,
    /// Print JSON lines on standard output: one per chirp, then the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Draw the per-chirp and smoothed estimates over time into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// A line for every chirp, discarded ones with their reason.
    #[arg(short, long)]
    pub(crate) verbose: bool,
}

impl RcvArgs {
    /// The measurement these flags ask for, or what is wrong with them.
    pub(crate) fn options(&self) -> Result<MeasureOptions, ConfigError> {
        if self.duration.0.is_zero() {
            return Err(ConfigError("--duration must be longer than 0".into()));
        }
        let config = Config {
            size: self.size,
            spread: self.spread,
            low_bps: self.low * 1e6,
            high_bps: self.high * 1e6,
            avg_bps: self.avg * 1e6,
            smooth: self.smooth,
            analysis: Params {
                decrease: self.decrease,
                busy_period: self.busy_period,
                onset: match self.onset {
                    OnsetArg::FirstRise => Onset::FirstRise,
                    OnsetArg::Output => Onset::Output,
                    OnsetArg::Tail => Onset::Tail,
                },
                ..Params::default()
            },
            adapt: !self.no_adapt,
        };
        config.check()?;
        Ok(MeasureOptions {
            session: self.peer.options(TOOL),
            config,
            duration: self.duration.0,
        })
    }
}
