//! `mesh` and `node`: this node's part of a mesh description (`mgrp-mesh`) as the
//! file's settings. Each link into it the description gives becomes a `[[link]]`
//! (named `<member>-<method>`, `-udp` over plain UDP, with the member as its
//! neighbour), the members it measures with become `[serve] allow` unless the file
//! gives one, and the node's name is its member name unless the file gives one. A
//! `[[link]]` of the file's own with the same name stays as written.

use std::path::Path;

use mgrp_mesh::{Mesh, Transport as MeshTransport};

use super::check::{ConfigError, invalid};
use super::link::LinkFile;
use super::{File, fetch};
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
    let in_dir = |p: &Path| match dir {
        Some(d) if p.is_relative() => d.join(p),
        _ => p.to_path_buf(),
    };
    let text = if fetch::is_url(&path) {
        let token = match &f.mesh_token_file {
            Some(p) => Some(mgrp_service::settings::read_token_file(p, dir)?.1),
            None => None,
        };
        let ca = f.mesh_ca_file.as_deref().map(in_dir);
        fetch::fetch(&path, ca.as_deref(), token.as_deref())
            .map_err(|e| invalid(format!("mesh: {e}")))?
    } else {
        if f.mesh_ca_file.is_some() || f.mesh_token_file.is_some() {
            return Err(invalid(
                "mesh-ca-file and mesh-token-file are for a mesh fetched over https://".into(),
            ));
        }
        let p = in_dir(Path::new(&path));
        std::fs::read_to_string(&p)
            .map_err(|e| invalid(format!("mesh: cannot read {}: {e}", p.display())))?
    };
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
    if f.name.is_none() {
        f.name = Some(node);
    }
    Ok(())
}
