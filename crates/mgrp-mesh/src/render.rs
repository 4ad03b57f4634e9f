//! A node's part written out as the per-node files would say it: the `[[peers]]`
//! tables, routes and local prefixes of its `mgrpd.toml`, and the name, `[serve]
//! allow`, `[[link]]` tables and route control's members and destinations of its
//! `overlay.toml`. A node reading the description and a
//! node reading these get the same settings (the programs' tests compare them).

use std::fmt::Write as _;

use crate::NodePlan;

impl NodePlan {
    /// What `mesh` and `node` add to this node's `mgrpd.toml`: a route to each peer
    /// and a `[[peers]]` table for it (its address as a host prefix, its name, its
    /// public key; for a routing member its next-hop device, the sources it speaks
    /// for and the networks it may relay to), and the networks behind this node.
    pub fn mgrpd_toml(&self) -> String {
        let mut out = format!(
            "# What a mesh description gives mgrpd on {} (node = {:?}): its peers and routes.\n",
            self.node.name, self.node.name
        );
        let routes: Vec<String> = self
            .mgrpd_peers
            .iter()
            .map(|p| format!("\"{}/{}\"", p.address, host_len(p.address)))
            .collect();
        let _ = writeln!(out, "routes = [{}]", routes.join(", "));
        if !self.local_prefixes.is_empty() {
            let _ = writeln!(out, "local-prefixes = [{}]", list(&self.local_prefixes));
        }
        for p in &self.mgrpd_peers {
            let _ = write!(
                out,
                "\n[[peers]]\nprefix = \"{}/{}\"\nname = \"{}\"\n",
                p.address,
                host_len(p.address),
                p.name
            );
            if let Some(k) = &p.public_key {
                let _ = writeln!(out, "public-key = \"{k}\"");
            }
            if let Some(d) = &p.device {
                let _ = writeln!(out, "device = \"{d}\"");
            }
            if !p.allowed_sources.is_empty() {
                let _ = writeln!(out, "allowed-sources = [{}]", list(&p.allowed_sources));
            }
            if !p.relay_to.is_empty() {
                let _ = writeln!(out, "relay-to = [{}]", list(&p.relay_to));
            }
        }
        out
    }

    /// What `mesh` and `node` add to this node's `overlay.toml`: its name, whom its
    /// sender serves, and a `[[link]]` table for each path into it.
    pub fn overlay_toml(&self) -> String {
        let mut out = format!(
            "# What a mesh description gives mgrp-overlay on {} (node = {:?}): its name, whom it serves, its links.\n",
            self.node.name, self.node.name
        );
        let allow: Vec<String> = self
            .peers
            .iter()
            .map(|p| format!("\"{}\"", p.address))
            .collect();
        let _ = writeln!(out, "name = \"{}\"", self.node.name);
        if let Some(m) = self.max_running {
            let _ = writeln!(out, "max-running = {m}");
        }
        let _ = write!(out, "\n[serve]\nallow = [{}]\n", allow.join(", "));
        if let Some(b) = self.serve_bytes_per_hour {
            let _ = writeln!(out, "max-mb-per-hour = {}", b as f64 / 1e6);
        }
        if let Some((all, one)) = self.serve_measurements {
            let _ = writeln!(
                out,
                "max-measurements = {all}\nmax-measurements-per-requester = {one}"
            );
        }
        for l in &self.links {
            let _ = write!(
                out,
                "\n[[link]]\nname = \"{}\"\nfrom = \"{}\"\nneighbour = \"{}\"\nmethod = \"{}\"\ntransport = \"{}\"\n",
                l.name, l.address, l.from, l.method, l.transport
            );
            if let Some(i) = &l.interval {
                let _ = writeln!(out, "interval = \"{i}\"");
            }
            if let Some(t) = &l.time_limit {
                let _ = writeln!(out, "time-limit = \"{t}\"");
            }
        }
        if let Some(r) = &self.routing {
            let _ = write!(out, "\n[routing]\naddress = \"{}\"\n", self.node.address);
            for m in &r.members {
                let _ = write!(
                    out,
                    "\n[[routing.member]]\nname = \"{}\"\naddress = \"{}\"\ndevice = \"{}\"\n",
                    m.name, m.address, m.device
                );
                if let Some(api) = &m.api {
                    let _ = writeln!(out, "api = \"{}\"\ntls = {}", api.addr, api.tls);
                    if let Some(n) = &api.tls_name {
                        let _ = writeln!(out, "tls-name = \"{n}\"");
                    }
                }
            }
            for m in &r.members {
                for n in &m.networks {
                    let _ = write!(
                        out,
                        "\n[[routing.destination]]\nprefix = \"{n}\"\nmember = \"{}\"\n",
                        m.name
                    );
                }
            }
        }
        out
    }
}

/// `"a", "b"`.
fn list(v: &[mgrp_core::peers::Prefix]) -> String {
    v.iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn host_len(a: std::net::IpAddr) -> u8 {
    if a.is_ipv4() { 32 } else { 128 }
}
