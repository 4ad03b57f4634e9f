//! Passive when traffic runs, active when none (the Wren seed, issue "passive
//! estimates") on the namespace testbed: two overlay nodes in-process, node 1
//! measuring the path from node 0 through a 10 Mbit/s bottleneck (node 1's downlink)
//! that a third host loads with UDP cross traffic changing in steps.
//!
//! Part 1, Wren's Figures 1–4: per second, the truth (what the bottleneck leaves
//! the application), each passive technique — the kernel's delivery rate
//! (passive-tcp, Wren's "benchmark"), the TCP window (cwnd · MSS / RTT), dispersion
//! and trend of the segments' timing — and an active method (pathChirp every 5 s),
//! for a bulk CUBIC transfer, a bulk BBR transfer and a bursty application (1 MB
//! every second, compute-then-communicate).
//!
//! Part 2: the overlay over the same 10 minutes (traffic schedule and cross traffic
//! fixed below) in three modes — active only, passive only, passive when traffic
//! runs — with each second's estimate error against the truth, estimate age p50/p99
//! and active probe bytes per hour.
//!
//! Run as root: `cargo run --release --example passive -- --out docs/passive`
//! (about 45 minutes); `--analyse` redoes the tables and plots from the JSON.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use mgrp_overlay::config::Config;
use mgrp_overlay::node::Node;
use mgrp_testbed::Star;
use mgrp_testbed::traffic::{self, Source, Steps};
use mgrp_views::link::LinkView;
use serde::{Deserialize, Serialize};

/// Passive and active estimates of one path, per second, against the truth (root).
#[derive(Debug, Parser)]
#[command(name = "passive")]
struct Args {
    /// Where the JSON, results.md and the plots go.
    #[arg(long, default_value = "docs/passive")]
    out: PathBuf,
    /// Only rewrite the results from the JSON in the output directory.
    #[arg(long)]
    analyse: bool,
    /// Seconds of each part-1 scenario.
    #[arg(long, default_value_t = 120)]
    scenario_seconds: u64,
    /// Seconds of each part-2 mode.
    #[arg(long, default_value_t = 600)]
    mode_seconds: u64,
}

/// The bottleneck, Mbit/s (tbf on node 1's downlink, counting Ethernet headers).
const CAPACITY_MBPS: f64 = 10.0;
/// Cross traffic packets, IP bytes.
const CROSS_SIZE: u32 = 1000;
/// Node 0's control port.
const PORT: u16 = 7788;
/// Part 2's link interval, s.
const INTERVAL_S: u64 = 30;

/// The cross traffic: IP Mbit/s in 50 s steps.
fn cross_steps() -> Steps {
    Steps {
        mbps: vec![1.0, 3.0, 5.0, 2.0],
        step: Duration::from_secs(50),
    }
}

/// What the application sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum App {
    None,
    Cubic,
    Bbr,
    /// 1 MB at once every second.
    Bursty,
}

/// Part 2's application schedule: (from s, app).
const SCHEDULE: [(u64, App); 5] = [
    (0, App::None),
    (60, App::Cubic),
    (300, App::None),
    (420, App::Bbr),
    (540, App::None),
];

fn app_at(t: u64) -> App {
    SCHEDULE
        .iter()
        .rev()
        .find(|(from, _)| t >= *from)
        .map_or(App::None, |s| s.1)
}

/// What a column reads from a second.
type Pick = dyn Fn(&Second) -> Option<f64>;

/// One second.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Second {
    t: f64,
    /// What the bottleneck leaves the application, IP Mbit/s.
    truth: f64,
    cross: f64,
    /// The application's payload rate this second, Mbit/s.
    app: f64,
    tcp: Option<f64>,
    window: Option<f64>,
    dispersion: Option<f64>,
    trend: Option<f64>,
    trend_low: Option<f64>,
    trend_high: Option<f64>,
    /// The latest active estimate (middle of its range) and its method.
    active: Option<f64>,
    active_method: Option<String>,
    /// The link's current estimate, its method and age (part 2).
    estimate: Option<f64>,
    method: Option<String>,
    age: Option<f64>,
    probe_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Run {
    name: String,
    seconds: Vec<Second>,
    load_before: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let measured = if args.analyse { Ok(()) } else { measure(&args) };
    mgrp_experiments::experiment::exit("passive", measured.and_then(|()| analyse(&args.out)))
}

/// The testbed: node 0 on host 0, node 1 on host 1 (behind the bottleneck), host 2
/// sending the cross traffic.
struct Bed {
    star: Star,
    nodes: Vec<Node>,
    cross: Option<Source>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.cross.take();
        for n in self.nodes.drain(..) {
            n.stop();
        }
    }
}

fn bed(links: &str, passive: &str) -> anyhow::Result<Bed> {
    let star = Star::new(&[
        None,
        Some((format!("{CAPACITY_MBPS}mbit"), "1540".into())),
        None,
    ])?;
    let a0 = star.addrs[0];
    let c0 = Config::from_toml(
        &format!("name = \"n0\"\n[serve]\ntransports = [\"udp\"]\nudp-port = {PORT}\n"),
        None,
    )?;
    let c1 = Config::from_toml(
        &format!(
            "name = \"n1\"\n[serve]\ntransports = []\n{passive}\n{}",
            links.replace("FROM", &a0.to_string())
        ),
        None,
    )?;
    let n0 = star.hosts[0].run(|| Node::start(c0))??;
    let n1 = star.hosts[1].run(|| Node::start(c1))??;
    let cross = traffic::udp_steps(
        &star.hosts[2],
        &star.hosts[1],
        star.addrs[1].into(),
        6000,
        cross_steps(),
        CROSS_SIZE as usize,
    )?;
    Ok(Bed {
        star,
        nodes: vec![n0, n1],
        cross: Some(cross),
    })
}

/// An application flow from host 0 to host 1.
struct AppFlow {
    source: Option<Source>,
    bursty: Option<(Arc<AtomicBool>, std::thread::JoinHandle<u64>)>,
    bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl AppFlow {
    fn start(b: &Bed, app: App, port: u16) -> anyhow::Result<Self> {
        let (h0, h1, to) = (&b.star.hosts[0], &b.star.hosts[1], b.star.addrs[1]);
        let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Ok(match app {
            App::None => Self {
                source: None,
                bursty: None,
                bytes,
            },
            App::Cubic | App::Bbr => Self {
                source: Some(traffic::tcp_bulk(
                    h0,
                    h1,
                    to.into(),
                    port,
                    if app == App::Cubic { "cubic" } else { "bbr" },
                )?),
                bursty: None,
                bytes,
            },
            App::Bursty => {
                let listener = h1.run(|| std::net::TcpListener::bind((to, port)))??;
                let counted = bytes.clone();
                std::thread::spawn(move || {
                    if let Ok((mut s, _)) = listener.accept() {
                        let mut buf = vec![0u8; 1 << 16];
                        while let Ok(n) = std::io::Read::read(&mut s, &mut buf) {
                            if n == 0 {
                                break;
                            }
                            counted.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                });
                let mut s = h0.run(|| TcpStream::connect((to, port)))??;
                let stop = Arc::new(AtomicBool::new(false));
                let flag = stop.clone();
                let t = std::thread::spawn(move || {
                    let burst = vec![7u8; 1 << 20];
                    let t0 = Instant::now();
                    let mut n = 0u32;
                    while !flag.load(Ordering::Relaxed) {
                        if s.write_all(&burst).is_err() {
                            break;
                        }
                        n += 1;
                        let due = t0 + Duration::from_secs(u64::from(n));
                        if let Some(d) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(d);
                        }
                    }
                    u64::from(n)
                });
                Self {
                    source: None,
                    bursty: Some((stop, t)),
                    bytes,
                }
            }
        })
    }

    fn bytes(&self) -> u64 {
        self.source
            .as_ref()
            .map_or_else(|| self.bytes.load(Ordering::Relaxed), Source::bytes)
    }
}

impl Drop for AppFlow {
    fn drop(&mut self) {
        if let Some((stop, t)) = self.bursty.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = t.join();
        }
    }
}

fn mid(v: &LinkView) -> Option<(f64, String, f64)> {
    let e = v.latest.as_ref()?;
    let (l, h) = (e.low_bps?, e.high_bps.or(e.low_bps)?);
    Some((
        (l + h) / 2.0 / 1e6,
        e.method.clone(),
        v.age_s.unwrap_or(0.0),
    ))
}

/// TCP window technique: the network-limited flows' cwnd · MSS / RTT, IP Mbit/s, as
/// node 0's sender reports them to host 1.
fn window(b: &Bed) -> Option<f64> {
    let from = b.star.addrs[0];
    let flows = b.star.hosts[1]
        .run(|| mgrp_tool::sender_tcp(&from.to_string(), PORT, None))
        .ok()?
        .ok()?;
    let w: f64 = flows
        .iter()
        .filter(|f| !f.sample.app_limited && f.sample.network_limited() && f.sample.rtt_s > 0.0)
        .map(|f| f64::from(f.sample.cwnd) * f64::from(f.sample.snd_mss + 52) * 8.0 / f.sample.rtt_s)
        .sum();
    (w > 0.0).then_some(w / 1e6)
}

/// Samples the link `link` (and `active` for part 1) of node 1 every second for
/// `seconds`, starting and stopping the application by `app_at(t)`.
fn sample(
    b: &Bed,
    name: &str,
    link: &str,
    active: Option<&str>,
    seconds: u64,
    app_at: &dyn Fn(u64) -> App,
    passive_only: bool,
) -> anyhow::Result<Run> {
    let load_before = mgrp_testbed::host::load();
    let shared = b.nodes[1].shared();
    let started = Instant::now();
    let mut flow: Option<(App, AppFlow)> = None;
    let mut out = Vec::new();
    let mut last_bytes = 0u64;
    let mut held: Option<(f64, f64)> = None; // passive-only: (Mbit/s, when)
    let mut port = 5500u16;
    for t in 0..seconds {
        let want = app_at(t);
        if flow.as_ref().map_or(App::None, |f| f.0) != want {
            flow = None;
            last_bytes = 0;
            if want != App::None {
                port += 1;
                flow = Some((want, AppFlow::start(b, want, port)?));
            }
        }
        let due = started + Duration::from_secs(t + 1);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let now = started.elapsed().as_secs_f64();
        let cross = cross_steps().at(Duration::from_secs(t));
        let truth = traffic::ip_level_truth(CAPACITY_MBPS, 1500, &[(cross, CROSS_SIZE)]);
        let bytes = flow.as_ref().map_or(0, |f| f.1.bytes());
        let app = bytes.saturating_sub(last_bytes) as f64 * 8.0 / 1e6;
        last_bytes = bytes;
        let v = shared.link(link).context("no such link")?;
        let p = v.passive.as_ref();
        let tcp = p
            .and_then(|p| p.last.as_ref())
            .and_then(|l| l.bps)
            .map(|x| x / 1e6);
        let timing = p.and_then(|p| p.timing.as_ref());
        let mbps = |x: Option<f64>| x.map(|x| x / 1e6);
        let mut s = Second {
            t: now,
            truth,
            cross,
            app,
            tcp,
            window: window(b),
            dispersion: mbps(timing.and_then(|t| t.dispersion_bps)),
            trend: mbps(timing.and_then(|t| t.trend_bps)),
            trend_low: mbps(timing.and_then(|t| t.trend_low_bps)),
            trend_high: mbps(timing.and_then(|t| t.trend_high_bps)),
            probe_bytes: v.probe_bytes,
            ..Second::default()
        };
        if let Some(a) = active.and_then(|a| shared.link(a)).as_ref().and_then(mid) {
            s.active = Some(a.0);
            s.active_method = Some(a.1);
        }
        if passive_only {
            if let Some(x) = tcp {
                held = Some((x, now));
            }
            if let Some((x, at)) = held {
                s.estimate = Some(x);
                s.method = Some("passive-tcp".into());
                s.age = Some(now - at);
            }
        } else if let Some((x, m, age)) = mid(&v) {
            s.estimate = Some(x);
            s.method = Some(m);
            s.age = Some(age);
        }
        out.push(s);
    }
    drop(flow);
    Ok(Run {
        name: name.into(),
        seconds: out,
        load_before,
    })
}

fn measure(args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let save = |run: &Run| -> anyhow::Result<()> {
        let path = args.out.join(format!("{}.json", run.name));
        std::fs::write(&path, serde_json::to_string_pretty(run)?)
            .with_context(|| format!("cannot write {}", path.display()))
    };
    // Part 1: passive-tcp and timing on a bandwidth link that never runs (1 h), an
    // active pathChirp link beside it every 5 s.
    let links = format!(
        "[[link]]\nname = \"abw\"\nfrom = \"FROM\"\nport = {PORT}\ntransport = \"udp\"\ninterval = \"3600s\"\n\
         [[link]]\nname = \"chirp\"\nfrom = \"FROM\"\nport = {PORT}\ntransport = \"udp\"\nmethod = \"pathchirp\"\n\
         interval = \"5s\"\nactive-always = true\n"
    );
    for (name, app) in [
        ("wren-cubic", App::Cubic),
        ("wren-bbr", App::Bbr),
        ("wren-bursty", App::Bursty),
    ] {
        eprintln!("passive: {name}, {} s", args.scenario_seconds);
        let b = bed(&links, "[btc]\nkernel-poll = \"1s\"\n")?;
        let run = sample(
            &b,
            name,
            "abw",
            Some("chirp"),
            args.scenario_seconds,
            &|t| {
                if t >= 5 { app } else { App::None }
            },
            false,
        )?;
        save(&run)?;
    }
    // Part 2: one link, three modes.
    let link = format!(
        "[[link]]\nname = \"abw\"\nfrom = \"FROM\"\nport = {PORT}\ntransport = \"udp\"\n\
         interval = \"INTERVAL\"\ntime-limit = \"25s\"\n"
    );
    for (name, passive, interval, only) in [
        (
            "mode-active-only",
            "[passive]\nenabled = false\n",
            INTERVAL_S,
            false,
        ),
        (
            "mode-passive-only",
            "[btc]\nkernel-poll = \"1s\"\n",
            3600,
            true,
        ),
        (
            "mode-passive-when-traffic",
            "[btc]\nkernel-poll = \"1s\"\n",
            INTERVAL_S,
            false,
        ),
    ] {
        eprintln!("passive: {name}, {} s", args.mode_seconds);
        let l = link.replace("INTERVAL", &format!("{interval}s"));
        let b = bed(&l, passive)?;
        let run = sample(&b, name, "abw", None, args.mode_seconds, &app_at, only)?;
        save(&run)?;
    }
    Ok(())
}

/// The load averages (1, 5, 15 min) of a /proc/loadavg line.
fn three(load: &str) -> String {
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn read(out: &Path, name: &str) -> anyhow::Result<Run> {
    let path = out.join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}: measure first", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// The `p`-quantile (0–1, nearest rank) of `v`, which it sorts.
fn pct(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    mgrp_core::schedule::percentile(v, p * 100.0)
}

fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

/// Median relative error and share within ±15 % of `f` over the seconds `keep` picks.
fn errors(
    run: &Run,
    keep: &dyn Fn(&Second) -> bool,
    f: &Pick,
) -> (Option<f64>, Option<f64>, usize) {
    let mut e: Vec<f64> = run
        .seconds
        .iter()
        .filter(|s| keep(s))
        .filter_map(|s| Some((f(s)? - s.truth).abs() / s.truth))
        .collect();
    let n = e.len();
    let within = (n > 0).then(|| e.iter().filter(|x| **x <= 0.15).count() as f64 / n as f64);
    (pct(&mut e, 0.5), within, n)
}

fn analyse(out: &Path) -> anyhow::Result<()> {
    let mut md = String::new();
    writeln!(md, "# Passive estimates: measured\n")?;
    writeln!(
        md,
        "Made by `cargo run --release --example passive -- --out docs/passive`. The truth is what the {CAPACITY_MBPS} Mbit/s bottleneck leaves besides the cross traffic, at the IP level for 1500-byte packets; every estimate here is an IP rate.\n"
    )?;
    writeln!(
        md,
        "## Part 1: each technique per second (Wren's Figures 1–4)\n"
    )?;
    writeln!(
        md,
        "Median relative error and share of seconds within ±15 % of the truth, while the application ran (from its 5th second):\n"
    )?;
    writeln!(
        md,
        "| scenario | passive-tcp | TCP window | passive-dispersion | passive-trend | pathChirp (active) | load before |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    let techniques: [(&str, &Pick); 5] = [
        ("passive-tcp", &|s| s.tcp),
        ("TCP window", &|s| s.window),
        ("passive-dispersion", &|s| s.dispersion),
        ("passive-trend", &|s| s.trend),
        ("pathChirp", &|s| s.active),
    ];
    for name in ["wren-cubic", "wren-bbr", "wren-bursty"] {
        let run = read(out, name)?;
        let mut row = format!("| {name} |");
        for (_, f) in &techniques {
            let (med, within, n) = errors(&run, &|s| s.t >= 10.0, *f);
            write!(
                row,
                " {} % ({} % of {n} s) |",
                fmt(med.map(|x| x * 100.0), 1),
                fmt(within.map(|x| x * 100.0), 0)
            )?;
        }
        writeln!(md, "{row} {} |", three(&run.load_before))?;
        let line = |f: &Pick| -> Vec<(f64, f64)> {
            run.seconds
                .iter()
                .filter_map(|s| Some((s.t, f(s)?)))
                .collect()
        };
        let points: Vec<(String, Vec<(f64, f64)>)> = techniques
            .iter()
            .map(|(n, f)| ((*n).to_string(), line(f)))
            .collect();
        mgrp_experiments::plot::series(
            &out.join(format!("{name}.svg")),
            &format!("{name}: estimates per second against the truth"),
            "Mbit/s",
            &[
                (
                    "truth (bottleneck less cross traffic)".into(),
                    line(&|s| Some(s.truth)),
                ),
                ("application payload rate".into(), line(&|s| Some(s.app))),
            ],
            &points,
        )?;
    }
    writeln!(md)?;
    writeln!(
        md,
        "passive-dispersion is a bound from above (Wren's reading, and ours): the share of seconds it was at least 95 % of the truth, and its median over the truth:\n"
    )?;
    writeln!(
        md,
        "| scenario | dispersion ≥ 0.95 × truth | median dispersion / truth |"
    )?;
    writeln!(md, "|---|---|---|")?;
    for name in ["wren-cubic", "wren-bbr", "wren-bursty"] {
        let run = read(out, name)?;
        let mut r: Vec<f64> = run
            .seconds
            .iter()
            .filter(|s| s.t >= 10.0)
            .filter_map(|s| Some(s.dispersion? / s.truth))
            .collect();
        let above = r.iter().filter(|x| **x >= 0.95).count() as f64 / r.len().max(1) as f64;
        writeln!(
            md,
            "| {name} | {:.0} % of {} s | {} |",
            above * 100.0,
            r.len(),
            fmt(pct(&mut r, 0.5), 2)
        )?;
    }
    writeln!(md)?;
    for name in ["wren-cubic", "wren-bbr", "wren-bursty"] {
        writeln!(md, "![{name}]({name}.svg)\n")?;
    }
    writeln!(
        md,
        "## Part 2: the overlay in three modes over the same 10 minutes\n"
    )?;
    writeln!(
        md,
        "Schedule: no application 0–60 s, bulk CUBIC 60–300 s, none 300–420 s, bulk BBR 420–540 s, none 540–600 s; cross traffic 1, 3, 5, 2 Mbit/s in 50 s steps; link interval {INTERVAL_S} s (pathload-fast).\n"
    )?;
    writeln!(
        md,
        "| mode | error p50 (all) | within ±15 % (bulk flow) | error p50 (bulk flow) | age p50 | age p99 | age p99 (bulk flow) | active probe MB/hour | … while a flow runs | first active estimate after traffic stops | load before |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut plots = Vec::new();
    for (name, freshest) in [
        ("mode-active-only", false),
        ("mode-passive-only", false),
        ("mode-passive-when-traffic", false),
        ("mode-passive-when-traffic", true),
    ] {
        let mut run = read(out, name)?;
        if freshest {
            // What the API serves beside the recorded estimate: the neighbour's
            // last passive-tcp reading (at most a poll, 1 s, old) while there is one.
            for s in &mut run.seconds {
                if let Some(x) = s.tcp {
                    s.estimate = Some(x);
                    s.method = Some("passive-tcp".into());
                    s.age = Some(0.5);
                }
            }
            run.name = format!("{name} (freshest served)");
        }
        let label = run.name.clone();
        let est = |s: &Second| s.estimate;
        let (all, _, _) = errors(&run, &|_| true, &est);
        let bulk = |s: &Second| {
            let t = s.t as u64;
            app_at(t) != App::None && app_at(t.saturating_sub(10)) != App::None
        };
        let (bulk_med, bulk_within, _) = errors(&run, &bulk, &est);
        let mut ages: Vec<f64> = run.seconds.iter().filter_map(|s| s.age).collect();
        let mut bulk_ages: Vec<f64> = run
            .seconds
            .iter()
            .filter(|s| bulk(s))
            .filter_map(|s| s.age)
            .collect();
        let secs = run.seconds.last().map_or(1.0, |s| s.t);
        let mb_h = run.seconds.last().map_or(0, |s| s.probe_bytes) as f64 / 1e6 / secs * 3600.0;
        // Probe bytes sent while an application flow ran (each second's increase).
        let (mut flow_bytes, mut flow_secs) = (0u64, 0.0);
        for w in run.seconds.windows(2) {
            if app_at(w[1].t as u64) != App::None {
                flow_bytes += w[1].probe_bytes.saturating_sub(w[0].probe_bytes);
                flow_secs += w[1].t - w[0].t;
            }
        }
        let flow_mb_h = flow_bytes as f64 / 1e6 / flow_secs.max(1.0) * 3600.0;
        // After each stop of the application: seconds until an active estimate is
        // recorded.
        let mut after = Vec::new();
        for stop in [300u64, 540] {
            let first = run
                .seconds
                .iter()
                .filter(|s| s.t >= stop as f64)
                .find(|s| {
                    s.method
                        .as_deref()
                        .is_some_and(|m| !m.starts_with("passive"))
                        && s.age.is_some_and(|a| s.t - a >= stop as f64)
                })
                .map(|s| s.t - s.age.unwrap_or(0.0) - stop as f64);
            after.push(first.map_or_else(|| "none".to_string(), |x| format!("{x:.0} s")));
        }
        writeln!(
            md,
            "| {label} | {} % | {} % | {} % | {} s | {} s | {} s | {mb_h:.1} | {flow_mb_h:.1} | {} | {} |",
            fmt(all.map(|x| x * 100.0), 1),
            fmt(bulk_within.map(|x| x * 100.0), 0),
            fmt(bulk_med.map(|x| x * 100.0), 1),
            fmt(pct(&mut ages.clone(), 0.5), 1),
            fmt(pct(&mut ages, 0.99), 1),
            fmt(pct(&mut bulk_ages, 0.99), 1),
            after.join(", "),
            three(&run.load_before)
        )?;
        let line = |f: &Pick| -> Vec<(f64, f64)> {
            run.seconds
                .iter()
                .filter_map(|s| Some((s.t, f(s)?)))
                .collect()
        };
        if freshest {
            continue;
        }
        mgrp_experiments::plot::series(
            &out.join(format!("{name}.svg")),
            &format!("{name}: the link's estimate per second"),
            "Mbit/s",
            &[
                ("truth".into(), line(&|s| Some(s.truth))),
                ("application payload rate".into(), line(&|s| Some(s.app))),
            ],
            &[("the link's current estimate".into(), line(&est))],
        )?;
        plots.push(name);
    }
    writeln!(md)?;
    for name in plots {
        writeln!(md, "![{name}]({name}.svg)\n")?;
    }
    std::fs::write(out.join("results.md"), md)?;
    eprintln!("passive: wrote {}", out.join("results.md").display());
    Ok(())
}
