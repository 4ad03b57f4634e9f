//! Soak bench: keyed daemons on A and B carry pk2-like trains and back-to-back TCP
//! transfers A→B for a while, while a third host C, on its own link to B, floods B
//! with MGRP garbage from itself, and with packets that claim to come from A:
//! unauthenticated, sealed with a wrong key, and sealed right but replayed. Reports
//! B's resident memory at start and end, whether a daemon died, both conservation
//! identities, whether every transfer arrived byte-exact, and what B refused.
//!
//! Needs root. `cargo bench -p mgrpd --bench soak -- [SECONDS] [FLOOD_PPS]`
//! (defaults 600 s and 5000 packets/s). Not run in CI.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mgrp_core::auth::{Binding, Direction, Key, TRAILER_LEN, seal};
use mgrp_core::wire::Packet;
use mgrp_testbed::forge;
use mgrp_testbed::{
    ADDR_A, ADDR_B, Netns, TwoHostOptions, TwoHosts, sh, tcp_listen, tcp_transfer, uniform_train,
    unique,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

fn mgrpd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mgrpd"))
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A continuation carrying a UDP rider from A to B, with a trailer of `trailer_len`.
fn continuation(rider_id: u32, trailer_len: u16) -> Vec<u8> {
    let rider = forge::udp_packet(ADDR_A, ADDR_B, 17, 9, &[0; 64]);
    forge::continuation(rider_id, &rider, trailer_len)
}

/// splitmix64, for garbage.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Floods B from C at `pps` until `stop`: garbage from C itself, and, with A's
/// address as source, unauthenticated, wrong-key and replayed packets.
fn flood(c: &Netns, key: &Key, pps: u64, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let mgrp = c
        .run(|| Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(253))))
        .unwrap()
        .unwrap();
    let raw = c
        .run(|| Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255))))
        .unwrap()
        .unwrap();
    let key = key.clone();
    std::thread::spawn(move || {
        let to_b = SockAddr::from(SocketAddr::new(IpAddr::V4(ADDR_B), 0));
        let wrong = Key::from_bytes([0x33; 32]);
        // As A seals for B.
        let a_to_b = Binding::Indexed(Direction {
            from: IpAddr::V4(ADDR_A),
            to: IpAddr::V4(ADDR_B),
        });
        let mut rng = 7u64;
        let gap = Duration::from_secs_f64(1.0 / pps as f64);
        let t0 = Instant::now();
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let due = t0 + gap * u32::try_from(sent).unwrap_or(u32::MAX);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let id = next(&mut rng) as u32;
            let _ = match sent % 4 {
                0 => {
                    let len = 28 + (next(&mut rng) % 1400) as usize;
                    let junk: Vec<u8> = (0..len).map(|_| next(&mut rng) as u8).collect();
                    mgrp.send_to(&junk, &to_b)
                }
                1 => raw.send_to(
                    &forge::ipv4_packet(ADDR_A, ADDR_B, 253, &continuation(id, 0)),
                    &to_b,
                ),
                2 => {
                    let mut p = Packet::new_checked(continuation(id, TRAILER_LEN)).unwrap();
                    seal(&wrong, a_to_b, &mut p, next(&mut rng)).unwrap();
                    raw.send_to(
                        &forge::ipv4_packet(ADDR_A, ADDR_B, 253, p.as_bytes()),
                        &to_b,
                    )
                }
                _ => {
                    // Sealed right, but with a counter long past: a replay.
                    let mut p = Packet::new_checked(continuation(id, TRAILER_LEN)).unwrap();
                    seal(&key, a_to_b, &mut p, 1 + sent % 1000).unwrap();
                    raw.send_to(
                        &forge::ipv4_packet(ADDR_A, ADDR_B, 253, p.as_bytes()),
                        &to_b,
                    )
                }
            };
            sent += 1;
        }
        sent
    })
}

/// The bench's options.
#[derive(Debug, clap::Parser)]
struct Opts {
    /// How long to soak, seconds.
    #[arg(default_value_t = 600)]
    seconds: u64,
    /// Packets a second C floods B with.
    #[arg(default_value_t = 5000)]
    flood_pps: u64,
    #[command(flatten)]
    cargo: mgrp_testbed::harness::CargoBench,
}

fn main() {
    if !mgrp_testbed::is_root() {
        eprintln!("soak: needs root to create network namespaces");
        std::process::exit(1);
    }
    let o = <Opts as clap::Parser>::parse();
    let (seconds, pps) = (o.seconds, o.flood_pps);

    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    // C, a stranger on its own link to B.
    let c = Netns::new("mgc").expect("namespace C");
    let (vc, vbc) = (unique("vc"), unique("vbc"));
    sh(&[
        "ip",
        "link",
        "add",
        &vc,
        "netns",
        c.name(),
        "type",
        "veth",
        "peer",
        "name",
        &vbc,
        "netns",
        net.b.name(),
    ])
    .expect("veth C-B");
    c.ip(&["addr", "add", "10.78.0.3/24", "dev", &vc]).unwrap();
    net.b
        .ip(&["addr", "add", "10.78.0.2/24", "dev", &vbc])
        .unwrap();
    c.ip(&["link", "set", &vc, "up"]).unwrap();
    net.b.ip(&["link", "set", &vbc, "up"]).unwrap();
    c.ip(&["route", "add", "10.77.0.0/24", "via", "10.78.0.2"])
        .unwrap();
    // Let packets that claim A's address through B's kernel to mgrpd: the worst case.
    for conf in ["all", &vbc] {
        let _ = net.b.exec(&[
            "sysctl",
            "-qw",
            &format!("net.ipv4.conf.{conf}.rp_filter=0"),
        ]);
    }

    let key = Key::from_bytes([0x5c; 32]);
    let key_path = std::env::temp_dir().join(format!("{}.key", unique("soak")));
    std::fs::write(&key_path, key.to_hex()).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let key_arg = key_path.display().to_string();
    let (a, mut b) = mgrp_testbed::daemon_pair(
        &net,
        mgrpd(),
        &[],
        &["--log-level", "warn", "--key-file", &key_arg],
    )
    .expect("mgrpd on A and B");
    let b_pid = b.process.pid().expect("B's pid");
    std::thread::sleep(Duration::from_secs(1));
    let rss_start = rss_kib(b_pid);

    let stop = Arc::new(AtomicBool::new(false));
    let trains = {
        let api = a.api().unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = uniform_train(IpAddr::V4(ADDR_B), 20, 500, Duration::from_millis(1));
                if api.send_train(t).is_ok() {
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            n
        })
    };
    let flooder = flood(&c, &key, pps, stop.clone());
    let transferred = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut transfers = 0u32;
    let mut all_intact = true;
    let mut port = 6000u16;
    let mut peak_rss = rss_start;
    while started.elapsed() < Duration::from_secs(seconds) {
        let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), port).expect("listen");
        match tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), port, 100 << 20) {
            Ok(t) => {
                all_intact &= t.intact && t.received == 100 << 20;
                transferred.fetch_add(t.received, Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("transfer {transfers} failed: {e:#}");
                all_intact = false;
            }
        }
        transfers += 1;
        port = port.wrapping_add(1).max(6000);
        peak_rss = peak_rss.max(rss_kib(b_pid));
        // Transfers in bursts, so that trains also run with little traffic.
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::Relaxed);
    let n_trains = trains.join().unwrap();
    let flooded = flooder.join().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let rss_end = rss_kib(b_pid);
    let a_alive = a.api().is_ok();
    let b_alive = b.process.wait(Duration::ZERO).is_none();
    let sa = a.quiescent_stats().expect("A's counters");
    let sb = b.quiescent_stats().expect("B's counters");
    let _ = std::fs::remove_file(&key_path);

    println!("soak of {seconds} s, load {}", mgrp_testbed::host::load());
    println!(
        "trains from A: {n_trains}; transfers: {transfers} of 100 MiB, {} bytes, all byte-exact: {all_intact}",
        transferred.load(Ordering::Relaxed)
    );
    println!(
        "flood from C: {flooded} packets at {pps}/s (garbage, unauthenticated, wrong key, replayed, in turn)"
    );
    println!("B resident memory: start {rss_start} KiB, peak {peak_rss} KiB, end {rss_end} KiB");
    println!("daemons alive at the end: A {a_alive}, B {b_alive}");
    let balance = |s: &mgrp_core::api::DaemonStats| match (s.conserved(), s.receive_conserved()) {
        (true, true) => "balances (sending and receiving)",
        (false, _) => "DOES NOT balance (sending)",
        (true, false) => "DOES NOT balance (receiving)",
    };
    println!("conservation: A {}, B {}", balance(&sa), balance(&sb));
    let d = sb.daemon;
    println!(
        "B refused: not peer {}, unauthenticated {}, bad tag {}, replayed {}, malformed {}; riders delivered {}, riders refused {}",
        d.mgrp_not_peer,
        d.mgrp_unauthenticated,
        d.mgrp_bad_tag,
        d.mgrp_replayed,
        d.mgrp_malformed,
        d.riders_delivered,
        d.riders_refused_foreign_source
            + d.riders_refused_foreign_destination
            + d.riders_refused_inner_mgrp
            + d.riders_refused_special_destination
            + d.riders_refused_malformed
    );
    println!("B reassembly: {:?}", sb.reassembly);
    drop(c);
}
