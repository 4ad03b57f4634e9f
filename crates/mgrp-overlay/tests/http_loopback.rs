//! The HTTP API on loopback (no root): two nodes over plain UDP, B measuring from A,
//! B's API spoken to with plain HTTP/1.1. Links, history, measure-now, the event
//! stream, `/metrics` agreeing with the JSON, the status page, JSON errors for bad
//! requests, the token, and the command's `--check-config`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use mgrp_overlay::config::Config;
use mgrp_overlay::http;
use mgrp_overlay::node::Node;
use serde_json::Value;
use tokio::sync::watch;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// B's configuration, measuring from A on `a_port`, with an optional token file.
fn b_config(a_port: u16, token_file: Option<&std::path::Path>) -> Config {
    let token = token_file.map_or(String::new(), |p| {
        format!("token-file = \"{}\"\n", p.display())
    });
    let toml = format!(
        "name = \"b\"\n{token}probe-port-base = {}\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"2s\"\ntime-limit = \"5s\"\n",
        free_port()
    );
    Config::from_toml(&toml, None).unwrap()
}

/// B's API served on a thread; dropping it shuts the server down.
struct Api {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    node: Option<Node>,
}

impl Api {
    fn start(config: Config) -> Self {
        let node = Node::start(config).unwrap();
        let (stop, shutdown) = watch::channel(false);
        let app = http::router(node.shared(), shutdown.clone());
        let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std_listener.local_addr().unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                let mut shutdown = shutdown;
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = shutdown.wait_for(|s| *s).await;
                    })
                    .await
                    .unwrap();
            });
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
            node: Some(node),
        }
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(n) = self.node.take() {
            n.stop();
        }
    }
}

/// One request; returns the status and the body.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n{headers}\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // Bodies of unknown length come chunked: keep the JSON, drop the chunk sizes.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, c)| c)
            .collect()
    } else {
        body.to_string()
    };
    (status, body)
}

fn json(addr: SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let (status, body) = request(addr, method, path, "");
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}")),
    )
}

#[test]
fn the_api_serves_links_history_stream_metrics_and_page() {
    let a_port = free_port();
    let a = Node::start(
        Config::from_toml(
            &format!("name = \"a\"\n[serve]\ntransports = [\"udp\"]\nudp-port = {a_port}\n"),
            None,
        )
        .unwrap(),
    )
    .unwrap();
    let api = Api::start(b_config(a_port, None));
    let addr = api.addr;

    // Subscribe before the first run can end.
    let mut events = TcpStream::connect(addr).unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        events,
        "GET /v1/stream?link=from-a HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut events = BufReader::new(events);

    let (status, links) = json(addr, "GET", "/v1/links");
    assert_eq!(status, 200);
    assert_eq!(links["node"], "b");
    assert_eq!(links["links"][0]["name"], "from-a");
    assert_eq!(links["links"][0]["transport"], "udp");

    // An event per run arrives on the stream.
    let start = Instant::now();
    let mut data = None;
    let mut line = String::new();
    while start.elapsed() < Duration::from_secs(30) && data.is_none() {
        line.clear();
        if events.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(d) = line.trim_end().strip_prefix("data: ") {
            data = Some(serde_json::from_str::<Value>(d).unwrap());
        }
    }
    let event = data.expect("an estimate event within 30 s");
    assert_eq!(event["link"], "from-a");
    assert!(event["probe_bytes"].as_u64().unwrap() > 0, "{event}");

    let (status, h) = json(addr, "GET", "/v1/links/from-a/history?limit=5");
    assert_eq!(status, 200);
    let runs = h["estimates"].as_array().unwrap();
    assert!(!runs.is_empty() && runs.len() <= 5);
    assert!(runs.iter().any(|r| r["seq"] == event["seq"]), "{h}");

    // /metrics counts what the JSON counts.
    let (_, link) = json(addr, "GET", "/v1/links/from-a");
    let (status, text) = request(addr, "GET", "/metrics", "");
    assert_eq!(status, 200);
    let total: u64 = ["estimate", "no_estimate", "peer_down"]
        .iter()
        .map(|o| link["runs"][o].as_u64().unwrap())
        .sum();
    let in_metrics: u64 = text
        .lines()
        .filter(|l| l.starts_with("mgrp_overlay_runs_total{") && l.contains("link=\"from-a\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        in_metrics >= total && in_metrics <= total + 1,
        "{in_metrics} vs {total}\n{text}"
    );
    assert!(
        text.contains("# TYPE mgrp_overlay_probe_bytes counter"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));

    // Measure now: accepted, or refused while a run is in flight.
    let (status, body) = json(addr, "POST", "/v1/links/from-a/measure");
    assert!(status == 202 || status == 409, "{status} {body}");

    // The page names every link.
    let (status, page) = request(addr, "GET", "/", "");
    assert_eq!(status, 200);
    assert!(page.contains("id=\"link-from-a\""));

    // Bad requests: JSON errors with a 4xx.
    for (method, path, want) in [
        ("GET", "/v1/links/nope", 404),
        ("GET", "/v1/links/from-a/history?limit=x", 400),
        ("GET", "/v1/links/from-a/history?limit=0", 400),
        ("POST", "/v1/links/nope/measure", 404),
        ("GET", "/v1/stream?link=nope", 404),
        ("GET", "/v2/anything", 404),
    ] {
        let (status, body) = json(addr, method, path);
        assert_eq!(status, want, "{method} {path}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }
    drop(api);
    a.stop();
}

#[test]
fn a_token_is_required_when_configured() {
    let dir = std::env::temp_dir().join(format!("mgrp-overlay-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "0123456789abcdef0123\n").unwrap();
    let api = Api::start(b_config(free_port(), Some(&file)));
    let (status, body) = request(api.addr, "GET", "/v1/links", "");
    assert_eq!(status, 401, "{body}");
    let (status, _) = request(
        api.addr,
        "GET",
        "/v1/links",
        "Authorization: Bearer 0123456789abcdef0123\r\n",
    );
    assert_eq!(status, 200);
    let (status, _) = request(api.addr, "GET", "/metrics?token=0123456789abcdef0123", "");
    assert_eq!(status, 200);
    let (status, _) = request(api.addr, "GET", "/", "Authorization: Bearer wrong\r\n");
    assert_eq!(status, 401);
    drop(api);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_config_accepts_the_example_and_names_mistakes() {
    let exe = env!("CARGO_BIN_EXE_mgrp-overlay");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/mgrp-overlay.example.toml");
    let ok = std::process::Command::new(exe)
        .args(["--check-config", example])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("configuration is valid"));
    let bad = std::env::temp_dir().join(format!("mgrp-overlay-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "[[link]]\nfrom = \"10.0.0.5\"\ninterval = \"soon\"\n").unwrap();
    let out = std::process::Command::new(exe)
        .args(["--check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bad);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("link 1: interval"), "{err}");
    let help = std::process::Command::new(exe)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--check-config"));
}
