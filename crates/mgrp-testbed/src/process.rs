//! Processes started in a namespace and stopped, by their PID only, even when a
//! test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::netns::{Netns, unique};

/// A process started in a namespace, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `program args` in `ns`, stderr and stdout to a log file.
    pub fn spawn(ns: &Netns, program: &Path, args: &[String]) -> anyhow::Result<Self> {
        Self::spawn_in(ns.name(), program, args)
    }

    /// [`Self::spawn`] by the namespace's name, for threads that outlive a borrow of
    /// the [`Netns`] (the namespace must outlive the process).
    pub fn spawn_in(ns: &str, program: &Path, args: &[String]) -> anyhow::Result<Self> {
        Self::start(ns, program, args, None)
    }

    /// [`Self::spawn`] with the process's timer slack set to `slack_ns` nanoseconds
    /// (`PR_SET_TIMERSLACK` before it execs; kept across exec and by the threads it
    /// starts): a program whose timing rests on short sleeps, as the original
    /// pathload's sender does, needs the kernel's default 50 µs taken off.
    pub fn spawn_with_timer_slack(
        ns: &Netns,
        program: &Path,
        args: &[String],
        slack_ns: u64,
    ) -> anyhow::Result<Self> {
        Self::start(ns.name(), program, args, Some(slack_ns))
    }

    fn start(
        ns: &str,
        program: &Path,
        args: &[String],
        slack_ns: Option<u64>,
    ) -> anyhow::Result<Self> {
        let log = std::env::temp_dir().join(format!("{}.log", unique("mgrp-proc")));
        let file = std::fs::File::create(&log)?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        if let Some(slack) = slack_ns {
            use std::os::unix::process::CommandExt as _;
            let slack = libc::c_ulong::try_from(slack)?;
            // SAFETY: prctl is async-signal-safe and touches only the child's own
            // timer slack; nothing is allocated between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_TIMERSLACK, slack, 0, 0, 0) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        Ok(Self {
            child: Some(child),
            log,
        })
    }

    /// The process id (`ip netns exec` execs the program, so it is the program's).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the process wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: signalling a child we started and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    /// Waits up to `timeout` for the process to exit; returns its exit code.
    pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM, wait up to 5 s, then SIGKILL.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.signal(libc::SIGTERM);
        if let Some(s) = self.wait(Duration::from_secs(5)) {
            return Some(s);
        }
        self.signal(libc::SIGKILL);
        self.wait(Duration::from_secs(5))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Sends SIGKILL to `pid`, which must be a process this test started.
pub fn kill_pid(pid: u32) {
    // SAFETY: plain signal delivery.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}
