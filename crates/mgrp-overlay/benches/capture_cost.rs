//! What passive packet timing costs a bulk TCP flow: two hosts on a veth pair shaped
//! to 1 Gbit/s at the sender, one CUBIC flow, and in alternate periods the two
//! captures the overlay runs for a link (the sender's of what it sends, the
//! receiver's of what arrives), with the stamps taken out every 2 s and analysed as
//! the node does. Reported per condition: the flow's throughput with and without the
//! captures, the captures' CPU time (their threads') and the analysis time, as a
//! share of one CPU.
//!
//! Two conditions: a tbf burst large enough that segmentation-offload bursts pass
//! whole (what a host with TSO/GRO sees: few, large packets), and a small burst that
//! makes tbf cut every burst into segments (each segment a packet at both ends: the
//! capture's worst case at this rate).
//!
//! `cargo bench -p mgrp-overlay --bench capture_cost [-- --periods N --seconds S]`,
//! as root.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mgrp_overlay::derive::timing;
use mgrp_testbed::{ADDR_A, ADDR_B, TwoHostOptions, TwoHosts};
use mgrp_tool::capture::{Capture, Direction, RING};

/// CPU time of this process's threads named `name` so far, ns (the scheduler's own
/// count, `/proc/self/task/*/schedstat`).
fn cpu_of(name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| {
            let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

struct Period {
    captured: bool,
    mbps: f64,
    capture_cpu: f64,
    analysis_cpu: f64,
    stamps: u64,
}

fn period(net: &TwoHosts, captured: bool, seconds: u64, port: u16) -> anyhow::Result<Period> {
    let caps = if captured {
        Some((
            net.a
                .run(|| Capture::start(ADDR_B.into(), Direction::To))??,
            net.b
                .run(|| Capture::start(ADDR_A.into(), Direction::From))??,
        ))
    } else {
        None
    };
    let flow = mgrp_testbed::traffic::tcp_bulk(&net.a, &net.b, ADDR_B.into(), port, "cubic")?;
    // Slow start and the first queue out of the way.
    std::thread::sleep(Duration::from_secs(2));
    let (b0, t0, c0) = (flow.bytes(), Instant::now(), cpu_of("capture"));
    let (mut cursors, mut analysis, mut stamps) = ((0u64, 0u64), Duration::ZERO, 0u64);
    while t0.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(2));
        if let Some((out, inn)) = &caps {
            let a = Instant::now();
            let (s, g) = (out.since(cursors.0, RING), inn.since(cursors.1, RING));
            cursors = (s.next, g.next);
            stamps += (s.stamps.len() + g.stamps.len()) as u64;
            let (sent, got) = (s.stamps, g.stamps);
            let limited = HashSet::from_iter(sent.first().map(|x| (x.src_port, x.dst_port)));
            let _ = std::hint::black_box(timing::analyse(&sent, &got, &limited, 0.0));
            analysis += a.elapsed();
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    let mbps = (flow.bytes() - b0) as f64 * 8.0 / dt / 1e6;
    let capture_cpu = (cpu_of("capture") - c0) as f64 * 1e-9 / dt;
    drop(flow);
    drop(caps);
    Ok(Period {
        captured,
        mbps,
        capture_cpu,
        analysis_cpu: analysis.as_secs_f64() / dt,
        stamps,
    })
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The bench's options.
#[derive(Debug, clap::Parser)]
struct Opts {
    /// Periods of each condition (each with and without the captures).
    #[arg(long, default_value_t = 5)]
    periods: u64,
    /// Seconds of each half period.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// List nothing and end (what test runners ask of a bench).
    #[arg(long, hide = true)]
    list: bool,
    #[command(flatten)]
    cargo: mgrp_testbed::harness::CargoBench,
}

fn main() -> anyhow::Result<()> {
    let o = <Opts as clap::Parser>::parse();
    if o.list {
        return Ok(());
    }
    let (periods, seconds) = (o.periods, o.seconds);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("capture_cost builds network namespaces: run it as root");
    }
    println!(
        "| condition | flow without captures (Mbit/s) | with (Mbit/s) | cost | capture threads (CPU) | analysis (CPU) | stamps/s |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, burst) in [
        ("1 Gbit/s, offload bursts whole", "1mb"),
        ("1 Gbit/s, every segment a packet", "16kb"),
    ] {
        let net = TwoHosts::new(&TwoHostOptions {
            bottleneck: Some(("1gbit".into(), burst.into())),
            router: false,
            delay: None,
        })?;
        let mut all = Vec::new();
        for i in 0..periods {
            // Alternating, the captured period first in odd rounds, so that a drift
            // of the machine's load falls on both sides.
            let order = if i % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for (k, captured) in order.into_iter().enumerate() {
                let port = 5400 + u16::try_from(2 * i + k as u64).unwrap_or(0);
                all.push(period(&net, captured, seconds, port)?);
            }
        }
        let of = |c: bool| all.iter().filter(move |p| p.captured == c);
        let (off, on) = (
            mean(of(false).map(|p| p.mbps)),
            mean(of(true).map(|p| p.mbps)),
        );
        let rate = mean(of(true).map(|p| p.stamps as f64 / seconds as f64));
        println!(
            "| {name} | {off:.0} | {on:.0} | {:+.2} % | {:.2} % | {:.3} % | {rate:.0} |",
            (on - off) / off * 100.0,
            mean(of(true).map(|p| p.capture_cpu)) * 100.0,
            mean(of(true).map(|p| p.analysis_cpu)) * 100.0,
        );
        for p in &all {
            eprintln!(
                "  {name}: {} {:.0} Mbit/s",
                if p.captured { "captured" } else { "plain   " },
                p.mbps
            );
        }
    }
    Ok(())
}
