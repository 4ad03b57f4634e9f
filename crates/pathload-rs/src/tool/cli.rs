//! Command-line arguments.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::control::{
    DEFAULT_CONTROL_PORT, DEFAULT_PROBE_PORT, DEFAULT_SENDER_PROBE_PORT, Transport,
};
use crate::params::{DEFAULT_MAX_FLEETS, DEFAULT_MAX_SECONDS, STREAM_DURATION_NS};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::Mode;
use crate::tool::receiver::MeasureOptions;
use crate::tool::sender::ServeOptions;

/// Where mgrpd listens unless told otherwise.
const DEFAULT_SOCKET: &str = mgrp_client::DEFAULT_SOCKET;

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
    pub(crate) role: Role,
}

/// The two roles.
#[derive(Debug, Subcommand)]
pub(crate) enum Role {
    /// Serve measurements: send the probes a receiver asks for.
    Snd(SndArgs),
    /// Measure the path from a sender to this host and print the range.
    Rcv(RcvArgs),
}

/// How probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportArg {
    /// Probe transactions through mgrpd; application traffic may ride in them.
    Mgrp,
    /// Plain UDP, paced by pathload-rs (the no-MGRP baseline).
    Udp,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Mgrp => Self::Mgrp,
            TransportArg::Udp => Self::Udp,
        }
    }
}

/// Idle between streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// The original's idle: 9 stream durations (pSLOW).
    Slow,
    /// One round trip (pFAST).
    Fast,
}

/// Arguments of `snd`.
#[derive(Debug, Args)]
pub(crate) struct SndArgs {
    /// Control port to listen on.
    #[arg(long, default_value_t = DEFAULT_CONTROL_PORT)]
    pub(crate) port: u16,
    /// Address to listen on (default: every address, IPv6 and IPv4).
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// How probes travel; the receiver must use the same.
    #[arg(long, value_enum, default_value_t = TransportArg::Mgrp)]
    transport: TransportArg,
    /// mgrpd's API socket (MGRP transport).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub(crate) socket: PathBuf,
    /// The sender's probe port (UDP source port; MGRP measurement port).
    #[arg(long, default_value_t = DEFAULT_SENDER_PROBE_PORT)]
    pub(crate) probe_port: u16,
    /// Keep serving measurements one after another instead of exiting after one.
    #[arg(long)]
    pub(crate) keep_serving: bool,
    /// Never let application traffic ride in the probes, whatever the receiver asks.
    #[arg(long)]
    pub(crate) no_piggyback: bool,
    /// Log refused requests.
    #[arg(short, long)]
    pub(crate) verbose: bool,
}

impl SndArgs {
    /// How these flags ask to serve.
    pub(crate) fn options(&self) -> ServeOptions {
        ServeOptions {
            port: self.port,
            bind: self.bind,
            transport: self.transport.into(),
            socket: self.socket.clone(),
            probe_port: self.probe_port,
            piggyback: !self.no_piggyback,
        }
    }
}

/// Arguments of `rcv`.
#[derive(Debug, Args)]
pub(crate) struct RcvArgs {
    /// The sending host (name or address) running `pathload-rs snd`.
    #[arg(long, short = 's')]
    pub(crate) sender: String,
    /// The sender's control port.
    #[arg(long, default_value_t = DEFAULT_CONTROL_PORT)]
    pub(crate) port: u16,
    /// How probes travel; the sender must use the same.
    #[arg(long, value_enum, default_value_t = TransportArg::Mgrp)]
    transport: TransportArg,
    /// mgrpd's API socket (MGRP transport).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub(crate) socket: PathBuf,
    /// This host's probe port.
    #[arg(long, default_value_t = DEFAULT_PROBE_PORT)]
    pub(crate) probe_port: u16,
    /// The address the sender should send probes to (default: the one the control
    /// connection comes from).
    #[arg(long)]
    pub(crate) address: Option<IpAddr>,
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
    /// Keep application traffic out of the probes (MGRP without piggybacking).
    #[arg(long)]
    pub(crate) no_piggyback: bool,
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
            sender: self.sender.clone(),
            port: self.port,
            transport: self.transport.into(),
            socket: self.socket.clone(),
            probe_port: self.probe_port,
            address: self.address,
            mode: match self.mode {
                ModeArg::Slow => Mode::Slow,
                ModeArg::Fast => Mode::Fast,
            },
            max_time: Duration::from_secs(self.max_time),
            max_fleets: self.max_fleets,
            resolution: self.resolution,
            packets: self.packets,
            stream_duration: Duration::from_millis(self.stream_duration),
            piggyback: !self.no_piggyback,
            full_fleets: self.full_fleets,
            bisect: self.bisect,
            sender_is: format!("`pathload-rs snd` (port {})", self.port),
        }
    }
}
