//! What one run of a link gives: an estimate, or why there is none, with what it cost.

use serde::Serialize;

/// One run of one link, as the API, the stream and the metrics show it. Rates are in
/// bits per second.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The link's name.
    pub link: String,
    /// Increases by one with every run on this node (across links).
    pub seq: u64,
    /// When the run started and ended, Unix seconds.
    pub started_at: f64,
    /// When it ended, Unix seconds.
    pub ended_at: f64,
    /// How long it took, seconds.
    pub duration_s: f64,
    /// `mgrp` or `udp`.
    pub transport: String,
    /// `pathload-fast` or `pathload-slow`.
    pub method: String,
    /// Whether it gave an estimate.
    pub converged: bool,
    /// How it ended: pathload's stop reason (`user_resolution`, `time_limit`, ...), or
    /// `peer_down`, `busy`, `error`.
    pub outcome: String,
    /// Why there is no estimate, in words; `None` when there is one.
    pub error: Option<String>,
    /// The available bandwidth's range, less the application traffic that rode in
    /// the probes (MGRP); `None` without an estimate.
    pub low_bps: Option<f64>,
    /// High end of that range.
    pub high_bps: Option<f64>,
    /// The range as the probes measured it, with the riders in.
    pub unadjusted_low_bps: Option<f64>,
    /// High end of the measured range.
    pub unadjusted_high_bps: Option<f64>,
    /// IP bytes of every probe sent.
    pub probe_bytes: u64,
    /// IP bytes of the probes that carried application traffic.
    pub riding_probe_bytes: u64,
    /// Application bytes that rode in the probes.
    pub rider_bytes: u64,
    /// Share of the probe bytes that carried application traffic, 0 to 1.
    pub rider_share: f64,
    /// Fleets and streams the run took.
    pub fleets: u32,
    /// Streams sent.
    pub streams: u32,
}

/// How a run ended, for the counters: `estimate`, `no_estimate`, `peer_down`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunOutcome {
    /// It gave an estimate.
    Estimate,
    /// It ran (or was turned away busy) but gave no estimate.
    NoEstimate,
    /// The neighbour could not be reached or went away.
    PeerDown,
}

impl RunOutcome {
    /// Every outcome, in the order the metrics list them.
    pub const ALL: [Self; 3] = [Self::Estimate, Self::NoEstimate, Self::PeerDown];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Estimate => "estimate",
            Self::NoEstimate => "no_estimate",
            Self::PeerDown => "peer_down",
        }
    }
}

/// pathload's Mbit/s as bits per second.
pub(crate) fn bps(mbps: f64) -> f64 {
    mbps * 1e6
}
