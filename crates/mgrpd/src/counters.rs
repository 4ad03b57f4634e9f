//! The daemon's counters and its rate-limited warnings.
//!
//! Every data-path thread adds to the same atomic counters (never overwriting another
//! thread's), and the pacer publishes its own as a snapshot (`crate::exchange`); a
//! reader gets [`Stats`], one consistent copy of everything.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mgrp_core::MonoTime;
use mgrp_core::api::{DaemonCounters, DaemonStats, PeerTraffic};
use mgrp_core::stats::ReassemblyCounters;
use mgrp_core::traffic::{self, RateMeter};
use tracing::warn;

use crate::exchange::{Queues, Snapshot};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// The daemon's own counters, updated lock-free by the data-path threads.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(pub(crate) $name: AtomicU64,)*
            /// Application traffic per peer.
            pub(crate) traffic: TrafficTable,
        }

        impl Counters {
            /// A consistent-enough copy for reporting.
            pub fn snapshot(&self) -> DaemonCounters {
                // The rest is filled in by [`Stats::get`] from the pacer's queues and
                // snapshot.
                DaemonCounters {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    ..DaemonCounters::default()
                }
            }
        }
    };
}

counters!(
    tun_packets_in,
    tun_ignored,
    probes_sent,
    probe_send_errors,
    riders_resent_after_failed_probe,
    unchanged_sent,
    unchanged_send_errors,
    continuations_sent,
    continuation_send_errors,
    segmented_sends,
    segmented_datagrams,
    mgrp_received,
    mgrp_malformed,
    riders_delivered,
    rider_bytes_delivered,
    tun_write_errors,
    probes_delivered,
    probes_unclaimed,
    probes_dropped_slow_listener,
    trains_accepted,
    trains_refused_not_peer,
    trains_refused_rate_limit,
    trains_refused_other,
    mgrp_not_peer,
    riders_refused_malformed,
    riders_refused_foreign_source,
    riders_refused_foreign_destination,
    riders_refused_inner_mgrp,
    riders_refused_special_destination,
    mgrp_unauthenticated,
    mgrp_bad_tag,
    mgrp_replayed,
    mgrp_unexpected_auth,
    mgrp_reflected,
    mgrp_old_auth,
    peer_unreachable,
    riders_bypassed_peer_down,
    trains_spin_capped,
    riders_sent_direct,
    riders_bypassed_pacer_busy,
    probes_received,
    continuations_received,
    super_packets_sent,
    link_send_errors,
    tun_frames_dropped,
    probes_unstamped,
    probes_late,
    keepalives_sent,
    keepalive_send_errors,
    keepalives_received,
    peer_endpoint_changes,
    riders_relayed,
    peer_unreachable_reported,
    icmp_errors_unproven,
    trials_refused,
    tag_checks,
    socket_errors_refused,
    socket_errors_unreachable,
    socket_errors_prohibited,
    socket_errors_too_big,
    socket_errors_protocol,
    socket_errors_resources,
    socket_errors_other,
);

/// Why a socket call failed, as counted (`mgrpd_socket_errors_total{reason}`): what
/// an ICMP error from the path says (each reported once, by its error number), or what
/// the host itself lacked. Every reason is survived: a network can send any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SocketError {
    /// Port or protocol unreachable: nothing takes MGRP there (a peer's daemon gone).
    Refused,
    /// No route, host or network unreachable or down, time exceeded.
    Unreachable,
    /// A firewall's refusal: administratively prohibited, failed policy, reject
    /// route (`EACCES`, `EPERM`).
    Prohibited,
    /// Packet too big for the path (`EMSGSIZE`).
    TooBig,
    /// A parameter problem, a failed source route or a host isolated (`EPROTO`,
    /// `EOPNOTSUPP`, `ENONET`).
    Protocol,
    /// This host ran short of buffers or memory.
    Resources,
    /// Anything else a network or the kernel may report.
    Other,
}

impl SocketError {
    /// The reason of error number `errno`; `None` for the errors only a bug in this
    /// program makes (a closed or wrong descriptor, a bad address or argument), which
    /// a thread does not survive.
    pub(crate) fn of(errno: i32) -> Option<Self> {
        Some(match errno {
            libc::EBADF | libc::EFAULT | libc::EINVAL | libc::ENOTSOCK => return None,
            libc::ECONNREFUSED | libc::ENOPROTOOPT => Self::Refused,
            libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EHOSTDOWN | libc::ENETDOWN => {
                Self::Unreachable
            }
            libc::EACCES | libc::EPERM => Self::Prohibited,
            libc::EMSGSIZE => Self::TooBig,
            libc::EPROTO | libc::EOPNOTSUPP | libc::ENONET => Self::Protocol,
            libc::ENOBUFS | libc::ENOMEM => Self::Resources,
            _ => Self::Other,
        })
    }

    /// The reason of a failed call's error; `None` for a programming error (an error
    /// without an error number is one: the code made it).
    pub(crate) fn of_io(e: &std::io::Error) -> Option<Self> {
        e.raw_os_error().and_then(Self::of)
    }

    /// Its label in the metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Prohibited => "prohibited",
            Self::TooBig => "too_big",
            Self::Protocol => "protocol",
            Self::Resources => "resources",
            Self::Other => "other",
        }
    }
}

impl Counters {
    /// Counts one socket error of reason `r`.
    pub(crate) fn socket_error(&self, r: SocketError) {
        bump(match r {
            SocketError::Refused => &self.socket_errors_refused,
            SocketError::Unreachable => &self.socket_errors_unreachable,
            SocketError::Prohibited => &self.socket_errors_prohibited,
            SocketError::TooBig => &self.socket_errors_too_big,
            SocketError::Protocol => &self.socket_errors_protocol,
            SocketError::Resources => &self.socket_errors_resources,
            SocketError::Other => &self.socket_errors_other,
        });
    }
}

/// Adds one to a counter.
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Peers whose traffic is metered; further ones are not (a destination routed into
/// the TUN without a peer prefix is its own peer, so this bounds memory).
const MAX_METERED_PEERS: usize = 4096;

/// The application traffic the TUN reader routed to each peer.
#[derive(Debug, Default)]
pub(crate) struct TrafficTable(Mutex<BTreeMap<IpAddr, RateMeter>>);

impl TrafficTable {
    /// Counts `packets` packets of `bytes` IP bytes for `peer`, read at `now`.
    pub(crate) fn add(&self, now: MonoTime, peer: IpAddr, packets: u64, bytes: u64) {
        let mut t = mgrp_rt::lock(&self.0);
        if let Some(m) = t.get_mut(&peer) {
            m.add(now, packets, bytes);
        } else if t.len() < MAX_METERED_PEERS {
            t.entry(peer).or_default().add(now, packets, bytes);
        }
    }

    /// Every metered peer at `now`, with what the pacer last said it holds for it.
    fn read(&self, now: MonoTime, held: &[(IpAddr, u64, u64)]) -> Vec<PeerTraffic> {
        let t = mgrp_rt::lock(&self.0);
        let mut out: Vec<PeerTraffic> = t
            .iter()
            .map(|(peer, m)| PeerTraffic {
                peer: *peer,
                packets: m.packets(),
                bytes: m.bytes(),
                bytes_per_second: m.bytes_per_second(now).round() as u64,
                held_riders: 0,
                held_bytes: 0,
            })
            .collect();
        drop(t);
        for &(peer, riders, bytes) in held {
            if let Ok(i) = out.binary_search_by_key(&peer, |p| p.peer) {
                out[i].held_riders = riders;
                out[i].held_bytes = bytes;
            }
        }
        out
    }
}

/// The reassembly counters of each receiver: IPv4 (and the loopback path) and IPv6,
/// one slot each, so that neither overwrites the other's.
#[derive(Debug, Default)]
pub(crate) struct ReassemblySlots(Mutex<[ReassemblyCounters; 4]>);

impl ReassemblySlots {
    /// Publishes the counters of the receiver of one family (`v6`) and socket
    /// (`udp`, else raw).
    pub(crate) fn publish(&self, v6: bool, udp: bool, c: ReassemblyCounters) {
        let slot = usize::from(v6) + 2 * usize::from(udp);
        mgrp_rt::lock(&self.0)[slot] = c;
    }

    fn sum(&self) -> ReassemblyCounters {
        let per = *mgrp_rt::lock(&self.0);
        let mut sum = per[0];
        for p in &per[1..] {
            sum += p;
        }
        sum
    }
}

/// Where all counters are read: the threads' counters, the pacer's snapshot and the
/// receivers' reassembly counters.
#[derive(Debug, Clone)]
pub struct Stats {
    pub(crate) counters: Arc<Counters>,
    pub(crate) queues: Arc<Queues>,
    pub(crate) reassembly: Arc<ReassemblySlots>,
}

impl Stats {
    /// All counters.
    pub fn get(&self) -> DaemonStats {
        let Snapshot { planner, endpoint } = self.queues.snapshot();
        let mut daemon = self.counters.snapshot();
        // Counted by the endpoint, which decides it, and by the pacer.
        daemon.riders_bypassed_too_many_destinations =
            endpoint.riders_bypassed_too_many_destinations;
        daemon.probes_displaced = endpoint.probes_displaced;
        daemon.outputs_done_by_pacer = self.queues.outputs_done_by_pacer.load(Ordering::Relaxed);
        // Every refusal is counted by its reason; the total is their sum.
        daemon.trains_rejected = daemon.trains_refused_not_peer
            + daemon.trains_refused_rate_limit
            + daemon.trains_refused_other;
        DaemonStats {
            daemon,
            planner,
            reassembly: self.reassembly.sum(),
        }
    }

    /// The application traffic to each peer at `now`, and the window of its rates.
    pub fn traffic(&self, now: MonoTime) -> (Duration, Vec<PeerTraffic>) {
        let held = self.queues.held();
        (traffic::WINDOW, self.counters.traffic.read(now, &held))
    }
}

/// A warning written at most once a second, saying how many it skipped.
#[derive(Debug, Default)]
pub(crate) struct LimitedLog(Mutex<(Option<Instant>, u64)>);

impl LimitedLog {
    pub(crate) fn warn(&self, what: fmt::Arguments<'_>) {
        let now = Instant::now();
        let mut state = mgrp_rt::lock(&self.0);
        let (last, skipped) = &mut *state;
        if last.is_some_and(|l| now.duration_since(l) < Duration::from_secs(1)) {
            *skipped += 1;
            return;
        }
        *last = Some(now);
        let skipped = std::mem::take(skipped);
        drop(state);
        warn!("{what} ({skipped} more since the last report)");
    }
}
