//! What MGRP tells a tool about its transaction, and the counters of the planner and
//! of reassembly.
//!
//! The kernel module of the paper answered an `ioctl` with, per transaction, how long
//! queueing and sending took, how many probes carried riders, how many rider bytes
//! rode, and how many of those would have competed with the train had MGRP been off
//! (paper §2.4). [`TransactionReport`] carries the same, plus every probe's actual
//! departure, so a tool can check its gaps itself. These types are `serde` types
//! because the client API returns them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{MonoTime, WallTime};

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every probe was handed to the network (see [`TransactionReport::probes_sent`]
    /// for probes whose send failed).
    Completed,
    /// The transaction was cancelled after some of its probes left.
    Cancelled,
}

/// One probe's departure.
///
/// A probe has up to four times. Two are the daemon's own: `deadline` and `departed`
/// on the monotonic clock, and `stamp`, its realtime clock read just before the send
/// and written into the probe. Two are the kernel's, on the realtime clock, read back
/// from the socket's error queue: `kernel_queued`, taken as the probe entered the
/// egress queue (qdisc) of the sending host's device, and `kernel_sent`, taken as the
/// device took it from that queue. The sending host's own queue is the first queue of
/// the measured path: a shaper there (a host that shapes its uplink, a router that runs
/// mgrpd) holds probes back exactly as a bottleneck further on would. So the departure
/// into the path is `kernel_queued`; `kernel_sent` records the local shaper's output,
/// and the difference is how long the probe waited in the local queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeDeparture {
    /// Sequence number within the train.
    pub seq: u16,
    /// When the probe was due.
    pub deadline: MonoTime,
    /// When it actually left (monotonic clock), or `None` if sending it failed.
    pub departed: Option<MonoTime>,
    /// The sender stamp written into the probe (realtime clock), taken just before
    /// the send.
    pub stamp: WallTime,
    /// When the kernel put the probe into the egress queue of the sending device
    /// (realtime clock, `SCM_TSTAMP_SCHED`), if the daemon's kernel gives such stamps:
    /// the departure into the measured path. Later than `stamp` by the time the send
    /// call took to reach the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_queued: Option<WallTime>,
    /// When the network device took the probe from that queue (realtime clock,
    /// `SCM_TSTAMP_SND`), if its stamp came back in time for the report. Behind a
    /// local shaper this is the shaper's output, not the departure: a diagnostic.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "kernel_departed"
    )]
    pub kernel_sent: Option<WallTime>,
    /// Rider bytes (chunk data) the probe carried.
    pub rider_bytes: u32,
}

impl ProbeDeparture {
    /// This probe's departure into the path on the realtime clock: the kernel's
    /// queue-entry stamp where there is one, else the daemon's. For the probes of one
    /// train use [`TransactionReport::departure_times`], which never mixes the two.
    pub fn best_departure(&self) -> WallTime {
        self.kernel_queued.unwrap_or(self.stamp)
    }

    /// The departure on `clock`, or `None` for a probe that did not leave or has no
    /// stamp of that kind.
    pub fn departure_on(&self, clock: DepartureClock) -> Option<WallTime> {
        self.departed?;
        match clock {
            DepartureClock::KernelQueue => self.kernel_queued,
            DepartureClock::Daemon => Some(self.stamp),
        }
    }

    /// How long the probe waited in the sending host's egress queue, where both kernel
    /// stamps are known.
    pub fn local_queue_wait(&self) -> Option<Duration> {
        let (q, s) = (self.kernel_queued?, self.kernel_sent?);
        u64::try_from(s.signed_nanos_since(q))
            .ok()
            .map(Duration::from_nanos)
    }

    /// How late the probe entered the path: from its deadline to the send call, plus
    /// the time the send call took to reach the egress queue when the kernel stamped
    /// it. `None` for a probe that did not leave.
    pub fn lateness(&self) -> Option<Duration> {
        let departed = self.departed?;
        let in_send = self.kernel_queued.map_or(0, |k| {
            u64::try_from(k.signed_nanos_since(self.stamp)).unwrap_or(0)
        });
        Some(departed.saturating_since(self.deadline) + Duration::from_nanos(in_send))
    }
}

/// Which clock a report's departure times are on (see
/// [`TransactionReport::departure_clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepartureClock {
    /// The kernel's stamps as each probe entered the sending device's egress queue.
    KernelQueue,
    /// The daemon's stamps, read just before each send: kernel stamps were off, or at
    /// least one probe that left has none.
    #[default]
    Daemon,
}

/// The report of one probe transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionReport {
    /// Transaction id.
    pub transaction: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Probes the tool asked for.
    pub probes_requested: u16,
    /// Probes handed to the network.
    pub probes_sent: u16,
    /// Probes that carried at least one rider chunk.
    pub probes_with_riders: u16,
    /// Rider bytes (chunk data) carried by the train.
    pub rider_bytes: u64,
    /// Rider chunks carried by the train.
    pub rider_chunks: u32,
    /// Application bytes to this destination that MGRP kept off the path while the
    /// train was on it: bytes that arrived between its first and last departure, less
    /// the held bytes that went onto the path outside probes meanwhile (unchanged, or
    /// in continuation packets). Without MGRP those bytes would have competed with the
    /// train; tools such as pathload add them back (MGRP §2.4). They need not have
    /// ridden in this train: a rider that arrived before the train and rode in it was
    /// off the path before it too, and one that arrived during it and was still held
    /// at its end was off the path all the same. 0 where the held bytes that left
    /// outweigh those that arrived.
    pub competing_rider_bytes: u64,
    /// Nanoseconds from the submission of the train to its first departure: time the
    /// train spent queued behind other trains plus the daemon's start-up latency.
    pub queue_ns: u64,
    /// Nanoseconds from the first to the last departure.
    pub send_ns: u64,
    /// Every probe's departure, in sequence order (as many as left before the end).
    pub departures: Vec<ProbeDeparture>,
    /// Probes that left more than `late_threshold_ns` after their deadline (see
    /// [`ProbeDeparture::lateness`]). A tool that needs exact gaps should discard a
    /// stream with late probes, or at least the gaps around them.
    #[serde(default)]
    pub probes_late: u16,
    /// The lateness above which a probe counts in `probes_late`, in nanoseconds (the
    /// daemon's `late-threshold`); 0 when lateness was not judged.
    #[serde(default)]
    pub late_threshold_ns: u64,
    /// Probes that left without a kernel queue-entry stamp although the daemon asks
    /// for them (0 when kernel stamps are off). One is enough to put the whole train on
    /// the daemon's clock: see [`Self::departure_clock`].
    #[serde(default)]
    pub probes_unstamped: u16,
    /// The clock of [`Self::departure_times`]: the kernel's queue-entry stamps when
    /// every probe that left has one, else the daemon's stamps for every probe. The
    /// two are taken at different points (before and inside the send call), so a tool
    /// that mixed them within one train would read the difference as a gap.
    #[serde(default)]
    pub departure_clock: DepartureClock,
    /// Probes that fell due while another train's probe (to another destination) was
    /// being sent, and so left after it: their departures say when they left. A tool
    /// reads rates from departures, not deadlines, so such a probe costs it nothing
    /// but the exact gap it asked for; one that needs exact gaps drops the gaps around
    /// it, as around a late probe.
    #[serde(default)]
    pub probes_displaced: u16,
}

impl TransactionReport {
    /// The report of a train none of whose `probes_requested` probes left (yet).
    pub fn unsent(transaction: u32, outcome: Outcome, probes_requested: u16) -> Self {
        Self {
            transaction,
            outcome,
            probes_requested,
            probes_sent: 0,
            probes_with_riders: 0,
            rider_bytes: 0,
            rider_chunks: 0,
            competing_rider_bytes: 0,
            queue_ns: 0,
            send_ns: 0,
            departures: Vec::new(),
            probes_late: 0,
            late_threshold_ns: 0,
            probes_unstamped: 0,
            departure_clock: DepartureClock::Daemon,
            probes_displaced: 0,
        }
    }

    /// Every probe that left, with its departure into the path on
    /// [`Self::departure_clock`], in sequence order: one clock for the whole train.
    pub fn departure_times(&self) -> impl Iterator<Item = (u16, WallTime)> + '_ {
        let clock = self.departure_clock;
        self.departures
            .iter()
            .filter_map(move |d| Some((d.seq, d.departure_on(clock)?)))
    }

    /// Makes the report final once every kernel stamp that will be in it is in:
    /// counts the probes that left without a queue-entry stamp (if `kernel_stamps`, the
    /// daemon asked for them), chooses the departure clock, and counts the probes that
    /// left later than `late_threshold` after their deadline.
    pub fn settle(&mut self, kernel_stamps: bool, late_threshold: Duration) {
        let left = || self.departures.iter().filter(|d| d.departed.is_some());
        let unstamped = left().filter(|d| d.kernel_queued.is_none()).count();
        self.probes_unstamped = if kernel_stamps {
            u16::try_from(unstamped).unwrap_or(u16::MAX)
        } else {
            0
        };
        self.departure_clock = if unstamped == 0 && left().next().is_some() {
            DepartureClock::KernelQueue
        } else {
            DepartureClock::Daemon
        };
        self.judge_lateness(late_threshold);
    }

    /// Counts the probes that left later than `threshold` after their deadline into
    /// `probes_late`, and records the threshold. Call once every departure is final
    /// (kernel stamps included).
    pub fn judge_lateness(&mut self, threshold: Duration) {
        let late = self
            .departures
            .iter()
            .filter_map(ProbeDeparture::lateness)
            .filter(|&l| l > threshold)
            .count();
        self.probes_late = u16::try_from(late).unwrap_or(u16::MAX);
        self.late_threshold_ns = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
    }
}

/// Counters of one planner (one destination). Every rider pushed ends in exactly one
/// of `riders_piggybacked`, `riders_sent_unchanged`, `riders_dropped_*`, or is still
/// held: see [`PlannerCounters::riders_accounted`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerCounters {
    /// Riders pushed into the planner.
    pub riders_in: u64,
    /// Bytes of riders pushed into the planner.
    pub rider_bytes_in: u64,
    /// Riders all of whose bytes left inside MGRP packets (probes, and for some a final
    /// continuation packet).
    pub riders_piggybacked: u64,
    /// Of `riders_piggybacked`, riders whose last bytes left in continuation packets
    /// because their hold time ran out mid-train.
    pub riders_finished_by_continuation: u64,
    /// Riders released whole and unchanged.
    pub riders_sent_unchanged: u64,
    /// Riders dropped because the queue was full.
    pub riders_dropped_queue_full: u64,
    /// Riders dropped because they were larger than the path allows.
    pub riders_dropped_too_large: u64,
    /// Riders dropped because they were empty.
    pub riders_dropped_empty: u64,
    /// Riders still held.
    pub riders_held: u64,
    /// Probes planned.
    pub probes_planned: u64,
    /// Probes planned with at least one rider chunk.
    pub probes_with_riders: u64,
    /// Rider bytes planned into probes.
    pub rider_bytes_in_probes: u64,
    /// Continuation packets emitted.
    pub continuation_packets: u64,
    /// Rider bytes emitted in continuation packets.
    pub rider_bytes_in_continuations: u64,
    /// Transactions accepted.
    pub transactions_accepted: u64,
    /// Transactions rejected as invalid.
    pub transactions_rejected: u64,
    /// Transactions that ended with every probe planned.
    pub transactions_completed: u64,
    /// Transactions cancelled.
    pub transactions_cancelled: u64,
}

impl PlannerCounters {
    /// Riders dropped for any reason.
    pub fn riders_dropped(&self) -> u64 {
        self.riders_dropped_queue_full + self.riders_dropped_too_large + self.riders_dropped_empty
    }

    /// Whether every rider pushed is accounted for exactly once:
    /// `in == piggybacked + unchanged + dropped + held`.
    pub fn riders_accounted(&self) -> bool {
        self.riders_in
            == self.riders_piggybacked
                + self.riders_sent_unchanged
                + self.riders_dropped()
                + self.riders_held
    }
}

impl std::ops::AddAssign<&Self> for PlannerCounters {
    /// Adds another planner's counters, for totals over destinations.
    fn add_assign(&mut self, c: &Self) {
        let Self {
            riders_in,
            rider_bytes_in,
            riders_piggybacked,
            riders_finished_by_continuation,
            riders_sent_unchanged,
            riders_dropped_queue_full,
            riders_dropped_too_large,
            riders_dropped_empty,
            riders_held,
            probes_planned,
            probes_with_riders,
            rider_bytes_in_probes,
            continuation_packets,
            rider_bytes_in_continuations,
            transactions_accepted,
            transactions_rejected,
            transactions_completed,
            transactions_cancelled,
        } = c;
        // Destructured so that a new counter cannot be forgotten here.
        self.riders_in += riders_in;
        self.rider_bytes_in += rider_bytes_in;
        self.riders_piggybacked += riders_piggybacked;
        self.riders_finished_by_continuation += riders_finished_by_continuation;
        self.riders_sent_unchanged += riders_sent_unchanged;
        self.riders_dropped_queue_full += riders_dropped_queue_full;
        self.riders_dropped_too_large += riders_dropped_too_large;
        self.riders_dropped_empty += riders_dropped_empty;
        self.riders_held += riders_held;
        self.probes_planned += probes_planned;
        self.probes_with_riders += probes_with_riders;
        self.rider_bytes_in_probes += rider_bytes_in_probes;
        self.continuation_packets += continuation_packets;
        self.rider_bytes_in_continuations += rider_bytes_in_continuations;
        self.transactions_accepted += transactions_accepted;
        self.transactions_rejected += transactions_rejected;
        self.transactions_completed += transactions_completed;
        self.transactions_cancelled += transactions_cancelled;
    }
}

/// Counters of a reassembler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReassemblyCounters {
    /// Chunks handed in.
    pub chunks_in: u64,
    /// Chunks that repeated bytes already held (or of a rider already delivered).
    pub chunks_duplicate: u64,
    /// Riders delivered complete.
    pub riders_delivered: u64,
    /// Rider bytes delivered.
    pub rider_bytes_delivered: u64,
    /// Incomplete riders discarded because they timed out.
    pub riders_timed_out: u64,
    /// Incomplete riders evicted to stay within a peer's memory bound.
    pub riders_evicted_peer_limit: u64,
    /// Incomplete riders evicted to stay within the total memory bound.
    pub riders_evicted_total_limit: u64,
    /// Riders discarded because their chunks disagreed (rider length, or different
    /// bytes for the same offsets).
    pub riders_inconsistent: u64,
    /// Chunks refused because their rider alone exceeds a memory bound.
    pub chunks_too_large: u64,
    /// Riders currently being reassembled.
    pub riders_pending: u64,
    /// Bytes reserved for riders being reassembled.
    pub bytes_pending: u64,
}

impl std::ops::AddAssign<&Self> for ReassemblyCounters {
    /// Adds another reassembler's counters (one per receiving address family).
    fn add_assign(&mut self, c: &Self) {
        self.chunks_in += c.chunks_in;
        self.chunks_duplicate += c.chunks_duplicate;
        self.riders_delivered += c.riders_delivered;
        self.rider_bytes_delivered += c.rider_bytes_delivered;
        self.riders_timed_out += c.riders_timed_out;
        self.riders_evicted_peer_limit += c.riders_evicted_peer_limit;
        self.riders_evicted_total_limit += c.riders_evicted_total_limit;
        self.riders_inconsistent += c.riders_inconsistent;
        self.chunks_too_large += c.chunks_too_large;
        self.riders_pending += c.riders_pending;
        self.bytes_pending += c.bytes_pending;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn departure(seq: u16, deadline_us: u64, departed_us: Option<u64>) -> ProbeDeparture {
        ProbeDeparture {
            seq,
            deadline: MonoTime::from_nanos(deadline_us * 1000),
            departed: departed_us.map(|d| MonoTime::from_nanos(d * 1000)),
            stamp: WallTime::from_nanos(1_000_000_000 + departed_us.unwrap_or(0) * 1000),
            kernel_queued: None,
            kernel_sent: None,
            rider_bytes: 0,
        }
    }

    #[test]
    fn lateness_counts_the_time_inside_the_send_when_the_kernel_stamped() {
        let mut on_time = departure(0, 100, Some(103));
        assert_eq!(on_time.lateness(), Some(Duration::from_micros(3)));
        // The send call took 40 µs to reach the egress queue; a local shaper then held
        // the probe for 8 ms, which is the path's doing, not lateness.
        on_time.kernel_queued = Some(WallTime::from_nanos(on_time.stamp.as_nanos() + 40_000));
        on_time.kernel_sent = Some(WallTime::from_nanos(on_time.stamp.as_nanos() + 8_040_000));
        assert_eq!(on_time.lateness(), Some(Duration::from_micros(43)));
        assert_eq!(on_time.best_departure(), on_time.kernel_queued.unwrap());
        assert_eq!(on_time.local_queue_wait(), Some(Duration::from_millis(8)));
        // A probe that left early (the clocks disagree by a little) is not late.
        let early = departure(1, 200, Some(199));
        assert_eq!(early.lateness(), Some(Duration::ZERO));
        assert_eq!(departure(2, 300, None).lateness(), None);
    }

    #[test]
    fn judging_lateness_counts_probes_over_the_threshold_only() {
        let mut r = TransactionReport {
            probes_sent: 3,
            departures: vec![
                departure(0, 0, Some(5)),
                departure(1, 200, Some(251)),
                departure(2, 400, Some(450)),
                departure(3, 600, None),
            ],
            ..TransactionReport::unsent(7, Outcome::Completed, 4)
        };
        r.judge_lateness(Duration::from_micros(50));
        assert_eq!(r.probes_late, 1, "only 51 µs is over 50 µs");
        assert_eq!(r.late_threshold_ns, 50_000);
        // Older daemons' reports, without the new fields, still parse.
        let mut json = serde_json::to_value(&r).unwrap();
        let obj = json.as_object_mut().unwrap();
        obj.remove("probes_late");
        obj.remove("late_threshold_ns");
        let back: TransactionReport = serde_json::from_value(json).unwrap();
        assert_eq!(back.probes_late, 0);
        assert_eq!(back.departures[0].kernel_sent, None);
        assert_eq!(back.departure_clock, DepartureClock::Daemon);
    }

    #[test]
    fn one_missing_queue_stamp_puts_the_whole_train_on_the_daemons_clock() {
        let queued = |mut d: ProbeDeparture| {
            d.kernel_queued = Some(WallTime::from_nanos(d.stamp.as_nanos() + 3_000));
            d
        };
        let mut r = TransactionReport {
            probes_sent: 3,
            departures: vec![
                queued(departure(0, 0, Some(1))),
                queued(departure(1, 200, Some(201))),
                departure(2, 400, Some(401)),
                // Never left: neither counted as unstamped nor listed.
                departure(3, 600, None),
            ],
            ..TransactionReport::unsent(8, Outcome::Completed, 4)
        };
        r.settle(true, Duration::from_micros(50));
        assert_eq!(r.probes_unstamped, 1);
        assert_eq!(r.departure_clock, DepartureClock::Daemon);
        let daemon: Vec<_> = r.departure_times().collect();
        let stamps: Vec<_> = r.departures[..3].iter().map(|d| (d.seq, d.stamp)).collect();
        assert_eq!(daemon, stamps, "every time from the daemon's clock");

        r.departures[2] = queued(r.departures[2]);
        r.settle(true, Duration::from_micros(50));
        assert_eq!(r.probes_unstamped, 0);
        assert_eq!(r.departure_clock, DepartureClock::KernelQueue);
        assert!(
            r.departure_times()
                .zip(&r.departures)
                .all(|((seq, t), d)| seq == d.seq && Some(t) == d.kernel_queued)
        );

        // Without kernel stamps nothing is missing, and the daemon's clock is the one.
        let mut plain = TransactionReport {
            departures: vec![departure(0, 0, Some(1))],
            ..TransactionReport::unsent(9, Outcome::Completed, 1)
        };
        plain.settle(false, Duration::from_micros(50));
        assert_eq!(plain.probes_unstamped, 0);
        assert_eq!(plain.departure_clock, DepartureClock::Daemon);
    }
}
