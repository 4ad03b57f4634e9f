//! pathload-rs as a library, over plain UDP on loopback (no root, no mgrpd): a
//! measurement runs against a `Server` and reports its bytes; another runs beside
//! others of its host, and one over the host's limit is told the sender is busy and
//! why, while a traffic query is answered;
//! a stop flag ends both sides; an unreachable sender is an error of its own.

use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pathload_rs::Mode;
use pathload_rs::control::Transport;
use pathload_rs::tool::{
    BUSY, MeasureError, MeasureOptions, Progress, ServeEvent, ServeOptions, Server, measure,
    sender_traffic,
};

/// A UDP port nothing listens on right now.
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn server() -> Server {
    let opts = ServeOptions {
        port: 0,
        bind: Some("127.0.0.1".parse().unwrap()),
        probe_port: free_udp_port(),
        // No mgrpd: traffic queries are answered with an error saying so.
        socket: std::env::temp_dir().join(format!("no-mgrpd-{}.sock", std::process::id())),
        ..ServeOptions::new(Transport::Udp)
    };
    Server::bind(opts).unwrap()
}

fn options(port: u16, time: Duration) -> MeasureOptions {
    let mut o = MeasureOptions {
        mode: Mode::Fast,
        max_time: time,
        max_fleets: 4,
        ..MeasureOptions::new("127.0.0.1", Transport::Udp)
    };
    o.session.port = port;
    o.session.probe_port = free_udp_port();
    o
}

/// Sets its flag when dropped, on a panic too.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A receiver that has said hello: it holds one of its host's measurement places.
fn hold(port: u16) -> std::net::TcpStream {
    let mut holder = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    writeln!(
        holder,
        r#"{{"msg":"hello","version":{},"transport":"udp","probe_port":{},"piggyback":false}}"#,
        pathload_rs::control::CONTROL_VERSION,
        free_udp_port()
    )
    .unwrap();
    let mut hello = String::new();
    BufReader::new(&holder).read_line(&mut hello).unwrap();
    assert!(hello.contains(r#""msg":"hello""#), "{hello}");
    holder
}

#[test]
fn measurements_run_side_by_side_until_the_host_limit_says_busy() {
    let per_host = mgrp_tool::server::MAX_MEASUREMENTS_PER_HOST;
    let server = server();
    let port = server.local_addr().unwrap().port();
    let stop = AtomicBool::new(false);
    let (measured, beside, busy, events) = std::thread::scope(|s| {
        let serving = s.spawn(|| {
            let mut events = Vec::new();
            server
                .serve(true, &stop, &mut |ev| events.push(ev))
                .unwrap();
            events
        });
        // The server stops whatever happens below, so a failed check fails the test
        // rather than leaving it waiting for the server.
        let _stop = StopOnDrop(&stop);
        let (mut started, mut streams) = (false, 0);
        let m = measure(
            &options(port, Duration::from_secs(4)),
            &AtomicBool::new(false),
            &mut |p| match p {
                Progress::Started { .. } => started = true,
                Progress::Stream { .. } => streams += 1,
                Progress::Event(_) => {}
            },
        );
        // Receivers that have said hello hold all but one of this host's places: a
        // measurement still runs beside them.
        let mut holders: Vec<_> = (1..per_host).map(|_| hold(port)).collect();
        // A silent connection holds nothing.
        let _silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let beside = measure(
            &options(port, Duration::from_secs(2)),
            &AtomicBool::new(false),
            &mut |_| {},
        );
        // With every place of the host held, the next one is turned away at once,
        // told which limit says so, while a traffic query is answered (here: that
        // there is no mgrpd to ask).
        holders.push(hold(port));
        let q = sender_traffic("127.0.0.1", port, None).expect_err("no mgrpd");
        assert!(q.to_string().contains("no traffic figures"), "{q}");
        let asked = Instant::now();
        let busy = measure(
            &options(port, Duration::from_secs(2)),
            &AtomicBool::new(false),
            &mut |_| {},
        );
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        drop(holders);
        stop.store(true, Ordering::Relaxed);
        ((m, started, streams), beside, busy, serving.join().unwrap())
    });
    let (m, started, streams) = measured;
    let m = m.unwrap();
    assert!(started);
    assert!(streams > 0, "no stream was asked for");
    assert!(m.outcome.probe_bytes > 0);
    assert_eq!(m.outcome.rider_bytes, 0);
    assert!(m.end.peer_gone.is_none(), "{m:?}");
    let beside = beside.expect("a measurement beside others of its host runs");
    assert!(beside.outcome.probe_bytes > 0);
    let e = busy.expect_err("a receiver over its host's limit is turned away");
    assert!(
        matches!(&e, MeasureError::Busy(m) if m.starts_with(BUSY) && m.contains("the most one host may")),
        "{e:?}"
    );
    assert!(
        matches!(events.first(), Some(ServeEvent::Connected(_, tool)) if tool == "pathload-rs"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ServeEvent::Refused(_, m) if m.starts_with(BUSY))),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, ServeEvent::Done(_, Ok(n)) if *n > 0))
            .count(),
        2,
        "{events:?}"
    );
}

#[test]
fn stop_ends_a_measurement_and_the_server() {
    let server = server();
    let port = server.local_addr().unwrap().port();
    let (serve_stop, measure_stop) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let serving = s.spawn(|| server.serve(true, &serve_stop, &mut |_| {}));
        let measuring = s.spawn(|| {
            measure(
                &options(port, Duration::from_secs(60)),
                &measure_stop,
                &mut |_| {},
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        let asked = Instant::now();
        measure_stop.store(true, Ordering::Relaxed);
        let m = measuring.join().unwrap().unwrap();
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        assert!(!m.converged());
        serve_stop.store(true, Ordering::Relaxed);
        serving.join().unwrap().unwrap();
    });
}

#[test]
fn an_unreachable_sender_is_its_own_error() {
    // A port just freed: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = measure(
        &options(port, Duration::from_secs(2)),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, MeasureError::Unreachable(_)), "{e:?}");
    assert!(e.to_string().contains("cannot reach the sender"), "{e}");
}
