//! The HTTP API on loopback (no root): two nodes over plain UDP, B measuring from A,
//! B's API spoken to with plain HTTP/1.1. Links, history, measure-now, the event
//! stream, `/metrics` agreeing with the JSON, the status page, JSON errors for bad
//! requests, the token, and the command's `--check-config`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use common::{Api, b_config, free_port, json, node_a, request};
use mgrp_views::estimate::RunOutcome;
use serde_json::Value;

#[test]
fn the_api_serves_links_history_stream_metrics_and_page() {
    let (a, a_port) = node_a();
    let api = Api::start(b_config(a_port, None));
    let addr = api.addr;

    // Subscribe before the first run can end.
    let mut events = TcpStream::connect(addr).unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        events,
        "GET /v1/stream?link=from-a HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut events = BufReader::new(events);

    let (status, links) = json(addr, "GET", "/v1/links");
    assert_eq!(status, 200);
    assert_eq!(links["node"], "b");
    assert_eq!(links["links"][0]["name"], "from-a");
    assert_eq!(links["links"][0]["transport"], "udp");

    // An event per run arrives on the stream (between `passive` events, one per poll
    // of the neighbour, and `prediction` ones).
    let start = Instant::now();
    let mut data = None;
    let (mut line, mut kind) = (String::new(), String::new());
    while start.elapsed() < Duration::from_secs(30) && data.is_none() {
        line.clear();
        if events.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let l = line.trim_end();
        if let Some(k) = l.strip_prefix("event: ") {
            kind = k.to_string();
        } else if let Some(d) = l.strip_prefix("data: ")
            && kind == "estimate"
        {
            data = Some(serde_json::from_str::<Value>(d).unwrap());
        }
    }
    let event = data.expect("an estimate event within 30 s");
    // A counts the measurement it served, in its metrics too.
    let until = Instant::now() + Duration::from_secs(5);
    while a.shared().served().get("udp").map_or(0, |t| t.measurements) == 0
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = a.shared().served()["udp"];
    assert!(
        served.measurements >= 1 && served.refusals() == 0,
        "{served:?}"
    );
    let text = mgrp_overlay::api::metrics::render(&a.shared(), mgrp_core::exposition::Format::Text);
    assert!(
        text.lines()
            .any(|l| l.starts_with("mgrp_overlay_serve_refusals")
                && l.contains("transport=\"udp\"")
                && l.ends_with(" 0")),
        "{text}"
    );
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
    let total: u64 = RunOutcome::ALL
        .iter()
        .map(|o| link["runs"][o.name()].as_u64().unwrap())
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
    // Asked for nothing in particular: the text format, counters named by sample.
    assert!(
        text.contains("# TYPE mgrp_overlay_probe_bytes_total counter"),
        "{text}"
    );
    assert!(!text.contains("# EOF"), "{text}");

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
        ("DELETE", "/v1/links/from-a", 405),
        ("GET", "/v1/links/from-a/measure", 405),
    ] {
        let (status, body) = json(addr, method, path);
        assert_eq!(status, want, "{method} {path}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }

    // What a web page could make the operator's browser send is refused.
    for (headers, why) in [
        ("", "a POST without X-MGRP-Request"),
        (
            "X-MGRP-Request: 1\r\nOrigin: http://evil.example\r\n",
            "a POST from another site's page",
        ),
    ] {
        let (status, body) = request(addr, "POST", "/v1/links/from-a/measure", headers);
        assert_eq!(status, 403, "{why}: {body}");
    }
    let (status, body) = request(addr, "GET", "/v1/links", "Origin: http://evil.example\r\n");
    assert_eq!(status, 403, "a read from another site's page: {body}");
    // A page whose domain was rebound to this host names that domain in Host.
    let rebound = mgrp_testbed::http::raw(
        &addr.to_string(),
        "GET /v1/links HTTP/1.1\r\nHost: evil.example:7700\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    // The API's own origin is welcome.
    let (status, body) = request(
        addr,
        "GET",
        "/v1/links",
        &format!("Origin: http://{addr}\r\n"),
    );
    assert_eq!(status, 200, "{body}");
    drop(api);
    a.stop();
}

#[test]
fn a_token_is_required_when_configured() {
    let dir = std::env::temp_dir().join(format!("mgrp-overlay-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "0123456789abcdef0123\n").unwrap();
    // A token others may read is refused, saying what to do.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = mgrp_overlay::config::Config::from_toml(
        &format!("name = \"b\"\ntoken-file = \"{}\"\n", file.display()),
        None,
    )
    .expect_err("a token file others may read");
    assert!(err.to_string().contains("chmod 600"), "{err}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
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

/// A token handed over by systemd (`LoadCredential=token:…`): the file names
/// `${CREDENTIALS_DIRECTORY}/token` and the node reads it from the directory in that
/// variable; without the variable it says how to give one.
#[test]
fn a_token_comes_from_systemds_credentials() {
    let exe = env!("CARGO_BIN_EXE_mgrp-overlay");
    let dir = std::env::temp_dir().join(format!("mgrp-overlay-cred-{}", std::process::id()));
    let creds = dir.join("credentials");
    std::fs::create_dir_all(&creds).unwrap();
    // As systemd writes a credential: read-only for the service's user.
    std::fs::write(creds.join("token"), "cred-token-0123456789\n").unwrap();
    std::fs::set_permissions(creds.join("token"), std::fs::Permissions::from_mode(0o400)).unwrap();
    let conf = dir.join("overlay.toml");
    std::fs::write(
        &conf,
        "listen = \"127.0.0.1:7700\"\ntoken-file = \"${CREDENTIALS_DIRECTORY}/token\"\n",
    )
    .unwrap();
    let check = |env: Option<&std::path::Path>| {
        let mut c = std::process::Command::new(exe);
        c.args(["--check-config", conf.to_str().unwrap()])
            .env_remove("CREDENTIALS_DIRECTORY");
        if let Some(d) = env {
            c.env("CREDENTIALS_DIRECTORY", d);
        }
        c.output().unwrap()
    };
    let ok = check(Some(&creds));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(stdout.contains("token: required"), "{stdout}");
    let missing = check(None);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{err}");
    assert!(
        err.contains("CREDENTIALS_DIRECTORY is not set") && err.contains("LoadCredential=token:"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--check-config` prints a summary an operator reads, never the token, refuses an
/// API open to other hosts without one unless `open-api` says it is meant (and warns
/// then, or with a token but without TLS), and a closed pipe ends it quietly.
#[test]
fn check_config_summarises_without_secrets_and_survives_a_closed_pipe() {
    use std::io::Read as _;
    let exe = env!("CARGO_BIN_EXE_mgrp-overlay");
    let dir = std::env::temp_dir().join(format!("mgrp-overlay-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = "s3cret-token-0123456789";
    std::fs::write(dir.join("token"), format!("{token}\n")).unwrap();
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_token = dir.join("with-token.toml");
    std::fs::write(
        &with_token,
        "name = \"n1\"\nlisten = \"0.0.0.0:7700\"\ntoken-file = \"token\"\n\
         [[link]]\nname = \"up\"\nfrom = \"10.0.0.5\"\ninterval = \"20s\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(exe)
        .args(["--check-config", with_token.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stdout.contains(token) && !stderr.contains(token),
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("token: required"), "{stdout}");
    assert!(
        stdout.contains("up: from 10.0.0.5 port 55002 over mgrp, pathload-fast, every 20s"),
        "{stdout}"
    );
    // A token on an address beyond loopback, without TLS, crosses the network in
    // clear: said, and only that.
    assert!(stderr.contains("in clear HTTP"), "{stderr}");
    assert_eq!(stderr.matches("warning").count(), 1, "{stderr}");

    // Beyond loopback without a token: refused, by the check and at start (also
    // when --listen is what moves it), unless the file says it is meant.
    let open = dir.join("open.toml");
    std::fs::write(&open, "listen = \"0.0.0.0:7700\"\n").unwrap();
    let local = dir.join("local.toml");
    std::fs::write(&local, "listen = \"127.0.0.1:0\"\n").unwrap();
    for args in [
        vec!["--check-config", open.to_str().unwrap()],
        vec!["--config", open.to_str().unwrap()],
        vec!["--config", local.to_str().unwrap(), "--listen", "0.0.0.0:0"],
    ] {
        let out = std::process::Command::new(exe)
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("beyond loopback and there is no token-file")
                && stderr.contains("open-api = true"),
            "{args:?}: {stderr}"
        );
    }
    std::fs::write(&open, "listen = \"0.0.0.0:7700\"\nopen-api = true\n").unwrap();
    let out = std::process::Command::new(exe)
        .args(["--check-config", open.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: the API listens on 0.0.0.0:7700 without a token"),
        "{stderr}"
    );

    // Its reader gone after the first byte (as `| head -c1` does): no panic.
    let mut child = std::process::Command::new(exe)
        .args(["--check-config", with_token.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Event streams are capped: the one past the cap is answered 503, and a slot frees
/// when a subscriber leaves.
#[test]
fn event_streams_are_capped() {
    let api = Api::start(b_config(free_port(), None));
    let open = |addr: std::net::SocketAddr| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /v1/stream HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let mut r = BufReader::new(s);
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        (status, r)
    };
    let mut streams = Vec::new();
    for _ in 0..mgrp_overlay::api::http::MAX_STREAMS {
        let (status, r) = open(api.addr);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        streams.push(r);
    }
    let (status, _) = open(api.addr);
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    drop(streams.pop());
    // The server notices the closed stream at its next write (a keep-alive comment
    // at the latest); until then the slot is still taken.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, r) = open(api.addr);
        if status.starts_with("HTTP/1.1 200") {
            streams.push(r);
            break;
        }
        assert!(
            Instant::now() < until,
            "no slot freed within 30 s: {status}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(streams);
    drop(api);
}
