//! Route control's policy routing and flow pinning, installed and
//! removed as a whole.
//!
//! Each candidate path k (numbered over all destinations from 1) has a firewall mark
//! `k << 16` (under the mask `0x00ff0000`, so marks of other users below and above it
//! are another matter) and a routing table `table-base + k` holding one route: the
//! destination prefix into the mgrpd next-hop device of the path's first member. A
//! rule `fwmark k<<16/0x00ff0000 lookup table-base+k` per path sits before mgrpd's
//! own rule. These are installed once, at start, and stay as they are.
//!
//! What changes is an nftables table of this node's (`ip mgrp_overlay`), replaced
//! whole in one `nft -f` transaction, so a packet sees the old choice or the new,
//! never a mix:
//!
//! - a packet to a destination that belongs to a connection with a path's mark in its
//!   conntrack mark takes that path again (the flow stays where it started; the
//!   nftables wiki's `meta mark set ct mark` idiom), unless that path is dead or
//!   existing flows are to move;
//! - any other packet to a destination takes the destination's current path's mark
//!   (the mark 0x00ff0000 when it takes the kernel's normal route: no rule matches
//!   it), and its connection keeps the mark (`ct mark set meta mark`);
//! - what arrives from mgrpd's TUN to a destination was relayed to this node by a
//!   member: it goes straight on to the destination's owner (the direct path's mark),
//!   never through a further relay.
//!
//! Flows are counted per path from conntrack's marks. On exit the nftables table,
//! the rules and the routes go, and traffic takes the kernel's normal route again
//! (fail open).

use std::fmt::Write as _;
use std::process::Command;

use mgrp_core::peers::Prefix;

use crate::netlink::{self, Route, Rule};
use crate::settings::Routing;

/// The mask of the marks route control sets.
pub const MARK_MASK: u32 = 0x00ff_0000;
/// The mark of flows that take the kernel's normal route.
pub const NORMAL_MARK: u32 = 0x00ff_0000;
/// The nftables table (family ip).
pub const NFT_TABLE: &str = "mgrp_overlay";
/// Heartbeats to member i carry the mark `HEARTBEAT_MARK | i` (matched whole), which
/// a rule of its own sends into the next-hop device towards that member: so they
/// cross both daemons as relayed traffic does, while their answers come back any way.
pub const HEARTBEAT_MARK: u32 = 0x6d00_0000;
/// Tables of heartbeat routes start this far above `table-base`.
const HEARTBEAT_TABLES: u32 = 256;

/// The mark of heartbeats to member `i`.
pub fn heartbeat_mark(i: usize) -> u32 {
    HEARTBEAT_MARK | (i as u32 & 0xffff)
}

/// Path `id`'s mark.
pub fn mark(id: u32) -> u32 {
    id << 16
}

/// One installed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRoute {
    /// Its number (mark and table offset).
    pub id: u32,
    /// The destination.
    pub prefix: Prefix,
    /// The next-hop device.
    pub device: String,
    /// Whether it is the destination's direct path.
    pub direct: bool,
}

/// What the steering table says now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Steering {
    /// Each destination with its current path's id (`None`: the normal route).
    pub choices: Vec<(Prefix, Option<u32>)>,
    /// Paths that do not answer: their flows are steered anew.
    pub dead: Vec<u32>,
    /// Whether existing flows move with a change.
    pub move_existing: bool,
}

/// The kernel state route control owns.
#[derive(Debug)]
pub struct Policy {
    paths: Vec<PathRoute>,
    /// Each member with a device: its index, address and device.
    heartbeats: Vec<(usize, std::net::IpAddr, String)>,
    table_base: u32,
    priority: u32,
    source: Option<std::net::Ipv4Addr>,
    tun: String,
    installed_rules: Vec<Rule>,
    installed_tables: Vec<u32>,
    nft_installed: bool,
}

/// A command or netlink request that failed, in words.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {why}")]
pub struct PolicyError {
    command: String,
    why: String,
}

impl PolicyError {
    fn netlink(what: impl std::fmt::Display, why: String) -> Self {
        Self {
            command: format!("netlink: {what}"),
            why,
        }
    }
}

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, PolicyError> {
    use std::io::Write as _;
    let command = format!("{program} {}", args.join(" "));
    let mut c = Command::new(program);
    c.args(args)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().map_err(|e| PolicyError {
        command: command.clone(),
        why: format!("cannot run it ({e}); is the {program} package installed?"),
    })?;
    if let Some(text) = stdin
        && let Some(mut i) = child.stdin.take()
    {
        i.write_all(text.as_bytes()).map_err(|e| PolicyError {
            command: command.clone(),
            why: e.to_string(),
        })?;
    }
    let out = child.wait_with_output().map_err(|e| PolicyError {
        command: command.clone(),
        why: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(PolicyError {
            command,
            why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Policy {
    /// The paths of `routing`, not yet installed; `tun` is mgrpd's TUN (what arrives
    /// from it was relayed here).
    pub fn plan(routing: &Routing, tun: &str) -> Self {
        let ids = routing.path_ids();
        let mut paths = Vec::new();
        for (d, ids) in routing.destinations.iter().zip(ids) {
            for (p, id) in d.paths.iter().zip(ids) {
                paths.push(PathRoute {
                    id,
                    prefix: d.prefix,
                    device: routing.first_hop(d, *p).device.clone().unwrap_or_default(),
                    direct: p.via.is_none(),
                });
            }
        }
        let heartbeats = routing
            .members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.device.clone().map(|d| (i, m.address, d)))
            .collect();
        Self {
            paths,
            heartbeats,
            table_base: routing.table_base,
            priority: routing.rule_priority,
            source: routing.source,
            tun: tun.to_string(),
            installed_rules: Vec::new(),
            installed_tables: Vec::new(),
            nft_installed: false,
        }
    }

    fn path_rule(&self, id: u32) -> Rule {
        Rule {
            priority: self.priority,
            mark: mark(id),
            mask: MARK_MASK,
            table: self.table_base + id,
        }
    }

    fn heartbeat_rule(&self, member: usize) -> Rule {
        Rule {
            priority: self.priority,
            mark: heartbeat_mark(member),
            mask: u32::MAX,
            table: self.table_base + HEARTBEAT_TABLES + member as u32,
        }
    }

    /// Every rule this plan installs.
    fn all_rules(&self) -> Vec<Rule> {
        self.paths
            .iter()
            .map(|p| self.path_rule(p.id))
            .chain(
                self.heartbeats
                    .iter()
                    .map(|(i, _, _)| self.heartbeat_rule(*i)),
            )
            .collect()
    }

    /// Every route this plan installs (IPv4 only: what is not is left out).
    fn all_routes(&self) -> Vec<Route> {
        self.paths
            .iter()
            .filter_map(|p| {
                Some(Route {
                    table: self.table_base + p.id,
                    destination: (netlink::v4(p.prefix.addr())?, p.prefix.len()),
                    device: p.device.clone(),
                    source: self.source,
                })
            })
            .chain(self.heartbeats.iter().filter_map(|(i, a, d)| {
                Some(Route {
                    table: self.table_base + HEARTBEAT_TABLES + *i as u32,
                    destination: (netlink::v4(*a)?, 32),
                    device: d.clone(),
                    source: None,
                })
            }))
            .collect()
    }

    /// Clears what an earlier run left (a crash leaves its rules), then installs every
    /// path's route and rule and a steering table that sends everything the normal
    /// way. On an error what was installed stays recorded, for [`Self::remove`].
    pub fn install(&mut self) -> Result<(), PolicyError> {
        self.clear_leftovers();
        for (_, address, device) in self.heartbeats.iter().filter(|(_, a, _)| a.is_ipv6()) {
            tracing::warn!(
                "route control: heartbeats to {address} are not steered into {device}: route control is IPv4-only"
            );
        }
        let (routes, rules) = (self.all_routes(), self.all_rules());
        // What was installed, and the first failure: all in one netlink session.
        let (tables, installed, failed) = netlink::run(move |h| async move {
            let mut tables = Vec::new();
            let mut installed = Vec::new();
            for route in routes {
                tables.push(route.table);
                if let Err(why) = netlink::replace_route(&h, &route).await {
                    return (tables, installed, Some((format!("replacing {route}"), why)));
                }
            }
            for rule in rules {
                if let Err(why) = netlink::add_rule(&h, rule).await {
                    return (tables, installed, Some((format!("adding {rule}"), why)));
                }
                installed.push(rule);
            }
            (tables, installed, None)
        })
        .map_err(|why| PolicyError::netlink("installing routes and rules", why))?;
        self.installed_tables = tables;
        self.installed_rules = installed;
        if let Some((what, why)) = failed {
            return Err(PolicyError::netlink(what, why));
        }
        self.nft_installed = true;
        self.steer(&Steering::default())
    }

    fn clear_leftovers(&self) {
        let _ = run("nft", &["delete", "table", "ip", NFT_TABLE], None);
        let (rules, routes) = (self.all_rules(), self.all_routes());
        let _ = netlink::run(move |h| async move {
            for rule in rules {
                while netlink::del_rule(&h, rule).await.is_ok() {}
            }
            let tables: Vec<u32> = routes.iter().map(|r| r.table).collect();
            let _ = netlink::flush_tables(&h, &tables).await;
        });
    }

    /// Replaces the steering table with `s`, atomically.
    pub fn steer(&self, s: &Steering) -> Result<(), PolicyError> {
        run(
            "nft",
            &["-f", "-"],
            Some(&ruleset(&self.paths, &self.tun, s)),
        )?;
        Ok(())
    }

    /// Flows whose connection carries path `id`'s mark (`None`: the normal route's).
    pub fn flows(&self, id: Option<u32>) -> Result<u64, PolicyError> {
        let m = format!("{:#x}/{MARK_MASK:#x}", id.map_or(NORMAL_MARK, mark));
        let out = run("conntrack", &["-L", "--mark", &m], None)?;
        Ok(out.lines().filter(|l| !l.trim().is_empty()).count() as u64)
    }

    /// Removes everything installed; returns what could not be removed, in words.
    pub fn remove(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        if std::mem::take(&mut self.nft_installed)
            && let Err(e) = run("nft", &["delete", "table", "ip", NFT_TABLE], None)
        {
            errors.push(e.to_string());
        }
        let rules = std::mem::take(&mut self.installed_rules);
        let tables = std::mem::take(&mut self.installed_tables);
        if rules.is_empty() && tables.is_empty() {
            return errors;
        }
        let done = netlink::run(move |h| async move {
            let mut errors = Vec::new();
            for rule in rules {
                if let Err(why) = netlink::del_rule(&h, rule).await {
                    errors.push(PolicyError::netlink(format!("deleting {rule}"), why).to_string());
                }
            }
            // A device that vanished took its routes with it: nothing to flush is fine.
            if let Err(why) = netlink::flush_tables(&h, &tables).await {
                errors.push(
                    PolicyError::netlink(format!("flushing tables {tables:?}"), why).to_string(),
                );
            }
            errors
        });
        match done {
            Ok(e) => errors.extend(e),
            Err(why) => {
                errors.push(PolicyError::netlink("removing routes and rules", why).to_string());
            }
        }
        errors
    }
}

/// The nftables script that replaces the steering table (see the module's words).
pub fn ruleset(paths: &[PathRoute], tun: &str, s: &Steering) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "table ip {NFT_TABLE}");
    let _ = writeln!(out, "delete table ip {NFT_TABLE}");
    let _ = writeln!(out, "table ip {NFT_TABLE} {{");
    let _ = writeln!(out, "  chain steer {{");
    let prefixes: Vec<String> = s.choices.iter().map(|(p, _)| p.to_string()).collect();
    if !prefixes.is_empty() {
        let _ = writeln!(out, "    ip daddr != {{ {} }} return", prefixes.join(", "));
        if !s.move_existing {
            let dead: Vec<String> = s
                .dead
                .iter()
                .map(|id| format!("{:#010x}", mark(*id)))
                .collect();
            let _ = write!(out, "    ct mark and {MARK_MASK:#010x} != 0");
            if !dead.is_empty() {
                let _ = write!(
                    out,
                    " ct mark and {MARK_MASK:#010x} != {{ {} }}",
                    dead.join(", ")
                );
            }
            let _ = writeln!(out, " meta mark set ct mark return");
        }
        let map: Vec<String> = s
            .choices
            .iter()
            .map(|(p, id)| format!("{p} : {:#010x}", id.map_or(NORMAL_MARK, mark)))
            .collect();
        let _ = writeln!(
            out,
            "    meta mark set ip daddr map {{ {} }}",
            map.join(", ")
        );
        let _ = writeln!(out, "    ct mark set meta mark");
    }
    let _ = writeln!(out, "  }}");
    let _ = writeln!(
        out,
        "  chain pre {{\n    type filter hook prerouting priority mangle; policy accept;"
    );
    let relayed: Vec<String> = paths
        .iter()
        .filter(|p| p.direct)
        .map(|p| format!("{} : {:#010x}", p.prefix, mark(p.id)))
        .collect();
    if !relayed.is_empty() {
        let _ = writeln!(
            out,
            "    iifname \"{tun}\" meta mark set ip daddr map {{ {} }}",
            relayed.join(", ")
        );
    }
    let _ = writeln!(out, "    iifname \"{tun}\" return");
    let _ = writeln!(out, "    jump steer\n  }}");
    let _ = writeln!(
        out,
        "  chain out {{\n    type route hook output priority mangle; policy accept;\n    jump steer\n  }}"
    );
    let _ = writeln!(out, "}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn the_ruleset_pins_steers_and_forwards_relayed_traffic_directly() {
        let paths = vec![
            PathRoute {
                id: 1,
                prefix: p("10.9.0.0/24"),
                device: "mgrp-e".into(),
                direct: true,
            },
            PathRoute {
                id: 2,
                prefix: p("10.9.0.0/24"),
                device: "mgrp-n".into(),
                direct: false,
            },
        ];
        let s = Steering {
            choices: vec![(p("10.9.0.0/24"), Some(2)), (p("10.8.0.0/16"), None)],
            dead: vec![1],
            move_existing: false,
        };
        let r = ruleset(&paths, "mgrp0", &s);
        assert!(
            r.contains("ip daddr != { 10.9.0.0/24, 10.8.0.0/16 } return"),
            "{r}"
        );
        assert!(
            r.contains("ct mark and 0x00ff0000 != 0 ct mark and 0x00ff0000 != { 0x00010000 } meta mark set ct mark return"),
            "{r}"
        );
        assert!(
            r.contains(
                "meta mark set ip daddr map { 10.9.0.0/24 : 0x00020000, 10.8.0.0/16 : 0x00ff0000 }"
            ),
            "{r}"
        );
        assert!(
            r.contains("iifname \"mgrp0\" meta mark set ip daddr map { 10.9.0.0/24 : 0x00010000 }"),
            "{r}"
        );
        // Replaced whole, in one transaction.
        assert!(r.starts_with("table ip mgrp_overlay\ndelete table ip mgrp_overlay\n"));
        // Moving existing flows: no pinning rule.
        let moving = ruleset(
            &paths,
            "mgrp0",
            &Steering {
                move_existing: true,
                ..s
            },
        );
        assert!(!moving.contains("meta mark set ct mark"), "{moving}");
        // Nothing to steer yet: the chains are there and do nothing.
        let empty = ruleset(&paths, "mgrp0", &Steering::default());
        assert!(!empty.contains("ip daddr !="), "{empty}");
    }
}
