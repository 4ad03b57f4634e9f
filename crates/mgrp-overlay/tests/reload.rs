//! A node's configuration reloaded while it runs, on loopback over plain UDP (no
//! root, no mgrpd): a link that did not change keeps its schedule, its probe port and
//! its history; a new one is measured within the start-up spread; a removed one is
//! gone from the API; a sender's `[serve] allow` follows. And the program itself: a
//! SIGHUP reads the file again, a broken file changes nothing and says why, and
//! SIGTERM still ends it cleanly; a mesh description fetched over HTTPS is read again
//! on its period and followed.

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
    // A with a budget loopback runs do not spend: they reach the default 100 MB an
    // hour in a run or two, and a link refused for it backs off, which would read
    // here as a schedule lost at the reload.
    let serve = |allow: &str| {
        config(&format!(
            "name = \"a\"\n[serve]\ntransports = [\"udp\"]\nudp-port = 0\nmax-mb-per-hour = 100000\n{allow}"
        ))
    };
    let a = Node::start(serve("")).unwrap();
    let a_port = a.serving()[0].1.port();
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

    // A's allow-list, reloaded, turns B away; reloaded again, it serves B again.
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
    // A counts it by its reason: turned away as not allowed, nothing else.
    let refusals = |reason: &str| {
        let text =
            mgrp_overlay::api::metrics::render(&a.shared(), mgrp_core::exposition::Format::Text);
        text.lines()
            .find(|l| {
                l.starts_with("mgrp_overlay_serve_refusals_total{")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {reason} refusals series in {text}"))
    };
    assert!(refusals("not_allowed") >= 1.0);
    for reason in ["busy", "over_budget", "expired", "address", "other"] {
        assert_eq!(refusals(reason), 0.0, "{reason}");
    }
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

impl Program {
    /// The program with the configuration `file`, its log in `log`.
    fn start(file: &std::path::Path, log: &std::path::Path) -> Self {
        Self::start_with(file, log, &[])
    }

    /// The same, with `env` added to its environment.
    fn start_with(file: &std::path::Path, log: &std::path::Path, env: &[(&str, &str)]) -> Self {
        Self(
            Command::new(env!("CARGO_BIN_EXE_mgrp-overlay"))
                .arg("--config")
                .arg(file)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap(),
        )
    }
}

/// Plays systemd's part: the notifications a service sends to `NOTIFY_SOCKET`.
struct Manager(std::os::unix::net::UnixDatagram);

impl Manager {
    fn bind(path: &std::path::Path) -> Self {
        let socket = std::os::unix::net::UnixDatagram::bind(path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Self(socket)
    }

    /// The next notification.
    fn recv(&self) -> String {
        let mut buf = [0u8; 512];
        let n = self.0.recv(&mut buf).expect("a notification within 30 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// The next notification but the watchdog's keep-alives.
    fn next(&self) -> String {
        loop {
            let m = self.recv();
            if m != "WATCHDOG=1" {
                return m;
            }
        }
    }
}

/// The names of the links the API at `api` serves, once it answers.
fn link_names(api: std::net::SocketAddr) -> Option<Vec<String>> {
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
    // Started as systemd starts a Type=notify service with WatchdogSec=0.2s.
    let notify = dir.0.join("notify");
    let manager = Manager::bind(&notify);
    let mut p = Program::start_with(
        &file,
        &log,
        &[
            ("NOTIFY_SOCKET", notify.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    let ready = manager.next();
    assert!(
        ready.starts_with("READY=1\nSTATUS=b: 1 links, API on http://"),
        "{ready}"
    );
    // The watchdog is fed: keep-alives come, nothing else in between.
    for _ in 0..2 {
        assert_eq!(manager.recv(), "WATCHDOG=1");
    }
    let names = || link_names(api);
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
    assert_eq!(manager.next(), "RELOADING=1");
    assert_eq!(manager.next(), "READY=1\nSTATUS=configuration reloaded");
    // The log line follows the reload it reports.
    assert!(
        eventually(Duration::from_secs(5), || log_text()
            .contains("configuration reloaded: 1 links go on, added: two")),
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
    // The second reload, then the stop.
    assert_eq!(manager.next(), "RELOADING=1");
    assert!(manager.next().starts_with("READY=1"));
    assert_eq!(manager.next(), "STOPPING=1");
    let mut rest = String::new();
    let _ = std::fs::File::open(&log).unwrap().read_to_string(&mut rest);
    assert!(rest.contains("stopped"), "{rest}");
    a.stop();
}

/// A description of members on loopback addresses, each measured by `b` by pathChirp
/// over UDP.
fn description(members: &[&str]) -> String {
    let mut t = String::new();
    for (i, m) in members.iter().enumerate() {
        t.push_str(&format!(
            "[[member]]\nname = \"{m}\"\naddress = \"127.0.0.{}\"\n\n",
            i + 1
        ));
    }
    let others: Vec<String> = members[1..].iter().map(|m| format!("\"{m}\"")).collect();
    t.push_str(&format!(
        "[[group]]\nname = \"g\"\nkind = \"star\"\nhub = \"{}\"\nmembers = [{}]\nmethods = [\"pathchirp\"]\ntransports = [\"udp\"]\ninterval = \"1m\"\n",
        members[0],
        others.join(", ")
    ));
    t
}

/// A node whose mesh description is fetched over HTTPS (its server's certificate
/// checked against `mesh-ca-file`, a token asked for) takes its links from it, and
/// reads it again every `mesh-refresh`: a member added there is measured without a
/// signal or a restart; a description the server then spoils changes nothing, and
/// the log says why.
#[test]
fn a_description_fetched_over_https_is_followed_as_it_changes() {
    let dir = Dir::new("mgrp-overlay-fetch");
    let (ca, cert, key) = common::authority_and_server(&dir, "mesh");
    let token = "0123456789abcdef0123";
    let token_file = dir.private("mesh-token", token);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = mgrp_testbed::tls::DocumentServer::start(
        listener,
        &cert,
        &key,
        "/mesh.toml",
        token,
        &description(&["b", "a"]),
    )
    .unwrap();
    let api = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let probe = free_port();
    let text = |ca: &std::path::Path, token: &std::path::Path| {
        format!(
            "listen = \"{api}\"\nprobe-port-base = {probe}\nmesh = \"https://127.0.0.1:{}/mesh.toml\"\nmesh-ca-file = \"{}\"\nmesh-token-file = \"{}\"\nmesh-refresh = \"1s\"\nnode = \"b\"\n[serve]\ntransports = []\n",
            server.addr().port(),
            ca.display(),
            token.display()
        )
    };
    // Whoever cannot show the token, or a server no authority in mesh-ca-file
    // signed, gives no description: the node does not start on it.
    let refused = |ca: &std::path::Path, token: &std::path::Path| {
        Config::from_toml(&text(ca, token), None)
            .unwrap_err()
            .to_string()
    };
    let (other_ca, _, _) = common::authority_and_server(&dir, "other");
    let wrong_token = dir.private("wrong-token", "wrongwrongwrongwrong");
    let e = refused(&ca, &wrong_token);
    assert!(e.contains("HTTP 401"), "{e}");
    let e = refused(&other_ca, &token_file);
    assert!(e.contains("certificate"), "{e}");
    let file = dir.0.join("overlay.toml");
    std::fs::write(&file, text(&ca, &token_file)).unwrap();
    let log = dir.0.join("log");
    let p = Program::start(&file, &log);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let names = || link_names(api);
    assert!(
        eventually(Duration::from_secs(30), || names()
            .is_some_and(|n| n == ["a-pathchirp-udp"])),
        "{:?}\n{}",
        names(),
        log_text()
    );
    server.set(&description(&["b", "a", "c"]));
    assert!(
        eventually(Duration::from_secs(15), || names()
            .is_some_and(|n| n == ["a-pathchirp-udp", "c-pathchirp-udp"])),
        "{:?}\n{}",
        names(),
        log_text()
    );
    // The log line follows the reload it reports.
    assert!(
        eventually(Duration::from_secs(5), || log_text().contains(
            "mesh-refresh: configuration reloaded: 1 links go on, added: c-pathchirp-udp"
        )),
        "{}",
        log_text()
    );
    server.set("[[member]]\nname = \"b\"\n");
    assert!(
        eventually(Duration::from_secs(15), || log_text().contains(
            "mesh-refresh: the configuration is not reloaded, nothing changed"
        )),
        "{}",
        log_text()
    );
    assert_eq!(names().unwrap(), ["a-pathchirp-udp", "c-pathchirp-udp"]);
    signal(&p, libc::SIGTERM);
    drop(p);
    drop(server);
}
