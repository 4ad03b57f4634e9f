//! What the overlay's benches share: their entry, a process's CPU and memory,
//! quantiles.

use std::process::ExitCode;

/// A bench's `main`: the embedded daemon or overlay when started as one, else the
/// bench itself, as root, its error on stderr.
pub(crate) fn main_of<A: clap::Parser>(
    name: &str,
    bench: fn(&A) -> anyhow::Result<()>,
) -> ExitCode {
    if let Some(code) = super::embed::embedded() {
        return code;
    }
    let args = A::parse();
    if !mgrp_testbed::is_root() {
        eprintln!("{name}: needs root to create network namespaces");
        return ExitCode::FAILURE;
    }
    match bench(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Clock ticks per second of `/proc/PID/stat` (the kernel's fixed USER_HZ).
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) and resident memory (KiB) of process `pid`.
pub(crate) fn usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces, in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    Some((ticks as f64 / USER_HZ, rss))
}

/// The `q` quantile of `v` (sorted in place), NaN for none.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}
