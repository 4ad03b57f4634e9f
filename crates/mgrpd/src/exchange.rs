//! What the daemon's threads hand each other: the queues between the pacer and every
//! other thread, the requests and outputs that travel on them, the pacer's published
//! counters, the route changes the endpoint asks for, and what goes out on an API
//! connection. It sits below every thread's module, so each of them imports
//! downward only.
//!
//! The queues are bounded and lock-free (`crossbeam-queue`), with an eventfd to wake
//! the pacer when it sleeps and one to wake the dispatcher. The pacer publishes its
//! counters as a snapshot with `try_lock`, so a reader can delay the next snapshot
//! but never the pacer.

use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use mgrp_core::MonoTime;
use mgrp_core::api::Response;
use mgrp_core::endpoint::{EndpointCounters, SubmitError};
use mgrp_core::planner::{EncapTable, HoldMode, Transaction, Transmit};
use mgrp_core::stats::{PlannerCounters, TransactionReport};
use tokio::sync::oneshot;
use tracing::warn;

use crate::config::Config;

/// Rider batches the TUN reader may have waiting for the pacer.
const RIDER_BATCHES: usize = 1024;
/// Requests the API and the route manager may have waiting for the pacer.
const CONTROL_INPUTS: usize = 1024;
/// Outputs the pacer may have waiting for the dispatcher.
const OUTPUTS: usize = 16_384;

/// A route change the endpoint asks for, for the route manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteEvent {
    /// Route traffic for this peer (and the destinations it carries) into the
    /// tunnel, then tell the pacer (`Queues::routed`): its trains wait until then.
    In(IpAddr),
    /// Traffic for this peer no longer needs to enter the tunnel.
    Out(IpAddr),
}

/// What goes out on an API connection: an answer with the id of its request, or a
/// probe notification (no id).
pub(crate) type Outgoing = (Option<u64>, Response);

/// A request for the pacer.
#[derive(Debug)]
pub(crate) enum Control {
    /// A client's train; the reply says whether it was queued, `report` gets its
    /// report.
    Submit {
        client: u64,
        peer: IpAddr,
        tx: Transaction,
        reply: oneshot::Sender<Result<u32, SubmitError>>,
        report: oneshot::Sender<TransactionReport>,
    },
    /// A client gave up on a train.
    Cancel { client: u64, id: u32 },
    /// The route a [`RouteEvent::In`] asked for is in place (or failed).
    Routed(IpAddr),
    /// The peers changed (a reload): how MGRP packets travel to each now.
    Encap(EncapTable),
}

/// Riders read from the TUN at `at`, with their peers.
#[derive(Debug)]
pub(crate) struct RiderBatch {
    pub(crate) at: MonoTime,
    pub(crate) riders: Vec<(IpAddr, Bytes)>,
}

/// Work for the dispatcher.
#[derive(Debug)]
pub(crate) enum Output {
    Transmit(IpAddr, Transmit),
    Route(RouteEvent),
    Report(oneshot::Sender<TransactionReport>, TransactionReport),
    Accepted(
        oneshot::Sender<Result<u32, SubmitError>>,
        Result<u32, SubmitError>,
    ),
    /// A bound was reached; the dispatcher logs it (the pacer writes no logs while
    /// running).
    Bound(Bound),
}

/// A bound reached in the pacer, for the log.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bound {
    /// A rider found its queue, or all queues together, full.
    Queue(IpAddr),
    /// Riders went unchanged: this many destinations hold riders already.
    Destinations(usize),
    /// A train spun this long and is paced by the timer alone for the rest.
    Spin(IpAddr, Duration),
}

/// The pacer's counters as last published.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Snapshot {
    pub(crate) planner: PlannerCounters,
    pub(crate) endpoint: EndpointCounters,
}

/// The queues between the pacer and every other thread.
#[derive(Debug)]
pub(crate) struct Queues {
    pub(crate) riders: ArrayQueue<RiderBatch>,
    pub(crate) control: ArrayQueue<Control>,
    /// Signalled when input comes while the pacer sleeps.
    pub(crate) inbox: mgrp_rt::EventFd,
    pub(crate) pacer_sleeping: AtomicBool,
    pub(crate) outputs: ArrayQueue<Output>,
    pub(crate) outbox: mgrp_rt::EventFd,
    /// Whether riders should go through the pacer at all: not with on-demand hold
    /// while no train is queued or in flight anywhere, since they would only be
    /// released at once.
    pub(crate) riders_wanted: AtomicBool,
    pub(crate) pacer_done: AtomicBool,
    pub(crate) snapshot: Mutex<Snapshot>,
    /// Riders and their bytes held per destination, as last published.
    pub(crate) held: Mutex<Vec<(IpAddr, u64, u64)>>,
    /// Outputs the pacer did itself because the dispatcher's queue was full.
    pub(crate) outputs_done_by_pacer: AtomicU64,
}

impl Queues {
    pub(crate) fn new(config: &Config) -> std::io::Result<Self> {
        Ok(Self {
            riders: ArrayQueue::new(RIDER_BATCHES),
            control: ArrayQueue::new(CONTROL_INPUTS),
            inbox: mgrp_rt::EventFd::new()?,
            pacer_sleeping: AtomicBool::new(false),
            outputs: ArrayQueue::new(OUTPUTS),
            outbox: mgrp_rt::EventFd::new()?,
            riders_wanted: AtomicBool::new(config.policy.hold_mode == HoldMode::Always),
            pacer_done: AtomicBool::new(false),
            snapshot: Mutex::new(Snapshot::default()),
            held: Mutex::new(Vec::new()),
            outputs_done_by_pacer: AtomicU64::new(0),
        })
    }

    /// Wakes the pacer if it sleeps.
    fn nudge(&self) {
        if self.pacer_sleeping.load(Ordering::SeqCst) {
            self.inbox.signal();
        }
    }

    /// Hands the pacer a batch of riders; gives it back if the queue is full.
    pub(crate) fn push_riders(&self, batch: RiderBatch) -> Result<(), RiderBatch> {
        self.riders.push(batch)?;
        self.nudge();
        Ok(())
    }

    /// Hands the pacer a request; gives it back if the queue is full.
    pub(crate) fn push_control(&self, c: Control) -> Result<(), Control> {
        self.control.push(c)?;
        self.nudge();
        Ok(())
    }

    /// The route asked for with [`RouteEvent::In`] is in place (or could not be put
    /// in place): trains to `peer` may run.
    pub(crate) async fn routed(&self, peer: IpAddr) {
        if !self.push_control_soon(Control::Routed(peer)).await {
            warn!(
                "could not tell the pacer that {peer} is routed; its trains wait until cancelled"
            );
        }
    }

    /// Gives the pacer the encapsulation table of a reload; false if it could not be
    /// told.
    pub(crate) async fn encap(&self, table: EncapTable) -> bool {
        self.push_control_soon(Control::Encap(table)).await
    }

    /// Queues `control` for the pacer, waiting for room up to a second: the queue
    /// holds far more than the trains there can be, so a full one drains within
    /// moments. False if it never had room.
    async fn push_control_soon(&self, mut control: Control) -> bool {
        for _ in 0..1000 {
            match self.push_control(control) {
                Ok(()) => return true,
                Err(c) => control = c,
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        false
    }

    /// Wakes the pacer whatever it does (for shutdown).
    pub(crate) fn wake_pacer(&self) {
        self.inbox.signal();
    }

    /// Whether riders should be handed to the pacer.
    pub(crate) fn riders_wanted(&self) -> bool {
        self.riders_wanted.load(Ordering::Relaxed)
    }

    /// The pacer's counters as last published.
    pub(crate) fn snapshot(&self) -> Snapshot {
        *mgrp_rt::lock(&self.snapshot)
    }

    /// Riders and bytes held per destination as last published, by address.
    pub(crate) fn held(&self) -> Vec<(IpAddr, u64, u64)> {
        mgrp_rt::lock(&self.held).clone()
    }
}
