//! What `--check-config` prints: the settings in force, a line per concern and a line
//! per peer, never a key.

use std::fmt::Write as _;
use std::time::Duration;

use mgrp_core::planner::{Encap, HoldMode, Packing};

use super::{Config, PacerCpu};

impl Config {
    /// The settings in force, readable, without secrets (a key is named by whose it
    /// is, never shown).
    pub fn summary(&self) -> String {
        let peering = self.peering();
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        let list = |items: Vec<String>| {
            if items.is_empty() {
                "none".to_owned()
            } else {
                items.join(", ")
            }
        };
        let yes = |b: bool| if b { "yes" } else { "no" };
        let routes = peering.routes.iter().map(ToString::to_string).collect();
        line(format!(
            "tun {}: {}/32, MTU {}, offloads: {}",
            self.tun,
            self.tun_address,
            self.mtu,
            yes(self.tun_offload)
        ));
        line(format!(
            "routed into the tunnel: {}; {}",
            list(routes),
            match (self.manage_routes, self.route_on_demand) {
                (false, _) => "mgrpd installs no rule and no routes".to_owned(),
                (true, on_demand) => format!(
                    "rule `not fwmark {:#x} lookup {}` at priority {}, {}",
                    self.fwmark,
                    self.table,
                    self.rule_priority,
                    if on_demand {
                        "a destination's route only while trains to it run"
                    } else {
                        "routes in place while mgrpd runs"
                    }
                ),
            }
        ));
        line(format!(
            "API socket {} (group: {}); metrics: {}; runs as: {}; state in {}; log level {} ({}, RUST_LOG overrides)",
            self.socket.display(),
            self.socket_group.as_deref().unwrap_or("root's"),
            self.metrics
                .map_or("off".to_owned(), |a| format!("http://{a}/metrics")),
            self.user.as_deref().unwrap_or("the user it starts as"),
            self.state_dir.display(),
            self.log_level.as_str().to_ascii_lowercase(),
            self.log_format
        ));
        line(format!(
            "MGRP packets: {} and wire version {} unless a peer says otherwise; IP protocol {}, UDP port {}; {}",
            encap(peering.encap.default),
            peering.encap.wire_default,
            self.protocol,
            peering.udp.port,
            if peering.keys.enabled() {
                format!("authenticated (tags version {})", self.auth.number())
            } else {
                "not authenticated (no key)".to_owned()
            }
        ));
        let p = &self.policy;
        line(format!(
            "riders: wait up to {} {}; {} per probe, on {} of a train's probes{}; queued at most {} riders and {} bytes per destination, {} bytes in all, {} destinations",
            human(p.hold),
            match p.hold_mode {
                HoldMode::Always => "always",
                HoldMode::OnDemand => "while a train to their destination is queued or in flight",
            },
            match p.packing {
                Packing::OnePerProbe => "one",
                Packing::Multiple => "as many as fit",
            },
            format_args!("{} %", p.max_train_fraction * 100.0),
            p.first_n
                .map_or(String::new(), |n| format!(" (the first {n} only)")),
            p.max_queued_riders,
            p.max_queued_bytes,
            self.max_held_bytes,
            self.max_destinations
        ));
        line(format!(
            "pacer: real-time: {}; CPU: {}; spins the last {} before a deadline; late after {}; kernel departure stamps: {}; super-packets sent whole: {}",
            yes(self.realtime),
            match self.pacer_cpu {
                PacerCpu::Auto if self.realtime =>
                    "the last the daemon may use, kept for it".into(),
                PacerCpu::Auto | PacerCpu::Unpinned => "any".to_owned(),
                PacerCpu::Cpu(c) => format!("{c}, kept for it"),
            },
            human(self.busy_poll_margin),
            human(self.late_threshold),
            yes(self.kernel_departures),
            yes(self.super_packets)
        ));
        line(format!(
            "limits: trains of at most {} probes, gaps {} to {}, {} long, spinning {}; {} connections, {} trains queued ({} per connection, {} in flight to different destinations), {} listeners, requests of {} bytes; per user {} probes/s and {} bytes/s, all users {} probes/s and {} bytes/s; reassembly {} bytes ({} per peer) for {}",
            self.max_probes_per_train,
            human(self.min_gap),
            human(self.max_gap),
            human(self.max_train_duration),
            human(self.max_train_spin),
            self.max_connections,
            self.max_queued_trains,
            self.max_trains_per_client,
            self.max_trains_in_flight,
            self.max_listeners,
            self.max_request_bytes,
            self.per_user_rate.0,
            self.per_user_rate.1,
            self.total_rate.0,
            self.total_rate.1,
            self.reassembly.total_bytes,
            self.reassembly.per_peer_bytes,
            human(self.reassembly.timeout)
        ));
        let via = peering
            .via
            .iter()
            .map(|(d, p)| format!("{d} via {p}"))
            .collect();
        let local = peering
            .peers
            .local()
            .iter()
            .map(ToString::to_string)
            .collect();
        let sources = peering
            .sources
            .default
            .iter()
            .map(ToString::to_string)
            .collect();
        line(format!(
            "via: {}; riders also accepted for: {}; source addresses: {}",
            list(via),
            list(local),
            if peering.sources.default.is_empty() {
                "the host's towards each peer".to_owned()
            } else {
                list(sources)
            }
        ));
        line(format!("peers: {}", peering.peers.peers().len()));
        for peer in peering.peers.peers() {
            let ip = peer.prefix.addr();
            let name = peering
                .peer_name(peer.prefix)
                .map_or(String::new(), |n| format!(" ({n})"));
            let mut text = format!(
                "  {}{name}: {}, wire {}",
                peer.prefix,
                encap(peering.encap.for_peer(ip)),
                peering.encap.wire_for_peer(ip)
            );
            if let Some(u) = peering
                .udp
                .peer(ip)
                .filter(|_| peering.encap.for_peer(ip) == Encap::Udp)
            {
                match u.endpoint {
                    Some(e) => write!(text, ", endpoint {e}"),
                    None if u.roams => write!(text, ", endpoint learned from its packets"),
                    None => write!(text, ", port {}", u.port),
                }
                .expect("a String takes any text");
                if let Some(k) = u.keepalive {
                    write!(text, ", keepalive {}", human(k)).expect("a String takes any text");
                }
            }
            if let Some(k) = peering.keys.key_for(ip) {
                let whose = if peering.keys.derived.iter().any(|p| p.contains(ip)) {
                    "its own, derived from its public key"
                } else if peering.keys.own_key(ip) {
                    "its own"
                } else {
                    "the shared one"
                };
                let next = if k.next.is_some() {
                    ", and a next key"
                } else {
                    ""
                };
                write!(text, ", key: {whose}{next}").expect("a String takes any text");
            }
            if let Some(s) = peering
                .sources
                .per_peer
                .iter()
                .find(|(p, _)| *p == peer.prefix)
            {
                write!(text, ", source {}", s.1).expect("a String takes any text");
            }
            for (what, prefixes) in [
                ("speaks for", &peer.allowed_sources),
                ("relays to", &peer.relay_to),
            ] {
                if !prefixes.is_empty() {
                    let all: Vec<String> = prefixes.iter().map(ToString::to_string).collect();
                    write!(text, ", {what} {}", all.join(" ")).expect("a String takes any text");
                }
            }
            if let Some(d) = self.next_hops.iter().find(|d| d.peer == ip) {
                write!(text, ", next-hop device {}", d.name).expect("a String takes any text");
            }
            line(text);
        }
        out
    }
}

fn encap(e: Encap) -> &'static str {
    match e {
        Encap::Raw => "raw IP",
        Encap::Udp => "UDP",
    }
}

/// A duration as the configuration file can write it (`150us`, `1s 500ms`).
fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
