//! Shared by the namespace tests and the accuracy bench: the two-host topology with
//! its tbf bottleneck (on the sending host's egress, or on a router between the
//! hosts), the daemons (this very binary started as `... mgrpd ...`), the cross
//! traffic of each case, and one pathload-rs measurement from host A to host B read
//! back as its JSON result with the truth it must find.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mgrp_testbed::tool::{daemons_for, snd_rcv};
use mgrp_testbed::traffic::{Source, ip_level_truth, tcp_paced_source, tcp_source, udp_cbr};
use mgrp_testbed::{ADDR_B, TwoHostOptions, TwoHosts};
use serde_json::Value;

const PATHLOAD: &str = env!("CARGO_BIN_EXE_pathload-rs");

/// Where the bottleneck is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shaper {
    /// On the sending host's own egress (A's veth): the first queue of the path is the
    /// sender's.
    Sender,
    /// On a router between the hosts, towards B.
    Router,
}

impl Shaper {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Sender => "sender",
            Self::Router => "router",
        }
    }
}

/// Hosts A and B with a `tbf rate R burst B` bottleneck from A to B (10 Mbit/s and
/// 1540 bytes unless the case says otherwise), placed as the case's shaper says.
pub(crate) fn net(case: &Case) -> anyhow::Result<TwoHosts> {
    TwoHosts::new(&TwoHostOptions {
        bottleneck: Some((
            format!("{}kbit", (case.rate * 1000.0).round()),
            case.burst.to_string(),
        )),
        router: case.shaper == Shaper::Router,
    })
}

pub(crate) use mgrp_testbed::tool::{OTHER_B, add_other_b};

/// One finished measurement.
#[derive(Debug)]
pub(crate) struct Run {
    /// The `"event": "result"` object.
    pub(crate) result: Value,
    /// rcv's exit code.
    pub(crate) code: i32,
    /// Wall time of rcv.
    pub(crate) wall: Duration,
}

/// A number of the result.
pub(crate) fn f(v: &Value, key: &str) -> anyhow::Result<f64> {
    v[key]
        .as_f64()
        .with_context(|| format!("{key} missing in {v}"))
}

/// The share of the truth by which a range is widened before it must hold the truth
/// in the namespace test: a wide band for a behaviour test on a shared machine (the
/// accuracy bench measures how close the estimates really are, and how often runs
/// fall in this band).
#[allow(dead_code)]
pub(crate) const BAND: f64 = 0.2;

/// The traffic that shares the bottleneck with the probes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cross {
    /// None.
    Quiet,
    /// Constant-rate UDP (1490-byte datagrams, Mbit/s of payload) to a second address
    /// of B outside the tunnel: another host's traffic.
    Cbr(f64),
    /// The same to B's routed address: over MGRP it enters the tunnel and rides.
    CbrRiding(f64),
    /// A TCP flow paced by its sender to this many Mbit/s of payload, from A to B's
    /// routed address: over MGRP its packets ride in the probes.
    Tcp(f64),
    /// A TCP flow whose application writes this many Mbit/s in a burst every 10 ms
    /// (5 KB at 4 Mbit/s, 4 ms of a 10 Mbit/s link), to B's routed address. Over plain
    /// UDP the bursts put a sawtooth into the probes' delays that hides their trend.
    /// Measured by the accuracy bench only (`--cross bursty`).
    #[allow(dead_code)]
    BurstyTcp(f64),
}

impl Cross {
    pub(crate) fn name(self) -> String {
        match self {
            Self::Quiet => "quiet".into(),
            Self::Cbr(r) => format!("{r} Mbit/s UDP"),
            Self::CbrRiding(r) => format!("{r} Mbit/s UDP riding"),
            Self::Tcp(r) => format!("{r} Mbit/s TCP"),
            Self::BurstyTcp(r) => format!("{r} Mbit/s bursty TCP"),
        }
    }
}

/// One measurement setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Case {
    pub(crate) shaper: Shaper,
    pub(crate) transport: &'static str,
    pub(crate) cross: Cross,
    /// The bottleneck's rate, Mbit/s (tbf counts Ethernet headers).
    pub(crate) rate: f64,
    /// Its bucket, bytes.
    pub(crate) burst: u32,
}

impl Case {
    /// The tests' bottleneck: 10 Mbit/s, a bucket of one frame.
    pub(crate) fn ten(shaper: Shaper, transport: &'static str, cross: Cross) -> Self {
        Self {
            shaper,
            transport,
            cross,
            rate: 10.0,
            burst: 1540,
        }
    }
}

/// A measurement of a case, with the truth it should have found.
#[derive(Debug)]
pub(crate) struct Measured {
    pub(crate) run: Run,
    /// Available bandwidth at the IP level for the probes sent near it, Mbit/s, from the cross
    /// traffic's rate while the measurement ran.
    pub(crate) truth: f64,
    /// The cross traffic's payload rate while the measurement ran, Mbit/s.
    pub(crate) cross_mbps: f64,
    /// A paced TCP flow's most data segments within one millisecond (1 when it left
    /// one segment at a time, as the case means).
    pub(crate) cross_burst: Option<u64>,
}

const CROSS_PORT: u16 = 9000;

/// Builds the case's hosts, daemons and cross traffic, runs one measurement with
/// `extra` flags for rcv, and tears it all down.
pub(crate) fn run_case(case: Case, max_time: u64, extra: &[&str]) -> anyhow::Result<Measured> {
    let net = net(&case)?;
    // The paper's mode: application traffic rides in the probes throughout, which is
    // what the rider adjustment is measured against. (With routes on demand the
    // stream rides only around the streams and competes with them between, a mix the
    // wide bands here do not cover.)
    let pair = daemons_for(&net, case.transport, &["--hold-mode", "always"])?;
    add_other_b(&net)?;
    let to = |riding: bool| std::net::IpAddr::V4(if riding { ADDR_B } else { OTHER_B });
    // Payload bytes per IP byte of each kind of cross traffic.
    let (source, ip_size, payload): (Option<Source>, u32, u32) = match case.cross {
        Cross::Quiet => (None, 1490, 1462),
        Cross::Cbr(r) | Cross::CbrRiding(r) => (
            Some(udp_cbr(
                &net.a,
                &net.b,
                to(matches!(case.cross, Cross::CbrRiding(_))),
                CROSS_PORT,
                r,
                1490,
            )?),
            1490,
            1462,
        ),
        Cross::Tcp(r) => (
            Some(tcp_paced_source(&net.a, &net.b, to(true), CROSS_PORT, r)?),
            1500,
            1448,
        ),
        Cross::BurstyTcp(r) => (
            Some(tcp_source(&net.a, &net.b, to(true), CROSS_PORT, Some(r))?),
            1500,
            1448,
        ),
    };
    // Let the cross traffic settle (TCP's slow start) before measuring.
    std::thread::sleep(Duration::from_millis(500));
    let before = (source.as_ref().map_or(0, Source::bytes), Instant::now());
    // A TCP flow's bursts are read while the measurement runs, not at its start.
    if let Some(s) = &source {
        s.reset_max_segments_per_ms();
    }
    let max = max_time.to_string();
    let mut args = vec!["--max-time", max.as_str()];
    args.extend_from_slice(extra);
    let limit = Duration::from_secs(max_time + 20);
    let rcv = snd_rcv(
        &net,
        Path::new(PATHLOAD),
        case.transport,
        pair.as_ref(),
        &args,
        limit,
    )?;
    let run = Run {
        result: rcv.result()?.clone(),
        code: rcv.code,
        wall: rcv.wall,
    };
    if let (Some((a, b)), Some(_)) = (&pair, std::env::var_os("MGRP_TEST_LOG")) {
        for (name, d) in [("A", a), ("B", b)] {
            let c = d.stats().map(|s| s.daemon).ok();
            eprintln!("--- mgrpd {name} ---\n{}{c:?}", d.process.log());
        }
    }
    let bytes = source.as_ref().map_or(0, Source::bytes) - before.0;
    let cross_mbps = bytes as f64 * 8.0 / before.1.elapsed().as_secs_f64() / 1e6;
    let cross_burst = source.as_ref().and_then(Source::max_segments_per_ms);
    drop(source);
    let ip_mbps = cross_mbps * f64::from(ip_size) / f64::from(payload);
    // The truth in IP bytes of the probes pathload sends near it (tbf counts each
    // frame's Ethernet header): 228 bytes at 10 Mbit/s, the largest at a gigabit.
    let wire = ip_level_truth(case.rate, 1500, &[(ip_mbps, ip_size)]) * 1514.0 / 1500.0;
    let size = pathload_rs::rate::Limits::new(1500, 0).shape(wire).size;
    Ok(Measured {
        run,
        truth: ip_level_truth(case.rate, size, &[(ip_mbps, ip_size)]),
        cross_mbps,
        cross_burst,
    })
}
