//! Bench of the Measurement Overlay: four nodes around a router, each host's downlink
//! a `tbf` of its own rate, every node measuring the paths from the other three over
//! MGRP (12 directed links), for a while quiet and then with an application flow from
//! node 0 to node 1 routed through the tunnel. Prints, per link and overall: estimates
//! per minute, the age of the latest estimate (p50/p99, sampled every second), the
//! estimates against the truth, probe bytes per hour and the share that carried
//! riders; and CPU and memory of every overlay and mgrpd.
//!
//! Root only (network namespaces):
//!
//! ```sh
//! cargo run --release -p mgrp-overlay --example mesh -- --minutes 10
//! ```
//!
//! The daemons and overlays are this binary, started as `mesh mgrpd ...` and
//! `mesh overlay ...`. In a star every path into a host shares that host's downlink,
//! which is its bottleneck: the truth of a link is the receiver's downlink less the
//! application flow when that flow goes to the same host.

#[path = "../tests/embed/mod.rs"]
mod embed;
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser;
use embed::TempDir;
use mgrp_rt::unix_now;
use mgrp_testbed::Star;
use mgrp_testbed::http::request_in;
use mgrp_testbed::traffic::{ip_level_truth, udp_cbr};
use serde_json::Value;
use support::{Meter, quantile};

/// Each host's downlink, Mbit/s.
const DOWNLINKS: [f64; 4] = [10.0, 6.0, 15.0, 8.0];
/// Where each overlay's API listens, on its host's address.
const API_PORT: u16 = 7700;
/// The probe size the truth is computed for (pathload's streams at these rates).
const PROBE_BYTES: u32 = 228;
/// IP bytes of the application flow's datagrams.
const FLOW_PACKET: u32 = 1000;

#[derive(Debug, Parser)]
#[command(about = "Four mgrp-overlay nodes in a full mesh: rates, ages, accuracy, cost")]
struct Args {
    /// Length of the run, minutes; the flow runs in the second half.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Each link's interval between runs.
    #[arg(long, default_value = "10s")]
    interval: String,
    /// The application flow from node 0 to node 1, Mbit/s (0: none).
    #[arg(long, default_value_t = 2.0)]
    flow_mbps: f64,
    /// Measurements into one node at once (the overlay's max-running).
    #[arg(long, default_value_t = 1)]
    max_running: u32,
}

fn node_config(i: usize, addrs: &[std::net::Ipv4Addr], socket: &Path, args: &Args) -> String {
    let mut c = format!(
        "name = \"n{i}\"\nlisten = \"{}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\nmax-running = {}\nhistory = 10000\n",
        addrs[i],
        socket.display(),
        args.max_running
    );
    for (j, a) in addrs.iter().enumerate().filter(|(j, _)| *j != i) {
        c.push_str(&format!(
            "[[link]]\nname = \"n{j}\"\nfrom = \"{a}\"\ntransport = \"mgrp\"\ninterval = \"{}\"\ntime-limit = \"30s\"\nbackoff = \"2s\"\nmax-backoff = \"20s\"\n",
            args.interval
        ));
    }
    c
}

/// One link's figures at the end.
#[derive(Debug, Default)]
struct LinkFigures {
    estimates: u64,
    runs: u64,
    in_range: u64,
    near: u64,
    errors: Vec<f64>,
    ages: Vec<f64>,
    probe_bytes: u64,
    riding_bytes: u64,
    flow_probe_bytes: u64,
    flow_riding_bytes: u64,
}

fn bench(args: &Args) -> anyhow::Result<()> {
    mgrp_core::parse_duration(&args.interval).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    ensure!(args.minutes > 0.0, "--minutes must be above 0");
    let star = Star::new(&DOWNLINKS.map(|r| Some((format!("{r}mbit"), "1540".to_string()))))?;
    let (r, addrs) = (&star.router, star.addrs.clone());
    let me = std::env::current_exe()?;
    let daemons = star.daemons(&me, &["mgrpd"], &["--hold-mode", "always"])?;
    let dir = TempDir::new("mgrp-mesh")?;
    let mut overlays = Vec::new();
    for (i, ns) in star.hosts.iter().enumerate() {
        let p = dir.0.join(format!("n{i}.toml"));
        std::fs::write(&p, node_config(i, &addrs, &daemons[i].socket, args))?;
        overlays.push(embed::overlay(ns, &p, "info")?);
    }
    let mut meter = Meter::start(&overlays, &daemons);
    let started = Instant::now();
    let start_unix = unix_now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let flow_at = total / 2;
    let mut flow = None;
    let mut flow_unix = f64::INFINITY;
    let mut ages: BTreeMap<(usize, String), Vec<f64>> = BTreeMap::new();
    eprintln!(
        "mesh: 4 nodes, downlinks {DOWNLINKS:?} Mbit/s, interval {}, {} min; a {} Mbit/s flow n0 -> n1 from minute {:.1}",
        args.interval,
        args.minutes,
        args.flow_mbps,
        args.minutes / 2.0
    );
    while started.elapsed() < total {
        if flow.is_none() && args.flow_mbps > 0.0 && started.elapsed() >= flow_at {
            flow = Some(udp_cbr(
                &star.hosts[0],
                &star.hosts[1],
                addrs[1].into(),
                6100,
                args.flow_mbps,
                FLOW_PACKET as usize,
            )?);
            flow_unix = unix_now();
            eprintln!("mesh: flow started");
        }
        for (i, a) in addrs.iter().enumerate() {
            let Ok((200, body)) = request_in(r, &format!("{a}:{API_PORT}"), "GET", "/v1/links")
            else {
                continue;
            };
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            for l in v["links"].as_array().into_iter().flatten() {
                if let (Some(name), Some(age)) = (l["name"].as_str(), l["age_s"].as_f64()) {
                    ages.entry((i, name.to_string())).or_default().push(age);
                }
            }
        }
        meter.sample();
        std::thread::sleep(Duration::from_secs(1));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let used = meter.used();
    drop(flow);

    // Every link's history, judged against its truth.
    let mut figures: BTreeMap<(usize, String), LinkFigures> = BTreeMap::new();
    for (i, a) in addrs.iter().enumerate() {
        for j in (0..addrs.len()).filter(|j| *j != i) {
            let name = format!("n{j}");
            let (status, body) = request_in(
                r,
                &format!("{a}:{API_PORT}"),
                "GET",
                &format!("/v1/links/{name}/history?limit=10000"),
            )?;
            ensure!(status == 200, "n{i} {name}: {status} {body}");
            let h: Value = serde_json::from_str(&body)?;
            let f = figures.entry((i, name.clone())).or_default();
            f.ages = ages.remove(&(i, name.clone())).unwrap_or_default();
            for e in h["estimates"].as_array().into_iter().flatten() {
                let (Some(s), Some(end)) = (e["started_at"].as_f64(), e["ended_at"].as_f64())
                else {
                    continue;
                };
                f.runs += 1;
                let probe = e["probe_bytes"].as_u64().unwrap_or(0);
                let riding = e["riding_probe_bytes"].as_u64().unwrap_or(0);
                f.probe_bytes += probe;
                f.riding_bytes += riding;
                let during_flow = s >= flow_unix;
                if during_flow {
                    f.flow_probe_bytes += probe;
                    f.flow_riding_bytes += riding;
                }
                if !e["converged"].as_bool().unwrap_or(false) {
                    continue;
                }
                f.estimates += 1;
                // Runs across the flow's start have no single truth.
                if s < flow_unix && end > flow_unix {
                    continue;
                }
                let cross: Vec<(f64, u32)> = if during_flow && i == 1 {
                    vec![(args.flow_mbps, FLOW_PACKET)]
                } else {
                    Vec::new()
                };
                let truth = ip_level_truth(DOWNLINKS[i], PROBE_BYTES, &cross);
                let lo = e["low_bps"].as_f64().unwrap_or(0.0) / 1e6;
                let hi = e["high_bps"].as_f64().unwrap_or(0.0) / 1e6;
                if lo <= truth && truth <= hi {
                    f.in_range += 1;
                }
                if lo * 0.9 <= truth && truth <= hi * 1.1 {
                    f.near += 1;
                }
                f.errors.push(((lo + hi) / 2.0 - truth) / truth * 100.0);
            }
        }
    }
    drop(overlays);
    drop(daemons);

    let minutes = elapsed / 60.0;
    mgrp_rt::outln!(
        "\n## Measurement Overlay mesh: 4 nodes, 12 links, {minutes:.1} min, interval {}, load {}\n",
        args.interval,
        mgrp_testbed::host::load_averages()
    );
    mgrp_rt::outln!(
        "| link | truth Mbit/s | runs | estimates/min | age p50 s | age p99 s | truth in range | within ±10 % | median error % | probe MB/h | rider share (flow half) |"
    );
    mgrp_rt::outln!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut all_ages, mut all_errors) = (Vec::new(), Vec::new());
    let (mut est, mut runs, mut inr, mut near, mut bytes) = (0, 0, 0, 0, 0);
    for ((i, name), f) in &mut figures {
        let truth = ip_level_truth(DOWNLINKS[*i], PROBE_BYTES, &[]);
        let share = if f.flow_probe_bytes > 0 {
            f.flow_riding_bytes as f64 / f.flow_probe_bytes as f64 * 100.0
        } else {
            0.0
        };
        let judged = f.errors.len();
        mgrp_rt::outln!(
            "| {name} → n{i} | {truth:.2} | {} | {:.2} | {:.1} | {:.1} | {}/{judged} | {}/{judged} | {:+.1} | {:.1} | {share:.1} % |",
            f.runs,
            f.estimates as f64 / minutes,
            quantile(&mut f.ages, 0.5),
            quantile(&mut f.ages, 0.99),
            f.in_range,
            f.near,
            quantile(&mut f.errors, 0.5),
            f.probe_bytes as f64 / 1e6 / (elapsed / 3600.0),
        );
        all_ages.extend_from_slice(&f.ages);
        all_errors.extend(f.errors.iter().map(|e| e.abs()));
        est += f.estimates;
        runs += f.runs;
        inr += f.in_range;
        near += f.near;
        bytes += f.probe_bytes;
    }
    let judged = all_errors.len();
    mgrp_rt::outln!(
        "| all | | {runs} | {:.2} per link | {:.1} | {:.1} | {inr}/{judged} | {near}/{judged} | \\|{:.1}\\| median | {:.1} per link | |",
        est as f64 / minutes / 12.0,
        quantile(&mut all_ages, 0.5),
        quantile(&mut all_ages, 0.99),
        quantile(&mut all_errors, 0.5),
        bytes as f64 / 1e6 / (elapsed / 3600.0) / 12.0,
    );
    mgrp_rt::outln!("\n| process | CPU % | peak RSS MB |\n|---|---|---|");
    for u in &used {
        mgrp_rt::outln!("| {} | {:.1} | {:.1} |", u.name(), u.cpu_pct, u.peak_rss_mb);
    }
    eprintln!("mesh: started at {start_unix:.0} (Unix), flow from {flow_unix:.0}");
    Ok(())
}

fn main() -> ExitCode {
    support::main_of::<Args>("mesh", bench)
}
