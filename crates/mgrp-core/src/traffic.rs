//! How much application traffic goes to each peer: totals and a recent rate, so that
//! a measurement service can run its probes while there is traffic to ride in them.
//!
//! The daemon's TUN reader feeds a [`RateMeter`] per peer with every packet routed
//! into the tunnel for that peer, whether it then rides, waits, or goes on unchanged:
//! all of it is traffic a probe train to that peer could carry. The rate is the bytes
//! of a sliding window of whole buckets plus the current one, divided by the time
//! they cover, so it falls to zero one window after the traffic stops and never
//! needs a timer.

use std::time::Duration;

use crate::MonoTime;

/// Bytes and packets to one peer: totals, and a rate over a sliding window.
#[derive(Debug, Clone)]
pub struct RateMeter {
    bucket_ns: u64,
    /// Per slot: the bucket number it holds, and its bytes.
    slots: Vec<(u64, u64)>,
    packets: u64,
    bytes: u64,
}

/// The width of a [`RateMeter`]'s buckets in the daemon.
pub const BUCKET: Duration = Duration::from_millis(250);
/// Buckets in the daemon's window.
pub const BUCKETS: usize = 8;
/// The daemon's window: the rate is over the last 2 s.
pub const WINDOW: Duration = BUCKET.saturating_mul(BUCKETS as u32);

impl Default for RateMeter {
    fn default() -> Self {
        Self::new(BUCKET, BUCKETS)
    }
}

impl RateMeter {
    /// A meter whose window is `buckets` buckets of `bucket` each (both at least 1).
    pub fn new(bucket: Duration, buckets: usize) -> Self {
        Self {
            bucket_ns: u64::try_from(bucket.as_nanos()).unwrap_or(u64::MAX).max(1),
            slots: vec![(u64::MAX, 0); buckets.max(1)],
            packets: 0,
            bytes: 0,
        }
    }

    /// The window the rate is taken over.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.bucket_ns.saturating_mul(self.slots.len() as u64))
    }

    /// `packets` packets of `bytes` in all at `now`.
    pub fn add(&mut self, now: MonoTime, packets: u64, bytes: u64) {
        self.packets += packets;
        self.bytes += bytes;
        let n = now.as_nanos() / self.bucket_ns;
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[(n % len) as usize];
        if slot.0 != n {
            *slot = (n, 0);
        }
        slot.1 += bytes;
    }

    /// Packets counted so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Bytes counted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes per second over the window that ends at `now` (the current bucket counts
    /// for the part of it that has passed). Packets stamped after `now` are not seen.
    pub fn bytes_per_second(&self, now: MonoTime) -> f64 {
        let n = now.as_nanos() / self.bucket_ns;
        let len = self.slots.len() as u64;
        let oldest = n.saturating_sub(len - 1);
        let bytes: u64 = self
            .slots
            .iter()
            .filter(|(b, _)| *b != u64::MAX && (oldest..=n).contains(b))
            .map(|(_, bytes)| bytes)
            .sum();
        // Whole buckets before the current one (fewer just after time zero), plus
        // the part of the current one that has passed.
        let whole = (n - oldest) * self.bucket_ns;
        let covered = whole + now.as_nanos() % self.bucket_ns;
        if covered == 0 {
            return 0.0;
        }
        bytes as f64 * 1e9 / covered as f64
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn a_steady_flow_reads_its_rate_and_stops_reading_a_window_later() {
        let mut m = RateMeter::default();
        // 1,000 bytes every 10 ms = 100 kB/s, for 5 s from t = 10 s.
        for i in 0..500 {
            m.add(at(10_000 + i * 10), 1, 1_000);
        }
        let r = m.bytes_per_second(at(14_995));
        assert!((r - 100_000.0).abs() < 1_000.0, "{r}");
        assert_eq!((m.packets(), m.bytes()), (500, 500_000));
        // Half a window after the last packet about half the window is still in it.
        let r = m.bytes_per_second(at(16_000));
        assert!((40_000.0..60_000.0).contains(&r), "{r}");
        assert_eq!(m.bytes_per_second(at(17_100)), 0.0);
        // The totals stay.
        assert_eq!(m.bytes(), 500_000);
    }

    #[test]
    fn nothing_counted_reads_zero() {
        let m = RateMeter::default();
        assert_eq!(m.bytes_per_second(MonoTime::ZERO), 0.0);
        assert_eq!(m.bytes_per_second(at(123_456)), 0.0);
        assert_eq!(m.window(), WINDOW);
        assert_eq!(WINDOW, Duration::from_secs(2));
    }

    #[test]
    fn a_burst_long_ago_does_not_come_back_when_its_slot_is_reused() {
        let mut m = RateMeter::new(Duration::from_millis(100), 4);
        m.add(at(50), 1, 1_000_000);
        // 8 buckets later the burst's slot is the current one again, but stale.
        assert_eq!(m.bytes_per_second(at(850)), 0.0);
        m.add(at(850), 1, 100);
        let r = m.bytes_per_second(at(899));
        assert!(r < 1_000.0, "{r}");
    }

    proptest! {
        /// The rate never exceeds the bytes in the window over the time covered, and
        /// packets all in the last bucket but one are all counted.
        #[test]
        fn the_rate_counts_exactly_the_window(
            sizes in proptest::collection::vec(1u64..10_000, 1..200),
            start_ms in 0u64..1_000_000,
        ) {
            let mut m = RateMeter::new(Duration::from_millis(250), 8);
            let t0 = start_ms * 1_000_000;
            for (i, s) in sizes.iter().enumerate() {
                // All within 1 ms.
                m.add(MonoTime::from_nanos(t0 + i as u64 * 1_000), 1, *s);
            }
            let total: u64 = sizes.iter().sum();
            prop_assert_eq!(m.bytes(), total);
            // 1 s later every packet is inside the 2 s window, which covers at most
            // 2 s and at least the 1 s since.
            let now = MonoTime::from_nanos(t0 + 1_000_000_000);
            let r = m.bytes_per_second(now);
            prop_assert!(r >= total as f64 / 2.0 - 1e-6, "{} {}", r, total);
            prop_assert!(r <= total as f64 / 0.99, "{} {}", r, total);
            // 3 s later none is.
            prop_assert_eq!(m.bytes_per_second(MonoTime::from_nanos(t0 + 3_000_000_000)), 0.0);
        }
    }
}
