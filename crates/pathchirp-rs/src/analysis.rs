//! One chirp's analysis: the queuing-delay signature, its excursions, and the
//! per-chirp available-bandwidth estimate (pathChirp's, with rates from the gaps the
//! probes actually left with).
//!
//! For packet k of a chirp the queuing delay is q_k = (r_k − r_0) − (s_k − s_0), from
//! the receiver's and the sender's own clocks, so only their rates matter. An
//! excursion starts at i where q_i < q_{i+1} and ends at the first j where
//! q_j − q_i has fallen below 1/F of its peak since i; it counts when j − i ≥ L. Each
//! gap k inside a counted excursion where the delay rises (q_k < q_{k+1}) says the
//! path had less than the rate of that gap available: E_k = R_k. The last excursion
//! (unterminated at the chirp's end) marks where the chirp's rate stays above the
//! available bandwidth; it and every unmarked gap get E_k = R_l, the rate at its
//! start l. The chirp's estimate is the gap-time-weighted mean Σ E_k·g_k / Σ g_k.

use serde::Serialize;

use crate::params;

/// How the rate where the chirp's final queue begins is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Onset {
    /// The send rate of the gap where the delay starts to rise (pathChirp 2.3). A
    /// token bucket's credit lets the first gaps above its rate through unqueued, so
    /// the rise starts one or two spread steps late and the estimate reads high by as
    /// much (+45 to +53 % for pathChirp 2.3 on a 10 Mbit/s tbf with a 1540-byte
    /// bucket).
    FirstRise,
    /// The lower of that and the rate at which the first gaps of the final queue
    /// came out of the path (their receive gaps, the median over the busy-period
    /// threshold's worth): once a queue has formed, the bottleneck lets probes out at
    /// no more than what it has for them, whatever credit it had, so a late rise no
    /// longer shifts the estimate (this project).
    Output,
    /// The lower of the first rise's send rate and what the chirp's saturated tail
    /// says is left over: from the gap where the chirp's own rate passes the rate the
    /// queued probes come out at (Ĉ, their median receive rate), the bottleneck is
    /// busy to the end, so it served the tail's probes and the cross traffic that
    /// arrived meanwhile, X̂ = (Ĉ·(r_N − r_m) − probe bits) / (s_N − s_m), and the
    /// available bandwidth is Ĉ − X̂ (a probe-gap reading of the tail; averaged over
    /// the chirps it sees sparse cross traffic that makes no excursion). Without a
    /// saturated tail of two gaps, as `Output` (this project).
    #[default]
    Tail,
}

/// The analysis's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Params {
    /// Decrease factor F (> 1).
    pub decrease: f64,
    /// Busy-period threshold L (> 2).
    pub busy_period: usize,
    /// Receive gaps shorter than this are coalesced, ns.
    pub coalescence_ns: i64,
    /// How the final queue's onset rate is read.
    pub onset: Onset,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            decrease: params::DECREASE,
            busy_period: params::BUSY_PERIOD,
            coalescence_ns: params::COALESCENCE_NS,
            onset: Onset::default(),
        }
    }
}

/// What one chirp says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChirpAnalysis {
    /// The per-chirp estimate, bit/s.
    pub estimate_bps: f64,
    /// The send rate of the gap where the final excursion starts, bit/s.
    pub onset_bps: f64,
    /// The receive rate of the final queue's first gaps, bit/s (`None` when the
    /// chirp ends without one).
    pub output_bps: Option<f64>,
    /// What the saturated tail leaves over, Ĉ − X̂, bit/s (`None` without one).
    pub tail_bps: Option<f64>,
    /// Excursions that counted.
    pub excursions: u32,
    /// Packets analysed (fewer than sent when coalescence cut the chirp).
    pub analysed: usize,
    /// Whether the chirp ended inside an excursion (its rates went above the
    /// available bandwidth); if not, the estimate is at least the chirp's top rate.
    pub queued_at_end: bool,
    /// Per-packet queuing delay, ns, relative to the first packet (for plots).
    pub delays_ns: Vec<i64>,
    /// Send rate of each gap, bit/s.
    pub rates_bps: Vec<f64>,
}

/// Why a chirp cannot be analysed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unusable {
    /// Coalescence left fewer than three packets.
    Coalesced,
    /// Fewer than three packets, or gaps that did not advance.
    TooShort,
    /// A probe of the final queue came out of the path sooner after the one before
    /// than the queue lets probes out (under [`params::COMPRESSED`] of its
    /// lower-quartile receive gap): the one before was held up beyond the path, by a
    /// stall of the host that stamped it or of a shaper's timer, and the extra delay
    /// would read as cross traffic. On a one-host testbed such stalls put one chirp
    /// in five at a fraction of the available bandwidth.
    Disturbed,
}

/// Analyses a complete chirp of `size`-byte probes: `sent[k]` and `received[k]` are
/// packet k's stamps, ns, in sending order.
pub fn analyse(
    size: u32,
    sent: &[i64],
    received: &[i64],
    p: &Params,
) -> Result<ChirpAnalysis, Unusable> {
    let n = sent.len().min(received.len());
    if n < 3 {
        return Err(Unusable::TooShort);
    }
    // Coalescence: a receive gap under the threshold marks its packet; after
    // `CONSECUTIVE_COALESCED` in a row, the chirp is analysed only up to the packet
    // before them.
    let mut coalesced = vec![false; n];
    let mut last = n - 1;
    let mut run = 0;
    for k in 1..n {
        if received[k] - received[k - 1] < p.coalescence_ns {
            coalesced[k] = true;
            run += 1;
            if run >= params::CONSECUTIVE_COALESCED {
                last = k.saturating_sub(params::CONSECUTIVE_COALESCED);
                break;
            }
        } else {
            run = 0;
        }
    }
    if last < 2 {
        return Err(Unusable::Coalesced);
    }
    let bits = f64::from(size) * 8.0;
    let gaps: Vec<i64> = (0..last).map(|k| sent[k + 1] - sent[k]).collect();
    if gaps.iter().any(|&g| g <= 0) {
        return Err(Unusable::TooShort);
    }
    let rates: Vec<f64> = gaps.iter().map(|&g| bits / (g as f64 * 1e-9)).collect();
    // Queuing delays; a lone coalesced packet holds the delay of the one before (its
    // own stamp says when the interface handed it over, not when it arrived).
    let mut q: Vec<i64> = Vec::with_capacity(last + 1);
    for k in 0..=last {
        let d = (received[k] - received[0]) - (sent[k] - sent[0]);
        q.push(if coalesced[k] && k > 0 { q[k - 1] } else { d });
    }
    let mut e = vec![None::<f64>; last];
    let mut excursions = 0u32;
    // The first rise at or after `from`, or `last` if none.
    let rise_from = |from: usize| (from..last).find(|&k| q[k] < q[k + 1]).unwrap_or(last);
    let mut start = rise_from(0);
    let mut peak = 0i64;
    let mut k = start + 1;
    while k <= last {
        let above = q[k] - q[start];
        peak = peak.max(above);
        if (above as f64) < peak as f64 / p.decrease {
            if k - start >= p.busy_period {
                excursions += 1;
                for j in start..k {
                    if q[j] < q[j + 1] {
                        e[j] = Some(rates[j]);
                    }
                }
            }
            start = rise_from(k);
            peak = 0;
            k = start;
        }
        k += 1;
    }
    let queued_at_end = start < last;
    // The final excursion's start; a chirp that never queued at the end is marked
    // with its last gap's rate, the most it can say.
    let l = if queued_at_end { start } else { last - 1 };
    if queued_at_end && compressed(received, &coalesced, l, last) {
        return Err(Unusable::Disturbed);
    }
    let onset_bps = rates[l];
    let output_bps = if queued_at_end {
        output_rate(bits, received, l, last, p.busy_period)
    } else {
        None
    };
    let tail_bps = if queued_at_end {
        tail_rate(bits, sent, received, &rates, l, last)
    } else {
        None
    };
    let fill = match (p.onset, output_bps, tail_bps) {
        (Onset::Tail, _, Some(t)) => onset_bps.min(t),
        (Onset::Output | Onset::Tail, Some(o), _) => onset_bps.min(o),
        _ => onset_bps,
    };
    for slot in e.iter_mut().skip(l) {
        *slot = Some(fill);
    }
    let (mut weighted, mut total) = (0.0, 0.0);
    for (j, &g) in gaps.iter().enumerate() {
        let g = g as f64;
        weighted += e[j].unwrap_or(fill) * g;
        total += g;
    }
    Ok(ChirpAnalysis {
        estimate_bps: weighted / total,
        onset_bps,
        output_bps,
        tail_bps,
        excursions,
        analysed: last + 1,
        queued_at_end,
        delays_ns: q,
        rates_bps: rates,
    })
}

/// Whether a receive gap of the final queue (from `l` to `last`) is under
/// [`params::COMPRESSED`] of the queue's lower-quartile gap, coalesced packets
/// apart (see [`Unusable::Disturbed`]). The lower quartile is the bottleneck's own
/// gap even when cross traffic widens most of the others. The queue's first gap is
/// not judged: a token bucket that was idle lets the probe after the queue's first
/// out on what credit the first left, sooner than its rate (a `tbf` of 1540 bytes
/// at 5 Mbit/s lets a 1028-byte probe out 0.8 ms after the one before, against its
/// 1.6 ms), and where the chirp queued from its first probe that was every chirp.
fn compressed(received: &[i64], coalesced: &[bool], l: usize, last: usize) -> bool {
    let gap = |k: usize| received[k + 1] - received[k];
    let mut gaps: Vec<i64> = (l..last).map(gap).collect();
    if gaps.len() < 2 {
        return false;
    }
    gaps.sort_unstable();
    let typical = gaps[gaps.len() / 4] as f64;
    (l + 1..last).any(|k| {
        let g = gap(k);
        !coalesced[k + 1] && (g as f64) < params::COMPRESSED * typical
    })
}

/// The median receive rate of up to `count` gaps from `l` on, bit/s: the rate the
/// path let probes out at once a queue had formed.
fn output_rate(bits: f64, received: &[i64], l: usize, last: usize, count: usize) -> Option<f64> {
    let mut r: Vec<f64> = (l..last)
        .take(count.max(1))
        .filter_map(|k| {
            let g = received[k + 1] - received[k];
            (g > 0).then(|| bits / (g as f64 * 1e-9))
        })
        .collect();
    if r.is_empty() {
        return None;
    }
    r.sort_by(f64::total_cmp);
    Some(r[r.len() / 2])
}

/// Ĉ − X̂ over the chirp's saturated tail (see [`Onset::Tail`]), bit/s.
fn tail_rate(
    bits: f64,
    sent: &[i64],
    received: &[i64],
    rates: &[f64],
    l: usize,
    last: usize,
) -> Option<f64> {
    let mut out: Vec<f64> = (l..last)
        .filter_map(|k| {
            let g = received[k + 1] - received[k];
            (g > 0).then(|| bits / (g as f64 * 1e-9))
        })
        .collect();
    if out.is_empty() {
        return None;
    }
    out.sort_by(f64::total_cmp);
    let capacity = out[out.len() / 2];
    let m = (l..last).find(|&k| rates[k] >= capacity)?;
    if last - m < 2 {
        return None;
    }
    let served = (received[last] - received[m]) as f64 * 1e-9;
    let span = (sent[last] - sent[m]) as f64 * 1e-9;
    if span <= 0.0 {
        return None;
    }
    let probes = (last - m) as f64 * bits;
    let cross = ((capacity * served - probes) / span).clamp(0.0, capacity);
    Some(capacity - cross)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chirp of 1028-byte probes from 10 Mbit/s up by 1.2 per gap, 18 packets.
    fn chirp() -> Vec<i64> {
        let mut s = vec![0i64];
        let mut gap = 1028.0 * 8.0 / 10e6 * 1e9;
        for _ in 0..17 {
            let t = s.last().unwrap() + gap as i64;
            s.push(t);
            gap /= 1.2;
        }
        s
    }

    /// Through a token bucket of `capacity` bit/s holding `credit` bytes, FIFO, no
    /// cross traffic; 1 ms of propagation.
    fn through(sent: &[i64], capacity: f64, credit: f64) -> Vec<i64> {
        let per_ns = capacity / 8.0 * 1e-9;
        let (mut tokens, mut updated, mut free_at) = (credit, sent[0], sent[0]);
        sent.iter()
            .map(|&t| {
                let start = t.max(free_at);
                tokens = (tokens + (start - updated) as f64 * per_ns).min(credit);
                let wait = ((1028.0 - tokens) / per_ns).max(0.0) as i64;
                let leave = start + wait;
                tokens = (tokens + wait as f64 * per_ns - 1028.0).max(0.0);
                updated = leave;
                free_at = leave;
                leave + 1_000_000
            })
            .collect()
    }

    #[test]
    fn an_idle_path_reads_at_least_the_top_rate() {
        let s = chirp();
        let r: Vec<i64> = s.iter().map(|t| t + 5_000_000).collect();
        let a = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert!(!a.queued_at_end);
        assert_eq!(a.excursions, 0);
        let top = a.rates_bps[a.rates_bps.len() - 1];
        assert!((a.estimate_bps - top).abs() < 1.0, "{a:?}");
    }

    #[test]
    fn a_bucket_credit_makes_the_first_rise_late_and_the_output_rate_corrects_it() {
        let s = chirp();
        let first_rise = |r: &[i64]| {
            let p = Params {
                onset: Onset::FirstRise,
                ..Params::default()
            };
            analyse(1028, &s, r, &p).unwrap()
        };
        // 40 Mbit/s, credit of 1.5 probes (tbf's minimum burst on a 1500-byte MTU).
        let r = through(&s, 40e6, 1540.0);
        let first = first_rise(&r);
        let ours = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert!(first.queued_at_end && ours.queued_at_end);
        assert!(
            first.estimate_bps > 40e6 * 1.2,
            "the first rise comes late: {first:?}"
        );
        let err = ours.estimate_bps / 40e6 - 1.0;
        assert!(err.abs() < 0.1, "{err} {ours:?}");
        // With a one-probe bucket both agree within a spread step.
        let r = through(&s, 40e6, 1028.0);
        let first = first_rise(&r);
        assert!(first.estimate_bps < 40e6 * 1.25, "{first:?}");
    }

    #[test]
    fn a_short_excursion_does_not_count_and_a_long_one_marks_its_rising_gaps() {
        let s = chirp();
        let mut r: Vec<i64> = s.iter().map(|t| t + 1_000_000).collect();
        // A bump of two packets at 2–3: shorter than L.
        r[3] += 50_000;
        let a = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert_eq!(a.excursions, 0);
        // A bump over packets 2..9 that recedes: an excursion of 7 ≥ L.
        let mut r: Vec<i64> = s.iter().map(|t| t + 1_000_000).collect();
        for (k, d) in [
            (3, 20_000),
            (4, 40_000),
            (5, 60_000),
            (6, 50_000),
            (7, 30_000),
            (8, 10_000),
        ] {
            r[k] += d;
        }
        let a = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert_eq!(a.excursions, 1, "{a:?}");
        assert!(!a.queued_at_end);
    }

    /// A probe of the final queue held up beyond the path (its stamp or the shaper's
    /// timer late by 0.5 ms) comes out a long gap after the one before and the next
    /// comes out at once: a busy bottleneck cannot let probes out faster than its
    /// rate, so the chirp is disturbed. Cross traffic only widens gaps, and a lone
    /// coalesced packet is coalescence, not a disturbance.
    #[test]
    fn a_probe_held_up_beyond_the_path_disturbs_the_chirp_and_cross_traffic_does_not() {
        let s = chirp();
        let r = through(&s, 10e6, 1540.0);
        let clean = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert!(clean.queued_at_end, "{clean:?}");
        let late = r.len() - 3;
        let mut held = r.clone();
        held[late] += 500_000;
        assert_eq!(
            analyse(1028, &s, &held, &Params::default()),
            Err(Unusable::Disturbed)
        );
        // Held up before the final queue: nothing to judge there.
        let mut early = r.clone();
        early[1] += 500_000;
        assert!(analyse(1028, &s, &early, &Params::default()).is_ok());
        // A cross-traffic packet of 1500 bytes between two queued probes delays
        // every probe after it by its own time on the link.
        let mut cross = r.clone();
        for t in &mut cross[late..] {
            *t += 1_200_000;
        }
        let a = analyse(1028, &s, &cross, &Params::default()).unwrap();
        assert!(a.estimate_bps < clean.estimate_bps, "{a:?}");
        // The last two handed over together (coalescence) leave the chirp usable.
        let mut together = r.clone();
        let n = together.len();
        together[n - 1] = together[n - 2] + 1_000;
        assert!(analyse(1028, &s, &together, &Params::default()).is_ok());
    }

    /// A path slower than the chirp's lowest rate queues from the chirp's first
    /// probe; the bucket's credit lets the second out early. That is the path, not a
    /// disturbance: the chirp reads the path's rate.
    #[test]
    fn a_chirp_queued_from_its_first_probe_is_no_disturbance() {
        let s = chirp();
        let low = 1028.0 * 8.0 / ((s[1] - s[0]) as f64 * 1e-9);
        let capacity = low / 2.0;
        let r = through(&s, capacity, 1540.0);
        // The bucket's credit: the second probe out well before the path's gap.
        let path_gap = 1028.0 * 8.0 / capacity * 1e9;
        assert!(((r[1] - r[0]) as f64) < 0.75 * path_gap, "{:?}", &r[..3]);
        let a = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert!(a.queued_at_end, "{a:?}");
        assert!(
            (a.estimate_bps - capacity).abs() < 0.1 * capacity,
            "{} against {capacity}",
            a.estimate_bps
        );
        // A probe held up in that queue still disturbs it.
        let mut held = r.clone();
        held[5] += 800_000;
        assert_eq!(
            analyse(1028, &s, &held, &Params::default()),
            Err(Unusable::Disturbed)
        );
    }

    #[test]
    fn coalescence_cuts_the_chirp_and_a_tiny_remainder_is_unusable() {
        let s = chirp();
        let mut r: Vec<i64> = s.iter().map(|t| t + 1_000_000).collect();
        // Packets 12, 13, 14 handed over 1 µs apart.
        r[13] = r[12] + 1_000;
        r[14] = r[13] + 1_000;
        for k in 15..r.len() {
            r[k] = r[14] + (s[k] - s[14]);
        }
        let a = analyse(1028, &s, &r, &Params::default()).unwrap();
        assert_eq!(a.analysed, 13);
        let mut r: Vec<i64> = s.iter().map(|t| t + 1_000_000).collect();
        r[1] = r[0] + 1;
        r[2] = r[1] + 1;
        assert_eq!(
            analyse(1028, &s, &r, &Params::default()),
            Err(Unusable::Coalesced)
        );
        assert_eq!(
            analyse(1028, &s[..2], &r[..2], &Params::default()),
            Err(Unusable::TooShort)
        );
    }
}
