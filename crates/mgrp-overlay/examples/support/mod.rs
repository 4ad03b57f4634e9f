//! What the overlay's benches share: their entry, a process's CPU and memory,
//! quantiles.

use std::process::ExitCode;

/// A bench's `main`: the embedded daemon or overlay when started as one, else the
/// bench itself, as root, its error on stderr. (mesh_scale has its own: its
/// `--analyse` needs no root.)
#[allow(dead_code)]
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

/// What one of a bench's processes used over the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Used {
    /// The node it runs on (its index in the bench).
    pub(crate) node: usize,
    /// An overlay, or else an mgrpd.
    pub(crate) overlay: bool,
    /// Share of one CPU, percent, from the meter's start.
    pub(crate) cpu_pct: f64,
    /// The most resident memory seen, MB.
    pub(crate) peak_rss_mb: f64,
}

impl Used {
    /// "overlay n3", "mgrpd n3". (The fan-out bench names its hub's instead.)
    #[allow(dead_code)]
    pub(crate) fn name(&self) -> String {
        let what = if self.overlay { "overlay" } else { "mgrpd" };
        format!("{what} n{}", self.node)
    }
}

/// The CPU and peak memory of every node's overlay and mgrpd, from when it is made.
pub(crate) struct Meter {
    /// Node, overlay or not, PID, CPU seconds at the start, peak RSS (KiB).
    procs: Vec<(usize, bool, u32, f64, u64)>,
    started: std::time::Instant,
}

impl Meter {
    /// Starts metering `overlays` and `daemons` (node i's are entry i of each).
    pub(crate) fn start(
        overlays: &[mgrp_testbed::Process],
        daemons: &[mgrp_testbed::Daemon],
    ) -> Self {
        let procs = overlays
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, true, p.pid()?)))
            .chain(
                daemons
                    .iter()
                    .enumerate()
                    .filter_map(|(i, d)| Some((i, false, d.process.pid()?))),
            )
            .map(|(i, overlay, pid)| (i, overlay, pid, usage(pid).map_or(0.0, |u| u.0), 0))
            .collect();
        Self {
            procs,
            started: std::time::Instant::now(),
        }
    }

    /// Looks at every process's memory (call it every second or so).
    pub(crate) fn sample(&mut self) {
        for p in &mut self.procs {
            if let Some((_, rss)) = usage(p.2) {
                p.4 = p.4.max(rss);
            }
        }
    }

    /// What each used from the start until now (CPU NaN for one that ended).
    pub(crate) fn used(&self) -> Vec<Used> {
        let elapsed = self.started.elapsed().as_secs_f64();
        self.procs
            .iter()
            .map(|&(node, overlay, pid, cpu0, rss)| Used {
                node,
                overlay,
                cpu_pct: usage(pid).map_or(f64::NAN, |u| (u.0 - cpu0) / elapsed * 100.0),
                peak_rss_mb: rss as f64 / 1024.0,
            })
            .collect()
    }
}
