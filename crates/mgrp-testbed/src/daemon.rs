//! mgrpd in a namespace: started, asked over its API (a blocking client), stopped,
//! and a pair of them on a two-host topology.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mgrp_client::Train;
use mgrp_client::blocking::Client;
use mgrp_core::api::DaemonStats;

use crate::netns::{Netns, unique};
use crate::process::Process;

/// mgrpd running in a namespace, with its API socket.
#[derive(Debug)]
pub struct Daemon {
    /// The process.
    pub process: Process,
    /// Its API socket.
    pub socket: PathBuf,
    /// Its TUN's name.
    pub tun: String,
}

/// Where the daemons the tests start keep their state (replay windows): a directory
/// of each daemon's own, named after its TUN, never the host's own `/var/lib/mgrp`.
/// A daemon that finds no directory takes it for a first start; one that finds the
/// directory without its file takes its state for lost (and refuses every peer's
/// packets for a few seconds).
pub fn daemon_state_dir(tun: &str) -> PathBuf {
    std::env::temp_dir().join("mgrp-test-state").join(tun)
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Stopped first: a daemon saves its state as it stops.
        self.process.stop();
        let _ = std::fs::remove_dir_all(daemon_state_dir(&self.tun));
    }
}

impl Daemon {
    /// Starts `mgrpd` in `ns` with a unique TUN and socket plus `args`, and waits until
    /// its API answers.
    pub fn start(ns: &Netns, mgrpd: &Path, args: &[&str]) -> anyhow::Result<Self> {
        Self::start_via(ns, mgrpd, &[], args)
    }

    /// Starts `mgrpd` again as a daemon stopped before (its process stopped, not
    /// dropped): the same TUN name, so it reads the state that one saved.
    pub fn restart(ns: &Netns, mgrpd: &Path, tun: &str, args: &[&str]) -> anyhow::Result<Self> {
        Self::launch(ns, mgrpd, &[], tun.to_string(), args)
    }

    /// Like [`Self::start`] for a program that runs mgrpd when given `prefix` first
    /// (a program that embeds the daemon and re-executes itself).
    pub fn start_via(
        ns: &Netns,
        program: &Path,
        prefix: &[&str],
        args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::launch(ns, program, prefix, unique("mt"), args)
    }

    fn launch(
        ns: &Netns,
        program: &Path,
        prefix: &[&str],
        tun: String,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        let socket = std::env::temp_dir().join(format!("{}.sock", unique("mgrpd")));
        let mut all: Vec<String> = prefix.iter().map(ToString::to_string).collect();
        all.extend([
            "--tun".to_string(),
            tun.clone(),
            "--socket".into(),
            socket.display().to_string(),
            "--state-dir".into(),
            daemon_state_dir(&tun).display().to_string(),
        ]);
        all.extend(args.iter().map(ToString::to_string));
        let mut process = Process::spawn(ns, program, &all)?;
        let start = Instant::now();
        loop {
            // Connecting greets the daemon: it answers once it is ready.
            if Client::connect(&socket).is_ok() {
                break;
            }
            if let Some(status) = process.wait(Duration::from_millis(50)) {
                bail!("mgrpd exited at start ({status}): {}", process.log());
            }
            if start.elapsed() > Duration::from_secs(15) {
                bail!(
                    "mgrpd did not answer on {} within 15 s: {}",
                    socket.display(),
                    process.log()
                );
            }
        }
        Ok(Self {
            process,
            socket,
            tun,
        })
    }

    /// A new API connection (`mgrp-client`'s blocking client), greeted.
    pub fn api(&self) -> anyhow::Result<Client> {
        Client::connect(&self.socket)
            .with_context(|| format!("cannot use mgrpd's API at {}", self.socket.display()))
    }

    /// The daemon's counters.
    pub fn stats(&self) -> anyhow::Result<DaemonStats> {
        Ok(self.api()?.stats()?)
    }

    /// Waits until no rider is held and the counters stop moving, then returns them.
    pub fn quiescent_stats(&self) -> anyhow::Result<DaemonStats> {
        let start = Instant::now();
        let mut last = self.stats()?;
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.stats()?;
            if now == last && now.planner.riders_held == 0 {
                return Ok(now);
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Ok(now);
            }
            last = now;
        }
    }
}

/// A train of `n` probes of `size` bytes, `gap` apart, to `dst`, between the tests'
/// ports 7000 and 7001.
pub fn uniform_train(dst: IpAddr, n: usize, size: u16, gap: Duration) -> Train {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    Train::uniform(dst, n, size, gap).ports(7000, 7001)
}
