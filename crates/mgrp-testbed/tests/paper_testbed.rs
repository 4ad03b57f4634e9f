//! The paper's testbed: traffic from the source and cross hosts reaches the sinks
//! through the routers, and the bottleneck limits it to its rate and counts what it
//! passed. Needs root (network namespaces).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use mgrp_testbed::paper::{Bottleneck, C2, M5, Testbed};
use mgrp_testbed::traffic::tcp_source;

#[test]
fn traffic_crosses_the_bottleneck_at_its_rate_and_is_counted_there() {
    if !mgrp_testbed::is_root() {
        eprintln!("traffic_crosses_the_bottleneck: skipped, needs root");
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
