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

/// What the budget planner takes from this overlay: each method's cost, the
/// scheduler's jitter, the kernel's polls (a question of a few hundred bytes, taken
/// as 300, every 2 s per measured neighbour, at both ends), route control's
/// heartbeats (a ping and its echo as UDP datagrams) and the sender's limits.
pub fn budget_costs() -> mgrp_mesh::budget::Costs {
    use mgrp_core::heartbeat::{PING_LEN, PONG_LEN};
    const IPV4_UDP: usize = 28;
    mgrp_mesh::budget::Costs {
        methods: Method::costs(),
        jitter: super::link::DEFAULT_JITTER,
        poll_bytes_per_hour: 300 * 1800,
        heartbeat_bytes: (PING_LEN + PONG_LEN + 2 * IPV4_UDP) as u64,
        sender_exclusive: mgrp_tool::server::MAX_EXCLUSIVE,
        sender_measurements: mgrp_tool::server::MAX_MEASUREMENTS,
        sender_measurements_per_host: mgrp_tool::server::MAX_MEASUREMENTS_PER_HOST,
        sender_limit_max: mgrp_tool::server::MAX_SENDER_LIMIT,
        max_running: super::MAX_RUNNING,
    }
}

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
    let budget = mesh.plan_budget(&budget_costs());
    let plan = match &budget {
        Some(b) => plan.with_budget(b),
        None => plan,
    };
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
            l.time_limit.clone(),
        ));
    }
    // The budget's plan (docs/mesh.md): what the file does not give itself.
    if let Some(m) = plan.max_running {
        f.max_running.get_or_insert(m);
    }
    if let Some(b) = plan.serve_bytes_per_hour {
        f.serve.max_mb_per_hour.get_or_insert(b as f64 / 1e6);
    }
    if let Some((all, one)) = plan.serve_measurements {
        f.serve.max_measurements.get_or_insert(all);
        f.serve.max_measurements_per_requester.get_or_insert(one);
    }
    if let Some(b) = &budget {
        f.budget_shortfalls = b.shortfalls.iter().map(ToString::to_string).collect();
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
