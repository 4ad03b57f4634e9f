//! Routes that follow the measurements (seed 003, SAFIRE) on the namespace testbed:
//! the overlay's route control moving a legacy TCP transfer (iperf3, CUBIC) between
//! two bridges whose loss rates swap on a schedule, against the same transfer held on
//! either bridge and an oracle that switches at the moment the schedule does.
//!
//! - *Domestic*: west0, north, south, east0; a client behind west0, a server behind
//!   east0; the two bridges west0–north–east0 and west0–south–east0, every link
//!   100 Mbit/s, each bridge's first link delaying 20 ms each way (a 40 ms round trip).
//! - *Forward*: west0, top, north, east0; the top bridge crosses `sat1` (west0–top,
//!   45 Mbit/s, 150 ms each way), the north bridge crosses `sat2` (north–east0,
//!   3 Mbit/s, 270 ms each way). (The seed's north and south bridges are the same
//!   path here; one of them stands for both.)
//!
//! The schedule is the seed's Fig. 4 as its text gives it: five periods of T seconds,
//! the first with loss 0.15 on the first bridge and 0.05 on the second, the rates
//! swapping each period (the figure itself is not in the text: alternation is our
//! reading of "the rest can be inferred"). Loss is on the data's direction only
//! (the delay lines drop west to east), on each bridge's delayed link.
//!
//! Modes: `fixed-<bridge>` for each bridge (the path set by hand), `adaptive` (the
//! rule: η = 0.5, T_ch = 10 s, heartbeats every 50 ms over a 5 s loss window, existing
//! flows move with the route as SAFIRE's flow table did), `oracle` (the path set by
//! hand to the bridge with less loss at the moment each period starts). Every mode
//! runs the same daemons and route control; only who chooses differs. A last run
//! kills the relay a transfer crosses (its mgrpd, by PID) and times the reroute.
//!
//! `--settings defaults` runs route control as it ships instead (the confidence rule,
//! PFTK, 100 ms heartbeats over 10 s, T_ch 30 s; existing flows still move), into
//! its own directory. Two more runs: `steady`, ten minutes of the adaptive mode on
//! Domestic with 5 % loss on both bridges (any switch is noise), and `kills`,
//! `--trials` fresh testbeds each killing the relay a 30 s transfer crosses at 12 s.
//!
//! Run as root: `cargo run --release --example routing -- --out docs/routing`
//! (about two and a half hours; `--runs` picks some); `--analyse` redoes the tables
//! and plots from the JSON.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use clap::Parser;
use mgrp_experiments::experiment;
use mgrp_testbed::delay::{DelayConfig, DelayLine};
use mgrp_testbed::{Daemon, Netns, Process, veth_pair};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Route control moving a legacy TCP transfer between two lossy bridges (root).
#[derive(Debug, Parser)]
#[command(name = "routing")]
struct Args {
    /// Where the JSON, results.md and the plots go.
    #[arg(long, default_value = "docs/routing")]
    out: PathBuf,
    /// Only rewrite the results from the JSON in the output directory.
    #[arg(long)]
    analyse: bool,
    /// Runs, comma-separated: domestic-60, domestic-120, forward-60, forward-120,
    /// kill (one), kills (`--trials` of them), steady (10 minutes of equal bridges).
    #[arg(
        long,
        default_value = "domestic-60,domestic-120,forward-60,forward-120,kill"
    )]
    runs: String,
    /// Route control's settings: `seed` (SAFIRE's ratio rule and Mathis's model,
    /// 50 ms heartbeats over a 5 s window, T_ch 10 s) or `defaults` (the shipped ones).
    #[arg(long, value_enum, default_value = "seed")]
    settings: Settings,
    /// Trials of the `kills` run.
    #[arg(long, default_value_t = 20)]
    trials: u32,
}

/// Whose settings route control runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Settings {
    /// The seed's reproduction.
    Seed,
    /// What a node ships with (only `move-existing = true` added: the transfer is one
    /// long flow, and the seed's flow table moved flows with the route).
    Defaults,
}

/// Periods of the schedule.
const PERIODS: u32 = 5;
/// The seed's loss rates.
const HIGH_LOSS: f64 = 0.15;
const LOW_LOSS: f64 = 0.05;
/// Route control's settings for every mode, fixed before any run.
const HEARTBEAT: &str = "50ms";
const LOSS_WINDOW: &str = "5s";
const T_CH_S: u32 = 10;
const ETA: f64 = 0.5;
/// The destination: the server's network behind east0.
const DEST: &str = "10.2.0.0/24";
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 2);
const CLIENT_NET: &str = "10.1.0.0/24";
/// IP bytes of one heartbeat on the wire: a ping (13 bytes of UDP payload in an IP
/// packet of 41) wrapped in one continuation over UDP (20 + 8 + 2 + 2 more), a pong
/// (21 bytes in 49, sent plain).
const PING_WIRE_BYTES: u64 = 41 + 32;
const PONG_WIRE_BYTES: u64 = 49;
/// A stamped ping alone by the normal route: plain, 41 bytes.
const ACK_PING_WIRE_BYTES: u64 = 41;

/// One link of a bridge.
#[derive(Debug, Clone, Copy)]
struct LinkSpec {
    /// `tbf` rate of its data direction.
    rate: &'static str,
    /// One-way delay through a delay line (which also carries the schedule's loss).
    delay_ms: Option<u64>,
}

/// A bridge: west0 – relay – east0.
#[derive(Debug, Clone, Copy)]
struct Bridge {
    relay: &'static str,
    first: LinkSpec,
    second: LinkSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Topology {
    Domestic,
    Forward,
}

impl Topology {
    fn bridges(self) -> [Bridge; 2] {
        let plain = LinkSpec {
            rate: "100mbit",
            delay_ms: None,
        };
        match self {
            Self::Domestic => {
                let delayed = LinkSpec {
                    rate: "100mbit",
                    delay_ms: Some(20),
                };
                [
                    Bridge {
                        relay: "north",
                        first: delayed,
                        second: plain,
                    },
                    Bridge {
                        relay: "south",
                        first: delayed,
                        second: plain,
                    },
                ]
            }
            Self::Forward => [
                Bridge {
                    relay: "top",
                    first: LinkSpec {
                        rate: "45mbit",
                        delay_ms: Some(150),
                    },
                    second: plain,
                },
                Bridge {
                    relay: "north",
                    first: plain,
                    second: LinkSpec {
                        rate: "3mbit",
                        delay_ms: Some(270),
                    },
                },
            ],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Domestic => "domestic",
            Self::Forward => "forward",
        }
    }
}

/// Loss of bridge `b` in period `k` (0-based): the seed's Fig. 4.
fn loss(b: usize, k: u32) -> f64 {
    if k.is_multiple_of(2) == (b == 0) {
        HIGH_LOSS
    } else {
        LOW_LOSS
    }
}

/// The testbed: namespaces, delay lines, daemons and overlays, torn down on drop.
struct Bed {
    west0: Netns,
    relays: Vec<Netns>,
    /// Kept: the namespace lives as long as this.
    _east0: Netns,
    client: Netns,
    server: Netns,
    _delay_ns: Vec<Netns>,
    /// Each bridge's delay line (the one that carries its loss).
    lines: Vec<DelayLine>,
    daemons: Vec<Daemon>,
    overlays: Vec<Process>,
    bridges: [Bridge; 2],
    _dir: experiment_dir::Dir,
}

mod experiment_dir {
    /// A directory of one run's files, removed on drop.
    #[derive(Debug)]
    pub(crate) struct Dir(pub(crate) std::path::PathBuf);

    impl Dir {
        pub(crate) fn new() -> std::io::Result<Self> {
            let p = std::env::temp_dir().join(mgrp_testbed::unique("mgrp-routing-exp"));
            std::fs::create_dir_all(&p)?;
            Ok(Self(p))
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn addr(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 90, 0, i)
}

/// A link from `x` (`.1`) to `y` (`.2`) on subnet `10.90.<net>.0/24`, its data
/// direction shaped at `spec.rate`, through a delay line when `spec` has a delay
/// (returned with its namespace).
fn link(
    x: &Netns,
    y: &Netns,
    net: u8,
    spec: LinkSpec,
) -> anyhow::Result<Option<(Netns, DelayLine)>> {
    let (xa, ya) = (format!("10.90.{net}.1/24"), format!("10.90.{net}.2/24"));
    let up = |ns: &Netns, dev: &str, a: Option<&str>| -> anyhow::Result<()> {
        if let Some(a) = a {
            ns.ip(&["addr", "add", a, "dev", dev])?;
        }
        ns.ip(&["link", "set", dev, "up"])?;
        Ok(())
    };
    let shape = |dev: &str| {
        x.exec(&[
            "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", spec.rate, "burst", "15140",
            "latency", "100ms",
        ])
    };
    let Some(ms) = spec.delay_ms else {
        let (dx, dy) = veth_pair(x, y)?;
        up(x, &dx, Some(&xa))?;
        up(y, &dy, Some(&ya))?;
        shape(&dx)?;
        return Ok(None);
    };
    let d = Netns::new("rtd")?;
    d.exec(&["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])?;
    d.exec(&["sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"])?;
    let (dx, dw) = veth_pair(x, &d)?;
    let (de, dy) = veth_pair(&d, y)?;
    up(x, &dx, Some(&xa))?;
    up(&d, &dw, None)?;
    up(&d, &de, None)?;
    up(y, &dy, Some(&ya))?;
    shape(&dx)?;
    let line = DelayLine::start(
        &d,
        &dw,
        &de,
        DelayConfig {
            one_way: Duration::from_millis(ms),
            loss: 0.0,
            seed: u64::from(net),
        },
    )?;
    Ok(Some((d, line)))
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let p = dir.join(name);
    std::fs::write(&p, text)?;
    Ok(p.display().to_string())
}

impl Bed {
    fn new(topology: Topology, move_existing: bool, settings: Settings) -> anyhow::Result<Self> {
        let bridges = topology.bridges();
        let west0 = Netns::new("rtw0")?;
        let relays = vec![Netns::new("rtr0")?, Netns::new("rtr1")?];
        let east0 = Netns::new("rte0")?;
        let client = Netns::new("rtwc")?;
        let server = Netns::new("rtec")?;
        let (w, e) = (addr(1), addr(4));
        let relay_addr = |b: usize| addr(2 + b as u8);
        for (ns, a) in [
            (&west0, w),
            (&relays[0], relay_addr(0)),
            (&relays[1], relay_addr(1)),
            (&east0, e),
        ] {
            ns.ip(&["link", "set", "lo", "up"])?;
            ns.ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"])?;
            ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        }
        let mut delay_ns = Vec::new();
        let mut lines = Vec::new();
        for (b, bridge) in bridges.iter().enumerate() {
            let (n1, n2) = (10 + 2 * b as u8, 11 + 2 * b as u8);
            let r = &relays[b];
            for (x, y, net, spec) in [
                (&west0, r, n1, bridge.first),
                (r, &east0, n2, bridge.second),
            ] {
                if let Some((d, line)) = link(x, y, net, spec)? {
                    delay_ns.push(d);
                    lines.push(line);
                }
            }
            let ra = relay_addr(b).to_string();
            let via = |net: u8, end: u8| format!("10.90.{net}.{end}");
            west0.ip(&[
                "route",
                "add",
                &format!("{ra}/32"),
                "via",
                &via(n1, 2),
                "src",
                &w.to_string(),
            ])?;
            r.ip(&[
                "route",
                "add",
                &format!("{w}/32"),
                "via",
                &via(n1, 1),
                "src",
                &ra,
            ])?;
            r.ip(&[
                "route",
                "add",
                &format!("{e}/32"),
                "via",
                &via(n2, 2),
                "src",
                &ra,
            ])?;
            east0.ip(&[
                "route",
                "add",
                &format!("{ra}/32"),
                "via",
                &via(n2, 1),
                "src",
                &e.to_string(),
            ])?;
            // The relay's kernel takes relayed packets only with a route back to their
            // source, and forwards to the server's network the plain way too.
            r.ip(&["route", "add", CLIENT_NET, "via", &via(n1, 1)])?;
            r.ip(&["route", "add", DEST, "via", &via(n2, 2)])?;
        }
        ensure!(lines.len() == 2, "each bridge has one delayed link");
        // The normal routes (and the acknowledgements' way back) cross the first bridge.
        west0.ip(&[
            "route",
            "add",
            &format!("{e}/32"),
            "via",
            "10.90.10.2",
            "src",
            &w.to_string(),
        ])?;
        west0.ip(&["route", "add", DEST, "via", "10.90.10.2"])?;
        east0.ip(&[
            "route",
            "add",
            &format!("{w}/32"),
            "via",
            "10.90.11.1",
            "src",
            &e.to_string(),
        ])?;
        east0.ip(&["route", "add", CLIENT_NET, "via", "10.90.11.1"])?;
        for (host, router, net) in [(&client, &west0, 1u8), (&server, &east0, 2u8)] {
            let (dh, dr) = veth_pair(host, router)?;
            host.ip(&["addr", "add", &format!("10.{net}.0.2/24"), "dev", &dh])?;
            host.ip(&["link", "set", &dh, "up"])?;
            router.ip(&["addr", "add", &format!("10.{net}.0.1/24"), "dev", &dr])?;
            router.ip(&["link", "set", &dr, "up"])?;
            host.ip(&["route", "add", "default", "via", &format!("10.{net}.0.1")])?;
        }
        let dir = experiment_dir::Dir::new()?;
        let me = std::env::current_exe()?;
        // Relaying takes a key (mgrpd refuses relay-to and allowed-sources without):
        // one for the whole testbed, in a file only its owner reads.
        let key_path = dir.0.join("mesh.key");
        std::fs::write(
            &key_path,
            mgrp_core::auth::Key::from_bytes(std::array::from_fn(|i| i as u8 ^ 0x5a)).to_hex(),
        )?;
        std::fs::set_permissions(
            &key_path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )?;
        let udp = format!("key-file = \"{}\"\nencap = \"udp\"\n", key_path.display());
        let peer = |a: Ipv4Addr, extra: &str| format!("[[peers]]\nprefix = \"{a}/32\"\n{extra}");
        let mut daemons = Vec::new();
        let mut configs = vec![(
            &west0,
            format!(
                "{udp}{}{}",
                peer(relay_addr(0), "device = \"mgrp-r0\"\n"),
                peer(relay_addr(1), "device = \"mgrp-r1\"\n")
            ),
        )];
        for r in &relays {
            configs.push((
                r,
                format!(
                    "{udp}{}{}",
                    peer(
                        w,
                        &format!("allowed-sources = [\"{CLIENT_NET}\"]\nrelay-to = [\"{DEST}\"]\n")
                    ),
                    peer(e, "device = \"mgrp-e\"\n")
                ),
            ));
        }
        configs.push((
            &east0,
            format!(
                "{udp}local-prefixes = [\"{DEST}\"]\n{}{}",
                peer(
                    relay_addr(0),
                    &format!("allowed-sources = [\"{CLIENT_NET}\"]\n")
                ),
                peer(
                    relay_addr(1),
                    &format!("allowed-sources = [\"{CLIENT_NET}\"]\n")
                )
            ),
        ));
        for (i, (ns, text)) in configs.iter().enumerate() {
            let path = write(&dir.0, &format!("mgrpd-{i}.toml"), text)?;
            daemons.push(Daemon::start_via(
                ns,
                &me,
                &["mgrpd"],
                &["--config", &path, "--log-level", "warn"],
            )?);
        }
        let routing = |a: Ipv4Addr, tun: &str, rest: &str| match settings {
            Settings::Seed => format!(
                "[routing]\naddress = \"{a}\"\ntun = \"{tun}\"\nheartbeat-interval = \"{HEARTBEAT}\"\n\
                 loss-window = \"{LOSS_WINDOW}\"\nrule = \"ratio\"\nmodel = \"mathis\"\neta = {ETA}\nt-ch = \"{T_CH_S}s\"\npoll = \"1s\"\n\
                 move-existing = {move_existing}\n{rest}"
            ),
            Settings::Defaults => format!(
                "[routing]\naddress = \"{a}\"\ntun = \"{tun}\"\nmove-existing = {move_existing}\n{rest}"
            ),
        };
        let member = |name: &str, a: Ipv4Addr, device: Option<&str>| {
            format!(
                "[[routing.member]]\nname = \"{name}\"\naddress = \"{a}\"\napi = \"{a}:7700\"\n{}",
                device.map_or(String::new(), |d| format!("device = \"{d}\"\n"))
            )
        };
        let mut overlays = Vec::new();
        let nodes: Vec<(&Netns, Ipv4Addr, String, String)> = vec![
            (
                &west0,
                w,
                "west0".to_string(),
                routing(
                    w,
                    &daemons[0].tun,
                    &format!(
                        "{}{}{}[[routing.destination]]\nprefix = \"{DEST}\"\nmember = \"east0\"\ndirect = false\n",
                        member(bridges[0].relay, relay_addr(0), Some("mgrp-r0")),
                        member(bridges[1].relay, relay_addr(1), Some("mgrp-r1")),
                        member("east0", e, None)
                    ),
                ),
            ),
            (
                &relays[0],
                relay_addr(0),
                bridges[0].relay.to_string(),
                routing(
                    relay_addr(0),
                    &daemons[1].tun,
                    &relay_routing(&member, w, e),
                ),
            ),
            (
                &relays[1],
                relay_addr(1),
                bridges[1].relay.to_string(),
                routing(
                    relay_addr(1),
                    &daemons[2].tun,
                    &relay_routing(&member, w, e),
                ),
            ),
            (
                &east0,
                e,
                "east0".to_string(),
                routing(e, &daemons[3].tun, ""),
            ),
        ];
        for (ns, a, name, r) in nodes {
            let path = write(
                &dir.0,
                &format!("overlay-{name}.toml"),
                &format!(
                    "name = \"{name}\"\nlisten = \"{a}:7700\"\nopen-api = true\nsocket = \"{}\"\n[serve]\ntransports = []\n{r}",
                    daemons[overlays.len()].socket.display()
                ),
            )?;
            overlays.push(Process::spawn(
                ns,
                &me,
                &[
                    "overlay".into(),
                    "--config".into(),
                    path,
                    "--log-level".into(),
                    "info".into(),
                ],
            )?);
        }
        Ok(Self {
            west0,
            relays,
            _east0: east0,
            client,
            server,
            _delay_ns: delay_ns,
            lines,
            daemons,
            overlays,
            bridges,
            _dir: dir,
        })
    }

    /// Adds (second `t`, from, to) to `switches` when west0's path is not `last`.
    fn note_switch(
        &self,
        t: f64,
        last: &mut Option<String>,
        switches: &mut Vec<(f64, String, String)>,
    ) {
        if let Ok(v) = self.routes() {
            let cur = v["destinations"][0]["current"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            if last.as_ref() != Some(&cur) {
                switches.push((t, last.clone().unwrap_or_default(), cur.clone()));
                *last = Some(cur);
            }
        }
    }

    fn path_name(&self, b: usize) -> String {
        format!("via {}", self.bridges[b].relay)
    }

    fn routes(&self) -> anyhow::Result<Value> {
        let (status, body) = mgrp_testbed::http::request_in(
            &self.west0,
            &format!("{}:7700", addr(1)),
            "GET",
            "/v1/routes",
        )?;
        ensure!(status == 200, "west0 /v1/routes: {status} {body}");
        Ok(serde_json::from_str(&body)?)
    }

    /// Sets the path by hand and waits until west0 has it.
    fn choose_and_wait(&self, path: &str) -> anyhow::Result<()> {
        self.choose(path)?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.routes()?["destinations"][0]["current"].as_str() == Some(path) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("west0 did not take {path} within 10 s")
    }

    fn choose(&self, path: &str) -> anyhow::Result<()> {
        let q = format!(
            "/v1/routes/choose?prefix={DEST}&path={}",
            path.replace(' ', "+")
        );
        // The overlay takes a POST only with this header (no web page can send it).
        let (status, _, body) = mgrp_testbed::http::exchange_in(
            &self.west0,
            &format!("{}:7700", addr(1)),
            "POST",
            &q,
            "X-MGRP-Request: 1\r\n",
        )?;
        ensure!(status == 202, "choose {path}: {status} {body}");
        Ok(())
    }

    /// Waits until both paths answer heartbeats.
    fn ready(&self) -> anyhow::Result<()> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(v) = self.routes()
                && v["destinations"][0]["paths"]
                    .as_array()
                    .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["score"]["alive"] == true))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        bail!(
            "the paths did not come up within 30 s: {:?}\n{}",
            self.routes(),
            self.overlays[0].log()
        )
    }

    fn set_period(&self, k: u32) -> anyhow::Result<()> {
        for (b, line) in self.lines.iter().enumerate() {
            line.set_loss(loss(b, k))?;
        }
        Ok(())
    }
}

fn relay_routing(
    member: &dyn Fn(&str, Ipv4Addr, Option<&str>) -> String,
    w: Ipv4Addr,
    e: Ipv4Addr,
) -> String {
    format!(
        "{}{}[[routing.destination]]\nprefix = \"{DEST}\"\nmember = \"east0\"\nvia = []\n",
        member("west0", w, None),
        member("east0", e, Some("mgrp-e"))
    )
}

/// A mode of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    /// Held on bridge b.
    Fixed(usize),
    Adaptive,
    Oracle,
}

impl Mode {
    fn label(&self, bridges: &[Bridge; 2]) -> String {
        match self {
            Self::Fixed(b) => format!("fixed {}", bridges[*b].relay),
            Self::Adaptive => "adaptive".into(),
            Self::Oracle => "oracle".into(),
        }
    }
}

/// What one mode's transfer got.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModeResult {
    mode: Mode,
    label: String,
    /// Receiver's goodput per second, Mbit/s.
    mbps: Vec<f64>,
    mean_mbps: f64,
    /// (second, path) at each change of west0's path seen by a once-a-second look.
    switches: Vec<(f64, String, String)>,
    /// West0's heartbeats and the relays' to east0: pings sent, pongs received
    /// (stamped ones included).
    heartbeat_pings: u64,
    heartbeat_pongs: u64,
    /// West0's stamped pings alone to east0 by the normal route (plain UDP), and
    /// their answers.
    #[serde(default)]
    ack_pings: u64,
    #[serde(default)]
    ack_pongs: u64,
    load_before: String,
    load_after: String,
}

/// One topology at one period length.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunResult {
    topology: Topology,
    period_s: u32,
    bridges: Vec<String>,
    modes: Vec<ModeResult>,
}

/// The relay killed mid-transfer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct KillResult {
    killed: String,
    /// Seconds from the kill to west0's switch (seen at a 100 ms look).
    switch_s: f64,
    /// Seconds from the kill to the switch as west0's API records it.
    #[serde(default)]
    recorded_s: Option<f64>,
    /// Seconds from the kill to the first half second in which the transfer delivered
    /// half its mean rate before the kill.
    recovered_s: Option<f64>,
    reason: String,
    mbps: Vec<(f64, f64)>,
    load: String,
}

/// Ten minutes of the adaptive mode on equal bridges (Domestic, 5 % loss on both).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SteadyResult {
    seconds: u32,
    loss: f64,
    mean_mbps: f64,
    switches: Vec<(f64, String, String)>,
    load_before: String,
    load_after: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Results {
    /// Whose settings route control ran with (`None`: the seed's, from before the
    /// choice).
    #[serde(default)]
    settings: Option<Settings>,
    runs: Vec<RunResult>,
    kill: Option<KillResult>,
    /// The `kills` run's trials.
    #[serde(default)]
    kills: Vec<KillResult>,
    #[serde(default)]
    steady: Option<SteadyResult>,
}

/// iperf3 (CUBIC) from the client to the server for `seconds`, intervals of
/// `interval` s; the receiver's bytes per interval (from `--get-server-output`).
fn iperf(bed: &Bed, seconds: u32, interval: f64) -> anyhow::Result<(Process, Process, PathBuf)> {
    mgrp_testbed::packages::require(&["iperf3"])?;
    let iperf3 = mgrp_testbed::packages::find("iperf3").context("iperf3")?;
    let server = Process::spawn(
        &bed.server,
        &iperf3,
        &["-s".into(), "-1".into(), "-B".into(), SERVER.to_string()],
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let out = std::env::temp_dir().join(format!("{}.json", mgrp_testbed::unique("iperf")));
    let client = Process::spawn(
        &bed.client,
        &iperf3,
        &[
            "-c".into(),
            SERVER.to_string(),
            "-t".into(),
            seconds.to_string(),
            "-i".into(),
            interval.to_string(),
            "-C".into(),
            "cubic".into(),
            "-J".into(),
            "--get-server-output".into(),
            "--logfile".into(),
            out.display().to_string(),
        ],
    )?;
    Ok((server, client, out))
}

/// Waits up to `within` for the transfer [`iperf`] started to end; its receiver's
/// intervals, the output file removed.
fn finished(
    mut server: Process,
    mut client: Process,
    out: &Path,
    within: Duration,
) -> anyhow::Result<Vec<(f64, f64)>> {
    if client.wait(within).is_none() {
        bail!("iperf3 did not end: {}", client.log());
    }
    let _ = server.wait(Duration::from_secs(5));
    let intervals = receiver_intervals(out).with_context(|| client.log());
    let _ = std::fs::remove_file(out);
    intervals
}

/// The receiver's (start second, Mbit/s) per interval from iperf3's JSON.
fn receiver_intervals(path: &Path) -> anyhow::Result<Vec<(f64, f64)>> {
    let text = std::fs::read_to_string(path)?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("iperf3 output: {text}"))?;
    let server = &v["server_output_json"]["intervals"];
    let list = server
        .as_array()
        .or_else(|| v["intervals"].as_array())
        .context("no intervals in iperf3's output")?;
    Ok(list
        .iter()
        .filter_map(|i| {
            let s = &i["sum"];
            Some((s["start"].as_f64()?, s["bits_per_second"].as_f64()? / 1e6))
        })
        .collect())
}

/// Heartbeats over the hops (pings, pongs) and stamped pings alone by the normal
/// route (pings, pongs), every kind counted.
fn heartbeats(bed: &Bed) -> ((u64, u64), (u64, u64)) {
    let (mut hops, mut acks) = ((0, 0), (0, 0));
    let mut add = |ns: &Netns, a: Ipv4Addr| {
        if let Ok((200, body)) =
            mgrp_testbed::http::request_in(ns, &format!("{a}:7700"), "GET", "/v1/routes")
            && let Ok(v) = serde_json::from_str::<Value>(&body)
        {
            let n = |h: &Value, k: &str| h[k].as_u64().unwrap_or(0);
            for m in v["members"].as_array().into_iter().flatten() {
                let h = &m["heartbeat"];
                hops.0 += n(h, "sent") + n(h, "stamped_sent");
                hops.1 += n(h, "answered") + n(h, "stamped_answered");
                let a = &m["acks"];
                acks.0 += n(a, "stamped_sent");
                acks.1 += n(a, "stamped_answered");
            }
        }
    };
    add(&bed.west0, addr(1));
    add(&bed.relays[0], addr(2));
    add(&bed.relays[1], addr(3));
    (hops, acks)
}

fn run_mode(
    topology: Topology,
    period_s: u32,
    mode: &Mode,
    settings: Settings,
) -> anyhow::Result<ModeResult> {
    let load_before = mgrp_testbed::host::load();
    let bed = Bed::new(topology, true, settings)?;
    bed.ready()?;
    bed.set_period(0)?;
    let better = |k: u32| if loss(0, k) < loss(1, k) { 0 } else { 1 };
    match mode {
        Mode::Fixed(b) => bed.choose_and_wait(&bed.path_name(*b))?,
        Mode::Oracle => bed.choose_and_wait(&bed.path_name(better(0)))?,
        Mode::Adaptive => {}
    }
    let total = PERIODS * period_s;
    let (server, client, out) = iperf(&bed, total, 1.0)?;
    let start = Instant::now();
    let mut switches = Vec::new();
    let mut last: Option<String> = None;
    let mut k = 0;
    while start.elapsed() < Duration::from_secs(u64::from(total)) {
        if experiment::interrupted() {
            bail!("interrupted");
        }
        let t = start.elapsed().as_secs_f64();
        let period = (t / f64::from(period_s)) as u32;
        if period > k && period < PERIODS {
            k = period;
            bed.set_period(k)?;
            if *mode == Mode::Oracle {
                bed.choose(&bed.path_name(better(k)))?;
            }
        }
        bed.note_switch(t, &mut last, &mut switches);
        std::thread::sleep(Duration::from_millis(200));
    }
    let ((pings, pongs), (ack_pings, ack_pongs)) = heartbeats(&bed);
    let intervals = finished(server, client, &out, Duration::from_secs(30))?;
    let mbps: Vec<f64> = intervals.iter().map(|(_, m)| *m).collect();
    let mean = mbps.iter().sum::<f64>() / mbps.len().max(1) as f64;
    let label = mode.label(&bed.bridges);
    eprintln!(
        "{} T={period_s}: {label}: {mean:.3} Mbit/s, {} switches",
        topology.name(),
        switches.len().saturating_sub(1)
    );
    drop(bed);
    Ok(ModeResult {
        mode: mode.clone(),
        label,
        mbps,
        mean_mbps: mean,
        switches,
        heartbeat_pings: pings,
        heartbeat_pongs: pongs,
        ack_pings,
        ack_pongs,
        load_before,
        load_after: mgrp_testbed::host::load(),
    })
}

/// A relay killed `kill_s` into a `seconds` transfer with no loss.
fn run_kill(settings: Settings, seconds: u32, kill_s: u64) -> anyhow::Result<KillResult> {
    let mut bed = Bed::new(Topology::Domestic, true, settings)?;
    bed.ready()?;
    bed.set_period(0)?;
    // No loss: the transfer takes whichever bridge the rule chose first.
    for line in &bed.lines {
        line.set_loss(0.0)?;
    }
    let (server, client, out) = iperf(&bed, seconds, 0.5)?;
    std::thread::sleep(Duration::from_secs(kill_s));
    let v = bed.routes()?;
    let current = v["destinations"][0]["current"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let b = (0..2)
        .find(|&b| bed.path_name(b) == current)
        .with_context(|| format!("the transfer is on no bridge: {v}"))?;
    let kill_at = Instant::now();
    let kill_unix = mgrp_rt::unix_now();
    let started = kill_at - Duration::from_secs(kill_s);
    bed.daemons[1 + b].process.stop();
    let mut switch_s = None;
    let mut recorded_s = None;
    let mut reason = String::new();
    while kill_at.elapsed() < Duration::from_secs(20) {
        if let Ok(v) = bed.routes() {
            let d = &v["destinations"][0];
            if d["current"].as_str() != Some(&current) {
                switch_s = Some(kill_at.elapsed().as_secs_f64());
                let last = d["recent"].as_array().and_then(|r| r.last());
                reason = last
                    .and_then(|s| s["reason_text"].as_str())
                    .unwrap_or("")
                    .to_string();
                recorded_s = last.and_then(|s| s["at"].as_f64()).map(|at| at - kill_unix);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let switch_s = switch_s.context("west0 did not route around the killed relay in 20 s")?;
    let mbps = finished(server, client, &out, Duration::from_secs(60))?;
    let kill_s = (kill_at - started).as_secs_f64();
    let before: Vec<f64> = mbps
        .iter()
        .filter(|(t, _)| *t >= 5.0 && *t < kill_s)
        .map(|(_, m)| *m)
        .collect();
    let mean_before = before.iter().sum::<f64>() / before.len().max(1) as f64;
    let recovered_s = mbps
        .iter()
        .find(|(t, m)| *t > kill_s && *m >= mean_before / 2.0)
        .map(|(t, _)| t - kill_s);
    eprintln!("kill {current}: switched after {switch_s:.2} s, recovered after {recovered_s:?} s");
    Ok(KillResult {
        killed: current,
        switch_s,
        recorded_s,
        recovered_s,
        reason,
        mbps,
        load: mgrp_testbed::host::load(),
    })
}

/// Ten minutes of the adaptive mode on Domestic with 5 % loss on both bridges: any
/// switch for the better is noise.
fn run_steady(settings: Settings) -> anyhow::Result<SteadyResult> {
    const SECONDS: u32 = 600;
    let load_before = mgrp_testbed::host::load();
    let bed = Bed::new(Topology::Domestic, true, settings)?;
    bed.ready()?;
    for line in &bed.lines {
        line.set_loss(LOW_LOSS)?;
    }
    let (server, client, out) = iperf(&bed, SECONDS, 1.0)?;
    let start = Instant::now();
    let mut switches = Vec::new();
    let mut last: Option<String> = None;
    while start.elapsed() < Duration::from_secs(u64::from(SECONDS)) {
        if experiment::interrupted() {
            bail!("interrupted");
        }
        bed.note_switch(start.elapsed().as_secs_f64(), &mut last, &mut switches);
        std::thread::sleep(Duration::from_millis(200));
    }
    let mbps: Vec<f64> = finished(server, client, &out, Duration::from_secs(30))?
        .iter()
        .map(|(_, m)| *m)
        .collect();
    let mean_mbps = mbps.iter().sum::<f64>() / mbps.len().max(1) as f64;
    eprintln!(
        "steady: {mean_mbps:.3} Mbit/s, {} switches",
        switches.len().saturating_sub(1)
    );
    Ok(SteadyResult {
        seconds: SECONDS,
        loss: LOW_LOSS,
        mean_mbps,
        switches,
        load_before,
        load_after: mgrp_testbed::host::load(),
    })
}

fn measure(args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let json = args.out.join("results.json");
    let mut results: Results = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    for run in args
        .runs
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        results.settings = Some(args.settings);
        if run == "kill" {
            results.kill = Some(run_kill(args.settings, 40, 15)?);
        } else if run == "kills" {
            results.kills.clear();
            for i in 0..args.trials {
                eprintln!("kill trial {} of {}", i + 1, args.trials);
                results.kills.push(run_kill(args.settings, 30, 12)?);
                std::fs::write(&json, serde_json::to_string_pretty(&results)?)?;
            }
        } else if run == "steady" {
            results.steady = Some(run_steady(args.settings)?);
        } else {
            let (topology, period) = match run.split_once('-') {
                Some(("domestic", t)) => (Topology::Domestic, t.parse::<u32>()?),
                Some(("forward", t)) => (Topology::Forward, t.parse::<u32>()?),
                _ => bail!("unknown run {run:?}: domestic-T, forward-T, kill, kills or steady"),
            };
            let bridges = topology.bridges();
            let mut modes = Vec::new();
            for mode in [Mode::Fixed(0), Mode::Fixed(1), Mode::Adaptive, Mode::Oracle] {
                modes.push(run_mode(topology, period, &mode, args.settings)?);
            }
            results
                .runs
                .retain(|r| !(r.topology == topology && r.period_s == period));
            results.runs.push(RunResult {
                topology,
                period_s: period,
                bridges: bridges.iter().map(|b| b.relay.to_string()).collect(),
                modes,
            });
        }
        std::fs::write(&json, serde_json::to_string_pretty(&results)?)?;
    }
    Ok(())
}

fn analyse(out: &Path) -> anyhow::Result<()> {
    let results: Results = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).context("no results.json yet")?,
    )?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Routes that follow the measurements: results{}\n\nMade by `cargo run --release --example routing -- --out {}{}` (the write-up is `docs/routing.md`). Receiver goodput of one iperf3 CUBIC transfer, Mbit/s; loss schedule: the seed's Fig. 4, {HIGH_LOSS} and {LOW_LOSS} swapping each period.\n",
        match results.settings {
            Some(Settings::Defaults) => " (route control's shipped defaults)",
            _ => " (the seed's rule and settings)",
        },
        out.display(),
        match results.settings {
            Some(Settings::Defaults) => " --settings defaults",
            _ => "",
        }
    );
    let _ = writeln!(
        md,
        "| topology | T (s) | mode | mean Mbit/s | of oracle | switches | heartbeat bytes | load before → after |\n|---|---|---|---|---|---|---|---|"
    );
    let mut runs = results.runs.clone();
    runs.sort_by_key(|r| (r.topology.name(), r.period_s));
    let mut goals = String::new();
    for r in &runs {
        let oracle = r
            .modes
            .iter()
            .find(|m| m.mode == Mode::Oracle)
            .map_or(f64::NAN, |m| m.mean_mbps);
        for m in &r.modes {
            let bytes = m.heartbeat_pings * PING_WIRE_BYTES
                + m.heartbeat_pongs * PONG_WIRE_BYTES
                + m.ack_pings * ACK_PING_WIRE_BYTES
                + m.ack_pongs * PONG_WIRE_BYTES;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.3} | {:.0} % | {} | {:.1} MB | {} → {} |",
                r.topology.name(),
                r.period_s,
                m.label,
                m.mean_mbps,
                100.0 * m.mean_mbps / oracle,
                m.switches.len().saturating_sub(1),
                bytes as f64 / 1e6,
                m.load_before.split(' ').next().unwrap_or(""),
                m.load_after.split(' ').next().unwrap_or("")
            );
        }
        let adaptive = r
            .modes
            .iter()
            .find(|m| m.mode == Mode::Adaptive)
            .map_or(f64::NAN, |m| m.mean_mbps);
        let best_fixed = r
            .modes
            .iter()
            .filter(|m| matches!(m.mode, Mode::Fixed(_)))
            .map(|m| m.mean_mbps)
            .fold(0.0, f64::max);
        let _ = writeln!(
            goals,
            "- {} T = {} s: adaptive {:.0} % of the oracle (goal at T = 60: ≥ 90 %), {:.2} × the better fixed route (goal: ≥ 1.5 ×)",
            r.topology.name(),
            r.period_s,
            100.0 * adaptive / oracle,
            adaptive / best_fixed
        );
        // One panel per mode: the seed's figures draw each mode on its own, and four
        // modes over each other hid all but the top one.
        let panels: Vec<mgrp_experiments::plot::Panel> = r
            .modes
            .iter()
            .map(|m| mgrp_experiments::plot::Panel {
                label: format!(
                    "{}: mean {:.2} Mbit/s, {} switches",
                    m.label,
                    m.mean_mbps,
                    m.switches.len().saturating_sub(1)
                ),
                per_second: m.mbps.clone(),
                switches: m
                    .switches
                    .iter()
                    .skip(1)
                    .map(|(t, _, to)| (*t, to.clone()))
                    .collect(),
            })
            .collect();
        let lossy: Vec<String> = r
            .bridges
            .iter()
            .map(|b| format!("{b}: loss {HIGH_LOSS}"))
            .collect();
        let lossy: Vec<&str> = lossy.iter().map(String::as_str).collect();
        mgrp_experiments::plot::periods(
            &out.join(format!("{}-{}.svg", r.topology.name(), r.period_s)),
            &format!(
                "{} topology, T = {} s: goodput per second (grey), its 5-s average, switches (red)",
                r.topology.name(),
                r.period_s
            ),
            "Mbit/s",
            f64::from(r.period_s),
            &lossy,
            5,
            &panels,
        )?;
    }
    let _ = writeln!(md, "\n{goals}");
    let _ = writeln!(md, "## Switches against the schedule\n");
    for r in &runs {
        for m in r
            .modes
            .iter()
            .filter(|m| matches!(m.mode, Mode::Adaptive | Mode::Oracle))
        {
            let list: Vec<String> = m
                .switches
                .iter()
                .skip(1)
                .map(|(t, from, to)| {
                    let period = (t / f64::from(r.period_s)).floor();
                    format!(
                        "{t:.1} s ({:.1} s into period {}): {from} → {to}",
                        t - period * f64::from(r.period_s),
                        period as u32 + 1
                    )
                })
                .collect();
            let _ = writeln!(
                md,
                "- {} T = {} s, {}: {}",
                r.topology.name(),
                r.period_s,
                m.label,
                if list.is_empty() {
                    "none".to_string()
                } else {
                    list.join("; ")
                }
            );
        }
    }
    if let Some(k) = &results.kill {
        let _ = writeln!(
            md,
            "\n## A relay killed mid-transfer\n\nThe mgrpd of the relay the transfer crossed ({}) stopped by PID 15 s into a 40 s transfer with no loss: west0 switched after **{:.2} s** ({}); the transfer delivered half its earlier rate again after {} (goal: ≤ 5 s; RON: under 20 s). Load {}.",
            k.killed,
            k.switch_s,
            k.reason,
            k.recovered_s
                .map_or("never within the run".to_string(), |s| format!(
                    "**{s:.1} s**"
                )),
            k.load
        );
        let pts: Vec<(f64, f64)> = k.mbps.clone();
        mgrp_experiments::plot::series(
            &out.join("kill.svg"),
            &format!("A relay killed at 15 s ({})", k.killed),
            "Mbit/s",
            &[("goodput per 0.5 s".to_string(), pts)],
            &[],
        )?;
    }
    if let Some(st) = &results.steady {
        let _ = writeln!(
            md,
            "\n## Ten steady minutes\n\nDomestic, {} % loss on both bridges for {} s, the adaptive mode: **{} switches** after the first choice (goal: 0); the transfer {:.3} Mbit/s. Switches: {}. Load {} → {}.",
            st.loss * 100.0,
            st.seconds,
            st.switches.len().saturating_sub(1),
            st.mean_mbps,
            if st.switches.len() <= 1 {
                "none".to_string()
            } else {
                st.switches
                    .iter()
                    .skip(1)
                    .map(|(t, from, to)| format!("{t:.1} s {from} → {to}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            st.load_before.split(' ').next().unwrap_or(""),
            st.load_after.split(' ').next().unwrap_or("")
        );
    }
    if !results.kills.is_empty() {
        let mut recorded: Vec<f64> = results
            .kills
            .iter()
            .map(|k| k.recorded_s.unwrap_or(k.switch_s))
            .collect();
        recorded.sort_by(f64::total_cmp);
        let q = |p: f64| recorded[((recorded.len() as f64 - 1.0) * p).round() as usize];
        let recovered: Vec<String> = results
            .kills
            .iter()
            .map(|k| k.recovered_s.map_or("never".into(), |s| format!("{s:.1}")))
            .collect();
        let _ = writeln!(
            md,
            "\n## A relay killed, {} trials\n\nEach trial a fresh testbed (Domestic, no loss), the relay the transfer crossed stopped by PID 12 s into a 30 s transfer. Kill to switch as west0's API records it: median **{:.2} s**, p95 **{:.2} s**, most {:.2} s (goal: ≤ 1 s at p95). Each, s: {}. The transfer back to half its earlier rate, s: {}.",
            recorded.len(),
            q(0.5),
            q(0.95),
            recorded[recorded.len() - 1],
            results
                .kills
                .iter()
                .map(|k| format!("{:.2}", k.recorded_s.unwrap_or(k.switch_s)))
                .collect::<Vec<_>>()
                .join(", "),
            recovered.join(", ")
        );
    }
    std::fs::write(out.join("results.md"), md)?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    experiment::main("routing", Args::parse, |args| {
        if !args.analyse {
            measure(args)?;
        }
        analyse(&args.out)
    })
}
