//! Test hosts on one machine: network namespaces joined by veth pairs (optionally
//! through a tbf bottleneck), guards that remove them and stop the processes started
//! in them even when a test fails, a blocking client of mgrpd's API, and TCP transfers
//! that check every byte.
//!
//! Everything here creates its own uniquely named namespaces and touches nothing else;
//! processes are ended only by the PIDs this crate started.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mgrp_client::Train;
use mgrp_client::blocking::Client;
use mgrp_core::api::DaemonStats;

pub mod accounting;
pub mod delay;
pub mod forge;
pub mod harness;
pub mod host;
pub mod http;
pub mod link;
pub mod packages;
pub mod paper;
pub mod qdisc;
pub mod threads;
pub mod tool;
pub mod traffic;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A small, fixed-seed generator (xorshift64*) for the testbed's random draws (loss,
/// web flow arrivals and sizes), so experiments repeat.
#[derive(Debug, Clone)]
pub struct Seeded(u64);

impl Seeded {
    /// A generator from `seed` (0 is replaced, xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// A draw uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A name unique to this process and call, short enough for an interface name.
pub fn unique(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{tag}{}x{n}", std::process::id() % 100_000)
}

/// Whether a libtest test that needs root can run. When it cannot, says that `name`
/// skipped and notes it in the file `MGRP_SKIPPED` names, if set (the README's test
/// command sets it and counts these as skipped: libtest counts a test that returns
/// early as passed).
pub fn root_or_skip(name: &str) -> bool {
    if is_root() {
        return true;
    }
    eprintln!("{name}: skipped, needs root to create network namespaces");
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
    false
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

/// Options of a two-host topology.
#[derive(Debug, Clone, Default)]
pub struct TwoHostOptions {
    /// A tbf bottleneck from A towards B: (rate, burst), e.g. ("10mbit", "16kb"). On
    /// A's own veth (the sending host's egress), or with `router` on the router's veth
    /// towards B.
    pub bottleneck: Option<(String, String)>,
    /// Join A and B through a router R instead of directly: A and B keep their
    /// addresses on one subnet, and R answers ARP for each towards the other (proxy
    /// ARP) and forwards between them. IPv4 only.
    pub router: bool,
}

/// Two hosts, A (10.77.0.1, fd77::1) and B (10.77.0.2, fd77::2), on one veth pair, or
/// through a router (IPv4 only) with [`TwoHostOptions::router`].
#[derive(Debug)]
pub struct TwoHosts {
    /// Host A.
    pub a: Netns,
    /// Host B.
    pub b: Netns,
    /// A's veth.
    pub veth_a: String,
    /// B's veth.
    pub veth_b: String,
    /// The device towards B whose root qdisc is the bottleneck (the router's with
    /// [`TwoHostOptions::router`], else A's veth), if there is one.
    pub bottleneck_dev: Option<String>,
    /// The router between them, if any. Dropped last: the hosts' veths go with it.
    pub router: Option<Netns>,
}

/// Address of host A.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Address of host B.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// IPv6 address of host A.
pub const ADDR6_A: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1);
/// IPv6 address of host B.
pub const ADDR6_B: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);

impl TwoHosts {
    /// The namespace that holds [`TwoHosts::bottleneck_dev`]: the router, or A.
    pub fn bottleneck_ns(&self) -> &Netns {
        self.router.as_ref().unwrap_or(&self.a)
    }

    /// Builds the topology.
    pub fn new(opts: &TwoHostOptions) -> anyhow::Result<Self> {
        let a = Netns::new("mga")?;
        let b = Netns::new("mgb")?;
        let (veth_a, veth_b, router, shaped) = if opts.router {
            let r = Netns::new("mgr")?;
            let (veth_a, ra) = veth_pair(&a, &r)?;
            let (rb, veth_b) = veth_pair(&r, &b)?;
            r.exec(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
            for dev in [&ra, &rb] {
                // Proxy ARP answers at once only without the default random delay.
                r.exec(&[
                    "sysctl",
                    "-q",
                    "-w",
                    &format!("net.ipv4.conf.{dev}.proxy_arp=1"),
                ])?;
                r.exec(&[
                    "sysctl",
                    "-q",
                    "-w",
                    &format!("net.ipv4.neigh.{dev}.proxy_delay=0"),
                ])?;
                r.ip(&["link", "set", dev, "up"])?;
            }
            // A on its side, the rest of the subnet (B and any address B adds) on B's.
            r.ip(&["route", "add", &format!("{ADDR_A}/32"), "dev", &ra])?;
            r.ip(&["route", "add", "10.77.0.0/24", "dev", &rb])?;
            if let Some((rate, burst)) = &opts.bottleneck {
                tbf(&r, &rb, rate, burst)?;
            }
            (veth_a, veth_b, Some(r), rb)
        } else {
            let (veth_a, veth_b) = veth_pair(&a, &b)?;
            a.ip(&["-6", "addr", "add", "fd77::1/64", "dev", &veth_a, "nodad"])?;
            b.ip(&["-6", "addr", "add", "fd77::2/64", "dev", &veth_b, "nodad"])?;
            if let Some((rate, burst)) = &opts.bottleneck {
                tbf(&a, &veth_a, rate, burst)?;
            }
            let shaped = veth_a.clone();
            (veth_a, veth_b, None, shaped)
        };
        a.ip(&["addr", "add", "10.77.0.1/24", "dev", &veth_a])?;
        b.ip(&["addr", "add", "10.77.0.2/24", "dev", &veth_b])?;
        a.ip(&["link", "set", &veth_a, "up"])?;
        b.ip(&["link", "set", &veth_b, "up"])?;
        Ok(Self {
            a,
            b,
            veth_a,
            veth_b,
            bottleneck_dev: opts.bottleneck.is_some().then_some(shaped),
            router,
        })
    }
}

/// Hosts around a router, each on its own veth: host `i` is `10.78.0.(i+1)/24`, the
/// router answers ARP for every host towards the others (proxy ARP) and forwards
/// between them. The router's veth towards a host may carry a `tbf` bottleneck: that
/// host's downlink, the narrow point of every path into it. The router itself is
/// [`STAR_ROUTER`], reachable from every host (for a tool that watches them all).
/// IPv4 only.
#[derive(Debug)]
pub struct Star {
    /// The hosts, in order.
    pub hosts: Vec<Netns>,
    /// Their addresses.
    pub addrs: Vec<Ipv4Addr>,
    /// A second address of each host (10.79.0.i+1), which [`Star::daemons`] does not
    /// route into the tunnels: for traffic that must not ride (baselines).
    pub outside: Vec<Ipv4Addr>,
    /// The router.
    pub router: Netns,
    /// Each host's end of its veth, in order (where its traffic leaves).
    pub devs: Vec<String>,
}

/// The address of a [`Star`]'s router.
pub const STAR_ROUTER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 254);

impl Star {
    /// Builds it: one host per entry of `downlinks`, each with its downlink's tbf
    /// (rate, burst) if given.
    pub fn new(downlinks: &[Option<(String, String)>]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (2..=200).contains(&downlinks.len()),
            "a star has 2 to 200 hosts"
        );
        let router = Netns::new("mgs")?;
        router.exec(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
        router.ip(&["addr", "add", &format!("{STAR_ROUTER}/32"), "dev", "lo"])?;
        let mut hosts = Vec::new();
        let mut addrs = Vec::new();
        let mut outside = Vec::new();
        let mut devs = Vec::new();
        for (i, downlink) in downlinks.iter().enumerate() {
            let host = Netns::new(&format!("mh{i}"))?;
            let addr = Ipv4Addr::new(10, 78, 0, u8::try_from(i + 1)?);
            let second = Ipv4Addr::new(10, 79, 0, u8::try_from(i + 1)?);
            let (to_host, dev) = veth_pair(&router, &host)?;
            for (key, value) in [("proxy_arp", "1"), ("proxy_delay", "0")] {
                let table = if key == "proxy_arp" { "conf" } else { "neigh" };
                router.exec(&[
                    "sysctl",
                    "-q",
                    "-w",
                    &format!("net.ipv4.{table}.{to_host}.{key}={value}"),
                ])?;
            }
            router.ip(&["link", "set", &to_host, "up"])?;
            for a in [addr, second] {
                router.ip(&["route", "add", &format!("{a}/32"), "dev", &to_host])?;
            }
            if let Some((rate, burst)) = downlink {
                tbf(&router, &to_host, rate, burst)?;
            }
            host.ip(&["addr", "add", &format!("{addr}/24"), "dev", &dev])?;
            host.ip(&["addr", "add", &format!("{second}/32"), "dev", &dev])?;
            host.ip(&["link", "set", &dev, "up"])?;
            // The other hosts' second addresses are reached as the first ones are,
            // through the router's proxy ARP.
            host.ip(&["route", "add", "10.79.0.0/24", "dev", &dev])?;
            hosts.push(host);
            addrs.push(addr);
            outside.push(second);
            devs.push(dev);
        }
        Ok(Self {
            hosts,
            addrs,
            outside,
            router,
            devs,
        })
    }

    /// mgrpd on every host, each routing every other host's address into its tunnel.
    pub fn daemons(
        &self,
        program: &Path,
        prefix: &[&str],
        args: &[&str],
    ) -> anyhow::Result<Vec<Daemon>> {
        self.hosts
            .iter()
            .enumerate()
            .map(|(i, ns)| {
                let routes: Vec<String> = self
                    .addrs
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, a)| format!("{a}/32"))
                    .collect();
                let mut all: Vec<&str> = Vec::new();
                for r in &routes {
                    all.extend(["--route", r.as_str()]);
                }
                all.extend_from_slice(args);
                Daemon::start_via(ns, program, prefix, &all)
            })
            .collect()
    }
}

/// A `tbf` bottleneck on `dev` in `ns`: rate, burst, and a drop-tail queue of 100 ms.
fn tbf(ns: &Netns, dev: &str, rate: &str, burst: &str) -> anyhow::Result<()> {
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
        let log = std::env::temp_dir().join(format!("{}.log", unique("mgrp-proc")));
        let file = std::fs::File::create(&log)?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
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

/// The byte at position `i` of every test transfer.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Reads `r` to its end, checking every byte against [`pattern`]; returns the bytes
/// read and whether all matched.
pub fn read_pattern(r: &mut impl Read) -> std::io::Result<(u64, bool)> {
    let mut buf = vec![0u8; 1 << 16];
    let (mut at, mut intact) = (0u64, true);
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok((at, intact));
        }
        for &b in &buf[..n] {
            intact &= b == pattern(at);
            at += 1;
        }
    }
}

/// Fills `buf` with the pattern bytes from position `at` on.
pub fn fill_pattern(buf: &mut [u8], at: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(at + i as u64);
    }
}

/// The two daemons of a [`TwoHosts`] topology, each routing the other host into its
/// tunnel, started as `program prefix.. --route OTHER/32 args..`.
pub fn daemon_pair(
    net: &TwoHosts,
    program: &Path,
    prefix: &[&str],
    args: &[&str],
) -> anyhow::Result<(Daemon, Daemon)> {
    let start = |ns: &Netns, other: Ipv4Addr| {
        let route = format!("{other}/32");
        let mut all = vec!["--route", route.as_str()];
        all.extend_from_slice(args);
        Daemon::start_via(ns, program, prefix, &all)
    };
    Ok((start(&net.a, ADDR_B)?, start(&net.b, ADDR_A)?))
}

/// Result of [`tcp_transfer`].
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// Bytes the receiver read.
    pub received: u64,
    /// Whether every byte matched the pattern.
    pub intact: bool,
    /// Seconds from connect to the receiver's end of stream.
    pub seconds: f64,
}

impl Transfer {
    /// Throughput in Mbit/s.
    pub fn mbps(&self) -> f64 {
        self.received as f64 * 8.0 / self.seconds / 1e6
    }
}

/// A TCP listener in `server_ns` on `port`, ready before the client connects.
pub fn tcp_listen(server_ns: &Netns, addr: IpAddr, port: u16) -> anyhow::Result<TcpListener> {
    server_ns
        .run(|| TcpListener::bind(SocketAddr::new(addr, port)))?
        .map_err(Into::into)
}

/// Sends `bytes` of the test pattern from `client_ns` to `listener` (bound in the
/// server's namespace at `addr:port`) and checks every byte on arrival.
pub fn tcp_transfer(
    client_ns: &Netns,
    listener: TcpListener,
    addr: IpAddr,
    port: u16,
    bytes: u64,
) -> anyhow::Result<Transfer> {
    let receiver = std::thread::spawn(move || -> anyhow::Result<(u64, bool)> {
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(read_pattern(&mut s)?)
    });
    let start = Instant::now();
    let stream = client_ns.run(|| {
        TcpStream::connect_timeout(&SocketAddr::new(addr, port), Duration::from_secs(10))
    })??;
    let mut stream = stream;
    let mut buf = vec![0u8; 1 << 16];
    let mut sent = 0u64;
    while sent < bytes {
        let n = ((bytes - sent) as usize).min(buf.len());
        fill_pattern(&mut buf[..n], sent);
        stream.write_all(&buf[..n])?;
        sent += n as u64;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let (received, intact) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
    Ok(Transfer {
        received,
        intact,
        seconds: start.elapsed().as_secs_f64(),
    })
}
