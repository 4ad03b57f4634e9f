//! The shipped units' sandboxes, applied by hand as systemd would
//! (`mgrp_testbed::sandbox`: capabilities, no-new-privileges, user and groups by
//! setpriv; address families by a seccomp filter): mgrpd under `mgrpd.service`, its
//! socket given to a group; each overlay under `mgrp-overlay.service` as an
//! unprivileged user in that group, with the feature drop-ins or without them.
//! `nobody` and `nogroup` stand in for the unit's dynamic user and the packages'
//! `mgrp` group, which exist only where the packages are installed.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use mgrp_testbed::sandbox::{self, Sandbox};
use mgrp_testbed::{Netns, Process, Star};
use serde_json::Value;

mod embed;

const API_PORT: u16 = 7700;
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;

const MGRPD_UNIT: &str = include_str!("../../mgrpd/mgrpd.service");
const OVERLAY_UNIT: &str = include_str!("../mgrp-overlay.service");
const PASSIVE_TIMING: &str = include_str!("../systemd/passive-timing.conf");
const ROUTE_CONTROL: &str = include_str!("../systemd/route-control.conf");

/// Waits up to `within` for `f` to give something.
fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(t) = f() {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// Two hosts behind 10 Mbit/s, each with an mgrpd under its unit's sandbox that
/// gives its socket to `nogroup`.
fn hosts_with_sandboxed_mgrpds() -> anyhow::Result<(Star, Vec<mgrp_testbed::Daemon>)> {
    let star = Star::new(&[
        Some(("10mbit".to_string(), "1540".to_string())),
        Some(("10mbit".to_string(), "1540".to_string())),
    ])?;
    let me = std::env::current_exe()?;
    let unit = Sandbox::from_unit(MGRPD_UNIT, &[])?;
    let (setpriv, prefix) = unit.command(&me, None, None, &[], &me, &["mgrpd".into()]);
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let daemons = star.daemons(&setpriv, &prefix, &["--socket-group", "nogroup"])?;
    Ok((star, daemons))
}

/// Node `i`'s configuration: its API, mgrpd's socket, route control answering
/// heartbeats; node 1 measures node 0 by pathload over MGRP.
fn config(star: &Star, i: usize, socket: &Path, routing: bool) -> String {
    let addrs = &star.addrs;
    let mut c = format!(
        "name = \"s{i}\"\nlisten = \"{}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\n[btc]\nkernel-poll = \"1s\"\n",
        addrs[i],
        socket.display()
    );
    if i == 1 {
        c.push_str(&format!(
            "[[link]]\nname = \"abw\"\nfrom = \"{}\"\nmethod = \"pathload-fast\"\ninterval = \"3s\"\ntime-limit = \"20s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n",
            addrs[0]
        ));
    }
    if routing {
        c.push_str(&format!("[routing]\naddress = \"{}\"\n", addrs[i]));
    }
    c
}

/// The overlay in `ns` under `sandbox`, as `nobody` in `nogroup`, logging at info;
/// under `strace -f` writing to `trace` if given.
fn sandboxed_overlay(
    ns: &Netns,
    sandbox: &Sandbox,
    config: &Path,
    trace: Option<&Path>,
) -> anyhow::Result<Process> {
    let me = std::env::current_exe()?;
    let (setpriv, args) = sandbox.command(
        &me,
        Some(NOBODY),
        Some(NOGROUP),
        &[NOGROUP],
        &me,
        &[
            "overlay".into(),
            "--config".into(),
            config.display().to_string(),
            "--log-level".into(),
            "info".into(),
        ],
    );
    match trace {
        None => Process::spawn(ns, &setpriv, &args),
        Some(file) => {
            let Some(strace) = mgrp_testbed::packages::find("strace") else {
                mgrp_testbed::packages::require(&["strace"])?;
                bail!("strace is not on the PATH");
            };
            let mut all = vec![
                "-f".to_owned(),
                "-qq".into(),
                // Whole strings: the exec of the overlay is found by its arguments.
                "-s4096".into(),
                "-o".into(),
                file.display().to_string(),
                "--".into(),
                setpriv.display().to_string(),
            ];
            all.extend(args);
            Process::spawn(ns, &strace, &all)
        }
    }
}

/// The overlay's own pid: `p`'s, or its child's when `p` is strace.
fn overlay_pid(p: &Process, traced: bool) -> anyhow::Result<u32> {
    let pid = p.pid().context("no pid")?;
    if !traced {
        return Ok(pid);
    }
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?;
    children
        .split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("strace {pid} has no child"))
}

/// Waits for `line` in `p`'s log.
fn logged(p: &Process, line: &str) -> anyhow::Result<()> {
    wait_for(Duration::from_secs(15), || {
        p.log().contains(line).then_some(())
    })
    .with_context(|| format!("never logged {line:?}:\n{}", p.log()))
}

/// A `/proc/PID/status` field of process `pid`.
fn status_field(pid: u32, key: &str) -> anyhow::Result<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_owned())
        .with_context(|| format!("no {key} in {pid}'s status"))
}

fn link(star: &Star) -> Option<Value> {
    let (status, body) = mgrp_testbed::http::request_in(
        &star.router,
        &format!("{}:{API_PORT}", star.addrs[1]),
        "GET",
        "/v1/links/abw",
    )
    .ok()?;
    (status == 200).then_some(())?;
    serde_json::from_str(&body).ok()
}

/// Under the units with both feature drop-ins, every feature works: the node
/// measures through mgrpd's socket (by its group), its neighbour answers the kernel
/// poll (a TCP flow's passive estimate), both ends stamp the flow's segments (packet
/// timing), and route control installs its (empty) policy and answers heartbeats.
/// The overlay runs as `nobody` with exactly the capabilities the units grant.
fn every_feature_works_under_the_units_with_their_drop_ins() -> anyhow::Result<()> {
    let (star, daemons) = hosts_with_sandboxed_mgrpds()?;
    let dir = mgrp_testbed::TempDir::new("mgrp-overlay-sandbox")?;
    let sandbox = Sandbox::from_unit(OVERLAY_UNIT, &[PASSIVE_TIMING, ROUTE_CONTROL])?;
    // Node 1 (measuring, timing packets, running route control) is traced: its
    // calls are checked against the unit's SystemCallFilter at the end.
    let trace = dir.path().join("s1.strace");
    let mut overlays = Vec::new();
    for (i, ns) in star.hosts.iter().enumerate() {
        let path = dir.path().join(format!("s{i}.toml"));
        std::fs::write(&path, config(&star, i, &daemons[i].socket, true))?;
        let traced = (i == 1).then_some(trace.as_path());
        overlays.push(sandboxed_overlay(ns, &sandbox, &path, traced)?);
    }
    let logs = |o: &[Process]| -> String {
        o.iter()
            .enumerate()
            .map(|(i, p)| format!("--- s{i} ---\n{}\n", p.log()))
            .collect()
    };
    for o in &overlays {
        logged(o, "[passive] timing: on")?;
        logged(o, "[routing]: on")?;
        logged(
            o,
            "kernel poll (answering neighbours' btc and passive-tcp): on",
        )?;
    }
    // Who it runs as, and with what.
    let o = overlay_pid(&overlays[1], true)?;
    ensure!(
        status_field(o, "Uid:")?
            .split_whitespace()
            .all(|u| u == "65534"),
        "uid {}",
        status_field(o, "Uid:")?
    );
    ensure!(
        status_field(o, "Groups:")? == "65534",
        "groups {}",
        status_field(o, "Groups:")?
    );
    let eff = u64::from_str_radix(&status_field(o, "CapEff:")?, 16)?;
    let want = [12u32, 13, 23].iter().fold(0u64, |m, c| m | 1 << c);
    ensure!(
        eff == want,
        "the overlay holds {eff:#x}, not CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_NICE ({want:#x})"
    );
    ensure!(status_field(o, "NoNewPrivs:")? == "1");
    ensure!(status_field(o, "Seccomp:")? == "2", "no seccomp filter");

    // Through mgrpd's socket, by the group: an estimate over MGRP.
    let active = wait_for(Duration::from_secs(90), || {
        link(&star).filter(|l| l["runs"]["estimate"].as_u64().unwrap_or(0) >= 1)
    })
    .with_context(|| format!("no estimate over MGRP within 90 s\n{}", logs(&overlays)))?;
    ensure!(active["latest"]["transport"] == "mgrp", "{active}");
    eprintln!(
        "    sandboxed: {:.2}-{:.2} Mbit/s over MGRP",
        active["latest"]["low_bps"].as_f64().unwrap_or(0.0) / 1e6,
        active["latest"]["high_bps"].as_f64().unwrap_or(0.0) / 1e6
    );

    // A bulk flow: the neighbour's kernel poll and both ends' packet timing.
    let _flow = mgrp_testbed::traffic::tcp_bulk(
        &star.hosts[0],
        &star.hosts[1],
        star.addrs[1].into(),
        5302,
        "cubic",
    )?;
    let timed = wait_for(Duration::from_secs(60), || {
        let l = link(&star)?;
        let ok = l["latest"]["method"] == "passive-tcp"
            && l["passive"]["timing"]["matched"].as_u64().unwrap_or(0) > 100;
        ok.then_some(l)
    })
    .with_context(|| {
        format!(
            "no passive-tcp estimate with stamped segments within 60 s of a bulk flow: {:#}\n{}",
            link(&star).unwrap_or_default()["passive"],
            logs(&overlays)
        )
    })?;
    eprintln!(
        "    sandboxed: passive-tcp {:.2} Mbit/s, packet timing {}",
        timed["latest"]["low_bps"].as_f64().unwrap_or(0.0) / 1e6,
        timed["passive"]["timing"]
    );

    // Route control answers a member's heartbeat (its echo, UDP 7701).
    use mgrp_core::heartbeat::Message;
    let answered = star.hosts[0].run(|| -> anyhow::Result<bool> {
        let s = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        let mut buf = [0u8; 64];
        for seq in 0..5 {
            s.send_to(&Message::Ping { seq }.emit(), (star.addrs[1], 7701))?;
            if let Ok(n) = s.recv(&mut buf)
                && matches!(Message::parse(&buf[..n]), Ok(Message::Pong { .. }))
            {
                return Ok(true);
            }
        }
        Ok(false)
    })??;
    ensure!(answered, "no heartbeat answered\n{}", logs(&overlays));
    ensure!(
        !overlays
            .iter_mut()
            .any(|p| p.wait(Duration::ZERO).is_some()),
        "an overlay exited\n{}",
        logs(&overlays)
    );

    // Node 1 stops cleanly (SIGTERM to it, not to strace), and every call it and
    // what it ran (nft, conntrack) made is one its unit's filter allows.
    // SAFETY: signalling the overlay this test started (strace's child).
    unsafe { libc::kill(o as libc::pid_t, libc::SIGTERM) };
    let status = overlays[1]
        .wait(Duration::from_secs(20))
        .with_context(|| format!("node 1 did not stop within 20 s\n{}", logs(&overlays)))?;
    ensure!(
        status.success(),
        "node 1 stopped with {status}\n{}",
        logs(&overlays)
    );
    let me = std::env::current_exe()?.display().to_string();
    let made = sandbox::system_calls_after_exec(
        &std::fs::read_to_string(&trace)?,
        &format!("execve(\"{me}\", [\"{me}\", \"overlay\""),
    )?;
    let spec = sandbox::system_call_filter(OVERLAY_UNIT)?;
    let allowed = sandbox::allowed_system_calls(&spec)?;
    let refused: Vec<&String> = made.iter().filter(|c| !allowed.contains(*c)).collect();
    ensure!(
        made.len() > 20 && refused.is_empty(),
        "the unit's SystemCallFilter ({spec:?}) refuses what the overlay calls: {refused:?} (of {made:?})"
    );
    eprintln!(
        "    sandboxed: {} system calls, all in the unit's filter",
        made.len()
    );
    drop(overlays);
    drop(daemons);
    Ok(())
}

/// Under the base unit alone, the node says which features are off and why, and
/// what turns each on; with a drop-in's capability but not its address family, it
/// names the family the sandbox refuses.
fn the_base_unit_turns_the_privileged_features_off_and_says_so() -> anyhow::Result<()> {
    let (star, daemons) = hosts_with_sandboxed_mgrpds()?;
    let dir = mgrp_testbed::TempDir::new("mgrp-overlay-sandbox-base")?;
    let path = dir.path().join("s1.toml");
    std::fs::write(&path, config(&star, 1, &daemons[1].socket, true))?;
    let base = Sandbox::from_unit(OVERLAY_UNIT, &[])?;
    let mut p = sandboxed_overlay(&star.hosts[1], &base, &path, None)?;
    logged(
        &p,
        "[passive] timing: off: it needs CAP_NET_RAW, which this process does not hold; under the packaged unit, add its drop-in: ln -s /usr/share/mgrp/systemd/mgrp-overlay.service.d/passive-timing.conf",
    )?;
    logged(
        &p,
        "[routing]: off: it needs CAP_NET_ADMIN, which this process does not hold; under the packaged unit, add its drop-in: ln -s /usr/share/mgrp/systemd/mgrp-overlay.service.d/route-control.conf",
    )?;
    logged(
        &p,
        "kernel poll (answering neighbours' btc and passive-tcp): on",
    )?;
    // Route control it was asked for cannot start: the node stops and says why.
    let status = p
        .wait(Duration::from_secs(15))
        .with_context(|| format!("the node ran without route control:\n{}", p.log()))?;
    ensure!(!status.success(), "{}", p.log());
    ensure!(
        p.log().contains("route control cannot install its routes"),
        "{}",
        p.log()
    );

    // The capability without the family: the filter refuses the packet socket.
    let half = "[Service]\nCapabilityBoundingSet=CAP_NET_RAW\nAmbientCapabilities=CAP_NET_RAW\n";
    let sandbox = Sandbox::from_unit(OVERLAY_UNIT, &[half])?;
    std::fs::write(&path, config(&star, 1, &daemons[1].socket, false))?;
    let q = sandboxed_overlay(&star.hosts[1], &sandbox, &path, None)?;
    logged(
        &q,
        "[passive] timing: off: cannot open a packet socket (Address family not supported by protocol",
    )?;
    drop(q);
    drop(daemons);
    Ok(())
}

fn main() -> ExitCode {
    if let Some(code) = mgrp_testbed::harness::acting_as(&[(
        sandbox::ROLE,
        sandbox::restrict_and_exec as fn(&[std::ffi::OsString]) -> ExitCode,
    )]) {
        return code;
    }
    if let Some(code) = embed::embedded() {
        return code;
    }
    mgrp_testbed::harness::run(&[
        (
            "every_feature_works_under_the_units_with_their_drop_ins",
            every_feature_works_under_the_units_with_their_drop_ins,
        ),
        (
            "the_base_unit_turns_the_privileged_features_off_and_says_so",
            the_base_unit_turns_the_privileged_features_off_and_says_so,
        ),
    ])
}
