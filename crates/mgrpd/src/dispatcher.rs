//! The dispatcher: the thread that carries out what the pacer decided but must not
//! do itself, since it may block: riders sent on unchanged (coalesced into
//! super-packets where the fast path allows), continuations, transaction reports
//! completed with their kernel stamps, replies to submissions, route changes, and
//! the log lines for bounds the pacer reached. When its queue is full the pacer
//! carries out an output itself, without waiting for anything.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mgrp_core::planner::Transmit;

use crate::config::Config;
use crate::counters::{Counters, LimitedLog};
use crate::exchange::{Bound, Control, Output, Queues, RouteEvent};
use crate::fastpath::{Coalescer, FastPath};
use crate::liveness::ErrorQueues;
use crate::net::{Net, TunnelBatch};

#[derive(Debug)]
pub(crate) struct Dispatcher {
    pub(crate) config: Arc<Config>,
    pub(crate) queues: Arc<Queues>,
    pub(crate) net: Arc<Net>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) route_events: tokio::sync::mpsc::UnboundedSender<RouteEvent>,
    pub(crate) errors: ErrorQueues,
    pub(crate) bounds_log: Arc<LimitedLog>,
    /// Where riders released unchanged leave, put back together into super-packets.
    pub(crate) fast: Option<Arc<FastPath>>,
}

impl Dispatcher {
    /// Does one output: on the dispatcher thread (`may_wait`), or on the pacer when
    /// the dispatcher's queue is full, which must not wait for anything.
    pub(crate) fn execute(&self, o: Output, may_wait: bool) {
        match o {
            Output::Transmit(peer, t) => self.net.send_transmit(peer, t),
            Output::Route(event) => {
                if self.route_events.send(event).is_err() {
                    // Nobody manages routes: take it as done.
                    if let RouteEvent::In(peer) = event {
                        let _ = self.queues.push_control(Control::Routed(peer));
                    }
                }
            }
            Output::Report(w, mut r) => {
                self.errors.complete_report(
                    &mut r,
                    self.config.late_threshold,
                    &self.bounds_log,
                    may_wait,
                );
                let _ = w.send(r);
            }
            Output::Accepted(reply, result) => {
                let _ = reply.send(result);
            }
            Output::Bound(b) => match b {
                Bound::Queue(peer) => self.bounds_log.warn(format_args!(
                    "dropped packets to {peer}: its queue or all queues together are full (piggyback.max-queued-riders, max-queued-bytes, max-held-bytes)"
                )),
                Bound::Destinations(n) => self.bounds_log.warn(format_args!(
                    "packets go unchanged: {n} destinations hold packets already (limits.max-destinations)"
                )),
                Bound::Spin(peer, spun) => self.bounds_log.warn(format_args!(
                    "a train to {peer} spun {spun:?} (limits.max-train-spin): the rest of it is paced by the timer alone, expect less precise gaps"
                )),
            },
        }
    }

    /// The dispatcher thread: does what the pacer queued, until the pacer is done and
    /// nothing is left.
    pub(crate) fn run(&self) {
        let q = &self.queues;
        let mut coalescer = self
            .fast
            .clone()
            .map(|f| Coalescer::new(f, self.config.mtu));
        // Riders to UDP peers go in continuations, not as they came, gathered into
        // segmented sends.
        let mut tunnel = TunnelBatch::default();
        loop {
            while let Some(o) = q.outputs.pop() {
                match (o, coalescer.as_mut()) {
                    (Output::Transmit(peer, Transmit::Unchanged(pkt)), _)
                        if self.net.endpoints().is_udp(peer) =>
                    {
                        self.net.tunnel_batched(&mut tunnel, peer, &pkt);
                    }
                    (Output::Transmit(_, Transmit::Unchanged(pkt)), Some(c)) => {
                        c.push(&pkt, &self.net, &self.counters);
                    }
                    (o, _) => {
                        // What else leaves keeps its place after the batch.
                        self.net.flush_tunnel(&mut tunnel);
                        self.execute(o, true);
                    }
                }
            }
            self.net.flush_tunnel(&mut tunnel);
            if let Some(c) = coalescer.as_mut() {
                c.flush(&self.net, &self.counters);
            }
            if q.pacer_done.load(Ordering::SeqCst) && q.outputs.is_empty() {
                return;
            }
            q.outbox.wait(Duration::from_millis(100));
        }
    }
}
