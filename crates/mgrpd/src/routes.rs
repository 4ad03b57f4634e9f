//! Policy routing the WireGuard way: a rule `not fwmark M lookup T` sends unmarked
//! traffic to table T, whose routes point destinations at the TUN; everything mgrpd
//! sends carries mark M and so takes the main table out the real interface.
//!
//! [`Routes`] installs the rule and the routes, remembers exactly what it installed,
//! and removes only that on exit. With route on demand it adds a destination's host
//! route while trains to it are queued or in flight (plus the hold time) and removes it
//! afterwards, so that when nobody measures, traffic never enters user space.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures_util::TryStreamExt;
use ipnet::IpNet;
use mgrp_core::peers::Prefix;
use mgrp_core::planner::Encap;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::route::{RouteAttribute, RouteMetric, RouteScope};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use rtnetlink::{Handle, RouteMessageBuilder};

use crate::config::Config;
use crate::sys;

/// A netlink request that failed, in words.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct RouteError {
    what: String,
    #[source]
    source: rtnetlink::Error,
}

fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

/// The rule and routes mgrpd installed.
#[derive(Debug)]
pub struct Routes {
    handle: Handle,
    ifindex: u32,
    table: u32,
    fwmark: u32,
    priority: u32,
    rules: Vec<bool>,
    /// Each installed route, with the source address it was given.
    routes: BTreeMap<IpNet, Option<IpAddr>>,
    /// The MTU each route gets (`None`: the TUN's).
    mtu_of: RouteMtu,
    /// Where each route's source address comes from.
    source_of: SourceOf,
    /// Routes already warned about having no source address.
    warned: BTreeSet<IpNet>,
    /// The TUN's own IPv4 address, which the kernel picks when a route has no source.
    tun_address: Option<Ipv4Addr>,
}

/// What gives a route its source address.
struct SourceOf(Box<dyn Fn(IpNet) -> Option<SourcePlan> + Send + Sync>);

impl std::fmt::Debug for SourceOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceOf")
    }
}

/// What gives a route its MTU.
struct RouteMtu(Box<dyn Fn(IpNet) -> Option<u16> + Send + Sync>);

impl std::fmt::Debug for RouteMtu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteMtu")
    }
}

impl Routes {
    /// Opens a netlink connection (on the current tokio runtime) for the TUN `tun`.
    pub async fn new(tun: &str, table: u32, fwmark: u32, priority: u32) -> anyhow::Result<Self> {
        let (conn, handle, _) = rtnetlink::new_connection()?;
        tokio::spawn(conn);
        let link = handle
            .link()
            .get()
            .match_name(tun.to_string())
            .execute()
            .try_next()
            .await
            .map_err(|e| anyhow::anyhow!("cannot find interface {tun}: {e}"))?
            .ok_or_else(|| anyhow::anyhow!("cannot find interface {tun}"))?;
        Ok(Self {
            handle,
            ifindex: link.header.index,
            table,
            fwmark,
            priority,
            rules: Vec::new(),
            routes: BTreeMap::new(),
            mtu_of: RouteMtu(Box::new(|_| None)),
            source_of: SourceOf(Box::new(|_| None)),
            warned: BTreeSet::new(),
            tun_address: None,
        })
    }

    /// Gives each route the source address `source_of` plans (see
    /// [`crate::config::Config::source_plan`]); `tun_address` is the address the
    /// kernel would pick otherwise, named in the warning when no source is found.
    #[must_use]
    pub fn with_route_source(
        mut self,
        tun_address: Ipv4Addr,
        source_of: impl Fn(IpNet) -> Option<SourcePlan> + Send + Sync + 'static,
    ) -> Self {
        self.source_of = SourceOf(Box::new(source_of));
        self.tun_address = Some(tun_address);
        self
    }

    /// The source address `net`'s route should have now: `Ok(None)` when nothing is
    /// planned for it (the kernel chooses), `Err` with the reason when the plan finds
    /// none (the kernel would choose the TUN's own address, which the peer refuses).
    fn source(&self, net: IpNet) -> Result<Option<IpAddr>, String> {
        let family_ok = |a: IpAddr| a.is_ipv4() == net.network().is_ipv4();
        match (self.source_of.0)(net) {
            None => Ok(None),
            Some(SourcePlan::Configured(a)) => Ok(Some(a)),
            Some(SourcePlan::Toward { peer, endpoint }) => {
                match sys::source_for(endpoint, self.fwmark) {
                    Ok(a) if family_ok(a) => Ok(Some(a)),
                    Ok(a) => Err(format!(
                        "peer {peer}'s endpoint {endpoint} is reached from {a}, an address of another family"
                    )),
                    Err(e) => Err(format!(
                        "this host has no route to peer {peer}'s endpoint {endpoint} outside the tunnel ({e})"
                    )),
                }
            }
            // Until it is heard from, the address towards the peer itself is the best
            // guess (a host with a default route, most of them).
            Some(SourcePlan::Roaming(peer)) => match sys::source_for(peer, self.fwmark) {
                Ok(a) if family_ok(a) => Ok(Some(a)),
                _ => Err(format!(
                    "peer {peer} roams, has not been heard from yet, and this host has no route to it outside the tunnel (once it is heard from, its endpoint gives the source)"
                )),
            },
        }
    }

    /// [`Self::source`], warning (once per route) where none is found.
    fn source_or_warn(&mut self, net: IpNet) -> Option<IpAddr> {
        self.source(net).unwrap_or_else(|why| {
            self.warn_unsourced(net, &why);
            None
        })
    }

    /// Logs, once per route until it has a source again, that the kernel will source
    /// the traffic routed into the tunnel from the TUN's own address.
    fn warn_unsourced(&mut self, net: IpNet, why: &str) {
        if !self.warned.insert(net) {
            return;
        }
        let kernel_pick = match (net, self.tun_address) {
            (IpNet::V4(_), Some(a)) => format!("the TUN's own address {a}"),
            _ => "the TUN's own address".to_string(),
        };
        tracing::warn!(
            "traffic routed into the tunnel to {net} will leave from {kernel_pick}, which the peer refuses as a rider source: {why}; \
             set `source = \"ADDR\"` in that peer's [[peers]] table (or --source ADDR) to the address the peer knows this host by"
        );
    }

    /// Re-plans every installed route's source and replaces the routes whose source
    /// changed (a roaming peer heard from, an address or route of the host changed).
    pub async fn refresh_sources(&mut self) -> Vec<RouteError> {
        let mut errors = Vec::new();
        let nets: Vec<(IpNet, Option<IpAddr>)> =
            self.routes.iter().map(|(n, s)| (*n, *s)).collect();
        for (net, had) in nets {
            let Some(now) = self.source_or_warn(net).filter(|a| Some(*a) != had) else {
                continue;
            };
            let message = self.route_message(net, Some(now));
            match self.handle.route().add(message).replace().execute().await {
                Ok(()) => {
                    tracing::info!("traffic routed into the tunnel to {net} now leaves from {now}");
                    self.warned.remove(&net);
                    self.routes.insert(net, Some(now));
                }
                Err(source) => errors.push(RouteError {
                    what: format!("giving route {net} the source address {now}"),
                    source,
                }),
            }
        }
        errors
    }

    /// Gives each route the MTU `mtu_of` says (routes to UDP peers: the longest packet
    /// that crosses in one continuation).
    #[must_use]
    pub fn with_route_mtu(
        mut self,
        mtu_of: impl Fn(IpNet) -> Option<u16> + Send + Sync + 'static,
    ) -> Self {
        self.mtu_of = RouteMtu(Box::new(mtu_of));
        self
    }

    fn rule_message(&self, v6: bool) -> RuleMessage {
        let mut m = RuleMessage::default();
        m.header.family = if v6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        m.header.action = RuleAction::ToTable;
        m.header.flags = RuleFlags::Invert;
        m.attributes.extend([
            RuleAttribute::FwMark(self.fwmark),
            RuleAttribute::Table(self.table),
            RuleAttribute::Priority(self.priority),
        ]);
        m
    }

    /// Installs `not fwmark M lookup T` for IPv4 (and IPv6 if `v6`). An identical rule
    /// already there is the leftover of an mgrpd that was killed without cleaning up
    /// (`kill -9`): it is removed, logged, and installed anew, so that a restart after
    /// a crash succeeds.
    pub async fn add_rules(&mut self, v6: bool) -> Result<(), RouteError> {
        for family_v6 in [false, true] {
            if family_v6 && !v6 {
                continue;
            }
            let what = format!(
                "adding rule `not fwmark {:#x} lookup {} priority {}`{}",
                self.fwmark,
                self.table,
                self.priority,
                if family_v6 { " (IPv6)" } else { "" }
            );
            match self.add_rule(family_v6).await {
                Ok(()) => {}
                Err(e) if errno(&e) == Some(libc::EEXIST) => {
                    tracing::warn!(
                        "removing a stale rule `not fwmark {:#x} lookup {} priority {}` left by an earlier mgrpd that did not clean up",
                        self.fwmark,
                        self.table,
                        self.priority
                    );
                    self.handle
                        .rule()
                        .del(self.rule_message(family_v6))
                        .execute()
                        .await
                        .map_err(|source| RouteError {
                            what: format!("{what}: removing the stale one"),
                            source,
                        })?;
                    self.add_rule(family_v6)
                        .await
                        .map_err(|source| RouteError { what, source })?;
                }
                Err(source) => return Err(RouteError { what, source }),
            }
            self.rules.push(family_v6);
        }
        Ok(())
    }

    async fn add_rule(&self, family_v6: bool) -> Result<(), rtnetlink::Error> {
        let mut req = self
            .handle
            .rule()
            .add()
            .fw_mark(self.fwmark)
            .table_id(self.table)
            .priority(self.priority)
            .action(RuleAction::ToTable);
        req.message_mut().header.family = if family_v6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        req.message_mut().header.flags |= RuleFlags::Invert;
        req.execute().await
    }

    /// The route of `net` into the TUN, with `src` as its preferred source: the
    /// address the peer admits riders from (otherwise the kernel would pick the TUN's
    /// own address).
    fn route_message(
        &self,
        net: IpNet,
        src: Option<IpAddr>,
    ) -> rtnetlink::packet_route::route::RouteMessage {
        let mut message = match net {
            IpNet::V4(n) => {
                let mut b = RouteMessageBuilder::<Ipv4Addr>::new()
                    .destination_prefix(n.network(), n.prefix_len())
                    .output_interface(self.ifindex)
                    .table_id(self.table)
                    .scope(RouteScope::Link);
                if let Some(IpAddr::V4(s)) = src {
                    b = b.pref_source(s);
                }
                b.build()
            }
            IpNet::V6(n) => {
                let mut b = RouteMessageBuilder::<Ipv6Addr>::new()
                    .destination_prefix(n.network(), n.prefix_len())
                    .output_interface(self.ifindex)
                    .table_id(self.table);
                if let Some(IpAddr::V6(s)) = src {
                    b = b.pref_source(s);
                }
                b.build()
            }
        };
        if let Some(mtu) = (self.mtu_of.0)(net) {
            message
                .attributes
                .push(RouteAttribute::Metrics(vec![RouteMetric::Mtu(u32::from(
                    mtu,
                ))]));
        }
        message
    }

    /// Routes `net` into the TUN in table T. Adding a route that is there already is
    /// not an error.
    pub async fn add_route(&mut self, net: IpNet) -> Result<(), RouteError> {
        if self.routes.contains_key(&net) {
            return Ok(());
        }
        let src = self.source_or_warn(net);
        match self
            .handle
            .route()
            .add(self.route_message(net, src))
            .execute()
            .await
        {
            Ok(()) => {}
            Err(e) if errno(&e) == Some(libc::EEXIST) => {}
            Err(source) => {
                return Err(RouteError {
                    what: format!(
                        "adding route {net} dev tun table {}{}{}",
                        self.table,
                        (self.mtu_of.0)(net).map_or(String::new(), |m| format!(" mtu {m}")),
                        src.map_or(String::new(), |a| format!(
                            " src {a} (is {a} an address of this host?)"
                        ))
                    ),
                    source,
                });
            }
        }
        self.routes.insert(net, src);
        Ok(())
    }

    /// Removes a route this instance added.
    pub async fn del_route(&mut self, net: IpNet) -> Result<(), RouteError> {
        let Some(src) = self.routes.remove(&net) else {
            return Ok(());
        };
        match self
            .handle
            .route()
            .del(self.route_message(net, src))
            .execute()
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if matches!(errno(&e), Some(libc::ESRCH | libc::ENOENT | libc::ENODEV)) => {
                Ok(())
            }
            Err(source) => Err(RouteError {
                what: format!("removing route {net} table {}", self.table),
                source,
            }),
        }
    }

    /// Whether a route for `net` is installed.
    pub fn has_route(&self, net: &IpNet) -> bool {
        self.routes.contains_key(net)
    }

    /// Removes every route and rule this instance installed. Routes through the TUN
    /// vanish with it anyway; the rule would not, so this must run on exit.
    pub async fn remove_all(&mut self) -> Vec<RouteError> {
        let mut errors = Vec::new();
        let nets: Vec<IpNet> = self.routes.keys().copied().collect();
        for net in nets {
            if let Err(e) = self.del_route(net).await {
                errors.push(e);
            }
        }
        for v6 in std::mem::take(&mut self.rules) {
            if let Err(source) = self
                .handle
                .rule()
                .del(self.rule_message(v6))
                .execute()
                .await
                && errno(&source) != Some(libc::ENOENT)
            {
                errors.push(RouteError {
                    what: format!(
                        "removing rule `not fwmark {:#x} lookup {}`",
                        self.fwmark, self.table
                    ),
                    source,
                });
            }
        }
        errors
    }
}

/// Where the source address of a route into the tunnel comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePlan {
    /// Configured (`source`, `--source`).
    Configured(IpAddr),
    /// The host's address on its way (outside the tunnel) to this address: the peer's
    /// endpoint, where its MGRP packets go.
    Toward {
        /// The MGRP peer.
        peer: IpAddr,
        /// Where its MGRP packets go.
        endpoint: IpAddr,
    },
    /// Not known yet: the peer roams and has not been heard from (the address towards
    /// the peer itself is the best guess until then).
    Roaming(IpAddr),
}

/// The routing queries on a configuration.
impl Config {
    /// Whether the kernel's strict reverse-path filter (`rp_filter=1`) can run on the
    /// TUN, and if not, why. A rider written into the TUN passes it only if the route
    /// back to its source leads into the TUN, which holds for the routed prefixes
    /// while their routes are installed: so only with permanent routes, and only if
    /// every IPv4 peer and every source a peer may speak for lies inside them.
    /// (IPv6 has no such filter; rider admission checks sources in both families.)
    pub fn strict_rp_filter(&self) -> Result<(), &'static str> {
        let peering = self.peering();
        if !self.manage_routes {
            return Err("mgrpd installs no routes (--no-routes)");
        }
        if self.route_on_demand {
            return Err("routes are installed only while trains run");
        }
        let routed = |p: &Prefix| {
            p.addr().is_ipv6()
                || peering
                    .routes
                    .iter()
                    .any(|r| r.prefix_len() <= p.len() && r.contains(&p.addr()))
        };
        let all_routed = peering
            .peers
            .peers()
            .iter()
            .all(|peer| routed(&peer.prefix) && peer.allowed_sources.iter().all(routed));
        if all_routed {
            Ok(())
        } else {
            Err("a peer or a source it may speak for lies outside the routed prefixes")
        }
    }

    /// The MTU for the route of `net` into the TUN, when a UDP peer may carry its
    /// traffic: the longest packet that rides whole in one continuation to that peer
    /// ([`mgrp_core::planner::Path::whole_rider_room`]), so TCP sizes its segments to
    /// it and none is cut in two. `None` (the TUN's MTU) when only raw peers carry
    /// `net`: what does not ride reaches them as it came.
    pub fn route_mtu(&self, net: IpNet) -> Option<u16> {
        let peering = self.peering();
        if !peering.encap.any_udp() {
            return None;
        }
        let overlaps = |p: &Prefix| net.contains(&p.addr()) || p.contains(net.network());
        std::iter::once(peering.peer_of(net.network()))
            .chain(
                peering
                    .encap
                    .per_peer
                    .iter()
                    .filter(|(p, e)| *e == Encap::Udp && overlaps(p))
                    .map(|(p, _)| p.addr()),
            )
            .filter(|peer| peering.encap.for_peer(*peer) == Encap::Udp)
            .map(|peer| {
                peering
                    .encap
                    .path(peer, self.mtu)
                    .whole_rider_room(self.policy.trailer_len)
            })
            .min()
            .and_then(|room| u16::try_from(room).ok())
    }

    /// Where the source address of the route of `net` into the tunnel comes from:
    /// the configured one, else the host's address towards the endpoint of the peer
    /// that carries `net` (its learned endpoint if `learned` knows one, else its
    /// configured one, else its own address over raw IP). The peer admits riders
    /// from the address its MGRP packets come from, which is that one.
    pub fn source_plan(
        &self,
        net: IpNet,
        learned: impl Fn(IpAddr) -> Option<std::net::SocketAddr>,
    ) -> SourcePlan {
        let peering = self.peering();
        let peer = peering.peer_of(net.network());
        if let Some(s) = peering.sources.for_peer(peer) {
            return SourcePlan::Configured(s);
        }
        if peering.encap.for_peer(peer) != Encap::Udp {
            return SourcePlan::Toward {
                peer,
                endpoint: peer,
            };
        }
        match learned(peer).or_else(|| peering.udp.configured_endpoint(peer)) {
            Some(e) => SourcePlan::Toward {
                peer,
                endpoint: e.ip(),
            },
            None => SourcePlan::Roaming(peer),
        }
    }
}
