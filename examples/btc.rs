//! What TCP will get (the BTC seed's §III–V) on the namespace testbed: on each of a set
//! of paths fixed in advance, every prediction method, then two bulk TCP transfers
//! (CUBIC, then BBR) as the truth. Writes each path's measurements as JSON, then
//! `results.md` (per-path table, ratio and pairwise figures per method), ratio CDFs
//! per congestion control and the squeezed-pair histograms of one path of each class.
//!
//! Run as root: `cargo run --release --example btc -- --help`. About 35 minutes for
//! the first 20 paths, 55 for all 32. A path whose JSON is in the output directory is not measured again
//! (`--fresh` measures everything anew); `--analyse` only rewrites the results from
//! the JSON there.
//!
//! `--history` visits each path twice instead, with a change fixed in advance on
//! every second path between the visits, and predicts the second visit's transfers
//! from the probes, from the first visit's transfers and from the two blended
//! (`docs/btc/history` by default; about four minutes a path).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use btc_rs::history;
use btc_rs::model::{self, Factors, Inputs};
use btc_rs::squeezed::PathClass;
use clap::Parser;
use mgrp_experiments::experiment;
use mgrp_testbed::paper::{Bottleneck, C2, M5, Testbed};
use mgrp_testbed::traffic::{self, Source, Web};
use mgrp_tool::Transport;
use serde::{Deserialize, Serialize};

/// Predicts bulk TCP transfer rates on namespace paths by every method and compares
/// them with real CUBIC and BBR transfers (root).
#[derive(Debug, Parser)]
#[command(name = "btc")]
struct Args {
    /// Where the per-path JSON, results.md and the plots go [default: docs/btc, with
    /// --history docs/btc/history].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Visit each path twice: probes and transfers; then, on every second path of the
    /// list, a change of its cross traffic or its loss; then probes and transfers
    /// again. The second visit's transfers are predicted from the probes, from the
    /// first visit's transfers (history) and from the two blended.
    #[arg(long)]
    history: bool,
    /// Measure only these paths (comma-separated names, e.g. edge-udp-40ms).
    #[arg(long)]
    paths: Option<String>,
    /// Measure every path anew, even those with JSON in the output directory.
    #[arg(long)]
    fresh: bool,
    /// Only rewrite the results from the JSON in the output directory.
    #[arg(long)]
    analyse: bool,
    /// Seconds each truth transfer runs.
    #[arg(long, default_value_t = 10)]
    transfer_seconds: u64,
    /// Seconds badabing measures loss.
    #[arg(long, default_value_t = 20)]
    badabing_seconds: u64,
}

impl Args {
    fn out(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            PathBuf::from(if self.history {
                "docs/btc/history"
            } else {
                "docs/btc"
            })
        })
    }
}

/// Cross traffic and where the tight link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Cross {
    /// No cross traffic; the 10 Mbit/s bottleneck is narrow and tight.
    Quiet,
    /// One bulk CUBIC flow on the 10 Mbit/s bottleneck (tight at the edge, few flows).
    EdgeTcp,
    /// 4 Mbit/s of Poisson UDP on the 10 Mbit/s bottleneck.
    EdgeUdp,
    /// The source's own link is the 10 Mbit/s narrow link; the bottleneck router's
    /// link is 30 Mbit/s, carrying web-like TCP (many small flows, ~20 Mbit/s).
    UpWeb,
    /// As `UpWeb` with 24 Mbit/s of Poisson UDP instead.
    UpUdp,
    /// One bulk BBR flow on the 10 Mbit/s bottleneck.
    EdgeBbr,
    /// A bulk CUBIC flow and a bulk BBR flow on the 10 Mbit/s bottleneck.
    EdgeMixed,
    /// Four bulk CUBIC flows sharing the 10 Mbit/s bottleneck with the transfer.
    EdgeShared,
    /// 7 Mbit/s of Poisson UDP on the 10 Mbit/s bottleneck.
    EdgeUdpHeavy,
    /// As `UpWeb` with two bulk CUBIC flows on the 30 Mbit/s router instead: the
    /// router is tight with no room left, the source's link narrow.
    UpTcp,
}

impl Cross {
    /// The settings of the first 20 paths.
    const FIRST: [Self; 5] = [
        Self::Quiet,
        Self::EdgeTcp,
        Self::EdgeUdp,
        Self::UpWeb,
        Self::UpUdp,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Quiet => "quiet",
            Self::EdgeTcp => "edge-tcp",
            Self::EdgeUdp => "edge-udp",
            Self::UpWeb => "up-web",
            Self::UpUdp => "up-udp",
            Self::EdgeBbr => "edge-bbr",
            Self::EdgeMixed => "edge-mixed",
            Self::EdgeShared => "edge-shared",
            Self::EdgeUdpHeavy => "edge-udp-heavy",
            Self::UpTcp => "up-tcp",
        }
    }

    /// The bottleneck router's rate, Mbit/s.
    fn router_mbps(self) -> u32 {
        match self {
            Self::UpWeb | Self::UpUdp | Self::UpTcp => 30,
            _ => 10,
        }
    }

    /// Whether the source's own link is the narrow one (10 Mbit/s).
    fn narrow_at_source(self) -> bool {
        matches!(self, Self::UpWeb | Self::UpUdp | Self::UpTcp)
    }
}

/// Round trips of the paths, ms.
const RTTS_MS: [u32; 4] = [10, 40, 80, 150];
/// Random loss on the bottleneck, cycled over the paths.
const LOSSES: [f64; 3] = [0.0, 0.001, 0.01];
/// The narrow link's rate, Mbit/s.
const NARROW_MBPS: u32 = 10;
/// Segment size for Mathis's bound (Ethernet, timestamps).
const MSS: u32 = 1448;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PathSpec {
    name: String,
    cross: Cross,
    rtt_ms: u32,
    loss: f64,
}

impl PathSpec {
    /// Whether it is one of the first 20 paths (not [`ADDED`]).
    fn first_20(&self) -> bool {
        let first = Cross::FIRST.len() * RTTS_MS.len();
        paths().iter().take(first).any(|p| p.name == self.name)
    }
}

/// The paths added after the first 20 were measured, fixed before any of them was
/// (other round trips and losses; competing BBR and mixed flows, heavier UDP, a
/// bottleneck shared by four flows, a tight router with no room left): cross traffic,
/// round trip (ms), loss.
const ADDED: [(Cross, u32, f64); 12] = [
    (Cross::EdgeBbr, 25, 0.0),
    (Cross::EdgeBbr, 120, 0.005),
    (Cross::EdgeMixed, 60, 0.0005),
    (Cross::EdgeMixed, 200, 0.0),
    (Cross::EdgeShared, 60, 0.0),
    (Cross::EdgeShared, 200, 0.0005),
    (Cross::EdgeUdpHeavy, 25, 0.005),
    (Cross::EdgeUdpHeavy, 120, 0.0),
    (Cross::UpTcp, 25, 0.02),
    (Cross::UpTcp, 120, 0.0),
    (Cross::Quiet, 60, 0.02),
    (Cross::EdgeUdp, 200, 0.02),
];

/// The paths, fixed before any was measured: the first 20 (every cross-traffic
/// setting of the first five at every round trip, the loss rates taken in turn),
/// then [`ADDED`].
fn paths() -> Vec<PathSpec> {
    let mut out = Vec::new();
    for (ci, cross) in Cross::FIRST.iter().enumerate() {
        for (ri, rtt) in RTTS_MS.iter().enumerate() {
            out.push(PathSpec {
                name: format!("{}-{rtt}ms", cross.name()),
                cross: *cross,
                rtt_ms: *rtt,
                loss: LOSSES[(ci + ri) % LOSSES.len()],
            });
        }
    }
    for (cross, rtt, loss) in ADDED {
        let name = if loss >= 0.02 {
            format!("{}-{rtt}ms-lossy", cross.name())
        } else {
            format!("{}-{rtt}ms", cross.name())
        };
        out.push(PathSpec {
            name,
            cross,
            rtt_ms: rtt,
            loss,
        });
    }
    out
}

/// One truth transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Transfer {
    /// Congestion control.
    cc: String,
    /// When it began, s after the path's measurement did (none in runs made before
    /// it was kept).
    #[serde(default)]
    at_s: Option<f64>,
    /// How long it ran, s (none in runs made before it was kept).
    #[serde(default)]
    seconds: Option<f64>,
    /// Payload rate over the whole transfer, bit/s.
    bps: f64,
    /// Segments retransmitted.
    retransmits: u64,
    /// The sender's kernel's delivery rate, median of its network-limited samples in
    /// the transfer's second and third seconds, bit/s: what the overlay would show
    /// two seconds in.
    kernel_early_bps: Option<f64>,
    /// Samples that median stands on.
    kernel_samples: usize,
    /// For a BBR transfer, the median of BBR's own bottleneck estimate (its windowed
    /// highest delivery rate, `INET_DIAG_BBRINFO`) over the same seconds, bit/s; none
    /// for CUBIC and in runs made before it was read.
    #[serde(default)]
    kernel_bbr_early_bps: Option<f64>,
}

/// Everything measured on one path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Measured {
    path: PathSpec,
    /// pathload's range, bit/s (low = high for a lower bound).
    abw: Option<(f64, f64)>,
    abw_lower_bound: bool,
    abw_note: Option<String>,
    /// Where pathload's search stood when it gave no range (its time limit):
    /// [Rmin, Rmax] so far, bit/s, 0 where nothing below was seen without a trend.
    /// None in runs made before it was kept.
    #[serde(default)]
    abw_unconverged: Option<(f64, f64)>,
    pathload_bytes: u64,
    pathload_s: f64,
    capacity_bps: Option<f64>,
    class: Option<PathClass>,
    score: Option<i32>,
    squeezed: Option<[f64; 2]>,
    /// The control path's round trip, s.
    rtt_s: f64,
    btc_bytes: u64,
    btc_s: f64,
    loss_rate: Option<f64>,
    badabing_bytes: u64,
    /// How long badabing measured, s.
    #[serde(default = "default_badabing_s")]
    badabing_s: f64,
    transfers: Vec<Transfer>,
}

/// The default of `--badabing-seconds`, for results written before it was kept.
fn default_badabing_s() -> f64 {
    20.0
}

fn main() -> ExitCode {
    if let Some(code) = experiment::embedded_main() {
        return code;
    }
    let args = Args::parse();
    let out = args.out();
    let analyse_all = |out: &Path| {
        if args.history {
            analyse_history(out)
        } else {
            analyse(out)
        }
    };
    let result = if args.analyse {
        analyse_all(&out)
    } else if !mgrp_testbed::is_root() {
        eprintln!("btc: needs root to build the testbed's network namespaces");
        return ExitCode::from(2);
    } else {
        experiment::stop_on_signals();
        measure_all(&args, &out).and_then(|()| analyse_all(&out))
    };
    experiment::exit("btc", result)
}

fn json_path(out: &Path, name: &str) -> PathBuf {
    out.join("paths").join(format!("{name}.json"))
}

fn measure_all(args: &Args, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out.join("paths"))
        .with_context(|| format!("cannot create {}", out.display()))?;
    let only: Option<Vec<&str>> = args
        .paths
        .as_deref()
        .map(|p| p.split(',').map(str::trim).collect());
    let all = paths();
    if let Some(only) = &only {
        for o in only {
            anyhow::ensure!(
                all.iter().any(|p| p.name == *o),
                "no path named {o:?}; the paths are {}",
                all.iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    for spec in all {
        if only
            .as_ref()
            .is_some_and(|o| !o.contains(&spec.name.as_str()))
        {
            continue;
        }
        let file = json_path(out, &spec.name);
        if file.exists() && !args.fresh {
            eprintln!("{}: measured before ({}), kept", spec.name, file.display());
            continue;
        }
        if experiment::interrupted() {
            anyhow::bail!("interrupted");
        }
        let started = Instant::now();
        let json = if args.history {
            let r = with_path(&spec, |tb, cross| revisit(tb, cross, &spec, args, out))
                .with_context(|| format!("path {}", spec.name))?;
            eprintln!(
                "{}: change {:?}; then {}; now {} ({:.0} s)",
                spec.name,
                r.change,
                summary(&r.then),
                summary(&r.now),
                started.elapsed().as_secs_f64()
            );
            serde_json::to_string_pretty(&r)?
        } else {
            let plot = out.join(format!("squeezed-{}.svg", spec.name));
            let m = with_path(&spec, |tb, _| {
                probe_and_transfer(tb, &spec, args, &plot, started)
            })
            .with_context(|| format!("path {}", spec.name))?;
            eprintln!(
                "{}: {} ({:.0} s)",
                spec.name,
                summary(&m),
                started.elapsed().as_secs_f64()
            );
            serde_json::to_string_pretty(&m)?
        };
        std::fs::write(&file, json).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

/// One line of what was measured on a path.
fn summary(m: &Measured) -> String {
    format!(
        "abw {:?} capacity {:?} class {:?} (score {:?}) loss {:?} rtt {:.1} ms; transfers {}",
        m.abw.map(|(l, h)| format!("{:.2}-{:.2}", l / 1e6, h / 1e6)),
        m.capacity_bps.map(|c| format!("{:.2}", c / 1e6)),
        m.class,
        m.score,
        m.loss_rate,
        m.rtt_s * 1e3,
        m.transfers
            .iter()
            .map(|t| format!("{} {:.2} Mbit/s", t.cc, t.bps / 1e6))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The only veth of host `ns` (its link to its router).
fn host_dev(ns: &mgrp_testbed::Netns) -> anyhow::Result<String> {
    let out = ns.ip(&["-o", "link", "show"])?;
    out.lines()
        .filter_map(|l| {
            l.split(':')
                .nth(1)
                .map(|d| d.trim().split('@').next().unwrap_or("").to_string())
        })
        .find(|d| !d.is_empty() && d != "lo")
        .context("the host has no veth")
}

/// Builds `spec`'s testbed, starts the tools' sender in m3 and the path's cross
/// traffic, waits for it to settle and runs `f` on them; tears it all down after.
fn with_path<T>(
    spec: &PathSpec,
    f: impl FnOnce(&Testbed, &mut Vec<Source>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let router = spec.cross.router_mbps();
    let tb = Testbed::new(Bottleneck {
        rate: format!("{router}mbit"),
        burst_bytes: 3000,
        // About 50 ms of queue at the router's rate.
        queue_bytes: router * 6250,
        rtt: Duration::from_millis(u64::from(spec.rtt_ms)),
        loss: spec.loss,
    })?;
    if spec.cross.narrow_at_source() {
        let dev = host_dev(&tb.m3)?;
        tb.m3.exec(&[
            "tc",
            "qdisc",
            "replace",
            "dev",
            &dev,
            "root",
            "tbf",
            "rate",
            &format!("{NARROW_MBPS}mbit"),
            "burst",
            "3000",
            "limit",
            "62500",
        ])?;
    }
    // The sender of every tool, in m3, until the path is done.
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        tb.m3.spawn("btc-snd", move || {
            let server = mgrp_tool::Server::bind(mgrp_tool::ServeOptions::new(Transport::Udp))?;
            server.serve(true, &stop, &mut |_| {})
        })?
    };
    let mut cross = start_cross(&tb, spec.cross)?;
    std::thread::sleep(Duration::from_secs(5));
    let out = f(&tb, &mut cross);
    drop(cross);
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    out
}

/// Every prediction method's inputs measured on the path of `tb`, then the truth
/// transfers (CUBIC, then BBR), their start times counted from `clock`; the
/// squeezed pairs' histograms go to `plot`.
fn probe_and_transfer(
    tb: &Testbed,
    spec: &PathSpec,
    args: &Args,
    plot: &Path,
    clock: Instant,
) -> anyhow::Result<Measured> {
    let m3_addr = mgrp_testbed::paper::M3.to_string();
    let never = AtomicBool::new(false);
    // Available bandwidth: pathload, fast mode.
    let t = Instant::now();
    let pl = tb.m5.run(|| {
        let opts = pathload_rs::tool::MeasureOptions {
            max_time: Duration::from_secs(90),
            ..pathload_rs::tool::MeasureOptions::new(m3_addr.clone(), Transport::Udp)
        };
        // Each fleet's verdict on stderr: the rates tried and each stream's trend say
        // why a run converged where it did, or did not.
        pathload_rs::tool::measure(&opts, &never, &mut |p| {
            if let pathload_rs::tool::Progress::Event(pathload_rs::estimator::Event::Fleet(f)) = p {
                eprintln!(
                    "{}: pathload fleet {} at {:.2} Mbit/s: {:?}, {:?}, streams {}",
                    spec.name, f.fleet, f.actual_rate, f.verdict, f.end, f.trends
                );
            }
        })
    })?;
    let pathload_s = t.elapsed().as_secs_f64();
    let (abw, abw_lower_bound, abw_note, pathload_bytes, abw_unconverged) = match pl {
        Ok(m) => {
            let o = &m.outcome;
            let answered = m.converged() || o.lower_bound;
            (
                answered.then_some(if o.lower_bound {
                    (o.low * 1e6, o.low * 1e6)
                } else {
                    (o.low * 1e6, o.high * 1e6)
                }),
                o.lower_bound,
                (!answered).then(|| o.reason.describe().to_string()),
                o.probe_bytes,
                (!answered && o.fleets > 0).then_some((o.low * 1e6, o.high * 1e6)),
            )
        }
        Err(e) => (None, false, Some(e.to_string()), 0, None),
    };
    // Capacity and squeezed pairs.
    let t = Instant::now();
    let b = tb.m5.run(|| {
        let opts = btc_rs::tool::MeasureOptions::new(m3_addr.clone(), Transport::Udp);
        btc_rs::tool::measure(&opts, &never)
    })??;
    let btc_s = t.elapsed().as_secs_f64();
    if let Some(q) = &b.squeeze {
        let name = match q.class {
            PathClass::TightLikeNarrow => "like-narrow",
            PathClass::TightUnlikeNarrow => "unlike-narrow",
            PathClass::Undecided => "undecided",
        };
        if let Some(c) = b.capacity_bps {
            btc_rs::tool::histograms(plot, q, c)?;
        }
        eprintln!(
            "{}: squeezed pairs say {name}, {}",
            spec.name,
            plot.display()
        );
    }
    // Loss: badabing.
    let bd = tb.m5.run(|| {
        let opts = badabing_rs::tool::MeasureOptions::new(
            m3_addr.clone(),
            Transport::Udp,
            Duration::from_secs(args.badabing_seconds),
        );
        badabing_rs::tool::measure(&opts, &never, &mut |_| {})
    })??;
    // The truth: CUBIC, then BBR.
    let mut transfers = Vec::new();
    for (i, cc) in ["cubic", "bbr"].iter().enumerate() {
        std::thread::sleep(Duration::from_secs(2));
        transfers.push(transfer(
            tb,
            cc,
            5301 + i as u16,
            args.transfer_seconds,
            clock,
        )?);
    }
    Ok(Measured {
        path: spec.clone(),
        abw,
        abw_lower_bound,
        abw_note,
        abw_unconverged,
        pathload_bytes,
        pathload_s,
        capacity_bps: b.capacity_bps,
        class: b.squeeze.as_ref().map(|q| q.class),
        score: b.squeeze.as_ref().map(|q| q.score),
        squeezed: b.squeeze.as_ref().map(|q| q.squeezed),
        rtt_s: b.rtt.as_secs_f64(),
        btc_bytes: b.probe_bytes,
        btc_s,
        loss_rate: (bd.estimate.outcomes.total() > 0).then_some(bd.estimate.loss_rate),
        badabing_bytes: bd.estimate.probe_bytes,
        badabing_s: args.badabing_seconds as f64,
        transfers,
    })
}

/// What changes on a path between its two visits (`--history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Change {
    /// The path's cross traffic stops; on a path without any, 6 Mbit/s of Poisson
    /// UDP starts across the bottleneck.
    Cross,
    /// The bottleneck's random loss goes to 2 %, or to none where it was 1 % or more.
    Loss,
}

/// The change on `spec` between its visits, fixed before any run: every second path
/// of [`paths`] changes (the 2nd, 4th, ...), by its cross traffic and by its loss in
/// turn; the others do not.
fn change_of(spec: &PathSpec) -> Option<Change> {
    let i = paths().iter().position(|p| p.name == spec.name)?;
    (i % 2 == 1).then_some(if (i / 2) % 2 == 0 {
        Change::Cross
    } else {
        Change::Loss
    })
}

/// Makes `change` on the path of `tb`, whose cross traffic is `cross`.
fn make_change(
    tb: &Testbed,
    spec: &PathSpec,
    cross: &mut Vec<Source>,
    change: Change,
) -> anyhow::Result<()> {
    match change {
        Change::Cross if cross.is_empty() => cross.push(traffic::udp_poisson(
            &tb.c1,
            &tb.c2,
            C2.into(),
            5415,
            6.0,
            1200,
            7,
        )?),
        Change::Cross => cross.clear(),
        Change::Loss => tb
            .delay
            .as_ref()
            .context("the testbed has no delay line")?
            .set_loss(if spec.loss >= 0.01 { 0.0 } else { 0.02 })?,
    }
    Ok(())
}

/// A path visited twice (`--history`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Revisit {
    /// The first visit: its transfers are the history.
    then: Measured,
    /// What changed after it (none on the paths fixed to stay as they were).
    change: Option<Change>,
    /// The second visit: its transfers are predicted.
    now: Measured,
}

/// Visits the path of `tb` twice, with its change (if any) between.
fn revisit(
    tb: &Testbed,
    cross: &mut Vec<Source>,
    spec: &PathSpec,
    args: &Args,
    out: &Path,
) -> anyhow::Result<Revisit> {
    let clock = Instant::now();
    let plot = |visit: &str| out.join(format!("squeezed-{}-{visit}.svg", spec.name));
    let then = probe_and_transfer(tb, spec, args, &plot("then"), clock)?;
    let change = change_of(spec);
    if let Some(c) = change {
        make_change(tb, spec, cross, c)?;
        eprintln!("{}: changed: {c:?}", spec.name);
    }
    // The settling time the first visit had after the cross traffic started, on
    // every path, so that changed and unchanged ones are visited alike.
    std::thread::sleep(Duration::from_secs(5));
    let now = probe_and_transfer(tb, spec, args, &plot("now"), clock)?;
    Ok(Revisit { then, change, now })
}

fn start_cross(tb: &Testbed, cross: Cross) -> anyhow::Result<Vec<Source>> {
    let bulk = |port: u16, cc: &str| traffic::tcp_bulk(&tb.c1, &tb.c2, C2.into(), port, cc);
    Ok(match cross {
        Cross::Quiet => Vec::new(),
        Cross::EdgeTcp => vec![bulk(5401, "cubic")?],
        Cross::EdgeBbr => vec![bulk(5405, "bbr")?],
        Cross::EdgeMixed => vec![bulk(5406, "cubic")?, bulk(5407, "bbr")?],
        Cross::EdgeShared => (5408..5412)
            .map(|p| bulk(p, "cubic"))
            .collect::<anyhow::Result<_>>()?,
        Cross::UpTcp => vec![bulk(5412, "cubic")?, bulk(5413, "cubic")?],
        Cross::EdgeUdpHeavy => vec![traffic::udp_poisson(
            &tb.c1,
            &tb.c2,
            C2.into(),
            5414,
            7.0,
            1200,
            7,
        )?],
        Cross::EdgeUdp => vec![traffic::udp_poisson(
            &tb.c1,
            &tb.c2,
            C2.into(),
            5402,
            4.0,
            1200,
            7,
        )?],
        Cross::UpWeb => vec![traffic::web(
            &tb.c1,
            &tb.c2,
            C2.into(),
            5403,
            &Web {
                flows_per_second: 6.0,
                max_flows: 40,
                seed: 11,
            },
        )?],
        Cross::UpUdp => vec![traffic::udp_poisson(
            &tb.c1,
            &tb.c2,
            C2.into(),
            5404,
            24.0,
            1200,
            7,
        )?],
    })
}

/// A bulk transfer from m3 to m5 for `seconds`, reading the sender's kernel's view
/// of it every 250 ms.
fn transfer(
    tb: &Testbed,
    cc: &str,
    port: u16,
    seconds: u64,
    clock: Instant,
) -> anyhow::Result<Transfer> {
    let src = traffic::tcp_bulk(&tb.m3, &tb.m5, M5.into(), port, cc)?;
    let start = Instant::now();
    let mut early = Vec::new();
    let mut bbr_early = Vec::new();
    while start.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(250));
        let t = start.elapsed();
        if t < Duration::from_secs(1) || t > Duration::from_secs(3) {
            continue;
        }
        let conns = tb
            .m3
            .run(|| mgrp_tool::sockdiag::connections_to(M5.into()))??;
        for c in conns.iter().filter(|c| c.remote.port() == port) {
            if let Some(b) = &c.bbr {
                bbr_early.push(b.bandwidth_bps);
            }
            if let Some(s) = mgrp_tool::tcpinfo::parse(&c.info)
                && s.network_limited()
                && let Some(r) = s.delivery_bps
            {
                early.push(r);
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut src = src;
    src.halt();
    Ok(Transfer {
        cc: cc.to_string(),
        at_s: Some(start.duration_since(clock).as_secs_f64()),
        seconds: Some(elapsed),
        bps: src.bytes() as f64 * 8.0 / elapsed,
        retransmits: src.retransmits(),
        kernel_samples: early.len(),
        kernel_early_bps: median(&mut early),
        kernel_bbr_early_bps: median(&mut bbr_early),
    })
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

// ---- Analysis ----

/// The methods compared, in the tables' order.
const METHODS: [&str; 12] = [
    "abw",
    "scaled-abw",
    "capacity",
    "mathis",
    "pftk",
    "combined",
    "combined-pftk",
    "combined-per-cc",
    "combined-share",
    "kernel",
    "kernel-bbr",
    "combined+kernel",
];

fn abw_mid(m: &Measured) -> Option<f64> {
    m.abw.map(|(l, h)| (l + h) / 2.0)
}

/// Achieved rate over the available bandwidth's middle, for every transfer of `m`
/// by a congestion control `cc` accepts.
fn ratios_to_abw(m: &Measured, cc: &dyn Fn(&str) -> bool) -> Vec<f64> {
    abw_mid(m)
        .filter(|a| *a > 0.0)
        .map(|a| {
            m.transfers
                .iter()
                .filter(|t| cc(&t.cc))
                .map(|t| t.bps / a)
                .collect()
        })
        .unwrap_or_default()
}

/// Our factors from `paths`: per measured class, the median of achieved rate over
/// the available bandwidth's middle; a class with fewer than two paths takes the
/// median over all of them.
fn calibrate(paths: &[&Measured]) -> Factors {
    calibrate_for(paths, &|_| true)
}

/// [`calibrate`] on the transfers by a congestion control `cc` accepts only.
fn calibrate_for(paths: &[&Measured], cc: &dyn Fn(&str) -> bool) -> Factors {
    let mut pooled: Vec<f64> = paths.iter().flat_map(|m| ratios_to_abw(m, cc)).collect();
    let pooled = median(&mut pooled).unwrap_or(1.0);
    let of = |c: PathClass| {
        let those: Vec<&Measured> = paths
            .iter()
            .copied()
            .filter(|m| m.class.unwrap_or(PathClass::Undecided) == c)
            .collect();
        let mut r: Vec<f64> = those.iter().flat_map(|m| ratios_to_abw(m, cc)).collect();
        if those.len() < 2 {
            pooled
        } else {
            median(&mut r).unwrap_or(pooled)
        }
    };
    Factors {
        like_narrow: of(PathClass::TightLikeNarrow),
        unlike_narrow: of(PathClass::TightUnlikeNarrow),
        undecided: of(PathClass::Undecided),
    }
}

/// BBR's share of a path pathload gave no range on, from `paths`: the median of
/// their BBR transfers' rate over the capacity (1 when fewer than two such paths).
fn bbr_share_of_full(paths: &[&Measured]) -> f64 {
    let mut r: Vec<f64> = paths
        .iter()
        .filter(|m| m.abw.is_none())
        .filter_map(|m| {
            let c = m.capacity_bps.filter(|c| *c > 0.0)?;
            let t = m.transfers.iter().find(|t| t.cc == "bbr")?;
            Some(t.bps / c)
        })
        .collect();
    if r.len() < 2 {
        1.0
    } else {
        median(&mut r).unwrap_or(1.0)
    }
}

/// Each method's prediction for transfer `t` of path `m`, bit/s, with factors `f`
/// (both congestion controls' transfers), `own` (this transfer's congestion
/// control's alone, for `combined-per-cc`) and `share` (BBR's share of a path
/// pathload gave no range on, for `combined-share`).
fn predictions(
    m: &Measured,
    t: &Transfer,
    f: &Factors,
    own: &Factors,
    share: f64,
) -> Vec<(&'static str, Option<f64>)> {
    let inputs = Inputs {
        abw: m.abw,
        class: m.class,
        capacity_bps: m.capacity_bps,
        loss: m.loss_rate,
        rtt_s: Some(m.rtt_s),
        kernel_bps: None,
        // Mathis's bound is Reno's: it caps the loss-based sender's prediction only.
        bbr: t.cc == "bbr",
    };
    let (all, combined) = model::predict(&inputs, f, MSS);
    let per_cc = model::predict(&inputs, own, MSS).1;
    // PFTK in Mathis's place: the scaled range capped by the capacity alone, then
    // by PFTK for a loss-based sender (PFTK models loss-based senders only).
    let pftk = m
        .loss_rate
        .and_then(|p| mgrp_core::tcp::pftk_bps(f64::from(MSS), m.rtt_s, p));
    let uncapped = model::predict(
        &Inputs {
            loss: None,
            ..inputs
        },
        f,
        MSS,
    )
    .1;
    let combined_pftk = match (uncapped, pftk.filter(|_| !inputs.bbr)) {
        (Some(p), Some(b)) => Some(p.capped(b).bps()),
        (Some(p), None) => Some(p.bps()),
        (None, b) => b,
    };
    // Where pathload gives no range (beside bulk TCP its search runs out of time at
    // rates far below the capacity), a BBR transfer takes its share of the full
    // link from loss-based flows (Ware et al.: set by its in-flight cap, not by the
    // number of those flows): the capacity times BBR's share on the other such
    // paths. Devised after run 2's results; see docs/btc.md.
    let combined_share = match combined {
        None if inputs.bbr && m.abw.is_none() => m.capacity_bps.map(|c| c * share),
        c => c.map(|p| p.bps()),
    };
    let by = |b: model::Basis| {
        all.iter()
            .find(|p| p.basis == b)
            .map(model::Prediction::bps)
    };
    let with_kernel = model::predict(
        &Inputs {
            kernel_bps: t.kernel_early_bps,
            ..inputs
        },
        f,
        MSS,
    )
    .1;
    vec![
        ("abw", abw_mid(m)),
        ("scaled-abw", by(model::Basis::ScaledAbw)),
        ("capacity", m.capacity_bps),
        ("mathis", by(model::Basis::Mathis)),
        ("pftk", pftk),
        ("combined", combined.map(|p| p.bps())),
        ("combined-pftk", combined_pftk),
        ("combined-per-cc", per_cc.map(|p| p.bps())),
        ("combined-share", combined_share),
        ("kernel", t.kernel_early_bps),
        ("kernel-bbr", t.kernel_bbr_early_bps),
        ("combined+kernel", with_kernel.map(|p| p.bps())),
    ]
}

/// Each congestion control's ratio CDF per method of `cdfs` ([`per_method`]'s), as
/// `ratio-cdf-<cc>.svg` in `out`.
fn plot_cdfs(out: &Path, cdfs: &[(String, Lines)]) -> anyhow::Result<()> {
    for (cc, lines) in cdfs {
        // combined+kernel is the kernel's line wherever the kernel reported, which is
        // every transfer here: drawn once.
        let clipped: Vec<(String, Vec<f64>)> = lines
            .iter()
            .filter(|(n, _)| n != "combined+kernel")
            .map(|(n, v)| (n.clone(), v.iter().map(|x| x.min(4.0)).collect()))
            .collect();
        mgrp_experiments::plot::cdf(
            &out.join(format!("ratio-cdf-{cc}.svg")),
            &format!("achieved / predicted, {cc} transfers (clipped at 4)"),
            "achieved / predicted",
            &clipped,
        )?;
    }
    Ok(())
}

/// `rows` borrowed, for [`per_method`].
fn refs(rows: &[Row]) -> Vec<&Row> {
    rows.iter().collect()
}

/// Named samples, one line of a plot each.
type Lines = Vec<(String, Vec<f64>)>;

struct Row {
    path: usize,
    cc: String,
    truth: f64,
    predicted: Vec<(&'static str, Option<f64>)>,
}

impl Row {
    /// What `method` predicted, bit/s (none: it had no prediction, or is not here).
    fn get(&self, method: &str) -> Option<f64> {
        self.predicted
            .iter()
            .find(|(n, _)| *n == method)
            .and_then(|(_, v)| *v)
    }
}

/// A rate in bit/s as Mbit/s for the tables, `-` for none.
fn mbps(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{:.2}", x / 1e6))
}

/// Every transfer of `paths`, each path predicted with factors calibrated on the
/// others (leave one out); `Row::path` indexes `paths`.
fn leave_one_out(paths: &[&Measured]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, m) in paths.iter().enumerate() {
        let others: Vec<&Measured> = paths
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, m)| *m)
            .collect();
        let f = calibrate(&others);
        let share = bbr_share_of_full(&others);
        for t in &m.transfers {
            let own = calibrate_for(&others, &|cc| cc == t.cc);
            rows.push(Row {
                path: i,
                cc: t.cc.clone(),
                truth: t.bps,
                predicted: predictions(m, t, &f, &own, share),
            });
        }
    }
    rows
}

/// Every path's JSON in `out`, in the paths' order (a path without one is left
/// out); an error when there is none, saying to run `run` first.
fn load<T: serde::de::DeserializeOwned>(out: &Path, run: &str) -> anyhow::Result<Vec<T>> {
    let mut loaded = Vec::new();
    for spec in paths() {
        let file = json_path(out, &spec.name);
        if let Ok(text) = std::fs::read_to_string(&file) {
            loaded.push(
                serde_json::from_str(&text)
                    .with_context(|| format!("cannot read {}", file.display()))?,
            );
        }
    }
    anyhow::ensure!(
        !loaded.is_empty(),
        "no measured paths in {}; run {run} without --analyse first",
        out.join("paths").display()
    );
    Ok(loaded)
}

fn analyse(out: &Path) -> anyhow::Result<()> {
    let measured: Vec<Measured> = load(out, "btc")?;
    let all: Vec<&Measured> = measured.iter().collect();
    let factors = calibrate(&all);
    let rows = leave_one_out(&all);
    let mut md = String::new();
    writeln!(md, "# What TCP will get: results\n")?;
    writeln!(
        md,
        "Made by `cargo run --release --example btc` ({} paths; see `docs/btc.md` for what runs and what it means).\n",
        measured.len()
    )?;
    writeln!(
        md,
        "Our factors (median of achieved rate over the available bandwidth's middle, per measured class, both congestion controls): like-narrow **{:.2}**, unlike-narrow **{:.2}**, undecided **{:.2}**. Each path below is predicted with factors calibrated on the other paths only.\n",
        factors.like_narrow, factors.unlike_narrow, factors.undecided
    )?;
    // Per method: ratio summary and pairwise accuracy, per congestion control.
    writeln!(md, "## Per method\n")?;
    writeln!(
        md,
        "Ratio = achieved / predicted. Within ±50 %: achieved between 0.5 and 1.5 times the prediction. Faster path: of pairs of paths, the share where the method orders the two as the transfers did (a pair without a prediction counts as wrong), of all pairs and of the pairs whose transfers are more than 20 % apart.\n"
    )?;
    let first: Vec<&Measured> = measured.iter().filter(|m| m.path.first_20()).collect();
    if first.len() < measured.len() && !first.is_empty() {
        writeln!(
            md,
            "### The first 20 paths\n\n{} of them, each predicted with factors calibrated on the others of these only, as before the paths were added.\n",
            first.len()
        )?;
        per_method(&mut md, &refs(&leave_one_out(&first)), &METHODS)?;
        writeln!(md, "\n### All {} paths\n", measured.len())?;
    }
    let cdfs = per_method(&mut md, &refs(&rows), &METHODS)?;
    plot_cdfs(out, &cdfs)?;
    writeln!(
        md,
        "\n![ratio CDF, CUBIC](ratio-cdf-cubic.svg)\n\n![ratio CDF, BBR](ratio-cdf-bbr.svg)\n"
    )?;
    // Per path.
    writeln!(md, "## Per path\n")?;
    writeln!(
        md,
        "Rates in Mbit/s. abw: pathload's range (≥ for a lower bound). Class from the squeezed-pair score. Loss: badabing's probe loss. Predictions here with the leave-one-out factors.\n"
    )?;
    writeln!(
        md,
        "| path | loss set | rtt | abw | capacity | class (score) | loss | scaled | mathis | combined, CUBIC | CUBIC | kernel | combined, BBR | BBR | kernel | probe MB |"
    )?;
    writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for (i, m) in measured.iter().enumerate() {
        let r: Vec<&Row> = rows.iter().filter(|r| r.path == i).collect();
        let first = r.first();
        let truth = |cc: &str| r.iter().find(|x| x.cc == cc);
        writeln!(
            md,
            "| {} | {:.1} % | {:.0} ms | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} |",
            m.path.name,
            m.path.loss * 100.0,
            m.rtt_s * 1e3,
            match m.abw {
                None => format!("- ({})", m.abw_note.as_deref().unwrap_or("no answer")),
                Some((l, _)) if m.abw_lower_bound => format!("≥ {:.2}", l / 1e6),
                Some((l, h)) => format!("{:.2}–{:.2}", l / 1e6, h / 1e6),
            },
            mbps(m.capacity_bps),
            m.class.map_or("-".to_string(), |c| format!(
                "{} ({:+})",
                match c {
                    PathClass::TightLikeNarrow => "like",
                    PathClass::TightUnlikeNarrow => "unlike",
                    PathClass::Undecided => "undecided",
                },
                m.score.unwrap_or(0)
            )),
            m.loss_rate
                .map_or("-".to_string(), |l| format!("{:.2} %", l * 100.0)),
            mbps(first.and_then(|r| r.get("scaled-abw"))),
            mbps(first.and_then(|r| r.get("mathis"))),
            mbps(truth("cubic").and_then(|r| r.get("combined"))),
            mbps(truth("cubic").map(|r| r.truth)),
            mbps(truth("cubic").and_then(|r| r.get("kernel"))),
            mbps(truth("bbr").and_then(|r| r.get("combined"))),
            mbps(truth("bbr").map(|r| r.truth)),
            mbps(truth("bbr").and_then(|r| r.get("kernel"))),
            (m.pathload_bytes + m.btc_bytes + m.badabing_bytes) as f64 / 1e6,
        )?;
    }
    // Cost.
    let sum =
        |f: &dyn Fn(&Measured) -> f64| measured.iter().map(f).sum::<f64>() / measured.len() as f64;
    writeln!(
        md,
        "\n## What the probes cost\n\nPer path on average: pathload {:.2} MB in {:.0} s, btc-rs (bunches and 1000 squeezed pairs) {:.3} MB in {:.1} s, badabing {:.2} MB in its {} s; the kernel's report costs no probe (one query of a few hundred bytes to the neighbour).\n",
        sum(&|m| m.pathload_bytes as f64) / 1e6,
        sum(&|m| m.pathload_s),
        sum(&|m| m.btc_bytes as f64) / 1e6,
        sum(&|m| m.btc_s),
        sum(&|m| m.badabing_bytes as f64) / 1e6,
        measured.first().map_or(0, |m| m.badabing_s.round() as u64),
    )?;
    let figures: Vec<String> = measured
        .iter()
        .filter(|m| out.join(format!("squeezed-{}.svg", m.path.name)).exists())
        .map(|m| m.path.name.clone())
        .collect();
    writeln!(md, "## Squeezed pairs\n")?;
    for want in [
        PathClass::TightLikeNarrow,
        PathClass::TightUnlikeNarrow,
        PathClass::Undecided,
    ] {
        if let Some(m) = measured
            .iter()
            .find(|m| m.class == Some(want) && figures.contains(&m.path.name))
        {
            writeln!(
                md,
                "{:?}, path {} (score {:+}):\n\n![squeezed pairs on {}](squeezed-{}.svg)\n",
                want,
                m.path.name,
                m.score.unwrap_or(0),
                m.path.name,
                m.path.name
            )?;
        }
    }
    let file = out.join("results.md");
    std::fs::write(&file, md).with_context(|| format!("cannot write {}", file.display()))?;
    eprintln!("wrote {}", file.display());
    Ok(())
}

/// The methods of the second visit's table (`--history`), in its order.
const HISTORY_METHODS: [&str; 4] = ["probes", "history", "history-achieved", "blend"];

/// A second visit's transfer, predicted by each of [`HISTORY_METHODS`], and what
/// the history rule made of its earlier one.
struct Revisited {
    row: Row,
    change: Option<Change>,
    weight: history::Weight,
    /// The earlier transfer's age when this one began, s.
    age_s: f64,
    /// The probes' prediction for the earlier transfer, bit/s.
    then_probes: Option<f64>,
}

/// The second visits' transfers of `visited` predicted by the probes (the combined
/// prediction, factors left one out as in [`leave_one_out`]), by the same congestion
/// control's transfer in the first visit, and by the two blended by
/// [`history::weight`] and [`history::blend`] as the overlay blends them.
fn revisited<'a>(visited: &'a [Revisit]) -> anyhow::Result<Vec<Revisited>> {
    let thens: Vec<&Measured> = visited.iter().map(|r| &r.then).collect();
    let nows: Vec<&Measured> = visited.iter().map(|r| &r.now).collect();
    let then_rows = leave_one_out(&thens);
    let limits = history::Limits::default();
    let mut out = Vec::new();
    for r in leave_one_out(&nows) {
        let v = &visited[r.path];
        let name = &v.now.path.name;
        let of = |m: &'a Measured| {
            m.transfers
                .iter()
                .find(|t| t.cc == r.cc)
                .with_context(|| format!("{name}: no {} transfer in both visits", r.cc))
        };
        let (earlier, this) = (of(&v.then)?, of(&v.now)?);
        let (Some(now_at), Some(then_at), Some(then_s)) =
            (this.at_s, earlier.at_s, earlier.seconds)
        else {
            anyhow::bail!("{name}: the transfers' times were not kept");
        };
        let then_probes = then_rows
            .iter()
            .find(|x| x.path == r.path && x.cc == r.cc)
            .and_then(|x| x.get("combined"));
        // What the overlay keeps of an earlier flow: a loss-based flow's delivery
        // over its time, a BBR flow's own bottleneck estimate.
        let kept = if r.cc == "bbr" {
            earlier.kernel_bbr_early_bps.unwrap_or(earlier.bps)
        } else {
            earlier.bps
        };
        let e = history::Earlier {
            bps: kept,
            age_s: now_at - (then_at + then_s),
            probes_bps: then_probes,
        };
        let probes = r.get("combined");
        let weight = history::weight(&e, probes, &limits);
        // Only the rate counts in the blend; the basis is carried along untouched.
        let as_prediction = |bps: f64| model::Prediction {
            basis: model::Basis::ScaledAbw,
            low_bps: bps,
            high_bps: bps,
        };
        let blend = history::blend(probes.map(as_prediction), &e, weight.value()).map(|p| p.bps());
        out.push(Revisited {
            row: Row {
                path: r.path,
                cc: r.cc.clone(),
                truth: r.truth,
                predicted: vec![
                    ("probes", probes),
                    ("history", Some(kept)),
                    ("history-achieved", Some(earlier.bps)),
                    ("blend", blend),
                ],
            },
            change: v.change,
            weight,
            age_s: e.age_s,
            then_probes,
        });
    }
    Ok(out)
}

fn analyse_history(out: &Path) -> anyhow::Result<()> {
    let visited: Vec<Revisit> = load(out, "btc --history")?;
    let judged = revisited(&visited)?;
    let changed = visited.iter().filter(|v| v.change.is_some()).count();
    let mut md = String::new();
    writeln!(md, "# What TCP will get: history beside the probes\n")?;
    writeln!(
        md,
        "Made by `cargo run --release --example btc -- --history` ({} paths, {changed} of them changed between their visits; see `docs/btc.md` for what runs and what it means).\n",
        visited.len()
    )?;
    writeln!(
        md,
        "Each path is visited twice on one testbed: the probes and a CUBIC and a BBR transfer, then (on every second path of the list, fixed before any run) a change of its cross traffic or its loss, then the probes and the two transfers again. The second visit's transfers are predicted by the probes alone (the combined prediction, factors calibrated on the other paths' second visits), by the first visit's transfer of the same congestion control alone as the overlay keeps it (history: a CUBIC flow's rate over its time, a BBR flow's own bottleneck estimate over its 2nd and 3rd seconds) or as it was achieved (history-achieved), and by the probes and history blended as the overlay blends them: weight 1 − age / 30 min, none when the probes' predictions now and then differ by more than a factor of 1.5. Ratio, within ±50 % and faster path as in [results.md](../results.md).\n"
    )?;
    writeln!(md, "## The second visit\n")?;
    // Each subset's title and whether its paths changed (none: all paths).
    let subsets = [
        ("All paths", None),
        ("Paths that did not change", Some(false)),
        ("Paths that changed", Some(true)),
    ];
    let mut cdfs = Vec::new();
    for (i, (title, changed)) in subsets.iter().enumerate() {
        let rows: Vec<&Row> = judged
            .iter()
            .filter(|j| changed.is_none_or(|c| j.change.is_some() == c))
            .map(|j| &j.row)
            .collect();
        writeln!(md, "### {title} ({} transfers)\n", rows.len())?;
        let lines = per_method(&mut md, &rows, &HISTORY_METHODS)?;
        if i == 0 {
            cdfs = lines;
        }
        writeln!(md)?;
    }
    plot_cdfs(out, &cdfs)?;
    writeln!(
        md,
        "![ratio CDF, CUBIC](ratio-cdf-cubic.svg)\n\n![ratio CDF, BBR](ratio-cdf-bbr.svg)\n"
    )?;
    writeln!(md, "## The change rule\n")?;
    writeln!(
        md,
        "How often the blend gave history no weight because the probes' prediction moved by more than a factor of 1.5 between the visits (the rule's only signal of a change), and the earlier transfers' ages.\n"
    )?;
    writeln!(
        md,
        "| cc | changed paths: change seen | unchanged paths: change seen | too old | ages, s |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    for cc in ["cubic", "bbr"] {
        let of: Vec<&Revisited> = judged.iter().filter(|j| j.row.cc == cc).collect();
        let seen = |changed: bool| {
            let those: Vec<&&Revisited> = of
                .iter()
                .filter(|j| j.change.is_some() == changed)
                .collect();
            let fired = those
                .iter()
                .filter(|j| matches!(j.weight, history::Weight::Changed { .. }))
                .count();
            pct(fired, those.len())
        };
        let old = of
            .iter()
            .filter(|j| j.weight == history::Weight::TooOld)
            .count();
        let ages = of.iter().map(|j| j.age_s);
        writeln!(
            md,
            "| {cc} | {} | {} | {old} | {:.0}–{:.0} |",
            seen(true),
            seen(false),
            ages.clone().fold(f64::INFINITY, f64::min),
            ages.fold(0.0, f64::max),
        )?;
    }
    writeln!(md, "\n## Per path\n")?;
    writeln!(
        md,
        "Rates in Mbit/s. Weight: history's in the blend (`changed ×r`: the probes now read r times what they read then, so none).\n"
    )?;
    writeln!(
        md,
        "| path | change | cc | then: probes | then: got | history | now: probes | now: got | weight | blend |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for j in &judged {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            visited[j.row.path].now.path.name,
            j.change.map_or("-", |c| match c {
                Change::Cross => "cross traffic",
                Change::Loss => "loss",
            }),
            j.row.cc,
            mbps(j.then_probes),
            mbps(j.row.get("history-achieved")),
            mbps(j.row.get("history")),
            mbps(j.row.get("probes")),
            mbps(Some(j.row.truth)),
            match j.weight {
                history::Weight::Aged(w) => format!("{w:.2}"),
                history::Weight::TooOld => "too old".into(),
                history::Weight::Changed { ratio } => format!("changed ×{ratio:.2}"),
            },
            mbps(j.row.get("blend")),
        )?;
    }
    writeln!(md, "\n## The first visit\n")?;
    writeln!(
        md,
        "The first visits' transfers predicted by every method from the first visits' probes, as in [results.md](../results.md): run 2's paths again on this build.\n"
    )?;
    let thens: Vec<&Measured> = visited.iter().map(|r| &r.then).collect();
    per_method(&mut md, &refs(&leave_one_out(&thens)), &METHODS)?;
    let file = out.join("results.md");
    std::fs::write(&file, md).with_context(|| format!("cannot write {}", file.display()))?;
    eprintln!("wrote {}", file.display());
    Ok(())
}

/// The ratio and pairs table of `rows` into `md`, per congestion control and method;
/// returns each congestion control's ratios per method.
fn per_method(
    md: &mut String,
    rows: &[&Row],
    methods: &[&str],
) -> anyhow::Result<Vec<(String, Lines)>> {
    writeln!(
        md,
        "| method | cc | predictions | median ratio | within ±50 % | within a quarter to double | faster path, all pairs | faster path, pairs > 20 % apart |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    let mut cdfs: Vec<(String, Lines)> = Vec::new();
    for cc in ["cubic", "bbr"] {
        let rs: Vec<&Row> = rows.iter().copied().filter(|r| r.cc == cc).collect();
        let mut lines = Vec::new();
        for &method in methods {
            let pred = |r: &Row| r.get(method).filter(|v| *v > 0.0);
            let mut ratios: Vec<f64> = rs.iter().filter_map(|r| Some(r.truth / pred(r)?)).collect();
            let within = ratios.iter().filter(|x| (0.5..=1.5).contains(*x)).count();
            let wide = ratios.iter().filter(|x| (0.25..=2.0).contains(*x)).count();
            let (mut right, mut pairs) = (0usize, 0usize);
            let (mut right_apart, mut apart) = (0usize, 0usize);
            for a in 0..rs.len() {
                for b in a + 1..rs.len() {
                    let (ta, tb) = (rs[a].truth, rs[b].truth);
                    let distinct = ta.max(tb) > 1.2 * ta.min(tb);
                    pairs += 1;
                    apart += usize::from(distinct);
                    if let (Some(pa), Some(pb)) = (pred(rs[a]), pred(rs[b]))
                        && (pa - pb).signum() == (ta - tb).signum()
                    {
                        right += 1;
                        right_apart += usize::from(distinct);
                    }
                }
            }
            let n = ratios.len();
            if n == 0 && method == "kernel-bbr" {
                // Not read for CUBIC, nor in runs made before it was.
                continue;
            }
            writeln!(
                md,
                "| {method} | {cc} | {n} of {} | {} | {} | {} | {} | {} |",
                rs.len(),
                median(&mut ratios).map_or("-".into(), |x| format!("{x:.2}")),
                pct(within, rs.len()),
                pct(wide, rs.len()),
                pct(right, pairs),
                pct(right_apart, apart),
            )?;
            lines.push((method.to_string(), ratios));
        }
        cdfs.push((cc.to_string(), lines));
    }
    Ok(cdfs)
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.0} % ({a}/{b})", 100.0 * a as f64 / b as f64)
    }
}
