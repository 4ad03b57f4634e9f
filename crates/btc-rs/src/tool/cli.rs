//! Command-line arguments.

use clap::{Args, Parser};
use mgrp_tool::cli::{PeerArgs, Role};

use crate::capacity::{CapacityConfig, ConfigError};
use crate::tool::TOOL;
use crate::tool::receiver::MeasureOptions;

/// The narrow link's capacity and where the path's queues form (squeezed pairs), the
/// inputs of a prediction of what a bulk TCP transfer will get, over MGRP or plain
/// UDP.
///
/// Run `btc-rs snd` (or any of the workspace's tools' `snd`) on the sending host and
/// `btc-rs rcv --sender HOST` on the receiving one. The receiver asks for --bunches
/// bunches of --bunch-packets back-to-back packets of --bunch-size bytes and reads the
/// capacity from the median gap between consecutive packets; then --pairs pairs of
/// small probes spaced by half the transmission time of 500 and of 1500 bytes at that
/// capacity, and classes the path by the two histograms of received gaps: queues at
/// the narrow link (tight like narrow) or at a faster link (tight unlike narrow).
///
/// Exit status of `rcv`: 0 measured; 5 too few probes came back to say anything; 6 the
/// sender could not be reached or went away; 7 the sender turned this receiver away
/// (busy) or could not send; 1 any other error; 2 bad arguments.
///
/// The guide: docs/btc-rs.md in the source repository.
#[derive(Debug, Parser)]
#[command(name = "btc-rs", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Role<RcvArgs>,
}

/// Measure the path from a sender to this host.
#[derive(Debug, Args)]
pub(crate) struct RcvArgs {
    #[command(flatten)]
    pub(crate) peer: PeerArgs,
    /// Bunches sent for the capacity.
    #[arg(long, default_value_t = 2)]
    pub(crate) bunches: u32,
    /// Packets per bunch, back to back.
    #[arg(long, default_value_t = 30)]
    pub(crate) bunch_packets: u32,
    /// IP bytes per bunch packet.
    #[arg(long, default_value_t = 1400)]
    pub(crate) bunch_size: u32,
    /// Take this capacity (Mbit/s) instead of measuring it.
    #[arg(long)]
    pub(crate) capacity: Option<f64>,
    /// Squeezed pairs sent, half of each kind (0: none).
    #[arg(long, default_value_t = 1000)]
    pub(crate) pairs: u32,
    /// IP bytes per squeezed-pair probe.
    #[arg(long, default_value_t = 72)]
    pub(crate) pair_size: u32,
    /// The sender's pacing resolution, µs: no pair may be spaced closer.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) resolution: f64,
    /// Seed of the pairs' spacing.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Print JSON lines on standard output.
    #[arg(long)]
    pub(crate) json: bool,
    /// Draw the squeezed-pair histograms to this SVG file.
    #[arg(long)]
    pub(crate) plot: Option<std::path::PathBuf>,
}

impl RcvArgs {
    /// The measurement these flags ask for, or what is wrong with them.
    pub(crate) fn options(&self) -> Result<MeasureOptions, ConfigError> {
        let capacity = CapacityConfig {
            bunches: self.bunches,
            packets: self.bunch_packets,
            size: self.bunch_size,
        };
        capacity.check(
            mgrp_tool::control::MIN_PROBE_IP_BYTES,
            mgrp_tool::control::MAX_PROBE_IP_BYTES,
        )?;
        if let Some(c) = self.capacity
            && !(c.is_finite() && c > 0.0)
        {
            return Err(ConfigError(format!(
                "--capacity {c}: give the narrow link's rate in Mbit/s, a positive number"
            )));
        }
        if !(self.resolution.is_finite() && self.resolution > 0.0) {
            return Err(ConfigError(format!(
                "--resolution {} must be a positive number of µs",
                self.resolution
            )));
        }
        if !(mgrp_tool::control::MIN_PROBE_IP_BYTES..=mgrp_tool::control::MAX_PROBE_IP_BYTES)
            .contains(&self.pair_size)
        {
            return Err(ConfigError(format!(
                "--pair-size {}: use {} to {} bytes",
                self.pair_size,
                mgrp_tool::control::MIN_PROBE_IP_BYTES,
                mgrp_tool::control::MAX_PROBE_IP_BYTES
            )));
        }
        let resolution_ns = (self.resolution * 1e3).round() as u64;
        if let Some(c) = self.capacity
            && self.pairs > 0
        {
            crate::squeezed::SqueezeConfig {
                pairs: self.pairs,
                size: self.pair_size,
                resolution_ns,
                ..crate::squeezed::SqueezeConfig::new(c * 1e6)
            }
            .check(
                mgrp_tool::control::MIN_PROBE_IP_BYTES,
                mgrp_tool::control::MAX_PROBE_IP_BYTES,
            )?;
        }
        Ok(MeasureOptions {
            session: mgrp_tool::SessionOptions {
                // Its probes load the path it measures.
                exclusive: true,
                ..self.peer.options(TOOL)
            },
            capacity,
            capacity_bps: self.capacity.map(|c| c * 1e6),
            pairs: self.pairs,
            pair_size: self.pair_size,
            resolution_ns,
            seed: self.seed,
        })
    }
}
