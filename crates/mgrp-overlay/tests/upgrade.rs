//! An overlay node upgraded from the previous release (0.1.0, built from its commit by
//! `mgrp_testbed::previous`), on loopback: what 0.1.0's node serves as a route-control
//! member (`/v1/links`) is read by this version's typed poll, and the history it kept
//! in its state directory comes back in this version's node, which numbers its runs
//! on from there.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{eventually, free_port, node_a, request};
use mgrp_overlay::config::Config;
use mgrp_overlay::node::Node;
use serde_json::Value;

#[test]
fn a_node_upgraded_from_the_previous_release_keeps_its_history() {
    let previous = mgrp_testbed::previous::program("mgrp-overlay", "mgrp-overlay")
        .unwrap_or_else(|e| panic!("the overlay of the previous release: {e:#}"));
    let dir = mgrp_testbed::TempDir::new("overlay-upgrade").unwrap();
    let (a, a_port) = node_a();
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let toml = format!(
        "name = \"b\"\nlisten = \"{api}\"\nprobe-port-base = {}\nstate-dir = \"{}\"\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"1s\"\ntime-limit = \"5s\"\n",
        free_port(),
        dir.path().display()
    );
    let file = dir.path().join("b.toml");
    std::fs::write(&file, &toml).unwrap();
    let log = dir.path().join("old.log");
    let mut old = Command::new(&previous)
        .args(["--config", file.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let old_log = || std::fs::read_to_string(&log).unwrap_or_default();
    // 0.1.0's node measures A until it has two runs.
    let history = |addr: SocketAddr| -> Option<Vec<u64>> {
        let (status, body) =
            mgrp_testbed::http::request(&addr.to_string(), "GET", "/v1/links/from-a/history", "")
                .ok()?;
        (status == 200).then_some(())?;
        let v: Value = serde_json::from_str(&body).ok()?;
        Some(
            v["estimates"]
                .as_array()?
                .iter()
                .filter_map(|e| e["seq"].as_u64())
                .collect(),
        )
    };
    let start = Instant::now();
    let before = loop {
        if let Some(h) = history(api).filter(|h| h.len() >= 2) {
            break h;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "0.1.0's node had no two runs within 60 s:\n{}",
            old_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // As a route-control member: this version's poll reads 0.1.0's link view.
    let (status, body) = request(api, "GET", "/v1/links", "");
    assert_eq!(status, 200, "{body}");
    let links: mgrp_views::link::Links = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("this version cannot read 0.1.0's /v1/links: {e}\n{body}"));
    assert!(links.links.iter().any(|l| l.name == "from-a"), "{body}");
    // Stopped as systemd stops it, then this version on the same state directory.
    let pid = libc::pid_t::try_from(old.id()).unwrap();
    // SAFETY: signalling the child this test started and has not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(old.wait().unwrap().success(), "{}", old_log());
    let b = Node::start(Config::from_toml(&toml, None).unwrap()).unwrap();
    let shared = b.shared();
    let restored: Vec<u64> = shared
        .history("from-a", 1000)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    // Every run 0.1.0 had when it was read (it may have made more before it stopped).
    assert!(
        before.iter().all(|s| restored.contains(s)),
        "0.1.0 had {before:?}, this version restored {restored:?}"
    );
    let last = *restored.iter().max().unwrap();
    assert!(eventually(Duration::from_secs(30), || shared
        .history("from-a", 1)
        .is_some_and(|h| h[0].seq > last)));
    b.stop();
    a.stop();
}
