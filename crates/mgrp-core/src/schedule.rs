//! Departure deadlines of a probe train and how well a sent train kept them.
//!
//! Deadlines are absolute: probe *i* is due at `t0 + gap₀ + … + gapᵢ`, never "a gap
//! after the previous send", so one late departure does not shift every later one and
//! errors cannot accumulate. [`TimingSummary`] condenses a sent train into lateness
//! and gap-error percentiles and a count of stalls, so a tool (and our benches) can
//! see a hypervisor pause instead of having it averaged away.
//!
//! The planner keeps the same deadlines one gap at a time (a train in flight holds
//! only its next deadline, so the pacer allocates nothing per probe); [`Schedule`]
//! is the reference it is tested against, and what the benches judge sent trains by.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::MonoTime;
use crate::time::duration_nanos;

/// The absolute deadlines of one train.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    t0: MonoTime,
    gaps: Vec<u64>,
    offsets: Vec<u64>,
}

impl Schedule {
    /// Deadlines from `t0`, where `gaps[i]` is the gap before probe `i` (the first
    /// probe's gap counts from `t0`).
    pub fn new(t0: MonoTime, gaps: impl IntoIterator<Item = Duration>) -> Self {
        let mut sum = 0u64;
        let mut g = Vec::new();
        let offsets = gaps
            .into_iter()
            .map(|gap| {
                let n = duration_nanos(gap);
                g.push(n);
                sum = sum.saturating_add(n);
                sum
            })
            .collect();
        Self {
            t0,
            gaps: g,
            offsets,
        }
    }

    /// The train's origin.
    pub fn t0(&self) -> MonoTime {
        self.t0
    }

    /// Number of probes.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether the train has no probes.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// When probe `i` is due.
    pub fn deadline(&self, i: usize) -> Option<MonoTime> {
        self.offsets
            .get(i)
            .map(|&o| MonoTime::from_nanos(self.t0.as_nanos().saturating_add(o)))
    }

    /// The scheduled gap before probe `i`.
    pub fn gap(&self, i: usize) -> Option<Duration> {
        self.gaps.get(i).map(|&n| Duration::from_nanos(n))
    }

    /// Summarises how well `departures` (in probe order) kept the schedule. A gap that
    /// exceeds its scheduled length by more than half of it, and by more than
    /// `stall_floor`, counts as a stall (the floor keeps back-to-back probes, whose gap
    /// is zero, from counting every microsecond of send cost as a stall).
    pub fn summarize(&self, departures: &[MonoTime], stall_floor: Duration) -> TimingSummary {
        let n = departures.len().min(self.len());
        let floor = i64::try_from(duration_nanos(stall_floor)).unwrap_or(i64::MAX);
        let mut lateness = Vec::with_capacity(n);
        let mut gap_err = Vec::with_capacity(n.saturating_sub(1));
        let mut stalls = 0u32;
        for (i, &dep) in departures.iter().enumerate().take(n) {
            let due = MonoTime::from_nanos(self.t0.as_nanos().saturating_add(self.offsets[i]));
            lateness.push(dep.signed_nanos_since(due));
            if i > 0 {
                let planned = i64::try_from(self.gaps[i]).unwrap_or(i64::MAX);
                let err = dep.signed_nanos_since(departures[i - 1]) - planned;
                gap_err.push(err.unsigned_abs());
                if err > (planned / 2).max(floor) {
                    stalls += 1;
                }
            }
        }
        lateness.sort_unstable();
        gap_err.sort_unstable();
        TimingSummary {
            probes: n as u64,
            lateness_median_ns: percentile(&lateness, 50.0).unwrap_or(0),
            lateness_p99_ns: percentile(&lateness, 99.0).unwrap_or(0),
            lateness_max_ns: lateness.last().copied().unwrap_or(0),
            gap_error_median_ns: percentile(&gap_err, 50.0).unwrap_or(0),
            gap_error_p99_ns: percentile(&gap_err, 99.0).unwrap_or(0),
            gap_error_max_ns: gap_err.last().copied().unwrap_or(0),
            stalls,
        }
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// How well a sent train kept its schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingSummary {
    /// Departures summarised.
    pub probes: u64,
    /// Median of departure − deadline (negative: early).
    pub lateness_median_ns: i64,
    /// 99th percentile of departure − deadline.
    pub lateness_p99_ns: i64,
    /// Largest departure − deadline.
    pub lateness_max_ns: i64,
    /// Median of |actual gap − scheduled gap|.
    pub gap_error_median_ns: u64,
    /// 99th percentile of |actual gap − scheduled gap|.
    pub gap_error_p99_ns: u64,
    /// Largest |actual gap − scheduled gap|.
    pub gap_error_max_ns: u64,
    /// Gaps stretched by more than half their length (and the stall floor).
    pub stalls: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn deadlines_are_absolute() {
        let s = Schedule::new(
            MonoTime::from_nanos(1_000),
            [us(0), us(200), us(200), us(1)],
        );
        assert_eq!(s.len(), 4);
        assert_eq!(s.deadline(0), Some(MonoTime::from_nanos(1_000)));
        assert_eq!(s.deadline(2), Some(MonoTime::from_nanos(401_000)));
        assert_eq!(s.deadline(3), Some(MonoTime::from_nanos(402_000)));
        assert_eq!(s.deadline(4), None);
        assert_eq!(s.gap(1), Some(us(200)));
    }

    #[test]
    fn a_late_probe_does_not_shift_the_rest() {
        let s = Schedule::new(MonoTime::ZERO, [us(0), us(200), us(200), us(200)]);
        // Probe 1 leaves 150 µs late; probes 2 and 3 are back on time.
        let dep = [0, 350_000, 400_000, 600_000].map(MonoTime::from_nanos);
        let t = s.summarize(&dep, us(20));
        assert_eq!(t.probes, 4);
        assert_eq!(t.lateness_max_ns, 150_000);
        assert_eq!(t.lateness_median_ns, 0);
        assert_eq!(t.gap_error_max_ns, 150_000);
        // Gap 0->1 is 350 µs for 200 planned: +150 > 100, a stall. Gap 1->2 is short.
        assert_eq!(t.stalls, 1);
    }

    #[test]
    fn back_to_back_send_cost_is_not_a_stall() {
        let s = Schedule::new(MonoTime::ZERO, [Duration::ZERO; 5]);
        let dep = [0, 3_000, 6_000, 9_000, 2_000_000].map(MonoTime::from_nanos);
        let t = s.summarize(&dep, us(20));
        assert_eq!(t.stalls, 1);
        assert_eq!(t.lateness_max_ns, 2_000_000);
    }

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile::<i64>(&[], 50.0), None);
    }

    #[test]
    fn empty_summary() {
        let s = Schedule::new(MonoTime::ZERO, []);
        assert!(s.is_empty());
        assert_eq!(s.summarize(&[], us(20)), TimingSummary::default());
    }
}
