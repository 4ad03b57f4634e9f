//! End-to-end: `badabing-rs snd` on host A, `badabing-rs rcv` on host B, a
//! `tbf rate 10mbit burst 1540` bottleneck with a 100 ms drop-tail queue on a router
//! between them. Quiet, the path has no loss episode and the tool must report none
//! (frequency 0, no lost probe). With on/off UDP bursts from A to another address of
//! B (40 Mbit/s for 100 ms every second: the queue fills and drops for tens of ms each
//! second), over plain UDP and over MGRP (a real mgrpd on each host, this very binary
//! started as `namespaces mgrpd ...`), the tool must report episodes: a frequency and
//! a duration of at least a few slots, lost probes, and experiments that saw an
//! episode begin and end. The bench compares the figures with the truth counted at
//! the bottleneck; this test checks behaviour. Needs root, as CI has.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, ensure};
use mgrp_testbed::harness::Test;
use mgrp_testbed::tool::{add_other_b, bursts_to_other_b, daemons_for, snd_rcv_for, ten_mbit_path};
use mgrp_testbed::traffic::Source;

const BIN: &str = env!("CARGO_BIN_EXE_badabing-rs");
const SECONDS: u64 = 20;

fn case(transport: &str, bursts: bool) -> anyhow::Result<()> {
    let net = ten_mbit_path(true)?;
    add_other_b(&net)?;
    // Riders wait at most 1 ms for a probe, well below the 5 ms slot.
    let pair = daemons_for(&net, transport, &["--hold", "1ms"])?;
    let source: Option<Source> = if bursts {
        Some(bursts_to_other_b(&net)?)
    } else {
        None
    };
    let rcv = snd_rcv_for(
        &net,
        Path::new(BIN),
        transport,
        pair.as_ref(),
        &["--report", "5"],
        SECONDS,
    )?;
    drop(source);
    let log = &rcv.succeeded()?.log;
    ensure!(
        rcv.events("estimate").count() >= 2,
        "no report every 5 s: {log}"
    );
    let result = rcv.result()?;
    eprintln!("    {transport} bursts={bursts}: {result}");
    let e = &result["estimate"];
    let num = |k: &str| e[k].as_f64().with_context(|| format!("{k} missing in {e}"));
    let o = &e["outcomes"];
    let count = |k: &str| o[k].as_u64().unwrap_or(0);
    let experiments = count("n00") + count("n01") + count("n10") + count("n11");
    // 20 s of 1 s windows at p = 0.3: about 60 experiments each.
    ensure!(experiments > 500, "few experiments: {o}");
    if bursts {
        ensure!(num("packets_lost")? > 0.0, "no probe was lost: {e}");
        let f = num("frequency")?;
        ensure!((0.01..0.5).contains(&f), "frequency {f}: {e}");
        ensure!(
            count("n01") > 0 && count("n10") > 0,
            "no episode began or ended: {o}"
        );
        let d = num("duration_s")?;
        ensure!((0.01..0.5).contains(&d), "mean episode of {d} s: {e}");
    } else {
        ensure!(num("frequency")? == 0.0, "episodes on a quiet path: {e}");
        ensure!(num("packets_lost")? == 0.0, "losses on a quiet path: {e}");
        ensure!(e["duration_s"].is_null(), "a duration on a quiet path: {e}");
    }
    Ok(())
}

fn udp_quiet() -> anyhow::Result<()> {
    case("udp", false)
}
fn udp_bursts() -> anyhow::Result<()> {
    case("udp", true)
}
fn mgrp_bursts() -> anyhow::Result<()> {
    case("mgrp", true)
}

const TESTS: &[Test] = &[
    ("udp_quiet", udp_quiet),
    ("udp_bursts", udp_bursts),
    ("mgrp_bursts", mgrp_bursts),
];

fn main() -> ExitCode {
    mgrp_testbed::harness::main(&[("mgrpd", |a| mgrpd::main_with_args(a))], TESTS)
}
