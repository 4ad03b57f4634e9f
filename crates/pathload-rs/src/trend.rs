//! One stream's trend: do its one-way delays grow (the stream's rate is above the
//! available bandwidth) or not?
//!
//! SLoPS as pathload 1.3.2 applies it: relative one-way delays in sequence order; the
//! stream is split where the sender was interrupted and packets delivered in one batch
//! are dropped; each sub-stream long enough is cut into groups of ⌊√n⌋ delays whose
//! medians feed two tests, PCT (the share of rising median pairs) and PDT (net rise
//! over total movement), and the two tests' verdicts combine into the stream's trend.
//!
//! Where several sub-streams qualify, their medians are pooled and pairs are only
//! taken within a sub-stream: for a single sub-stream this is the original's
//! computation, and a delay jump across an interruption is not taken for a trend.
//! PDT over perfectly flat delays is 0 (no trend), where the original divided by zero.

use serde::Serialize;

use crate::params::{
    BATCH_GAP_NS, HEAVY_LOSS, INTERRUPT_SLACK_NS, MIN_MEDIANS, MIN_SUBSTREAM_DELAYS, MODERATE_LOSS,
    PCT_INCREASING, PCT_NO_TREND, PDT_INCREASING, PDT_NO_TREND,
};

pub use mgrp_tool::Arrival;

/// A trend, of one test, one stream or one fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    /// The delays grow: the rate is above the available bandwidth.
    Increasing,
    /// The delays do not grow: the rate is below it.
    NoTrend,
    /// The tests disagree or sit between their thresholds (a fleet: GREY).
    Ambiguous,
}

impl Trend {
    /// The one-letter form pathload prints (I, N, U).
    pub fn letter(self) -> char {
        match self {
            Self::Increasing => 'I',
            Self::NoTrend => 'N',
            Self::Ambiguous => 'U',
        }
    }
}

/// How much of a stream was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LossClass {
    /// Under 3 %.
    Low,
    /// 3–15 %: half the fleet's streams like this abort the fleet.
    Moderate,
    /// 15 % or more: aborts the fleet.
    Heavy,
}

/// What one stream showed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamAnalysis {
    /// Share of the sent packets that did not arrive (0–1).
    pub loss: f64,
    /// Its class.
    pub loss_class: LossClass,
    /// Packets dropped from the trend as batch deliveries.
    pub batch_dropped: u32,
    /// Sub-streams after splitting at sender interruptions.
    pub substreams: u32,
    /// Group medians that fed the tests.
    pub medians: u32,
    /// The pairwise comparison test, if enough medians.
    pub pct: Option<f64>,
    /// The pairwise difference test, if enough medians.
    pub pdt: Option<f64>,
    /// The stream's trend; `None` when it was discarded (too few medians).
    pub trend: Option<Trend>,
    /// How fast the one-way delays grew, in seconds per second of sending (the
    /// least-squares slope over the longest sub-stream; `None` with fewer than
    /// [`MIN_SUBSTREAM_DELAYS`] delays). Over a fluid FIFO bottleneck of capacity C it
    /// is (R − A) / C for a stream at rate R above the available bandwidth A: it says
    /// how far above A the stream was, which the trend alone does not.
    pub growth: Option<f64>,
}

/// Analyses one stream of `sent` packets sent `spacing_ns` apart, of which `arrivals`
/// came in (any order, duplicates ignored).
pub fn analyse(sent: u32, spacing_ns: u64, arrivals: &[Arrival]) -> StreamAnalysis {
    let mut pkts: Vec<Arrival> = arrivals.iter().copied().filter(|a| a.seq < sent).collect();
    pkts.sort_by_key(|a| a.seq);
    pkts.dedup_by_key(|a| a.seq);
    let loss = if sent == 0 {
        0.0
    } else {
        1.0 - pkts.len() as f64 / f64::from(sent)
    };
    let loss_class = if loss >= HEAVY_LOSS {
        LossClass::Heavy
    } else if loss >= MODERATE_LOSS {
        LossClass::Moderate
    } else {
        LossClass::Low
    };

    // Batch deliveries: a packet stamped closer than BATCH_GAP_NS to its successor came
    // in with it, so its stamp says nothing about its own delay.
    let before = pkts.len();
    let mut kept: Vec<Arrival> = Vec::with_capacity(before);
    for (i, p) in pkts.iter().enumerate() {
        let batched = pkts.get(i + 1).is_some_and(|next| {
            next.received_ns
                .saturating_sub(p.received_ns)
                .unsigned_abs()
                < BATCH_GAP_NS.unsigned_abs()
        });
        if !batched {
            kept.push(*p);
        }
    }
    let batch_dropped = (before - kept.len()) as u32;

    // Sender interruptions split the stream.
    let spacing = i64::try_from(spacing_ns).unwrap_or(i64::MAX / 4);
    let slack = spacing.max(INTERRUPT_SLACK_NS);
    let mut subs: Vec<&[Arrival]> = Vec::new();
    let mut start = 0;
    for i in 1..=kept.len() {
        let split = i == kept.len() || {
            let (a, b) = (kept[i - 1], kept[i]);
            let expected = i64::from(b.seq - a.seq).saturating_mul(spacing);
            b.sent_ns.saturating_sub(a.sent_ns) > expected.saturating_add(slack)
        };
        if split {
            if i > start {
                subs.push(&kept[start..i]);
            }
            start = i;
        }
    }

    let mut medians: Vec<Vec<f64>> = Vec::new();
    for sub in &subs {
        if sub.len() > MIN_SUBSTREAM_DELAYS {
            medians.push(group_medians(sub));
        }
    }
    let growth = subs
        .iter()
        .filter(|sub| sub.len() > MIN_SUBSTREAM_DELAYS)
        .max_by_key(|sub| sub.len())
        .and_then(|sub| delay_growth(sub));
    let count: usize = medians.iter().map(Vec::len).sum();
    let (pct, pdt, trend) = if count < MIN_MEDIANS {
        (None, None, None)
    } else {
        let (pct, pdt) = tests(&medians, count);
        (Some(pct), Some(pdt), Some(combine(pct, pdt)))
    };
    StreamAnalysis {
        loss,
        loss_class,
        batch_dropped,
        substreams: subs.len() as u32,
        medians: count as u32,
        pct,
        pdt,
        trend,
        growth,
    }
}

/// The least-squares slope of one-way delay over sending time, or `None` when the
/// packets were all sent at once.
fn delay_growth(sub: &[Arrival]) -> Option<f64> {
    let first = sub.first()?;
    // Offsets from the first packet keep the sums well inside f64's precision.
    let points = sub.iter().map(|a| {
        let x = a.sent_ns.saturating_sub(first.sent_ns) as f64;
        let y = (a.received_ns.saturating_sub(a.sent_ns))
            .saturating_sub(first.received_ns.saturating_sub(first.sent_ns)) as f64;
        (x, y)
    });
    let n = sub.len() as f64;
    let (sx, sy) = points
        .clone()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = points.fold((0.0, 0.0), |(sxy, sxx), (x, y)| {
        (sxy + (x - mx) * (y - my), sxx + (x - mx) * (x - mx))
    });
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Medians of consecutive groups of ⌊√n⌋ one-way delays; a last, short group is left
/// out as in the original.
fn group_medians(sub: &[Arrival]) -> Vec<f64> {
    let g = (sub.len() as f64).sqrt().floor() as usize;
    let g = g.max(1);
    let mut out = Vec::with_capacity(sub.len() / g);
    let mut buf: Vec<i64> = Vec::with_capacity(g);
    for chunk in sub.chunks_exact(g) {
        buf.clear();
        buf.extend(
            chunk
                .iter()
                .map(|a| a.received_ns.saturating_sub(a.sent_ns)),
        );
        buf.sort_unstable();
        let m = if g % 2 == 1 {
            buf[g / 2] as f64
        } else {
            (buf[g / 2 - 1] as f64 + buf[g / 2] as f64) / 2.0
        };
        out.push(m);
    }
    out
}

/// PCT and PDT over the medians of each sub-stream, pairs taken within sub-streams.
fn tests(medians: &[Vec<f64>], count: usize) -> (f64, f64) {
    let mut rises = 0usize;
    let mut net = 0.0;
    let mut total = 0.0;
    for m in medians {
        for w in m.windows(2) {
            let d = w[1] - w[0];
            if d > 0.0 {
                rises += 1;
            }
            net += d;
            total += d.abs();
        }
    }
    let pct = rises as f64 / count as f64;
    let pdt = if total > 0.0 { net / total } else { 0.0 };
    (pct, pdt)
}

/// One test's verdict from its thresholds.
fn verdict(value: f64, increasing: f64, no_trend: f64) -> Trend {
    if value > increasing {
        Trend::Increasing
    } else if value < no_trend {
        Trend::NoTrend
    } else {
        Trend::Ambiguous
    }
}

/// The stream's trend from its two tests (pathload 1.3.2): I+I, I+U, U+I are
/// increasing; N+N, N+U, U+N are no trend; anything else is ambiguous.
pub fn combine(pct: f64, pdt: f64) -> Trend {
    use Trend::{Ambiguous as U, Increasing as I, NoTrend as N};
    match (
        verdict(pct, PCT_INCREASING, PCT_NO_TREND),
        verdict(pdt, PDT_INCREASING, PDT_NO_TREND),
    ) {
        (I, I | U) | (U, I) => I,
        (N, N | U) | (U, N) => N,
        _ => U,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 182_400;

    /// A stream whose i-th delay is `owd(i)` µs, all 100 packets received.
    fn stream(owd: impl Fn(u32) -> f64) -> Vec<Arrival> {
        (0..100)
            .map(|i| {
                let sent = i64::from(i) * T as i64;
                Arrival {
                    seq: i,
                    sent_ns: sent,
                    received_ns: sent + 5_000_000 + (owd(i) * 1_000.0) as i64,
                }
            })
            .collect()
    }

    /// Small deterministic noise in µs, in [-a, a].
    fn noise(i: u32, a: f64) -> f64 {
        let x = (u64::from(i) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
        (x as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * a
    }

    #[test]
    fn a_delay_ramp_is_increasing() {
        let a = analyse(100, T, &stream(|i| f64::from(i) * 20.0));
        assert_eq!(a.trend, Some(Trend::Increasing));
        assert_eq!(a.medians, 10);
        assert!((a.pct.unwrap() - 0.9).abs() < 1e-9, "{a:?}");
        assert!((a.pdt.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(a.loss_class, LossClass::Low);
    }

    #[test]
    fn growth_is_the_delay_slope_per_second_of_sending() {
        // 20 µs more per packet sent 182.4 µs apart.
        let a = analyse(100, T, &stream(|i| f64::from(i) * 20.0));
        let g = a.growth.unwrap();
        assert!((g - 20_000.0 / T as f64).abs() < 1e-6, "{g}");
        // Noise around a level: no growth to speak of; flat: none at all.
        let a = analyse(100, T, &stream(|i| noise(i, 200.0)));
        assert!(a.growth.unwrap().abs() < 0.01, "{a:?}");
        assert_eq!(analyse(100, T, &stream(|_| 0.0)).growth, Some(0.0));
        // Too few packets to say.
        assert_eq!(analyse(100, T, &stream(|_| 0.0)[..20]).growth, None);
    }

    #[test]
    fn a_noisy_ramp_is_still_increasing() {
        let a = analyse(100, T, &stream(|i| f64::from(i) * 10.0 + noise(i, 150.0)));
        assert_eq!(a.trend, Some(Trend::Increasing), "{a:?}");
    }

    #[test]
    fn flat_delays_are_no_trend_not_nan() {
        let a = analyse(100, T, &stream(|_| 0.0));
        assert_eq!(a.pdt, Some(0.0));
        assert_eq!(a.pct, Some(0.0));
        assert_eq!(a.trend, Some(Trend::NoTrend));
    }

    #[test]
    fn noise_around_a_level_is_not_increasing() {
        let a = analyse(100, T, &stream(|i| noise(i, 200.0)));
        assert_ne!(a.trend, Some(Trend::Increasing), "{a:?}");
    }

    #[test]
    fn a_falling_stream_is_no_trend() {
        let a = analyse(100, T, &stream(|i| 2_000.0 - f64::from(i) * 20.0));
        assert_eq!(a.trend, Some(Trend::NoTrend));
        assert!(a.pdt.unwrap() < -0.99);
    }

    #[test]
    fn losses_are_classified() {
        let mut s = stream(|_| 0.0);
        s.truncate(90);
        assert_eq!(analyse(100, T, &s).loss_class, LossClass::Moderate);
        s.truncate(80);
        let a = analyse(100, T, &s);
        assert_eq!(a.loss_class, LossClass::Heavy);
        assert!((a.loss - 0.2).abs() < 1e-9);
        assert_eq!(
            analyse(100, T, &stream(|_| 0.0)[..98]).loss_class,
            LossClass::Low
        );
    }

    #[test]
    fn duplicates_and_order_do_not_matter() {
        let mut s = stream(|i| f64::from(i) * 20.0);
        let copy = s.clone();
        s.reverse();
        s.extend_from_slice(&copy[..10]);
        let a = analyse(100, T, &s);
        assert_eq!(a.loss, 0.0);
        assert_eq!(a.trend, Some(Trend::Increasing));
    }

    #[test]
    fn a_sender_interruption_splits_and_a_jump_there_is_no_trend() {
        // Flat delays in two halves, the sender paused 5 ms in the middle, and the
        // second half's delays 3 ms higher: one jump, not a trend.
        let s: Vec<Arrival> = (0..100u32)
            .map(|i| {
                let pause = if i >= 50 { 5_000_000 } else { 0 };
                let sent = i64::from(i) * T as i64 + pause;
                let jump = if i >= 50 { 3_000_000 } else { 0 };
                Arrival {
                    seq: i,
                    sent_ns: sent,
                    received_ns: sent + 1_000_000 + jump + (noise(i, 30.0) * 1e3) as i64,
                }
            })
            .collect();
        let a = analyse(100, T, &s);
        assert_eq!(a.substreams, 2);
        assert_eq!(a.medians, 14);
        assert_ne!(a.trend, Some(Trend::Increasing), "{a:?}");
        // Without the split the jump reads as a rise.
        let joined = analyse(100, 40 * T, &s);
        assert_eq!(joined.substreams, 1);
        assert!(joined.pdt.unwrap() > a.pdt.unwrap());
    }

    #[test]
    fn interruptions_into_short_pieces_discard_the_stream() {
        let s: Vec<Arrival> = (0..100u32)
            .map(|i| {
                let sent = i64::from(i) * T as i64 + i64::from(i / 30) * 10_000_000;
                Arrival {
                    seq: i,
                    sent_ns: sent,
                    received_ns: sent + 1_000,
                }
            })
            .collect();
        let a = analyse(100, T, &s);
        assert_eq!(a.substreams, 4);
        assert_eq!(a.trend, None);
        assert_eq!(a.pct, None);
    }

    #[test]
    fn batch_deliveries_are_dropped() {
        // Every second packet is stamped 2 µs before the next one.
        let mut s = stream(|i| f64::from(i) * 20.0);
        for i in (0..100).step_by(2) {
            s[i].received_ns = s[i + 1].received_ns - 2_000;
        }
        let a = analyse(100, T, &s);
        assert_eq!(a.batch_dropped, 50);
        assert_eq!(a.trend, Some(Trend::Increasing));
    }

    #[test]
    fn a_lost_packet_is_not_an_interruption() {
        let mut s = stream(|_| 0.0);
        s.remove(40);
        let a = analyse(100, T, &s);
        assert_eq!(a.substreams, 1);
    }

    #[test]
    fn the_combination_table() {
        use Trend::*;
        let pct = [0.7, 0.55, 0.3];
        let pdt = [0.6, 0.4, 0.1];
        let want = [
            [Increasing, Increasing, Ambiguous],
            [Increasing, Ambiguous, NoTrend],
            [Ambiguous, NoTrend, NoTrend],
        ];
        for (i, &c) in pct.iter().enumerate() {
            for (j, &d) in pdt.iter().enumerate() {
                assert_eq!(combine(c, d), want[i][j], "pct {c} pdt {d}");
            }
        }
    }

    #[test]
    fn empty_and_tiny_inputs() {
        let a = analyse(0, T, &[]);
        assert_eq!(a.trend, None);
        assert_eq!(a.loss, 0.0);
        let a = analyse(100, 0, &stream(|_| 0.0)[..3]);
        assert_eq!(a.trend, None);
        assert_eq!(a.loss_class, LossClass::Heavy);
    }
}
