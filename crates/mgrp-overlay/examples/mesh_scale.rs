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
//! cargo run --release -p mgrp-overlay --example mesh_scale -- --members 16 --minutes 10 --out docs/mesh-16
//! ```
//!
//! The run writes `run.json` (schema 1, base units: every member's history, the
//! sampled ages, the final matrix, the processes' use) into `--out`, and from it
//! `results.md`, `estimates.csv` (a row per run), `matrix.csv` (a row per pair),
//! `errors.svg` and `ages.svg`; with headless chromium on the host, `matrix.png`
//! is the collector's matrix page at the end. `--analyse` writes everything but the
//! screenshot again from `run.json` alone (no root needed).
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
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Parser;
use embed::TempDir;
use mgrp_testbed::Star;
use mgrp_testbed::http::request_in;
use mgrp_testbed::traffic::{ip_level_truth, udp_cbr};
use serde::{Deserialize, Serialize};
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
    /// Where run.json, the tables, the CSV files and the plots go.
    #[arg(long, default_value = "mesh-scale")]
    out: PathBuf,
    /// Only write the tables, CSV files and plots again from OUT/run.json.
    #[arg(long)]
    analyse: bool,
}

/// What a run wrote: everything the tables, CSV files and plots are made from.
#[derive(Debug, Serialize, Deserialize)]
struct Run {
    /// 1.
    schema: u32,
    members: usize,
    k: usize,
    minutes: f64,
    age: String,
    node_mb_per_hour: f64,
    cross_mbps: f64,
    flow_mbps: f64,
    /// The host's cores and memory, in words.
    host: String,
    /// The load averages (1, 5, 15 min) at the end.
    load_end: String,
    /// The plan's summary lines, as --check-mesh prints them.
    plan: Vec<String>,
    elapsed_s: f64,
    /// When the age samples began, from the start.
    sample_from_s: f64,
    /// The truth of every path into member i, bit/s at pathChirp's probe size.
    truth_bps: Vec<f64>,
    /// Every measured link's age, every 10 s (`null`: no estimate yet).
    link_ages_s: Vec<Option<f64>>,
    /// Every pair's value's age in the matrix, every 10 s (a pair without one: the
    /// run's age then).
    value_ages_s: Vec<f64>,
    processes: Vec<ProcessUse>,
    /// Every link of every member, with its history.
    links: Vec<LinkRuns>,
    /// The collector's `/v1/matrix` at the end.
    matrix: Value,
}

#[derive(Debug, Serialize, Deserialize)]
struct ProcessUse {
    name: String,
    overlay: bool,
    /// `null` for one that ended before the run did.
    cpu_percent: Option<f64>,
    peak_rss_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct LinkRuns {
    /// The member measuring.
    member: usize,
    name: String,
    /// The link as `/v1/links` gives it.
    link: Value,
    /// Its runs, oldest first, as its history gives them.
    estimates: Vec<Value>,
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
fn into(i: usize, cross_mbps: f64, flow_mbps: f64) -> (f64, f64) {
    match i % 4 {
        0 => (cross_mbps, 0.0),
        2 => (0.0, flow_mbps),
        _ => (0.0, 0.0),
    }
}

/// The available bandwidth of any path into host `i`, Mbit/s at pathChirp's probe size.
fn truth(i: usize, args: &Args) -> f64 {
    let (cross, flow) = into(i, args.cross_mbps, args.flow_mbps);
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

/// Builds the mesh, runs it for `--minutes`, and writes OUT/run.json (and, with a
/// headless chromium here, OUT/matrix.png).
fn measure(args: &Args) -> anyhow::Result<()> {
    ensure!(args.minutes > 0.0, "--minutes must be above 0");
    let age = mgrp_core::parse_duration(&args.age).map_err(|e| anyhow::anyhow!("--age: {e}"))?;
    // Ages are sampled once every link has had its first run and a whole interval
    // (at most the age goal) after it: from the age goal on, at least a minute in.
    let sample_from = age.max(Duration::from_secs(60));
    ensure!(
        (3..=200).contains(&args.members),
        "--members: use 3 to 200 (a star of 200 hosts at most)"
    );
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot make {}", args.out.display()))?;
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
    let summary: Vec<String> = plan
        .lines()
        .filter(|l| l.starts_with("# budget"))
        .map(|l| l.trim_start_matches("# ").to_owned())
        .collect();
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
        let (cross, flow) = into(i, args.cross_mbps, args.flow_mbps);
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
    let mut ages: Vec<Option<f64>> = Vec::new();
    let mut value_ages: Vec<f64> = Vec::new();
    eprintln!(
        "mesh_scale: {n} members, spread k = {}, {} min, host {}",
        args.k,
        args.minutes,
        host()
    );
    while started.elapsed() < total {
        // Every 10 s: each link's age (a link without an estimate: none), and each
        // pair's value's age in the matrix.
        if started.elapsed() >= sample_from {
            for a in &addrs {
                let Ok((200, body)) = request_in(r, &format!("{a}:{API_PORT}"), "GET", "/v1/links")
                else {
                    continue;
                };
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                for l in v["links"].as_array().into_iter().flatten() {
                    ages.push(l["age_s"].as_f64());
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

    // Every link's history, as each member's API serves it.
    let mut links = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let (status, body) = request_in(r, &format!("{a}:{API_PORT}"), "GET", "/v1/links")?;
        ensure!(status == 200, "n{i}: {status} {body}");
        let v: Value = serde_json::from_str(&body)?;
        for l in v["links"].as_array().into_iter().flatten() {
            let name = l["name"].as_str().unwrap_or_default().to_owned();
            let (_, body) = request_in(
                r,
                &format!("{a}:{API_PORT}"),
                "GET",
                &format!("/v1/links/{name}/history?limit=10000"),
            )?;
            let h: Value = serde_json::from_str(&body)?;
            links.push(LinkRuns {
                member: i,
                name,
                link: l.clone(),
                estimates: h["estimates"].as_array().cloned().unwrap_or_default(),
            });
        }
    }
    let (status, body) = request_in(r, &format!("{}:{API_PORT}", addrs[0]), "GET", "/v1/matrix")?;
    ensure!(status == 200, "the matrix: {status} {body}");
    let matrix: Value = serde_json::from_str(&body)?;
    screenshot(
        r,
        &format!("http://{}:{API_PORT}/matrix", addrs[0]),
        &args.out,
    );
    drop(traffic);
    drop(overlays);
    drop(daemons);

    let run = Run {
        schema: 1,
        members: n,
        k: args.k,
        minutes: args.minutes,
        age: args.age.clone(),
        node_mb_per_hour: args.node_mb_per_hour,
        cross_mbps: args.cross_mbps,
        flow_mbps: args.flow_mbps,
        host: host(),
        load_end: load,
        plan: summary,
        elapsed_s: elapsed,
        sample_from_s: sample_from.as_secs_f64(),
        truth_bps: (0..n).map(|i| truth(i, args) * 1e6).collect(),
        link_ages_s: ages,
        value_ages_s: value_ages,
        processes: used
            .iter()
            .map(|u| ProcessUse {
                name: u.name(),
                overlay: u.overlay,
                cpu_percent: u.cpu_pct.is_finite().then_some(u.cpu_pct),
                peak_rss_bytes: (u.peak_rss_mb * 1024.0 * 1024.0) as u64,
            })
            .collect(),
        links,
        matrix,
    };
    let path = args.out.join("run.json");
    std::fs::write(&path, serde_json::to_string(&run)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The page at `url` as headless chromium in `ns` draws it, into `out`/matrix.png;
/// without chromium here, or when it fails, says so and goes on.
fn screenshot(ns: &mgrp_testbed::Netns, url: &str, out: &Path) {
    let file = out.join("matrix.png");
    match mgrp_testbed::browser::screenshot(ns, url, &file, (1500, 1200)) {
        Ok(()) => eprintln!("mesh_scale: the matrix page is in {}", file.display()),
        Err(e) => eprintln!("mesh_scale: no screenshot of the matrix: {e:#}"),
    }
}

/// A run's error against the truth of its path, percent, or none.
fn error_pct(e: &Value, truth: f64) -> Option<f64> {
    let (lo, hi) = (e["low_bps"].as_f64()?, e["high_bps"].as_f64()?);
    Some(((lo + hi) / 2.0 - truth) / truth * 100.0)
}

/// A CSV field: quoted when it holds a comma, a quote or a line break.
fn csv(v: &Value) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The tables (OUT/results.md, also printed), the CSV files and the plots, from
/// OUT/run.json.
fn analyse(out: &Path) -> anyhow::Result<()> {
    let path = out.join("run.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}: run the mesh first", path.display()))?;
    let run: Run = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a mesh_scale run", path.display()))?;
    ensure!(
        run.schema == 1,
        "{}: schema {}, this reads 1",
        path.display(),
        run.schema
    );
    let n = run.members;
    let index: BTreeMap<String, usize> = (0..n).map(|i| (format!("n{i}"), i)).collect();

    // Every run: its bytes, outcome and error against its path's truth.
    let mut est = String::from(
        "member,link,from,method,transport,started_at,ended_at,outcome,low_bps,high_bps,truth_bps,error_percent,probe_bytes,riding_probe_bytes,rider_bytes,run_error\n",
    );
    let (mut runs, mut estimates, mut probe, mut riding) = (0u64, 0u64, 0u64, 0u64);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    // Runs without an estimate, by outcome and the first words of their error.
    let mut failures: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut measured_err = Vec::new();
    // Per receiving member: runs, estimates, errors.
    let mut per_member: Vec<(u64, u64, Vec<f64>)> = vec![(0, 0, Vec::new()); n];
    for l in &run.links {
        let truth = run.truth_bps[l.member];
        for e in &l.estimates {
            runs += 1;
            *outcomes
                .entry(e["outcome"].as_str().unwrap_or("?").to_owned())
                .or_default() += 1;
            probe += e["probe_bytes"].as_u64().unwrap_or(0);
            riding += e["riding_probe_bytes"].as_u64().unwrap_or(0);
            let err = error_pct(e, truth);
            per_member[l.member].0 += 1;
            if let Some(x) = err {
                estimates += 1;
                measured_err.push(x);
                per_member[l.member].1 += 1;
                per_member[l.member].2.push(x.abs());
            } else {
                let why: String = e["error"]
                    .as_str()
                    .unwrap_or("(no error given)")
                    .chars()
                    .take(90)
                    .collect();
                *failures
                    .entry((e["outcome"].as_str().unwrap_or("?").to_owned(), why))
                    .or_default() += 1;
            }
            let fields = [
                Value::from(format!("n{}", l.member)),
                Value::from(l.name.clone()),
                l.link["neighbour"].clone(),
                e["method"].clone(),
                e["transport"].clone(),
                e["started_at"].clone(),
                e["ended_at"].clone(),
                e["outcome"].clone(),
                e["low_bps"].clone(),
                e["high_bps"].clone(),
                Value::from(truth),
                err.map_or(Value::Null, |x| Value::from((x * 100.0).round() / 100.0)),
                e["probe_bytes"].clone(),
                e["riding_probe_bytes"].clone(),
                e["rider_bytes"].clone(),
                e["error"].clone(),
            ];
            let row: Vec<String> = fields.iter().map(csv).collect();
            writeln!(est, "{}", row.join(","))?;
        }
    }
    std::fs::write(out.join("estimates.csv"), est)?;

    // The matrix at the end: each pair, measured or inferred, against the truth.
    let mut mx = String::from("from,to,basis,bps,age_s,truth_bps,error_percent\n");
    let (mut inferred_err, mut latest_err) = (Vec::new(), Vec::new());
    for c in run.matrix["cells"].as_array().into_iter().flatten() {
        let Some(&to) = c["to"].as_str().and_then(|t| index.get(t)) else {
            continue;
        };
        let t = run.truth_bps[to];
        let err = (c["bps"].as_f64().unwrap_or(0.0) - t) / t * 100.0;
        let kind = c["basis"]["kind"].as_str().unwrap_or("?");
        if kind == "inferred" {
            inferred_err.push(err);
        } else {
            latest_err.push(err);
        }
        let row = [
            c["from"].clone(),
            c["to"].clone(),
            Value::from(kind),
            c["bps"].clone(),
            c["age_s"].clone(),
            Value::from(t),
            Value::from((err * 100.0).round() / 100.0),
        ];
        writeln!(mx, "{}", row.iter().map(csv).collect::<Vec<_>>().join(","))?;
    }
    std::fs::write(out.join("matrix.csv"), mx)?;

    let mut md = String::new();
    let hours = run.elapsed_s / 3600.0;
    let pairs = n * (n - 1);
    let links = run.links.len();
    writeln!(
        md,
        "## Mesh of {n} members from one description: spread k = {}, pathChirp over MGRP, budget {} MB a member-hour, age {}; {:.1} min\n",
        run.k,
        run.node_mb_per_hour,
        run.age,
        run.elapsed_s / 60.0
    )?;
    writeln!(
        md,
        "Host: {}; load (1, 5, 15 min) at the end {}.\n",
        run.host, run.load_end
    )?;
    for l in &run.plan {
        writeln!(md, "Plan: {l}")?;
    }
    let within = |v: &[f64], p: f64| v.iter().filter(|e| e.abs() <= p).count();
    let abs = |v: &[f64]| v.iter().map(|e| e.abs()).collect::<Vec<_>>();
    let mut ages: Vec<f64> = run
        .link_ages_s
        .iter()
        .map(|a| a.unwrap_or(f64::INFINITY))
        .collect();
    let mut value_ages = run.value_ages_s.clone();
    writeln!(md, "\n| figure | value |\n|---|---|")?;
    writeln!(md, "| links (measured paths) | {links} of {pairs} pairs |")?;
    writeln!(md, "| runs, estimates | {runs}, {estimates} |")?;
    let by: Vec<String> = outcomes.iter().map(|(o, c)| format!("{o} {c}")).collect();
    writeln!(md, "| runs by outcome | {} |", by.join(", "))?;
    writeln!(
        md,
        "| probe MB per measured link-hour | {:.2} |",
        probe as f64 / 1e6 / hours / links.max(1) as f64
    )?;
    writeln!(
        md,
        "| probe MB per pair-hour, over all {pairs} pairs (no heartbeats: no routing members) | {:.3} |",
        probe as f64 / 1e6 / hours / pairs as f64
    )?;
    writeln!(
        md,
        "| share of probe bytes that carried riders | {:.1} % |",
        riding as f64 / probe.max(1) as f64 * 100.0
    )?;
    writeln!(
        md,
        "| measured link's estimate age p50 / p99 (every 10 s from {:.0} s on) | {:.0} / {:.0} s |",
        run.sample_from_s,
        quantile(&mut ages, 0.5),
        quantile(&mut ages, 0.99)
    )?;
    writeln!(
        md,
        "| every pair's value age p50 / p99 (the matrix; a pair without one: the run's age) | {:.0} / {:.0} s |",
        quantile(&mut value_ages, 0.5),
        quantile(&mut value_ages, 0.99)
    )?;
    let (mut me, mut ie, mut le) = (abs(&measured_err), abs(&inferred_err), abs(&latest_err));
    writeln!(
        md,
        "| every estimate's error, median \\|%\\|, within ±10 % / ±50 % | {:.1}, {}/{} / {}/{} |",
        quantile(&mut me, 0.5),
        within(&measured_err, 10.0),
        measured_err.len(),
        within(&measured_err, 50.0),
        measured_err.len()
    )?;
    writeln!(
        md,
        "| measured pairs in the matrix at the end: median \\|%\\|, within ±50 % | {:.1}, {}/{} |",
        quantile(&mut le, 0.5),
        within(&latest_err, 50.0),
        latest_err.len()
    )?;
    writeln!(
        md,
        "| inferred pairs at the end: median \\|%\\|, within ±50 % | {:.1}, {}/{} |",
        quantile(&mut ie, 0.5),
        within(&inferred_err, 50.0),
        inferred_err.len()
    )?;
    if !failures.is_empty() {
        writeln!(
            md,
            "\nRuns without an estimate, by what they said (its first 90 characters):\n"
        )?;
        writeln!(md, "| outcome | error | runs |\n|---|---|---|")?;
        for ((outcome, why), count) in &failures {
            writeln!(md, "| {outcome} | {} | {count} |", why.replace('|', "\\|"))?;
        }
    }
    writeln!(
        md,
        "\nRuns into each member (its downlink is every path's bottleneck):\n\n| member | downlink Mbit/s | traffic in (cross, flow) Mbit/s | truth Mbit/s | runs | estimates | median \\|error\\| % |\n|---|---|---|---|---|---|---|"
    )?;
    for (i, (r, e, errs)) in per_member.iter_mut().enumerate() {
        let (cross, flow) = into(i, run.cross_mbps, run.flow_mbps);
        writeln!(
            md,
            "| n{i} | {} | {cross}, {flow} | {:.2} | {r} | {e} | {:.1} |",
            DOWNLINKS[i % DOWNLINKS.len()],
            run.truth_bps[i] / 1e6,
            quantile(errs, 0.5)
        )?;
    }
    writeln!(md, "\n| process | CPU % | peak RSS MB |\n|---|---|---|")?;
    let (mut cpu_overlay, mut cpu_mgrpd) = (0.0, 0.0);
    for u in &run.processes {
        let cpu = u.cpu_percent.unwrap_or(f64::NAN);
        writeln!(
            md,
            "| {} | {cpu:.1} | {:.1} |",
            u.name,
            u.peak_rss_bytes as f64 / 1048576.0
        )?;
        if u.overlay {
            cpu_overlay += cpu;
        } else {
            cpu_mgrpd += cpu;
        }
    }
    writeln!(
        md,
        "| all overlays / all mgrpds | {cpu_overlay:.1} / {cpu_mgrpd:.1} | |"
    )?;
    std::fs::write(out.join("results.md"), &md)?;
    mgrp_rt::out!("{md}");

    cdf(
        &out.join("errors.svg"),
        &format!("{n} members: |error| against the shaped truth"),
        "|error| %",
        &[
            ("every estimate", abs(&measured_err)),
            ("measured pairs at the end", abs(&latest_err)),
            ("inferred pairs at the end", abs(&inferred_err)),
        ],
    )?;
    cdf(
        &out.join("ages.svg"),
        &format!("{n} members: ages, sampled every 10 s"),
        "age, s",
        &[
            (
                "a measured link's estimate",
                ages.into_iter().filter(|a| a.is_finite()).collect(),
            ),
            ("a pair's value in the matrix", value_ages),
        ],
    )?;
    Ok(())
}

/// Empirical CDFs of `samples`, one line each, into `path`.
fn cdf(path: &Path, caption: &str, x: &str, samples: &[(&str, Vec<f64>)]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let top = samples
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.05;
    let frame = mgrp_tool::plot::Frame::new(
        caption.to_owned(),
        (0.0..top, x),
        (0.0..1.0, "share"),
        SeriesLabelPosition::LowerRight,
    );
    mgrp_tool::plot::draw(path, frame, |chart| {
        for (i, (name, values)) in samples.iter().enumerate() {
            let pts = mgrp_tool::plot::cdf_steps(values, top);
            if pts.is_empty() {
                continue;
            }
            let count = values.iter().filter(|x| x.is_finite()).count();
            let style = Palette99::pick(i).to_rgba().stroke_width(2);
            chart
                .draw_series(LineSeries::new(pts, style))?
                .label(format!("{name} ({count})"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], style));
        }
        Ok(())
    })
}

fn main() -> ExitCode {
    if let Some(code) = embed::embedded() {
        return code;
    }
    let args = Args::parse();
    if !args.analyse && !mgrp_testbed::is_root() {
        eprintln!("mesh_scale: needs root to create network namespaces (--analyse does not)");
        return ExitCode::FAILURE;
    }
    let done = if args.analyse { Ok(()) } else { measure(&args) };
    match done.and_then(|()| analyse(&args.out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mesh_scale: {e:#}");
            ExitCode::FAILURE
        }
    }
}
