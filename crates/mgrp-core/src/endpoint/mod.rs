//! Everything a sending daemon decides, for all destinations at once, without I/O and
//! without a clock: the counterpart of [`crate::planner`] (one destination) the way
//! quinn's `Endpoint` stands beside its `Connection`.
//!
//! An [`Endpoint`] owns one [`Planner`] per destination (created on first use, retired
//! when idle), the trains of every client, whose turn it is, which destinations must be
//! routed into the tunnel, and the reports. It is the one place that knows how many
//! trains are queued or in flight per destination. Its driver — the pacer — feeds it:
//!
//! - [`Endpoint::handle_rider`]: an application packet for a destination's peer;
//! - [`Endpoint::handle_submit`]: a client's train, checked and queued, or refused;
//! - [`Endpoint::handle_cancel`] and [`Endpoint::handle_client_gone`];
//! - [`Endpoint::handle_routed`]: the route a [`Action::RouteIn`] asked for is in;
//! - [`Endpoint::handle_probe_sent`]: a probe left (with its departure) or failed;
//! - [`Endpoint::handle_shutdown`];
//!
//! and asks it:
//!
//! - [`Endpoint::poll_action`]: something to do now that is not a probe — send a rider
//!   unchanged or a continuation, deliver a report, route a destination in or out;
//! - [`Endpoint::poll_probe_deadline`]: when the next probe is due (starting the next
//!   trains in turn where a destination has none in flight), so the pacer can sleep
//!   until just before;
//! - [`Endpoint::poll_probe`]: that probe, built as late as possible so riders that
//!   came meanwhile ride in it;
//! - [`Endpoint::poll_timeout`]: when to call back at the latest.
//!
//! Trains to different destinations run at the same time, up to
//! [`EndpointConfig::max_in_flight`] of them: their probes make one schedule, the
//! earliest deadline first. Two probes due closer together than one send takes cannot
//! both leave on time: the later one leaves when the first is out, its departure stamp
//! says when, and its train's report counts it in
//! [`TransactionReport::probes_displaced`]. Trains to one destination run one at a
//! time, in the order they came; when more destinations have trains than may be in
//! flight, they start in address order, round robin. A train starts at least two send
//! times after the one before, and its first probe at least two send times from the
//! next probe of every train in flight (the endpoint learns how long a send takes from
//! [`Endpoint::handle_probe_sent`]): trains at equal gaps, submitted together or one
//! just after another's probe left, would otherwise collide at every probe. Riders are planned per
//! destination, so a train's competing bytes are its own destination's traffic. With
//! routes on demand a destination's trains wait until its route is in, and its route
//! goes out once no train to it is queued or in flight for the hold time (riders held
//! during the last train may still be waiting that long).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::ops::Bound;
use std::time::Duration;

use bytes::Bytes;

use crate::MonoTime;
use crate::WallTime;
use crate::planner::{
    EncapTable, Path, PlanError, Planner, Policy, ProbeToSend, RiderDrop, Transaction, Transmit,
};
use crate::stats::{PlannerCounters, TransactionReport};

#[cfg(test)]
mod tests;

/// Who submitted a train: the driver's name for an API connection.
pub type ClientId = u64;

/// The bounds and modes of an [`Endpoint`].
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// Piggyback policy of every destination.
    pub policy: Policy,
    /// MTU of every path.
    pub mtu: u16,
    /// How MGRP packets travel to each peer (which sets how much of a probe's size
    /// the headers take).
    pub encap: EncapTable,
    /// Whether destinations are routed into the tunnel only while trains to them are
    /// queued or in flight (see [`Action::RouteIn`]).
    pub route_on_demand: bool,
    /// Most destinations with a planner; riders to more are sent unchanged.
    pub max_destinations: usize,
    /// Most rider bytes held over all destinations.
    pub max_held_bytes: usize,
    /// Most trains queued or in flight.
    pub max_trains: usize,
    /// Most trains one client may have queued or in flight.
    pub max_trains_per_client: usize,
    /// Most trains in flight at once, each to a destination of its own (at least 1).
    pub max_in_flight: usize,
    /// How long an empty planner stays before it is retired.
    pub planner_idle: Duration,
    /// Start of the rider ids of every planner, mixed with its destination; should
    /// differ between lives of the daemon so a restart's ids are not taken for
    /// duplicates by the far side.
    pub rider_id_seed: u32,
}

impl EndpointConfig {
    /// The defaults for `policy` and `mtu`.
    pub fn new(policy: Policy, mtu: u16) -> Self {
        Self {
            policy,
            mtu,
            encap: EncapTable::default(),
            route_on_demand: false,
            max_destinations: 1024,
            max_held_bytes: 32 << 20,
            max_trains: 64,
            max_trains_per_client: 16,
            max_in_flight: 16,
            planner_idle: Duration::from_secs(30),
            rider_id_seed: 0,
        }
    }
}

/// Why a train was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// As many trains as the endpoint takes are queued or in flight.
    #[error("{0} trains are queued or in flight, the most this daemon takes; retry later")]
    Busy(usize),
    /// As many trains as one client may have are queued or in flight.
    #[error("this client has {0} trains queued or in flight, the most one client may")]
    ClientBusy(usize),
    /// The train does not fit the path.
    #[error(transparent)]
    Invalid(#[from] PlanError),
    /// The endpoint is shutting down.
    #[error("stopping: no more trains are taken")]
    ShuttingDown,
}

/// Something for the driver to do now that is not a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a rider unchanged, or a continuation packet, to `peer`.
    Transmit {
        /// The destination's MGRP peer.
        peer: IpAddr,
        /// What to send.
        transmit: Transmit,
    },
    /// A train ended: give its report to its client.
    Report {
        /// Who submitted it.
        client: ClientId,
        /// Where it went.
        peer: IpAddr,
        /// The report.
        report: TransactionReport,
    },
    /// Route traffic for `peer` into the tunnel, then call
    /// [`Endpoint::handle_routed`] (also if that failed: its trains then run without
    /// riders rather than never).
    RouteIn(IpAddr),
    /// Traffic for this peer no longer needs to enter the tunnel.
    RouteOut(IpAddr),
}

/// The endpoint's own counters (the planners' are summed apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    /// Riders sent unchanged without entering a planner because
    /// [`EndpointConfig::max_destinations`] planners exist already.
    pub riders_bypassed_too_many_destinations: u64,
    /// Trains queued.
    pub trains_accepted: u64,
    /// Trains refused because the endpoint or the client had too many.
    pub trains_refused_busy: u64,
    /// Trains refused as not fitting the path.
    pub trains_refused_invalid: u64,
    /// Planners retired while idle.
    pub planners_retired: u64,
    /// Routes asked for.
    pub routes_in: u64,
    /// Routes given back.
    pub routes_out: u64,
    /// Probes that fell due while another train's probe was being sent, and so left
    /// after it (see [`TransactionReport::probes_displaced`]).
    pub probes_displaced: u64,
}

/// Where a destination's route stands (with routes on demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Not routed into the tunnel.
    Out,
    /// Asked for; its trains wait.
    Requested,
    /// Routed.
    In,
    /// Routed, with no train left; goes out at this time unless a train comes.
    Leaving(MonoTime),
}

#[derive(Debug)]
struct Dest {
    planner: Planner,
    /// Trains queued or in flight.
    trains: usize,
    route: Route,
    last_used: MonoTime,
    /// The train in flight whose next probe fell due while another train's probe was
    /// being sent.
    displaced: Option<u32>,
}

/// Who submitted a train queued or in flight, where it goes, and how many of its
/// probes were displaced so far.
#[derive(Debug, Clone, Copy)]
struct Owner {
    client: ClientId,
    peer: IpAddr,
    displaced: u16,
}

/// The sending side of a daemon; see the module documentation.
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    dests: BTreeMap<IpAddr, Dest>,
    /// The destinations with a train in flight, at most `max_in_flight` (room for
    /// them all is taken at the start).
    active: Vec<IpAddr>,
    /// The destination whose train started last.
    last_turn: Option<IpAddr>,
    /// Client and destination of every train queued or in flight.
    owners: HashMap<u32, Owner>,
    next_id: u32,
    /// Rider bytes held over all planners.
    held_bytes: usize,
    actions: VecDeque<Action>,
    retired: PlannerCounters,
    counters: EndpointCounters,
    shutting_down: bool,
    last_sweep: MonoTime,
    /// Rider ids used by retired planners, added to every new planner's first id so a
    /// destination's new planner never reuses an id its far side remembers.
    id_offset: u32,
    /// How long a send takes, nanoseconds: a moving average of the time from a probe's
    /// departure to the driver's report of it.
    send_ns: u64,
    /// When the last train started.
    last_start: MonoTime,
}

/// Longest the start of a train is put off to keep it apart from the one before.
const MAX_START_SPACING: Duration = Duration::from_micros(100);

impl Endpoint {
    /// An endpoint with no destinations yet. Fails if the policy or MTU cannot work.
    pub fn new(config: EndpointConfig) -> Result<Self, PlanError> {
        // Both families must be able to carry an MGRP packet, in UDP if any peer takes
        // it so.
        let smallest = if config.encap.any_udp() {
            Path::ipv6(config.mtu).udp()
        } else {
            Path::ipv6(config.mtu)
        };
        Planner::new(config.policy.clone(), smallest)?;
        let max_in_flight = config.max_in_flight.max(1);
        Ok(Self {
            config: EndpointConfig {
                max_in_flight,
                ..config
            },
            dests: BTreeMap::new(),
            active: Vec::with_capacity(max_in_flight),
            last_turn: None,
            owners: HashMap::new(),
            next_id: 0,
            held_bytes: 0,
            actions: VecDeque::new(),
            retired: PlannerCounters::default(),
            counters: EndpointCounters::default(),
            shutting_down: false,
            last_sweep: MonoTime::ZERO,
            id_offset: 0,
            send_ns: 0,
            last_start: MonoTime::ZERO,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// The planners' counters, summed over live and retired planners.
    pub fn planner_counters(&self) -> PlannerCounters {
        let mut sum = self.retired;
        for d in self.dests.values() {
            sum += &d.planner.counters();
        }
        sum
    }

    /// The endpoint's own counters.
    pub fn counters(&self) -> EndpointCounters {
        self.counters
    }

    /// Trains queued or in flight to `peer`.
    pub fn trains_to(&self, peer: IpAddr) -> usize {
        self.dests.get(&peer).map_or(0, |d| d.trains)
    }

    /// Trains queued or in flight in all.
    pub fn trains(&self) -> usize {
        self.owners.len()
    }

    /// Destinations with a planner.
    pub fn destinations(&self) -> usize {
        self.dests.len()
    }

    /// Rider bytes held over all destinations.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Per destination with a planner: riders held and their bytes.
    pub fn held_per_destination(&self) -> impl Iterator<Item = (IpAddr, usize, usize)> + '_ {
        self.dests
            .iter()
            .map(|(peer, d)| (*peer, d.planner.held_riders(), d.planner.queued_bytes()))
    }

    /// Whether shutdown has been asked for and nothing is left: no rider held, no
    /// train, no action waiting.
    pub fn is_drained(&self) -> bool {
        self.shutting_down
            && self.actions.is_empty()
            && self.owners.is_empty()
            && self.dests.values().all(|d| d.planner.held_riders() == 0)
    }

    fn dest(&mut self, peer: IpAddr, now: MonoTime) -> &mut Dest {
        let config = &self.config;
        let id_offset = self.id_offset;
        self.dests.entry(peer).or_insert_with(|| {
            let path = config.encap.path(peer, config.mtu);
            let mut planner = Planner::new(config.policy.clone(), path)
                .expect("checked for the smaller IPv6 room in Endpoint::new");
            planner.set_next_rider_id((config.rider_id_seed ^ mix(peer)).wrapping_add(id_offset));
            Dest {
                planner,
                trains: 0,
                route: if config.route_on_demand {
                    Route::Out
                } else {
                    Route::In
                },
                last_used: now,
                displaced: None,
            }
        })
    }

    /// Takes in an application packet for `peer` that arrived at `now`. It is held for
    /// a probe, or queued to leave unchanged (see [`Self::poll_action`]), or dropped
    /// (counted) when its queue or the total is full.
    pub fn handle_rider(
        &mut self,
        now: MonoTime,
        peer: IpAddr,
        data: Bytes,
    ) -> Result<(), RiderDrop> {
        if !self.dests.contains_key(&peer) && self.dests.len() >= self.config.max_destinations {
            self.counters.riders_bypassed_too_many_destinations += 1;
            self.actions.push_back(Action::Transmit {
                peer,
                transmit: Transmit::Unchanged(data),
            });
            return Ok(());
        }
        let room = self.config.max_held_bytes.saturating_sub(self.held_bytes);
        let d = self.dest(peer, now);
        d.last_used = now;
        let before = d.planner.queued_bytes();
        let queued = d.planner.handle_rider_within(now, data, room);
        let mut out = Vec::new();
        while let Some(t) = d.planner.poll_transmit(now) {
            out.push(t);
        }
        let after = d.planner.queued_bytes();
        self.held_bytes = (self.held_bytes + after).saturating_sub(before);
        for transmit in out {
            self.actions.push_back(Action::Transmit { peer, transmit });
        }
        queued
    }

    /// Queues `client`'s train to `peer`, submitted at `now`; returns the id it now
    /// has (any id in `tx` is replaced). Its report comes as [`Action::Report`].
    pub fn handle_submit(
        &mut self,
        now: MonoTime,
        client: ClientId,
        peer: IpAddr,
        mut tx: Transaction,
    ) -> Result<u32, SubmitError> {
        if self.shutting_down {
            return Err(SubmitError::ShuttingDown);
        }
        if self.owners.len() >= self.config.max_trains {
            self.counters.trains_refused_busy += 1;
            return Err(SubmitError::Busy(self.owners.len()));
        }
        // At most `max_trains` of them: counting is as cheap as keeping a count.
        let mine = self.owners.values().filter(|o| o.client == client).count();
        if mine >= self.config.max_trains_per_client {
            self.counters.trains_refused_busy += 1;
            return Err(SubmitError::ClientBusy(mine));
        }
        let id = loop {
            self.next_id = self.next_id.wrapping_add(1);
            if self.next_id != 0 && !self.owners.contains_key(&self.next_id) {
                break self.next_id;
            }
        };
        tx.id = id;
        let route_on_demand = self.config.route_on_demand;
        let d = self.dest(peer, now);
        if let Err(e) = d.planner.handle_transaction(now, tx) {
            self.counters.trains_refused_invalid += 1;
            return Err(e.into());
        }
        d.trains += 1;
        d.last_used = now;
        let mut route_in = false;
        if route_on_demand {
            match d.route {
                Route::Out => {
                    d.route = Route::Requested;
                    route_in = true;
                }
                Route::Leaving(_) => d.route = Route::In,
                Route::Requested | Route::In => {}
            }
        }
        if route_in {
            self.counters.routes_in += 1;
            self.actions.push_back(Action::RouteIn(peer));
        }
        self.owners.insert(
            id,
            Owner {
                client,
                peer,
                displaced: 0,
            },
        );
        self.counters.trains_accepted += 1;
        Ok(id)
    }

    /// The route asked for with [`Action::RouteIn`] is in place (or could not be put
    /// in place): `peer`'s trains may run.
    pub fn handle_routed(&mut self, peer: IpAddr) {
        if let Some(d) = self.dests.get_mut(&peer)
            && d.route == Route::Requested
        {
            d.route = Route::In;
        }
    }

    /// Cancels `client`'s train `id`, queued or in flight; its report (saying so)
    /// follows as an action. Returns whether the train was found.
    pub fn handle_cancel(&mut self, now: MonoTime, client: ClientId, id: u32) -> bool {
        let Some(&Owner {
            client: owner,
            peer,
            ..
        }) = self.owners.get(&id)
        else {
            return false;
        };
        if owner != client {
            return false;
        }
        let found = self
            .dests
            .get_mut(&peer)
            .is_some_and(|d| d.planner.cancel_transaction(id));
        self.collect_reports(now, peer);
        found
    }

    /// `client` is gone: its trains are cancelled (their reports still come, for the
    /// driver to drop).
    pub fn handle_client_gone(&mut self, now: MonoTime, client: ClientId) {
        let mut ids: Vec<u32> = self
            .owners
            .iter()
            .filter(|(_, o)| o.client == client)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.handle_cancel(now, client, id);
        }
    }

    /// Takes back a sent probe's buffers (from [`Self::poll_probe`]) so later probes
    /// are built in them without allocating.
    pub fn recycle(&mut self, peer: IpAddr, probe: ProbeToSend) {
        if let Some(d) = self.dests.get_mut(&peer) {
            d.planner.recycle(probe);
        }
    }

    /// Probe `seq` of train `transaction` left at `departed` with sender stamp
    /// `stamp`, or could not be sent (`None`); `now` is when the send was over. Every
    /// other train whose next probe fell due while this one was being sent (from
    /// `departed` to `now`) had to wait for it: that probe is displaced. (One that fell
    /// due before `departed` was late already, for the driver's own reasons.)
    pub fn handle_probe_sent(
        &mut self,
        now: MonoTime,
        transaction: u32,
        seq: u16,
        departed: Option<(MonoTime, WallTime)>,
    ) {
        let Some(owner) = self.owners.get_mut(&transaction) else {
            return;
        };
        let peer = owner.peer;
        if let Some((left, _)) = departed {
            let took = u64::try_from(now.saturating_since(left).as_nanos()).unwrap_or(u64::MAX);
            // The first send as it was, then one eighth of each new one: a stall now
            // and then moves it little.
            self.send_ns = if self.send_ns == 0 {
                took
            } else {
                (self.send_ns.saturating_mul(7).saturating_add(took)) / 8
            };
        }
        if let Some(d) = self.dests.get_mut(&peer) {
            if d.displaced.take() == Some(transaction) {
                owner.displaced = owner.displaced.saturating_add(1);
                self.counters.probes_displaced += 1;
            }
            d.planner.handle_probe_sent(transaction, seq, departed);
        }
        if let Some((left, _)) = departed {
            for other in &self.active {
                if *other == peer {
                    continue;
                }
                if let Some(d) = self.dests.get_mut(other)
                    && d.planner
                        .next_deadline()
                        .is_some_and(|t| left <= t && t < now)
                {
                    d.displaced = d.planner.transaction_in_flight();
                }
            }
        }
        self.collect_reports(now, peer);
    }

    /// Stops taking trains: every train is cancelled (each still reports) and every
    /// held rider falls due. Routes are left to the driver, which removes them all.
    pub fn handle_shutdown(&mut self, now: MonoTime) {
        self.shutting_down = true;
        let peers: Vec<IpAddr> = self.dests.keys().copied().collect();
        for peer in peers {
            if let Some(d) = self.dests.get_mut(&peer) {
                d.planner.handle_shutdown();
            }
            self.collect_reports(now, peer);
        }
        self.active.clear();
    }

    /// Moves `peer`'s finished trains' reports into the actions.
    fn collect_reports(&mut self, now: MonoTime, peer: IpAddr) {
        let Some(d) = self.dests.get_mut(&peer) else {
            return;
        };
        let hold = self.config.policy.hold;
        let mut reports = Vec::new();
        while let Some(r) = d.planner.poll_report() {
            d.trains = d.trains.saturating_sub(1);
            reports.push(r);
        }
        if d.trains == 0 && d.route == Route::In && self.config.route_on_demand {
            // Riders held during the last train may still wait this long.
            d.route = Route::Leaving(
                now.saturating_add(hold)
                    .saturating_add(Duration::from_millis(1)),
            );
        }
        if d.planner.next_deadline().is_none() {
            self.active.retain(|p| *p != peer);
        }
        for mut report in reports {
            let Some(owner) = self.owners.remove(&report.transaction) else {
                continue;
            };
            report.probes_displaced = owner.displaced;
            self.actions.push_back(Action::Report {
                client: owner.client,
                peer,
                report,
            });
        }
    }

    /// The destination whose train in flight has the earliest next probe, and when
    /// that probe is due (the first started wins a tie).
    fn earliest(&self) -> Option<(IpAddr, MonoTime)> {
        self.active
            .iter()
            .filter_map(|p| Some((*p, self.dests.get(p)?.planner.next_deadline()?)))
            .min_by_key(|(_, t)| *t)
    }

    /// Whether a destination's next train may start: one is queued and its route is in.
    fn ready(d: &Dest) -> bool {
        d.planner.has_transaction() && matches!(d.route, Route::In | Route::Leaving(_))
    }

    /// When the next probe of the trains in flight is due; starts nothing.
    pub fn next_probe_deadline(&self) -> Option<MonoTime> {
        self.earliest().map(|(_, t)| t)
    }

    /// The train whose probe is due next, and when: what
    /// [`Self::next_probe_deadline`] gives, with the train's id (a driver that keeps
    /// something per train, such as how long it spun, looks it up by this).
    pub fn next_probe(&self) -> Option<(u32, MonoTime)> {
        let (peer, deadline) = self.earliest()?;
        let id = self.dests.get(&peer)?.planner.transaction_in_flight()?;
        Some((id, deadline))
    }

    /// Trains in flight.
    pub fn in_flight(&self) -> usize {
        self.active.len()
    }

    /// Whether a train may start now: one is queued for a destination with none in
    /// flight, its route is in, and there is room for it.
    pub fn may_start_train(&self) -> bool {
        !self.shutting_down
            && self.active.len() < self.config.max_in_flight
            && self.owners.len() > self.active.len()
            && self
                .dests
                .iter()
                .any(|(p, d)| Self::ready(d) && !self.active.contains(p))
    }

    /// When the next probe is due, if a train is in flight or one may start; first
    /// starts at `now` the next train of every destination with none in flight, in
    /// turn, while fewer than [`EndpointConfig::max_in_flight`] are. Nothing is built
    /// yet.
    pub fn poll_probe_deadline(&mut self, now: MonoTime) -> Option<MonoTime> {
        let dests = &self.dests;
        self.active.retain(|p| {
            dests
                .get(p)
                .is_some_and(|d| d.planner.next_deadline().is_some())
        });
        if !self.shutting_down && self.active.len() < self.config.max_in_flight {
            self.start_trains(now);
        }
        self.next_probe_deadline()
    }

    /// The earliest time from `first` on for a new train's first probe such that
    /// neither it nor the second (`second_gap` after it) falls within `spacing` of the
    /// next probe of a train in flight. A train at the same gap as one in flight keeps
    /// the phase it starts with, so one started just after the other's probe left
    /// would fall due while the other's next probe is being sent, every time.
    fn clear_of_trains_in_flight(
        &self,
        mut first: MonoTime,
        second_gap: Option<Duration>,
        spacing: Duration,
    ) -> MonoTime {
        if spacing.is_zero() {
            return first;
        }
        let offsets = [Some(Duration::ZERO), second_gap];
        // Each step moves the first probe forward past one probe of one train, so
        // twice as many steps as trains in flight settle it.
        for _ in 0..=2 * self.active.len() {
            let clash = self.active.iter().find_map(|p| {
                let t = self.dests.get(p)?.planner.next_deadline()?;
                offsets.iter().flatten().find_map(|&off| {
                    let mine = first.saturating_add(off);
                    let apart = if t > mine {
                        t.saturating_since(mine)
                    } else {
                        mine.saturating_since(t)
                    };
                    // Moved so that this probe of the new train leaves `spacing`
                    // after the other's.
                    (apart < spacing).then(|| {
                        MonoTime::from_nanos(
                            t.saturating_add(spacing)
                                .as_nanos()
                                .saturating_sub(u64::try_from(off.as_nanos()).unwrap_or(0)),
                        )
                    })
                })
            });
            match clash {
                Some(later) if later > first => first = later,
                _ => break,
            }
        }
        first
    }

    /// How long a send takes, as the driver's reports showed (a moving average).
    pub fn send_time(&self) -> Duration {
        Duration::from_nanos(self.send_ns)
    }

    /// Starts trains, one per ready destination with none in flight, from the
    /// destination after the last that started, round robin, while there is room: at
    /// `now`, or two send times after the train that started last if that is later,
    /// put off further while its first probe would fall within two send times of
    /// another train's next probe.
    fn start_trains(&mut self, now: MonoTime) {
        let spacing = Duration::from_nanos(self.send_ns.saturating_mul(2)).min(MAX_START_SPACING);
        while self.active.len() < self.config.max_in_flight
            // Every train queued or in flight is in flight: none to start.
            && self.owners.len() > self.active.len()
        {
            let after = self.last_turn.map_or(Bound::Unbounded, Bound::Excluded);
            let active = &self.active;
            let Some(peer) = self
                .dests
                .range((after, Bound::Unbounded))
                .chain(self.dests.range(..))
                .find(|(p, d)| Self::ready(d) && !active.contains(p))
                .map(|(p, _)| *p)
            else {
                return;
            };
            self.last_turn = Some(peer);
            let Some(d) = self.dests.get_mut(&peer) else {
                return;
            };
            d.last_used = now;
            let earliest = now.max(self.last_start.saturating_add(spacing));
            let (first_gap, second_gap) = d.planner.next_gaps().unwrap_or_default();
            let first = self.clear_of_trains_in_flight(
                earliest.saturating_add(first_gap),
                second_gap,
                spacing,
            );
            let at = MonoTime::from_nanos(
                first
                    .as_nanos()
                    .saturating_sub(u64::try_from(first_gap.as_nanos()).unwrap_or(u64::MAX))
                    .max(earliest.as_nanos()),
            );
            let Some(d) = self.dests.get_mut(&peer) else {
                return;
            };
            if d.planner.poll_start(at).is_none() {
                return;
            }
            self.last_start = at;
            self.active.push(peer);
        }
    }

    /// Builds the next probe of the trains in flight (the earliest due), with the
    /// riders held at `now`. Call it shortly before the deadline
    /// [`Self::poll_probe_deadline`] gave, send the probe at that deadline, then report
    /// with [`Self::handle_probe_sent`].
    pub fn poll_probe(&mut self, now: MonoTime) -> Option<(IpAddr, ProbeToSend)> {
        let (peer, _) = self.earliest()?;
        let d = self.dests.get_mut(&peer)?;
        let before = d.planner.queued_bytes();
        let probe = d.planner.poll_probe(now);
        let after = d.planner.queued_bytes();
        self.held_bytes = (self.held_bytes + after).saturating_sub(before);
        probe.map(|p| (peer, p))
    }

    /// The next thing to do at `now` that is not a probe, oldest first: riders and
    /// continuations whose wait is over, reports, route changes. Each call does work
    /// bounded by the number of destinations; the driver may stop calling at any
    /// point (to keep a deadline) and continue later.
    pub fn poll_action(&mut self, now: MonoTime) -> Option<Action> {
        if self.actions.is_empty() {
            self.refill(now);
        }
        self.actions.pop_front()
    }

    fn refill(&mut self, now: MonoTime) {
        let mut held = 0;
        for (peer, d) in &mut self.dests {
            while let Some(transmit) = d.planner.poll_transmit(now) {
                self.actions.push_back(Action::Transmit {
                    peer: *peer,
                    transmit,
                });
            }
            held += d.planner.queued_bytes();
            if let Route::Leaving(at) = d.route
                && at <= now
                && d.trains == 0
            {
                d.route = Route::Out;
                self.counters.routes_out += 1;
                self.actions.push_back(Action::RouteOut(*peer));
            }
        }
        self.held_bytes = held;
        if now.saturating_since(self.last_sweep) >= Duration::from_secs(1) {
            self.last_sweep = now;
            self.retire_idle(now);
        }
    }

    /// Retires planners that hold nothing, run nothing, have no route and were not
    /// used for [`EndpointConfig::planner_idle`]; their counters stay in the totals.
    fn retire_idle(&mut self, now: MonoTime) {
        let idle = self.config.planner_idle;
        self.retire(|_, d| now.saturating_since(d.last_used) > idle);
    }

    /// Retires the planners that hold nothing, run nothing, have no route, and that
    /// `pick` picks.
    fn retire(&mut self, pick: impl Fn(IpAddr, &Dest) -> bool) {
        let active = &self.active;
        let gone: Vec<IpAddr> = self
            .dests
            .iter()
            .filter(|(peer, d)| {
                !active.contains(peer)
                    && d.trains == 0
                    && d.planner.held_riders() == 0
                    && !d.planner.has_transaction()
                    && matches!(d.route, Route::Out | Route::In)
                    && (d.route == Route::Out || !self.config.route_on_demand)
                    && pick(**peer, d)
            })
            .map(|(p, _)| *p)
            .collect();
        for peer in gone {
            if let Some(d) = self.dests.remove(&peer) {
                let c = d.planner.counters();
                // Each rider taken in used at most one id.
                self.id_offset = self.id_offset.wrapping_add(c.riders_in as u32);
                self.retired += &c;
                self.counters.planners_retired += 1;
            }
        }
    }

    /// Takes a new encapsulation table (the daemon's peers changed). A destination
    /// whose path it changes is planned afresh on its next use if it is idle now
    /// (nothing held, queued or in flight, no route); a busy one keeps the path it
    /// was planned with until it is retired, so a daemon should not change the path
    /// of a peer it keeps. Fails, changing nothing, if a peer's path would leave the
    /// policy no room (as [`Self::new`]).
    pub fn set_encap(&mut self, encap: EncapTable) -> Result<(), PlanError> {
        let mtu = self.config.mtu;
        if encap.any_udp() {
            Planner::new(self.config.policy.clone(), Path::ipv6(mtu).udp())?;
        }
        let old = std::mem::replace(&mut self.config.encap, encap);
        let new = &self.config.encap;
        let changed: Vec<IpAddr> = self
            .dests
            .keys()
            .filter(|p| old.path(**p, mtu) != new.path(**p, mtu))
            .copied()
            .collect();
        self.retire(|peer, _| changed.contains(&peer));
        Ok(())
    }

    /// When to call back at the latest: the next probe's deadline, the first held
    /// rider's, a route that goes out, or `now`-like (a past time) when a train may
    /// start or an action waits. `None` when there is nothing to wait for.
    pub fn poll_timeout(&self) -> Option<MonoTime> {
        if !self.actions.is_empty() {
            return Some(MonoTime::ZERO);
        }
        let mut t: Option<MonoTime> = None;
        let mut at = |x: MonoTime| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(deadline) = self.next_probe_deadline() {
            at(deadline);
        }
        let room = self.active.len() < self.config.max_in_flight;
        for (peer, d) in &self.dests {
            if let Some(r) = d.planner.rider_timeout() {
                at(r);
            }
            if let Route::Leaving(x) = d.route {
                at(x);
            }
            if room && !self.shutting_down && Self::ready(d) && !self.active.contains(peer) {
                at(MonoTime::ZERO);
            }
        }
        t
    }
}

/// Spreads a peer's address over a rider id seed.
fn mix(peer: IpAddr) -> u32 {
    let bytes: Vec<u8> = match peer {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    // FNV-1a: stable across runs, unlike the standard hasher.
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}
