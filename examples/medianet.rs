//! The MGRP paper's §5 experiment on the namespace testbed: three MPEG-like streams
//! from m3 to m5 adapted by a global scheduler, under PEAKS cross traffic, in Table
//! 3's five modes (no active measurement; pSLOW and pFAST through a Measurement
//! Overlay, without and with MGRP). Writes `results.md` (Table 3), a CSV per run and,
//! per mode, a plot like the paper's Figures 17–19.
//!
//! Run as root: `cargo run --release --example medianet -- --help`. Not run by CI:
//! the default (3 runs of 240 s in each of 5 modes) takes about an hour.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use mgrp_experiments::experiment;
use mgrp_experiments::medianet::run::{self, Mode, Outcome, Run, STREAMS, peaks};
use mgrp_experiments::medianet::scheduler::Cause;

/// Runs the MGRP paper's MediaNet experiment (§5, Table 3) on network namespaces
/// (root).
#[derive(Debug, Parser)]
#[command(name = "medianet")]
struct Args {
    /// Runs per mode.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Modes to run, comma-separated, from mgrpOFF.pOFF, mgrpOFF.pSLOW, mgrp10.pSLOW,
    /// mgrpOFF.pFAST, mgrp10.pFAST (default: all five).
    #[arg(long)]
    modes: Option<String>,
    /// Scales PEAKS's durations (1 = the paper's 240 s).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Where results.md, the CSVs and the plots go.
    #[arg(long, default_value = "docs/medianet")]
    out: PathBuf,
    /// Keep the overlays' logs of every run in DIR/<mode>-<run>/.
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
}

fn main() -> ExitCode {
    if let Some(code) = experiment::embedded_main() {
        return code;
    }
    let args = Args::parse();
    if !mgrp_testbed::is_root() {
        eprintln!("medianet: needs root to build the testbed's network namespaces");
        return ExitCode::from(2);
    }
    experiment::stop_on_signals();
    match run_all(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("medianet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_all(args: &Args) -> anyhow::Result<()> {
    let modes: Vec<Mode> = match &args.modes {
        None => Mode::TABLE3.to_vec(),
        Some(list) => list
            .split(',')
            .map(|l| Mode::parse(l.trim()).with_context(|| format!("unknown mode {l:?}")))
            .collect::<anyhow::Result<_>>()?,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let program = std::env::current_exe()?;
    let started = Instant::now();
    let mut results: Vec<(Mode, Vec<Outcome>)> = Vec::new();
    for mode in &modes {
        let mut outs = Vec::new();
        for i in 0..args.runs {
            let mut r = Run::paper(*mode);
            r.cross = peaks(args.scale);
            if let Some(dir) = &args.logs {
                let d = dir.join(format!("{}-{}", mode.label(), i + 1));
                std::fs::create_dir_all(&d)
                    .with_context(|| format!("cannot create {}", d.display()))?;
                r.logs = Some(d);
            }
            eprintln!("{} run {}/{}", mode.label(), i + 1, args.runs);
            let out = run::run(&r, &program, &mut |s, levels, believed| {
                if s % 10 == 0 {
                    let l: Vec<&str> = levels.iter().map(|l| l.name()).collect();
                    eprintln!("  {s:>4} s: levels {l:?}, believed {believed:.2} Mbit/s");
                }
            })?;
            eprintln!(
                "  {:.3} Mbit/s decoded, {:.2} frames/s; {} changes on estimates, {} on local reports; {} estimates",
                out.mean_mbps(),
                out.mean_fps(),
                out.changes_for(Cause::Estimate),
                out.changes_for(Cause::LocalReport),
                out.estimates.iter().filter(|e| e.4).count()
            );
            std::fs::write(
                args.out.join(format!("{}-{}.csv", mode.label(), i + 1)),
                csv(&out),
            )?;
            if i == 0 {
                mgrp_experiments::plot::medianet(
                    &out,
                    &args.out.join(format!("{}.svg", mode.label())),
                )?;
            }
            outs.push(out);
        }
        results.push((*mode, outs));
    }
    let md = table(&results, args, started.elapsed().as_secs_f64());
    std::fs::write(args.out.join("results.md"), &md)?;
    println!("{md}");
    Ok(())
}

/// One row per second: the available and believed bandwidth, each stream's level and
/// decoded frames, and the estimate that ended in that second if any.
fn csv(o: &Outcome) -> String {
    let mut s = String::from("second,available_mbps,believed_mbps");
    for i in 0..STREAMS {
        let _ = write!(s, ",fps{i},decoded_mbps{i}");
    }
    s.push_str(",estimate_low_mbps,estimate_high_mbps\n");
    let mut believed = f64::NAN;
    let mut beliefs = o.beliefs.iter().peekable();
    for sec in 0..o.seconds {
        while let Some((t, b, _)) = beliefs.peek() {
            if *t > (sec + 1) as f64 {
                break;
            }
            believed = *b;
            beliefs.next();
        }
        let _ = write!(s, "{sec},{:.3},{believed:.3}", o.available[sec]);
        for i in 0..STREAMS {
            let fps = o.fps(i)[sec];
            let bytes = o.received.decoded_bytes_per_second[i]
                .get(sec)
                .copied()
                .unwrap_or(0);
            let _ = write!(s, ",{fps},{:.3}", bytes as f64 * 8.0 / 1e6);
        }
        match o
            .estimates
            .iter()
            .find(|e| e.4 && e.1 >= sec as f64 && e.1 < (sec + 1) as f64)
        {
            Some(e) => {
                let _ = writeln!(s, ",{:.3},{:.3}", e.2, e.3);
            }
            None => s.push_str(",,\n"),
        }
    }
    s
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { sum / n as f64 }
}

fn table(results: &[(Mode, Vec<Outcome>)], args: &Args, wall: f64) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# MediaNet on the testbed (MGRP paper §5, Table 3)\n\n`cargo run --release --example medianet -- --runs {} --scale {}`, {:.0} s of wall time.\n",
        args.runs, args.scale, wall
    );
    let _ = writeln!(
        md,
        "| mode | runs | seconds | Mbit/s | vs mgrpOFF | vs original | frames/s | vs mgrpOFF | vs original | estimates per run | changes on estimates | changes on reports | decoded / late / undecodable / stale / adapted |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let avg = |mode: Mode| {
        results.iter().find(|(m, _)| *m == mode).map(|(_, o)| {
            (
                mean(o.iter().map(Outcome::mean_mbps)),
                mean(o.iter().map(Outcome::mean_fps)),
            )
        })
    };
    let original = avg(Mode::TABLE3[0]);
    let pct = |x: f64, base: Option<f64>| {
        base.filter(|b| *b > 0.0).map_or("–".to_string(), |b| {
            format!("{:+.1} %", (x / b - 1.0) * 100.0)
        })
    };
    for (mode, outs) in results {
        let (mbps, fps) = avg(*mode).unwrap_or((f64::NAN, f64::NAN));
        let without = (mode.mgrp).then(|| {
            avg(Mode {
                probing: mode.probing,
                mgrp: false,
            })
        });
        let without = without.flatten();
        let mut fates = [0u64; 5];
        for o in outs {
            for f in &o.fates {
                for (slot, v) in
                    fates
                        .iter_mut()
                        .zip([f.decoded, f.late, f.undecodable, f.stale, f.adapted])
                {
                    *slot += v;
                }
            }
        }
        let n = outs.len() as f64;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {mbps:.3} | {} | {} | {fps:.2} | {} | {} | {:.1} | {:.1} | {:.1} | {} |",
            mode.label(),
            outs.len(),
            outs.first().map_or(0, |o| o.seconds),
            pct(mbps, without.map(|w| w.0)),
            if Some(*mode) == Some(Mode::TABLE3[0]) {
                "–".to_string()
            } else {
                pct(mbps, original.map(|o| o.0))
            },
            pct(fps, without.map(|w| w.1)),
            if Some(*mode) == Some(Mode::TABLE3[0]) {
                "–".to_string()
            } else {
                pct(fps, original.map(|o| o.1))
            },
            outs.iter()
                .map(|o| o.estimates.iter().filter(|e| e.4).count() as f64)
                .sum::<f64>()
                / n,
            outs.iter()
                .map(|o| o.changes_for(Cause::Estimate) as f64)
                .sum::<f64>()
                / n,
            outs.iter()
                .map(|o| o.changes_for(Cause::LocalReport) as f64)
                .sum::<f64>()
                / n,
            fates.map(|f| f.to_string()).join(" / "),
        );
    }
    md
}
