//! What the open Internet sends a node that a lab never does: ICMP errors from
//! firewalls and routers, forged or real, quoting one of the daemon's own UDP
//! datagrams. Each is reported on the daemon's UDP socket (it sets `IP_RECVERR`)
//! as the next receive's error; none may stop a thread, each is counted by its
//! reason, and the peer's trains still arrive. Real namespaces, veths, TUNs and
//! daemons; they need root (CI runs as root) and say so and pass vacuously without
//! it. One at a time: each starts real-time pacers.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use mgrp_core::api::DaemonStats;
use mgrp_testbed::{
    ADDR_A, ADDR_B, ADDR6_A, ADDR6_B, Daemon, Netns, TwoHostOptions, TwoHosts, uniform_train,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

mod common;

use common::{mgrpd, root_or_skip, serial, wait_for};

const UDP_PORT: u16 = 4253;

/// The mark mgrpd gives its own packets by default (`fwmark`).
const MGRPD_FWMARK: u32 = 0x4d47;

/// The internet checksum of `bytes`.
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The first UDP datagram from the MGRP port to the MGRP port that arrives in `ns`
/// within 3 s of `send`, as its UDP header and payload (only the peer sends such
/// datagrams there).
fn capture_datagram(ns: &Netns, v6: bool, send: impl FnOnce()) -> Vec<u8> {
    use std::io::Read as _;
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let tap = ns
        .run(|| Socket::new(domain, Type::RAW, Some(Protocol::UDP)))
        .unwrap()
        .unwrap();
    tap.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    send();
    let mut buf = vec![0u8; 65_536];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let Ok(n) = (&tap).read(&mut buf) else {
            continue;
        };
        // IPv4 raw sockets hand over the IP header, IPv6 ones only the payload.
        let udp = if v6 {
            &buf[..n]
        } else {
            &buf[usize::from(buf[0] & 0x0f) * 4..n]
        };
        if udp.len() > 8
            && udp[0..2] == UDP_PORT.to_be_bytes()
            && udp[2..4] == UDP_PORT.to_be_bytes()
        {
            return udp.to_vec();
        }
    }
    panic!("no MGRP datagram seen");
}

/// An ICMP (or ICMPv6) error of `icmp_type`/`icmp_code` about `udp`, a datagram
/// `victim` sent to `peer`, quoting its IP header, UDP header and up to 128 bytes of
/// its payload, as a router or firewall on the way would send it.
fn icmp_error(victim: IpAddr, peer: IpAddr, udp: &[u8], icmp_type: u8, icmp_code: u8) -> Vec<u8> {
    let quoted = &udp[..udp.len().min(8 + 128)];
    let udp_len = u16::try_from(udp.len()).unwrap();
    let mut m = vec![icmp_type, icmp_code, 0, 0, 0, 0, 0, 0];
    match (victim, peer) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let mut ip = vec![0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let sum = checksum(&ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            m.extend_from_slice(&ip);
            m.extend_from_slice(quoted);
            let sum = checksum(&m);
            m[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut ip = vec![0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            m.extend_from_slice(&ip);
            m.extend_from_slice(quoted);
            // The kernel fills in an ICMPv6 raw socket's checksum.
        }
        _ => unreachable!("one family"),
    }
    m
}

/// Sends `message` from `ns` to `to` over a raw ICMP (or ICMPv6) socket.
fn send_icmp(ns: &Netns, to: IpAddr, message: &[u8]) {
    ns.run(|| {
        let (domain, protocol) = if to.is_ipv6() {
            (Domain::IPV6, Protocol::ICMPV6)
        } else {
            (Domain::IPV4, Protocol::ICMPV4)
        };
        let s = Socket::new(domain, Type::RAW, Some(protocol)).unwrap();
        s.send_to(message, &SockAddr::from(SocketAddr::new(to, 0)))
            .unwrap();
    })
    .unwrap();
}

/// Errors the daemon counted as its sockets reported them, whatever their reason.
fn errors_counted(s: &DaemonStats) -> u64 {
    let d = &s.daemon;
    d.socket_errors_refused
        + d.socket_errors_unreachable
        + d.socket_errors_prohibited
        + d.socket_errors_too_big
        + d.socket_errors_protocol
        + d.socket_errors_resources
        + d.socket_errors_other
}

/// Errors counted under `reason`.
fn counted_as(s: &DaemonStats, reason: &str) -> u64 {
    let d = &s.daemon;
    match reason {
        "refused" => d.socket_errors_refused,
        "unreachable" => d.socket_errors_unreachable,
        "prohibited" => d.socket_errors_prohibited,
        "too_big" => d.socket_errors_too_big,
        "protocol" => d.socket_errors_protocol,
        "resources" => d.socket_errors_resources,
        _ => d.socket_errors_other,
    }
}

/// Sends a train of 20 probes from `daemon` to `to`; every probe must leave.
fn train(daemon: &Daemon, to: IpAddr) {
    let report = daemon
        .api()
        .unwrap()
        .send_train(uniform_train(to, 20, 500, Duration::from_millis(1)))
        .unwrap();
    assert_eq!(report.probes_sent, 20, "{report:#?}");
}

/// ICMPv4 destination-unreachable codes 2, 5, 8 and 13 (protocol unreachable,
/// source route failed, host isolated, administratively filtered) and ICMPv6
/// destination-unreachable codes 1, 3, 4, 5 and 6 (administratively prohibited,
/// address unreachable, port unreachable, source address failed policy, reject
/// route) and time exceeded, each quoting one of A's datagrams to B, arrive at A. A
/// keeps running, counts each once by its reason, marks B down only for an error
/// that says nothing takes MGRP there and quotes a packet A sent (not for the same
/// error quoting a packet A never sent), and still takes B's train after them all.
/// Before this was survived, ICMPv4 code 5 ("Operation not supported"), code 8 and
/// ICMPv6's admin-prohibited ("Permission denied") stopped the daemon.
#[test]
fn icmp_errors_from_the_path_stop_no_thread() {
    let _serial = serial();
    if !root_or_skip("icmp_errors_from_the_path_stop_no_thread") {
        return;
    }
    // (type, code, the reason it is counted under, whether it says nothing takes
    // MGRP there).
    let v4: &[(u8, u8, &str, bool)] = &[
        (3, 2, "refused", true),
        (3, 5, "protocol", true),
        (3, 8, "protocol", true),
        (3, 13, "unreachable", true),
    ];
    let v6: &[(u8, u8, &str, bool)] = &[
        (1, 1, "prohibited", true),
        (1, 3, "unreachable", true),
        (1, 4, "refused", true),
        (1, 5, "prohibited", true),
        (1, 6, "prohibited", true),
        (3, 0, "unreachable", false),
    ];
    let families = [
        (IpAddr::V4(ADDR_A), IpAddr::V4(ADDR_B), v4, 32),
        (IpAddr::V6(ADDR6_A), IpAddr::V6(ADDR6_B), v6, 128),
    ];
    for (a_addr, b_addr, errors, bits) in families {
        let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
        let start = |ns: &Netns, other: IpAddr| {
            let route = format!("{other}/{bits}");
            Daemon::start(ns, mgrpd(), &["--route", &route, "--encap", "udp"]).expect("mgrpd")
        };
        let mut a = start(&net.a, b_addr);
        let b = start(&net.b, a_addr);
        for &(icmp_type, icmp_code, reason, peer_gone) in errors {
            let case = format!("{a_addr}: ICMP type {icmp_type} code {icmp_code}");
            // A datagram A sent lately, as a router on the way saw it.
            let datagram = capture_datagram(&net.b, a_addr.is_ipv6(), || train(&a, b_addr));
            let before = a.quiescent_stats().unwrap();
            let message = icmp_error(a_addr, b_addr, &datagram, icmp_type, icmp_code);
            send_icmp(&net.b, a_addr, &message);
            wait_for(&a, |s| errors_counted(s) > errors_counted(&before));
            // What the error leads to is counted after it.
            let after = a.quiescent_stats().unwrap();
            assert_eq!(
                a.process.wait(Duration::from_millis(200)),
                None,
                "{case}: mgrpd stopped: {}",
                a.process.log()
            );
            assert_eq!(
                errors_counted(&after),
                errors_counted(&before) + 1,
                "{case}: counted {:#?}",
                after.daemon
            );
            assert_eq!(
                counted_as(&after, reason),
                counted_as(&before, reason) + 1,
                "{case}: not counted as {reason}: {:#?}",
                after.daemon
            );
            // It quotes what A sent: when it says nothing takes MGRP at B, B counts
            // as down (its riders go unchanged for a while).
            assert_eq!(
                after.daemon.peer_unreachable,
                before.daemon.peer_unreachable + u64::from(peer_gone),
                "{case}: {:#?}",
                after.daemon
            );
            // The same error quoting a packet A never sent (one byte changed in its
            // MGRP header's send time or transaction) is counted, and marks nothing.
            let mut forged = datagram.clone();
            forged[8 + 10] ^= 0x5a;
            let before = a.quiescent_stats().unwrap();
            let message = icmp_error(a_addr, b_addr, &forged, icmp_type, icmp_code);
            send_icmp(&net.b, a_addr, &message);
            wait_for(&a, |s| errors_counted(s) > errors_counted(&before));
            // What the error leads to is counted after it.
            let after = a.quiescent_stats().unwrap();
            assert_eq!(
                (
                    errors_counted(&after),
                    after.daemon.peer_unreachable,
                    after.daemon.icmp_errors_unproven
                ),
                (
                    errors_counted(&before) + 1,
                    before.daemon.peer_unreachable,
                    before.daemon.icmp_errors_unproven + u64::from(peer_gone)
                ),
                "{case}, forged: {:#?}",
                after.daemon
            );
        }
        // Every error survived: A still takes B's train whole.
        let before = a.quiescent_stats().unwrap();
        train(&b, a_addr);
        let after = wait_for(&a, |s| {
            s.daemon.probes_received >= before.daemon.probes_received + 20
        });
        assert_eq!(
            after.daemon.probes_received,
            before.daemon.probes_received + 20,
            "{a_addr}: B's train after the errors: {:#?}",
            after.daemon
        );
    }
}

/// B knows 100 roaming peers (each with a key of its own) besides A, whose endpoint
/// is configured. A flood of datagrams that parse as MGRP but come from an endpoint
/// no peer is at (a second address of A's host): half name a key no one holds, half
/// copy a roaming peer's key index (as a host that saw one of its packets could).
/// While it runs, A's trains to B arrive whole. B computes no tag for the first half
/// (the index is no key's), and for the second at most the second's bound of trials,
/// dropping the rest unopened. Before key indexes, each junk datagram was tried
/// against every roaming peer's keys: without the bound on trials, hundreds of tag
/// checks each.
///
/// The flood comes at a fixed rate, `FLOOD_PER_SECOND`: a daemon that reads slower
/// than any flood drops probes at its socket whatever it does with what it reads,
/// so an unpaced flood measures only which of two threads is faster. Measured in
/// debug builds on a 2-vCPU host, B read about 9,000 of these datagrams a second
/// with every one tried against every key, and about 100,000 with the bound.
/// The flood's rate, datagrams a second: well above what B reads when it tries each
/// against every key, well below what it reads with the trials bounded.
const FLOOD_PER_SECOND: u64 = 30_000;

#[test]
fn a_flood_of_unknown_datagrams_costs_no_peer_its_train() {
    use mgrp_core::auth::Key;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let _serial = serial();
    if !root_or_skip("a_flood_of_unknown_datagrams_costs_no_peer_its_train") {
        return;
    }
    let key = common::TempFile::key(&Key::from_bytes([0x71; 32]));
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let a_config = common::TempFile::config(&format!(
        "routes = [\"{ADDR_B}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{ADDR_B}/32\"\nkey-file = \"{}\"\nendpoint = \"{ADDR_B}:{UDP_PORT}\"\n",
        key.arg()
    ));
    let mut b_text = format!(
        "routes = [\"{ADDR_A}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{ADDR_A}/32\"\nkey-file = \"{}\"\nendpoint = \"{ADDR_A}:{UDP_PORT}\"\n",
        key.arg()
    );
    let roaming_keys: Vec<common::TempFile> = (0..100u8)
        .map(|i| common::TempFile::key(&Key::from_bytes([i; 32])))
        .collect();
    for (i, k) in roaming_keys.iter().enumerate() {
        b_text.push_str(&format!(
            "\n[[peers]]\nprefix = \"10.99.{}.{}/32\"\nkey-file = \"{}\"\n",
            i / 10,
            i % 10 + 1,
            k.arg()
        ));
    }
    let b_config = common::TempFile::config(&b_text);
    let a = Daemon::start(&net.a, mgrpd(), &["--config", &a_config.arg()]).expect("mgrpd on A");
    let b = Daemon::start(&net.b, mgrpd(), &["--config", &b_config.arg()]).expect("mgrpd on B");
    // A sealed packet of A's, as B sees it: junk that parses as MGRP and carries a
    // trailer, so B would try it against every roaming peer's key.
    let datagram = capture_datagram(&net.b, false, || train(&a, IpAddr::V4(ADDR_B)));
    let mut junk = datagram[8..].to_vec();
    let n = junk.len();
    junk[n - 1] ^= 0xff;
    // The trailer's key index (scheme 3) is at 12..16 bytes from its end: A's key's
    // in this one (A has a key of its own, so it may roam too), made no key's in
    // `junk`, a roaming peer's in `copied`.
    let mut copied = junk.clone();
    junk[n - 13] ^= 0x01;
    copied[n - 16..n - 12].copy_from_slice(&Key::from_bytes([0; 32]).index().to_be_bytes());
    net.a
        .ip(&["addr", "add", "10.77.0.9/24", "dev", &net.veth_a])
        .expect("a second address on A's host");
    let before = b.quiescent_stats().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    // Marked as mgrpd marks its own packets, so that they go straight to B rather
    // than into A's tunnel (as a stranger's would from a host of its own).
    let s = net
        .a
        .run(|| {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_mark(MGRPD_FWMARK)?;
            s.bind(&SocketAddr::from(([10, 77, 0, 9], 0)).into())?;
            std::io::Result::Ok(std::net::UdpSocket::from(s))
        })
        .unwrap()
        .unwrap();
    let flooding = Instant::now();
    let flood = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            // A burst each millisecond, small beside B's socket buffer.
            const PER_MS: u64 = FLOOD_PER_SECOND / 1000;
            let started = Instant::now();
            let mut due = started;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                for i in 0..PER_MS {
                    let forged = if i % 2 == 0 { &junk } else { &copied };
                    if s.send_to(forged, (ADDR_B, UDP_PORT)).is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                due += Duration::from_millis(1);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..5 {
        train(&a, IpAddr::V4(ADDR_B));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    let seconds = flooding.elapsed().as_secs() + 2;
    let after = b.quiescent_stats().unwrap();
    let d = &after.daemon;
    assert_eq!(
        d.probes_received - before.daemon.probes_received,
        100,
        "A's trains beside a flood of {} datagrams: {d:#?}",
        sent.load(Ordering::Relaxed)
    );
    assert!(
        d.trials_refused > 0 && d.mgrp_not_peer > d.trials_refused,
        "{} datagrams sent: {d:#?}",
        sent.load(Ordering::Relaxed)
    );
    // A's packets cost a check each; the flood, from one source, at most that
    // source's trials in each second it touched (a span of t seconds touches at most
    // ⌊t⌋ + 2), each checked for the two addresses B may be known by.
    let from_a = d.mgrp_received
        - before.daemon.mgrp_received
        - (d.mgrp_not_peer - before.daemon.mgrp_not_peer);
    let bound = from_a + 2 * u64::from(mgrpd::endpoints::TRIALS_PER_SOURCE_PER_SECOND) * seconds;
    eprintln!(
        "{} datagrams sent, {} tag checks (bound {bound}), {} trials refused",
        sent.load(Ordering::Relaxed),
        d.tag_checks - before.daemon.tag_checks,
        d.trials_refused - before.daemon.trials_refused
    );
    assert!(
        d.tag_checks - before.daemon.tag_checks <= bound,
        "{} tag checks, bound {bound}, {} datagrams sent: {d:#?}",
        d.tag_checks - before.daemon.tag_checks,
        sent.load(Ordering::Relaxed)
    );
}
