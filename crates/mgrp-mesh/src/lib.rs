//! One description of a mesh, and each node's part of it.
//!
//! A mesh is described once, in TOML: its members (a name, the address the others
//! reach it at, its overlay API, its public key) and its groups, each saying which
//! members measure each other (a full mesh, a star around a hub, pairs across sets,
//! or each member with the next k), with which methods, over which transports, how
//! often. Every node reads the same file and takes its own part ([`Mesh::plan`]): the
//! peers its mgrpd exchanges probes with (named by their public keys, so no secret is
//! in the file), the links its overlay measures (the paths into it), and who may ask
//! its sender for probes.
//!
//! Sans-IO: the description is text in, a checked [`Mesh`] or the first
//! inconsistency with its line and key out. Reading the file, fetching it, and
//! turning a plan into mgrpd's and the overlay's settings are the programs' part.
//!
//! ```toml
//! [[member]]
//! name = "nyc1"
//! address = "10.0.0.1"
//! public-key = "…64 hex digits…"
//!
//! [[group]]
//! name = "core"
//! kind = "full-mesh"
//! members = ["nyc1", "lon1", "fra1"]
//! methods = ["pathload-fast", "pathchirp"]
//! transports = ["mgrp"]
//! interval = "10m"
//! ```

#![warn(missing_docs)]

pub mod budget;
mod describe;
pub mod infer;
mod plan;
mod render;
mod targets;
#[cfg(test)]
mod tests;

pub use describe::{GroupKind, MeshError, Transport};
pub use plan::{
    LinkPlan, NoSuchMember, NodePlan, PeerPlan, RouteApi, RoutingMemberPlan, RoutingPlan,
};
pub use targets::{MEMBER_LABEL, TargetGroup};

use std::collections::BTreeMap;
use std::net::IpAddr;

use mgrp_core::pair::PublicKey;
use mgrp_core::peers::Prefix;

/// A member of the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its name: what every label and link name calls it.
    pub name: String,
    /// The address the other members reach it at (its mgrpd peer address, the
    /// address its probes come from).
    pub address: IpAddr,
    /// Its overlay's API, for route control and Prometheus.
    pub api: Option<Api>,
    /// Where Prometheus reaches its mgrpd's metrics (`HOST:PORT`).
    pub metrics: Option<String>,
    /// Its public key, which the key of each of its pairs is derived from.
    pub public_key: Option<PublicKey>,
    /// The IPv4 networks behind it that route control steers towards it (routing
    /// members only).
    pub networks: Vec<Prefix>,
    /// The next-hop device the other routing members make towards it, if not
    /// `mgrp-NAME`.
    pub device: Option<String>,
    /// Where it is (a region, a provider): members of one region share their paths'
    /// core, which inferring the pairs not measured uses.
    pub region: Option<String>,
}

impl Member {
    /// The next-hop device every other routing member makes towards it: its
    /// `device`, or `mgrp-` and its name.
    pub fn device(&self) -> String {
        self.device
            .clone()
            .unwrap_or_else(|| format!("mgrp-{}", self.name))
    }
}

/// Where a member's overlay serves its API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    /// Over TLS (`https://`).
    pub tls: bool,
    /// `HOST:PORT`, as Prometheus' targets and route control's members give it.
    pub target: String,
}

impl Api {
    /// `HOST:PORT`.
    pub fn target(&self) -> &str {
        &self.target
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.target)
    }
}

/// A group: who measures whom, how and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its name, in messages.
    pub name: String,
    /// Which pairs of its members measure each other.
    pub kind: GroupKind,
    /// The methods each pair runs, both ways (the overlay's method names).
    pub methods: Vec<String>,
    /// The transports each method runs over.
    pub transports: Vec<Transport>,
    /// How often each link runs (a duration as the overlay reads it), if not its
    /// method's default.
    pub interval: Option<String>,
}

impl Group {
    /// Every link the group gives: each pair both ways (`to` measures the path from
    /// `from`), by each method over each transport.
    pub fn links(&self) -> impl Iterator<Item = GroupLink<'_>> {
        self.kind
            .pairs()
            .into_iter()
            .flat_map(|(a, b)| [(a, b), (b, a)])
            .flat_map(move |(to, from)| {
                self.methods.iter().flat_map(move |method| {
                    self.transports.iter().map(move |&transport| GroupLink {
                        to,
                        from,
                        method,
                        transport,
                    })
                })
            })
    }
}

/// One link a group gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupLink<'a> {
    /// The member that measures the path into it.
    pub to: &'a str,
    /// The member the path comes from.
    pub from: &'a str,
    /// The method.
    pub method: &'a str,
    /// The transport.
    pub transport: Transport,
}

/// A checked mesh description.
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    /// The members, by name.
    pub members: BTreeMap<String, Member>,
    /// The groups, in the file's order.
    pub groups: Vec<Group>,
    /// The routing members (`[routing] members`): each routes to the others'
    /// networks, directly or through one of them.
    pub routing: Vec<String>,
    /// The probe budget, when the description plans one (`[budget]`).
    pub budget: Option<budget::Budget>,
}

impl Mesh {
    /// The mesh the TOML `text` describes, checked; or the first inconsistency, with
    /// its line and key.
    pub fn parse(text: &str) -> Result<Self, MeshError> {
        describe::parse(text)
    }
}
