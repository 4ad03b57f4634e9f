//! The MGRP paper's microbenchmarks (§4.2) on the namespace testbed: pk1, pk2, pk3 and
//! pathload-rs pFAST / pSLOW, each with MGRP's piggybacking off (mgrpOFF) and on
//! (mgrp10), under STEP and WEB cross traffic, plus a run without probes per cross
//! traffic as the baseline of network friendliness. Writes per-second CSVs, the
//! figures as SVG and `results.md` with the tables.
//!
//! Run as root: `cargo run --release --example reproduce -- --help`. Not run by CI:
//! the default matrix takes about half an hour.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use mgrp_core::schedule::percentile;
use mgrp_experiments::experiment::{self, Cross, Experiment, Outcome, Probing, source_link_mbps};
use mgrp_experiments::pktrain::TrainShape;
use mgrp_testbed::accounting::Kind;
use mgrp_testbed::paper::Bottleneck;
use mgrp_testbed::traffic::{Steps, Web};

/// Reproduces the MGRP paper's §4.2 microbenchmarks on network namespaces (root).
#[derive(Debug, Parser)]
#[command(name = "reproduce")]
struct Args {
    /// Seconds each STEP cross-traffic step lasts; every run lasts six steps (the
    /// paper's steps are 45 s and its runs 300 s).
    #[arg(long, default_value_t = 12)]
    step_seconds: u64,
    /// Only the runs whose label contains one of these (comma-separated), e.g.
    /// `pk2.STEP,none`.
    #[arg(long)]
    only: Option<String>,
    /// Where the CSVs, plots and results.md go.
    #[arg(long, default_value = "docs/reproduction")]
    out: PathBuf,
}

fn main() -> ExitCode {
    experiment::main("reproduce", Args::parse, run)
}

fn matrix(step: Duration) -> Vec<Experiment> {
    let steps = Steps::paper(step);
    let base = Experiment {
        probing: Probing::None,
        piggyback: false,
        cross: Cross::Step(steps.clone()),
        duration: steps.period(),
        bottleneck: Bottleneck::default(),
        hold: Duration::from_millis(10),
        pathload_limit: Duration::from_secs(60),
    };
    let mut out = Vec::new();
    for cross in [Cross::Step(steps.clone()), Cross::Web(Web::default())] {
        out.push(Experiment {
            cross: cross.clone(),
            ..base.clone()
        });
        for probing in [
            Probing::Train(TrainShape::PK1),
            Probing::Train(TrainShape::PK2),
            Probing::Train(TrainShape::PK3),
            Probing::Pathload { fast: true },
            Probing::Pathload { fast: false },
        ] {
            for piggyback in [false, true] {
                out.push(Experiment {
                    probing,
                    piggyback,
                    cross: cross.clone(),
                    ..base.clone()
                });
            }
        }
    }
    out
}

fn run(args: &Args) -> anyhow::Result<()> {
    if !mgrp_testbed::is_root() {
        bail!("the reproduction builds network namespaces: run it as root");
    }
    mgrp_testbed::packages::require_for_demo()?;
    let me = std::env::current_exe()?;
    let mut runs = matrix(Duration::from_secs(args.step_seconds));
    if let Some(only) = &args.only {
        let keep: Vec<&str> = only.split(',').map(str::trim).collect();
        runs.retain(|e| keep.iter().any(|k| e.label().contains(k)));
    }
    if runs.is_empty() {
        bail!("--only matches no run");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let started = Instant::now();
    let mut done = Vec::new();
    for (i, exp) in runs.iter().enumerate() {
        mgrp_rt::outln!(
            "[{}/{}] {} ({} s) ...",
            i + 1,
            runs.len(),
            exp.label(),
            exp.duration.as_secs()
        );
        let mut quiet = |_: &experiment::Progress<'_>| {};
        let out = experiment::run(exp, &me, &mut quiet)?;
        let path = args.out.join(format!("{}.csv", out.label));
        std::fs::write(&path, out.csv())?;
        mgrp_rt::outln!(
            "      source {:.2} Mbit/s, probe-only {:.3}, in probes {:.2}; {} estimates",
            mean(&out.source_mbps()[1..]),
            out.mean_mbps(Kind::ProbeOnly, 1),
            out.mean_mbps(Kind::Piggybacked, 1),
            out.estimates.len()
        );
        done.push((exp.clone(), out));
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    report(args, &done, minutes)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    v
}

/// TCP payload bits delivered after the first second: the source's and, under WEB,
/// the cross traffic's (goodput at the receivers, retransmissions not counted).
fn tcp_bits(exp: &Experiment, out: &Outcome) -> f64 {
    let sum = |v: &[f64]| v.iter().skip(1).sum::<f64>() * 1e6;
    let cross = match exp.cross {
        Cross::Web(_) => sum(&out.cross_goodput),
        Cross::Step(_) => 0.0,
    };
    sum(&out.source_goodput) + cross
}

/// Per-run summary row.
struct Row {
    label: String,
    source: f64,
    goodput: f64,
    cross: f64,
    probe_only: f64,
    padding: f64,
    piggybacked: f64,
    source_p10: f64,
    source_p50: f64,
    below: f64,
    retransmits: u64,
    estimates: usize,
    converged: usize,
    completion_p50: f64,
    /// TCP bits lost per probe-only bit injected, against the run without probes.
    friendliness: Option<(f64, f64)>,
}

fn rows(done: &[(Experiment, Outcome)]) -> Vec<Row> {
    let demand = source_link_mbps();
    done.iter()
        .map(|(exp, out)| {
            let per_second = sorted(out.source_mbps()[1..].to_vec());
            let completions: Vec<f64> = sorted(
                out.estimates
                    .iter()
                    .filter(|e| e.converged)
                    .map(|e| e.ended - e.started)
                    .collect(),
            );
            let baseline = done
                .iter()
                .find(|(e, _)| e.probing == Probing::None && e.cross.name() == exp.cross.name());
            let friendliness = match (exp.probing, baseline) {
                (Probing::None, _) | (_, None) => None,
                (_, Some((be, bo))) => {
                    let lost = tcp_bits(be, bo) - tcp_bits(exp, out);
                    let probe = out.series.total(1, usize::MAX).get(Kind::ProbeOnly) as f64 * 8.0;
                    Some((lost / 1e6, lost / probe.max(1.0)))
                }
            };
            Row {
                label: out.label.clone(),
                source: mean(&out.source_mbps()[1..]),
                goodput: mean(out.source_goodput.get(1..).unwrap_or_default()),
                cross: out.mean_mbps(Kind::Cross, 1),
                probe_only: out.mean_mbps(Kind::ProbeOnly, 1),
                padding: out.series.total(1, usize::MAX).probe_padding as f64 * 8.0
                    / 1e6
                    / out.series.seconds.len().saturating_sub(1).max(1) as f64,
                piggybacked: out.mean_mbps(Kind::Piggybacked, 1),
                source_p10: percentile(&per_second, 10.0).unwrap_or(f64::NAN),
                source_p50: percentile(&per_second, 50.0).unwrap_or(f64::NAN),
                below: per_second.iter().filter(|&&x| x < 0.95 * demand).count() as f64
                    / per_second.len().max(1) as f64,
                retransmits: out.source_retransmits,
                estimates: out.estimates.len(),
                converged: completions.len(),
                completion_p50: percentile(&completions, 50.0).unwrap_or(f64::NAN),
                friendliness,
            }
        })
        .collect()
}

fn report(args: &Args, done: &[(Experiment, Outcome)], minutes: f64) -> anyhow::Result<()> {
    let out = &args.out;
    let rows = rows(done);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Results\n\nWritten by `cargo run --release --example reproduce -- --step-seconds {}{}` \
         ({} runs of {} s each, {minutes:.0} minutes in all). All rates are Mbit/s at the \
         bottleneck, counted on the link after its losses (Ethernet headers included); \
         the source's demand is {:.2} Mbit/s there. Source goodput is the payload its \
         receiver read (no headers, no retransmissions; demand 4.00), and the TCP bits \
         lost are goodput: the source's, and under WEB the cross traffic's too.\n",
        args.step_seconds,
        args.only
            .as_ref()
            .map_or(String::new(), |o| format!(" --only {o}")),
        done.len(),
        done.first().map_or(0, |(e, _)| e.duration.as_secs()),
        source_link_mbps()
    );
    let _ = writeln!(
        md,
        "| run | source | source goodput | cross | probe-only | of which empty padding | source in probes | source p10 / p50 per second | seconds below 95 % of demand | source retransmits | pathload estimates (converged) | median time to converge (s) | TCP Mbit delivered less than without probes | TCP bits lost per probe-only bit |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &rows {
        let (lost, per_bit) = r.friendliness.map_or(("".into(), "".into()), |(l, b)| {
            (format!("{l:.2}"), format!("{b:.2}"))
        });
        let est = if r.estimates == 0 {
            String::new()
        } else {
            format!("{} ({})", r.estimates, r.converged)
        };
        let completion = if r.completion_p50.is_finite() {
            format!("{:.1}", r.completion_p50)
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3} | {:.2} | {:.2} / {:.2} | {:.0} % | {} | {est} | {completion} | {lost} | {per_bit} |",
            r.label,
            r.source,
            r.goodput,
            r.cross,
            r.probe_only,
            r.padding,
            r.piggybacked,
            r.source_p10,
            r.source_p50,
            100.0 * r.below,
            r.retransmits,
        );
    }
    // Probe-only reduction per probe kind and cross traffic.
    let _ = writeln!(
        md,
        "\n## mgrp10 against mgrpOFF\n\n| probes | cross | probe-only bytes, change | empty padding, change | source Mbit/s, change | source p10, change | median time to converge, change |\n|---|---|---:|---:|---:|---:|---:|"
    );
    for r in rows.iter().filter(|r| r.label.starts_with("mgrp10.")) {
        let rest = r.label.trim_start_matches("mgrp10.");
        let Some(off) = rows.iter().find(|o| o.label == format!("mgrpOFF.{rest}")) else {
            continue;
        };
        let (probes, cross) = rest.split_once('.').unwrap_or((rest, ""));
        let pct = |a: f64, b: f64| {
            if b.abs() > 1e-9 && a.is_finite() && b.is_finite() {
                format!("{:+.0} %", 100.0 * (a / b - 1.0))
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            md,
            "| {probes} | {cross} | {} | {} | {:+.2} | {:+.2} | {} |",
            pct(r.probe_only, off.probe_only),
            pct(r.padding, off.padding),
            r.source - off.source,
            r.source_p10 - off.source_p10,
            pct(r.completion_p50, off.completion_p50),
        );
    }
    std::fs::write(out.join("results.md"), &md)?;

    // The figures.
    let find = |label: &str| done.iter().find(|(_, o)| o.label == label).map(|(_, o)| o);
    for cross in ["STEP", "WEB"] {
        let runs: Vec<&Outcome> = done
            .iter()
            .filter(|(e, _)| e.cross.name() == cross)
            .map(|(_, o)| o)
            .collect();
        if !runs.is_empty() {
            mgrp_experiments::plot::bars(
                &out.join(format!("{}-averages.svg", cross.to_lowercase())),
                &format!("{cross}: average of per-second throughputs"),
                &runs,
                1,
            )?;
        }
        for (group, kinds) in [
            ("pk", &["pk1", "pk2", "pk3"][..]),
            ("pathload", &["pFAST", "pSLOW"][..]),
        ] {
            let samples: Vec<(String, Vec<f64>)> = done
                .iter()
                .filter(|(e, _)| {
                    e.cross.name() == cross
                        && (kinds.contains(&e.probing.name()) || e.probing == Probing::None)
                })
                .map(|(_, o)| (o.label.clone(), o.source_mbps()[1..].to_vec()))
                .collect();
            if samples.len() > 1 {
                mgrp_experiments::plot::cdf(
                    &out.join(format!("{}-source-cdf-{group}.svg", cross.to_lowercase())),
                    &format!("{cross}: source throughput per second, {group} probes"),
                    "Mbit/s at the bottleneck",
                    &samples,
                )?;
            }
        }
        let completions: Vec<(String, Vec<f64>)> = done
            .iter()
            .filter(|(e, _)| {
                e.cross.name() == cross && matches!(e.probing, Probing::Pathload { .. })
            })
            .map(|(_, o)| {
                (
                    o.label.clone(),
                    o.estimates
                        .iter()
                        .filter(|e| e.converged)
                        .map(|e| e.ended - e.started)
                        .collect(),
                )
            })
            .collect();
        if !completions.is_empty() {
            mgrp_experiments::plot::cdf(
                &out.join(format!("{}-completion-cdf.svg", cross.to_lowercase())),
                &format!("{cross}: pathload-rs time to a converged estimate"),
                "seconds",
                &completions,
            )?;
        }
        for probes in ["pk2", "pFAST"] {
            if let (Some(a), Some(b)) = (
                find(&format!("mgrpOFF.{probes}.{cross}")),
                find(&format!("mgrp10.{probes}.{cross}")),
            ) {
                mgrp_experiments::plot::timeseries(
                    &out.join(format!(
                        "{}-timeseries-{}.svg",
                        cross.to_lowercase(),
                        probes.to_lowercase()
                    )),
                    &[a, b],
                    10.0,
                )?;
            }
        }
    }
    mgrp_rt::outln!(
        "\n{md}\nWrote {} and the plots beside it.",
        out.join("results.md").display()
    );
    Ok(())
}
