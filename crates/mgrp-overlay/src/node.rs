//! One node running: the pathload servers its neighbours measure from, the
//! scheduler's thread, and a thread per measurement in flight, around the state the
//! HTTP API reads.
//!
//! Threads, not tasks: a measurement is pathload's blocking receiver, paced by the
//! clock. The API reaches the node through [`Shared`] only: the links' views and
//! histories, "measure now", and a broadcast of each new estimate.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use mgrp_rt::{lock, unix_now};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use mgrp_tool::SessionOptions;
use pathload_rs::control::Transport;
use pathload_rs::tool::{
    MeasureError, MeasureOptions, ServeEvent, ServeOptions, Server, measure, sender_traffic,
};
use serde::Serialize;
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use crate::btc::KernelView;
use crate::config::{Config, Link, Method};
use crate::passive::{PASSIVE_TCP, PassiveTcp};
use crate::schedule::{LinkState, NowRefused, RunEnd, Scheduler};
use crate::store::{Record, Store};
use crate::timing::PassiveTiming;
use mgrp_views::estimate::{Estimate, Loss, RunOutcome, Shape};
use mgrp_views::link::{LinkState as RunState, LinkView, PassiveView};
use mgrp_views::prediction::Prediction;

/// New estimates a slow subscriber may fall behind by before it misses some.
const STREAM_BACKLOG: usize = 1024;
/// The scheduler's thread looks at its stop flag at least this often.
const TICK: Duration = Duration::from_millis(500);
/// Links' first runs are spread over this much time after start.
const FIRST_WITHIN: Duration = Duration::from_secs(5);
/// How often a link waiting for traffic to ride asks its neighbour for it, and how
/// long before it falls due it starts asking.
const TRAFFIC_POLL: Duration = Duration::from_secs(1);

/// What the event stream carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A run ended (or a continuous one published on the way).
    Estimate(Estimate),
    /// A neighbour's transfer-rate prediction changed: after a run of one of its
    /// links, or when its kernel reported on its TCP flows here.
    Btc(BtcEvent),
    /// What the applications' traffic from a neighbour said at a poll.
    Passive(PassiveEvent),
    /// Route control moved a destination to another path.
    Route(mgrp_route::control::SwitchView),
}

/// A neighbour's passive estimates at a poll, for each of its links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassiveEvent {
    /// The links from that neighbour.
    pub links: Vec<String>,
    /// `passive-tcp`: its kernel's view of its TCP flows here.
    pub tcp: Option<PassiveTcp>,
    /// `passive-dispersion` and `passive-trend`: the timing of their segments.
    pub timing: Option<PassiveTiming>,
}

/// A neighbour's prediction, for each of its links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BtcEvent {
    /// The links from that neighbour.
    pub links: Vec<String>,
    /// The prediction.
    #[serde(flatten)]
    pub btc: Prediction,
}

impl Event {
    /// Whether the event concerns link `name`.
    pub fn about(&self, name: &str) -> bool {
        match self {
            Self::Estimate(e) => e.link == name,
            Self::Btc(b) => b.links.iter().any(|l| l == name),
            Self::Passive(p) => p.links.iter().any(|l| l == name),
            Self::Route(_) => false,
        }
    }
}

/// Why "measure now" was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NowError {
    /// No link has that name.
    #[error("no link of that name")]
    NoSuchLink,
    /// A run of the link is in flight.
    #[error("a measurement of this link is running; its result is the one to wait for")]
    Running,
}

/// The node's state, shared by its threads and the API.
#[derive(Debug)]
pub struct Shared {
    config: Config,
    sched: Mutex<Scheduler>,
    wake: Condvar,
    records: Mutex<Vec<Record>>,
    /// What each neighbour's kernel last said of its TCP flows here.
    kernel: Mutex<HashMap<IpAddr, KernelView>>,
    /// What each neighbour's last answer gave for passive estimates.
    passive: Mutex<HashMap<IpAddr, PassiveTcp>>,
    /// Each neighbour's last answer that gave an estimate.
    passive_good: Mutex<HashMap<IpAddr, PassiveTcp>>,
    /// What the timing of each neighbour's segments gave over the last window.
    timing: Mutex<HashMap<IpAddr, PassiveTiming>>,
    events: broadcast::Sender<Event>,
    stop: AtomicBool,
    seq: AtomicU64,
    /// Where each link's history is kept across restarts, if anywhere.
    store: Option<Store>,
    /// When the node started, Unix seconds.
    started_at: f64,
    /// Route control, when configured.
    routes: Option<Arc<mgrp_route::control::Control>>,
    /// What each transport this node serves its neighbours on did for them.
    served: Mutex<BTreeMap<String, Served>>,
}

/// What a transport served: measurements, refusals (a receiver turned away or a
/// request refused: not allowed, busy, over its budget or session limit, an
/// address not proven), and failures on this side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Measurements that ended.
    pub measurements: u64,
    /// Refusals.
    pub refusals: u64,
    /// Requests that failed here.
    pub failures: u64,
}

impl Shared {
    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What each transport this node serves on did for its neighbours.
    pub fn served(&self) -> BTreeMap<String, Served> {
        lock(&self.served).clone()
    }

    /// Every link with its state and latest estimate.
    pub fn links(&self) -> Vec<LinkView> {
        (0..self.config.links.len())
            .filter_map(|i| self.link_view(i))
            .collect()
    }

    /// One link, by name.
    pub fn link(&self, name: &str) -> Option<LinkView> {
        self.config.link(name).and_then(|(i, _)| self.link_view(i))
    }

    fn link_view(&self, i: usize) -> Option<LinkView> {
        let link = self.config.links.get(i)?;
        let now_mono = mgrp_rt::mono_now();
        let now_wall = unix_now();
        let sched = lock(&self.sched);
        let traffic = sched.traffic(i);
        let (state, next, failures, peer_down) = match sched.state(i)?.clone() {
            LinkState::Waiting { due } => (RunState::Waiting, Some(due), 0, false),
            LinkState::AwaitingTraffic { until, .. } => {
                (RunState::AwaitingTraffic, Some(until), 0, false)
            }
            LinkState::Ready { .. } => (RunState::Ready, None, 0, false),
            LinkState::Running { .. } => (RunState::Running, None, 0, false),
            LinkState::BackingOff {
                until,
                failures,
                peer_down,
                ..
            } => (RunState::BackingOff, Some(until), failures, peer_down),
        };
        drop(sched);
        let btc = self.btc_of(link.from);
        let last_passive = lock(&self.passive).get(&link.from).cloned();
        let timing = lock(&self.timing).get(&link.from).cloned();
        let records = lock(&self.records);
        let r = &records[i];
        let latest = r
            .history
            .iter()
            .rev()
            .find(|e| e.outcome.answered())
            .cloned();
        Some(LinkView {
            name: link.name.clone(),
            from: format!("{}:{}", link.from, link.port),
            transport: link.transport.to_string(),
            method: link.method.name().into(),
            interval_s: link.timing.interval.as_secs_f64(),
            ride_min_bps: link.timing.ride_min_bps,
            traffic_bps: link.timing.ride_min_bps.and(traffic),
            state,
            next_run_in_s: next.map(|t| t.saturating_since(now_mono).as_secs_f64()),
            failures,
            peer_down,
            last_error: r.last_error.clone(),
            age_s: latest.as_ref().map(|e| (now_wall - e.ended_at).max(0.0)),
            latest,
            runs: r.runs,
            probe_bytes: r.probe_bytes,
            riding_probe_bytes: r.riding_probe_bytes,
            btc,
            active_always: link.active_always,
            passive: link.timing.passive.then(|| PassiveView {
                source: PASSIVE_TCP.into(),
                age_s: last_passive.as_ref().map(|p| (now_wall - p.at).max(0.0)),
                last: last_passive,
                timing_age_s: timing.as_ref().map(|t| (now_wall - t.at).max(0.0)),
                timing,
                covered: r.passive,
                coverage: share(r.passive, r.passive + r.runs.total()),
            }),
        })
    }

    /// The transfer-rate prediction for the path from `from`, from the latest runs of
    /// every link from it and what its kernel last said.
    pub fn btc_of(&self, from: IpAddr) -> Prediction {
        let records = lock(&self.records);
        let runs: Vec<(&Link, Option<&Estimate>)> = self
            .config
            .links
            .iter()
            .zip(records.iter())
            .filter(|(l, _)| l.from == from)
            .map(|(l, r)| (l, r.history.iter().rev().find(|e| e.outcome.answered())))
            .collect();
        let kernel = lock(&self.kernel);
        crate::btc::btc(from, &runs, kernel.get(&from), &self.config.btc, unix_now())
    }

    fn publish_btc(&self, from: IpAddr) {
        let links = self
            .config
            .links
            .iter()
            .filter(|l| l.from == from)
            .map(|l| l.name.clone())
            .collect();
        let btc = self.btc_of(from);
        let _ = self.events.send(Event::Btc(BtcEvent { links, btc }));
    }

    /// Link `name`'s last `limit` runs, oldest first.
    pub fn history(&self, name: &str, limit: usize) -> Option<Vec<Estimate>> {
        let (i, _) = self.config.link(name)?;
        let records = lock(&self.records);
        let h = &records[i].history;
        Some(
            h.iter()
                .skip(h.len().saturating_sub(limit))
                .cloned()
                .collect(),
        )
    }

    /// Every run's result as it ends, and every change of a prediction.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Puts link `name` first in line.
    pub fn measure_now(&self, name: &str) -> Result<(), NowError> {
        let (i, _) = self.config.link(name).ok_or(NowError::NoSuchLink)?;
        lock(&self.sched)
            .measure_now(i, mgrp_rt::mono_now())
            .map_err(|e| match e {
                NowRefused::NoSuchLink => NowError::NoSuchLink,
                NowRefused::Running => NowError::Running,
            })?;
        self.wake.notify_all();
        Ok(())
    }

    /// When the node started, Unix seconds.
    pub fn started_at(&self) -> f64 {
        self.started_at
    }

    /// Route control, when configured.
    pub fn routes(&self) -> Option<&Arc<mgrp_route::control::Control>> {
        self.routes.as_ref()
    }

    /// Whether the node is stopping.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn record(&self, i: usize, e: Estimate) {
        let saved = {
            let mut records = lock(&self.records);
            let r = &mut records[i];
            if e.method == PASSIVE_TCP {
                r.passive += 1;
            } else {
                r.runs.add(e.outcome);
            }
            r.probe_bytes += e.probe_bytes;
            r.riding_probe_bytes += e.riding_probe_bytes;
            r.last_error.clone_from(&e.error);
            if r.history.len() == self.config.history {
                r.history.pop_front();
            }
            r.history.push_back(e.clone());
            self.store.as_ref().map(|_| r.clone())
        };
        if let (Some(store), Some(r)) = (&self.store, saved) {
            if let Err(err) = store.save(&e.link, &r) {
                warn!("{}: cannot keep its history on disk: {err}", e.link);
            }
        }
        // Nobody listening is not an error.
        let from = self
            .config
            .links
            .iter()
            .find(|l| l.name == e.link)
            .map(|l| l.from);
        let _ = self.events.send(Event::Estimate(e));
        if let Some(from) = from {
            self.publish_btc(from);
        }
    }
}

/// A running node; [`Node::stop`] ends it.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    serving: Vec<(Transport, SocketAddr)>,
}

impl Node {
    /// Binds the servers the configuration asks for (an error if a port is taken) and
    /// starts serving and measuring.
    pub fn start(config: Config) -> anyhow::Result<Self> {
        let config_serve = config.serve.clone();
        let servers = config
            .serve
            .iter()
            .map(|&(transport, port)| {
                let opts = ServeOptions {
                    port,
                    transport,
                    socket: config.socket.clone(),
                    piggyback: config.serve_piggyback,
                    allow: config.serve_allow.clone(),
                    max_bytes_per_hour: config.serve_bytes_per_hour,
                    ..ServeOptions::new(transport)
                };
                Server::bind(opts).with_context(|| {
                    format!("cannot serve {transport} measurements on port {port}")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let serving = config
            .serve
            .iter()
            .zip(&servers)
            .map(|(&(transport, _), server)| Ok((transport, server.local_addr()?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let seed = mgrp_rt::wall_now().as_nanos() ^ u64::from(std::process::id());
        let sched = Scheduler::new(
            config.links.iter().map(|l| l.timing.clone()).collect(),
            config.max_running,
            mgrp_rt::mono_now(),
            FIRST_WITHIN,
            seed,
        );
        let store = match &config.state_dir {
            Some(dir) => Some(Store::open(dir).with_context(|| {
                format!(
                    "cannot keep history in {} (state-dir): create it writable for this user, or change state-dir",
                    dir.display()
                )
            })?),
            None => {
                info!("history is kept in memory only: set state-dir to keep it across restarts");
                None
            }
        };
        let records: Vec<Record> = config
            .links
            .iter()
            .map(
                |l| match store.as_ref().map(|s| s.load(&l.name, config.history)) {
                    Some(Ok(Some(r))) => {
                        info!("{}: {} runs of history restored", l.name, r.history.len());
                        r
                    }
                    Some(Err(e)) => {
                        warn!("{}: {e}", l.name);
                        Record::default()
                    }
                    Some(Ok(None)) | None => Record::default(),
                },
            )
            .collect();
        let last_seq = records
            .iter()
            .filter_map(|r| r.history.back().map(|e| e.seq))
            .max()
            .unwrap_or(0);
        let shared_routing = config
            .routing
            .as_ref()
            .map(|r| Arc::new(mgrp_route::control::Control::new(r.clone(), &config.name)));
        let shared = Arc::new(Shared {
            config,
            sched: Mutex::new(sched),
            wake: Condvar::new(),
            records: Mutex::new(records),
            kernel: Mutex::new(HashMap::new()),
            passive: Mutex::new(HashMap::new()),
            passive_good: Mutex::new(HashMap::new()),
            timing: Mutex::new(HashMap::new()),
            events: broadcast::channel(STREAM_BACKLOG).0,
            stop: AtomicBool::new(false),
            seq: AtomicU64::new(last_seq),
            store,
            started_at: unix_now(),
            routes: shared_routing.clone(),
            served: Mutex::default(),
        });
        let mut threads = Vec::new();
        if let Some(control) = shared_routing {
            let s = shared.clone();
            threads.extend(mgrp_route::control::start(control, move |sw| {
                let _ = s.events.send(Event::Route(sw));
            })?);
        }
        for (server, (transport, _)) in servers.into_iter().zip(&config_serve) {
            let (s, transport) = (shared.clone(), transport.to_string());
            threads.push(
                std::thread::Builder::new()
                    .name("overlay-serve".into())
                    .spawn(move || serve(&server, &transport, &s))?,
            );
        }
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("overlay-schedule".into())
                .spawn(move || schedule(&s))?,
        );
        if shared
            .config
            .links
            .iter()
            .any(|l| l.timing.ride_min_bps.is_some())
        {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("overlay-traffic".into())
                    .spawn(move || watch_traffic(&s))?,
            );
        }
        let every = shared
            .config
            .btc
            .kernel_poll
            .or(shared.config.passive.then_some(Duration::from_secs(2)));
        if let Some(every) = every
            && !shared.config.links.is_empty()
        {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("overlay-kernel".into())
                    .spawn(move || watch_kernels(&s, every))?,
            );
        }
        Ok(Self {
            shared,
            threads,
            serving,
        })
    }

    /// The transports this node serves and the control addresses they listen on (the
    /// port the kernel chose when the configuration gave port 0).
    pub fn serving(&self) -> &[(Transport, SocketAddr)] {
        &self.serving
    }

    /// The state the API reads.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops serving and measuring: runs in flight end at their next step (their
    /// neighbours are told), then every thread is joined.
    pub fn stop(self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(r) = &self.shared.routes {
            r.stop();
        }
        self.shared.wake.notify_all();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn serve(server: &Server, transport: &str, s: &Shared) {
    let addr = server
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    info!("serving measurements on {addr}");
    let tally = |f: fn(&mut Served)| f(lock(&s.served).entry(transport.to_string()).or_default());
    tally(|_| {});
    let result = server.serve(true, &s.stop, &mut |ev| match ev {
        ServeEvent::Connected(peer, tool) => debug!("{addr}: receiver {peer} measuring ({tool})"),
        ServeEvent::Done(peer, Ok(n)) => {
            tally(|t| t.measurements += 1);
            debug!("{addr}: {peer} done, {n} batches of probes");
        }
        ServeEvent::Done(peer, Err(e)) => {
            tally(|t| t.measurements += 1);
            info!("{addr}: measurement for {peer} ended: {e}");
        }
        ServeEvent::Refused(peer, why) => {
            tally(|t| t.refusals += 1);
            debug!("{addr}: refused {peer}: {why}");
        }
        ServeEvent::Failed(peer, why) => {
            tally(|t| t.failures += 1);
            warn!("{addr}: could not serve {peer}'s measurement of the path from here: {why}");
        }
        ServeEvent::Warning(peer, why) => warn!("{addr}: measurement for {peer}: {why}"),
    });
    if let Err(e) = result {
        warn!("serving on {addr} stopped: {e:#}");
    }
}

fn schedule(s: &Arc<Shared>) {
    let mut runs: Vec<JoinHandle<()>> = Vec::new();
    let mut sched = lock(&s.sched);
    while !s.stopping() {
        let now = mgrp_rt::mono_now();
        while let Some(i) = sched.poll_start(now) {
            let s2 = s.clone();
            match std::thread::Builder::new()
                .name("overlay-measure".into())
                .spawn(move || run(&s2, i))
            {
                Ok(t) => runs.push(t),
                Err(e) => {
                    warn!("cannot start a measurement thread: {e}");
                    sched.handle_done(i, now, &RunEnd::NoEstimate(e.to_string()));
                }
            }
        }
        let covered = sched.take_covered();
        if !covered.is_empty() {
            drop(sched);
            for i in covered {
                record_passive(s, i);
            }
            sched = lock(&s.sched);
        }
        runs.retain(|t| !t.is_finished());
        let wait = sched
            .poll_timeout()
            .map_or(TICK, |t| t.saturating_since(now).min(TICK))
            .max(Duration::from_millis(1));
        sched = s
            .wake
            .wait_timeout(sched, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    drop(sched);
    for t in runs {
        let _ = t.join();
    }
}

/// Asks the neighbours of links that wait for traffic to ride how much their mgrpd
/// routes to this node, every [`TRAFFIC_POLL`], and tells the scheduler. A neighbour
/// that cannot say counts as no traffic: the link then runs at the end of its wait.
fn watch_traffic(s: &Shared) {
    while !s.stopping() {
        let wanting = lock(&s.sched).wanting_traffic(mgrp_rt::mono_now(), TRAFFIC_POLL);
        for i in wanting {
            let link = &s.config.links[i];
            let bps = match sender_traffic(&link.from.to_string(), link.port, None) {
                Ok(t) => t.bytes_per_second.saturating_mul(8),
                Err(e) => {
                    debug!("{}: no traffic figures from {}: {e}", link.name, link.from);
                    0
                }
            };
            let min = link.timing.ride_min_bps.unwrap_or(0);
            debug!("{}: {bps} bit/s to ride (waiting for {min})", link.name);
            lock(&s.sched).handle_traffic(i, bps);
            if bps >= min {
                s.wake.notify_all();
            }
        }
        // Sleeps in steps, so that a stop is seen soon.
        let until = std::time::Instant::now() + TRAFFIC_POLL;
        while !s.stopping() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Asks every neighbour, `every` so often, what its kernel says of its TCP flows to
/// this node, keeps the answer for the predictions, and publishes a neighbour's
/// prediction when a network-limited flow's rate is there or has just gone.
fn watch_kernels(s: &Shared, every: Duration) {
    // One question per neighbour, to the control port of its first link.
    let mut neighbours: Vec<&Link> = Vec::new();
    for l in &s.config.links {
        if !neighbours.iter().any(|n| n.from == l.from) {
            neighbours.push(l);
        }
    }
    let mut had_rate: HashMap<IpAddr, bool> = HashMap::new();
    let mut prev: HashMap<IpAddr, (Vec<mgrp_tool::control::TcpFlow>, f64)> = HashMap::new();
    let mut stamps: HashMap<IpAddr, Stamps> = HashMap::new();
    while !s.stopping() {
        for link in &neighbours {
            let view = match mgrp_tool::sender_tcp(&link.from.to_string(), link.port, None) {
                Ok(flows) => KernelView {
                    at: unix_now(),
                    flows,
                    error: None,
                },
                Err(e) => {
                    debug!("{}: no TCP figures from {}: {e}", link.name, link.from);
                    prev.remove(&link.from);
                    let p = PassiveTcp {
                        note: Some(format!("the neighbour could not say: {e}")),
                        ..crate::passive::estimate(None, &[], unix_now())
                    };
                    passive_now(s, link.from, p, every);
                    let mut kernel = lock(&s.kernel);
                    let old = kernel.remove(&link.from);
                    // The last answer stands (and ages) with the error beside it.
                    let mut v = old.unwrap_or(KernelView {
                        at: 0.0,
                        flows: Vec::new(),
                        error: None,
                    });
                    v.error = Some(e.to_string());
                    kernel.insert(link.from, v);
                    continue;
                }
            };
            let has_rate = view.flows.iter().any(|f| f.sample.network_limited());
            let p = crate::passive::estimate(
                prev.get(&link.from).map(|(f, t)| (f.as_slice(), *t)),
                &view.flows,
                view.at,
            );
            prev.insert(link.from, (view.flows.clone(), view.at));
            let timing = s.config.passive_timing.then(|| {
                let st = stamps.entry(link.from).or_default();
                time_packets(s, link, st, &view.flows, view.at)
            });
            if s.config.passive {
                let links = s
                    .config
                    .links
                    .iter()
                    .filter(|l| l.from == link.from)
                    .map(|l| l.name.clone())
                    .collect();
                let _ = s.events.send(Event::Passive(PassiveEvent {
                    links,
                    tcp: Some(p.clone()),
                    timing: timing.clone(),
                }));
            }
            if let Some(t) = timing {
                lock(&s.timing).insert(link.from, t);
            }
            passive_now(s, link.from, p, every);
            lock(&s.kernel).insert(link.from, view);
            let had = had_rate.insert(link.from, has_rate).unwrap_or(false);
            if has_rate || had {
                s.publish_btc(link.from);
            }
        }
        let until = std::time::Instant::now() + every;
        while !s.stopping() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The stamps of one neighbour's segments to this node: this node's capture of their
/// arrival, the neighbour's of their sending, the last [`TIMING_WINDOW_NS`] of each.
#[derive(Debug, Default)]
struct Stamps {
    here: Option<mgrp_tool::capture::Capture>,
    here_next: u64,
    there_next: u64,
    sent: std::collections::VecDeque<mgrp_tool::capture::Stamp>,
    got: std::collections::VecDeque<mgrp_tool::capture::Stamp>,
    /// Why this node cannot capture, once said.
    cannot: Option<String>,
}

/// The window of stamps each timing estimate is made from, ns.
const TIMING_WINDOW_NS: i64 = 5_000_000_000;

/// Brings in the stamps since the last poll from both ends and analyses the window.
fn time_packets(
    s: &Shared,
    link: &Link,
    st: &mut Stamps,
    flows: &[mgrp_tool::control::TcpFlow],
    at: f64,
) -> PassiveTiming {
    use mgrp_tool::capture::{Capture, Direction, RING};
    let no = |note: String| PassiveTiming {
        note: Some(note),
        ..crate::timing::analyse(&[], &[], &std::collections::HashSet::new(), at)
    };
    if let Some(why) = &st.cannot {
        return no(why.clone());
    }
    let here = match &st.here {
        Some(c) => c,
        None => match Capture::start(link.from, Direction::From) {
            Ok(c) => st.here.insert(c),
            Err(e) => {
                let why = format!("no packet timing: {e}");
                warn!("{}: {why}; passive-tcp goes on without it", link.name);
                st.cannot = Some(why.clone());
                return no(why);
            }
        },
    };
    // The neighbour's control connections carry replies, not the applications'.
    let control: Vec<u16> = s
        .config
        .links
        .iter()
        .filter(|l| l.from == link.from)
        .map(|l| l.port)
        .collect();
    let taken = here.since(st.here_next, RING);
    st.here_next = taken.next;
    st.got.extend(
        taken
            .stamps
            .into_iter()
            .filter(|x| !control.contains(&x.src_port)),
    );
    let mut note = None;
    match mgrp_tool::sender_stamps(&link.from.to_string(), link.port, None, st.there_next) {
        Ok(t) => {
            st.there_next = t.next;
            st.sent.extend(t.stamps);
        }
        Err(e) => {
            debug!("{}: no stamps from {}: {e}", link.name, link.from);
            note = Some(format!("the neighbour gave no send stamps: {e}"));
        }
    }
    for q in [&mut st.sent, &mut st.got] {
        if let Some(last) = q.back().map(|x| x.at_ns) {
            while q.front().is_some_and(|x| x.at_ns < last - TIMING_WINDOW_NS) {
                q.pop_front();
            }
        }
        while q.len() > RING {
            q.pop_front();
        }
    }
    let limited: std::collections::HashSet<(u16, u16)> = flows
        .iter()
        .filter(|f| !f.sample.app_limited && f.sample.network_limited())
        .map(|f| (f.local.port(), f.remote.port()))
        .collect();
    let sent: Vec<_> = st.sent.iter().copied().collect();
    let got: Vec<_> = st.got.iter().copied().collect();
    let mut t = crate::timing::analyse(&sent, &got, &limited, at);
    if t.note.is_some() && note.is_some() {
        t.note = note;
    }
    t
}

/// Keeps neighbour `from`'s answer and tells the scheduler whether a passive
/// estimate may stand in for its links' runs: while its last estimate is at most
/// three polls (`every`) old, so that one answer caught between two bursts of a flow
/// does not start a run.
fn passive_now(s: &Shared, from: IpAddr, p: PassiveTcp, every: Duration) {
    let good = {
        let mut g = lock(&s.passive_good);
        if p.bps.is_some() {
            g.insert(from, p.clone());
        }
        g.get(&from).map(|q| q.at)
    };
    let fresh = s.config.passive && good.is_some_and(|at| p.at - at <= 3.0 * every.as_secs_f64());
    if let Some(bps) = p.bps {
        debug!(
            "{from}: passive estimate {:.2} Mbit/s from {} network-limited TCP flow(s)",
            bps / 1e6,
            p.network_limited
        );
    }
    lock(&s.passive).insert(from, p);
    let mut sched = lock(&s.sched);
    for (i, l) in s.config.links.iter().enumerate() {
        if l.from == from {
            sched.handle_passive(i, fresh);
        }
    }
    drop(sched);
    if fresh {
        s.wake.notify_all();
    }
}

/// Records, for link `i` whose due run it stands in for, its neighbour's passive
/// estimate.
fn record_passive(s: &Shared, i: usize) {
    let link = &s.config.links[i];
    let Some(p) = lock(&s.passive_good).get(&link.from).cloned() else {
        return;
    };
    let Some(bps) = p.bps else { return };
    let mut e = Estimate::empty(
        &link.name,
        &link.transport.to_string(),
        PASSIVE_TCP,
        s.seq.fetch_add(1, Ordering::Relaxed) + 1,
        p.at,
        p.at,
    );
    e.outcome = RunOutcome::Estimate;
    e.converged = true;
    e.low_bps = Some(bps);
    e.high_bps = Some(bps);
    e.unadjusted_low_bps = Some(bps);
    e.unadjusted_high_bps = Some(bps);
    e.streams = u32::try_from(p.network_limited).unwrap_or(u32::MAX);
    info!(
        "{}: {:.2} Mbit/s from the applications' {} network-limited TCP flow(s) ({PASSIVE_TCP}); the run is skipped",
        link.name,
        bps / 1e6,
        p.network_limited
    );
    s.record(i, e);
}

/// Where a link's neighbour serves measurements, as a session needs it.
fn session(s: &Shared, link: &Link) -> SessionOptions {
    SessionOptions {
        port: link.port,
        socket: s.config.socket.clone(),
        probe_port: link.probe_port,
        piggyback: link.piggyback,
        address: link.probe_address,
        sender_is: format!(
            "the neighbour's mgrp-overlay, serving {} measurements on port {} ([serve] in its configuration)",
            link.transport, link.port
        ),
        ..SessionOptions::new(
            link.from.to_string(),
            link.transport,
            format!("mgrp-overlay {}", link.method.name()),
        )
    }
}

/// How often a continuous method's estimate goes out on the event stream while its
/// run goes on.
const PUBLISH_EVERY: Duration = Duration::from_secs(2);

/// One run of link `i`, recorded and reported to the scheduler.
fn run(s: &Shared, i: usize) {
    let link = &s.config.links[i];
    let started_at = unix_now();
    debug!(
        "{}: measuring from {}:{} ({})",
        link.name,
        link.from,
        link.port,
        link.method.name()
    );
    let (estimate, end) = match link.method {
        Method::PathloadFast | Method::PathloadSlow => run_pathload(s, link, started_at),
        Method::Pathchirp => run_pathchirp(s, link, started_at),
        Method::Badabing => run_badabing(s, link, started_at),
        Method::Btc => run_btc(s, link, started_at),
    };
    match (&estimate.error, estimate.lower_bound, &estimate.loss) {
        (None, _, None) if estimate.shape.is_some() => {
            let sh = estimate.shape.as_ref().expect("checked");
            info!(
                "{}: capacity {:.2} Mbit/s, {} (score {}), round trip {:.1} ms, in {:.1} s",
                link.name,
                sh.capacity_bps / 1e6,
                sh.class.map_or_else(
                    || format!(
                        "no squeezed pairs ({})",
                        sh.pairs_skipped.as_deref().unwrap_or("not sent")
                    ),
                    |c| serde_json::to_value(c)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                ),
                sh.score.map_or_else(|| "-".into(), |x| x.to_string()),
                sh.rtt_s * 1e3,
                estimate.duration_s
            );
        }
        (None, _, Some(l)) => info!(
            "{}: loss episodes {:.4} of the time, mean {}, loss rate {:.4}, in {:.1} s",
            link.name,
            l.episode_frequency,
            l.episode_duration_s
                .map_or_else(|| "none ended".into(), |d| format!("{:.1} ms", d * 1e3)),
            l.loss_rate,
            estimate.duration_s
        ),
        (None, false, None) => info!(
            "{}: {:.2}-{:.2} Mbit/s in {:.1} s, {:.0} % of probe bytes carried riders",
            link.name,
            estimate.low_bps.unwrap_or(0.0) / 1e6,
            estimate.high_bps.unwrap_or(0.0) / 1e6,
            estimate.duration_s,
            estimate.rider_share * 100.0
        ),
        (None, true, None) => info!(
            "{}: at least {:.2} Mbit/s (the highest rate the neighbour reaches) in {:.1} s",
            link.name,
            estimate.low_bps.unwrap_or(0.0) / 1e6,
            estimate.duration_s,
        ),
        (Some(e), ..) => warn!(
            "{}: no estimate ({}): {e}",
            link.name,
            estimate.outcome.name()
        ),
    }
    s.record(i, estimate);
    lock(&s.sched).handle_done(i, mgrp_rt::mono_now(), &end);
    s.wake.notify_all();
}

/// The outcome of a pathload run that ended as `o` says: a lower bound when the
/// sender found no trend up to the highest rate it reached (its maximum, or the
/// rate it fell short at) and nothing above it.
fn outcome_of(o: &pathload_rs::Outcome) -> RunOutcome {
    use pathload_rs::StopReason as R;
    if o.lower_bound {
        return RunOutcome::LowerBound;
    }
    match o.reason {
        R::UserResolution | R::GreyResolution => RunOutcome::Estimate,
        R::AboveMaxRate => RunOutcome::LowerBound,
        R::FleetLimit | R::TimeLimit => RunOutcome::Limit,
        R::RateUnreachable => RunOutcome::RateUnreachable,
        R::Unusable | R::NoInitialRate => RunOutcome::CrossTraffic,
        R::Interrupted => RunOutcome::Error,
    }
}

/// pathload's Mbit/s as bits per second.
fn bps(mbps: f64) -> f64 {
    mbps * 1e6
}

/// A run's record before its method fills it in.
fn blank(s: &Shared, link: &Link, started_at: f64) -> Estimate {
    Estimate::empty(
        &link.name,
        &link.transport.to_string(),
        link.method.name(),
        s.seq.fetch_add(1, Ordering::Relaxed) + 1,
        started_at,
        unix_now(),
    )
}

/// The outcome of a run that could not start, with its error set in `e`.
fn refused(e: &mut Estimate, err: MeasureError) -> RunOutcome {
    let busy = err.is_busy();
    match err {
        MeasureError::Unreachable(why) => {
            e.error = Some(why);
            RunOutcome::PeerDown
        }
        MeasureError::Refused(why) => {
            e.error = Some(format!("the sender refused: {why}"));
            if busy {
                RunOutcome::Busy
            } else {
                RunOutcome::SenderFailed
            }
        }
        MeasureError::Failed(err) => {
            e.error = Some(format!("{err:#}"));
            RunOutcome::Error
        }
    }
}

/// The outcome of a run the neighbour cut short, with its error set in `e`.
fn cut_short(
    e: &mut Estimate,
    gone: Option<&String>,
    failed: Option<&String>,
) -> Option<RunOutcome> {
    if let Some(gone) = gone {
        e.error = Some(format!("the neighbour went away: {gone}"));
        Some(RunOutcome::PeerDown)
    } else if let Some(failed) = failed {
        e.error = Some(format!(
            "the neighbour's side failed (see its log): {failed}"
        ));
        Some(RunOutcome::SenderFailed)
    } else {
        None
    }
}

/// Sets the outcome and tells the scheduler what it means.
fn conclude(mut e: Estimate, outcome: RunOutcome) -> (Estimate, RunEnd) {
    e.outcome = outcome;
    let why = || e.error.clone().unwrap_or_default();
    let end = match outcome {
        o if o.answered() => RunEnd::Estimate,
        RunOutcome::PeerDown => RunEnd::PeerDown(why()),
        _ => RunEnd::NoEstimate(why()),
    };
    (e, end)
}

fn share(part: u64, whole: u64) -> f64 {
    if whole > 0 {
        part as f64 / whole as f64
    } else {
        0.0
    }
}

fn run_pathload(s: &Shared, link: &Link, started_at: f64) -> (Estimate, RunEnd) {
    let opts = MeasureOptions {
        session: session(s, link),
        mode: link.method.mode().unwrap_or(pathload_rs::Mode::Fast),
        max_time: link.time_limit,
        ..MeasureOptions::new(link.from.to_string(), link.transport)
    };
    // Each train's, stream's and fleet's verdict, for an operator who asks why (the
    // event is only serialised when trace is on).
    let result = measure(&opts, &s.stop, &mut |p| {
        if let pathload_rs::tool::Progress::Event(e) = p {
            tracing::trace!(
                "{}: {}",
                link.name,
                serde_json::to_string(e).unwrap_or_default()
            );
        }
    });
    let mut e = blank(s, link, started_at);
    let outcome = match result {
        Ok(m) => {
            let o = &m.outcome;
            e.stop_reason = serde_json::to_value(o.reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned));
            e.probe_bytes = o.probe_bytes;
            e.riding_probe_bytes = o.riding_probe_bytes;
            e.rider_bytes = o.rider_bytes;
            e.rider_share = share(o.riding_probe_bytes, o.probe_bytes);
            e.adjustment = serde_json::to_value(o.adjustment)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string));
            e.fleets = o.fleets;
            e.streams = o.streams;
            if let Some(o) = cut_short(&mut e, m.peer_gone.as_ref(), m.sender_failed.as_ref()) {
                o
            } else {
                let outcome = outcome_of(o);
                match outcome {
                    RunOutcome::Estimate => {
                        e.converged = true;
                        e.low_bps = Some(bps(o.low));
                        e.high_bps = Some(bps(o.high));
                        e.unadjusted_low_bps = Some(bps(o.unadjusted_low));
                        e.unadjusted_high_bps = Some(bps(o.unadjusted_high));
                    }
                    RunOutcome::LowerBound => {
                        // No trend up to the highest rate the sender reached: the
                        // search's lower bound is that rate.
                        e.lower_bound = true;
                        e.low_bps = Some(bps(o.low));
                        e.unadjusted_low_bps = Some(bps(o.unadjusted_low));
                    }
                    _ => e.error = Some(o.reason.describe().to_string()),
                }
                outcome
            }
        }
        Err(err) => refused(&mut e, err),
    };
    conclude(e, outcome)
}

/// pathChirp for the link's time limit; each smoothed estimate goes out on the event
/// stream as it comes (at most every [`PUBLISH_EVERY`]), and the last one is the
/// run's record.
fn run_pathchirp(s: &Shared, link: &Link, started_at: f64) -> (Estimate, RunEnd) {
    let opts = pathchirp_rs::tool::MeasureOptions {
        session: session(s, link),
        ..pathchirp_rs::tool::MeasureOptions::new(
            link.from.to_string(),
            link.transport,
            link.time_limit,
        )
    };
    let mut published: Option<std::time::Instant> = None;
    let result = pathchirp_rs::tool::measure(&opts, &s.stop, &mut |p| {
        let pathchirp_rs::tool::Progress::Chirp { report, .. } = p else {
            return;
        };
        let Some(sm) = report.smoothed else { return };
        if published.is_some_and(|t| t.elapsed() < PUBLISH_EVERY) {
            return;
        }
        published = Some(std::time::Instant::now());
        let mut e = blank(s, link, started_at);
        // Partial estimates are not runs: they take no number of their own.
        e.seq = 0;
        e.partial = true;
        e.outcome = RunOutcome::Estimate;
        e.converged = true;
        e.low_bps = Some(sm.adjusted_bps);
        e.high_bps = Some(sm.adjusted_bps);
        e.unadjusted_low_bps = Some(sm.bps);
        e.unadjusted_high_bps = Some(sm.bps);
        let _ = s.events.send(Event::Estimate(e));
    });
    let mut e = blank(s, link, started_at);
    let outcome = match result {
        Ok(m) => {
            let c = &m.counts;
            e.probe_bytes = c.probe_bytes;
            e.riding_probe_bytes = c.riding_probe_bytes;
            e.rider_bytes = c.rider_bytes;
            e.rider_share = share(c.riding_probe_bytes, c.probe_bytes);
            e.streams = u32::try_from(c.chirps).unwrap_or(u32::MAX);
            if let Some(o) = cut_short(&mut e, m.peer_gone.as_ref(), m.sender_failed.as_ref()) {
                o
            } else if let Some(sm) = m.last {
                e.converged = true;
                e.low_bps = Some(sm.adjusted_bps);
                e.high_bps = Some(sm.adjusted_bps);
                e.unadjusted_low_bps = Some(sm.bps);
                e.unadjusted_high_bps = Some(sm.bps);
                RunOutcome::Estimate
            } else if c.chirps > 0 {
                e.error = Some(format!(
                    "no estimate from {} chirps ({} lost a probe, {} reordered, {} coalesced, {} unusable); a run needs {} usable chirps",
                    c.chirps, c.loss, c.reorder, c.coalesced, c.unusable, opts.config.smooth
                ));
                RunOutcome::CrossTraffic
            } else {
                e.error = Some("the run ended before a chirp came back".into());
                RunOutcome::Limit
            }
        }
        Err(err) => refused(&mut e, err),
    };
    conclude(e, outcome)
}

/// badabing for the link's time limit.
fn run_badabing(s: &Shared, link: &Link, started_at: f64) -> (Estimate, RunEnd) {
    let opts = badabing_rs::tool::MeasureOptions {
        session: session(s, link),
        config: badabing_rs::Config {
            seed: mgrp_rt::wall_now().as_nanos(),
            ..badabing_rs::Config::default()
        },
        ..badabing_rs::tool::MeasureOptions::new(
            link.from.to_string(),
            link.transport,
            link.time_limit,
        )
    };
    let result = badabing_rs::tool::measure(&opts, &s.stop, &mut |_| {});
    let mut e = blank(s, link, started_at);
    let outcome = match result {
        Ok(m) => {
            let b = &m.estimate;
            e.probe_bytes = b.probe_bytes;
            e.rider_bytes = b.rider_bytes;
            e.streams = m.windows;
            let slot = opts.config.slot_ns as f64 * 1e-9;
            if let Some(o) = cut_short(&mut e, m.peer_gone.as_ref(), m.sender_failed.as_ref()) {
                o
            } else if b.outcomes.total() > 0 {
                e.converged = true;
                e.loss = Some(Loss {
                    episode_frequency: b.frequency,
                    episode_frequency_ci: b.frequency_ci,
                    episode_duration_s: b.duration_s,
                    episode_duration_ci_s: b.duration_ci_slots.map(|d| d * slot),
                    loss_rate: b.loss_rate,
                    experiments: b.outcomes.total(),
                });
                RunOutcome::Estimate
            } else {
                e.error = Some("the run ended before an experiment came back".into());
                RunOutcome::Limit
            }
        }
        Err(err) => refused(&mut e, err),
    };
    conclude(e, outcome)
}

/// btc-rs's capacity bunches and squeezed pairs, each run afresh (the capacity is
/// not carried over: a path may change under the overlay).
fn run_btc(s: &Shared, link: &Link, started_at: f64) -> (Estimate, RunEnd) {
    let opts = btc_rs::tool::MeasureOptions {
        session: session(s, link),
        seed: mgrp_rt::wall_now().as_nanos(),
        ..btc_rs::tool::MeasureOptions::new(link.from.to_string(), link.transport)
    };
    let result = btc_rs::tool::measure(&opts, &s.stop);
    let mut e = blank(s, link, started_at);
    let outcome = match result {
        Ok(m) => {
            e.probe_bytes = m.probe_bytes;
            e.rider_bytes = m.rider_bytes;
            if let Some(o) = cut_short(&mut e, m.peer_gone.as_ref(), m.sender_failed.as_ref()) {
                o
            } else if let Some(capacity_bps) = m.capacity_bps {
                e.converged = true;
                e.streams = opts.capacity.bunches;
                e.shape = Some(Shape {
                    capacity_bps,
                    class: m.squeeze.as_ref().map(|q| q.class),
                    score: m.squeeze.as_ref().map(|q| q.score),
                    squeezed: m.squeeze.as_ref().map(|q| q.squeezed),
                    pairs_skipped: m.squeeze_skipped.clone(),
                    rtt_s: m.rtt.as_secs_f64(),
                });
                RunOutcome::Estimate
            } else if s.stopping() {
                e.error = Some("the node stopped during the run".into());
                RunOutcome::Error
            } else {
                e.error = Some(
                    "no capacity: no two consecutive packets of a bunch arrived apart (loss, or a link that batches packets)"
                        .into(),
                );
                RunOutcome::CrossTraffic
            }
        }
        Err(err) => refused(&mut e, err),
    };
    conclude(e, outcome)
}
