//! The MGRP demo: two hosts in network namespaces joined by a 10 Mbit/s bottleneck,
//! mgrpd on both, a 4 Mbit/s TCP stream from A to B and pk2 probe trains alongside it,
//! once with piggybacking and once without; then the two runs side by side.
//!
//! Run as root: `cargo run --release --example demo` (`-- --seconds N` for another
//! duration). It removes everything it created when it ends, however it ends.
//!
//! The demo embeds the daemon: it starts `mgrpd` by running itself with `mgrpd` as the
//! first argument inside each namespace.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use mgrp::pktrain::{self, SenderSummary, TrainShape};
use mgrp_core::api::DaemonStats;
use mgrp_testbed::{
    ADDR_B, TwoHostOptions, TwoHosts, daemon_pair, fill_pattern, read_pattern, tcp_listen,
};

const STREAM_MBPS: f64 = 4.0;
const PORT: u16 = 7001;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "mgrpd") {
        return mgrpd::main_with_args(&args[1..]);
    }
    let seconds = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.to_str()?.parse::<u64>().ok())
        .unwrap_or(20);
    match run(Duration::from_secs(seconds)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e:#}");
            ExitCode::FAILURE
        }
    }
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
    for tool in ["ip", "tc"] {
        if mgrp_testbed::sh(&["which", tool]).is_err() {
            bail!("`{tool}` is not installed: install iproute2 (apt-get install iproute2)");
        }
    }
    std::env::current_exe().context("cannot find the demo's own executable")
}

/// A line of the side-by-side table: its label and how to read it off a run.
type Row = (&'static str, Box<dyn Fn(&Run) -> String>);

struct Run {
    sender: SenderSummary,
    probes_received: u64,
    stream_bytes: u64,
    stream_intact: bool,
    seconds: f64,
    a: DaemonStats,
    b: DaemonStats,
}

fn run(duration: Duration) -> anyhow::Result<()> {
    let me = preflight()?;
    println!(
        "MGRP demo: A -> B over a 10 Mbit/s tbf bottleneck (burst 1540), a {STREAM_MBPS} Mbit/s TCP stream and pk2 trains (20 x 500 B, 1 ms apart, every 20 ms) for {} s, with and without piggybacking.\n",
        duration.as_secs()
    );
    let on = phase(&me, true, duration)?;
    let off = phase(&me, false, duration)?;
    let padding = |r: &Run| r.sender.probes * u64::from(TrainShape::PK2.size - 20 - 28 - 4);
    let rows: Vec<Row> = vec![
        ("probes sent", Box::new(|r| r.sender.probes.to_string())),
        (
            "probes received at B",
            Box::new(|r| r.probes_received.to_string()),
        ),
        (
            "probes that carried riders",
            Box::new(|r| format!("{:.1} %", 100.0 * r.sender.rider_probe_fraction())),
        ),
        (
            "probe padding filled by riders",
            Box::new(move |r| {
                format!(
                    "{:.1} %",
                    100.0 * r.sender.rider_bytes as f64 / padding(r).max(1) as f64
                )
            }),
        ),
        (
            "rider bytes carried",
            Box::new(|r| r.sender.rider_bytes.to_string()),
        ),
        (
            "riders delivered by B",
            Box::new(|r| r.b.daemon.riders_delivered.to_string()),
        ),
        (
            "probe bytes sent",
            Box::new(|r| r.sender.probe_bytes.to_string()),
        ),
        (
            "probe-only bytes on the bottleneck",
            Box::new(|r| r.sender.probe_only_bytes().to_string()),
        ),
        (
            "TCP stream throughput",
            Box::new(|r| {
                format!(
                    "{:.2} Mbit/s",
                    r.stream_bytes as f64 * 8.0 / r.seconds / 1e6
                )
            }),
        ),
        (
            "TCP bytes intact",
            Box::new(|r| {
                if r.stream_intact {
                    "yes".into()
                } else {
                    "NO".into()
                }
            }),
        ),
        (
            "pacing lateness median / p99",
            Box::new(|r| {
                let (m, p99, _) = r.sender.lateness_us();
                format!("{m:.1} / {p99:.1} µs")
            }),
        ),
        (
            "A's riders: in / piggybacked / unchanged / dropped",
            Box::new(|r| {
                let p = &r.a.planner;
                format!(
                    "{} / {} / {} / {}",
                    p.riders_in,
                    p.riders_piggybacked,
                    p.riders_sent_unchanged,
                    p.riders_dropped()
                )
            }),
        ),
    ];
    println!(
        "\n{:<52}{:>22}{:>22}",
        "", "piggybacking on", "piggybacking off"
    );
    for (name, f) in &rows {
        println!("{name:<52}{:>22}{:>22}", f(&on), f(&off));
    }
    println!(
        "\nWith piggybacking, {:.0} % fewer probe-only bytes crossed the bottleneck.",
        100.0
            * (1.0
                - on.sender.probe_only_bytes() as f64
                    / off.sender.probe_only_bytes().max(1) as f64)
    );
    if !on.stream_intact || !off.stream_intact {
        bail!("the TCP stream arrived corrupted");
    }
    Ok(())
}

fn phase(me: &std::path::Path, piggyback: bool, duration: Duration) -> anyhow::Result<Run> {
    let label = if piggyback {
        "with piggybacking"
    } else {
        "without piggybacking"
    };
    println!("run {label}: building hosts and starting mgrpd ...");
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "1540".into())),
    })?;
    // The paper's mode (its "mgrp10"): every packet to the peer waits up to 10 ms for
    // a probe, so the stream rides in the trains throughout.
    let (a, b) = daemon_pair(
        &net,
        me,
        &["mgrpd"],
        &["--log-level", "warn", "--hold-mode", "always"],
    )?;

    // The TCP stream, paced at STREAM_MBPS by the application.
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5001)?;
    let receiver = std::thread::spawn(move || -> anyhow::Result<(u64, bool)> {
        let (mut s, _) = listener.accept()?;
        Ok(read_pattern(&mut s)?)
    });
    let mut stream = net
        .a
        .run(|| TcpStream::connect(SocketAddr::new(IpAddr::V4(ADDR_B), 5001)))??;
    let sender = std::thread::spawn(move || -> anyhow::Result<()> {
        let per_tick = (STREAM_MBPS * 1e6 / 8.0 / 100.0) as usize;
        let start = Instant::now();
        let mut sent = 0u64;
        let mut tick = 0u32;
        let mut buf = vec![0u8; per_tick];
        while start.elapsed() < duration {
            fill_pattern(&mut buf, sent);
            stream.write_all(&buf)?;
            sent += per_tick as u64;
            tick += 1;
            let next = start + Duration::from_millis(10) * tick;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        Ok(())
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (summary, received) = rt.block_on(async {
        let client_a = mgrp_client::Client::connect(&a.socket).await?;
        let client_b = mgrp_client::Client::connect(&b.socket).await?;
        let mut probes = client_b.listen(PORT).await?;
        let recv = pktrain::receive(&mut probes, duration + Duration::from_secs(1));
        let send = pktrain::send(
            &client_a,
            IpAddr::V4(ADDR_B),
            (PORT - 1, PORT),
            TrainShape::PK2,
            piggyback,
            duration,
        );
        let (sent, trains) = tokio::join!(send, recv);
        let received: u64 = trains?.values().map(|t| u64::from(t.received)).sum();
        anyhow::Ok((sent?, received))
    })?;
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("stream sender panicked"))??;
    let (bytes, intact) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("stream receiver panicked"))??;
    // The application paces the stream over `duration`; what arrived over it is its rate.
    let seconds = duration.as_secs_f64();
    let sa = a.quiescent_stats()?;
    let sb = b.quiescent_stats()?;
    println!(
        "  done: {} trains, {} probes, TCP {:.2} Mbit/s",
        summary.trains,
        summary.probes,
        bytes as f64 * 8.0 / seconds / 1e6
    );
    Ok(Run {
        sender: summary,
        probes_received: received,
        stream_bytes: bytes,
        stream_intact: intact,
        seconds,
        a: sa,
        b: sb,
    })
}
