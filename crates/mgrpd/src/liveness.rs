//! What the MGRP sockets' error queues say: which peers answered with ICMP errors
//! (their mgrpd is gone), and when the kernel handed each probe to the device.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mgrp_core::stats::TransactionReport;
use mgrp_core::{MonoTime, WallTime};
use tracing::{debug, warn};

use crate::counters::{Counters, LimitedLog, SocketError, bump};
use crate::lifecycle::Lifecycle;
use crate::net::{Net, tx_id};
use crate::sys;

/// How long riders to a peer that answered "protocol unreachable" bypass the
/// planners (sent unchanged) before piggybacking is tried again.
const PEER_DOWN_BACKOFF: Duration = Duration::from_secs(5);

/// How often the liveness threads read the error queues at most.
const ERROR_QUEUE_PERIOD: Duration = Duration::from_millis(5);

/// How long a report waits for kernel queue stamps that are missing. They are on the
/// error queue once the send returns, so this is a margin, not a wait that is needed.
const STAMP_WAIT: Duration = Duration::from_millis(2);

/// Kernel transmit stamps kept for reports at most.
const MAX_UNCLAIMED_DEPARTURES: usize = 65_536;

/// Peers that answered MGRP with an ICMP error, until when they count as down.
/// Written by the liveness threads, read by the TUN reader, never by the pacer.
#[derive(Debug, Default)]
pub(crate) struct PeerHealth {
    down: Mutex<HashMap<IpAddr, MonoTime>>,
    /// Whether `down` may hold a peer (changed only with its lock held).
    any_down: AtomicBool,
    /// ICMP errors and failed reads of the error queues, at a limited rate.
    log: LimitedLog,
}

impl PeerHealth {
    /// The peers counted as down at `now`. Costs one atomic load on the rider path
    /// while every peer is up.
    pub(crate) fn down(&self, now: MonoTime) -> Vec<IpAddr> {
        if !self.any_down.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut down = mgrp_rt::lock(&self.down);
        down.retain(|_, until| *until > now);
        if down.is_empty() {
            self.any_down.store(false, Ordering::Release);
        }
        down.keys().copied().collect()
    }

    /// Counts `peer` as down until `until`; returns whether it was up.
    fn mark_down(&self, peer: IpAddr, until: MonoTime) -> bool {
        let mut down = mgrp_rt::lock(&self.down);
        self.any_down.store(true, Ordering::Release);
        down.insert(peer, until).is_none()
    }
}

/// The kernel's two transmit stamps of one probe, as far as they came.
#[derive(Debug, Default, Clone, Copy)]
struct Stamps {
    queued: Option<WallTime>,
    sent: Option<WallTime>,
}

/// Kernel transmit stamps read from the probe sockets' error queues, by id
/// ([`tx_id`]), until a report takes them. Whoever takes entries off an error queue
/// holds this lock from the read until the stamps are kept, so a report that holds it
/// sees every stamp either kept or still on the queue, never in another thread's
/// hands.
#[derive(Debug, Default)]
pub(crate) struct Departures {
    kept: Mutex<Kept>,
}

/// The stamps, and the order their ids came in so the oldest go first when there are
/// too many: device stamps that come after their report left (a local shaper held the
/// probe) are never taken.
#[derive(Debug, Default)]
struct Kept {
    stamps: HashMap<u32, Stamps>,
    order: VecDeque<u32>,
}

impl Kept {
    fn insert(&mut self, id: u32, at: WallTime, point: sys::StampPoint) {
        let Self { stamps, order } = self;
        let entry = stamps.entry(id).or_insert_with(|| {
            order.push_back(id);
            Stamps::default()
        });
        match point {
            sys::StampPoint::Queued => entry.queued = Some(at),
            sys::StampPoint::Sent => entry.sent = Some(at),
        }
        while order.len() > MAX_UNCLAIMED_DEPARTURES {
            if let Some(old) = order.pop_front() {
                stamps.remove(&old);
            }
        }
    }

    /// Fills in the stamps of `report`'s probes that are here; returns how many
    /// probes that left still have no queue-entry stamp.
    fn fill(&mut self, report: &mut TransactionReport) -> usize {
        let mut missing = 0;
        for p in report
            .departures
            .iter_mut()
            .filter(|p| p.departed.is_some())
        {
            let id = tx_id(report.transaction, p.seq);
            if let Some(s) = self.stamps.get(&id) {
                p.kernel_queued = p.kernel_queued.or(s.queued);
                p.kernel_sent = p.kernel_sent.or(s.sent);
                if p.kernel_queued.is_some() && p.kernel_sent.is_some() {
                    self.stamps.remove(&id);
                }
            }
            missing += usize::from(p.kernel_queued.is_none());
        }
        missing
    }
}

/// Reads the error queues: the liveness threads, and the dispatcher when a
/// report waits for its stamps.
#[derive(Debug, Clone)]
pub(crate) struct ErrorQueues {
    pub(crate) net: Arc<Net>,
    pub(crate) health: Arc<PeerHealth>,
    pub(crate) departures: Arc<Departures>,
    pub(crate) counters: Arc<Counters>,
}

impl ErrorQueues {
    /// Watches one family's error queues until shutdown: kernel transmit stamps of
    /// probes are kept for their reports, and an ICMP "destination unreachable" (or,
    /// over IPv6, "unrecognised next header") about an MGRP packet means its peer
    /// takes no MGRP any more (its mgrpd died), so riders to it stop riding for a
    /// while.
    pub(crate) fn run(&self, v6: bool, life: &Lifecycle) {
        let fds = self.net.error_fds(v6);
        if fds.is_empty() {
            return;
        }
        while !life.is_stopping() {
            let ready = sys::wait_errors(&fds, Duration::from_millis(200));
            for (fd, _) in fds.iter().zip(ready).filter(|(_, r)| *r) {
                match self.drain(*fd, v6) {
                    Ok(()) => {}
                    // A pending ICMP error is what this thread watches for, not a
                    // reason to stop watching (it is counted as read off the queue).
                    Err(e) if crate::net::is_reported_icmp_error(&e) => {
                        debug!("reading an MGRP socket's error queue: {e}");
                    }
                    // Nor is anything else a network or a short host can cause.
                    Err(e) => match SocketError::of_io(&e) {
                        Some(reason) => {
                            self.counters.socket_error(reason);
                            self.health.log.warn(format_args!(
                                "reading an MGRP socket's error queue failed: {e}; going on"
                            ));
                        }
                        None => {
                            warn!(
                                "reading the MGRP sockets' error queues failed: {e}; peer liveness is no longer watched"
                            );
                            return;
                        }
                    },
                }
            }
            // Every probe puts a stamp on the queue: waking for each would cost a
            // context switch per probe, taken from the CPUs the traffic needs. A peer
            // that went away can wait a few milliseconds to be noticed, and a report
            // reads its own train's stamps when it needs them.
            std::thread::sleep(ERROR_QUEUE_PERIOD);
        }
    }

    /// Takes everything off one socket's error queue.
    fn drain(&self, fd: BorrowedFd<'_>, v6: bool) -> std::io::Result<()> {
        let mut kept = mgrp_rt::lock(&self.departures.kept);
        self.drain_into(&mut kept, fd, v6)
    }

    /// Takes everything off one socket's error queue, keeping its stamps in `kept`
    /// (whose lock the caller holds).
    fn drain_into(&self, kept: &mut Kept, fd: BorrowedFd<'_>, v6: bool) -> std::io::Result<()> {
        while let Some(e) = sys::next_error(fd)? {
            match e {
                sys::QueuedError::Icmp(e) => self.icmp_error(&e, v6),
                sys::QueuedError::Departed { id, at, point } => kept.insert(id, at, point),
                sys::QueuedError::Other => {}
            }
        }
        Ok(())
    }

    /// Counts an ICMP error about a packet sent to a peer, and marks the peer down
    /// when it says nothing there takes MGRP and it quotes a packet this daemon sent
    /// there lately: anyone may forge an error, only a host on the path sees what it
    /// would have to quote.
    fn icmp_error(&self, e: &sys::IcmpError, v6: bool) {
        let reason = SocketError::of(e.errno).unwrap_or(SocketError::Other);
        self.counters.socket_error(reason);
        let to = std::net::SocketAddr::new(e.destination, e.port);
        self.health.log.warn(format_args!(
            "ICMP{} type {} code {} about an MGRP packet to {to} ({}: {})",
            if v6 { "v6" } else { "" },
            e.icmp_type,
            e.icmp_code,
            reason.label(),
            std::io::Error::from_raw_os_error(e.errno)
        ));
        let unreachable = if v6 {
            e.icmp_type == 1 || (e.icmp_type == 4 && e.icmp_code == 1)
        } else {
            e.icmp_type == 3
        };
        if !unreachable {
            return;
        }
        if !self.net.sent_recently(to, e.quoted()) {
            bump(&self.counters.icmp_errors_unproven);
            return;
        }
        bump(&self.counters.peer_unreachable);
        // Over UDP the error names the peer's endpoint, which may be a NAT's.
        let peer = if e.port == 0 {
            e.destination
        } else {
            self.net.endpoints().peer_at(to).unwrap_or(e.destination)
        };
        let until = mgrp_rt::mono_now().saturating_add(PEER_DOWN_BACKOFF);
        if self.health.mark_down(peer, until) {
            warn!(
                "peer {peer} answered MGRP with ICMP type {} code {}: its mgrpd is gone; its riders go unchanged for {:?}",
                e.icmp_type, e.icmp_code, PEER_DOWN_BACKOFF
            );
        }
    }

    /// Makes a report final before its tool gets it (on the dispatcher): the
    /// kernel's transmit stamps of each probe that left, the departure clock, and the
    /// count of late probes. Every probe's queue-entry stamp is on the error queue by
    /// the time its send returns (the kernel takes it inside the send call); what the
    /// liveness threads have not read yet is read here, for at most [`STAMP_WAIT`].
    /// Device stamps come when the device takes the probe, which a local shaper may
    /// hold for longer than any report should wait: those that came are given. Without
    /// `may_wait` (on the pacer, when the dispatcher is behind) it takes the stamps already
    /// kept and no more.
    pub(crate) fn complete_report(
        &self,
        report: &mut TransactionReport,
        late_threshold: Duration,
        log: &LimitedLog,
        may_wait: bool,
    ) {
        let stamps = self.net.kernel_stamps();
        let lock = || mgrp_rt::lock(&self.departures.kept);
        if stamps && !may_wait {
            if let Ok(mut kept) = self.departures.kept.try_lock() {
                kept.fill(report);
            }
        } else if stamps {
            let started = Instant::now();
            loop {
                let mut kept = lock();
                if kept.fill(report) == 0 {
                    break;
                }
                for v6 in [false, true] {
                    for fd in self.net.stamp_fds(v6) {
                        if let Err(e) = self.drain_into(&mut kept, fd, v6) {
                            debug!("reading transmit stamps failed: {e}");
                        }
                    }
                }
                if kept.fill(report) == 0 || started.elapsed() >= STAMP_WAIT {
                    break;
                }
                drop(kept);
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        report.settle(stamps, late_threshold);
        self.counters
            .probes_late
            .fetch_add(u64::from(report.probes_late), Ordering::Relaxed);
        if report.probes_unstamped > 0 {
            self.counters
                .probes_unstamped
                .fetch_add(u64::from(report.probes_unstamped), Ordering::Relaxed);
            log.warn(format_args!(
                "{} probes of train {} have no kernel queue stamp: its report gives the daemon's stamps for every probe",
                report.probes_unstamped, report.transaction
            ));
        }
    }
}
