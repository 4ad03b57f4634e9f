//! A node's part written out as the per-node files would say it: the `[[peers]]`
//! tables and routes of its `mgrpd.toml`, and the name, `[serve] allow` and
//! `[[link]]` tables of its `overlay.toml`. A node reading the description and a
//! node reading these get the same settings (the programs' tests compare them).

use std::fmt::Write as _;

use crate::NodePlan;

impl NodePlan {
    /// What `mesh` and `node` add to this node's `mgrpd.toml`: a route to each peer
    /// and a `[[peers]]` table for it (its address as a host prefix, its name, its
    /// public key).
    pub fn mgrpd_toml(&self) -> String {
        let mut out = format!(
            "# What a mesh description gives mgrpd on {} (node = {:?}): its peers and routes.\n",
            self.node.name, self.node.name
        );
        let routes: Vec<String> = self
            .peers
            .iter()
            .map(|p| format!("\"{}/{}\"", p.address, host_len(p.address)))
            .collect();
        let _ = writeln!(out, "routes = [{}]", routes.join(", "));
        for p in &self.peers {
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
        let _ = write!(out, "\n[serve]\nallow = [{}]\n", allow.join(", "));
        for l in &self.links {
            let _ = write!(
                out,
                "\n[[link]]\nname = \"{}\"\nfrom = \"{}\"\nneighbour = \"{}\"\nmethod = \"{}\"\ntransport = \"{}\"\n",
                l.name, l.address, l.from, l.method, l.transport
            );
            if let Some(i) = &l.interval {
                let _ = writeln!(out, "interval = \"{i}\"");
            }
        }
        out
    }
}

fn host_len(a: std::net::IpAddr) -> u8 {
    if a.is_ipv4() { 32 } else { 128 }
}
