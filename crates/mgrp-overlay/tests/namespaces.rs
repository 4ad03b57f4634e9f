//! The overlay in network namespaces (root): three hosts around a router, each
//! host's downlink a `tbf` of its own rate (10, 6 and 15 Mbit/s), mgrpd and an
//! overlay node on each. Every node measures the paths from the other two over MGRP
//! (node 1 also from node 0 over plain UDP, the baseline). Every MGRP link's estimate
//! contains its truth (a wide band); each node's `/metrics` serves the same values as
//! its JSON API; a subscriber to node 1's event stream receives new estimates; a real
//! Prometheus in the router's namespace scraping the three overlays and node 1's
//! mgrpd returns the values they served; node 2's link from node 0 waits for
//! application traffic to ride (`ride-min-bps`) and, once a flow from node 0 runs,
//! measures with it riding; killing node 0's overlay shows on node 1's links from it
//! as a neighbour down with back-off, until it is back. A second test measures one
//! path by pathChirp and by badabing, side by side; a third serves a transfer-rate
//! prediction from pathload, btc and badabing runs, then from the kernel of a bulk
//! flow's sender (CUBIC's delivery rate, then BBR's own estimate); a fourth lets a
//! bulk flow's passive estimates stand in for a link's runs; a fifth has two receivers
//! measure one sender at once by different methods.
//!
//! Own `main` (no libtest harness): the daemons and overlays are this binary,
//! started as `namespaces mgrpd ...` and `namespaces overlay ...`, so they are never
//! a stale build.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod common;
mod embed;

use anyhow::{Context, bail, ensure};
use common::first_value;
use embed::TempDir;
use mgrp_rt::unix_now;
use mgrp_testbed::http::promql_path;
use mgrp_testbed::traffic::{ip_level_truth, udp_cbr};
use mgrp_testbed::{Netns, Process, Star};
use serde_json::Value;

/// How far from the truth an estimate's range may lie, as a fraction of it.
const BAND: f64 = 0.2;
/// Each host's downlink, Mbit/s.
const DOWNLINKS: [f64; 3] = [10.0, 6.0, 15.0];
/// The port each overlay's API listens on, on its host's address.
const API_PORT: u16 = 7700;
/// The port each mgrpd serves its metrics on, on its host's address.
const MGRPD_METRICS_PORT: u16 = 9577;
/// Application traffic node 2's link from node 0 waits for, and the flow that gives it.
const RIDE_MIN_BPS: u64 = 1_000_000;
/// How long it waits for that traffic before it runs anyway.
const RIDE_MAX_WAIT: Duration = Duration::from_secs(40);
const FLOW_MBPS: f64 = 2.0;
/// Where Prometheus (in the router) serves its API.
const PROMETHEUS: &str = "127.0.0.1:9090";

fn overlay(ns: &Netns, config: &Path) -> anyhow::Result<Process> {
    let level = std::env::var("OVERLAY_TEST_LOG_LEVEL").unwrap_or_else(|_| "debug".into());
    embed::overlay(ns, config, &level)
}

/// One request to the overlay API of the host at `addr`, from `ns`: status and body.
fn http(ns: &Netns, addr: Ipv4Addr, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    http_to(ns, &format!("{addr}:{API_PORT}"), method, path)
}

/// One request to `addr` in `ns`: status and body.
fn http_to(ns: &Netns, addr: &str, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    mgrp_testbed::http::request_in(ns, addr, method, path)
}

fn links(ns: &Netns, addr: Ipv4Addr) -> anyhow::Result<Vec<Value>> {
    let (status, body) = http(ns, addr, "GET", "/v1/links")?;
    ensure!(status == 200, "GET /v1/links: {status} {body}");
    let v: Value = serde_json::from_str(&body)?;
    Ok(v["links"].as_array().cloned().unwrap_or_default())
}

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

/// Prometheus in `ns`, scraping `overlays` and `mgrpds` every second.
fn prometheus(
    ns: &Netns,
    dir: &Path,
    overlays: &[String],
    mgrpds: &[String],
) -> anyhow::Result<Process> {
    mgrp_testbed::packages::require(&["prometheus"])?;
    let program = mgrp_testbed::packages::find("prometheus").expect("just checked");
    let list = |t: &[String]| {
        t.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mgrp-overlay\n    static_configs:\n      - targets: [{}]\n  - job_name: mgrpd\n    static_configs:\n      - targets: [{}]\n",
            list(overlays),
            list(mgrpds)
        ),
    )?;
    Process::spawn(
        ns,
        &program,
        &[
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address={PROMETHEUS}"),
        ],
    )
}

/// A PromQL expression's first value, from Prometheus' query API in `ns`.
fn promql(ns: &Netns, expr: &str) -> Option<f64> {
    let (status, body) = http_to(ns, PROMETHEUS, "GET", &promql_path(expr)).ok()?;
    if status != 200 {
        return None;
    }
    first_value(&body)
}

/// How long before a missed run its window of the nodes' logs starts, s.
const RUN_LEAD_S: f64 = 3.0;

/// The lines every overlay logged from `from` to `to` (Unix seconds), each after its
/// node's name, in time order: what ran beside a run.
fn window(overlays: &[Process], from: f64, to: f64) -> String {
    let stamp = |t: f64| {
        humantime::format_rfc3339_micros(
            std::time::UNIX_EPOCH + Duration::from_secs_f64(t.max(0.0)),
        )
        .to_string()
    };
    let (from, to) = (stamp(from), stamp(to));
    let mut lines: Vec<(String, String)> = overlays
        .iter()
        .enumerate()
        .flat_map(|(i, o)| {
            o.log()
                .lines()
                .filter_map(|l| {
                    let t = l.get(..from.len())?;
                    (t.ends_with('Z') && *t >= *from.as_str() && *t <= *to.as_str())
                        .then(|| (t.to_string(), format!("n{i} {l}")))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, l)| l + "\n").collect()
}

fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Node `i`'s configuration: its API and mgrpd metrics on its address, links from
/// every other node over MGRP (and, on node 1, from node 0 over UDP, its probes sent
/// to node 1's address outside the tunnels).
fn node_config(i: usize, addrs: &[Ipv4Addr], outside: &[Ipv4Addr], socket: &Path) -> String {
    let mut c = format!(
        "name = \"n{i}\"\nlisten = \"{}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\n",
        addrs[i],
        socket.display()
    );
    let link = |name: String, from: Ipv4Addr, transport: &str| {
        format!(
            "[[link]]\nname = \"{name}\"\nfrom = \"{from}\"\ntransport = \"{transport}\"\ninterval = \"3s\"\ntime-limit = \"25s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n"
        )
    };
    for (j, a) in addrs.iter().enumerate().filter(|(j, _)| *j != i) {
        c.push_str(&link(format!("n{j}-mgrp"), *a, "mgrp"));
        if (i, j) == (2, 0) {
            c.push_str(&format!(
                "ride-min-bps = {RIDE_MIN_BPS}\nride-max-wait = \"{}s\"\n",
                RIDE_MAX_WAIT.as_secs()
            ));
        }
    }
    if i == 1 {
        c.push_str(&link("n0-udp".into(), addrs[0], "udp"));
        c.push_str(&format!("probe-address = \"{}\"\n", outside[1]));
    }
    c
}

fn check() -> anyhow::Result<()> {
    let star = Star::new(&DOWNLINKS.map(|r| Some((format!("{r}mbit"), "1540".to_string()))))?;
    let (r, addrs) = (&star.router, star.addrs.clone());
    let me = std::env::current_exe()?;
    let metrics_listen = format!("0.0.0.0:{MGRPD_METRICS_PORT}");
    let daemons = star.daemons(
        &me,
        &["mgrpd"],
        &["--hold-mode", "always", "--metrics", &metrics_listen],
    )?;
    let dir = TempDir::new("mgrp-overlay-ns")?;
    let confs: Vec<PathBuf> = (0..addrs.len())
        .map(|i| {
            let p = dir.0.join(format!("n{i}.toml"));
            std::fs::write(
                &p,
                node_config(i, &addrs, &star.outside, &daemons[i].socket),
            )
            .map(|()| p)
        })
        .collect::<Result<_, _>>()?;
    let mut overlays: Vec<Process> = star
        .hosts
        .iter()
        .zip(&confs)
        .map(|(ns, c)| overlay(ns, c))
        .collect::<anyhow::Result<_>>()?;
    let logs = |o: &[Process]| {
        o.iter()
            .enumerate()
            .map(|(i, p)| format!("--- overlay n{i} ---\n{}\n", p.log()))
            .collect::<String>()
    };
    let prom = prometheus(
        r,
        &dir.0,
        &addrs
            .iter()
            .map(|a| format!("{a}:{API_PORT}"))
            .collect::<Vec<_>>(),
        &[format!("{}:{MGRPD_METRICS_PORT}", addrs[1])],
    )?;

    // A subscriber on node 1's event stream, from the start (from the router).
    let n1 = addrs[1];
    let stream = r.run(move || -> anyhow::Result<TcpStream> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match TcpStream::connect((n1, API_PORT)) {
                Ok(s) => return Ok(s),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
    })??;
    stream.set_read_timeout(Some(Duration::from_secs(240)))?;
    let host = stream.peer_addr()?;
    (&stream).write_all(
        format!("GET /v1/stream HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n")
            .as_bytes(),
    )?;
    // Three `estimate` events, and the `prediction` events that follow runs.
    let events = std::thread::spawn(move || {
        let (mut seen, mut btc) = (Vec::new(), Vec::new());
        let mut r = BufReader::new(stream);
        let (mut line, mut kind) = (String::new(), String::new());
        while seen.len() < 3 {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let l = line.trim_end();
                    if let Some(k) = l.strip_prefix("event: ") {
                        kind = k.to_string();
                    } else if let Some(d) = l.strip_prefix("data: ")
                        && let Ok(v) = serde_json::from_str::<Value>(d)
                    {
                        match kind.as_str() {
                            "estimate" => seen.push(v),
                            "prediction" => btc.push(v),
                            _ => {}
                        }
                    }
                }
            }
        }
        (seen, btc)
    });

    // Every link of every node gives an estimate that contains its truth.
    for (i, addr) in addrs.iter().enumerate() {
        let truth = ip_level_truth(DOWNLINKS[i], 228, &[]);
        let all = wait_for(Duration::from_secs(240), || {
            let l = links(r, *addr).ok()?;
            (!l.is_empty() && l.iter().all(|x| !x["latest"].is_null())).then_some(l)
        });
        let Some(all) = all else {
            bail!(
                "n{i}: not every link gave an estimate within 240 s: {:#?}\n{}",
                links(r, *addr).ok(),
                logs(&overlays)
            );
        };
        let (_, metrics) = http(r, *addr, "GET", "/metrics")?;
        // Both endpoints in the text format pass `promtool check metrics`.
        mgrp_testbed::http::promtool_check_metrics(&metrics)
            .with_context(|| format!("n{i}'s overlay /metrics"))?;
        let (status, mgrpd_metrics) = http_to(
            r,
            &format!("{addr}:{MGRPD_METRICS_PORT}"),
            "GET",
            "/metrics",
        )?;
        ensure!(status == 200, "n{i}'s mgrpd /metrics: {status}");
        mgrp_testbed::http::promtool_check_metrics(&mgrpd_metrics)
            .with_context(|| format!("n{i}'s mgrpd /metrics"))?;
        for l in &all {
            let name = l["name"].as_str().unwrap_or_default();
            let e = &l["latest"];
            let (lo, hi) = (
                e["low_bps"].as_f64().unwrap_or(0.0) / 1e6,
                e["high_bps"].as_f64().unwrap_or(0.0) / 1e6,
            );
            eprintln!(
                "    n{i} {name}: {lo:.2}-{hi:.2} Mbit/s (truth {truth:.2}), rider share {:.3}",
                e["rider_share"].as_f64().unwrap_or(0.0)
            );
            // OVERLAY_TEST_LOGS=FILE keeps the overlays' logs of the run there.
            if let Some(f) = std::env::var_os("OVERLAY_TEST_LOGS") {
                let _ = std::fs::write(f, logs(&overlays));
            }
            // The UDP baseline must give estimates, but its accuracy is not judged
            // here: with three real-time pacers on a two-CPU machine its streams now
            // and then read increasing at half the path's rate (no sender interruption,
            // no loss), an open finding; pathload-rs's own two-host tests judge it.
            let judged = l["transport"] == "mgrp";
            // A miss says the run as the API gives it, then what every node logged
            // from shortly before it to its end, in time order (CI shows only the
            // start of a failure), then the measuring node's whole log, then the
            // others'.
            ensure!(
                !judged || (lo - BAND * truth <= truth && truth <= hi + BAND * truth),
                "n{i} {name}: truth {truth:.2} Mbit/s is not within {lo:.2}-{hi:.2} ± {:.0} %\nits run: {e}\n--- every node's log from {RUN_LEAD_S} s before the run to its end ---\n{}\n--- overlay n{i}, which measured it ---\n{}\n{}",
                BAND * 100.0,
                window(
                    &overlays,
                    e["started_at"].as_f64().unwrap_or(0.0) - RUN_LEAD_S,
                    e["ended_at"].as_f64().unwrap_or(0.0),
                ),
                overlays[i].log(),
                logs(&overlays)
            );
            // /metrics serves what the JSON serves, in bytes per second (or a later
            // run's value if one ended between the two requests).
            let low = metric(
                &metrics,
                "mgrp_overlay_available_bandwidth_bytes_per_second",
                &[("link", name), ("bound", "low")],
            )
            .with_context(|| format!("no low bound of {name} in\n{metrics}"))?;
            let stamp = metric(
                &metrics,
                "mgrp_overlay_estimate_timestamp_seconds",
                &[("link", name)],
            )
            .context("no estimate timestamp")?;
            let json_stamp = e["ended_at"].as_f64().unwrap_or(0.0);
            if (stamp - json_stamp).abs() < 1e-3 {
                let json_low = e["low_bps"].as_f64().unwrap_or(0.0) / 8.0;
                ensure!(
                    (low - json_low).abs() < 1e-3 * json_low.max(1.0),
                    "n{i} {name}: metrics {low}, JSON {json_low}"
                );
            } else {
                ensure!(
                    stamp > json_stamp,
                    "n{i} {name}: metrics older than the JSON"
                );
            }
        }
    }

    // Prometheus got what the overlays and node 1's mgrpd served: the time of a run
    // node 2 recorded, and the probes node 1's mgrpd delivered.
    let stamp = wait_for(Duration::from_secs(30), || {
        promql(
            r,
            "mgrp_overlay_estimate_timestamp_seconds{link=\"n0-mgrp\",node=\"n2\"}",
        )
    })
    .with_context(|| format!("Prometheus never had n2's estimate time:\n{}", prom.log()))?;
    let (_, history) = http(r, addrs[2], "GET", "/v1/links/n0-mgrp/history?limit=1000")?;
    let history: Value = serde_json::from_str(&history)?;
    let ended: Vec<f64> = history["estimates"]
        .as_array()
        .map(|h| h.iter().filter_map(|e| e["ended_at"].as_f64()).collect())
        .unwrap_or_default();
    ensure!(
        ended.iter().any(|t| (t - stamp).abs() < 1e-3),
        "Prometheus has {stamp}, n2's runs ended at {ended:?}"
    );
    let delivered = wait_for(Duration::from_secs(30), || {
        promql(r, "mgrpd_probes_delivered_total").filter(|v| *v > 0.0)
    })
    .with_context(|| format!("Prometheus never had n1's mgrpd counters:\n{}", prom.log()))?;
    let served = daemons[1].stats()?.daemon.probes_delivered as f64;
    ensure!(
        delivered <= served,
        "Prometheus {delivered} > mgrpd {served}"
    );
    drop(prom);

    let (seen, btc) = events
        .join()
        .map_err(|_| anyhow::anyhow!("the stream reader panicked"))?;
    ensure!(seen.len() == 3, "the subscriber saw {} events", seen.len());
    ensure!(
        seen.iter()
            .all(|e| e["link"].is_string() && e["seq"].as_u64().is_some())
    );
    // A prediction follows every run but the last one seen may not have come yet.
    ensure!(
        btc.len() >= 2
            && btc
                .iter()
                .all(|b| b["links"].is_array() && b["neighbour"].is_string()),
        "prediction events: {btc:?}"
    );

    // Node 2's link from node 0 waits for traffic to ride while there is none...
    // The flow starts early in a wait, so that the traffic (seen within a poll or
    // two) and a place among the exclusive runs (after at most one run of
    // n1-mgrp, its time limit 25 s) both come before the wait ends: seen late in
    // one, the link is watched until its next (it runs at the end of this one, waits
    // its interval and waits again).
    let riding = |l: &Value| l["name"] == "n0-mgrp";
    let fresh = RIDE_MAX_WAIT.as_secs_f64() - 8.0;
    let awaiting = wait_for(2 * RIDE_MAX_WAIT + Duration::from_secs(40), || {
        let l = links(r, addrs[2]).ok()?;
        l.into_iter().find(|x| {
            riding(x)
                && x["state"] == "awaiting_traffic"
                && x["next_run_in_s"].as_f64().is_some_and(|t| t >= fresh)
        })
    })
    .with_context(|| {
        format!(
            "n2's n0-mgrp never began a wait for traffic: {:#?}\n{}",
            links(r, addrs[2]).ok(),
            logs(&overlays)
        )
    })?;
    // ... until this (Unix seconds), when it would run anyway ...
    let left = awaiting["next_run_in_s"].as_f64().unwrap_or(0.0);
    let until = unix_now() + left;
    // ... and once a flow from node 0 runs, a run starts before then and carries it.
    let flow_start = unix_now();
    let flow = udp_cbr(
        &star.hosts[0],
        &star.hosts[2],
        addrs[2].into(),
        6100,
        FLOW_MBPS,
        1000,
    )?;
    let rode = wait_for(RIDE_MAX_WAIT + Duration::from_secs(30), || {
        let l = links(r, addrs[2]).ok()?;
        let x = l.into_iter().find(|x| riding(x))?;
        (x["latest"]["started_at"].as_f64()? > flow_start).then_some(x)
    })
    .with_context(|| {
        format!(
            "n2's n0-mgrp never ran after the flow started: {:#?}\n{}",
            links(r, addrs[2]).ok(),
            logs(&overlays)
        )
    })?;
    let e = &rode["latest"];
    eprintln!(
        "    n2 n0-mgrp: ran {:.1} s after the {FLOW_MBPS} Mbit/s flow began ({left:.1} s of its {} s wait were left then), {:.1} s before the wait would have ended (sender reported {} bit/s), rider share {:.3}",
        e["started_at"].as_f64().unwrap_or(0.0) - flow_start,
        RIDE_MAX_WAIT.as_secs(),
        until - e["started_at"].as_f64().unwrap_or(0.0),
        rode["traffic_bps"],
        e["rider_share"].as_f64().unwrap_or(0.0)
    );
    ensure!(
        e["started_at"].as_f64().unwrap_or(f64::MAX) < until - 1.0,
        "the run started at the end of its wait, not for the traffic: {rode:#}\n{}",
        logs(&overlays)
    );
    ensure!(
        e["riding_probe_bytes"].as_u64().unwrap_or(0) > 0,
        "nothing rode: {rode:#}"
    );
    // Node 0's mgrpd metered every byte of the flow as traffic to node 2.
    let arrived = flow.stop();
    let (_, peers) = daemons[0].api()?.traffic()?;
    let to_n2 = peers
        .iter()
        .find(|p| p.peer == std::net::IpAddr::V4(addrs[2]))
        .with_context(|| format!("{peers:?}"))?;
    ensure!(to_n2.bytes >= arrived, "{to_n2:?}, {arrived} bytes arrived");

    // Node 0's overlay goes away: node 1's links from it find it down and back off...
    overlays[0].stop();
    // (Not the link that waits for traffic: it asks n0 first and waits its 40 s.)
    let from_n0 = |l: &Value| {
        l["name"].as_str().is_some_and(|n| n.starts_with("n0-")) && l["ride_min_bps"].is_null()
    };
    for addr in &addrs[1..2] {
        let down = wait_for(Duration::from_secs(90), || {
            let l = links(r, *addr).ok()?;
            l.iter()
                .filter(|x| from_n0(x))
                .all(|x| x["runs"]["peer_down"].as_u64().unwrap_or(0) > 0)
                .then_some(())
        });
        ensure!(
            down.is_some(),
            "{addr} never saw n0 down: {:#?}\n{}",
            links(r, *addr).ok(),
            logs(&overlays)
        );
    }
    // ... and pick it up again once it is back.
    let before: Vec<Vec<u64>> = addrs[1..2]
        .iter()
        .map(|a| {
            links(r, *a)
                .unwrap_or_default()
                .iter()
                .filter(|x| from_n0(x))
                .map(|x| x["runs"]["estimate"].as_u64().unwrap_or(0))
                .collect()
        })
        .collect();
    overlays[0] = overlay(&star.hosts[0], &confs[0])?;
    for (addr, before) in addrs[1..2].iter().zip(&before) {
        let resumed = wait_for(Duration::from_secs(150), || {
            let l = links(r, *addr).ok()?;
            l.iter()
                .filter(|x| from_n0(x))
                .zip(before)
                .all(|(x, b)| x["runs"]["estimate"].as_u64().unwrap_or(0) > *b)
                .then_some(())
        });
        ensure!(
            resumed.is_some(),
            "{addr}: the links from n0 did not resume: {:#?}\n{}",
            links(r, *addr).ok(),
            logs(&overlays)
        );
    }
    drop(overlays);
    drop(daemons);
    Ok(())
}

/// Two hosts around the router, each with a 10 Mbit/s downlink and an mgrpd.
fn two_hosts_at_10mbit() -> anyhow::Result<(Star, Vec<mgrp_testbed::Daemon>)> {
    let star = Star::new(&[
        Some(("10mbit".to_string(), "1540".to_string())),
        Some(("10mbit".to_string(), "1540".to_string())),
    ])?;
    let daemons = star.daemons(&std::env::current_exe()?, &["mgrpd"], &[])?;
    Ok((star, daemons))
}

/// Two overlay nodes on `star`'s first two hosts, each beside its mgrpd: node 1
/// measures node 0 by `links` (name, method, interval and time limit in seconds);
/// `extra` is added to both configurations. Returns the configurations' directory
/// (removed on drop) and the overlays.
fn two_nodes(
    star: &Star,
    daemons: &[mgrp_testbed::Daemon],
    tag: &str,
    extra: &str,
    links: &[(&str, &str, u32, u32)],
) -> anyhow::Result<(TempDir, Vec<Process>)> {
    let addrs = &star.addrs;
    let dir = TempDir::new(&format!("mgrp-overlay-{tag}"))?;
    let confs: Vec<PathBuf> = (0..2)
        .map(|i| {
            let mut c = format!(
                "name = \"{tag}{i}\"\nlisten = \"{}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\n{extra}",
                addrs[i],
                daemons[i].socket.display()
            );
            if i == 1 {
                for (name, method, interval, limit) in links {
                    c.push_str(&format!(
                        "[[link]]\nname = \"{name}\"\nfrom = \"{}\"\nmethod = \"{method}\"\ninterval = \"{interval}s\"\ntime-limit = \"{limit}s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n",
                        addrs[0]
                    ));
                }
            }
            let p = dir.0.join(format!("{tag}{i}.toml"));
            std::fs::write(&p, c).map(|()| p)
        })
        .collect::<Result<_, _>>()?;
    let overlays = star
        .hosts
        .iter()
        .zip(&confs)
        .map(|(ns, c)| overlay(ns, c))
        .collect::<anyhow::Result<_>>()?;
    Ok((dir, overlays))
}

/// The overlays' logs, for a failure's message.
fn logs_of(overlays: &[Process], tag: &str) -> String {
    overlays
        .iter()
        .enumerate()
        .map(|(i, p)| format!("--- overlay {tag}{i} ---\n{}\n", p.log()))
        .collect()
}

/// Two hosts around the router, each behind a 10 Mbit/s tbf; node 1 measures the
/// path from node 0 over MGRP by pathChirp and by badabing, each its own link with its
/// own schedule. Both links answer in the JSON API with their method, their class
/// (background) and their metric (pathChirp's estimate, below the path's capacity;
/// badabing's loss episodes on a quiet path: none), `/metrics` serves each in base
/// units with its method label, and the two ran side by side (both background). What
/// running side by side costs pathChirp's accuracy is the fan-out bench's figure, not a
/// band here: a 12-s run ends before a second range's 11 chirps are in (the range
/// first adapts after about 14 chirps, 8 s), so its estimate is read from chirps of
/// 10 to 200 Mbit/s on a 10 Mbit/s path and spreads wide.
fn two_methods_on_one_path() -> anyhow::Result<()> {
    let (star, daemons) = two_hosts_at_10mbit()?;
    let (r, addrs) = (&star.router, star.addrs.clone());
    let (_dir, overlays) = two_nodes(
        &star,
        &daemons,
        "m",
        "max-running = 2\n",
        &[("chirp", "pathchirp", 2, 12), ("loss", "badabing", 2, 6)],
    )?;
    let logs = || logs_of(&overlays, "m");
    // Each link answered at least twice; both methods are background, so they ran
    // side by side rather than in turns.
    let all = wait_for(Duration::from_secs(150), || {
        let l = links(r, addrs[1]).ok()?;
        (l.len() == 2
            && l.iter()
                .all(|x| x["runs"]["estimate"].as_u64().unwrap_or(0) >= 2))
        .then_some(l)
    });
    let Some(all) = all else {
        bail!(
            "m1: the links did not both answer twice within 150 s: {:#?}\n{}",
            links(r, addrs[1]).ok(),
            logs()
        );
    };
    let (_, metrics) = http(r, addrs[1], "GET", "/metrics")?;
    mgrp_testbed::http::promtool_check_metrics(&metrics).context("m1's /metrics")?;
    let truth = ip_level_truth(10.0, 1028, &[]);
    let mut spans = Vec::new();
    for l in &all {
        let name = l["name"].as_str().unwrap_or_default();
        let e = &l["latest"];
        eprintln!("    m1 {name}: {e}");
        match name {
            "chirp" => {
                ensure!(
                    l["method"] == "pathchirp" && e["method"] == "pathchirp",
                    "{l}"
                );
                let v = e["low_bps"].as_f64().context("no estimate")? / 1e6;
                ensure!(
                    v > 0.0 && v <= 10.0,
                    "pathChirp read {v:.2} Mbit/s on a 10 Mbit/s path (truth {truth:.2})\n{}",
                    logs()
                );
                let served = metric(
                    &metrics,
                    "mgrp_overlay_available_bandwidth_bytes_per_second",
                    &[("link", name), ("method", "pathchirp"), ("bound", "low")],
                )
                .with_context(|| format!("no pathchirp bandwidth in\n{metrics}"))?;
                ensure!(served > 0.0, "{served}");
            }
            "loss" => {
                ensure!(l["method"] == "badabing", "{l}");
                let loss = &e["loss"];
                ensure!(
                    loss["episode_frequency"].as_f64() == Some(0.0)
                        && loss["loss_rate"].as_f64() == Some(0.0)
                        && loss["experiments"].as_u64().unwrap_or(0) > 100,
                    "a quiet path with loss episodes: {e}"
                );
                ensure!(
                    e["low_bps"].is_null(),
                    "badabing measures no bandwidth: {e}"
                );
                let served = metric(
                    &metrics,
                    "mgrp_overlay_loss_episode_frequency_ratio",
                    &[("link", name), ("method", "badabing")],
                )
                .with_context(|| format!("no loss-episode frequency in\n{metrics}"))?;
                ensure!(served == 0.0, "{served}");
                ensure!(
                    metric(&metrics, "mgrp_overlay_loss_ratio", &[("link", name)]) == Some(0.0),
                    "no loss ratio in\n{metrics}"
                );
            }
            other => bail!("unexpected link {other}"),
        }
        let (status, body) = http(
            r,
            addrs[1],
            "GET",
            &format!("/v1/links/{name}/history?limit=100"),
        )?;
        ensure!(status == 200, "history of {name}: {status} {body}");
        let h: Value = serde_json::from_str(&body)?;
        for run in h["estimates"].as_array().cloned().unwrap_or_default() {
            if let (Some(a), Some(b)) = (run["started_at"].as_f64(), run["ended_at"].as_f64()) {
                spans.push((a, b, name.to_string()));
            }
        }
    }
    let beside = spans.iter().any(|(a0, b0, n0)| {
        spans
            .iter()
            .any(|(a1, b1, n1)| n0 != n1 && a1 < b0 && a0 < b1)
    });
    ensure!(
        beside,
        "pathChirp and badabing never ran at once, though both are background: {spans:?}"
    );
    let (_, body) = http(r, addrs[1], "GET", "/v1/links")?;
    let v: Value = serde_json::from_str(&body)?;
    for l in v["links"].as_array().cloned().unwrap_or_default() {
        ensure!(l["class"] == "background", "{l}");
    }
    drop(overlays);
    drop(daemons);
    Ok(())
}

/// m1 measures the path from m0 (10 Mbit/s into m1) by pathload, btc and badabing
/// and serves a transfer-rate prediction for it: first the scaled available
/// bandwidth, with its inputs and methods, then, once a bulk TCP flow from m0 runs,
/// the rate m0's kernel reports for it, and once it stops the scaled bandwidth blended
/// with that flow's rate (history); a BBR flow gives BBR's own estimate and does not
/// replace the CUBIC flow as history for CUBIC's predictions.
fn btc_from_runs_and_from_the_kernel() -> anyhow::Result<()> {
    let (star, daemons) = two_hosts_at_10mbit()?;
    let (r, addrs) = (&star.router, star.addrs.clone());
    let (_dir, overlays) = two_nodes(
        &star,
        &daemons,
        "t",
        "[btc]\nkernel-poll = \"1s\"\n",
        &[
            ("abw", "pathload-fast", 4, 30),
            ("shape", "btc", 4, 20),
            ("loss", "badabing", 20, 5),
        ],
    )?;
    let logs = || logs_of(&overlays, "t");
    let btc_of = |name: &str| -> Option<Value> {
        let (status, body) = http(r, addrs[1], "GET", &format!("/v1/links/{name}")).ok()?;
        (status == 200).then_some(())?;
        serde_json::from_str::<Value>(&body)
            .ok()
            .map(|v| v["prediction"].clone())
    };
    // Every input there: the prediction is the scaled available bandwidth.
    let b = wait_for(Duration::from_secs(120), || {
        let b = btc_of("abw")?;
        let i = &b["inputs"];
        (!i["available"].is_null() && !i["shape"].is_null() && !i["loss"].is_null()).then_some(b)
    });
    let Some(b) = b else {
        bail!(
            "t1: no prediction with every input within 120 s: {:#?}\n{}",
            btc_of("abw"),
            logs()
        );
    };
    eprintln!("    t1 btc from runs: {b}");
    let cap = b["inputs"]["shape"]["capacity_bps"].as_f64().unwrap_or(0.0) / 1e6;
    ensure!((8.0..=12.0).contains(&cap), "capacity {cap} Mbit/s: {b}");
    let p = &b["prediction"];
    ensure!(p["method"] == "scaled-abw", "{b}");
    let bps = p["bps"].as_f64().unwrap_or(0.0);
    ensure!(bps > 0.5e6 && bps <= cap * 1e6 + 1.0, "{b}");
    ensure!(
        p["basis"].as_str().unwrap_or("").contains("pathload-fast"),
        "{b}"
    );
    // Every link from m0 carries the same prediction.
    for name in ["shape", "loss"] {
        let o = btc_of(name).context("no such link")?;
        ensure!(
            o["neighbour"] == b["neighbour"]
                && o["inputs"]["shape"]["capacity_bps"] == b["inputs"]["shape"]["capacity_bps"],
            "{name}: {o}"
        );
    }
    let note = b["inputs"]["kernel_note"].as_str().unwrap_or("");
    ensure!(note.contains("no TCP flow"), "kernel note: {note:?}");
    let (_, metrics) = http(r, addrs[1], "GET", "/metrics")?;
    mgrp_testbed::http::promtool_check_metrics(&metrics).context("t1's /metrics")?;
    ensure!(
        metric(
            &metrics,
            "mgrp_overlay_btc_prediction_bytes_per_second",
            &[("link", "abw"), ("predictor", "scaled-abw")]
        )
        .is_some_and(|v| v > 0.0),
        "no scaled-abw prediction in\n{metrics}"
    );
    ensure!(
        metric(
            &metrics,
            "mgrp_overlay_path_capacity_bytes_per_second",
            &[("link", "shape")]
        )
        .is_some_and(|v| v > 1e6),
        "no capacity in\n{metrics}"
    );
    // A bulk flow from m0 by `congestion` on `port`, and the prediction once its
    // kernel's value is it.
    let kernel_flow = |port: u16, congestion: &str| -> anyhow::Result<_> {
        let flow = mgrp_testbed::traffic::tcp_bulk(
            &star.hosts[0],
            &star.hosts[1],
            addrs[1].into(),
            port,
            congestion,
        )?;
        let k = wait_for(Duration::from_secs(30), || {
            let b = btc_of("abw")?;
            (b["prediction"]["method"] == "kernel"
                && b["inputs"]["kernel"]["congestion"] == congestion)
                .then_some(b)
        });
        let Some(k) = k else {
            bail!(
                "t1: the {congestion} flow's rate did not become the prediction within 30 s: {:#?}\n{}",
                btc_of("abw"),
                logs()
            );
        };
        Ok((flow, k))
    };
    // CUBIC: its kernel's delivery rate is the prediction.
    let (flow, k) = kernel_flow(5301, "cubic")?;
    eprintln!(
        "    t1 btc with a flow ({:.2} Mbit/s so far): {k}",
        flow.mbps()
    );
    let kb = k["prediction"]["bps"].as_f64().unwrap_or(0.0) / 1e6;
    ensure!((3.0..=10.5).contains(&kb), "kernel {kb} Mbit/s: {k}");
    ensure!(
        k["prediction"]["basis"]
            .as_str()
            .unwrap_or("")
            .contains("kernel: delivery rate"),
        "{k}"
    );
    let (_, metrics) = http(r, addrs[1], "GET", "/metrics")?;
    ensure!(
        metric(
            &metrics,
            "mgrp_overlay_btc_prediction_bytes_per_second",
            &[("link", "abw"), ("predictor", "kernel")]
        )
        .is_some_and(|v| v > 0.0),
        "no kernel prediction in\n{metrics}"
    );
    // Three more polls see it (its history then counts its bytes), then the flow
    // is gone and the kernel's rate ages out (three polls).
    std::thread::sleep(Duration::from_secs(3));
    drop(flow);
    let after = wait_for(Duration::from_secs(20), || {
        let b = btc_of("abw")?;
        (b["prediction"]["method"] != "kernel").then_some(b)
    });
    ensure!(
        after.is_some(),
        "the kernel's rate stayed after the flow ended: {:#?}",
        btc_of("abw")
    );
    // ... and the flow becomes history: blended into the probes' prediction with
    // nearly all the weight (seconds old of 30 min), once the probes read what they
    // did when it began (a run it shared the path with may read less).
    let blended = wait_for(Duration::from_secs(60), || {
        let b = btc_of("abw")?;
        (b["prediction"]["history_weight"].as_f64()? > 0.0).then_some(b)
    });
    let Some(h) = blended else {
        bail!(
            "t1: the ended CUBIC flow was not blended in within 60 s: {:#?}\n{}",
            btc_of("abw"),
            logs()
        );
    };
    eprintln!("    t1 btc after the flow: {}", h["prediction"]);
    let (p, earlier) = (&h["prediction"], &h["inputs"]["history"]);
    let hb = earlier["bps"].as_f64().unwrap_or(0.0);
    let w = p["history_weight"].as_f64().unwrap_or(0.0);
    let bps = p["bps"].as_f64().unwrap_or(0.0);
    ensure!(
        earlier["congestion"] == "cubic"
            && (3e6..=10.5e6).contains(&hb)
            && earlier["seen_s"].as_f64().unwrap_or(0.0) >= 1.0
            && w > 0.9
            && p["method"] != "kernel"
            && p["basis"]
                .as_str()
                .unwrap_or("")
                .contains("blended with history"),
        "{h}"
    );
    // Nearly all the weight: within 10 % of the flow's rate, whatever the probes say.
    ensure!(
        (bps / hb - 1.0).abs() < 0.1,
        "blend {bps} vs the flow's {hb}: {h}"
    );
    // BBR: the kernel's value is BBR's own bottleneck estimate.
    let (flow, k) = kernel_flow(5302, "bbr")?;
    eprintln!(
        "    t1 btc with a BBR flow ({:.2} Mbit/s so far): {}",
        flow.mbps(),
        k["prediction"]
    );
    // The predictions are CUBIC's (the default): the CUBIC flow stays the history,
    // and has no weight while a flow runs.
    let earlier = &k["inputs"]["history"];
    ensure!(
        earlier["congestion"] == "cubic"
            && earlier["weight"] == 0.0
            && earlier["note"]
                .as_str()
                .unwrap_or("")
                .contains("a flow runs now"),
        "{k}"
    );
    let model = k["inputs"]["kernel"]["bbr_bps"].as_f64().unwrap_or(0.0);
    ensure!(
        (3e6..=10.5e6).contains(&model)
            && k["prediction"]["bps"].as_f64() == Some(model)
            && k["prediction"]["basis"]
                .as_str()
                .unwrap_or("")
                .contains("BBR's bottleneck estimate"),
        "BBR's estimate was not read: {k}"
    );
    drop(flow);
    drop(overlays);
    drop(daemons);
    Ok(())
}

/// p1 measures the path from p0 (10 Mbit/s into p1) by pathload every 3 s. While a
/// bulk TCP flow from p0 runs, passive estimates from it stand in for the runs and
/// lie near the path's rate; when it stops, active runs come back; a slow writer
/// (application-limited) gives no passive estimate, and the link says why.
fn passive_when_traffic_runs() -> anyhow::Result<()> {
    let (star, daemons) = two_hosts_at_10mbit()?;
    let (r, addrs) = (&star.router, star.addrs.clone());
    let (_dir, overlays) = two_nodes(
        &star,
        &daemons,
        "p",
        "[btc]\nkernel-poll = \"1s\"\n",
        &[("abw", "pathload-fast", 3, 20)],
    )?;
    let logs = || logs_of(&overlays, "p");
    let link = || -> Option<Value> {
        let (status, body) = http(r, addrs[1], "GET", "/v1/links/abw").ok()?;
        (status == 200).then_some(())?;
        serde_json::from_str(&body).ok()
    };
    let runs = |l: &Value| l["runs"]["estimate"].as_u64().unwrap_or(0);
    let active = wait_for(Duration::from_secs(60), || link().filter(|l| runs(l) >= 1));
    let Some(active) = active else {
        bail!(
            "p1: no active estimate within 60 s: {:#?}\n{}",
            link(),
            logs()
        );
    };
    ensure!(
        active["passive"]["covered"] == 0 && active["latest"]["method"] == "pathload-fast",
        "{active}"
    );
    // A bulk flow from p0: passive estimates take over.
    let flow = mgrp_testbed::traffic::tcp_bulk(
        &star.hosts[0],
        &star.hosts[1],
        addrs[1].into(),
        5302,
        "cubic",
    )?;
    let passive = wait_for(Duration::from_secs(40), || {
        link().filter(|l| l["latest"]["method"] == "passive-tcp")
    });
    let Some(passive) = passive else {
        bail!(
            "p1: no passive estimate within 40 s of a bulk flow: {:#?}\n{}",
            link(),
            logs()
        );
    };
    eprintln!("    p1 passive: {}", passive["latest"]);
    let bps = passive["latest"]["low_bps"].as_f64().unwrap_or(0.0) / 1e6;
    ensure!(
        (6.0..=10.5).contains(&bps),
        "passive {bps} Mbit/s: {passive}"
    );
    // The flow's segments, stamped at both ends: dispersion and trend estimates of
    // the 10 Mbit/s path.
    let timed = wait_for(Duration::from_secs(20), || {
        let l = link()?;
        let t = &l["passive"]["timing"];
        (t["dispersion_bps"].is_number() && t["trend_bps"].is_number()).then(|| t.clone())
    });
    let Some(t) = timed else {
        bail!(
            "p1: no dispersion and trend estimates within 20 s of passive-tcp: {:#}\n{}",
            link().unwrap_or_default()["passive"],
            logs()
        );
    };
    eprintln!("    p1 packet timing: {t}");
    let mbps = |k: &str| t[k].as_f64().unwrap_or(0.0) / 1e6;
    ensure!(
        (5.0..=15.0).contains(&mbps("dispersion_bps")) && (3.0..=15.0).contains(&mbps("trend_bps")),
        "packet timing far from the 10 Mbit/s path: {t}"
    );
    ensure!(t["matched"].as_u64() > Some(100), "{t}");
    // No payload byte is kept or served: a flow of a marker text runs beside the bulk
    // flow, and nothing the node serves carries it.
    let marker = b"PAYLOAD-MARKER-4d1c9e-";
    let secret = marker_flow(&star.hosts[0], &star.hosts[1], addrs[1], 5304, marker)?;
    std::thread::sleep(Duration::from_secs(5));
    let mut served = String::new();
    for path in [
        "/v1/links",
        "/v1/links/abw",
        "/v1/links/abw/history?limit=1000",
        "/metrics",
        "/",
    ] {
        let (_, body) = http(r, addrs[1], "GET", path)?;
        served.push_str(&body);
    }
    served.push_str(&sse_for(r, addrs[1], Duration::from_secs(5))?);
    drop(secret);
    let text = std::str::from_utf8(marker)?;
    ensure!(
        served.contains("\"passive\"") && !served.contains(text),
        "a payload text was served, or nothing passive was ({} bytes read)",
        served.len()
    );
    // A run that had started when the flow began may still end; after it none.
    std::thread::sleep(Duration::from_secs(20));
    let before = link().context("no link")?;
    std::thread::sleep(Duration::from_secs(12));
    let after = link().context("no link")?;
    ensure!(
        runs(&after) + after["runs"]["cross_traffic"].as_u64().unwrap_or(0)
            == runs(&before) + before["runs"]["cross_traffic"].as_u64().unwrap_or(0)
            && after["passive"]["covered"].as_u64() > before["passive"]["covered"].as_u64(),
        "active runs went on while the flow ran:\nbefore {before}\nafter {after}\n{}",
        logs()
    );
    // The flow gone, active runs resume within an interval (and a run's time).
    drop(flow);
    let resumed = wait_for(Duration::from_secs(40), || {
        link().filter(|l| runs(l) > runs(&after) && l["latest"]["method"] == "pathload-fast")
    });
    ensure!(
        resumed.is_some(),
        "no active run within 40 s of the flow's end: {:#?}\n{}",
        link(),
        logs()
    );
    // A slow writer is application-limited: no passive estimate, and why.
    let slow = mgrp_testbed::traffic::tcp_source(
        &star.hosts[0],
        &star.hosts[1],
        addrs[1].into(),
        5303,
        Some(1.0),
    )?;
    let why = wait_for(Duration::from_secs(20), || {
        let l = link()?;
        let note = l["passive"]["last"]["note"].as_str()?.to_string();
        (note.contains("application") && l["passive"]["last"]["flows"].as_u64() >= Some(1))
            .then_some((l, note))
    });
    let Some((l, note)) = why else {
        bail!(
            "p1: a slow writer's flow was not named application-limited: {:#?}",
            link()
        );
    };
    eprintln!("    p1 with a slow writer: {note}");
    ensure!(l["latest"]["method"] == "pathload-fast", "{l}");
    // Its segments are timed but not used: the flow is not network-limited.
    let t = wait_for(Duration::from_secs(10), || {
        let t = link()?["passive"]["timing"].clone();
        (t["not_network_limited"].as_u64() > Some(0)).then_some(t)
    });
    let Some(t) = t else {
        bail!(
            "p1: the slow writer's segments were not counted as not network-limited: {:#}",
            link().unwrap_or_default()["passive"]
        );
    };
    ensure!(
        t["trend_bps"].is_null() && t["dispersion_bps"].is_null() && t["note"].is_string(),
        "an application-limited flow gave a timing estimate: {t}"
    );
    drop(slow);
    drop(overlays);
    drop(daemons);
    Ok(())
}

/// A TCP flow from `from` to `to:port` whose payload is `marker` over and over, until
/// dropped.
fn marker_flow(
    from: &Netns,
    to_ns: &Netns,
    to: Ipv4Addr,
    port: u16,
    marker: &'static [u8],
) -> anyhow::Result<impl Drop> {
    struct Flow(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Flow {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let listener = to_ns.run(|| std::net::TcpListener::bind((to, port)))??;
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        }
    });
    let mut stream = from.run(|| TcpStream::connect((to, port)))??;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let buf: Vec<u8> = marker.iter().copied().cycle().take(1 << 14).collect();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if stream.write_all(&buf).is_err() {
                break;
            }
        }
    });
    Ok(Flow(stop))
}

/// Everything the event stream of the node at `addr` says for `time`.
fn sse_for(ns: &Netns, addr: Ipv4Addr, time: Duration) -> anyhow::Result<String> {
    let stream = ns.run(|| TcpStream::connect((addr, API_PORT)))??;
    stream.set_read_timeout(Some(time))?;
    let host = stream.peer_addr()?;
    (&stream).write_all(
        format!("GET /v1/stream HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n")
            .as_bytes(),
    )?;
    let mut out = String::new();
    let mut r = BufReader::new(stream);
    let until = Instant::now() + time;
    while Instant::now() < until {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => out.push_str(&line),
        }
    }
    Ok(out)
}

/// Three hosts at 10 Mbit/s, mgrpd on each; host 0 runs the sender every tool and the
/// overlay's `[serve]` run, over MGRP; host 1 measures it by pathChirp and host 2 by
/// badabing, at the same time. Both are served (no `busy`), both get estimates
/// (pathChirp's below the path's capacity, badabing's of a quiet path: no loss
/// episode), and the sender had both measurements at once. How close pathChirp comes
/// beside other measurements is the fan-out bench's figure.
fn two_receivers_measure_one_sender_at_once() -> anyhow::Result<()> {
    use mgrp_tool::{ServeEvent, ServeOptions, Server};
    use pathload_rs::control::Transport;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let star = Star::new(&[
        Some(("10mbit".to_string(), "1540".to_string())),
        Some(("10mbit".to_string(), "1540".to_string())),
        Some(("10mbit".to_string(), "1540".to_string())),
    ])?;
    let daemons = star.daemons(&std::env::current_exe()?, &["mgrpd"], &[])?;
    let sender = star.addrs[0];
    let stop = Arc::new(AtomicBool::new(false));
    let events: Arc<Mutex<Vec<ServeEvent>>> = Arc::default();
    let opts = ServeOptions {
        bind: Some(sender.into()),
        socket: daemons[0].socket.clone(),
        name: "two-receivers".into(),
        ..ServeOptions::new(Transport::Mgrp)
    };
    let serving = {
        let (stop, events) = (Arc::clone(&stop), Arc::clone(&events));
        star.hosts[0].spawn("sender", move || {
            let server = Server::bind(opts)?;
            server.serve(true, &stop, &mut |e| mgrp_rt::lock(&events).push(e))
        })?
    };
    // The server listens once it is bound; give it the moment.
    std::thread::sleep(Duration::from_millis(300));
    let time = Duration::from_secs(20);
    let chirp = {
        let socket = daemons[1].socket.clone();
        star.hosts[1].spawn("pathchirp", move || {
            let mut o =
                pathchirp_rs::tool::MeasureOptions::new(sender.to_string(), Transport::Mgrp, time);
            o.session.socket = socket;
            pathchirp_rs::tool::measure(&o, &AtomicBool::new(false), &mut |_| {})
                .map_err(|e| anyhow::anyhow!("pathChirp: {e}"))
        })?
    };
    let loss = {
        let socket = daemons[2].socket.clone();
        star.hosts[2].spawn("badabing", move || {
            let mut o =
                badabing_rs::tool::MeasureOptions::new(sender.to_string(), Transport::Mgrp, time);
            o.session.socket = socket;
            badabing_rs::tool::measure(&o, &AtomicBool::new(false), &mut |_| {})
                .map_err(|e| anyhow::anyhow!("badabing: {e}"))
        })?
    };
    let chirp = chirp
        .join()
        .map_err(|_| anyhow::anyhow!("pathChirp panicked"));
    let loss = loss
        .join()
        .map_err(|_| anyhow::anyhow!("badabing panicked"));
    stop.store(true, Ordering::Relaxed);
    let served = serving
        .join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))?;
    let events = mgrp_rt::lock(&events).clone();
    let (chirp, loss) = (chirp??, loss??);
    served?;
    let truth = ip_level_truth(10.0, 1028, &[]);
    let bps = chirp
        .last
        .as_ref()
        .map(|s| s.adjusted_bps / 1e6)
        .with_context(|| format!("pathChirp gave no estimate: {:?}", chirp.counts))?;
    eprintln!(
        "    pathChirp {bps:.2} Mbit/s (truth {truth:.2}); badabing {} slots, frequency {}",
        loss.estimate.slots, loss.estimate.frequency
    );
    ensure!(
        bps > 0.0 && bps <= 10.0,
        "pathChirp read {bps:.2} Mbit/s on a 10 Mbit/s path beside badabing (truth {truth:.2})"
    );
    ensure!(
        loss.estimate.slots > 100 && loss.estimate.frequency == 0.0,
        "badabing on a quiet path: {:?}",
        loss.estimate
    );
    ensure!(
        !events.iter().any(|e| matches!(e, ServeEvent::Refused(..))),
        "a receiver was refused: {events:?}"
    );
    // Both measurements were connected before either ended.
    let first_done = events
        .iter()
        .position(|e| matches!(e, ServeEvent::Done(..)))
        .context("no measurement ended")?;
    let connected = events[..first_done]
        .iter()
        .filter(|e| matches!(e, ServeEvent::Connected(..)))
        .count();
    ensure!(
        connected == 2,
        "the sender did not serve both at once: {events:?}"
    );
    drop(daemons);
    Ok(())
}

/// The names of the links of the node at `addr`, each with whether it has an estimate.
fn link_names(ns: &Netns, addr: Ipv4Addr) -> Option<Vec<(String, bool)>> {
    let mut v: Vec<(String, bool)> = links(ns, addr)
        .ok()?
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or_default().to_owned(),
                !l["latest"].is_null(),
            )
        })
        .collect();
    v.sort();
    Some(v)
}

/// The oldest run a link's history holds: its number.
fn first_seq(ns: &Netns, addr: Ipv4Addr, link: &str) -> Option<u64> {
    let (status, body) = http(
        ns,
        addr,
        "GET",
        &format!("/v1/links/{link}/history?limit=1000"),
    )
    .ok()?;
    let v: Value = serde_json::from_str(&body).ok()?;
    (status == 200).then(|| v["estimates"][0]["seq"].as_u64())?
}

/// Four hosts, and on each an mgrpd and an overlay that take their part of one mesh
/// description: keyed MGRP by pair keys each derives from its own key pair and the
/// others' public keys (no key file copied), and links named by member. n0, n1 and n2
/// measure each other by pathChirp; n3 is measured with n0 (a star). Then the
/// description changes (n3 leaves the groups; n0 and n1 add badabing) and every
/// mgrpd and overlay is sent SIGHUP: each puts its new part in force without a
/// restart (the same PIDs), n3's peer and route leave n0's mgrpd (and n0's leave
/// n3's), the links from and to n3 stop and leave the API, the new links give
/// estimates within two intervals and a run, and the links that did not change keep
/// their history; n3 then comes back the same way.
fn a_mesh_follows_its_description() -> anyhow::Result<()> {
    use mgrp_core::pair::PrivateKey;
    const INTERVAL_S: u64 = 5;
    let star = Star::new(&vec![Some(("10mbit".to_string(), "1540".to_string())); 4])?;
    let addrs = star.addrs.clone();
    let dir = TempDir::new("mgrp-overlay-mesh")?;
    let keys: Vec<PrivateKey> = (0..4u8)
        .map(|i| PrivateKey::from_bytes([0x91 + i; 32]))
        .collect();
    let members: String = (0..4)
        .map(|i| {
            format!(
                "[[member]]\nname = \"n{i}\"\naddress = \"{}\"\napi = \"http://{}:{API_PORT}\"\npublic-key = \"{}\"\n\n",
                addrs[i],
                addrs[i],
                keys[i].public()
            )
        })
        .collect();
    let group = |name: &str, kind: &str, extra: &str, method: &str| {
        format!(
            "[[group]]\nname = \"{name}\"\nkind = \"{kind}\"\n{extra}\nmethods = [\"{method}\"]\ninterval = \"{INTERVAL_S}s\"\n\n"
        )
    };
    let core = group(
        "core",
        "full-mesh",
        "members = [\"n0\", \"n1\", \"n2\"]",
        "pathchirp",
    );
    let mesh = dir.0.join("mesh.toml");
    std::fs::write(
        &mesh,
        format!(
            "{members}{core}{}",
            group(
                "edge",
                "star",
                "hub = \"n0\"\nmembers = [\"n3\"]",
                "pathchirp"
            )
        ),
    )?;
    let me = std::env::current_exe()?;
    let mut daemons = Vec::new();
    let mut confs = Vec::new();
    for (i, ns) in star.hosts.iter().enumerate() {
        let key = dir.0.join(format!("n{i}.key"));
        std::fs::write(&key, keys[i].to_hex())?;
        std::fs::set_permissions(
            &key,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
        )?;
        let node = format!("n{i}");
        let d = mgrp_testbed::Daemon::start_via(
            ns,
            &me,
            &["mgrpd"],
            &[
                "--mesh",
                &mesh.display().to_string(),
                "--node",
                &node,
                "--private-key-file",
                &key.display().to_string(),
                "--hold-mode",
                "always",
            ],
        )?;
        let conf = dir.0.join(format!("n{i}.toml"));
        std::fs::write(
            &conf,
            format!(
                "listen = \"{}:{API_PORT}\"\nopen-api = true\nsocket = \"{}\"\nmesh = \"{}\"\nnode = \"{node}\"\n",
                addrs[i],
                d.socket.display(),
                mesh.display()
            ),
        )?;
        daemons.push(d);
        confs.push(conf);
    }
    let overlays: Vec<Process> = star
        .hosts
        .iter()
        .zip(&confs)
        .map(|(ns, c)| overlay(ns, c))
        .collect::<anyhow::Result<_>>()?;
    let r = &star.router;
    let want = |i: usize, names: &[&str]| -> anyhow::Result<()> {
        let mut names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        names.sort();
        let got = wait_for(Duration::from_secs(180), || {
            let l = link_names(r, addrs[i])?;
            (l.iter().map(|(n, _)| n).eq(names.iter()) && l.iter().all(|(_, e)| *e)).then_some(l)
        });
        ensure!(
            got.is_some(),
            "n{i}: not the links {names:?}, each with an estimate, within 180 s: {:?}\n{}",
            link_names(r, addrs[i]),
            logs_of(&overlays, "n")
        );
        Ok(())
    };
    want(0, &["n1-pathchirp", "n2-pathchirp", "n3-pathchirp"])?;
    want(1, &["n0-pathchirp", "n2-pathchirp"])?;
    want(2, &["n0-pathchirp", "n1-pathchirp"])?;
    want(3, &["n0-pathchirp"])?;
    let kept_from = first_seq(r, addrs[0], "n1-pathchirp").context("n0's history of n1")?;
    let pids: Vec<Option<u32>> = overlays.iter().map(Process::pid).collect();

    let daemon_pids: Vec<Option<u32>> = daemons.iter().map(|d| d.process.pid()).collect();
    let edge = group(
        "edge",
        "star",
        "hub = \"n0\"\nmembers = [\"n3\"]",
        "pathchirp",
    );
    let pair = group(
        "pair",
        "full-mesh",
        "members = [\"n0\", \"n1\"]",
        "badabing",
    );
    // Each mgrpd first (it admits and routes the peers the overlays then measure),
    // then each overlay; both kept their PIDs.
    // The `nth` reload since start, for the log.
    let reload = |nth: usize, what: &str| -> anyhow::Result<Instant> {
        for d in &daemons {
            d.process.signal(libc::SIGHUP);
        }
        for (i, d) in daemons.iter().enumerate() {
            let done = wait_for(Duration::from_secs(10), || {
                (d.process.log().matches("SIGHUP: reloaded").count() == nth).then_some(())
            });
            ensure!(
                done.is_some(),
                "n{i}'s mgrpd did not reload ({what}):\n{}",
                d.process.log()
            );
        }
        let signalled = Instant::now();
        for o in &overlays {
            o.signal(libc::SIGHUP);
        }
        Ok(signalled)
    };
    let table = |i: usize| star.hosts[i].ip(&["route", "show", "table", "4242"]);

    // n3 leaves the groups; n0 and n1 add badabing.
    std::fs::write(&mesh, format!("{members}{core}{pair}"))?;
    let signalled = reload(1, "n3 leaves")?;
    want(0, &["n1-badabing", "n1-pathchirp", "n2-pathchirp"])?;
    want(1, &["n0-badabing", "n0-pathchirp", "n2-pathchirp"])?;
    want(2, &["n0-pathchirp", "n1-pathchirp"])?;
    let empty = wait_for(Duration::from_secs(30), || {
        link_names(r, addrs[3]).filter(Vec::is_empty)
    });
    ensure!(
        empty.is_some(),
        "n3 still measures: {:?}",
        link_names(r, addrs[3])
    );
    let took = signalled.elapsed();
    ensure!(
        first_seq(r, addrs[0], "n1-pathchirp") == Some(kept_from),
        "n0's link from n1 lost its history at the reload"
    );
    // n3's peer and route are gone on n0, and n0's on n3.
    for (i, other) in [(0, 3), (3, 0)] {
        let log = daemons[i].process.log();
        ensure!(
            log.contains(&format!(
                "peers added: none; removed: {}/32; routes added: none; removed: {}/32",
                addrs[other], addrs[other]
            )),
            "n{i}'s mgrpd did not drop n{other}:\n{log}"
        );
        let t = table(i)?;
        ensure!(
            !t.contains(&addrs[other].to_string()),
            "n{i} still routes n{other} into its tunnel: {t}"
        );
    }

    // n3 comes back: measured within two intervals of the signal.
    std::fs::write(&mesh, format!("{members}{core}{pair}{edge}"))?;
    let rejoined = reload(2, "n3 rejoins")?;
    want(
        0,
        &[
            "n1-badabing",
            "n1-pathchirp",
            "n2-pathchirp",
            "n3-pathchirp",
        ],
    )?;
    want(3, &["n0-pathchirp"])?;
    let back = rejoined.elapsed();
    ensure!(
        table(0)?.contains(&addrs[3].to_string()),
        "n0 does not route n3 into its tunnel again"
    );
    for (i, (o, pid)) in overlays.iter().zip(&pids).enumerate() {
        ensure!(
            o.pid() == *pid && pid.is_some(),
            "n{i}'s overlay was restarted"
        );
        ensure!(
            o.log().contains("configuration reloaded"),
            "n{i} did not say it reloaded:\n{}",
            o.log()
        );
    }
    for (i, (d, pid)) in daemons.iter().zip(&daemon_pids).enumerate() {
        ensure!(
            d.process.pid() == *pid && pid.is_some(),
            "n{i}'s mgrpd was restarted"
        );
    }
    eprintln!(
        "    mesh of 4: every link derived and measured; after the description changed and SIGHUP, the new part in force with estimates in {:.1} s; a member back in {:.1} s",
        took.as_secs_f64(),
        back.as_secs_f64()
    );
    drop(overlays);
    drop(daemons);
    Ok(())
}

fn main() -> ExitCode {
    if let Some(code) = embed::embedded() {
        return code;
    }
    mgrp_testbed::harness::run(&[
        ("three_overlays_measure_every_link", check),
        ("two_methods_on_one_path", two_methods_on_one_path),
        (
            "btc_from_runs_and_from_the_kernel",
            btc_from_runs_and_from_the_kernel,
        ),
        ("passive_when_traffic_runs", passive_when_traffic_runs),
        (
            "two_receivers_measure_one_sender_at_once",
            two_receivers_measure_one_sender_at_once,
        ),
        (
            "a_mesh_follows_its_description",
            a_mesh_follows_its_description,
        ),
    ])
}
