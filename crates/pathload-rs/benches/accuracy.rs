//! How well pathload-rs measures a 10 Mbit/s tbf bottleneck (burst 1540) between two
//! namespaces, over plain UDP and over MGRP, with 0, 2 and 4 Mbit/s of constant-rate
//! UDP cross traffic (1490-byte datagrams to an address outside the tunnel) and with a
//! 4 Mbit/s TCP source sharing the path (through the tunnel over MGRP, so its packets
//! ride in the probes). For each setting: the estimate against the IP-level truth, how
//! often the truth lies in the range ± ω, run time, fleets, probe bytes and, over MGRP,
//! the share of probe bytes that carried riders. Not run in CI (minutes of wall time);
//! needs root.
//!
//! ```text
//! cargo bench -p pathload-rs --bench accuracy -- [--runs N] [--modes fast,slow]
//!     [--transports udp,mgrp] [--scenarios 0,2,4,tcp] [--packets K]
//! ```
//!
//! One line per run, then a Markdown table per setting.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::IpAddr;
use std::process::ExitCode;

use common::{OTHER_B, add_other_b, daemons, f, measure, net};
use mgrp_testbed::traffic::{ip_level_truth, tcp_source, udp_cbr};
use mgrp_testbed::{ADDR_B, Daemon};

const MAX_TIME: u64 = 60;

#[derive(Debug, Clone)]
struct Opts {
    runs: usize,
    modes: Vec<String>,
    transports: Vec<String>,
    scenarios: Vec<String>,
    packets: Option<String>,
}

fn opts() -> Opts {
    let mut o = Opts {
        runs: 10,
        modes: vec!["fast".into(), "slow".into()],
        transports: vec!["udp".into(), "mgrp".into()],
        scenarios: vec!["0".into(), "2".into(), "4".into(), "tcp".into()],
        packets: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = |v: &str| v.split(',').map(ToString::to_string).collect::<Vec<_>>();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--runs" => o.runs = value.parse().unwrap_or(o.runs),
            "--modes" => o.modes = list(&value),
            "--transports" => o.transports = list(&value),
            "--scenarios" => o.scenarios = list(&value),
            "--packets" => o.packets = Some(value),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

#[derive(Debug, Clone)]
struct Row {
    truth: f64,
    low: f64,
    high: f64,
    ulow: f64,
    uhigh: f64,
    omega: f64,
    seconds: f64,
    wall: f64,
    fleets: f64,
    probe_bytes: f64,
    riding: f64,
    code: i32,
}

impl Row {
    fn err(&self) -> f64 {
        ((self.low + self.high) / 2.0 - self.truth) / self.truth * 100.0
    }
    fn uerr(&self) -> f64 {
        ((self.ulow + self.uhigh) / 2.0 - self.truth) / self.truth * 100.0
    }
    fn inside(&self) -> bool {
        self.low - self.omega <= self.truth && self.truth <= self.high + self.omega
    }
}

fn one(transport: &str, mode: &str, scenario: &str, packets: Option<&str>) -> anyhow::Result<Row> {
    let net = net()?;
    let pair: Option<(Daemon, Daemon)> = if transport == "mgrp" {
        Some(daemons(&net)?)
    } else {
        None
    };
    add_other_b(&net)?;
    let mut extra = vec!["--mode", mode];
    if let Some(k) = packets {
        extra.extend(["--packets", k]);
    }
    let sockets = pair.as_ref().map(|(a, b)| (a, b));
    let (run, truth) = if scenario == "tcp" {
        let tcp = tcp_source(&net.a, &net.b, IpAddr::V4(ADDR_B), 9100, Some(4.0))?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        let run = measure(&net, transport, sockets, MAX_TIME, &extra)?;
        let ip = tcp.mbps() * 1500.0 / 1448.0;
        drop(tcp);
        (run, ip_level_truth(10.0, 228, &[(ip, 1500)]))
    } else {
        let rate: f64 = scenario.parse()?;
        let cross = if rate > 0.0 {
            Some(udp_cbr(
                &net.a,
                &net.b,
                IpAddr::V4(OTHER_B),
                9000,
                rate,
                1490,
            )?)
        } else {
            None
        };
        let run = measure(&net, transport, sockets, MAX_TIME, &extra)?;
        let ip = cross.as_ref().map_or(0.0, |c| c.mbps() * 1490.0 / 1462.0);
        drop(cross);
        (run, ip_level_truth(10.0, 228, &[(ip, 1490)]))
    };
    let r = &run.result;
    Ok(Row {
        truth,
        low: f(r, "low_mbps")?,
        high: f(r, "high_mbps")?,
        ulow: f(r, "unadjusted_low_mbps")?,
        uhigh: f(r, "unadjusted_high_mbps")?,
        omega: f(r, "omega_mbps")?,
        seconds: f(r, "seconds")?,
        wall: run.wall.as_secs_f64(),
        fleets: f(r, "fleets")?,
        probe_bytes: f(r, "probe_bytes")?,
        riding: f(r, "riding_probe_bytes")?,
        code: run.code,
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
    if let Some(code) = common::mgrpd_if_asked() {
        return code;
    }
    if !mgrp_testbed::is_root() {
        eprintln!("accuracy: needs root to create network namespaces");
        return ExitCode::FAILURE;
    }
    let o = opts();
    println!(
        "transport\tmode\tscenario\trun\ttruth\tlow\thigh\tunadj_low\tunadj_high\terr%\tinside\tseconds\twall\tfleets\tprobe_MB\triding%\texit"
    );
    let mut table = Vec::new();
    for scenario in &o.scenarios {
        for mode in &o.modes {
            for transport in &o.transports {
                let mut rows = Vec::new();
                for run in 0..o.runs {
                    match one(transport, mode, scenario, o.packets.as_deref()) {
                        Ok(r) => {
                            println!(
                                "{transport}\t{mode}\t{scenario}\t{run}\t{:.2}\t{:.2}\t{:.2}\t{:.2}\t{:.2}\t{:+.1}\t{}\t{:.1}\t{:.1}\t{}\t{:.2}\t{:.0}\t{}",
                                r.truth,
                                r.low,
                                r.high,
                                r.ulow,
                                r.uhigh,
                                r.err(),
                                r.inside(),
                                r.seconds,
                                r.wall,
                                r.fleets,
                                r.probe_bytes / 1e6,
                                r.riding / r.probe_bytes.max(1.0) * 100.0,
                                r.code
                            );
                            rows.push(r);
                        }
                        Err(e) => println!("{transport}\t{mode}\t{scenario}\t{run}\terror: {e:#}"),
                    }
                }
                table.push((transport.clone(), mode.clone(), scenario.clone(), rows));
            }
        }
    }
    println!(
        "\n| transport | mode | cross | runs | truth in range ± ω | median error of midpoint | median \\|error\\| | unadjusted error | median time | median fleets | median probe MB | riding share |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (transport, mode, scenario, rows) in &table {
        let m = |g: fn(&Row) -> f64| median(rows.iter().map(g).collect());
        println!(
            "| {transport} | {mode} | {} | {} | {}/{} | {:+.1} % | {:.1} % | {:+.1} % | {:.1} s | {:.0} | {:.2} | {:.0} % |",
            if scenario == "tcp" {
                "4 Mbit/s TCP".to_string()
            } else {
                format!("{scenario} Mbit/s UDP")
            },
            rows.len(),
            rows.iter().filter(|r| r.inside()).count(),
            rows.len(),
            m(Row::err),
            m(|r| r.err().abs()),
            m(Row::uerr),
            m(|r| r.seconds),
            m(|r| r.fleets),
            m(|r| r.probe_bytes / 1e6),
            m(|r| r.riding / r.probe_bytes.max(1.0) * 100.0),
        );
    }
    ExitCode::SUCCESS
}
