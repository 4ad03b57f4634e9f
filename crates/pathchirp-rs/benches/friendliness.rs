//! Network friendliness (Johnsson and Björkman): how much TCP throughput competing
//! flows lose per bit of probes, for each tool, over plain UDP and over MGRP.
//!
//! The path, fixed before any run: host A, a router, host B; the router's link to B
//! is a `tbf rate 10mbit burst 1540` with a 100 ms drop-tail queue (the seed: 10 Mbit/s,
//! 100 packets, drop-tail). The path adds no propagation delay (this kernel has no
//! netem): TCP's round trip is the queue's, up to 100 ms as the flows fill it (the
//! seed: 42–82 ms plus its queue). Four bulk TCP flows from A to B run throughout, with
//! A's default congestion control or `--cc`'s (printed in each row; the seed's were
//! TCP SACK).
//! After 10 s of warm-up the tool is off for 20 s and on for one measurement at a time
//! until 20 s have passed, three times, then off for 20 s more. The TCP bits lost to
//! probing are (rate off − rate on) × the time on, against the tool's probe bits in
//! that time; the seed calls probing network friendly when the first is at most the
//! second. Over MGRP (mgrpd with `--hold 1ms` on both hosts, routes on demand) the
//! flows' packets ride in the probes while a train is out; the probe bits are still
//! counted whole, with the application bytes that rode in them beside them. `none`
//! runs the same schedule without a tool: what the difference reads when nothing
//! changes. TCP is counted as the payload the receivers read (what the flows lose),
//! probes as their IP bytes. Not run in CI (minutes of wall time); needs root. The
//! figures are in the repository's `docs/friendliness.md`.
//!
//! ```text
//! cargo bench -p pathchirp-rs --bench friendliness -- [--methods none,pathload,pathchirp,badabing]
//!     [--transports udp,mgrp] [--repeats 3] [--flows 4] [--phase 20] [--cc cubic|bbr|reno]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mgrp_testbed::harness::{Role, bench_start};
use mgrp_testbed::tool::{daemons_for, serve_in};
use mgrp_testbed::traffic::{Source, tcp_bulk};
use mgrp_testbed::{ADDR_A, ADDR_B, TwoHostOptions, TwoHosts};
use mgrp_tool::{ServeOptions, SessionOptions, Transport};

/// The bench's options (`cargo bench -p pathchirp-rs --bench friendliness -- --help`).
#[derive(Debug, Clone, clap::Parser)]
struct Opts {
    /// The methods measured beside the flows (`none`: the flows alone).
    #[arg(long, value_delimiter = ',', default_values = ["none", "pathload", "pathchirp", "badabing"], value_parser = ["none", "pathload", "pathchirp", "badabing"])]
    methods: Vec<String>,
    /// How probes travel.
    #[arg(long, value_delimiter = ',', default_values = ["udp", "mgrp"], value_parser = ["udp", "mgrp"])]
    transports: Vec<String>,
    /// Repeats of each case.
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// TCP flows sharing the path.
    #[arg(long, default_value_t = 4)]
    flows: u16,
    /// Seconds of each phase.
    #[arg(long, default_value_t = 20)]
    phase: u64,
    /// The flows' congestion control (the kernel's default unless given).
    #[arg(long = "cc")]
    congestion: Option<String>,
    #[command(flatten)]
    cargo: mgrp_testbed::harness::CargoBench,
}

/// What one measurement sent.
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    probe_bytes: u64,
    rider_bytes: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Self) {
        self.probe_bytes += o.probe_bytes;
        self.rider_bytes += o.rider_bytes;
    }
}

/// Runs `method` for one measurement of at most `budget` (pathload: one fast run).
fn measure_once(
    method: &str,
    session: &SessionOptions,
    t: Transport,
    budget: Duration,
) -> anyhow::Result<Sent> {
    let never = AtomicBool::new(false);
    let err = |e: mgrp_tool::MeasureError| anyhow::anyhow!("{e}");
    Ok(match method {
        "pathload" => {
            let mut o = pathload_rs::tool::MeasureOptions::new(ADDR_A.to_string(), t);
            o.session = session.clone();
            o.mode = pathload_rs::Mode::Fast;
            o.max_time = Duration::from_secs(60);
            let m = pathload_rs::tool::measure(&o, &never, &mut |_| {}).map_err(err)?;
            Sent {
                probe_bytes: m.outcome.probe_bytes,
                rider_bytes: m.outcome.rider_bytes,
            }
        }
        "pathchirp" => {
            let mut o = pathchirp_rs::tool::MeasureOptions::new(ADDR_A.to_string(), t, budget);
            o.session = session.clone();
            let m = pathchirp_rs::tool::measure(&o, &never, &mut |_| {}).map_err(err)?;
            Sent {
                probe_bytes: m.counts.probe_bytes,
                rider_bytes: m.counts.rider_bytes,
            }
        }
        "badabing" => {
            let mut o = badabing_rs::tool::MeasureOptions::new(ADDR_A.to_string(), t, budget);
            o.session = session.clone();
            let m = badabing_rs::tool::measure(&o, &never, &mut |_| {}).map_err(err)?;
            let e = m.estimate;
            Sent {
                probe_bytes: e.packets_sent * u64::from(o.config.size),
                rider_bytes: e.rider_bytes,
            }
        }
        "none" => {
            std::thread::sleep(budget);
            Sent::default()
        }
        _ => anyhow::bail!("no method {method}: none, pathload, pathchirp or badabing"),
    })
}

/// One schedule's figures.
#[derive(Debug)]
struct Figures {
    congestion: String,
    off_mbps: f64,
    on_mbps: f64,
    on_s: f64,
    sent: Sent,
}

fn tcp_bytes(flows: &[Source]) -> u64 {
    flows.iter().map(Source::bytes).sum()
}

fn run(o: &Opts, method: &str, transport: &str) -> anyhow::Result<Figures> {
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "1540".into())),
        router: true,
        delay: None,
    })?;
    let pair = daemons_for(&net, transport, &["--hold", "1ms"])?;
    let t = if transport == "mgrp" {
        Transport::Mgrp
    } else {
        Transport::Udp
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut so = ServeOptions::new(t);
    if let Some((a, _)) = &pair {
        so.socket.clone_from(&a.socket);
    }
    let serving = serve_in(&net.a, so, &stop)?;
    let congestion = match &o.congestion {
        Some(cc) => cc.clone(),
        None => net
            .a
            .exec(&["sysctl", "-n", "net.ipv4.tcp_congestion_control"])?
            .trim()
            .to_owned(),
    };
    let flows: Vec<Source> = (0..o.flows)
        .map(|i| tcp_bulk(&net.a, &net.b, ADDR_B.into(), 9100 + i, &congestion))
        .collect::<anyhow::Result<_>>()?;
    std::thread::sleep(Duration::from_secs(10));
    let mut session = SessionOptions::new(ADDR_A.to_string(), t, "bench");
    if let Some((_, b)) = &pair {
        session.socket.clone_from(&b.socket);
    }
    let phase = Duration::from_secs(o.phase);
    let (mut off_bytes, mut off_s, mut on_bytes, mut on_s) = (0u64, 0.0, 0u64, 0.0);
    let mut sent = Sent::default();
    let off = |off_bytes: &mut u64, off_s: &mut f64| {
        let (b0, t0) = (tcp_bytes(&flows), Instant::now());
        std::thread::sleep(phase);
        *off_bytes += tcp_bytes(&flows) - b0;
        *off_s += t0.elapsed().as_secs_f64();
    };
    for _ in 0..o.repeats {
        off(&mut off_bytes, &mut off_s);
        let (b0, t0) = (tcp_bytes(&flows), Instant::now());
        while t0.elapsed() < phase {
            let left = phase.saturating_sub(t0.elapsed());
            sent += net
                .b
                .run(|| measure_once(method, &session, t, left))?
                .with_context(|| format!("{method} over {transport}"))?;
        }
        on_bytes += tcp_bytes(&flows) - b0;
        on_s += t0.elapsed().as_secs_f64();
    }
    off(&mut off_bytes, &mut off_s);
    stop.store(true, Ordering::Relaxed);
    let _ = serving.join();
    for f in flows {
        f.stop();
    }
    Ok(Figures {
        congestion,
        off_mbps: off_bytes as f64 * 8.0 / off_s / 1e6,
        on_mbps: on_bytes as f64 * 8.0 / on_s / 1e6,
        on_s,
        sent,
    })
}

fn main() -> ExitCode {
    let roles: &[Role] = &[("mgrpd", |a| mgrpd::main_with_args(a))];
    if let Some(code) = bench_start("friendliness", roles) {
        return code;
    }
    let o = <Opts as clap::Parser>::parse();
    println!(
        "| method | transport | TCP | TCP off (Mbit/s) | TCP on (Mbit/s) | time on (s) | probes (Mbit/s on) | riders / probe bytes | TCP lost (Mbit) | probe (Mbit) | lost per probe bit |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for method in &o.methods {
        for transport in &o.transports {
            match run(&o, method, transport).context("run") {
                Ok(f) => {
                    let probe_mbit = f.sent.probe_bytes as f64 * 8.0 / 1e6;
                    let lost_mbit = (f.off_mbps - f.on_mbps) * f.on_s;
                    println!(
                        "| {method} | {transport} | {} | {:.3} | {:.3} | {:.0} | {:.3} | {:.2} | {lost_mbit:.2} | {probe_mbit:.2} | {} |",
                        f.congestion,
                        f.off_mbps,
                        f.on_mbps,
                        f.on_s,
                        probe_mbit / f.on_s,
                        f.sent.rider_bytes as f64 / f.sent.probe_bytes.max(1) as f64,
                        if probe_mbit > 0.0 {
                            format!("{:.2}", lost_mbit / probe_mbit)
                        } else {
                            "-".into()
                        },
                    );
                }
                Err(e) => println!("| {method} | {transport} | failed: {e:#} |"),
            }
        }
    }
    ExitCode::SUCCESS
}
