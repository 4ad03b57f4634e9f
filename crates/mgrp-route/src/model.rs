//! Route control (sans-IO): for each destination prefix, candidate paths (direct to
//! the member that owns it, or through one other member), each scored by a
//! throughput model from what the overlay knows of its hops; SAFIRE's bandwidth-ratio
//! rule to switch; a failed path routed around at once.
//!
//! **The model** (SAFIRE's equation (1), Mathis's bound with k = 1, capped by the
//! path's rate): a path of hops h₁…hₙ gets
//!
//! ```text
//! t = min( R, MSS / (RTT · √ε) )
//! R   = minₕ rate(h)        rate: the hop's TCP prediction (btc) if any, else its
//!                           available bandwidth, else its capacity
//! RTT = Σₕ rtt(h)           heartbeats' round trip of each hop
//! ε   = 1 − Πₕ (1 − ℓ(h))   ℓ: badabing's loss rate when fresh, else heartbeats'
//!                           forward loss (never 0 from a finite count)
//! ```
//!
//! Either term alone when the other is unknown; no score when neither is known.
//! A path is alive when every hop answers heartbeats.
//!
//! **The rule**: switch from the current path to the best when the best scores more
//! than (1 + η) times the current and the last change was at least T_ch ago (SAFIRE:
//! η = 0.5). A current path that fails is left at once, whatever T_ch says, for the
//! best alive one; with none alive, the destination goes back to the kernel's normal
//! route (fail open) until one answers again.

use serde::Serialize;

pub use mgrp_views::routes::{Hop, LossSource, RateSource, Reason, Score};

/// Scores a path of `hops` for TCP segments of `mss` bytes.
pub fn score(hops: &[Hop], mss: f64) -> Score {
    let alive = !hops.is_empty() && hops.iter().all(|h| h.alive);
    let all = |f: fn(&Hop) -> Option<f64>| hops.iter().map(f).collect::<Option<Vec<f64>>>();
    let rate = all(|h| h.rate_bps).and_then(|v| v.into_iter().reduce(f64::min));
    let rtt = all(|h| h.rtt_s).map(|v| v.iter().sum::<f64>());
    let loss =
        all(|h| h.loss).map(|v| 1.0 - v.iter().map(|l| 1.0 - l.clamp(0.0, 1.0)).product::<f64>());
    let mathis = match (rtt, loss) {
        (Some(r), Some(e)) if r > 0.0 && e > 0.0 => Some(mss * 8.0 / (r * e.sqrt())),
        _ => None,
    };
    let bps = match (rate, mathis) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mbit = |x: Option<f64>| x.map_or("?".to_string(), |v| format!("{:.2} Mbit/s", v / 1e6));
    let basis = format!(
        "min(rate {}, MSS/(RTT·√ε) {}) with RTT {} and ε {}{}",
        mbit(rate),
        mbit(mathis),
        rtt.map_or("?".into(), |r| format!("{:.1} ms", r * 1e3)),
        loss.map_or("?".into(), |e| format!("{e:.4}")),
        if alive { "" } else { "; a hop does not answer" }
    );
    Score {
        alive,
        bps,
        rate_bps: rate,
        mathis_bps: mathis,
        rtt_s: rtt,
        loss,
        basis,
    }
}

/// SAFIRE's switching rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// How much better the best path must score, 0.5 for 50 %.
    pub eta: f64,
    /// Least time between two changes, s (failures excepted).
    pub t_ch_s: f64,
}

/// A change of path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Switch {
    /// When, s on the controller's clock.
    pub at: f64,
    /// The path left (`None`: the normal route).
    pub from: Option<usize>,
    /// The path taken (`None`: the normal route).
    pub to: Option<usize>,
    /// Why.
    pub reason: Reason,
    /// The left path's score then, bit/s.
    pub from_bps: Option<f64>,
    /// The taken path's score then, bit/s.
    pub to_bps: Option<f64>,
}

/// One destination's choice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    current: Option<usize>,
    /// When the last change was made.
    changed_at: Option<f64>,
    /// Whether any path was ever chosen.
    chosen_once: bool,
}

impl Choice {
    /// The path in use (`None`: the kernel's normal route).
    pub fn current(&self) -> Option<usize> {
        self.current
    }

    /// A choice set by hand to `to` at `now`.
    pub fn forced(to: Option<usize>, now: f64) -> Self {
        Self {
            current: to,
            changed_at: Some(now),
            chosen_once: true,
        }
    }

    /// When the last change was made.
    pub fn changed_at(&self) -> Option<f64> {
        self.changed_at
    }

    /// Decides at `now` from the candidates' `scores`; returns the change, if any.
    pub fn decide(&mut self, now: f64, scores: &[Score], rule: &Rule) -> Option<Switch> {
        let best = best(scores);
        let switch = |to: Option<usize>, reason: Reason, from: Option<usize>| Switch {
            at: now,
            from,
            to,
            reason,
            from_bps: from.and_then(|i| scores.get(i)).and_then(|s| s.bps),
            to_bps: to.and_then(|i| scores.get(i)).and_then(|s| s.bps),
        };
        let change = match self.current {
            None => {
                let b = best?;
                let reason = if self.chosen_once {
                    Reason::Recovered
                } else {
                    Reason::First
                };
                switch(Some(b), reason, None)
            }
            Some(c) if !scores.get(c).is_some_and(|s| s.alive) => match best {
                Some(b) => switch(Some(b), Reason::Failed, Some(c)),
                None => switch(None, Reason::AllDown, Some(c)),
            },
            Some(c) => {
                let b = best?;
                if b == c || self.changed_at.is_some_and(|t| now - t < rule.t_ch_s) {
                    return None;
                }
                let nb = scores[b].bps?;
                let ratio = match scores[c].bps {
                    Some(nc) if nc > 0.0 => nb / nc,
                    // What is known beats what is not.
                    _ => f64::INFINITY,
                };
                if ratio <= 1.0 + rule.eta {
                    return None;
                }
                switch(Some(b), Reason::Better { ratio }, Some(c))
            }
        };
        self.current = change.to;
        self.changed_at = Some(now);
        self.chosen_once |= change.to.is_some();
        Some(change)
    }
}

/// The best alive path: the highest score; among paths with no score yet, the first
/// alive one (the configured order) when no path has a score.
fn best(scores: &[Score]) -> Option<usize> {
    let scored = scores
        .iter()
        .enumerate()
        .filter(|(_, s)| s.alive)
        .filter_map(|(i, s)| s.bps.map(|b| (i, b)))
        .fold(None, |acc: Option<(usize, f64)>, (i, b)| match acc {
            Some((_, a)) if a >= b => acc,
            _ => Some((i, b)),
        });
    scored
        .map(|(i, _)| i)
        .or_else(|| scores.iter().position(|s| s.alive))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hop(rtt_ms: f64, loss: f64, rate_mbit: f64) -> Hop {
        Hop {
            alive: true,
            rtt_s: Some(rtt_ms / 1e3),
            loss: Some(loss),
            loss_source: Some(LossSource::Heartbeats),
            rate_bps: Some(rate_mbit * 1e6),
            rate_source: Some(RateSource::Available),
        }
    }

    const RULE: Rule = Rule {
        eta: 0.5,
        t_ch_s: 30.0,
    };

    #[test]
    fn the_model_is_mathis_capped_by_the_narrowest_hop() {
        // 2 × 25 ms, 5 % loss on one hop: 1448·8 / (0.05 · √0.05) = 1.036 Mbit/s.
        let s = score(&[hop(25.0, 0.05, 100.0), hop(25.0, 0.0, 100.0)], 1448.0);
        assert!((s.bps.unwrap() - 1.036e6).abs() < 1e3, "{s:?}");
        assert!((s.loss.unwrap() - 0.05).abs() < 1e-12);
        // Little loss: the narrowest hop's rate caps it.
        let s = score(&[hop(10.0, 1e-6, 100.0), hop(10.0, 1e-6, 20.0)], 1448.0);
        assert_eq!(s.bps, Some(20e6), "{s:?}");
        // Losses compound over hops.
        let s = score(&[hop(10.0, 0.1, 100.0), hop(10.0, 0.1, 100.0)], 1448.0);
        assert!((s.loss.unwrap() - 0.19).abs() < 1e-12);
        // Nothing known: no score; a dead hop kills the path.
        assert_eq!(score(&[Hop::default()], 1448.0).bps, None);
        assert!(!score(&[hop(1.0, 0.0, 1.0), Hop::default()], 1448.0).alive);
        assert!(!score(&[], 1448.0).alive);
    }

    fn scores(bps: &[(bool, Option<f64>)]) -> Vec<Score> {
        bps.iter()
            .map(|&(alive, bps)| Score {
                alive,
                bps,
                rate_bps: None,
                mathis_bps: None,
                rtt_s: None,
                loss: None,
                basis: String::new(),
            })
            .collect()
    }

    #[test]
    fn the_bandwidth_ratio_rule_with_its_dwell_time() {
        let mut c = Choice::default();
        let s = c
            .decide(
                0.0,
                &scores(&[(true, Some(10.0)), (true, Some(12.0))]),
                &RULE,
            )
            .unwrap();
        assert_eq!((s.to, s.reason), (Some(1), Reason::First));
        // 1.4× better: not enough.
        let better = scores(&[(true, Some(16.8)), (true, Some(12.0))]);
        assert_eq!(c.decide(100.0, &better, &RULE), None);
        // 1.6× better but within T_ch of the last change: wait.
        let better = scores(&[(true, Some(19.2)), (true, Some(12.0))]);
        assert_eq!(c.decide(29.0, &better, &RULE), None);
        let s = c.decide(30.0, &better, &RULE).unwrap();
        assert_eq!(s.to, Some(0));
        assert!(matches!(s.reason, Reason::Better { ratio } if (ratio - 1.6).abs() < 1e-9));
        assert_eq!(c.changed_at(), Some(30.0));
    }

    #[test]
    fn a_failure_is_routed_around_at_once_and_all_down_fails_open() {
        let mut c = Choice::default();
        c.decide(
            0.0,
            &scores(&[(true, Some(10.0)), (true, Some(5.0))]),
            &RULE,
        );
        assert_eq!(c.current(), Some(0));
        // Within T_ch, the current path fails: leave it now.
        let s = c
            .decide(
                1.0,
                &scores(&[(false, Some(10.0)), (true, Some(5.0))]),
                &RULE,
            )
            .unwrap();
        assert_eq!((s.to, s.reason), (Some(1), Reason::Failed));
        let s = c
            .decide(1.5, &scores(&[(false, None), (false, None)]), &RULE)
            .unwrap();
        assert_eq!((s.to, s.reason), (None, Reason::AllDown));
        assert_eq!(
            c.decide(2.0, &scores(&[(false, None), (false, None)]), &RULE),
            None
        );
        let s = c
            .decide(2.5, &scores(&[(false, None), (true, None)]), &RULE)
            .unwrap();
        assert_eq!((s.to, s.reason), (Some(1), Reason::Recovered));
    }

    #[test]
    fn unknown_scores_take_the_first_alive_path_and_a_known_one_beats_them() {
        let mut c = Choice::default();
        c.decide(
            0.0,
            &scores(&[(false, None), (true, None), (true, None)]),
            &RULE,
        );
        assert_eq!(c.current(), Some(1));
        let s = c
            .decide(
                40.0,
                &scores(&[(true, None), (true, None), (true, Some(1.0))]),
                &RULE,
            )
            .unwrap();
        assert_eq!(s.to, Some(2));
    }

    proptest! {
        /// Whatever the scores, the choice is an alive path or the normal route, a
        /// change within T_ch of the last one is a failure's, and a change for the
        /// better is by more than η.
        #[test]
        fn choices_keep_the_rule(
            steps in proptest::collection::vec(
                (0.0f64..20.0, proptest::collection::vec((any::<bool>(), proptest::option::of(0.0f64..1e9)), 3)),
                1..60,
            )
        ) {
            let mut c = Choice::default();
            let mut now = 0.0;
            let mut last: Option<f64> = None;
            for (dt, s) in steps {
                now += dt;
                let sc = scores(&s);
                if let Some(sw) = c.decide(now, &sc, &RULE) {
                    if let Some(to) = sw.to {
                        prop_assert!(sc[to].alive);
                    } else {
                        prop_assert!(sc.iter().all(|s| !s.alive));
                    }
                    if let Reason::Better { ratio } = sw.reason {
                        prop_assert!(ratio > 1.0 + RULE.eta);
                        prop_assert!(last.is_none_or(|t| now - t >= RULE.t_ch_s));
                    }
                    last = Some(now);
                }
                if let Some(cur) = c.current() {
                    prop_assert!(cur < sc.len());
                }
            }
        }
    }
}
