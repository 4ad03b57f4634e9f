//! What a bulk TCP transfer from a neighbour will get (its bulk transfer capacity),
//! by every method the node's measurements of that neighbour allow, with what each
//! value stands on.

use std::net::IpAddr;

use mgrp_core::path::{Basis, PathClass};
use serde::{Deserialize, Deserializer, Serialize};

/// The prediction for the path from one neighbour, with every method's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The neighbour.
    pub neighbour: IpAddr,
    /// The value to use; `None` when nothing allows one. Read from a newer node,
    /// `None` too when it is by a method this version does not know.
    #[serde(default, deserialize_with = "known_one")]
    pub prediction: Option<Predicted>,
    /// Each method's value. Read from a newer node, those by a method this version
    /// knows: a method added since is skipped, so that a mesh upgraded host by host
    /// keeps reading its members' links.
    #[serde(deserialize_with = "known_values")]
    pub values: Vec<Predicted>,
    /// What they stand on.
    pub inputs: Inputs,
}

/// A value as read: by a method this version knows, or by another one.
#[derive(Deserialize)]
#[serde(untagged)]
enum Read {
    Known(Predicted),
    Other { method: String },
}

impl Read {
    /// The value by a known method; none by another; an error for a value by a
    /// known method that does not parse (that is not a newer node's, it is wrong).
    fn known<E: serde::de::Error>(self) -> Result<Option<Predicted>, E> {
        match self {
            Self::Known(p) => Ok(Some(p)),
            Self::Other { method } if Basis::from_name(&method).is_none() => Ok(None),
            Self::Other { method } => Err(E::custom(format!(
                "a prediction by {method:?} whose fields do not parse"
            ))),
        }
    }
}

fn known_one<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Predicted>, D::Error> {
    Option::<Read>::deserialize(d)?.map_or(Ok(None), Read::known)
}

fn known_values<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Predicted>, D::Error> {
    Vec::<Read>::deserialize(d)?
        .into_iter()
        .filter_map(|r| r.known().transpose())
        .collect()
}

/// A link's [`Prediction`] as its JSON carries it: under the key `prediction`, and
/// under `btc`, the key's name before it was given one name everywhere, as well, for
/// the clients that read the old key (until the next release); read from either.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkPrediction(pub Prediction);

impl std::ops::Deref for LinkPrediction {
    type Target = Prediction;

    fn deref(&self) -> &Prediction {
        &self.0
    }
}

impl std::ops::DerefMut for LinkPrediction {
    fn deref_mut(&mut self) -> &mut Prediction {
        &mut self.0
    }
}

impl Serialize for LinkPrediction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("prediction", &self.0)?;
        m.serialize_entry("btc", &self.0)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for LinkPrediction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Either {
            prediction: Option<Prediction>,
            btc: Option<Prediction>,
        }
        let e = Either::deserialize(d)?;
        e.prediction
            .or(e.btc)
            .map(Self)
            .ok_or_else(|| serde::de::Error::missing_field("prediction"))
    }
}

/// One method's value, bit/s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    /// `kernel`, `scaled-abw` or `mathis` (a newer node may send others: see
    /// [`Prediction::values`]).
    pub method: Basis,
    /// The middle of the range.
    pub bps: f64,
    /// The low end.
    pub low_bps: f64,
    /// The high end.
    pub high_bps: f64,
    /// What it stands on, in words.
    pub basis: String,
    /// The weight an earlier flow's rate has in it (0 to 1), when one was blended
    /// in: see the inputs' `history`. Absent from an older node's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_weight: Option<f64>,
}

/// The inputs, each with the link that measured it and its age.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Inputs {
    /// The latest available bandwidth.
    pub available: Option<Available>,
    /// The latest capacity and class.
    pub shape: Option<ShapeInput>,
    /// The latest loss rate.
    pub loss: Option<LossInput>,
    /// What the neighbour's kernel says.
    pub kernel: Option<KernelInput>,
    /// Why the kernel gives no rate, when it does not (no flow, flows limited by the
    /// application or the receiver, not asked).
    pub kernel_note: Option<String>,
    /// The latest earlier flow from the neighbour of the congestion control the
    /// predictions are for, and its weight. Absent from an older node's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryInput>,
}

/// An earlier flow from the neighbour, as its kernel reported it while it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryInput {
    /// What it got, bit/s: a loss-based flow's delivery over the polls it was
    /// network-limited in, a BBR flow's own bottleneck estimate at its last.
    pub bps: f64,
    /// Its congestion control.
    pub congestion: Option<String>,
    /// Its least round trip, s.
    pub min_rtt_s: Option<f64>,
    /// Its retransmitted segments when last seen.
    pub total_retrans: u32,
    /// For how long it was seen network-limited, s.
    pub seen_s: f64,
    /// Seconds since it was last seen.
    pub age_s: f64,
    /// What the probes alone predicted when it was first seen, bit/s.
    pub probes_bps: Option<f64>,
    /// Its weight in the prediction now, 0 to 1 (1 − age / the limit; 0 when too
    /// old or when the probes say conditions changed).
    pub weight: f64,
    /// Why its weight is what it is, in words.
    pub note: String,
}

/// Available bandwidth, bit/s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Available {
    /// Low end.
    pub low_bps: f64,
    /// High end (the low end for a lower bound).
    pub high_bps: f64,
    /// Whether it is only a lower bound.
    pub lower_bound: bool,
    /// The method.
    pub method: String,
    /// The link.
    pub link: String,
    /// Seconds since its run ended.
    pub age_s: f64,
}

/// Capacity and class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeInput {
    /// Narrow-link capacity, bit/s.
    pub capacity_bps: f64,
    /// Squeezed-pair class.
    pub class: Option<PathClass>,
    /// Its score.
    pub score: Option<i32>,
    /// Round trip, s.
    pub rtt_s: f64,
    /// The link.
    pub link: String,
    /// Seconds since its run ended.
    pub age_s: f64,
}

/// Loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossInput {
    /// badabing's probe loss rate, 0 to 1.
    pub loss_rate: f64,
    /// Share of time in loss episodes.
    pub episode_frequency: f64,
    /// The link.
    pub link: String,
    /// Seconds since its run ended.
    pub age_s: f64,
}

/// The busiest network-limited flow the neighbour's kernel reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelInput {
    /// Its delivery rate, bit/s.
    pub delivery_bps: f64,
    /// BBR's own estimate of the bottleneck's bandwidth (its windowed highest
    /// delivery rate), bit/s, when the flow runs BBR and its sender's kernel gave it:
    /// the kernel's value then. Absent from an older node's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbr_bps: Option<f64>,
    /// Its congestion control.
    pub congestion: Option<String>,
    /// Its least round trip, s.
    pub min_rtt_s: Option<f64>,
    /// Its smoothed round trip, s.
    pub rtt_s: f64,
    /// Its retransmitted segments so far.
    pub total_retrans: u32,
    /// Flows to this node the kernel listed.
    pub flows: usize,
    /// Of those, flows whose latest sample was network-limited.
    pub network_limited: usize,
    /// Seconds since the kernel was asked.
    pub age_s: f64,
}
