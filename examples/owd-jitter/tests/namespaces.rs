//! End-to-end: `owd-jitter snd` on host A, `owd-jitter rcv` on host B, a
//! `tbf rate 10mbit burst 1540` bottleneck with a 100 ms drop-tail queue on a router
//! between them, over plain UDP. Quiet, the one-way delay barely varies: the tool
//! must see every train and a median variation of at most a few milliseconds (what a
//! busy host's scheduling adds). With on/off UDP bursts from A to another address of
//! B (40 Mbit/s for 100 ms every second), the queue fills and empties each second:
//! probes wait from nothing up to 100 ms, and the tool must see a 99th percentile of
//! tens of milliseconds. Over MGRP (a real mgrpd on each host, this very binary
//! started as `namespaces mgrpd ...`) with a TCP flow to B held for probes, the flow's
//! packets must ride in the trains and the path stay as quiet. Needs root, as CI has.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, ensure};
use mgrp_testbed::ADDR_B;
use mgrp_testbed::harness::Test;
use mgrp_testbed::tool::{add_other_b, bursts_to_other_b, daemons_for, snd_rcv, ten_mbit_path};
use mgrp_testbed::traffic::tcp_paced_source;

const BIN: &str = env!("CARGO_BIN_EXE_owd-jitter");

/// 40 trains of 50 probes 1 ms apart, one every 100 ms: 4 s, over four burst cycles.
const RUN: &[&str] = &["--trains", "40", "--every", "100ms"];

/// The run's `result` line and its `train` lines.
fn run(bursts: bool) -> anyhow::Result<(serde_json::Value, usize)> {
    let net = ten_mbit_path(true)?;
    add_other_b(&net)?;
    let source = if bursts {
        Some(bursts_to_other_b(&net)?)
    } else {
        None
    };
    let rcv = snd_rcv(
        &net,
        Path::new(BIN),
        "udp",
        None,
        RUN,
        Duration::from_secs(40),
    )?;
    drop(source);
    rcv.succeeded()?;
    let result = rcv.result()?.clone();
    eprintln!("    bursts={bursts}: {result}");
    Ok((result, rcv.events("train").count()))
}

fn num(v: &serde_json::Value, k: &str) -> anyhow::Result<f64> {
    v[k].as_f64().with_context(|| format!("{k} missing in {v}"))
}

fn quiet() -> anyhow::Result<()> {
    let (r, trains) = run(false)?;
    ensure!(trains == 40, "{trains} train lines: {r}");
    ensure!(num(&r, "sent")? == 2000.0, "not every probe left: {r}");
    ensure!(
        num(&r, "received")? == 2000.0,
        "probes lost on a quiet path: {r}"
    );
    ensure!(
        num(&r, "pdv_p50_s")? < 0.003,
        "a quiet path's delay varies: {r}"
    );
    ensure!(num(&r, "ipdv_mean_s")? < 0.003, "{r}");
    Ok(())
}

fn bursts() -> anyhow::Result<()> {
    let (r, trains) = run(true)?;
    ensure!(trains == 40, "{trains} train lines: {r}");
    ensure!(num(&r, "received")? > 500.0, "few probes came: {r}");
    let p99 = num(&r, "pdv_p99_s")?;
    ensure!(
        (0.02..0.5).contains(&p99),
        "a filling queue's delay variation {p99} s: {r}"
    );
    ensure!(num(&r, "ipdv_mean_s")? > 0.0, "{r}");
    Ok(())
}

/// 40 trains of 50 full-size probes 2 ms apart (6 Mbit/s, under the bottleneck's 10),
/// one every 150 ms, with a 2 Mbit/s TCP flow to B riding in them.
fn mgrp_riding() -> anyhow::Result<()> {
    let net = ten_mbit_path(true)?;
    let pair = daemons_for(&net, "mgrp", &["--hold-mode", "always"])?;
    let _flow = tcp_paced_source(&net.a, &net.b, ADDR_B.into(), 9000, 2.0)?;
    std::thread::sleep(Duration::from_millis(500));
    let args = [
        "--trains", "40", "--every", "150ms", "--gap", "2ms", "--size", "1500",
    ];
    let rcv = snd_rcv(
        &net,
        Path::new(BIN),
        "mgrp",
        pair.as_ref(),
        &args,
        Duration::from_secs(40),
    )?;
    rcv.succeeded()?;
    let r = rcv.result()?;
    eprintln!("    mgrp riding: {r}");
    ensure!(num(r, "received")? == 2000.0, "probes lost: {r}");
    ensure!(num(r, "rider_bytes")? > 0.0, "nothing rode: {r}");
    ensure!(num(r, "pdv_p50_s")? < 0.003, "the path's delay varies: {r}");
    let per_train: f64 = rcv
        .events("train")
        .map(|t| t["rider_bytes"].as_f64().unwrap_or(0.0))
        .sum();
    ensure!(
        per_train == num(r, "rider_bytes")?,
        "the trains' riders do not add up to the run's: {per_train} B, {r}"
    );
    Ok(())
}

const TESTS: &[Test] = &[
    ("quiet", quiet),
    ("bursts", bursts),
    ("mgrp_riding", mgrp_riding),
];

fn main() -> ExitCode {
    mgrp_testbed::harness::main(&[("mgrpd", |a| mgrpd::main_with_args(a))], TESTS)
}
