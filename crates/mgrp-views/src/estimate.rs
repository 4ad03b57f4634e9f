//! What one run of a link gives: an estimate, or why there is none, with what it cost.

use serde::{Deserialize, Serialize};

/// One run of one link, as the API, the stream and the metrics show it. Rates are in
/// bits per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The link's method (`pathload-fast`, `pathload-slow`, `pathchirp`, `badabing`,
    /// `btc`), or `passive-tcp` for a passive estimate that stood in for a run.
    pub method: String,
    /// Whether it gave a range.
    pub converged: bool,
    /// Whether it gave a lower bound instead: the available bandwidth is at least
    /// `low_bps` (the highest rate the sender reached), and `high_bps` is `None`.
    pub lower_bound: bool,
    /// How it ended ([`RunOutcome`]'s names: `estimate`, `lower_bound`, `limit`,
    /// `rate_unreachable`, `cross_traffic`, `sender_failed`, `busy`, `peer_down`,
    /// `error`).
    pub outcome: RunOutcome,
    /// pathload's own stop reason (`user_resolution`, `above_max_rate`, ...), when
    /// the run got that far.
    pub stop_reason: Option<String>,
    /// Why there is no estimate, in words; `None` when there is one.
    pub error: Option<String>,
    /// The available bandwidth's range, less the application traffic that rode in
    /// the probes (MGRP); `None` without an estimate. A lower bound has `low_bps` only;
    /// pathChirp's smoothed estimate is a point, `low_bps` = `high_bps`; badabing
    /// measures no bandwidth (`loss` instead).
    pub low_bps: Option<f64>,
    /// High end of that range.
    pub high_bps: Option<f64>,
    /// The range as the probes measured it, with the riders in.
    pub unadjusted_low_bps: Option<f64>,
    /// High end of the measured range.
    pub unadjusted_high_bps: Option<f64>,
    /// pathload's word on the adjustment (`none`, `complete`, or `incomplete` when
    /// traffic rode in streams during which the sender counted none arriving, so the
    /// adjusted range may read high); `None` for the other methods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjustment: Option<String>,
    /// pathload's fleets judged no trend whose probes' delays grew all the same (cross
    /// traffic in bursts hides the trend, and the range may read high); `None` for the
    /// other methods and from an older node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_trend_fleets: Option<u32>,
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
    /// badabing's loss episodes; `None` for the other methods.
    #[serde(default)]
    pub loss: Option<Loss>,
    /// A continuous method's estimate published while its run goes on (on the event
    /// stream only); the run's record comes at its end.
    #[serde(default)]
    pub partial: bool,
    /// btc-rs's capacity and squeezed pairs; `None` for the other methods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
}

/// The path's shape as btc-rs measured it: the narrow link's capacity and where the
/// queues form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// The narrow link's capacity, bit/s (the median dispersion of packet bunches).
    pub capacity_bps: f64,
    /// `tight-like-narrow`, `tight-unlike-narrow` or `undecided`; `None` when the
    /// pairs could not be sent.
    pub class: Option<mgrp_core::path::PathClass>,
    /// The squeezed-pair score (positive: queues at the narrow link).
    pub score: Option<i32>,
    /// Share of each kind's pairs (500 and 1500-byte spacing) that arrived squeezed.
    pub squeezed: Option<[f64; 2]>,
    /// Why the pairs were not sent, if they were not.
    pub pairs_skipped: Option<String>,
    /// The control path's round trip, s (the least of those timed before the run).
    pub rtt_s: f64,
}

impl Estimate {
    /// Run `seq` of `link` by `method` over `transport`, from `started_at` to
    /// `ended_at` (Unix seconds), with no answer: what a method then fills in.
    pub fn empty(
        link: &str,
        transport: &str,
        method: &str,
        seq: u64,
        started_at: f64,
        ended_at: f64,
    ) -> Self {
        Self {
            link: link.to_string(),
            seq,
            started_at,
            ended_at,
            duration_s: (ended_at - started_at).max(0.0),
            transport: transport.to_string(),
            method: method.to_string(),
            converged: false,
            lower_bound: false,
            outcome: RunOutcome::Error,
            stop_reason: None,
            error: None,
            low_bps: None,
            high_bps: None,
            unadjusted_low_bps: None,
            unadjusted_high_bps: None,
            adjustment: None,
            hidden_trend_fleets: None,
            probe_bytes: 0,
            riding_probe_bytes: 0,
            rider_bytes: 0,
            rider_share: 0.0,
            fleets: 0,
            streams: 0,
            loss: None,
            partial: false,
            shape: None,
        }
    }
}

/// Loss episodes as badabing measured them over a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Loss {
    /// Share of time the path was in a loss episode, 0 to 1.
    pub episode_frequency: f64,
    /// Its 95 % confidence half-width.
    pub episode_frequency_ci: f64,
    /// Mean episode duration, seconds (`None` when no episode began or ended).
    pub episode_duration_s: Option<f64>,
    /// Its 95 % confidence half-width, seconds.
    pub episode_duration_ci_s: Option<f64>,
    /// Plain loss rate of the probe packets, 0 to 1.
    pub loss_rate: f64,
    /// Experiments the estimate stands on.
    pub experiments: u64,
}

/// How a run ended: what the API's `outcome`, the `runs_total{outcome}` counter and
/// the status page say. Each has a meaning and a remedy ([`RunOutcome::meaning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// An answer: pathload's range, pathChirp's smoothed estimate, badabing's loss
    /// episodes.
    Estimate,
    /// No trend even at the highest rate the sender reaches: the available bandwidth
    /// is at least that rate, an answer.
    LowerBound,
    /// The time or fleet limit came before the search converged.
    Limit,
    /// The sender could not send at the rates asked for (fleets left far from them).
    RateUnreachable,
    /// Loss or interruptions cut the run off: no back-to-back train came through
    /// whole, or too few streams were usable.
    CrossTraffic,
    /// The neighbour is up but could not send what was asked for (its mgrpd refused a
    /// train, a limit there).
    SenderFailed,
    /// The neighbour's sender was at one of its limits (measurements in all, or from
    /// this host).
    Busy,
    /// The neighbour could not be reached or went away mid-run.
    PeerDown,
    /// Anything else: this node's own mgrpd or sockets, a protocol error.
    Error,
}

impl RunOutcome {
    /// Every outcome, in the order the API and the metrics list them.
    pub const ALL: [Self; 9] = [
        Self::Estimate,
        Self::LowerBound,
        Self::Limit,
        Self::RateUnreachable,
        Self::CrossTraffic,
        Self::SenderFailed,
        Self::Busy,
        Self::PeerDown,
        Self::Error,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Estimate => "estimate",
            Self::LowerBound => "lower_bound",
            Self::Limit => "limit",
            Self::RateUnreachable => "rate_unreachable",
            Self::CrossTraffic => "cross_traffic",
            Self::SenderFailed => "sender_failed",
            Self::Busy => "busy",
            Self::PeerDown => "peer_down",
            Self::Error => "error",
        }
    }

    /// Whether the run answered (a range, or a lower bound); the others back off.
    pub fn answered(self) -> bool {
        matches!(self, Self::Estimate | Self::LowerBound)
    }

    /// What it means and what to do, in a sentence for an operator.
    pub fn meaning(self) -> &'static str {
        match self {
            Self::Estimate => {
                "an answer: a range or estimate of available bandwidth, or loss episodes"
            }
            Self::LowerBound => {
                "the available bandwidth is at least the highest rate the neighbour reached, with no trend there; nothing to do (a faster sender would say more)"
            }
            Self::Limit => {
                "the time limit came before the search converged; if it keeps happening, raise time-limit or use pathload-fast"
            }
            Self::RateUnreachable => {
                "the neighbour could not send at the rates asked for; look at its CPU load and its mgrpd's probes_late"
            }
            Self::CrossTraffic => {
                "loss or interruptions on the path cut the run off; it is tried again after the back-off"
            }
            Self::SenderFailed => {
                "the neighbour is up but its side failed (its mgrpd refused a train); its log says why"
            }
            Self::Busy => {
                "the neighbour's sender ran as many measurements as its limits allow; tried again shortly"
            }
            Self::PeerDown => {
                "the neighbour's overlay could not be reached or went away; check that it runs and serves this transport"
            }
            Self::Error => "this node's side failed; the error says why",
        }
    }
}

/// Runs by outcome; in JSON an object with a count for every outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts([u64; RunOutcome::ALL.len()]);

impl RunCounts {
    fn index(o: RunOutcome) -> usize {
        RunOutcome::ALL.iter().position(|x| *x == o).unwrap_or(0)
    }

    /// Runs that ended so.
    pub fn get(&self, o: RunOutcome) -> u64 {
        self.0[Self::index(o)]
    }

    /// Counts one more that ended so.
    pub fn add(&mut self, o: RunOutcome) {
        self.0[Self::index(o)] += 1;
    }

    /// Every run.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl Serialize for RunCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(RunOutcome::ALL.len()))?;
        for o in RunOutcome::ALL {
            m.serialize_entry(o.name(), &self.get(o))?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for RunCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = std::collections::BTreeMap::<RunOutcome, u64>::deserialize(d)?;
        let mut c = Self::default();
        for (o, n) in m {
            c.0[Self::index(o)] = n;
        }
        Ok(c)
    }
}
