//! A real Prometheus (Debian's `prometheus`, which `.ci/run` installs) scraping an
//! overlay node on loopback: its HTTP API gives back the values the node served,
//! and `promtool` accepts the shipped `prometheus.yml` and alert rules. Without the
//! package these tests fail and say how to install it.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Api, b_config, first_value, free_port, json, node_a, request};
use mgrp_testbed::http::promql_path;

fn tool(name: &str) -> PathBuf {
    mgrp_testbed::packages::find(name)
        .unwrap_or_else(|| panic!("{}", mgrp_testbed::packages::require(&[name]).unwrap_err()))
}

/// A Prometheus server, killed (by its PID) and its storage removed on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Prometheus {
    fn start(target: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "mgrp-overlay-prometheus-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mgrp-overlay\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self { child, dir, port }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PromQL expression's scalar value, as Prometheus' query API returns it.
fn query(p: &Prometheus, expr: &str) -> Option<f64> {
    let addr = format!("127.0.0.1:{}", p.port).parse().ok()?;
    // Not up yet: no answer rather than a failed request.
    std::net::TcpStream::connect(addr).ok()?;
    let (status, body) = request(addr, "GET", &promql_path(expr), "");
    if status != 200 {
        return None;
    }
    first_value(&body)
}

#[test]
fn prometheus_gets_the_values_the_overlay_served() {
    let (a, a_port) = node_a();
    let api = Api::start(b_config(a_port, None));
    let p = Prometheus::start(&api.addr.to_string());
    let expr = "sum(mgrp_overlay_runs_total{link=\"from-a\",node=\"b\"})";
    let probe_expr = "mgrp_overlay_probe_bytes_total{link=\"from-a\"}";
    // Prometheus has scraped at least one run, and never more than the node served.
    let start = Instant::now();
    let mut seen = None;
    while start.elapsed() < Duration::from_secs(60) {
        if let Some(v) = query(&p, expr).filter(|v| *v >= 1.0) {
            seen = Some(v);
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let runs = seen.unwrap_or_else(|| panic!("Prometheus never saw a run:\n{}", p.log()));
    let (_, link) = json(api.addr, "GET", "/v1/links/from-a");
    let served: f64 = ["estimate", "no_estimate", "peer_down"]
        .iter()
        .map(|o| link["runs"][o].as_f64().unwrap())
        .sum();
    assert!(
        runs >= 1.0 && runs <= served,
        "Prometheus {runs}, overlay {served}"
    );
    // Stop measuring (A goes, and B's later runs only add peer_down with no bytes):
    // the probe bytes Prometheus reports settle at what the overlay serves.
    a.stop();
    let start = Instant::now();
    let mut matched = false;
    while start.elapsed() < Duration::from_secs(30) && !matched {
        let (_, link) = json(api.addr, "GET", "/v1/links/from-a");
        let bytes = link["probe_bytes"].as_f64().unwrap();
        matched = query(&p, probe_expr) == Some(bytes);
        if !matched {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    assert!(
        matched,
        "Prometheus never reported the overlay's probe bytes"
    );
}

#[test]
fn promtool_accepts_the_shipped_config_and_rules() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/prometheus");
    for (what, file) in [
        ("config", "prometheus.yml"),
        ("rules", "overlay-alerts.yml"),
    ] {
        let out = Command::new(tool("promtool"))
            .args(["check", what, file])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool check {what} {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
