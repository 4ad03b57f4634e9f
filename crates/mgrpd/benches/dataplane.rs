//! System bench of mgrpd's data path, on two namespaces joined by a veth pair:
//!
//! - TCP throughput A→B directly over the veth, through two daemons with permanent
//!   routes, through them while trains run, and with route on demand;
//! - round-trip time of 1-byte TCP exchanges, direct and through the daemons;
//! - pacing lateness of 1000-probe trains at 200 µs and 1 ms gaps, with and without
//!   SCHED_FIFO.
//!
//! Needs root. Run with `cargo bench -p mgrpd --bench dataplane` (add `-- quick` for a
//! shorter run, `-- --mgrpd PATH` to measure another build, `-- --encap udp` to run
//! every setting with UDP encapsulation; route on demand is then left out, as mgrpd
//! refuses it with UDP peers; `-- --keyed` to authenticate every MGRP packet). Prints
//! a table, with both daemons' CPU time per gigabyte forwarded; the numbers depend on
//! the machine's load, so note it.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mgrp_core::schedule::percentile;
use mgrp_testbed::{
    ADDR_B, Daemon, TwoHostOptions, TwoHosts, tcp_listen, tcp_transfer, uniform_train,
};

/// The daemon measured: this build, or `--mgrpd PATH` (for before/after figures).
fn mgrpd() -> &'static Path {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let args: Vec<String> = std::env::args().collect();
        args.iter()
            .position(|a| a == "--mgrpd")
            .and_then(|i| args.get(i + 1))
            .map_or_else(|| env!("CARGO_BIN_EXE_mgrpd").into(), Into::into)
    })
}

/// `--encap VALUE` for both daemons (`raw`, `udp`, `udp:PORT`); raw IP when absent.
fn encap() -> Option<&'static str> {
    static ENCAP: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ENCAP
        .get_or_init(|| {
            let args: Vec<String> = std::env::args().collect();
            args.iter()
                .position(|a| a == "--encap")
                .and_then(|i| args.get(i + 1))
                .cloned()
        })
        .as_deref()
}

fn udp() -> bool {
    encap().is_some_and(|e| e.starts_with("udp"))
}

/// User plus system CPU time of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(end) = stat.rfind(')') else {
        return 0.0;
    };
    let f: Vec<&str> = stat[end + 2..].split(' ').collect();
    let ticks: u64 = f
        .get(11..13)
        .map_or(0, |t| t.iter().filter_map(|x| x.parse::<u64>().ok()).sum());
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
}

/// Both daemons' CPU time so far.
fn daemons_cpu(a: &Daemon, b: &Daemon) -> f64 {
    [a, b]
        .iter()
        .filter_map(|d| d.process.pid())
        .map(cpu_seconds)
        .sum()
}

/// Median throughput of `runs` transfers of `bytes` (as [`throughput`]), and both
/// daemons' CPU seconds per gigabyte forwarded.
fn throughput_cpu(
    net: &TwoHosts,
    (a, b): (&Daemon, &Daemon),
    bytes: u64,
    runs: usize,
    port: &mut u16,
) -> (f64, f64) {
    let before = daemons_cpu(a, b);
    let mbps = throughput(net, bytes, runs, port);
    let used = daemons_cpu(a, b) - before;
    (mbps, used / (bytes as f64 * runs as f64 / 1e9))
}

/// With `--keyed`: a key file (mode 0600) both daemons authenticate with, removed at
/// exit.
fn key_file() -> Option<&'static str> {
    static KEY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt as _;
        if !std::env::args().any(|a| a == "--keyed") {
            return None;
        }
        let path = std::env::temp_dir().join(format!("{}.key", mgrp_testbed::unique("mgbk")));
        std::fs::write(&path, "6b".repeat(32)).expect("the bench's key file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("the bench's key file's mode");
        Some(path.display().to_string())
    })
    .as_deref()
}

fn daemons(net: &TwoHosts, extra: &[&str]) -> (Daemon, Daemon) {
    let mut args = vec!["--log-level", "warn"];
    if let Some(e) = encap() {
        args.extend(["--encap", e]);
    }
    if let Some(k) = key_file() {
        args.extend(["--key-file", k]);
    }
    args.extend_from_slice(extra);
    mgrp_testbed::daemon_pair(net, mgrpd(), &[], &args).expect("mgrpd on A and B")
}

fn throughput(net: &TwoHosts, bytes: u64, runs: usize, port: &mut u16) -> f64 {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            *port += 1;
            let l = tcp_listen(&net.b, IpAddr::V4(ADDR_B), *port).unwrap();
            let t = tcp_transfer(&net.a, l, IpAddr::V4(ADDR_B), *port, bytes).unwrap();
            assert!(t.intact && t.received == bytes);
            t.mbps()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn with_trains<T>(a: &Daemon, f: impl FnOnce() -> T) -> T {
    let stop = Arc::new(AtomicBool::new(false));
    let api = a.api().unwrap();
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            api.send_train(uniform_train(
                IpAddr::V4(ADDR_B),
                20,
                500,
                Duration::from_millis(1),
            ))
            .unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let r = f();
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    r
}

/// Median and p99 round-trip time of 1-byte exchanges, in µs.
fn rtt(net: &TwoHosts, n: usize, port: &mut u16) -> (f64, f64) {
    *port += 1;
    let l = tcp_listen(&net.b, IpAddr::V4(ADDR_B), *port).unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b).unwrap();
        }
    });
    let p = *port;
    let mut s = net
        .a
        .run(|| TcpStream::connect(SocketAddr::new(IpAddr::V4(ADDR_B), p)))
        .unwrap()
        .unwrap();
    s.set_nodelay(true).unwrap();
    let mut b = [7u8; 1];
    let mut v = Vec::with_capacity(n);
    for i in 0..n + 100 {
        let t = Instant::now();
        s.write_all(&b).unwrap();
        s.read_exact(&mut b).unwrap();
        if i >= 100 {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    drop(s);
    echo.join().unwrap();
    v.sort_by(f64::total_cmp);
    (percentile(&v, 50.0).unwrap(), percentile(&v, 99.0).unwrap())
}

/// Lateness (departure − deadline, µs) of `trains` trains of 1000 probes `gap` apart:
/// median, p99, max, and the count of stalls (gaps stretched by > half a gap).
fn pacing(a: &Daemon, gap: Duration, trains: usize) -> (f64, f64, f64, u32) {
    let api = a.api().unwrap();
    let mut late = Vec::new();
    let mut stalls = 0;
    for _ in 0..trains {
        let r = api
            .send_train(uniform_train(IpAddr::V4(ADDR_B), 1000, 300, gap))
            .unwrap();
        let deps: Vec<_> = r.departures.iter().filter_map(|d| d.departed).collect();
        let schedule = mgrp_core::schedule::Schedule::new(
            r.departures[0].deadline,
            std::iter::once(Duration::ZERO).chain(std::iter::repeat_n(gap, 999)),
        );
        stalls += schedule.summarize(&deps, Duration::from_micros(20)).stalls;
        for d in &r.departures {
            if let Some(t) = d.departed {
                late.push(t.signed_nanos_since(d.deadline) as f64 / 1e3);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    late.sort_by(f64::total_cmp);
    (
        percentile(&late, 50.0).unwrap(),
        percentile(&late, 99.0).unwrap(),
        *late.last().unwrap(),
        stalls,
    )
}

/// Only the pacing figures, with ten trains per setting: `-- pacing`.
fn pacing_only() {
    println!(
        "load before: {}, encap {}",
        mgrp_testbed::host::load(),
        encap().unwrap_or("raw")
    );
    let net = TwoHosts::new(&TwoHostOptions::default()).unwrap();
    for (name, extra) in [
        ("SCHED_FIFO", &[][..]),
        ("normal scheduler", &["--no-realtime"][..]),
    ] {
        let (a, _b) = daemons(&net, extra);
        for gap in [Duration::from_micros(200), Duration::from_millis(1)] {
            let (m, p99, max, stalls) = pacing(&a, gap, 10);
            println!(
                "pacing {name}, 10 x 1000 probes at {gap:?}: lateness median {m:.2} µs, p99 {p99:.1} µs, max {max:.0} µs, stalls {stalls}"
            );
        }
    }
    println!("load after: {}", mgrp_testbed::host::load());
    if let Some(k) = key_file() {
        let _ = std::fs::remove_file(k);
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !mgrp_testbed::is_root() {
        eprintln!("dataplane bench: needs root (network namespaces); nothing measured");
        return;
    }
    let quick = std::env::args().any(|a| a == "quick");
    if std::env::args().any(|a| a == "pacing") {
        pacing_only();
        return;
    }
    let (bytes, runs, rtts, trains) = if quick {
        (200 << 20, 1, 2000, 2)
    } else {
        (1u64 << 30, 3, 20_000, 5)
    };
    println!(
        "load before: {}, mgrpd {}, encap {}{}",
        mgrp_testbed::host::load(),
        mgrpd().display(),
        encap().unwrap_or("raw"),
        if key_file().is_some() { ", keyed" } else { "" }
    );
    let net = TwoHosts::new(&TwoHostOptions::default()).unwrap();
    let mut port = 6000;

    let direct = throughput(&net, bytes, runs, &mut port);
    let (direct_rtt, direct_rtt99) = rtt(&net, rtts, &mut port);
    println!(
        "direct veth: {direct:.0} Mbit/s, rtt median {direct_rtt:.1} µs p99 {direct_rtt99:.1} µs"
    );

    {
        let (a, b) = daemons(&net, &["--hold-mode", "always", "--hold", "1ms"]);
        let (tput, cpu) = throughput_cpu(&net, (&a, &b), bytes, runs, &mut port);
        let trains_tput = with_trains(&a, || throughput(&net, bytes, runs, &mut port));
        println!(
            "permanent routes, hold always 1ms: {tput:.0} Mbit/s ({cpu:.2} CPU s/GB); with pk2 trains {trains_tput:.0} Mbit/s"
        );
    }
    {
        let (a, b) = daemons(&net, &["--hold-mode", "always"]);
        let (tput, cpu) = throughput_cpu(&net, (&a, &b), bytes, runs, &mut port);
        let trains_tput = with_trains(&a, || throughput(&net, bytes, runs, &mut port));
        println!(
            "permanent routes, hold always 10ms: {tput:.0} Mbit/s ({cpu:.2} CPU s/GB); with pk2 trains {trains_tput:.0} Mbit/s"
        );
        for gap in [Duration::from_micros(200), Duration::from_millis(1)] {
            let (m, p99, max, stalls) = pacing(&a, gap, trains);
            println!(
                "pacing SCHED_FIFO, {trains} x 1000 probes at {gap:?}: lateness median {m:.2} µs, p99 {p99:.1} µs, max {max:.0} µs, stalls {stalls}"
            );
        }
    }
    {
        let (a, b) = daemons(
            &net,
            &["--hold-mode", "on-demand", "--route-on-demand", "false"],
        );
        let (tput, cpu) = throughput_cpu(&net, (&a, &b), bytes, runs, &mut port);
        let (r, r99) = rtt(&net, rtts, &mut port);
        let trains_tput = with_trains(&a, || throughput(&net, bytes, runs, &mut port));
        println!(
            "permanent routes, hold on-demand, no trains: {tput:.0} Mbit/s ({cpu:.2} CPU s/GB, {:.2} of direct), rtt median {r:.1} µs (+{:.1}) p99 {r99:.1} µs; with pk2 trains {trains_tput:.0} Mbit/s",
            tput / direct,
            r - direct_rtt
        );
    }
    if udp() {
        println!("route on demand: not measured (mgrpd refuses it with UDP peers)");
    } else {
        let (a, _b) = daemons(&net, &["--hold-mode", "on-demand"]);
        let tput = throughput(&net, bytes, runs, &mut port);
        let (r, r99) = rtt(&net, rtts, &mut port);
        let trains_tput = with_trains(&a, || throughput(&net, bytes, runs, &mut port));
        println!(
            "route on demand, no trains: {tput:.0} Mbit/s, rtt median {r:.1} µs (+{:.1}) p99 {r99:.1} µs; with pk2 trains {trains_tput:.0} Mbit/s",
            r - direct_rtt
        );
    }
    {
        let (a, _b) = daemons(&net, &["--no-realtime"]);
        for gap in [Duration::from_micros(200), Duration::from_millis(1)] {
            let (m, p99, max, stalls) = pacing(&a, gap, trains);
            println!(
                "pacing normal scheduler, {trains} x 1000 probes at {gap:?}: lateness median {m:.2} µs, p99 {p99:.1} µs, max {max:.0} µs, stalls {stalls}"
            );
        }
    }
    println!("load after: {}", mgrp_testbed::host::load());
    if let Some(k) = key_file() {
        let _ = std::fs::remove_file(k);
    }
}
