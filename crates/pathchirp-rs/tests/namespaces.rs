//! End-to-end: `pathchirp-rs snd` on host A, `pathchirp-rs rcv` on host B, a
//! `tbf rate 10mbit burst 1540` bottleneck on a router between them, over plain UDP
//! and over MGRP (a real mgrpd on each host, this very binary started as
//! `namespaces mgrpd ...`): quiet, with 4 Mbit/s of constant-rate UDP cross traffic,
//! and over MGRP with a paced 4 Mbit/s TCP flow from A to B whose packets ride in the
//! chirps. Each case chirps for 30 s and is judged by the median of the smoothed
//! estimates over its last 10 s: quiet and with cross traffic beside the chirps it
//! must lie within a wide band of the truth; with the TCP flow riding, the measured
//! estimate is the quiet link's (the flow no longer competes) and the adjusted one must
//! lie within the band of the truth with the flow. Every chirp must be an
//! estimate or a discard with its reason, and riders may ride only where they can
//! (besides the flow, the measurement's own acknowledgements).
//! The bench measures how close the estimates are; this test checks behaviour. Needs
//! root, as CI has.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::ensure;
use mgrp_testbed::ADDR_B;
use mgrp_testbed::harness::Test;
use mgrp_testbed::tool::{OTHER_B, add_other_b, daemons_for, snd_rcv_for, ten_mbit_path};
use mgrp_testbed::traffic::{Source, ip_level_truth, tcp_paced_source, udp_cbr};

const BIN: &str = env!("CARGO_BIN_EXE_pathchirp-rs");
const SECONDS: u64 = 30;
/// The band around the truth: wide, for a behaviour test on a shared machine.
const BAND: f64 = 0.3;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cross {
    Quiet,
    Cbr,
    TcpRiding,
}

fn case(transport: &str, cross: Cross) -> anyhow::Result<()> {
    let net = ten_mbit_path(true)?;
    add_other_b(&net)?;
    let pair = daemons_for(&net, transport, &["--hold-mode", "always"])?;
    let (source, ip_size, payload): (Option<Source>, u32, u32) = match cross {
        Cross::Quiet => (None, 1490, 1462),
        Cross::Cbr => (
            Some(udp_cbr(&net.a, &net.b, OTHER_B.into(), 9000, 4.0, 1490)?),
            1490,
            1462,
        ),
        Cross::TcpRiding => (
            Some(tcp_paced_source(&net.a, &net.b, ADDR_B.into(), 9000, 4.0)?),
            1500,
            1448,
        ),
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = (
        source.as_ref().map_or(0, Source::bytes),
        std::time::Instant::now(),
    );
    let rcv = snd_rcv_for(&net, Path::new(BIN), transport, pair.as_ref(), &[], SECONDS)?;
    let bytes = source.as_ref().map_or(0, Source::bytes) - before.0;
    let cross_mbps = bytes as f64 * 8.0 / before.1.elapsed().as_secs_f64() / 1e6;
    drop(source);
    let log = &rcv.succeeded()?.log;
    let lines = &rcv.lines;
    let result = rcv.result()?;
    let ip_mbps = cross_mbps * f64::from(ip_size) / f64::from(payload);
    let truth = ip_level_truth(10.0, 1028, &[(ip_mbps, ip_size)]);
    let quiet = ip_level_truth(10.0, 1028, &[]);
    // The median smoothed estimate of the last 10 s, Mbit/s.
    let median = |key: &str| -> anyhow::Result<f64> {
        let mut tail: Vec<f64> = lines
            .iter()
            .filter(|v| {
                v["event"] == "chirp"
                    && v["t_s"].as_f64().is_some_and(|t| t > (SECONDS - 10) as f64)
            })
            .filter_map(|v| v["smoothed"][key].as_f64())
            .collect();
        ensure!(tail.len() >= 5, "too few estimates in the last 10 s: {log}");
        tail.sort_by(f64::total_cmp);
        Ok(tail[tail.len() / 2] / 1e6)
    };
    let (measured, adjusted) = (median("bps")?, median("adjusted_bps")?);
    eprintln!(
        "    {transport} {cross:?}: truth {truth:.2} Mbit/s (cross {cross_mbps:.2}), median of the last 10 s {measured:.2}, adjusted {adjusted:.2}: {result}"
    );
    let within = |v: f64, t: f64| (v / t - 1.0).abs() <= BAND;
    match cross {
        Cross::Quiet => ensure!(
            within(measured, truth),
            "median {measured:.2} Mbit/s is not within {:.0} % of the truth {truth:.2}",
            BAND * 100.0
        ),
        Cross::Cbr => ensure!(
            within(measured, truth),
            "median {measured:.2} Mbit/s is not within {:.0} % of the truth {truth:.2} (quiet {quiet:.2})",
            BAND * 100.0
        ),
        Cross::TcpRiding => {
            ensure!(
                within(measured, quiet),
                "median {measured:.2} Mbit/s: the riding flow should not compete (quiet {quiet:.2})"
            );
            ensure!(
                within(adjusted, truth),
                "adjusted median {adjusted:.2} Mbit/s is not within {:.0} % of the truth {truth:.2}",
                BAND * 100.0
            );
        }
    }
    let c = &result["counts"];
    let n = |k: &str| c[k].as_u64().unwrap_or(u64::MAX);
    ensure!(
        n("chirps")
            == n("estimates")
                + n("loss")
                + n("reorder")
                + n("stale")
                + n("coalesced")
                + n("unusable")
                + n("disturbed"),
        "chirps do not add up: {c}"
    );
    ensure!(n("estimates") >= 20, "few estimates: {c}");
    match (transport, cross) {
        ("mgrp", Cross::TcpRiding) => ensure!(n("rider_bytes") > 0, "nothing rode: {c}"),
        // Over MGRP the measurement's own control connection goes through the tunnel
        // too, and the sender's acknowledgement of a chirp's request may fall within
        // the chirp's lead and ride in its first probe; nothing else could ride. A pure
        // acknowledgement is at most 80 IP bytes (40 of headers, 40 of options).
        ("mgrp", _) => ensure!(
            n("rider_bytes") <= 80 * (n("riding_probe_bytes") / 1028),
            "more rode than the control connection's acknowledgements: {c}"
        ),
        _ => ensure!(n("rider_bytes") == 0, "riders where none could ride: {c}"),
    }
    Ok(())
}

fn udp_quiet() -> anyhow::Result<()> {
    case("udp", Cross::Quiet)
}
fn udp_cbr_cross() -> anyhow::Result<()> {
    case("udp", Cross::Cbr)
}
fn mgrp_quiet() -> anyhow::Result<()> {
    case("mgrp", Cross::Quiet)
}
fn mgrp_tcp_riding() -> anyhow::Result<()> {
    case("mgrp", Cross::TcpRiding)
}

const TESTS: &[Test] = &[
    ("udp_quiet", udp_quiet),
    ("udp_cbr_cross", udp_cbr_cross),
    ("mgrp_quiet", mgrp_quiet),
    ("mgrp_tcp_riding", mgrp_tcp_riding),
];

fn main() -> ExitCode {
    mgrp_testbed::harness::main(&[("mgrpd", |a| mgrpd::main_with_args(a))], TESTS)
}
