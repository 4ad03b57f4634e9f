//! The receiver role: connect to the sender and drive the estimator. [`measure`] is
//! a measurement as a library call (the Measurement Overlay uses it); `rcv` prints
//! one.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::control::{
    CONTROL_VERSION, DEFAULT_CONTROL_PORT, DEFAULT_PROBE_PORT, ProbeKind, Reply, Request, Transport,
};
use crate::params::{DEFAULT_MAX_FLEETS, DEFAULT_MAX_SECONDS, STREAM_DURATION_NS};
use crate::search::Bounds;
use crate::{
    Action, Config, Estimator, Event, Mode, Outcome, StopReason, StreamResult, StreamSpec,
    TrainResult,
};
use anyhow::{Context, anyhow, bail};

use crate::tool::cli::RcvArgs;
use crate::tool::conn::Conn;
use crate::tool::output::Output;
use crate::tool::transport::{Listener, Seen};
use crate::tool::{exit, plot, sys};

/// How long to wait for the sender to answer beyond the time its probes take.
const REPLY_SLACK: Duration = Duration::from_secs(10);

/// After the sender says a stream is out, wait at most this long (or a round trip, if
/// longer) for its last probes: the socket is drained before the stream is judged, so
/// no probe still in flight or in a buffer counts as lost.
const DRAIN: Duration = Duration::from_millis(30);

/// Round trips timed before the run, the smallest kept.
const PINGS: u32 = 5;

/// What one measurement needs: where the sender is, how probes travel, and how long
/// and finely to measure. [`MeasureOptions::new`] gives the tool's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureOptions {
    /// The sending host (name or address) serving measurements.
    pub sender: String,
    /// The sender's control port.
    pub port: u16,
    /// How probes travel; the sender must use the same.
    pub transport: Transport,
    /// mgrpd's API socket (MGRP transport).
    pub socket: PathBuf,
    /// This host's probe port.
    pub probe_port: u16,
    /// The address the sender should send probes to (default: the one the control
    /// connection comes from).
    pub address: Option<IpAddr>,
    /// Idle between streams (slow) or not (fast).
    pub mode: Mode,
    /// Longest a run may take; without convergence there is no estimate.
    pub max_time: Duration,
    /// Most fleets a run may take.
    pub max_fleets: u32,
    /// Resolution ω, Mbit/s (default: 2 % of the initial rate).
    pub resolution: Option<f64>,
    /// Packets per stream, fixed; `None` sizes streams by `stream_duration`.
    pub packets: Option<u32>,
    /// How long each stream lasts unless `packets` fixes its length.
    pub stream_duration: Duration,
    /// Whether application traffic may ride in the probes (MGRP).
    pub piggyback: bool,
    /// Send every stream of a fleet even when its verdict is already certain.
    pub full_fleets: bool,
    /// Search by bisection alone, as pathload 1.3.2, instead of aiming fleets where
    /// the delays of an increasing fleet point.
    pub bisect: bool,
    /// What serves measurements at the sender, for the message when it cannot be
    /// reached ("is X running there?").
    pub sender_is: String,
}

impl MeasureOptions {
    /// The tool's defaults for a measurement from `sender` over `transport`.
    pub fn new(sender: impl Into<String>, transport: Transport) -> Self {
        Self {
            sender: sender.into(),
            port: DEFAULT_CONTROL_PORT,
            transport,
            socket: PathBuf::from(mgrp_client::DEFAULT_SOCKET),
            probe_port: DEFAULT_PROBE_PORT,
            address: None,
            mode: Mode::Slow,
            max_time: Duration::from_secs(DEFAULT_MAX_SECONDS),
            max_fleets: DEFAULT_MAX_FLEETS,
            resolution: None,
            packets: None,
            stream_duration: Duration::from_nanos(STREAM_DURATION_NS),
            piggyback: true,
            full_fleets: false,
            bisect: false,
            sender_is: "`pathload-rs snd`".into(),
        }
    }
}

/// What a measurement in progress shows its driver.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The sender answered: the round trip and the largest probe its path carries.
    Started {
        /// The smallest of the round trips timed before the run.
        rtt: Duration,
        /// Largest probe, IP bytes.
        max_size: u32,
    },
    /// A stream is about to be asked for.
    Stream {
        /// What it is.
        spec: &'a StreamSpec,
        /// Time since the run started.
        elapsed: Duration,
        /// The search's bounds so far.
        bounds: &'a Bounds,
    },
    /// The estimator's account of what happened.
    Event(&'a Event),
}

/// A measurement that ran, converged or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The estimator's result: the range (if it converged), why it stopped, the
    /// probe and rider bytes.
    pub outcome: Outcome,
    /// How long it took, from the first connection attempt.
    pub elapsed: Duration,
    /// The round trip to the sender.
    pub rtt: Duration,
    /// Set when the sender went away mid-run (the run then stopped there).
    pub peer_gone: Option<String>,
    /// Set when the sender, still there, could not send a train or stream it was
    /// asked for (its mgrpd refused it, or its limits): the run stopped there, and the
    /// fix lies on the sending host.
    pub sender_failed: Option<String>,
    /// Probes that came without a kernel receive stamp and were stamped on reading.
    pub unstamped: u64,
}

impl Measurement {
    /// Whether it gave an estimate.
    pub fn converged(&self) -> bool {
        self.peer_gone.is_none() && self.sender_failed.is_none() && self.outcome.reason.converged()
    }

    /// Why the run stopped before its estimator did, in words, if it did.
    pub fn interruption(&self) -> Option<String> {
        self.peer_gone.clone().or_else(|| {
            self.sender_failed
                .as_ref()
                .map(|f| format!("the sender failed: {f}"))
        })
    }

    /// The tool's exit status for it (0 for an estimate).
    pub fn exit_code(&self) -> i32 {
        if self.peer_gone.is_some() {
            exit::PEER
        } else if self.sender_failed.is_some() {
            exit::SENDER
        } else {
            exit::for_reason(self.outcome.reason)
        }
    }
}

/// The sender closed the control connection before the run began.
fn closed() -> MeasureError {
    MeasureError::Unreachable("the sender closed the connection".into())
}

/// The sender answered a request with an error: it is there, but could not do it.
#[derive(Debug, thiserror::Error)]
#[error("the sender failed: {0}")]
struct SenderFailed(String);

/// Why a measurement could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The sender answered before any probe with an error: it is there, but will not
    /// or cannot serve this measurement now (busy with another receiver when the
    /// message starts with [`crate::tool::BUSY`]; its mgrpd or its probe socket
    /// otherwise).
    #[error("the sender refused: {0}")]
    Refused(String),
    /// The sender could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// The sender refused or the exchange failed before an estimate could start.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

fn connect(sender: &str, port: u16, sender_is: &str) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = (sender, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve sender {sender}: {e}"))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(format!(
        "cannot reach the sender at {sender} port {port} ({last}); is {sender_is} running there?"
    ))
}

/// The application traffic a sender's mgrpd routes towards a receiver, as
/// [`sender_traffic`] learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderTraffic {
    /// IP bytes per second over the last `window`.
    pub bytes_per_second: u64,
    /// The window of that rate.
    pub window: Duration,
    /// Riders held for the receiver now, waiting for a probe.
    pub held_riders: u64,
    /// Their bytes.
    pub held_bytes: u64,
}

/// Asks the sender at `sender`:`port` how much application traffic its mgrpd routes to
/// `address` (this end of the connection if `None`): the traffic that would ride in
/// probes sent now. Answered even while another receiver measures.
pub fn sender_traffic(
    sender: &str,
    port: u16,
    address: Option<IpAddr>,
) -> Result<SenderTraffic, MeasureError> {
    let stream =
        connect(sender, port, "a measurement sender").map_err(MeasureError::Unreachable)?;
    stream
        .set_read_timeout(Some(REPLY_SLACK))
        .map_err(|e| MeasureError::Unreachable(e.to_string()))?;
    let mut conn = Conn::new(stream)?;
    conn.send(&Request::Traffic { address })?;
    match conn.recv::<Reply>()? {
        Some(Reply::Traffic {
            bytes_per_second,
            window_ms,
            held_riders,
            held_bytes,
        }) => Ok(SenderTraffic {
            bytes_per_second,
            window: Duration::from_millis(window_ms),
            held_riders,
            held_bytes,
        }),
        Some(Reply::Error { message }) => Err(anyhow!("the sender says: {message}").into()),
        Some(other) => Err(anyhow!("the sender answered {other:?} to a traffic query").into()),
        None => Err(anyhow!(
            "the sender closed the connection without an answer; is it an older pathload-rs?"
        )
        .into()),
    }
}

/// Runs one measurement from the sender `opts` names, until it converges, a limit
/// ends it, the sender goes away, or `stop` is set. `progress` sees it go.
pub fn measure(
    opts: &MeasureOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Measurement, MeasureError> {
    let started = Instant::now();
    let stream =
        connect(&opts.sender, opts.port, &opts.sender_is).map_err(MeasureError::Unreachable)?;
    let peer = stream.peer_addr().map_err(|e| {
        MeasureError::Unreachable(format!("the control connection broke at once: {e}"))
    })?;
    // A refusal or a closed connection before the run began comes back as itself.
    run_measurement(opts, stream, peer, started, stop, progress).map_err(|e| {
        e.downcast::<MeasureError>()
            .unwrap_or_else(MeasureError::Failed)
    })
}

/// The `rcv` command: a measurement printed as text or JSON; returns the exit code.
pub(crate) fn run(args: &RcvArgs) -> i32 {
    let opts = args.options();
    let mode = match opts.mode {
        Mode::Slow => "slow",
        Mode::Fast => "fast",
    };
    let mut out = Output::new(args.json, args.verbose);
    let sender = format!("{}:{}", opts.sender, opts.port);
    let measured = measure(&opts, sys::interrupt_flag(), &mut |p| match p {
        Progress::Started { rtt, .. } => out.start(
            &sender,
            &opts.transport.to_string(),
            mode,
            rtt.as_secs_f64() * 1e3,
        ),
        Progress::Stream {
            spec,
            elapsed,
            bounds,
        } => out.stream_start(spec, elapsed.as_secs_f64(), bounds),
        Progress::Event(ev) => out.event(ev),
    });
    let m = match measured {
        Ok(m) => m,
        Err(MeasureError::Unreachable(e)) => {
            eprintln!("pathload-rs: {e}");
            return exit::PEER;
        }
        Err(e @ MeasureError::Refused(_)) => {
            eprintln!("pathload-rs: {e}");
            return exit::SENDER;
        }
        Err(MeasureError::Failed(e)) => {
            eprintln!("pathload-rs: {e:#}");
            return exit::ERROR;
        }
    };
    if m.unstamped > 0 {
        eprintln!(
            "pathload-rs: warning: {} probes came without a kernel receive stamp and were stamped on reading",
            m.unstamped
        );
    }
    let o = &m.outcome;
    // Printed when the adjustment moved the range by at least the printed precision.
    let show_unadjusted = opts.transport == Transport::Mgrp
        && ((o.unadjusted_low - o.low).abs() >= 0.005
            || (o.unadjusted_high - o.high).abs() >= 0.005);
    out.result(
        o,
        m.elapsed.as_secs_f64(),
        show_unadjusted,
        m.interruption().as_deref(),
    );
    if let Some(path) = &args.plot {
        if let Err(e) = plot::draw(path, &out.fleets, o) {
            eprintln!("pathload-rs: {e:#}");
        }
    }
    m.exit_code()
}

fn run_measurement(
    opts: &MeasureOptions,
    stream: TcpStream,
    peer: SocketAddr,
    started: Instant,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> anyhow::Result<Measurement> {
    let transport = opts.transport;
    let mut conn = Conn::new(stream)?;
    conn.stream().set_read_timeout(Some(REPLY_SLACK))?;
    let (listener, rx) = Listener::start(transport, opts.probe_port, peer.ip(), &opts.socket)?;

    let mut rtt = Duration::MAX;
    for _ in 0..PINGS {
        let t = Instant::now();
        conn.send(&Request::Ping)?;
        match conn.recv::<Reply>()? {
            Some(Reply::Pong) => rtt = rtt.min(t.elapsed()),
            Some(Reply::Error { message }) => return Err(MeasureError::Refused(message).into()),
            Some(other) => bail!("the sender answered a ping with {other:?}"),
            None => return Err(closed().into()),
        }
    }
    conn.send(&Request::Hello {
        version: CONTROL_VERSION,
        transport,
        address: opts.address,
        probe_port: opts.probe_port,
        piggyback: opts.piggyback,
    })?;
    let max_size = match conn.recv::<Reply>()? {
        Some(Reply::Hello { max_size, .. }) => max_size,
        Some(Reply::Error { message }) => return Err(MeasureError::Refused(message).into()),
        Some(other) => bail!("unexpected answer from the sender: {other:?}"),
        None => return Err(closed().into()),
    };

    let mut est = Estimator::new(Config {
        mode: opts.mode,
        rtt_ns: u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX),
        omega_mbps: opts.resolution,
        max_size,
        max_fleets: opts.max_fleets,
        early_verdict: !opts.full_fleets,
        aim: !opts.bisect,
        stream_packets: opts.packets,
        stream_duration_ns: u64::try_from(opts.stream_duration.as_nanos()).unwrap_or(u64::MAX),
        ..Config::default()
    });
    progress(Progress::Started { rtt, max_size });

    let limit = opts.max_time;
    let stopped = || stop.load(Ordering::Relaxed);
    let mut next_at = Instant::now();
    let mut gone: Option<String> = None;
    let mut sender_failed: Option<String> = None;
    let outcome: Outcome = loop {
        while let Some(ev) = est.poll_event() {
            progress(Progress::Event(&ev));
        }
        if stopped() {
            est.handle_stop(StopReason::Interrupted);
        } else if started.elapsed() >= limit {
            est.handle_stop(StopReason::TimeLimit);
        }
        let step = match est.poll_action() {
            Action::Done(o) => break o,
            Action::Train(t) => exchange(
                &mut conn,
                &rx,
                &Request::Train {
                    id: t.id,
                    packets: t.packets,
                    size: t.size,
                },
                (ProbeKind::Train, 0, t.id),
                Duration::ZERO,
                rtt,
            )
            .map(|(r, _)| {
                est.handle_train(&TrainResult {
                    id: t.id,
                    sent: r.sent,
                    arrivals: r.arrivals,
                });
            }),
            Action::Stream(s) => {
                // Idle after the previous stream; the request itself takes half a
                // round trip to reach the sender.
                let now = Instant::now();
                if next_at > now {
                    std::thread::sleep(next_at - now);
                }
                if stopped() || started.elapsed() >= limit {
                    continue;
                }
                progress(Progress::Stream {
                    spec: &s,
                    elapsed: started.elapsed(),
                    bounds: &est.bounds(),
                });
                exchange(
                    &mut conn,
                    &rx,
                    &Request::Stream {
                        fleet: s.fleet,
                        stream: s.stream,
                        packets: s.packets,
                        size: s.size,
                        spacing_ns: s.spacing_ns,
                        rider_probes: s.rider_probes,
                    },
                    (ProbeKind::Stream, s.fleet, s.stream),
                    Duration::from_nanos(s.duration_ns()),
                    rtt,
                )
                .map(|(r, replied)| {
                    let idle = Duration::from_nanos(s.idle_ns);
                    next_at = (replied + idle).checked_sub(rtt).unwrap_or(replied);
                    est.handle_stream(&r);
                })
            }
        };
        if let Err(e) = step {
            match e.downcast_ref::<SenderFailed>() {
                Some(f) => sender_failed = Some(f.0.clone()),
                None => gone = Some(format!("{e:#}")),
            }
            est.handle_stop(StopReason::Interrupted);
        }
    };
    while let Some(ev) = est.poll_event() {
        progress(Progress::Event(&ev));
    }
    let _ = conn.send(&Request::Bye);
    let unstamped = listener.unstamped.load(Ordering::Relaxed);
    drop(listener);
    Ok(Measurement {
        outcome,
        elapsed: started.elapsed(),
        rtt,
        peer_gone: gone,
        sender_failed,
        unstamped,
    })
}

/// Asks for one train or stream, waits for the sender's report, then drains the
/// probes that belong to it. Returns what the sender reported with the arrivals, and
/// when the report came.
fn exchange(
    conn: &mut Conn,
    rx: &Receiver<Seen>,
    req: &Request,
    id: (ProbeKind, u32, u32),
    duration: Duration,
    rtt: Duration,
) -> anyhow::Result<(StreamResult, Instant)> {
    // Anything still queued belongs to earlier streams.
    while rx.try_recv().is_ok() {}
    conn.stream()
        .set_read_timeout(Some(duration + rtt + REPLY_SLACK))?;
    conn.send(req)?;
    let mut result = loop {
        match conn.recv::<Reply>()? {
            Some(Reply::Sent {
                fleet,
                stream,
                sent,
                sender_stamps,
                competing_rider_bytes,
                rider_bytes,
                riding_probe_bytes,
                kernel_stamps,
            }) => {
                if (fleet, stream) != (id.1, id.2) {
                    continue;
                }
                break StreamResult {
                    fleet,
                    stream,
                    sent,
                    sender_stamps,
                    arrivals: Vec::with_capacity(sent as usize),
                    competing_rider_bytes,
                    rider_bytes,
                    riding_probe_bytes,
                    kernel_stamps,
                };
            }
            Some(Reply::Error { message }) => return Err(SenderFailed(message).into()),
            Some(other) => return Err(anyhow!("unexpected answer from the sender: {other:?}")),
            None => return Err(anyhow!("the sender closed the connection")),
        }
    };
    let replied = Instant::now();
    let deadline = replied + DRAIN.max(rtt);
    while result.arrivals.len() < result.sent as usize {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        match rx.recv_timeout(deadline - now) {
            Ok(s) if (s.kind, s.fleet, s.stream) == id => result.arrivals.push(s.arrival),
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(anyhow!("the probe listener stopped")).context("receiving probes");
            }
        }
    }
    Ok((result, replied))
}
