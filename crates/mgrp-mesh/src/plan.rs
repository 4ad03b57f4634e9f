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
    pub api: Option<crate::Api>,
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
                    group: g.name.clone(),
                });
            }
        }
        Ok(NodePlan {
            node: PeerPlan::from(me),
            peers: peers.into_values().collect(),
            links: links.into_values().collect(),
        })
    }
}
