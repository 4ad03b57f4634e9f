//! The Prometheus exporter (`--metrics ADDR`, off by default): the counters the API's
//! `stats` request gives, at `http://ADDR/metrics`, named by Prometheus' guide: a
//! family per thing counted, its unit last and `_total` on counters, one family with
//! a `reason` label where the API has a counter per reason (`riders_refused_*`
//! becomes `mgrpd_riders_refused_total{reason=…}`). [`FAMILIES`] is the whole table,
//! with each family's help text; `docs/mgrpd.md` lists it, and the names before this
//! table. Beside the counters: the traffic routed to each peer (the API's `traffic`),
//! each configured peer (`mgrpd_peer_info`, with its `name` where the file gives one),
//! the host clock's synchronisation (wire version 2 needs the peers' clocks within
//! ±2.1 s), and `mgrpd_build_info`. A plain HTTP/1.1 answer per connection: nothing
//! but `GET /metrics` is served, in OpenMetrics when the scraper asks for it
//! (Prometheus does) and in the Prometheus text format otherwise
//! (`mgrp_core::exposition`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use mgrp_core::api::{DaemonStats, PeerTraffic};
use mgrp_core::exposition::{self, Format};
use mgrp_core::peers::Prefix;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use mgrp_rt::clock::Discipline;

use crate::counters::Stats;
use crate::lifecycle::Lifecycle;

/// Whether a family counts up or is a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
}

/// One series of a family: its label (if the family has one) and what it reads.
type Series = (
    Option<(&'static str, &'static str)>,
    fn(&DaemonStats) -> u64,
);

/// A family of the counters: its name (without `_total`), kind, help and series.
pub(crate) struct FamilyDef {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) help: &'static str,
    series: &'static [Series],
}

macro_rules! family {
    ($name:literal, $kind:ident, $help:literal, $($f:ident).+) => {
        FamilyDef {
            name: $name,
            kind: Kind::$kind,
            help: $help,
            series: &[(None, |s: &DaemonStats| s.$($f).+)],
        }
    };
    ($name:literal, $kind:ident, $help:literal, $label:literal: [$($value:literal => $read:expr),+ $(,)?]) => {
        FamilyDef {
            name: $name,
            kind: Kind::$kind,
            help: $help,
            series: &[$((Some(($label, $value)), $read)),+],
        }
    };
}

/// Every family of the counters, in the order served.
pub(crate) const FAMILIES: &[FamilyDef] = &[
    family!(
        "mgrpd_tun_packets_read",
        Counter,
        "Packets read from the TUN device",
        daemon.tun_packets_in
    ),
    family!(
        "mgrpd_tun_packets_ignored",
        Counter,
        "Packets read from the TUN that were not application traffic (not IP, multicast or link-local housekeeping), dropped",
        daemon.tun_ignored
    ),
    family!(
        "mgrpd_tun_frames_dropped",
        Counter,
        "Frames read from the TUN dropped whole as malformed (counted nowhere else)",
        daemon.tun_frames_dropped
    ),
    family!(
        "mgrpd_tun_write_errors",
        Counter,
        "Riders whose write into the TUN failed",
        daemon.tun_write_errors
    ),
    family!(
        "mgrpd_trains_accepted",
        Counter,
        "Probe trains submitted and accepted",
        daemon.trains_accepted
    ),
    family!("mgrpd_trains_refused", Counter, "Probe trains refused, by reason: not_peer (the destination is no peer), rate_limit (over the user's or the total rate), other (the request or the train out of bounds, the queue full)", "reason": [
        "not_peer" => |s: &DaemonStats| s.daemon.trains_refused_not_peer,
        "rate_limit" => |s: &DaemonStats| s.daemon.trains_refused_rate_limit,
        "other" => |s: &DaemonStats| s.daemon.trains_refused_other,
    ]),
    family!(
        "mgrpd_trains_spin_capped",
        Counter,
        "Trains that spun the pacer for limits.max-train-spin and were paced by the timer alone for the rest",
        daemon.trains_spin_capped
    ),
    family!(
        "mgrpd_probes_sent",
        Counter,
        "Probes handed to the network",
        daemon.probes_sent
    ),
    family!(
        "mgrpd_probe_send_errors",
        Counter,
        "Probes whose send failed",
        daemon.probe_send_errors
    ),
    family!(
        "mgrpd_probes_late",
        Counter,
        "Probes that left later than late-threshold after their deadline (each train's report counts its own)",
        daemon.probes_late
    ),
    family!(
        "mgrpd_probes_displaced",
        Counter,
        "Probes that fell due while another train's probe was being sent and left right after it (each train's report counts its own)",
        daemon.probes_displaced
    ),
    family!(
        "mgrpd_probes_unstamped",
        Counter,
        "Probes that left without a kernel queue stamp although kernel stamps are on",
        daemon.probes_unstamped
    ),
    family!(
        "mgrpd_probes_received",
        Counter,
        "MGRP probes that passed the peer check, parsing and authentication",
        daemon.probes_received
    ),
    family!(
        "mgrpd_probes_delivered",
        Counter,
        "Probes handed to the tools listening for them",
        daemon.probes_delivered
    ),
    family!(
        "mgrpd_probes_unclaimed",
        Counter,
        "Probes that arrived for a port nobody listens on",
        daemon.probes_unclaimed
    ),
    family!(
        "mgrpd_probes_dropped_slow_listener",
        Counter,
        "Probes dropped because their listener did not keep up",
        daemon.probes_dropped_slow_listener
    ),
    family!(
        "mgrpd_continuations_sent",
        Counter,
        "Continuation packets sent (the ends of riders cut short by their hold time)",
        daemon.continuations_sent
    ),
    family!(
        "mgrpd_continuation_send_errors",
        Counter,
        "Continuation packets whose send failed",
        daemon.continuation_send_errors
    ),
    family!(
        "mgrpd_continuations_received",
        Counter,
        "Continuation packets that passed the peer check, parsing and authentication",
        daemon.continuations_received
    ),
    family!(
        "mgrpd_unchanged_sent",
        Counter,
        "Riders sent on unchanged, outside any probe",
        daemon.unchanged_sent
    ),
    family!(
        "mgrpd_unchanged_send_errors",
        Counter,
        "Unchanged riders whose send failed",
        daemon.unchanged_send_errors
    ),
    family!(
        "mgrpd_riders_resent_after_failed_probe",
        Counter,
        "Riders with a chunk in a probe whose send failed, sent unchanged instead",
        daemon.riders_resent_after_failed_probe
    ),
    family!(
        "mgrpd_riders_sent_direct",
        Counter,
        "Packets from the TUN sent on at once, with on-demand hold while no train was queued or in flight",
        daemon.riders_sent_direct
    ),
    family!("mgrpd_riders_bypassed", Counter, "Packets from the TUN sent on unchanged without entering a planner, by reason: peer_down (their peer unreachable), too_many_destinations (beyond limits.max-destinations), pacer_busy (the pacer's queue full)", "reason": [
        "peer_down" => |s: &DaemonStats| s.daemon.riders_bypassed_peer_down,
        "too_many_destinations" => |s: &DaemonStats| s.daemon.riders_bypassed_too_many_destinations,
        "pacer_busy" => |s: &DaemonStats| s.daemon.riders_bypassed_pacer_busy,
    ]),
    family!(
        "mgrpd_outputs_done_by_pacer",
        Counter,
        "Outputs (unchanged riders, continuations, reports) the pacer did itself because the dispatcher's queue was full",
        daemon.outputs_done_by_pacer
    ),
    family!(
        "mgrpd_super_packets_sent",
        Counter,
        "TUN super-packets (offloaded TCP segments) sent whole through the link-layer socket",
        daemon.super_packets_sent
    ),
    family!(
        "mgrpd_link_send_errors",
        Counter,
        "Super-packets the link-layer socket refused, split and sent through the raw socket instead",
        daemon.link_send_errors
    ),
    family!(
        "mgrpd_segmented_sends",
        Counter,
        "System calls that sent several continuations to a UDP peer at once (UDP segmentation offload)",
        daemon.segmented_sends
    ),
    family!(
        "mgrpd_segmented_datagrams",
        Counter,
        "Datagrams those segmented sends carried",
        daemon.segmented_datagrams
    ),
    family!(
        "mgrpd_mgrp_packets_received",
        Counter,
        "MGRP packets received",
        daemon.mgrp_received
    ),
    family!("mgrpd_mgrp_packets_refused", Counter, "MGRP packets refused, by reason: malformed, not_peer (the sender is no peer), unauthenticated (no tag from a peer with a key), bad_tag (another key, or altered), replayed (a counter seen already or too old), unexpected_auth (a tag from a peer without a key), reflected (sealed by this daemon and sent back to it), old_auth (tags of daemons before keys per direction)", "reason": [
        "malformed" => |s: &DaemonStats| s.daemon.mgrp_malformed,
        "not_peer" => |s: &DaemonStats| s.daemon.mgrp_not_peer,
        "unauthenticated" => |s: &DaemonStats| s.daemon.mgrp_unauthenticated,
        "bad_tag" => |s: &DaemonStats| s.daemon.mgrp_bad_tag,
        "replayed" => |s: &DaemonStats| s.daemon.mgrp_replayed,
        "unexpected_auth" => |s: &DaemonStats| s.daemon.mgrp_unexpected_auth,
        "reflected" => |s: &DaemonStats| s.daemon.mgrp_reflected,
        "old_auth" => |s: &DaemonStats| s.daemon.mgrp_old_auth,
    ]),
    family!("mgrpd_riders_refused", Counter, "Riders refused on arrival, by reason: malformed (not a sound IP packet), foreign_source (a source its peer may not speak for), foreign_destination (not the address its MGRP packet was sent to), inner_mgrp (an MGRP packet itself), special_destination (broadcast, multicast, loopback, link-local or unspecified)", "reason": [
        "malformed" => |s: &DaemonStats| s.daemon.riders_refused_malformed,
        "foreign_source" => |s: &DaemonStats| s.daemon.riders_refused_foreign_source,
        "foreign_destination" => |s: &DaemonStats| s.daemon.riders_refused_foreign_destination,
        "inner_mgrp" => |s: &DaemonStats| s.daemon.riders_refused_inner_mgrp,
        "special_destination" => |s: &DaemonStats| s.daemon.riders_refused_special_destination,
    ]),
    family!(
        "mgrpd_riders_delivered",
        Counter,
        "Riders written into this host through the TUN",
        daemon.riders_delivered
    ),
    family!(
        "mgrpd_riders_delivered_bytes",
        Counter,
        "IP bytes of the riders written into this host through the TUN",
        daemon.rider_bytes_delivered
    ),
    family!(
        "mgrpd_riders_relayed",
        Counter,
        "Of the riders delivered, those a member peer sent through this host to beyond it (its relay-to prefixes)",
        daemon.riders_relayed
    ),
    family!(
        "mgrpd_peer_unreachable",
        Counter,
        "ICMP errors saying a peer takes no MGRP packets (its mgrpd gone) that quote a packet sent there in the last 10 s: the peer counts as down for a while",
        daemon.peer_unreachable
    ),
    family!(
        "mgrpd_peer_unreachable_reported",
        Counter,
        "Receives on a UDP socket that returned an ICMP error for an earlier send instead of a packet",
        daemon.peer_unreachable_reported
    ),
    family!(
        "mgrpd_icmp_errors_unproven",
        Counter,
        "ICMP errors saying a peer takes no MGRP that quote no MGRP packet sent there in the last 10 s (forged, or quoting too little): they mark no peer down",
        daemon.icmp_errors_unproven
    ),
    family!(
        "mgrpd_trials_refused",
        Counter,
        "UDP datagrams from an endpoint no peer is known at, dropped unopened because the second's trials against the roaming peers' keys were spent (also counted as from no peer)",
        daemon.trials_refused
    ),
    family!(
        "mgrpd_tag_checks",
        Counter,
        "Tags computed to check received MGRP packets: about one per authentic packet; a packet whose key index names none of its peer's keys costs none",
        daemon.tag_checks
    ),
    family!("mgrpd_socket_errors", Counter, "Errors the MGRP sockets reported, each survived, by reason: refused (port or protocol unreachable), unreachable (no route, host or network unreachable, time exceeded), prohibited (a firewall's refusal), too_big (packet too big), protocol (parameter problem, source route failed, host isolated), resources (buffers or memory short here), other", "reason": [
        "refused" => |s: &DaemonStats| s.daemon.socket_errors_refused,
        "unreachable" => |s: &DaemonStats| s.daemon.socket_errors_unreachable,
        "prohibited" => |s: &DaemonStats| s.daemon.socket_errors_prohibited,
        "too_big" => |s: &DaemonStats| s.daemon.socket_errors_too_big,
        "protocol" => |s: &DaemonStats| s.daemon.socket_errors_protocol,
        "resources" => |s: &DaemonStats| s.daemon.socket_errors_resources,
        "other" => |s: &DaemonStats| s.daemon.socket_errors_other,
    ]),
    family!(
        "mgrpd_peer_endpoint_changes",
        Counter,
        "Times a roaming UDP peer was heard from a new endpoint and its packets went there from then on",
        daemon.peer_endpoint_changes
    ),
    family!(
        "mgrpd_keepalives_sent",
        Counter,
        "Keepalives sent to UDP peers (to keep a NAT's mapping open)",
        daemon.keepalives_sent
    ),
    family!(
        "mgrpd_keepalive_send_errors",
        Counter,
        "Keepalives that could not be sent",
        daemon.keepalive_send_errors
    ),
    family!(
        "mgrpd_keepalives_received",
        Counter,
        "Keepalives that passed the peer check, parsing and authentication",
        daemon.keepalives_received
    ),
    family!(
        "mgrpd_planner_riders_in",
        Counter,
        "Riders handed to the planners",
        planner.riders_in
    ),
    family!(
        "mgrpd_planner_riders_in_bytes",
        Counter,
        "IP bytes of the riders handed to the planners",
        planner.rider_bytes_in
    ),
    family!(
        "mgrpd_planner_riders_piggybacked",
        Counter,
        "Riders all of whose bytes left inside MGRP packets",
        planner.riders_piggybacked
    ),
    family!(
        "mgrpd_planner_riders_finished_by_continuation",
        Counter,
        "Of the riders piggybacked, those whose last bytes left in continuation packets because their hold time ran out mid-train",
        planner.riders_finished_by_continuation
    ),
    family!(
        "mgrpd_planner_riders_sent_unchanged",
        Counter,
        "Riders the planners released whole and unchanged",
        planner.riders_sent_unchanged
    ),
    family!("mgrpd_planner_riders_dropped", Counter, "Riders the planners dropped, by reason: queue_full, too_large (larger than the path allows), empty", "reason": [
        "queue_full" => |s: &DaemonStats| s.planner.riders_dropped_queue_full,
        "too_large" => |s: &DaemonStats| s.planner.riders_dropped_too_large,
        "empty" => |s: &DaemonStats| s.planner.riders_dropped_empty,
    ]),
    family!(
        "mgrpd_planner_riders_held",
        Gauge,
        "Riders held now, waiting for a probe",
        planner.riders_held
    ),
    family!(
        "mgrpd_planner_probes_planned",
        Counter,
        "Probes planned",
        planner.probes_planned
    ),
    family!(
        "mgrpd_planner_probes_with_riders",
        Counter,
        "Probes planned with at least one rider chunk",
        planner.probes_with_riders
    ),
    family!(
        "mgrpd_planner_continuations",
        Counter,
        "Continuation packets planned",
        planner.continuation_packets
    ),
    family!("mgrpd_planner_rider_chunks_bytes", Counter, "Rider bytes planned, by carrier: probe or continuation", "carrier": [
        "probe" => |s: &DaemonStats| s.planner.rider_bytes_in_probes,
        "continuation" => |s: &DaemonStats| s.planner.rider_bytes_in_continuations,
    ]),
    family!("mgrpd_planner_transactions", Counter, "Probe transactions handed to the planners, by result: accepted or rejected (invalid)", "result": [
        "accepted" => |s: &DaemonStats| s.planner.transactions_accepted,
        "rejected" => |s: &DaemonStats| s.planner.transactions_rejected,
    ]),
    family!("mgrpd_planner_transactions_ended", Counter, "Accepted transactions that ended, by outcome: completed (every probe planned) or cancelled", "outcome": [
        "completed" => |s: &DaemonStats| s.planner.transactions_completed,
        "cancelled" => |s: &DaemonStats| s.planner.transactions_cancelled,
    ]),
    family!(
        "mgrpd_reassembly_chunks",
        Counter,
        "Rider chunks handed to reassembly",
        reassembly.chunks_in
    ),
    family!(
        "mgrpd_reassembly_chunks_duplicate",
        Counter,
        "Chunks that repeated bytes already held (or of a rider already delivered)",
        reassembly.chunks_duplicate
    ),
    family!(
        "mgrpd_reassembly_chunks_too_large",
        Counter,
        "Chunks refused because their rider alone exceeds a memory bound",
        reassembly.chunks_too_large
    ),
    family!(
        "mgrpd_reassembly_riders_completed",
        Counter,
        "Riders reassembly completed",
        reassembly.riders_delivered
    ),
    family!(
        "mgrpd_reassembly_riders_completed_bytes",
        Counter,
        "IP bytes of the riders reassembly completed",
        reassembly.rider_bytes_delivered
    ),
    family!("mgrpd_reassembly_riders_discarded", Counter, "Incomplete riders discarded, by reason: timed_out, peer_limit (the peer's memory bound), total_limit (the total memory bound), inconsistent (chunks that disagreed)", "reason": [
        "timed_out" => |s: &DaemonStats| s.reassembly.riders_timed_out,
        "peer_limit" => |s: &DaemonStats| s.reassembly.riders_evicted_peer_limit,
        "total_limit" => |s: &DaemonStats| s.reassembly.riders_evicted_total_limit,
        "inconsistent" => |s: &DaemonStats| s.reassembly.riders_inconsistent,
    ]),
    family!(
        "mgrpd_reassembly_riders_pending",
        Gauge,
        "Riders being reassembled now",
        reassembly.riders_pending
    ),
    family!(
        "mgrpd_reassembly_pending_bytes",
        Gauge,
        "Bytes reserved now for the riders being reassembled",
        reassembly.bytes_pending
    ),
];

/// The families served beside [`FAMILIES`], with their help: the traffic to each
/// peer, each configured peer, the clock and the build. (Their names, for the guide's
/// test and the rename table.)
pub(crate) const OTHER_FAMILIES: &[(&str, Kind, &str)] = &[
    (
        "mgrpd_peer_traffic_packets",
        Kind::Counter,
        "Application packets routed into the tunnel for the peer",
    ),
    (
        "mgrpd_peer_traffic_bytes",
        Kind::Counter,
        "IP bytes of the application packets routed into the tunnel for the peer",
    ),
    (
        "mgrpd_peer_traffic_bytes_per_second",
        Kind::Gauge,
        "IP bytes per second routed into the tunnel for the peer, over the last 2 s",
    ),
    (
        "mgrpd_peer_held_riders",
        Kind::Gauge,
        "Riders held for the peer now, waiting for a probe",
    ),
    (
        "mgrpd_peer_held_bytes",
        Kind::Gauge,
        "IP bytes of the riders held for the peer now",
    ),
    (
        "mgrpd_peer_info",
        Kind::Gauge,
        "1 for each prefix MGRP packets are taken from ([[peers]] tables, --peer, routed prefixes): its prefix, name (empty unless its [[peers]] table gives one), encapsulation (raw or udp), wire version and key (own, shared or none)",
    ),
    (
        "mgrpd_clock_synchronized",
        Kind::Gauge,
        "1 while the kernel says the host clock is synchronised (adjtimex without STA_UNSYNC), else 0; wire version 2 needs the peers' clocks within 2.1 s of each other",
    ),
    (
        "mgrpd_clock_maxerror_seconds",
        Kind::Gauge,
        "The kernel's bound on the host clock's error (adjtimex maxerror)",
    ),
    (
        "mgrpd_build_info",
        Kind::Gauge,
        "1, labelled with this mgrpd's version",
    ),
];

/// What the exporter knows of a configured peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    pub(crate) prefix: Prefix,
    pub(crate) name: Option<String>,
    /// `raw` or `udp`.
    pub(crate) encap: &'static str,
    pub(crate) wire: u8,
    /// `own`, `shared` or `none`.
    pub(crate) key: &'static str,
}

/// What the exporter says of each of `config`'s peers in force.
pub(crate) fn peers_of(config: &crate::config::Config) -> Arc<[PeerInfo]> {
    let peering = config.peering();
    peering
        .peers
        .peers()
        .iter()
        .map(|p| {
            let ip = p.prefix.addr();
            PeerInfo {
                prefix: p.prefix,
                name: peering.peer_name(p.prefix).map(str::to_owned),
                encap: match peering.encap.for_peer(ip) {
                    mgrp_core::planner::Encap::Raw => "raw",
                    mgrp_core::planner::Encap::Udp => "udp",
                },
                wire: peering.encap.wire_for_peer(ip).number(),
                key: if peering.keys.own_key(ip) {
                    "own"
                } else if peering.keys.key_for(ip).is_some() {
                    "shared"
                } else {
                    "none"
                },
            }
        })
        .collect()
}

type Labels = Vec<(&'static str, String)>;
type GaugeF = Gauge<f64, AtomicU64>;

fn name_of(peers: &[PeerInfo], ip: IpAddr) -> String {
    peers
        .iter()
        .filter(|p| p.prefix.contains(ip))
        .max_by_key(|p| p.prefix.len())
        .and_then(|p| p.name.clone())
        .unwrap_or_default()
}

/// The exposition of `stats`, the traffic to each peer, the configured `peers` and
/// the `clock` in `format`.
pub(crate) fn render(
    stats: &DaemonStats,
    traffic: &[PeerTraffic],
    peers: &[PeerInfo],
    clock: Option<Discipline>,
    format: Format,
) -> String {
    let mut r = Registry::default();
    let level = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for f in FAMILIES {
        match (f.kind, f.series) {
            (Kind::Counter, [(None, read)]) => {
                let c = Counter::<u64>::default();
                c.inc_by(read(stats));
                r.register(f.name, f.help, c);
            }
            (Kind::Gauge, [(None, read)]) => {
                let g = Gauge::<i64>::default();
                g.set(level(read(stats)));
                r.register(f.name, f.help, g);
            }
            (kind, series) => {
                let counters = Family::<Labels, Counter<u64>>::default();
                let gauges = Family::<Labels, Gauge<i64>>::default();
                for (label, read) in series {
                    let l: Labels = label.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
                    match kind {
                        Kind::Counter => {
                            counters.get_or_create(&l).inc_by(read(stats));
                        }
                        Kind::Gauge => {
                            gauges.get_or_create(&l).set(level(read(stats)));
                        }
                    }
                }
                match kind {
                    Kind::Counter => r.register(f.name, f.help, counters),
                    Kind::Gauge => r.register(f.name, f.help, gauges),
                }
            }
        }
    }
    let help = |name: &str| {
        OTHER_FAMILIES
            .iter()
            .find(|f| f.0 == name)
            .map_or("", |f| f.2)
    };
    let packets = Family::<Labels, Counter<u64>>::default();
    let bytes = Family::<Labels, Counter<u64>>::default();
    let rate = Family::<Labels, Gauge<i64>>::default();
    let held = Family::<Labels, Gauge<i64>>::default();
    let held_bytes = Family::<Labels, Gauge<i64>>::default();
    for t in traffic {
        // `neighbour`, as every series names the other end; `name`, the same, for
        // what was written against 0.1.0 (to be removed after 0.2).
        let name = name_of(peers, t.peer);
        let l = vec![
            ("peer", t.peer.to_string()),
            ("neighbour", name.clone()),
            ("name", name),
        ];
        packets.get_or_create(&l).inc_by(t.packets);
        bytes.get_or_create(&l).inc_by(t.bytes);
        rate.get_or_create(&l).set(level(t.bytes_per_second));
        held.get_or_create(&l).set(level(t.held_riders));
        held_bytes.get_or_create(&l).set(level(t.held_bytes));
    }
    for (name, fam) in [
        ("mgrpd_peer_traffic_packets", packets),
        ("mgrpd_peer_traffic_bytes", bytes),
    ] {
        r.register(name, help(name), fam);
    }
    for (name, fam) in [
        ("mgrpd_peer_traffic_bytes_per_second", rate),
        ("mgrpd_peer_held_riders", held),
        ("mgrpd_peer_held_bytes", held_bytes),
    ] {
        r.register(name, help(name), fam);
    }
    let info = Family::<Labels, Gauge<i64>>::default();
    for p in peers {
        let name = p.name.clone().unwrap_or_default();
        info.get_or_create(&vec![
            ("prefix", p.prefix.to_string()),
            ("neighbour", name.clone()),
            ("name", name),
            ("encap", p.encap.to_owned()),
            ("wire", p.wire.to_string()),
            ("key", p.key.to_owned()),
        ])
        .set(1);
    }
    r.register("mgrpd_peer_info", help("mgrpd_peer_info"), info);
    if let Some(c) = clock {
        let synced = Gauge::<i64>::default();
        synced.set(i64::from(c.synchronized));
        r.register(
            "mgrpd_clock_synchronized",
            help("mgrpd_clock_synchronized"),
            synced,
        );
        let err = GaugeF::default();
        err.set(c.max_error_s);
        r.register(
            "mgrpd_clock_maxerror_seconds",
            help("mgrpd_clock_maxerror_seconds"),
            err,
        );
    }
    let build = Family::<Labels, Gauge<i64>>::default();
    build
        .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_owned())])
        .set(1);
    r.register("mgrpd_build_info", help("mgrpd_build_info"), build);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    exposition::render(out, format)
}

/// The value of header `name` in an HTTP request's head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Binds the exporter (an error says the address is taken or not allowed).
pub(crate) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!("cannot serve metrics on {addr}: {e}; choose another --metrics address")
    })
}

/// Scrapes answered at once; a connection beyond them is closed unanswered.
const MAX_CONNECTIONS: usize = 16;

/// Longest an answer may take to write, after the 5 s its request may take to read.
const WRITE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves `/metrics` until shutdown.
pub(crate) async fn serve(
    listener: TcpListener,
    stats: Stats,
    config: crate::config::Config,
    life: Arc<Lifecycle>,
) {
    if let Ok(a) = listener.local_addr() {
        info!("metrics at http://{a}/metrics");
        if !a.ip().is_loopback() {
            warn!(
                "metrics on {a} answer every host that reaches it (peers, traffic rates, refusals); listen on 127.0.0.1 unless a Prometheus elsewhere scrapes it, and firewall the port to that Prometheus"
            );
        }
    }
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (mut conn, peer) = tokio::select! {
            c = listener.accept() => match c {
                Ok(c) => c,
                // Out of descriptors or buffers, or a connection aborted before it
                // was taken: all pass; a pause keeps a full descriptor table from
                // turning this loop into a spin.
                Err(e) => {
                    debug!("metrics: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = life.stopped() => return,
        };
        let stats = stats.clone();
        // The peers in force now: a reload may have changed them.
        let peers = peers_of(&config);
        if open.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            debug!("metrics: {peer} turned away, {MAX_CONNECTIONS} scrapes in flight");
            continue;
        }
        let open = open.clone();
        tokio::spawn(async move {
            answer(&mut conn, &stats, &peers).await;
            open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            debug!("metrics: answered {peer}");
        });
    }
}

/// Reads one request from `conn` and answers it.
async fn answer(conn: &mut tokio::net::TcpStream, stats: &Stats, peers: &[PeerInfo]) {
    // The request's head may come in pieces: read until its end (or 8 KB, or
    // 5 s, whichever first).
    let mut buf = Vec::with_capacity(512);
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        true
    });
    if !matches!(read.await, Ok(true)) {
        return;
    }
    let request = String::from_utf8_lossy(&buf);
    let (status, kind, body) =
        if request.starts_with("GET /metrics ") || request.starts_with("GET /metrics?") {
            let format = exposition::negotiate(header(&request, "accept"));
            (
                "200 OK",
                format.content_type(),
                render(
                    &stats.get(),
                    &stats.traffic(mgrp_rt::mono_now()).1,
                    peers,
                    mgrp_rt::clock::discipline(),
                    format,
                ),
            )
        } else {
            (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "mgrpd serves only GET /metrics here\n".to_string(),
            )
        };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(WRITE_LIMIT, async {
        if conn.write_all(head.as_bytes()).await.is_ok() {
            let _ = conn.write_all(body.as_bytes()).await;
        }
        let _ = conn.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer_b() -> PeerInfo {
        PeerInfo {
            prefix: "10.0.0.0/24".parse().unwrap(),
            name: Some("berlin".into()),
            encap: "udp",
            wire: 2,
            key: "own",
        }
    }

    #[test]
    fn counters_are_totals_and_levels_are_gauges() {
        let mut s = DaemonStats::default();
        s.daemon.tun_packets_in = 7;
        s.daemon.riders_refused_foreign_source = 2;
        s.daemon.trains_rejected = 5;
        s.daemon.trains_refused_not_peer = 1;
        s.daemon.trains_refused_other = 4;
        s.planner.riders_held = 3;
        s.reassembly.bytes_pending = 1500;
        let t = PeerTraffic {
            peer: "10.0.0.2".parse().unwrap(),
            packets: 3,
            bytes: 4500,
            bytes_per_second: 2250,
            held_riders: 1,
            held_bytes: 1500,
        };
        let clock = Discipline {
            synchronized: true,
            max_error_s: 0.25,
        };
        let text = render(&s, &[t], &[peer_b()], Some(clock), Format::OpenMetrics);
        for line in [
            "mgrpd_peer_traffic_packets_total{peer=\"10.0.0.2\",neighbour=\"berlin\",name=\"berlin\"} 3",
            "mgrpd_peer_traffic_bytes_total{peer=\"10.0.0.2\",neighbour=\"berlin\",name=\"berlin\"} 4500",
            "mgrpd_peer_traffic_bytes_per_second{peer=\"10.0.0.2\",neighbour=\"berlin\",name=\"berlin\"} 2250",
            "mgrpd_peer_held_riders{peer=\"10.0.0.2\",neighbour=\"berlin\",name=\"berlin\"} 1",
            "mgrpd_peer_held_bytes{peer=\"10.0.0.2\",neighbour=\"berlin\",name=\"berlin\"} 1500",
            "mgrpd_peer_info{prefix=\"10.0.0.0/24\",neighbour=\"berlin\",name=\"berlin\",encap=\"udp\",wire=\"2\",key=\"own\"} 1",
            "mgrpd_tun_packets_read_total 7",
            "mgrpd_riders_refused_total{reason=\"foreign_source\"} 2",
            "mgrpd_riders_refused_total{reason=\"malformed\"} 0",
            "mgrpd_trains_refused_total{reason=\"not_peer\"} 1",
            "mgrpd_trains_refused_total{reason=\"other\"} 4",
            "mgrpd_planner_riders_held 3",
            "mgrpd_reassembly_pending_bytes 1500",
            "mgrpd_clock_synchronized 1",
            "mgrpd_clock_maxerror_seconds 0.25",
            "# TYPE mgrpd_tun_packets_read counter",
            "# TYPE mgrpd_planner_riders_held gauge",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        assert!(
            text.contains(&format!(
                "mgrpd_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"));
        // The text format names a counter's HELP and TYPE by its sample.
        let plain = render(&s, &[], &[], None, Format::Text);
        assert!(
            plain.contains("# HELP mgrpd_tun_packets_read_total Packets read from the TUN device")
                && plain.contains("# TYPE mgrpd_tun_packets_read_total counter"),
            "{plain}"
        );
        assert!(
            !plain.contains("# EOF") && !plain.contains("mgrpd_clock"),
            "{plain}"
        );
    }

    /// Every counter the API gives is served: set alone, each changes the exposition
    /// (but `trains_rejected`, the sum of the `trains_refused_*` it is served as).
    #[test]
    fn every_api_counter_is_served() {
        let zero = render(&DaemonStats::default(), &[], &[], None, Format::Text);
        let fields = serde_json::to_value(DaemonStats::default()).unwrap();
        let mut seen = 0;
        for (part, counters) in fields.as_object().unwrap() {
            for name in counters.as_object().unwrap().keys() {
                if name == "trains_rejected" {
                    continue;
                }
                let mut v = fields.clone();
                v[part][name] = 1.into();
                let s: DaemonStats = serde_json::from_value(v).unwrap();
                let text = render(&s, &[], &[], None, Format::Text);
                assert_ne!(text, zero, "{part}.{name} is not served");
                seen += 1;
            }
        }
        assert!(seen > 70, "{seen}");
    }

    /// Names follow the guide: no family named twice, counters carry no `_total` of
    /// their own, every family has help, and labels are written where they are used.
    #[test]
    fn families_are_named_once_with_help() {
        let mut names: Vec<&str> = FAMILIES
            .iter()
            .map(|f| f.name)
            .chain(OTHER_FAMILIES.iter().map(|f| f.0))
            .collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a family named twice");
        for f in FAMILIES {
            assert!(f.name.starts_with("mgrpd_") && !f.name.ends_with("_total"));
            assert!(f.help.len() > 10, "{}", f.name);
            for (label, _) in f.series {
                if let Some((k, v)) = label {
                    assert!(
                        f.help.contains(&format!("by {k}")),
                        "{}: the help does not say it is by {k}",
                        f.name
                    );
                    assert!(f.help.contains(v), "{}: the help names no {v}", f.name);
                }
            }
        }
        let served = render(
            &DaemonStats::default(),
            &[PeerTraffic {
                peer: "10.0.0.9".parse().unwrap(),
                packets: 1,
                bytes: 60,
                bytes_per_second: 30,
                held_riders: 0,
                held_bytes: 0,
            }],
            &[peer_b()],
            Some(Discipline {
                synchronized: false,
                max_error_s: 16.0,
            }),
            Format::OpenMetrics,
        );
        let mut types: Vec<&str> = served
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        types.sort_unstable();
        assert_eq!(types, names, "served families and the tables differ");
    }

    #[test]
    fn headers_are_found_whatever_their_case() {
        let head = "GET /metrics HTTP/1.1\r\nHost: x\r\naccept: text/plain;q=0.5\r\n\r\n";
        assert_eq!(header(head, "Accept"), Some("text/plain;q=0.5"));
        assert_eq!(header(head, "cookie"), None);
    }
}
