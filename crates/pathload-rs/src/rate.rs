//! From a rate to a stream: the probe size and spacing that send at that rate, and the
//! rate a stream actually left at, measured from its sender stamps.
//!
//! Rates are in Mbit/s of IP bytes (probe IP total length × 8 / spacing), as pathload
//! counts them. Sizes are IP total lengths.

use crate::params::{
    KNEE_SPACING_NS, MIN_PROBE_IP_BYTES, MIN_SPACING_FLOOR_NS, SPACING_LATENCY_FACTOR,
};

/// What a host pair can send: the largest probe and the smallest spacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest probe, in IP bytes.
    pub max_size: u32,
    /// Smallest spacing, in ns.
    pub min_spacing_ns: u64,
}

impl Limits {
    /// Limits for a path of `max_size` IP bytes and a sender whose back-to-back sends
    /// cost `send_cost_ns` each (pathload 1.3.2: spacing at least max(7 µs, 2 × the
    /// latency)).
    pub fn new(max_size: u32, send_cost_ns: u64) -> Self {
        Self {
            max_size: max_size.max(MIN_PROBE_IP_BYTES),
            min_spacing_ns: MIN_SPACING_FLOOR_NS.max(SPACING_LATENCY_FACTOR * send_cost_ns),
        }
    }

    /// The highest rate these limits reach, in Mbit/s.
    pub fn max_rate(&self) -> f64 {
        mbps(self.max_size, self.min_spacing_ns)
    }

    /// The probe size and spacing that send at `rate` Mbit/s (pathload 1.3.2): below
    /// 22.8 Mbit/s 228-byte probes with the spacing stretched; up to
    /// `max_size × 8 / 80 µs` a spacing of 80 µs with the size grown; above, the
    /// largest size with the spacing shrunk, never below the minimum spacing.
    pub fn shape(&self, rate: f64) -> Shape {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate.min(self.max_rate())
        } else {
            // No finite positive rate is asked for by the search; a harmless slowest
            // stream keeps this total.
            0.1
        };
        let knee_low = mbps(MIN_PROBE_IP_BYTES, KNEE_SPACING_NS);
        let knee_high = mbps(self.max_size, KNEE_SPACING_NS);
        let (size, spacing_ns) = if rate < knee_low {
            (MIN_PROBE_IP_BYTES, spacing_for(MIN_PROBE_IP_BYTES, rate))
        } else if rate < knee_high {
            let size = (rate * KNEE_SPACING_NS as f64 / 8_000.0).round() as u32;
            let size = size.clamp(MIN_PROBE_IP_BYTES, self.max_size);
            (size, KNEE_SPACING_NS)
        } else {
            (self.max_size, spacing_for(self.max_size, rate))
        };
        if spacing_ns < self.min_spacing_ns {
            // Too fast for the sender: the smallest spacing, the size that keeps the
            // rate, and the largest size where even that falls short.
            let size = (rate * self.min_spacing_ns as f64 / 8_000.0).round() as u32;
            return Shape {
                size: size.clamp(MIN_PROBE_IP_BYTES, self.max_size),
                spacing_ns: self.min_spacing_ns,
            };
        }
        Shape { size, spacing_ns }
    }
}

/// The size and spacing of a stream's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// IP bytes per probe.
    pub size: u32,
    /// Gap between probe departures, in ns.
    pub spacing_ns: u64,
}

impl Shape {
    /// The rate this shape sends at, in Mbit/s.
    pub fn rate(&self) -> f64 {
        mbps(self.size, self.spacing_ns)
    }
}

/// Mbit/s of `size`-byte packets every `spacing_ns`.
pub fn mbps(size: u32, spacing_ns: u64) -> f64 {
    f64::from(size) * 8.0 * 1_000.0 / spacing_ns.max(1) as f64
}

fn spacing_for(size: u32, rate: f64) -> u64 {
    (f64::from(size) * 8.0 * 1_000.0 / rate).round().max(1.0) as u64
}

/// The rate a stream of `size`-byte probes actually left at, from the sender stamps of
/// its departures in order (ns, any epoch): the spacing is the least-squares slope of
/// the stamps against their position. `None` with fewer than two stamps or no
/// positive slope.
///
/// pathload 1.3.2 dropped the largest 15 % of gaps and averaged the rest, because its
/// relative pacing turned every interruption into one long gap that shifted all later
/// probes. Under absolute-deadline pacing probes stay on their timeline: an
/// interruption is followed by probes sent closer together to catch up, and jitter
/// leaves long and short gaps alike. Trimming only the long ones then reads several
/// per cent high (seen over MGRP here: fleets asked for 9.88 Mbit/s reported 9.95);
/// the fitted slope follows the timeline and is moved little by a few late probes.
pub fn actual_rate(size: u32, stamps: &[i64]) -> Option<f64> {
    let n = stamps.len();
    if n < 2 {
        return None;
    }
    let base = stamps[0];
    let mean_x = (n - 1) as f64 / 2.0;
    let mean_y = stamps
        .iter()
        .map(|&t| t.saturating_sub(base) as f64)
        .sum::<f64>()
        / n as f64;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, &t) in stamps.iter().enumerate() {
        let dx = i as f64 - mean_x;
        sxy += dx * (t.saturating_sub(base) as f64 - mean_y);
        sxx += dx * dx;
    }
    let spacing = sxy / sxx;
    (spacing > 0.0).then(|| f64::from(size) * 8.0 * 1_000.0 / spacing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::new(1500, 3_000)
    }

    #[test]
    fn ten_mbps_is_228_bytes_every_182_us() {
        let s = limits().shape(10.0);
        assert_eq!(s.size, 228);
        assert_eq!(s.spacing_ns, 182_400);
    }

    #[test]
    fn the_middle_band_grows_the_size_at_80_us() {
        let s = limits().shape(50.0);
        assert_eq!(s.spacing_ns, 80_000);
        assert_eq!(s.size, 500);
        assert!((s.rate() - 50.0).abs() < 0.1);
    }

    #[test]
    fn above_150_the_size_is_largest_and_spacing_shrinks() {
        let s = limits().shape(300.0);
        assert_eq!(s.size, 1500);
        assert_eq!(s.spacing_ns, 40_000);
    }

    #[test]
    fn spacing_never_goes_below_the_minimum() {
        let l = limits();
        assert_eq!(l.min_spacing_ns, 7_000);
        let s = l.shape(1e6);
        assert_eq!(s.spacing_ns, 7_000);
        assert!((l.max_rate() - 1500.0 * 8.0 / 7.0).abs() < 1e-6);
        let slow_sender = Limits::new(1500, 100_000);
        assert_eq!(slow_sender.min_spacing_ns, 100_000);
        // 80 µs would be too short: the size grows instead.
        assert_eq!(
            slow_sender.shape(100.0),
            Shape {
                size: 1250,
                spacing_ns: 100_000
            }
        );
        assert_eq!(slow_sender.shape(slow_sender.max_rate()).rate(), 120.0);
    }

    #[test]
    fn shapes_send_close_to_their_rate_across_the_bands() {
        let l = limits();
        let mut r = 0.5;
        while r < l.max_rate() {
            let got = l.shape(r).rate();
            assert!((got - r).abs() / r < 0.01, "{r} -> {got}");
            r *= 1.3;
        }
    }

    #[test]
    fn bad_rates_give_a_slow_stream_not_a_panic() {
        for r in [f64::NAN, -1.0, 0.0, f64::INFINITY] {
            let s = limits().shape(r);
            assert!(s.spacing_ns >= 7_000 && s.size >= 228);
        }
    }

    #[test]
    fn actual_rate_is_not_pulled_up_by_catch_up_bursts() {
        // Symmetric jitter and one stall followed by a catch-up burst, around 182.4 µs.
        let mut stamps = Vec::new();
        for i in 0..100i64 {
            let jitter = if i % 2 == 0 { 15_000 } else { -15_000 };
            let stall = if (40..44).contains(&i) {
                500_000 - (i - 40) * 120_000
            } else {
                0
            };
            stamps.push(i * 182_400 + jitter + stall);
        }
        let r = actual_rate(228, &stamps).unwrap();
        assert!((r - 10.0).abs() < 0.1, "{r}");
    }

    #[test]
    fn actual_rate_of_a_stream_with_one_long_interruption() {
        // Relative pacing: one 2 ms stall shifts every later probe. The stream did
        // leave slower than its gaps say, and the fit reads it so (by 1.5 stalls
        // spread over the stream, where the span reads 1).
        let stamps: Vec<i64> = (0..100i64)
            .map(|i| i * 182_400 + if i >= 50 { 2_000_000 } else { 0 })
            .collect();
        let r = actual_rate(228, &stamps).unwrap();
        assert!(r < 9.0 && r > 8.0, "{r}");
        assert_eq!(actual_rate(228, &[5]), None);
        assert_eq!(actual_rate(228, &[5, 5, 5]), None);
    }
}
