//! How well pathchirp-rs measures a 10 Mbit/s tbf bottleneck (burst 1540) between two
//! namespaces, beside pathload-rs on the same path in the same run: the shaper on the
//! sending host's egress or on a router, over plain UDP and over MGRP, quiet, with
//! 4 Mbit/s of constant-rate UDP cross traffic (to an address outside the tunnel) and
//! with a 4 Mbit/s paced TCP flow from A to B (over MGRP its packets ride in the
//! probes). Both tools run in this process, inside the namespaces, against one sender.
//!
//! For each run: the truth at the IP level of each tool's probes; pathChirp's median
//! smoothed estimate over the second half of its run (less the riders over MGRP), its
//! time to the first estimate, probe bytes a minute and rider share; pathload's range
//! (fast mode) and its bytes. Not run in CI (minutes of wall time); needs root.
//!
//! ```text
//! cargo bench -p pathchirp-rs --bench accuracy -- [--runs N] [--seconds S]
//!     [--shapers sender,router] [--transports udp,mgrp] [--cross quiet,cbr,tcp]
//!     [--onset tail|output|first-rise] [--burst BYTES]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mgrp_testbed::harness::{Role, bench_start};
use mgrp_testbed::tool::{OTHER_B, add_other_b, daemons_for, serve_in};
use mgrp_testbed::traffic::{Source, ip_level_truth, tcp_paced_source, udp_cbr};
use mgrp_testbed::{ADDR_A, ADDR_B, TwoHostOptions, TwoHosts};
use mgrp_tool::{ServeOptions, SessionOptions, Transport};
use pathchirp_rs::Onset;

const CROSS: f64 = 4.0;

/// The bench's options (`cargo bench -p pathchirp-rs --bench accuracy -- --help`).
#[derive(Debug, Clone, clap::Parser)]
struct Opts {
    /// Runs of each case.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    /// Where the bottleneck's shaper is.
    #[arg(long, value_delimiter = ',', default_values = ["sender", "router"], value_parser = ["sender", "router"])]
    shapers: Vec<String>,
    /// How probes travel.
    #[arg(long, value_delimiter = ',', default_values = ["udp", "mgrp"], value_parser = ["udp", "mgrp"])]
    transports: Vec<String>,
    /// The cross traffic (4 Mbit/s).
    #[arg(long, value_delimiter = ',', default_values = ["quiet", "cbr", "tcp"], value_parser = ["quiet", "cbr", "tcp"])]
    cross: Vec<String>,
    /// Where pathChirp reads the final queue's onset.
    #[arg(long, default_value = "tail", value_parser = onset)]
    onset: Onset,
    /// The bottleneck's burst, bytes.
    #[arg(long, default_value_t = 1540)]
    burst: u32,
    #[command(flatten)]
    cargo: mgrp_testbed::harness::CargoBench,
}

fn onset(text: &str) -> Result<Onset, String> {
    match text {
        "tail" => Ok(Onset::Tail),
        "output" => Ok(Onset::Output),
        "first-rise" => Ok(Onset::FirstRise),
        _ => Err(format!("{text:?}: tail, output or first-rise")),
    }
}

/// One run's figures.
#[derive(Debug, Clone)]
struct Figures {
    truth_chirp: f64,
    chirp: Option<f64>,
    chirp_measured: Option<f64>,
    first: Option<f64>,
    mb_per_minute: f64,
    rider_share: f64,
    truth_pathload: f64,
    pathload: Option<(f64, f64)>,
    pathload_mb: f64,
    pathload_s: f64,
}

fn run(o: &Opts, shaper: &str, transport: &str, cross: &str) -> anyhow::Result<Figures> {
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("10mbit".into(), o.burst.to_string())),
        router: shaper == "router",
        delay: None,
    })?;
    add_other_b(&net)?;
    let pair = daemons_for(&net, transport, &["--hold-mode", "always"])?;
    let t = if transport == "mgrp" {
        Transport::Mgrp
    } else {
        Transport::Udp
    };
    let (source, ip_size, payload): (Option<Source>, u32, u32) = match cross {
        "cbr" => (
            Some(udp_cbr(&net.a, &net.b, OTHER_B.into(), 9000, CROSS, 1490)?),
            1490,
            1462,
        ),
        "tcp" => (
            Some(tcp_paced_source(
                &net.a,
                &net.b,
                ADDR_B.into(),
                9000,
                CROSS,
            )?),
            1500,
            1448,
        ),
        _ => (None, 1490, 1462),
    };
    std::thread::sleep(Duration::from_millis(500));
    let stop = Arc::new(AtomicBool::new(false));
    let mut so = ServeOptions::new(t);
    if let Some((a, _)) = &pair {
        so.socket.clone_from(&a.socket);
    }
    let serving = serve_in(&net.a, so, &stop)?;
    std::thread::sleep(Duration::from_millis(300));
    let mut session = SessionOptions::new(ADDR_A.to_string(), t, "bench");
    if let Some((_, b)) = &pair {
        session.socket.clone_from(&b.socket);
    }
    let before = (source.as_ref().map_or(0, Source::bytes), Instant::now());
    let mut chirp_opts = pathchirp_rs::tool::MeasureOptions::new(
        ADDR_A.to_string(),
        t,
        Duration::from_secs(o.seconds),
    );
    chirp_opts.session = session.clone();
    chirp_opts.config.analysis.onset = o.onset;
    let never = AtomicBool::new(false);
    let chirped = net
        .b
        .run(|| pathchirp_rs::tool::measure(&chirp_opts, &never, &mut |_| {}))?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut load_opts = pathload_rs::tool::MeasureOptions::new(ADDR_A.to_string(), t);
    load_opts.session = session;
    load_opts.mode = pathload_rs::Mode::Fast;
    load_opts.max_time = Duration::from_secs(60);
    let loaded = net
        .b
        .run(|| pathload_rs::tool::measure(&load_opts, &never, &mut |_| {}))?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let bytes = source.as_ref().map_or(0, Source::bytes) - before.0;
    let cross_mbps = bytes as f64 * 8.0 / before.1.elapsed().as_secs_f64() / 1e6;
    stop.store(true, Ordering::Relaxed);
    let _ = serving.join();
    drop(source);
    // Riding traffic does not compete over MGRP; the adjusted estimate is judged
    // against the truth with it.
    let ip_mbps = cross_mbps * f64::from(ip_size) / f64::from(payload);
    let others = [(ip_mbps, ip_size)];
    let half = o.seconds as f64 / 2.0;
    let median = |pick: fn(&pathchirp_rs::tool::Point) -> Option<f64>| {
        let mut v: Vec<f64> = chirped
            .series
            .iter()
            .filter(|p| p.t >= half)
            .filter_map(pick)
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).map(|x| x / 1e6)
    };
    let o2 = &loaded.outcome;
    Ok(Figures {
        truth_chirp: ip_level_truth(10.0, 1028, &others),
        chirp: median(|p| p.adjusted_bps),
        chirp_measured: median(|p| p.smoothed_bps),
        first: chirped.first_estimate,
        mb_per_minute: chirped.counts.probe_bytes as f64
            / 1e6
            / (chirped.elapsed.as_secs_f64() / 60.0),
        rider_share: chirped.counts.riding_probe_bytes as f64
            / chirped.counts.probe_bytes.max(1) as f64,
        truth_pathload: ip_level_truth(10.0, 228, &others),
        pathload: loaded.converged().then_some((o2.low, o2.high)),
        pathload_mb: o2.probe_bytes as f64 / 1e6,
        pathload_s: loaded.elapsed.as_secs_f64(),
    })
}

fn main() -> ExitCode {
    let roles: &[Role] = &[("mgrpd", |a| mgrpd::main_with_args(a))];
    if let Some(code) = bench_start("accuracy", roles) {
        return code;
    }
    let o = <Opts as clap::Parser>::parse();
    println!(
        "| shaper | transport | cross | truth | pathChirp median (error) | measured | first estimate | MB/min | rider share | pathload truth | pathload range | pathload MB (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for shaper in &o.shapers {
        for transport in &o.transports {
            for cross in &o.cross {
                for _ in 0..o.runs {
                    match run(&o, shaper, transport, cross).context("run") {
                        Ok(f) => {
                            let err = f.chirp.map_or(String::from("-"), |c| {
                                format!("{c:.2} ({:+.1} %)", (c / f.truth_chirp - 1.0) * 100.0)
                            });
                            println!(
                                "| {shaper} | {transport} | {cross} | {:.2} | {err} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {:.2} ({:.1}) |",
                                f.truth_chirp,
                                f.chirp_measured.map_or("-".into(), |m| format!("{m:.2}")),
                                f.first.map_or("-".into(), |s| format!("{s:.1} s")),
                                f.mb_per_minute,
                                f.rider_share,
                                f.truth_pathload,
                                f.pathload
                                    .map_or("-".into(), |(a, b)| format!("{a:.2}-{b:.2}")),
                                f.pathload_mb,
                                f.pathload_s,
                            );
                        }
                        Err(e) => println!("| {shaper} | {transport} | {cross} | failed: {e:#} |"),
                    }
                }
            }
        }
    }
    ExitCode::SUCCESS
}
