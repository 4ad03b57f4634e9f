//! The narrow link's capacity from bunches of large back-to-back packets.
//!
//! The sender sends `bunches` bunches of `packets` packets of `size` IP bytes back to
//! back, a round trip or more apart. Leaving the narrowest link, consecutive packets
//! of a bunch are spaced by at least that link's transmission time of one packet, so
//! `size · 8 / gap` is its capacity where nothing came between them. The seed took
//! the average arrival rate of each bunch (an under-estimate when cross traffic joins
//! the bunch); we keep that figure, and estimate from the median of the gaps of all
//! bunches instead: a cross-traffic packet between two probes makes one gap larger, a
//! token bucket's credit lets the first packets through early and makes a few gaps
//! smaller, and the median reads past both as long as fewer than half of the gaps are
//! touched.

use serde::Serialize;

/// How to probe for capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CapacityConfig {
    /// Bunches sent.
    pub bunches: u32,
    /// Packets per bunch.
    pub packets: u32,
    /// IP bytes per packet.
    pub size: u32,
}

impl Default for CapacityConfig {
    /// The seed's phase 3: two bunches of 30 packets of 1400 bytes.
    fn default() -> Self {
        Self {
            bunches: 2,
            packets: 30,
            size: 1400,
        }
    }
}

pub use mgrp_tool::params::ConfigError;

impl CapacityConfig {
    /// Checks the parameters against `max_size`, the largest probe the path takes.
    pub fn check(&self, min_size: u32, max_size: u32) -> Result<(), ConfigError> {
        if self.bunches == 0 {
            return Err(ConfigError("bunches must be at least 1".into()));
        }
        if !(3..=1000).contains(&self.packets) {
            return Err(ConfigError(format!(
                "a bunch of {} packets: use 3 to 1000 (two gaps at least, for a median)",
                self.packets
            )));
        }
        if !(min_size..=max_size).contains(&self.size) {
            return Err(ConfigError(format!(
                "packets of {} bytes: use {min_size} to {max_size}",
                self.size
            )));
        }
        Ok(())
    }
}

/// One packet of a bunch that arrived: its position in the bunch and its receive
/// stamp, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrived {
    /// Position in the bunch, from 0.
    pub seq: u32,
    /// Receive stamp, ns.
    pub at_ns: i64,
}

/// What the bunches say.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// The estimate, bit/s: one packet's bits over the median gap between consecutive
    /// packets that both arrived. `None` when no two consecutive packets arrived
    /// apart.
    pub bps: Option<f64>,
    /// Each bunch's average arrival rate, bit/s (the seed's figure; `None` for a
    /// bunch of which fewer than two packets arrived, or all at once).
    pub bunch_bps: Vec<Option<f64>>,
    /// Gaps used.
    pub gaps: usize,
    /// Gaps of 0 (two packets stamped together, which says nothing).
    pub coalesced: usize,
    /// Packets that did not arrive.
    pub lost: u64,
    /// The spread of the gaps: the interquartile range over the median (0 when every
    /// gap is the same).
    pub spread: Option<f64>,
}

/// Reads the bunches: `bunches[i]` are the packets of bunch i that arrived (any
/// order, duplicates ignored), each bunch of `sent` packets of `size` bytes.
pub fn analyse(bunches: &[Vec<Arrived>], sent: u32, size: u32) -> Capacity {
    let bits = f64::from(size) * 8.0;
    let mut gaps: Vec<i64> = Vec::new();
    let mut coalesced = 0;
    let mut lost = 0u64;
    let mut bunch_bps = Vec::with_capacity(bunches.len());
    for b in bunches {
        let mut v: Vec<Arrived> = b.iter().copied().filter(|a| a.seq < sent).collect();
        v.sort_by_key(|a| a.seq);
        v.dedup_by_key(|a| a.seq);
        lost += u64::from(sent) - v.len() as u64;
        for w in v.windows(2) {
            if w[1].seq != w[0].seq + 1 {
                continue;
            }
            let g = w[1].at_ns - w[0].at_ns;
            if g > 0 {
                gaps.push(g);
            } else {
                coalesced += 1;
            }
        }
        let rate = match (v.first(), v.last()) {
            (Some(f), Some(l)) if v.len() >= 2 && l.at_ns > f.at_ns => {
                Some((v.len() - 1) as f64 * bits / ((l.at_ns - f.at_ns) as f64 / 1e9))
            }
            _ => None,
        };
        bunch_bps.push(rate);
    }
    gaps.sort_unstable();
    let q = |p: f64| -> Option<f64> {
        if gaps.is_empty() {
            return None;
        }
        let i = ((gaps.len() - 1) as f64 * p).round() as usize;
        Some(gaps[i] as f64)
    };
    let median = q(0.5);
    Capacity {
        bps: median.map(|m| bits / (m / 1e9)),
        bunch_bps,
        gaps: gaps.len(),
        coalesced,
        lost,
        spread: median
            .zip(q(0.25).zip(q(0.75)))
            .map(|(m, (lo, hi))| (hi - lo) / m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bunch(gaps: &[i64]) -> Vec<Arrived> {
        let mut t = 1_000_000;
        let mut v = vec![Arrived { seq: 0, at_ns: t }];
        for (i, g) in gaps.iter().enumerate() {
            t += g;
            v.push(Arrived {
                seq: i as u32 + 1,
                at_ns: t,
            });
        }
        v
    }

    #[test]
    fn an_undisturbed_bunch_reads_the_link_rate() {
        // 1400 bytes at 10 Mbit/s: 1.12 ms a packet.
        let b = bunch(&[1_120_000; 29]);
        let c = analyse(&[b.clone(), b], 30, 1400);
        let bps = c.bps.unwrap();
        assert!((bps / 10e6 - 1.0).abs() < 1e-9, "{bps}");
        assert_eq!(c.gaps, 58);
        assert_eq!(c.lost, 0);
        assert_eq!(c.spread, Some(0.0));
        for r in c.bunch_bps {
            assert!((r.unwrap() / 10e6 - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn cross_traffic_and_bucket_credit_leave_the_median_alone() {
        // Three gaps stretched by a 1500-byte cross packet (1.2 ms), the first two
        // squeezed by a bucket's credit: the bunch's average rate reads low, the
        // median reads the link.
        let mut gaps = vec![1_120_000; 29];
        gaps[0] = 10_000;
        gaps[1] = 10_000;
        for g in &mut gaps[10..13] {
            *g += 1_200_000;
        }
        let c = analyse(&[bunch(&gaps)], 30, 1400);
        assert!((c.bps.unwrap() / 10e6 - 1.0).abs() < 1e-9);
        assert!(c.bunch_bps[0].unwrap() < 9.7e6);
    }

    #[test]
    fn losses_and_coalesced_stamps_are_counted_not_used() {
        let mut b = bunch(&[1_120_000; 29]);
        b.remove(5);
        b[10].at_ns = b[9].at_ns;
        b.push(b[3]);
        let c = analyse(&[b], 30, 1400);
        assert_eq!(c.lost, 1);
        assert_eq!(c.coalesced, 1);
        // 29 gaps, two lost with packet 5 and one coalesced.
        assert_eq!(c.gaps, 26);
        assert!((c.bps.unwrap() / 10e6 - 1.0).abs() < 1e-9);
        let none = analyse(&[vec![], bunch(&[])], 30, 1400);
        assert_eq!(none.bps, None);
        assert_eq!(none.bunch_bps, vec![None, None]);
        assert_eq!(none.lost, 59);
    }

    #[test]
    fn bad_parameters_name_the_limit() {
        let ok = CapacityConfig::default();
        assert!(ok.check(72, 1500).is_ok());
        let e = CapacityConfig { packets: 2, ..ok }
            .check(72, 1500)
            .unwrap_err();
        assert!(e.0.contains("3 to 1000"), "{e}");
        let e = CapacityConfig { size: 1600, ..ok }
            .check(72, 1500)
            .unwrap_err();
        assert!(e.0.contains("72 to 1500"), "{e}");
        assert!(CapacityConfig { bunches: 0, ..ok }.check(72, 1500).is_err());
    }
}
