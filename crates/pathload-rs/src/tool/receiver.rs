//! The receiver role: connect to the sender, drive the estimator, print the range.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::control::{CONTROL_VERSION, ProbeKind, Reply, Request, Transport};
use crate::{Action, Config, Estimator, Mode, Outcome, StopReason, StreamResult, TrainResult};
use anyhow::{Context, anyhow, bail};

use crate::tool::cli::{ModeArg, RcvArgs};
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

/// Why the run could not go on.
#[derive(Debug)]
struct PeerGone(String);

fn connect(args: &RcvArgs) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = (args.sender.as_str(), args.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve sender {}: {e}", args.sender))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(format!(
        "cannot reach the sender at {} port {} ({last}); is `pathload-rs snd` running there?",
        args.sender, args.port
    ))
}

/// Runs a measurement; returns the exit code.
pub(crate) fn run(args: &RcvArgs) -> i32 {
    let started = Instant::now();
    let stream = match connect(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pathload-rs: {e}");
            return exit::PEER;
        }
    };
    let peer = match stream.peer_addr() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pathload-rs: the control connection broke at once: {e}");
            return exit::PEER;
        }
    };
    match measure(args, stream, peer, started) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pathload-rs: {e:#}");
            exit::ERROR
        }
    }
}

fn measure(
    args: &RcvArgs,
    stream: TcpStream,
    peer: SocketAddr,
    started: Instant,
) -> anyhow::Result<i32> {
    let transport = args.transport();
    let mut conn = Conn::new(stream)?;
    conn.stream().set_read_timeout(Some(REPLY_SLACK))?;
    let (listener, rx) = Listener::start(transport, args.probe_port, peer.ip(), &args.socket)?;

    let mut rtt = Duration::MAX;
    for _ in 0..PINGS {
        let t = Instant::now();
        conn.send(&Request::Ping)?;
        match conn.recv::<Reply>()? {
            Some(Reply::Pong) => rtt = rtt.min(t.elapsed()),
            Some(other) => bail!("the sender answered a ping with {other:?}"),
            None => bail!("the sender closed the connection"),
        }
    }
    conn.send(&Request::Hello {
        version: CONTROL_VERSION,
        transport,
        address: args.address,
        probe_port: args.probe_port,
        piggyback: !args.no_piggyback,
    })?;
    let max_size = match conn.recv::<Reply>()? {
        Some(Reply::Hello { max_size, .. }) => max_size,
        Some(Reply::Error { message }) => bail!("the sender refused: {message}"),
        Some(other) => bail!("unexpected answer from the sender: {other:?}"),
        None => bail!("the sender closed the connection"),
    };

    let mode = match args.mode {
        ModeArg::Slow => Mode::Slow,
        ModeArg::Fast => Mode::Fast,
    };
    let mut est = Estimator::new(Config {
        mode,
        rtt_ns: u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX),
        omega_mbps: args.resolution,
        max_size,
        max_fleets: args.max_fleets,
        early_verdict: !args.full_fleets,
        stream_packets: args.packets,
        stream_duration_ns: args.stream_duration * 1_000_000,
        ..Config::default()
    });
    let mut out = Output::new(args.json, args.verbose);
    out.start(
        &format!("{}:{}", args.sender, args.port),
        &transport.to_string(),
        match mode {
            Mode::Slow => "slow",
            Mode::Fast => "fast",
        },
        rtt.as_secs_f64() * 1e3,
    );

    let limit = Duration::from_secs(args.max_time);
    let mut next_at = Instant::now();
    let mut gone: Option<PeerGone> = None;
    let outcome: Outcome = loop {
        while let Some(ev) = est.poll_event() {
            out.event(&ev);
        }
        if sys::interrupted() {
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
                if sys::interrupted() || started.elapsed() >= limit {
                    continue;
                }
                out.stream_start(&s, started.elapsed().as_secs_f64(), &est.bounds());
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
            gone = Some(PeerGone(format!("{e:#}")));
            est.handle_stop(StopReason::Interrupted);
        }
    };
    while let Some(ev) = est.poll_event() {
        out.event(&ev);
    }
    let _ = conn.send(&Request::Bye);
    let unstamped = listener
        .unstamped
        .load(std::sync::atomic::Ordering::Relaxed);
    if unstamped > 0 {
        eprintln!(
            "pathload-rs: warning: {unstamped} probes came without a kernel receive stamp and were stamped on reading"
        );
    }
    drop(listener);
    let seconds = started.elapsed().as_secs_f64();
    // Printed when the adjustment moved the range by at least the printed precision.
    let show_unadjusted = transport == Transport::Mgrp
        && ((outcome.unadjusted_low - outcome.low).abs() >= 0.005
            || (outcome.unadjusted_high - outcome.high).abs() >= 0.005);
    out.result(
        &outcome,
        seconds,
        show_unadjusted,
        gone.as_ref().map(|g| g.0.as_str()),
    );
    if let Some(path) = &args.plot {
        if let Err(e) = plot::draw(path, &out.fleets, &outcome) {
            eprintln!("pathload-rs: {e:#}");
        }
    }
    if gone.is_some() {
        return Ok(exit::PEER);
    }
    Ok(exit::for_reason(outcome.reason))
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
            Some(Reply::Error { message }) => return Err(anyhow!("the sender failed: {message}")),
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
