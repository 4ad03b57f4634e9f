//! What a bulk TCP flow gets from a path's loss rate and round trip: the model of
//! Padhye, Firoiu, Towsley and Kurose (SIGCOMM 1998, "PFTK"), which counts the
//! retransmission timeouts that Mathis's square-root bound leaves out. Route control
//! scores paths with it; btc-rs predicts loss-based transfers with it.

/// PFTK's b: segments one acknowledgement covers (delayed acknowledgements).
pub const PFTK_B: f64 = 2.0;

/// What PFTK's T₀ adds to the round trip: Linux's least retransmission timeout, s.
pub const RTO_MIN_S: f64 = 0.2;

/// PFTK's rate, bit/s, for segments of `mss` bytes, a round trip of `rtt_s` and a
/// loss rate `p` (clamped to 1): `MSS / (RTT·√(2bp/3) + T₀·min(1, 3√(3bp/8))·p·(1 +
/// 32p²))`, b = [`PFTK_B`], T₀ = RTT + [`RTO_MIN_S`]. `None` unless the round trip
/// and the loss are above 0 (without loss the model has no answer).
pub fn pftk_bps(mss: f64, rtt_s: f64, p: f64) -> Option<f64> {
    if !(rtt_s > 0.0 && p > 0.0) {
        return None;
    }
    let p = p.min(1.0);
    let t0 = rtt_s + RTO_MIN_S;
    let seconds_per_segment = rtt_s * (2.0 * PFTK_B * p / 3.0).sqrt()
        + t0 * (3.0 * (3.0 * PFTK_B * p / 8.0).sqrt()).min(1.0) * p * (1.0 + 32.0 * p * p);
    Some(mss * 8.0 / seconds_per_segment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pftk_matches_the_formula_by_hand() {
        // RTT 40 ms, 1 % loss, b = 2, T₀ = 240 ms.
        let (rtt, e): (f64, f64) = (0.04, 0.01);
        let d = rtt * (4.0 * e / 3.0).sqrt()
            + (rtt + 0.2) * (3.0 * (6.0 * e / 8.0).sqrt()).min(1.0) * e * (1.0 + 32.0 * e * e);
        let want = 1448.0 * 8.0 / d;
        let got = pftk_bps(1448.0, rtt, e).unwrap();
        assert!((got - want).abs() < 1e-6 * want, "{got} {want}");
        assert_eq!(pftk_bps(1448.0, 0.0, 0.1), None);
        assert_eq!(pftk_bps(1448.0, 0.1, 0.0), None);
        assert_eq!(pftk_bps(1448.0, f64::NAN, 0.1), None);
    }

    proptest! {
        /// More loss or a longer round trip never gives more.
        #[test]
        fn pftk_falls_with_loss_and_round_trip(
            rtt in 1e-4f64..2.0,
            p in 1e-6f64..1.0,
            more in 1.0f64..10.0,
        ) {
            let r = pftk_bps(1448.0, rtt, p).unwrap();
            prop_assert!(r.is_finite() && r > 0.0);
            prop_assert!(pftk_bps(1448.0, rtt, (p * more).min(1.0)).unwrap() <= r * (1.0 + 1e-12));
            prop_assert!(pftk_bps(1448.0, rtt * more, p).unwrap() <= r * (1.0 + 1e-12));
        }
    }
}
