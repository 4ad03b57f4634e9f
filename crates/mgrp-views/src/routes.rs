//! Route control as a node's API shows it (`GET /v1/routes`), and the hops, scores
//! and reasons it is made of.

use std::net::IpAddr;

use mgrp_core::heartbeat::HopState;
use serde::{Deserialize, Serialize};

/// What the API shows of route control (`GET /v1/routes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutesView {
    /// This node.
    pub node: String,
    /// How the members know it.
    pub address: IpAddr,
    /// η and T_ch.
    pub eta: f64,
    /// T_ch, s: the least time between two switches for the better (the hold-down).
    pub t_ch_s: f64,
    /// The switching rule, `confidence` or `ratio` (`None` from a member before it).
    #[serde(default)]
    pub rule: Option<String>,
    /// The throughput model, `pftk` or `mathis`.
    #[serde(default)]
    pub model: Option<String>,
    /// Whether existing flows move with a change.
    pub move_existing: bool,
    /// The other members, as heartbeats and their APIs found them.
    pub members: Vec<MemberView>,
    /// Each destination.
    pub destinations: Vec<DestinationView>,
    /// The last error steering the kernel, if the last attempt failed.
    pub kernel_error: Option<String>,
    /// When this view was made, Unix seconds.
    pub at: f64,
}

/// A member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberView {
    /// Its name.
    pub name: String,
    /// Its address.
    pub address: IpAddr,
    /// This node's next-hop device towards it.
    pub device: Option<String>,
    /// What heartbeats over the hop from this node to it say (members with a device).
    pub heartbeat: Option<HopState>,
    /// Stamped pings alone by the normal route (members without a device that own a
    /// destination): its `back_s` is the way a flow's acknowledgements come back from
    /// behind it; its liveness and loss say nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acks: Option<HopState>,
    /// Whether its API answered at the last poll.
    pub api_ok: bool,
    /// Why not.
    pub api_error: Option<String>,
}

/// A destination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationView {
    /// The prefix.
    pub prefix: String,
    /// The member it lies behind.
    pub owner: String,
    /// The path new flows take: `direct`, `via NAME`, or `normal` (the kernel's own
    /// route).
    pub current: String,
    /// A path set by hand (`POST /v1/routes/choose`), if any.
    pub manual: Option<String>,
    /// Seconds since the last switch.
    pub since_switch_s: Option<f64>,
    /// The hold-down in force since that switch (T_ch stretched by its jitter), s.
    /// Absent from an older node's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_s: Option<f64>,
    /// Seconds a better path has beaten the current one at every decision (it moves
    /// once this reaches `confirm` and the hold-down is over); absent while none
    /// does. Absent from an older node's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better_for_s: Option<f64>,
    /// Switches so far.
    pub switches: u64,
    /// The candidates.
    pub paths: Vec<PathView>,
    /// The latest switches, newest last.
    pub recent: Vec<SwitchView>,
}

/// A candidate path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathView {
    /// `direct` or `via NAME`.
    pub name: String,
    /// Its number: mark `id << 16`, routing table `table-base + id`.
    pub id: u32,
    /// Whether new flows take it.
    pub chosen: bool,
    /// Its hops.
    pub hops: Vec<HopView>,
    /// The model's score.
    pub score: Score,
    /// Connections on it (conntrack marks).
    pub flows: Option<u64>,
}

/// A hop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopView {
    /// The sending member.
    pub from: String,
    /// The receiving member.
    pub to: String,
    /// What is known of it.
    #[serde(flatten)]
    pub hop: Hop,
}

/// A switch, as the API and the events show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchView {
    /// The destination.
    pub prefix: String,
    /// When, Unix seconds.
    pub at: f64,
    /// The path left.
    pub from: String,
    /// The path taken.
    pub to: String,
    /// Why.
    pub reason: Reason,
    /// Why, in words.
    pub reason_text: String,
    /// The left path's score, bit/s.
    pub from_bps: Option<f64>,
    /// The taken path's score, bit/s.
    pub to_bps: Option<f64>,
}

/// What is known of one hop, from its sender to its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Hop {
    /// Whether it answers heartbeats (`false` when unknown).
    pub alive: bool,
    /// Round trip, s.
    pub rtt_s: Option<f64>,
    /// The round trips' mean deviation, s (heartbeats' RTTVAR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_var_s: Option<f64>,
    /// Delay on the way from its sender to its receiver, s (stamped heartbeats: half
    /// the least round trip plus the change since; `None` from a member of an earlier
    /// version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_s: Option<f64>,
    /// Delay of the receiver's answers back to the sender by its normal route, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back_s: Option<f64>,
    /// Forward loss, 0 to 1, and where it comes from.
    pub loss: Option<f64>,
    /// `badabing` or `heartbeats`.
    pub loss_source: Option<LossSource>,
    /// How many samples the loss stands on (heartbeats in the window), when known:
    /// its uncertainty comes from it.
    #[serde(default)]
    pub loss_samples: Option<u64>,
    /// The rate it carries a TCP flow at, bit/s, and where it comes from.
    pub rate_bps: Option<f64>,
    /// `prediction`, `available` or `capacity`.
    pub rate_source: Option<RateSource>,
}

/// One candidate path's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Every hop answers.
    pub alive: bool,
    /// The model's throughput, bit/s; `None` when nothing is known.
    pub bps: Option<f64>,
    /// The rate term R, bit/s.
    pub rate_bps: Option<f64>,
    /// The loss term, bit/s: Mathis's MSS / (RTT √ε), or PFTK's with timeouts (the
    /// name is the first model's).
    pub mathis_bps: Option<f64>,
    /// RTT, s.
    pub rtt_s: Option<f64>,
    /// ε.
    pub loss: Option<f64>,
    /// The score with every hop's loss one standard error higher and lower
    /// (binomial, from its samples), bit/s: how far the score may be off. `None`
    /// when a loss's samples are not known.
    #[serde(default)]
    pub low_bps: Option<f64>,
    /// See `low_bps`.
    #[serde(default)]
    pub high_bps: Option<f64>,
    /// ε's standard error (binomial, each hop's over its samples, in quadrature).
    #[serde(default)]
    pub loss_error: Option<f64>,
    /// How far the RTT strays, s: the hops' mean deviations in quadrature.
    #[serde(default)]
    pub rtt_error: Option<f64>,
    /// The model in words, with its numbers.
    pub basis: String,
}

/// Where a hop's loss figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossSource {
    /// The receiver's badabing link from the sender.
    Badabing,
    /// The heartbeats over the hop.
    Heartbeats,
}

/// Where a hop's rate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSource {
    /// The receiver's transfer-rate prediction for the sender (`btc` before it had
    /// one name everywhere, still read).
    #[serde(alias = "btc")]
    Prediction,
    /// The receiver's latest available bandwidth from the sender.
    Available,
    /// The narrow link's capacity (btc-rs).
    Capacity,
}

/// Why a destination changed path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Reason {
    /// The first path chosen.
    First,
    /// The path taken scored `ratio` times the current one: more than 1 + η (the
    /// ratio rule), or than `needed`, 1 + margin (the confidence rule, which compares
    /// paths whose losses are equal within their noise at their mean loss); or, the
    /// direct path taken back from a relay, at least `needed` = 1.
    Better {
        /// Taken over current.
        #[serde(deserialize_with = "ratio_or_infinite")]
        ratio: f64,
        /// What the confidence rule asked of the ratio: more than 1 + margin, or (the
        /// direct path from a relay) at least 1 (`None`: the ratio rule's 1 + η).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        needed: Option<f64>,
    },
    /// The current path stopped answering.
    Failed,
    /// No path answers: back to the kernel's normal route.
    AllDown,
    /// A path answers again after none did.
    Recovered,
    /// Set by hand through the API.
    Manual,
}

impl Reason {
    /// Its name in the API and the metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Better { .. } => "better",
            Self::Failed => "failed",
            Self::AllDown => "all_down",
            Self::Recovered => "recovered",
            Self::Manual => "manual",
        }
    }

    /// In words.
    pub fn words(&self, eta: f64) -> String {
        match self {
            Self::First => "first choice".into(),
            Self::Better {
                ratio,
                needed: None,
            } => format!(
                "scores {ratio:.2}× the current path (more than 1 + η = {:.2})",
                1.0 + eta
            ),
            Self::Better {
                ratio,
                needed: Some(n),
            } if *n <= 1.0 => format!(
                "the direct path scores {ratio:.2}× the relay in use (at least as well: a relay is kept only while it is better, losses weighed against their noise)"
            ),
            Self::Better {
                ratio,
                needed: Some(n),
            } => format!(
                "scores {ratio:.2}× the current path (more than 1 + margin = {n:.2}, losses weighed against their noise)"
            ),
            Self::Failed => "the current path stopped answering".into(),
            Self::AllDown => "no path answers: the kernel's normal route".into(),
            Self::Recovered => "a path answers again".into(),
            Self::Manual => "set by hand".into(),
        }
    }
}

/// A ratio as served: JSON has no infinity, so the ratio over a current path with
/// no score (infinitely better) goes out as `null` and reads back as infinite.
fn ratio_or_infinite<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}
