//! The overlay in network namespaces (root): hosts A and B joined by a veth with a
//! `tbf rate 10mbit` bottleneck on A's egress, mgrpd on both, an overlay node on
//! each. B measures the path from A over MGRP and over plain UDP. Every link's
//! estimate contains the truth (a wide band), `/metrics` serves the same values as
//! the JSON API, a subscriber to the event stream receives new estimates, a real
//! Prometheus in B's namespace scraping B's overlay and B's mgrpd returns the values
//! they served, and killing A's overlay shows on B's links as a neighbour down with
//! back-off until A's overlay is back.
//!
//! Own `main` (no libtest harness): the daemons and overlays are this binary,
//! started as `namespaces mgrpd ...` and `namespaces overlay ...`, so they are never
//! a stale build.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod common;

use anyhow::{Context, bail, ensure};
use common::{first_value, promql_path, response};
use mgrp_testbed::traffic::ip_level_truth;
use mgrp_testbed::{ADDR_A, Daemon, Netns, Process, TwoHostOptions, TwoHosts, daemon_pair};
use serde_json::Value;

/// How far from the truth an estimate's range may lie, as a fraction of it.
const BAND: f64 = 0.2;
/// Where each overlay's API listens, inside its host.
const API: &str = "127.0.0.1:7700";
/// Where each mgrpd serves its metrics, inside its host.
const MGRPD_METRICS: &str = "127.0.0.1:9577";
/// Where Prometheus (in B) serves its API.
const PROMETHEUS: &str = "127.0.0.1:9090";

/// Files of one test run, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn overlay(ns: &Netns, config: &Path) -> anyhow::Result<Process> {
    let me = std::env::current_exe()?;
    Process::spawn(
        ns,
        &me,
        &[
            "overlay".into(),
            "--config".into(),
            config.display().to_string(),
            "--log-level".into(),
            "debug".into(),
        ],
    )
}

/// One request to the overlay API in `ns`: status and body.
fn http(ns: &Netns, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    http_to(ns, API, method, path)
}

/// One request to `addr` in `ns`: status and body.
fn http_to(ns: &Netns, addr: &str, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let (addr, method, path) = (addr.to_string(), method.to_string(), path.to_string());
    ns.run(move || -> anyhow::Result<(u16, String)> {
        let mut s = TcpStream::connect(addr.as_str())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                .as_bytes(),
        )?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        response(&text).context("not an HTTP response")
    })?
}

fn links(ns: &Netns) -> anyhow::Result<Vec<Value>> {
    let (status, body) = http(ns, "GET", "/v1/links")?;
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

/// Prometheus in `ns`, scraping the overlay and mgrpd there every second.
fn prometheus(ns: &Netns, dir: &Path) -> anyhow::Result<Process> {
    let program = Path::new("/usr/bin/prometheus");
    ensure!(
        program.exists(),
        "prometheus is not installed: `apt-get install prometheus` (as .ci/run does)"
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mgrp-overlay\n    static_configs:\n      - targets: ['{API}']\n  - job_name: mgrpd\n    static_configs:\n      - targets: ['{MGRPD_METRICS}']\n"
        ),
    )?;
    Process::spawn(
        ns,
        program,
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

fn check() -> anyhow::Result<()> {
    // The path's available bandwidth at the IP level with nothing else on it, as the
    // pathload-rs namespace tests take it.
    let truth = ip_level_truth(10.0, 228, &[]);
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "1540".into())),
        router: false,
    })?;
    let me = std::env::current_exe()?;
    let (a, b): (Daemon, Daemon) = daemon_pair(
        &net,
        &me,
        &["mgrpd"],
        &["--hold-mode", "always", "--metrics", MGRPD_METRICS],
    )?;
    let dir = TempDir(std::env::temp_dir().join(format!("mgrp-overlay-ns-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let a_conf = dir.0.join("a.toml");
    std::fs::write(
        &a_conf,
        format!(
            "name = \"a\"\nlisten = \"{API}\"\nsocket = \"{}\"\n",
            a.socket.display()
        ),
    )?;
    let b_conf = dir.0.join("b.toml");
    std::fs::write(
        &b_conf,
        format!(
            "name = \"b\"\nlisten = \"{API}\"\nsocket = \"{}\"\n[serve]\ntransports = []\n\
             [[link]]\nname = \"a-mgrp\"\nfrom = \"{ADDR_A}\"\ntransport = \"mgrp\"\ninterval = \"3s\"\ntime-limit = \"25s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n\
             [[link]]\nname = \"a-udp\"\nfrom = \"{ADDR_A}\"\ntransport = \"udp\"\ninterval = \"3s\"\ntime-limit = \"25s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n",
            b.socket.display()
        ),
    )?;
    let mut oa = overlay(&net.a, &a_conf)?;
    let ob = overlay(&net.b, &b_conf)?;
    let prom = prometheus(&net.b, &dir.0)?;
    let logs = |oa: &Process| {
        format!(
            "--- overlay A ---\n{}\n--- overlay B ---\n{}",
            oa.log(),
            ob.log()
        )
    };

    // A subscriber on B's event stream, from the start.
    let stream = net.b.run(|| -> anyhow::Result<TcpStream> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match TcpStream::connect(API) {
                Ok(s) => return Ok(s),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.into()),
            }
        }
    })??;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    (&stream)
        .write_all(b"GET /v1/stream HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")?;
    let events = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut r = BufReader::new(stream);
        let mut line = String::new();
        while seen.len() < 2 {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some(d) = line.trim_end().strip_prefix("data: ") {
                        if let Ok(v) = serde_json::from_str::<Value>(d) {
                            seen.push(v);
                        }
                    }
                }
            }
        }
        seen
    });

    // Both links give an estimate that contains the truth.
    let both = wait_for(Duration::from_secs(150), || {
        let l = links(&net.b).ok()?;
        (l.len() == 2 && l.iter().all(|x| !x["latest"].is_null())).then_some(l)
    });
    let Some(both) = both else {
        bail!(
            "no estimate on both links within 150 s: {:#?}\n{}",
            links(&net.b).ok(),
            logs(&oa)
        );
    };
    let (_, metrics) = http(&net.b, "GET", "/metrics")?;
    for l in &both {
        let name = l["name"].as_str().unwrap_or_default();
        let e = &l["latest"];
        let (lo, hi) = (
            e["low_bps"].as_f64().unwrap_or(0.0) / 1e6,
            e["high_bps"].as_f64().unwrap_or(0.0) / 1e6,
        );
        eprintln!(
            "    {name}: {lo:.2}-{hi:.2} Mbit/s (truth {truth:.2}), rider share {:.2}",
            e["rider_share"]
        );
        ensure!(
            lo - BAND * truth <= truth && truth <= hi + BAND * truth,
            "{name}: truth {truth:.2} Mbit/s is not within {lo:.2}-{hi:.2} ± {:.0} %\n{}",
            BAND * 100.0,
            logs(&oa)
        );
        // /metrics serves what the JSON serves, in bytes per second (or a later run's
        // value if one ended between the two requests).
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
                "{name}: metrics {low}, JSON {json_low}"
            );
        } else {
            ensure!(stamp > json_stamp, "{name}: metrics older than the JSON");
        }
    }
    // Prometheus in B got what B's overlay and B's mgrpd served: the time of a run B
    // recorded, and the probes B's mgrpd delivered.
    let stamp = wait_for(Duration::from_secs(30), || {
        promql(
            &net.b,
            "mgrp_overlay_estimate_timestamp_seconds{link=\"a-mgrp\",node=\"b\"}",
        )
    })
    .with_context(|| format!("Prometheus never had the estimate's time:\n{}", prom.log()))?;
    let (_, history) = http(&net.b, "GET", "/v1/links/a-mgrp/history?limit=1000")?;
    let history: Value = serde_json::from_str(&history)?;
    let ended: Vec<f64> = history["estimates"]
        .as_array()
        .map(|h| h.iter().filter_map(|e| e["ended_at"].as_f64()).collect())
        .unwrap_or_default();
    ensure!(
        ended.iter().any(|t| (t - stamp).abs() < 1e-3),
        "Prometheus has {stamp}, B's runs ended at {ended:?}"
    );
    let delivered = wait_for(Duration::from_secs(30), || {
        promql(&net.b, "mgrpd_daemon_probes_delivered_total").filter(|v| *v > 0.0)
    })
    .with_context(|| format!("Prometheus never had B's mgrpd counters:\n{}", prom.log()))?;
    let served = b.stats()?.daemon.probes_delivered as f64;
    ensure!(
        delivered <= served,
        "Prometheus {delivered} > mgrpd {served}"
    );
    drop(prom);

    let seen = events
        .join()
        .map_err(|_| anyhow::anyhow!("the stream reader panicked"))?;
    ensure!(seen.len() == 2, "the subscriber saw {} events", seen.len());
    ensure!(
        seen.iter()
            .all(|e| e["link"].is_string() && e["seq"].as_u64().is_some())
    );

    // A's overlay goes away: B's links find the neighbour down and back off...
    oa.stop();
    let down = wait_for(Duration::from_secs(90), || {
        let l = links(&net.b).ok()?;
        l.iter()
            .all(|x| x["runs"]["peer_down"].as_u64().unwrap_or(0) > 0)
            .then_some(l)
    });
    ensure!(
        down.is_some(),
        "B never saw A down: {:#?}\n{}",
        links(&net.b).ok(),
        logs(&oa)
    );
    // ... and pick it up again once it is back.
    let before: Vec<u64> = links(&net.b)?
        .iter()
        .map(|x| x["runs"]["estimate"].as_u64().unwrap_or(0))
        .collect();
    let oa2 = overlay(&net.a, &a_conf)?;
    let resumed = wait_for(Duration::from_secs(150), || {
        let l = links(&net.b).ok()?;
        l.iter()
            .zip(&before)
            .all(|(x, b)| x["runs"]["estimate"].as_u64().unwrap_or(0) > *b)
            .then_some(())
    });
    ensure!(
        resumed.is_some(),
        "B's links did not resume: {:#?}\n{}",
        links(&net.b).ok(),
        logs(&oa2)
    );
    drop(ob);
    drop(oa2);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some("mgrpd") => return mgrpd::main_with_args(&args[1..]),
        Some("overlay") => return mgrp_overlay::cli::main_with_args(&args[1..]),
        _ => {}
    }
    if args.iter().any(|a| a == "--list") {
        println!("two_overlays_measure_a_shaped_path: test");
        return ExitCode::SUCCESS;
    }
    println!("\nrunning 1 test");
    let start = Instant::now();
    let outcome = if mgrp_testbed::is_root() {
        check()
    } else {
        Err(anyhow::anyhow!(
            "needs root to create network namespaces (CI runs as root)"
        ))
    };
    let ok = match &outcome {
        Ok(()) => {
            println!("test two_overlays_measure_a_shaped_path ... ok");
            true
        }
        Err(e) => {
            println!("test two_overlays_measure_a_shaped_path ... FAILED\n\n{e:#}");
            false
        }
    };
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        if ok { "ok" } else { "FAILED" },
        u32::from(ok),
        u32::from(!ok),
        start.elapsed().as_secs_f64()
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
