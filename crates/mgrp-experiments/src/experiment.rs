//! One run of the MGRP paper's microbenchmarks (its §4) on the namespace testbed of
//! [`mgrp_testbed::paper`]: a 4 Mbit/s TCP source from `m3` to `m5`, cross traffic
//! from `c1` to `c2` (STEP UDP or WEB TCP), and probes from `m3` to `m5` through mgrpd
//! (pk1/pk2/pk3 trains or repeated pathload-rs measurements), with piggybacking on
//! (`mgrp10`: every source packet may wait up to 10 ms for a probe) or off (`mgrpOFF`:
//! the probes still go through mgrpd, the source does not). What crossed the bottleneck
//! is counted per second on the link itself ([`mgrp_testbed::accounting`]).
//!
//! The daemons and pathload-rs are started as `PROGRAM mgrpd ...` and
//! `PROGRAM pathload-rs ...`: the calling program embeds both (see the demo).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mgrp_core::api::DaemonStats;
use mgrp_testbed::accounting::{Kind, Series};
use mgrp_testbed::link::realtime_ns;
use mgrp_testbed::paper::{Bottleneck, C2, M3, M5, Testbed};
use mgrp_testbed::traffic::{Source, Steps, Web, tcp_source, udp_steps, web};
use mgrp_testbed::{Daemon, Process};

use crate::pktrain::{self, SenderSummary, TrainShape};

/// The source's rate, Mbit/s of TCP payload (the paper's 4 Mbit/s stream).
pub const SOURCE_MBPS: f64 = 4.0;
/// IP size of the STEP cross traffic's datagrams.
pub const STEP_DATAGRAM: usize = 1000;
const SOURCE_PORT: u16 = 5001;
const CROSS_PORT: u16 = 6001;
const PATHLOAD_CONTROL_PORT: u16 = 55_002;
const TRAIN_PORTS: (u16, u16) = (7001, 7002);

/// Runs as mgrpd, pathload-rs or the Measurement Overlay when the program was started
/// as `PROGRAM mgrpd ..`, `PROGRAM pathload-rs ..` or `PROGRAM overlay ..` (how [`run`] starts them inside the namespaces); `None`
/// otherwise. Programs that run experiments call it first thing in `main`.
pub fn embedded_main() -> Option<std::process::ExitCode> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match argv.get(1).and_then(|a| a.to_str()) {
        Some("mgrpd") => Some(mgrpd::main_with_args(&argv[1..])),
        Some("overlay") => Some(mgrp_overlay::cli::main_with_args(&argv[1..])),
        Some("pathload-rs") => {
            let code = pathload_rs::tool::main_with_args(&argv[1..]);
            Some(std::process::ExitCode::from(
                u8::try_from(code).unwrap_or(1),
            ))
        }
        _ => None,
    }
}

/// The `main` of an experiment program called `name`: runs as an embedded program
/// when started as one ([`embedded_main`]), else parses its arguments with `parse`,
/// lets SIGINT and SIGTERM end the run cleanly ([`stop_on_signals`]) and runs `run`.
pub fn main<A>(
    name: &str,
    parse: impl FnOnce() -> A,
    run: impl FnOnce(&A) -> anyhow::Result<()>,
) -> std::process::ExitCode {
    if let Some(code) = embedded_main() {
        return code;
    }
    let args = parse();
    stop_on_signals();
    exit(name, run(&args))
}

/// The exit status of the program `name` for `result`, its error said on stderr.
pub fn exit(name: &str, result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM end a run early and cleanly: [`run`] returns an error
/// within a second, and everything it built (namespaces, daemons, traffic) is taken
/// down on the way out, instead of the process dying with them still there.
pub fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Whether SIGINT or SIGTERM arrived since [`stop_on_signals`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// The probes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probing {
    /// No probes: the baseline.
    None,
    /// The paper's synthetic trains.
    Train(TrainShape),
    /// pathload-rs measurements one after another: `fast` is pFAST (one round trip
    /// between streams), otherwise pSLOW (the original's pause).
    Pathload {
        /// pFAST rather than pSLOW.
        fast: bool,
    },
}

impl Probing {
    /// The paper's name for it.
    pub fn name(&self) -> &'static str {
        match *self {
            Self::None => "none",
            Self::Train(s) if s == TrainShape::PK1 => "pk1",
            Self::Train(s) if s == TrainShape::PK2 => "pk2",
            Self::Train(s) if s == TrainShape::PK3 => "pk3",
            Self::Train(_) => "train",
            Self::Pathload { fast: true } => "pFAST",
            Self::Pathload { fast: false } => "pSLOW",
        }
    }
}

/// The cross traffic of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Cross {
    /// Stepwise UDP of [`STEP_DATAGRAM`]-byte datagrams.
    Step(Steps),
    /// Web-like TCP flows.
    Web(Web),
}

impl Cross {
    /// The paper's name for it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Step(_) => "STEP",
            Self::Web(_) => "WEB",
        }
    }
}

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The probes.
    pub probing: Probing,
    /// `mgrp10` (true) or `mgrpOFF` (false).
    pub piggyback: bool,
    /// The cross traffic.
    pub cross: Cross,
    /// How long traffic runs.
    pub duration: Duration,
    /// The bottleneck.
    pub bottleneck: Bottleneck,
    /// How long a source packet may wait for a probe with piggybacking on.
    pub hold: Duration,
    /// A pathload measurement still running after this long is cut off and counts as
    /// not completed (the paper's 60 s).
    pub pathload_limit: Duration,
}

impl Experiment {
    /// The paper's label: `mgrp10.pk2.STEP`, say.
    pub fn label(&self) -> String {
        format!(
            "{}.{}.{}",
            if self.piggyback { "mgrp10" } else { "mgrpOFF" },
            self.probing.name(),
            self.cross.name()
        )
    }
}

/// One pathload measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// When it started, seconds from the run's start.
    pub started: f64,
    /// When it ended, seconds from the run's start.
    pub ended: f64,
    /// The range it reported, Mbit/s.
    pub low: f64,
    /// The range it reported, Mbit/s.
    pub high: f64,
    /// Whether it converged (exit 0) rather than stopping at a limit or failing.
    pub converged: bool,
    /// pathload-rs's exit code.
    pub exit_code: i32,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run's label.
    pub label: String,
    /// What crossed the bottleneck, second by second, for the run's duration.
    pub series: Series,
    /// The available bandwidth for a newcomer in each second, Mbit/s at the link
    /// (Ethernet headers counted): capacity minus the cross traffic offered (STEP) or
    /// carried (WEB) minus the source's demand.
    pub truth: Vec<f64>,
    /// pathload measurements, in order.
    pub estimates: Vec<Estimate>,
    /// pathload measurements cut off by the end of the run.
    pub estimates_cut_off: u32,
    /// Everything the link carried from the start of counting until the last frame
    /// had crossed (the series stops at the run's duration): what the daemons'
    /// counters are checked against.
    pub link_total: mgrp_testbed::accounting::Second,
    /// The source's TCP payload bytes the receiver read.
    pub source_bytes: u64,
    /// The source's goodput each second: payload Mbit/s its receiver read
    /// (retransmissions are link throughput but not goodput).
    pub source_goodput: Vec<f64>,
    /// The cross traffic's goodput each second, payload Mbit/s received.
    pub cross_goodput: Vec<f64>,
    /// Segments the source retransmitted.
    pub source_retransmits: u64,
    /// Cross-traffic payload bytes received.
    pub cross_bytes: u64,
    /// mgrpd's counters on `m3` at the end.
    pub m3: DaemonStats,
    /// mgrpd's counters on `m5` at the end.
    pub m5: DaemonStats,
    /// The trains' own summary, for pk runs.
    pub trains: Option<SenderSummary>,
}

/// Progress, once a second.
#[derive(Debug)]
pub struct Progress<'a> {
    /// Seconds since the run started.
    pub second: usize,
    /// The run's length, seconds.
    pub of: usize,
    /// The last complete second on the link.
    pub last: Option<&'a mgrp_testbed::accounting::Second>,
    /// pathload measurements so far.
    pub estimates: &'a [Estimate],
}

/// The link's capacity in Mbit/s, from a `tc` rate such as `10mbit`.
pub fn capacity_mbps(rate: &str) -> anyhow::Result<f64> {
    let r = rate.to_ascii_lowercase();
    let (num, scale) = if let Some(n) = r.strip_suffix("gbit") {
        (n, 1e3)
    } else if let Some(n) = r.strip_suffix("mbit") {
        (n, 1.0)
    } else if let Some(n) = r.strip_suffix("kbit") {
        (n, 1e-3)
    } else {
        anyhow::bail!("cannot read the rate {rate:?}: use kbit, mbit or gbit");
    };
    Ok(num.trim().parse::<f64>().context("rate")? * scale)
}

/// The source's demand at the link: TCP payload plus its 66 bytes of headers per
/// 1448-byte segment, and the Ethernet header.
pub fn source_link_mbps() -> f64 {
    SOURCE_MBPS * f64::from(1448 + 66) / 1448.0
}

/// mgrpd on `m3` (or `m5`): on `m3` with piggybacking it routes `m5` into its tunnel
/// and holds every packet up to `hold` for a probe (the paper's mgrp10); otherwise it
/// knows the other host as a peer only, and still routes it into the tunnel on demand
/// while a train whose probes allow riders is queued: a run without piggybacking must
/// ask its tools for probes without riders.
pub(crate) fn daemon(
    tb: &Testbed,
    program: &Path,
    m3: bool,
    piggyback: bool,
    hold: Duration,
) -> anyhow::Result<Daemon> {
    let (ns, other) = if m3 { (&tb.m3, M5) } else { (&tb.m5, M3) };
    let other = format!("{other}/32");
    let hold = format!("{}us", hold.as_micros());
    let mut args = vec!["--log-level", "warn"];
    if m3 && piggyback {
        // The paper's mgrp10: every source packet waits up to the hold for a probe.
        args.extend(["--route", &other, "--hold-mode", "always", "--hold", &hold]);
    } else {
        // Probes only: the source's packets (and, on m5, its acknowledgements) take
        // the normal path.
        args.extend(["--peer", &other]);
    }
    Daemon::start_via(ns, program, &["mgrpd"], &args)
        .with_context(|| format!("cannot start mgrpd on {}", if m3 { "m3" } else { "m5" }))
}

/// Runs `exp`, calling `progress` once a second.
pub fn run(
    exp: &Experiment,
    program: &Path,
    progress: &mut dyn FnMut(&Progress<'_>),
) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!interrupted(), "interrupted");
    let capacity = capacity_mbps(&exp.bottleneck.rate)?;
    let tb = Testbed::new(exp.bottleneck.clone()).context("cannot build the testbed")?;
    let a = daemon(&tb, program, true, exp.piggyback, exp.hold)?;
    let b = daemon(&tb, program, false, exp.piggyback, exp.hold)?;
    let accounting = tb.account()?;
    let start_ns = accounting.snapshot().start_ns;
    let source = tcp_source(
        &tb.m3,
        &tb.m5,
        IpAddr::V4(M5),
        SOURCE_PORT,
        Some(SOURCE_MBPS),
    )
    .context("cannot start the source")?;
    let cross: Source = match &exp.cross {
        Cross::Step(steps) => udp_steps(
            &tb.c1,
            &tb.c2,
            IpAddr::V4(C2),
            CROSS_PORT,
            steps.clone(),
            STEP_DATAGRAM,
        )?,
        Cross::Web(cfg) => web(&tb.c1, &tb.c2, IpAddr::V4(C2), CROSS_PORT, cfg)?,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let estimates = Arc::new(Mutex::new(Vec::new()));
    let prober = start_probing(exp, program, &tb, &a, &b, &stop, &estimates, start_ns)?;

    let t0 = Instant::now();
    let seconds = exp.duration.as_secs() as usize;
    let (mut source_goodput, mut cross_goodput) = (Vec::new(), Vec::new());
    let mut last = (source.bytes(), cross.bytes());
    for second in 1..=seconds {
        let due = t0 + Duration::from_secs(second as u64);
        while Instant::now() < due {
            if interrupted() {
                stop.store(true, Ordering::Relaxed);
                let _ = prober.finish();
                anyhow::bail!("interrupted; the testbed is being taken down");
            }
            std::thread::sleep(
                due.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100)),
            );
        }
        let now = (source.bytes(), cross.bytes());
        source_goodput.push((now.0 - last.0) as f64 * 8.0 / 1e6);
        cross_goodput.push((now.1 - last.1) as f64 * 8.0 / 1e6);
        last = now;
        let snap = accounting.snapshot();
        let est = estimates.lock().map(|e| e.clone()).unwrap_or_default();
        progress(&Progress {
            second,
            of: seconds,
            last: snap.seconds.get(second.saturating_sub(2)),
            estimates: &est,
        });
    }
    stop.store(true, Ordering::Relaxed);
    let (trains, cut_off) = prober.finish()?;
    let mut source = source;
    source.halt();
    let (source_bytes, source_retransmits) = (source.bytes(), source.retransmits());
    let cross_bytes = cross.stop();
    // Let the last frames cross the delay line before the count ends.
    std::thread::sleep(exp.bottleneck.rtt + Duration::from_millis(200));
    let mut series = accounting.stop()?;
    let link_total = series.total(0, usize::MAX);
    series.seconds.resize(seconds, Default::default());
    let m3 = a.quiescent_stats()?;
    let m5 = b.quiescent_stats()?;
    let truth = (0..seconds)
        .map(|s| {
            let cross = match &exp.cross {
                Cross::Step(steps) => {
                    steps.at(Duration::from_millis(s as u64 * 1000 + 500))
                        * (STEP_DATAGRAM + 14) as f64
                        / STEP_DATAGRAM as f64
                }
                Cross::Web(_) => series.seconds[s].mbps(Kind::Cross),
            };
            (capacity - cross - source_link_mbps()).max(0.0)
        })
        .collect();
    let estimates = estimates.lock().map(|e| e.clone()).unwrap_or_default();
    Ok(Outcome {
        label: exp.label(),
        series,
        truth,
        estimates,
        estimates_cut_off: cut_off,
        link_total,
        source_bytes,
        source_goodput,
        cross_goodput,
        source_retransmits,
        cross_bytes,
        m3,
        m5,
        trains,
    })
}

/// What the probing side ends with: the trains' summary (pk runs) and how many
/// pathload measurements the end of the run cut off.
type Probed = anyhow::Result<(Option<SenderSummary>, u32)>;

/// The probing side of a run, on its own thread.
struct Prober {
    thread: Option<std::thread::JoinHandle<Probed>>,
}

impl Prober {
    fn finish(mut self) -> Probed {
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => anyhow::bail!("the probing thread panicked"),
            None => Ok((None, 0)),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn start_probing(
    exp: &Experiment,
    program: &Path,
    tb: &Testbed,
    a: &Daemon,
    b: &Daemon,
    stop: &Arc<AtomicBool>,
    estimates: &Arc<Mutex<Vec<Estimate>>>,
    start_ns: i64,
) -> anyhow::Result<Prober> {
    let thread = match exp.probing {
        Probing::None => None,
        Probing::Train(shape) => {
            let (sa, sb) = (a.socket.clone(), b.socket.clone());
            let (duration, piggyback) = (exp.duration, exp.piggyback);
            let stop = stop.clone();
            Some(std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    let client_a = mgrp_client::Client::connect(&sa).await?;
                    let client_b = mgrp_client::Client::connect(&sb).await?;
                    let mut probes = client_b.listen(TRAIN_PORTS.1).await?;
                    let recv = pktrain::receive(&mut probes, duration + Duration::from_secs(1));
                    let send = pktrain::send(
                        &client_a,
                        IpAddr::V4(M5),
                        TRAIN_PORTS,
                        shape,
                        piggyback,
                        duration,
                    );
                    let stopped = async {
                        while !stop.load(Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    };
                    tokio::select! {
                        (sent, _) = async { tokio::join!(send, recv) } => Ok((Some(sent?), 0)),
                        () = stopped => Ok((None, 0)),
                    }
                })
            }))
        }
        Probing::Pathload { fast } => {
            let snd: Vec<String> = [
                "pathload-rs",
                "snd",
                "--transport",
                "mgrp",
                "--keep-serving",
                "--port",
                &PATHLOAD_CONTROL_PORT.to_string(),
                "--socket",
                &a.socket.display().to_string(),
            ]
            .iter()
            .map(ToString::to_string)
            .collect();
            let mut rcv: Vec<String> = [
                "pathload-rs",
                "rcv",
                "--sender",
                &M3.to_string(),
                "--port",
                &PATHLOAD_CONTROL_PORT.to_string(),
                "--transport",
                "mgrp",
                "--json",
                "--mode",
                if fast { "fast" } else { "slow" },
                "--max-time",
                &exp.pathload_limit.as_secs().to_string(),
                "--socket",
                &b.socket.display().to_string(),
            ]
            .iter()
            .map(ToString::to_string)
            .collect();
            if !exp.piggyback {
                rcv.push("--no-piggyback".into());
            }
            let sender = Process::spawn(&tb.m3, program, &snd)?;
            let m5 = tb.m5.name().to_owned();
            let (program, stop, estimates) =
                (program.to_path_buf(), stop.clone(), estimates.clone());
            let duration = exp.duration;
            Some(std::thread::spawn(move || {
                let r = pathload_loop(&m5, &program, &rcv, duration, &stop, &estimates, start_ns);
                drop(sender);
                r.map(|cut| (None, cut))
            }))
        }
    };
    Ok(Prober { thread })
}

/// Runs pathload-rs rcv on `m5` again and again until `stop`; returns how many were
/// cut off by the end.
fn pathload_loop(
    m5: &str,
    program: &Path,
    rcv: &[String],
    duration: Duration,
    stop: &AtomicBool,
    estimates: &Mutex<Vec<Estimate>>,
    start_ns: i64,
) -> anyhow::Result<u32> {
    let since = |ns_now: i64| (ns_now - start_ns) as f64 / 1e9;
    let mut cut_off = 0;
    // Let the sender come up.
    std::thread::sleep(Duration::from_millis(300));
    while !stop.load(Ordering::Relaxed) {
        let started = since(realtime_ns());
        if duration.as_secs_f64() - started < 2.0 {
            break;
        }
        let mut p = Process::spawn_in(m5, program, rcv)?;
        let status = loop {
            if let Some(s) = p.wait(Duration::from_millis(100)) {
                break Some(s);
            }
            if stop.load(Ordering::Relaxed) {
                break None;
            }
        };
        let Some(status) = status else {
            cut_off += 1;
            break;
        };
        let result = p
            .log()
            .lines()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["event"] == "result");
        let code = status.code().unwrap_or(-1);
        // No result at all (the peer went away, say) is recorded as not completed.
        let f = |k: &str| {
            result
                .as_ref()
                .and_then(|v| v[k].as_f64())
                .unwrap_or(f64::NAN)
        };
        if let Ok(mut e) = estimates.lock() {
            e.push(Estimate {
                started,
                ended: since(realtime_ns()),
                low: f("low_bps") / 1e6,
                high: f("high_bps") / 1e6,
                converged: result.is_some() && code == 0,
                exit_code: code,
            });
        }
        if result.is_none() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    Ok(cut_off)
}

impl Outcome {
    /// The source's throughput at the bottleneck each second, Mbit/s at the link: its
    /// own packets plus its bytes riding in probes.
    pub fn source_mbps(&self) -> Vec<f64> {
        self.series
            .seconds
            .iter()
            .map(|s| s.mbps(Kind::Source) + s.mbps(Kind::Piggybacked))
            .collect()
    }

    /// Mean per-second Mbit/s of `kind` over seconds `from..`.
    pub fn mean_mbps(&self, kind: Kind, from: usize) -> f64 {
        let n = self.series.seconds.len().saturating_sub(from).max(1);
        self.series.total(from, usize::MAX).get(kind) as f64 * 8.0 / 1e6 / n as f64
    }

    /// The per-second series as CSV: one row per second, Mbit/s at the link.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "second,source_mbps,cross_mbps,probe_only_mbps,probe_padding_mbps,piggybacked_mbps,other_mbps,available_mbps,estimate_low_mbps,estimate_high_mbps,source_goodput_mbps,cross_goodput_mbps\n",
        );
        for (i, s) in self.series.seconds.iter().enumerate() {
            let est = self
                .estimates
                .iter()
                .find(|e| e.ended as usize == i && e.low.is_finite());
            let (lo, hi) = est.map_or((String::new(), String::new()), |e| {
                (format!("{:.3}", e.low), format!("{:.3}", e.high))
            });
            let _ = writeln!(
                out,
                "{i},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{lo},{hi},{:.3},{:.3}",
                s.mbps(Kind::Source),
                s.mbps(Kind::Cross),
                s.mbps(Kind::ProbeOnly),
                s.probe_padding as f64 * 8.0 / 1e6,
                s.mbps(Kind::Piggybacked),
                s.mbps(Kind::Other),
                self.truth.get(i).copied().unwrap_or(f64::NAN),
                self.source_goodput.get(i).copied().unwrap_or(f64::NAN),
                self.cross_goodput.get(i).copied().unwrap_or(f64::NAN),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read() {
        assert_eq!(capacity_mbps("10mbit").unwrap(), 10.0);
        assert_eq!(capacity_mbps("1Gbit").unwrap(), 1000.0);
        assert_eq!(capacity_mbps("500kbit").unwrap(), 0.5);
        assert!(capacity_mbps("10").is_err());
        assert!(capacity_mbps("xmbit").is_err());
    }

    #[test]
    fn labels_are_the_papers() {
        let exp = Experiment {
            probing: Probing::Train(TrainShape::PK2),
            piggyback: true,
            cross: Cross::Step(Steps::paper(Duration::from_secs(45))),
            duration: Duration::from_secs(1),
            bottleneck: Bottleneck::default(),
            hold: Duration::from_millis(10),
            pathload_limit: Duration::from_secs(60),
        };
        assert_eq!(exp.label(), "mgrp10.pk2.STEP");
        let off = Experiment {
            piggyback: false,
            probing: Probing::Pathload { fast: true },
            cross: Cross::Web(Web::default()),
            ..exp
        };
        assert_eq!(off.label(), "mgrpOFF.pFAST.WEB");
    }
}
