//! How well pathload-rs measures a 10 Mbit/s tbf bottleneck (burst 1540) between two
//! namespaces, with the shaper on the sending host's egress or on a router between the
//! hosts, over plain UDP and over MGRP: quiet, with 4 Mbit/s of constant-rate UDP
//! cross traffic (1490-byte datagrams to an address outside the tunnel), and with a
//! 4 Mbit/s TCP flow sharing the path (through the tunnel over MGRP, so its packets
//! ride in the probes). For each case: exit statuses, the estimate against the
//! IP-level truth, how often the truth lies in the range ± ω, run time, fleets, probe
//! bytes and, over MGRP, the share of probe bytes that carried riders and the streams
//! timed by kernel queue stamps. Not run in CI (minutes of wall time); needs root.
//!
//! ```text
//! cargo bench -p pathload-rs --bench accuracy -- [--runs N] [--modes fast,slow]
//!     [--shapers sender,router] [--transports udp,mgrp] [--cross quiet,cbr,riding,tcp,sized-tcp,bursty]
//!     [--rcv "FLAGS"] [--rate MBIT_PER_S] [--burst BYTES] [--delay-ms MS] [--load N]
//!     [--original DIR]
//! ```
//!
//! `--rate` and `--burst` set the bottleneck (10 Mbit/s and 1540 bytes unless given;
//! the cross traffic stays 4 Mbit/s); `--delay-ms` puts a delay line between the
//! router and the receiver (`--shapers router`). `--load N` keeps N threads spinning beside the
//! runs, as N busy shells would (a loaded machine). One line per run, then a Markdown
//! table per case, with the share of runs whose range held the truth within ± ω and
//! within the namespace test's band (± 20 % of the truth).

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;

use common::{Case, Cross, Shaper, Tool, f, in_band, run_case_with};
use mgrp_testbed::harness::{Role, bench_start};

const MAX_TIME: u64 = 60;
const CROSS: f64 = 4.0;

/// The bench's options (`cargo bench -p pathload-rs --bench accuracy -- --help`).
#[derive(Debug, Clone, clap::Parser)]
struct Opts {
    /// Runs of each case.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// pathload-rs's modes.
    #[arg(long, value_delimiter = ',', default_values = ["fast"], value_parser = ["fast", "slow"])]
    modes: Vec<String>,
    /// Where the bottleneck's shaper is.
    #[arg(long, value_delimiter = ',', default_values = ["sender", "router"], value_parser = ["sender", "router"])]
    shapers: Vec<String>,
    /// How probes travel.
    #[arg(long, value_delimiter = ',', default_values = ["udp", "mgrp"], value_parser = ["udp", "mgrp"])]
    transports: Vec<String>,
    /// The cross traffic (4 Mbit/s).
    #[arg(long, value_delimiter = ',', default_values = ["quiet", "cbr", "tcp"], value_parser = ["quiet", "cbr", "riding", "tcp", "sized-tcp", "bursty"])]
    cross: Vec<String>,
    /// More flags for `pathload-rs rcv`, in one argument.
    #[arg(long, allow_hyphen_values = true, value_name = "FLAGS")]
    rcv: Option<String>,
    /// The bottleneck's rate, Mbit/s.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// The bottleneck's burst, bytes.
    #[arg(long, default_value_t = 1540)]
    burst: u32,
    /// Measure with the original pathload 1.3.2 instead of pathload-rs: the directory
    /// holding its `pathload_snd` and `pathload_rcv`, built by hand (over plain UDP
    /// only; run with 1 ns of timer slack, without which its sender's sleeps stretch
    /// every gap on this kind of host; it has no fast mode and takes no `--rcv` flags).
    #[arg(long, value_name = "DIR")]
    original: Option<std::path::PathBuf>,
    /// One-way delay between the router and the receiver, ms (the testbed's delay
    /// line, so the round trip is a real path's; router placement only).
    #[arg(long, default_value_t = 0)]
    delay_ms: u32,
    /// Threads kept spinning beside the runs (a loaded machine).
    #[arg(long, default_value_t = 0)]
    load: usize,
    #[command(flatten)]
    cargo: mgrp_testbed::harness::CargoBench,
}

/// One run: its exit status and, when it converged, its figures.
#[derive(Debug, Clone)]
struct Row {
    code: i32,
    truth: f64,
    /// The range, if it converged.
    range: Option<(f64, f64, f64, f64)>,
    /// The lower bound, if the run answered with one.
    bound: Option<f64>,
    omega: f64,
    seconds: f64,
    fleets: f64,
    probe_bytes: f64,
    riding: f64,
    streams: f64,
    kernel_stamped: f64,
    cross_mbps: f64,
    /// A paced TCP flow's most data segments within 1 ms.
    cross_burst: Option<u64>,
    wall: f64,
    /// Why the run ended.
    stop: String,
    /// Fleets judged no trend whose delays grew (pathload-rs only).
    hidden: f64,
}

impl Row {
    fn err(&self) -> Option<f64> {
        self.range
            .map(|(lo, hi, _, _)| ((lo + hi) / 2.0 - self.truth) / self.truth * 100.0)
    }
    /// The lower bound's error against the truth, per cent.
    fn berr(&self) -> Option<f64> {
        self.bound.map(|b| (b - self.truth) / self.truth * 100.0)
    }
    fn uerr(&self) -> Option<f64> {
        self.range
            .map(|(_, _, ulo, uhi)| ((ulo + uhi) / 2.0 - self.truth) / self.truth * 100.0)
    }
    fn inside(&self) -> bool {
        self.range.is_some_and(|(lo, hi, _, _)| {
            lo - self.omega <= self.truth && self.truth <= hi + self.omega
        })
    }
    /// Whether the range held the truth within the namespace test's band.
    fn in_band(&self) -> bool {
        self.range
            .is_some_and(|(lo, hi, _, _)| in_band(lo, hi, self.truth))
    }
    fn riding_share(&self) -> f64 {
        self.riding / self.probe_bytes.max(1.0) * 100.0
    }
}

fn one(case: Case, tool: Tool<'_>, mode: &str, rcv: &[String]) -> anyhow::Result<Row> {
    let mut extra = vec!["--mode", mode];
    extra.extend(rcv.iter().map(String::as_str));
    let m = run_case_with(case, tool, MAX_TIME, &extra)?;
    let r = &m.run.result;
    // What only pathload-rs says (the original's log has no probe bytes, streams or
    // stamps): not a number.
    let or_nan = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
    let range = if r["converged"] == true {
        Some((
            (f(r, "low_bps")? / 1e6),
            (f(r, "high_bps")? / 1e6),
            (f(r, "unadjusted_low_bps")? / 1e6),
            (f(r, "unadjusted_high_bps")? / 1e6),
        ))
    } else {
        None
    };
    Ok(Row {
        code: m.run.code,
        truth: m.truth,
        range,
        bound: r["lower_bound_bps"].as_f64().map(|b| b / 1e6),
        omega: or_nan("omega_bps") / 1e6,
        seconds: or_nan("elapsed_s"),
        fleets: f(r, "fleets")?,
        probe_bytes: or_nan("probe_bytes"),
        riding: or_nan("riding_probe_bytes"),
        streams: or_nan("streams"),
        kernel_stamped: or_nan("streams_kernel_stamped"),
        cross_mbps: m.cross_mbps,
        cross_burst: m.cross_burst,
        wall: m.run.wall.as_secs_f64(),
        stop: r["stop_reason"].as_str().unwrap_or("").to_owned(),
        hidden: or_nan("hidden_trend_fleets"),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> ExitCode {
    let roles: &[Role] = &[("mgrpd", |a| mgrpd::main_with_args(a))];
    if let Some(code) = bench_start("accuracy", roles) {
        return code;
    }
    let o = <Opts as clap::Parser>::parse();
    let rcv: Vec<String> = o
        .rcv
        .as_deref()
        .map(|v| v.split_whitespace().map(ToString::to_string).collect())
        .unwrap_or_default();
    // The load: threads that spin until the bench ends, as busy shells would.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..o.load)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    if o.delay_ms > 0 && o.shapers.iter().any(|s| s != "router") {
        eprintln!("accuracy: --delay-ms needs the router placement: give --shapers router");
        return ExitCode::from(2);
    }
    let tool = match &o.original {
        Some(dir) => {
            for program in ["pathload_snd", "pathload_rcv"] {
                if !dir.join(program).is_file() {
                    eprintln!(
                        "accuracy: no {program} in {} (--original names the directory of the original pathload 1.3.2's two programs)",
                        dir.display()
                    );
                    return ExitCode::from(2);
                }
            }
            if o.transports.iter().any(|t| t != "udp") {
                eprintln!(
                    "accuracy: the original pathload measures over plain UDP only: give --transports udp"
                );
                return ExitCode::from(2);
            }
            Tool::Original(dir)
        }
        None => Tool::Rs,
    };
    println!("# load: {} threads spinning beside the runs", o.load);
    println!(
        "# one-way delay between router and receiver: {} ms",
        o.delay_ms
    );
    if let Tool::Original(dir) = tool {
        println!(
            "# measured by the original pathload 1.3.2 in {}",
            dir.display()
        );
    }
    println!(
        "shaper\ttransport\tmode\tcross\trun\texit\ttruth\tlow\thigh\tunadj_low\tunadj_high\terr%\tinside\tseconds\twall\tfleets\tprobe_MB\triding%\tkernel_stamped\tcross_mbps\tlower_bound\tcross_burst\tstop\thidden_trend_fleets"
    );
    let mut table = Vec::new();
    for shaper in &o.shapers {
        let shaper = if shaper == "router" {
            Shaper::Router
        } else {
            Shaper::Sender
        };
        for cross in &o.cross {
            for mode in &o.modes {
                for transport in &o.transports {
                    let cross = match (cross.as_str(), transport.as_str()) {
                        ("quiet", _) => Cross::Quiet,
                        ("tcp", _) => Cross::Tcp(CROSS),
                        ("sized-tcp", _) => Cross::SizedTcp(CROSS),
                        ("riding", _) => Cross::CbrRiding(CROSS),
                        ("bursty", _) => Cross::BurstyTcp(CROSS),
                        _ => Cross::Cbr(CROSS),
                    };
                    let transport: &'static str = if transport == "mgrp" { "mgrp" } else { "udp" };
                    let case = Case {
                        rate: o.rate,
                        burst: o.burst,
                        delay_ms: o.delay_ms,
                        ..Case::ten(shaper, transport, cross)
                    };
                    let mut rows = Vec::new();
                    let mut errors = 0;
                    for run in 0..o.runs {
                        let head = format!(
                            "{}\t{transport}\t{mode}\t{}\t{run}",
                            shaper.name(),
                            cross.name()
                        );
                        match one(case, tool, mode, &rcv) {
                            Ok(r) => {
                                let (lo, hi, ulo, uhi) =
                                    r.range.unwrap_or((f64::NAN, f64::NAN, f64::NAN, f64::NAN));
                                println!(
                                    "{head}\t{}\t{:.2}\t{lo:.2}\t{hi:.2}\t{ulo:.2}\t{uhi:.2}\t{:+.1}\t{}\t{:.1}\t{:.1}\t{}\t{:.2}\t{:.0}\t{}/{}\t{:.2}\t{}\t{}\t{}\t{}",
                                    r.code,
                                    r.truth,
                                    r.err().unwrap_or(f64::NAN),
                                    r.inside(),
                                    r.seconds,
                                    r.wall,
                                    r.fleets,
                                    r.probe_bytes / 1e6,
                                    r.riding_share(),
                                    r.kernel_stamped,
                                    r.streams,
                                    r.cross_mbps,
                                    r.bound.map_or_else(String::new, |b| format!("{b:.2}")),
                                    r.cross_burst.map_or_else(String::new, |b| b.to_string()),
                                    r.stop,
                                    r.hidden,
                                );
                                rows.push(r);
                            }
                            Err(e) => {
                                errors += 1;
                                println!("{head}\terror: {e:#}");
                            }
                        }
                    }
                    table.push((case, mode.clone(), rows, errors));
                }
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in spinners {
        let _ = t.join();
    }
    println!(
        "\n| shaper | transport | mode | cross | runs | exit 0 | errors | truth in range ± ω | in the test's band (± 20 %) | median midpoint error | worst \\|error\\| | unadjusted error | lower bounds | their median error (worst) | median time | median fleets | median probe MB | riding share | streams kernel-stamped | TCP flow's most segments in 1 ms | runs saying a trend was hidden |"
    );
    println!(
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (case, mode, rows, errors) in &table {
        let m = |g: &dyn Fn(&Row) -> Option<f64>| median(rows.iter().filter_map(g).collect());
        let worst = rows
            .iter()
            .filter_map(Row::err)
            .map(f64::abs)
            .fold(f64::NAN, f64::max);
        let stamped: f64 = rows.iter().map(|r| r.kernel_stamped).sum();
        let streams: f64 = rows.iter().map(|r| r.streams).sum();
        println!(
            "| {} | {} | {mode} | {} | {} | {} | {errors} | {}/{} | {}/{} | {:+.1} % | {:.1} % | {:+.1} % | {} | {:+.1} % ({:+.1} %) | {:.1} s | {:.0} | {:.2} | {:.0} % | {stamped}/{streams} | {} | {}/{} |",
            case.shaper.name(),
            case.transport,
            case.cross.name(),
            rows.len() + errors,
            rows.iter().filter(|r| r.code == 0).count(),
            rows.iter().filter(|r| r.inside()).count(),
            rows.len() + errors,
            rows.iter().filter(|r| r.in_band()).count(),
            rows.len() + errors,
            m(&Row::err),
            worst,
            m(&Row::uerr),
            rows.iter().filter(|r| r.bound.is_some()).count(),
            m(&Row::berr),
            rows.iter().filter_map(Row::berr).fold(f64::NAN, |w, e| {
                if w.is_nan() || e.abs() > w.abs() {
                    e
                } else {
                    w
                }
            }),
            m(&|r| Some(r.seconds)),
            m(&|r| Some(r.fleets)),
            m(&|r| Some(r.probe_bytes / 1e6)),
            m(&|r| Some(r.riding_share())),
            rows.iter()
                .filter_map(|r| r.cross_burst)
                .max()
                .map_or_else(|| "—".to_owned(), |b| b.to_string()),
            rows.iter().filter(|r| r.hidden > 0.0).count(),
            rows.len() + errors,
        );
    }
    ExitCode::SUCCESS
}
