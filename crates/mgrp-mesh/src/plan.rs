//! A node's part of the mesh: whom its mgrpd exchanges probes with, and which paths
//! into it its overlay measures. Every pair of a group measures both ways, so the
//! members a node measures from are those that measure from it: its peers are also
//! whom its sender serves.

use std::collections::BTreeMap;
use std::net::IpAddr;

use mgrp_core::pair::PublicKey;

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
    pub api: Option<String>,
}

impl From<&Member> for PeerPlan {
    fn from(m: &Member) -> Self {
        Self {
            name: m.name.clone(),
            address: m.address,
            public_key: m.public_key,
            api: m.api.clone(),
        }
    }
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
}

impl Mesh {
    /// The part of the member named `node`; `None` if the mesh has no such member.
    pub fn plan(&self, node: &str) -> Option<NodePlan> {
        let me = self.members.get(node)?;
        let mut peers = BTreeMap::new();
        let mut links: BTreeMap<String, LinkPlan> = BTreeMap::new();
        for g in &self.groups {
            for (a, b) in g.kind.pairs() {
                let other = match (a == node, b == node) {
                    (true, _) => b,
                    (_, true) => a,
                    _ => continue,
                };
                let o = &self.members[other];
                peers.insert(other, PeerPlan::from(o));
                for m in &g.methods {
                    for t in &g.transports {
                        let name = match t {
                            Transport::Mgrp => format!("{other}-{m}"),
                            Transport::Udp => format!("{other}-{m}-udp"),
                        };
                        links.entry(name.clone()).or_insert_with(|| LinkPlan {
                            name,
                            from: other.to_owned(),
                            address: o.address,
                            method: m.clone(),
                            transport: *t,
                            interval: g.interval.clone(),
                            group: g.name.clone(),
                        });
                    }
                }
            }
        }
        Some(NodePlan {
            node: PeerPlan::from(me),
            peers: peers.into_values().collect(),
            links: links.into_values().collect(),
        })
    }
}
