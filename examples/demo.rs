//! The MGRP demo on the paper's testbed (its Figure 4) in network namespaces: a
//! 10 Mbit/s, 40 ms bottleneck between routers x1 and x2, a 4 Mbit/s TCP source from
//! m3 to m5, the paper's STEP cross traffic from c1 to c2, and pathload-rs measuring
//! the path from m3 to m5 through mgrpd again and again: once with MGRP's
//! piggybacking off (mgrpOFF), once on (mgrp10). Everything is counted per second on
//! the bottleneck link itself. It prints the runs side by side and writes the series
//! as CSV and an SVG plot.
//!
//! Run as root: `cargo run --release --example demo` (`-- --help` for the options).
//! It removes everything it created when it ends, however it ends. The demo embeds
//! mgrpd and pathload-rs: it runs itself as either inside the namespaces.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use mgrp_experiments::experiment::{
    self, Cross, Experiment, Outcome, Probing, SOURCE_MBPS, capacity_mbps, source_link_mbps,
};
use mgrp_experiments::pktrain::TrainShape;
use mgrp_testbed::accounting::Kind;
use mgrp_testbed::paper::Bottleneck;
use mgrp_testbed::traffic::Steps;

/// MGRP demo: probes squeeze a TCP stream at a contended bottleneck unless they carry it.
///
/// Builds the MGRP paper's testbed in network namespaces (needs root), runs a 4 Mbit/s
/// TCP source, STEP cross traffic (1, 3, 5, 6, 4, 2 Mbit/s) and repeated pathload-rs
/// measurements through mgrpd, first without piggybacking (mgrpOFF), then with it
/// (mgrp10), and compares what crossed the bottleneck, measured on the link.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Seconds each cross-traffic step lasts (six steps per run; the paper's are 45).
    #[arg(long, default_value_t = 8)]
    step_seconds: u64,
    /// The probes: pfast or pslow (pathload-rs), or pk1, pk2, pk3 (packet trains).
    #[arg(long, default_value = "pfast")]
    probes: String,
    /// Bottleneck rate (tc units).
    #[arg(long, default_value = "10mbit")]
    rate: String,
    /// Round-trip delay across the bottleneck, milliseconds.
    #[arg(long, default_value_t = 40)]
    rtt_ms: u64,
    /// Random loss on the bottleneck, 0 to 1.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// How long a source packet may wait for a probe with piggybacking, milliseconds.
    #[arg(long, default_value_t = 10)]
    hold_ms: u64,
    /// Where the CSV files and the plot go.
    #[arg(long, default_value = "demo-out")]
    out: PathBuf,
}

fn main() -> ExitCode {
    experiment::main("demo", Args::parse, run)
}

fn preflight() -> anyhow::Result<PathBuf> {
    if !mgrp_testbed::is_root() {
        bail!(
            "the demo creates network namespaces, TUN devices and raw sockets: run it as root (sudo -E cargo run --release --example demo)"
        );
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        bail!(
            "/dev/net/tun is missing: load the tun module (modprobe tun) or run on a host with TUN support"
        );
    }
    mgrp_testbed::packages::require_for_demo()?;
    std::env::current_exe().context("cannot find the demo's own executable")
}

fn probing(name: &str) -> anyhow::Result<Probing> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "pfast" => Probing::Pathload { fast: true },
        "pslow" => Probing::Pathload { fast: false },
        "pk1" => Probing::Train(TrainShape::PK1),
        "pk2" => Probing::Train(TrainShape::PK2),
        "pk3" => Probing::Train(TrainShape::PK3),
        other => bail!("unknown probes {other:?}: use pfast, pslow, pk1, pk2 or pk3"),
    })
}

fn run(args: &Args) -> anyhow::Result<()> {
    let me = preflight()?;
    let capacity = capacity_mbps(&args.rate)?;
    let steps = Steps::paper(Duration::from_secs(args.step_seconds));
    let exp = Experiment {
        probing: probing(&args.probes)?,
        piggyback: false,
        cross: Cross::Step(steps.clone()),
        duration: steps.period(),
        bottleneck: Bottleneck {
            rate: args.rate.clone(),
            rtt: Duration::from_millis(args.rtt_ms),
            loss: args.loss,
            ..Bottleneck::default()
        },
        hold: Duration::from_millis(args.hold_ms),
        pathload_limit: Duration::from_secs(60),
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    mgrp_rt::outln!(
        "MGRP demo: m3 -> m5 over a {} bottleneck with {} ms round trip; a {SOURCE_MBPS} Mbit/s TCP source, STEP cross traffic (1, 3, 5, 6, 4, 2 Mbit/s, {} s each) and {} probes, without and with piggybacking ({} s each).\n",
        args.rate,
        args.rtt_ms,
        args.step_seconds,
        exp.probing.name(),
        exp.duration.as_secs()
    );
    let off = one(&exp, &me)?;
    let on = one(
        &Experiment {
            piggyback: true,
            ..exp.clone()
        },
        &me,
    )?;
    summary(&off, &on, &steps, args.step_seconds as usize);
    for r in [&off, &on] {
        let path = args.out.join(format!("{}.csv", r.label));
        std::fs::write(&path, r.csv())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let svg = args.out.join("demo.svg");
    mgrp_experiments::plot::timeseries(&svg, &[&off, &on], capacity)?;
    mgrp_rt::outln!(
        "\nWrote {}, {} and {}.",
        args.out.join(format!("{}.csv", off.label)).display(),
        args.out.join(format!("{}.csv", on.label)).display(),
        svg.display()
    );
    Ok(())
}

fn one(exp: &Experiment, me: &std::path::Path) -> anyhow::Result<Outcome> {
    mgrp_rt::outln!(
        "{}: building the testbed, starting mgrpd on m3 and m5 ...",
        exp.label()
    );
    let mut progress = |p: &experiment::Progress<'_>| {
        if !p.second.is_multiple_of(4) {
            return;
        }
        let link = p.last.map_or(String::new(), |s| {
            format!(
                "source {:.2}  in probes {:.2}  cross {:.2}  probe-only {:.2}",
                s.mbps(Kind::Source),
                s.mbps(Kind::Piggybacked),
                s.mbps(Kind::Cross),
                s.mbps(Kind::ProbeOnly)
            )
        });
        let est = p.estimates.last().map_or(String::new(), |e| {
            format!(
                "; estimate #{}: {:.1}-{:.1}",
                p.estimates.len(),
                e.low,
                e.high
            )
        });
        mgrp_rt::outln!(
            "  {:>3}/{} s  Mbit/s at the link: {link}{est}",
            p.second,
            p.of
        );
    };
    let out = experiment::run(exp, me, &mut progress)?;
    mgrp_rt::outln!("  done.\n");
    Ok(out)
}

/// A line of the side-by-side table: its label and how to read it off a run.
type Row = (&'static str, Box<dyn Fn(&Outcome) -> String>);

/// `x` seconds on average, or a word when no estimate converged.
fn seconds(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1} s on average")
    } else {
        "no converged estimate".into()
    }
}

/// Mean of `xs`, NaN for none.
fn mean(xs: impl IntoIterator<Item = f64>) -> f64 {
    let (s, n) = xs.into_iter().fold((0.0, 0), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { s / f64::from(n) }
}

fn summary(off: &Outcome, on: &Outcome, steps: &Steps, step_seconds: usize) {
    // The first second holds the source's slow start.
    let from = 1;
    let demand = source_link_mbps();
    let rows: Vec<Row> = vec![
        (
            "source throughput at the bottleneck (Mbit/s)",
            Box::new(move |r| format!("{:.2}", mean(r.source_mbps().into_iter().skip(from)))),
        ),
        (
            "source goodput at its receiver (Mbit/s of payload)",
            Box::new(move |r| format!("{:.2}", mean(r.source_goodput.iter().copied().skip(from)))),
        ),
        (
            "source carried inside probes (Mbit/s)",
            Box::new(move |r| format!("{:.2}", r.mean_mbps(Kind::Piggybacked, from))),
        ),
        (
            "seconds the source fell below 95 % of its demand",
            Box::new(move |r| {
                let v = r.source_mbps();
                let below = v.iter().skip(from).filter(|&&x| x < 0.95 * demand).count();
                format!("{below} of {}", v.len().saturating_sub(from))
            }),
        ),
        (
            "source segments retransmitted",
            Box::new(|r| r.source_retransmits.to_string()),
        ),
        (
            "cross traffic (Mbit/s)",
            Box::new(move |r| format!("{:.2}", r.mean_mbps(Kind::Cross, from))),
        ),
        (
            "probe-only traffic (Mbit/s)",
            Box::new(move |r| format!("{:.3}", r.mean_mbps(Kind::ProbeOnly, from))),
        ),
        (
            "probe MB: carrying source / empty padding / headers",
            Box::new(|r| {
                let t = r.series.total(0, usize::MAX);
                let only = t.get(Kind::ProbeOnly);
                let mb = |b: u64| b as f64 / 1e6;
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    mb(t.rider_bytes),
                    mb(t.probe_padding),
                    mb(only.saturating_sub(t.probe_padding))
                )
            }),
        ),
        (
            "pathload estimates: converged / other / cut off",
            Box::new(|r| {
                let ok = r.estimates.iter().filter(|e| e.converged).count();
                format!(
                    "{ok} / {} / {}",
                    r.estimates.len() - ok,
                    r.estimates_cut_off
                )
            }),
        ),
        (
            "mean time to an estimate (s)",
            Box::new(|r| {
                format!(
                    "{:.1}",
                    mean(
                        r.estimates
                            .iter()
                            .filter(|e| e.converged)
                            .map(|e| e.ended - e.started)
                    )
                )
            }),
        ),
        (
            "m5's rider bytes delivered / seen on the link",
            Box::new(|r| {
                format!(
                    "{} / {}",
                    r.m5.daemon.rider_bytes_delivered, r.link_total.rider_bytes
                )
            }),
        ),
        (
            "m5's MGRP packets received / seen on the link",
            Box::new(|r| {
                format!(
                    "{} / {}",
                    r.m5.daemon.mgrp_received, r.link_total.mgrp_frames
                )
            }),
        ),
    ];
    mgrp_rt::outln!("{:<52}{:>20}{:>20}", "", off.label, on.label);
    for (name, f) in &rows {
        mgrp_rt::outln!("{name:<52}{:>20}{:>20}", f(off), f(on));
    }

    mgrp_rt::outln!(
        "\nPer step, at the bottleneck (Mbit/s): the source's demand is {demand:.2} with headers"
    );
    mgrp_rt::outln!(
        "{:>6}{:>12}{:>18}{:>18}{:>16}{:>16}",
        "cross",
        "available",
        "source mgrpOFF",
        "source mgrp10",
        "probes mgrpOFF",
        "probes mgrp10"
    );
    for (i, cross) in steps.mbps.iter().enumerate() {
        // Skip each step's first second: the queue is still settling.
        let secs = (i * step_seconds + 1)..((i + 1) * step_seconds);
        let avg = |r: &Outcome, f: &dyn Fn(&mgrp_testbed::accounting::Second) -> f64| {
            mean(secs.clone().filter_map(|s| r.series.seconds.get(s)).map(f))
        };
        let source =
            |s: &mgrp_testbed::accounting::Second| s.mbps(Kind::Source) + s.mbps(Kind::Piggybacked);
        let probes = |s: &mgrp_testbed::accounting::Second| s.mbps(Kind::ProbeOnly);
        mgrp_rt::outln!(
            "{cross:>6.0}{:>12.2}{:>18.2}{:>18.2}{:>16.2}{:>16.2}",
            mean(secs.clone().filter_map(|s| off.truth.get(s).copied())),
            avg(off, &source),
            avg(on, &source),
            avg(off, &probes),
            avg(on, &probes),
        );
    }

    mgrp_rt::outln!(
        "\nEstimates (Mbit/s; the available bandwidth is averaged over each measurement):"
    );
    for r in [off, on] {
        for e in &r.estimates {
            let truth = mean(
                (e.started.max(0.0) as usize..=(e.ended as usize))
                    .filter_map(|s| r.truth.get(s).copied()),
            );
            let verdict = if !e.low.is_finite() {
                "no result".to_string()
            } else if truth >= e.low - 0.5 && truth <= e.high + 0.5 {
                "holds it (±0.5)".to_string()
            } else {
                format!("misses by {:.1}", (e.low - truth).max(truth - e.high))
            };
            mgrp_rt::outln!(
                "  {:<18} {:>5.1}-{:>5.1} s  {:>5.2}-{:>5.2}  available {:>5.2}  {verdict}{}",
                r.label,
                e.started,
                e.ended,
                e.low,
                e.high,
                truth,
                if e.converged {
                    ""
                } else {
                    " (did not converge)"
                }
            );
        }
    }
    let (t_off, t_on) = (
        off.series.total(from, usize::MAX),
        on.series.total(from, usize::MAX),
    );
    let change = |a: u64, b: u64| 100.0 * (a as f64 / (b as f64).max(1.0) - 1.0);
    let below = |r: &Outcome| {
        r.source_mbps()
            .iter()
            .skip(from)
            .filter(|&&x| x < 0.95 * demand)
            .count()
    };
    let per_estimate = |r: &Outcome| {
        mean(
            r.estimates
                .iter()
                .filter(|e| e.converged)
                .map(|e| e.ended - e.started),
        )
    };
    mgrp_rt::outln!(
        "\nWith piggybacking: probe-only bytes on the bottleneck {:+.0} % (empty padding {:+.0} %); the source fell below 95 % of its demand in {} seconds instead of {}; pathload-rs took {} to converge instead of {}.",
        change(t_on.get(Kind::ProbeOnly), t_off.get(Kind::ProbeOnly)),
        change(t_on.probe_padding, t_off.probe_padding),
        below(on),
        below(off),
        seconds(per_estimate(on)),
        seconds(per_estimate(off)),
    );
}
