//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser};
use mgrp_tool::cli::{Millis, PeerArgs, Role, Seconds};

use crate::params;
use crate::tool::TOOL;
use crate::tool::receiver::MeasureOptions;
use crate::{Config, ConfigError};

/// badabing's loss-episode frequency and duration from geometric probing in slots,
/// over MGRP or plain UDP.
///
/// Run `badabing-rs snd` (or any of the workspace's tools' `snd`) on the sending host
/// and `badabing-rs rcv --sender HOST` on the receiving one. Time is cut into slots of
/// --slot ms; an experiment starts in a slot with probability --p and probes that slot
/// and the next with --packets back-to-back packets each. The receiver prints the
/// estimates every --report seconds and at the end: the share of time the path is in
/// a loss episode (frequency), the episodes' mean duration, the experiments' outcome
/// counts with 95 % confidence half-widths, and the plain loss rate.
///
/// Exit status of `rcv`: 0 estimates printed; 5 no experiment came back; 6 the sender
/// could not be reached or went away; 7 the sender turned this receiver away (busy) or
/// could not send (its log says why); 1 any other error; 2 bad arguments.
///
/// The guide: docs/badabing-rs.md in the source repository.
#[derive(Debug, Parser)]
#[command(name = "badabing-rs", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Role<RcvArgs>,
}

/// Probe from a sender to this host and print the loss-episode estimates.
#[derive(Debug, Args)]
pub(crate) struct RcvArgs {
    #[command(flatten)]
    pub(crate) peer: PeerArgs,
    /// How long to measure (seconds, or 90s, 10m).
    #[arg(long, short = 't', value_name = "DURATION", default_value_t = Seconds(Duration::from_secs(60)))]
    pub(crate) duration: Seconds,
    /// Print the estimates this often (seconds, or 30s, 1m; 0: only at the end).
    #[arg(long, value_name = "DURATION", default_value_t = Seconds(Duration::from_secs(10)))]
    pub(crate) report: Seconds,
    /// Slot length Δ (milliseconds, or 5ms, 500us).
    #[arg(long, value_name = "DURATION", default_value_t = Millis(Duration::from_nanos(params::SLOT_NS)))]
    pub(crate) slot: Millis,
    /// Probability that an experiment starts in a slot, in (0, 1].
    #[arg(long, short = 'p', default_value_t = params::P)]
    pub(crate) p: f64,
    /// Consecutive slots an experiment probes (2: basic experiments).
    #[arg(long, default_value_t = params::SLOTS_PER_EXPERIMENT)]
    pub(crate) experiment_slots: u32,
    /// Packets per probe, back to back.
    #[arg(long, default_value_t = params::PACKETS)]
    pub(crate) packets: u32,
    /// IP bytes per packet.
    #[arg(long, default_value_t = params::SIZE)]
    pub(crate) size: u32,
    /// A probe that lost nothing is congested at (1 − α) of the largest queuing delay
    /// seen around losses.
    #[arg(long, default_value_t = params::ALPHA)]
    pub(crate) alpha: f64,
    /// "Around losses": within this long of a lost probe (milliseconds, or 50ms).
    #[arg(long, value_name = "DURATION", default_value_t = Millis(Duration::from_nanos(params::TAU_NS)))]
    pub(crate) tau: Millis,
    /// The slowest link rate on the path, Mbit/s: a slot must be longer than a probe
    /// takes there.
    #[arg(long, default_value_t = 1000.0)]
    pub(crate) line_rate: f64,
    /// Seed of the experiment process (default: from the clock).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Print JSON lines on standard output: one per report, then the result.
    #[arg(long)]
    pub(crate) json: bool,
}

fn ns(d: Millis, what: &str) -> Result<u64, ConfigError> {
    match u64::try_from(d.0.as_nanos()) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError(format!(
            "{what} {d} must be longer than 0 (and shorter than centuries)"
        ))),
    }
}

impl RcvArgs {
    /// The measurement these flags ask for, or what is wrong with them.
    pub(crate) fn options(&self) -> Result<MeasureOptions, ConfigError> {
        if self.duration.0.is_zero() {
            return Err(ConfigError("--duration must be longer than 0".into()));
        }
        if !(self.line_rate.is_finite() && self.line_rate > 0.0) {
            return Err(ConfigError(format!(
                "--line-rate {} must be a positive rate in Mbit/s",
                self.line_rate
            )));
        }
        let slot_ns = ns(self.slot, "--slot")?;
        // A batch spans at most a second (the longest gap a sender accepts).
        let window_slots = u32::try_from(mgrp_tool::control::MAX_GAP_NS / slot_ns)
            .unwrap_or(u32::MAX)
            .min(params::WINDOW_SLOTS)
            .max(self.experiment_slots);
        let config = Config {
            slot_ns,
            window_slots,
            p: self.p,
            slots_per_experiment: self.experiment_slots,
            packets: self.packets,
            size: self.size,
            alpha: self.alpha,
            tau_ns: ns(self.tau, "--tau")?,
            seed: self.seed.unwrap_or_else(|| mgrp_rt::wall_now().as_nanos()),
        };
        config.check(self.line_rate * 1e6)?;
        Ok(MeasureOptions {
            session: self.peer.options(TOOL),
            config,
            line_bps: self.line_rate * 1e6,
            duration: self.duration.0,
            report_every: (!self.report.0.is_zero()).then_some(self.report.0),
        })
    }
}
