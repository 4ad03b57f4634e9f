//! `mesh` and `node`: this host's part of a mesh description (`mgrp-mesh`), read
//! from a file or fetched over HTTPS (`mgrp_service::fetch`), as settings. Each
//! member this host exchanges probes with becomes a `[[peers]]` table (its address as
//! a host prefix, its name, its public key) and a route to its address; on a routing
//! member each other routing member also gets its next-hop device, the sources it
//! speaks for and the networks it may relay to, and the networks behind this host
//! become local prefixes. What the file's own tables and routes say stays: a
//! `[[peers]]` table for a member's address is the operator's, and the mesh adds only
//! what is not there.

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;
use mgrp_core::peers::Prefix;
use mgrp_mesh::Mesh;

use super::error::{ConfigError, bad};
use super::settings::{DEFAULT_UDP_PORT, EncapArg, PeerSettings, Settings};

/// Adds the peers and routes of this host's part of the mesh, if one is named.
pub(super) fn apply(s: &mut Settings) -> Result<(), ConfigError> {
    let (path, node) = match (&s.mesh, &s.node) {
        (None, None) if s.mesh_refresh.is_some() => {
            return Err(bad("mesh-refresh: give mesh too"));
        }
        (None, None) if s.mesh_ca_file.is_some() || s.mesh_token_file.is_some() => {
            return Err(bad(
                "mesh-ca-file and mesh-token-file are for a mesh fetched over https://: give mesh too",
            ));
        }
        (None, None) => return Ok(()),
        (Some(path), Some(node)) => (path.clone(), node.clone()),
        (Some(_), None) => {
            return Err(bad("mesh needs node: this host's name in the description"));
        }
        (None, Some(_)) => return Err(bad("node names this host in a mesh: give mesh too")),
    };
    if s.mesh_refresh.is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(bad("mesh-refresh: use at least 1s"));
    }
    let text = mgrp_service::fetch::Source {
        mesh: &path,
        ca_file: s.mesh_ca_file.as_deref(),
        token_file: s.mesh_token_file.as_deref(),
        dir: None,
    }
    .read()
    .map_err(|e| bad(format!("mesh: {e}")))?;
    let mesh = Mesh::parse(&text).map_err(|e| bad(format!("mesh {path}: {e}")))?;
    let plan = mesh
        .plan(&node)
        .map_err(|e| bad(format!("mesh {path}: {e}")))?;
    // Members reach each other at their addresses: over UDP a peer's endpoint is its
    // address at the port this host uses (a peer with a key of its own would
    // otherwise roam, sent nothing until heard from, and two such peers would wait for
    // each other); a member heard from elsewhere (behind a NAT) is followed there.
    let udp_port = match s.encap {
        EncapArg::Udp(port) => Some(port.unwrap_or(DEFAULT_UDP_PORT)),
        EncapArg::Raw => None,
    };
    for p in &plan.mgrpd_peers {
        let prefix = Prefix::host(p.address);
        if !s.peers.iter().any(|t| t.prefix == prefix) {
            s.peers.push(PeerSettings {
                prefix,
                name: Some(p.name.clone()),
                allowed_sources: p.allowed_sources.clone(),
                key_file: None,
                next_key_file: None,
                public_key: p.public_key,
                next_public_key: None,
                encap: None,
                endpoint: udp_port.map(|port| SocketAddr::new(p.address, port)),
                keepalive: None,
                wire: None,
                source: None,
                relay_to: p.relay_to.clone(),
                device: p.device.clone(),
            });
        }
        let route = IpNet::from(p.address);
        if !s.routes.contains(&route) {
            s.routes.push(route);
        }
    }
    for n in &plan.local_prefixes {
        if !s.local_prefixes.contains(n) {
            s.local_prefixes.push(*n);
        }
    }
    Ok(())
}
