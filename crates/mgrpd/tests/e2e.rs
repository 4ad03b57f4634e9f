//! End-to-end tests of mgrpd: two hosts in network namespaces on a veth pair, a daemon
//! on each, real TUN devices, raw sockets and TCP. They need root (CI runs as root);
//! without it they say so and pass vacuously. They run one at a time, since each starts
//! two real-time pacers on a 2-CPU machine, and they assert behaviour, never timing.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mgrp_core::api::DaemonStats;
use mgrp_testbed::forge;
use mgrp_testbed::{
    ADDR_A, ADDR_B, Daemon, Star, TwoHostOptions, TwoHosts, tcp_listen, tcp_transfer, uniform_train,
};

mod common;

use common::{TempFile, mgrpd, root_or_skip, serial, trains_every, wait_for};

const MB: u64 = 1 << 20;

/// Daemons on both hosts, each routing the other host into its tunnel.
fn daemons(net: &TwoHosts, extra: &[&str]) -> (Daemon, Daemon) {
    let mut args = vec!["--log-level", "debug"];
    args.extend_from_slice(extra);
    mgrp_testbed::daemon_pair(net, mgrpd(), &[], &args).expect("mgrpd on A and B")
}

/// setpriv, which runs mgrpd with only some capabilities (its package is named if
/// it is missing).
fn setpriv() -> std::path::PathBuf {
    mgrp_testbed::packages::find("setpriv").unwrap_or_else(|| {
        panic!(
            "{}",
            mgrp_testbed::packages::require(&["setpriv"]).unwrap_err()
        )
    })
}

/// A train of 5 probes of 300 B, 200 µs apart, to B.
fn five_to_b() -> mgrp_client::Train {
    uniform_train(IpAddr::V4(ADDR_B), 5, 300, Duration::from_micros(200))
}

/// The probes of a five-probe train to B that `d` sent, or why it refused the train.
fn five_sent(d: &Daemon) -> anyhow::Result<u16> {
    Ok(d.api()?.send_train(five_to_b())?.probes_sent)
}

/// How many lines of `d`'s log hold `what`.
fn log_count(d: &Daemon, what: &str) -> usize {
    d.process.log().matches(what).count()
}

/// Waits up to `within` for `what` to be in `d`'s log `n` times.
fn wait_for_log(d: &Daemon, what: &str, n: usize, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    while log_count(d, what) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "no {what:?} in the log: {}",
            d.process.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs pk2-like trains (20 × 500 B, 1 ms apart, every 20 ms) from A to B until `stop`.
fn trains_until(daemon: &Daemon, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    trains_every(daemon, IpAddr::V4(ADDR_B), stop, Duration::from_millis(20))
}

fn check_conserved(name: &str, s: &DaemonStats) {
    assert!(
        s.conserved(),
        "{name}: rider counters do not balance: {s:#?}"
    );
    assert!(
        s.receive_conserved(),
        "{name}: receive counters do not balance: {s:#?}"
    );
    assert_eq!(
        s.planner.riders_held, 0,
        "{name}: riders still held: {s:#?}"
    );
}

/// A transfer from A to B, with trains running alongside if `with_trains`.
fn transfer(net: &TwoHosts, a: &Daemon, bytes: u64, port: u16, with_trains: bool) -> u64 {
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), port).expect("listen on B");
    let stop = Arc::new(AtomicBool::new(false));
    let trains = with_trains.then(|| trains_until(a, stop.clone()));
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), port, bytes).expect("transfer");
    stop.store(true, Ordering::Relaxed);
    let n = trains.map_or(0, |h| h.join().expect("train thread"));
    assert_eq!(t.received, bytes, "bytes lost");
    assert!(t.intact, "bytes corrupted");
    eprintln!(
        "transfer of {bytes} B: {:.0} Mbit/s, {n} trains alongside",
        t.mbps()
    );
    n
}

#[test]
fn tcp_through_the_tunnel_with_and_without_trains() {
    let _serial = serial();
    if !root_or_skip("tcp_through_the_tunnel") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    // Permanent routes (the paper's mode): traffic enters the tunnel with no train.
    let (a, b) = daemons(&net, &["--hold-mode", "always"]);
    transfer(&net, &a, 20 * MB, 5001, false);
    let before = a.quiescent_stats().unwrap();
    assert!(
        before.daemon.tun_packets_in > 10_000,
        "traffic did not enter the tunnel: {before:#?}"
    );
    assert_eq!(before.planner.riders_piggybacked, 0);
    // Held riders released unchanged leave put back together into super-packets.
    assert!(
        before.daemon.super_packets_sent > 0,
        "released riders were not coalesced: {before:#?}"
    );
    let trains = transfer(&net, &a, 40 * MB, 5002, true);
    assert!(trains > 0);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    assert!(
        sa.planner.riders_piggybacked > 0,
        "nothing rode in the probes: {sa:#?}"
    );
    assert!(
        sb.daemon.riders_delivered > 0,
        "B delivered no rider: {sb:#?}"
    );
    assert_eq!(sb.reassembly.riders_inconsistent, 0);
    check_conserved("A", &sa);
    check_conserved("B", &sb);
    assert!(a.process.log().contains("mgrpd ready"));
}

/// `--metrics`: the exporter answers in the daemon's namespace with the counters the
/// API gives, and refuses anything but `GET /metrics`.
#[test]
fn the_metrics_exporter_serves_the_api_counters() {
    let _serial = serial();
    if !root_or_skip("the_metrics_exporter") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, _b) = daemons(
        &net,
        &["--hold-mode", "always", "--metrics", "127.0.0.1:9577"],
    );
    transfer(&net, &a, 2 * MB, 5011, true);
    let stats = a.quiescent_stats().unwrap();
    // Every packet the TUN took for B is metered as B's traffic.
    let (window, peers) = a.api().unwrap().traffic().unwrap();
    assert_eq!(window, Duration::from_secs(2));
    assert_eq!(peers.len(), 1, "{peers:?}");
    let to_b = peers[0];
    assert_eq!(to_b.peer, IpAddr::V4(ADDR_B));
    assert_eq!(
        to_b.packets,
        stats.daemon.tun_packets_in - stats.daemon.tun_ignored,
        "{to_b:?} {stats:#?}"
    );
    assert!(to_b.bytes > 2 * MB, "{to_b:?}");
    assert_eq!((to_b.held_riders, to_b.held_bytes), (0, 0));
    let get = |path: &str| -> String {
        let path = path.to_string();
        net.a
            .run(move || {
                let mut s = std::net::TcpStream::connect("127.0.0.1:9577").unwrap();
                // In pieces, as clients may send it: the exporter reads the whole line.
                for piece in ["GET ", &path, " HTTP/1.1\r\n", "Host: a\r\n\r\n"] {
                    s.write_all(piece.as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                }
                let mut text = String::new();
                s.read_to_string(&mut text).unwrap();
                text
            })
            .unwrap()
    };
    let text = get("/metrics");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(
        value("mgrpd_tun_packets_read_total"),
        stats.daemon.tun_packets_in
    );
    assert!(stats.daemon.tun_packets_in > 0);
    assert_eq!(
        value("mgrpd_planner_riders_piggybacked_total"),
        stats.planner.riders_piggybacked
    );
    assert_eq!(
        value("mgrpd_planner_riders_held"),
        stats.planner.riders_held
    );
    let b = format!("{{peer=\"{ADDR_B}\",neighbour=\"\",name=\"\"}}");
    assert_eq!(
        value(&format!("mgrpd_peer_traffic_packets_total{b}")),
        to_b.packets
    );
    assert_eq!(
        value(&format!("mgrpd_peer_traffic_bytes_total{b}")),
        to_b.bytes
    );
    // The text format, as promtool reads it, passes its checks of the naming guide.
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    mgrp_testbed::http::promtool_check_metrics(body).unwrap_or_else(|e| panic!("{e:#}\n{body}"));
    assert!(get("/").starts_with("HTTP/1.1 404"));
    assert!(
        a.process
            .log()
            .contains("metrics at http://127.0.0.1:9577/metrics")
    );
}

/// A greedy transfer and back-to-back trains, with the default hold (on demand,
/// routes on demand): the tunnel is in use without a break, the transfer arrives
/// byte-exact, and both daemons' counters balance, sending and receiving.
#[test]
fn greedy_transfer_with_back_to_back_trains() {
    let _serial = serial();
    if !root_or_skip("greedy_transfer_with_back_to_back_trains") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, b) = daemons(&net, &[]);
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5003).expect("listen on B");
    let stop = Arc::new(AtomicBool::new(false));
    let trains = trains_every(&a, IpAddr::V4(ADDR_B), stop.clone(), Duration::ZERO);
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), 5003, 100 * MB).expect("transfer");
    stop.store(true, Ordering::Relaxed);
    let n = trains.join().expect("train thread");
    assert_eq!(t.received, 100 * MB, "bytes lost");
    assert!(t.intact, "bytes corrupted");
    assert!(n > 0);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    eprintln!(
        "greedy transfer: {:.0} Mbit/s with {n} trains back to back; {} riders piggybacked",
        t.mbps(),
        sa.planner.riders_piggybacked
    );
    assert!(sa.planner.riders_piggybacked > 0, "nothing rode: {sa:#?}");
    assert_eq!(sa.daemon.probes_sent, 20 * n, "{sa:#?}");
    assert_eq!(sb.daemon.probes_received, sa.daemon.probes_sent, "{sb:#?}");
    assert_eq!(sb.reassembly.riders_inconsistent, 0);
    check_conserved("A", &sa);
    check_conserved("B", &sb);
}

#[test]
fn tcp_through_a_10mbit_bottleneck_with_trains() {
    let _serial = serial();
    if !root_or_skip("tcp_through_a_10mbit_bottleneck") {
        return;
    }
    let opts = TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "16kb".into())),
        ..TwoHostOptions::default()
    };
    let net = TwoHosts::new(&opts).expect("topology");
    // The paper's mode: the transfer is in the tunnel throughout. (With routes on
    // demand it fills the bottleneck's queue between trains, and a probe can then be
    // refused by the qdisc, which `trains_until` does not allow.)
    let (a, b) = daemons(&net, &["--hold-mode", "always"]);
    transfer(&net, &a, 20 * MB, 5003, false);
    transfer(&net, &a, 20 * MB, 5004, true);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    assert!(sa.planner.riders_piggybacked > 0, "{sa:#?}");
    assert!(sb.daemon.riders_delivered > 0, "{sb:#?}");
    check_conserved("A", &sa);
    check_conserved("B", &sb);
}

#[test]
fn killed_daemon_fails_open() {
    let _serial = serial();
    if !root_or_skip("killed_daemon_fails_open") {
        return;
    }
    // A bottleneck makes the transfer last long enough to kill the daemon under it.
    let opts = TwoHostOptions {
        bottleneck: Some(("40mbit".into(), "32kb".into())),
        ..TwoHostOptions::default()
    };
    let net = TwoHosts::new(&opts).expect("topology");
    let (mut a, _b) = daemons(&net, &[]);
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5005).unwrap();
    let killer = {
        let pid = a.process.pid().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            mgrp_testbed::kill_pid(pid);
        })
    };
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), 5005, 20 * MB).unwrap();
    killer.join().unwrap();
    assert!(
        a.process.wait(Duration::from_secs(5)).is_some(),
        "mgrpd did not die"
    );
    assert_eq!(t.received, 20 * MB);
    assert!(t.intact);
    assert!(
        t.seconds > 1.5,
        "the transfer ended before the daemon was killed"
    );
    // The TUN and its routes are gone; the rule falls through to the main table.
    assert!(
        net.a.ip(&["link", "show", &a.tun]).is_err(),
        "TUN survived its daemon"
    );
}

#[test]
fn garbage_on_protocol_253_is_counted_and_ignored() {
    let _serial = serial();
    if !root_or_skip("garbage_on_protocol_253") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, b) = daemons(&net, &[]);
    let garbage = garbage_packets();
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5006).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let trains = trains_until(&a, stop.clone());
    let sender = {
        let sock = net
            .a
            .run(|| {
                socket2::Socket::new(
                    socket2::Domain::IPV4,
                    socket2::Type::RAW,
                    Some(socket2::Protocol::from(253)),
                )
            })
            .unwrap()
            .unwrap();
        // Marked like mgrpd's own packets, so it goes straight out, not into A's tunnel.
        sock.set_mark(0x4d47).unwrap();
        let garbage = garbage.clone();
        std::thread::spawn(move || {
            let dst = socket2::SockAddr::from(SocketAddr::new(IpAddr::V4(ADDR_B), 0));
            for g in &garbage {
                sock.send_to(g, &dst).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), 5006, 20 * MB).unwrap();
    sender.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    trains.join().unwrap();
    assert_eq!(t.received, 20 * MB);
    assert!(t.intact);
    let sb = b.quiescent_stats().unwrap();
    assert_eq!(sb.daemon.mgrp_malformed, garbage.len() as u64, "{sb:#?}");
    assert!(sb.daemon.mgrp_received > garbage.len() as u64);
    check_conserved("B", &sb);
    assert!(b.process.log().contains("malformed MGRP packet"));
}

/// Random bytes, truncated headers and headers whose lengths lie; all malformed.
fn garbage_packets() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..300usize {
        let len = 1 + (rnd() % 1400) as usize;
        let mut p: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        // Never version 1, so none is valid by chance.
        p[0] = 2 + (p[0] % 200);
        if i % 3 == 0 {
            p.truncate(1 + i % 27);
        }
        out.push(p);
    }
    for i in 0..300u16 {
        // A valid probe header whose lengths claim more than the packet has.
        let mut p = vec![0u8; 60];
        p[0] = 1;
        p[1] = 1;
        p[3] = 1 + (i % 50) as u8; // chunk descriptors that do not fit
        p[14..16].copy_from_slice(&1u16.to_be_bytes());
        p[24..26].copy_from_slice(&(i * 7).to_be_bytes());
        out.push(p);
    }
    out
}

/// A's routes in the tunnel table ("" when the table is empty or does not exist).
fn tunnel_routes(net: &TwoHosts) -> String {
    net.a
        .ip(&["route", "show", "table", "4242"])
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn on_demand_routes_only_while_trains_run() {
    let _serial = serial();
    if !root_or_skip("on_demand_routes_only_while_trains_run") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, b) = daemons(&net, &["--hold-mode", "on-demand"]);
    // No trains: no route, so no packet reaches the TUN at all.
    transfer(&net, &a, 20 * MB, 5007, false);
    let idle = a.quiescent_stats().unwrap();
    assert_eq!(idle.daemon.tun_packets_in, 0, "{idle:#?}");
    assert_eq!(tunnel_routes(&net), "");
    // A transfer across many trains: its packets move in and out of the tunnel.
    let trains = transfer(&net, &a, 60 * MB, 5008, true);
    assert!(trains > 1);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    assert!(sa.daemon.tun_packets_in > 0, "{sa:#?}");
    assert!(sa.planner.riders_piggybacked > 0, "{sa:#?}");
    check_conserved("A", &sa);
    check_conserved("B", &sb);
    // After the last train and the hold time, the route is gone again.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(tunnel_routes(&net), "");
    let before = a.stats().unwrap().daemon.tun_packets_in;
    transfer(&net, &a, 5 * MB, 5009, false);
    assert_eq!(a.quiescent_stats().unwrap().daemon.tun_packets_in, before);
}

#[test]
fn clean_shutdown_removes_rule_and_socket() {
    let _serial = serial();
    if !root_or_skip("clean_shutdown_removes_rule_and_socket") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (mut a, _b) = daemons(&net, &["--hold-mode", "always"]);
    assert!(net.a.ip(&["rule"]).unwrap().contains("lookup 4242"));
    // Permanent routes lead back into the TUN for every peer: strict filtering.
    assert_eq!(rp_filter(&net.a, &a.tun), "1", "{}", a.process.log());
    let status = a.process.stop().expect("mgrpd stopped");
    assert!(
        status.success(),
        "exit status {status}: {}",
        a.process.log()
    );
    assert!(
        !net.a.ip(&["rule"]).unwrap().contains("lookup 4242"),
        "rule left behind"
    );
    assert!(!a.socket.exists(), "socket left behind");
    assert!(a.process.log().contains("stopped: riders in"));
}

#[test]
fn startup_failures_say_what_to_do() {
    let _serial = serial();
    if !root_or_skip("startup_failures_say_what_to_do") {
        return;
    }
    let out = std::process::Command::new(mgrpd())
        .args(["--hold", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unit"), "{err}");
    let dir = std::env::temp_dir().join(mgrp_testbed::unique("mgrp-cfg"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "hold = \"5ms\"\nbogus = 1\n").unwrap();
    let out = std::process::Command::new(mgrpd())
        .arg("--check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
    std::fs::write(&cfg, "hold = \"5ms\"\n").unwrap();
    let out = std::process::Command::new(mgrpd())
        .arg("--check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
    // A TUN name that is taken: the second daemon explains and exits non-zero.
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, _b) = daemons(&net, &[]);
    let other_sock = std::env::temp_dir().join(format!("{}.sock", mgrp_testbed::unique("x")));
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", net.a.name()])
        .arg(mgrpd())
        .args(["--tun", &a.tun, "--no-routes", "--socket"])
        .arg(&other_sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot create TUN"), "{err}");
    // A user that does not exist: refused before anything is set up.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", net.a.name()])
        .arg(mgrpd())
        .args(["--user", "no-such-user-mgrp", "--no-routes", "--socket"])
        .arg(&other_sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn pk2_probes_arrive_with_stamps_and_riders_balance() {
    let _serial = serial();
    if !root_or_skip("pk2_probes_arrive_with_stamps_and_riders_balance") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, b) = daemons(&net, &[]);
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5010).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sock_a, sock_b) = (a.socket.clone(), b.socket.clone());
    let probes_task = rt.spawn(async move {
        let rx = mgrp_client::Client::connect(&sock_b).await.unwrap();
        let mut stream = rx.listen(7001).await.unwrap();
        let tx = mgrp_client::Client::connect(&sock_a).await.unwrap();
        let mut reports = Vec::new();
        let mut received = Vec::new();
        for _ in 0..100 {
            let train =
                mgrp_client::Train::uniform(IpAddr::V4(ADDR_B), 20, 500, Duration::from_millis(1))
                    .ports(7000, 7001);
            reports.push(tx.send_train(train).await.unwrap());
            while let Some(p) = stream
                .next_probe_timeout(Duration::from_millis(5))
                .await
                .unwrap()
            {
                received.push(p);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while let Some(p) = stream
            .next_probe_timeout(Duration::from_millis(500))
            .await
            .unwrap()
        {
            received.push(p);
        }
        (reports, received)
    });
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), 5010, 200 * MB).unwrap();
    let (reports, received) = rt.block_on(probes_task).unwrap();
    assert!(t.intact && t.received == 200 * MB);
    assert_eq!(
        received.len(),
        2000,
        "every probe arrives on a lossless link"
    );
    for (i, r) in reports.iter().enumerate() {
        let mine: Vec<_> = received
            .iter()
            .filter(|p| p.transaction == r.transaction)
            .collect();
        assert_eq!(mine.len(), 20, "train {i}");
        for (seq, p) in mine.iter().enumerate() {
            assert_eq!(usize::from(p.seq), seq, "sequence numbers increase");
            assert!(p.sender_time.as_nanos() > 0 && p.receive_time.as_nanos() > 0);
            assert_eq!(p.sender_time, r.departures[seq].stamp);
            assert_eq!(p.size, 500);
            // The kernel stamped the probe as it entered the veth's queue, after the
            // daemon's stamp, and as the veth took it, before the far side's receive
            // stamp.
            let d = &r.departures[seq];
            let queued = d.kernel_queued.unwrap_or_else(|| {
                panic!("train {i} probe {seq} has no kernel queue stamp: {r:#?}")
            });
            assert!(queued >= p.sender_time, "train {i} probe {seq}: {r:#?}");
            if let Some(sent) = d.kernel_sent {
                assert!(sent >= queued, "train {i} probe {seq}: {r:#?}");
                assert!(
                    sent <= p.receive_time,
                    "train {i} probe {seq}: {p:#?} {r:#?}"
                );
            }
        }
        assert_eq!(
            r.late_threshold_ns, 50_000,
            "the default threshold is judged"
        );
        assert_eq!(r.probes_unstamped, 0, "{r:#?}");
        assert_eq!(
            r.departure_clock,
            mgrp_core::stats::DepartureClock::KernelQueue
        );
        assert!(r.probes_late <= r.probes_sent);
    }
    let claimed: u64 = reports.iter().map(|r| r.rider_bytes).sum();
    let extracted: u64 = received.iter().map(|p| u64::from(p.rider_bytes)).sum();
    assert!(claimed > 0, "no rider bytes rode while TCP ran");
    assert_eq!(extracted, claimed);
    check_conserved("A", &a.quiescent_stats().unwrap());
    check_conserved("B", &b.quiescent_stats().unwrap());
}

/// Mixed versions: A sends wire version 1 (as an mgrpd from before version 2 does),
/// B sends version 2. Trains go both ways while TCP runs from A to B, its data riding
/// A's trains and its acknowledgements B's: every byte arrives intact, both deliver
/// riders, and on the wire A's MGRP packets are version 1 and B's version 2.
#[test]
fn daemons_on_either_wire_version_exchange_trains_and_riders() {
    let _serial = serial();
    if !root_or_skip("daemons_on_either_wire_version_exchange_trains_and_riders") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (to_b, to_a) = (format!("{ADDR_B}/32"), format!("{ADDR_A}/32"));
    let a = Daemon::start(&net.a, mgrpd(), &["--route", &to_b, "--wire", "1"]).unwrap();
    let b = Daemon::start(&net.b, mgrpd(), &["--route", &to_a]).unwrap();
    // Raw sockets of protocol 253 get a copy of every MGRP packet each host receives.
    let sniffers = [mgrp_socket(&net.a), mgrp_socket(&net.b)];
    for s in &sniffers {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5030).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let from_a = trains_until(&a, stop.clone());
    let from_b = trains_every(
        &b,
        IpAddr::V4(ADDR_A),
        stop.clone(),
        Duration::from_millis(20),
    );
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), 5030, 40 * MB).unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(from_a.join().unwrap() > 0);
    assert!(from_b.join().unwrap() > 0);
    assert!(t.intact && t.received == 40 * MB, "{t:?}");
    let (sa, sb) = (a.quiescent_stats().unwrap(), b.quiescent_stats().unwrap());
    for (name, s, other) in [("A", &sa, &sb), ("B", &sb, &sa)] {
        assert!(
            s.planner.riders_piggybacked > 0,
            "{name}: nothing rode: {s:#?}"
        );
        assert!(
            other.daemon.riders_delivered > 0,
            "{name}'s riders were not delivered: {other:#?}"
        );
        assert_eq!(s.reassembly.riders_inconsistent, 0, "{name}: {s:#?}");
        check_conserved(name, s);
    }
    // What each host received: A's packets at B, B's at A.
    for (sniffer, sender, version) in [(&sniffers[1], "A", 1u8), (&sniffers[0], "B", 2u8)] {
        let mut seen = 0;
        let mut buf = [0u8; 2048];
        let mut sniffer: &socket2::Socket = sniffer;
        while let Ok(n) = sniffer.read(&mut buf) {
            // The IPv4 header (20 bytes here), then the MGRP packet's first byte.
            assert!(n > 20, "an MGRP packet without payload");
            let first = buf[20];
            let got = if first == 1 { 1 } else { first >> 4 };
            assert_eq!(got, version, "{sender} sent version {got}");
            seen += 1;
        }
        assert!(seen > 0, "no MGRP packet from {sender} was seen");
    }
}

#[test]
fn ipv6_riders_ride_in_ipv6_probes() {
    let _serial = serial();
    if !root_or_skip("ipv6_riders_ride_in_ipv6_probes") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    ipv6_transfer_with_trains(&net, &[]);
}

#[test]
fn ipv6_riders_ride_in_ipv6_probes_over_udp() {
    let _serial = serial();
    if !root_or_skip("ipv6_riders_ride_in_ipv6_probes_over_udp") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    // B takes no raw MGRP at all: what arrives must have come in UDP. The table goes
    // with the namespace.
    net.b
        .exec(&[
            "nft",
            "add table ip6 mgrptest; add chain ip6 mgrptest input { type filter hook input priority 0; }; add rule ip6 mgrptest input meta l4proto 253 counter drop",
        ])
        .expect("nftables in B");
    let key = mgrp_core::auth::Key::from_bytes([0x6b; 32]);
    let file = TempFile::key(&key);
    let _daemons = ipv6_transfer_with_trains(&net, &["--encap", "udp", "--key-file", &file.arg()]);
    // IPv6 40, UDP 8, version 2's continuation header 2 and whole-rider descriptor 2,
    // the trailer 24: TCP segments fit one continuation.
    let routes = net
        .a
        .ip(&["-6", "-o", "route", "show", "table", "all"])
        .unwrap();
    assert!(
        routes
            .lines()
            .any(|l| l.starts_with("fd77::2 ") && l.contains(" mtu 1424")),
        "{routes}"
    );
}

/// 40 MB of TCP from A to B over IPv6 through both daemons (`extra` flags), with
/// trains of A alongside: intact, riders delivered, counters balanced. Returns the
/// daemons, still running.
fn ipv6_transfer_with_trains(net: &TwoHosts, extra: &[&str]) -> (Daemon, Daemon) {
    use mgrp_testbed::{ADDR6_A, ADDR6_B};
    let route_b = format!("{ADDR6_B}/128");
    let route_a = format!("{ADDR6_A}/128");
    // Permanent routes, so the whole transfer is in the tunnel (with routes on demand
    // the part before the first train goes direct).
    let always = ["--hold-mode", "always"];
    let a = Daemon::start(
        &net.a,
        mgrpd(),
        &[&["--route", &route_b][..], &always, extra].concat(),
    )
    .expect("mgrpd on A");
    let b = Daemon::start(
        &net.b,
        mgrpd(),
        &[&["--route", &route_a][..], &always, extra].concat(),
    )
    .expect("mgrpd on B");
    let listener = tcp_listen(&net.b, IpAddr::V6(ADDR6_B), 5011).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let trains = trains_every(&a, IpAddr::V6(ADDR6_B), stop.clone(), Duration::ZERO);
    let t = tcp_transfer(&net.a, listener, IpAddr::V6(ADDR6_B), 5011, 40 * MB).unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(trains.join().unwrap() > 0);
    assert_eq!(t.received, 40 * MB);
    assert!(t.intact);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    assert!(
        sa.daemon.tun_packets_in > 1000,
        "IPv6 traffic did not enter the tunnel: {sa:#?}"
    );
    assert!(sa.planner.riders_piggybacked > 0, "{sa:#?}");
    assert!(sb.daemon.riders_delivered > 0, "{sb:#?}");
    assert_eq!(sb.daemon.mgrp_malformed, 0);
    check_conserved("A", &sa);
    check_conserved("B", &sb);
    (a, b)
}

#[test]
fn riders_of_probes_that_cannot_be_sent_are_not_lost_silently() {
    let _serial = serial();
    if !root_or_skip("riders_of_probes_that_cannot_be_sent") {
        return;
    }
    // 10.99.0.1 is routed into A's tunnel but nowhere beyond it, so every probe to it
    // fails to send; its riders must be sent unchanged instead (which fails too here),
    // and every counter must still balance.
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let a = Daemon::start(
        &net.a,
        mgrpd(),
        &[
            "--route",
            "10.99.0.1/32",
            "--hold",
            "200ms",
            "--hold-mode",
            "always",
        ],
    )
    .expect("mgrpd on A");
    let sock = net
        .a
        .run(|| std::net::UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    let dst: SocketAddr = "10.99.0.1:9".parse().unwrap();
    for _ in 0..50 {
        sock.send_to(&[7u8; 200], dst).unwrap();
    }
    let api = a.api().unwrap();
    let dest = IpAddr::V4("10.99.0.1".parse().unwrap());
    let report = api
        .send_train(uniform_train(dest, 20, 500, Duration::from_micros(100)))
        .unwrap();
    assert_eq!(report.probes_sent, 0, "{report:?}");
    assert!(report.probes_with_riders > 0, "{report:?}");
    let s = a.quiescent_stats().unwrap();
    assert_eq!(s.daemon.probe_send_errors, 20, "{s:#?}");
    assert!(s.daemon.riders_resent_after_failed_probe > 0, "{s:#?}");
    assert!(s.daemon.unchanged_send_errors >= s.daemon.riders_resent_after_failed_probe);
    check_conserved("A", &s);
    assert!(a.process.log().contains("mgrpd ready"));
}

/// A UDP datagram to port 7777 as a whole IP packet.
fn udp_rider(src: [u8; 4], dst: [u8; 4], protocol: u8, text: &[u8]) -> Vec<u8> {
    forge::udp_packet(src.into(), dst.into(), protocol, 7777, text)
}

/// A raw IPv4 socket of protocol 253 in `ns`, for hand-made MGRP packets.
fn mgrp_socket(ns: &mgrp_testbed::Netns) -> socket2::Socket {
    use socket2::{Domain, Protocol, Socket, Type};
    ns.run(|| Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(253))))
        .unwrap()
        .unwrap()
}

/// An unauthenticated continuation carrying `rider` whole.
fn continuation(rider_id: u32, rider: &[u8]) -> Vec<u8> {
    forge::continuation(rider_id, rider, 0)
}

/// Hand-made MGRP packets from A, a peer, and from a spoofed stranger: only the sound
/// rider from A's own address to the address the packet was sent to reaches B's UDP
/// socket; every other one is refused and counted by its reason. A train to a host
/// that is no peer is refused and installs no route.
#[test]
fn forged_riders_are_refused_and_counted() {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let _serial = serial();
    if !root_or_skip("forged_riders_are_refused_and_counted") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    // B's second address, which no MGRP packet is sent to.
    net.b
        .ip(&["addr", "add", "10.77.0.3/24", "dev", &net.veth_b])
        .unwrap();
    let (a, b) = daemons(&net, &[]);
    let sink = net
        .b
        .run(|| std::net::UdpSocket::bind("0.0.0.0:7777"))
        .unwrap()
        .unwrap();
    sink.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let (me, other, peer, stranger) = (
        [10, 77, 0, 2],
        [10, 77, 0, 3],
        [10, 77, 0, 1],
        [10, 77, 0, 9],
    );
    let to_b = SockAddr::from(SocketAddr::new(IpAddr::V4(ADDR_B), 0));
    // MGRP from A's own address.
    let mgrp = mgrp_socket(&net.a);
    let cases: [(&[u8], Vec<u8>); 5] = [
        (b"good", udp_rider(peer, me, 17, b"good")),
        (
            b"spoofed source",
            udp_rider(stranger, me, 17, b"spoofed source"),
        ),
        (
            b"other address",
            udp_rider(peer, other, 17, b"other address"),
        ),
        (b"inner mgrp", udp_rider(peer, me, 253, b"inner mgrp")),
        (
            b"broadcast",
            udp_rider(peer, [255, 255, 255, 255], 17, b"broadcast"),
        ),
    ];
    for (i, (_, rider)) in cases.iter().enumerate() {
        let id = 0x7000_0000 + u32::try_from(i).unwrap();
        mgrp.send_to(&continuation(id, rider), &to_b).unwrap();
    }
    // The same good rider from a stranger: the outer source is spoofed, so the whole
    // IP header is ours (IPPROTO_RAW).
    let raw = net
        .a
        .run(|| Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255))))
        .unwrap()
        .unwrap();
    let inner = udp_rider(stranger, me, 17, b"stranger");
    let outer = forge::ipv4_packet(
        stranger.into(),
        me.into(),
        253,
        &continuation(0x7100_0000, &inner),
    );
    raw.send_to(&outer, &to_b).unwrap();

    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = sink.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(got, ["good"], "only the sound rider may reach the host");
    let s = b.quiescent_stats().unwrap().daemon;
    assert_eq!(s.riders_delivered, 1, "{s:#?}");
    assert_eq!(s.riders_refused_foreign_source, 1, "{s:#?}");
    assert_eq!(s.riders_refused_foreign_destination, 1, "{s:#?}");
    assert_eq!(s.riders_refused_inner_mgrp, 1, "{s:#?}");
    assert_eq!(s.riders_refused_special_destination, 1, "{s:#?}");
    assert_eq!(s.mgrp_not_peer, 1, "{s:#?}");
    assert!(b.process.log().contains("no peer"), "{}", b.process.log());

    // A train from A to B's other address: refused, and no route for it appears.
    let api = a.api().unwrap();
    let to_other = IpAddr::V4("10.77.0.3".parse().unwrap());
    let refused = api.send_train(uniform_train(to_other, 5, 300, Duration::from_micros(100)));
    let e = refused.expect_err("a train to a non-peer is refused");
    assert!(e.to_string().contains("not a peer"), "{e:#}");
    let routes = net
        .a
        .ip(&["route", "show", "table", "all"])
        .unwrap_or_default();
    assert!(!routes.contains("10.77.0.3 "), "{routes}");
    let sa = a.stats().unwrap().daemon;
    assert_eq!(sa.trains_refused_not_peer, 1, "{sa:#?}");
}

/// A hand-made continuation with an authentication trailer, sealed with `key` as A
/// seals for B.
fn sealed_continuation(
    key: &mgrp_core::auth::Key,
    counter: u64,
    rider_id: u32,
    rider: &[u8],
) -> Vec<u8> {
    let buf = forge::continuation(rider_id, rider, mgrp_core::auth::TRAILER_LEN);
    let mut packet = mgrp_core::wire::Packet::new_checked(buf).unwrap();
    // As A seals for B: each named by the address the other knows it by.
    let a_to_b = mgrp_core::auth::Direction {
        from: IpAddr::V4(ADDR_A),
        to: IpAddr::V4(ADDR_B),
    };
    mgrp_core::auth::seal(
        key,
        mgrp_core::auth::Binding::Indexed(a_to_b),
        &mut packet,
        counter,
    )
    .unwrap();
    packet.into_inner()
}

/// Both daemons keyed: a transfer with trains arrives intact and riders are delivered.
/// Then, by hand from A: an unauthenticated packet, one sealed with another key, and
/// one sealed right but sent twice; only the first copy of the last is delivered. A
/// daemon without a key refuses an authenticated packet rather than ignore its tag.
#[test]
fn keyed_daemons_refuse_unauthenticated_wrong_key_and_replayed_packets() {
    use mgrp_core::auth::Key;
    use socket2::SockAddr;
    let _serial = serial();
    if !root_or_skip("keyed_daemons") {
        return;
    }
    let key = Key::from_bytes([0x5a; 32]);
    let file = TempFile::key(&key);
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, b) = daemons(&net, &["--key-file", &file.arg()]);
    transfer(&net, &a, 4 * MB, 5020, true);
    let sb = b.quiescent_stats().unwrap();
    assert!(sb.daemon.riders_delivered > 0, "{sb:#?}");
    assert_eq!(
        (
            sb.daemon.mgrp_bad_tag,
            sb.daemon.mgrp_unauthenticated,
            sb.daemon.mgrp_replayed
        ),
        (0, 0, 0),
        "{sb:#?}"
    );
    let before = sb.daemon;

    let sink = net
        .b
        .run(|| std::net::UdpSocket::bind("0.0.0.0:7777"))
        .unwrap()
        .unwrap();
    sink.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mgrp = mgrp_socket(&net.a);
    let to_b = SockAddr::from(SocketAddr::new(IpAddr::V4(ADDR_B), 0));
    let (peer, me) = ([10, 77, 0, 1], [10, 77, 0, 2]);
    let plain = continuation(0x7200_0000, &udp_rider(peer, me, 17, b"plain"));
    mgrp.send_to(&plain, &to_b).unwrap();
    let wrong = Key::from_bytes([0x11; 32]);
    let forged = sealed_continuation(
        &wrong,
        u64::MAX / 2,
        0x7200_0001,
        &udp_rider(peer, me, 17, b"forged"),
    );
    mgrp.send_to(&forged, &to_b).unwrap();
    let good = sealed_continuation(
        &key,
        u64::MAX / 2,
        0x7200_0002,
        &udp_rider(peer, me, 17, b"sealed"),
    );
    mgrp.send_to(&good, &to_b).unwrap();
    mgrp.send_to(&good, &to_b).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = sink.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(got, ["sealed"]);
    let s = b.quiescent_stats().unwrap().daemon;
    assert_eq!(
        s.mgrp_unauthenticated - before.mgrp_unauthenticated,
        1,
        "{s:#?}"
    );
    assert_eq!(s.mgrp_bad_tag - before.mgrp_bad_tag, 1, "{s:#?}");
    assert_eq!(s.mgrp_replayed - before.mgrp_replayed, 1, "{s:#?}");
    let log = b.process.log();
    assert!(log.contains("unauthenticated packet"), "{log}");

    // The reverse: B without a key gets an authenticated packet.
    drop((a, b));
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (_a, b) = daemons(&net, &[]);
    let mgrp = mgrp_socket(&net.a);
    mgrp.send_to(&good, &to_b).unwrap();
    let s = b.quiescent_stats().unwrap().daemon;
    assert_eq!(s.mgrp_unexpected_auth, 1, "{s:#?}");
    assert!(b.process.log().contains("no key is configured"));
}

/// `kill -9` leaves the policy rule behind; the next start removes it, says so, and
/// runs; SIGHUP does not stop it, and a clean stop then leaves no rule.
#[test]
fn a_restart_after_kill_9_succeeds() {
    let _serial = serial();
    if !root_or_skip("a_restart_after_kill_9_succeeds") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let route = format!("{ADDR_B}/32");
    let mut first = Daemon::start(&net.a, mgrpd(), &["--route", &route]).expect("mgrpd");
    assert!(net.a.ip(&["rule"]).unwrap().contains("lookup 4242"));
    mgrp_testbed::kill_pid(first.process.pid().unwrap());
    assert!(first.process.wait(Duration::from_secs(5)).is_some());
    assert!(
        net.a.ip(&["rule"]).unwrap().contains("lookup 4242"),
        "kill -9 leaves the rule behind"
    );
    let mut second = Daemon::start(&net.a, mgrpd(), &["--route", &route]).expect("restart");
    assert!(
        second.process.log().contains("stale rule"),
        "{}",
        second.process.log()
    );
    let api = second.api().unwrap();
    let report = api.send_train(five_to_b()).unwrap();
    assert_eq!(report.probes_sent, 5);
    // SIGHUP loads the keys again and the daemon runs on; SIGTERM is a clean exit:
    // the rule goes.
    second.process.signal(libc::SIGHUP);
    assert!(second.process.wait(Duration::from_millis(500)).is_none());
    assert!(
        second.process.log().contains("keys reloaded"),
        "{}",
        second.process.log()
    );
    second.process.signal(libc::SIGTERM);
    let status = second.process.wait(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(second.process.log().contains("SIGTERM"));
    assert!(!net.a.ip(&["rule"]).unwrap().contains("lookup 4242"));
}

/// SIGHUP puts the file's peers and routes in force without a restart, after mgrpd
/// became `--user nobody` keeping only CAP_NET_ADMIN on its main thread: a route
/// taken out of the file leaves table 4242 and trains to its peer are refused; put
/// back, it returns and trains run; a change only a restart can make changes nothing
/// and the log says why. The PID stays throughout.
#[test]
fn a_reload_adds_and_removes_peers_and_routes() {
    let _serial = serial();
    if !root_or_skip("a_reload_adds_and_removes_peers_and_routes") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let dir = mgrp_testbed::TempDir::new("mgrp-reload").unwrap();
    let file = dir.path().join("mgrpd.toml");
    let write = |routes: &[&str], extra: &str| {
        let routes: Vec<String> = routes.iter().map(|r| format!("\"{r}\"")).collect();
        let text = format!(
            "routes = [{}]\nhold-mode = \"always\"\n{extra}",
            routes.join(", ")
        );
        std::fs::write(&file, text).unwrap();
    };
    let (to_b, other) = (format!("{ADDR_B}/32"), "10.77.0.9/32");
    write(&[&to_b], "");
    let _b = Daemon::start(&net.b, mgrpd(), &["--route", &format!("{ADDR_A}/32")]).unwrap();
    let config = file.to_str().unwrap();
    let mut a = Daemon::start(&net.a, mgrpd(), &["--config", config, "--user", "nobody"])
        .expect("mgrpd on A");
    let pid = a.process.pid().unwrap();
    let table = || net.a.ip(&["route", "show", "table", "4242"]).unwrap();
    assert!(table().contains(&ADDR_B.to_string()), "{}", table());
    assert_eq!(five_sent(&a).unwrap(), 5);
    let hup = |a: &Daemon, what: &str| {
        let before = log_count(a, what);
        a.process.signal(libc::SIGHUP);
        wait_for_log(a, what, before + 1, Duration::from_secs(10));
    };

    // B's route and peer go; another comes.
    write(&[other], "");
    hup(&a, "SIGHUP: reloaded");
    let log = a.process.log();
    assert!(
        log.contains(&format!("peers added: {other}; removed: {to_b}")),
        "{log}"
    );
    assert!(table().contains("10.77.0.9"), "{}", table());
    assert!(!table().contains(&ADDR_B.to_string()), "{}", table());
    let refused = five_sent(&a).unwrap_err();
    assert!(refused.to_string().contains("is not a peer"), "{refused}");

    // Back again: trains to B run.
    write(&[&to_b, other], "");
    hup(&a, "SIGHUP: reloaded");
    assert!(table().contains(&ADDR_B.to_string()), "{}", table());
    assert_eq!(five_sent(&a).unwrap(), 5);

    // UDP needs the socket mgrpd opens at start: nothing changes.
    write(&[&to_b], "encap = \"udp\"\n");
    hup(&a, "SIGHUP: nothing changes");
    assert!(
        a.process.log().contains("no UDP socket"),
        "{}",
        a.process.log()
    );
    assert!(table().contains("10.77.0.9"), "{}", table());

    assert_eq!(a.process.pid(), Some(pid));
    let status = a.process.stop().expect("mgrpd stopped");
    assert!(
        status.success(),
        "exit status {status}: {}",
        a.process.log()
    );
    assert!(!net.a.ip(&["rule"]).unwrap().contains("lookup 4242"));
}

/// A mesh description served over HTTPS (the server's certificate checked against
/// `mesh-ca-file`, a token asked for) is fetched at start and again every
/// `mesh-refresh`, also after mgrpd became `--user nobody`: a member added there
/// becomes a peer with its route, a removed one is refused and its route goes, a
/// description the server spoils changes nothing and the log says why, and a refresh
/// that changes nothing says nothing. Keys are derived from the description's public
/// keys on both ends. The PID stays throughout.
#[test]
fn a_mesh_description_fetched_over_https_is_followed_as_it_changes() {
    use mgrp_core::pair::PrivateKey;
    use mgrp_testbed::tls::{Authority, DocumentServer, private_file};
    let _serial = serial();
    if !root_or_skip("a_mesh_description_fetched_over_https_is_followed_as_it_changes") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let dir = mgrp_testbed::TempDir::new("mgrp-mesh-https").unwrap();
    let keys: Vec<PrivateKey> = (0..3u8)
        .map(|i| PrivateKey::from_bytes([0x31 + i; 32]))
        .collect();
    let c_addr = "10.77.0.9";
    let members = [
        ("a", ADDR_A.to_string()),
        ("b", ADDR_B.to_string()),
        ("c", c_addr.to_string()),
    ];
    let description = |names: &[&str]| {
        let mut t = String::new();
        for (i, (name, addr)) in members.iter().enumerate() {
            t.push_str(&format!(
                "[[member]]\nname = \"{name}\"\naddress = \"{addr}\"\npublic-key = \"{}\"\n\n",
                keys[i].public()
            ));
        }
        let names: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        t.push_str(&format!(
            "[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [{}]\nmethods = [\"pathchirp\"]\n",
            names.join(", ")
        ));
        t
    };
    // The server runs in A's namespace, on its loopback.
    let authority = Authority::new(dir.path(), "mesh").unwrap();
    let (cert, key) = authority.server("mesh", "127.0.0.1").unwrap();
    let token = "mesh-token-0123456789";
    let listener = net
        .a
        .run(|| std::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap()
        .unwrap();
    let server = DocumentServer::start(
        listener,
        &cert,
        &key,
        "/mesh.toml",
        token,
        &description(&["a", "b"]),
    )
    .unwrap();
    // What A reads after it dropped its privileges belongs to the user it becomes.
    let token_file = private_file(dir.path(), "mesh.token", token).unwrap();
    let a_key = private_file(dir.path(), "a.key", &keys[0].to_hex()).unwrap();
    for f in [&token_file, &a_key, &authority.ca_file] {
        std::os::unix::fs::chown(f, Some(65534), Some(65534)).unwrap();
    }
    let b_mesh = private_file(dir.path(), "b-mesh.toml", &description(&["a", "b"])).unwrap();
    let b_key = private_file(dir.path(), "b.key", &keys[1].to_hex()).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let _b = Daemon::start(
        &net.b,
        mgrpd(),
        &[
            "--mesh",
            &path(&b_mesh),
            "--node",
            "b",
            "--private-key-file",
            &path(&b_key),
        ],
    )
    .expect("mgrpd on B");
    let url = format!("https://127.0.0.1:{}/mesh.toml", server.addr().port());
    let mut a = Daemon::start(
        &net.a,
        mgrpd(),
        &[
            "--mesh",
            &url,
            "--mesh-ca-file",
            &path(&authority.ca_file),
            "--mesh-token-file",
            &path(&token_file),
            "--mesh-refresh",
            "1s",
            "--node",
            "a",
            "--private-key-file",
            &path(&a_key),
            "--hold-mode",
            "always",
            "--user",
            "nobody",
        ],
    )
    .expect("mgrpd on A");
    let pid = a.process.pid().unwrap();
    let table = || net.a.ip(&["route", "show", "table", "4242"]).unwrap();
    assert!(table().contains(&ADDR_B.to_string()), "{}", table());
    assert_eq!(five_sent(&a).unwrap(), 5);
    let wait_for = |a: &Daemon, what: &str, n: usize| {
        wait_for_log(a, what, n, Duration::from_secs(15));
    };

    // C joins: its peer and route, without a signal.
    server.set(&description(&["a", "b", "c"]));
    wait_for(
        &a,
        &format!("mesh-refresh: reloaded: peers added: {c_addr}/32; removed: none"),
        1,
    );
    assert!(table().contains(c_addr), "{}", table());
    // Refreshes that find nothing new say nothing.
    let served = server.served();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while server.served() < served + 3 {
        assert!(std::time::Instant::now() < deadline, "no refresh came");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        log_count(&a, "mesh-refresh: reloaded"),
        1,
        "{}",
        a.process.log()
    );

    // B leaves: refused, its route gone.
    server.set(&description(&["a", "c"]));
    wait_for(&a, &format!("removed: {ADDR_B}/32"), 1);
    assert!(!table().contains(&ADDR_B.to_string()), "{}", table());
    let refused = five_sent(&a).unwrap_err();
    assert!(refused.to_string().contains("is not a peer"), "{refused}");

    // A spoilt description changes nothing, and says where it is spoilt.
    server.set("[[member]]\nname = \"a\"\n");
    wait_for(&a, "mesh-refresh: the configuration does not load", 1);
    assert!(a.process.log().contains("line "), "{}", a.process.log());
    assert!(table().contains(c_addr), "{}", table());

    // B back: trains to it run again.
    server.set(&description(&["a", "b"]));
    wait_for(&a, &format!("peers added: {ADDR_B}/32"), 1);
    assert!(table().contains(&ADDR_B.to_string()), "{}", table());
    assert!(!table().contains(c_addr), "{}", table());
    assert_eq!(five_sent(&a).unwrap(), 5);
    for line in a
        .process
        .log()
        .lines()
        .filter(|l| l.contains("mesh-refresh"))
    {
        eprintln!("{line}");
    }

    assert_eq!(a.process.pid(), Some(pid));
    let status = a.process.stop().expect("mgrpd stopped");
    assert!(
        status.success(),
        "exit status {status}: {}",
        a.process.log()
    );
}

/// mgrpd checks capabilities, not the user id: with only CAP_NET_ADMIN and
/// CAP_NET_RAW (every other capability out of the bounding set) it starts and sends a
/// train, warning about what it does without; with uid 0 but no CAP_NET_RAW it
/// refuses at once, naming what it lacks. (The user stays 0 here because this
/// machine's /dev/net/tun is mode 0600; on a system where it is 0666 an unprivileged
/// user with the same ambient capabilities works too.)
#[test]
fn capabilities_not_root() {
    let _serial = serial();
    if !root_or_skip("capabilities_not_root") {
        return;
    }
    let setpriv = setpriv();
    let me = mgrpd().display().to_string();
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let route = format!("{ADDR_B}/32");
    let only_net = [
        "--bounding-set=-all,+net_admin,+net_raw",
        "--inh-caps=-all,+net_admin,+net_raw",
        me.as_str(),
    ];
    let d = Daemon::start_via(&net.a, &setpriv, &only_net, &["--route", &route])
        .expect("mgrpd with only CAP_NET_ADMIN and CAP_NET_RAW");
    let api = d.api().unwrap();
    let report = api.send_train(five_to_b()).unwrap();
    assert_eq!(report.probes_sent, 5, "{}", d.process.log());
    assert!(
        d.process.log().contains("no CAP_SYS_NICE"),
        "{}",
        d.process.log()
    );
    drop(d);
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", net.a.name()])
        .arg(&setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(mgrpd())
        .args([
            "--route",
            &route,
            "--no-routes",
            "--socket",
            "/tmp/never-used.sock",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lacks") && err.contains("CAP_NET_RAW"),
        "{err}"
    );
}

/// The far daemon is killed in the middle of a transfer that rides in trains: its
/// kernel answers the next probes with "protocol unreachable", the near daemon stops
/// piggybacking to it, and the transfer completes intact with the counters balanced.
#[test]
fn killing_the_far_daemon_mid_transfer_does_not_sink_the_transfer() {
    let _serial = serial();
    if !root_or_skip("killing_the_far_daemon") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    // Every packet rides (the paper's mode), so the transfer is still running, in
    // the tunnel, when the far daemon dies.
    let (a, b) = daemons(&net, &["--hold-mode", "always"]);
    let pid = b.process.pid().unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        mgrp_testbed::kill_pid(pid);
    });
    transfer(&net, &a, 200 * MB, 5030, true);
    killer.join().unwrap();
    let s = a.quiescent_stats().unwrap();
    assert!(s.daemon.peer_unreachable > 0, "{s:#?}\n{}", a.process.log());
    assert!(s.daemon.riders_bypassed_peer_down > 0, "{s:#?}");
    assert!(a.process.log().contains("its mgrpd is gone"));
    check_conserved("A", &s);
    drop(b);
}

/// Over UDP, the far daemon killed: B's kernel answers A's datagrams with "port
/// unreachable", quoting what A sent, and A marks B down (its riders go unchanged for
/// a while, `peer_unreachable`) and runs on; B started again takes A's trains again.
/// (Trains run throughout; a probe sent into the error may fail, so their counts are
/// not checked here.)
#[test]
fn a_killed_udp_peer_is_marked_down_and_taken_back() {
    let _serial = serial();
    if !root_or_skip("a_killed_udp_peer_is_marked_down_and_taken_back") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let args = ["--encap", "udp", "--hold-mode", "always"];
    let (mut a, b) = daemons(&net, &args);
    let stop = Arc::new(AtomicBool::new(false));
    let trains = {
        let (api, stop) = (a.api().unwrap(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = api.send_train(uniform_train(
                    IpAddr::V4(ADDR_B),
                    20,
                    500,
                    Duration::from_millis(1),
                ));
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let s = wait_for(&b, |s| s.daemon.probes_received > 0);
    assert!(s.daemon.probes_received > 0, "B got no probe: {s:#?}");
    let tun = b.tun.clone();
    mgrp_testbed::kill_pid(b.process.pid().unwrap());
    let s = wait_for(&a, |s| s.daemon.peer_unreachable > 0);
    assert!(
        s.daemon.peer_unreachable > 0 && a.process.log().contains("its mgrpd is gone"),
        "A did not mark B down: {:#?}\n{}",
        s.daemon,
        a.process.log()
    );
    assert_eq!(
        a.process.wait(Duration::from_millis(200)),
        None,
        "A stopped: {}",
        a.process.log()
    );
    let mut again = vec!["--route".to_string(), format!("{ADDR_A}/32")];
    again.extend(
        ["--log-level", "debug"]
            .iter()
            .chain(&args)
            .map(ToString::to_string),
    );
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let b2 = Daemon::restart(&net.b, mgrpd(), &tun, &again).expect("mgrpd on B again");
    let s = wait_for(&b2, |s| s.daemon.probes_received > 0);
    stop.store(true, Ordering::Relaxed);
    trains.join().unwrap();
    assert!(
        s.daemon.probes_received > 0,
        "B, started again, got no probe from A: {s:#?}\n{}",
        a.process.log()
    );
    eprintln!(
        "A marked B down {} times; B again took {} probes",
        a.stats().unwrap().daemon.peer_unreachable,
        s.daemon.probes_received
    );
    drop(b);
}

/// The IPv4 reverse-path filter setting of interface `dev` in namespace `ns`.
fn rp_filter(ns: &mgrp_testbed::Netns, dev: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "cat"])
        .arg(format!("/proc/sys/net/ipv4/conf/{dev}/rp_filter"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Each thread of `pid` still running, main thread first: its id and its
/// `/proc/PID/task/TID/status`.
fn thread_status(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = entry
            .unwrap()
            .file_name()
            .to_string_lossy()
            .parse()
            .unwrap();
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) {
            out.push((tid, status));
        }
    }
    out.sort_by_key(|(tid, _)| (*tid != pid, *tid));
    out
}

/// The value of `name` (with its colon) in a thread's status.
fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .trim()
}

/// The effective and permitted capability masks of each thread of `pid`, main
/// thread first.
fn thread_capabilities(pid: u32) -> Vec<(u32, u64, u64)> {
    let mask = |status: &str, name: &str| u64::from_str_radix(field(status, name), 16).unwrap();
    thread_status(pid)
        .into_iter()
        .map(|(tid, s)| (tid, mask(&s, "CapEff:"), mask(&s, "CapPrm:")))
        .collect()
}

/// The capabilities the shipped unit grants (its CapabilityBoundingSet and
/// AmbientCapabilities, read from `mgrpd.service`, applied with setpriv as systemd
/// would) are enough for what its comments offer: `--user` and `--socket-group`
/// start, a train leaves, and the socket has that group.
#[test]
fn the_units_capabilities_are_enough_for_user_and_socket_group() {
    let _serial = serial();
    if !root_or_skip("the_units_capabilities_are_enough_for_user_and_socket_group") {
        return;
    }
    let setpriv = setpriv();
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/mgrpd.service")).unwrap();
    let caps = |key: &str| -> String {
        let line = unit
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("the unit has no {key}"));
        let names: Vec<String> = line
            .split_whitespace()
            .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
            .collect();
        format!("-all,{}", names.join(","))
    };
    let (bounding, ambient) = (caps("CapabilityBoundingSet="), caps("AmbientCapabilities="));
    let me = mgrpd().display().to_string();
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let route = format!("{ADDR_B}/32");
    let _b = Daemon::start(&net.b, mgrpd(), &["--route", &format!("{ADDR_A}/32")]).unwrap();
    let via = [
        format!("--bounding-set={bounding}"),
        format!("--inh-caps={ambient}"),
        format!("--ambient-caps={ambient}"),
        me,
    ];
    let via: Vec<&str> = via.iter().map(String::as_str).collect();
    let d = Daemon::start_via(
        &net.a,
        &setpriv,
        &via,
        &[
            "--route",
            &route,
            "--user",
            "nobody",
            "--socket-group",
            "nogroup",
        ],
    )
    .unwrap_or_else(|e| panic!("mgrpd under the unit's capabilities: {e:#}"));
    let report = d.api().unwrap().send_train(five_to_b()).unwrap();
    assert_eq!(report.probes_sent, 5, "{}", d.process.log());
    assert!(
        d.process.log().contains("running as user nobody"),
        "{}",
        d.process.log()
    );
    use std::os::unix::fs::MetadataExt as _;
    let gid = std::fs::metadata(&d.socket).unwrap().gid();
    assert_eq!(gid, 65534, "the socket's group");
}

/// Under `Type=notify` (NOTIFY_SOCKET in its environment) mgrpd says when it is
/// ready, keeps the watchdog fed at half `WATCHDOG_USEC`, says when it reloads and
/// is ready again, and when it stops.
#[test]
fn the_service_manager_is_told_ready_alive_reloading_and_stopping() {
    let _serial = serial();
    if !root_or_skip("the_service_manager_is_told_ready_alive_reloading_and_stopping") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let dir = mgrp_testbed::TempDir::new("mgrp-notify").unwrap();
    let path = dir.path().join("notify");
    let manager = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let next = || {
        let mut buf = [0u8; 256];
        let n = manager.recv(&mut buf).expect("a notification within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let socket = format!("NOTIFY_SOCKET={}", path.display());
    let me = mgrpd().display().to_string();
    let route = format!("{ADDR_B}/32");
    let mut a = Daemon::start_via(
        &net.a,
        std::path::Path::new("/usr/bin/env"),
        &[&socket, "WATCHDOG_USEC=200000", &me],
        &["--route", &route],
    )
    .expect("mgrpd");
    let ready = next();
    assert!(ready.starts_with("READY=1\nSTATUS=ready: tun"), "{ready}");
    // 100 ms apart: the next ones are keep-alives.
    for _ in 0..3 {
        assert_eq!(next(), "WATCHDOG=1");
    }
    a.process.signal(libc::SIGHUP);
    let mut seen = Vec::new();
    while !seen.iter().any(|m: &String| m.starts_with("READY=1")) {
        let m = next();
        if m != "WATCHDOG=1" {
            seen.push(m);
        }
    }
    assert_eq!(
        seen,
        [
            "RELOADING=1",
            "READY=1\nSTATUS=ready: configuration reloaded"
        ]
    );
    let status = a.process.stop().expect("mgrpd stopped");
    assert!(status.success(), "{}", a.process.log());
    let mut last = next();
    while last == "WATCHDOG=1" {
        last = next();
    }
    assert_eq!(last, "STOPPING=1");
}

/// Once set up, mgrpd runs as the user `--user` names, its data-path threads hold no
/// capability but CAP_IPC_LOCK (memory stays locked), its main thread only
/// CAP_NET_ADMIN besides, and that is enough: routes on demand come and go, riders
/// cross, and the rule is removed at exit.
#[test]
fn after_setup_only_what_is_needed_is_kept() {
    let _serial = serial();
    if !root_or_skip("after_setup_only_what_is_needed_is_kept") {
        return;
    }
    const NET_ADMIN: u64 = 1 << 12;
    const IPC_LOCK: u64 = 1 << 14;
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (mut a, _b) = daemons(&net, &["--user", "nobody", "--hold-mode", "on-demand"]);
    let pid = a.process.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65534"; 4],
        "{status}"
    );
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    let threads = thread_capabilities(pid);
    assert!(threads.len() >= 6, "{threads:?}");
    for (i, (tid, eff, prm)) in threads.iter().enumerate() {
        let allowed = if i == 0 {
            NET_ADMIN | IPC_LOCK
        } else {
            IPC_LOCK
        };
        assert_eq!(
            eff & !allowed,
            0,
            "thread {tid} keeps {eff:#x}: {threads:x?}"
        );
        assert_eq!(
            prm & !allowed,
            0,
            "thread {tid} may regain {prm:#x}: {threads:x?}"
        );
    }
    assert_eq!(
        threads[0].1 & NET_ADMIN,
        NET_ADMIN,
        "routes on demand need it"
    );
    // Routes on demand leave the way back elsewhere between trains: loose filtering.
    assert_eq!(rp_filter(&net.a, &a.tun), "2", "{}", a.process.log());
    assert!(
        a.process.log().contains("running as user nobody"),
        "{}",
        a.process.log()
    );
    assert!(
        a.process.log().contains("pacer runs SCHED_FIFO"),
        "{}",
        a.process.log()
    );
    // Routes on demand are installed while trains run, so riders ride.
    transfer(&net, &a, 2 * MB, 5301, true);
    let s = a.quiescent_stats().unwrap();
    assert!(s.planner.riders_piggybacked > 0, "{s:#?}");
    check_conserved("A", &s);
    let status = a.process.stop().expect("mgrpd stopped");
    assert!(
        status.success(),
        "exit status {status}: {}",
        a.process.log()
    );
    assert!(
        !net.a.ip(&["rule"]).unwrap().contains("lookup 4242"),
        "rule left behind: {}",
        a.process.log()
    );
}

/// Each thread of `pid`: its name and the CPUs it may run on.
fn thread_cpus(pid: u32) -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    for (_, status) in thread_status(pid) {
        let mut cpus = Vec::new();
        for part in field(&status, "Cpus_allowed_list:").split(',') {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            cpus.extend(lo.parse::<usize>().unwrap()..=hi.parse::<usize>().unwrap());
        }
        out.push((field(&status, "Name:").to_owned(), cpus));
    }
    out
}

/// A real-time pacer spins through a fast stream's gaps; by default the daemon keeps
/// the last CPU it may use for the pacer and runs every other thread elsewhere, so
/// that none of them (the TUN reader above all) waits out a train behind it. With
/// `--pacer-cpu none` nothing is pinned.
#[test]
fn the_pacer_has_a_cpu_to_itself() {
    let _serial = serial();
    if !root_or_skip("the_pacer_has_a_cpu_to_itself") {
        return;
    }
    let ours = thread_cpus(std::process::id())
        .into_iter()
        .next()
        .map(|(_, cpus)| cpus)
        .unwrap();
    assert!(
        ours.len() >= 2,
        "this test needs two CPUs or more; it may run on {ours:?}"
    );
    let kept = *ours.last().unwrap();
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, _b) = daemons(&net, &[]);
    let threads = thread_cpus(a.process.pid().unwrap());
    let names: Vec<_> = threads.iter().map(|(n, _)| n.as_str()).collect();
    for name in ["mgrp-pacer", "mgrp-tun", "mgrp-rx4", "mgrp-dispatch"] {
        assert!(names.contains(&name), "no {name} thread: {threads:?}");
    }
    for (name, cpus) in &threads {
        if name == "mgrp-pacer" {
            assert_eq!(cpus, &[kept], "{threads:?}");
        } else {
            let others: Vec<_> = ours.iter().copied().filter(|&c| c != kept).collect();
            assert_eq!(cpus, &others, "{name}: {threads:?}");
        }
    }
    assert!(
        a.process
            .log()
            .contains(&format!("CPU {kept} kept for the pacer")),
        "{}",
        a.process.log()
    );
    drop((a, _b));
    let (a, _b) = daemons(&net, &["--pacer-cpu", "none"]);
    for (name, cpus) in thread_cpus(a.process.pid().unwrap()) {
        assert_eq!(cpus, ours, "{name}");
    }
}

/// Daemons on A and B with permanent routes to each other's `a_to`/`b_to` and
/// on-demand hold: every packet enters the tunnel, and with no train it goes on
/// unchanged, as the super-packet the sender's stack made.
fn permanent_route_daemons(net: &TwoHosts, a_to: &str, b_to: &str) -> (Daemon, Daemon) {
    let common = ["--hold-mode", "on-demand", "--route-on-demand", "false"];
    let a = Daemon::start(&net.a, mgrpd(), &[&["--route", a_to][..], &common].concat())
        .expect("mgrpd on A");
    let b = Daemon::start(&net.b, mgrpd(), &[&["--route", b_to][..], &common].concat())
        .expect("mgrpd on B");
    (a, b)
}

/// 200 MB through permanent routes, in IPv4 and IPv6: the unchanged traffic leaves as
/// whole super-packets, the receiving kernel checks every segment's checksum (a bad
/// one is dropped and resent, so it would show as lost time, never as bad bytes), and
/// the bytes arrive exactly as sent.
#[test]
fn super_packets_through_permanent_routes_arrive_intact() {
    let _serial = serial();
    if !root_or_skip("super_packets_through_permanent_routes") {
        return;
    }
    use mgrp_testbed::{ADDR6_A, ADDR6_B};
    for (to_b, to_a, dst, port) in [
        (
            format!("{ADDR_B}/32"),
            format!("{ADDR_A}/32"),
            IpAddr::V4(ADDR_B),
            5040,
        ),
        (
            format!("{ADDR6_B}/128"),
            format!("{ADDR6_A}/128"),
            IpAddr::V6(ADDR6_B),
            5041,
        ),
    ] {
        let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
        let (a, b) = permanent_route_daemons(&net, &to_b, &to_a);
        let listener = tcp_listen(&net.b, dst, port).expect("listen on B");
        let t = tcp_transfer(&net.a, listener, dst, port, 200 * MB).expect("transfer");
        assert_eq!(t.received, 200 * MB, "{dst}: bytes lost");
        assert!(t.intact, "{dst}: bytes corrupted");
        let sa = a.quiescent_stats().unwrap();
        let sb = b.quiescent_stats().unwrap();
        eprintln!(
            "{dst}: {:.0} Mbit/s, {} super-packets for {} segments",
            t.mbps(),
            sa.daemon.super_packets_sent,
            sa.daemon.riders_sent_direct
        );
        assert!(
            sa.daemon.super_packets_sent > 0,
            "{dst}: nothing left as a super-packet: {sa:#?}"
        );
        assert!(
            sa.daemon.riders_sent_direct > sa.daemon.super_packets_sent,
            "{dst}: super-packets count as their segments: {sa:#?}"
        );
        assert_eq!(sa.daemon.link_send_errors, 0, "{sa:#?}");
        check_conserved("A", &sa);
        check_conserved("B", &sb);
    }
}

/// Trains and super-packets in one transfer: while a train is queued or in flight the
/// packets wait and ride, in between they leave whole; the bytes arrive exactly as
/// sent and both sides' counters balance.
#[test]
fn riders_and_super_packets_mix_in_one_transfer() {
    let _serial = serial();
    if !root_or_skip("riders_and_super_packets_mix") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let (a, b) = permanent_route_daemons(&net, &format!("{ADDR_B}/32"), &format!("{ADDR_A}/32"));
    let trains = transfer(&net, &a, 200 * MB, 5042, true);
    assert!(trains > 0);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    assert!(sa.daemon.super_packets_sent > 0, "{sa:#?}");
    assert!(sa.planner.riders_piggybacked > 0, "nothing rode: {sa:#?}");
    assert!(sb.daemon.riders_delivered > 0, "{sb:#?}");
    check_conserved("A", &sa);
    check_conserved("B", &sb);
}

/// mgrpd across the paper's testbed: the source's packets ride in trains from m3 to
/// m5 through the routers and the 10 Mbit/s bottleneck, and arrive; the link after
/// the bottleneck carried every probe and every rider byte m5 delivered.
#[test]
fn trains_cross_the_paper_testbed() {
    let _serial = serial();
    if !root_or_skip("trains_cross_the_paper_testbed") {
        return;
    }
    use mgrp_testbed::paper::{Bottleneck, M3, M5, Testbed};
    let tb = Testbed::new(Bottleneck::default()).expect("testbed");
    let always = ["--hold-mode", "always"];
    let a = Daemon::start(
        &tb.m3,
        mgrpd(),
        &[&["--route", &format!("{M5}/32")][..], &always].concat(),
    )
    .expect("mgrpd on m3");
    let b = Daemon::start(
        &tb.m5,
        mgrpd(),
        &[&["--route", &format!("{M3}/32")][..], &always].concat(),
    )
    .expect("mgrpd on m5");
    let source = mgrp_testbed::traffic::tcp_source(&tb.m3, &tb.m5, IpAddr::V4(M5), 7200, Some(4.0))
        .expect("4 Mbit/s source");
    let account = tb.account().expect("accounting on x2");
    let api = a.api().unwrap();
    for _ in 0..20 {
        let r = api
            .send_train(uniform_train(
                IpAddr::V4(M5),
                20,
                500,
                Duration::from_millis(1),
            ))
            .unwrap();
        assert_eq!(r.probes_sent, 20);
        std::thread::sleep(Duration::from_millis(20));
    }
    let mbps = source.mbps();
    drop(source);
    let sa = a.quiescent_stats().unwrap();
    let sb = b.quiescent_stats().unwrap();
    let link = account.stop().expect("accounting ran").total(0, usize::MAX);
    eprintln!(
        "source {mbps:.2} Mbit/s; the bottleneck carried {} MGRP packets, {} rider bytes",
        link.mgrp_frames, link.rider_bytes
    );
    assert!(mbps > 2.0, "the source could not send: {mbps:.2} Mbit/s");
    assert!(sa.planner.riders_piggybacked > 0, "nothing rode: {sa:#?}");
    assert_eq!(sb.daemon.probes_received, 400, "{sb:#?}");
    assert!(sb.daemon.riders_delivered > 0, "{sb:#?}");
    // Every probe crossed the link, and m5 delivered no rider bytes the link did not
    // carry.
    assert!(link.mgrp_frames >= 400, "{link:?}");
    assert!(
        link.rider_bytes >= sb.daemon.rider_bytes_delivered,
        "{link:?} {sb:#?}"
    );
    check_conserved("m3", &sa);
    check_conserved("m5", &sb);
}

/// One sender, two receivers on a star: trains to the two run at the same time from
/// one mgrpd (their sends overlap), both complete, every probe arrives, the gaps read
/// off the departure stamps are near the ones asked for, every probe has a kernel
/// stamp, and the displaced probes the reports count are the daemon's.
#[test]
fn trains_to_two_destinations_run_at_once() {
    let _serial = serial();
    if !root_or_skip("trains_to_two_destinations_run_at_once") {
        return;
    }
    let star = Star::new(&[None, None, None]).expect("topology");
    let daemons = star.daemons(mgrpd(), &[], &[]).expect("mgrpd");
    let (r1, r2) = (IpAddr::V4(star.addrs[1]), IpAddr::V4(star.addrs[2]));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sockets: Vec<_> = daemons.iter().map(|d| d.socket.clone()).collect();
    const N: usize = 200;
    let gaps = [Duration::from_micros(1000), Duration::from_micros(700)];
    let (reports, received) = rt.block_on(async move {
        let mut streams = Vec::new();
        for sock in &sockets[1..] {
            let rx = mgrp_client::Client::connect(sock).await.unwrap();
            streams.push((rx.listen(7001).await.unwrap(), rx));
        }
        let mut sends = Vec::new();
        for (to, gap) in [(r1, gaps[0]), (r2, gaps[1])] {
            let sock = sockets[0].clone();
            sends.push(tokio::spawn(async move {
                let tx = mgrp_client::Client::connect(&sock).await.unwrap();
                let train = mgrp_client::Train::uniform(to, N as u32, 500, gap).ports(7000, 7001);
                tx.send_train(train).await.unwrap()
            }));
        }
        let mut reports = Vec::new();
        for s in sends {
            reports.push(s.await.unwrap());
        }
        let mut received = Vec::new();
        for (stream, _rx) in &mut streams {
            let mut mine = 0usize;
            while let Some(_p) = stream
                .next_probe_timeout(Duration::from_millis(500))
                .await
                .unwrap()
            {
                mine += 1;
            }
            received.push(mine);
        }
        (reports, received)
    });
    assert_eq!(received, [N, N], "every probe arrives on lossless links");
    let span = |r: &mgrp_core::stats::TransactionReport| {
        let t: Vec<i64> = r
            .departure_times()
            .map(|(_, t)| t.as_nanos() as i64)
            .collect();
        (t[0], t[t.len() - 1], t)
    };
    let (first0, last0, t0) = span(&reports[0]);
    let (first1, last1, t1) = span(&reports[1]);
    assert!(
        first0 < last1 && first1 < last0,
        "the two trains ran one after the other: {first0}..{last0} and {first1}..{last1}"
    );
    for ((r, t), gap) in reports.iter().zip([&t0, &t1]).zip(gaps) {
        assert_eq!(r.probes_sent as usize, N, "{r:#?}");
        assert_eq!(
            r.departure_clock,
            mgrp_core::stats::DepartureClock::KernelQueue,
            "every probe has its kernel stamp"
        );
        let mut g: Vec<i64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        g.sort_unstable();
        let median = g[g.len() / 2] as f64;
        let asked = gap.as_nanos() as f64;
        // A wide band: the pacing bench measures how close; here only that each train
        // kept its own gaps rather than the other's or none.
        assert!(
            (0.8 * asked..1.25 * asked).contains(&median),
            "median gap {median} ns for {asked} ns asked"
        );
    }
    let s = daemons[0].quiescent_stats().unwrap();
    assert_eq!(
        s.daemon.probes_displaced,
        reports
            .iter()
            .map(|r| u64::from(r.probes_displaced))
            .sum::<u64>(),
        "{s:#?}"
    );
    assert_eq!(s.daemon.probes_sent, 2 * N as u64);
}

/// The unit's `SystemCallFilter` allows every system call mgrpd makes under its
/// other settings, traced with strace from its start to its clean stop: trains with
/// riders, a TCP flow through the tunnel, its metrics (the clock read with adjtimex),
/// becoming `nobody`, giving its socket to a group, SIGHUP.
#[test]
fn the_units_system_call_filter_allows_every_call_mgrpd_makes() {
    let _serial = serial();
    if !root_or_skip("the_units_system_call_filter_allows_every_call_mgrpd_makes") {
        return;
    }
    let strace = mgrp_testbed::packages::find("strace").unwrap_or_else(|| {
        panic!(
            "{}",
            mgrp_testbed::packages::require(&["strace"]).unwrap_err()
        )
    });
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/mgrpd.service")).unwrap();
    let spec = mgrp_testbed::sandbox::system_call_filter(&unit).unwrap();
    let allowed = mgrp_testbed::sandbox::allowed_system_calls(&spec).unwrap();
    // The unit's capabilities and no-new-privileges; its address families are
    // another test's (they need a test binary that installs their filter).
    let sandbox = mgrp_testbed::sandbox::Sandbox {
        families: Vec::new(),
        ..mgrp_testbed::sandbox::Sandbox::from_unit(&unit, &[]).unwrap()
    };
    let me = mgrpd().display().to_string();
    let dir = mgrp_testbed::TempDir::new("mgrpd-strace").unwrap();
    let trace = dir.path().join("trace");
    let (setpriv, via) = sandbox.command(mgrpd(), None, None, &[], mgrpd(), &[]);
    let mut prefix: Vec<String> = vec![
        "-f".into(),
        "-qq".into(),
        // Whole strings: the exec of the program is found by its arguments.
        "-s4096".into(),
        "-o".into(),
        trace.display().to_string(),
        "--".into(),
        setpriv.display().to_string(),
    ];
    prefix.extend(via);
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let _b = Daemon::start(&net.b, mgrpd(), &["--route", &format!("{ADDR_A}/32")]).unwrap();
    let mut a = Daemon::start_via(
        &net.a,
        &strace,
        &prefix,
        &[
            "--route",
            &format!("{ADDR_B}/32"),
            "--metrics",
            "127.0.0.1:9577",
            "--user",
            "nobody",
            "--socket-group",
            "nogroup",
        ],
    )
    .unwrap_or_else(|e| panic!("mgrpd under strace: {e:#}"));
    transfer(&net, &a, MB, 5031, true);
    let text = net
        .a
        .run(|| {
            let mut s = std::net::TcpStream::connect("127.0.0.1:9577").unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap();
            let mut t = String::new();
            s.read_to_string(&mut t).unwrap();
            t
        })
        .unwrap();
    assert!(text.contains("mgrpd_clock_maxerror_seconds "), "{text}");
    // Signals go to mgrpd, strace's child (strace itself would detach and end).
    let strace_pid = a.process.pid().expect("strace's pid");
    let children =
        std::fs::read_to_string(format!("/proc/{strace_pid}/task/{strace_pid}/children")).unwrap();
    let mgrpd_pid: libc::pid_t = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("strace has no child: {children:?}"));
    // SAFETY: signalling the process this test started (strace's child).
    unsafe { libc::kill(mgrpd_pid, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: as above.
    unsafe { libc::kill(mgrpd_pid, libc::SIGTERM) };
    let status = a
        .process
        .wait(Duration::from_secs(20))
        .expect("mgrpd stopped within 20 s");
    assert!(status.success(), "{}", a.process.log());
    let log = std::fs::read_to_string(&trace).unwrap();
    let made =
        mgrp_testbed::sandbox::system_calls_after_exec(&log, &format!("execve(\"{me}\"")).unwrap();
    assert!(made.len() > 20, "too few calls traced: {made:?}");
    let refused: Vec<&String> = made.iter().filter(|c| !allowed.contains(*c)).collect();
    assert!(
        refused.is_empty(),
        "the unit's SystemCallFilter ({spec:?}) refuses what mgrpd calls: {refused:?}"
    );
    eprintln!(
        "    {} system calls made, all allowed: {made:?}",
        made.len()
    );
}
