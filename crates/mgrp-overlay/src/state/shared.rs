//! The node's state, shared by its threads and the API: the configuration, the
//! scheduler, each link's record, what the neighbours said, and the event stream.
//! The API reaches the node through [`Shared`] only: the links' views and histories,
//! "measure now", and a broadcast of each new estimate.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use mgrp_rt::{lock, unix_now};
use mgrp_views::estimate::Estimate;
use mgrp_views::link::{LinkState as RunState, LinkView, PassiveView, WaitingFor};
use mgrp_views::prediction::Prediction;
use serde::Serialize;
use tokio::sync::broadcast;
use tracing::warn;

use super::store::{Record, Store};
use crate::config::{Config, Link};
use crate::derive::history::History;
use crate::derive::passive::{PASSIVE_TCP, PassiveTcp};
use crate::derive::prediction::KernelView;
use crate::derive::timing::PassiveTiming;
use crate::measure::method::share;
use crate::measure::schedule::{Class, LinkState, NowRefused, Scheduler, Wait};

/// New estimates a slow subscriber may fall behind by before it misses some.
pub(crate) const STREAM_BACKLOG: usize = 1024;

/// What the event stream carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A run ended (or a continuous one published on the way).
    Estimate(Estimate),
    /// A neighbour's transfer-rate prediction changed: after a run of one of its
    /// links, or when its kernel reported on its TCP flows here.
    Prediction(PredictionEvent),
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
pub struct PredictionEvent {
    /// The links from that neighbour.
    pub links: Vec<String>,
    /// The prediction.
    #[serde(flatten)]
    pub prediction: Prediction,
}

impl Event {
    /// Whether the event concerns link `name`.
    pub fn about(&self, name: &str) -> bool {
        match self {
            Self::Estimate(e) => e.link == name,
            Self::Prediction(b) => b.links.iter().any(|l| l == name),
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
    /// The configuration in force: replaced whole by a reload, under `sched`'s lock
    /// (a link's index means the same in both while that lock is held).
    pub(crate) config: RwLock<Arc<Config>>,
    pub(crate) sched: Mutex<Scheduler>,
    pub(crate) wake: Condvar,
    pub(crate) records: Mutex<Vec<Record>>,
    /// What each neighbour's kernel last said of its TCP flows here.
    pub(crate) kernel: Mutex<HashMap<IpAddr, KernelView>>,
    /// The earlier TCP flows each neighbour's kernel reported here.
    pub(crate) flows: Mutex<HashMap<IpAddr, History>>,
    /// What each neighbour's last answer gave for passive estimates.
    pub(crate) passive: Mutex<HashMap<IpAddr, PassiveTcp>>,
    /// Each neighbour's last answer that gave an estimate.
    pub(crate) passive_good: Mutex<HashMap<IpAddr, PassiveTcp>>,
    /// What the timing of each neighbour's segments gave over the last window.
    pub(crate) timing: Mutex<HashMap<IpAddr, PassiveTiming>>,
    pub(crate) events: broadcast::Sender<Event>,
    pub(crate) stop: AtomicBool,
    pub(crate) seq: AtomicU64,
    /// Where each link's history is kept across restarts, if anywhere.
    pub(crate) store: Option<Store>,
    /// When the node started, Unix seconds.
    pub(crate) started_at: f64,
    /// Route control, when configured.
    pub(crate) routes: Option<Arc<mgrp_route::control::Control>>,
    /// What each transport this node serves its neighbours on did for them.
    pub(crate) served: Mutex<BTreeMap<String, Served>>,
    /// The runs in flight: their link's name and the flag that ends them.
    pub(crate) runs: Mutex<Vec<(String, Arc<AtomicBool>)>>,
    /// The mesh's matrix as last collected (`[matrix]`), or why it could not be.
    pub(crate) matrix: Mutex<Option<Result<mgrp_views::matrix::Matrix, String>>>,
}

/// What a transport served: measurements, refusals (a receiver turned away or a
/// request refused: not allowed, busy, over its budget or session limit, an
/// address not proven), and failures on this side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Measurements that ended.
    pub measurements: u64,
    /// Refusals by kind, in [`pathload_rs::tool::Refusal::ALL`]'s order
    /// ([`Served::refusals`] is their sum).
    pub refused: [u64; pathload_rs::tool::Refusal::ALL.len()],
    /// Requests that failed here.
    pub failures: u64,
    /// Distinct requesters (an IPv4 address, an IPv6 prefix of `[serve]
    /// ipv6-prefix`) whose measurements started since the node did, counted up to
    /// [`COUNTED_REQUESTERS`].
    pub requesters: u64,
}

impl Served {
    /// Refusals of every kind.
    pub fn refusals(&self) -> u64 {
        self.refused.iter().sum()
    }
}

/// Past this many distinct requesters a transport's count stops growing (its memory
/// is bounded whoever connects); the count then says "at least".
pub const COUNTED_REQUESTERS: usize = 16_384;

impl Shared {
    /// The configuration in force (a reload replaces it; this one stays whole).
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// What each transport this node serves on did for its neighbours.
    pub fn served(&self) -> BTreeMap<String, Served> {
        lock(&self.served).clone()
    }

    /// Every link with its state and latest estimate.
    pub fn links(&self) -> Vec<LinkView> {
        let names: Vec<String> = self.config().links.iter().map(|l| l.name.clone()).collect();
        names.iter().filter_map(|n| self.link(n)).collect()
    }

    /// One link, by name.
    pub fn link(&self, name: &str) -> Option<LinkView> {
        let now_mono = mgrp_rt::mono_now();
        let now_wall = unix_now();
        // The index and the configuration are read under the scheduler's lock, which
        // a reload holds while it replaces both.
        let sched = lock(&self.sched);
        let config = self.config();
        let (i, link) = config.link(name)?;
        let traffic = sched.traffic(i);
        let waiting_for = sched.waiting_for(i).map(|w| match w {
            Wait::Exclusive(j) => WaitingFor::Path {
                link: config
                    .links
                    .get(j)
                    .map_or_else(String::new, |l| l.name.clone()),
            },
            Wait::Node => WaitingFor::Node {
                max_running: config.max_running,
            },
        });
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
        let prediction = self.prediction_of(link.from);
        let last_passive = lock(&self.passive).get(&link.from).cloned();
        let timing = lock(&self.timing).get(&link.from).cloned();
        let records = lock(&self.records);
        drop(sched);
        let r = records.get(i)?;
        let latest = r
            .history
            .iter()
            .rev()
            .find(|e| e.outcome.answered())
            .cloned();
        Some(LinkView {
            name: link.name.clone(),
            from: format!("{}:{}", link.from, link.port),
            neighbour: link.neighbour.clone(),
            transport: link.transport.to_string(),
            method: link.method.name().into(),
            interval_s: link.timing.interval.as_secs_f64(),
            class: match link.timing.class {
                Class::Exclusive => mgrp_views::link::Class::Exclusive,
                Class::Background => mgrp_views::link::Class::Background,
            },
            ride_min_bps: link.timing.ride_min_bps,
            traffic_bps: link.timing.ride_min_bps.and(traffic),
            state,
            next_run_in_s: next.map(|t| t.saturating_since(now_mono).as_secs_f64()),
            waiting_for,
            failures,
            peer_down,
            last_error: r.last_error.clone(),
            age_s: latest.as_ref().map(|e| (now_wall - e.ended_at).max(0.0)),
            latest,
            runs: r.runs,
            probe_bytes: r.probe_bytes,
            riding_probe_bytes: r.riding_probe_bytes,
            prediction: mgrp_views::prediction::LinkPrediction(prediction),
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
    /// every link from it, what its kernel last said and its earlier flows.
    pub fn prediction_of(&self, from: IpAddr) -> Prediction {
        self.predict(from, true)
    }

    /// What the probes alone predict for the path from `from` now, bit/s: the
    /// conditions a flow that begins now meets.
    pub(crate) fn probes_prediction_of(&self, from: IpAddr) -> Option<f64> {
        self.predict(from, false).prediction.map(|p| p.bps)
    }

    fn predict(&self, from: IpAddr, flows: bool) -> Prediction {
        let config = self.config();
        let records = lock(&self.records);
        let runs: Vec<(&Link, Option<&Estimate>)> = config
            .links
            .iter()
            .zip(records.iter())
            .filter(|(l, _)| l.from == from)
            .map(|(l, r)| (l, r.history.iter().rev().find(|e| e.outcome.answered())))
            .collect();
        let kernel = lock(&self.kernel);
        let history = lock(&self.flows);
        crate::derive::prediction::for_neighbour(
            from,
            &runs,
            kernel.get(&from).filter(|_| flows),
            history.get(&from).filter(|_| flows),
            &config.prediction,
            unix_now(),
        )
    }

    pub(crate) fn publish_prediction(&self, from: IpAddr) {
        let links = self
            .config()
            .links
            .iter()
            .filter(|l| l.from == from)
            .map(|l| l.name.clone())
            .collect();
        let prediction = self.prediction_of(from);
        let _ = self
            .events
            .send(Event::Prediction(PredictionEvent { links, prediction }));
    }

    /// Link `name`'s last `limit` runs, oldest first.
    pub fn history(&self, name: &str, limit: usize) -> Option<Vec<Estimate>> {
        let sched = lock(&self.sched);
        let (i, _) = self.config().link(name)?;
        let records = lock(&self.records);
        drop(sched);
        let h = &records.get(i)?.history;
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
        let mut sched = lock(&self.sched);
        let (i, _) = self.config().link(name).ok_or(NowError::NoSuchLink)?;
        sched
            .measure_now(i, mgrp_rt::mono_now())
            .map_err(|e| match e {
                NowRefused::NoSuchLink => NowError::NoSuchLink,
                NowRefused::Running => NowError::Running,
            })?;
        drop(sched);
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

    /// The mesh's matrix as last collected, or why it could not be; `None` before
    /// the first collection or where the node collects none (`[matrix]`).
    pub fn matrix(&self) -> Option<Result<mgrp_views::matrix::Matrix, String>> {
        lock(&self.matrix).clone()
    }

    /// Whether the node is stopping.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A run of link `name` starts: the flag that ends it, set already if the node
    /// is stopping.
    pub(crate) fn run_started(&self, name: &str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        lock(&self.runs).push((name.to_owned(), flag.clone()));
        // After the push: a stop either sees this flag or is seen here.
        if self.stopping() {
            flag.store(true, Ordering::SeqCst);
        }
        flag
    }

    /// The run `flag` ends has ended.
    pub(crate) fn run_ended(&self, flag: &Arc<AtomicBool>) {
        lock(&self.runs).retain(|(_, f)| !Arc::ptr_eq(f, flag));
    }

    /// Ends the runs in flight of the links `names` (all with `None`) at their next
    /// step: their neighbours are told.
    pub(crate) fn end_runs(&self, names: Option<&[String]>) {
        for (name, flag) in lock(&self.runs).iter() {
            if names.is_none_or(|n| n.contains(name)) {
                flag.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Keeps `e` in its link's record (by the link's name: a reload may have moved
    /// it, or removed it, and then `e` is dropped), and publishes it with its
    /// neighbour's new prediction.
    pub(crate) fn record(&self, e: Estimate) {
        let (from, saved) = {
            let sched = lock(&self.sched);
            let config = self.config();
            let Some((i, link)) = config.link(&e.link) else {
                return;
            };
            let mut records = lock(&self.records);
            drop(sched);
            let Some(r) = records.get_mut(i) else {
                return;
            };
            if e.method == PASSIVE_TCP {
                r.passive += 1;
            } else {
                r.runs.add(e.outcome);
            }
            r.probe_bytes += e.probe_bytes;
            r.riding_probe_bytes += e.riding_probe_bytes;
            r.last_error.clone_from(&e.error);
            if r.history.len() == config.history {
                r.history.pop_front();
            }
            r.history.push_back(e.clone());
            (link.from, self.store.as_ref().map(|_| r.clone()))
        };
        if let (Some(store), Some(r)) = (&self.store, saved)
            && let Err(err) = store.save(&e.link, &r)
        {
            warn!("{}: cannot keep its history on disk: {err}", e.link);
        }
        // Nobody listening is not an error.
        let _ = self.events.send(Event::Estimate(e));
        self.publish_prediction(from);
    }
}
