//! MGRP over UDP through a NAT: host A behind a router R that masquerades (nftables)
//! and lets nothing in that A did not ask for, host B on R's outside. Real
//! namespaces, veths, TUNs and daemons; they need root (CI runs as root) and say so
//! and pass vacuously without it. One at a time: each starts real-time pacers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mgrp_core::auth::{self, Key};
use mgrp_core::wire::{Header, Packet, Repr, Version};
use mgrp_testbed::{Daemon, Netns, tcp_listen, tcp_transfer, uniform_train, veth_pair};

mod common;

use common::{TempFile, mgrpd, root_or_skip, serial, trains_every, wait_for};

/// A's address behind the NAT.
const A: Ipv4Addr = Ipv4Addr::new(10, 79, 1, 2);
/// R's inside address.
const R_IN: Ipv4Addr = Ipv4Addr::new(10, 79, 1, 1);
/// R's outside address: the one B sees A's packets come from.
const R_OUT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// B, on R's outside.
const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// A — R — B, R a NAT router: outgoing traffic from A is masqueraded, and only
/// replies to it come back in.
struct NatNet {
    a: Netns,
    r: Netns,
    b: Netns,
}

impl NatNet {
    fn new() -> Self {
        let net = Self::without_default_route_on_b();
        // B is on the Internet: its default route leads to R, which must keep
        // A unreachable by itself.
        net.b
            .ip(&["route", "add", "default", "via", &R_OUT.to_string()])
            .unwrap();
        net
    }

    /// The same, but B has no default route: the only way B's kernel knows to A is
    /// the tunnel (a host that learns a roaming peer, or a host with no route out).
    fn without_default_route_on_b() -> Self {
        if let Err(e) = mgrp_testbed::packages::require(&["nft", "conntrack"]) {
            panic!("{e}");
        }
        let (a, r, b) = (
            Netns::new("nata").unwrap(),
            Netns::new("natr").unwrap(),
            Netns::new("natb").unwrap(),
        );
        let (a0, r0) = veth_pair(&a, &r).unwrap();
        let (r1, b0) = veth_pair(&r, &b).unwrap();
        let up = |ns: &Netns, dev: &str, addr: String| {
            ns.ip(&["addr", "add", &addr, "dev", dev]).unwrap();
            ns.ip(&["link", "set", dev, "up"]).unwrap();
        };
        up(&a, &a0, format!("{A}/24"));
        up(&r, &r0, format!("{R_IN}/24"));
        up(&r, &r1, format!("{R_OUT}/24"));
        up(&b, &b0, format!("{B}/24"));
        a.ip(&["route", "add", "default", "via", &R_IN.to_string()])
            .unwrap();
        r.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]).unwrap();
        for rule in [
            "add table ip mgrptest".to_string(),
            "add chain ip mgrptest post { type nat hook postrouting priority 100 ; }".into(),
            format!("add rule ip mgrptest post oifname \"{r1}\" masquerade"),
            "add chain ip mgrptest inbound { type filter hook forward priority 0 ; policy drop ; }"
                .into(),
            "add rule ip mgrptest inbound ct state established,related accept".into(),
            format!("add rule ip mgrptest inbound iifname \"{r0}\" accept"),
        ] {
            r.exec(&["nft", &rule]).unwrap();
        }
        Self { a, r, b }
    }

    /// Makes R forget its mappings and map A's flows to other ports from now on, as
    /// a NAT that restarted or reassigned its ports would.
    fn remap(&self) {
        self.r
            .exec(&["nft", "flush chain ip mgrptest post"])
            .unwrap();
        self.r
            .exec(&[
                "nft",
                "add rule ip mgrptest post ip saddr 10.79.1.0/24 meta l4proto udp snat to 192.0.2.1:40000-40999",
            ])
            .unwrap();
        // Established mappings would otherwise outlive the rule change.
        let _ = self.r.exec(&["conntrack", "-F"]);
    }
}

/// The key of the link between A and B: both hold it, no other peer of B's does, so
/// B knows A by it.
fn link_key() -> Key {
    Key::from_bytes([0xa1; 32])
}

/// Daemons over UDP with the link's key: A names B's endpoint and sends keepalives;
/// B knows A only by the key and learns where it is.
fn udp_daemons(net: &NatNet, key: &TempFile) -> (Daemon, Daemon, TempFile, TempFile) {
    let ca = TempFile::config(&format!(
        "routes = [\"{B}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{B}/32\"\nkey-file = \"{}\"\nendpoint = \"{B}:4253\"\nkeepalive = \"1s\"\n",
        key.arg()
    ));
    let cb = TempFile::config(&format!(
        "routes = [\"{A}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{A}/32\"\nkey-file = \"{}\"\n",
        key.arg()
    ));
    let b = Daemon::start(
        &net.b,
        mgrpd(),
        &["--config", &cb.arg(), "--log-level", "debug"],
    )
    .expect("mgrpd on B");
    let a = Daemon::start(
        &net.a,
        mgrpd(),
        &["--config", &ca.arg(), "--log-level", "debug"],
    )
    .expect("mgrpd on A");
    (a, b, ca, cb)
}

/// A TCP transfer from `from_ns` to `to` (listening in `to_ns`), with trains from
/// `trains_from` to `to` alongside; returns how many trains ran.
fn transfer_with_trains(
    from_ns: &Netns,
    to_ns: &Netns,
    to: Ipv4Addr,
    port: u16,
    trains_from: &Daemon,
    other: &Daemon,
) -> u64 {
    let bytes = 2 << 20;
    let listener = tcp_listen(to_ns, IpAddr::V4(to), port).expect("listen");
    let stop = Arc::new(AtomicBool::new(false));
    let trains = trains_every(
        trains_from,
        IpAddr::V4(to),
        stop.clone(),
        Duration::from_millis(20),
    );
    let t = tcp_transfer(from_ns, listener, IpAddr::V4(to), port, bytes).unwrap_or_else(|e| {
        panic!(
            "transfer to {to}: {e}\nlog of the daemon sending trains: {}\nits counters: {:#?}\nlog of the other daemon: {}\nits counters: {:#?}",
            trains_from.process.log(),
            trains_from.stats().map(|s| s.daemon),
            other.process.log(),
            other.stats().map(|s| s.daemon)
        )
    });
    stop.store(true, Ordering::Relaxed);
    let n = trains.join().unwrap();
    assert_eq!(t.received, bytes, "bytes lost");
    assert!(t.intact, "bytes corrupted");
    eprintln!(
        "{bytes} B to {to}: {:.1} Mbit/s, {n} trains alongside",
        t.mbps()
    );
    n
}

/// Over UDP, trains from A to B and from B to A (behind the NAT) carry riders, and
/// TCP both ways arrives byte for byte; B finds A at the NAT's outer address. Over
/// raw protocol 253 the same hosts do not reach A from B.
#[test]
fn udp_crosses_a_nat_both_ways_and_raw_ip_does_not() {
    let _serial = serial();
    if !root_or_skip("udp_crosses_a_nat") {
        return;
    }
    let net = NatNet::new();
    let ka = link_key();
    let file = TempFile::key(&ka);
    let (a, b, _ca, _cb) = udp_daemons(&net, &file);
    let sb = wait_for(&b, |s| s.daemon.keepalives_received > 0);
    assert!(
        sb.daemon.keepalives_received > 0,
        "no keepalive from A: {sb:#?}"
    );
    assert_eq!(sb.daemon.peer_endpoint_changes, 1, "{sb:#?}");
    let log = b.process.log();
    assert!(log.contains(&format!("peer {A} is at {R_OUT}:")), "{log}");
    // A's route to B has the MTU of one continuation (IPv4 20, UDP 8, version 2's
    // continuation header 2 and whole-rider descriptor 2, the trailer 24), so TCP
    // segments cross whole, never cut in two.
    let routes = net.a.ip(&["-o", "route", "show", "table", "all"]).unwrap();
    assert!(
        routes
            .lines()
            .any(|l| l.starts_with(&format!("{B} ")) && l.contains(" mtu 1444")),
        "{routes}"
    );

    assert!(transfer_with_trains(&net.a, &net.b, B, 5301, &a, &b) > 0);
    // Bursts of segments left A in segmented sends, several datagrams each.
    let sa = a.stats().unwrap();
    assert!(
        sa.daemon.segmented_sends > 0
            && sa.daemon.segmented_datagrams >= 2 * sa.daemon.segmented_sends,
        "{sa:#?}"
    );
    let sb = b.quiescent_stats().unwrap();
    assert!(
        sb.daemon.riders_delivered > 0,
        "no rider rode from A: {sb:#?}"
    );
    assert!(sb.daemon.probes_received > 0, "{sb:#?}");
    assert!(sb.receive_conserved(), "{sb:#?}");

    assert!(transfer_with_trains(&net.b, &net.a, A, 5302, &b, &a) > 0);
    let sa = a.quiescent_stats().unwrap();
    assert!(
        sa.daemon.riders_delivered > 0,
        "no rider rode from B: {sa:#?}"
    );
    assert!(sa.daemon.probes_received > 0, "{sa:#?}");
    assert!(sa.receive_conserved() && sa.conserved(), "{sa:#?}");
    let sb = b.quiescent_stats().unwrap();
    assert!(sb.conserved(), "{sb:#?}");
    assert_eq!(
        (sa.daemon.mgrp_not_peer, sb.daemon.mgrp_not_peer),
        (0, 0),
        "{sa:#?} {sb:#?}"
    );
    drop((a, b));

    // Raw IP: B's probes to A die at the NAT, which has no mapping for them.
    let a = Daemon::start(&net.a, mgrpd(), &["--route", &format!("{B}/32")]).unwrap();
    let b = Daemon::start(&net.b, mgrpd(), &["--route", &format!("{A}/32")]).unwrap();
    let report = b
        .api()
        .unwrap()
        .send_train(uniform_train(
            IpAddr::V4(A),
            20,
            500,
            Duration::from_millis(1),
        ))
        .unwrap();
    assert_eq!(report.probes_sent, 20, "{report:#?}");
    std::thread::sleep(Duration::from_millis(500));
    let sa = a.stats().unwrap();
    assert_eq!(
        sa.daemon.mgrp_received, 0,
        "raw MGRP crossed the NAT: {sa:#?}"
    );
}

/// B has no route to A but the tunnel, and A roams: B cannot know at start which of
/// its addresses A admits riders from, says so naming the setting, and once A is
/// heard from gives the route into the tunnel the address towards A's endpoint, so
/// B's traffic to A rides and is admitted. With `--source` the route has it at once.
#[test]
fn a_host_whose_only_route_to_its_peer_is_the_tunnel_sources_what_the_peer_admits() {
    let _serial = serial();
    if !root_or_skip("only_route_is_the_tunnel") {
        return;
    }
    let net = NatNet::without_default_route_on_b();
    let key = TempFile::key(&link_key());
    let (a, b, _ca, _cb) = udp_daemons(&net, &key);
    let log = b.process.log();
    assert!(
        log.contains(&format!("traffic routed into the tunnel to {A}/32 will leave from the TUN's own address 169.254.77.1"))
            && log.contains("set `source = \"ADDR\"` in that peer's [[peers]] table (or --source ADDR)"),
        "B did not say that it cannot source its traffic to A:\n{log}"
    );
    let sb = wait_for(&b, |s| s.daemon.peer_endpoint_changes > 0);
    assert_eq!(sb.daemon.peer_endpoint_changes, 1, "{sb:#?}");
    // The route is given its source within the refresh period (2 s).
    let start = Instant::now();
    let sourced = |ns: &Netns| {
        ns.ip(&["-o", "route", "show", "table", "4242"])
            .unwrap()
            .lines()
            .any(|l| l.starts_with(&format!("{A} ")) && l.contains(&format!("src {B}")))
    };
    while !sourced(&net.b) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        sourced(&net.b),
        "{}\n{}",
        net.b.ip(&["route", "show", "table", "all"]).unwrap(),
        b.process.log()
    );
    assert!(
        b.process.log().contains(&format!(
            "traffic routed into the tunnel to {A}/32 now leaves from {B}"
        )),
        "{}",
        b.process.log()
    );
    assert!(transfer_with_trains(&net.b, &net.a, A, 5303, &b, &a) > 0);
    let sa = a.quiescent_stats().unwrap();
    assert!(
        sa.daemon.riders_delivered > 0,
        "no rider rode from B: {sa:#?}"
    );
    assert_eq!(sa.daemon.riders_refused_foreign_source, 0, "{sa:#?}");
    assert!(sa.receive_conserved(), "{sa:#?}");
    drop((a, b));

    // Told the source, B routes with it from the start and warns of nothing.
    let cb = TempFile::config(&format!(
        "routes = [\"{A}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{A}/32\"\nkey-file = \"{}\"\nsource = \"{B}\"\n",
        key.arg()
    ));
    let b = Daemon::start(&net.b, mgrpd(), &["--config", &cb.arg()]).expect("mgrpd on B");
    assert!(
        sourced(&net.b),
        "{}",
        net.b.ip(&["route", "show", "table", "all"]).unwrap()
    );
    assert!(
        !b.process.log().contains("will leave from"),
        "{}",
        b.process.log()
    );
}

/// A packet sealed with A's key as A seals for B, from wherever the test sends it.
fn sealed_keepalive(key: &Key, counter: u64) -> Vec<u8> {
    // Version 1: a daemon that sends version 2 takes both.
    let repr = Repr {
        version: Version::V1,
        header: Header::keepalive(),
        tool_header: &[],
        chunks: vec![],
        trailer_len: auth::TRAILER_LEN,
    };
    let mut p: Packet<Vec<u8>> = repr.emit_into(vec![0u8; repr.buffer_len()]).unwrap();
    auth::seal(key, a_to_b(), &mut p, counter).unwrap();
    p.into_inner()
}

/// The direction of A's packets to B: each named by the address the other knows it
/// by (A by its own address, which its riders leave from; B by its own).
fn a_to_b() -> auth::Binding {
    auth::Binding::Indexed(auth::Direction {
        from: IpAddr::V4(A),
        to: IpAddr::V4(B),
    })
}

/// Waits for B's next second of trials. A datagram from an endpoint no peer is known
/// at is tried against the roaming peers' keys at most
/// `TRIALS_PER_SOURCE_PER_SECOND` times a second per source, and everything here
/// comes from R's one outside address: A's moves and the forgeries alike. Each burst
/// of forgeries (3 and 2 datagrams, within the bound) starts a second after the last
/// trial, so that none of them is dropped unopened for the one before.
fn next_trial_second() {
    const { assert!(3 <= mgrpd::endpoints::TRIALS_PER_SOURCE_PER_SECOND) };
    std::thread::sleep(Duration::from_secs(1));
}

/// When the NAT maps A to another port, B follows A after A's next authenticated
/// packet and traffic to A resumes. Packets from a new endpoint that are not
/// authentic (no trailer, another key, a replay of an old counter) move nothing.
#[test]
fn a_peer_whose_nat_mapping_changes_is_followed_by_its_key_alone() {
    let _serial = serial();
    if !root_or_skip("nat_mapping_changes") {
        return;
    }
    let net = NatNet::new();
    let ka = link_key();
    let file = TempFile::key(&ka);
    let (a, b, _ca, _cb) = udp_daemons(&net, &file);
    let s = wait_for(&b, |s| s.daemon.peer_endpoint_changes > 0);
    assert_eq!(s.daemon.peer_endpoint_changes, 1, "{s:#?}");
    transfer_with_trains(&net.b, &net.a, A, 5311, &b, &a);

    net.remap();
    let s = wait_for(&b, |s| s.daemon.peer_endpoint_changes > 1);
    assert_eq!(
        s.daemon.peer_endpoint_changes, 2,
        "B did not follow A: {s:#?}"
    );
    let log = b.process.log();
    assert!(
        log.contains(&format!("peer {A} moved from {R_OUT}:")),
        "{log}"
    );
    assert!(log.contains(&format!("to {R_OUT}:40")), "{log}");
    transfer_with_trains(&net.b, &net.a, A, 5312, &b, &a);

    // From a new endpoint on R: nothing authentic, so nothing moves.
    next_trial_second();
    let before = b.quiescent_stats().unwrap().daemon;
    let sock = net
        .r
        .run(|| std::net::UdpSocket::bind(SocketAddr::new(IpAddr::V4(R_OUT), 41234)))
        .unwrap()
        .unwrap();
    let to_b = SocketAddr::new(IpAddr::V4(B), 4253);
    let mut plain = sealed_keepalive(&ka, 1);
    let n = plain.len() - usize::from(auth::TRAILER_LEN);
    plain.truncate(n);
    plain[26..28].copy_from_slice(&0u16.to_be_bytes());
    for packet in [
        plain,
        sealed_keepalive(&Key::from_bytes([0x33; 32]), u64::MAX / 2),
        // A's key, but a counter far below A's: a replay.
        sealed_keepalive(&ka, 1),
    ] {
        sock.send_to(&packet, to_b).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = b.quiescent_stats().unwrap().daemon;
    assert_eq!(
        after.peer_endpoint_changes, before.peer_endpoint_changes,
        "{after:#?}"
    );
    assert_eq!(after.mgrp_not_peer - before.mgrp_not_peer, 2, "{after:#?}");
    assert_eq!(after.mgrp_replayed - before.mgrp_replayed, 1, "{after:#?}");
    // And B still reaches A where it is.
    transfer_with_trains(&net.b, &net.a, A, 5313, &b, &a);

    // Last, since it moves A (whoever holds the key may) and its counter puts A's
    // own packets behind the replay window: a sealed packet whose riders claim a
    // source A may not speak for, or a destination that is not B. Both are refused.
    next_trial_second();
    let before = b.quiescent_stats().unwrap().daemon;
    for (id, src, dst) in [
        (1, Ipv4Addr::new(10, 79, 9, 9), B),
        (2, A, Ipv4Addr::new(192, 0, 2, 77)),
    ] {
        let rider = mgrp_testbed::forge::udp_packet(src, dst, 17, 7777, b"forged");
        let buf = mgrp_testbed::forge::continuation(0x7100_0000 + id, &rider, auth::TRAILER_LEN);
        let mut p = Packet::new_checked(buf).unwrap();
        auth::seal(&ka, a_to_b(), &mut p, u64::MAX / 2 + u64::from(id)).unwrap();
        sock.send_to(p.as_bytes(), to_b).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = b.quiescent_stats().unwrap().daemon;
    assert_eq!(
        (
            after.riders_refused_foreign_source - before.riders_refused_foreign_source,
            after.riders_refused_foreign_destination - before.riders_refused_foreign_destination,
            after.riders_delivered - before.riders_delivered,
        ),
        (1, 1, 0),
        "{after:#?}"
    );
    assert_eq!(after.trials_refused, before.trials_refused, "{after:#?}");
    drop(a);
}
