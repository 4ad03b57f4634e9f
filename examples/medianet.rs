//! The MGRP paper's §5 experiment on the namespace testbed: three MPEG-like streams
//! from m3 to m5 adapted by a global scheduler, under PEAKS cross traffic, in Table
//! 3's five modes (no active measurement; pSLOW and pFAST through a Measurement
//! Overlay, without and with MGRP). Writes `results.md` (Table 3), a CSV per run and,
//! per mode, a plot like the paper's Figures 17–19.
//!
//! Run as root: `cargo run --release --example medianet -- --help`. Not run by CI:
//! the default (3 runs of 240 s in each of 5 modes) takes about an hour. Each run also
//! leaves a summary (`<mode>-<run>.json`), and the table pools runs 1 to the last one
//! made, so a long series can be made in parts: `--runs 2`, then
//! `--first-run 3 --runs 2`, and so on.

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
    /// Number the runs from N; the table then also counts runs 1 to N-1 of each mode,
    /// read from their summaries in the output directory.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    first_run: u32,
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
    if let Err(e) = mgrp_testbed::packages::require_for_demo() {
        eprintln!("medianet: {e}");
        return ExitCode::from(2);
    }
    experiment::stop_on_signals();
    experiment::exit("medianet", run_all(&args))
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
    let last = u32::try_from(args.runs)
        .ok()
        .and_then(|r| args.first_run.checked_add(r))
        .context("too many runs")?
        - 1;
    // Fail now, not after an hour of runs, if an earlier part is missing.
    for mode in &modes {
        for n in 1..args.first_run {
            let r = Summary::load(&args.out, *mode, n)?;
            fps_per_second(&csv_path(&args.out, *mode, n))?;
            if r.scale != args.scale {
                anyhow::bail!(
                    "{} run {n} in {} was made with --scale {}, not {}: pool only runs of one length",
                    r.mode,
                    args.out.display(),
                    r.scale,
                    args.scale
                );
            }
        }
    }
    for mode in &modes {
        if Summary::path(&args.out, &mode.label(), last + 1).exists() {
            eprintln!(
                "medianet: {} has runs of {} after run {last}; the table counts runs 1 to {last} only",
                args.out.display(),
                mode.label()
            );
        }
    }
    let commit = commit();
    let started = Instant::now();
    for mode in &modes {
        for n in args.first_run..=last {
            let mut r = Run::paper(*mode);
            r.cross = peaks(args.scale);
            if let Some(dir) = &args.logs {
                let d = dir.join(format!("{}-{n}", mode.label()));
                std::fs::create_dir_all(&d)
                    .with_context(|| format!("cannot create {}", d.display()))?;
                r.logs = Some(d);
            }
            let load = load_average();
            let mut loads = Vec::new();
            eprintln!("{} run {n} of {}-{last}", mode.label(), args.first_run);
            let out = run::run(&r, &program, &mut |s, levels, believed| {
                if s % 10 == 0 {
                    loads.extend(load_average());
                    let l: Vec<&str> = levels.iter().map(|l| l.name()).collect();
                    eprintln!("  {s:>4} s: levels {l:?}, believed {believed:.2} Mbit/s");
                }
            })?;
            let summary = Summary::of(&out, *mode, n, args.scale, (load, &loads), commit.clone());
            eprintln!(
                "  {:.3} Mbit/s decoded, {:.2} frames/s; {} changes on estimates, {} on local reports; {} estimates",
                summary.mbps,
                summary.fps,
                summary.changes_on_estimates,
                summary.changes_on_reports,
                summary.estimates
            );
            std::fs::write(csv_path(&args.out, *mode, n), csv(&out))?;
            summary.save(&args.out)?;
            if n == 1 {
                mgrp_experiments::plot::medianet(
                    &out,
                    &args.out.join(format!("{}.svg", mode.label())),
                )?;
            }
        }
    }
    let mut results: Vec<(Mode, Vec<Summary>)> = Vec::new();
    for mode in &modes {
        let runs = (1..=last)
            .map(|n| Summary::load(&args.out, *mode, n))
            .collect::<anyhow::Result<Vec<_>>>()?;
        results.push((*mode, runs));
    }
    let mut md = table(&results, args, started.elapsed().as_secs_f64());
    // The runs' own table is written even if a CSV cannot be read.
    match phase_table(&results, args) {
        Ok(t) => md.push_str(&t),
        Err(e) => eprintln!("medianet: no table per phase: {e:#}"),
    }
    std::fs::write(args.out.join("results.md"), &md)?;
    mgrp_rt::outln!("{md}");
    Ok(())
}

/// What the table needs of one run, kept beside its CSV so that runs made in parts
/// can be pooled.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Summary {
    mode: String,
    run: u32,
    scale: f64,
    seconds: usize,
    mbps: f64,
    fps: f64,
    /// Converged estimates the overlay reported.
    estimates: usize,
    changes_on_estimates: usize,
    changes_on_reports: usize,
    /// IP bytes of the overlay's probes, all of them and those that carried riders.
    #[serde(default)]
    probe_bytes: u64,
    #[serde(default)]
    riding_probe_bytes: u64,
    /// Frames decoded / late / undecodable / stale / dropped by adaptation, all streams.
    fates: [u64; 5],
    /// The 1-minute load average when the run started.
    load: Option<f64>,
    /// The 1-minute load average sampled every 10 s of the run: mean and maximum.
    #[serde(default)]
    load_during: Option<[f64; 2]>,
    /// The code the run was made with, as [`commit`] gives it.
    commit: Option<String>,
}

impl Summary {
    fn of(
        o: &Outcome,
        mode: Mode,
        run: u32,
        scale: f64,
        (load, during): (Option<f64>, &[f64]),
        commit: Option<String>,
    ) -> Self {
        let mut fates = [0u64; 5];
        for f in &o.fates {
            for (slot, v) in
                fates
                    .iter_mut()
                    .zip([f.decoded, f.late, f.undecodable, f.stale, f.adapted])
            {
                *slot += v;
            }
        }
        Self {
            mode: mode.label(),
            run,
            scale,
            seconds: o.seconds,
            mbps: o.mean_mbps(),
            fps: o.mean_fps(),
            estimates: o.estimates.iter().filter(|e| e.4).count(),
            changes_on_estimates: o.changes_for(Cause::Estimate),
            changes_on_reports: o.changes_for(Cause::LocalReport),
            probe_bytes: o.probe_bytes.0,
            riding_probe_bytes: o.probe_bytes.1,
            fates,
            load,
            load_during: (!during.is_empty()).then(|| {
                [
                    mean(during.iter().copied()),
                    during.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ]
            }),
            commit,
        }
    }

    fn path(dir: &std::path::Path, label: &str, run: u32) -> PathBuf {
        dir.join(format!("{label}-{run}.json"))
    }

    fn save(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        let path = Self::path(dir, &self.mode, self.run);
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    }

    fn load(dir: &std::path::Path, mode: Mode, run: u32) -> anyhow::Result<Self> {
        let path = Self::path(dir, &mode.label(), run);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "no summary of {} run {run} ({}): make it first (`--first-run {run} --runs 1`), or start this part at --first-run {run}",
                mode.label(),
                path.display(),
            )
        })?;
        let s: Self = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a run summary", path.display()))?;
        anyhow::ensure!(
            s.run == run && s.mode == mode.label(),
            "{} holds {} run {}, not {} run {run}",
            path.display(),
            s.mode,
            s.run,
            mode.label()
        );
        Ok(s)
    }
}

/// The 1-minute load average, if `/proc/loadavg` can be read.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The last commit that changed anything outside `docs/` (where results go), with
/// `-dirty` if such files have uncommitted changes: the code the runs were made with,
/// if this is a git checkout.
fn commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let hash = git(&["log", "-1", "--format=%h", "--", ".", ":!docs"])?;
    let dirty = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":!docs",
    ])?;
    (!hash.is_empty()).then(|| {
        if dirty.is_empty() {
            hash
        } else {
            format!("{hash}-dirty")
        }
    })
}

fn csv_path(dir: &std::path::Path, mode: Mode, run: u32) -> PathBuf {
    dir.join(format!("{}-{run}.csv", mode.label()))
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

fn table(results: &[(Mode, Vec<Summary>)], args: &Args, wall: f64) -> String {
    let mut md = String::new();
    let total = args.first_run as usize - 1 + args.runs;
    let part = if args.runs == 0 {
        "; the table alone, from runs made before".to_string()
    } else if args.first_run > 1 {
        format!(
            "; the last part (`--first-run {} --runs {}`) took {wall:.0} s of wall time",
            args.first_run, args.runs
        )
    } else {
        format!(", {wall:.0} s of wall time")
    };
    let _ = writeln!(
        md,
        "# MediaNet on the testbed (MGRP paper §5, Table 3)\n\n`cargo run --release --example medianet -- --runs {total} --scale {}`{part}.\n",
        args.scale
    );
    let all = results.iter().flat_map(|(_, r)| r);
    let loads: Vec<f64> = all.clone().filter_map(|r| r.load).collect();
    if !loads.is_empty() {
        let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(
            md,
            "Load average (1 min) at the runs' starts: {lo:.2}–{hi:.2}."
        );
    }
    let during: Vec<[f64; 2]> = all.clone().filter_map(|r| r.load_during).collect();
    if !during.is_empty() {
        let _ = writeln!(
            md,
            "During the runs (sampled every 10 s; {} of {} runs recorded it): mean {:.2}, maximum {:.2}.",
            during.len(),
            all.clone().count(),
            mean(during.iter().map(|d| d[0])),
            during
                .iter()
                .map(|d| d[1])
                .fold(f64::NEG_INFINITY, f64::max)
        );
    }
    let mut commits: Vec<&str> = all.filter_map(|r| r.commit.as_deref()).collect();
    commits.sort_unstable();
    commits.dedup();
    if !commits.is_empty() {
        let _ = writeln!(md, "Built from: {}.", commits.join(", "));
    }
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| mode | runs | seconds | Mbit/s | vs mgrpOFF | vs original | frames/s | vs mgrpOFF | vs original | estimates per run | probe MB per run | riding share | changes on estimates | changes on reports | decoded / late / undecodable / stale / adapted |"
    );
    let _ = writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let avg = |mode: Mode| {
        results.iter().find(|(m, _)| *m == mode).map(|(_, r)| {
            (
                mean(r.iter().map(|r| r.mbps)),
                mean(r.iter().map(|r| r.fps)),
            )
        })
    };
    let original = avg(Mode::TABLE3[0]);
    let pct = |x: f64, base: Option<f64>| {
        base.filter(|b| *b > 0.0).map_or("–".to_string(), |b| {
            format!("{:+.1} %", (x / b - 1.0) * 100.0)
        })
    };
    for (mode, runs) in results {
        let (mbps, fps) = avg(*mode).unwrap_or((f64::NAN, f64::NAN));
        let without = mode
            .mgrp
            .then(|| {
                avg(Mode {
                    probing: mode.probing,
                    mgrp: false,
                })
            })
            .flatten();
        let is_original = *mode == Mode::TABLE3[0];
        let mut fates = [0u64; 5];
        for r in runs {
            for (slot, v) in fates.iter_mut().zip(r.fates) {
                *slot += v;
            }
        }
        let per_run = |f: fn(&Summary) -> usize| mean(runs.iter().map(|r| f(r) as f64));
        let probes: u64 = runs.iter().map(|r| r.probe_bytes).sum();
        let riding: u64 = runs.iter().map(|r| r.riding_probe_bytes).sum();
        let share = if probes == 0 {
            "–".to_string()
        } else {
            format!("{:.0} %", riding as f64 * 100.0 / probes as f64)
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {mbps:.3} | {} | {} | {fps:.2} | {} | {} | {:.1} | {:.1} | {share} | {:.1} | {:.1} | {} |",
            mode.label(),
            runs.len(),
            runs.first().map_or(0, |r| r.seconds),
            pct(mbps, without.map(|w| w.0)),
            if is_original {
                "–".to_string()
            } else {
                pct(mbps, original.map(|o| o.0))
            },
            pct(fps, without.map(|w| w.1)),
            if is_original {
                "–".to_string()
            } else {
                pct(fps, original.map(|o| o.1))
            },
            per_run(|r| r.estimates),
            probes as f64 / 1e6 / runs.len() as f64,
            per_run(|r| r.changes_on_estimates),
            per_run(|r| r.changes_on_reports),
            fates.map(|f| f.to_string()).join(" / "),
        );
    }
    let _ = writeln!(md, "\nPer run, Mbit/s and frames/s decoded:\n");
    for (mode, runs) in results {
        let cells: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.3} / {:.2}", r.mbps, r.fps))
            .collect();
        let _ = writeln!(md, "- {}: {}", mode.label(), cells.join("; "));
    }
    md
}

/// Mean decoded frames per second in each phase of PEAKS (and after the first one),
/// from the runs' CSVs, averaged over the runs.
fn phase_table(results: &[(Mode, Vec<Summary>)], args: &Args) -> anyhow::Result<String> {
    let cross = peaks(args.scale);
    let step = cross.step.as_secs_f64();
    // (rate, from, to) in seconds of the run.
    let mut phases: Vec<(f64, f64, f64)> = Vec::new();
    for (i, rate) in cross.mbps.iter().enumerate() {
        let at = i as f64 * step;
        match phases.last_mut() {
            Some(p) if p.0 == *rate => p.2 = at + step,
            _ => phases.push((*rate, at, at + step)),
        }
    }
    let Some(first_end) = phases.first().map(|p| p.2) else {
        return Ok(String::new());
    };
    let mut md = String::from(
        "\nPer phase of PEAKS (cross traffic in Mbit/s), decoded frames/s summed over the streams and averaged over the runs:\n\n| mode |",
    );
    for (rate, from, to) in &phases {
        let _ = write!(md, " {from}–{to} s ({rate}) |");
    }
    let _ = write!(md, " after {first_end} s |\n|---|");
    md.push_str(&"---|".repeat(phases.len() + 1));
    md.push('\n');
    for (mode, runs) in results {
        let mut sums = vec![0.0; phases.len() + 1];
        for r in runs {
            let path = args.out.join(format!("{}-{}.csv", mode.label(), r.run));
            let per_second = fps_per_second(&path)?;
            let within = |from: f64, to: f64| {
                mean(
                    per_second
                        .iter()
                        .enumerate()
                        .filter(|(s, _)| (*s as f64 + 0.5) >= from && (*s as f64 + 0.5) < to)
                        .map(|(_, f)| *f),
                )
            };
            for (slot, (_, from, to)) in sums.iter_mut().zip(&phases) {
                *slot += within(*from, *to);
            }
            sums[phases.len()] += within(first_end, f64::INFINITY);
        }
        let _ = write!(md, "| {} |", mode.label());
        for s in &sums {
            let _ = write!(md, " {:.1} |", s / runs.len() as f64);
        }
        md.push('\n');
    }
    Ok(md)
}

/// The frames decoded in each second of a run, all streams, read from its CSV.
fn fps_per_second(path: &std::path::Path) -> anyhow::Result<Vec<f64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let columns: Vec<usize> = header
        .iter()
        .enumerate()
        .filter(|(_, h)| h.starts_with("fps"))
        .map(|(i, _)| i)
        .collect();
    anyhow::ensure!(!columns.is_empty(), "{} has no fps columns", path.display());
    lines
        .enumerate()
        .map(|(n, line)| {
            let cells: Vec<&str> = line.split(',').collect();
            columns
                .iter()
                .map(|c| {
                    cells
                        .get(*c)
                        .and_then(|v| v.parse::<f64>().ok())
                        .with_context(|| {
                            format!(
                                "{} line {}: no frame count in column {}",
                                path.display(),
                                n + 2,
                                c + 1
                            )
                        })
                })
                .sum::<anyhow::Result<f64>>()
        })
        .collect()
}
