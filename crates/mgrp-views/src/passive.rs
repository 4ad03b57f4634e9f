//! Estimates from the applications' own traffic: what a neighbour's kernel says of
//! the TCP flows it sends here, and what the timing of their segments gives.

use serde::{Deserialize, Serialize};

/// What one answer of the neighbour's kernel gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassiveTcp {
    /// When the neighbour answered, Unix seconds.
    pub at: f64,
    /// The estimate, bit/s of IP packets: the summed rate of the network-limited
    /// flows (their payload rate with the headers of full segments added); `None`
    /// when no flow was network-limited.
    pub bps: Option<f64>,
    /// Flows the neighbour listed.
    pub flows: usize,
    /// Of those, network-limited.
    pub network_limited: usize,
    /// Limited by the application (it had nothing to send).
    pub app_limited: usize,
    /// Limited by the receiver's window or the send buffer.
    pub end_limited: usize,
    /// Of the network-limited flows, those whose rate is bytes acknowledged between
    /// two answers (the rest: the kernel's latest delivery-rate sample).
    pub from_bytes: usize,
    /// Why there is no estimate, in words.
    pub note: Option<String>,
}

/// What one window's stamps give.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassiveTiming {
    /// The end of the window, Unix seconds.
    pub at: f64,
    /// Segments that arrived here and whose send the neighbour stamped.
    pub matched: usize,
    /// Segments that arrived here without a matching send (the neighbour's capture
    /// started later, or lost them).
    pub unmatched: usize,
    /// Segments of flows the neighbour's kernel did not report as network-limited.
    pub not_network_limited: usize,
    /// Segments sent more than once.
    pub retransmitted: usize,
    /// Trains used for dispersion.
    pub trains: usize,
    /// The median of their rates, bit/s.
    pub dispersion_bps: Option<f64>,
    /// Streams judged (increasing, no trend, ambiguous).
    pub streams: [usize; 3],
    /// The rate separating them, bit/s.
    pub trend_bps: Option<f64>,
    /// Its range: the highest rate judged not increasing and the lowest judged
    /// increasing, bit/s (either may be missing: a bound on one side only).
    pub trend_low_bps: Option<f64>,
    /// See `trend_low_bps`.
    pub trend_high_bps: Option<f64>,
    /// Why there is no estimate, in words.
    pub note: Option<String>,
}
