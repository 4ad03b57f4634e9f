//! The links into a node as its API shows them (`GET /v1/links`, `/v1/links/NAME`).

use serde::{Deserialize, Serialize};

use crate::estimate::{Estimate, RunCounts};
use crate::passive::{PassiveTcp, PassiveTiming};
use crate::prediction::LinkPrediction;

/// `GET /v1/links`: the node and every link into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Links {
    /// The node's name.
    pub node: String,
    /// Its links, in the configuration's order.
    pub links: Vec<LinkView>,
}

/// Where a link is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Until its next run is due.
    Waiting,
    /// Due, waiting for application traffic to ride in its probes.
    AwaitingTraffic,
    /// Due, waiting for its path or for a place among the exclusive runs into the
    /// node (see [`LinkView::waiting_for`]).
    Ready,
    /// A run is in flight.
    Running,
    /// Waiting after failures.
    BackingOff,
}

/// A link as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkView {
    /// Its name.
    pub name: String,
    /// The neighbour measured from, `address:port`.
    pub from: String,
    /// The neighbour's name (`neighbour` in the configuration, its member name in a
    /// mesh), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour: Option<String>,
    /// `mgrp` or `udp`.
    pub transport: String,
    /// How it is measured: `pathload-fast`, `pathload-slow`, `pathchirp`, `badabing`
    /// or `btc`.
    pub method: String,
    /// Seconds between runs.
    pub interval_s: f64,
    /// How its runs share the path with the other links': `exclusive` (it loads the
    /// path: it runs alone on it) or `background` (it is light: it runs beside
    /// anything but an exclusive run on its path).
    #[serde(default)]
    pub class: Class,
    /// Application traffic (bit/s) the link waits for before a run, if set.
    pub ride_min_bps: Option<u64>,
    /// The traffic the neighbour last reported routing to this node, bit/s (links
    /// that wait for traffic only).
    pub traffic_bps: Option<u64>,
    /// `waiting`, `awaiting_traffic`, `ready`, `running` or `backing_off`.
    pub state: LinkState,
    /// Seconds until the next run is due (waiting, backing off, awaiting traffic).
    pub next_run_in_s: Option<f64>,
    /// Why a due link (`ready`) does not run yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
    /// Failed runs in a row.
    pub failures: u32,
    /// Whether the last failure was the neighbour being down.
    pub peer_down: bool,
    /// Why the last run failed, if it did.
    pub last_error: Option<String>,
    /// The latest run that answered: a range, or a lower bound.
    pub latest: Option<Estimate>,
    /// Seconds since that estimate's run ended.
    pub age_s: Option<f64>,
    /// Runs by outcome.
    pub runs: RunCounts,
    /// IP bytes of every probe this link's runs sent.
    pub probe_bytes: u64,
    /// IP bytes of those probes that carried application traffic.
    pub riding_probe_bytes: u64,
    /// What a bulk TCP transfer from the neighbour will get, by every method the
    /// node's measurements of that neighbour allow (shared by its links). In the JSON
    /// under `prediction`, and under its old key `btc` too until the next release.
    #[serde(flatten)]
    pub prediction: LinkPrediction,
    /// Whether the link runs even while a passive estimate is fresh.
    pub active_always: bool,
    /// For a link a passive estimate may stand in for: what the applications' TCP
    /// flows from the neighbour last said, and how often it stood in.
    pub passive: Option<PassiveView>,
}

/// How a link's runs share its path (pScheduler's scheduling classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// It loads the path: no other run starts on it meanwhile, and it counts toward
    /// the node's `max-running`.
    #[default]
    Exclusive,
    /// It is light: it runs beside the others, holding nothing.
    Background,
}

/// Why a due link does not run yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum WaitingFor {
    /// An exclusive run of another link holds its path.
    Path {
        /// That link's name.
        link: String,
    },
    /// It is exclusive, and as many exclusive runs as the node's `max-running` are in
    /// flight.
    Node {
        /// The node's `max-running`.
        max_running: usize,
    },
}

/// A link's passive side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassiveView {
    /// `passive-tcp`.
    pub source: String,
    /// The neighbour's last answer, read; `None` before the first.
    pub last: Option<PassiveTcp>,
    /// Seconds since that answer.
    pub age_s: Option<f64>,
    /// What the timing of the applications' segments from the neighbour gave over
    /// the last window (`passive-dispersion`, `passive-trend`); `None` when timing is
    /// off or before the first window.
    pub timing: Option<PassiveTiming>,
    /// Seconds since that window ended.
    pub timing_age_s: Option<f64>,
    /// Due runs a passive estimate stood in for (passive estimates recorded).
    pub covered: u64,
    /// Their share of all the link's due runs, 0 to 1.
    pub coverage: f64,
}
