//! Predictions of a bulk TCP transfer's rate, each with its basis.
//!
//! - [`scaled_range`]: the available-bandwidth range scaled by the squeezed-pair class
//!   (the seed scaled pathload's range by 0.2 on tight-like-narrow paths and 0.6 on
//!   the others, on RON; our factors are calibrated on our testbed and documented with
//!   the experiment);
//! - [`mathis_bps`]: the loss-and-round-trip bound of Mathis, Semke, Mahdavi and Ott
//!   (MSS/RTT · √(3/2)/√p), a Reno-like congestion avoidance's rate at loss rate p; it
//!   says nothing where no loss is measured, and CUBIC and BBR are not Reno;
//! - what the kernel reports of a running connection is a measurement, not a model,
//!   and is carried beside these by the tool that reads it.

use serde::Serialize;

use crate::squeezed::PathClass;

/// Factors that scale the available-bandwidth range per class.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Factors {
    /// For tight-like-narrow paths.
    pub like_narrow: f64,
    /// For tight-unlike-narrow paths.
    pub unlike_narrow: f64,
    /// For undecided paths.
    pub undecided: f64,
}

impl Factors {
    /// The seed's factors on RON (0.2, 0.6; undecided between them). Not ours: the
    /// experiment calibrates its own.
    pub const RON: Self = Self {
        like_narrow: 0.2,
        unlike_narrow: 0.6,
        undecided: 0.4,
    };

    /// Ours, from the transfer-rate experiment on the namespace testbed
    /// (`docs/btc.md`): per measured class, the median over its paths of each CUBIC
    /// and BBR transfer's rate over the middle of pathload's range (20 paths, 40
    /// transfers).
    pub const TESTBED: Self = Self {
        like_narrow: 0.57,
        unlike_narrow: 0.9,
        undecided: 1.0,
    };

    /// The factor for `class`.
    pub fn of(&self, class: PathClass) -> f64 {
        match class {
            PathClass::TightLikeNarrow => self.like_narrow,
            PathClass::TightUnlikeNarrow => self.unlike_narrow,
            PathClass::Undecided => self.undecided,
        }
    }
}

/// The range `low..high` (bit/s) scaled for `class`.
pub fn scaled_range(low: f64, high: f64, class: PathClass, f: &Factors) -> (f64, f64) {
    let k = f.of(class);
    (low * k, high * k)
}

/// Mathis's bound, bit/s, for segments of `mss` bytes, a round trip of `rtt_s` and a
/// loss rate `p`; `None` without loss (the model has no answer) or without a round
/// trip.
pub fn mathis_bps(mss: u32, rtt_s: f64, p: f64) -> Option<f64> {
    (p > 0.0 && p <= 1.0 && rtt_s > 0.0)
        .then(|| f64::from(mss) * 8.0 / rtt_s * (1.5f64).sqrt() / p.sqrt())
}

/// Where a prediction came from.
pub use mgrp_core::path::Basis;

/// One prediction of a bulk transfer's rate, bit/s, with its basis.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// What it rests on.
    pub basis: Basis,
    /// The low end, bit/s.
    pub low_bps: f64,
    /// The high end, bit/s.
    pub high_bps: f64,
}

impl Prediction {
    /// The middle of the range, bit/s.
    pub fn bps(&self) -> f64 {
        (self.low_bps + self.high_bps) / 2.0
    }

    /// The range with both ends no higher than `limit`, bit/s.
    #[must_use]
    pub fn capped(self, limit: f64) -> Self {
        Self {
            low_bps: self.low_bps.min(limit),
            high_bps: self.high_bps.min(limit),
            ..self
        }
    }
}

/// What the combined prediction is made of; every part may be missing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Inputs {
    /// Available-bandwidth range, bit/s.
    pub abw: Option<(f64, f64)>,
    /// The squeezed-pair class.
    pub class: Option<PathClass>,
    /// Narrow-link capacity, bit/s.
    pub capacity_bps: Option<f64>,
    /// Loss rate (badabing's, or the probes').
    pub loss: Option<f64>,
    /// Round trip, s.
    pub rtt_s: Option<f64>,
    /// A running connection's delivery rate, bit/s, from network-limited samples.
    pub kernel_bps: Option<f64>,
    /// The sender's congestion control is BBR, which does not back off on loss the
    /// way Reno does: Mathis's bound is listed but does not cap the prediction.
    pub bbr: bool,
}

/// Every prediction the inputs allow, and the combined one: the kernel's rate where a
/// connection runs (a measurement beats a model); else the scaled available
/// bandwidth, no higher than Mathis's bound where loss was measured (not for BBR),
/// nor than the capacity; else Mathis's bound alone (not for BBR). `None` when
/// nothing allows one.
pub fn predict(i: &Inputs, f: &Factors, mss: u32) -> (Vec<Prediction>, Option<Prediction>) {
    let mut all = Vec::new();
    let scaled = i.abw.map(|(lo, hi)| {
        let (l, h) = scaled_range(lo, hi, i.class.unwrap_or(PathClass::Undecided), f);
        Prediction {
            basis: Basis::ScaledAbw,
            low_bps: l,
            high_bps: h,
        }
    });
    let mathis = i
        .loss
        .zip(i.rtt_s)
        .and_then(|(p, rtt)| mathis_bps(mss, rtt, p))
        .map(|b| Prediction {
            basis: Basis::Mathis,
            low_bps: b,
            high_bps: b,
        });
    let kernel = i.kernel_bps.filter(|b| *b > 0.0).map(|b| Prediction {
        basis: Basis::Kernel,
        low_bps: b,
        high_bps: b,
    });
    all.extend(scaled);
    all.extend(mathis);
    all.extend(kernel);
    let combined = kernel.or_else(|| {
        let reno_like = mathis.filter(|_| !i.bbr);
        let mut p = scaled.or(reno_like)?;
        if let Some(m) = reno_like {
            p = p.capped(m.high_bps);
        }
        if let Some(c) = i.capacity_bps {
            p = p.capped(c);
        }
        Some(p)
    });
    (all, combined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mathis_matches_the_formula() {
        // 1448-byte segments, 100 ms, 1 % loss: 1448·8/0.1·√1.5/0.1 = 1.4187 Mbit/s.
        let r = mathis_bps(1448, 0.1, 0.01).unwrap();
        assert!((r - 1_418_744.0).abs() < 10.0, "{r}");
        assert_eq!(mathis_bps(1448, 0.1, 0.0), None);
        assert_eq!(mathis_bps(1448, 0.0, 0.01), None);
        // Four times the loss halves the rate.
        let q = mathis_bps(1448, 0.1, 0.04).unwrap();
        assert!((r / q - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_combined_prediction_prefers_the_kernel_then_caps_the_scaled_range() {
        let f = Factors::RON;
        let mut i = Inputs {
            abw: Some((40e6, 60e6)),
            class: Some(PathClass::TightUnlikeNarrow),
            capacity_bps: Some(100e6),
            ..Inputs::default()
        };
        let (all, c) = predict(&i, &f, 1448);
        assert_eq!(all.len(), 1);
        let c = c.unwrap();
        assert_eq!(c.basis, Basis::ScaledAbw);
        assert!((c.bps() - 30e6).abs() < 1.0);
        // 1 % loss at 100 ms: Mathis's 1.42 Mbit/s caps it.
        i.loss = Some(0.01);
        i.rtt_s = Some(0.1);
        let (all, c) = predict(&i, &f, 1448);
        assert_eq!(all.len(), 2);
        let c = c.unwrap();
        assert_eq!(c.basis, Basis::ScaledAbw);
        assert!((c.high_bps - 1_418_744.0).abs() < 10.0);
        // A BBR sender is not held to Reno's bound.
        let bbr = Inputs { bbr: true, ..i };
        let c = predict(&bbr, &f, 1448).1.unwrap();
        assert!((c.bps() - 30e6).abs() < 1.0);
        // A running connection's rate wins.
        i.kernel_bps = Some(7e6);
        let (all, c) = predict(&i, &f, 1448);
        assert_eq!(all.len(), 3);
        assert_eq!(c.unwrap().basis, Basis::Kernel);
        // Loss alone gives Mathis; nothing gives nothing.
        let only = Inputs {
            loss: Some(0.01),
            rtt_s: Some(0.1),
            ..Inputs::default()
        };
        assert_eq!(predict(&only, &f, 1448).1.unwrap().basis, Basis::Mathis);
        let only_bbr = Inputs { bbr: true, ..only };
        assert_eq!(predict(&only_bbr, &f, 1448).1, None);
        assert_eq!(predict(&Inputs::default(), &f, 1448), (vec![], None));
    }

    #[test]
    fn ranges_scale_by_class() {
        let f = Factors::RON;
        assert_eq!(
            scaled_range(10e6, 20e6, PathClass::TightLikeNarrow, &f),
            (2e6, 4e6)
        );
        let (lo, hi) = scaled_range(10e6, 20e6, PathClass::TightUnlikeNarrow, &f);
        assert!((lo - 6e6).abs() < 1e-6 && (hi - 12e6).abs() < 1e-6);
    }
}
