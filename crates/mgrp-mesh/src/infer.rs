//! The pairs a mesh does not measure, inferred from those it does.
//!
//! A path's available bandwidth is bounded by the sender's uplink, the receiver's
//! downlink and, between regions, the core between them. Each measured path is a
//! lower bound of all three: a member's uplink is at least the most any path from
//! it was measured at, its downlink at least the most into it, the core from one
//! region to another at least the most any path between them was measured at. A
//! pair not measured is given the least of its three bounds ([`Basis::Inferred`]
//! names the measured paths each came from); without regions, the least of the
//! two access bounds. It is as old as the oldest of them. An estimate older than the
//! mesh's age goal (`stale_before`) bounds nothing while a fresher one does: a value
//! rests on fresh inputs wherever they exist. A path with a bottleneck
//! of its own, away from both access links and the core, is read too high: no
//! measurement of another path shows it.
//!
//! Sans-IO: measured paths in, a value for any pair out.

use std::collections::HashMap;

/// A path's newest available-bandwidth estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// The member the path comes from.
    pub from: usize,
    /// The member that measured it (the path goes into it).
    pub into: usize,
    /// Bits per second.
    pub bps: f64,
    /// When it was measured (seconds on the caller's clock).
    pub at: f64,
}

/// What a value rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The path's own estimate (its index among the measured).
    Measured(usize),
    /// The least of the sender's uplink bound, the receiver's downlink bound and the
    /// core's between their regions, each the index of the measured path it came
    /// from.
    Inferred {
        /// The path from the sender that bounds its uplink.
        uplink: usize,
        /// The path into the receiver that bounds its downlink.
        downlink: usize,
        /// The path between their regions that bounds the core, when both have one.
        core: Option<usize>,
    },
}

/// A pair's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Value {
    /// Bits per second.
    pub bps: f64,
    /// When its oldest input was measured.
    pub at: f64,
    /// What it rests on.
    pub basis: Basis,
}

impl Value {
    /// Whether it is inferred.
    pub fn inferred(&self) -> bool {
        matches!(self.basis, Basis::Inferred { .. })
    }
}

/// The bounds learnt from a set of measured paths.
#[derive(Debug, Clone)]
pub struct Inference<'a> {
    measured: &'a [Measured],
    regions: &'a [Option<usize>],
    by_pair: HashMap<(usize, usize), usize>,
    /// Per member: the measured path that bounds its uplink, its downlink.
    up: Vec<Option<usize>>,
    down: Vec<Option<usize>>,
    /// Per (from region, into region): the measured path that bounds the core.
    core: HashMap<(usize, usize), usize>,
}

impl<'a> Inference<'a> {
    /// The bounds of `regions.len()` members (each in a region, or not said) from
    /// `measured` (one per path: a path given twice keeps the later); an estimate
    /// measured before `stale_before` is a bound only where no fresher one is.
    pub fn new(
        regions: &'a [Option<usize>],
        measured: &'a [Measured],
        stale_before: Option<f64>,
    ) -> Self {
        let n = regions.len();
        let mut s = Self {
            measured,
            regions,
            by_pair: HashMap::with_capacity(measured.len()),
            up: vec![None; n],
            down: vec![None; n],
            core: HashMap::new(),
        };
        // Fresh before stale, then the higher bound.
        let fresh = |i: usize| stale_before.is_none_or(|t| measured[i].at >= t);
        let better = |cur: Option<usize>, i: usize| match cur {
            Some(c) if (fresh(c), measured[c].bps) >= (fresh(i), measured[i].bps) => Some(c),
            _ => Some(i),
        };
        for (i, m) in measured.iter().enumerate() {
            if m.from >= n || m.into >= n || m.from == m.into || !m.bps.is_finite() {
                continue;
            }
            s.by_pair.insert((m.from, m.into), i);
            s.up[m.from] = better(s.up[m.from], i);
            s.down[m.into] = better(s.down[m.into], i);
            if let (Some(a), Some(b)) = (regions[m.from], regions[m.into]) {
                let cur = s.core.get(&(a, b)).copied();
                if let Some(c) = better(cur, i) {
                    s.core.insert((a, b), c);
                }
            }
        }
        s
    }

    /// The value of the path from `from` into `into`: its own estimate when it is
    /// measured, else inferred; `None` when neither end has a measured path.
    pub fn value(&self, from: usize, into: usize) -> Option<Value> {
        if let Some(&i) = self.by_pair.get(&(from, into)) {
            let m = &self.measured[i];
            return Some(Value {
                bps: m.bps,
                at: m.at,
                basis: Basis::Measured(i),
            });
        }
        let uplink = (*self.up.get(from)?)?;
        let downlink = (*self.down.get(into)?)?;
        let core = match (self.regions[from], self.regions[into]) {
            (Some(a), Some(b)) => self.core.get(&(a, b)).copied(),
            _ => None,
        };
        let inputs = [Some(uplink), Some(downlink), core];
        let used = inputs.iter().flatten().map(|&i| &self.measured[i]);
        let bps = used.clone().map(|m| m.bps).fold(f64::INFINITY, f64::min);
        let at = used.map(|m| m.at).fold(f64::INFINITY, f64::min);
        Some(Value {
            bps,
            at,
            basis: Basis::Inferred {
                uplink,
                downlink,
                core,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(from: usize, into: usize, bps: f64, at: f64) -> Measured {
        Measured {
            from,
            into,
            bps,
            at,
        }
    }

    #[test]
    fn a_pair_not_measured_takes_the_least_of_its_bounds_and_the_oldest_age() {
        // 0 → 1 at 50 (1's downlink); 0 → 2 at 80 (0's uplink at least 80);
        // 3 → 1 at 60; all in region 0 but 3, in region 1.
        let regions = [Some(0), Some(0), Some(0), Some(1)];
        let measured = [
            m(0, 1, 50.0, 10.0),
            m(0, 2, 80.0, 20.0),
            m(3, 1, 60.0, 5.0),
            m(3, 2, 30.0, 7.0),
        ];
        let inf = Inference::new(&regions, &measured, None);
        // Measured: its own.
        let v = inf.value(0, 1).unwrap();
        assert_eq!((v.bps, v.basis), (50.0, Basis::Measured(0)));
        assert!(!v.inferred());
        // 0 → 3 is not measured, and nothing goes into 3: no value.
        assert!(inf.value(0, 3).is_none());
        // 3 → 0: nothing goes into 0.
        assert!(inf.value(3, 0).is_none());
        // 2 sends nothing measured.
        assert!(inf.value(2, 1).is_none());
        // A second measurement into 2 from 0 and region 0 → 0 core: 80.
        let v = inf.value(0, 2).unwrap();
        assert_eq!(v.basis, Basis::Measured(1));
        // 3 → 2 is measured; a pair that is not: make one.
        let measured = [
            m(0, 1, 50.0, 10.0),
            m(0, 2, 80.0, 20.0),
            m(3, 1, 60.0, 5.0),
            m(1, 2, 30.0, 7.0),
        ];
        let inf = Inference::new(&regions, &measured, None);
        // 3 → 2: uplink of 3 ≥ 60 (3 → 1), downlink of 2 ≥ 80 (0 → 2), core 1 → 0
        // ≥ 60 (3 → 1): 60, as old as the oldest input (5).
        let v = inf.value(3, 2).unwrap();
        assert!(v.inferred());
        assert_eq!(v.bps, 60.0);
        assert_eq!(v.at, 5.0);
        assert_eq!(
            v.basis,
            Basis::Inferred {
                uplink: 2,
                downlink: 1,
                core: Some(2)
            }
        );
        // Without regions: the access bounds alone.
        let none = [None; 4];
        let inf = Inference::new(&none, &measured, None);
        let v = inf.value(3, 2).unwrap();
        assert_eq!(
            v.basis,
            Basis::Inferred {
                uplink: 2,
                downlink: 1,
                core: None
            }
        );
        assert_eq!(v.bps, 60.0);
    }

    #[test]
    fn a_stale_estimate_bounds_nothing_while_a_fresh_one_does() {
        let regions = [None, None, None, None];
        // Into 1: from 0 at 90 but measured at 10 (stale before 100), from 2 at
        // 40 at 150; from 3: 3 → 2 at 70.
        let measured = [
            m(0, 1, 90.0, 10.0),
            m(2, 1, 40.0, 150.0),
            m(3, 2, 70.0, 160.0),
        ];
        let any_age = Inference::new(&regions, &measured, None);
        let fresh = Inference::new(&regions, &measured, Some(100.0));
        // 3 → 1: downlink of 1 bounded by 90 (stale) or by 40 (fresh).
        let v = any_age.value(3, 1).unwrap();
        assert_eq!((v.bps, v.at), (70.0, 10.0));
        let v = fresh.value(3, 1).unwrap();
        assert_eq!((v.bps, v.at), (40.0, 150.0));
        // 0's uplink has only the stale bound: still used.
        let v = fresh.value(0, 2).unwrap();
        assert_eq!((v.bps, v.at), (70.0, 10.0));
    }

    #[test]
    fn paths_out_of_range_or_to_themselves_are_left_out() {
        let regions = [None, None];
        let measured = [
            m(0, 0, 10.0, 0.0),
            m(0, 5, 10.0, 0.0),
            m(0, 1, f64::NAN, 0.0),
        ];
        let inf = Inference::new(&regions, &measured, None);
        assert!(inf.value(0, 1).is_none());
        assert!(inf.value(1, 0).is_none());
        assert!(inf.value(7, 0).is_none());
    }
}
