//! Shared by the namespace tests and the accuracy bench: the two-host topology with
//! its tbf bottleneck (on the sending host's egress, or on a router between the
//! hosts), the daemons (this very binary started as `... mgrpd ...`), the cross
//! traffic of each case, and one pathload-rs measurement from host A to host B read
//! back as its JSON result with the truth it must find.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mgrp_testbed::tool::{daemons_for, snd_rcv};
use mgrp_testbed::traffic::{
    Source, ip_level_truth, tcp_paced_source, tcp_paced_source_sized_by_kernel, tcp_source, udp_cbr,
};
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
        delay: (case.delay_ms > 0).then(|| Duration::from_millis(u64::from(case.delay_ms))),
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

/// Whether the range `lo`–`hi` holds `truth` once widened by [`BAND`] of it (Mbit/s).
#[allow(dead_code)]
pub(crate) fn in_band(lo: f64, hi: f64, truth: f64) -> bool {
    lo - BAND * truth <= truth && truth <= hi + BAND * truth
}

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
    /// [`Cross::Tcp`] with its sends sized as the kernel sizes them on a namespace path
    /// (no cap: bursts of 3–10 segments at line rate). Measured by the accuracy bench
    /// only (`--cross sized-tcp`).
    #[allow(dead_code)]
    SizedTcp(f64),
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
            Self::SizedTcp(r) => format!("{r} Mbit/s kernel-sized TCP"),
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
    /// One-way delay between the router and B, ms (a delay line; router placement
    /// only; 0: none, the namespace path's few microseconds).
    pub(crate) delay_ms: u32,
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
            delay_ms: 0,
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

/// What measures a case.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tool<'a> {
    /// This workspace's pathload-rs.
    Rs,
    /// The original pathload 1.3.2: `pathload_snd` and `pathload_rcv` in this
    /// directory (built by hand; over plain UDP only). Run by the accuracy bench
    /// (`--original DIR`) beside pathload-rs, as an experiment.
    #[allow(dead_code)]
    Original(&'a Path),
}

/// Builds the case's hosts, daemons and cross traffic, runs one measurement with
/// `extra` flags for rcv, and tears it all down.
#[allow(dead_code)]
pub(crate) fn run_case(case: Case, max_time: u64, extra: &[&str]) -> anyhow::Result<Measured> {
    run_case_with(case, Tool::Rs, max_time, extra)
}

/// [`run_case`] measured by `tool`.
pub(crate) fn run_case_with(
    case: Case,
    tool: Tool<'_>,
    max_time: u64,
    extra: &[&str],
) -> anyhow::Result<Measured> {
    if matches!(tool, Tool::Original(_)) {
        anyhow::ensure!(
            case.transport == "udp",
            "the original pathload measures over plain UDP only"
        );
    }
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
        Cross::SizedTcp(r) => (
            Some(tcp_paced_source_sized_by_kernel(
                &net.a,
                &net.b,
                to(true),
                CROSS_PORT,
                r,
            )?),
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
    let (run, probe_size) = match tool {
        Tool::Rs => {
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
            (run, None)
        }
        Tool::Original(dir) => {
            let (run, size) = original::measure(&net, dir, max_time)?;
            (run, Some(size))
        }
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
    let size =
        probe_size.unwrap_or_else(|| pathload_rs::rate::Limits::new(1500, 0).shape(wire).size);
    Ok(Measured {
        run,
        truth: ip_level_truth(case.rate, size, &[(ip_mbps, ip_size)]),
        cross_mbps,
        cross_burst,
    })
}

/// The original pathload 1.3.2 on the testbed, for the accuracy bench's comparison.
#[allow(dead_code)]
mod original {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use anyhow::{Context as _, ensure};
    use mgrp_testbed::{ADDR_A, Process, TwoHosts};
    use serde_json::{Value, json};

    use super::Run;

    /// Its sender's gaps come from short sleeps that the kernel's default 50 µs of
    /// timer slack stretches so much that its fleets leave far below the rate asked
    /// and it never converges on this kind of host; 1 ns takes the slack off.
    const TIMER_SLACK_NS: u64 = 1;

    /// One measurement: `pathload_snd` on A, `pathload_rcv -s A` on B with `max_time`
    /// as its own limit (`-t`), its log read back as a result with pathload-rs's
    /// field names (those it has), and the IP size of its last fleet's probes.
    pub(super) fn measure(net: &TwoHosts, dir: &Path, max_time: u64) -> anyhow::Result<(Run, u32)> {
        let log =
            std::env::temp_dir().join(format!("{}.log", mgrp_testbed::unique("pathload-1.3.2")));
        let mut snd = Process::spawn_with_timer_slack(
            &net.a,
            &dir.join("pathload_snd"),
            &["-q".to_owned()],
            TIMER_SLACK_NS,
        )?;
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        let args = [
            "-q".to_owned(),
            "-s".to_owned(),
            ADDR_A.to_string(),
            "-t".to_owned(),
            max_time.to_string(),
            "-o".to_owned(),
            log.display().to_string(),
        ];
        let mut rcv = Process::spawn_with_timer_slack(
            &net.b,
            &dir.join("pathload_rcv"),
            &args,
            TIMER_SLACK_NS,
        )?;
        let status = rcv.wait(Duration::from_secs(max_time + 20));
        let wall = started.elapsed();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        if std::env::var_os("MGRP_TEST_LOG").is_some() {
            eprintln!(
                "--- pathload_rcv's log ---\n{text}--- pathload_snd ---\n{}",
                snd.log()
            );
        }
        snd.stop();
        let status = status.with_context(|| {
            format!("pathload_rcv did not end within {max_time} s + 20: {text}")
        })?;
        let (result, size) = parse(&text, max_time)
            .with_context(|| format!("pathload_rcv's log: {text}{}", rcv.log()))?;
        Ok((
            Run {
                result,
                code: status.code().unwrap_or(-1),
                wall,
            },
            size,
        ))
    }

    /// The numbers in `line` after the first `key`, in order.
    fn numbers_after(line: &str, key: &str) -> Vec<f64> {
        line.split_once(key).map_or_else(Vec::new, |(_, rest)| {
            rest.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter_map(|w| w.parse().ok())
                .collect()
        })
    }

    /// pathload_rcv's log as a result: `converged` with `low_bps` and `high_bps` when
    /// it gave a range, `lower_bound_bps` when it gave only that, `stop_reason` from
    /// the line saying why it ended (`time_limit` when none did and its own limit
    /// had passed), `fleets`, `elapsed_s` and `omega_bps` (its user resolution, 2 %
    /// of its initial rate); and the IP size (L + 28) of its last fleet's probes.
    pub(super) fn parse(log: &str, max_time: u64) -> anyhow::Result<(Value, u32)> {
        let mut fleets = 0u32;
        let (mut size, mut range, mut bound, mut elapsed, mut adr) = (None, None, None, None, None);
        let mut stop = None;
        for line in log.lines() {
            if line.starts_with("Receiving Fleet") {
                fleets += 1;
            } else if line.contains("Fleet Parameter(act)") {
                if let Some(&l) = numbers_after(line, "L=").first() {
                    size = Some(l as u32 + 28);
                }
            } else if line.contains("Available bandwidth range :") {
                if let [lo, hi, ..] = numbers_after(line, ":")[..] {
                    range = Some((lo, hi));
                }
            } else if line.contains("Available bandwidth is greater than") {
                bound = numbers_after(line, "than").first().copied();
            } else if line.contains("Measurement latency is") {
                elapsed = numbers_after(line, "is").first().copied();
            } else if line.trim_start().starts_with("ADR") {
                adr = numbers_after(line, "ADR").first().copied();
            }
            for (text, reason) in [
                ("grey bw resolution", "grey_resolution"),
                ("User specified bandwidth resolution", "user_resolution"),
                ("Actual probing rate != desired", "rate_mismatch"),
                ("frequent CS", "context_switches"),
                ("Avail-bw > maximum sending rate", "max_rate"),
                ("Avail-bw < minimum sending rate", "min_rate"),
            ] {
                if line.contains(text) {
                    stop = Some(reason);
                }
            }
        }
        let size = size.context("no fleet's parameters in the log")?;
        let stop = stop.unwrap_or(if elapsed.is_some_and(|e| e >= max_time as f64 - 1.0) {
            "time_limit"
        } else {
            "none_said"
        });
        ensure!(
            range.is_some() || bound.is_some() || fleets > 0,
            "no measurement"
        );
        let mbps = |v: f64| v * 1e6;
        let mut r = json!({
            "tool": "pathload 1.3.2",
            "converged": range.is_some() && stop != "time_limit",
            "stop_reason": stop,
            "fleets": fleets,
            "elapsed_s": elapsed,
            "omega_bps": adr.map(|a| mbps(0.02 * a)),
        });
        if let Some((lo, hi)) = range {
            r["low_bps"] = json!(mbps(lo));
            r["high_bps"] = json!(mbps(hi));
            r["unadjusted_low_bps"] = json!(mbps(lo));
            r["unadjusted_high_bps"] = json!(mbps(hi));
        }
        if let Some(b) = bound {
            r["lower_bound_bps"] = json!(mbps(b));
        }
        Ok((r, size))
    }
}
