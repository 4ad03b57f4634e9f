//! A node's configuration reloaded while it runs, on loopback over plain UDP (no
//! root, no mgrpd): a link that did not change keeps its schedule, its probe port and
//! its history; a new one is measured within the start-up spread; a removed one is
//! gone from the API; a sender's `[serve] allow` follows. And the program itself: a
//! SIGHUP reads the file again, a broken file changes nothing and says why, and
//! SIGTERM still ends it cleanly.

mod common;

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Dir, eventually, free_port, json, node_a};
use mgrp_overlay::config::Config;
use mgrp_overlay::node::Node;

/// A link from the node serving on `port` of loopback, measured every 30 s.
fn link(name: &str, port: u16) -> String {
    format!(
        "[[link]]\nname = \"{name}\"\nfrom = \"127.0.0.1\"\nport = {port}\ntransport = \"udp\"\n\
         interval = \"30s\"\ntime-limit = \"5s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n"
    )
}

fn config(text: &str) -> Config {
    Config::from_toml(text, None).unwrap()
}

#[test]
fn a_reload_keeps_what_did_not_change_starts_what_is_new_and_stops_what_went() {
    let (a, a_port) = node_a();
    let probe = free_port();
    let head = |extra: &str| {
        format!("name = \"b\"\nprobe-port-base = {probe}\n{extra}[serve]\ntransports = []\n")
    };
    let b = Node::start(config(&format!(
        "{}{}{}",
        head(""),
        link("kept", a_port),
        link("gone", a_port)
    )))
    .unwrap();
    let shared = b.shared();
    let ran = |name: &str| shared.history(name, 100).is_some_and(|h| !h.is_empty());
    assert!(eventually(Duration::from_secs(30), || ran("kept") && ran("gone")));
    let kept_runs = shared.history("kept", 100).unwrap();
    let port = shared.config().link("kept").unwrap().1.probe_port;

    let r = b
        .reload(config(&format!(
            "{}{}{}",
            head("max-running = 2\n"),
            link("kept", a_port),
            link("new", a_port)
        )))
        .unwrap();
    assert_eq!(
        (r.kept, &r.added[..], &r.removed[..], r.changed.len()),
        (1, &["new".to_string()][..], &["gone".to_string()][..], 0),
        "{r:?}"
    );
    assert!(r.need_restart.is_empty(), "{r:?}");
    assert_eq!(shared.config().max_running, 2);
    // The removed link is gone; the kept one has its runs, its port, and its next
    // run still about 30 s after its last (a new link would be due within 5 s).
    assert!(shared.link("gone").is_none());
    let names: Vec<String> = shared.links().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["kept", "new"]);
    let kept = shared.link("kept").unwrap();
    assert!(
        kept.next_run_in_s.is_some_and(|s| s > 10.0),
        "kept lost its schedule: {kept:?}"
    );
    assert_eq!(shared.history("kept", 100).unwrap(), kept_runs);
    assert_eq!(shared.config().link("kept").unwrap().1.probe_port, port);
    // The new link is measured within the start-up spread, on a port of its own.
    assert!(eventually(Duration::from_secs(20), || ran("new")));
    assert_ne!(shared.config().link("new").unwrap().1.probe_port, port);

    // A's allow-list, reloaded, turns B away; reloaded again, it serves B again, and
    // under the budget it is given then (loopback runs spend the default 100 MB an
    // hour in a few runs).
    let serve = |allow: &str| {
        config(&format!(
            "name = \"a\"\n[serve]\ntransports = [\"udp\"]\nudp-port = 0\nmax-mb-per-hour = 100000\n{allow}"
        ))
    };
    // "Measure now" on B's kept link, and the run it gives.
    let run_now = || {
        let before = shared.history("kept", 100).unwrap().len();
        assert!(eventually(Duration::from_secs(15), || shared
            .measure_now("kept")
            .is_ok()));
        assert!(eventually(Duration::from_secs(15), || shared
            .history("kept", 100)
            .unwrap()
            .len()
            > before));
        shared.history("kept", 1).unwrap().remove(0)
    };
    a.reload(serve("allow = [\"192.0.2.0/24\"]\n")).unwrap();
    let refused = run_now();
    assert!(
        refused
            .error
            .as_deref()
            .is_some_and(|e| e.contains("serves only the hosts")),
        "{refused:?}"
    );
    a.reload(serve("")).unwrap();
    let served = run_now();
    assert_eq!(served.error, None, "{served:?}");
    b.stop();
    a.stop();
}

/// The overlay program on loopback, by its PID.
struct Program(std::process::Child);

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(p: &Program, sig: i32) {
    let pid = libc::pid_t::try_from(p.0.id()).unwrap();
    // SAFETY: kill(2) on the PID of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[test]
fn sighup_reads_the_file_again_and_a_broken_file_changes_nothing() {
    let (a, a_port) = node_a();
    let dir = Dir::new("mgrp-overlay-reload");
    let api = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let head = format!(
        "name = \"b\"\nlisten = \"{api}\"\nprobe-port-base = {}\n[serve]\ntransports = []\n",
        free_port()
    );
    let file = dir.0.join("overlay.toml");
    std::fs::write(&file, format!("{head}{}", link("one", a_port))).unwrap();
    let log = dir.0.join("log");
    let mut p = Program(
        Command::new(env!("CARGO_BIN_EXE_mgrp-overlay"))
            .arg("--config")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let names = || -> Option<Vec<String>> {
        std::net::TcpStream::connect(api).ok()?;
        let (status, v) = json(api, "GET", "/v1/links");
        (status == 200).then(|| {
            v["links"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["name"].as_str().map(str::to_owned))
                .collect()
        })
    };
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(30), || names()
            .is_some_and(|n| n == ["one"])),
        "{}",
        log_text()
    );
    let pid_before = p.0.id();

    std::fs::write(
        &file,
        format!("{head}{}{}", link("one", a_port), link("two", a_port)),
    )
    .unwrap();
    signal(&p, libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), || names()
            .is_some_and(|n| n == ["one", "two"])),
        "{}",
        log_text()
    );
    assert!(
        log_text().contains("configuration reloaded: 1 links go on, added: two"),
        "{}",
        log_text()
    );

    // A file that does not parse: nothing changes, and the log says why.
    std::fs::write(&file, format!("{head}[[link]]\nfrom = \"nowhere\"\n")).unwrap();
    signal(&p, libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(10), || log_text()
            .contains("the configuration is not reloaded, nothing changed")),
        "{}",
        log_text()
    );
    assert_eq!(names().unwrap(), ["one", "two"]);
    assert_eq!(p.0.id(), pid_before);

    signal(&p, libc::SIGTERM);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = p.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}\n{}", log_text());
    let mut rest = String::new();
    let _ = std::fs::File::open(&log).unwrap().read_to_string(&mut rest);
    assert!(rest.contains("stopped"), "{rest}");
    a.stop();
}
