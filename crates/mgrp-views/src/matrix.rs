//! The whole mesh at once: every ordered pair of members with its available
//! bandwidth, measured or inferred, as one collector gathers it from the members'
//! APIs (`mgrp-overlay matrix`). Base units: bits per second, seconds.

use serde::{Deserialize, Serialize};

/// The schema of [`Matrix`]: raised when a field changes meaning.
pub const SCHEMA: u32 = 1;

/// Every pair of a mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// [`SCHEMA`].
    pub schema: u32,
    /// When it was gathered, Unix seconds.
    pub at: f64,
    /// The members, by name.
    pub members: Vec<String>,
    /// Every ordered pair that has a value (the path from `from` into `to`).
    pub cells: Vec<Cell>,
    /// Members whose links could not be read, and why.
    pub unread: Vec<Unread>,
    /// Every measured pair's loss-episode frequency, where a loss method (badabing)
    /// measures it.
    #[serde(default)]
    pub losses: Vec<LossCell>,
    /// Each member's API as the description gives it (`http://HOST:PORT`), for a
    /// page to link a pair to the link that measured it.
    #[serde(default)]
    pub apis: std::collections::BTreeMap<String, String>,
}

/// One measured pair's loss episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossCell {
    /// The member the path comes from.
    pub from: String,
    /// The member it goes into (which measures it).
    pub to: String,
    /// Share of time the path was in a loss episode, 0 to 1.
    pub episode_frequency: f64,
    /// Plain loss rate of the probe packets, 0 to 1.
    pub loss_rate: f64,
    /// Seconds since it was measured.
    pub age_s: f64,
    /// The link that measured it (its name on `to`).
    pub link: String,
}

/// One pair's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The member the path comes from.
    pub from: String,
    /// The member it goes into (which measures it).
    pub to: String,
    /// Available bandwidth, bits per second.
    pub bps: f64,
    /// Seconds since its oldest input was measured.
    pub age_s: f64,
    /// What it rests on.
    pub basis: Basis,
}

/// What a value rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Basis {
    /// The path's own newest estimate.
    Measured {
        /// The link that measured it (its name on `to`).
        link: String,
        /// Its method.
        method: String,
    },
    /// Not measured: the least of the sender's uplink, the receiver's downlink and
    /// the core between their regions, each bounded by a measured path.
    Inferred {
        /// The measured path that bounds the sender's uplink, `FROM>TO`.
        uplink: String,
        /// The one that bounds the receiver's downlink.
        downlink: String,
        /// The one that bounds the core between their regions, when both give one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        core: Option<String>,
    },
}

impl Cell {
    /// Whether it is inferred.
    pub fn inferred(&self) -> bool {
        matches!(self.basis, Basis::Inferred { .. })
    }
}

/// A member whose links were not read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unread {
    /// The member.
    pub member: String,
    /// Why.
    pub error: String,
}
