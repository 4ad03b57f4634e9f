//! `mesh` and `node`: this host's part of a mesh description (`mgrp-mesh`) as
//! settings. Each member this host exchanges probes with becomes a `[[peers]]` table
//! (its address as a host prefix, its name, its public key) and a route to its
//! address. What the file's own tables and routes say stays: a `[[peers]]` table for
//! a member's address is the operator's, and the mesh adds only what is not there.

use ipnet::IpNet;
use mgrp_core::peers::Prefix;
use mgrp_mesh::Mesh;

use super::error::{ConfigError, bad};
use super::settings::{PeerSettings, Settings};

/// Adds the peers and routes of this host's part of the mesh, if one is named.
pub(super) fn apply(s: &mut Settings) -> Result<(), ConfigError> {
    let (path, node) = match (&s.mesh, &s.node) {
        (None, None) => return Ok(()),
        (Some(path), Some(node)) => (path.clone(), node.clone()),
        (Some(_), None) => {
            return Err(bad("mesh needs node: this host's name in the description"));
        }
        (None, Some(_)) => return Err(bad("node names this host in a mesh: give mesh too")),
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| bad(format!("cannot read mesh {}: {e}", path.display())))?;
    let mesh = Mesh::parse(&text).map_err(|e| bad(format!("mesh {}: {e}", path.display())))?;
    let plan = mesh
        .plan(&node)
        .map_err(|e| bad(format!("mesh {}: {e}", path.display())))?;
    for p in &plan.peers {
        let prefix = Prefix::host(p.address);
        if !s.peers.iter().any(|t| t.prefix == prefix) {
            s.peers.push(PeerSettings {
                prefix,
                name: Some(p.name.clone()),
                allowed_sources: Vec::new(),
                key_file: None,
                next_key_file: None,
                public_key: p.public_key,
                next_public_key: None,
                encap: None,
                endpoint: None,
                keepalive: None,
                wire: None,
                source: None,
                relay_to: Vec::new(),
                device: None,
            });
        }
        let route = IpNet::from(p.address);
        if !s.routes.contains(&route) {
            s.routes.push(route);
        }
    }
    Ok(())
}
