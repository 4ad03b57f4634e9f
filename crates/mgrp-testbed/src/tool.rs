//! A measurement tool's two commands on a two-host testbed, as every tool's namespace
//! tests run them: the daemons a transport needs, `snd` on A, `rcv --json` on B, and
//! what `rcv` printed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use crate::{ADDR_A, Daemon, Process, TwoHosts, daemon_pair};

/// The daemons `transport` needs: over `mgrp` one on each host (this program acting
/// as mgrpd when started as `PROGRAM mgrpd …`, given `args`), none over `udp`.
pub fn daemons_for(
    net: &TwoHosts,
    transport: &str,
    args: &[&str],
) -> anyhow::Result<Option<(Daemon, Daemon)>> {
    if transport != "mgrp" {
        return Ok(None);
    }
    let me = std::env::current_exe()?;
    daemon_pair(net, &me, &["mgrpd"], args).map(Some)
}

/// What `rcv` printed and how it ended.
#[derive(Debug)]
pub struct Rcv {
    /// Everything it printed.
    pub log: String,
    /// The JSON lines of it.
    pub lines: Vec<Value>,
    /// Its exit code (-1 if a signal ended it).
    pub code: i32,
    /// Its wall time.
    pub wall: Duration,
}

impl Rcv {
    /// The lines whose `event` is `event`.
    pub fn events<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.lines.iter().filter(move |v| v["event"] == event)
    }

    /// The `"event": "result"` line.
    pub fn result(&self) -> anyhow::Result<&Value> {
        self.events("result")
            .next()
            .with_context(|| format!("no result line (exit {}): {}", self.code, self.log))
    }

    /// Fails, with the log, unless `rcv` exited with 0.
    pub fn succeeded(&self) -> anyhow::Result<&Self> {
        ensure!(
            self.code == 0,
            "rcv exited with {}: {}",
            self.code,
            self.log
        );
        Ok(self)
    }
}

/// Runs `bin snd --transport T` on A and `bin rcv --sender A --transport T --json
/// RCV_ARGS` on B, each with its host's daemon socket when `daemons` are given; waits
/// up to `limit` for `rcv` and then for `snd`, which serves one measurement and must
/// end cleanly. `MGRP_TEST_LOG=1` prints both logs.
pub fn snd_rcv(
    net: &TwoHosts,
    bin: &Path,
    transport: &str,
    daemons: Option<&(Daemon, Daemon)>,
    rcv_args: &[&str],
    limit: Duration,
) -> anyhow::Result<Rcv> {
    let mut snd: Vec<String> = ["snd", "--transport", transport].map(String::from).to_vec();
    let mut rcv: Vec<String> = ["rcv", "--sender", &ADDR_A.to_string(), "--transport"]
        .map(String::from)
        .to_vec();
    rcv.extend([transport.into(), "--json".into()]);
    rcv.extend(rcv_args.iter().map(ToString::to_string));
    if let Some((a, b)) = daemons {
        snd.extend(["--socket".into(), a.socket.display().to_string()]);
        rcv.extend(["--socket".into(), b.socket.display().to_string()]);
    }
    let mut sender = Process::spawn(&net.a, bin, &snd)?;
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut receiver = Process::spawn(&net.b, bin, &rcv)?;
    let Some(status) = receiver.wait(limit) else {
        bail!("rcv did not end within {limit:?}: {}", receiver.log());
    };
    let wall = started.elapsed();
    let log = receiver.log();
    if std::env::var_os("MGRP_TEST_LOG").is_some() {
        eprintln!("--- rcv ---\n{log}--- snd ---\n{}", sender.log());
    }
    ensure!(
        sender
            .wait(Duration::from_secs(10))
            .is_some_and(|s| s.success()),
        "snd did not end cleanly: {}",
        sender.log()
    );
    let lines = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok(Rcv {
        log,
        lines,
        code: status.code().unwrap_or(-1),
        wall,
    })
}
