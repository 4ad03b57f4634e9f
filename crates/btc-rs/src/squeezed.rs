//! Squeezed pairs (Strauss and Kaashoek): where on a path do queues form?
//!
//! Pairs of small probes leave spaced by half the narrow link's transmission time of
//! 500 bytes, or of 1500 bytes, the two kinds alternating, the pairs exponentially
//! apart (mean: the larger of ten times the larger spacing and 2 ms). At the
//! receiver each kind's gaps make a histogram. Where the probes queue at the narrow
//! link itself, both kinds leave it back to back or with whole cross-traffic packets
//! between them, at the narrow link's rate, whatever their sending gap: the two
//! histograms have their modes in the same places (the path is *tight like narrow*).
//! Where they queue only at a faster link and cross the narrow link undisturbed, each
//! kind keeps its own sending gap, spread by the faster link's packets: the modes
//! differ (*tight unlike narrow*). The score walks the modes: +1 for a mode both
//! histograms have, −1 for one only one has; positive is tight like narrow.
//!
//! A mode below the narrow link's back-to-back gap (a bin that lies wholly under one
//! probe's transmission time there) is left out of the score too: a pair that queued
//! at the narrow link leaves it at least that far apart, so such a mode was made
//! elsewhere: by a queue at a faster link before it whose compressed pairs the narrow
//! link let through at once (a token bucket's burst: on the namespace test's path, a
//! 20 Mbit/s queue before a 10 Mbit/s tbf of 1540 bytes put both kinds' mode at bin 0
//! in 8 runs of 8, a shared mode that scored as tight like narrow), by a queue at a
//! faster link after it, or by a receiver that stamped a pair late. None is a queue
//! at the narrow link. The pairs in such bins are counted (`compressed`).
//!
//! A mode at a kind's own sending gap is left out of the score: it is the pairs that
//! met no queue at all, which every path with idle moments has, and which would make
//! any path score as unlike narrow (the seed scores "instead of searching for a peak
//! around the sending rate"; this is our reading of it). A quiet path therefore
//! scores 0, undecided: there is no queue to place.

use serde::Serialize;

use crate::capacity::ConfigError;

/// How to send squeezed pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SqueezeConfig {
    /// The narrow link's capacity, bit/s (from [`crate::capacity`]).
    pub capacity_bps: f64,
    /// Pairs sent (half of each kind).
    pub pairs: u32,
    /// IP bytes per probe.
    pub size: u32,
    /// The least mean time between pairs, ns.
    pub min_mean_gap_ns: u64,
    /// The sender's pacing resolution, ns: no spacing may be shorter.
    pub resolution_ns: u64,
    /// Seed of the spacing draws.
    pub seed: u64,
}

impl SqueezeConfig {
    /// The seed's parameters for a path of `capacity_bps` (4000 pairs there; 1000
    /// here, a quarter of the time, which the histograms' modes survive), with the
    /// smallest probe the tools send (72 bytes; the seed's were 40).
    pub fn new(capacity_bps: f64) -> Self {
        Self {
            capacity_bps,
            pairs: 1000,
            size: 72,
            min_mean_gap_ns: 2_000_000,
            resolution_ns: 2_000,
            seed: 1,
        }
    }

    /// Checks the parameters; `min_size..=max_size` are the probe sizes the sender takes.
    pub fn check(&self, min_size: u32, max_size: u32) -> Result<(), ConfigError> {
        let c = self.capacity_bps;
        if !(c.is_finite() && c > 0.0) {
            return Err(ConfigError(format!(
                "a capacity of {c} bit/s: squeezed pairs need the narrow link's capacity, a positive rate"
            )));
        }
        let g = self.sending_gap_ns(Kind::Half500);
        if g < self.resolution_ns {
            let most = 500.0 * 8.0 / 2.0 / (self.resolution_ns as f64 / 1e9);
            return Err(ConfigError(format!(
                "at {:.0} Mbit/s the 500-byte spacing is {g} ns, below the sender's timer resolution of {} ns: squeezed pairs work up to {:.0} Mbit/s",
                c / 1e6,
                self.resolution_ns,
                most / 1e6
            )));
        }
        if !(2..=10_000).contains(&self.pairs) {
            return Err(ConfigError(format!("{} pairs: use 2 to 10000", self.pairs)));
        }
        if !(min_size..=max_size).contains(&self.size) {
            return Err(ConfigError(format!(
                "probes of {} bytes: use {min_size} to {max_size}",
                self.size
            )));
        }
        Ok(())
    }

    /// The sending gap of a pair of `kind`, ns.
    pub fn sending_gap_ns(&self, kind: Kind) -> u64 {
        tx_ns(kind.bytes() / 2, self.capacity_bps)
    }

    /// The mean time between pairs, ns.
    pub fn mean_gap_ns(&self) -> u64 {
        (10 * self.sending_gap_ns(Kind::Half1500)).max(self.min_mean_gap_ns)
    }

    /// The pairs to send: kinds alternating, each with the time before its first probe.
    pub fn plan(&self) -> Vec<PlannedPair> {
        let mut rng = self.seed.max(1);
        let mean = self.mean_gap_ns() as f64;
        (0..self.pairs)
            .map(|i| {
                rng ^= rng >> 12;
                rng ^= rng << 25;
                rng ^= rng >> 27;
                let u =
                    (rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
                let kind = if i % 2 == 0 {
                    Kind::Half500
                } else {
                    Kind::Half1500
                };
                PlannedPair {
                    kind,
                    before_ns: (-mean * (1.0 - u).ln()).round() as u64,
                    gap_ns: self.sending_gap_ns(kind),
                }
            })
            .collect()
    }
}

/// Transmission time of `bytes` at `bps`, ns.
pub fn tx_ns(bytes: u32, bps: f64) -> u64 {
    (f64::from(bytes) * 8.0 / bps * 1e9).round() as u64
}

/// The two kinds of pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Spaced by half the transmission time of 500 bytes.
    Half500,
    /// Spaced by half the transmission time of 1500 bytes.
    Half1500,
}

impl Kind {
    /// The packet size whose half transmission time spaces it.
    pub fn bytes(self) -> u32 {
        match self {
            Self::Half500 => 500,
            Self::Half1500 => 1500,
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Half500 => 0,
            Self::Half1500 => 1,
        }
    }
}

/// One pair of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedPair {
    /// Its kind.
    pub kind: Kind,
    /// Time from the previous pair's second probe to its first, ns.
    pub before_ns: u64,
    /// Time between its probes, ns.
    pub gap_ns: u64,
}

/// Where the path's queues form, as the score reads the histograms.
pub use mgrp_core::path::PathClass;

/// What the pairs say.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Squeeze {
    /// The class.
    pub class: PathClass,
    /// The score: modes both kinds share, less modes only one has.
    pub score: i32,
    /// Histogram bin width, ns (the narrow link's transmission time of 50 bytes).
    pub bin_ns: u64,
    /// Received gaps per kind (500, 1500), counts per bin from 0.
    pub histograms: [Vec<u32>; 2],
    /// Gaps beyond the histograms (more than three 1500-byte transmission times).
    pub overflow: [u64; 2],
    /// Gaps below 0 (the second probe first).
    pub reordered: [u64; 2],
    /// Modes per kind, as bin indexes (those at the kind's own sending gap included;
    /// the score leaves them out).
    pub modes: [Vec<usize>; 2],
    /// Pairs of each kind whose two probes arrived.
    pub pairs: [u64; 2],
    /// Of those, pairs whose probes arrived closer than the narrow link can send two
    /// (in a bin wholly below `back_to_back_ns`): compressed by a queue elsewhere.
    pub compressed: [u64; 2],
    /// Pairs of which a probe was lost.
    pub lost: u64,
    /// The sending gaps, ns.
    pub sending_gap_ns: [u64; 2],
    /// A probe's transmission time at the capacity (pairs leaving the narrow link
    /// back to back arrive this far apart), ns.
    pub back_to_back_ns: u64,
    /// Share of each kind's pairs that arrived squeezed (closer than their sending
    /// gap by more than a bin).
    pub squeezed: [f64; 2],
}

/// Reads the pairs: `gaps[i]` is pair i's received gap in ns (second probe's stamp
/// less the first's), `None` when a probe was lost; kinds as in `cfg.plan()`.
pub fn analyse(cfg: &SqueezeConfig, kinds: &[Kind], gaps: &[Option<i64>]) -> Squeeze {
    let bin_ns = tx_ns(50, cfg.capacity_bps).max(1);
    let range = 3 * tx_ns(1500, cfg.capacity_bps);
    let bins = usize::try_from(range.div_ceil(bin_ns)).unwrap_or(0).max(1);
    let mut histograms = [vec![0u32; bins], vec![0u32; bins]];
    let (mut overflow, mut reordered, mut pairs) = ([0u64; 2], [0u64; 2], [0u64; 2]);
    let mut squeezed_n = [0u64; 2];
    let mut compressed = [0u64; 2];
    let mut lost = 0;
    let back_to_back_ns = tx_ns(cfg.size, cfg.capacity_bps);
    // Bins below this one lie wholly under the narrow link's back-to-back gap.
    let first_possible = usize::try_from(back_to_back_ns / bin_ns).unwrap_or(usize::MAX);
    let sending = [
        cfg.sending_gap_ns(Kind::Half500),
        cfg.sending_gap_ns(Kind::Half1500),
    ];
    for (kind, gap) in kinds.iter().zip(gaps) {
        let k = kind.index();
        let Some(g) = *gap else {
            lost += 1;
            continue;
        };
        pairs[k] += 1;
        if g < 0 {
            reordered[k] += 1;
            continue;
        }
        let g = g as u64;
        if g + bin_ns < sending[k] {
            squeezed_n[k] += 1;
        }
        if usize::try_from(g / bin_ns).unwrap_or(usize::MAX) < first_possible {
            compressed[k] += 1;
        }
        match histograms[k].get_mut(usize::try_from(g / bin_ns).unwrap_or(usize::MAX)) {
            Some(c) => *c += 1,
            None => overflow[k] += 1,
        }
    }
    let modes = [
        modes(&histograms[0], pairs[0]),
        modes(&histograms[1], pairs[1]),
    ];
    let scored = [0, 1].map(|k| {
        let own = usize::try_from(sending[k] / bin_ns).unwrap_or(usize::MAX);
        modes[k]
            .iter()
            .copied()
            .filter(|&m| m.abs_diff(own) > TOLERANCE && m >= first_possible)
            .collect::<Vec<_>>()
    });
    let score = score(&scored[0], &scored[1], TOLERANCE);
    Squeeze {
        class: match score.cmp(&0) {
            std::cmp::Ordering::Greater => PathClass::TightLikeNarrow,
            std::cmp::Ordering::Less => PathClass::TightUnlikeNarrow,
            std::cmp::Ordering::Equal => PathClass::Undecided,
        },
        score,
        bin_ns,
        histograms,
        overflow,
        reordered,
        modes,
        pairs,
        compressed,
        lost,
        sending_gap_ns: sending,
        back_to_back_ns,
        squeezed: [0, 1].map(|k| squeezed_n[k] as f64 / pairs[k].max(1) as f64),
    }
}

/// How many bins apart two modes may be and still be one (100 bytes at the capacity).
const TOLERANCE: usize = 2;

/// The modes of a histogram of `total` pairs: where the sum over a bin and its two
/// neighbours peaks (rises into it, does not rise after it) and holds at least 3 pairs
/// and 2 % of them, the fullest of those three bins.
pub fn modes(h: &[u32], total: u64) -> Vec<usize> {
    let smooth: Vec<u64> = (0..h.len())
        .map(|i| {
            let lo = i.saturating_sub(1);
            let hi = (i + 2).min(h.len());
            h[lo..hi].iter().map(|&c| u64::from(c)).sum()
        })
        .collect();
    let least = 3u64.max(total.div_ceil(50));
    let mut out: Vec<usize> = (0..smooth.len())
        .filter(|&i| {
            let s = smooth[i];
            s >= least && (i == 0 || s > smooth[i - 1]) && smooth.get(i + 1).is_none_or(|&n| s >= n)
        })
        // The fullest bin of the three, where the mode is.
        .map(|i| {
            let lo = i.saturating_sub(1);
            let hi = (i + 2).min(h.len());
            (lo..hi).rev().max_by_key(|&j| h[j]).unwrap_or(i)
        })
        .collect();
    out.dedup();
    out
}

/// +1 for each mode of `a` with a mode of `b` within `tolerance` bins (each mode of
/// `b` matched once), −1 for each mode of either left unmatched.
pub fn score(a: &[usize], b: &[usize], tolerance: usize) -> i32 {
    let mut used = vec![false; b.len()];
    let mut s = 0i32;
    for &m in a {
        let hit = b
            .iter()
            .enumerate()
            .filter(|&(j, &n)| !used[j] && m.abs_diff(n) <= tolerance)
            .min_by_key(|&(_, &n)| m.abs_diff(n))
            .map(|(j, _)| j);
        match hit {
            Some(j) => {
                used[j] = true;
                s += 1;
            }
            None => s -= 1,
        }
    }
    s - used.iter().filter(|u| !**u).count() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic draw in [0, 1).
    fn uniform(state: &mut u64) -> f64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn the_plan_alternates_kinds_at_the_seeds_spacings() {
        let cfg = SqueezeConfig::new(10e6);
        // Half of 500 and 1500 bytes at 10 Mbit/s: 200 and 600 µs.
        assert_eq!(cfg.sending_gap_ns(Kind::Half500), 200_000);
        assert_eq!(cfg.sending_gap_ns(Kind::Half1500), 600_000);
        // Ten times 600 µs beats 2 ms.
        assert_eq!(cfg.mean_gap_ns(), 6_000_000);
        assert_eq!(SqueezeConfig::new(100e6).mean_gap_ns(), 2_000_000);
        let plan = cfg.plan();
        assert_eq!(plan.len(), 1000);
        assert!(
            plan.iter()
                .step_by(2)
                .all(|p| p.kind == Kind::Half500 && p.gap_ns == 200_000)
        );
        assert!(
            plan.iter()
                .skip(1)
                .step_by(2)
                .all(|p| p.kind == Kind::Half1500)
        );
        let mean = plan.iter().map(|p| p.before_ns as f64).sum::<f64>() / 1000.0;
        assert!((mean / 6e6 - 1.0).abs() < 0.1, "{mean}");
        assert_eq!(plan, cfg.plan());
    }

    #[test]
    fn bad_parameters_name_the_limit() {
        assert!(SqueezeConfig::new(10e6).check(72, 1500).is_ok());
        let e = SqueezeConfig::new(0.0).check(72, 1500).unwrap_err();
        assert!(e.0.contains("positive rate"), "{e}");
        let e = SqueezeConfig::new(10e9).check(72, 1500).unwrap_err();
        assert!(e.0.contains("timer resolution of 2000 ns"), "{e}");
        assert!(e.0.contains("up to 1000 Mbit/s"), "{e}");
        let e = SqueezeConfig {
            pairs: 1,
            ..SqueezeConfig::new(10e6)
        }
        .check(72, 1500)
        .unwrap_err();
        assert!(e.0.contains("2 to 10000"), "{e}");
    }

    /// Pairs of both kinds that queue at a 10 Mbit/s narrow link: each arrives back to
    /// back, or with one 500-byte or one 1500-byte cross packet between its probes.
    #[test]
    fn queues_at_the_narrow_link_make_the_same_modes() {
        let cfg = SqueezeConfig::new(10e6);
        let plan = cfg.plan();
        let b2b = tx_ns(72, 10e6) as i64;
        let mut st = 7u64;
        let gaps: Vec<Option<i64>> = plan
            .iter()
            .map(|_| {
                let u = uniform(&mut st);
                let extra = if u < 0.5 {
                    0
                } else if u < 0.8 {
                    tx_ns(500, 10e6) as i64
                } else {
                    tx_ns(1500, 10e6) as i64
                };
                Some(b2b + extra + (uniform(&mut st) * 20_000.0) as i64)
            })
            .collect();
        let kinds: Vec<Kind> = plan.iter().map(|p| p.kind).collect();
        let s = analyse(&cfg, &kinds, &gaps);
        assert_eq!(
            s.class,
            PathClass::TightLikeNarrow,
            "{:?} {:?}",
            s.modes,
            s.score
        );
        assert!(s.score >= 2);
        assert!(s.squeezed[0] > 0.4 && s.squeezed[1] > 0.4);
        assert_eq!(s.pairs, [500, 500]);
    }

    /// Pairs that keep their sending gaps, spread by a faster (100 Mbit/s) link's
    /// cross packets before the first or the second probe.
    #[test]
    fn queues_at_a_faster_link_keep_the_kinds_apart() {
        let cfg = SqueezeConfig::new(10e6);
        let plan = cfg.plan();
        let mut st = 11u64;
        let gaps: Vec<Option<i64>> = plan
            .iter()
            .map(|p| {
                let u = uniform(&mut st);
                let shift = tx_ns(1500, 100e6) as i64;
                let g = p.gap_ns as i64
                    + if u < 0.6 {
                        0
                    } else if u < 0.8 {
                        shift
                    } else {
                        -shift
                    };
                Some(g + (uniform(&mut st) * 10_000.0) as i64)
            })
            .collect();
        let kinds: Vec<Kind> = plan.iter().map(|p| p.kind).collect();
        let s = analyse(&cfg, &kinds, &gaps);
        assert_eq!(
            s.class,
            PathClass::TightUnlikeNarrow,
            "{:?} {:?}",
            s.modes,
            s.score
        );
        assert!(s.squeezed[0] < 0.3 && s.squeezed[1] < 0.3);
    }

    /// A queue at a faster (20 Mbit/s) link before the narrow one: a fifth of each
    /// kind's pairs, compressed there, come through the narrow link's token bucket at
    /// once, closer than it can space two probes; the rest keep their sending gaps.
    /// With the shared mode under the narrow link's back-to-back gap counted, this
    /// path scored as tight like narrow (+1); it has no queue at the narrow link.
    #[test]
    fn pairs_closer_than_the_narrow_link_sends_two_do_not_make_it_tight() {
        let cfg = SqueezeConfig::new(10e6);
        let plan = cfg.plan();
        let mut st = 13u64;
        let gaps: Vec<Option<i64>> = plan
            .iter()
            .map(|p| {
                // Compressed at the faster link (its back-to-back gap), or untouched.
                let g = if uniform(&mut st) < 0.2 {
                    tx_ns(86, 20e6) as i64 - 10_000
                } else {
                    p.gap_ns as i64
                };
                Some(g + (uniform(&mut st) * 10_000.0) as i64)
            })
            .collect();
        let kinds: Vec<Kind> = plan.iter().map(|p| p.kind).collect();
        let s = analyse(&cfg, &kinds, &gaps);
        assert!(
            s.modes[0].contains(&0) && s.modes[1].contains(&0),
            "both kinds have the mode under the back-to-back gap: {:?}",
            s.modes
        );
        assert_eq!(s.class, PathClass::Undecided, "{:?} {:?}", s.modes, s.score);
        assert!(
            s.compressed.iter().all(|&c| (60..=140).contains(&c)),
            "{:?}",
            s.compressed
        );
    }

    /// Pairs that met no queue: each kind at its sending gap.
    #[test]
    fn a_quiet_path_is_undecided() {
        let cfg = SqueezeConfig::new(10e6);
        let plan = cfg.plan();
        let mut st = 5u64;
        let gaps: Vec<Option<i64>> = plan
            .iter()
            .map(|p| Some(p.gap_ns as i64 + (uniform(&mut st) * 10_000.0) as i64))
            .collect();
        let kinds: Vec<Kind> = plan.iter().map(|p| p.kind).collect();
        let s = analyse(&cfg, &kinds, &gaps);
        assert_eq!(s.class, PathClass::Undecided, "{:?}", s.modes);
        assert_eq!(s.score, 0);
        assert!(!s.modes[0].is_empty() && !s.modes[1].is_empty());
    }

    #[test]
    fn lost_reordered_and_far_gaps_are_counted_apart() {
        let cfg = SqueezeConfig::new(10e6);
        let kinds = [Kind::Half500, Kind::Half1500, Kind::Half500, Kind::Half1500];
        let gaps = [None, Some(-5), Some(10_000_000_000), Some(600_000)];
        let s = analyse(&cfg, &kinds, &gaps);
        assert_eq!(s.lost, 1);
        assert_eq!(s.reordered, [0, 1]);
        assert_eq!(s.overflow, [1, 0]);
        assert_eq!(s.pairs, [1, 2]);
        // Too few pairs for any mode.
        assert_eq!(s.class, PathClass::Undecided);
    }

    #[test]
    fn the_score_matches_modes_once() {
        assert_eq!(score(&[3, 10], &[4, 10], 2), 2);
        assert_eq!(score(&[3], &[4, 5], 2), 0);
        assert_eq!(score(&[3, 20], &[40], 2), -3);
        assert_eq!(score(&[], &[], 2), 0);
        assert_eq!(modes(&[0, 5, 1, 0, 0, 0, 9, 9, 0], 20), vec![1, 6]);
        // A single full bin is its own mode, not its left neighbour.
        assert_eq!(modes(&[0, 0, 0, 0, 0, 12, 0, 0], 12), vec![5]);
    }
}
