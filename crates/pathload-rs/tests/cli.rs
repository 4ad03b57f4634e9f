//! The command line as a user meets it, on loopback and without root: help, bad
//! arguments, an unreachable sender, a daemon that is not running, a measurement ended
//! by its fleet limit, and an interrupted one. Each test uses ports of its own.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_pathload-rs");

/// Two free-looking ports for this test: control and probes.
fn ports() -> (u16, u16) {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let base = 20_000 + (std::process::id() % 2_000) as u16 * 10 + n * 3;
    (base, base + 1)
}

fn result_of(stdout: &[u8]) -> Value {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "result")
        .expect("a result line")
}

#[test]
fn help_names_both_roles_and_the_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["snd", "rcv", "Exit status", "6 the sender"] {
        assert!(text.contains(word), "{word} missing in:\n{text}");
    }
    let out = Command::new(BIN).args(["rcv", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--sender",
        "--transport",
        "--mode",
        "--max-time",
        "--json",
        "--plot",
    ] {
        assert!(text.contains(flag), "{flag} missing");
    }
}

#[test]
fn missing_sender_is_a_usage_error() {
    let out = Command::new(BIN).arg("rcv").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sender"));
}

#[test]
fn an_unreachable_sender_exits_6_and_says_what_to_do() {
    let (port, _) = ports();
    let out = Command::new(BIN)
        .args(["rcv", "--sender", "127.0.0.1", "--port", &port.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the sender"), "{err}");
    assert!(err.contains("pathload-rs snd"), "{err}");
}

/// With `--json`, a failure is a JSON line too (and still text on stderr): a usage
/// error, and a sender that cannot be reached.
#[test]
fn with_json_failures_are_lines_too() {
    let lines = |stdout: &[u8]| -> Vec<Value> {
        String::from_utf8_lossy(stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    };
    let out = Command::new(BIN)
        .args(["rcv", "--json", "--max-time", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let l = lines(&out.stdout);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0]["event"], "error");
    assert_eq!(l[0]["schema"], mgrp_tool::json::SCHEMA);
    assert_eq!(l[0]["tool"], "pathload-rs");
    assert_eq!(l[0]["exit_status"], 2);
    assert!(l[0]["error"].as_str().unwrap().contains("soon"), "{l:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("soon"));
    let (port, _) = ports();
    let out = Command::new(BIN)
        .args([
            "rcv",
            "--json",
            "--sender",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    let l = lines(&out.stdout);
    mgrp_testbed::tool::check_schema(&l).unwrap();
    let e = l
        .iter()
        .find(|v| v["event"] == "error")
        .expect("an error line");
    assert_eq!(e["exit_status"], 6);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("cannot reach the sender"),
        "{e}"
    );
    // Without --json, stdout stays empty.
    let out = Command::new(BIN)
        .args(["rcv", "--max-time", "soon"])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty());
}

#[test]
fn no_mgrpd_names_the_socket() {
    let (port, probe) = ports();
    let mut snd = Command::new(BIN)
        .args(["snd", "--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--socket", "/nonexistent/mgrpd.sock"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(BIN)
        .args(["rcv", "--sender", "127.0.0.1", "--port", &port.to_string()])
        .args(["--probe-port", &probe.to_string()])
        .args(["--socket", "/nonexistent/mgrpd.sock"])
        .output()
        .unwrap();
    let _ = snd.kill();
    let _ = snd.wait();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/mgrpd.sock"), "{err}");
}

/// A UDP measurement over loopback, stopped after one fleet: by the fleet limit (exit
/// 3), or, loopback being faster than any sender, at the sender's highest rate (exit
/// 4). The result line carries every documented field.
#[test]
fn a_one_fleet_run_ends_by_itself_with_a_full_result() {
    let (port, probe) = ports();
    let svg = std::env::temp_dir().join(format!("pathload-rs-test-{port}.svg"));
    let mut snd = Command::new(BIN)
        .args(["snd", "--transport", "udp", "--bind", "127.0.0.1"])
        .args([
            "--port",
            &port.to_string(),
            "--probe-port",
            &(probe + 1).to_string(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(BIN)
        .args([
            "rcv",
            "--sender",
            "127.0.0.1",
            "--transport",
            "udp",
            "--mode",
            "fast",
        ])
        .args([
            "--port",
            &port.to_string(),
            "--probe-port",
            &probe.to_string(),
        ])
        .args(["--max-fleets", "1", "--json", "--verbose", "--plot"])
        .arg(&svg)
        .output()
        .unwrap();
    let status = snd.wait().unwrap();
    assert!(status.success(), "the sender ends after one measurement");
    let r = result_of(&out.stdout);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Every line as the guide lists it, in base units.
    mgrp_testbed::tool::check_schema(&lines).unwrap();
    let code = out.status.code();
    match r["stop_reason"].as_str() {
        Some("fleet_limit") => assert_eq!(code, Some(3)),
        Some("above_max_rate" | "rate_unreachable") => assert_eq!(code, Some(4)),
        other => panic!("{other:?}: {}", String::from_utf8_lossy(&out.stderr)),
    }
    // A run that did not converge has no range that reads like an answer: it says
    // so and gives the bounds it had.
    assert_eq!(r["converged"], false);
    assert!(r["no_estimate"].is_string(), "{r}");
    for key in [
        "low_bps",
        "high_bps",
        "unadjusted_low_bps",
        "unadjusted_high_bps",
    ] {
        assert!(r.get(key).is_none(), "{key} in {r}");
    }
    for key in [
        "above_bps",
        "below_bps",
        "unadjusted_above_bps",
        "unadjusted_below_bps",
    ] {
        assert!(r["bounds"][key].is_number(), "{key} in {r}");
    }
    for key in ["elapsed_s", "fleets", "probe_bytes", "rider_bytes"] {
        assert!(r[key].is_number(), "{key} in {r}");
    }
    assert_eq!(r["fleets"], 1);
    assert!(r["probe_bytes"].as_u64().unwrap() > 0);
    let fleets = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"event\":\"fleet\""))
        .count();
    assert_eq!(fleets, 1);
    let drawn = std::fs::read_to_string(&svg).expect("the plot was written");
    let _ = std::fs::remove_file(&svg);
    assert!(
        drawn.starts_with("<svg"),
        "{}",
        &drawn[..drawn.len().min(100)]
    );
    assert!(drawn.contains("<circle"), "one point per fleet");
}

/// SIGINT in the middle of a run: the receiver still prints a result that says there
/// is no estimate, and exits 130. The sender here speaks the control protocol but takes two seconds to
/// answer the first train, so the signal surely lands mid-run.
#[test]
fn an_interrupted_run_says_it_has_no_estimate() {
    use pathload_rs::control::{Reply, Request};
    use std::io::{BufRead, BufReader, Write};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_, probe) = ports();
    let fake = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { return };
            let reply = match serde_json::from_str::<Request>(&line).unwrap() {
                Request::Ping => Reply::Pong,
                Request::Hello { .. } => Reply::Hello {
                    version: pathload_rs::control::CONTROL_VERSION,
                    max_size: 1500,
                    sender: "test".into(),
                    features: Vec::new(),
                },
                Request::Probes(batch) if batch.tag.kind == 0 => {
                    std::thread::sleep(Duration::from_secs(2));
                    Reply::Sent(pathload_rs::control::SentReport {
                        tag: batch.tag,
                        sent: batch.packets(),
                        ..Default::default()
                    })
                }
                Request::Probes(_)
                | Request::Traffic { .. }
                | Request::Tcp { .. }
                | Request::Stamps { .. }
                | Request::Proof { .. }
                | Request::Bye => {
                    return;
                }
            };
            let mut msg = serde_json::to_vec(&reply).unwrap();
            msg.push(b'\n');
            if w.write_all(&msg).is_err() {
                return;
            }
        }
    });
    let rcv = Command::new(BIN)
        .args(["rcv", "--sender", "127.0.0.1", "--transport", "udp"])
        .args([
            "--port",
            &port.to_string(),
            "--probe-port",
            &probe.to_string(),
        ])
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let pid = libc::pid_t::try_from(rcv.id()).unwrap();
    // SAFETY: signalling the child this test started and has not reaped.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let started = Instant::now();
    let out = rcv.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(130));
    // The fake sender's hello names no feature, as an older sender's: pathload,
    // exclusive, says that sender may run another heavy measurement beside it.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.contains("\"warning\"")
            && l.contains("older than this receiver")
            && l.contains("`exclusive`")),
        "{text}"
    );
    let r = result_of(&out.stdout);
    assert_eq!(r["stop_reason"], "interrupted");
    assert_eq!(r["converged"], false);
    assert!(r.get("low_bps").is_none(), "{r}");
    fake.join().unwrap();
}
