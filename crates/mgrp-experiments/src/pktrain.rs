//! The paper's synthetic packet-train tool (MGRP paper, Table 1), on `mgrp-client`.
//!
//! | preset | probes × size | gap | train gap | average rate |
//! |---|---|---|---|---|
//! | `pk1` | 10 × 300 B | 200 µs | 20 ms | 1.1 Mbit/s |
//! | `pk2` | 20 × 500 B | 1000 µs | 20 ms | 2.0 Mbit/s |
//! | `pk3` | 10 × 300 B | back to back | 10 ms | 2.3–2.4 Mbit/s |
//!
//! The train gap is the idle time from one train's last probe to the next train's
//! first, as the paper's averages (1.1, 2.0, 2.3 Mbit/s) show.
//!
//! The sender submits trains for a given duration and summarises their reports; the
//! receiver listens on a port and reports per-train loss and one-way-delay variation.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use mgrp_client::{Client, Error, ProbeStream, Train};
use mgrp_core::schedule::percentile;

/// The shape of one train and how often it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainShape {
    /// Probes per train.
    pub probes: u32,
    /// Probe size (IP total length).
    pub size: u16,
    /// Gap between probes.
    pub gap: Duration,
    /// Idle time from a train's last probe to the next train's first.
    pub train_gap: Duration,
}

impl TrainShape {
    /// Table 1's `pk1`.
    pub const PK1: Self = Self {
        probes: 10,
        size: 300,
        gap: Duration::from_micros(200),
        train_gap: Duration::from_millis(20),
    };
    /// Table 1's `pk2`.
    pub const PK2: Self = Self {
        probes: 20,
        size: 500,
        gap: Duration::from_micros(1000),
        train_gap: Duration::from_millis(20),
    };
    /// Table 1's `pk3`.
    pub const PK3: Self = Self {
        probes: 10,
        size: 300,
        gap: Duration::ZERO,
        train_gap: Duration::from_millis(10),
    };
}

impl TrainShape {
    /// Time from one train's first probe to the next one's.
    pub fn interval(&self) -> Duration {
        self.gap * self.probes.saturating_sub(1) + self.train_gap
    }

    /// Average rate, Mbit/s of IP bytes.
    pub fn average_mbps(&self) -> f64 {
        f64::from(self.probes) * f64::from(self.size) * 8.0 / self.interval().as_secs_f64() / 1e6
    }
}

impl FromStr for TrainShape {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pk1" => Ok(Self::PK1),
            "pk2" => Ok(Self::PK2),
            "pk3" => Ok(Self::PK3),
            _ => Err(format!(
                "unknown preset {s:?}; use pk1, pk2 or pk3, or give --probes/--size/--gap-us/--train-gap-ms"
            )),
        }
    }
}

/// What a sender saw in its reports.
#[derive(Debug, Clone, Default)]
pub struct SenderSummary {
    /// Trains sent.
    pub trains: u64,
    /// Probes sent.
    pub probes: u64,
    /// Probes that carried riders.
    pub probes_with_riders: u64,
    /// Rider bytes carried.
    pub rider_bytes: u64,
    /// Rider bytes that would have competed with the trains without MGRP.
    pub competing_rider_bytes: u64,
    /// Bytes of all probes on the wire (IP level).
    pub probe_bytes: u64,
    /// Departure − deadline of every probe, in ns, sorted.
    pub lateness_ns: Vec<i64>,
}

impl SenderSummary {
    /// Fraction of probes that carried riders.
    pub fn rider_probe_fraction(&self) -> f64 {
        if self.probes == 0 {
            0.0
        } else {
            self.probes_with_riders as f64 / self.probes as f64
        }
    }

    /// Probe bytes beyond the rider bytes they carried: what probing added to the path.
    pub fn probe_only_bytes(&self) -> u64 {
        self.probe_bytes.saturating_sub(self.rider_bytes)
    }

    /// Lateness median, p99 and max in µs.
    pub fn lateness_us(&self) -> (f64, f64, f64) {
        let p = |q| percentile(&self.lateness_ns, q).unwrap_or(0) as f64 / 1e3;
        (
            p(50.0),
            p(99.0),
            self.lateness_ns.last().copied().unwrap_or(0) as f64 / 1e3,
        )
    }

    /// One line per figure.
    pub fn print(&self) {
        let (m, p99, max) = self.lateness_us();
        mgrp_rt::outln!("trains sent           {}", self.trains);
        mgrp_rt::outln!("probes sent           {}", self.probes);
        mgrp_rt::outln!(
            "probes with riders    {:.1} %",
            100.0 * self.rider_probe_fraction()
        );
        mgrp_rt::outln!("rider bytes carried   {}", self.rider_bytes);
        mgrp_rt::outln!("competing rider bytes {}", self.competing_rider_bytes);
        mgrp_rt::outln!("lateness              median {m:.2} µs, p99 {p99:.1} µs, max {max:.0} µs");
    }
}

/// Sends `shape` trains to `dst` (ports `src_port` → `dst_port`) for `duration`.
pub async fn send(
    client: &Client,
    dst: IpAddr,
    ports: (u16, u16),
    shape: TrainShape,
    piggyback: bool,
    duration: Duration,
) -> Result<SenderSummary, Error> {
    let mut s = SenderSummary::default();
    let start = tokio::time::Instant::now();
    let mut next = start;
    // Back-to-back probes (pk3) go as close as the daemon allows.
    let gap = shape
        .gap
        .max(client.limits().map_or(Duration::ZERO, |l| l.min_gap()));
    while next.duration_since(start) < duration {
        tokio::time::sleep_until(next).await;
        next += shape.interval();
        let mut train = Train::uniform(dst, shape.probes, shape.size, gap).ports(ports.0, ports.1);
        if !piggyback {
            train = train.no_piggyback();
        }
        let r = client.send_train(train).await?;
        s.trains += 1;
        s.probes += u64::from(r.probes_sent);
        s.probes_with_riders += u64::from(r.probes_with_riders);
        s.rider_bytes += r.rider_bytes;
        s.competing_rider_bytes += r.competing_rider_bytes;
        s.probe_bytes += u64::from(r.probes_sent) * u64::from(shape.size);
        s.lateness_ns.extend(
            r.departures
                .iter()
                .filter_map(|d| d.departed.map(|t| t.signed_nanos_since(d.deadline))),
        );
    }
    s.lateness_ns.sort_unstable();
    Ok(s)
}

/// One train as the receiver saw it.
#[derive(Debug, Clone, Default)]
pub struct TrainSeen {
    /// Probes the train had.
    pub train_len: u16,
    /// Probes received.
    pub received: u16,
    /// Probes that arrived out of sequence order.
    pub out_of_order: u16,
    /// Smallest and largest one-way delay (receiver stamp − sender stamp), in ns.
    pub owd_min_max: Option<(i64, i64)>,
    /// Rider bytes the received probes carried.
    pub rider_bytes: u64,
    last_seq: Option<u16>,
}

impl TrainSeen {
    /// Fraction of probes lost.
    pub fn loss(&self) -> f64 {
        1.0 - f64::from(self.received) / f64::from(self.train_len.max(1))
    }

    /// Largest minus smallest one-way delay, in µs.
    pub fn owd_variation_us(&self) -> f64 {
        self.owd_min_max.map_or(0.0, |(a, b)| (b - a) as f64 / 1e3)
    }
}

/// Receives probes on `stream` for `duration`, grouped by (source, transaction).
pub async fn receive(
    stream: &mut ProbeStream,
    duration: Duration,
) -> Result<BTreeMap<(IpAddr, u32), TrainSeen>, Error> {
    let mut trains: BTreeMap<(IpAddr, u32), TrainSeen> = BTreeMap::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        let left = duration.saturating_sub(start.elapsed());
        let Some(p) = stream
            .next_probe_timeout(left.min(Duration::from_millis(200)))
            .await?
        else {
            continue;
        };
        let t = trains.entry((p.source, p.transaction)).or_default();
        t.train_len = p.train_len;
        t.received += 1;
        if t.last_seq.is_some_and(|l| p.seq <= l) {
            t.out_of_order += 1;
        }
        t.last_seq = Some(p.seq);
        t.rider_bytes += u64::from(p.rider_bytes);
        let owd = p.receive_time.signed_nanos_since(p.sender_time);
        t.owd_min_max = Some(match t.owd_min_max {
            None => (owd, owd),
            Some((a, b)) => (a.min(owd), b.max(owd)),
        });
    }
    Ok(trains)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_papers_average_rates() {
        // Table 1: 1.1, 2.0 and 2.3 Mbit/s (pk3's back-to-back train takes a little
        // time on the wire, which the paper's figure counts and this one does not).
        let r = |s: TrainShape| s.average_mbps();
        assert!(
            (1.05..1.15).contains(&r(TrainShape::PK1)),
            "{}",
            r(TrainShape::PK1)
        );
        assert!(
            (1.95..2.1).contains(&r(TrainShape::PK2)),
            "{}",
            r(TrainShape::PK2)
        );
        assert!(
            (2.25..2.45).contains(&r(TrainShape::PK3)),
            "{}",
            r(TrainShape::PK3)
        );
        assert_eq!(TrainShape::PK2.interval(), Duration::from_millis(39));
        assert_eq!("pk3".parse::<TrainShape>(), Ok(TrainShape::PK3));
        assert!("pk4".parse::<TrainShape>().is_err());
    }
}
