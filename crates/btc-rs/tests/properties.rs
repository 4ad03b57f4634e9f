//! Properties of the readers: whatever arrives, the counts balance and nothing panics.

use btc_rs::capacity::{Arrived, analyse as capacity};
use btc_rs::squeezed::{Kind, SqueezeConfig, analyse as squeeze};
use proptest::prelude::*;

proptest! {
    /// Every bunch packet is either lost or counted once, and an estimate is the
    /// bits of one packet over a gap that was seen.
    #[test]
    fn capacity_counts_balance(
        bunches in prop::collection::vec(
            prop::collection::vec((0u32..40, -1_000_000i64..1_000_000_000), 0..50), 0..4),
        sent in 3u32..40,
    ) {
        let input: Vec<Vec<Arrived>> = bunches
            .iter()
            .map(|b| b.iter().map(|&(seq, at_ns)| Arrived { seq, at_ns }).collect())
            .collect();
        let c = capacity(&input, sent, 1400);
        prop_assert_eq!(c.bunch_bps.len(), input.len());
        let distinct: u64 = input
            .iter()
            .map(|b| {
                let mut s: Vec<u32> = b.iter().map(|a| a.seq).filter(|&q| q < sent).collect();
                s.sort_unstable();
                s.dedup();
                s.len() as u64
            })
            .sum();
        prop_assert_eq!(c.lost + distinct, u64::from(sent) * input.len() as u64);
        match c.bps {
            Some(b) => prop_assert!(b.is_finite() && b > 0.0 && c.gaps > 0),
            None => prop_assert_eq!(c.gaps, 0),
        }
    }

    /// Each pair is lost, reordered, in a bin or beyond the bins, exactly once.
    #[test]
    fn squeezed_counts_balance(
        gaps in prop::collection::vec(prop::option::of(-10_000i64..20_000_000), 0..600),
        mbps in 1.0f64..1000.0,
    ) {
        let cfg = SqueezeConfig::new(mbps * 1e6);
        let kinds: Vec<Kind> = (0..gaps.len())
            .map(|i| if i % 2 == 0 { Kind::Half500 } else { Kind::Half1500 })
            .collect();
        let s = squeeze(&cfg, &kinds, &gaps);
        prop_assert_eq!(s.pairs[0] + s.pairs[1] + s.lost, gaps.len() as u64);
        for k in 0..2 {
            let binned: u64 = s.histograms[k].iter().map(|&c| u64::from(c)).sum();
            prop_assert_eq!(binned + s.overflow[k] + s.reordered[k], s.pairs[k]);
            prop_assert!((0.0..=1.0).contains(&s.squeezed[k]));
            prop_assert!(s.modes[k].iter().all(|&m| m < s.histograms[k].len()));
        }
    }

    /// Any bytes: `tcp_info` is read or refused, never a panic.
    #[test]
    fn tcp_info_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Some(s) = btc_rs::tcpinfo::parse(&bytes) {
            prop_assert!(s.rtt_s >= 0.0);
            let _ = s.network_limited();
        }
    }
}
