//! What a reload (SIGHUP) may change while mgrpd runs: its peers, their keys, how
//! each is reached and the routes into the tunnel ([`super::Peering`]), and the
//! tags' versions. Everything else keeps the value it started with until a restart.
//! Sans-IO: [`plan`] sets the configuration just loaded against the one in force.

use std::collections::BTreeSet;

use ipnet::IpNet;
use mgrp_core::peers::Prefix;

use super::{Config, Peering};

/// What a reload puts in force, and what it leaves for a restart.
#[derive(Debug)]
pub struct Reload {
    /// The peers, keys and routes from now on.
    pub peering: Peering,
    /// Peers the new configuration adds and removes.
    pub added_peers: Vec<Prefix>,
    pub removed_peers: Vec<Prefix>,
    /// Routes into the tunnel it adds and removes.
    pub added_routes: Vec<IpNet>,
    pub removed_routes: Vec<IpNet>,
    /// Settings that changed but take a restart (their values in force stay).
    pub need_restart: Vec<&'static str>,
    /// Whether anything else of the peering differs: a kept peer's key, name,
    /// sources or endpoint.
    pub peering_changed: bool,
}

impl Reload {
    /// Whether the reload changes nothing in force (a periodic refresh then says
    /// nothing; settings that wait for a restart were said by the reload that first
    /// saw them).
    pub fn is_empty(&self) -> bool {
        self.added_peers.is_empty()
            && self.removed_peers.is_empty()
            && self.added_routes.is_empty()
            && self.removed_routes.is_empty()
            && !self.peering_changed
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let names = |v: &[Prefix]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        let nets = |v: &[IpNet]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        let mut line = format!(
            "peers added: {}; removed: {}; routes added: {}; removed: {}",
            list(&names(&self.added_peers)),
            list(&names(&self.removed_peers)),
            list(&nets(&self.added_routes)),
            list(&nets(&self.removed_routes)),
        );
        if !self.need_restart.is_empty() {
            line.push_str(&format!(
                "; changed but kept until a restart: {}",
                self.need_restart.join(", ")
            ));
        }
        line
    }
}

/// Sets `new` (just loaded) against `old` (in force). Refuses, with the reason, a
/// change to the peers that cannot be made while mgrpd runs: keys turned on or off
/// (peers with keys where mgrpd started without, or the reverse; no peer at all is
/// neither),
/// next-hop devices (each is a TUN made at start, before privileges are dropped),
/// UDP when no UDP socket was opened at start or on another port, a kept peer's
/// encapsulation or wire version (its planner and reassembly are sized for it), and
/// IPv6 routes when the start installed no IPv6 rule.
pub fn plan(old: &Config, new: &Config) -> Result<Reload, String> {
    let (was, now) = (old.peering(), new.peering());
    // Whether packets carry a tag is fixed at start (the planner leaves room for
    // it); a host left with no peer has nothing to seal either way.
    let keyed = old.policy.trailer_len > 0;
    if !now.peers.peers().is_empty() && now.keys.enabled() != keyed {
        return Err("keys cannot be turned on or off by a reload (the trailer changes every packet's room): restart mgrpd".into());
    }
    if old.next_hops != new.next_hops {
        return Err("next-hop devices ([[peers]] device) changed: each is a TUN made at start; restart mgrpd".into());
    }
    if now.encap.any_udp() {
        if !was.encap.any_udp() {
            return Err("a peer is now reached over UDP, but mgrpd opened no UDP socket at start (no peer was): restart mgrpd".into());
        }
        if now.udp.port != was.udp.port {
            return Err(format!(
                "the UDP port changed ({} to {}): the socket is bound at start; restart mgrpd",
                was.udp.port, now.udp.port
            ));
        }
    }
    // A prefix may have more than one table (a route's and its [[peers]] table).
    let prefixes = |p: &Peering| -> Vec<Prefix> {
        let mut v: Vec<Prefix> = Vec::new();
        for peer in p.peers.peers() {
            if !v.contains(&peer.prefix) {
                v.push(peer.prefix);
            }
        }
        v
    };
    let (before, after) = (prefixes(&was), prefixes(&now));
    let only = |a: &[Prefix], b: &[Prefix]| -> Vec<Prefix> {
        a.iter().filter(|p| !b.contains(p)).copied().collect()
    };
    for kept in before.iter().filter(|p| after.contains(p)) {
        let ip = kept.addr();
        if was.encap.for_peer(ip) != now.encap.for_peer(ip)
            || was.encap.wire_for_peer(ip) != now.encap.wire_for_peer(ip)
        {
            return Err(format!(
                "peer {kept} changes its encap or wire: remove it in one reload and add it back in the next, or restart mgrpd"
            ));
        }
    }
    let v6 = |p: &Peering| p.routes.iter().any(|n| matches!(n, IpNet::V6(_)));
    if old.manage_routes && v6(&now) && !v6(&was) {
        return Err("IPv6 routes need the IPv6 policy rule, which mgrpd installs at start only when it routes IPv6: restart mgrpd".into());
    }
    let (rb, ra): (BTreeSet<IpNet>, BTreeSet<IpNet>) = (
        was.routes.iter().copied().collect(),
        now.routes.iter().copied().collect(),
    );
    Ok(Reload {
        added_peers: only(&after, &before),
        removed_peers: only(&before, &after),
        added_routes: ra.difference(&rb).copied().collect(),
        removed_routes: rb.difference(&ra).copied().collect(),
        need_restart: need_restart(old, new),
        peering_changed: *was != *now,
        peering: (*now).clone(),
    })
}

/// The settings outside the peering that differ (each compared as it prints).
fn need_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    macro_rules! compare {
        ($($field:ident => $name:literal),* $(,)?) => {
            $(
                if format!("{:?}", old.$field) != format!("{:?}", new.$field) {
                    changed.push($name);
                }
            )*
        };
    }
    compare!(
        tun => "tun", tun_address => "tun-address", mtu => "mtu",
        tun_offload => "tun-offload", socket => "socket", socket_group => "socket-group",
        metrics => "metrics", user => "user", protocol => "protocol", fwmark => "fwmark",
        table => "table", rule_priority => "rule-priority", manage_routes => "no-routes",
        route_on_demand => "route-on-demand", policy => "hold, hold-mode or [piggyback]",
        state_dir => "state-dir", pacer_cpu => "pacer-cpu", realtime => "realtime",
        busy_poll_margin => "busy-poll-margin", late_threshold => "late-threshold",
        kernel_departures => "kernel-departures", super_packets => "super-packets",
        log_level => "log-level", log_format => "log-format",
        max_probes_per_train => "max-probes-per-train", min_gap => "min-gap",
        max_gap => "max-gap", max_train_duration => "max-train-duration",
        max_train_spin => "max-train-spin", max_connections => "max-connections",
        max_queued_trains => "max-queued-trains",
        max_trains_per_client => "max-trains-per-client",
        max_trains_in_flight => "max-trains-in-flight", max_listeners => "max-listeners",
        max_request_bytes => "max-request-bytes",
        per_user_rate => "probes-per-second-per-user or probe-bytes-per-second-per-user",
        total_rate => "probes-per-second or probe-bytes-per-second",
        max_held_bytes => "max-held-bytes",
        max_destinations => "max-destinations",
    );
    // The longest rider follows the MTU; the bounds are the reassembly-* settings.
    let bounds = |c: &Config| {
        let r = &c.reassembly;
        (r.per_peer_bytes, r.total_bytes, r.timeout)
    };
    if bounds(old) != bounds(new) {
        changed.push("reassembly-*");
    }
    changed
}
