//! The pacer: the one owner of the endpoint, and the thread that sends the probes.
//!
//! The pacer (a real-time thread when permitted) owns the [`Endpoint`]; no other
//! thread touches it, and the pacer never waits for another thread. Riders from the
//! TUN reader and requests from the API come in through the queues of
//! `crate::exchange`. What the endpoint decides that is not a probe — riders sent
//! unchanged, continuations, reports, replies, route changes — goes out through
//! another such queue to the dispatcher (`crate::dispatcher`), which does the system
//! calls and the waking of API tasks. The pacer's counters reach the rest of the
//! daemon as a snapshot it publishes with `try_lock`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mgrp_core::MonoTime;
use mgrp_core::endpoint::{Action, Endpoint, EndpointConfig};
use mgrp_core::planner::{HoldMode, RiderDrop, Transmit};
use mgrp_core::stats::TransactionReport;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::config::{Config, PacerCpu};
use crate::dispatcher::Dispatcher;
use crate::exchange::{Bound, Control, Output, Queues, RouteEvent, Snapshot};
use crate::lifecycle::Lifecycle;

/// Most actions the pacer takes from the endpoint at one time, so that a flood of
/// released riders cannot keep it from the next probe.
const ACTIONS_PER_PUMP: usize = 512;
/// Most rider batches the pacer takes in at one time, for the same reason; what is
/// left waits in the queue, and when that is full the TUN reader sends riders on
/// itself.
const BATCHES_PER_INGEST: usize = 32;
/// Most rider batches taken in right before a probe is built, when its deadline is
/// near.
const BATCHES_BEFORE_PROBE: usize = 4;
/// The shortest sleep a real-time pacer takes in a gap: a gap that leaves less
/// than this beyond the busy-poll margin is spun through.
pub(crate) const MIN_SLEEP: Duration = Duration::from_micros(20);
/// Longest a real-time pacer spins without giving its CPU up. Spinning through a
/// whole stream at SCHED_FIFO starves everything bound to that CPU (softirqs among
/// them: a riding TCP flow's pacing timer stopped for the stream, then left its
/// packets in a burst after it), so a pacer that has spun this long sleeps
/// [`BREATHER`] before its next probe, even if that probe then leaves late (its
/// departure stamp says when it left).
pub(crate) const MAX_SPIN_RUN: Duration = Duration::from_millis(2);
/// How long that sleep lasts.
pub(crate) const BREATHER: Duration = Duration::from_micros(20);
/// Most of its CPU a real-time pacer keeps over a [`DUTY_WINDOW`]. Many trains at once
/// leave it no gap to sleep in, and the kernel stops a real-time thread that runs
/// over 95 % of a second (`sched_rt_runtime_us`) for the rest of it: every probe due
/// then leaves up to 50 ms late. Over this share, it takes a [`BREATHER`] after every
/// [`DUTY_RUN`] of running instead: many probes a little late rather than a stall.
const MAX_DUTY: f64 = 0.9;
/// How often the pacer's share of its CPU is read: long enough that one train
/// spinning through short gaps (a fast stream of a few milliseconds) is never held to
/// it, short enough that alternate windows over and under it stay under the kernel's
/// bound over any second.
const DUTY_WINDOW: Duration = Duration::from_millis(100);
/// Longest run between breathers while over [`MAX_DUTY`].
const DUTY_RUN: Duration = Duration::from_micros(100);
/// How often the pacer publishes its counters while busy.
const PUBLISH_EVERY: Duration = Duration::from_millis(2);
/// How often it publishes the riders held per destination.
const PUBLISH_HELD_EVERY: Duration = Duration::from_millis(100);
/// The endpoint's bounds and modes from the configuration.
fn endpoint_config(config: &Config) -> EndpointConfig {
    let peering = config.peering();
    use std::hash::BuildHasher;
    let mut c = EndpointConfig::new(config.policy.clone(), config.mtu);
    c.encap = peering.encap.clone();
    c.route_on_demand = config.route_on_demand;
    c.max_destinations = config.max_destinations;
    c.max_held_bytes = config.max_held_bytes;
    c.max_trains = config.max_queued_trains;
    c.max_trains_per_client = config.max_trains_per_client;
    c.max_in_flight = config.max_trains_in_flight;
    // Rider ids differ between lives of the daemon, so the far side does not take a
    // restarted daemon's riders for ones it delivered already.
    c.rider_id_seed = std::collections::hash_map::RandomState::new()
        .hash_one((mgrp_rt::wall_now(), std::process::id())) as u32;
    c
}

/// Keeps a CPU for the pacer before the daemon's other threads start: every thread
/// of the process runs on the others from here on (threads started later inherit
/// that), and the pacer pins itself to it. Returns the CPU, if one is kept.
///
/// A real-time pacer spins through the short gaps of a fast stream and gives its CPU
/// up for only a moment every [`MAX_SPIN_RUN`], so a normal thread that the kernel
/// happens to queue on that CPU waits out the stream: when that was the TUN reader,
/// no application packet reached the planner for the whole 40 ms of a stream, none
/// rode in it, its report counted no competing traffic, and pathload-rs's adjusted
/// range read high. The kernel does not move such a thread to the other CPU while
/// that one is busy with normal work of its own (the receiving tool, say).
pub(crate) fn keep_cpu_for_pacer(config: &Config) -> Option<usize> {
    let cpu = match config.pacer_cpu {
        PacerCpu::Unpinned => return None,
        PacerCpu::Cpu(c) => c,
        PacerCpu::Auto if !config.realtime => return None,
        PacerCpu::Auto => match mgrp_rt::thread::allowed_cpus() {
            Ok(cpus) if cpus.len() >= 2 => *cpus.last()?,
            Ok(_) => {
                info!("no CPU kept for the pacer: the daemon may run on one CPU only");
                return None;
            }
            Err(e) => {
                warn!(
                    "no CPU kept for the pacer: cannot read the CPUs the daemon may run on ({e})"
                );
                return None;
            }
        },
    };
    match mgrp_rt::thread::keep_process_off(cpu) {
        Ok(_) => {
            info!("CPU {cpu} kept for the pacer: the daemon's other threads run on the others");
        }
        Err(e) => warn!(
            "cannot keep the daemon's other threads off CPU {cpu} ({e}); a train may hold them up while it runs (pacer-cpu = \"none\" to leave the pacer unpinned)"
        ),
    }
    Some(cpu)
}

/// Settings the pacer could not get, reported once at start. Returns whether the
/// pacer runs SCHED_FIFO.
fn prepare_pacer(config: &Config, cpu: Option<usize>) -> bool {
    mgrp_rt::thread::set_timer_slack(1);
    if let Some(cpu) = cpu
        && let Err(e) = mgrp_rt::thread::pin_to_cpu(cpu)
    {
        warn!("cannot pin the pacer to CPU {cpu}: {e}; it runs unpinned");
    }
    if !config.realtime {
        return false;
    }
    match mgrp_rt::thread::set_realtime(50) {
        Ok(()) => {
            info!("pacer runs SCHED_FIFO");
            true
        }
        Err(e) => {
            warn!(
                "cannot run the pacer SCHED_FIFO ({e}); pacing falls back to the normal scheduler, expect millisecond tails (use --no-realtime to silence this)"
            );
            false
        }
    }
}

/// The pacer thread: owns the endpoint, runs trains and releases riders whose wait
/// is over. It pins itself to `cpu`, if given. `prepared` runs once its scheduling is
/// set up (to drop what that needed). If it ends for any reason but shutdown, the daemon stops (trains could no
/// longer run and held riders would never leave).
pub(crate) fn run_pacer(
    s: &Dispatcher,
    life: &Lifecycle,
    cpu: Option<usize>,
    prepared: impl FnOnce(),
) {
    let realtime = prepare_pacer(&s.config, cpu);
    prepared();
    let timer = match mgrp_rt::Timer::new() {
        Ok(t) => t,
        Err(e) => {
            life.fatal(format!("cannot create a timerfd for the pacer: {e}"));
            return;
        }
    };
    let endpoint = Endpoint::new(endpoint_config(&s.config)).unwrap_or_else(|e| {
        panic!("the endpoint refuses the policy: {e} (the configuration check missed this)")
    });
    let mut pacer = Pacer {
        s,
        life,
        q: &s.queues,
        endpoint,
        waiters: HashMap::new(),
        timer,
        realtime,
        rested: std::cell::Cell::new(mgrp_rt::mono_now()),
        duty: Duty::new(),
        spins: HashMap::with_capacity(s.config.max_trains_in_flight),
        flushed: false,
        last_publish: MonoTime::ZERO,
        last_held_publish: MonoTime::ZERO,
        held_published: false,
        unsignalled: false,
    };
    pacer.run();
    // Whoever still waits for a report hears that the daemon stopped.
    drop(pacer);
    s.queues.pacer_done.store(true, Ordering::SeqCst);
    s.queues.outbox.signal();
}

/// The pacer's share of its CPU over the last [`DUTY_WINDOW`].
#[derive(Debug)]
struct Duty {
    since: MonoTime,
    cpu: Duration,
    over: bool,
}

impl Duty {
    fn new() -> Self {
        Self {
            since: mgrp_rt::mono_now(),
            cpu: mgrp_rt::clock::thread_cpu_time(),
            over: false,
        }
    }

    /// Whether the pacer ran over [`MAX_DUTY`] of the last window, read anew once a
    /// window has passed.
    fn over(&mut self, now: MonoTime) -> bool {
        let wall = now.saturating_since(self.since);
        if wall >= DUTY_WINDOW {
            let cpu = mgrp_rt::clock::thread_cpu_time();
            let used = cpu.saturating_sub(self.cpu);
            self.over = used.as_secs_f64() > MAX_DUTY * wall.as_secs_f64();
            self.since = now;
            self.cpu = cpu;
        }
        self.over
    }
}

/// How long the pacer spun for one train in flight.
#[derive(Debug, Default)]
struct SpinBudget {
    spun: Duration,
    capped: bool,
}

struct Pacer<'a> {
    /// The dispatcher's parts: the pacer does the dispatcher's work itself when its
    /// queue is full.
    s: &'a Dispatcher,
    life: &'a Lifecycle,
    q: &'a Queues,
    endpoint: Endpoint,
    waiters: HashMap<u32, oneshot::Sender<TransactionReport>>,
    timer: mgrp_rt::Timer,
    realtime: bool,
    /// When the pacer last gave its CPU up (a sleep ended).
    rested: std::cell::Cell<MonoTime>,
    /// Its share of its CPU.
    duty: Duty,
    /// How long it spun for each train in flight that has sent a probe.
    spins: HashMap<u32, SpinBudget>,
    flushed: bool,
    last_publish: MonoTime,
    last_held_publish: MonoTime,
    /// Whether the riders held last published were any.
    held_published: bool,
    /// Outputs were queued since the dispatcher was last signalled.
    unsignalled: bool,
}

impl Pacer<'_> {
    fn run(&mut self) {
        loop {
            let now = mgrp_rt::mono_now();
            // With trains in flight the next probe due is the deadline to keep.
            let until = self
                .endpoint
                .next_probe()
                .map_or(MonoTime::from_nanos(u64::MAX), |(tx, d)| {
                    self.wake_for(d, self.margin(tx))
                });
            self.ingest(now, BATCHES_PER_INGEST, until);
            let stopping = self.life.is_stopping();
            if stopping && !self.flushed {
                // Every train ends with a report; every held rider falls due.
                self.endpoint.handle_shutdown(now);
                self.flushed = true;
            }
            let more = self.pump(now);
            let next = if stopping {
                None
            } else {
                self.endpoint.poll_probe_deadline(now)
            };
            match next {
                Some(deadline) => {
                    self.publish(now, false);
                    self.send_probe(deadline);
                }
                None if more => self.publish(now, false),
                None if stopping => {
                    self.publish(now, true);
                    return;
                }
                None => {
                    self.publish(now, true);
                    let mut until = self
                        .endpoint
                        .poll_timeout()
                        .map_or(now.saturating_add(Duration::from_millis(200)), |t| {
                            t.min(now.saturating_add(Duration::from_millis(200)))
                        });
                    if self.q.outputs.is_full() {
                        // The dispatcher is behind: give it time rather than spin.
                        until = until.max(now.saturating_add(Duration::from_micros(200)));
                    }
                    if until > now {
                        self.sleep(until);
                    }
                }
            }
        }
    }

    /// How long before a probe of train `transaction` is due the pacer stops sleeping
    /// and spins: the busy-poll margin, or nothing once that train has spun its limit.
    fn margin(&self, transaction: u32) -> Duration {
        if self.spins.get(&transaction).is_some_and(|s| s.capped) {
            Duration::ZERO
        } else {
            self.s.config.busy_poll_margin
        }
    }

    /// When to stop sleeping for a probe due at `deadline`, `margin` before it.
    fn wake_for(&self, deadline: MonoTime, margin: Duration) -> MonoTime {
        let margin = u64::try_from(margin.as_nanos()).unwrap_or(u64::MAX);
        MonoTime::from_nanos(deadline.as_nanos().saturating_sub(margin))
    }

    /// Sleeps until `until` or until input comes or shutdown is asked for.
    fn sleep(&self, until: MonoTime) {
        self.q.pacer_sleeping.store(true, Ordering::SeqCst);
        // Checked after the flag is up, so input pushed before it is not slept over.
        if self.q.riders.is_empty() && self.q.control.is_empty() && !self.life.is_stopping() {
            if let Err(e) = self.timer.sleep_until_or(until, &self.q.inbox) {
                debug!("the pacer's sleep failed: {e}");
            }
            self.rested.set(mgrp_rt::mono_now());
        }
        self.q.pacer_sleeping.store(false, Ordering::SeqCst);
    }

    /// Takes in what the other threads sent: every request, and at most `batches`
    /// rider batches, stopping early at `until` so a deadline is kept.
    fn ingest(&mut self, now: MonoTime, batches: usize, until: MonoTime) {
        let mut queue_full = None;
        let bypassed = self
            .endpoint
            .counters()
            .riders_bypassed_too_many_destinations;
        // Bounded, so a flood of riders cannot keep the pacer from its deadlines; the
        // rest waits for the next round.
        for _ in 0..batches {
            if mgrp_rt::mono_now() >= until {
                break;
            }
            let Some(batch) = self.q.riders.pop() else {
                break;
            };
            for (peer, data) in batch.riders {
                if let Err(RiderDrop::QueueFull) = self.endpoint.handle_rider(batch.at, peer, data)
                {
                    queue_full = Some(peer);
                }
            }
        }
        while let Some(c) = self.q.control.pop() {
            match c {
                Control::Submit {
                    client,
                    peer,
                    tx,
                    reply,
                    report,
                } => {
                    let result = self.endpoint.handle_submit(now, client, peer, tx);
                    if let Ok(id) = result {
                        self.waiters.insert(id, report);
                    }
                    self.output(Output::Accepted(reply, result));
                }
                Control::Cancel { client, id } => {
                    self.endpoint.handle_cancel(now, client, id);
                }
                Control::Routed(peer) => self.endpoint.handle_routed(peer),
                Control::Encap(table) => {
                    if let Err(e) = self.endpoint.set_encap(table) {
                        // Checked before the reload was put in force.
                        warn!("the reload's encapsulation does not fit the policy: {e}");
                    }
                }
            }
        }
        if let Some(peer) = queue_full {
            self.output(Output::Bound(Bound::Queue(peer)));
        }
        if self
            .endpoint
            .counters()
            .riders_bypassed_too_many_destinations
            > bypassed
        {
            self.output(Output::Bound(Bound::Destinations(
                self.endpoint.destinations(),
            )));
        }
        let wanted =
            self.s.config.policy.hold_mode == HoldMode::Always || self.endpoint.trains() > 0;
        self.q.riders_wanted.store(wanted, Ordering::Relaxed);
        self.signal_dispatcher();
    }

    /// Wakes the dispatcher once for everything queued since the last time.
    fn signal_dispatcher(&mut self) {
        if std::mem::take(&mut self.unsignalled) {
            self.q.outbox.signal();
        }
    }

    /// Moves what the endpoint decided to the dispatcher; returns whether more is left.
    /// Stops while the dispatcher's queue is full: the pacer does not do the dispatcher's
    /// work, and what is left waits in the endpoint.
    fn pump(&mut self, now: MonoTime) -> bool {
        let mut sent = 0;
        while sent < ACTIONS_PER_PUMP && !self.q.outputs.is_full() {
            let Some(a) = self.endpoint.poll_action(now) else {
                break;
            };
            sent += 1;
            match a {
                Action::Transmit { peer, transmit } => {
                    self.output(Output::Transmit(peer, transmit));
                }
                Action::Report { report, .. } => {
                    self.spins.remove(&report.transaction);
                    // A client that reads the counters on its report sees its train
                    // in them.
                    self.publish(now, true);
                    if let Some(w) = self.waiters.remove(&report.transaction) {
                        self.output(Output::Report(w, report));
                    }
                }
                Action::RouteIn(peer) => self.output(Output::Route(RouteEvent::In(peer))),
                Action::RouteOut(peer) => self.output(Output::Route(RouteEvent::Out(peer))),
            }
        }
        self.signal_dispatcher();
        sent == ACTIONS_PER_PUMP
    }

    /// Queues work for the dispatcher, or does it here if the dispatcher's queue is full (a
    /// late probe beats a lost rider or a report that never comes).
    fn output(&mut self, o: Output) {
        match self.q.outputs.push(o) {
            Ok(()) => self.unsignalled = true,
            Err(o) => {
                self.q.outputs_done_by_pacer.fetch_add(1, Ordering::Relaxed);
                self.s.execute(o, false);
            }
        }
    }

    /// Publishes the counters if `force` or if the last time is a while ago; never
    /// waits for a reader.
    fn publish(&mut self, now: MonoTime, force: bool) {
        if !force && now.saturating_since(self.last_publish) < PUBLISH_EVERY {
            return;
        }
        let snapshot = Snapshot {
            planner: self.endpoint.planner_counters(),
            endpoint: self.endpoint.counters(),
        };
        // A reader holds the lock for a copy; a few tries nearly always get it.
        for _ in 0..8 {
            if let Ok(mut s) = self.q.snapshot.try_lock() {
                *s = snapshot;
                self.last_publish = now;
                break;
            }
            std::hint::spin_loop();
        }
        // Every 100 ms while riders come and go, and at once when the last one left,
        // so that a reader of a quiet daemon sees none held.
        let emptied = self.held_published && self.endpoint.held_bytes() == 0;
        if emptied || now.saturating_since(self.last_held_publish) >= PUBLISH_HELD_EVERY {
            // Refilled in place: no allocation once it has room for every destination.
            if let Ok(mut held) = self.q.held.try_lock() {
                held.clear();
                held.extend(
                    self.endpoint
                        .held_per_destination()
                        .map(|(peer, n, bytes)| (peer, n as u64, bytes as u64)),
                );
                self.last_held_publish = now;
                self.held_published = held.iter().any(|h| h.1 > 0);
            }
        }
    }

    /// Sleeps until `wake`, taking in input and releasing riders whose wait is over on
    /// the way. Returns true once `wake` is reached; false on shutdown, or when a train
    /// came that may start now (the caller plans again: its first probe may fall due
    /// before `wake`).
    fn sleep_releasing(&mut self, wake: MonoTime) -> bool {
        loop {
            if self.life.is_stopping() {
                return false;
            }
            let now = mgrp_rt::mono_now();
            if now >= wake {
                return true;
            }
            self.ingest(now, BATCHES_PER_INGEST, wake);
            if self.endpoint.may_start_train() {
                return false;
            }
            self.pump(now);
            self.publish(now, false);
            // The train in flight's next probe is not due before `wake`; riders may
            // fall due before it.
            let until = self
                .endpoint
                .poll_timeout()
                .filter(|&t| t > now)
                .map_or(wake, |t| t.min(wake))
                .min(now.saturating_add(Duration::from_millis(100)));
            self.sleep(until);
        }
    }

    /// Sends the probe due next, at `deadline`: sleeps until a margin before it, builds
    /// it from the riders held by then, spins to the deadline, stamps, seals and sends
    /// it. Each train spins at most `limits.max-train-spin`; after that it is paced by
    /// the timer alone.
    fn send_probe(&mut self, deadline: MonoTime) {
        let s = self.s;
        let margin = self
            .endpoint
            .next_probe()
            .map_or(s.config.busy_poll_margin, |(tx, _)| self.margin(tx));
        // A real-time pacer sleeps in every gap that leaves it at least MIN_SLEEP
        // before the margin, and spins through shorter ones; even those it breaks
        // after MAX_SPIN_RUN. Under the normal scheduler spinning is worse than
        // sleeping, so it always sleeps.
        let spin_below = if self.realtime {
            margin + MIN_SLEEP
        } else {
            Duration::ZERO
        };
        let now = mgrp_rt::mono_now();
        let wake = self.wake_for(deadline, margin);
        let short = deadline.saturating_since(now) < spin_below;
        if !short && !self.sleep_releasing(wake) {
            return;
        }
        let ran = now.saturating_since(self.rested.get());
        if short
            && self.realtime
            && (ran >= MAX_SPIN_RUN || (ran >= DUTY_RUN && self.duty.over(now)))
        {
            if let Err(e) = self.timer.sleep_until(now.saturating_add(BREATHER)) {
                debug!("the pacer's sleep failed: {e}");
            }
            self.rested.set(mgrp_rt::mono_now());
        }
        // Riders that came during the wait ride too.
        let now = mgrp_rt::mono_now();
        self.ingest(now, BATCHES_BEFORE_PROBE, deadline);
        // A cancel taken in meanwhile may have ended the train that was due: the next
        // probe is then another's, perhaps far off, and is planned afresh.
        if self.endpoint.next_probe_deadline() != Some(deadline) {
            return;
        }
        let Some((peer, mut probe)) = self.endpoint.poll_probe(now) else {
            return;
        };
        // Another train's probe may have come first (one cancelled meanwhile): its
        // own margin holds.
        let margin = self.margin(probe.transaction);
        // Through a short gap it spins all the way: even a short timer sleep lets the
        // CPU go idle, and its wake-up can take far longer than the gap.
        let spin_from = if short { Duration::MAX } else { margin };
        let spun = mgrp_rt::wait_until(&self.timer, probe.deadline, spin_from);
        let spin = self.spins.entry(probe.transaction).or_default();
        spin.spun += spun;
        let stamp = mgrp_rt::wall_now();
        probe.packet.set_sender_time(stamp);
        s.net.keyring.seal(peer, &mut probe.packet);
        let departed = mgrp_rt::mono_now();
        let sent =
            match s
                .net
                .send_probe(peer, probe.packet.as_bytes(), probe.transaction, probe.seq)
            {
                Ok(_) => {
                    s.counters.probes_sent.fetch_add(1, Ordering::Relaxed);
                    Some((departed, stamp))
                }
                Err(_) => {
                    s.counters.probe_send_errors.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
        if sent.is_none() {
            // Its riders would be lost: send them as they came instead. A rider whose
            // other pieces did leave is then delivered whole by this copy, and its
            // incomplete reassembly on the far side times out.
            for rider in std::mem::take(&mut probe.riders) {
                s.counters
                    .riders_resent_after_failed_probe
                    .fetch_add(1, Ordering::Relaxed);
                self.output(Output::Transmit(peer, Transmit::Unchanged(rider)));
            }
        }
        if let Some(spin) = self.spins.get_mut(&probe.transaction)
            && !spin.capped
            && spin.spun >= s.config.max_train_spin
        {
            // Spinning holds a CPU, at real-time priority even: enough for one train.
            spin.capped = true;
            let spun = spin.spun;
            s.counters
                .trains_spin_capped
                .fetch_add(1, Ordering::Relaxed);
            self.output(Output::Bound(Bound::Spin(peer, spun)));
        }
        let now = mgrp_rt::mono_now();
        self.endpoint
            .handle_probe_sent(now, probe.transaction, probe.seq, sent);
        // Its buffers build the next probes.
        self.endpoint.recycle(peer, probe);
        // Also wakes the dispatcher for what this probe queued (riders of a failed send).
        self.pump(now);
    }
}
