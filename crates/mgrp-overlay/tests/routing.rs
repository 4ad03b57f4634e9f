//! Route control in network namespaces (root): four overlay members — W, N, S and E —
//! each with mgrpd over UDP, and a client C behind W. E holds the network
//! 10.88.9.0/24; W reaches it directly, through N, or through S. N and S relay for W
//! (`relay-to`). The four mgrpds and W's route control take their parts from one
//! mesh description (`[routing] members`, each member's `networks`): keys, next-hop
//! devices, relays and W's destination all derived. Loss is nftables' random drop on
//! W's direct link. W's route control chooses:
//!
//! - the direct path first (half the round trip of a relayed one);
//! - a loss on the direct link moves new flows to a relay within a bound, while a flow
//!   that started on the direct path stays there (its conntrack mark);
//! - the loss removed and T_ch passed, new flows take the direct path again (it needs
//!   only to match the relay: with no loss seen on either, the two score within the
//!   confidence rule's margin, and a relay must be clearly better to be kept);
//! - the relay in use killed (its mgrpd, by PID), its flows move to the other relay
//!   within 5 s and keep delivering;
//! - W's overlay stopped, every rule, route and table it added is gone.
//!
//! That a peer that is no member cannot relay is mgrpd's test (`relay`).
//!
//! Own `main` (no libtest harness): the daemons and overlays are this binary.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod embed;

use anyhow::{Context, bail, ensure};
use embed::TempDir;
use mgrp_testbed::traffic::tcp_source;
use mgrp_testbed::{Daemon, Netns, Process, veth_pair};
use serde_json::Value;

const W: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
const N: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
const S: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 3);
const E: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 4);
const C: Ipv4Addr = Ipv4Addr::new(10, 88, 6, 2);
const E_LAN: &str = "10.88.9.0/24";
const E_HOST: Ipv4Addr = Ipv4Addr::new(10, 88, 9, 1);
/// Route control's dwell time here.
const T_CH: Duration = Duration::from_secs(8);
/// Marks of W's paths: direct, via n, via s (numbered in that order).
const MARK_DIRECT: u32 = 1 << 16;

struct Net {
    w: Netns,
    n: Netns,
    s: Netns,
    e: Netns,
    c: Netns,
    /// W's end of its direct link to E.
    w_to_e: String,
}

fn up(ns: &Netns, dev: &str, addr: &str) -> anyhow::Result<()> {
    ns.ip(&["addr", "add", addr, "dev", dev])?;
    ns.ip(&["link", "set", dev, "up"])?;
    Ok(())
}

impl Net {
    fn new() -> anyhow::Result<Self> {
        let (w, n, s, e, c) = (
            Netns::new("rtw")?,
            Netns::new("rtn")?,
            Netns::new("rts")?,
            Netns::new("rte")?,
            Netns::new("rtc")?,
        );
        for (ns, a) in [(&w, W), (&n, N), (&s, S), (&e, E)] {
            ns.ip(&["link", "set", "lo", "up"])?;
            ns.ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"])?;
            ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        }
        e.ip(&["addr", "add", &format!("{E_HOST}/32"), "dev", "lo"])?;
        // Links: (x, y, subnet); x is .1, y is .2. A relayed path crosses two links and
        // two more daemons: its round trip is about twice the direct one's.
        let mut w_to_e = String::new();
        for (x, y, net, xa, ya) in [
            (&w, &e, 1, W, E),
            (&w, &n, 2, W, N),
            (&n, &e, 3, N, E),
            (&w, &s, 4, W, S),
            (&s, &e, 5, S, E),
        ] {
            let (dx, dy) = veth_pair(x, y)?;
            up(x, &dx, &format!("10.88.{net}.1/24"))?;
            up(y, &dy, &format!("10.88.{net}.2/24"))?;
            // Each node reaches the other's own address over this link, from its own.
            x.ip(&[
                "route",
                "add",
                &format!("{ya}/32"),
                "via",
                &format!("10.88.{net}.2"),
                "src",
                &xa.to_string(),
            ])?;
            y.ip(&[
                "route",
                "add",
                &format!("{xa}/32"),
                "via",
                &format!("10.88.{net}.1"),
                "src",
                &ya.to_string(),
            ])?;
            if net == 1 {
                w_to_e = dx;
            }
        }
        let (dc, dw) = veth_pair(&c, &w)?;
        up(&c, &dc, &format!("{C}/24"))?;
        up(&w, &dw, "10.88.6.1/24")?;
        c.ip(&["route", "add", "default", "via", "10.88.6.1"])?;
        // The normal routes: W to E's network over the direct link, E back to C the
        // same way (plain IP, outside any tunnel).
        w.ip(&["route", "add", E_LAN, "via", "10.88.1.2"])?;
        e.ip(&["route", "add", "10.88.6.0/24", "via", "10.88.1.1"])?;
        // A relay's kernel takes a relayed packet only with some route back to its
        // source (the TUN's reverse-path filter is loose).
        n.ip(&["route", "add", "10.88.6.0/24", "via", "10.88.2.1"])?;
        s.ip(&["route", "add", "10.88.6.0/24", "via", "10.88.4.1"])?;
        Ok(Self {
            w,
            n,
            s,
            e,
            c,
            w_to_e,
        })
    }

    /// Random loss of `percent` % of what W sends on its direct link to E (0: none),
    /// by an nftables table of the test's own (this kernel has no netem).
    fn direct_loss(&self, percent: u32) -> anyhow::Result<()> {
        let script = format!(
            "table ip rtloss\ndelete table ip rtloss\ntable ip rtloss {{\n  chain out {{\n    type filter hook postrouting priority 0; policy accept;\n{}  }}\n}}\n",
            if percent > 0 {
                format!(
                    "    oifname \"{}\" numgen random mod 100 < {percent} drop\n",
                    self.w_to_e
                )
            } else {
                String::new()
            }
        );
        let path = std::env::temp_dir().join(format!("{}.nft", mgrp_testbed::unique("rtloss")));
        std::fs::write(&path, script)?;
        let r = self.w.exec(&["nft", "-f", &path.display().to_string()]);
        let _ = std::fs::remove_file(&path);
        r.map(drop)
    }
}

/// Writes `text` to `name` in `dir`, readable by its owner only (keys, tokens).
fn private(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let p = write(dir, name, text)?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
    Ok(p)
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let p = dir.join(name);
    std::fs::write(&p, text)?;
    Ok(p)
}

fn mgrpd(ns: &Netns, config: &Path) -> anyhow::Result<Daemon> {
    let me = std::env::current_exe()?;
    Daemon::start_via(
        ns,
        &me,
        &["mgrpd"],
        &[
            "--config",
            &config.display().to_string(),
            "--log-level",
            "info",
        ],
    )
}

fn overlay(ns: &Netns, config: &Path) -> anyhow::Result<Process> {
    embed::overlay(ns, config, "info")
}

fn get(ns: &Netns, addr: Ipv4Addr, path: &str) -> anyhow::Result<Value> {
    let (status, body) = mgrp_testbed::http::request_in(ns, &format!("{addr}:7700"), "GET", path)?;
    ensure!(status == 200, "GET {path}: {status} {body}");
    Ok(serde_json::from_str(&body)?)
}

/// W's destination as its route control shows it.
fn destination(net: &Net) -> Option<Value> {
    get(&net.w, W, "/v1/routes").ok()?["destinations"][0]
        .as_object()
        .map(|o| Value::Object(o.clone()))
}

/// Checks that W's latest switch was for `reason`.
fn last_switch_was(net: &Net, reason: &str) -> anyhow::Result<()> {
    let d = destination(net).unwrap_or_default();
    let last = d["recent"]
        .as_array()
        .and_then(|r| r.last().cloned())
        .unwrap_or_default();
    ensure!(
        last["reason"]["kind"] == reason,
        "the switch's reason: {d:#}"
    );
    Ok(())
}

fn current(net: &Net) -> Option<String> {
    destination(net)?["current"].as_str().map(String::from)
}

/// Waits up to `within` for W's current path to satisfy `ok`; the time it took.
fn wait_current(
    net: &Net,
    within: Duration,
    ok: impl Fn(&str) -> bool,
) -> anyhow::Result<(String, Duration)> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(c) = current(net)
            && ok(&c)
        {
            return Ok((c, start.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "W's route did not change as expected within {within:?}: {:?}",
        get(&net.w, W, "/v1/routes")
    )
}

/// The conntrack mark of W's connection to E's host on `port`.
fn flow_mark(net: &Net, port: u16) -> anyhow::Result<u32> {
    let out = net.w.exec(&[
        "conntrack",
        "-L",
        "-p",
        "tcp",
        "--dport",
        &port.to_string(),
        "-d",
        &E_HOST.to_string(),
    ])?;
    let line = out
        .lines()
        .find(|l| l.contains("mark="))
        .with_context(|| format!("no connection to port {port} in W's conntrack: {out}"))?;
    let m = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("mark="))
        .context("no mark")?;
    Ok(m.parse()?)
}

fn mark_of(path: &str) -> u32 {
    match path {
        "direct" => MARK_DIRECT,
        "via n" => 2 << 16,
        "via s" => 3 << 16,
        _ => 0x00ff_0000,
    }
}

/// Bytes a flow delivers over `over`.
fn delivered(f: &mgrp_testbed::traffic::Source, over: Duration) -> u64 {
    let before = f.bytes();
    std::thread::sleep(over);
    f.bytes() - before
}

fn routes_follow_the_measurements() -> anyhow::Result<()> {
    mgrp_testbed::packages::require(&["nft", "conntrack"])?;
    let net = Net::new()?;
    let dir = TempDir::new("mgrp-routing")?;
    // One description for the four members: their keys (relaying takes keys, each
    // pair's derived from one's private key and the other's public one: no key file
    // is copied), the networks behind W and E, and all four routing for each other.
    // Every mgrpd takes its peers (each reached at its address), their routes, next-hop
    // devices, sources and relays from it; so does W's route control.
    let keys: Vec<mgrp_core::pair::PrivateKey> = (0..4u8)
        .map(|i| mgrp_core::pair::PrivateKey::from_bytes([0x51 + i; 32]))
        .collect();
    let mut description = String::new();
    for (i, (name, addr, networks, api)) in [
        ("w", W, "[\"10.88.6.0/24\"]", "http"),
        ("n", N, "[]", "https"),
        ("s", S, "[]", "https"),
        ("e", E, &format!("[\"{E_LAN}\"]") as &str, "http"),
    ]
    .into_iter()
    .enumerate()
    {
        description.push_str(&format!(
            "[[member]]\nname = \"{name}\"\naddress = \"{addr}\"\napi = \"{api}://{addr}:7700\"\npublic-key = \"{}\"\nnetworks = {networks}\n\n",
            keys[i].public()
        ));
    }
    description.push_str("[routing]\nmembers = [\"w\", \"n\", \"s\", \"e\"]\n");
    let mesh = write(&dir.0, "mesh.toml", &description)?;
    let mgrpd_config = |name: &str, i: usize| -> anyhow::Result<PathBuf> {
        let key = private(&dir.0, &format!("{name}.key"), &keys[i].to_hex())?;
        write(
            &dir.0,
            &format!("mgrpd-{name}.toml"),
            &format!(
                "encap = \"udp\"\nmesh = \"{}\"\nnode = \"{name}\"\nprivate-key-file = \"{}\"\n",
                mesh.display(),
                key.display()
            ),
        )
    };
    let (cw, cn, cs, ce) = (
        mgrpd_config("w", 0)?,
        mgrpd_config("n", 1)?,
        mgrpd_config("s", 2)?,
        mgrpd_config("e", 3)?,
    );
    let dw = mgrpd(&net.w, &cw)?;
    let dn = mgrpd(&net.n, &cn)?;
    let ds = mgrpd(&net.s, &cs)?;
    let de = mgrpd(&net.e, &ce)?;

    // The relays' APIs speak only TLS and want a token: W polls them with the token
    // inside TLS, trusting the authority that signed their certificates.
    let authority = mgrp_testbed::tls::Authority::new(&dir.0, "relays")?;
    let ca_file = authority.ca_file.clone();
    let relay_token = private(&dir.0, "relay.token", "relay-token-0123456789")?;
    let tls = |name: &str, addr: Ipv4Addr| -> anyhow::Result<String> {
        let (cert_file, key_file) = authority.server(name, &addr.to_string())?;
        Ok(format!(
            "tls-cert = \"{}\"\ntls-key = \"{}\"\ntoken-file = \"{}\"\n",
            cert_file.display(),
            key_file.display(),
            relay_token.display()
        ))
    };
    let node = |name: &str, addr: Ipv4Addr, d: &Daemon, routing: &str, top: &str| {
        write(
            &dir.0,
            &format!("overlay-{name}.toml"),
            &format!(
                "name = \"{name}\"\nlisten = \"{addr}:7700\"\nopen-api = true\nsocket = \"{}\"\n{top}[serve]\ntransports = []\n\
                 [routing]\naddress = \"{addr}\"\ntun = \"{}\"\nheartbeat-interval = \"50ms\"\nloss-window = \"3s\"\n\
                 t-ch = \"{}s\"\npoll = \"500ms\"\n{routing}",
                d.socket.display(),
                d.tun,
                T_CH.as_secs()
            ),
        )
    };
    let member = |name: &str, addr: Ipv4Addr, device: bool| {
        format!(
            "[[routing.member]]\nname = \"{name}\"\naddress = \"{addr}\"\n{}",
            if device {
                format!("device = \"mgrp-{name}\"\n")
            } else {
                String::new()
            }
        )
    };
    // W's route control from the description (its members n, s and e, and E's
    // network behind e); the authority and token of the members' APIs are W's own.
    let ow = node(
        "w",
        W,
        &dw,
        &format!(
            "ca-file = \"{}\"\ntoken-file = \"{}\"\n",
            ca_file.display(),
            relay_token.display()
        ),
        &format!("mesh = \"{}\"\nnode = \"w\"\n", mesh.display()),
    )?;
    // A relay sends what it relays straight to the owner: its direct path.
    let relay_node = |name: &str, addr: Ipv4Addr, d: &Daemon| {
        node(
            name,
            addr,
            d,
            &format!(
                "{}{}[[routing.destination]]\nprefix = \"{E_LAN}\"\nmember = \"e\"\nvia = []\n",
                member("w", W, false),
                member("e", E, true)
            ),
            &tls(name, addr)?,
        )
    };
    let (on, os) = (relay_node("n", N, &dn)?, relay_node("s", S, &ds)?);
    let oe = node("e", E, &de, "", "")?;
    let _pe = overlay(&net.e, &oe)?;
    let mut pn = overlay(&net.n, &on)?;
    let _ps = overlay(&net.s, &os)?;
    let mut pw = overlay(&net.w, &ow)?;
    let logs =
        |pw: &Process, pn: &Process| format!("--- W ---\n{}\n--- N ---\n{}", pw.log(), pn.log());

    // The direct path first: half the round trip of a relayed one.
    let (first, _) = wait_current(&net, Duration::from_secs(20), |c| c == "direct")
        .with_context(|| logs(&pw, &pn))?;
    eprintln!("first path: {first}");
    // Stamped heartbeats through both daemons give every hop of W a delay each way,
    // and a relayed path's round trip is its hops' ways there plus E's answers' way
    // back (W has a hop to E).
    let start = Instant::now();
    let one_way = loop {
        let routes = get(&net.w, W, "/v1/routes")?;
        let stamped = routes["members"].as_array().is_some_and(|m| {
            m.iter().all(|m| {
                let h = &m["heartbeat"];
                h["stamps"].as_u64().unwrap_or(0) > 0
                    && [&h["forward_s"], &h["back_s"]]
                        .iter()
                        .all(|d| d.as_f64().is_some_and(|d| (0.0..1.0).contains(&d)))
            })
        });
        let via = &routes["destinations"][0]["paths"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "via n").cloned())
            .unwrap_or_default();
        if stamped
            && via["score"]["basis"]
                .as_str()
                .is_some_and(|b| b.contains("acknowledgements"))
        {
            break via["score"]["basis"].clone();
        }
        ensure!(
            start.elapsed() < Duration::from_secs(15),
            "no one-way delays from W's heartbeats: {routes:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("via n: {one_way}");
    // What the API says, /metrics and the status page say too.
    let (status, metrics) =
        mgrp_testbed::http::request_in(&net.w, &format!("{W}:7700"), "GET", "/metrics")?;
    ensure!(status == 200, "/metrics: {status}");
    let value = |series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    ensure!(
        value(&format!(
            "mgrp_overlay_route_path_chosen{{node=\"w\",destination=\"{E_LAN}\",path=\"direct\"}}"
        )) == Some(1.0),
        "{metrics}"
    );
    // The direct path is chosen only while E answers (N and S may not have yet).
    ensure!(
        value("mgrp_overlay_member_up{node=\"w\",neighbour=\"e\"}") == Some(1.0),
        "{metrics}"
    );
    let (_, page) = mgrp_testbed::http::request_in(&net.w, &format!("{W}:7700"), "GET", "/")?;
    ensure!(
        page.contains("id=\"routes\""),
        "no routes panel on the status page"
    );
    let old = tcp_source(&net.c, &net.e, E_HOST.into(), 5501, Some(1.0))?;
    std::thread::sleep(Duration::from_secs(2));
    ensure!(old.bytes() > 0, "no byte of the first flow arrived");
    ensure!(
        flow_mark(&net, 5501)? == MARK_DIRECT,
        "the first flow is not on the direct path"
    );

    // Loss on the direct link: new flows go through a relay; the old one stays.
    net.direct_loss(30)?;
    let (relayed, took) = wait_current(&net, T_CH + Duration::from_secs(15), |c| {
        c.starts_with("via ")
    })
    .with_context(|| logs(&pw, &pn))?;
    eprintln!("30 % loss on the direct link: {relayed} after {took:?}");
    last_switch_was(&net, "better")?;
    let new = tcp_source(&net.c, &net.e, E_HOST.into(), 5502, Some(1.0))?;
    std::thread::sleep(Duration::from_secs(2));
    ensure!(new.bytes() > 0, "no byte of the relayed flow arrived");
    let mark = flow_mark(&net, 5502)?;
    ensure!(
        mark == mark_of(&relayed),
        "the new flow is not on {relayed} (mark {mark:#x}); W's routes: {:#}",
        destination(&net).unwrap_or_default()
    );
    ensure!(
        flow_mark(&net, 5501)? == MARK_DIRECT,
        "the old flow left the direct path"
    );
    let relay_daemon = if relayed == "via n" { &dn } else { &ds };
    let r = relay_daemon.stats()?;
    ensure!(
        r.daemon.riders_relayed > 0,
        "{relayed} relayed nothing: {r:#?}"
    );
    drop(new);

    // The loss gone and T_ch passed: new flows take the direct path again.
    net.direct_loss(0)?;
    let (back, took) = wait_current(&net, T_CH + Duration::from_secs(15), |c| c == "direct")
        .with_context(|| logs(&pw, &pn))?;
    eprintln!(
        "loss removed: {back} after {took:?} ({})",
        destination(&net).unwrap_or_default()["recent"]
            .as_array()
            .and_then(|r| r.last().cloned())
            .unwrap_or_default()["reason_text"]
    );
    last_switch_was(&net, "better")?;
    let again = tcp_source(&net.c, &net.e, E_HOST.into(), 5503, Some(1.0))?;
    std::thread::sleep(Duration::from_secs(2));
    ensure!(
        again.bytes() > 0 && flow_mark(&net, 5503)? == MARK_DIRECT,
        "the flow after the loss is not direct"
    );
    drop(again);
    drop(old);

    // Through a relay again, then that relay's daemon killed: its flow moves on.
    net.direct_loss(30)?;
    let (relayed, _) = wait_current(&net, T_CH + Duration::from_secs(15), |c| {
        c.starts_with("via ")
    })
    .with_context(|| logs(&pw, &pn))?;
    let flow = tcp_source(&net.c, &net.e, E_HOST.into(), 5504, Some(1.0))?;
    std::thread::sleep(Duration::from_secs(2));
    ensure!(
        flow_mark(&net, 5504)? == mark_of(&relayed),
        "the flow is not on {relayed}"
    );
    let (mut victim, other) = if relayed == "via n" {
        (dn, "via s")
    } else {
        (ds, "via n")
    };
    let killed = Instant::now();
    victim.process.stop();
    eprintln!("{relayed}'s mgrpd stopped in {:?}", killed.elapsed());
    let (moved, took) = wait_current(&net, Duration::from_secs(10), |c| c != relayed)
        .with_context(|| logs(&pw, &pn))?;
    eprintln!("{relayed}'s mgrpd killed: {moved} after {took:?}");
    // The sound relay, never the direct path at 30 % loss. (W's mgrpd shares one UDP
    // socket among its peers, and with IP_RECVERR the dead relay's "port unreachable"
    // failed W's next send on it, whichever peer it was for: the heartbeats to the
    // sound relay were lost with it, that relay looked lossy, and W took the direct
    // path about once in ten runs. mgrpd now sends again when a send only reports an
    // earlier packet's error; mgrpd's `relay` test `a_gone_relay_costs_the_other_peers_nothing`
    // counts 1,100-1,500 failed sends without that, none with it.)
    ensure!(
        moved == other,
        "after {relayed} died W took {moved}, not {other}: {}\nW's routes: {:?}\nW's mgrpd: {:?}",
        logs(&pw, &pn),
        get(&net.w, W, "/v1/routes"),
        dw.stats().map(|s| s.daemon)
    );
    ensure!(
        killed.elapsed() <= Duration::from_secs(5) + Duration::from_millis(500),
        "routed around after {:?}",
        killed.elapsed()
    );
    last_switch_was(&net, "failed")?;
    // The flow that was on the dead path delivers again, on the new one.
    std::thread::sleep(Duration::from_secs(2));
    let after = delivered(&flow, Duration::from_secs(3));
    ensure!(
        after > 100_000,
        "the moved flow delivered {after} bytes in 3 s"
    );
    ensure!(
        flow_mark(&net, 5504)? == mark_of(&moved),
        "the moved flow's mark"
    );
    drop(flow);

    // Stopped, W leaves nothing behind.
    pw.stop();
    let rules = net.w.ip(&["rule", "show"])?;
    ensure!(
        !rules.contains("0xff0000") && !rules.contains("0x6d00"),
        "rules left: {rules}"
    );
    for t in (4301..=4303).chain(4556..=4558) {
        let routes = net.w.ip(&["route", "show", "table", &t.to_string()])?;
        ensure!(routes.trim().is_empty(), "table {t} left: {routes}");
    }
    let tables = net.w.exec(&["nft", "list", "tables"])?;
    ensure!(!tables.contains("mgrp_overlay"), "nftables left: {tables}");
    let log = pw.log();
    ensure!(log.contains("are removed"), "{log}");
    pn.stop();
    drop((dw, de, net.n.name().to_string(), net.s.name().to_string()));
    Ok(())
}

fn main() -> ExitCode {
    if let Some(code) = embed::embedded() {
        return code;
    }
    mgrp_testbed::harness::run(&[(
        "routes_follow_the_measurements",
        routes_follow_the_measurements,
    )])
}
