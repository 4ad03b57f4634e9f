//! The measuring side of a node running: the scheduler's thread, which starts a
//! thread per run as links fall due, and the run itself — the link's method called,
//! its estimate logged, recorded and reported to the scheduler.
//!
//! Threads, not tasks: a measurement is a tool's blocking receiver, paced by the
//! clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use mgrp_rt::{lock, unix_now};
use mgrp_tool::SessionOptions;
use mgrp_views::estimate::Estimate;
use tracing::{debug, info, warn};

use crate::config::Link;
use crate::measure::method::{Run, conclude};
use crate::measure::schedule::RunEnd;
use crate::state::shared::{Event, Shared};
use crate::threads::neighbours::record_passive;

/// The scheduler's thread looks at its stop flag at least this often.
const TICK: Duration = Duration::from_millis(500);

/// The scheduler's thread: starts runs as links fall due, records the passive
/// estimates that stand in for due runs, until the node stops.
pub(crate) fn schedule(s: &Arc<Shared>) {
    let mut runs: Vec<JoinHandle<()>> = Vec::new();
    let mut sched = lock(&s.sched);
    while !s.stopping() {
        let now = mgrp_rt::mono_now();
        while let Some(i) = sched.poll_start(now) {
            let (config, generation) = (s.config(), sched.generation());
            let link = config.links[i].clone();
            let stop = s.run_started(&link.name);
            let s2 = s.clone();
            let mine = stop.clone();
            match std::thread::Builder::new()
                .name("overlay-measure".into())
                .spawn(move || run(&s2, &link, Started { i, generation }, &mine))
            {
                Ok(t) => runs.push(t),
                Err(e) => {
                    warn!("cannot start a measurement thread: {e}");
                    s.run_ended(&stop);
                    sched.handle_done(i, now, &RunEnd::NoEstimate(e.to_string()));
                }
            }
        }
        let covered = sched.take_covered();
        if !covered.is_empty() {
            let config = s.config();
            drop(sched);
            for i in covered {
                record_passive(s, &config.links[i]);
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    drop(sched);
    for t in runs {
        let _ = t.join();
    }
}

/// Which link a run is of, as the scheduler knew it when the run started.
#[derive(Debug, Clone, Copy)]
struct Started {
    i: usize,
    generation: u64,
}

/// Where a link's neighbour serves measurements, as a session needs it.
fn session(s: &Shared, link: &Link) -> SessionOptions {
    SessionOptions {
        port: link.port,
        socket: s.config().socket.clone(),
        probe_port: link.probe_port,
        piggyback: link.piggyback,
        address: link.probe_address,
        sender_is: format!(
            "the neighbour's mgrp-overlay, serving {} measurements on port {} ([serve] in its configuration)",
            link.transport, link.port
        ),
        exclusive: link.method.class() == crate::measure::schedule::Class::Exclusive,
        ..SessionOptions::new(
            link.from.to_string(),
            link.transport,
            format!("mgrp-overlay {}", link.method.name()),
        )
    }
}

/// The index of the link a run `started` of `link` is of now: the same one if no
/// reload came in between; else the link of that name if the reload kept it as it
/// was (its run then still in flight); else none (it was removed or changed).
fn now_index(
    sched: &crate::measure::schedule::Scheduler,
    s: &Shared,
    link: &Link,
    started: Started,
) -> Option<usize> {
    if sched.generation() == started.generation {
        return Some(started.i);
    }
    let config = s.config();
    let (j, now) = config.link(&link.name)?;
    (now.same_measurement(link)
        && matches!(
            sched.state(j),
            Some(crate::measure::schedule::LinkState::Running { .. })
        ))
    .then_some(j)
}

/// One run of `link`, recorded and reported to the scheduler; `stop` ends it early
/// (the node stops, or a reload removed or changed the link).
fn run(s: &Shared, link: &Link, started: Started, stop: &Arc<AtomicBool>) {
    let started_at = unix_now();
    debug!(
        "{}: measuring from {}:{} ({})",
        link.name,
        link.from,
        link.port,
        link.method.name()
    );
    let blank = || blank(s, link, started_at);
    let publish = |e| {
        // Nobody listening is not an error.
        let _ = s.events.send(Event::Estimate(e));
    };
    let (estimate, outcome) = link.method.run(&Run {
        link: &link.name,
        from: link.from,
        transport: link.transport,
        time_limit: link.time_limit,
        session: session(s, link),
        stop,
        blank: &blank,
        publish: &publish,
    });
    let (estimate, end) = conclude(estimate, outcome);
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
    s.run_ended(stop);
    // Recorded first, then the link waits again: whoever sees it waiting sees its run.
    let kept = now_index(&lock(&s.sched), s, link, started).is_some();
    if kept {
        s.record(estimate);
    } else {
        info!(
            "{}: a reload removed or changed the link while it ran; this run is not kept",
            link.name
        );
    }
    let mut sched = lock(&s.sched);
    match now_index(&sched, s, link, started) {
        Some(j) => sched.handle_done(j, mgrp_rt::mono_now(), &end),
        None => sched.handle_retired(link.method.class()),
    }
    drop(sched);
    s.wake.notify_all();
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
