//! Two overlay nodes as an operator first sets them up: hosts A and B in network
//! namespaces, mgrpd and mgrp-overlay on each, the path from A to B shaped by a `tbf`
//! (8 Mbit/s unless told otherwise, bucket of one frame) and the path from B to A an
//! unshaped veth. Each node measures the path into it over MGRP and keeps its history
//! in a state directory. Runs for a while, then prints every run of both links with
//! its outcome against the truth of the shaped one, both overlays' and both mgrpds'
//! `/metrics` checked with `promtool check metrics`, and with `--screenshots DIR` headless-chromium pictures
//! of both nodes' status pages. Root only:
//!
//! ```sh
//! cargo run --release -p mgrp-overlay --example two_nodes -- --minutes 3 --screenshots pages
//! ```

#[path = "../tests/embed/mod.rs"]
mod embed;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser;
use embed::TempDir;
use mgrp_testbed::http::{promtool_check_metrics, request_in};
use mgrp_testbed::traffic::ip_level_truth;
use mgrp_testbed::{ADDR_A, ADDR_B, TwoHostOptions, TwoHosts};
use serde_json::Value;

/// Where each overlay's API listens, on its host's address.
const API_PORT: u16 = 7700;
/// Where each mgrpd serves its metrics.
const MGRPD_METRICS_PORT: u16 = 9577;

#[derive(Debug, Parser)]
#[command(about = "Two mgrp-overlay nodes: one path shaped, one unshaped; every run and the page")]
struct Args {
    /// How long the nodes run, minutes.
    #[arg(long, default_value_t = 3.0)]
    minutes: f64,
    /// The shaped path's rate (A to B), Mbit/s.
    #[arg(long, default_value_t = 8.0)]
    rate: f64,
    /// The shaper's bucket, bytes: one frame keeps bursts out of the estimates; at a
    /// gigabit this VM's timers need about ten (15140) for tbf to reach its rate.
    #[arg(long, default_value_t = 1540)]
    burst: u32,
    /// Each link's interval between runs.
    #[arg(long, default_value = "20s")]
    interval: String,
    /// Stop A's overlay for this many seconds from a third of the run on, then start
    /// it again with the same state directory: B sees its neighbour down and backs
    /// off, and A comes back with its history (0: no outage).
    #[arg(long, default_value_t = 0)]
    outage: u64,
    /// Write screenshots of both nodes' status pages into this directory at the end
    /// (`a.png`, `b.png`).
    #[arg(long, value_name = "DIR")]
    screenshots: Option<PathBuf>,
}

fn main() -> ExitCode {
    if let Some(code) = embed::embedded() {
        return code;
    }
    let args = Args::parse();
    if !mgrp_testbed::is_root() {
        eprintln!("two_nodes: needs root (network namespaces)");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("two_nodes: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn node_config(
    name: &str,
    me: std::net::Ipv4Addr,
    from: std::net::Ipv4Addr,
    link: &str,
    socket: &Path,
    state: &Path,
    interval: &str,
) -> String {
    format!(
        "name = \"{name}\"\nlisten = \"{me}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\nstate-dir = \"{}\"\n\
         [serve]\ntransports = [\"mgrp\"]\n\
         [[link]]\nname = \"{link}\"\nfrom = \"{from}\"\ninterval = \"{interval}\"\ntime-limit = \"60s\"\n",
        socket.display(),
        state.display()
    )
}

fn run(args: &Args) -> anyhow::Result<()> {
    mgrp_core::parse_duration(&args.interval).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    ensure!(
        args.minutes > 0.0 && args.rate > 0.0,
        "--minutes and --rate must be above 0"
    );
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some((
            format!("{}kbit", (args.rate * 1000.0).round()),
            args.burst.to_string(),
        )),
        router: false,
        delay: None,
    })?;
    let me = std::env::current_exe()?;
    let metrics_listen = format!("0.0.0.0:{MGRPD_METRICS_PORT}");
    let (da, db) =
        mgrp_testbed::daemon_pair(&net, &me, &["mgrpd"], &["--metrics", &metrics_listen])?;
    let dir = TempDir::new("mgrp-two-nodes")?;
    let mut overlays = Vec::new();
    let mut configs = Vec::new();
    for (ns, name, addr, from, link, socket) in [
        (&net.a, "a", ADDR_A, ADDR_B, "from-b-unshaped", &da.socket),
        (&net.b, "b", ADDR_B, ADDR_A, "from-a-shaped", &db.socket),
    ] {
        let config = dir.0.join(format!("{name}.toml"));
        let state = dir.0.join(format!("{name}-state"));
        std::fs::write(
            &config,
            node_config(name, addr, from, link, socket, &state, &args.interval),
        )?;
        overlays.push(Some(embed::overlay(ns, &config, "info")?));
        configs.push(config);
    }
    eprintln!(
        "two_nodes: A -> B shaped at {} Mbit/s, B -> A unshaped; {} min, interval {}",
        args.rate, args.minutes, args.interval
    );
    let started = Instant::now();
    let start_unix = mgrp_rt::unix_now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let outage = Duration::from_secs(args.outage);
    let (down_at, up_at) = (total / 3, total / 3 + outage);
    let mut down = false;
    while started.elapsed() < total {
        let t = started.elapsed();
        if args.outage > 0 && !down && t >= down_at && t < up_at {
            // A's overlay goes away (killed by its PID when dropped).
            overlays[0] = None;
            down = true;
            eprintln!("two_nodes: A's overlay stopped at {:.0} s", t.as_secs_f64());
        } else if down && t >= up_at {
            overlays[0] = Some(embed::overlay(&net.a, &configs[0], "info")?);
            down = false;
            eprintln!(
                "two_nodes: A's overlay started again at {:.0} s",
                t.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // The shaped link's truth, in IP bytes of pathload's probes at that rate.
    let size = pathload_rs::rate::Limits::new(1500, 0)
        .shape(args.rate)
        .size;
    let truth = ip_level_truth(args.rate, size, &[]);
    for (ns, addr, link) in [
        (&net.a, ADDR_A, "from-b-unshaped"),
        (&net.b, ADDR_B, "from-a-shaped"),
    ] {
        let api = format!("{addr}:{API_PORT}");
        let (status, body) = request_in(
            ns,
            &api,
            "GET",
            &format!("/v1/links/{link}/history?limit=1000"),
        )?;
        ensure!(status == 200, "{link}: {status} {body}");
        let v: Value = serde_json::from_str(&body)?;
        let truth_text = if link == "from-a-shaped" {
            format!(", truth {truth:.2} Mbit/s")
        } else {
            String::new()
        };
        println!("\n{link} (node at {addr}){truth_text}:");
        println!("| run | ended | outcome | answer, Mbit/s | duration | fleets | probe MB |");
        println!("|---|---|---|---|---|---|---|");
        for e in v["estimates"].as_array().into_iter().flatten() {
            let mbps = |k: &str| e[k].as_f64().map(|b| b / 1e6);
            let answer = match (mbps("low_bps"), mbps("high_bps")) {
                (Some(lo), Some(hi)) => format!("{lo:.2} - {hi:.2}"),
                (Some(lo), None) => format!("at least {lo:.1}"),
                _ => e["error"].as_str().unwrap_or("").to_string(),
            };
            println!(
                "| {} | {:.0} s | {} | {answer} | {:.1} s | {} | {:.2} |",
                e["seq"],
                e["ended_at"].as_f64().unwrap_or(0.0) - start_unix,
                e["outcome"].as_str().unwrap_or(""),
                e["duration_s"].as_f64().unwrap_or(0.0),
                e["fleets"],
                e["probe_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            );
        }
        let (_, metrics) = request_in(ns, &api, "GET", "/metrics")?;
        let exporter = format!("{addr}:{MGRPD_METRICS_PORT}");
        let (_, daemon_metrics) = request_in(ns, &exporter, "GET", "/metrics")?;
        for (what, text) in [
            (format!("overlay {api}"), &metrics),
            (format!("mgrpd {exporter}"), &daemon_metrics),
        ] {
            let families = text.lines().filter(|l| l.starts_with("# HELP ")).count();
            match promtool_check_metrics(text) {
                Ok(()) => println!(
                    "promtool check metrics, {what}/metrics ({families} families): exit 0, no complaint"
                ),
                Err(e) => println!("promtool check metrics, {what}/metrics: {e:#}"),
            }
        }
    }
    if let Some(dir) = &args.screenshots {
        std::fs::create_dir_all(dir)?;
        for (ns, addr, name) in [(&net.a, ADDR_A, "a"), (&net.b, ADDR_B, "b")] {
            let path = dir.join(format!("{name}.png"));
            mgrp_testbed::browser::screenshot(
                ns,
                &format!("http://{addr}:{API_PORT}/"),
                &path,
                (760, 1500),
            )?;
            println!("{}'s status page: {}", name.to_uppercase(), path.display());
        }
    }
    drop(overlays);
    drop((da, db));
    Ok(())
}
