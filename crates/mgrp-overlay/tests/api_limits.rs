//! The node's API against clients that open connections and say nothing, or trickle:
//! thousands of idle connections leave the API answering and the node's measurement
//! sender serving; one network's connections are bounded; a client that does not
//! finish its request's headers in time is closed. Loopback only, no root.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Api, free_port, json};
use mgrp_overlay::api::conns::{ConnLimits, MAX_CONNECTIONS_PER_NETWORK};
use mgrp_overlay::config::Config;
use mgrp_overlay::node::Node;

/// A connection to `to` from `from` (an address of 127.0.0.0/8: each its own
/// network), that sends nothing.
fn idle_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::from((from, 0)).into())?;
    s.connect(&to.into())?;
    Ok(s.into())
}

/// Whether the server closed `s` within `within` (a read ends or fails).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 512];
    let start = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // An answer (a 408, say) before the close.
            Ok(_) => {}
            Err(e) if mgrp_rt::rx::nothing_yet(&e) => return false,
            Err(_) => return true,
        }
        if start.elapsed() > within {
            return false;
        }
    }
}

/// Node A serving UDP measurements, its API on a thread.
fn node_a_with_api(limits: ConnLimits) -> (Api, u16) {
    let toml = "name = \"a\"\n[serve]\ntransports = [\"udp\"]\nudp-port = 0\n";
    let api = Api::start_with(Config::from_toml(toml, None).unwrap(), limits);
    let port = api.node.as_ref().unwrap().serving()[0].1.port();
    (api, port)
}

/// B measuring the link from A on `a_port` every 2 s.
fn node_b(a_port: u16) -> Node {
    let toml = format!(
        "name = \"b\"\nprobe-port-base = {}\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"2s\"\ntime-limit = \"5s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n",
        free_port()
    );
    Node::start(Config::from_toml(&toml, None).unwrap()).unwrap()
}

/// 2,000 connections that say nothing (from 40 addresses, 50 each: under the bound
/// per network) are held open at A's API while `/v1/links` answers at once and B's
/// measurement of A, served by A's sender in the same process, completes: the bounds
/// (4,096 in all, 64 per network) leave room for this many, and the process's
/// descriptors (raised to the hard limit at start) for them and the sender's.
#[test]
fn thousands_of_idle_connections_leave_the_api_and_the_sender_serving() {
    let (a, a_port) = node_a_with_api(ConnLimits::default());
    let mut idle = Vec::new();
    for host in 1..=40u8 {
        for _ in 0..50 {
            idle.push(
                idle_from(Ipv4Addr::new(127, 0, 3, host), a.addr).expect("an idle connection"),
            );
        }
    }
    let start = Instant::now();
    let (status, links) = json(a.addr, "GET", "/v1/links");
    assert_eq!(status, 200, "{links}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the API took {:?} beside {} idle connections",
        start.elapsed(),
        idle.len()
    );
    let b = node_b(a_port);
    let shared = b.shared();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if shared.history("from-a", 10).is_some_and(|h| !h.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let runs = shared.history("from-a", 10).unwrap_or_default();
    assert!(
        !runs.is_empty(),
        "B's measurement of A did not complete beside {} idle connections",
        idle.len()
    );
    b.stop();
    drop(idle);
}

/// One network's connections beyond [`MAX_CONNECTIONS_PER_NETWORK`] are closed at
/// once; another network's are served; a connection given back makes room.
#[test]
fn one_networks_connections_are_bounded() {
    let (a, _) = node_a_with_api(ConnLimits::default());
    let me = Ipv4Addr::new(127, 0, 4, 1);
    let mut held: Vec<TcpStream> = (0..MAX_CONNECTIONS_PER_NETWORK)
        .map(|_| idle_from(me, a.addr).unwrap())
        .collect();
    // Held ones stay open (the header timeout is 10 s away)...
    assert!(!closed_within(&mut held[0], Duration::from_millis(300)));
    // ...one more from the same network is closed at once.
    let mut over = idle_from(me, a.addr).unwrap();
    assert!(
        closed_within(&mut over, Duration::from_secs(3)),
        "connection {} from one network was kept",
        MAX_CONNECTIONS_PER_NETWORK + 1
    );
    // Another network is served.
    let mut other = idle_from(Ipv4Addr::new(127, 0, 4, 2), a.addr).unwrap();
    other
        .write_all(b"GET /v1/links HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    other.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A place given back is taken again.
    held.pop();
    std::thread::sleep(Duration::from_millis(200));
    let mut again = idle_from(me, a.addr).unwrap();
    assert!(!closed_within(&mut again, Duration::from_millis(300)));
}

/// A connection that sends nothing, or trickles its request's headers a byte at a
/// time, is closed once the header timeout has passed; one that asks in time is
/// answered, and closed the same time after its answer when it says nothing more.
#[test]
fn clients_that_do_not_finish_their_headers_are_closed() {
    let limits = ConnLimits {
        header_read_timeout: Duration::from_secs(1),
        ..ConnLimits::default()
    };
    let (a, _) = node_a_with_api(limits);
    let mut silent = TcpStream::connect(a.addr).unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    let mut trickle = TcpStream::connect(a.addr).unwrap();
    let request = b"GET /v1/links HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let start = Instant::now();
    let mut cut = false;
    for b in request {
        if trickle.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if start.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    assert!(
        cut || closed_within(&mut trickle, Duration::from_secs(5)),
        "a client trickling its headers was kept {:?}",
        start.elapsed()
    );
    // In time: answered, then closed when idle.
    let mut prompt = TcpStream::connect(a.addr).unwrap();
    prompt.write_all(request).unwrap();
    prompt
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    let n = prompt.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    assert!(closed_within(&mut prompt, Duration::from_secs(5)));
}
