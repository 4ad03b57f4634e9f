//! The topologies tests build: two hosts, optionally through a router with a tbf
//! bottleneck, and a star of hosts around one router.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::daemon::Daemon;
use crate::delay::{DelayConfig, DelayLine};
use crate::netns::{Netns, tbf, veth_pair};

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
    /// With `router`: a delay line ([`crate::delay::DelayLine`], in a namespace of its
    /// own between R and B) that delays each direction by this much, so the path's
    /// round trip is twice it, as a real path's is (a namespace path's is a few
    /// microseconds, which TCP's send sizing and pacing treat unlike any real one).
    pub delay: Option<std::time::Duration>,
}

/// Two hosts, A (10.77.0.1, fd77::1) and B (10.77.0.2, fd77::2), on one veth pair, or
/// through a router (IPv4 only) with [`TwoHostOptions::router`].
#[derive(Debug)]
pub struct TwoHosts {
    /// The delay line between R and B, if asked for; stopped first.
    pub delay: Option<DelayLine>,
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
    /// The delay line's namespace, if any.
    pub delay_ns: Option<Netns>,
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
        anyhow::ensure!(
            opts.delay.is_none() || opts.router,
            "a delay line needs the router placement"
        );
        let mut delay_ns = None;
        let mut line = None;
        let (veth_a, veth_b, router, shaped) = if opts.router {
            let r = Netns::new("mgr")?;
            let (veth_a, ra) = veth_pair(&a, &r)?;
            let (rb, veth_b) = if let Some(one_way) = opts.delay {
                // R and B stay on one Ethernet link through the line's namespace.
                let between = DelayLine::between(
                    &r,
                    &b,
                    DelayConfig {
                        one_way,
                        ..DelayConfig::default()
                    },
                )?;
                delay_ns = Some(between.ns);
                line = Some(between.line);
                (between.west_dev, between.east_dev)
            } else {
                veth_pair(&r, &b)?
            };
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
            delay: line,
            a,
            b,
            veth_a,
            veth_b,
            bottleneck_dev: opts.bottleneck.is_some().then_some(shaped),
            router,
            delay_ns,
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
