//! Relays: a peer's next-hop device sends what policy routing puts into it to that
//! peer, which relays it on when the sender is a member allowed to (its `relay-to`)
//! and refuses it otherwise. Real namespaces, veths, TUNs and daemons; they need root
//! (CI runs as root) and say so and pass vacuously without it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mgrp_testbed::{Daemon, Netns, tcp_listen, tcp_transfer, veth_pair};

mod common;

use common::{TempFile, mgrpd, root_or_skip, serial, trains_every};

const A_R: Ipv4Addr = Ipv4Addr::new(10, 81, 1, 2);
const R_A: Ipv4Addr = Ipv4Addr::new(10, 81, 1, 1);
const R_B: Ipv4Addr = Ipv4Addr::new(10, 81, 2, 1);
const B_R: Ipv4Addr = Ipv4Addr::new(10, 81, 2, 2);
const A_B: Ipv4Addr = Ipv4Addr::new(10, 81, 3, 1);
const B_A: Ipv4Addr = Ipv4Addr::new(10, 81, 3, 2);
const C_R: Ipv4Addr = Ipv4Addr::new(10, 81, 4, 2);
const R_C: Ipv4Addr = Ipv4Addr::new(10, 81, 4, 1);
/// The network behind B that A reaches, directly or through R.
const B_LAN: &str = "10.81.9.0/24";
const B_HOST: Ipv4Addr = Ipv4Addr::new(10, 81, 9, 1);
/// A network A sends to through R only (no host holds it).
const THROUGH_R: &str = "10.81.8.0/24";
const THROUGH_R_HOST: Ipv4Addr = Ipv4Addr::new(10, 81, 8, 1);

/// Starts mgrpd in `ns` with the configuration `file`.
fn start(ns: &Netns, file: &TempFile, who: &str) -> Daemon {
    Daemon::start(
        ns,
        mgrpd(),
        &["--config", &file.arg(), "--log-level", "debug"],
    )
    .unwrap_or_else(|e| panic!("mgrpd on {who}: {e}"))
}

/// Routes `prefix` in `ns` into its next-hop device `device`, from `src`.
fn route_into(ns: &Netns, verb: &str, prefix: &str, device: &str, src: Ipv4Addr) {
    ns.ip(&[
        "route",
        verb,
        prefix,
        "dev",
        device,
        "src",
        &src.to_string(),
    ])
    .unwrap();
}

/// A, R, B and C: A reaches B directly and through R; C, a peer of R's that is no
/// member, reaches only R. B holds the network `B_LAN`. Every MGRP path is UDP.
struct RelayNet {
    a: Netns,
    r: Netns,
    b: Netns,
    c: Netns,
}

impl RelayNet {
    fn new() -> Self {
        let (a, r, b, c) = (
            Netns::new("rla").unwrap(),
            Netns::new("rlr").unwrap(),
            Netns::new("rlb").unwrap(),
            Netns::new("rlc").unwrap(),
        );
        let up = |ns: &Netns, dev: &str, addr: Ipv4Addr| {
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev])
                .unwrap();
            ns.ip(&["link", "set", dev, "up"]).unwrap();
        };
        for (x, y, ax, ay) in [
            (&a, &r, A_R, R_A),
            (&r, &b, R_B, B_R),
            (&a, &b, A_B, B_A),
            (&c, &r, C_R, R_C),
        ] {
            let (dx, dy) = veth_pair(x, y).unwrap();
            up(x, &dx, ax);
            up(y, &dy, ay);
        }
        // B's network: one host of it, on B's loopback (no dummy devices needed).
        b.ip(&["addr", "add", &format!("{B_HOST}/32"), "dev", "lo"])
            .unwrap();
        b.ip(&["link", "set", "lo", "up"]).unwrap();
        // B answers A (and C) the plain way, directly.
        b.ip(&["route", "add", "10.81.1.0/24", "via", &A_B.to_string()])
            .unwrap();
        r.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]).unwrap();
        Self { a, r, b, c }
    }
}

fn connect(ns: &Netns, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    ns.run(|| TcpStream::connect_timeout(&SocketAddr::new(IpAddr::V4(B_HOST), port), timeout))
        .unwrap()
}

/// Traffic that A routes into its device for R crosses R (riding A's trains to R or
/// wrapped in continuations) and arrives at B byte for byte; the same through A's
/// device for B goes straight there. C, a peer of R's without `relay-to`, gets
/// nothing through: R refuses its riders as bound elsewhere.
#[test]
fn a_member_relays_and_no_one_else_does() {
    let _serial = serial();
    if !root_or_skip("a_member_relays_and_no_one_else_does") {
        return;
    }
    let net = RelayNet::new();
    // Relaying and speaking for other addresses take a key.
    let key_file = TempFile::key(&mgrp_core::auth::Key::from_bytes([0x7e; 32]));
    let key = format!("key-file = \"{}\"\n", key_file.arg());
    let ca = TempFile::config(&format!(
        "{key}encap = \"udp\"\n\
         [[peers]]\nprefix = \"{R_A}/32\"\ndevice = \"mgrp-r\"\n\
         [[peers]]\nprefix = \"{B_A}/32\"\ndevice = \"mgrp-b\"\n"
    ));
    let cr = TempFile::config(&format!(
        "{key}encap = \"udp\"\n\
         [[peers]]\nprefix = \"{A_R}/32\"\nrelay-to = [\"{B_LAN}\"]\n\
         [[peers]]\nprefix = \"{B_R}/32\"\ndevice = \"mgrp-b\"\n\
         [[peers]]\nprefix = \"{C_R}/32\"\n"
    ));
    let cb = TempFile::config(&format!(
        "{key}encap = \"udp\"\nlocal-prefixes = [\"{B_LAN}\"]\n\
         [[peers]]\nprefix = \"{R_B}/32\"\nallowed-sources = [\"{A_R}/32\", \"{C_R}/32\"]\n\
         [[peers]]\nprefix = \"{A_B}/32\"\nallowed-sources = [\"{A_R}/32\"]\n"
    ));
    let cc = TempFile::config(&format!(
        "{key}encap = \"udp\"\n[[peers]]\nprefix = \"{R_C}/32\"\ndevice = \"mgrp-r\"\n"
    ));
    let b = start(&net.b, &cb, "B");
    let r = start(&net.r, &cr, "R");
    let a = start(&net.a, &ca, "A");
    let _c = start(&net.c, &cc, "C");
    // What the overlay's route control would install: B's network through R, from
    // A's address R knows. R sends it on through its own device for B.
    net.r.ip(&["route", "add", B_LAN, "dev", "mgrp-b"]).unwrap();
    route_into(&net.a, "add", B_LAN, "mgrp-r", A_R);

    let bytes = 8 << 20;
    let listener = tcp_listen(&net.b, IpAddr::V4(B_HOST), 5401).expect("listen");
    let stop = Arc::new(AtomicBool::new(false));
    let trains = trains_every(&a, IpAddr::V4(R_A), stop.clone(), Duration::from_millis(20));
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(B_HOST), 5401, bytes);
    stop.store(true, Ordering::Relaxed);
    let n = trains.join().unwrap();
    let t = t.unwrap_or_else(|e| {
        panic!(
            "through R: {e}\nA: {:#?}\nR: {:#?}\n{}\nB: {:#?}",
            a.stats().map(|s| s.daemon),
            r.stats().map(|s| s.daemon),
            r.process.log(),
            b.stats().map(|s| s.daemon)
        )
    });
    assert_eq!(t.received, bytes, "bytes lost");
    assert!(t.intact, "bytes corrupted");
    eprintln!(
        "through R: {:.1} Mbit/s, {n} trains to R beside it",
        t.mbps()
    );
    let sr = r.quiescent_stats().unwrap();
    let relayed = sr.daemon.riders_relayed;
    assert!(relayed > 1000, "R relayed {relayed} riders: {sr:#?}");
    assert_eq!(sr.daemon.riders_refused_foreign_destination, 0, "{sr:#?}");
    let sa = a.stats().unwrap();
    assert!(sa.daemon.continuations_sent > 0, "{sa:#?}");
    assert!(
        sa.planner.riders_piggybacked > 0,
        "nothing rode A's trains to R: {sa:#?}"
    );

    // Straight to B through A's device for B: R sees none of it.
    route_into(&net.a, "replace", B_LAN, "mgrp-b", A_R);
    let listener = tcp_listen(&net.b, IpAddr::V4(B_HOST), 5402).expect("listen");
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(B_HOST), 5402, bytes).expect("direct");
    assert_eq!(t.received, bytes, "bytes lost");
    assert!(t.intact, "bytes corrupted");
    assert_eq!(r.stats().unwrap().daemon.riders_relayed, relayed);

    // C is R's peer but no member: nothing of it passes R.
    route_into(&net.c, "add", B_LAN, "mgrp-r", C_R);
    let _listener = tcp_listen(&net.b, IpAddr::V4(B_HOST), 5403).expect("listen");
    let refused_before = r.stats().unwrap().daemon.riders_refused_foreign_destination;
    assert!(
        connect(&net.c, 5403, Duration::from_secs(3)).is_err(),
        "C reached B through R"
    );
    let sr = r.stats().unwrap();
    assert!(
        sr.daemon.riders_refused_foreign_destination > refused_before,
        "R did not refuse C's riders: {sr:#?}"
    );
    assert_eq!(sr.daemon.riders_relayed, relayed, "{sr:#?}");
}

/// A relay whose daemon is gone answers what A's mgrpd sends it with ICMP "port
/// unreachable", and A's one UDP socket, which all its peers share, reports each such
/// error on its next call, whatever that call is: a receive (counted as
/// `peer_unreachable_reported`) or a send to any peer. Those reports cost the other
/// peers nothing: while traffic for R keeps R's errors coming, what A sends B through
/// its device for B arrives byte for byte and A counts no failed send of any kind.
/// R's kernel answers every datagram here (no ICMP rate limit), the most errors a
/// host can send.
#[test]
fn a_gone_relay_costs_the_other_peers_nothing() {
    let _serial = serial();
    if !root_or_skip("a_gone_relay_costs_the_other_peers_nothing") {
        return;
    }
    let net = RelayNet::new();
    let key_file = TempFile::key(&mgrp_core::auth::Key::from_bytes([0x7e; 32]));
    let key = format!("key-file = \"{}\"\n", key_file.arg());
    // No mgrpd runs on R (as after its daemon died), and its kernel does not limit
    // its ICMP errors.
    net.r
        .exec(&["sysctl", "-qw", "net.ipv4.icmp_ratemask=0"])
        .unwrap();
    let ca = TempFile::config(&format!(
        "{key}encap = \"udp\"\n\
         [[peers]]\nprefix = \"{R_A}/32\"\ndevice = \"mgrp-r\"\n\
         [[peers]]\nprefix = \"{B_A}/32\"\ndevice = \"mgrp-b\"\n"
    ));
    let cb = TempFile::config(&format!(
        "{key}encap = \"udp\"\nlocal-prefixes = [\"{B_LAN}\"]\n\
         [[peers]]\nprefix = \"{A_B}/32\"\n"
    ));
    let _b = start(&net.b, &cb, "B");
    let a = start(&net.a, &ca, "A");
    route_into(&net.a, "add", B_LAN, "mgrp-b", A_B);
    route_into(&net.a, "add", THROUGH_R, "mgrp-r", A_R);

    // Datagrams for R, 16 every millisecond, until the transfer to B is done.
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = stop.clone();
    let flood = net
        .a
        .spawn("flood-r", move || {
            let socket = UdpSocket::bind((A_R, 0))?;
            let to = SocketAddr::new(IpAddr::V4(THROUGH_R_HOST), 9);
            let datagram = [0x5a_u8; 1200];
            let mut sent = 0u64;
            while !flooding.load(Ordering::Relaxed) {
                for _ in 0..16 {
                    sent += u64::from(socket.send_to(&datagram, to).is_ok());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(sent)
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let bytes = 8 << 20;
    let listener = tcp_listen(&net.b, IpAddr::V4(B_HOST), 5411).expect("listen");
    let t = tcp_transfer(&net.a, listener, IpAddr::V4(B_HOST), 5411, bytes);
    stop.store(true, Ordering::Relaxed);
    let flooded = flood.join().unwrap().unwrap();
    let sa = a.quiescent_stats().unwrap().daemon;
    let t = t.unwrap_or_else(|e| panic!("to B: {e}\nA: {sa:#?}\n{}", a.process.log()));
    assert_eq!(t.received, bytes, "bytes lost");
    assert!(t.intact, "bytes corrupted");
    eprintln!(
        "to B: {:.1} Mbit/s beside {flooded} datagrams for R; errors reported: {}",
        t.mbps(),
        sa.peer_unreachable_reported
    );
    // R's errors came back, many of them ...
    assert!(
        sa.peer_unreachable_reported > 100,
        "A's socket reported {} errors: {sa:#?}",
        sa.peer_unreachable_reported
    );
    // ... and no send lost a packet to them, B's or R's.
    assert_eq!(
        (
            sa.unchanged_send_errors,
            sa.continuation_send_errors,
            sa.keepalive_send_errors,
            sa.probe_send_errors
        ),
        (0, 0, 0, 0),
        "{sa:#?}"
    );
}
