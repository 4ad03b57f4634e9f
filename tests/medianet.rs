//! The MGRP paper's §5 application, short: MediaNet's three streams from m3 to m5 on
//! the namespace testbed in mode `mgrp10.pFAST` (a Measurement Overlay on m5 measures
//! the path from m3 with pathload-rs through mgrpd, the streams riding in its
//! probes), for 60 s: 20 s of 8 Mbit/s cross traffic, then 40 s of 4. Checks
//! behaviour: frames are decoded at m5 on every stream; the global scheduler lowered
//! the streams on a local scheduler's report and raised them on an overlay estimate;
//! every frame the source generated is counted once (decoded, late, undecodable,
//! dropped at the sender as stale, or dropped by the adaptation), and what the
//! receiver counted is what the source wrote.
//!
//! This test has its own `main` (no libtest harness) so that it can also be mgrpd
//! and the overlay: they are this very binary started as `medianet mgrpd ...` and
//! `medianet overlay ...`. It needs root, as CI has; without root it fails and says
//! so.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::ensure;
use mgrp_experiments::experiment;
use mgrp_experiments::medianet::run::{self, Mode, Probing, Run, STREAMS};
use mgrp_experiments::medianet::scheduler::Cause;
use mgrp_testbed::traffic::Steps;

fn check() -> anyhow::Result<()> {
    let mut r = Run::paper(Mode {
        probing: Probing::Fast,
        mgrp: true,
    });
    r.cross = Steps {
        mbps: vec![8.0, 8.0, 4.0, 4.0, 4.0, 4.0],
        step: Duration::from_secs(10),
    };
    let out = run::run(&r, &std::env::current_exe()?, &mut |s, levels, believed| {
        if s % 5 == 0 {
            let l: Vec<&str> = levels.iter().map(|l| l.name()).collect();
            eprintln!("  {s:>3} s: levels {l:?}, believed {believed:.2} Mbit/s");
        }
    })?;
    eprintln!(
        "  {:.3} Mbit/s decoded, {:.2} frames/s; changes: {:?}; estimates: {:?}; fates: {:?}",
        out.mean_mbps(),
        out.mean_fps(),
        out.changes
            .iter()
            .map(|c| (
                c.at.round(),
                c.cause,
                c.to.iter().map(|l| l.name()).collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>(),
        out.estimates,
        out.fates
    );
    for s in 0..STREAMS {
        let decoded: u32 = out.fps(s).iter().sum();
        ensure!(decoded > 0, "stream {s}: no frame decoded at m5");
        let (sent, fates) = (&out.sent[s], &out.fates[s]);
        ensure!(
            sent.generated == fates.total(),
            "stream {s}: {} frames generated, {} counted: {fates:?}",
            sent.generated,
            fates.total()
        );
        ensure!(
            sent.written == fates.decoded + fates.late + fates.undecodable,
            "stream {s}: {} frames written, the receiver counted {fates:?}",
            sent.written
        );
    }
    ensure!(
        out.estimates.iter().any(|e| e.4),
        "the overlay gave no estimate: {:?}",
        out.estimates
    );
    ensure!(
        out.changes_for(Cause::LocalReport) >= 1,
        "8 Mbit/s of cross traffic on a 10 Mbit/s path and no local report lowered the streams"
    );
    ensure!(
        out.changes
            .iter()
            .any(|c| c.cause == Cause::Estimate && c.to.iter().zip(&c.from).any(|(t, f)| t > f)),
        "no overlay estimate raised a stream once the cross traffic fell: {:?}",
        out.changes
    );
    Ok(())
}

fn main() -> ExitCode {
    if let Some(code) = experiment::embedded_main() {
        return code;
    }
    if std::env::args().any(|a| a == "--list") {
        println!("medianet_on_the_paper_testbed: test");
        return ExitCode::SUCCESS;
    }
    if !mgrp_testbed::is_root() {
        eprintln!("medianet: needs root (network namespaces); CI runs it as root");
        return ExitCode::FAILURE;
    }
    eprintln!("medianet: mgrp10.pFAST for 60 s on the paper's testbed");
    match check() {
        Ok(()) => {
            println!("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("medianet: {e:#}");
            println!(
                "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out"
            );
            ExitCode::FAILURE
        }
    }
}
