//! A mesh of many members simulated without I/O (`mgrp_experiments::meshsim`):
//! the description's budget planned as the overlay plans it, each member's
//! overlay scheduler running it, estimates drawn about a hidden truth, the pairs
//! not measured inferred. Prints what it spent, how old every pair's value grew
//! and how close the values came to the truth.
//!
//! `cargo run --release --example mesh_sim -- --members 1000`

use std::process::ExitCode;

use mgrp_experiments::meshsim::run::{Ages, Report, run};
use mgrp_experiments::meshsim::{Setup, Shares};

const USAGE: &str =
    "usage: mesh_sim [--members N]... [--seed S] [--no-regions] [--any-age] [--shares-from RUN]
                [--plots DIR] [--description]

  --members N     members of the mesh (repeat for several runs; default 100 and 1000)
  --seed S        the seed of the truth, the jitter and the errors (default 1)
  --no-regions    the description gives no member's region (inference from access bounds alone)
  --any-age       inference takes its bounds from estimates of any age (by default one older
                  than the age goal bounds only where no fresher one does)
  --shares-from RUN  take the ride and passive shares from a mesh run's run.json (written
                  by mgrp-overlay's mesh_scale bench, e.g. docs/mesh-16/run.json): the share of
                  MGRP probe bytes riders filled and of due runs passive estimates stood in for
                  (default: none of either)
  --plots DIR     write each run's CDFs into DIR: ages-N-seedS.svg (each method's newest
                  estimate, every pair's value measured and inferred) and errors-N-seedS.svg
                  (every pair's |error| against the truth at the end)
  --description   print the description of the first run and stop";

fn main() -> ExitCode {
    let mut members = Vec::new();
    let mut seed = 1;
    let mut regions = true;
    let mut print_description = false;
    let mut any_age = false;
    let mut shares = None;
    let mut plots: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{a} takes {what}"))
        };
        let r = match a.as_str() {
            "--members" => {
                value("a number of members, 3 at least").map(|v| members.push(v as usize))
            }
            "--seed" => value("a number").map(|v| seed = v),
            "--no-regions" => {
                regions = false;
                Ok(())
            }
            "--any-age" => {
                any_age = true;
                Ok(())
            }
            "--shares-from" => match args.next() {
                Some(path) => shares_from(&path).map(|s| shares = Some((path, s))),
                None => Err("--shares-from takes the path of a mesh run's run.json".into()),
            },
            "--plots" => match args.next() {
                Some(dir) => {
                    plots = Some(dir.into());
                    Ok(())
                }
                None => Err("--plots takes a directory".into()),
            },
            "--description" => {
                print_description = true;
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = r {
            eprintln!("mesh_sim: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    if members.is_empty() {
        members = vec![100, 1000];
    }
    if members.iter().any(|&m| m < 3) {
        eprintln!("mesh_sim: a mesh of fewer than 3 members has no pair to infer\n{USAGE}");
        return ExitCode::from(2);
    }
    if let Some((path, s)) = &shares {
        println!(
            "shares from {path}: riders filled {:.2} % of MGRP probe bytes ({} of {}); passive estimates stood in for {:.2} % of due runs ({} of {})",
            100.0 * s.ride,
            s.rider_bytes,
            s.probe_bytes,
            100.0 * s.passive,
            s.covered,
            s.due
        );
    }
    for m in members {
        let mut setup = Setup {
            regions_given: regions,
            stale_bounds_last: !any_age,
            ..Setup::fixed(m, seed)
        };
        if let Some((_, s)) = &shares {
            setup.ride_share = s.ride;
            setup.passive_share = s.passive;
        }
        if print_description {
            let truth = mgrp_experiments::meshsim::truth::Truth::draw(m, seed);
            print!(
                "{}",
                mgrp_experiments::meshsim::run::description(&setup, &truth)
            );
            return ExitCode::SUCCESS;
        }
        let started = std::time::Instant::now();
        match run(&setup) {
            Ok(r) => {
                print!("{}", render(&r, started.elapsed()));
                if let Some(dir) = &plots
                    && let Err(e) = draw(dir, &r)
                {
                    eprintln!("mesh_sim: the plots: {e:#}");
                    return ExitCode::FAILURE;
                }
            }
            Err(e) => {
                eprintln!("mesh_sim: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The shares of the mesh run at `path`; the budget takes at most 0.95 of either.
fn shares_from(path: &str) -> Result<Shares, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let run: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    let s = Shares::of_mesh_run(&run).map_err(|e| format!("{path}: {e:#}"))?;
    if s.ride > 0.95 || s.passive > 0.95 {
        return Err(format!(
            "{path}: shares above 0.95 ({:.3}, {:.3}) are more than a budget takes",
            s.ride, s.passive
        ));
    }
    Ok(s)
}

/// The run's CDFs into `dir`.
fn draw(dir: &std::path::Path, r: &Report) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use mgrp_experiments::plot::cdf_lines;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let s = &r.setup;
    let shares = format!(
        "ride share {:.2} %, passive share {:.2} %",
        100.0 * s.ride_share,
        100.0 * s.passive_share
    );
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = r
        .methods
        .iter()
        .map(|(name, m)| (format!("{name}: newest estimate"), m.ages.cdf()))
        .collect();
    lines.push(("a measured pair's value".into(), r.measured_ages.cdf()));
    lines.push(("an inferred pair's value".into(), r.inferred_ages.cdf()));
    // The age goal and a little past it: the pathload-fast secondaries reach hours.
    let top = 2.0 * s.age.as_secs_f64();
    let clip = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        let mut out: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0 <= top).collect();
        if let Some(&(_, share)) = pts.iter().take_while(|p| p.0 <= top).last()
            && share < 1.0
        {
            out.push((top, share));
        }
        out
    };
    let lines: Vec<_> = lines.into_iter().map(|(n, p)| (n, clip(&p))).collect();
    let tag = format!("{}-seed{}", s.members, s.seed);
    let path = dir.join(format!("ages-{tag}.svg"));
    cdf_lines(
        &path,
        &format!(
            "{} members, sampled every minute: ages ({shares})",
            s.members
        ),
        "age, s",
        top,
        &lines,
    )?;
    println!("wrote {}", path.display());
    let path = dir.join(format!("errors-{tag}.svg"));
    cdf_lines(
        &path,
        &format!("{} members: every pair's |error| at the end", s.members),
        "|error| %",
        200.0,
        &[
            (
                format!("measured ({})", r.measured_errors.len()),
                permille(&r.measured_errors, 200.0),
            ),
            (
                format!("inferred ({})", r.inferred_errors.len()),
                permille(&r.inferred_errors, 200.0),
            ),
        ],
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

/// A CDF of `values` as a line through every 1/1000th of them (a million pairs'
/// steps would make a plot of megabytes), up to `top`.
fn permille(values: &[f64], top: f64) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let mut line = Vec::new();
    if v.is_empty() {
        return line;
    }
    for k in 0..=1000 {
        let share = f64::from(k) / 1000.0;
        let i = ((share * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        let x = if k == 0 { 0.0 } else { v[i] };
        if x > top {
            line.push((top, line.last().map_or(0.0, |p: &(f64, f64)| p.1)));
            break;
        }
        line.push((x, share));
    }
    line
}

fn pct((a, b): (usize, usize)) -> String {
    if b == 0 {
        "—".into()
    } else {
        format!("{:.1} % of {b}", 100.0 * a as f64 / b as f64)
    }
}

fn ages(a: &Ages) -> String {
    match (a.quantile(0.5), a.quantile(0.99)) {
        (Some(p50), Some(p99)) => format!("{p50:.0} s / {p99:.0} s"),
        _ => "—".into(),
    }
}

fn render(r: &Report, took: std::time::Duration) -> String {
    use std::fmt::Write as _;
    let s = &r.setup;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n# {} members, spread k = {}, {} ; {} routing; budget {} MB a node-hour, age {} s; ride share {:.4}, passive share {:.4}; regions {}; bounds {}; seed {}; {:.0} min simulated, judged from {:.0} min ({} events, {:.1} s)",
        s.members,
        s.k,
        s.methods.join(" + "),
        s.routing,
        s.node_mb_per_hour,
        s.age.as_secs(),
        s.ride_share,
        s.passive_share,
        if s.regions_given {
            "given"
        } else {
            "not given"
        },
        if s.stale_bounds_last {
            "fresh first"
        } else {
            "of any age"
        },
        s.seed,
        s.duration.as_secs_f64() / 60.0,
        s.judged_from.as_secs_f64() / 60.0,
        r.events,
        took.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "plan: affords an age of {} s; {} shortfalls{}",
        r.affords.as_secs(),
        r.shortfalls.len(),
        match r.shortfalls.as_slice() {
            [] => String::new(),
            [one] => format!(": {one}"),
            [first, .., last] => format!(", the first: {first}; the last: {last}"),
        }
    );
    let _ = writeln!(
        o,
        "pairs {} ordered, measured {} ({:.2} %), inferred the rest",
        r.pairs,
        r.measured_paths,
        100.0 * r.measured_paths as f64 / r.pairs as f64
    );
    let _ = writeln!(
        o,
        "\n| method | links | interval planned | runs (no estimate) | due runs passive stood in for | MB per link-hour | newest estimate's age p50 / p99 |\n|---|---|---|---|---|---|---|"
    );
    for (name, m) in &r.methods {
        let _ = writeln!(
            o,
            "| {name} | {} | {:.0}–{:.0} s | {} ({}) | {} | {:.2} | {} |",
            m.links,
            m.interval.0,
            m.interval.1,
            m.runs,
            m.failed,
            m.covered,
            m.bytes_per_link_hour / 1e6,
            ages(&m.ages)
        );
    }
    let total = r.probe_bytes_per_hour + r.heartbeat_bytes_per_hour + r.poll_bytes_per_hour;
    let _ = writeln!(
        o,
        "\nMB per link-hour over all pairs: {:.4} (probes {:.4}, heartbeats {:.4}, polls {:.4}; riders filled {:.4} more in probes, free); a full mesh at the same spending per measured path: {:.3}",
        r.per_pair_hour(total) / 1e6,
        r.per_pair_hour(r.probe_bytes_per_hour) / 1e6,
        r.per_pair_hour(r.heartbeat_bytes_per_hour) / 1e6,
        r.per_pair_hour(r.poll_bytes_per_hour) / 1e6,
        r.per_pair_hour(r.rider_bytes_per_hour) / 1e6,
        (r.probe_bytes_per_hour + r.poll_bytes_per_hour) / r.measured_paths.max(1) as f64 / 1e6
    );
    let all = {
        let mut a = r.measured_ages.clone();
        a.merge(&r.inferred_ages);
        a
    };
    let _ = writeln!(
        o,
        "age of every pair's value p50 / p99: {} (measured {}, inferred {}); samples without a value: {}",
        ages(&all),
        ages(&r.measured_ages),
        ages(&r.inferred_ages),
        r.without_value
    );
    let _ = writeln!(
        o,
        "within ±50 % of the truth: measured {}, inferred {} (inferred pairs without a bottleneck of their own: {}); inferred read above 1.5× the truth: {}",
        pct(r.measured_within),
        pct(r.inferred_within),
        pct(r.inferred_within_no_own),
        r.inferred_high
    );
    let _ = writeln!(
        o,
        "pairs of pairs ordered right: {} (more than 20 % apart: {})",
        pct(r.ordered),
        pct(r.ordered_far)
    );
    o
}
