//! The whole measurement as a state machine with no I/O and no clock.
//!
//! The driver asks [`Estimator::poll_action`] what to send — a back-to-back train for
//! the initial rate, then the streams of each fleet — sends it, and feeds back what
//! the receiver saw with [`Estimator::handle_train`] or [`Estimator::handle_stream`].
//! [`Estimator::poll_event`] yields what happened for the driver to print: each
//! stream's trend, each fleet's verdict and bounds. When the search ends the action is
//! [`Action::Done`] with the [`Outcome`]; the driver ends a run early (its time limit,
//! a signal) with [`Estimator::handle_stop`], which still yields the bounds seen so far
//! (an outcome that did not converge is no estimate: see [`StopReason::converged`]).
//!
//! Decisions follow pathload 1.3.2 (see [`crate::params`]) with three changes:
//! - a fleet ends as soon as its verdict cannot change whatever its remaining streams
//!   show ([`Config::early_verdict`]). For INCREASING that is exactly the original's
//!   verdict. NO TREND and GREY are taken early only while no stream has lost 3 % or
//!   more; the original would still have turned them INCREASING had a later stream
//!   lost 15 % — a stream that loses that much after eight calm ones is a change of
//!   the path, which the next fleet sees anyway;
//! - the run has a default limit on fleets ([`Config::max_fleets`]);
//! - every fleet carries the rate of the application traffic that rode in its probes,
//!   so the range is reported both as measured and adjusted (MGRP §2.4).

use std::collections::VecDeque;

use serde::Serialize;

use crate::params::{
    ADR_TRAIN_LENGTHS, CHI_MAX_MBPS, CHI_SHARE_OF_ADR, COALESCENCE_GAP_NS, COALESCENCE_SHARE,
    DEFAULT_MAX_FLEETS, FLEET_AGREEMENT, HIDDEN_TREND_CHI, HIDDEN_TREND_STANDARD_ERRORS,
    MAX_PACKETS_PER_STREAM, MAX_PROBE_IP_BYTES, MIN_USABLE_STREAMS, MODERATE_LOSS_STREAMS,
    OMEGA_SHARE_OF_ADR, PACKETS_PER_STREAM, PACKETS_PER_STREAM_COALESCED, RATE_MISS_SHARE,
    RATE_MISSES_TO_STOP, RIDER_SHARE_ABOVE_RMAX, SLOW_IDLE_STREAMS, STREAM_DURATION_NS,
    STREAMS_PER_FLEET, UNACCOUNTED_SHARE_OF_OMEGA,
};
use crate::rate::{Limits, actual_rate};
use crate::search::{Bound, Bounds, Convergence, Next, Search};
use crate::trend::{Arrival, LossClass, StreamAnalysis, Trend, analyse};

/// How long to idle between streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The original's idle: until 9 stream durations have passed since the stream
    /// ended, at least one round trip (the MGRP paper's pSLOW).
    #[default]
    Slow,
    /// One round trip (the MGRP paper's pFAST).
    Fast,
}

/// Settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Idle between streams.
    pub mode: Mode,
    /// Round-trip time of the control path, ns.
    pub rtt_ns: u64,
    /// The user's resolution ω in Mbit/s; 2 % of the initial rate if `None`.
    pub omega_mbps: Option<f64>,
    /// Largest probe the path carries, IP bytes.
    pub max_size: u32,
    /// Streams per fleet.
    pub streams_per_fleet: u32,
    /// Packets per stream, if fixed (pathload's K; 300 at least once interrupt
    /// coalescence is seen). `None`: as many as last `stream_duration_ns` at the
    /// stream's spacing, at least [`PACKETS_PER_STREAM`].
    pub stream_packets: Option<u32>,
    /// How long a stream lasts when its packets are not fixed, ns.
    pub stream_duration_ns: u64,
    /// Fleets after which the run stops (without an estimate unless it converged).
    pub max_fleets: u32,
    /// End a fleet once its verdict is certain.
    pub early_verdict: bool,
    /// Aim the search at the rate an increasing fleet's delay growth points to
    /// ([`crate::search::Search::aim_at`]); `false` searches by bisection alone, as
    /// pathload 1.3.2.
    pub aim: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mode: Mode::Slow,
            rtt_ns: 1_000_000,
            omega_mbps: None,
            max_size: MAX_PROBE_IP_BYTES,
            streams_per_fleet: STREAMS_PER_FLEET,
            stream_packets: None,
            stream_duration_ns: STREAM_DURATION_NS,
            max_fleets: DEFAULT_MAX_FLEETS,
            early_verdict: true,
            aim: true,
        }
    }
}

/// A back-to-back train for the initial rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TrainSpec {
    /// Train number, from 0.
    pub id: u32,
    /// Packets.
    pub packets: u32,
    /// IP bytes per packet.
    pub size: u32,
}

/// One stream of a fleet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StreamSpec {
    /// Fleet number, from 1.
    pub fleet: u32,
    /// Stream number within the fleet, from 0.
    pub stream: u32,
    /// The rate asked for, Mbit/s.
    pub rate: f64,
    /// IP bytes per probe.
    pub size: u32,
    /// Probes.
    pub packets: u32,
    /// Gap between departures, ns.
    pub spacing_ns: u64,
    /// How many of the first probes may carry riders (MGRP; all unless the rate is
    /// already known to build a queue).
    pub rider_probes: u32,
    /// How long to idle after this stream ends before the next one, ns.
    pub idle_ns: u64,
}

impl StreamSpec {
    /// How long the stream takes to send, ns.
    pub fn duration_ns(&self) -> u64 {
        u64::from(self.packets.saturating_sub(1)) * self.spacing_ns
    }
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Send a back-to-back train and report it with [`Estimator::handle_train`].
    Train(TrainSpec),
    /// Send a stream and report it with [`Estimator::handle_stream`].
    Stream(StreamSpec),
    /// The run is over.
    Done(Outcome),
}

/// What the receiver saw of a back-to-back train.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainResult {
    /// Its number.
    pub id: u32,
    /// Packets the sender sent.
    pub sent: u32,
    /// Packets that arrived.
    pub arrivals: Vec<Arrival>,
}

/// What the sender and the receiver saw of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamResult {
    /// Fleet number.
    pub fleet: u32,
    /// Stream number.
    pub stream: u32,
    /// Probes the sender sent.
    pub sent: u32,
    /// The sender stamps of every probe sent, in order, ns.
    pub sender_stamps: Vec<i64>,
    /// Probes that arrived.
    pub arrivals: Vec<Arrival>,
    /// Application bytes that rode in the stream's probes and would have competed
    /// with it without MGRP (0 over UDP).
    pub competing_rider_bytes: u64,
    /// Application bytes that rode in the stream's probes.
    pub rider_bytes: u64,
    /// IP bytes of the stream's probes that carried riders.
    pub riding_probe_bytes: u64,
    /// Whether `sender_stamps` are kernel stamps taken as each probe entered the
    /// sending host's egress queue (else user-space stamps read before each send).
    pub kernel_stamps: bool,
}

/// A fleet's verdict (pathload: INCREASING, NO TREND, GREY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetVerdict {
    /// At least 60 % of usable streams increasing, or aborted by loss.
    Increasing,
    /// At least 60 % of usable streams without trend.
    NoTrend,
    /// Neither.
    Grey,
    /// Too few usable streams; repeated once.
    Unusable,
    /// Its measured sending rate was far from the one asked for (more than
    /// [`RATE_MISS_SHARE`]): a fault of the measurement (the sender was held up, or
    /// its departure stamps are not the departures), not a bound. It is repeated at
    /// the same rate; [`RATE_MISSES_TO_STOP`] in a row end the run.
    RateMissed,
}

/// Why a fleet ended before its last stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetEnd {
    /// Every stream was sent.
    Complete,
    /// Its verdict could no longer change.
    Decided,
    /// A stream lost 15 % or more.
    HeavyLoss,
    /// Half the streams lost 3–15 %.
    ModerateLoss,
}

/// What one fleet showed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetReport {
    /// Fleet number.
    pub fleet: u32,
    /// Rate asked for, Mbit/s.
    pub requested_rate: f64,
    /// Rate the sender achieved, Mbit/s (the search uses this one).
    pub actual_rate: f64,
    /// Rate of competing application traffic that rode in its probes, Mbit/s.
    pub competing_rate: f64,
    /// The verdict.
    pub verdict: FleetVerdict,
    /// How it ended.
    pub end: FleetEnd,
    /// Streams sent.
    pub streams: u32,
    /// Each stream's trend letter (I, N, U, or - for discarded).
    pub trends: String,
    /// The search's bounds after this fleet.
    pub bounds: Bounds,
    /// Where this increasing fleet's delay growth puts the available bandwidth,
    /// Mbit/s, if it says (see [`Config::aim`]).
    pub aim: Option<f64>,
    /// Judged no trend while its streams' delays grew on average by more than twice
    /// the grey resolution's worth ([`HIDDEN_TREND_CHI`]): PCT and PDT missed a trend
    /// (cross traffic in bursts), and the bound it set may read high.
    pub hidden_trend: bool,
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Rmax − Rmin ≤ ω.
    UserResolution,
    /// Both edges of the grey region within χ.
    GreyResolution,
    /// No trend at the sender's highest rate.
    AboveMaxRate,
    /// Fleets in a row left far from their rate.
    RateUnreachable,
    /// Two fleets in a row had too few usable streams (frequent interruptions of
    /// sender or receiver).
    Unusable,
    /// No back-to-back train came through whole.
    NoInitialRate,
    /// The fleet limit.
    FleetLimit,
    /// The driver's time limit.
    TimeLimit,
    /// The driver stopped the run (a signal, a broken peer).
    Interrupted,
}

impl StopReason {
    /// Whether the range is a finished measurement.
    pub fn converged(self) -> bool {
        matches!(self, Self::UserResolution | Self::GreyResolution)
    }

    /// What the original's users read for it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::UserResolution => "user resolution achieved",
            Self::GreyResolution => "grey bw resolution achieved",
            Self::AboveMaxRate => "available bandwidth is above the maximum sending rate",
            Self::RateUnreachable => {
                "the requested rates could not be sent (fleets in a row left far from their rate)"
            }
            Self::Unusable => "too few usable streams (frequent context switches)",
            Self::NoInitialRate => "no back-to-back train arrived whole",
            Self::FleetLimit => "the fleet limit was reached before the search converged",
            Self::TimeLimit => "the time limit was reached before the search converged",
            Self::Interrupted => "interrupted before the search converged",
        }
    }
}

/// How much of the application traffic that rode in the probes the adjusted range
/// accounts for (MGRP §2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Adjustment {
    /// No application traffic rode: the range is as measured.
    None,
    /// Traffic rode, and the sender counted what arrived during every stream behind
    /// the range: the adjusted range subtracts it.
    Complete,
    /// Traffic rode in streams behind the range during which the sender counted none
    /// arriving (the traffic paused while they were sent, or the sender's reports do
    /// not count it): what it displaced is unknown, and the adjusted range may read
    /// high by up to [`Outcome::unaccounted`].
    Incomplete,
}

impl Adjustment {
    /// What it means, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::None => "no application traffic rode in the probes",
            Self::Complete => "the application traffic that rode was counted and subtracted",
            Self::Incomplete => {
                "application traffic rode in streams during which the sender counted none arriving: the adjusted range may read high"
            }
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Why it ended.
    pub reason: StopReason,
    /// Whether the run's answer is a lower bound: no trend up to the highest rate the
    /// sender reached (its maximum, or the rate it fell short at), nothing above seen;
    /// the available bandwidth is at least `low`.
    pub lower_bound: bool,
    /// Low end of the range as measured, Mbit/s.
    pub unadjusted_low: f64,
    /// High end of the range as measured, Mbit/s.
    pub unadjusted_high: f64,
    /// Low end less the competing application traffic, Mbit/s (the result).
    pub low: f64,
    /// High end less the competing application traffic, Mbit/s (the result).
    pub high: f64,
    /// Whether `low` and `high` account for all the application traffic that rode.
    pub adjustment: Adjustment,
    /// Fleets judged no trend whose delays grew all the same
    /// ([`FleetReport::hidden_trend`]): when not 0, the range may read high (cross
    /// traffic that arrives in bursts hides the trend from PCT and PDT).
    pub hidden_trend_fleets: u32,
    /// The larger of the two bounds' rates of application traffic that rode
    /// unaccounted for, Mbit/s (see [`Bound::unaccounted`]).
    pub unaccounted: f64,
    /// The initial rate from back-to-back trains, Mbit/s, if one came through.
    pub adr: Option<f64>,
    /// Fleets run.
    pub fleets: u32,
    /// Streams sent.
    pub streams: u32,
    /// IP bytes of every probe sent (trains and streams).
    pub probe_bytes: u64,
    /// Application bytes that rode in the probes.
    pub rider_bytes: u64,
    /// IP bytes of the probes that carried riders.
    pub riding_probe_bytes: u64,
    /// Streams whose departures were kernel stamps taken as each probe entered the
    /// sending host's egress queue; the others' were read in user space before each
    /// send (plain UDP, or a stream with a probe the kernel did not stamp).
    pub streams_kernel_stamped: u32,
    /// ω, Mbit/s.
    pub omega: f64,
    /// χ, Mbit/s.
    pub chi: f64,
}

/// What happened, for the driver to show.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A back-to-back train was judged.
    Train {
        /// Its number.
        id: u32,
        /// Its dispersion rate, if it came through whole and in order.
        adr: Option<f64>,
        /// Whether its gaps show interrupt coalescence.
        coalescence: bool,
    },
    /// The initial rate is known.
    Start {
        /// ADR, Mbit/s.
        adr: f64,
        /// ω, Mbit/s.
        omega: f64,
        /// χ, Mbit/s.
        chi: f64,
        /// Highest rate the sender can send, Mbit/s.
        max_rate: f64,
    },
    /// A stream was analysed.
    Stream {
        /// Fleet number.
        fleet: u32,
        /// Stream number.
        stream: u32,
        /// Its analysis.
        #[serde(flatten)]
        analysis: StreamAnalysis,
    },
    /// A fleet ended.
    Fleet(FleetReport),
}

#[derive(Debug)]
struct Fleet {
    id: u32,
    requested: f64,
    shape: crate::rate::Shape,
    packets: u32,
    repeat: bool,
    next_stream: u32,
    analyses: Vec<StreamAnalysis>,
    actual_rates: Vec<f64>,
    competing_bits: f64,
    /// Rider bits of streams whose report counted no competing bytes.
    unaccounted_bits: f64,
    sending_ns: f64,
}

#[derive(Debug)]
enum Phase {
    Adr { attempt: usize },
    Fleets(Fleet),
    Done(Outcome),
}

/// The measurement's state.
#[derive(Debug)]
pub struct Estimator {
    config: Config,
    phase: Phase,
    events: VecDeque<Event>,
    limits: Limits,
    search: Option<Search>,
    adr: Option<f64>,
    /// Packets per stream at the least: 300 once interrupt coalescence is seen.
    min_packets: u32,
    fleets: u32,
    streams: u32,
    rate_misses: u32,
    hidden_trend_fleets: u32,
    probe_bytes: u64,
    rider_bytes: u64,
    riding_probe_bytes: u64,
    streams_kernel_stamped: u32,
}

impl Estimator {
    /// A new run.
    pub fn new(config: Config) -> Self {
        let limits = Limits::new(config.max_size, 0);
        Self {
            min_packets: 2,
            config,
            phase: Phase::Adr { attempt: 0 },
            events: VecDeque::new(),
            limits,
            search: None,
            adr: None,
            fleets: 0,
            streams: 0,
            rate_misses: 0,
            hidden_trend_fleets: 0,
            probe_bytes: 0,
            rider_bytes: 0,
            riding_probe_bytes: 0,
            streams_kernel_stamped: 0,
        }
    }

    /// What to send next, or the end.
    pub fn poll_action(&self) -> Action {
        match &self.phase {
            Phase::Adr { attempt } => Action::Train(TrainSpec {
                id: *attempt as u32,
                packets: ADR_TRAIN_LENGTHS[*attempt],
                size: self.limits.max_size,
            }),
            Phase::Fleets(f) => Action::Stream(self.stream_spec(f)),
            Phase::Done(o) => Action::Done(o.clone()),
        }
    }

    /// The next thing that happened, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The sending limits in force (known after the first good train).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The search's bounds so far.
    pub fn bounds(&self) -> Bounds {
        self.search.as_ref().map(Search::bounds).unwrap_or_default()
    }

    fn stream_spec(&self, f: &Fleet) -> StreamSpec {
        let rmax = self.bounds().rmax.map(|b| b.rate);
        let rider_probes = if rmax.is_some_and(|r| f.requested >= r) {
            (f64::from(f.packets) * RIDER_SHARE_ABOVE_RMAX).ceil() as u32
        } else {
            f.packets
        };
        let duration = u64::from(f.packets.saturating_sub(1)) * f.shape.spacing_ns;
        let idle_ns = match self.config.mode {
            Mode::Slow => (SLOW_IDLE_STREAMS * duration).max(self.config.rtt_ns),
            Mode::Fast => self.config.rtt_ns,
        };
        StreamSpec {
            fleet: f.id,
            stream: f.next_stream,
            rate: f.shape.rate(),
            size: f.shape.size,
            packets: f.packets,
            spacing_ns: f.shape.spacing_ns,
            rider_probes,
            idle_ns,
        }
    }

    /// Feeds back a back-to-back train. Results of anything but the train asked for
    /// are ignored.
    pub fn handle_train(&mut self, result: &TrainResult) {
        let Phase::Adr { attempt } = self.phase else {
            return;
        };
        if result.id != attempt as u32 {
            return;
        }
        self.probe_bytes += u64::from(result.sent) * u64::from(self.limits.max_size);
        let judged = judge_train(self.limits.max_size, result);
        self.events.push_back(Event::Train {
            id: result.id,
            adr: judged.map(|j| j.adr),
            coalescence: judged.is_some_and(|j| j.coalescence),
        });
        let Some(j) = judged else {
            if attempt + 1 < ADR_TRAIN_LENGTHS.len() {
                self.phase = Phase::Adr {
                    attempt: attempt + 1,
                };
            } else {
                self.finish(StopReason::NoInitialRate);
            }
            return;
        };
        self.limits = Limits::new(self.config.max_size, j.send_cost_ns);
        if j.coalescence {
            self.min_packets = self.min_packets.max(PACKETS_PER_STREAM_COALESCED);
        }
        let adr = j.adr.min(self.limits.max_rate());
        let omega = self
            .config
            .omega_mbps
            .filter(|w| w.is_finite() && *w > 0.0)
            .unwrap_or(OMEGA_SHARE_OF_ADR * adr);
        let chi = (CHI_SHARE_OF_ADR * adr).min(CHI_MAX_MBPS);
        self.adr = Some(adr);
        self.search = Some(Search::new(omega, chi, self.limits.max_rate()));
        self.events.push_back(Event::Start {
            adr,
            omega,
            chi,
            max_rate: self.limits.max_rate(),
        });
        self.start_fleet(adr, false);
    }

    fn start_fleet(&mut self, rate: f64, repeat: bool) {
        if self.fleets >= self.config.max_fleets {
            self.finish(StopReason::FleetLimit);
            return;
        }
        self.fleets += 1;
        let shape = self.limits.shape(rate);
        let packets = self.packets_for(shape.spacing_ns);
        self.phase = Phase::Fleets(Fleet {
            id: self.fleets,
            requested: rate,
            shape,
            packets,
            repeat,
            next_stream: 0,
            analyses: Vec::new(),
            actual_rates: Vec::new(),
            competing_bits: 0.0,
            unaccounted_bits: 0.0,
            sending_ns: 0.0,
        });
    }

    /// Packets in a stream with gaps of `spacing_ns`: the fixed count if there is
    /// one, else as many as last the stream duration, at least [`PACKETS_PER_STREAM`]
    /// and at most [`MAX_PACKETS_PER_STREAM`].
    fn packets_for(&self, spacing_ns: u64) -> u32 {
        let n = match self.config.stream_packets {
            Some(k) => k,
            None => {
                let gaps = self.config.stream_duration_ns / spacing_ns.max(1);
                u32::try_from(gaps + 1)
                    .unwrap_or(u32::MAX)
                    .clamp(PACKETS_PER_STREAM, MAX_PACKETS_PER_STREAM)
            }
        };
        n.max(self.min_packets)
    }

    /// Feeds back a stream; returns its analysis. Results of anything but the stream
    /// asked for are ignored (`None`).
    pub fn handle_stream(&mut self, result: &StreamResult) -> Option<StreamAnalysis> {
        let Phase::Fleets(f) = &mut self.phase else {
            return None;
        };
        if result.fleet != f.id || result.stream != f.next_stream {
            return None;
        }
        let analysis = analyse(result.sent, f.shape.spacing_ns, &result.arrivals);
        self.streams += 1;
        self.probe_bytes += u64::from(result.sent) * u64::from(f.shape.size);
        self.rider_bytes += result.rider_bytes;
        self.riding_probe_bytes += result.riding_probe_bytes;
        self.streams_kernel_stamped += u32::from(result.kernel_stamps);
        if let Some(r) = actual_rate(f.shape.size, &result.sender_stamps) {
            f.actual_rates.push(r);
        }
        if let (Some(first), Some(last)) =
            (result.sender_stamps.first(), result.sender_stamps.last())
        {
            let span = last.saturating_sub(*first) as f64;
            if span > 0.0 {
                f.sending_ns += span;
                f.competing_bits += result.competing_rider_bytes as f64 * 8.0;
                // Riders rode, yet the sender saw none of the application's traffic
                // arrive while the stream left: the traffic paused during the stream
                // (or the report does not count it), and what it displaces is unknown.
                if result.rider_bytes > 0 && result.competing_rider_bytes == 0 {
                    f.unaccounted_bits += result.rider_bytes as f64 * 8.0;
                }
            }
        }
        f.analyses.push(analysis.clone());
        f.next_stream += 1;
        self.events.push_back(Event::Stream {
            fleet: result.fleet,
            stream: result.stream,
            analysis: analysis.clone(),
        });
        if let Some((verdict, end)) = fleet_verdict(
            &f.analyses,
            self.config.streams_per_fleet,
            self.config.early_verdict,
        ) {
            self.end_fleet(verdict, end);
        }
        Some(analysis)
    }

    fn end_fleet(&mut self, verdict: FleetVerdict, end: FleetEnd) {
        let Phase::Fleets(f) = &self.phase else {
            return;
        };
        let asked = f.requested;
        let requested = f.shape.rate();
        let actual = if f.actual_rates.is_empty() {
            requested
        } else {
            f.actual_rates.iter().sum::<f64>() / f.actual_rates.len() as f64
        };
        let (competing, unaccounted) = if f.sending_ns > 0.0 {
            (
                f.competing_bits / f.sending_ns * 1_000.0,
                f.unaccounted_bits / f.sending_ns * 1_000.0,
            )
        } else {
            (0.0, 0.0)
        };
        let trends: String = f
            .analyses
            .iter()
            .map(|a| a.trend.map_or('-', Trend::letter))
            .collect();
        let (id, repeat, streams) = (f.id, f.repeat, f.next_stream);
        let loss_abort = matches!(end, FleetEnd::HeavyLoss | FleetEnd::ModerateLoss);
        // A fleet aborted by loss counts as increasing at the requested rate.
        let at = Bound {
            rate: if loss_abort { requested } else { actual },
            competing,
            unaccounted,
        };
        // An unusable fleet is repeated anyway, for a reason more telling than its rate.
        let missed = !loss_abort
            && verdict != FleetVerdict::Unusable
            && (actual - requested).abs() > RATE_MISS_SHARE * requested;
        // A fleet that left slower than asked and still saw no trend saw none at the
        // rate it really left at: a lower bound all the same. (A sender held back by
        // its own host, as one whose uplink shaper is the tight link, never reaches a
        // rate above the path's and ends rate-unreachable with this bound.)
        let short_without_trend = missed && verdict == FleetVerdict::NoTrend && actual < requested;
        let verdict = if missed {
            FleetVerdict::RateMissed
        } else {
            verdict
        };
        let hidden_trend = verdict == FleetVerdict::NoTrend
            && !loss_abort
            && self
                .adr
                .zip(self.search.as_ref().map(Search::chi))
                .is_some_and(|(capacity, chi)| trend_hidden(&f.analyses, capacity, chi));
        self.hidden_trend_fleets += u32::from(hidden_trend);
        let aim = (verdict == FleetVerdict::Increasing && !loss_abort)
            .then(|| self.adr.and_then(|c| aim_from(&f.analyses, at.rate, c)))
            .flatten();
        let Some(search) = self.search.as_mut() else {
            return;
        };
        match verdict {
            FleetVerdict::Increasing => search.record(at, Trend::Increasing),
            FleetVerdict::NoTrend => search.record(at, Trend::NoTrend),
            FleetVerdict::Grey => search.record(at, Trend::Ambiguous),
            FleetVerdict::RateMissed if short_without_trend => {
                search.record(at, Trend::NoTrend);
            }
            FleetVerdict::Unusable | FleetVerdict::RateMissed => {}
        }
        if self.config.aim
            && let Some(rate) = aim
        {
            search.aim_at(rate, at.rate);
        }
        let bounds = search.bounds();
        self.events.push_back(Event::Fleet(FleetReport {
            fleet: id,
            requested_rate: requested,
            actual_rate: actual,
            competing_rate: competing,
            verdict,
            end,
            streams,
            trends,
            bounds,
            aim,
            hidden_trend,
        }));
        if verdict == FleetVerdict::Unusable {
            if repeat {
                self.finish(StopReason::Unusable);
            } else {
                self.start_fleet(requested, true);
            }
            return;
        }
        self.rate_misses = if missed { self.rate_misses + 1 } else { 0 };
        if self.rate_misses >= RATE_MISSES_TO_STOP {
            self.finish(StopReason::RateUnreachable);
            return;
        }
        if missed {
            self.start_fleet(asked, false);
            return;
        }
        match search.next(asked, at.rate) {
            Next::Rate(r) => self.start_fleet(r, false),
            Next::Converged(c) => self.finish(match c {
                Convergence::UserResolution => StopReason::UserResolution,
                Convergence::GreyResolution => StopReason::GreyResolution,
                Convergence::AboveMaxRate => StopReason::AboveMaxRate,
            }),
        }
    }

    /// Ends the run now (time limit, signal, broken peer) with the bounds seen so far.
    /// Does nothing once the run is over.
    pub fn handle_stop(&mut self, reason: StopReason) {
        if !matches!(self.phase, Phase::Done(_)) {
            self.finish(reason);
        }
    }

    /// Whether the run is over.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done(_))
    }

    fn finish(&mut self, reason: StopReason) {
        let (lo, hi, omega, chi, lower_bound) = match &self.search {
            Some(s) => {
                let (lo, hi) = s.range();
                let b = s.bounds();
                // No trend up to the highest rate the sender reached, and nothing
                // above it seen: the available bandwidth is at least that rate.
                let only_below = b.rmin.is_some() && b.rmax.is_none() && b.gmax.is_none();
                let lower_bound = reason == StopReason::AboveMaxRate
                    || (reason == StopReason::RateUnreachable && only_below);
                (lo, hi, s.omega(), s.chi(), lower_bound)
            }
            None => {
                let zero = Bound::default();
                (zero, zero, 0.0, 0.0, false)
            }
        };
        let (a, b) = (lo.adjusted(), hi.adjusted());
        let unaccounted = lo.unaccounted.max(hi.unaccounted);
        let adjustment = if self.rider_bytes == 0 {
            Adjustment::None
        } else if unaccounted > 0.0 && unaccounted >= UNACCOUNTED_SHARE_OF_OMEGA * omega {
            Adjustment::Incomplete
        } else {
            Adjustment::Complete
        };
        self.phase = Phase::Done(Outcome {
            reason,
            lower_bound,
            unadjusted_low: lo.rate,
            unadjusted_high: hi.rate,
            low: a.min(b),
            high: a.max(b),
            adjustment,
            hidden_trend_fleets: self.hidden_trend_fleets,
            unaccounted,
            adr: self.adr,
            fleets: self.fleets,
            streams: self.streams,
            probe_bytes: self.probe_bytes,
            rider_bytes: self.rider_bytes,
            riding_probe_bytes: self.riding_probe_bytes,
            streams_kernel_stamped: self.streams_kernel_stamped,
            omega,
            chi,
        });
    }
}

#[derive(Debug, Clone, Copy)]
struct JudgedTrain {
    adr: f64,
    coalescence: bool,
    send_cost_ns: u64,
}

/// A back-to-back train is good when every packet arrived, in order; its dispersion
/// rate is (n − 1) packets over the time from the first arrival to the last.
fn judge_train(size: u32, t: &TrainResult) -> Option<JudgedTrain> {
    if t.sent < 2 || t.arrivals.len() != t.sent as usize {
        return None;
    }
    let mut a = t.arrivals.clone();
    a.sort_by_key(|x| x.seq);
    let in_order = a.iter().enumerate().all(|(i, x)| x.seq == i as u32)
        && a.windows(2).all(|w| w[1].received_ns >= w[0].received_ns);
    if !in_order {
        return None;
    }
    let span = a[a.len() - 1].received_ns.saturating_sub(a[0].received_ns);
    if span <= 0 {
        return None;
    }
    let gaps = a.len() - 1;
    let adr = gaps as f64 * f64::from(size) * 8.0 * 1_000.0 / span as f64;
    let batched = a
        .windows(2)
        .filter(|w| w[1].received_ns.saturating_sub(w[0].received_ns) <= COALESCENCE_GAP_NS)
        .count();
    let mut send_gaps: Vec<i64> = a
        .windows(2)
        .map(|w| w[1].sent_ns.saturating_sub(w[0].sent_ns))
        .collect();
    send_gaps.sort_unstable();
    let send_cost_ns = u64::try_from(send_gaps[send_gaps.len() / 2]).unwrap_or(0);
    Some(JudgedTrain {
        adr,
        coalescence: batched as f64 > COALESCENCE_SHARE * gaps as f64,
        send_cost_ns,
    })
}

/// Whether a fleet judged no trend hid one: its streams' mean delay growth times the
/// capacity (about the initial rate) exceeds [`HIDDEN_TREND_CHI`] grey resolutions
/// (`chi`, Mbit/s), and lies more than [`HIDDEN_TREND_STANDARD_ERRORS`] standard
/// errors above zero (three streams with a growth at the least).
fn trend_hidden(analyses: &[StreamAnalysis], capacity: f64, chi: f64) -> bool {
    let growths: Vec<f64> = analyses
        .iter()
        .filter_map(|a| a.growth)
        .filter(|g| g.is_finite())
        .collect();
    let n = growths.len();
    if n < 3 {
        return false;
    }
    let mean = growths.iter().sum::<f64>() / n as f64;
    let var = growths.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let standard_error = (var / n as f64).sqrt();
    mean * capacity > HIDDEN_TREND_CHI * chi && mean > HIDDEN_TREND_STANDARD_ERRORS * standard_error
}

/// Where the increasing streams of a fleet at `rate` put the available bandwidth,
/// Mbit/s, on a path of capacity about `capacity` (the initial rate): `rate` less the
/// median delay growth times the capacity (a stream at R above the available
/// bandwidth A over a FIFO of capacity C grows its delays at (R − A) / C). `None`
/// unless the answer lies between 0 and `rate`.
fn aim_from(analyses: &[StreamAnalysis], rate: f64, capacity: f64) -> Option<f64> {
    let mut growths: Vec<f64> = analyses
        .iter()
        .filter(|a| a.trend == Some(Trend::Increasing))
        .filter_map(|a| a.growth)
        .filter(|g| g.is_finite() && *g > 0.0)
        .collect();
    if growths.is_empty() {
        return None;
    }
    growths.sort_by(f64::total_cmp);
    let n = growths.len();
    let g = if n % 2 == 1 {
        growths[n / 2]
    } else {
        (growths[n / 2 - 1] + growths[n / 2]) / 2.0
    };
    let aim = rate - g * capacity;
    (aim > 0.0 && aim < rate).then_some(aim)
}

/// The fleet's verdict once it is certain, with how the fleet ended; `None` while
/// more streams are needed.
fn fleet_verdict(
    analyses: &[StreamAnalysis],
    planned: u32,
    early: bool,
) -> Option<(FleetVerdict, FleetEnd)> {
    let sent = analyses.len() as u32;
    if analyses.iter().any(|a| a.loss_class == LossClass::Heavy) {
        return Some((FleetVerdict::Increasing, FleetEnd::HeavyLoss));
    }
    let moderate = analyses
        .iter()
        .filter(|a| a.loss_class == LossClass::Moderate)
        .count();
    if moderate as f64 >= MODERATE_LOSS_STREAMS * f64::from(planned) {
        return Some((FleetVerdict::Increasing, FleetEnd::ModerateLoss));
    }
    let count = |t: Trend| analyses.iter().filter(|a| a.trend == Some(t)).count() as f64;
    let (inc, none) = (count(Trend::Increasing), count(Trend::NoTrend));
    let usable = analyses.iter().filter(|a| a.trend.is_some()).count() as f64;
    let left = f64::from(planned.saturating_sub(sent));
    if left == 0.0 {
        let verdict = if usable < f64::from(MIN_USABLE_STREAMS) {
            FleetVerdict::Unusable
        } else if inc >= FLEET_AGREEMENT * usable {
            FleetVerdict::Increasing
        } else if none >= FLEET_AGREEMENT * usable {
            FleetVerdict::NoTrend
        } else {
            FleetVerdict::Grey
        };
        return Some((verdict, FleetEnd::Complete));
    }
    if !early {
        return None;
    }
    // Certain whatever the remaining streams show: the worst case for a share is that
    // every remaining stream is usable and of another trend, the best that every one
    // is usable and of this trend; the usable-count rule must hold even if every
    // remaining stream is discarded. Loss can only turn a verdict into INCREASING, so
    // an early INCREASING is exactly the original's; an early NO TREND or GREY is
    // taken only while no stream so far lost 3 % or more.
    let usable_for_sure = usable >= f64::from(MIN_USABLE_STREAMS);
    let surely = |n: f64| usable_for_sure && n >= FLEET_AGREEMENT * (usable + left);
    let possibly = |n: f64| n + left >= FLEET_AGREEMENT * (usable + left);
    if surely(inc) {
        return Some((FleetVerdict::Increasing, FleetEnd::Decided));
    }
    if moderate > 0 {
        return None;
    }
    if surely(none) && !possibly(inc) {
        return Some((FleetVerdict::NoTrend, FleetEnd::Decided));
    }
    if usable_for_sure && !possibly(inc) && !possibly(none) {
        return Some((FleetVerdict::Grey, FleetEnd::Decided));
    }
    None
}

#[cfg(test)]
mod tests;
