//! What the namespace tests (`e2e`, `nat`, `relay`) share: one test at a time, the
//! daemon under test, the root check, key and configuration files and trains running
//! beside a transfer.

// Each test binary uses part of this.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mgrp_core::api::DaemonStats;
use mgrp_core::auth::Key;
use mgrp_testbed::{Daemon, uniform_train};

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time (each starts real-time pacers on a 2-CPU machine); a failed
/// test must not stop the others.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    mgrp_rt::lock(&SERIAL)
}

/// The daemon this build made.
pub(crate) fn mgrpd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mgrpd"))
}

/// Whether the test can run (it needs root for namespaces); says so when not, and
/// notes the skip for the test command's count.
pub(crate) use mgrp_testbed::root_or_skip;

/// A file in the temporary directory (a key or a configuration), removed on drop.
pub(crate) struct TempFile(PathBuf);

impl TempFile {
    fn write(tag: &str, extension: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{}.{extension}", mgrp_testbed::unique(tag)));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    /// A key file of mode 0600 holding `key`.
    pub(crate) fn key(key: &Key) -> Self {
        Self::secret(&key.to_hex())
    }

    /// A file of mode 0600 holding `text` (a key, a private key).
    pub(crate) fn secret(text: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let file = Self::write("mgk", "key", text);
        std::fs::set_permissions(&file.0, std::fs::Permissions::from_mode(0o600)).unwrap();
        file
    }

    /// A configuration file holding `text`.
    pub(crate) fn config(text: &str) -> Self {
        Self::write("mgc", "toml", text)
    }

    /// Replaces the file's text.
    pub(crate) fn rewrite(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }

    /// The path, as a command-line argument.
    pub(crate) fn arg(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs trains of 20 × 500 B, 1 ms apart, from `daemon` to `to`, `pause` after each
/// report, until `stop`; every probe must leave. Returns how many trains ran.
pub(crate) fn trains_every(
    daemon: &Daemon,
    to: IpAddr,
    stop: Arc<AtomicBool>,
    pause: Duration,
) -> std::thread::JoinHandle<u64> {
    let api = daemon.api().expect("API of the daemon sending trains");
    std::thread::spawn(move || {
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            let train = uniform_train(to, 20, 500, Duration::from_millis(1));
            let report = api.send_train(train).expect("train report");
            assert_eq!(report.probes_sent, 20, "{report:#?}");
            sent += 1;
            std::thread::sleep(pause);
        }
        sent
    })
}

/// Waits until `what` holds of `daemon`'s counters (10 s at most); returns the last
/// counters read.
pub(crate) fn wait_for(daemon: &Daemon, what: impl Fn(&DaemonStats) -> bool) -> DaemonStats {
    let start = std::time::Instant::now();
    loop {
        let s = daemon.stats().unwrap();
        if what(&s) || start.elapsed() > Duration::from_secs(10) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
