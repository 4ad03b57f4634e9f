//! The paper's testbed: traffic from the source and cross hosts reaches the sinks
//! through the routers, and the bottleneck limits it to its rate and counts what it
//! passed. Needs root (network namespaces).

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use mgrp_testbed::accounting::Kind;
use mgrp_testbed::paper::{Bottleneck, C2, M5, Testbed};
use mgrp_testbed::traffic::{Steps, Web, tcp_source, udp_cbr, udp_steps, web};

#[test]
fn traffic_crosses_the_bottleneck_at_its_rate_and_is_counted_there() {
    if !mgrp_testbed::root_or_skip("traffic_crosses_the_bottleneck") {
        return;
    }
    let tb = Testbed::new(Bottleneck::default()).expect("testbed");
    // Both greedy flows share the 10 Mbit/s bottleneck.
    let source = tcp_source(&tb.m3, &tb.m5, IpAddr::V4(M5), 7100, None).expect("m3 to m5");
    let cross = tcp_source(&tb.c1, &tb.c2, IpAddr::V4(C2), 7101, None).expect("c1 to c2");
    std::thread::sleep(Duration::from_millis(500));
    let (before, t0) = (tb.bottleneck_counters().expect("counters"), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let (after, t1) = (tb.bottleneck_counters().expect("counters"), Instant::now());
    let (s, c) = (source.mbps(), cross.mbps());
    drop(source);
    drop(cross);
    let sent = after.bytes - before.bytes;
    eprintln!(
        "source {s:.2} Mbit/s, cross {c:.2} Mbit/s; bottleneck passed {sent} bytes, dropped {} packets",
        after.dropped - before.dropped
    );
    assert!(s > 0.5 && c > 0.5, "both flows must cross: {s:.2} {c:.2}");
    // Payload is a little under the link rate; a wide band, the machine is noisy.
    assert!(
        (5.0..=10.5).contains(&(s + c)),
        "together {:.2} Mbit/s through a 10 Mbit/s bottleneck",
        s + c
    );
    // The link's own count over the same seconds: the rate, counting link headers.
    let link_mbps = sent as f64 * 8.0 / (t1 - t0).as_secs_f64() / 1e6;
    assert!(
        (7.0..=10.5).contains(&link_mbps),
        "bottleneck passed {link_mbps:.2} Mbit/s"
    );
}

/// The link's accounting sees what the qdisc passed, sorted by sender.
#[test]
fn the_accounting_matches_the_queue_and_sorts_by_sender() {
    if !mgrp_testbed::root_or_skip("the_accounting_matches") {
        return;
    }
    let tb = Testbed::new(Bottleneck::default()).expect("testbed");
    let account = tb.account().expect("accounting");
    let before = tb.bottleneck_counters().expect("counters");
    let source = tcp_source(&tb.m3, &tb.m5, IpAddr::V4(M5), 7102, Some(3.0)).expect("m3 to m5");
    let cross = udp_cbr(&tb.c1, &tb.c2, IpAddr::V4(C2), 7103, 4.0, 1000).expect("c1 to c2");
    std::thread::sleep(Duration::from_secs(3));
    drop(source);
    drop(cross);
    // Let the last frames cross the delay line.
    std::thread::sleep(Duration::from_millis(300));
    let after = tb.bottleneck_counters().expect("counters");
    let series = account.stop().expect("accounting ran");
    let total = series.total(0, usize::MAX);
    let queue = after.bytes - before.bytes;
    let seen: u64 = total.bytes.iter().sum();
    eprintln!(
        "queue passed {queue} bytes; the link saw {seen}: source {} cross {} other {}",
        total.get(Kind::Source),
        total.get(Kind::Cross),
        total.get(Kind::Other)
    );
    // Everything the queue passed arrives (no loss configured), give or take frames
    // in flight when the counters were read.
    assert!(
        seen as f64 >= 0.97 * queue as f64 && seen as f64 <= 1.03 * queue as f64 + 3000.0,
        "link saw {seen} bytes, queue passed {queue}"
    );
    let mbps = |k| total.get(k) as f64 * 8.0 / 3.0 / 1e6;
    assert!(
        (2.0..4.0).contains(&mbps(Kind::Source)),
        "source {:.2}",
        mbps(Kind::Source)
    );
    assert!(
        (3.0..5.0).contains(&mbps(Kind::Cross)),
        "cross {:.2}",
        mbps(Kind::Cross)
    );
    assert_eq!(total.get(Kind::ProbeOnly) + total.get(Kind::Piggybacked), 0);
}

/// The delay line adds its round trip, and drops what it is told to.
#[test]
fn the_delay_line_delays_and_drops() {
    if !mgrp_testbed::root_or_skip("the_delay_line") {
        return;
    }
    let tb = Testbed::new(Bottleneck {
        loss: 0.2,
        ..Bottleneck::default()
    })
    .expect("testbed");
    // A TCP handshake takes one round trip; its SYN may be lost, so take the fastest
    // of a few (a lost SYN costs a second).
    let listener = mgrp_testbed::tcp_listen(&tb.c2, IpAddr::V4(C2), 7104).expect("listen");
    let mut rtts = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let s = tb
            .c1
            .run(|| {
                TcpStream::connect_timeout(
                    &SocketAddr::new(IpAddr::V4(C2), 7104),
                    Duration::from_secs(5),
                )
            })
            .expect("thread");
        if s.is_ok() {
            rtts.push(t.elapsed());
            let _ = listener.accept();
        }
    }
    let fastest = rtts
        .iter()
        .min()
        .copied()
        .expect("some connection succeeded");
    eprintln!("handshakes: {rtts:?}");
    assert!(
        fastest >= Duration::from_millis(39) && fastest < Duration::from_millis(80),
        "handshake took {fastest:?}, the round trip is 40 ms"
    );
    // 20 % loss forward: about 800 of 1000 datagrams arrive.
    let line = tb.delay.as_ref().expect("line");
    let lost0 = line
        .counters
        .lost
        .load(std::sync::atomic::Ordering::Relaxed);
    let cross = udp_cbr(&tb.c1, &tb.c2, IpAddr::V4(C2), 7105, 2.0, 250).expect("c1 to c2");
    std::thread::sleep(Duration::from_secs(1));
    drop(cross);
    let lost = line
        .counters
        .lost
        .load(std::sync::atomic::Ordering::Relaxed)
        - lost0;
    let forward = line
        .counters
        .forward
        .load(std::sync::atomic::Ordering::Relaxed);
    let share = lost as f64 / (lost + forward) as f64;
    eprintln!("lost {lost}, passed {forward}: {:.1} %", share * 100.0);
    assert!((0.12..0.28).contains(&share), "lost {:.1} %", share * 100.0);
}

/// STEP cross traffic follows its steps on the link; web flows cross it too.
#[test]
fn step_and_web_cross_traffic_cross_the_bottleneck() {
    if !mgrp_testbed::root_or_skip("step_and_web") {
        return;
    }
    let tb = Testbed::new(Bottleneck::default()).expect("testbed");
    let account = tb.account().expect("accounting");
    let steps = Steps {
        mbps: vec![2.0, 6.0],
        step: Duration::from_secs(2),
    };
    let cross = udp_steps(&tb.c1, &tb.c2, IpAddr::V4(C2), 7106, steps, 1000).expect("steps");
    std::thread::sleep(Duration::from_secs(4));
    let received = cross.stop();
    std::thread::sleep(Duration::from_millis(200));
    let series = account.snapshot();
    let rate = |s: usize| series.seconds.get(s).map_or(0.0, |x| x.mbps(Kind::Cross));
    eprintln!(
        "steps: {:?} Mbit/s per second on the link, {received} bytes received",
        (0..5).map(rate).collect::<Vec<_>>()
    );
    // Second 1 is inside the 2 Mbit/s step, second 3 inside the 6 Mbit/s one (link
    // bytes count headers: a little above the IP rate).
    assert!((1.5..2.8).contains(&rate(1)), "{:.2}", rate(1));
    assert!((5.0..7.0).contains(&rate(3)), "{:.2}", rate(3));
    drop(account);

    let web = web(&tb.c1, &tb.c2, IpAddr::V4(C2), 7107, &Web::default()).expect("web");
    std::thread::sleep(Duration::from_secs(5));
    let bytes = web.stop();
    eprintln!("web: {bytes} bytes in 5 s");
    let expected = Web::default().schedule(Duration::from_secs(5));
    assert!(
        expected.is_empty() || bytes > 0,
        "{} flows were due and none delivered a byte",
        expected.len()
    );
}
