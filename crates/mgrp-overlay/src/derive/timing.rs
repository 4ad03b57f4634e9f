//! Estimates from the timing of the applications' own TCP segments, stamped by the
//! kernel at both ends (after Wren): the neighbour's stamps of what it sent this node
//! matched with this node's stamps of what arrived.
//!
//! - **Dispersion** (`passive-dispersion`): segments the neighbour sent back to back
//!   (at most [`BACK_TO_BACK_NS`] apart) that the path spread out (received over at
//!   least [`SPREAD`] times the time they were sent in): their bytes over the time they
//!   took to arrive. Wren's filter — queuing occurred, the train did not speed up — in
//!   those two conditions. It bounds the available bandwidth from above (the capacity
//!   of the narrow link when nothing else queues there); the estimate is the median of
//!   a window's trains.
//! - **Trend** (`passive-trend`, SLoPS on passive streams): the neighbour's sends
//!   (a send is what its kernel handed the device at once: one segment, or a
//!   segmentation-offload burst) in runs of at least [`MIN_STREAM`] with near-constant
//!   gaps (coefficient of variation at most [`MAX_GAP_CV`]) and no retransmission;
//!   each run's one-way delays are judged with pathload's PCT and PDT (pathload-rs's
//!   thresholds) as increasing (the run's rate was above the available bandwidth) or
//!   not; the estimate is the rate that best separates the runs judged increasing from
//!   those judged not, with the nearest rates on either side as its range.
//!
//! Every flow is checked first: only the flows the neighbour's kernel reports as
//! network-limited are used (an application-limited or receiver-limited stretch says
//! nothing of the path); the others' segments are counted, not used. Runs and trains
//! that contain a retransmitted segment are dropped and counted.
//!
//! Thresholds are this project's, set before any measurement: Wren's papers do not
//! give theirs (`METHODS.md` §4.1 marks them provisional).
//!
//! No I/O and no clock: the node hands in the stamps of a window.

use std::collections::{BTreeMap, HashMap, HashSet};

use mgrp_tool::capture::Stamp;
pub use mgrp_views::passive::PassiveTiming;
use pathload_rs::Trend;

/// Names of the sources in estimates (`method`) and the API.
pub const PASSIVE_DISPERSION: &str = "passive-dispersion";
/// See [`PASSIVE_DISPERSION`].
pub const PASSIVE_TREND: &str = "passive-trend";

/// Sends at most this far apart at the neighbour count as back to back, ns (a
/// 1500-byte packet at 600 Mbit/s).
pub const BACK_TO_BACK_NS: i64 = 20_000;
/// A train is used when it arrived spread over at least this many times the time it
/// was sent in (queuing occurred).
pub const SPREAD: f64 = 1.1;
/// Segments in a train at least.
pub const MIN_TRAIN: usize = 3;
/// A train's arrival span at least, ns: shorter is within the stamps' noise.
pub const MIN_TRAIN_SPAN_NS: i64 = 10_000;
/// Sends in a stream at least.
pub const MIN_STREAM: usize = 7;
/// Largest coefficient of variation of a stream's gaps between sends.
pub const MAX_GAP_CV: f64 = 0.2;

/// One segment seen at both ends.
#[derive(Debug, Clone, Copy)]
struct Seg {
    /// Offset in the flow's sequence space from the window's first segment.
    off: u64,
    len: u32,
    ip_len: u32,
    sent_ns: i64,
    recv_ns: i64,
    /// Index of the send (the neighbour's stamp) it belongs to.
    send: usize,
    retrans: bool,
}

/// Analyses a window: `sent` are the neighbour's stamps of what it sent here, `got`
/// this node's stamps of what arrived from it, `network_limited` the flows (sender
/// port, receiver port) its kernel reports as network-limited, `at` the window's end.
pub fn analyse(
    sent: &[Stamp],
    got: &[Stamp],
    network_limited: &HashSet<(u16, u16)>,
    at: f64,
) -> PassiveTiming {
    let mut t = PassiveTiming {
        at,
        matched: 0,
        unmatched: 0,
        not_network_limited: 0,
        retransmitted: 0,
        trains: 0,
        dispersion_bps: None,
        streams: [0; 3],
        trend_bps: None,
        trend_low_bps: None,
        trend_high_bps: None,
        note: None,
    };
    // Per flow (sender port, receiver port): its sends and its arrivals.
    type Ends<'a> = (Vec<&'a Stamp>, Vec<&'a Stamp>);
    let mut by_flow: BTreeMap<(u16, u16), Ends<'_>> = BTreeMap::new();
    for s in sent {
        by_flow
            .entry((s.src_port, s.dst_port))
            .or_default()
            .0
            .push(s);
    }
    for s in got {
        by_flow
            .entry((s.src_port, s.dst_port))
            .or_default()
            .1
            .push(s);
    }
    let mut train_rates = Vec::new();
    let mut judged: Vec<(f64, Trend)> = Vec::new();
    for (flow, (sends, arrivals)) in &by_flow {
        if !network_limited.contains(flow) {
            t.not_network_limited += arrivals.len();
            continue;
        }
        let segs = match_flow(sends, arrivals, &mut t);
        trains(&segs, &mut train_rates);
        streams(&segs, &mut judged);
    }
    t.trains = train_rates.len();
    t.dispersion_bps = median(&mut train_rates);
    for (_, tr) in &judged {
        t.streams[match tr {
            Trend::Increasing => 0,
            Trend::NoTrend => 1,
            Trend::Ambiguous => 2,
        }] += 1;
    }
    (t.trend_bps, t.trend_low_bps, t.trend_high_bps) = separate(&judged);
    if t.dispersion_bps.is_none() && t.trend_bps.is_none() {
        t.note = Some(if by_flow.is_empty() {
            "no segments from the neighbour's applications in the window".into()
        } else if t.matched == 0 && t.not_network_limited > 0 {
            format!(
                "{} segments, none of a network-limited flow: an application- or receiver-limited flow says nothing of the path",
                t.not_network_limited
            )
        } else if t.matched == 0 {
            "no segment stamped at both ends".into()
        } else {
            format!(
                "{} segments stamped at both ends, but no back-to-back train the path spread out and no steady stream of {MIN_STREAM} sends",
                t.matched
            )
        });
    }
    t
}

/// Matches one flow's arrivals with its sends: each arrival belongs to the send whose
/// sequence range holds its first byte. Sequence numbers are taken relative to the
/// window's first send (a window is far shorter than the 2 GB that would wrap).
fn match_flow(sends: &[&Stamp], arrivals: &[&Stamp], t: &mut PassiveTiming) -> Vec<Seg> {
    // The lowest sequence number, taken as signed distances from any one of them.
    let Some(r) = sends.iter().chain(arrivals).map(|s| s.seq).next() else {
        return Vec::new();
    };
    let lowest = sends
        .iter()
        .chain(arrivals)
        .map(|s| s.seq.wrapping_sub(r) as i32)
        .min()
        .unwrap_or(0);
    let base = r.wrapping_add(lowest as u32);
    let off = |seq: u32| u64::from(seq.wrapping_sub(base));
    // Sends by offset; one sent twice (or overlapping one before) is a retransmission.
    let mut by_off: Vec<(u64, u32, i64, usize)> = sends
        .iter()
        .enumerate()
        .map(|(i, s)| (off(s.seq), s.payload_len, s.at_ns, i))
        .collect();
    by_off.sort_by_key(|&(o, _, at, _)| (o, at));
    let mut resent: HashSet<usize> = HashSet::new();
    let mut reach = 0u64;
    for (k, &(o, len, _, i)) in by_off.iter().enumerate() {
        if k > 0 && o < reach {
            resent.insert(i);
            // The first copy is as suspect as the second.
            resent.insert(by_off[k - 1].3);
        }
        reach = reach.max(o + u64::from(len));
    }
    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut segs = Vec::with_capacity(arrivals.len());
    for a in arrivals {
        let o = off(a.seq);
        *seen.entry(o).or_default() += 1;
        // The last send starting at or before the arrival's first byte.
        let k = by_off.partition_point(|&(so, ..)| so <= o);
        let hit = k
            .checked_sub(1)
            .map(|k| by_off[k])
            .filter(|&(so, len, ..)| o < so + u64::from(len));
        let Some((_, _, sent_ns, i)) = hit else {
            t.unmatched += 1;
            continue;
        };
        t.matched += 1;
        segs.push(Seg {
            off: o,
            len: a.payload_len,
            ip_len: a.ip_len,
            sent_ns,
            recv_ns: a.at_ns,
            send: i,
            retrans: resent.contains(&i),
        });
    }
    for s in &mut segs {
        if seen.get(&s.off).is_some_and(|&n| n > 1) {
            s.retrans = true;
        }
    }
    segs.sort_by_key(|s| (s.off, s.recv_ns));
    segs.dedup_by_key(|s| s.off);
    t.retransmitted += segs.iter().filter(|s| s.retrans).count();
    segs
}

/// Runs of segments that follow each other in sequence without a retransmission.
fn contiguous(segs: &[Seg]) -> impl Iterator<Item = &[Seg]> {
    segs.chunk_by(|a, b| !a.retrans && !b.retrans && a.off + u64::from(a.len) == b.off)
        .filter(|run| !run[0].retrans)
}

/// Adds the rates of the flow's back-to-back trains the path spread out.
fn trains(segs: &[Seg], rates: &mut Vec<f64>) {
    for run in contiguous(segs) {
        for train in run.chunk_by(|a, b| b.sent_ns - a.sent_ns <= BACK_TO_BACK_NS) {
            if train.len() < MIN_TRAIN {
                continue;
            }
            let (first, last) = (train[0], train[train.len() - 1]);
            let sent_span = last.sent_ns - first.sent_ns;
            let recv_span = last.recv_ns - first.recv_ns;
            if recv_span < MIN_TRAIN_SPAN_NS || (recv_span as f64) < SPREAD * sent_span as f64 {
                continue;
            }
            // The first segment's bytes were already through when the span began.
            let bytes: u64 = train[1..].iter().map(|s| u64::from(s.ip_len)).sum();
            rates.push(bytes as f64 * 8.0 / (recv_span as f64 * 1e-9));
        }
    }
}

/// Judges the flow's steady streams of sends: (rate, trend) of each.
fn streams(segs: &[Seg], judged: &mut Vec<(f64, Trend)>) {
    for run in contiguous(segs) {
        // One point per send: when it left, when its first segment arrived, its bytes.
        let sends: Vec<(i64, i64, u64)> = run
            .chunk_by(|a, b| a.send == b.send)
            .map(|g| {
                let first_arrival = g.iter().map(|s| s.recv_ns).min().unwrap_or(g[0].recv_ns);
                let bytes = g.iter().map(|s| u64::from(s.ip_len)).sum();
                (g[0].sent_ns, first_arrival, bytes)
            })
            .collect();
        let mut start = 0;
        while start + MIN_STREAM <= sends.len() {
            // Grow the stream while its gaps stay steady (running sums of the gaps).
            let mut g = Gaps::default();
            for w in sends[start..start + MIN_STREAM].windows(2) {
                g.add(w[1].0 - w[0].0);
            }
            if g.cv().is_none_or(|cv| cv > MAX_GAP_CV) {
                start += 1;
                continue;
            }
            let mut end = start + MIN_STREAM;
            while end < sends.len() {
                let mut next = g;
                next.add(sends[end].0 - sends[end - 1].0);
                if next.cv().is_none_or(|cv| cv > MAX_GAP_CV) {
                    break;
                }
                g = next;
                end += 1;
            }
            let s = &sends[start..end];
            let span = (s[s.len() - 1].0 - s[0].0) as f64 * 1e-9;
            // The bytes sent after the first send, over the time they took to send.
            let bytes: u64 = s[..s.len() - 1].iter().map(|p| p.2).sum();
            let rate = bytes as f64 * 8.0 / span;
            let delays: Vec<f64> = s.iter().map(|p| (p.1 - p.0) as f64).collect();
            judged.push((rate, trend(&delays)));
            start = end;
        }
    }
}

/// Running sums of the gaps between sends, ns.
#[derive(Debug, Clone, Copy, Default)]
struct Gaps {
    n: f64,
    sum: f64,
    sum_sq: f64,
}

impl Gaps {
    fn add(&mut self, gap_ns: i64) {
        let g = gap_ns as f64;
        self.n += 1.0;
        self.sum += g;
        self.sum_sq += g * g;
    }

    /// Their coefficient of variation; `None` when the sends were all at once.
    fn cv(&self) -> Option<f64> {
        let mean = self.sum / self.n;
        if self.n == 0.0 || mean <= 0.0 {
            return None;
        }
        let var = (self.sum_sq / self.n - mean * mean).max(0.0);
        Some(var.sqrt() / mean)
    }
}

/// A stream's trend from its one-way delays: PCT and PDT over group medians as
/// pathload takes them (groups of ⌊√n⌋), over the delays themselves when fewer than
/// five groups would remain, combined with pathload-rs's thresholds.
fn trend(delays: &[f64]) -> Trend {
    let g = (delays.len() as f64).sqrt().floor() as usize;
    let points: Vec<f64> = if delays.len() / g.max(1) >= 5 && g > 1 {
        delays
            .chunks_exact(g)
            .map(|c| {
                let mut c = c.to_vec();
                median(&mut c).unwrap_or(0.0)
            })
            .collect()
    } else {
        delays.to_vec()
    };
    let rises = points.windows(2).filter(|w| w[1] > w[0]).count();
    let total: f64 = points.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    let net = points[points.len() - 1] - points[0];
    let pct = rises as f64 / (points.len() - 1) as f64;
    let pdt = if total > 0.0 { net / total } else { 0.0 };
    pathload_rs::trend::combine(pct, pdt)
}

/// The rate that best separates increasing streams (above it) from the others (below
/// it), with the nearest judged rates on either side; ambiguous streams are left out.
fn separate(judged: &[(f64, Trend)]) -> (Option<f64>, Option<f64>, Option<f64>) {
    let mut j: Vec<(f64, bool)> = judged
        .iter()
        .filter(|(_, t)| *t != Trend::Ambiguous)
        .map(|&(r, t)| (r, t == Trend::Increasing))
        .collect();
    if j.is_empty() {
        return (None, None, None);
    }
    j.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Cut k: streams [0, k) below, [k, n) above; errors are increasing ones below and
    // the others above. The fewest errors win; among equals, the middle cut.
    let n = j.len();
    let errors =
        |k: usize| j[..k].iter().filter(|s| s.1).count() + j[k..].iter().filter(|s| !s.1).count();
    let best = (0..=n).map(errors).min().unwrap_or(0);
    let cuts: Vec<usize> = (0..=n).filter(|&k| errors(k) == best).collect();
    let k = cuts[cuts.len() / 2];
    let low = k.checked_sub(1).map(|i| j[i].0);
    let high = j.get(k).map(|s| s.0);
    let point = match (low, high) {
        (Some(l), Some(h)) => Some((l + h) / 2.0),
        (Some(l), None) => Some(l),
        (None, Some(h)) => Some(h),
        (None, None) => None,
    };
    (point, low, high)
}

/// The median (nearest rank) of `v`, which it sorts.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    mgrp_core::schedule::percentile(v, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;
    const IP: u32 = 1500;

    fn stamp(seq: u32, len: u32, at_ns: i64) -> Stamp {
        Stamp {
            src_port: 5001,
            dst_port: 40000,
            seq,
            payload_len: len,
            ip_len: len + 52,
            at_ns,
        }
    }

    fn limited() -> HashSet<(u16, u16)> {
        HashSet::from([(5001, 40000)])
    }

    /// A fluid FIFO bottleneck of `capacity` bit/s with `cross` bit/s of other
    /// traffic (served in turn): segments sent at `at` leave it one after another.
    fn through(sends: &[(u32, i64)], capacity: f64, cross: f64) -> Vec<Stamp> {
        let per = |bytes: u32| (f64::from(bytes) * 8.0 / (capacity - cross) * 1e9) as i64;
        let mut free = 0i64;
        sends
            .iter()
            .map(|&(seq, at)| {
                let start = free.max(at + 1_000_000);
                free = start + per(IP);
                stamp(seq, MSS, free)
            })
            .collect()
    }

    #[test]
    fn back_to_back_bursts_read_the_rate_the_path_leaves() {
        // Bursts of 10 segments sent at once every 20 ms over 10 Mbit/s with 4 of
        // cross traffic: each burst arrives at 6 Mbit/s.
        let mut sends = Vec::new();
        let mut sent = Vec::new();
        let mut seq = 1000u32;
        for b in 0..20i64 {
            sent.push(stamp(seq, 10 * MSS, b * 20_000_000));
            for _ in 0..10 {
                sends.push((seq, b * 20_000_000));
                seq += MSS;
            }
        }
        let got = through(&sends, 10e6, 4e6);
        let t = analyse(&sent, &got, &limited(), 1.0);
        assert_eq!((t.matched, t.unmatched, t.retransmitted), (200, 0, 0));
        assert_eq!(t.trains, 20);
        let d = t.dispersion_bps.unwrap();
        assert!((d - 6e6).abs() < 0.1e6, "{d}");
    }

    /// Steady streams below the rate the path leaves judge no trend, those above it
    /// increasing; the estimate lies between.
    #[test]
    fn steady_streams_bracket_the_available_rate() {
        let mut sent = Vec::new();
        let mut sends = Vec::new();
        let mut seq = 0u32;
        let mut at = 0i64;
        // Streams of 40 single-segment sends at 2..12 Mbit/s, a pause between.
        for mbps in [2.0, 4.0, 8.0, 10.0, 12.0, 3.0, 9.0, 5.0] {
            let gap = (f64::from(IP) * 8.0 / (mbps * 1e6) * 1e9) as i64;
            for _ in 0..40 {
                sent.push(stamp(seq, MSS, at));
                sends.push((seq, at));
                seq += MSS;
                at += gap;
            }
            at += 300_000_000;
        }
        let got = through(&sends, 10e6, 3e6);
        let t = analyse(&sent, &got, &limited(), 1.0);
        let (low, high) = (t.trend_low_bps.unwrap(), t.trend_high_bps.unwrap());
        assert!(low < 7e6 && 7e6 < high, "{low} {high} {:?}", t.streams);
        assert!((5e6..=8e6).contains(&low) && (8e6..=9.5e6).contains(&high));
        // Every stream is far from a back-to-back train.
        assert_eq!(t.trains, 0);
    }

    #[test]
    fn flows_not_network_limited_and_retransmissions_are_counted_not_used() {
        let sent: Vec<Stamp> = (0..10).map(|i| stamp(i * MSS, MSS, 0)).collect();
        let got: Vec<Stamp> = (0..10)
            .map(|i| stamp(i * MSS, MSS, 1_000_000 + i64::from(i) * 1_200_000))
            .collect();
        let t = analyse(&sent, &got, &HashSet::new(), 1.0);
        assert_eq!((t.not_network_limited, t.matched, t.trains), (10, 0, 0));
        assert!(t.note.unwrap().contains("none of a network-limited flow"));
        // The same train with its fifth segment sent again.
        let mut resent = sent.clone();
        resent.push(stamp(4 * MSS, MSS, 50_000_000));
        let t = analyse(&resent, &got, &limited(), 1.0);
        assert_eq!(t.retransmitted, 1);
        // The runs before and after it (four and five segments) are trains.
        assert_eq!(t.trains, 2);
    }

    #[test]
    fn sequence_numbers_that_wrap_still_match() {
        let start = u32::MAX - 3 * MSS;
        let sent: Vec<Stamp> = (0..8u32)
            .map(|i| stamp(start.wrapping_add(i * MSS), MSS, 0))
            .collect();
        let got: Vec<Stamp> = (0..8u32)
            .map(|i| {
                stamp(
                    start.wrapping_add(i * MSS),
                    MSS,
                    1_000_000 + i64::from(i) * 1_200_000,
                )
            })
            .collect();
        let t = analyse(&sent, &got, &limited(), 1.0);
        assert_eq!((t.matched, t.unmatched, t.trains), (8, 0, 1));
        let d = t.dispersion_bps.unwrap();
        assert!((d - 10e6).abs() < 0.1e6, "{d}");
    }

    #[test]
    fn an_arrival_without_its_send_is_unmatched() {
        let t = analyse(&[], &[stamp(0, MSS, 5)], &limited(), 1.0);
        assert_eq!((t.matched, t.unmatched), (0, 1));
        assert!(t.note.is_some());
        assert!(
            analyse(&[], &[], &limited(), 1.0)
                .note
                .unwrap()
                .contains("no segments")
        );
    }
}
