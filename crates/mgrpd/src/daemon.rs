//! The daemon's data path and its threads.
//!
//! - The **TUN reader** reads application packets and hands them, in batches, to the
//!   pacer through a lock-free queue (or, with on-demand hold while no train is queued
//!   anywhere, sends them on at once).
//! - The **pacer** (`crate::pacer`, a real-time thread when permitted) owns the
//!   endpoint (`mgrp_core::endpoint`) and sends the probes; the **sender** thread does
//!   what the endpoint decides besides: riders sent unchanged, continuations, reports,
//!   route changes.
//! - The **receiver** reads MGRP packets with kernel timestamps, reassembles riders
//!   and writes them to the TUN, and hands probes to the listening tools.
//!
//! The pacer waits for no other thread: everything reaches it through queues.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mgrp_core::WallTime;
use mgrp_core::api::{DaemonCounters, DaemonStats, ReceivedProbe, Response};
use mgrp_core::auth::{self, AuthError, ReplayWindow};
use mgrp_core::endpoint::SubmitError as EndpointRefusal;
use mgrp_core::peers::{Peer, Prefix, Refusal};
use mgrp_core::planner::{Transaction, Transmit};
use mgrp_core::ratelimit::{OverBudget, TrainBudget};
use mgrp_core::reassembly::{ChunkOutcome, Reassembler};
use mgrp_core::stats::{ReassemblyCounters, TransactionReport};
use mgrp_core::wire::{self, Kind, Packet};
use socket2::Socket;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};
use tun_rs::SyncDevice;

use crate::config::Config;
use crate::pacer::{Control, Queues, RiderBatch, Snapshot};
use crate::sys;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// The daemon's own counters, updated lock-free by the data-path threads.
        #[derive(Debug, Default)]
        pub struct Counters { $(pub(crate) $name: AtomicU64,)* }

        impl Counters {
            /// A consistent-enough copy for reporting.
            pub fn snapshot(&self) -> DaemonCounters {
                // The rest is filled in by `Shared::stats` from the pacer's queues and
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
    mgrp_received,
    mgrp_malformed,
    riders_delivered,
    rider_bytes_delivered,
    tun_write_errors,
    probes_delivered,
    probes_unclaimed,
    probes_dropped_slow_listener,
    trains_accepted,
    trains_rejected,
    trains_refused_not_peer,
    trains_refused_rate_limit,
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
    peer_unreachable,
    riders_bypassed_peer_down,
    trains_spin_capped,
    riders_sent_direct,
    riders_bypassed_pacer_busy,
    probes_received,
    continuations_received,
);

/// How long riders to a peer that answered "protocol unreachable" bypass the
/// planners (sent unchanged) before piggybacking is tried again.
const PEER_DOWN_BACKOFF: Duration = Duration::from_secs(5);

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A route change the endpoint asks for, for the route manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteEvent {
    /// Route traffic for this peer (and the destinations it carries) into the
    /// tunnel, then say so with [`Shared::routed`]: its trains wait until then.
    In(IpAddr),
    /// Traffic for this peer no longer needs to enter the tunnel.
    Out(IpAddr),
}

/// A listener registered by an API connection.
#[derive(Debug)]
pub(crate) struct Listener {
    pub(crate) conn: u64,
    pub(crate) source: Option<IpAddr>,
    pub(crate) tx: mpsc::Sender<crate::server::Outgoing>,
}

/// Everything the threads share.
pub struct Shared {
    pub(crate) config: Config,
    /// The queues to and from the pacer.
    pub(crate) queues: Queues,
    pub(crate) counters: Counters,
    /// Set once, by [`Self::begin_shutdown`]: the threads poll it, the API's tasks
    /// wait on `stopping`, which changes at the same moment.
    pub(crate) shutdown: AtomicBool,
    stopping: tokio::sync::watch::Sender<bool>,
    pub(crate) listeners: Mutex<HashMap<u16, Vec<Listener>>>,
    /// Reassembly counters of each receiver: IPv4 (and the loopback path) and IPv6.
    pub(crate) reassembly: Mutex<[ReassemblyCounters; 2]>,
    malformed_log: LimitedLog,
    refused_log: LimitedLog,
    not_peer_log: LimitedLog,
    auth_log: LimitedLog,
    bounds_log: LimitedLog,
    /// The counter of the next authenticated packet; starts at the clock's nanoseconds
    /// so a restarted daemon's packets are not taken for replays.
    tx_counter: AtomicU64,
    /// Replay windows of the peers, used by the receiver threads only.
    replay: Mutex<HashMap<IpAddr, ReplayWindow>>,
    /// Rate budgets of the API's users (by uid) and of all of them, used by the API
    /// server only.
    budgets: Mutex<Budgets>,
    /// Peers that answered MGRP with an ICMP error, until when they count as down.
    /// Used by the liveness threads and the TUN reader, never by the pacer.
    down: Mutex<HashMap<IpAddr, mgrp_core::MonoTime>>,
    /// Whether `down` may hold a peer (changed only with its lock held).
    any_down: AtomicBool,
    io: Io,
    /// Whether probes get kernel transmit stamps.
    kernel_stamps: bool,
    /// Kernel transmit stamps read from the probe sockets' error queues, by id
    /// ([`tx_id`]), until a report takes them.
    departures: Mutex<HashMap<u32, WallTime>>,
    pub(crate) route_events: mpsc::UnboundedSender<RouteEvent>,
    fatal: Mutex<Option<oneshot::Sender<String>>>,
}

/// Where the data path's packets go.
enum Io {
    /// The real thing: a TUN device and raw sockets.
    Kernel {
        tun: Arc<SyncDevice>,
        /// Whether TUN frames carry a virtio-net header (offloads on).
        vnet: bool,
        /// Probes leave through these, and only probes: with kernel transmit stamps on,
        /// each stamp's id names its probe.
        probe4: Socket,
        probe6: Option<Socket>,
        /// Continuations leave through these.
        mgrp4: Socket,
        mgrp6: Option<Socket>,
        raw4: Socket,
        raw6: Option<Socket>,
    },
    /// In-process: MGRP packets the pacer sends are received at once by this same
    /// daemon, as if from 127.0.0.1; riders are counted instead of written to a TUN.
    /// Runs without privileges, for testing the API and the pipeline end to end.
    Loopback(Box<Mutex<Reassembler<IpAddr>>>),
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("tun", &self.config.tun)
            .finish_non_exhaustive()
    }
}

/// A train accepted by [`Shared::submit`].
#[derive(Debug)]
pub struct Submitted {
    /// Its transaction id.
    pub id: u32,
    /// Where its report arrives once it was sent (or cancelled).
    pub report: oneshot::Receiver<TransactionReport>,
}

/// Why a train was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The train breaks a rule.
    #[error("{0}")]
    Invalid(String),
    /// Too many trains queued.
    #[error("{0} trains are queued already; wait for reports before submitting more")]
    Busy(usize),
    /// The daemon is stopping.
    #[error("mgrpd is shutting down")]
    ShuttingDown,
    /// Over the user's or the total rate limit.
    #[error("{0}")]
    RateLimited(String),
}

impl Shared {
    /// Opens the sockets the data path needs.
    pub fn new(
        config: Config,
        tun: Arc<SyncDevice>,
        events: mpsc::UnboundedSender<RouteEvent>,
    ) -> anyhow::Result<Self> {
        let mark = config.fwmark;
        let mgrp4 = sys::mgrp_send_socket(false, config.protocol, mark).map_err(|e| {
            anyhow::anyhow!(
                "cannot open a raw IPv4 socket for protocol {}: {e}; run mgrpd as root (it needs CAP_NET_RAW)",
                config.protocol
            )
        })?;
        let probe4 = sys::mgrp_send_socket(false, config.protocol, mark)?;
        let probe6 = sys::mgrp_send_socket(true, config.protocol, mark).ok();
        let tx_ids = config.kernel_departures && sys::kernel_takes_tx_ids();
        let stamped = tx_ids
            && std::iter::once(&probe4)
                .chain(&probe6)
                .try_for_each(sys::enable_tx_stamps)
                .map_err(|e| warn!("cannot enable kernel transmit stamps: {e}; reports carry the daemon's stamps only"))
                .is_ok();
        if config.kernel_departures && !tx_ids {
            warn!(
                "this kernel cannot name transmit stamps per send (SCM_TS_OPT_ID, Linux 6.13): reports carry the daemon's departure stamps only"
            );
        }
        let raw4 = sys::raw_ip_socket(false, mark).map_err(|e| {
            anyhow::anyhow!("cannot open an IPPROTO_RAW socket: {e}; run mgrpd as root")
        })?;
        let io = Io::Kernel {
            vnet: config.tun_offload,
            tun,
            probe4,
            probe6,
            mgrp4,
            mgrp6: sys::mgrp_send_socket(true, config.protocol, mark).ok(),
            raw4,
            raw6: sys::raw_ip_socket(true, mark).ok(),
        };
        let mut shared = Self::with_io(config, io, events)?;
        shared.kernel_stamps = stamped;
        Ok(shared)
    }

    /// A daemon whose data path loops back in-process (see `Io::Loopback`): no TUN, no
    /// raw sockets, no privileges needed.
    /// The loopback addresses are its peers: it receives what it sends.
    pub fn loopback(
        mut config: Config,
        events: mpsc::UnboundedSender<RouteEvent>,
    ) -> anyhow::Result<Self> {
        for lo in [
            Prefix::host(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            Prefix::host(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
        ] {
            config.peers.add_peer(Peer::new(lo));
        }
        let reasm = Reassembler::new(config.reassembly);
        Self::with_io(config, Io::Loopback(Box::new(Mutex::new(reasm))), events)
    }

    fn with_io(
        config: Config,
        io: Io,
        events: mpsc::UnboundedSender<RouteEvent>,
    ) -> anyhow::Result<Self> {
        let budgets = Mutex::new(Budgets::new(&config));
        let queues = Queues::new(&config)
            .map_err(|e| anyhow::anyhow!("cannot create the pacer's eventfds: {e}"))?;
        Ok(Self {
            config,
            queues,
            counters: Counters::default(),
            shutdown: AtomicBool::new(false),
            stopping: tokio::sync::watch::Sender::new(false),
            listeners: Mutex::new(HashMap::new()),
            reassembly: Mutex::new([ReassemblyCounters::default(); 2]),
            refused_log: LimitedLog::default(),
            not_peer_log: LimitedLog::default(),
            auth_log: LimitedLog::default(),
            bounds_log: LimitedLog::default(),
            tx_counter: AtomicU64::new(sys::wall_now().as_nanos()),
            budgets,
            down: Mutex::new(HashMap::new()),
            any_down: AtomicBool::new(false),
            replay: Mutex::new(HashMap::new()),
            malformed_log: LimitedLog::default(),
            io,
            kernel_stamps: false,
            departures: Mutex::new(HashMap::new()),
            route_events: events,
            fatal: Mutex::new(None),
        })
    }

    /// A channel on which the daemon hears that a data-path thread died.
    pub fn fatal_channel(&self) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        *self.fatal.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        rx
    }

    /// Reports that a data-path thread cannot go on; the daemon shuts down.
    pub(crate) fn fatal(&self, why: String) {
        if self.shutdown.load(Ordering::Relaxed) {
            return;
        }
        tracing::error!("{why}; mgrpd stops");
        if let Some(tx) = self
            .fatal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(why);
        }
    }

    /// The TUN device, unless the data path loops back.
    pub fn tun(&self) -> Option<&Arc<SyncDevice>> {
        match &self.io {
            Io::Kernel { tun, .. } => Some(tun),
            Io::Loopback(_) => None,
        }
    }

    /// All counters.
    pub fn stats(&self) -> DaemonStats {
        let Snapshot { planner, endpoint } = self.queues.snapshot();
        let mut daemon = self.counters.snapshot();
        // Counted by the endpoint, which decides it, and by the pacer.
        daemon.riders_bypassed_too_many_destinations =
            endpoint.riders_bypassed_too_many_destinations;
        daemon.outputs_done_by_pacer = self.queues.outputs_done_by_pacer.load(Ordering::Relaxed);
        DaemonStats {
            daemon,
            planner,
            reassembly: {
                let per = *self
                    .reassembly
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let mut sum = per[0];
                sum += &per[1];
                sum
            },
        }
    }

    /// Refuses trains to a host that is no peer (it would drop the probes, and with
    /// route on demand the host's traffic to it would be diverted into probes).
    pub fn check_peer(&self, peer: IpAddr) -> Result<(), SubmitError> {
        if self.config.peers.is_peer(peer) {
            return Ok(());
        }
        bump(&self.counters.trains_rejected);
        bump(&self.counters.trains_refused_not_peer);
        Err(SubmitError::Invalid(format!(
            "{peer} is not a peer of this mgrpd: probes would go to a host that drops them; add it with --peer or a --route that covers it"
        )))
    }

    /// Charges a train of `probes` probes and `bytes` bytes to user `uid` and to the
    /// total, or refuses it (nothing is charged then) with when to retry.
    pub fn charge(&self, uid: Option<u32>, probes: u64, bytes: u64) -> Result<(), SubmitError> {
        let now = sys::mono_now();
        let mut b = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let Budgets {
            per_user,
            total,
            user_rate,
            burst,
        } = &mut *b;
        let user = per_user
            .entry(uid.unwrap_or(u32::MAX))
            .or_insert_with(|| TrainBudget::new(user_rate.0, burst.0, user_rate.1, burst.1));
        let who = uid.map_or_else(|| "this client".to_string(), |u| format!("user {u}"));
        let refused = match (
            user.check(now, probes, bytes),
            total.check(now, probes, bytes),
        ) {
            (Ok(()), Ok(())) => None,
            (Err(e), _) => Some((e, who, "-per-user")),
            (_, Err(e)) => Some((e, "all users together".to_string(), "")),
        };
        if let Some((e, who, key)) = refused {
            bump(&self.counters.trains_rejected);
            bump(&self.counters.trains_refused_rate_limit);
            let (what, wait) = match e {
                OverBudget::Probes(w) => (format!("limits.probes-per-second{key}"), w),
                OverBudget::Bytes(w) => (format!("limits.probe-bytes-per-second{key}"), w),
            };
            let when = if wait == Duration::MAX {
                "never: the train is larger than the burst; split it".to_string()
            } else {
                format!("in {} ms", wait.as_millis().max(1))
            };
            return Err(SubmitError::RateLimited(format!(
                "{who} reached the rate limit ({what}) with a train of {probes} probes, {bytes} bytes; retry {when}"
            )));
        }
        user.take(probes, bytes);
        total.take(probes, bytes);
        drop(b);
        Ok(())
    }

    /// Queues `client`'s train; the report arrives on the returned channel once it was
    /// sent.
    pub async fn submit(
        &self,
        client: u64,
        destination: IpAddr,
        tx: Transaction,
    ) -> Result<Submitted, SubmitError> {
        let limits = &self.config;
        if tx.probes.len() > limits.max_probes_per_train {
            bump(&self.counters.trains_rejected);
            return Err(SubmitError::Invalid(format!(
                "train of {} probes exceeds the limit of {} (limits.max-probes-per-train)",
                tx.probes.len(),
                limits.max_probes_per_train
            )));
        }
        if let Some((i, p)) = tx
            .probes
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, p)| p.gap < limits.min_gap)
        {
            bump(&self.counters.trains_rejected);
            return Err(SubmitError::Invalid(format!(
                "probe {i} has a gap of {:?}, below the smallest allowed {:?} (limits.min-gap)",
                p.gap, limits.min_gap
            )));
        }
        if let Some((i, p)) = tx
            .probes
            .iter()
            .enumerate()
            .find(|(_, p)| p.gap > limits.max_gap)
        {
            bump(&self.counters.trains_rejected);
            return Err(SubmitError::Invalid(format!(
                "probe {i} has a gap of {:?}, above the largest allowed {:?} (limits.max-gap)",
                p.gap, limits.max_gap
            )));
        }
        let total: Duration = tx.probes.iter().map(|p| p.gap).sum();
        if total > limits.max_train_duration {
            bump(&self.counters.trains_rejected);
            return Err(SubmitError::Invalid(format!(
                "the train's gaps add up to {total:?}, more than {:?} (limits.max-train-duration)",
                limits.max_train_duration
            )));
        }
        let peer = self.config.peer_of(destination);
        self.check_peer(peer)?;
        if self.shutdown.load(Ordering::SeqCst) {
            return Err(SubmitError::ShuttingDown);
        }
        let (reply, accepted) = oneshot::channel();
        let (done, report) = oneshot::channel();
        let control = Control::Submit {
            client,
            peer,
            tx,
            reply,
            report: done,
        };
        if self.queues.push_control(control).is_err() {
            bump(&self.counters.trains_rejected);
            return Err(SubmitError::Busy(self.config.max_queued_trains));
        }
        let refused = match accepted.await {
            Ok(Ok(id)) => {
                bump(&self.counters.trains_accepted);
                return Ok(Submitted { id, report });
            }
            Ok(Err(e)) => e,
            // The pacer stopped before it took the train.
            Err(_) => EndpointRefusal::ShuttingDown,
        };
        bump(&self.counters.trains_rejected);
        Err(match refused {
            EndpointRefusal::Busy(n) | EndpointRefusal::ClientBusy(n) => SubmitError::Busy(n),
            EndpointRefusal::Invalid(e) => SubmitError::Invalid(e.to_string()),
            EndpointRefusal::ShuttingDown => SubmitError::ShuttingDown,
        })
    }

    /// Cancels `client`'s train `id` if it has not finished; its submitter gets a
    /// report that says so.
    pub fn cancel(&self, client: u64, id: u32) {
        // A full queue means a busy pacer; the train then runs to its end.
        let _ = self.queues.push_control(Control::Cancel { client, id });
    }

    /// The route asked for with [`RouteEvent::In`] is in place (or could not be put
    /// in place): trains to `peer` may run.
    pub fn routed(&self, peer: IpAddr) {
        let mut control = Control::Routed(peer);
        // Its trains wait for this, so it must get through: the queue holds far more
        // than the trains there can be, so a full one drains within moments.
        for _ in 0..1000 {
            match self.queues.push_control(control) {
                Ok(()) => return,
                Err(c) => control = c,
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        warn!("could not tell the pacer that {peer} is routed; its trains wait until cancelled");
    }

    /// Asks every thread to stop; the pacer flushes held riders unchanged first.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.stopping.send_replace(true);
        self.queues.wake_pacer();
    }

    /// Returns once [`Self::begin_shutdown`] was called (at once if it was).
    pub(crate) async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        // Only an error if the sender is gone, which it is not while `self` lives.
        let _ = rx.wait_for(|&stopping| stopping).await;
    }

    /// Sends probe `seq` of train `transaction` (on the pacer thread).
    pub(crate) fn send_probe(
        &self,
        peer: IpAddr,
        packet: &[u8],
        transaction: u32,
        seq: u16,
    ) -> std::io::Result<usize> {
        let Io::Kernel { probe4, probe6, .. } = &self.io else {
            return self.send_mgrp(peer, packet);
        };
        let socket = match (peer, probe6) {
            (IpAddr::V4(_), _) => probe4,
            (IpAddr::V6(_), Some(s)) => s,
            (IpAddr::V6(_), None) => return Err(std::io::Error::other("no IPv6 raw socket")),
        };
        let dst = sys::raw_dest(peer);
        if self.kernel_stamps {
            sys::send_with_tx_id(socket, packet, &dst, tx_id(transaction, seq))
        } else {
            socket.send_to(packet, &dst)
        }
    }

    /// Sends an MGRP packet that is not a probe.
    pub(crate) fn send_mgrp(&self, peer: IpAddr, packet: &[u8]) -> std::io::Result<usize> {
        match &self.io {
            Io::Kernel { mgrp4, mgrp6, .. } => {
                let dst = sys::raw_dest(peer);
                match (peer, mgrp6) {
                    (IpAddr::V4(_), _) => mgrp4.send_to(packet, &dst),
                    (IpAddr::V6(_), Some(s)) => s.send_to(packet, &dst),
                    (IpAddr::V6(_), None) => Err(std::io::Error::other("no IPv6 raw socket")),
                }
            }
            Io::Loopback(reasm) => {
                let mut reasm = reasm.lock().unwrap_or_else(PoisonError::into_inner);
                // Received as if from the peer it was sent to, so each peer's riders keep
                // their own ids apart in reassembly.
                let from = peer;
                let ip_len = packet.len() + if peer.is_ipv4() { 20 } else { 40 };
                // One reassembler serves both families here: one counter slot.
                self.handle_mgrp(
                    &mut reasm,
                    false,
                    from,
                    Some(peer),
                    packet,
                    ip_len,
                    sys::wall_now(),
                );
                Ok(packet.len())
            }
        }
    }

    fn send_unchanged(&self, pkt: &[u8], dst: IpAddr) -> std::io::Result<usize> {
        match &self.io {
            Io::Kernel { raw4, raw6, .. } => match (dst, raw6) {
                (IpAddr::V4(_), _) => raw4.send_to(pkt, &sys::raw_dest(dst)),
                (IpAddr::V6(_), Some(s)) => s.send_to(pkt, &sys::raw_dest(dst)),
                (IpAddr::V6(_), None) => Err(std::io::Error::other("no IPv6 raw socket")),
            },
            Io::Loopback(_) => Ok(pkt.len()),
        }
    }

    fn write_tun(&self, rider: &[u8]) -> std::io::Result<usize> {
        match &self.io {
            Io::Kernel {
                tun, vnet: false, ..
            } => tun.send(rider),
            Io::Kernel {
                tun, vnet: true, ..
            } => {
                // With offloads every frame starts with a virtio-net header; all zeros
                // says: no segmentation, checksum already complete. Written with the
                // rider in one writev, so the rider is not copied.
                const NO_OFFLOAD: [u8; tun_rs::VIRTIO_NET_HDR_LEN] =
                    [0; tun_rs::VIRTIO_NET_HDR_LEN];
                let frame = [
                    std::io::IoSlice::new(&NO_OFFLOAD),
                    std::io::IoSlice::new(rider),
                ];
                tun.send_vectored(&frame)
                    .map(|n| n.saturating_sub(tun_rs::VIRTIO_NET_HDR_LEN))
            }
            Io::Loopback(_) => Ok(rider.len()),
        }
    }

    pub(crate) fn send_transmit(&self, peer: IpAddr, t: Transmit) {
        match t {
            Transmit::Unchanged(pkt) => {
                let Some(dst) = sys::packet_destination(&pkt) else {
                    return;
                };
                match self.send_unchanged(&pkt, dst) {
                    Ok(_) => bump(&self.counters.unchanged_sent),
                    Err(e) => {
                        bump(&self.counters.unchanged_send_errors);
                        debug!("sending a rider unchanged to {dst} failed: {e}");
                    }
                }
            }
            Transmit::Continuation(mut pkt) => {
                wire::stamp_sender_time(&mut pkt, sys::wall_now());
                self.seal(peer, &mut pkt);
                match self.send_mgrp(peer, &pkt) {
                    Ok(_) => bump(&self.counters.continuations_sent),
                    Err(e) => {
                        bump(&self.counters.continuation_send_errors);
                        debug!("sending a continuation to {peer} failed: {e}");
                    }
                }
            }
        }
    }
}

/// Whether a packet read from the TUN is kernel housekeeping rather than traffic to a
/// peer (multicast, link-local, unspecified).
fn is_housekeeping(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.is_unspecified(),
        IpAddr::V6(a) => {
            a.is_multicast() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// The TUN reader thread (does nothing when the data path loops back). With TUN
/// offloads one read returns a TCP super-packet, split here into its segments: one
/// system call for up to 64 KB of traffic.
pub fn run_tun_reader(shared: &Shared) {
    let Some(tun) = shared.tun() else { return };
    let mut original = vec![0u8; tun_rs::VIRTIO_NET_HDR_LEN + 65_535];
    let seg = usize::from(shared.config.mtu) + 64;
    let mut bufs = vec![vec![0u8; seg]; tun_rs::IDEAL_BATCH_SIZE];
    let mut sizes = vec![0usize; tun_rs::IDEAL_BATCH_SIZE];
    loop {
        let n = match tun.recv_multiple(&mut original, &mut bufs, &mut sizes, 0) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if shared.shutdown.load(Ordering::Relaxed) {
                    return;
                }
                if e.raw_os_error().is_some() {
                    // Traffic routed into a TUN nobody reads would be black-holed:
                    // better to stop, which takes the TUN and its routes away.
                    shared.fatal(format!("reading the TUN failed: {e}"));
                    return;
                }
                // A malformed frame from the kernel costs that frame, not the reader.
                warn!("dropped a TUN frame: {e}");
                continue;
            }
        };
        shared.handle_tun_packets(bufs.iter().zip(&sizes).take(n).map(|(b, &len)| &b[..len]));
    }
}

impl Shared {
    /// Takes in one packet read from the TUN (or, with a loopback data path, handed in
    /// by a test): queues it with its peer's planner and sends whatever is due.
    pub fn handle_tun_packet(&self, pkt: &[u8]) {
        self.handle_tun_packets(std::iter::once(pkt));
    }

    /// Takes in a batch of packets read from the TUN under one lock.
    pub fn handle_tun_packets<'a>(&self, pkts: impl Iterator<Item = &'a [u8]>) {
        let now = sys::mono_now();
        let down = self.peers_down(now);
        // With on-demand hold and no train anywhere the pacer would release them at
        // once; after shutdown it takes none.
        let direct = !self.queues.riders_wanted() || self.shutdown.load(Ordering::Relaxed);
        let mut riders = Vec::new();
        for pkt in pkts {
            bump(&self.counters.tun_packets_in);
            let Some(dst) = sys::packet_destination(pkt).filter(|d| !is_housekeeping(*d)) else {
                bump(&self.counters.tun_ignored);
                continue;
            };
            let peer = self.config.peer_of(dst);
            if down.contains(&peer) {
                // Its probes are dropped on arrival: riders would be lost with them.
                bump(&self.counters.riders_bypassed_peer_down);
                self.send_transmit(peer, Transmit::Unchanged(Bytes::copy_from_slice(pkt)));
                continue;
            }
            if direct {
                bump(&self.counters.riders_sent_direct);
                self.send_transmit(peer, Transmit::Unchanged(Bytes::copy_from_slice(pkt)));
                continue;
            }
            riders.push((peer, Bytes::copy_from_slice(pkt)));
        }
        if riders.is_empty() {
            return;
        }
        if let Err(batch) = self.queues.push_riders(RiderBatch { at: now, riders }) {
            // The pacer is behind: these go as they came rather than wait or be lost.
            for (peer, data) in batch.riders {
                bump(&self.counters.riders_bypassed_pacer_busy);
                self.send_transmit(peer, Transmit::Unchanged(data));
            }
        }
    }
}

impl Shared {
    /// Logs, at most once a second, that a bound was reached (each is also counted).
    pub(crate) fn bound_reached(&self, what: fmt::Arguments<'_>) {
        self.bounds_log.warn(what);
    }

    /// The peers counted as down at `now`.
    /// Costs one atomic load on the rider path while every peer is up.
    fn peers_down(&self, now: mgrp_core::MonoTime) -> Vec<IpAddr> {
        if !self.any_down.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        down.retain(|_, until| *until > now);
        if down.is_empty() {
            self.any_down.store(false, Ordering::Release);
        }
        down.keys().copied().collect()
    }

    /// Watches the error queues of the IPv4 or IPv6 MGRP sockets until shutdown: kernel
    /// transmit stamps of probes are kept for their reports (see
    /// [`Self::complete_report`]), and an ICMP "destination unreachable" (or, over
    /// IPv6, "unrecognised next header") about an MGRP packet means its peer takes no
    /// MGRP any more (its mgrpd died), so riders to it stop riding for a while.
    pub fn run_liveness(&self, v6: bool) {
        let fds = match &self.io {
            Io::Kernel {
                probe4,
                mgrp4,
                probe6,
                mgrp6,
                ..
            } => match (v6, probe6, mgrp6) {
                (false, _, _) => [probe4.as_raw_fd(), mgrp4.as_raw_fd()],
                (true, Some(p), Some(m)) => [p.as_raw_fd(), m.as_raw_fd()],
                (true, _, _) => return,
            },
            Io::Loopback(_) => return,
        };
        while !self.shutdown.load(Ordering::Relaxed) {
            let ready = sys::wait_errors(fds, Duration::from_millis(200));
            for (fd, _) in fds.iter().zip(ready).filter(|(_, r)| *r) {
                if let Err(e) = self.drain_errors(*fd, v6) {
                    warn!(
                        "reading the MGRP sockets' error queues failed: {e}; peer liveness is no longer watched"
                    );
                    return;
                }
            }
        }
    }

    /// Takes everything off one MGRP socket's error queue.
    fn drain_errors(&self, fd: std::os::fd::RawFd, v6: bool) -> std::io::Result<()> {
        while let Some(e) = sys::next_error(fd)? {
            match e {
                sys::QueuedError::Icmp(e) => self.icmp_error(e, v6),
                sys::QueuedError::Departed { id, at } => {
                    let mut d = self
                        .departures
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if d.len() >= MAX_UNCLAIMED_DEPARTURES {
                        // Stamps of probes whose reports left without them (they came
                        // too late); 64 Ki of them cover far more than any train.
                        d.clear();
                    }
                    d.insert(id, at);
                }
                sys::QueuedError::Other => {}
            }
        }
        Ok(())
    }

    fn icmp_error(&self, e: sys::IcmpError, v6: bool) {
        let unreachable = if v6 {
            e.icmp_type == 1 || (e.icmp_type == 4 && e.icmp_code == 1)
        } else {
            e.icmp_type == 3
        };
        if !unreachable {
            return;
        }
        bump(&self.counters.peer_unreachable);
        let until = sys::mono_now().saturating_add(PEER_DOWN_BACKOFF);
        let was_up = {
            let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
            self.any_down.store(true, Ordering::Release);
            down.insert(e.destination, until).is_none()
        };
        if was_up {
            warn!(
                "peer {} answered MGRP with ICMP type {} code {}: its mgrpd is gone; its riders go unchanged for {:?}",
                e.destination, e.icmp_type, e.icmp_code, PEER_DOWN_BACKOFF
            );
        }
    }

    /// Makes a report final before its tool gets it (on the sender thread): the
    /// kernel's transmit stamp of each probe that left, and the count of late probes.
    /// The stamps are on the error queue by the time the send returns (the device
    /// stamps in its transmit function); what the liveness thread has not read yet is
    /// read here, for at most [`STAMP_WAIT`].
    pub(crate) fn complete_report(&self, report: &mut TransactionReport) {
        if self.kernel_stamps {
            let started = Instant::now();
            loop {
                let missing = {
                    let mut d = self
                        .departures
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    let mut missing = 0;
                    for p in report
                        .departures
                        .iter_mut()
                        .filter(|p| p.departed.is_some())
                    {
                        if p.kernel_departed.is_none() {
                            p.kernel_departed = d.remove(&tx_id(report.transaction, p.seq));
                            missing += usize::from(p.kernel_departed.is_none());
                        }
                    }
                    missing
                };
                if missing == 0 || started.elapsed() >= STAMP_WAIT {
                    if missing > 0 {
                        self.bounds_log.warn(format_args!(
                            "{missing} probes of train {} have no kernel transmit stamp",
                            report.transaction
                        ));
                    }
                    break;
                }
                if let Io::Kernel { probe4, probe6, .. } = &self.io {
                    for (s, v6) in
                        std::iter::once((probe4, false)).chain(probe6.iter().map(|s| (s, true)))
                    {
                        if let Err(e) = self.drain_errors(s.as_raw_fd(), v6) {
                            debug!("reading transmit stamps failed: {e}");
                        }
                    }
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        report.judge_lateness(self.config.late_threshold);
    }
}

/// How long a report waits for kernel transmit stamps that are missing.
const STAMP_WAIT: Duration = Duration::from_millis(2);

/// Kernel transmit stamps kept for reports at most.
const MAX_UNCLAIMED_DEPARTURES: usize = 65_536;

/// The transmit-stamp id of probe `seq` of train `transaction`: unique among the
/// probes of the last 65,536 trains.
fn tx_id(transaction: u32, seq: u16) -> u32 {
    (transaction << 16) | u32::from(seq)
}

/// Held by each data-path thread: when the thread ends while the daemon is not
/// shutting down, a panic included, the daemon stops in order (rules and routes
/// removed) instead of running on with a black-holed TUN.
#[derive(Debug)]
pub struct EndsDaemon<'a> {
    shared: &'a Shared,
    name: &'static str,
}

impl<'a> EndsDaemon<'a> {
    /// A guard for the thread called `name`.
    pub fn new(shared: &'a Shared, name: &'static str) -> Self {
        Self { shared, name }
    }
}

impl Drop for EndsDaemon<'_> {
    fn drop(&mut self) {
        let how = if std::thread::panicking() {
            "panicked"
        } else {
            "stopped"
        };
        self.shared.fatal(format!("the {} thread {how}", self.name));
    }
}

/// The API's rate budgets.
#[derive(Debug)]
struct Budgets {
    per_user: HashMap<u32, TrainBudget>,
    total: TrainBudget,
    user_rate: (f64, f64),
    /// Bursts of every budget: two of the largest trains.
    burst: (f64, f64),
}

impl Budgets {
    fn new(config: &Config) -> Self {
        let probes = 2.0 * config.max_probes_per_train as f64;
        let burst = (probes, probes * f64::from(config.mtu));
        Self {
            per_user: HashMap::new(),
            total: TrainBudget::new(config.total_rate.0, burst.0, config.total_rate.1, burst.1),
            user_rate: config.per_user_rate,
            burst,
        }
    }
}

/// A warning written at most once a second, saying how many it skipped.
#[derive(Debug, Default)]
struct LimitedLog(Mutex<(Option<Instant>, u64)>);

impl LimitedLog {
    fn warn(&self, what: fmt::Arguments<'_>) {
        let now = Instant::now();
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
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

/// A receiver thread, for IPv4 or IPv6 MGRP packets. Raw IPv4 sockets hand over the
/// IP header too; raw IPv6 sockets only the payload.
pub fn run_receiver(shared: &Shared, sock: &Socket, v6: bool) {
    let mut reasm: Reassembler<IpAddr> = Reassembler::new(shared.config.reassembly);
    let mut buf = vec![0u8; 65_536];
    let fd = sock.as_raw_fd();
    while !shared.shutdown.load(Ordering::Relaxed) {
        let r = match sys::recv_stamped(fd, &mut buf) {
            Ok(Some(r)) => r,
            Ok(None) => {
                reasm.handle_timeout(sys::mono_now());
                shared.publish_reassembly(&reasm, v6);
                continue;
            }
            Err(e) => {
                shared.fatal(format!("receiving MGRP packets failed: {e}"));
                return;
            }
        };
        let data = &buf[..r.len];
        let (payload, ip_len, to) = if v6 {
            (data, r.len + 40, r.to)
        } else {
            let ihl = data.first().map_or(0, |b| usize::from(b & 0x0f) * 4);
            let to = data
                .get(16..20)
                .map(|a| IpAddr::V4(std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3])));
            (
                data.get(ihl..).filter(|_| ihl >= 20).unwrap_or(&[]),
                r.len,
                to,
            )
        };
        let stamp = r.stamp.unwrap_or_else(sys::wall_now);
        shared.handle_mgrp(&mut reasm, v6, r.from, to, payload, ip_len, stamp);
    }
}

impl Shared {
    /// Writes the counter and tag into an MGRP packet's trailer when its peer has a
    /// key; the last step before the packet is sent.
    pub(crate) fn seal(&self, peer: IpAddr, packet: &mut [u8]) {
        if let Some(key) = self.config.keys.key_for(peer) {
            let counter = self.tx_counter.fetch_add(1, Ordering::Relaxed);
            // The planner reserves the trailer whenever keys are configured.
            let _ = auth::seal(key, packet, counter);
        }
    }

    /// Whether a peer's packet passes authentication (tag, then replay window), or
    /// needs none; refusals are counted and logged at a limited rate.
    fn authentic(&self, from: IpAddr, payload: &[u8], has_trailer: bool) -> bool {
        let (counter, what) = match self.config.keys.key_for(from) {
            Some(_) if !has_trailer => (
                &self.counters.mgrp_unauthenticated,
                "an unauthenticated packet, but a key is configured for it; give it the same key",
            ),
            Some(key) => match auth::open(key, payload) {
                Ok(counter) => {
                    let fresh = self
                        .replay
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(from)
                        .or_default()
                        .check_and_update(counter);
                    if fresh {
                        return true;
                    }
                    (&self.counters.mgrp_replayed, "a replayed or too old packet")
                }
                // A checked packet with a trailer is neither malformed nor unauthenticated.
                Err(AuthError::BadTag | AuthError::Malformed | AuthError::Unauthenticated) => (
                    &self.counters.mgrp_bad_tag,
                    "a packet with a wrong tag (another key, or altered on the way)",
                ),
            },
            None if has_trailer => (
                &self.counters.mgrp_unexpected_auth,
                "an authenticated packet, but no key is configured for it; give this mgrpd the same key with --key-file",
            ),
            None => return true,
        };
        bump(counter);
        self.auth_log
            .warn(format_args!("dropped {what} from peer {from}"));
        false
    }

    /// Whether a rider may be written into this host. The loopback data path writes
    /// riders nowhere, so it admits every one.
    fn admit(&self, from: IpAddr, to: Option<IpAddr>, rider: &[u8]) -> Result<(), Refusal> {
        match self.io {
            Io::Kernel { .. } => {
                let to = to.unwrap_or(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED));
                self.config.peers.admit(from, to, rider)
            }
            Io::Loopback(_) => Ok(()),
        }
    }

    fn count_refusal(&self, from: IpAddr, refusal: Refusal) {
        let c = &self.counters;
        bump(match refusal {
            Refusal::NotPeer => &c.mgrp_not_peer,
            Refusal::Malformed => &c.riders_refused_malformed,
            Refusal::ForeignSource => &c.riders_refused_foreign_source,
            Refusal::ForeignDestination => &c.riders_refused_foreign_destination,
            Refusal::InnerMgrp => &c.riders_refused_inner_mgrp,
            Refusal::SpecialDestination => &c.riders_refused_special_destination,
        });
        self.refused_log.warn(format_args!(
            "refused a rider from peer {from}: {refusal:?}"
        ));
    }

    /// Publishes one receiver's reassembly counters; the IPv4 and IPv6 receivers
    /// each have a slot, so that neither overwrites the other's.
    fn publish_reassembly(&self, reasm: &Reassembler<IpAddr>, v6: bool) {
        self.reassembly
            .lock()
            .unwrap_or_else(PoisonError::into_inner)[usize::from(v6)] = reasm.counters();
    }

    /// Takes in one received MGRP packet, sent by `from` to `to`: riders admitted by
    /// [`Peers::admit`] to the TUN, the probe to its listener. Packets from non-peers
    /// are counted and dropped unread.
    // Each argument is one fact about the packet as the socket gave it; a struct
    // holding them would be built and taken apart at the two call sites only.
    #[allow(clippy::too_many_arguments)]
    fn handle_mgrp(
        &self,
        reasm: &mut Reassembler<IpAddr>,
        v6: bool,
        from: IpAddr,
        to: Option<IpAddr>,
        payload: &[u8],
        ip_len: usize,
        stamp: WallTime,
    ) {
        bump(&self.counters.mgrp_received);
        if !self.config.peers.is_peer(from) {
            bump(&self.counters.mgrp_not_peer);
            self.not_peer_log.warn(format_args!(
                "dropped an MGRP packet from {from}, which is no peer; add it with --peer if it should be one"
            ));
            return;
        }
        let packet = match Packet::new_checked(payload) {
            Ok(p) => p,
            Err(e) => {
                bump(&self.counters.mgrp_malformed);
                self.malformed_log.warn(format_args!(
                    "dropped a malformed MGRP packet from {from}: {e}"
                ));
                return;
            }
        };
        // Before anything of the packet is used.
        let has_trailer = packet.trailer().len() == usize::from(auth::TRAILER_LEN);
        if !self.authentic(from, payload, has_trailer) {
            return;
        }
        bump(match packet.kind() {
            Kind::Probe => &self.counters.probes_received,
            Kind::Continuation => &self.counters.continuations_received,
        });
        let now = sys::mono_now();
        for chunk in packet.chunks() {
            if let ChunkOutcome::Complete(rider) = reasm.handle_chunk(now, from, &chunk) {
                if let Err(refusal) = self.admit(from, to, &rider) {
                    self.count_refusal(from, refusal);
                    continue;
                }
                match self.write_tun(&rider) {
                    Ok(_) => {
                        bump(&self.counters.riders_delivered);
                        self.counters
                            .rider_bytes_delivered
                            .fetch_add(rider.len() as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        bump(&self.counters.tun_write_errors);
                        debug!("writing a rider to the TUN failed: {e}");
                    }
                }
            }
        }
        self.publish_reassembly(reasm, v6);
        if packet.kind() == Kind::Probe {
            let probe = ReceivedProbe {
                source: from,
                src_port: packet.src_port(),
                dst_port: packet.dst_port(),
                transaction: packet.transaction(),
                seq: packet.seq(),
                train_len: packet.train_len(),
                size: u16::try_from(ip_len).unwrap_or(u16::MAX),
                header: packet.tool_header().to_vec(),
                sender_time: packet.sender_time(),
                receive_time: stamp,
                rider_bytes: u32::try_from(packet.rider_bytes()).unwrap_or(u32::MAX),
            };
            deliver_probe(self, probe);
        }
    }
}

fn deliver_probe(shared: &Shared, probe: ReceivedProbe) {
    let listeners = shared
        .listeners
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(ls) = listeners.get(&probe.dst_port) else {
        bump(&shared.counters.probes_unclaimed);
        return;
    };
    let Some(l) = ls
        .iter()
        .find(|l| l.source.is_none_or(|s| s == probe.source))
    else {
        bump(&shared.counters.probes_unclaimed);
        return;
    };
    match l.tx.try_send((None, Response::Probe(probe))) {
        Ok(()) => bump(&shared.counters.probes_delivered),
        Err(_) => bump(&shared.counters.probes_dropped_slow_listener),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn housekeeping_destinations() {
        for a in [
            "ff02::2",
            "fe80::1",
            "224.0.0.22",
            "255.255.255.255",
            "0.0.0.0",
        ] {
            assert!(is_housekeeping(a.parse().unwrap()), "{a}");
        }
        for a in ["10.0.0.2", "fd77::2", "2001:db8::1"] {
            assert!(!is_housekeeping(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn a_panicking_thread_stops_the_daemon_and_a_shutdown_does_not() {
        let config = Config::from_toml("realtime = false").unwrap();
        let (events, _rx) = mpsc::unbounded_channel();
        let shared = Shared::loopback(config, events).unwrap();
        let mut fatal = shared.fatal_channel();
        std::thread::scope(|s| {
            let r = s
                .spawn(|| {
                    let _ends = EndsDaemon::new(&shared, "test");
                    panic!("on purpose");
                })
                .join();
            assert!(r.is_err());
        });
        assert_eq!(fatal.try_recv().unwrap(), "the test thread panicked");
        // During shutdown a thread ending is expected and says nothing.
        let mut fatal = shared.fatal_channel();
        shared.begin_shutdown();
        drop(EndsDaemon::new(&shared, "quiet"));
        assert!(fatal.try_recv().is_err());
    }
}
