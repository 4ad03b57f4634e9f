//! A real Prometheus (Debian's `prometheus`, which `.ci/run` installs) scraping an
//! overlay node on loopback: its HTTP API gives back the values the node served,
//! and `promtool` accepts the shipped `prometheus.yml` and alert rules. Without the
//! package these tests fail and say how to install it.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Api, Dir, authority_and_server, b_config, first_value, free_port, json, node_a, request,
    tls_node,
};
use mgrp_testbed::http::promql_path;
use mgrp_views::estimate::RunOutcome;

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
    /// Scraping one target, every second, in clear HTTP.
    fn start(target: &str) -> Self {
        Self::with(|_| {
            format!(
                "  - job_name: mgrp-overlay\n    static_configs:\n      - targets: ['{target}']\n"
            )
        })
    }

    /// Scraping every second what `scrape` says (the entries of `scrape_configs`,
    /// given the server's folder).
    fn with(scrape: impl FnOnce(&std::path::Path) -> String) -> Self {
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
                "global:\n  scrape_interval: 1s\nscrape_configs:\n{}",
                scrape(&dir)
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
    let served: f64 = RunOutcome::ALL
        .iter()
        .map(|o| link["runs"][o.name()].as_f64().unwrap())
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

/// The `file_sd` targets `mgrp-overlay prometheus-targets` writes for the
/// description `mesh`, in `dir`/targets.
fn targets_of(dir: &Dir, mesh: &str) -> PathBuf {
    let description = dir.private("mesh.toml", mesh);
    let targets = dir.0.join("targets");
    std::fs::create_dir_all(&targets).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mgrp-overlay"))
        .args(["prometheus-targets", "--mesh"])
        .arg(&description)
        .arg("--out")
        .arg(&targets)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus-targets: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    targets
}

/// Two members of a mesh, their APIs over TLS and asking for a token, found by a real
/// Prometheus through the `file_sd` targets `mgrp-overlay prometheus-targets` wrote
/// from the description (the scheme from each member's `api`, the token and the
/// authority from the job), and every series labelled with its member's name.
#[test]
fn prometheus_scrapes_every_member_through_the_targets_the_description_gives() {
    let dir = Dir::new("mgrp-overlay-file-sd");
    let (ca, cert, key) = authority_and_server(&dir, "mesh");
    let token = dir.private("token", "0123456789abcdef0123");
    let nodes: Vec<Api> = ["m1", "m2"]
        .iter()
        .map(|n| Api::start(tls_node(n, &cert, &key, &token)))
        .collect();
    let mut mesh = String::new();
    for (i, node) in nodes.iter().enumerate() {
        mesh.push_str(&format!(
            "[[member]]\nname = \"m{}\"\naddress = \"192.0.2.{}\"\napi = \"https://{}\"\n",
            i + 1,
            i + 1,
            node.addr
        ));
    }
    mesh.push_str(
        "[[group]]\nname = \"g\"\nkind = \"full-mesh\"\nmembers = [\"m1\", \"m2\"]\nmethods = [\"pathchirp\"]\n",
    );
    let targets = targets_of(&dir, &mesh);
    let p = Prometheus::with(|_| {
        format!(
            "  - job_name: mgrp-overlay\n    authorization:\n      credentials_file: {}\n    tls_config:\n      ca_file: {}\n    file_sd_configs:\n      - files: ['{}']\n  - job_name: mgrpd\n    file_sd_configs:\n      - files: ['{}']\n",
            token.display(),
            ca.display(),
            targets.join("mgrp-overlay.json").display(),
            targets.join("mgrpd.json").display()
        )
    });
    for member in ["m1", "m2"] {
        // Up, and more series than Prometheus makes itself (up, scrape_*): the node's
        // own, under its member's name.
        let expr = format!(
            "count({{job=\"mgrp-overlay\",member=\"{member}\",__name__=~\"mgrp_overlay_.*\"}}) and on() up{{member=\"{member}\"}} == 1"
        );
        let start = Instant::now();
        let mut seen = None;
        while start.elapsed() < Duration::from_secs(60) && seen.is_none() {
            seen = query(&p, &expr).filter(|v| *v >= 1.0);
            if seen.is_none() {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        assert!(
            seen.is_some(),
            "Prometheus never scraped {member} through its target:\n{}",
            p.log()
        );
    }
}

/// The shipped Grafana dashboard's queries (its variable's and every panel's) give
/// data from a real Prometheus scraping two members, found through the targets the
/// description gives: b measuring the path from a, a serving it, b collecting the
/// matrix.
#[test]
fn the_dashboards_queries_return_data_from_members_found_through_the_targets() {
    let dir = Dir::new("mgrp-overlay-dashboard");
    let a = Api::start(
        mgrp_overlay::config::Config::from_toml(
            "name = \"a\"\n[serve]\ntransports = [\"udp\"]\nudp-port = 0\n",
            None,
        )
        .unwrap(),
    );
    let a_port = a.node.as_ref().unwrap().serving()[0].1.port();
    let mesh_of = |b_api: &str| {
        format!(
            "[[member]]\nname = \"a\"\naddress = \"192.0.2.1\"\napi = \"http://{}\"\n\
             [[member]]\nname = \"b\"\naddress = \"192.0.2.2\"\napi = \"http://{b_api}\"\n\
             [[group]]\nname = \"g\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\"]\nmethods = [\"pathload-fast\"]\n",
            a.addr
        )
    };
    // b collects the matrix from the description, which names b's API once it
    // listens (the collector reads it again every interval).
    let description = dir.0.join("mesh.toml");
    std::fs::write(&description, mesh_of("127.0.0.1:9")).unwrap();
    let b_toml = format!(
        "name = \"b\"\nprobe-port-base = {}\n[serve]\ntransports = []\n\
         [matrix]\nmesh = \"{}\"\ninterval = \"1s\"\n\
         [[link]]\nname = \"a-pathload-fast\"\nfrom = \"127.0.0.1\"\nneighbour = \"a\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"2s\"\ntime-limit = \"5s\"\n",
        free_port(),
        description.display()
    );
    let b = Api::start(mgrp_overlay::config::Config::from_toml(&b_toml, None).unwrap());
    let mesh = mesh_of(&b.addr.to_string());
    std::fs::write(&description, &mesh).unwrap();
    let targets = targets_of(&dir, &mesh);
    let p = Prometheus::with(|_| {
        format!(
            "  - job_name: mgrp-overlay\n    file_sd_configs:\n      - files: ['{}']\n",
            targets.join("mgrp-overlay.json").display()
        )
    });
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("prometheus/mgrp-mesh.grafana.json"),
        )
        .unwrap(),
    )
    .unwrap();
    // The variable: every member, by the label the targets give.
    let mut exprs = vec![(
        "the member variable".to_owned(),
        "count by (member) (mgrp_overlay_build_info{member=~\"a|b\"}) == 1".to_owned(),
    )];
    let variable = dashboard["templating"]["list"][1]["query"]["query"]
        .as_str()
        .unwrap();
    assert_eq!(variable, "label_values(mgrp_overlay_build_info, member)");
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$member", ".+")
                .replace("$__rate_interval", "30s");
            exprs.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    let start = Instant::now();
    let mut missing = exprs.clone();
    while start.elapsed() < Duration::from_secs(120) && !missing.is_empty() {
        missing.retain(|(_, e)| query(&p, e).is_none());
        if !missing.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    // Both members answered the variable, and the matrix has the path from a into b.
    assert!(missing.is_empty(), "no data for {missing:?}\n{}", p.log());
    let addr = format!("127.0.0.1:{}", p.port).parse().unwrap();
    let (_, body) = request(addr, "GET", &promql_path(&exprs[1].1), "");
    assert!(
        body.contains(r#""member":"b""#) && body.contains(r#""neighbour":"a""#),
        "{body}"
    );
    drop(b);
    drop(a);
}

#[test]
fn promtool_accepts_the_shipped_config_and_rules_and_their_unit_tests_pass() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/prometheus");
    for (what, file) in [
        ("check config", "prometheus.yml"),
        ("check rules", "overlay-alerts.yml"),
        ("check rules", "mgrpd-alerts.yml"),
        // The alerts fire for a link that never had an estimate, a neighbour down,
        // little bandwidth, a destination without a path, flapping routes and a member
        // down, and not before their time.
        ("test rules", "overlay-alerts.test.yml"),
        // mgrpd's: bad tags, replays, late probes, dropped riders, and an
        // unsynchronised clock only where a peer speaks wire version 2.
        ("test rules", "mgrpd-alerts.test.yml"),
    ] {
        let out = Command::new(tool("promtool"))
            .args(what.split(' ').chain([file]))
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {what} {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `/metrics` answers in the format the scraper asks for, and `promtool check
/// metrics` finds nothing to complain of in the text format: a HELP and a TYPE for
/// every family, counters named `_total`, the families the guide lists.
#[test]
fn metrics_are_negotiated_and_promtool_finds_them_clean() {
    use mgrp_testbed::http::{exchange, header, promtool_check_metrics};
    let (a, a_port) = node_a();
    let api = Api::start(b_config(a_port, None));
    let shared = api.node.as_ref().unwrap().shared();
    // A run, so that every family of a link has samples.
    let start = Instant::now();
    while shared.link("from-a").unwrap().runs.total() == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "no run in 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    let addr = api.addr.to_string();
    let (status, head, text) = exchange(&addr, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        header(&head, "content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    promtool_check_metrics(&text).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
    // Every family is in the guide.
    let guide = include_str!("../../../docs/overlay.md");
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(
        families.len() >= 11,
        "{text}\nlast error: {:?}",
        shared.link("from-a").unwrap().last_error
    );
    for family in families {
        assert!(
            guide.contains(&format!("`{family}`")),
            "{family} is not in docs/overlay.md"
        );
    }
    // Prometheus' own Accept header gets OpenMetrics.
    let accept = "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n";
    let (status, head, open) = exchange(&addr, "GET", "/metrics", accept).unwrap();
    assert_eq!(status, 200);
    assert!(
        header(&head, "content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{head}"
    );
    assert!(open.trim_end().ends_with("# EOF"), "{open}");
    assert!(open.contains("# TYPE mgrp_overlay_runs counter"), "{open}");
    drop(api);
    drop(a);
}
