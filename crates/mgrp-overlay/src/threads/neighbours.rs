//! What each neighbour says of the applications' traffic it sends here, asked every
//! poll: its kernel's view of its TCP flows (the transfer-rate prediction's kernel
//! input, and passive-tcp), the timing of their segments stamped at both ends
//! (passive-dispersion, passive-trend), and whether a passive estimate may stand in
//! for its links' runs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mgrp_rt::{lock, unix_now};
use mgrp_views::estimate::{Estimate, RunOutcome};
use tracing::{debug, info, warn};

use crate::config::{Config, Link};
use crate::derive::passive::{PASSIVE_TCP, PassiveTcp};
use crate::derive::prediction::KernelView;
use crate::derive::timing::PassiveTiming;
use crate::state::shared::{Event, PassiveEvent, Shared};

/// Asks every neighbour, `every` so often, what its kernel says of its TCP flows to
/// this node, keeps the answer (and each flow's record) for the predictions, and
/// publishes a neighbour's prediction when a network-limited flow's rate is there
/// or has just gone.
pub(crate) fn watch_kernels(s: &Shared, every: Duration) {
    let mut had_rate: HashMap<IpAddr, bool> = HashMap::new();
    let mut prev: HashMap<IpAddr, (Vec<mgrp_tool::control::TcpFlow>, f64)> = HashMap::new();
    let mut stamps: HashMap<IpAddr, Stamps> = HashMap::new();
    while !s.stopping() {
        // One question per neighbour, to the control port of its first link, of the
        // links in force at this poll (a reload may change them).
        let config = s.config();
        let mut neighbours: Vec<&Link> = Vec::new();
        for l in &config.links {
            if !neighbours.iter().any(|n| n.from == l.from) {
                neighbours.push(l);
            }
        }
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
                        ..crate::derive::passive::estimate(None, &[], unix_now())
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
            let p = crate::derive::passive::estimate(
                prev.get(&link.from).map(|(f, t)| (f.as_slice(), *t)),
                &view.flows,
                view.at,
            );
            prev.insert(link.from, (view.flows.clone(), view.at));
            let timing = config.passive_timing.then(|| {
                let st = stamps.entry(link.from).or_default();
                time_packets(&config, link, st, &view.flows, view.at)
            });
            if config.passive {
                let links = config
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
            // Only a network-limited flow is recorded, with the probes' prediction.
            let probes = has_rate
                .then(|| s.probes_prediction_of(link.from))
                .flatten();
            lock(&s.flows)
                .entry(link.from)
                .or_default()
                .observe(&view.flows, view.at, probes);
            lock(&s.kernel).insert(link.from, view);
            let had = had_rate.insert(link.from, has_rate).unwrap_or(false);
            if has_rate || had {
                s.publish_prediction(link.from);
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
    config: &Config,
    link: &Link,
    st: &mut Stamps,
    flows: &[mgrp_tool::control::TcpFlow],
    at: f64,
) -> PassiveTiming {
    use mgrp_tool::capture::{Capture, Direction, RING};
    let no = |note: String| PassiveTiming {
        note: Some(note),
        ..crate::derive::timing::analyse(&[], &[], &std::collections::HashSet::new(), at)
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
    let control: Vec<u16> = config
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
    let mut t = crate::derive::timing::analyse(&sent, &got, &limited, at);
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
    let fresh = s.config().passive && good.is_some_and(|at| p.at - at <= 3.0 * every.as_secs_f64());
    if let Some(bps) = p.bps {
        debug!(
            "{from}: passive estimate {:.2} Mbit/s from {} network-limited TCP flow(s)",
            bps / 1e6,
            p.network_limited
        );
    }
    lock(&s.passive).insert(from, p);
    let mut sched = lock(&s.sched);
    for (i, l) in s.config().links.iter().enumerate() {
        if l.from == from {
            sched.handle_passive(i, fresh);
        }
    }
    drop(sched);
    if fresh {
        s.wake.notify_all();
    }
}

/// Records, for `link` whose due run it stands in for, its neighbour's passive
/// estimate.
pub(crate) fn record_passive(s: &Shared, link: &Link) {
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
    s.record(e);
}
