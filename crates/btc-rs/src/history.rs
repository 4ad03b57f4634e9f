//! An earlier transfer on the same path as a prediction, and its blend with the
//! probes' (He, Dovrolis and Ammar, SIGCOMM 2005: a prediction from the path's
//! history of transfers is fairly accurate while conditions hold; the seed's
//! comparison picked the faster path in 93 % of pairs from a previous transfer).
//!
//! History must not win by construction: it says what the path gave then, not now.
//! Its weight falls with its age, to none at the limit, and is none when the probes
//! say conditions changed since: the probes' prediction now and when the earlier
//! flow ran differ by more than a factor (`change`). The weights come from those
//! two and nothing else; never from how a prediction turned out.

use crate::model::Prediction;

/// An earlier flow on the path, as the sender's kernel reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Earlier {
    /// What it got, bit/s: a loss-based flow's delivery over its network-limited
    /// time, a BBR flow's own bottleneck estimate.
    pub bps: f64,
    /// How long ago it was last seen, s.
    pub age_s: f64,
    /// The probes' prediction when it was last seen, bit/s (`None`: there was none).
    pub probes_bps: Option<f64>,
}

/// How much history counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// An earlier flow this old or older has no weight, s.
    pub max_age_s: f64,
    /// The probes now and then differing by more than this factor (either way) is
    /// a change of conditions: the earlier flow then has no weight.
    pub change: f64,
}

impl Default for Limits {
    /// 30 minutes; a factor of 1.5, the ±50 % the predictions are judged by.
    fn default() -> Self {
        Self {
            max_age_s: 1800.0,
            change: 1.5,
        }
    }
}

/// Why an earlier flow has the weight it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Weight {
    /// It counts this much, 0 to 1: 1 − age / max-age.
    Aged(f64),
    /// Older than the limit.
    TooOld,
    /// The probes now read `ratio` times what they read then (beyond the change
    /// factor either way).
    Changed {
        /// Now over then.
        ratio: f64,
    },
}

impl Weight {
    /// The weight, 0 to 1.
    pub fn value(self) -> f64 {
        match self {
            Self::Aged(w) => w,
            Self::TooOld | Self::Changed { .. } => 0.0,
        }
    }
}

/// The weight of `e` when the probes now predict `probes_now` bit/s.
pub fn weight(e: &Earlier, probes_now: Option<f64>, l: &Limits) -> Weight {
    // A NaN age is too old too.
    if e.age_s.partial_cmp(&l.max_age_s) != Some(std::cmp::Ordering::Less) {
        return Weight::TooOld;
    }
    if let (Some(now), Some(then)) = (probes_now, e.probes_bps)
        && now > 0.0
        && then > 0.0
    {
        let ratio = now / then;
        if ratio > l.change || ratio < 1.0 / l.change {
            return Weight::Changed { ratio };
        }
    }
    Weight::Aged((1.0 - e.age_s.max(0.0) / l.max_age_s).clamp(0.0, 1.0))
}

/// The probes' prediction `probes` blended with an earlier flow's rate at weight
/// `w` (geometric: the rates' logarithms weighted, so a factor of two either way
/// counts alike): the probes' alone at 0, the earlier flow's alone at 1 or when the
/// probes give none (`None` then at weight 0). The range is each end blended.
pub fn blend(probes: Option<Prediction>, e: &Earlier, w: f64) -> Option<Prediction> {
    let w = w.clamp(0.0, 1.0);
    let mix = |p: f64| {
        if p > 0.0 && e.bps > 0.0 {
            (w * e.bps.ln() + (1.0 - w) * p.ln()).exp()
        } else {
            p
        }
    };
    match probes {
        Some(p) if w == 0.0 => Some(p),
        Some(p) if w < 1.0 => Some(Prediction {
            low_bps: mix(p.low_bps),
            high_bps: mix(p.high_bps),
            ..p
        }),
        Some(p) => Some(Prediction {
            low_bps: e.bps,
            high_bps: e.bps,
            ..p
        }),
        None => (w > 0.0 && e.bps > 0.0).then_some(Prediction {
            basis: crate::model::Basis::Kernel,
            low_bps: e.bps,
            high_bps: e.bps,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Basis;
    use proptest::prelude::*;

    const L: Limits = Limits {
        max_age_s: 1800.0,
        change: 1.5,
    };

    fn earlier(bps: f64, age_s: f64, probes_bps: Option<f64>) -> Earlier {
        Earlier {
            bps,
            age_s,
            probes_bps,
        }
    }

    fn probes(bps: f64) -> Prediction {
        Prediction {
            basis: Basis::ScaledAbw,
            low_bps: bps,
            high_bps: bps,
        }
    }

    #[test]
    fn history_loses_its_weight_with_age_and_with_a_change() {
        // Fresh and the probes unchanged: full weight, the earlier flow's rate.
        let e = earlier(8e6, 0.0, Some(5e6));
        assert_eq!(weight(&e, Some(5e6), &L), Weight::Aged(1.0));
        // Half the limit: half.
        let e = earlier(8e6, 900.0, Some(5e6));
        assert_eq!(weight(&e, Some(6e6), &L), Weight::Aged(0.5));
        let b = blend(Some(probes(5e6)), &e, 0.5).unwrap();
        assert!((b.bps() - (8e6f64 * 5e6).sqrt()).abs() < 1.0, "{b:?}");
        assert_eq!(b.basis, Basis::ScaledAbw);
        // At or past the limit: none, and the probes' value stands.
        let old = earlier(8e6, 1800.0, Some(5e6));
        assert_eq!(weight(&old, Some(5e6), &L), Weight::TooOld);
        assert_eq!(blend(Some(probes(5e6)), &old, 0.0), Some(probes(5e6)));
        assert_eq!(blend(None, &old, 0.0), None);
        // The probes now twice what they were then: a change, no weight.
        let w = weight(&e, Some(10e6), &L);
        assert_eq!(w, Weight::Changed { ratio: 2.0 });
        assert_eq!(w.value(), 0.0);
        assert!(matches!(weight(&e, Some(3e6), &L), Weight::Changed { .. }));
        // No probes then or now: nothing says whether conditions changed.
        assert_eq!(
            weight(&earlier(8e6, 0.0, None), Some(1e6), &L),
            Weight::Aged(1.0)
        );
        assert_eq!(weight(&e, None, &L), Weight::Aged(0.5));
        // No probes now: the earlier flow alone, as the kernel's reading.
        let alone = blend(None, &e, 0.5).unwrap();
        assert_eq!((alone.basis, alone.bps()), (Basis::Kernel, 8e6));
        // Weight 1: the earlier flow's rate, whatever the probes say.
        let full = blend(Some(probes(5e6)), &e, 1.0).unwrap();
        assert_eq!(full.bps(), 8e6);
    }

    proptest! {
        /// The blend lies between the probes and the earlier flow, moves toward the
        /// earlier flow as the weight grows, and the weight never rises with age.
        #[test]
        fn the_blend_moves_toward_history_with_its_weight(
            h in 1e5f64..1e9,
            p in 1e5f64..1e9,
            w1 in 0.0f64..1.0,
            dw in 0.0f64..1.0,
            age in 0.0f64..4000.0,
            older in 0.0f64..4000.0,
        ) {
            let e = earlier(h, age, None);
            let w2 = (w1 + dw).min(1.0);
            let a = blend(Some(probes(p)), &e, w1).unwrap().bps();
            let b = blend(Some(probes(p)), &e, w2).unwrap().bps();
            let (lo, hi) = (h.min(p), h.max(p));
            prop_assert!(a >= lo * (1.0 - 1e-9) && a <= hi * (1.0 + 1e-9));
            prop_assert!((b - h).abs() <= (a - h).abs() * (1.0 + 1e-9) + 1e-6);
            let later = earlier(h, age + older, None);
            prop_assert!(weight(&later, None, &L).value() <= weight(&e, None, &L).value());
        }
    }
}
