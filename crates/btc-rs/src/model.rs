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
