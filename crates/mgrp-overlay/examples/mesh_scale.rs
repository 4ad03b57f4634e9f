//! Bench of a mesh at scale on one host: N members (16 by default) around a router,
//! each host's downlink a `tbf` of its own rate, built from one mesh description (a
//! `spread` group of k, pathChirp over MGRP, a `[budget]` that plans every link's
//! timing), one member collecting the matrix. Cross traffic (plain UDP, beside the
//! tunnel) into some hosts, application flows (through the tunnel, riding) into
//! others. Prints probe bytes per link-hour, estimate age p50/p99, the error of the
//! measured and of the inferred pairs against the shaped truth, and CPU and memory of
//! every overlay and mgrpd, with the host's cores, memory and load.
//!
//! Root only (network namespaces):
//!
//! ```sh
//! cargo run --release -p mgrp-overlay --example mesh_scale -- --members 16 --minutes 10
//! ```
//!
//! The daemons and overlays are this binary, started as `mesh_scale mgrpd ...` and
//! `mesh_scale overlay ...`. In a star every path into a host shares that host's
//! downlink, its bottleneck: the truth of a pair is the receiver's downlink less the
//! traffic into that host (the core, the router, is not shaped, so members have no
//! regions).

#[path = "../tests/embed/mod.rs"]
mod embed;
mod support;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser;
use embed::TempDir;
use mgrp_testbed::Star;
use mgrp_testbed::http::request_in;
use mgrp_testbed::traffic::{ip_level_truth, udp_cbr};
use serde_json::Value;
use support::{Meter, quantile};

/// The downlinks, Mbit/s, member i taking entry i mod 8 (fixed before any run).
const DOWNLINKS: [f64; 8] = [10.0, 6.0, 15.0, 8.0, 12.0, 5.0, 20.0, 9.0];
/// Where each overlay's API listens, on its host's address.
const API_PORT: u16 = 7700;
/// The probe size the truth is computed for: pathChirp's 1000-byte probes.
const PROBE_BYTES: u32 = 1000;
/// IP bytes of the cross traffic's and the application flows' datagrams.
const FLOW_PACKET: u32 = 1000;

#[derive(Debug, Parser)]
#[command(about = "N mgrp-overlay members from one mesh description: cost, age, accuracy, CPU")]
struct Args {
    /// Members (hosts).
    #[arg(long, default_value_t = 16)]
    members: usize,
    /// The spread group's k: each member is in 2k measured pairs.
    #[arg(long, default_value_t = 2)]
    k: usize,
    /// Length of the run, minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// The budget's age goal.
    #[arg(long, default_value = "5m")]
    age: String,
    /// The budget per member, MB an hour.
    #[arg(long, default_value_t = 100.0)]
    node_mb_per_hour: f64,
    /// Cross traffic into each of the hosts 0, 4, 8, … (plain UDP from the host
    /// before it, not riding), Mbit/s.
    #[arg(long, default_value_t = 2.0)]
    cross_mbps: f64,
    /// An application flow into each of the hosts 2, 6, 10, … (through the tunnel,
    /// riding in probes), Mbit/s.
    #[arg(long, default_value_t = 1.0)]
    flow_mbps: f64,
}

/// The description: every member, the spread group, the budget.
fn description(addrs: &[std::net::Ipv4Addr], args: &Args) -> String {
    let mut d = String::new();
    for (i, a) in addrs.iter().enumerate() {
        d.push_str(&format!(
            "[[member]]\nname = \"n{i}\"\naddress = \"{a}\"\napi = \"http://{a}:{API_PORT}\"\n"
        ));
    }
    let names: Vec<String> = (0..addrs.len()).map(|i| format!("\"n{i}\"")).collect();
    d.push_str(&format!(
        "[[group]]\nname = \"spread\"\nkind = \"spread\"\nk = {}\nmembers = [{}]\nmethods = [\"pathchirp\"]\ntransports = [\"mgrp\"]\n\
         [budget]\nnode-mb-per-hour = {}\nage = \"{}\"\n",
        args.k,
        names.join(", "),
        args.node_mb_per_hour,
        args.age
    ));
    d
}

/// Traffic into host `i`: (cross traffic, application flow), Mbit/s.
fn into(i: usize, args: &Args) -> (f64, f64) {
    match i % 4 {
        0 => (args.cross_mbps, 0.0),
        2 => (0.0, args.flow_mbps),
        _ => (0.0, 0.0),
    }
}

/// The available bandwidth of any path into host `i`, Mbit/s at pathChirp's probe size.
fn truth(i: usize, args: &Args) -> f64 {
    let (cross, flow) = into(i, args);
    let traffic: Vec<(f64, u32)> = [cross, flow]
        .into_iter()
        .filter(|r| *r > 0.0)
        .map(|r| (r, FLOW_PACKET))
        .collect();
    ip_level_truth(DOWNLINKS[i % DOWNLINKS.len()], PROBE_BYTES, &traffic)
}

/// The host's cores and memory, in words.
fn host() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    format!("{cores} cores, {:.1} GB memory", mem_kb as f64 / 1e6)
}

fn bench(args: &Args) -> anyhow::Result<()> {
    ensure!(args.minutes > 0.0, "--minutes must be above 0");
    let age = mgrp_core::parse_duration(&args.age).map_err(|e| anyhow::anyhow!("--age: {e}"))?;
    // Ages are sampled once every link has had its first run and a whole interval
    // (at most the age goal) after it: from the age goal on, at least a minute in.
    let sample_from = age.max(Duration::from_secs(60));
    ensure!(
        (3..=200).contains(&args.members),
        "--members: use 3 to 200 (a star of 200 hosts at most)"
    );
    let n = args.members;
    let star = Star::new(
        &(0..n)
            .map(|i| {
                Some((
                    format!("{}mbit", DOWNLINKS[i % DOWNLINKS.len()]),
                    "1540".into(),
                ))
            })
            .collect::<Vec<_>>(),
    )?;
    let (r, addrs) = (&star.router, star.addrs.clone());
    let me = std::env::current_exe()?;
    let daemons = star.daemons(&me, &["mgrpd"], &["--hold-mode", "always"])?;
    let dir = TempDir::new("mgrp-mesh-scale")?;
    let mesh_path = dir.0.join("mesh.toml");
    std::fs::write(&mesh_path, description(&addrs, args))?;
    // The plan, as --check-mesh prints it, before anything runs.
    let plan = mgrp_overlay::mesh::check(&mesh_path)?;
    let summary: Vec<&str> = plan.lines().filter(|l| l.starts_with("# budget")).collect();
    eprintln!("mesh_scale: {}", summary.join(" "));
    let mut overlays = Vec::new();
    for (i, ns) in star.hosts.iter().enumerate() {
        let p = dir.0.join(format!("n{i}.toml"));
        let matrix = if i == 0 {
            "[matrix]\ninterval = \"10s\"\nmetrics = false\n"
        } else {
            ""
        };
        std::fs::write(
            &p,
            format!(
                "mesh = \"{}\"\nnode = \"n{i}\"\nlisten = \"{}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\nhistory = 10000\n{matrix}",
                mesh_path.display(),
                addrs[i],
                daemons[i].socket.display(),
            ),
        )?;
        overlays.push(embed::overlay(ns, &p, "warn")?);
    }
    // Every member's API (open: only the namespaces reach it) answers before anything
    // is timed, or its log says why not.
    for (i, a) in addrs.iter().enumerate() {
        let up = Instant::now();
        while request_in(r, &format!("{a}:{API_PORT}"), "GET", "/v1/links").is_err() {
            ensure!(
                up.elapsed() < Duration::from_secs(30),
                "n{i}'s overlay does not answer: {}",
                overlays[i].log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Cross traffic beside the tunnel (the hosts' second addresses), flows through it.
    let mut traffic = Vec::new();
    for (i, &addr) in addrs.iter().enumerate() {
        let from = (i + n - 1) % n;
        let (cross, flow) = into(i, args);
        if cross > 0.0 {
            traffic.push(udp_cbr(
                &star.hosts[from],
                &star.hosts[i],
                star.outside[i].into(),
                6200,
                cross,
                FLOW_PACKET as usize,
            )?);
        }
        if flow > 0.0 {
            traffic.push(udp_cbr(
                &star.hosts[from],
                &star.hosts[i],
                addr.into(),
                6100,
                flow,
                FLOW_PACKET as usize,
            )?);
        }
    }
    let mut meter = Meter::start(&overlays, &daemons);
    let started = Instant::now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let mut ages: Vec<f64> = Vec::new();
    let mut value_ages: Vec<f64> = Vec::new();
    eprintln!(
        "mesh_scale: {n} members, spread k = {}, {} min, host {}",
        args.k,
        args.minutes,
        host()
    );
    while started.elapsed() < total {
        // Every 10 s: each link's age (a link without an estimate: without end),
        // and each pair's value's age in the matrix.
        if started.elapsed() >= sample_from {
            for a in &addrs {
                let Ok((200, body)) = request_in(r, &format!("{a}:{API_PORT}"), "GET", "/v1/links")
                else {
                    continue;
                };
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                for l in v["links"].as_array().into_iter().flatten() {
                    ages.push(l["age_s"].as_f64().unwrap_or(f64::INFINITY));
                }
            }
            if let Ok((200, body)) =
                request_in(r, &format!("{}:{API_PORT}", addrs[0]), "GET", "/v1/matrix")
            {
                let m: Value = serde_json::from_str(&body).unwrap_or_default();
                let cells = m["cells"].as_array().map_or(0, Vec::len);
                value_ages.extend(
                    m["cells"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["age_s"].as_f64()),
                );
                // A pair without a value is as old as the run.
                value_ages.extend(std::iter::repeat_n(
                    started.elapsed().as_secs_f64(),
                    n * (n - 1) - cells,
                ));
            }
        }
        meter.sample();
        std::thread::sleep(Duration::from_secs(10));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let used = meter.used();
    let load = mgrp_testbed::host::load_averages();

    // Each link's runs: probe bytes, estimates, errors against the truth.
    let (mut links, mut runs, mut estimates, mut probe, mut riding) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut measured_err = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let (status, body) = request_in(r, &format!("{a}:{API_PORT}"), "GET", "/v1/links")?;
        ensure!(status == 200, "n{i}: {status} {body}");
        let v: Value = serde_json::from_str(&body)?;
        for l in v["links"].as_array().into_iter().flatten() {
            links += 1;
            let name = l["name"].as_str().unwrap_or_default();
            let (_, body) = request_in(
                r,
                &format!("{a}:{API_PORT}"),
                "GET",
                &format!("/v1/links/{name}/history?limit=10000"),
            )?;
            let h: Value = serde_json::from_str(&body)?;
            for e in h["estimates"].as_array().into_iter().flatten() {
                runs += 1;
                *outcomes
                    .entry(e["outcome"].as_str().unwrap_or("?").to_owned())
                    .or_default() += 1;
                probe += e["probe_bytes"].as_u64().unwrap_or(0);
                riding += e["riding_probe_bytes"].as_u64().unwrap_or(0);
                let (Some(lo), Some(hi)) = (e["low_bps"].as_f64(), e["high_bps"].as_f64()) else {
                    continue;
                };
                estimates += 1;
                let t = truth(i, args);
                measured_err.push(((lo + hi) / 2e6 - t) / t * 100.0);
            }
        }
    }
    // The matrix at the end: the pairs measured and inferred against the truth.
    let (status, body) = request_in(r, &format!("{}:{API_PORT}", addrs[0]), "GET", "/v1/matrix")?;
    ensure!(status == 200, "the matrix: {status} {body}");
    let m: Value = serde_json::from_str(&body)?;
    let index: BTreeMap<String, usize> = (0..n).map(|i| (format!("n{i}"), i)).collect();
    let (mut inferred_err, mut latest_err) = (Vec::new(), Vec::new());
    for c in m["cells"].as_array().into_iter().flatten() {
        let Some(&to) = c["to"].as_str().and_then(|t| index.get(t)) else {
            continue;
        };
        let t = truth(to, args);
        let err = (c["bps"].as_f64().unwrap_or(0.0) / 1e6 - t) / t * 100.0;
        if c["basis"]["kind"] == "inferred" {
            inferred_err.push(err);
        } else {
            latest_err.push(err);
        }
    }
    drop(traffic);
    drop(overlays);
    drop(daemons);

    let hours = elapsed / 3600.0;
    let pairs = n * (n - 1);
    mgrp_rt::outln!(
        "\n## Mesh of {n} members from one description: spread k = {}, pathChirp over MGRP, budget {} MB a member-hour, age {}; {:.1} min\n",
        args.k,
        args.node_mb_per_hour,
        args.age,
        elapsed / 60.0
    );
    mgrp_rt::outln!("Host: {}; load (1, 5, 15 min) at the end {load}.\n", host());
    for l in &summary {
        mgrp_rt::outln!("Plan: {}", l.trim_start_matches("# "));
    }
    let within = |v: &[f64], p: f64| v.iter().filter(|e| e.abs() <= p).count();
    let abs = |v: &[f64]| v.iter().map(|e| e.abs()).collect::<Vec<_>>();
    mgrp_rt::outln!("\n| figure | value |\n|---|---|");
    mgrp_rt::outln!("| links (measured paths) | {links} of {pairs} pairs |");
    mgrp_rt::outln!("| runs, estimates | {runs}, {estimates} |");
    let by: Vec<String> = outcomes.iter().map(|(o, c)| format!("{o} {c}")).collect();
    mgrp_rt::outln!("| runs by outcome | {} |", by.join(", "));
    mgrp_rt::outln!(
        "| probe MB per measured link-hour | {:.2} |",
        probe as f64 / 1e6 / hours / links.max(1) as f64
    );
    mgrp_rt::outln!(
        "| probe MB per pair-hour, over all {pairs} pairs (no heartbeats: no routing members) | {:.3} |",
        probe as f64 / 1e6 / hours / pairs as f64
    );
    mgrp_rt::outln!(
        "| share of probe bytes that carried riders | {:.1} % |",
        riding as f64 / probe.max(1) as f64 * 100.0
    );
    mgrp_rt::outln!(
        "| measured link's estimate age p50 / p99 (every 10 s from {:.0} s on) | {:.0} / {:.0} s |",
        sample_from.as_secs_f64(),
        quantile(&mut ages, 0.5),
        quantile(&mut ages, 0.99)
    );
    mgrp_rt::outln!(
        "| every pair's value age p50 / p99 (the matrix; a pair without one: the run's age) | {:.0} / {:.0} s |",
        quantile(&mut value_ages, 0.5),
        quantile(&mut value_ages, 0.99)
    );
    let (mut me, mut ie, mut le) = (abs(&measured_err), abs(&inferred_err), abs(&latest_err));
    mgrp_rt::outln!(
        "| every estimate's error, median \\|%\\|, within ±10 % / ±50 % | {:.1}, {}/{} / {}/{} |",
        quantile(&mut me, 0.5),
        within(&measured_err, 10.0),
        measured_err.len(),
        within(&measured_err, 50.0),
        measured_err.len()
    );
    mgrp_rt::outln!(
        "| measured pairs in the matrix at the end: median \\|%\\|, within ±50 % | {:.1}, {}/{} |",
        quantile(&mut le, 0.5),
        within(&latest_err, 50.0),
        latest_err.len()
    );
    mgrp_rt::outln!(
        "| inferred pairs at the end: median \\|%\\|, within ±50 % | {:.1}, {}/{} |",
        quantile(&mut ie, 0.5),
        within(&inferred_err, 50.0),
        inferred_err.len()
    );
    mgrp_rt::outln!("\n| process | CPU % | peak RSS MB |\n|---|---|---|");
    let (mut cpu_overlay, mut cpu_mgrpd) = (0.0, 0.0);
    for u in &used {
        mgrp_rt::outln!("| {} | {:.1} | {:.1} |", u.name(), u.cpu_pct, u.peak_rss_mb);
        if u.overlay {
            cpu_overlay += u.cpu_pct;
        } else {
            cpu_mgrpd += u.cpu_pct;
        }
    }
    mgrp_rt::outln!("| all overlays / all mgrpds | {cpu_overlay:.1} / {cpu_mgrpd:.1} | |");
    Ok(())
}

fn main() -> ExitCode {
    support::main_of::<Args>("mesh_scale", bench)
}
