//! A node's part of the mesh: whom its mgrpd exchanges probes with, and which paths
//! into it its overlay measures. Every pair of a group measures both ways, so the
//! members a node measures from are those that measure from it: its peers are also
//! whom its sender serves. A routing member's part adds route control: the other
//! routing members, each a next-hop device and a relay, and their networks as
//! destinations.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use mgrp_core::pair::PublicKey;
use mgrp_core::peers::Prefix;

use crate::{Member, Mesh, Transport};

/// Another member as a node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPlan {
    /// Its name.
    pub name: String,
    /// The address it is reached at.
    pub address: IpAddr,
    /// Its public key.
    pub public_key: Option<PublicKey>,
    /// Its overlay's API.
    pub api: Option<crate::Api>,
    /// The next-hop device this node's mgrpd makes towards it (routing members).
    pub device: Option<String>,
    /// The sources its riders may claim: the networks it speaks for or relays from.
    pub allowed_sources: Vec<Prefix>,
    /// The networks it may send riders to through this node.
    pub relay_to: Vec<Prefix>,
}

impl From<&Member> for PeerPlan {
    fn from(m: &Member) -> Self {
        Self {
            name: m.name.clone(),
            address: m.address,
            public_key: m.public_key,
            api: m.api.clone(),
            device: None,
            allowed_sources: Vec::new(),
            relay_to: Vec::new(),
        }
    }
}

/// How route control reaches a routing member's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteApi {
    /// The address and port: the API's, or the member's address with the API's
    /// port when the API names a host.
    pub addr: SocketAddr,
    /// Over TLS.
    pub tls: bool,
    /// The name its certificate carries, when the API names a host over TLS.
    pub tls_name: Option<String>,
}

impl RouteApi {
    /// How `m`'s API is reached, if it gives one.
    pub fn of(m: &Member) -> Option<Self> {
        let api = m.api.as_ref()?;
        if let Ok(addr) = api.target().parse::<SocketAddr>() {
            return Some(Self {
                addr,
                tls: api.tls,
                tls_name: None,
            });
        }
        // A name: reached at the member's address, the name checked in its
        // certificate (in clear there is no certificate to check it in).
        let (host, port) = api.target().rsplit_once(':')?;
        Some(Self {
            addr: SocketAddr::new(m.address, port.parse().ok()?),
            tls: api.tls,
            tls_name: api.tls.then(|| host.to_owned()),
        })
    }
}

/// Another routing member, as this node's route control sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingMemberPlan {
    /// Its name.
    pub name: String,
    /// Its address: where heartbeats go.
    pub address: IpAddr,
    /// This node's next-hop device towards it.
    pub device: String,
    /// Its overlay's API, if the description gives one (else route control's default,
    /// its address and port 7700, in clear).
    pub api: Option<RouteApi>,
    /// The networks behind it: destinations it owns.
    pub networks: Vec<Prefix>,
}

/// A routing member's route control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingPlan {
    /// The other routing members, by name.
    pub members: Vec<RoutingMemberPlan>,
}

/// A path into the node that its overlay measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPlan {
    /// The link's name: the neighbour's name and the method, and `-udp` over plain
    /// UDP (`nyc1-pathchirp`, `nyc1-pathchirp-udp`).
    pub name: String,
    /// The neighbour the path comes from.
    pub from: String,
    /// Its address.
    pub address: IpAddr,
    /// The method (an overlay method's name).
    pub method: String,
    /// How the probes travel.
    pub transport: Transport,
    /// How often it runs, if not the method's default.
    pub interval: Option<String>,
    /// Its runs' time limit, when the budget plans it.
    pub time_limit: Option<String>,
    /// The first group that names it.
    pub group: String,
}

/// A node's part of the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// The node.
    pub node: PeerPlan,
    /// The members it exchanges probes with, both ways, by name: its mgrpd's peers,
    /// and whom its sender serves.
    pub peers: Vec<PeerPlan>,
    /// The paths into it that it measures, by name.
    pub links: Vec<LinkPlan>,
    /// Its mgrpd's peers, by name: the members it measures with and, when it is a
    /// routing member, the other routing members, each with its next-hop device and
    /// what it may relay.
    pub mgrpd_peers: Vec<PeerPlan>,
    /// The networks behind it, which riders may be addressed to (its mgrpd's
    /// `local-prefixes`).
    pub local_prefixes: Vec<Prefix>,
    /// Its route control, when it is a routing member.
    pub routing: Option<RoutingPlan>,
    /// Exclusive runs into it at once, when the budget plans them.
    pub max_running: Option<usize>,
    /// The probe bytes an hour its sender gives each requester, when the budget
    /// plans it (in whole kilobytes).
    pub serve_bytes_per_hour: Option<u64>,
    /// The measurements its sender serves at once, in all and for one requester,
    /// when the budget plans them.
    pub serve_measurements: Option<(usize, usize)>,
}

impl NodePlan {
    /// This part with the budget's plan in it: each link's interval and time
    /// limit (to the millisecond), `max-running`, what the sender gives each
    /// requester (1 MB an hour at least, so a member no one measures from still
    /// answers) and how many measurements it serves at once.
    pub fn with_budget(mut self, plan: &crate::budget::BudgetPlan) -> Self {
        let ms = |d: std::time::Duration| format!("{}ms", d.as_millis());
        let node = self.node.name.clone();
        for l in &mut self.links {
            if let Some(t) =
                plan.links
                    .get(&(node.clone(), l.from.clone(), l.method.clone(), l.transport))
            {
                l.interval = Some(ms(t.interval));
                l.time_limit = Some(ms(t.time_limit));
            }
        }
        if let Some(n) = plan.nodes.get(&node) {
            self.max_running = Some(n.max_running);
            self.serve_bytes_per_hour =
                Some(n.serve_bytes_per_hour.div_ceil(1000).max(1000) * 1000);
            self.serve_measurements =
                Some((n.serve_measurements, n.serve_measurements_per_requester));
        }
        self
    }
}

/// A node the description has no member for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no member is named {node:?} (its members: {members})")]
pub struct NoSuchMember {
    node: String,
    members: String,
}

impl Mesh {
    /// The part of the member named `node`.
    pub fn plan(&self, node: &str) -> Result<NodePlan, NoSuchMember> {
        let me = self.members.get(node).ok_or_else(|| NoSuchMember {
            node: node.to_owned(),
            members: self
                .members
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        let mut peers = BTreeMap::new();
        let mut links = BTreeMap::new();
        for g in &self.groups {
            for l in g.links().filter(|l| l.to == node) {
                let from = &self.members[l.from];
                peers.entry(l.from).or_insert_with(|| PeerPlan::from(from));
                let name = match l.transport {
                    Transport::Mgrp => format!("{}-{}", l.from, l.method),
                    Transport::Udp => format!("{}-{}-udp", l.from, l.method),
                };
                links.entry(name.clone()).or_insert_with(|| LinkPlan {
                    name,
                    from: l.from.to_owned(),
                    address: from.address,
                    method: l.method.to_owned(),
                    transport: l.transport,
                    interval: g.interval.clone(),
                    time_limit: None,
                    group: g.name.clone(),
                });
            }
        }
        let mut mgrpd_peers: BTreeMap<&str, PeerPlan> = peers
            .iter()
            .map(|(name, p): (&&str, &PeerPlan)| (*name, p.clone()))
            .collect();
        let routing = self.routing.iter().any(|r| r == node).then(|| {
            let others: Vec<&Member> = self
                .routing
                .iter()
                .filter(|r| *r != node)
                .map(|r| &self.members[r])
                .collect();
            for m in &others {
                let p = mgrpd_peers
                    .entry(m.name.as_str())
                    .or_insert_with(|| PeerPlan::from(*m));
                p.device = Some(m.device());
                // What it speaks for or relays from: every other routing member's
                // networks; where it may relay to: those of the others but itself.
                p.allowed_sources = others.iter().flat_map(|o| o.networks.clone()).collect();
                p.relay_to = others
                    .iter()
                    .filter(|o| o.name != m.name)
                    .flat_map(|o| o.networks.clone())
                    .collect();
            }
            RoutingPlan {
                members: others
                    .iter()
                    .map(|m| RoutingMemberPlan {
                        name: m.name.clone(),
                        address: m.address,
                        device: m.device(),
                        api: RouteApi::of(m),
                        networks: m.networks.clone(),
                    })
                    .collect(),
            }
        });
        Ok(NodePlan {
            node: PeerPlan::from(me),
            peers: peers.into_values().collect(),
            links: links.into_values().collect(),
            mgrpd_peers: mgrpd_peers.into_values().collect(),
            local_prefixes: if routing.is_some() {
                me.networks.clone()
            } else {
                Vec::new()
            },
            routing,
            max_running: None,
            serve_bytes_per_hour: None,
            serve_measurements: None,
        })
    }
}
