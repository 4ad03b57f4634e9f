//! The rate search: from fleet verdicts to the next fleet's rate and to the end.
//!
//! pathload 1.3.2's search: Rmin is the largest rate seen without a trend, Rmax the
//! smallest rate seen increasing, and [Gmin, Gmax] the grey region between them where
//! fleets were neither. While nothing has been seen increasing or grey the rate
//! doubles (the exponential phase); then the search bisects between Rmin and Rmax, or,
//! with a grey region, between Rmin and Gmin or Gmax and Rmax, whichever edge is still
//! wider than χ. It ends when Rmax − Rmin ≤ ω (the user's resolution), when both grey
//! edges are within χ (the grey region's resolution), or when the rate would have to
//! exceed what the sender can send.
//!
//! A verdict that contradicts an earlier one (increasing below Rmin, no trend above
//! Rmax) is taken as news: the bound it contradicts falls back to the nearest earlier
//! verdict that still agrees, so the search recovers instead of looping.
//!
//! One change of this project: an increasing fleet's delays say how far above the
//! available bandwidth it was (their growth, see [`crate::trend::StreamAnalysis`]), so
//! the estimator may give the search an aim ([`Search::aim_at`]): the next fleets then
//! go just below and just above the aim (± 0.45 ω) instead of to the middle of
//! [Rmin, Rmax], and when both verdicts are as expected the search has converged in
//! two fleets where bisection takes four or five. An aim from a fleet far above the
//! available bandwidth is coarse (it is off by a share of that distance, see
//! [`AIM_SLACK`]): the next fleet goes that share above it, where it should still
//! increase, and that fleet's nearer aim is the one bracketed. Bounds still come only
//! from verdicts, so an aim never makes a range; a verdict that disagrees with the aim
//! drops it and the next fleet bisects, and aims are not used inside a grey region.
//!
//! Every bound remembers the rate of competing application traffic that rode in its
//! fleet's probes (MGRP §2.4), so the range can be reported adjusted as well.

use serde::Serialize;

use crate::trend::Trend;

/// How far an aim may be off, as a share of its distance below the fleet it came
/// from. The estimator takes the initial rate (from 1500-byte trains) as the
/// capacity, and small probes see less of a link than large packets do because of
/// per-packet overheads (228-byte probes behind a 14-byte header: 5 % less), so an aim
/// from a fleet far above the available bandwidth lies low by about that share of the
/// distance. Twice that covers headers up to about 30 bytes.
pub const AIM_SLACK: f64 = 0.1;

/// A rate the search learnt something at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bound {
    /// The fleet's actual sending rate, Mbit/s.
    pub rate: f64,
    /// The rate of application traffic that rode in the fleet's probes and would
    /// otherwise have competed with them, Mbit/s (0 without MGRP).
    pub competing: f64,
    /// The rate of application traffic that rode in streams of the fleet whose
    /// sender counted none arriving while they were sent, Mbit/s: what the
    /// adjustment could not account for (0 when every stream was accounted).
    pub unaccounted: f64,
}

impl Bound {
    /// The rate less the competing traffic: what is available to that traffic's
    /// owner too (MGRP §2.4).
    pub fn adjusted(&self) -> f64 {
        (self.rate - self.competing).max(0.0)
    }
}

/// Where the search stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bounds {
    /// Largest rate with no trend.
    pub rmin: Option<Bound>,
    /// Smallest rate with an increasing trend.
    pub rmax: Option<Bound>,
    /// Lowest grey rate.
    pub gmin: Option<Bound>,
    /// Highest grey rate.
    pub gmax: Option<Bound>,
}

/// What the search wants next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// A fleet at this rate, Mbit/s.
    Rate(f64),
    /// Done.
    Converged(Convergence),
}

/// How the search ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Convergence {
    /// Rmax − Rmin ≤ ω: the range is [Rmin, Rmax].
    UserResolution,
    /// Both grey edges within χ of Rmin and Rmax.
    GreyResolution,
    /// No trend at the highest rate the sender can send: the available bandwidth is
    /// above it.
    AboveMaxRate,
}

/// The rate search.
#[derive(Debug, Clone)]
pub struct Search {
    omega: f64,
    chi: f64,
    max_rate: f64,
    bounds: Bounds,
    history: Vec<(Bound, Trend)>,
    aim: Option<Aim>,
    /// Set when a verdict disagreed with the aim: the next fleet bisects whatever aim
    /// comes meanwhile.
    bisect_next: bool,
}

/// A rate the delays point at, and what was tried around it.
#[derive(Debug, Clone, Copy)]
struct Aim {
    rate: f64,
    /// How far below the fleet it came from, Mbit/s.
    distance: f64,
    tried_below: bool,
    tried_above: bool,
    /// The verdict expected of the fleet sent for this aim.
    expect: Option<Trend>,
}

impl Search {
    /// A search with resolution `omega`, grey resolution `chi` and the sender's highest
    /// rate `max_rate`, all Mbit/s.
    pub fn new(omega: f64, chi: f64, max_rate: f64) -> Self {
        Self {
            omega,
            chi,
            max_rate,
            bounds: Bounds::default(),
            history: Vec::new(),
            aim: None,
            bisect_next: false,
        }
    }

    /// Aims the next fleets at `rate`, Mbit/s: where the delay growth of an
    /// increasing fleet sent at `from` Mbit/s puts the available bandwidth. Ignored
    /// right after a verdict disagreed with the previous aim.
    pub fn aim_at(&mut self, rate: f64, from: f64) {
        if !self.bisect_next && rate.is_finite() && rate > 0.0 && from.is_finite() {
            self.aim = Some(Aim {
                rate,
                distance: (from - rate).max(0.0),
                tried_below: false,
                tried_above: false,
                expect: None,
            });
        }
    }

    /// The rate the search aims at, if any.
    pub fn aim(&self) -> Option<f64> {
        self.aim.map(|a| a.rate)
    }

    /// The bounds so far.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// ω, Mbit/s.
    pub fn omega(&self) -> f64 {
        self.omega
    }

    /// χ, Mbit/s.
    pub fn chi(&self) -> f64 {
        self.chi
    }

    /// The highest rate, Mbit/s.
    pub fn max_rate(&self) -> f64 {
        self.max_rate
    }

    /// Records a fleet's verdict at its rate.
    pub fn record(&mut self, at: Bound, verdict: Trend) {
        if let Some(expect) = self.aim.as_mut().and_then(|a| a.expect.take())
            && expect != verdict
        {
            self.aim = None;
            self.bisect_next = true;
        }
        self.history.push((at, verdict));
        let h = &self.history;
        let b = &mut self.bounds;
        match verdict {
            Trend::Increasing => {
                if b.rmax.is_none_or(|r| at.rate < r.rate) {
                    b.rmax = Some(at);
                }
                if b.rmin.is_some_and(|r| r.rate >= at.rate) {
                    b.rmin = best_below(h, at.rate, Trend::NoTrend);
                }
            }
            Trend::NoTrend => {
                if b.rmin.is_none_or(|r| at.rate > r.rate) {
                    b.rmin = Some(at);
                }
                if b.rmax.is_some_and(|r| r.rate <= at.rate) {
                    b.rmax = best_above(h, at.rate, Trend::Increasing);
                }
            }
            Trend::Ambiguous => {
                if b.gmin.is_none_or(|g| at.rate < g.rate) {
                    b.gmin = Some(at);
                }
                if b.gmax.is_none_or(|g| at.rate > g.rate) {
                    b.gmax = Some(at);
                }
                if b.rmin.is_some_and(|r| r.rate >= at.rate) {
                    b.rmin = best_below(h, at.rate, Trend::NoTrend);
                }
                if b.rmax.is_some_and(|r| r.rate <= at.rate) {
                    b.rmax = best_above(h, at.rate, Trend::Increasing);
                }
            }
        }
        self.clip_grey();
    }

    /// The grey region lives strictly between Rmin and Rmax; grey rates outside it were
    /// overruled by later verdicts.
    fn clip_grey(&mut self) {
        let lo = self.bounds.rmin.map_or(f64::NEG_INFINITY, |r| r.rate);
        let hi = self.bounds.rmax.map_or(f64::INFINITY, |r| r.rate);
        let inside = self
            .history
            .iter()
            .filter(|(b, t)| *t == Trend::Ambiguous && b.rate > lo && b.rate < hi)
            .map(|(b, _)| *b);
        let mut gmin: Option<Bound> = None;
        let mut gmax: Option<Bound> = None;
        for b in inside {
            if gmin.is_none_or(|g| b.rate < g.rate) {
                gmin = Some(b);
            }
            if gmax.is_none_or(|g| b.rate > g.rate) {
                gmax = Some(b);
            }
        }
        self.bounds.gmin = gmin;
        self.bounds.gmax = gmax;
    }

    /// The next rate after a fleet asked to send at `requested` Mbit/s that sent at
    /// `last`, or the end.
    pub fn next(&mut self, requested: f64, last: f64) -> Next {
        let bisect = std::mem::take(&mut self.bisect_next);
        let b = self.bounds;
        let lo = b.rmin.map_or(0.0, |r| r.rate);
        let Some(rmax) = b.rmax else {
            // Exponential phase (or a grey region with nothing above it yet): double.
            if requested >= self.max_rate * (1.0 - 1e-9) {
                return Next::Converged(Convergence::AboveMaxRate);
            }
            let from = b.gmax.map_or(last.max(lo), |g| g.rate.max(last));
            return Next::Rate((2.0 * from).min(self.max_rate));
        };
        let hi = rmax.rate;
        if hi - lo <= self.omega {
            return Next::Converged(Convergence::UserResolution);
        }
        match (b.gmin, b.gmax) {
            (Some(gmin), Some(gmax)) => {
                let upper = hi - gmax.rate;
                let lower = gmin.rate - lo;
                if upper <= self.chi && lower <= self.chi {
                    Next::Converged(Convergence::GreyResolution)
                } else if upper > self.chi {
                    Next::Rate((gmax.rate + hi) / 2.0)
                } else {
                    Next::Rate((lo + gmin.rate) / 2.0)
                }
            }
            _ => {
                let aimed = if bisect { None } else { self.aimed(lo, hi) };
                Next::Rate(aimed.unwrap_or((lo + hi) / 2.0))
            }
        }
    }

    /// Just below the aim, then just above it, while those lie well inside (lo, hi); a
    /// coarse aim only above it, by its slack.
    fn aimed(&mut self, lo: f64, hi: f64) -> Option<f64> {
        let (half, margin) = (0.45 * self.omega, 0.1 * self.omega);
        let inside = |r: f64| r > lo + margin && r < hi - margin;
        let aim = self.aim.as_mut()?;
        let slack = AIM_SLACK * aim.distance;
        if slack > half {
            if !aim.tried_above && inside(aim.rate + slack) {
                aim.tried_above = true;
                aim.expect = Some(Trend::Increasing);
                return Some(aim.rate + slack);
            }
            return None;
        }
        if !aim.tried_below && inside(aim.rate - half) {
            aim.tried_below = true;
            aim.expect = Some(Trend::NoTrend);
            return Some(aim.rate - half);
        }
        if !aim.tried_above && inside(aim.rate + half) {
            aim.tried_above = true;
            aim.expect = Some(Trend::Increasing);
            return Some(aim.rate + half);
        }
        None
    }

    /// The range the search supports now: [Rmin, Rmax], with 0 and the highest rate
    /// where a side is still unknown. When the grey region ended the search, its
    /// edges are within χ of these, and [Gmin, Gmax] lies inside (the original
    /// printed [Gmin, Gmax], which one grey fleet makes a single rate; the bounds
    /// around it say what was measured).
    pub fn range(&self) -> (Bound, Bound) {
        let b = &self.bounds;
        let zero = Bound::default();
        let top = Bound {
            rate: self.max_rate,
            ..Bound::default()
        };
        (b.rmin.unwrap_or(zero), b.rmax.unwrap_or(top))
    }
}

/// The highest rate below `rate` whose verdict was `t`.
fn best_below(h: &[(Bound, Trend)], rate: f64, t: Trend) -> Option<Bound> {
    h.iter()
        .filter(|(b, v)| *v == t && b.rate < rate)
        .map(|(b, _)| *b)
        .max_by(|a, b| a.rate.total_cmp(&b.rate))
}

/// The lowest rate above `rate` whose verdict was `t`.
fn best_above(h: &[(Bound, Trend)], rate: f64, t: Trend) -> Option<Bound> {
    h.iter()
        .filter(|(b, v)| *v == t && b.rate > rate)
        .map(|(b, _)| *b)
        .min_by(|a, b| a.rate.total_cmp(&b.rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rate: f64) -> Bound {
        Bound {
            rate,
            ..Bound::default()
        }
    }

    /// Runs the search against a perfect oracle: no trend below `avail`, increasing
    /// above, grey within `grey` of it.
    fn run(avail: f64, grey: f64, start: f64) -> (Convergence, (f64, f64), u32) {
        let mut s = Search::new(0.2, 0.5, 100.0);
        let mut rate = start;
        for fleets in 1..=100 {
            let v = if grey > 0.0 && (rate - avail).abs() <= grey {
                Trend::Ambiguous
            } else if rate > avail {
                Trend::Increasing
            } else {
                Trend::NoTrend
            };
            s.record(at(rate), v);
            match s.next(rate, rate) {
                Next::Rate(r) => rate = r,
                Next::Converged(c) => {
                    let (lo, hi) = s.range();
                    return (c, (lo.rate, hi.rate), fleets);
                }
            }
        }
        panic!("no convergence");
    }

    #[test]
    fn bisection_brackets_the_truth_within_omega() {
        for avail in [0.7, 3.3, 5.54, 9.42, 42.0, 77.7] {
            for start in [1.0, 9.9, 60.0] {
                let (c, (lo, hi), fleets) = run(avail, 0.0, start);
                assert_eq!(c, Convergence::UserResolution, "{avail} {start}");
                assert!(lo <= avail && avail <= hi, "{avail}: {lo}-{hi}");
                assert!(hi - lo <= 0.2);
                assert!(fleets < 20, "{fleets}");
            }
        }
    }

    #[test]
    fn a_grey_region_is_resolved_to_chi() {
        let (c, (lo, hi), _) = run(5.0, 1.0, 9.9);
        assert_eq!(c, Convergence::GreyResolution);
        // [Rmin, Rmax] holds the grey region [4, 6], each edge within χ of it.
        assert!((4.0 - 0.5 - 1e-9..=4.0).contains(&lo), "{lo}");
        assert!((6.0..=6.0 + 0.5 + 1e-9).contains(&hi), "{hi}");
    }

    #[test]
    fn no_trend_at_the_top_stops_above_max_rate() {
        let (c, (lo, _), fleets) = run(500.0, 0.0, 10.0);
        assert_eq!(c, Convergence::AboveMaxRate);
        assert_eq!(lo, 100.0);
        assert_eq!(fleets, 5); // 10, 20, 40, 80, 100
    }

    #[test]
    fn the_exponential_phase_doubles_until_increasing() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(2.0), Trend::NoTrend);
        assert_eq!(s.next(2.0, 2.0), Next::Rate(4.0));
        s.record(at(4.0), Trend::NoTrend);
        assert_eq!(s.next(4.0, 4.0), Next::Rate(8.0));
        s.record(at(8.0), Trend::Increasing);
        assert_eq!(s.next(8.0, 8.0), Next::Rate(6.0));
    }

    #[test]
    fn a_contradiction_falls_back_to_agreeing_verdicts() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(4.0), Trend::NoTrend);
        s.record(at(6.0), Trend::NoTrend);
        s.record(at(10.0), Trend::Increasing);
        // Increasing at 5 overrules the no-trend at 6; 4 still stands.
        s.record(at(5.0), Trend::Increasing);
        let b = s.bounds();
        assert_eq!(b.rmin.unwrap().rate, 4.0);
        assert_eq!(b.rmax.unwrap().rate, 5.0);
        // No trend at 7 overrules the increasing at 5 and 10? Only those at or below.
        s.record(at(7.0), Trend::NoTrend);
        let b = s.bounds();
        assert_eq!(b.rmin.unwrap().rate, 7.0);
        assert_eq!(b.rmax.unwrap().rate, 10.0);
        assert_eq!(s.next(7.0, 7.0), Next::Rate(8.5));
    }

    #[test]
    fn grey_outside_the_bounds_is_dropped() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(6.0), Trend::Ambiguous);
        s.record(at(8.0), Trend::Increasing);
        assert_eq!(s.bounds().gmax.unwrap().rate, 6.0);
        s.record(at(5.0), Trend::Increasing);
        assert_eq!(s.bounds().gmax, None);
        assert_eq!(s.next(5.0, 5.0), Next::Rate(2.5));
    }

    #[test]
    fn adjusted_bounds_subtract_competing_traffic() {
        let b = Bound {
            rate: 7.0,
            competing: 2.5,
            unaccounted: 0.0,
        };
        assert_eq!(b.adjusted(), 4.5);
        let b = Bound {
            rate: 1.0,
            competing: 2.5,
            unaccounted: 0.0,
        };
        assert_eq!(b.adjusted(), 0.0);
    }

    /// The rate of a `Next` that must be one.
    fn rate(next: Next) -> f64 {
        match next {
            Next::Rate(r) => r,
            other => panic!("expected a rate, got {other:?}"),
        }
    }

    #[test]
    fn an_aim_is_bracketed_in_two_fleets() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(10.0), Trend::Increasing);
        s.aim_at(9.4, 10.0);
        let below = rate(s.next(10.0, 10.0));
        assert!((below - 9.31).abs() < 1e-9, "{below}");
        s.record(at(below), Trend::NoTrend);
        let above = rate(s.next(below, below));
        assert!((above - 9.49).abs() < 1e-9, "{above}");
        s.record(at(above), Trend::Increasing);
        s.aim_at(9.42, 9.49);
        assert_eq!(
            s.next(above, above),
            Next::Converged(Convergence::UserResolution)
        );
        assert_eq!(s.range().0.rate, below);
        assert_eq!(s.range().1.rate, above);
    }

    #[test]
    fn a_verdict_against_the_aim_drops_it_and_the_next_fleet_bisects() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(9.5), Trend::Increasing);
        s.aim_at(9.0, 9.5);
        let below = rate(s.next(9.5, 9.5));
        assert!((below - 8.91).abs() < 1e-9, "{below}");
        // Expected no trend below the aim; it was increasing: the aim is gone, the
        // new one is refused once, and the next rate is the middle of [0, below].
        s.record(at(below), Trend::Increasing);
        s.aim_at(8.5, 9.0);
        assert_eq!(s.aim(), None);
        assert_eq!(s.next(below, below), Next::Rate(below / 2.0));
        // After that bisection aims are taken again.
        s.record(at(below / 2.0), Trend::NoTrend);
        s.aim_at(8.5, 9.0);
        assert_eq!(s.aim(), Some(8.5));
    }

    #[test]
    fn an_aim_outside_the_bounds_or_in_a_grey_region_is_not_used() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(5.0), Trend::NoTrend);
        s.record(at(10.0), Trend::Increasing);
        // A near aim (4.0 ± 0.09) and a coarse one (4.0 + 0.6) below Rmin alike.
        s.aim_at(4.0, 4.5);
        assert_eq!(s.next(10.0, 10.0), Next::Rate(7.5));
        s.aim_at(4.0, 10.0);
        assert_eq!(s.next(10.0, 10.0), Next::Rate(7.5));
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(5.0), Trend::NoTrend);
        s.record(at(7.0), Trend::Ambiguous);
        s.record(at(10.0), Trend::Increasing);
        s.aim_at(9.0, 10.0);
        assert_eq!(s.next(10.0, 10.0), Next::Rate(8.5));
    }

    #[test]
    fn a_coarse_aim_is_passed_by_its_slack_and_the_nearer_aim_bracketed() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(9.8), Trend::Increasing);
        // 4.4 Mbit/s below the fleet: off by up to 0.44, so the next fleet goes there.
        s.aim_at(5.4, 9.8);
        let above = rate(s.next(9.8, 9.8));
        assert!((above - 5.84).abs() < 1e-9, "{above}");
        s.record(at(above), Trend::Increasing);
        // The fleet at 5.84 aims within 0.25: near, so below and above it.
        s.aim_at(5.6, above);
        let below = rate(s.next(above, above));
        assert!((below - 5.51).abs() < 1e-9, "{below}");
        s.record(at(below), Trend::NoTrend);
        let then = rate(s.next(below, below));
        assert!((then - 5.69).abs() < 1e-9, "{then}");
        s.record(at(then), Trend::Increasing);
        assert_eq!(
            s.next(then, then),
            Next::Converged(Convergence::UserResolution)
        );
    }

    #[test]
    fn a_coarse_aim_that_was_not_low_drops_to_bisection() {
        let mut s = Search::new(0.2, 0.5, 100.0);
        s.record(at(9.8), Trend::Increasing);
        s.aim_at(5.4, 9.8);
        let above = rate(s.next(9.8, 9.8));
        s.record(at(above), Trend::NoTrend);
        assert_eq!(s.next(above, above), Next::Rate((above + 9.8) / 2.0));
    }
}
