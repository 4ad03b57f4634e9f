//! From a rate to a stream: the probe size and spacing that send at that rate, and the
//! rate a stream actually left at, measured from its sender stamps.
//!
//! Rates are in Mbit/s of IP bytes (probe IP total length × 8 / spacing), as pathload
//! counts them. Sizes are IP total lengths.

use crate::params::{
    KNEE_SPACING_NS, MIN_PROBE_IP_BYTES, MIN_SPACING_FLOOR_NS, SEND_RATE_TRIM,
    SPACING_LATENCY_FACTOR,
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
/// its departures in order (ns, any epoch): the largest 15 % of gaps are dropped, the
/// rest averaged (pathload 1.3.2). `None` with fewer than two stamps or no positive
/// gap left.
pub fn actual_rate(size: u32, stamps: &[i64]) -> Option<f64> {
    let mut gaps: Vec<i64> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_unstable();
    let keep = gaps.len() - (gaps.len() as f64 * SEND_RATE_TRIM).floor() as usize;
    let kept = &gaps[..keep.max(1)];
    let mean = kept.iter().map(|&g| g as f64).sum::<f64>() / kept.len() as f64;
    (mean > 0.0).then(|| f64::from(size) * 8.0 * 1_000.0 / mean)
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
        let slow_sender = Limits::new(1500, 50_000);
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
    fn actual_rate_ignores_the_largest_gaps() {
        // 20 gaps of 182.4 µs and 3 long interruptions.
        let mut t = 0;
        let mut stamps = vec![0];
        for i in 0..23 {
            t += if i % 8 == 7 { 2_000_000 } else { 182_400 };
            stamps.push(t);
        }
        let r = actual_rate(228, &stamps).unwrap();
        assert!((r - 10.0).abs() < 0.01, "{r}");
        assert_eq!(actual_rate(228, &[5]), None);
        assert_eq!(actual_rate(228, &[5, 5, 5]), None);
    }
}
