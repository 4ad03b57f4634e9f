//! Shared by the namespace tests and the accuracy bench: the two-host topology with
//! its tbf bottleneck, the daemons (this very binary started as `... mgrpd ...`), and
//! one pathload-rs measurement from host A to host B read back as its JSON result.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mgrp_testbed::{ADDR_A, Daemon, Process, TwoHostOptions, TwoHosts, daemon_pair};
use serde_json::Value;

const PATHLOAD: &str = env!("CARGO_BIN_EXE_pathload-rs");

/// Runs as mgrpd when started as `PROGRAM mgrpd ARGS..`: the daemons of these tests
/// are the test binary itself, so they are never a stale build.
pub(crate) fn mgrpd_if_asked() -> Option<ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    args.get(1)
        .is_some_and(|a| a == "mgrpd")
        .then(|| mgrpd::main_with_args(&args[1..]))
}

/// Hosts A and B with a `tbf rate 10mbit burst 1540` bottleneck from A to B.
pub(crate) fn net() -> anyhow::Result<TwoHosts> {
    TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "1540".into())),
    })
}

/// A second address of B, outside the tunnel's routes: traffic to it crosses the
/// bottleneck beside the probes, as another host's traffic would.
pub(crate) const OTHER_B: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 77, 0, 3);

/// Gives B its [`OTHER_B`] address.
pub(crate) fn add_other_b(net: &TwoHosts) -> anyhow::Result<()> {
    net.b
        .ip(&["addr", "add", &format!("{OTHER_B}/24"), "dev", &net.veth_b])?;
    Ok(())
}

/// mgrpd on both hosts, each routing the other host's address into its tunnel.
pub(crate) fn daemons(net: &TwoHosts) -> anyhow::Result<(Daemon, Daemon)> {
    let me = std::env::current_exe()?;
    // The paper's mode: application traffic rides in the probes throughout, which is
    // what the rider adjustment is measured against. (With routes on demand the
    // stream rides only around the streams and competes with them between, a mix the
    // wide bands here do not cover.)
    daemon_pair(net, &me, &["mgrpd"], &["--hold-mode", "always"])
}

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

/// Runs `pathload-rs snd` on A and `pathload-rs rcv --json` on B with `extra` flags
/// for rcv (over mgrpd if `sockets` are given), and waits for the result.
pub(crate) fn measure(
    net: &TwoHosts,
    transport: &str,
    sockets: Option<(&Daemon, &Daemon)>,
    max_time: u64,
    extra: &[&str],
) -> anyhow::Result<Run> {
    let mut snd: Vec<String> = vec!["snd".into(), "--transport".into(), transport.into()];
    let mut rcv: Vec<String> = vec![
        "rcv".into(),
        "--sender".into(),
        ADDR_A.to_string(),
        "--transport".into(),
        transport.into(),
        "--json".into(),
        "--max-time".into(),
        max_time.to_string(),
    ];
    rcv.extend(extra.iter().map(ToString::to_string));
    if let Some((a, b)) = sockets {
        snd.extend(["--socket".into(), a.socket.display().to_string()]);
        rcv.extend(["--socket".into(), b.socket.display().to_string()]);
    }
    let mut sender = Process::spawn(&net.a, Path::new(PATHLOAD), &snd)?;
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut receiver = Process::spawn(&net.b, Path::new(PATHLOAD), &rcv)?;
    let Some(status) = receiver.wait(Duration::from_secs(max_time + 20)) else {
        bail!("rcv did not end within its limit: {}", receiver.log());
    };
    let wall = started.elapsed();
    let log = receiver.log();
    // The sender serves one measurement and exits by itself.
    let s = sender.wait(Duration::from_secs(10));
    if !s.is_some_and(|s| s.success()) {
        bail!("snd did not end cleanly: {}", sender.log());
    }
    let result = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "result")
        .with_context(|| {
            format!(
                "no result line (exit {status}): {log}\nsender: {}",
                sender.log()
            )
        })?;
    Ok(Run {
        result,
        code: status.code().unwrap_or(-1),
        wall,
    })
}

/// A number of the result.
pub(crate) fn f(v: &Value, key: &str) -> anyhow::Result<f64> {
    v[key]
        .as_f64()
        .with_context(|| format!("{key} missing in {v}"))
}
