//! How exactly the user-space delay line delays, judged on the wire: UDP datagrams
//! numbered in their payload cross the paper testbed's bottleneck at a share of its
//! rate; a capture on `x1` stamps each as the queue hands it to the link, a capture
//! on `x2` stamps it on arrival, and the error is the difference minus the one-way
//! delay. Runs at 10 and 100 Mbit/s by default.
//!
//! `cargo bench -p mgrp-testbed --bench delay_line [-- --seconds N --rtt-ms N --rates 10,100 --load 0.8]`
//! (root: it builds namespaces).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mgrp_testbed::link::{Direction, LinkSocket, MAX_FRAME, VNET_HDR_LEN};
use mgrp_testbed::paper::{Bottleneck, C2, Testbed};

/// Offset of the sequence number in a captured buffer: virtio-net header, Ethernet,
/// IPv4 and UDP headers.
const SEQ_AT: usize = VNET_HDR_LEN + 14 + 20 + 8;
const PORT: u16 = 7200;
const SIZE: usize = 1000;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Reads `(seq, stamp)` of every numbered datagram `dev` sees going `direction`.
fn capture(
    ns: &mgrp_testbed::Netns,
    dev: &str,
    direction: Direction,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<HashMap<u64, i64>>>> {
    let socket = LinkSocket::open(ns, dev, direction)?;
    let stop = stop.clone();
    ns.spawn("capture", move || {
        let mut seen = HashMap::new();
        let mut buf = vec![0u8; MAX_FRAME];
        while !stop.load(Ordering::Relaxed) {
            if !socket.wait(Some(Duration::from_millis(20)))? {
                continue;
            }
            while let Some(r) = socket.recv(&mut buf)? {
                // IPv4, UDP, to the bench's port.
                let f = &buf[VNET_HDR_LEN..r.len];
                if r.len < SEQ_AT + 8 || f[12..14] != [8, 0] || f[23] != 17 {
                    continue;
                }
                if u16::from_be_bytes([f[36], f[37]]) != PORT {
                    continue;
                }
                let seq = u64::from_be_bytes(buf[SEQ_AT..SEQ_AT + 8].try_into()?);
                seen.insert(seq, r.stamp_ns);
            }
        }
        Ok(seen)
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn one(rate_mbps: u32, rtt: Duration, load: f64, seconds: u64) -> anyhow::Result<()> {
    let tb = Testbed::new(Bottleneck {
        rate: format!("{rate_mbps}mbit"),
        // A tenth of a second of queue, as the default's 50 ms at 10 Mbit/s or more.
        queue_bytes: (rate_mbps * 12_500).max(62_500),
        burst_bytes: 3000,
        rtt,
        loss: 0.0,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = capture(&tb.x1, &tb.bottleneck_dev, Direction::Outgoing, &stop)?;
    let arrived = capture(&tb.x2, &tb.arrival_dev, Direction::Incoming, &stop)?;
    let sink = tb
        .c2
        .run(|| UdpSocket::bind(SocketAddr::new(IpAddr::V4(C2), PORT)))??;
    sink.set_read_timeout(Some(Duration::from_millis(100)))?;
    let tx = tb
        .c1
        .run(|| UdpSocket::bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0)))??;
    tx.connect(SocketAddr::new(IpAddr::V4(C2), PORT))?;
    let drain = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                let _ = sink.recv(&mut b);
            }
        })
    };
    // Absolute deadlines: the rate holds on average whatever each sleep overshoots.
    let gap = Duration::from_secs_f64((SIZE as f64 * 8.0) / (load * f64::from(rate_mbps) * 1e6));
    let mut payload = vec![0u8; SIZE - 28];
    let t0 = Instant::now();
    let mut n: u64 = 0;
    while t0.elapsed() < Duration::from_secs(seconds) {
        let due = t0 + gap * u32::try_from(n)?;
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        payload[..8].copy_from_slice(&n.to_be_bytes());
        let _ = tx.send(&payload);
        n += 1;
    }
    std::thread::sleep(rtt + Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let sent = sent
        .join()
        .map_err(|_| anyhow::anyhow!("capture panicked"))??;
    let arrived = arrived
        .join()
        .map_err(|_| anyhow::anyhow!("capture panicked"))??;
    let _ = drain.join();
    let one_way = i64::try_from((rtt / 2).as_nanos())?;
    let mut errors: Vec<f64> = sent
        .iter()
        .filter_map(|(seq, &t)| arrived.get(seq).map(|&r| (r - t - one_way) as f64 / 1e3))
        .collect();
    anyhow::ensure!(!errors.is_empty(), "no datagram was seen at both ends");
    errors.sort_by(f64::total_cmp);
    let max_late = tb
        .delay
        .as_ref()
        .map_or(0, |l| l.counters.max_late_ns.load(Ordering::Relaxed));
    println!(
        "{rate_mbps:>4} Mbit/s, load {load:.2}, {n} datagrams of {SIZE} B, {} left x1, {} arrived at x2: delay error (µs) min {:.1}  median {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  (the line's own worst lateness {:.1})",
        sent.len(),
        errors.len(),
        errors[0],
        percentile(&errors, 0.5),
        percentile(&errors, 0.99),
        percentile(&errors, 0.999),
        errors[errors.len() - 1],
        max_late as f64 / 1e3,
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "delay_line [--seconds N (10)] [--rtt-ms N (40)] [--rates 10,100] [--load 0.8]\n\
             Measures the delay line's error on the wire (needs root)."
        );
        return Ok(());
    }
    // `cargo bench` passes `--bench`; nothing else is expected.
    if !mgrp_testbed::is_root() {
        anyhow::bail!("the delay_line bench builds network namespaces: run it as root");
    }
    let seconds = arg(&args, "--seconds").map_or(Ok(10), |s| s.parse())?;
    let rtt = Duration::from_millis(arg(&args, "--rtt-ms").map_or(Ok(40), |s| s.parse())?);
    let load: f64 = arg(&args, "--load").map_or(Ok(0.8), |s| s.parse())?;
    let rates = arg(&args, "--rates").unwrap_or_else(|| "10,100".into());
    for r in rates.split(',') {
        one(r.trim().parse()?, rtt, load, seconds)?;
    }
    Ok(())
}
