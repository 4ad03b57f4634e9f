//! `mesh` and `node`: this node's part of a mesh description (`mgrp-mesh`) as the
//! file's settings. Each link into it the description gives becomes a `[[link]]`
//! (named `<member>-<method>`, `-udp` over plain UDP, with the member as its
//! neighbour), the members it measures with become `[serve] allow` unless the file
//! gives one, and the node's name is its member name unless the file gives one. A
//! `[[link]]` of the file's own with the same name stays as written. A routing
//! member's route control gets the other routing members and their networks
//! (`[routing]`'s own settings, members and destinations stay as written).

use std::path::Path;

use mgrp_mesh::{Mesh, Transport as MeshTransport};
use mgrp_route::settings::MeshMember;

use super::File;
use super::check::{ConfigError, invalid};
use super::link::LinkFile;
use crate::measure::registry::Method;
use pathload_rs::control::Transport;

/// Adds this node's part of the mesh to `f`, if one is named; `dir` is where a
/// relative `mesh` path is read from.
pub(super) fn apply(f: &mut File, dir: Option<&Path>) -> Result<(), ConfigError> {
    let (path, node) = match (&f.mesh, &f.node) {
        (None, None) => return Ok(()),
        (Some(path), Some(node)) => (path.clone(), node.clone()),
        (Some(_), None) => {
            return Err(invalid(
                "mesh needs node: this node's name in the description".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "node names this node in a mesh: give mesh too".into(),
            ));
        }
    };
    let text = mgrp_service::fetch::Source {
        mesh: &path,
        ca_file: f.mesh_ca_file.as_deref(),
        token_file: f.mesh_token_file.as_deref(),
        dir,
    }
    .read()
    .map_err(|e| invalid(format!("mesh: {e}")))?;
    let path = std::path::PathBuf::from(path);
    let mesh = Mesh::parse(&text).map_err(|e| invalid(format!("mesh {}: {e}", path.display())))?;
    let plan = mesh
        .plan(&node)
        .map_err(|e| invalid(format!("mesh {}: {e}", path.display())))?;
    for l in &plan.links {
        if f.links
            .iter()
            .any(|own| own.name() == Some(l.name.as_str()))
        {
            continue;
        }
        let method = Method::named(&l.method).ok_or_else(|| {
            invalid(format!(
                "mesh {}: group {:?} names method {:?}, which this overlay does not have (it has {})",
                path.display(),
                l.group,
                l.method,
                Method::names().join(", ")
            ))
        })?;
        let transport = match l.transport {
            MeshTransport::Mgrp => Transport::Mgrp,
            MeshTransport::Udp => Transport::Udp,
        };
        f.links.push(LinkFile::from_mesh(
            l.name.clone(),
            l.address,
            l.from.clone(),
            transport,
            method,
            l.interval.clone(),
        ));
    }
    if f.serve.allow.is_none() {
        f.serve.allow = Some(plan.peers.iter().map(|p| p.address.to_string()).collect());
    }
    if let Some(r) = &plan.routing {
        let members = r.members.iter().map(|m| MeshMember {
            name: m.name.clone(),
            address: m.address,
            device: m.device.clone(),
            api: m.api.as_ref().map(|a| (a.addr, a.tls, a.tls_name.clone())),
        });
        let destinations = r
            .members
            .iter()
            .flat_map(|m| m.networks.iter().map(|n| (*n, m.name.clone())));
        f.routing
            .get_or_insert_with(Default::default)
            .add_from_mesh(plan.node.address, members, destinations);
    }
    if f.name.is_none() {
        f.name = Some(node);
    }
    Ok(())
}
