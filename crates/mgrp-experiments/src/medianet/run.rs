//! One run of the §5 experiment on the paper's testbed: three streams from `m3` to
//! `m5` under PEAKS cross traffic from `c1` to `c2`, the global scheduler fed by the
//! local schedulers and, unless the mode has no active measurement, by a Measurement
//! Overlay on `m5` that measures the path from `m3` with pathload-rs (pFAST or pSLOW)
//! through mgrpd, with the streams riding in the probes (`mgrp10`) or not
//! (`mgrpOFF`).
//!
//! The daemons and overlays are the calling program started as `PROGRAM mgrpd ..` and
//! `PROGRAM overlay ..` ([`crate::experiment::embedded_main`]).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mgrp_testbed::link::realtime_ns;
use mgrp_testbed::paper::{Bottleneck, C2, M3, M5, Testbed};
use mgrp_testbed::traffic::{Steps, udp_steps};
use mgrp_testbed::{Netns, Process};

use super::media::Level;
use super::scheduler::{Cause, Change, GlobalScheduler, OverlayEstimate, Settings};
use super::streams::{Fates, LocalScheduler, Received, Sent, Sink, StreamSpec};
use crate::experiment::{STEP_DATAGRAM, capacity_mbps, daemon, interrupted};

/// Streams the source sends.
pub const STREAMS: usize = 3;
const STREAM_PORT: u16 = 5101;
const CROSS_PORT: u16 = 6101;
const OVERLAY_HTTP: u16 = 7700;
const OVERLAY_MGRP_PORT: u16 = 55_002;
const LINK: &str = "m3";

/// Active measurement in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probing {
    /// None: the original MediaNet (`pOFF`).
    Off,
    /// pathload-rs in slow mode (`pSLOW`).
    Slow,
    /// pathload-rs in fast mode (`pFAST`).
    Fast,
}

/// One of Table 3's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// The measurement.
    pub probing: Probing,
    /// Whether the streams ride in the probes (`mgrp10`) or not (`mgrpOFF`).
    pub mgrp: bool,
}

impl Mode {
    /// Table 3's five modes, in its order.
    pub const TABLE3: [Self; 5] = [
        Self {
            probing: Probing::Off,
            mgrp: false,
        },
        Self {
            probing: Probing::Slow,
            mgrp: false,
        },
        Self {
            probing: Probing::Slow,
            mgrp: true,
        },
        Self {
            probing: Probing::Fast,
            mgrp: false,
        },
        Self {
            probing: Probing::Fast,
            mgrp: true,
        },
    ];

    /// The paper's label, e.g. `mgrp10.pFAST`.
    pub fn label(&self) -> String {
        format!(
            "{}.{}",
            if self.mgrp { "mgrp10" } else { "mgrpOFF" },
            match self.probing {
                Probing::Off => "pOFF",
                Probing::Slow => "pSLOW",
                Probing::Fast => "pFAST",
            }
        )
    }

    /// Reads a label back.
    pub fn parse(label: &str) -> Option<Self> {
        Self::TABLE3.into_iter().find(|m| m.label() == label)
    }
}

/// The PEAKS cross traffic: 4, 8, 4, 7, 4, 8, 4 Mbit/s for 60, 40, 30, 40, 30, 20 and
/// 20 seconds (240 s; durations read off the shape of the paper's Figure 16), every
/// duration scaled by `scale`, as steps of `10 s × scale`.
pub fn peaks(scale: f64) -> Steps {
    let units: [(f64, usize); 7] = [
        (4.0, 6),
        (8.0, 4),
        (4.0, 3),
        (7.0, 4),
        (4.0, 3),
        (8.0, 2),
        (4.0, 2),
    ];
    Steps {
        mbps: units
            .iter()
            .flat_map(|(r, n)| std::iter::repeat_n(*r, *n))
            .collect(),
        step: Duration::from_secs_f64(10.0 * scale),
    }
}

/// A run's settings.
#[derive(Debug, Clone)]
pub struct Run {
    /// The mode.
    pub mode: Mode,
    /// The cross traffic (one pass of it is the run's length).
    pub cross: Steps,
    /// The bottleneck.
    pub bottleneck: Bottleneck,
    /// How long after capture a frame is played.
    pub playout: Duration,
    /// The level every stream starts at.
    pub start_level: Level,
    /// The global scheduler's settings.
    pub scheduler: Settings,
    /// Where the overlays' logs go, if anywhere (one file per node).
    pub logs: Option<PathBuf>,
}

impl Run {
    /// The paper's run in `mode`: PEAKS for 240 s, the default bottleneck, a playout
    /// delay of 1 s, every stream starting at full rate.
    pub fn paper(mode: Mode) -> Self {
        Self {
            mode,
            cross: peaks(1.0),
            bottleneck: Bottleneck::default(),
            playout: Duration::from_secs(1),
            start_level: Level::Full,
            scheduler: Settings::default(),
            logs: None,
        }
    }
}

/// What a run gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The mode's label.
    pub label: String,
    /// Seconds the streams ran.
    pub seconds: usize,
    /// What the source's local schedulers counted, per stream.
    pub sent: Vec<Sent>,
    /// What the receiver counted.
    pub received: Received,
    /// Fates of every generated frame, per stream: the receiver's plus those that
    /// never left the source.
    pub fates: Vec<Fates>,
    /// The scheduler's level changes.
    pub changes: Vec<Change>,
    /// The scheduler's beliefs: (second, Mbit/s, cause).
    pub beliefs: Vec<(f64, f64, Cause)>,
    /// Estimates the overlay reported: (started, ended, low, high Mbit/s, converged).
    pub estimates: Vec<(f64, f64, f64, f64, bool)>,
    /// IP bytes of every probe the overlay's runs sent, and of those that carried
    /// the streams' packets (MGRP).
    pub probe_bytes: (u64, u64),
    /// The bandwidth available to the streams each second: capacity less the cross
    /// traffic, Mbit/s at the IP level.
    pub available: Vec<f64>,
}

impl Outcome {
    /// Frames decoded per second, per stream.
    pub fn fps(&self, stream: usize) -> Vec<u32> {
        let mut v = self.received.decoded_per_second[stream].clone();
        v.resize(self.seconds, 0);
        v
    }

    /// Mean decoded frames per second, all streams.
    pub fn mean_fps(&self) -> f64 {
        (0..STREAMS)
            .map(|s| self.fps(s).iter().map(|x| f64::from(*x)).sum::<f64>())
            .sum::<f64>()
            / self.seconds as f64
    }

    /// Mean streaming rate of decoded frames, Mbit/s, all streams.
    pub fn mean_mbps(&self) -> f64 {
        self.received
            .decoded_bytes_per_second
            .iter()
            .flat_map(|v| v.iter().take(self.seconds))
            .sum::<u64>() as f64
            * 8.0
            / 1e6
            / self.seconds as f64
    }

    /// Level changes made for `cause`.
    pub fn changes_for(&self, cause: Cause) -> usize {
        self.changes.iter().filter(|c| c.cause == cause).count()
    }
}

/// The overlay on `ns` with the configuration `config`, written into `dir`.
fn overlay(
    ns: &Netns,
    program: &Path,
    dir: &Path,
    name: &str,
    config: &str,
) -> anyhow::Result<Process> {
    let file = dir.join(format!("overlay-{name}.toml"));
    std::fs::write(&file, config)?;
    Process::spawn(
        ns,
        program,
        &[
            "overlay".into(),
            "--config".into(),
            file.display().to_string(),
            "--log-level".into(),
            "info".into(),
        ],
    )
    .with_context(|| format!("cannot start the overlay on {name}"))
}

/// The overlays' configurations. Without MGRP (`mgrpOFF`) both sides say no riders:
/// the probes still go through mgrpd, but it routes nothing into its tunnel for them
/// (by default mgrpd routes a destination into the tunnel while a train that may
/// carry riders is queued for it).
fn overlay_configs(mode: Mode, m3_socket: &Path, m5_socket: &Path) -> (String, String) {
    let method = if mode.probing == Probing::Slow {
        "pathload-slow"
    } else {
        "pathload-fast"
    };
    let piggyback = mode.mgrp;
    let m3 = format!(
        "name = \"m3\"\nlisten = \"127.0.0.1:{OVERLAY_HTTP}\"\nsocket = \"{}\"\n\n[serve]\ntransports = [\"mgrp\"]\nmgrp-port = {OVERLAY_MGRP_PORT}\npiggyback = {piggyback}\n",
        m3_socket.display()
    );
    // The paper's overlay probed whatever flowed: no passive estimates, no kernel
    // queries.
    let m5 = format!(
        "name = \"m5\"\nlisten = \"127.0.0.1:{OVERLAY_HTTP}\"\nsocket = \"{}\"\n\n[passive]\nenabled = false\n\n[btc]\nkernel-poll = \"0s\"\n\n[serve]\ntransports = [\"mgrp\"]\nmgrp-port = {OVERLAY_MGRP_PORT}\n\n[[link]]\nname = \"{LINK}\"\nfrom = \"{M3}\"\nport = {OVERLAY_MGRP_PORT}\ntransport = \"mgrp\"\nmethod = \"{method}\"\ninterval = \"1s\"\njitter = 0\ntime-limit = \"60s\"\nbackoff = \"1s\"\nmax-backoff = \"5s\"\npiggyback = {piggyback}\n",
        m5_socket.display()
    );
    (m3, m5)
}

/// One estimate from the overlay's event stream: (started, ended (Unix seconds), low,
/// high (bits/s), converged, probe bytes, bytes of probes that carried riders).
type Event = (f64, f64, f64, f64, bool, u64, u64);

/// Reads the overlay's event stream for the link into `tx` until `stop`.
fn subscribe(
    m5: &Netns,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<Event>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    m5.spawn("medianet-gs-sse", move || {
        let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), OVERLAY_HTTP);
        let deadline = Instant::now() + Duration::from_secs(20);
        let conn = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => {
                    return Err(e).context("the overlay on m5 does not answer");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        conn.set_read_timeout(Some(Duration::from_millis(500)))?;
        let host = conn.peer_addr()?;
        (&conn).write_all(
            format!("GET /v1/stream?link={LINK} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n")
                .as_bytes(),
        )?;
        let mut reader = BufReader::new(&conn);
        let mut event = String::new();
        let mut line = String::new();
        while !stop.load(Ordering::Relaxed) {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if mgrp_rt::rx::nothing_yet(&e) => continue,
                Err(e) => return Err(e).context("the overlay's event stream"),
            }
            let l = line.trim_end();
            if let Some(e) = l.strip_prefix("event:") {
                event = e.trim().to_string();
            } else if let Some(d) = l.strip_prefix("data:")
                && event == "estimate"
            {
                let v: serde_json::Value = serde_json::from_str(d.trim())
                    .with_context(|| format!("an estimate that is not JSON: {d}"))?;
                let num = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
                let _ = tx.send((
                    num("started_at"),
                    num("ended_at"),
                    num("low_bps"),
                    num("high_bps"),
                    v["converged"] == true,
                    v["probe_bytes"].as_u64().unwrap_or(0),
                    v["riding_probe_bytes"].as_u64().unwrap_or(0),
                ));
            }
        }
        Ok(())
    })
}

/// Runs `run`; `progress` is called once a second with the second, the levels and
/// the belief in Mbit/s.
pub fn run(
    run: &Run,
    program: &Path,
    progress: &mut dyn FnMut(usize, &[Level], f64),
) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!interrupted(), "interrupted");
    let capacity = capacity_mbps(&run.bottleneck.rate)?;
    let tb = Testbed::new(run.bottleneck.clone()).context("cannot build the testbed")?;
    let measuring = run.mode.probing != Probing::Off;
    let dir = crate::medianet::TempDir::new("medianet")?;
    let mut processes = Vec::new();
    let daemons = if measuring {
        let hold = Duration::from_millis(10);
        let a = daemon(&tb, program, true, run.mode.mgrp, hold)?;
        let b = daemon(&tb, program, false, run.mode.mgrp, hold)?;
        let (c3, c5) = overlay_configs(run.mode, &a.socket, &b.socket);
        processes.push(overlay(&tb.m3, program, &dir.0, "m3", &c3)?);
        processes.push(overlay(&tb.m5, program, &dir.0, "m5", &c5)?);
        Some((a, b))
    } else {
        None
    };

    // The streams and the receiver.
    let run_start_ns = realtime_ns() + 500_000_000;
    let playout_ns = i64::try_from(run.playout.as_nanos()).unwrap_or(i64::MAX);
    let listener = mgrp_testbed::tcp_listen(&tb.m5, IpAddr::V4(M5), STREAM_PORT)?;
    let sink = Sink::start(listener, STREAMS, run_start_ns, playout_ns)?;
    let (report_tx, report_rx) = mpsc::channel();
    let mut senders = Vec::new();
    for s in 0..STREAMS {
        let conn = tb.m3.run(|| {
            TcpStream::connect_timeout(
                &SocketAddr::new(IpAddr::V4(M5), STREAM_PORT),
                Duration::from_secs(10),
            )
        })??;
        senders.push(LocalScheduler::start(
            conn,
            StreamSpec {
                stream: u8::try_from(s)?,
                // Streams start a third of a frame apart, as independent sources would.
                start_ns: run_start_ns + i64::try_from(s)? * 11_000_000,
                run_start_ns,
                playout_ns,
                level: run.start_level,
            },
            report_tx.clone(),
        )?);
    }
    drop(report_tx);
    let cross = udp_steps(
        &tb.c1,
        &tb.c2,
        IpAddr::V4(C2),
        CROSS_PORT,
        run.cross.clone(),
        STEP_DATAGRAM,
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let (est_tx, est_rx) = mpsc::channel();
    let subscriber = if measuring {
        Some(subscribe(&tb.m5, stop.clone(), est_tx)?)
    } else {
        drop(est_tx);
        None
    };

    let mut gs = GlobalScheduler::new(run.scheduler, STREAMS, run.start_level, capacity * 1e6);
    let seconds = usize::try_from(run.cross.period().as_secs()).unwrap_or(0);
    let unix_start = mgrp_rt::unix_now() + (run_start_ns - realtime_ns()) as f64 / 1e9;
    let mut estimates = Vec::new();
    let mut probe_bytes = (0u64, 0u64);
    let mut next_second = 1usize;
    let result = (|| -> anyhow::Result<()> {
        loop {
            let now = (realtime_ns() - run_start_ns) as f64 / 1e9;
            if now >= seconds as f64 {
                return Ok(());
            }
            anyhow::ensure!(
                !interrupted(),
                "interrupted; the testbed is being taken down"
            );
            while let Ok(r) = report_rx.try_recv() {
                gs.handle_report(r);
            }
            while let Ok((started, ended, low, high, converged, probes, riding)) = est_rx.try_recv()
            {
                probe_bytes.0 += probes;
                probe_bytes.1 += riding;
                let (started, ended) = (started - unix_start, ended - unix_start);
                estimates.push((started, ended, low / 1e6, high / 1e6, converged));
                if converged && low.is_finite() {
                    gs.handle_estimate(
                        OverlayEstimate {
                            started,
                            ended,
                            low_bps: low,
                            high_bps: high,
                        },
                        now,
                    );
                }
            }
            for (s, l) in senders.iter().zip(gs.levels()) {
                s.set_level(*l);
            }
            if now >= next_second as f64 {
                progress(next_second, gs.levels(), gs.believed_bps() / 1e6);
                next_second += 1;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })();
    stop.store(true, Ordering::Relaxed);
    let mut sent = Vec::new();
    for s in senders {
        sent.push(s.finish()?);
    }
    let received = sink.finish()?;
    drop(cross);
    if let Some(t) = subscriber {
        let _ = t.join();
    }
    if let Some(logs) = &run.logs {
        for (p, name) in processes.iter().zip(["m3", "m5"]) {
            let _ = std::fs::write(logs.join(format!("overlay-{name}.log")), p.log());
        }
    }
    drop(processes);
    drop(daemons);
    result?;
    anyhow::ensure!(
        run.mode.mgrp || probe_bytes.1 == 0,
        "{}: {} of {} probe bytes carried riders although this mode sends probes without MGRP's piggybacking",
        run.mode.label(),
        probe_bytes.1,
        probe_bytes.0
    );
    let fates = sent
        .iter()
        .zip(&received.fates)
        .map(|(s, r)| Fates {
            adapted: s.adapted,
            stale: s.stale,
            ..*r
        })
        .collect();
    let available = (0..seconds)
        .map(|s| {
            let cross = run.cross.at(Duration::from_millis(s as u64 * 1000 + 500));
            // The tbf counts Ethernet headers; the cross traffic's datagrams are
            // STEP_DATAGRAM IP bytes.
            let ip_capacity = capacity * 1500.0 / 1514.0;
            (ip_capacity - cross).max(0.0)
        })
        .collect();
    Ok(Outcome {
        label: run.mode.label(),
        seconds,
        sent,
        received,
        fates,
        changes: gs.changes().to_vec(),
        beliefs: gs
            .beliefs()
            .iter()
            .map(|(t, b, c)| (*t, b / 1e6, *c))
            .collect(),
        estimates,
        probe_bytes,
        available,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_mgrp_neither_overlay_lets_riders_into_the_probes() {
        let sockets = (Path::new("a.sock"), Path::new("b.sock"));
        for mode in Mode::TABLE3.iter().filter(|m| m.probing != Probing::Off) {
            let (m3, m5) = overlay_configs(*mode, sockets.0, sockets.1);
            let want = format!("piggyback = {}", mode.mgrp);
            assert!(m3.contains(&want), "{}: m3 serves with\n{m3}", mode.label());
            assert!(
                m5.contains(&want),
                "{}: m5 measures with\n{m5}",
                mode.label()
            );
        }
    }
}
