//! The paper's pk2 experiment, short: a 4 Mbit/s TCP source and STEP cross traffic
//! on the namespace testbed, pk2 trains through mgrpd with piggybacking off and on.
//! Checks behaviour, in wide bands (the machine is shared): with piggybacking the
//! source rides in the probes and far fewer probe-only bytes cross the bottleneck;
//! what the link carried balances with what the receiving daemon counted.
//!
//! This test has its own `main` (no libtest harness) so that it can also be mgrpd:
//! the daemons are this very binary started as `experiment mgrpd ...`. It needs root,
//! as CI has; without root it fails and says so.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::ensure;
use mgrp_experiments::experiment::{self, Cross, Experiment, Outcome, Probing};
use mgrp_experiments::pktrain::TrainShape;
use mgrp_testbed::accounting::Kind;
use mgrp_testbed::paper::Bottleneck;
use mgrp_testbed::traffic::Steps;

fn run(piggyback: bool) -> anyhow::Result<Outcome> {
    let steps = Steps::paper(Duration::from_secs(2));
    let exp = Experiment {
        probing: Probing::Train(TrainShape::PK2),
        piggyback,
        cross: Cross::Step(steps.clone()),
        duration: steps.period(),
        bottleneck: Bottleneck::default(),
        hold: Duration::from_millis(10),
        pathload_limit: Duration::from_secs(60),
    };
    let out = experiment::run(&exp, &std::env::current_exe()?, &mut |_| {})?;
    let t = &out.link_total;
    eprintln!(
        "  {}: source {:.2} Mbit/s, probe-only {:.3}, riders {:.2}; link: {} MGRP packets, {} rider bytes; m5: {} received, {} rider bytes delivered",
        out.label,
        out.source_mbps().iter().skip(1).sum::<f64>() / (out.series.seconds.len() - 1) as f64,
        out.mean_mbps(Kind::ProbeOnly, 1),
        out.mean_mbps(Kind::Piggybacked, 1),
        t.mgrp_frames,
        t.rider_bytes,
        out.m5.daemon.mgrp_received,
        out.m5.daemon.rider_bytes_delivered,
    );
    // Every MGRP packet that crossed the link reached m5's daemon, and nothing else
    // did (x2 to m5 loses nothing); the accounting may miss a few under load.
    let (link, m5) = (t.mgrp_frames as f64, out.m5.daemon.mgrp_received as f64);
    ensure!(link > 0.0, "no MGRP packet crossed the link");
    ensure!(
        (m5 - link).abs() <= 0.01 * link + 5.0,
        "m5 received {m5} MGRP packets, the link carried {link}"
    );
    // m5 delivers whole riders: never more than the link carried, and all of them
    // but those a lost chunk left incomplete.
    let (carried, delivered) = (
        t.rider_bytes as f64,
        out.m5.daemon.rider_bytes_delivered as f64,
    );
    ensure!(
        delivered <= carried + 1.0 && delivered >= 0.95 * carried,
        "m5 delivered {delivered} rider bytes, the link carried {carried}"
    );
    Ok(out)
}

fn check() -> anyhow::Result<()> {
    let off = run(false)?;
    let on = run(true)?;
    ensure!(
        off.link_total.rider_bytes == 0,
        "riders without piggybacking"
    );
    ensure!(on.link_total.rider_bytes > 0, "nothing rode in the probes");
    let (p_off, p_on) = (
        off.mean_mbps(Kind::ProbeOnly, 1),
        on.mean_mbps(Kind::ProbeOnly, 1),
    );
    // pk2's 2 Mbit/s of probes are mostly filled by the 4 Mbit/s source (the paper:
    // over 85 % less probe-only traffic); a wide band here.
    ensure!(
        p_on < 0.6 * p_off,
        "probe-only traffic {p_on:.3} Mbit/s with piggybacking, {p_off:.3} without"
    );
    let source = |o: &Outcome| o.source_mbps().iter().skip(1).sum::<f64>();
    ensure!(
        source(&on) > 0.8 * source(&off),
        "the source carried less with piggybacking"
    );
    Ok(())
}

fn main() -> ExitCode {
    if let Some(code) = experiment::embedded_main() {
        return code;
    }
    if std::env::args().any(|a| a == "--list") {
        println!("pk2_on_the_paper_testbed: test");
        return ExitCode::SUCCESS;
    }
    if !mgrp_testbed::is_root() {
        eprintln!("experiment: needs root (network namespaces); CI runs it as root");
        return ExitCode::FAILURE;
    }
    eprintln!("pk2_on_the_paper_testbed ...");
    match check() {
        Ok(()) => {
            eprintln!("pk2_on_the_paper_testbed: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pk2_on_the_paper_testbed: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
