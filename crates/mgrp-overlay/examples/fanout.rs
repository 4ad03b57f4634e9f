//! Bench of one node and many neighbours measuring each other at once: a hub and up
//! to eight neighbours around a router, each path between the hub and a neighbour
//! with a bottleneck of its own rate at the router. `--direction in` (the default):
//! every neighbour's overlay measures the path from the hub (the bottleneck a `tbf` on
//! the neighbour's downlink), all served by the hub's one sender through the hub's
//! one mgrpd. `--direction out`: the hub's overlay measures the path from every
//! neighbour (the bottleneck an HTB class per neighbour on the router's link to the
//! hub, so the paths share nothing but the hub), every probe arriving at the hub's one
//! mgrpd. Each link is measured by pathChirp and badabing continuously and by pathload
//! every two minutes. Prints per link and method: estimates per minute, the longest
//! stretch without an estimate, the error against the shaped truth (pathChirp,
//! pathload) or the loss-episode frequency it read on a path with no cross traffic
//! (badabing); and CPU and memory of the hub's overlay and mgrpd and of the
//! neighbours'. `--only METHOD` with `--neighbours 1` measures one link by one method
//! alone: the figures to hold the others against (`--only` again adds a method).
//!
//! Root only (network namespaces):
//!
//! ```sh
//! cargo run --release -p mgrp-overlay --example fanout -- --neighbours 8 --minutes 10
//! cargo run --release -p mgrp-overlay --example fanout -- --direction out --neighbours 8 --minutes 10
//! cargo run --release -p mgrp-overlay --example fanout -- --neighbours 1 --only pathchirp --minutes 4
//! ```
//!
//! The daemons and overlays are this binary, started as `fanout mgrpd ...` and
//! `fanout overlay ...`.

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
use mgrp_testbed::traffic::ip_level_truth;
use serde_json::Value;
use support::{Meter, quantile};

/// The bottleneck of each neighbour's path, Mbit/s, in order.
const DOWNLINKS: [f64; 8] = [6.0, 8.0, 10.0, 12.0, 6.0, 8.0, 10.0, 12.0];
/// Where each overlay's API listens, on its host's address.
const API_PORT: u16 = 7700;

/// A method measured on every link: link name, method, interval and time limit
/// (seconds), and the IP size of its probes the truth is computed for.
struct Method {
    link: &'static str,
    method: &'static str,
    interval: u32,
    time_limit: u32,
    probe_bytes: u32,
}

const METHODS: [Method; 3] = [
    Method {
        link: "chirp",
        method: "pathchirp",
        interval: 10,
        time_limit: 20,
        probe_bytes: 1028,
    },
    Method {
        link: "loss",
        method: "badabing",
        interval: 10,
        time_limit: 20,
        probe_bytes: 0,
    },
    Method {
        link: "abw",
        method: "pathload-fast",
        interval: 120,
        time_limit: 60,
        probe_bytes: 228,
    },
];

/// Which way the links go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Direction {
    /// Every neighbour measures the path from the hub.
    In,
    /// The hub measures the path from every neighbour.
    Out,
}

#[derive(Debug, Parser)]
#[command(
    about = "One mgrp-overlay node and many neighbours measuring at once, against each link alone"
)]
struct Args {
    /// `in`: the neighbours measure the hub's paths to them; `out`: the hub measures
    /// their paths to it.
    #[arg(long, value_enum, default_value_t = Direction::In)]
    direction: Direction,
    /// Neighbours measuring the hub, 1 to 8.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=8))]
    neighbours: u8,
    /// Length of the run, minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Measure by these methods only (pathchirp, badabing, pathload-fast; repeatable).
    #[arg(long, value_parser = ["pathchirp", "badabing", "pathload-fast"])]
    only: Vec<String>,
}

fn methods(args: &Args) -> Vec<&'static Method> {
    METHODS
        .iter()
        .filter(|m| args.only.is_empty() || args.only.iter().any(|o| o == m.method))
        .collect()
}

/// The configuration of a node that serves every neighbour's links from it.
fn serving_config(name: &str, addr: std::net::Ipv4Addr, socket: &std::path::Path) -> String {
    // Every neighbour's badabing alone sends several hundred MB an hour.
    format!(
        "name = \"{name}\"\nlisten = \"{addr}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\nhistory = 10000\n[serve]\nmax-mb-per-hour = 100000\n",
        socket.display()
    )
}

/// The configuration of a node that measures the links `from` (a suffix for the link
/// names, the sender's address and name), by `methods`, at most `max_running`
/// exclusive runs into it at once.
fn measuring_config(
    name: &str,
    addr: std::net::Ipv4Addr,
    socket: &std::path::Path,
    from: &[(String, std::net::Ipv4Addr, String)],
    methods: &[&Method],
    max_running: usize,
) -> String {
    let mut c = format!(
        "name = \"{name}\"\nlisten = \"{addr}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\nhistory = 10000\nmax-running = {max_running}\n",
        socket.display()
    );
    for (suffix, sender, neighbour) in from {
        for m in methods {
            c.push_str(&format!(
                "[[link]]\nname = \"{}{suffix}\"\nfrom = \"{sender}\"\nneighbour = \"{neighbour}\"\nmethod = \"{}\"\ninterval = \"{}s\"\ntime-limit = \"{}s\"\nbackoff = \"2s\"\nmax-backoff = \"20s\"\n",
                m.link, m.method, m.interval, m.time_limit
            ));
        }
    }
    c
}

/// The bottleneck of each neighbour's path to the hub: on the router's link to the hub,
/// an HTB class per neighbour (chosen by its source address) at `rates` Mbit/s, each
/// with the drop-tail queue of 100 ms and the one-packet burst the `tbf` downlinks
/// have; anything else unshaped.
fn shape_uplinks(star: &Star, rates: &[f64]) -> anyhow::Result<()> {
    let r = &star.router;
    let route = r.exec(&["ip", "-o", "route", "get", &star.addrs[0].to_string()])?;
    let dev = route
        .split_whitespace()
        .skip_while(|w| *w != "dev")
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no device in the router's route to the hub: {route}"))?
        .to_string();
    let tc = |args: &[&str]| -> anyhow::Result<()> {
        let mut all = vec!["tc"];
        all.extend_from_slice(args);
        r.exec(&all).map(|_| ())
    };
    tc(&[
        "qdisc", "add", "dev", &dev, "root", "handle", "1:", "htb", "default", "99",
    ])?;
    tc(&[
        "class", "add", "dev", &dev, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit",
    ])?;
    tc(&[
        "class", "add", "dev", &dev, "parent", "1:1", "classid", "1:99", "htb", "rate", "10gbit",
    ])?;
    for (i, rate) in rates.iter().enumerate() {
        let class = format!("1:{}", i + 10);
        let rate_arg = format!("{rate}mbit");
        // 100 ms at the rate, as the downlinks' tbf latency.
        let limit = format!("{}", (rate * 1e6 / 8.0 * 0.1) as u64);
        tc(&[
            "class", "add", "dev", &dev, "parent", "1:1", "classid", &class, "htb", "rate",
            &rate_arg, "ceil", &rate_arg, "burst", "1540", "cburst", "1540",
        ])?;
        tc(&[
            "qdisc", "add", "dev", &dev, "parent", &class, "bfifo", "limit", &limit,
        ])?;
        let src = format!("{}/32", star.addrs[i + 1]);
        tc(&[
            "filter", "add", "dev", &dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "src", &src, "flowid", &class,
        ])?;
    }
    Ok(())
}

/// One link's figures at the end.
#[derive(Debug, Default)]
struct Figures {
    runs: u64,
    estimates: u64,
    /// Longest time without an estimate, from the first one to the end, s.
    longest_gap: f64,
    /// Errors against the truth, % (bandwidth), or loss-episode frequencies, % of
    /// slots (badabing).
    values: Vec<f64>,
    /// The same before the adjustment for application traffic the sender routed to
    /// the host (pathChirp subtracts it), %.
    unadjusted: Vec<f64>,
    probe_bytes: u64,
}

fn bench(args: &Args) -> anyhow::Result<()> {
    ensure!(args.minutes > 0.0, "--minutes must be above 0");
    let n = usize::from(args.neighbours);
    let methods = methods(args);
    let mut downlinks = vec![None];
    downlinks.extend(DOWNLINKS[..n].iter().map(|r| {
        (args.direction == Direction::In).then(|| (format!("{r}mbit"), "1540".to_string()))
    }));
    let star = Star::new(&downlinks)?;
    if args.direction == Direction::Out {
        shape_uplinks(&star, &DOWNLINKS[..n])?;
    }
    let (r, addrs) = (&star.router, star.addrs.clone());
    let me = std::env::current_exe()?;
    // Riders wait at most 1 ms (hosts that serve badabing links, see its guide).
    let daemons = star.daemons(&me, &["mgrpd"], &["--hold", "1ms"])?;
    let dir = TempDir::new("mgrp-fanout")?;
    let mut overlays = Vec::new();
    let name = |i: usize| {
        if i == 0 {
            "hub".to_string()
        } else {
            format!("n{i}")
        }
    };
    for (i, ns) in star.hosts.iter().enumerate() {
        let socket = &daemons[i].socket;
        let text = match (args.direction, i) {
            (Direction::In, 0) | (Direction::Out, 1..) => {
                serving_config(&name(i), addrs[i], socket)
            }
            (Direction::In, _) => measuring_config(
                &name(i),
                addrs[i],
                socket,
                &[(String::new(), addrs[0], name(0))],
                &methods,
                1,
            ),
            (Direction::Out, 0) => {
                let from: Vec<_> = (1..=n)
                    .map(|j| (format!("-n{j}"), addrs[j], name(j)))
                    .collect();
                // Each path's bottleneck is its own: as many exclusive runs into the
                // hub at once as it has neighbours.
                measuring_config(&name(0), addrs[0], socket, &from, &methods, n)
            }
        };
        let p = dir.0.join(format!("n{i}.toml"));
        std::fs::write(&p, text)?;
        overlays.push(embed::overlay(ns, &p, "warn")?);
    }
    let mut meter = Meter::start(&overlays, &daemons);
    let started = Instant::now();
    let start_unix = mgrp_rt::unix_now();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    eprintln!(
        "fanout: {}, by {:?}, bottlenecks {:?} Mbit/s, {} min",
        match args.direction {
            Direction::In => format!("{n} neighbours measuring the hub"),
            Direction::Out => format!("the hub measuring {n} neighbours"),
        },
        methods.iter().map(|m| m.method).collect::<Vec<_>>(),
        &DOWNLINKS[..n],
        args.minutes
    );
    while started.elapsed() < total {
        meter.sample();
        std::thread::sleep(Duration::from_secs(1));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let end_unix = mgrp_rt::unix_now();
    let used = meter.used();

    let mut figures: BTreeMap<(usize, &str), Figures> = BTreeMap::new();
    for (i, a) in addrs.iter().enumerate().skip(1) {
        for m in &methods {
            let (api, link) = match args.direction {
                Direction::In => (*a, m.link.to_string()),
                Direction::Out => (addrs[0], format!("{}-n{i}", m.link)),
            };
            let (status, body) = request_in(
                r,
                &format!("{api}:{API_PORT}"),
                "GET",
                &format!("/v1/links/{link}/history?limit=10000"),
            )?;
            ensure!(status == 200, "{link} at {api}: {status} {body}");
            let h: Value = serde_json::from_str(&body)?;
            let f = figures.entry((i, m.method)).or_default();
            let truth = ip_level_truth(DOWNLINKS[i - 1], m.probe_bytes.max(1), &[]);
            let mut last = None::<f64>;
            for e in h["estimates"].as_array().into_iter().flatten() {
                let Some(end) = e["ended_at"].as_f64() else {
                    continue;
                };
                f.runs += 1;
                f.probe_bytes += e["probe_bytes"].as_u64().unwrap_or(0);
                if e["outcome"] != "estimate" {
                    continue;
                }
                f.estimates += 1;
                if let Some(l) = last {
                    f.longest_gap = f.longest_gap.max(end - l);
                }
                last = Some(end);
                if m.method == "badabing" {
                    if let Some(freq) = e["loss"]["episode_frequency"].as_f64() {
                        f.values.push(freq * 100.0);
                    }
                } else if let (Some(lo), Some(hi)) = (e["low_bps"].as_f64(), e["high_bps"].as_f64())
                {
                    f.values
                        .push(((lo + hi) / 2.0 / 1e6 - truth) / truth * 100.0);
                    if let (Some(lo), Some(hi)) = (
                        e["unadjusted_low_bps"].as_f64(),
                        e["unadjusted_high_bps"].as_f64(),
                    ) {
                        f.unadjusted
                            .push(((lo + hi) / 2.0 / 1e6 - truth) / truth * 100.0);
                    }
                }
            }
            if let Some(l) = last {
                f.longest_gap = f.longest_gap.max(end_unix - l);
            } else {
                f.longest_gap = end_unix - start_unix;
            }
        }
    }
    drop(overlays);
    drop(daemons);

    let minutes = elapsed / 60.0;
    mgrp_rt::outln!(
        "\n## {} by {}: {minutes:.1} min, load {}\n",
        match args.direction {
            Direction::In => format!("One node measured by {n} neighbours"),
            Direction::Out => format!("One node measuring {n} neighbours"),
        },
        methods
            .iter()
            .map(|m| m.method)
            .collect::<Vec<_>>()
            .join(", "),
        mgrp_testbed::host::load_averages()
    );
    mgrp_rt::outln!(
        "| link | method | cycle s | runs | estimates/min | longest without s | median error % (episode frequency % for badabing) | median \\|error\\| % | p90 \\|error\\| % | median error unadjusted % | probe MB/h |"
    );
    mgrp_rt::outln!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut per_method: BTreeMap<&str, (f64, Vec<f64>, f64)> = BTreeMap::new();
    for ((i, method), f) in &mut figures {
        let m = methods
            .iter()
            .find(|m| m.method == *method)
            .expect("measured");
        let cycle = f64::from(m.interval + m.time_limit);
        let mut abs: Vec<f64> = f.values.iter().map(|v| v.abs()).collect();
        mgrp_rt::outln!(
            "| {} ({} Mbit/s) | {method} | {cycle:.0} | {} | {:.2} | {:.0} | {:+.1} | {:.1} | {:.1} | {} | {:.1} |",
            match args.direction {
                Direction::In => format!("hub → n{i}"),
                Direction::Out => format!("n{i} → hub"),
            },
            DOWNLINKS[i - 1],
            f.runs,
            f.estimates as f64 / minutes,
            f.longest_gap,
            quantile(&mut f.values.clone(), 0.5),
            quantile(&mut abs.clone(), 0.5),
            quantile(&mut abs, 0.9),
            if f.unadjusted.is_empty() {
                "–".to_string()
            } else {
                format!("{:+.1}", quantile(&mut f.unadjusted.clone(), 0.5))
            },
            f.probe_bytes as f64 / 1e6 / (elapsed / 3600.0),
        );
        let e = per_method.entry(method).or_default();
        e.0 += f.estimates as f64 / minutes;
        e.1.extend(f.values.iter().map(|v| v.abs()));
        e.2 = e.2.max(f.longest_gap / cycle);
    }
    mgrp_rt::outln!(
        "\n| method | estimates/min per link | median \\|error\\| % (frequency % for badabing) | longest without an estimate, cycles |\n|---|---|---|---|"
    );
    for (method, (rate, mut values, worst)) in per_method {
        mgrp_rt::outln!(
            "| {method} | {:.2} | {:.1} | {worst:.1} |",
            rate / n as f64,
            quantile(&mut values, 0.5)
        );
    }
    mgrp_rt::outln!("\n| process | CPU % | peak RSS MB |\n|---|---|---|");
    let mut neighbours = (0.0, 0.0, 0f64, 0f64, 0usize);
    for u in &used {
        if u.node == 0 {
            let name = if u.overlay {
                "hub overlay"
            } else {
                "hub mgrpd"
            };
            mgrp_rt::outln!("| {name} | {:.1} | {:.1} |", u.cpu_pct, u.peak_rss_mb);
        } else if u.overlay {
            neighbours.0 += u.cpu_pct;
            neighbours.2 = neighbours.2.max(u.peak_rss_mb);
            neighbours.4 += 1;
        } else {
            neighbours.1 += u.cpu_pct;
            neighbours.3 = neighbours.3.max(u.peak_rss_mb);
        }
    }
    let count = neighbours.4.max(1) as f64;
    mgrp_rt::outln!(
        "| neighbour overlay (mean) | {:.1} | {:.1} |\n| neighbour mgrpd (mean) | {:.1} | {:.1} |",
        neighbours.0 / count,
        neighbours.2,
        neighbours.1 / count,
        neighbours.3
    );
    Ok(())
}

fn main() -> ExitCode {
    support::main_of::<Args>("fanout", bench)
}
