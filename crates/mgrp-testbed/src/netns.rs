//! Network namespaces and the commands run in them: unique names, root checks, a
//! namespace deleted on drop, veth pairs and tbf bottlenecks.

use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call, short enough for an interface name.
pub fn unique(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{tag}{}x{n}", std::process::id() % 100_000)
}

/// A directory of a test's own below the system's temporary one, named by
/// [`unique`], removed with what it holds when dropped (also when the test fails).
#[derive(Debug)]
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates it; `tag` starts its name.
    pub fn new(tag: &str) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether a libtest test that needs root can run. When it cannot, says that `name`
/// skipped and notes it in the file `MGRP_SKIPPED` names, if set (the README's test
/// command sets it and counts these as skipped: libtest counts a test that returns
/// early as passed).
pub fn root_or_skip(name: &str) -> bool {
    if is_root() {
        return true;
    }
    note_skip(name, "needs root to create network namespaces");
    false
}

/// Says that `name` skipped and `why`, and notes it in the file `MGRP_SKIPPED` names,
/// if set (see [`root_or_skip`]).
pub fn note_skip(name: &str, why: &str) {
    eprintln!("{name}: skipped, {why}");
    if let Some(path) = std::env::var_os("MGRP_SKIPPED") {
        use std::io::Write as _;
        let noted = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            // One write of the whole line: tests skip from threads at once.
            .and_then(|mut f| f.write_all(format!("{name}\n").as_bytes()));
        if let Err(e) = noted {
            eprintln!("{name}: cannot note the skip in MGRP_SKIPPED: {e}");
        }
    }
}

/// Whether this process may create namespaces (root).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a command and fails with its stderr if it fails.
pub fn sh(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", args[0]))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The ports every test namespace keeps out of the ephemeral range: the tools'
/// receiver probe, control and sender probe ports.
pub fn reserved_ports() -> String {
    use mgrp_tool::control::{DEFAULT_CONTROL_PORT, DEFAULT_PROBE_PORT, DEFAULT_SENDER_PROBE_PORT};
    let ports = [
        DEFAULT_PROBE_PORT,
        DEFAULT_CONTROL_PORT,
        DEFAULT_SENDER_PROBE_PORT,
    ];
    ports.map(|p| p.to_string()).join(",")
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with a unique name and its loopback up.
    pub fn new(tag: &str) -> anyhow::Result<Self> {
        let name = unique(tag);
        sh(&["ip", "netns", "add", &name])?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        // The tools' default ports lie in Linux's ephemeral range: any socket
        // bound to port 0 in the namespace (a cross-traffic source) may be given one of
        // them by chance and a sender's probe port is then taken. Reserved, as the
        // tools' documentation asks of a host, no socket is given them unasked.
        ns.exec(&[
            "sysctl",
            "-q",
            "-w",
            &format!("net.ipv4.ip_local_reserved_ports={}", reserved_ports()),
        ])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// Opens the namespace, for [`enter`] on another thread.
    fn handle(&self) -> anyhow::Result<(std::fs::File, String)> {
        let path = format!("/var/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).with_context(|| format!("cannot open {path}"))?;
        Ok((file, self.name.clone()))
    }

    /// Runs `f` on a thread that lives in this namespace; sockets it creates stay in
    /// the namespace wherever they are used afterwards.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        let ns = self.handle()?;
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(ns)?;
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("thread in {} panicked", self.name))?
        })
    }

    /// Starts `f` on a named thread that lives in this namespace for as long as it
    /// runs (a long-lived worker, unlike [`Netns::run`]'s call); the caller keeps the
    /// handle and joins it. Threads it starts are in the namespace too.
    pub fn spawn<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<T>>> {
        let ns = self.handle()?;
        Ok(std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                enter(ns)?;
                f()
            })?)
    }
}

/// Moves the calling thread into the namespace `ns` (its file and name).
fn enter((file, name): (std::fs::File, String)) -> anyhow::Result<()> {
    // SAFETY: setns on a namespace fd we opened; it affects only this thread.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        bail!(
            "setns into {name} failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A `tbf` bottleneck on `dev` in `ns`: rate, burst, and a drop-tail queue of 100 ms.
pub(crate) fn tbf(ns: &Netns, dev: &str, rate: &str, burst: &str) -> anyhow::Result<()> {
    ns.exec(&[
        "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency",
        "100ms",
    ])?;
    Ok(())
}

/// Joins namespaces `a` and `b` with a new veth pair; returns the names of `a`'s end
/// and `b`'s end, both down and without addresses.
pub fn veth_pair(a: &Netns, b: &Netns) -> anyhow::Result<(String, String)> {
    let (da, db) = (unique("va"), unique("vb"));
    sh(&[
        "ip",
        "link",
        "add",
        &da,
        "netns",
        a.name(),
        "type",
        "veth",
        "peer",
        "name",
        &db,
        "netns",
        b.name(),
    ])?;
    Ok((da, db))
}
