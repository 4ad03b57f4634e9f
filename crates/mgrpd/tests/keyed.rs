//! Keyed MGRP against an attacker who sees the daemons' packets: a packet sent back
//! to its sender cuts no peer off, a reflected packet moves no roaming peer, a packet
//! taken before a restart or a kill is not taken after it (nor moves a roaming peer),
//! and a key rotation under a running transfer loses nothing. The attacker's copies are read where the packets arrive
//! (a raw socket beside the receiving daemon) and sent from wherever the attack
//! needs. Real namespaces, veths, TUNs and daemons; they need root (CI runs as root)
//! and say so and pass vacuously without it. One at a time: each starts real-time
//! pacers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mgrp_core::auth::Key;
use mgrp_core::wire::{Kind, Packet};
use mgrp_testbed::{
    ADDR_A, ADDR_B, Daemon, Netns, Star, TwoHostOptions, TwoHosts, tcp_listen, tcp_transfer,
    uniform_train,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

mod common;

use common::{TempFile, mgrpd, root_or_skip, serial, trains_every, wait_for};

const MGRP_PROTOCOL: i32 = 253;
const UDP_PORT: u16 = 4253;

/// A socket in `ns` that gets a copy of every MGRP packet arriving there: raw
/// protocol 253, or UDP (whose datagrams are then picked by port).
fn tap(ns: &Netns, udp: bool) -> Socket {
    let protocol = if udp { 17 } else { MGRP_PROTOCOL };
    let s = ns
        .run(|| Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(protocol))))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// The next MGRP probe from `from` that `tap` saw, as its MGRP bytes (what follows
/// the IP header, and the UDP header over UDP); `None` when none came within 3 s.
fn next_probe(tap: &Socket, from: Ipv4Addr, udp: bool) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut buf = vec![0u8; 65_536];
    let start = Instant::now();
    let mut tap = tap;
    while start.elapsed() < Duration::from_secs(3) {
        let Ok(n) = tap.read(&mut buf) else {
            continue;
        };
        let ip = &buf[..n];
        if n < 20 || ip[12..16] != from.octets() {
            continue;
        }
        let mut payload = &ip[usize::from(ip[0] & 0x0f) * 4..];
        if udp {
            if payload.len() < 8 || payload[2..4] != UDP_PORT.to_be_bytes() {
                continue;
            }
            payload = &payload[8..];
        }
        if Packet::new_checked(payload).is_ok_and(|p| p.kind() == Kind::Probe) {
            return Some(payload.to_vec());
        }
    }
    None
}

/// Sends `mgrp` from `ns` to `to` as an MGRP packet: over raw IP, or in a UDP
/// datagram from `port` to mgrpd's port.
fn send_from(ns: &Netns, udp: bool, port: u16, to: Ipv4Addr, mgrp: &[u8]) {
    ns.run(|| {
        if udp {
            let s = std::net::UdpSocket::bind(("0.0.0.0", port)).unwrap();
            s.send_to(mgrp, (to, UDP_PORT)).unwrap();
        } else {
            let s =
                Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(MGRP_PROTOCOL))).unwrap();
            s.send_to(mgrp, &SockAddr::from(SocketAddr::new(IpAddr::V4(to), 0)))
                .unwrap();
        }
    })
    .unwrap();
}

/// Sends a train of 20 probes from `daemon` to `to`; every probe must leave.
fn train(daemon: &Daemon, to: Ipv4Addr) {
    let report = daemon
        .api()
        .unwrap()
        .send_train(uniform_train(
            IpAddr::V4(to),
            20,
            500,
            Duration::from_millis(1),
        ))
        .unwrap();
    assert_eq!(report.probes_sent, 20, "{report:#?}");
}

/// A's probe to B, sent back to A with B's address: A refuses it as its own, and
/// B's trains to A are still taken, whichever daemon started first, over UDP and
/// over raw IP. (With tags bound to nothing, A took it and its window for B jumped
/// to A's own counter when A had started later: B was cut off until a restart.)
#[test]
fn a_packet_sent_back_to_its_sender_cuts_no_peer_off() {
    let _serial = serial();
    if !root_or_skip("reflection_to_the_sender") {
        return;
    }
    let key = TempFile::key(&Key::from_bytes([0x3c; 32]));
    for udp in [true, false] {
        for a_later in [true, false] {
            let case = format!("udp {udp}, A started later {a_later}");
            let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
            let start = |ns: &Netns, other: Ipv4Addr| {
                let (route, key) = (format!("{other}/32"), key.arg());
                let mut args = vec!["--route", &route, "--key-file", &key];
                if udp {
                    args.extend(["--encap", "udp"]);
                }
                Daemon::start(ns, mgrpd(), &args).expect("mgrpd")
            };
            let (a, b) = if a_later {
                let b = start(&net.b, ADDR_A);
                (start(&net.a, ADDR_B), b)
            } else {
                let a = start(&net.a, ADDR_B);
                (a, start(&net.b, ADDR_A))
            };
            let tap = tap(&net.b, udp);
            train(&a, ADDR_B);
            let probe = next_probe(&tap, ADDR_A, udp)
                .unwrap_or_else(|| panic!("{case}: no probe of A's seen at B"));
            let before = a.quiescent_stats().unwrap().daemon;
            send_from(&net.b, udp, 5555, ADDR_A, &probe);
            let s = wait_for(&a, |s| s.daemon.mgrp_reflected > before.mgrp_reflected);
            assert_eq!(
                (
                    s.daemon.mgrp_reflected - before.mgrp_reflected,
                    s.daemon.probes_received - before.probes_received,
                ),
                (1, 0),
                "{case}: {s:#?}"
            );
            assert!(
                a.process.log().contains("sent back to it"),
                "{case}: {}",
                a.process.log()
            );
            train(&b, ADDR_A);
            let s = wait_for(&a, |s| {
                s.daemon.probes_received >= before.probes_received + 20
            });
            assert_eq!(
                (
                    s.daemon.probes_received - before.probes_received,
                    s.daemon.mgrp_replayed - before.mgrp_replayed,
                ),
                (20, 0),
                "{case}: B's train after the reflection: {s:#?}"
            );
        }
    }
}

/// The attacker's socket: a UDP port of its own on its host, from which it sends
/// what it captured and where it would receive what a fooled daemon sent it.
fn attacker_socket(ns: &Netns, ip: Ipv4Addr) -> std::net::UdpSocket {
    let s = ns
        .run(|| std::net::UdpSocket::bind((ip, 5555)))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s
}

/// `b` still sends to `a` (at `a_ip`) and only there: never said it moved `a` to
/// the attacker at `e_ip`, its next train reaches `a` whole, and the attacker
/// receives nothing.
fn reaches_only(
    b: &Daemon,
    a: &Daemon,
    a_ip: Ipv4Addr,
    attacker: &std::net::UdpSocket,
    e_ip: Ipv4Addr,
    case: &str,
) {
    assert!(
        !b.process.log().contains(&format!("to {e_ip}:")),
        "{case}: {}",
        b.process.log()
    );
    let before = a.quiescent_stats().unwrap().daemon;
    train(b, a_ip);
    let sa = wait_for(a, |s| {
        s.daemon.probes_received >= before.probes_received + 20
    });
    assert_eq!(
        sa.daemon.probes_received - before.probes_received,
        20,
        "{case}: {sa:#?}"
    );
    let mut buf = [0u8; 2048];
    assert!(
        attacker.recv_from(&mut buf).is_err(),
        "{case}: the attacker received a datagram"
    );
}

/// B knows A only by A's key (a roaming peer). One of B's own probes to A, sent to
/// B from the attacker's address, moves nothing: B keeps sending to A, A takes B's
/// trains, and the attacker receives nothing, whichever daemon started first. (With
/// tags bound to nothing, B moved A to the attacker and sent it A's traffic.)
#[test]
fn a_reflected_packet_moves_no_roaming_peer() {
    let _serial = serial();
    if !root_or_skip("roaming_hijack") {
        return;
    }
    let key = TempFile::key(&Key::from_bytes([0x4d; 32]));
    for a_first in [true, false] {
        let case = format!("A started first {a_first}");
        let star = Star::new(&[None, None, None]).expect("topology");
        let (a_ip, b_ip, e_ip) = (star.addrs[0], star.addrs[1], star.addrs[2]);
        let ca = TempFile::config(&format!(
            "routes = [\"{b_ip}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{b_ip}/32\"\nkey-file = \"{}\"\nendpoint = \"{b_ip}:4253\"\nkeepalive = \"1s\"\n",
            key.arg()
        ));
        let cb = TempFile::config(&format!(
            "routes = [\"{a_ip}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{a_ip}/32\"\nkey-file = \"{}\"\n",
            key.arg()
        ));
        let start = |ns: &Netns, c: &TempFile| {
            Daemon::start(ns, mgrpd(), &["--config", &c.arg()]).expect("mgrpd")
        };
        let (a, b) = if a_first {
            let a = start(&star.hosts[0], &ca);
            (a, start(&star.hosts[1], &cb))
        } else {
            let b = start(&star.hosts[1], &cb);
            (start(&star.hosts[0], &ca), b)
        };
        let s = wait_for(&b, |s| s.daemon.peer_endpoint_changes > 0);
        assert_eq!(s.daemon.peer_endpoint_changes, 1, "{case}: {s:#?}");
        let tap = tap(&star.hosts[0], true);
        train(&b, a_ip);
        let probe = next_probe(&tap, b_ip, true)
            .unwrap_or_else(|| panic!("{case}: no probe of B's seen at A"));
        let attacker = attacker_socket(&star.hosts[2], e_ip);
        let before = b.quiescent_stats().unwrap().daemon;
        attacker.send_to(&probe, (b_ip, UDP_PORT)).unwrap();
        let s = wait_for(&b, |s| s.daemon.mgrp_not_peer > before.mgrp_not_peer);
        assert_eq!(
            (
                s.daemon.mgrp_not_peer - before.mgrp_not_peer,
                s.daemon.peer_endpoint_changes - before.peer_endpoint_changes,
            ),
            (1, 0),
            "{case}: {s:#?}"
        );
        reaches_only(&b, &a, a_ip, &attacker, e_ip, &case);
    }
}

/// A probe B took before it restarted, sent to it again afterwards, is refused as a
/// replay: B's replay windows outlive the restart (its state file).
#[test]
fn a_restarted_daemon_does_not_take_a_packet_again() {
    let _serial = serial();
    if !root_or_skip("windows_across_restarts") {
        return;
    }
    windows_outlive_a_restart(mgrpd(), 0x5e);
}

/// An upgrade from the previous release (0.1.0, `mgrp_testbed::previous`) keeps B's
/// replay windows: B runs 0.1.0's mgrpd and takes this version's keyed probes from A,
/// stops, and this version's mgrpd, started on its state file, reads the windows and
/// refuses a probe the old one took; A's later probes are taken.
#[test]
fn an_upgrade_from_the_previous_release_keeps_the_replay_windows() {
    let _serial = serial();
    if !root_or_skip("an_upgrade_from_the_previous_release_keeps_the_replay_windows") {
        return;
    }
    let previous = mgrp_testbed::previous::program("mgrpd", "mgrpd")
        .unwrap_or_else(|e| panic!("mgrpd of the previous release: {e:#}"));
    windows_outlive_a_restart(&previous, 0x5f);
}

/// B runs `first_b` and takes a train of A's (this version's) keyed probes, stops,
/// and this version's mgrpd started on its state file reads the windows, refuses one
/// of those probes sent again, and takes A's next train.
fn windows_outlive_a_restart(first_b: &std::path::Path, key_byte: u8) {
    let key = TempFile::key(&Key::from_bytes([key_byte; 32]));
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let route_b = format!("{ADDR_B}/32");
    let route_a = format!("{ADDR_A}/32");
    let a = Daemon::start(
        &net.a,
        mgrpd(),
        &["--route", &route_b, "--key-file", &key.arg()],
    )
    .expect("mgrpd on A");
    let args_b = ["--route", route_a.as_str(), "--key-file", &key.arg()];
    let mut b = Daemon::start(&net.b, first_b, &args_b).expect("mgrpd on B");
    let tap = tap(&net.b, false);
    train(&a, ADDR_B);
    let probe = next_probe(&tap, ADDR_A, false).expect("a probe of A's seen at B");
    let s = wait_for(&b, |s| s.daemon.probes_received >= 20);
    assert_eq!(s.daemon.probes_received, 20, "{s:#?}");
    b.process.stop();
    let tun = b.tun.clone();
    let b2 = Daemon::restart(&net.b, mgrpd(), &tun, &args_b).expect("mgrpd on B again");
    assert!(
        b2.process.log().contains("replay windows of 1 peers read"),
        "{}",
        b2.process.log()
    );
    send_from(&net.a, false, 0, ADDR_B, &probe);
    let s = wait_for(&b2, |s| s.daemon.mgrp_replayed > 0);
    assert_eq!(
        (s.daemon.mgrp_replayed, s.daemon.probes_received),
        (1, 0),
        "{s:#?}"
    );
    // A's packets after the restart are taken.
    train(&a, ADDR_B);
    let s = wait_for(&b2, |s| s.daemon.probes_received >= 20);
    assert_eq!(s.daemon.probes_received, 20, "{s:#?}");
    drop(b);
}

/// What becomes of B's state file after it was killed.
#[derive(Debug, Clone, Copy)]
enum AfterKill {
    /// Left as the killed daemon wrote it last.
    Kept,
    /// Deleted.
    Deleted,
    /// Cut to half its length.
    Truncated,
}

/// The last probe of the train `from` sends next, as `tap` sees it where it arrives.
fn last_probe_of_train(tap: &Socket, from: Ipv4Addr, udp: bool, case: &str) -> Vec<u8> {
    let mut last = None;
    while let Some(p) = next_probe(tap, from, udp) {
        let end = Packet::new_checked(&p[..]).is_ok_and(|p| p.last_in_train());
        last = Some(p);
        if end {
            break;
        }
    }
    last.unwrap_or_else(|| panic!("{case}: no probe of {from}'s seen"))
}

/// Kills `daemon` with SIGKILL (no save at stop) and does `after` to its state file;
/// returns its TUN's name, for the restart.
fn kill_and_leave(daemon: &mut Daemon, after: AfterKill, case: &str) -> String {
    daemon.process.signal(libc::SIGKILL);
    assert!(
        daemon.process.wait(Duration::from_secs(5)).is_some(),
        "{case}"
    );
    let tun = daemon.tun.clone();
    let file = mgrp_testbed::daemon_state_dir(&tun).join(format!("{tun}.replay"));
    match after {
        AfterKill::Kept => {}
        AfterKill::Deleted => std::fs::remove_file(&file).unwrap(),
        AfterKill::Truncated => {
            let text = std::fs::read(&file).unwrap();
            std::fs::write(&file, &text[..text.len() / 2]).unwrap();
        }
    }
    tun
}

/// Sends `from`'s trains to `to` until `receiver` has taken one (its clock passed the
/// restarted receiver's floor), for up to 20 s.
fn train_until_taken(from: &Daemon, to: Ipv4Addr, receiver: &Daemon, case: &str) {
    let start = Instant::now();
    let mut taken = 0;
    while taken == 0 && start.elapsed() < Duration::from_secs(20) {
        train(from, to);
        std::thread::sleep(Duration::from_millis(500));
        taken = receiver.stats().unwrap().daemon.probes_received;
    }
    assert!(
        taken > 0,
        "{case}: no train taken within 20 s of the restart: {:#?}",
        receiver.stats().unwrap().daemon
    );
}

/// A probe B took right before it was killed (SIGKILL: no save at stop), sent to it
/// again once it restarted, is refused as a replay, whether B finds its state file as
/// the killed daemon left it (saved up to 2 s before the train), deleted or cut
/// short; B says at warning level that it refuses older packets, and A's trains are
/// taken again once its clock has passed B's floor (a few seconds). Before the
/// bound, a daemon killed half a second after a train took that train's last
/// packet again.
#[test]
fn a_killed_daemon_does_not_take_a_packet_again() {
    let _serial = serial();
    if !root_or_skip("windows_across_a_kill") {
        return;
    }
    let key = TempFile::key(&Key::from_bytes([0x6f; 32]));
    for after in [AfterKill::Kept, AfterKill::Deleted, AfterKill::Truncated] {
        let case = format!("{after:?}");
        let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
        let route_b = format!("{ADDR_B}/32");
        let route_a = format!("{ADDR_A}/32");
        let a = Daemon::start(
            &net.a,
            mgrpd(),
            &["--route", &route_b, "--key-file", &key.arg()],
        )
        .expect("mgrpd on A");
        let args_b = ["--route", route_a.as_str(), "--key-file", &key.arg()];
        let mut b = Daemon::start(&net.b, mgrpd(), &args_b).expect("mgrpd on B");
        // B has saved once before the train (at start), and maybe again since.
        std::thread::sleep(Duration::from_millis(2500));
        let tap = tap(&net.b, false);
        train(&a, ADDR_B);
        let probe = last_probe_of_train(&tap, ADDR_A, false, &case);
        let s = wait_for(&b, |s| s.daemon.probes_received >= 20);
        assert_eq!(s.daemon.probes_received, 20, "{case}: {s:#?}");
        let tun = kill_and_leave(&mut b, after, &case);
        let b2 = Daemon::restart(&net.b, mgrpd(), &tun, &args_b).expect("mgrpd on B again");
        assert!(
            b2.process.log().contains("are refused as possible replays"),
            "{case}: {}",
            b2.process.log()
        );
        send_from(&net.a, false, 0, ADDR_B, &probe);
        let s = wait_for(&b2, |s| s.daemon.mgrp_replayed > 0);
        assert_eq!(
            (s.daemon.mgrp_replayed, s.daemon.probes_received),
            (1, 0),
            "{case}: {s:#?}"
        );
        // A's trains are taken again once its clock has passed B's floor.
        train_until_taken(&a, ADDR_B, &b2, &case);
        drop(b2);
        drop(b);
    }
}

/// The roaming variant: B knows A only by its key and learns A's endpoint from A's
/// packets. B is killed right after a train of A's, and the attacker, on a third
/// host, sends B the train's last packet from its own address once B is back,
/// whatever became of B's state file. B refuses it as a replay and moves A's
/// endpoint nowhere: A's next trains are taken from A's address once its clock has
/// passed B's floor, B's trains go to A, and the attacker receives nothing. (Were
/// the packet taken, B would have moved A to the attacker.) A sends no keepalives, so
/// that the replay is the only packet B gets before A's next train.
#[test]
fn a_killed_daemon_moves_no_roaming_peer_for_a_replay() {
    let _serial = serial();
    if !root_or_skip("roaming_replay_across_a_kill") {
        return;
    }
    let key = TempFile::key(&Key::from_bytes([0x7a; 32]));
    for after in [AfterKill::Kept, AfterKill::Deleted, AfterKill::Truncated] {
        let case = format!("{after:?}");
        let star = Star::new(&[None, None, None]).expect("topology");
        let (a_ip, b_ip, e_ip) = (star.addrs[0], star.addrs[1], star.addrs[2]);
        let ca = TempFile::config(&format!(
            "routes = [\"{b_ip}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{b_ip}/32\"\nkey-file = \"{}\"\nendpoint = \"{b_ip}:{UDP_PORT}\"\n",
            key.arg()
        ));
        let cb = TempFile::config(&format!(
            "routes = [\"{a_ip}/32\"]\nencap = \"udp\"\n\n[[peers]]\nprefix = \"{a_ip}/32\"\nkey-file = \"{}\"\n",
            key.arg()
        ));
        let cb_arg = cb.arg();
        let args_b = ["--config", cb_arg.as_str()];
        let a =
            Daemon::start(&star.hosts[0], mgrpd(), &["--config", &ca.arg()]).expect("mgrpd on A");
        let mut b = Daemon::start(&star.hosts[1], mgrpd(), &args_b).expect("mgrpd on B");
        // B has saved once before the train (at start), and maybe again since.
        std::thread::sleep(Duration::from_millis(2500));
        let tap = tap(&star.hosts[1], true);
        train(&a, b_ip);
        let probe = last_probe_of_train(&tap, a_ip, true, &case);
        let s = wait_for(&b, |s| s.daemon.probes_received >= 20);
        assert_eq!(
            (s.daemon.probes_received, s.daemon.peer_endpoint_changes),
            (20, 1),
            "{case}: {s:#?}"
        );
        let tun = kill_and_leave(&mut b, after, &case);
        let b2 = Daemon::restart(&star.hosts[1], mgrpd(), &tun, &args_b).expect("mgrpd on B again");
        let attacker = attacker_socket(&star.hosts[2], e_ip);
        attacker.send_to(&probe, (b_ip, UDP_PORT)).unwrap();
        let s = wait_for(&b2, |s| s.daemon.mgrp_replayed > 0);
        assert_eq!(
            (
                s.daemon.mgrp_replayed,
                s.daemon.probes_received,
                s.daemon.peer_endpoint_changes
            ),
            (1, 0, 0),
            "{case}: {s:#?}"
        );
        // A's trains are taken again once its clock has passed B's floor, and A is
        // found where it is.
        train_until_taken(&a, b_ip, &b2, &case);
        let s = b2.quiescent_stats().unwrap();
        assert_eq!(s.daemon.peer_endpoint_changes, 1, "{case}: {s:#?}");
        reaches_only(&b2, &a, a_ip, &attacker, e_ip, &case);
        drop(b2);
        drop(b);
    }
}

/// A daemon configuration: a route to `peer`, the key in `key`, and the next key of a
/// rotation in `next` if given.
fn keyed_config(peer: Ipv4Addr, key: &TempFile, next: Option<&TempFile>) -> String {
    let mut text = format!("routes = [\"{peer}/32\"]\nkey-file = \"{}\"\n", key.arg());
    if let Some(n) = next {
        text.push_str(&format!("next-key-file = \"{}\"\n", n.arg()));
    }
    text
}

/// Fails unless `s` shows no packet refused: no wrong tag, none unauthenticated,
/// replayed or reflected.
fn nothing_refused(who: &str, s: &mgrp_core::api::DaemonStats) {
    assert_eq!(
        (
            s.daemon.mgrp_bad_tag,
            s.daemon.mgrp_unauthenticated,
            s.daemon.mgrp_replayed,
            s.daemon.mgrp_reflected,
        ),
        (0, 0, 0, 0),
        "{who}: {s:#?}"
    );
}

/// Runs a TCP transfer from A to B that rides trains while the daemons' configurations
/// go through `steps` (A's text, B's text), each step reaching the daemons one after
/// the other (A, then B) with a SIGHUP, as an operator's would. The transfer must
/// arrive byte for byte, outlast the steps, and no packet be refused on the way.
fn rotation_under_a_transfer(name: &str, start: &(String, String), steps: &[(String, String)]) {
    // A 50 Mbit/s bottleneck keeps the transfer running through every step.
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("50mbit".into(), "64kb".into())),
        router: false,
        delay: None,
    })
    .expect("topology");
    let (ca, cb) = (TempFile::config(&start.0), TempFile::config(&start.1));
    let a = Daemon::start(&net.a, mgrpd(), &["--config", &ca.arg()]).expect("mgrpd on A");
    let b = Daemon::start(&net.b, mgrpd(), &["--config", &cb.arg()]).expect("mgrpd on B");
    let stop = Arc::new(AtomicBool::new(false));
    // Trains both ways, so that each daemon opens the other's packets (the transfer's
    // acknowledgements ride back) at every step.
    let trains = [(&a, ADDR_B), (&b, ADDR_A)]
        .map(|(d, to)| trains_every(d, IpAddr::V4(to), stop.clone(), Duration::from_millis(5)));
    let bytes = 16 << 20;
    let listener = tcp_listen(&net.b, IpAddr::V4(ADDR_B), 5471).expect("listen");
    let hup = |d: &Daemon| d.process.signal(libc::SIGHUP);
    let (t, rotated) = std::thread::scope(|scope| {
        let rotation = scope.spawn(|| {
            for (at_a, at_b) in steps {
                std::thread::sleep(Duration::from_millis(250));
                ca.rewrite(at_a);
                hup(&a);
                std::thread::sleep(Duration::from_millis(250));
                cb.rewrite(at_b);
                hup(&b);
            }
            Instant::now()
        });
        let t = tcp_transfer(&net.a, listener, IpAddr::V4(ADDR_B), 5471, bytes);
        (t, (rotation.join().unwrap(), Instant::now()))
    });
    stop.store(true, Ordering::Relaxed);
    let n = trains.map(|t| t.join().unwrap());
    let t = t.expect("the transfer");
    assert!(t.intact && t.received == bytes, "{name}: {t:?}");
    let (rotation_done, transfer_done) = rotated;
    assert!(
        rotation_done < transfer_done,
        "{name}: the transfer ended before the rotation did: the test proves nothing; {t:?}"
    );
    let (sa, sb) = (a.quiescent_stats().unwrap(), b.quiescent_stats().unwrap());
    for (who, d, s) in [("A", &a, &sa), ("B", &b, &sb)] {
        nothing_refused(&format!("{name}, {who}"), s);
        let log = d.process.log();
        assert_eq!(
            log.matches("keys reloaded").count(),
            steps.len(),
            "{name}, {who}: {log}"
        );
    }
    assert!(
        sb.daemon.riders_delivered > 0,
        "{name}: nothing rode to B: {sb:#?}"
    );
    assert!(
        sa.daemon.riders_delivered > 0,
        "{name}: no acknowledgement rode back to A: {sa:#?}"
    );
    eprintln!(
        "{name}: {bytes} B in {:.1} s beside {n:?} trains (A to B, B to A), {} riders delivered at B, {} at A",
        t.seconds, sb.daemon.riders_delivered, sa.daemon.riders_delivered
    );
}

/// The guide's rotation of a shared key, under a TCP transfer that rides trains: every
/// daemon takes the new key as its next key, then seals with it and keeps the old one
/// as next, then drops the old one.
#[test]
fn a_key_rotation_under_a_running_transfer_loses_nothing() {
    let _serial = serial();
    if !root_or_skip("key_rotation") {
        return;
    }
    let (old, new) = (
        TempFile::key(&Key::from_bytes([0x61; 32])),
        TempFile::key(&Key::from_bytes([0x62; 32])),
    );
    let both = |key, next| {
        (
            keyed_config(ADDR_B, key, next),
            keyed_config(ADDR_A, key, next),
        )
    };
    // (key-file, next-key-file) at each step.
    let steps = [
        both(&old, Some(&new)),
        both(&new, Some(&old)),
        both(&new, None),
    ];
    rotation_under_a_transfer("rotation", &both(&old, None), &steps);
}

/// Keys from key pairs, no secret copied between the hosts: each daemon holds its own
/// private key and names the other by its public key. Then the guide's rotation of A's
/// key pair under a running transfer: A adds its new private key as its next one and
/// B A's new public key as the next one; A seals with the new pair (the old one next)
/// and B takes the new public key (the old one next); then both drop the old.
#[test]
fn a_key_pair_rotation_under_a_running_transfer_loses_nothing() {
    use mgrp_core::pair::{PrivateKey, PublicKey};
    let _serial = serial();
    if !root_or_skip("key_pair_rotation") {
        return;
    }
    let private = |b: u8| PrivateKey::from_bytes([b; 32]);
    let (a_old, a_new, b_own) = (private(0x71), private(0x72), private(0x73));
    let files = [&a_old, &a_new, &b_own].map(|k| TempFile::secret(&k.to_hex()));
    let [a_old_file, a_new_file, b_file] = &files;
    let at_a = |key: &TempFile, next: Option<&TempFile>| {
        let mut text = format!(
            "routes = [\"{ADDR_B}/32\"]\nprivate-key-file = \"{}\"\n",
            key.arg()
        );
        if let Some(n) = next {
            text.push_str(&format!("next-private-key-file = \"{}\"\n", n.arg()));
        }
        text.push_str(&format!(
            "[[peers]]\nprefix = \"{ADDR_B}/32\"\npublic-key = \"{}\"\n",
            b_own.public()
        ));
        text
    };
    let at_b = |public: PublicKey, next: Option<PublicKey>| {
        let mut text = format!(
            "routes = [\"{ADDR_A}/32\"]\nprivate-key-file = \"{}\"\n\
             [[peers]]\nprefix = \"{ADDR_A}/32\"\npublic-key = \"{public}\"\n",
            b_file.arg()
        );
        if let Some(n) = next {
            text.push_str(&format!("next-public-key = \"{n}\"\n"));
        }
        text
    };
    let (old_pub, new_pub) = (a_old.public(), a_new.public());
    let steps = [
        (
            at_a(a_old_file, Some(a_new_file)),
            at_b(old_pub, Some(new_pub)),
        ),
        (
            at_a(a_new_file, Some(a_old_file)),
            at_b(new_pub, Some(old_pub)),
        ),
        (at_a(a_new_file, None), at_b(new_pub, None)),
    ];
    rotation_under_a_transfer(
        "key-pair rotation",
        &(at_a(a_old_file, None), at_b(old_pub, None)),
        &steps,
    );
}

/// Without keys towards a peer that is not on this host, mgrpd says at start what
/// that exposes.
#[test]
fn a_daemon_without_keys_says_what_that_exposes() {
    let _serial = serial();
    if !root_or_skip("no_key_warning") {
        return;
    }
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let route = format!("{ADDR_B}/32");
    let a = Daemon::start(&net.a, mgrpd(), &["--route", &route]).expect("mgrpd");
    let log = a.process.log();
    assert!(log.contains("no key: any host that can send"), "{log}");
}

/// Three daemons from one mesh description, each given only the description, its
/// name in it and its own private key: no route, no peer table, no key file is
/// written per host, and no secret is copied. A TCP transfer from the first to the
/// second rides trains both ways and arrives whole, the third daemon's pairs work as
/// well (probes from the first arrive there), and no packet is refused anywhere.
#[test]
fn daemons_take_their_peers_keys_and_routes_from_one_mesh_description() {
    use mgrp_core::pair::PrivateKey;
    let _serial = serial();
    if !root_or_skip("mesh_description") {
        return;
    }
    // A 50 Mbit/s downlink into n1 keeps the transfer running for seconds, beside many
    // trains.
    let star = Star::new(&[None, Some(("50mbit".into(), "64kb".into())), None]).expect("topology");
    let keys: Vec<PrivateKey> = (0..3u8)
        .map(|i| PrivateKey::from_bytes([0x81 + i; 32]))
        .collect();
    let mut mesh = String::new();
    for (i, addr) in star.addrs.iter().enumerate() {
        mesh.push_str(&format!(
            "[[member]]\nname = \"n{i}\"\naddress = \"{addr}\"\npublic-key = \"{}\"\n\n",
            keys[i].public()
        ));
    }
    mesh.push_str(
        "[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"n0\", \"n1\", \"n2\"]\nmethods = [\"pathchirp\"]\n",
    );
    let mesh = TempFile::config(&mesh);
    let own: Vec<TempFile> = keys.iter().map(|k| TempFile::secret(&k.to_hex())).collect();
    let daemons: Vec<Daemon> = (0..3)
        .map(|i| {
            let node = format!("n{i}");
            let args = [
                "--mesh",
                &mesh.arg(),
                "--node",
                &node,
                "--private-key-file",
                &own[i].arg(),
            ];
            Daemon::start(&star.hosts[i], mgrpd(), &args).expect("mgrpd")
        })
        .collect();
    let addr = |i: usize| IpAddr::V4(star.addrs[i]);
    let stop = Arc::new(AtomicBool::new(false));
    let trains = [(0, 1), (1, 0), (0, 2)].map(|(from, to)| {
        trains_every(
            &daemons[from],
            addr(to),
            stop.clone(),
            Duration::from_millis(5),
        )
    });
    let bytes = 16 << 20;
    let listener = tcp_listen(&star.hosts[1], addr(1), 5481).expect("listen");
    let t = tcp_transfer(&star.hosts[0], listener, addr(1), 5481, bytes);
    stop.store(true, Ordering::Relaxed);
    let sent = trains.map(|t| t.join().unwrap());
    let t = t.expect("the transfer");
    assert!(t.intact && t.received == bytes, "{t:?}");
    let stats: Vec<_> = daemons
        .iter()
        .map(|d| d.quiescent_stats().unwrap())
        .collect();
    for (i, s) in stats.iter().enumerate() {
        nothing_refused(&format!("n{i}"), s);
    }
    assert!(
        stats[1].daemon.riders_delivered > 0,
        "nothing rode to n1: {:#?}",
        stats[1]
    );
    assert!(
        stats[0].daemon.riders_delivered > 0,
        "no acknowledgement rode back to n0: {:#?}",
        stats[0]
    );
    assert!(
        stats[2].daemon.probes_received > 0,
        "n0's trains never reached n2: {:#?}",
        stats[2]
    );
    eprintln!(
        "mesh: {bytes} B in {:.1} s beside {sent:?} trains (n0 to n1, n1 to n0, n0 to n2); riders delivered at n1 {}, at n0 {}; probes at n2 {}",
        t.seconds,
        stats[1].daemon.riders_delivered,
        stats[0].daemon.riders_delivered,
        stats[2].daemon.probes_received
    );
}
