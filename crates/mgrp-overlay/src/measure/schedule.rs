//! When each link is measured: the overlay's scheduler, with no I/O and no clock.
//!
//! Each link is measured every `interval`, with jitter so that nodes started together
//! drift apart, and never twice at once. Links share by class, as pScheduler's tasks
//! do ([`Class`]): a method that loads the path it measures (pathload's fleets, btc's
//! bunches) is *exclusive* on it: no other run starts on its path while it runs
//! (links of different methods from the same neighbour share the path), and at most
//! `max_running` exclusive runs go into this node at once (paths into a node share
//! its downlink, so by default one). Light methods (pathChirp, badabing) are
//! *background*: they run beside each other and beside exclusive runs on other paths,
//! and hold nothing, so an exclusive link never waits for them, and a continuous
//! method holds its path against no one. [`Scheduler::waiting_for`] says why a due
//! link waits. A failed run backs off, doubling up
//! to a limit; a neighbour that is down backs off the same way and says so. "Measure
//! now" puts a link first in line. A link may also be set to wait for application
//! traffic to ride (`ride_min_bps`): when it falls due it waits, up to `ride_max_wait`,
//! until the sending side reports that much traffic queued for it, then runs anyway.
//! A link that may be covered passively (`passive`) skips a due run while the
//! driver says a passive estimate of its path is fresh ([`Scheduler::handle_passive`]):
//! the driver records that estimate instead ([`Scheduler::take_covered`]) and the
//! link waits another interval, so when the traffic stops an active run comes within
//! one interval.
//!
//! The driver asks [`Scheduler::poll_start`] which link to start, tells it how each
//! run ended ([`Scheduler::handle_done`]) and sleeps until [`Scheduler::poll_timeout`].

use std::time::Duration;

use mgrp_core::MonoTime;

/// A link's index in the order it was configured.
pub type LinkIndex = usize;

/// How one link is scheduled.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Time between the end of one run and the start of the next.
    pub interval: Duration,
    /// Each wait is drawn uniformly within `interval × (1 ± jitter)`, `0.0..=0.5`.
    pub jitter: f64,
    /// First wait after a failure; it doubles with each failure in a row.
    pub backoff: Duration,
    /// Longest wait after failures.
    pub max_backoff: Duration,
    /// Application traffic (bits per second queued for this link on the sending side)
    /// to wait for before a run; `None` runs as soon as due.
    pub ride_min_bps: Option<u64>,
    /// How long a due link waits for that traffic before it runs anyway; `None`: one
    /// interval.
    pub ride_max_wait: Option<Duration>,
    /// The path it measures: links with the same path (the same neighbour, by
    /// different methods) never run at once.
    pub path: usize,
    /// Whether a fresh passive estimate of its path may stand in for a due run.
    pub passive: bool,
    /// How it shares its path.
    pub class: Class,
}

/// How a link's runs share its path with the other links' (pScheduler's scheduling
/// classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Class {
    /// It loads the path: it runs alone on it, and counts toward `max_running`.
    #[default]
    Exclusive,
    /// It is light: it runs beside other background runs, and beside exclusive runs
    /// on other paths.
    Background,
}

/// Why a due link does not run yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// An exclusive run (this link's) holds its path.
    Exclusive(LinkIndex),
    /// It is exclusive, and as many exclusive runs as `max_running` allows are in
    /// flight into this node.
    Node,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            path: 0,
            interval: Duration::from_secs(60),
            jitter: 0.1,
            backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            ride_min_bps: None,
            ride_max_wait: None,
            passive: false,
            class: Class::Exclusive,
        }
    }
}

/// How a run ended, as the scheduler needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// It gave an estimate.
    Estimate,
    /// It ran but gave no estimate (time limit, unusable path): tried again after
    /// the back-off.
    NoEstimate(String),
    /// The neighbour could not be reached or went away mid-run.
    PeerDown(String),
}

/// Where a link is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// Waiting until `due`.
    Waiting {
        /// When its next run falls due.
        due: MonoTime,
    },
    /// Due since `due`, waiting for traffic to ride until `until`.
    AwaitingTraffic {
        /// When it fell due.
        due: MonoTime,
        /// When it runs whatever the traffic.
        until: MonoTime,
    },
    /// Due, waiting for its path or for a place among the exclusive runs (see
    /// [`Scheduler::waiting_for`]).
    Ready {
        /// Since when.
        since: MonoTime,
    },
    /// A run is in flight.
    Running {
        /// Since when.
        since: MonoTime,
    },
    /// Backing off after failures in a row.
    BackingOff {
        /// When it is tried again.
        until: MonoTime,
        /// Failures in a row.
        failures: u32,
        /// Why the last run failed.
        why: String,
        /// Whether the neighbour was down.
        peer_down: bool,
    },
}

/// Why "measure now" was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NowRefused {
    /// No link has this index.
    #[error("no such link")]
    NoSuchLink,
    /// A run of this link is in flight already; its result is the one to wait for.
    #[error("a measurement of this link is running")]
    Running,
}

#[derive(Debug, Clone)]
struct Link {
    timing: Timing,
    state: LinkState,
    /// Asked for with "measure now": first in line.
    urgent: bool,
    /// Application traffic queued for it on the sending side, as last reported.
    traffic_bps: u64,
    failures: u32,
    /// Whether a passive estimate of its path is fresh, as last reported.
    passive_fresh: bool,
}

/// The scheduler of one node's links.
#[derive(Debug, Clone)]
pub struct Scheduler {
    links: Vec<Link>,
    max_running: usize,
    rng: u64,
    /// Links whose due run a passive estimate stood in for, not yet taken.
    covered: Vec<LinkIndex>,
    /// How many times the links were replaced ([`Self::reshape`]): an index means
    /// the same link only within one generation.
    generation: u64,
    /// Exclusive runs still in flight of links a reshape removed.
    retiring: usize,
}

impl Scheduler {
    /// Links with their timings, all due after a first jittered wait of at most
    /// `first_within` from `now` (so a restarted node does not measure everything at
    /// once); `seed` drives the jitter.
    pub fn new(
        timings: Vec<Timing>,
        max_running: usize,
        now: MonoTime,
        first_within: Duration,
        seed: u64,
    ) -> Self {
        let mut s = Self {
            links: Vec::with_capacity(timings.len()),
            max_running: max_running.max(1),
            rng: seed | 1,
            covered: Vec::new(),
            generation: 0,
            retiring: 0,
        };
        for timing in timings {
            let link = s.fresh(timing, now, first_within);
            s.links.push(link);
        }
        s
    }

    /// A link not measured yet, due after a jittered wait within `first_within`.
    fn fresh(&mut self, timing: Timing, now: MonoTime, first_within: Duration) -> Link {
        let first = self.uniform(first_within);
        Link {
            timing,
            state: LinkState::Waiting {
                due: now.saturating_add(first),
            },
            urgent: false,
            traffic_bps: 0,
            failures: 0,
            passive_fresh: false,
        }
    }

    /// Replaces the links (a reload): new link `j` has `timings[j]` and continues old
    /// link `carry[j]` if that is given (its state, a run in flight, its place in
    /// line, its failures go on under the new timing); the others are new, due after
    /// a jittered wait within `first_within` of `now`. An old link that none
    /// continues is gone; if its run is in flight and exclusive it still counts
    /// toward `max_running` until the driver says it ended
    /// ([`Self::handle_retired`]). Indices from before mean nothing after: the
    /// generation goes up.
    pub fn reshape(
        &mut self,
        timings: Vec<Timing>,
        carry: &[Option<LinkIndex>],
        max_running: usize,
        now: MonoTime,
        first_within: Duration,
    ) {
        let mut old: Vec<Option<Link>> = std::mem::take(&mut self.links)
            .into_iter()
            .map(Some)
            .collect();
        for (j, timing) in timings.into_iter().enumerate() {
            let continued = carry
                .get(j)
                .copied()
                .flatten()
                .and_then(|i| old.get_mut(i)?.take());
            let link = match continued {
                Some(mut l) => {
                    l.timing = timing;
                    l
                }
                None => self.fresh(timing, now, first_within),
            };
            self.links.push(link);
        }
        self.retiring += old
            .iter()
            .flatten()
            .filter(|l| {
                l.timing.class == Class::Exclusive && matches!(l.state, LinkState::Running { .. })
            })
            .count();
        self.covered = std::mem::take(&mut self.covered)
            .into_iter()
            .filter_map(|i| carry.iter().position(|c| *c == Some(i)))
            .collect();
        self.max_running = max_running.max(1);
        self.generation += 1;
    }

    /// How many times the links were replaced.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A run of a link a reshape removed ended; `class` is that link's.
    pub fn handle_retired(&mut self, class: Class) {
        if class == Class::Exclusive {
            self.retiring = self.retiring.saturating_sub(1);
        }
    }

    /// How many links it schedules.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether it schedules no link.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Where link `i` is.
    pub fn state(&self, i: LinkIndex) -> Option<&LinkState> {
        self.links.get(i).map(|l| &l.state)
    }

    /// The application traffic last reported for link `i`, bits per second.
    pub fn traffic(&self, i: LinkIndex) -> Option<u64> {
        self.links.get(i).map(|l| l.traffic_bps)
    }

    /// Links that wait for traffic to ride and are due within `ahead` of `now` (or
    /// overdue, waiting for it): those whose sending side should be asked.
    pub fn wanting_traffic(&self, now: MonoTime, ahead: Duration) -> Vec<LinkIndex> {
        let horizon = now.saturating_add(ahead);
        (0..self.links.len())
            .filter(|&i| {
                let l = &self.links[i];
                l.timing.ride_min_bps.is_some()
                    && match l.state {
                        LinkState::Waiting { due } => due <= horizon,
                        LinkState::BackingOff { .. } => false,
                        LinkState::AwaitingTraffic { .. } => true,
                        LinkState::Ready { .. } | LinkState::Running { .. } => false,
                    }
            })
            .collect()
    }

    /// The link to start now, if any: urgent ones first, then the one due longest,
    /// among those [`Self::waiting_for`] holds back for nothing. It is `Running` from
    /// here until [`Self::handle_done`].
    pub fn poll_start(&mut self, now: MonoTime) -> Option<LinkIndex> {
        self.advance(now);
        let next = (0..self.links.len())
            .filter_map(|i| match self.links[i].state {
                LinkState::Ready { since } if self.waiting_for(i).is_none() => {
                    Some((!self.links[i].urgent, since, i))
                }
                _ => None,
            })
            .min()?
            .2;
        let link = &mut self.links[next];
        link.urgent = false;
        link.state = LinkState::Running { since: now };
        Some(next)
    }

    /// Why link `i`, due, does not run yet; `None` when nothing holds it back (or it
    /// is not due). Any link waits for an exclusive run on its path; an exclusive link
    /// also waits for a place among `max_running`. Nothing waits for a background run.
    pub fn waiting_for(&self, i: LinkIndex) -> Option<Wait> {
        let l = self.links.get(i)?;
        if !matches!(l.state, LinkState::Ready { .. }) {
            return None;
        }
        let exclusive_run = |o: &Link| {
            o.timing.class == Class::Exclusive && matches!(o.state, LinkState::Running { .. })
        };
        if let Some(j) = (0..self.links.len()).find(|&j| {
            j != i && self.links[j].timing.path == l.timing.path && exclusive_run(&self.links[j])
        }) {
            return Some(Wait::Exclusive(j));
        }
        let exclusive = self.links.iter().filter(|o| exclusive_run(o)).count() + self.retiring;
        (l.timing.class == Class::Exclusive && exclusive >= self.max_running).then_some(Wait::Node)
    }

    /// Link `i`'s run ended at `now`.
    pub fn handle_done(&mut self, i: LinkIndex, now: MonoTime, end: &RunEnd) {
        let wait = match end {
            RunEnd::Estimate => None,
            RunEnd::NoEstimate(_) | RunEnd::PeerDown(_) => Some(()),
        };
        let Some(link) = self.links.get(i) else {
            return;
        };
        if !matches!(link.state, LinkState::Running { .. }) {
            return;
        }
        let timing = link.timing.clone();
        match (wait, end) {
            (None, _) => {
                let interval = self.jittered(timing.interval, timing.jitter);
                let link = &mut self.links[i];
                link.failures = 0;
                link.state = LinkState::Waiting {
                    due: now.saturating_add(interval),
                };
            }
            (Some(()), RunEnd::NoEstimate(why) | RunEnd::PeerDown(why)) => {
                let failures = self.links[i].failures.saturating_add(1);
                let doubling = 2u32.saturating_pow(failures - 1);
                let base = timing
                    .backoff
                    .saturating_mul(doubling)
                    .min(timing.max_backoff);
                let wait = self.jittered(base, timing.jitter);
                let link = &mut self.links[i];
                link.failures = failures;
                link.state = LinkState::BackingOff {
                    until: now.saturating_add(wait),
                    failures,
                    why: why.clone(),
                    peer_down: matches!(end, RunEnd::PeerDown(_)),
                };
            }
            (Some(()), RunEnd::Estimate) => unreachable!("an estimate is no failure"),
        }
        if self.links[i].urgent {
            // Asked for while it ran: the fresh result is the answer.
            self.links[i].urgent = false;
        }
    }

    /// Puts link `i` first in line, whatever its wait or back-off.
    pub fn measure_now(&mut self, i: LinkIndex, now: MonoTime) -> Result<(), NowRefused> {
        let link = self.links.get_mut(i).ok_or(NowRefused::NoSuchLink)?;
        if matches!(link.state, LinkState::Running { .. }) {
            return Err(NowRefused::Running);
        }
        link.urgent = true;
        link.state = LinkState::Ready { since: now };
        Ok(())
    }

    /// The sending side reports `bps` of application traffic queued for link `i`.
    pub fn handle_traffic(&mut self, i: LinkIndex, bps: u64) {
        if let Some(link) = self.links.get_mut(i) {
            link.traffic_bps = bps;
        }
    }

    /// Whether a passive estimate of link `i`'s path is fresh now.
    pub fn handle_passive(&mut self, i: LinkIndex, fresh: bool) {
        if let Some(link) = self.links.get_mut(i) {
            link.passive_fresh = fresh;
        }
    }

    /// Links whose due run a passive estimate stood in for since the last call: the
    /// driver records that estimate for each.
    pub fn take_covered(&mut self) -> Vec<LinkIndex> {
        std::mem::take(&mut self.covered)
    }

    /// When something next falls due (a wait, a back-off, a traffic wait that ends);
    /// `None` when nothing waits on time.
    pub fn poll_timeout(&self) -> Option<MonoTime> {
        self.links
            .iter()
            .filter_map(|l| match l.state {
                LinkState::Waiting { due } => Some(due),
                LinkState::AwaitingTraffic { until, .. } => Some(until),
                LinkState::BackingOff { until, .. } => Some(until),
                LinkState::Ready { .. } | LinkState::Running { .. } => None,
            })
            .min()
    }

    /// Moves links whose time has come to `Ready` (or to waiting for traffic), or
    /// lets a fresh passive estimate stand in for the run.
    fn advance(&mut self, now: MonoTime) {
        for i in 0..self.links.len() {
            let l = &self.links[i];
            let covered = l.timing.passive
                && l.passive_fresh
                && !l.urgent
                && matches!(l.state, LinkState::Waiting { due } if due <= now);
            if covered {
                let (interval, jitter) = (l.timing.interval, l.timing.jitter);
                let wait = self.jittered(interval, jitter);
                self.links[i].state = LinkState::Waiting {
                    due: now.saturating_add(wait),
                };
                self.covered.push(i);
            }
        }
        for link in &mut self.links {
            let rides = link
                .timing
                .ride_min_bps
                .is_none_or(|min| link.traffic_bps >= min);
            link.state = match link.state.clone() {
                // A retry after a failure runs as soon as its back-off ends: the link
                // already waited for traffic before the run that failed, and waiting
                // again after every `busy` would make one due run cost several waits.
                LinkState::BackingOff { until, .. } if until <= now => {
                    LinkState::Ready { since: until }
                }
                LinkState::Waiting { due } if due <= now => {
                    if rides || link.urgent {
                        LinkState::Ready { since: due }
                    } else {
                        LinkState::AwaitingTraffic {
                            due,
                            until: due.saturating_add(
                                link.timing.ride_max_wait.unwrap_or(link.timing.interval),
                            ),
                        }
                    }
                }
                LinkState::AwaitingTraffic { due, until } if rides || until <= now => {
                    LinkState::Ready { since: due }
                }
                other => other,
            };
        }
    }

    /// `base` scaled by a factor drawn uniformly from `1 ± jitter`.
    fn jittered(&mut self, base: Duration, jitter: f64) -> Duration {
        let jitter = jitter.clamp(0.0, 0.5);
        let u = self.unit();
        base.mul_f64(1.0 - jitter + 2.0 * jitter * u)
    }

    /// A wait drawn uniformly from `0..=within`.
    fn uniform(&mut self, within: Duration) -> Duration {
        within.mul_f64(self.unit())
    }

    /// A draw from `0.0..1.0` (splitmix64).
    fn unit(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> MonoTime {
        MonoTime::from_nanos(secs * 1_000_000_000)
    }

    fn timing(interval: u64) -> Timing {
        Timing {
            interval: Duration::from_secs(interval),
            jitter: 0.0,
            backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(10),
            ride_min_bps: None,
            ride_max_wait: None,
            path: 0,
            passive: false,
            class: Class::Exclusive,
        }
    }

    fn background(interval: u64, path: usize) -> Timing {
        Timing {
            class: Class::Background,
            ..on_path(interval, path)
        }
    }

    fn on_path(interval: u64, path: usize) -> Timing {
        Timing {
            path,
            ..timing(interval)
        }
    }

    #[test]
    fn links_on_one_path_take_turns_and_other_paths_run_beside_them() {
        // Two methods from neighbour 0, one link from neighbour 1; room for three.
        let mut sch = Scheduler::new(
            vec![on_path(10, 0), on_path(10, 0), on_path(10, 1)],
            3,
            s(0),
            Duration::ZERO,
            3,
        );
        let a = sch.poll_start(s(0)).unwrap();
        let b = sch.poll_start(s(0)).unwrap();
        assert_eq!(sch.poll_start(s(0)), None, "the path's other link waits");
        let mut started = [a, b];
        started.sort_unstable();
        assert!(started.contains(&2), "{started:?}");
        let first = started[0];
        sch.handle_done(first, s(1), &RunEnd::Estimate);
        let other = 1 - first;
        assert_eq!(
            sch.poll_start(s(1)),
            Some(other),
            "its turn once the path is free"
        );
    }

    #[test]
    fn a_reshape_carries_links_on_starts_new_ones_and_counts_removed_runs() {
        // Link 0 waits until 10 s, link 1 runs (exclusive), one slot.
        let mut sch = Scheduler::new(vec![timing(10), timing(10)], 1, s(0), Duration::ZERO, 9);
        let first = sch.poll_start(s(0)).unwrap();
        sch.handle_done(first, s(0), &RunEnd::Estimate);
        let running = sch.poll_start(s(0)).unwrap();
        assert_ne!(first, running);
        let g = sch.generation();
        // The waiting link goes on (now second), the running one is removed, and a
        // new one comes first.
        sch.reshape(
            vec![timing(10), timing(20)],
            &[None, Some(first)],
            1,
            s(1),
            Duration::ZERO,
        );
        assert_eq!(sch.generation(), g + 1);
        assert_eq!(sch.len(), 2);
        assert_eq!(sch.state(1), Some(&LinkState::Waiting { due: s(10) }));
        assert_eq!(sch.state(0), Some(&LinkState::Waiting { due: s(1) }));
        // The removed link's run still holds the one slot until it ends.
        assert_eq!(sch.poll_start(s(1)), None);
        assert_eq!(sch.waiting_for(0), Some(Wait::Node));
        sch.handle_retired(Class::Exclusive);
        assert_eq!(sch.poll_start(s(1)), Some(0));
        // The carried link runs under its new timing: 20 s after its next run.
        sch.handle_done(0, s(2), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(10)), Some(1));
        sch.handle_done(1, s(10), &RunEnd::Estimate);
        assert_eq!(sch.state(1), Some(&LinkState::Waiting { due: s(30) }));
    }

    #[test]
    fn links_take_turns_and_never_run_twice() {
        let mut sch = Scheduler::new(vec![timing(10), timing(10)], 1, s(0), Duration::ZERO, 7);
        let first = sch.poll_start(s(0)).unwrap();
        // One slot: the other waits, and the running one is not started again.
        assert_eq!(sch.poll_start(s(1)), None);
        sch.handle_done(first, s(3), &RunEnd::Estimate);
        let second = sch.poll_start(s(3)).unwrap();
        assert_ne!(first, second);
        assert_eq!(sch.poll_start(s(3)), None);
        sch.handle_done(second, s(5), &RunEnd::Estimate);
        // Each is due an interval after its own end.
        assert_eq!(sch.poll_timeout(), Some(s(13)));
        assert_eq!(sch.poll_start(s(12)), None);
        assert_eq!(sch.poll_start(s(13)), Some(first));
        sch.handle_done(first, s(14), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(15)), Some(second));
    }

    #[test]
    fn failures_back_off_doubling_to_the_limit_and_reset_on_success() {
        let mut sch = Scheduler::new(vec![timing(60)], 1, s(0), Duration::ZERO, 1);
        let mut now = s(0);
        let mut waits = Vec::new();
        for _ in 0..5 {
            assert_eq!(sch.poll_start(now), Some(0));
            sch.handle_done(0, now, &RunEnd::PeerDown("refused".into()));
            let until = sch.poll_timeout().unwrap();
            waits.push(until.saturating_since(now).as_secs());
            assert!(matches!(
                sch.state(0),
                Some(LinkState::BackingOff {
                    peer_down: true,
                    ..
                })
            ));
            now = until;
        }
        assert_eq!(waits, [2, 4, 8, 10, 10]);
        assert_eq!(sch.poll_start(now), Some(0));
        sch.handle_done(0, now, &RunEnd::Estimate);
        assert_eq!(
            sch.poll_timeout(),
            Some(now.saturating_add(Duration::from_secs(60)))
        );
        // The next failure starts from the first back-off again.
        let later = sch.poll_timeout().unwrap();
        assert_eq!(sch.poll_start(later), Some(0));
        sch.handle_done(0, later, &RunEnd::NoEstimate("time limit".into()));
        assert_eq!(
            sch.poll_timeout(),
            Some(later.saturating_add(Duration::from_secs(2)))
        );
    }

    #[test]
    fn measure_now_jumps_the_queue_but_not_a_running_link() {
        let mut sch = Scheduler::new(
            vec![timing(10), timing(10), timing(100)],
            1,
            s(0),
            Duration::ZERO,
            3,
        );
        let running = sch.poll_start(s(0)).unwrap();
        assert_eq!(sch.measure_now(running, s(1)), Err(NowRefused::Running));
        assert_eq!(sch.measure_now(9, s(1)), Err(NowRefused::NoSuchLink));
        let other = (0..3).find(|&i| i != running && i != 2).unwrap();
        // Link 2 is asked for later than `other` fell due, yet goes first.
        sch.measure_now(2, s(2)).unwrap();
        sch.handle_done(running, s(3), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(3)), Some(2));
        sch.handle_done(2, s(4), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(4)), Some(other));
    }

    #[test]
    fn a_fresh_passive_estimate_stands_in_for_due_runs_until_it_goes_stale() {
        let passive = Timing {
            passive: true,
            ..timing(10)
        };
        let other = Timing {
            path: 1,
            ..timing(10)
        };
        let mut sch = Scheduler::new(vec![passive, other], 2, s(0), Duration::ZERO, 5);
        sch.handle_passive(0, true);
        sch.handle_passive(1, true);
        // Link 0 is covered and waits an interval; link 1 may not be, and runs.
        assert_eq!(sch.poll_start(s(0)), Some(1));
        assert_eq!(sch.poll_start(s(0)), None);
        assert_eq!(sch.take_covered(), [0]);
        assert_eq!(sch.take_covered(), Vec::<usize>::new());
        assert_eq!(sch.state(0), Some(&LinkState::Waiting { due: s(10) }));
        assert_eq!(sch.poll_start(s(10)), None);
        assert_eq!(sch.take_covered(), [0]);
        // "Measure now" runs it whatever the passive estimate says.
        sch.measure_now(0, s(12)).unwrap();
        assert_eq!(sch.poll_start(s(12)), Some(0));
        sch.handle_done(0, s(13), &RunEnd::Estimate);
        // The traffic stops: the next due run is active, within one interval.
        sch.handle_passive(0, false);
        assert_eq!(sch.poll_start(s(23)), Some(0));
        assert!(sch.take_covered().is_empty());
    }

    #[test]
    fn a_riding_link_waits_for_traffic_at_most_one_interval() {
        // Two paths: the riding link waits while the other runs.
        let ride = Timing {
            path: 1,
            ride_min_bps: Some(1_000_000),
            ..timing(10)
        };
        let mut sch = Scheduler::new(vec![ride, timing(10)], 2, s(0), Duration::ZERO, 5);
        assert_eq!(sch.wanting_traffic(s(0), Duration::from_secs(1)), [0]);
        assert_eq!(sch.poll_start(s(0)), Some(1));
        assert_eq!(sch.poll_start(s(0)), None);
        assert_eq!(sch.wanting_traffic(s(0), Duration::from_secs(1)), [0]);
        assert_eq!(
            sch.state(0),
            Some(&LinkState::AwaitingTraffic {
                due: s(0),
                until: s(10)
            })
        );
        sch.handle_traffic(0, 500_000);
        assert_eq!(sch.poll_start(s(3)), None);
        sch.handle_traffic(0, 2_000_000);
        assert_eq!(sch.traffic(0), Some(2_000_000));
        assert_eq!(sch.poll_start(s(4)), Some(0));
        // Running, it wants no traffic report; waiting, only from a second before due.
        assert!(sch.wanting_traffic(s(4), Duration::from_secs(1)).is_empty());
        sch.handle_done(0, s(5), &RunEnd::Estimate);
        let due = sch.poll_timeout().unwrap();
        assert_eq!(sch.wanting_traffic(due, Duration::ZERO), [0]);
        assert!(
            sch.wanting_traffic(s(5), Duration::from_secs(1)).is_empty(),
            "{:?}",
            sch.state(0)
        );
        // No traffic this time: it runs anyway one interval after falling due.
        sch.handle_traffic(0, 0);
        assert_eq!(sch.poll_start(s(15)), None);
        assert_eq!(sch.poll_timeout(), Some(s(25)));
        assert_eq!(sch.poll_start(s(25)), Some(0));
    }

    /// A run that waited for traffic and was then turned away (`busy`) is retried when
    /// its back-off ends, not after another wait for traffic.
    #[test]
    fn a_retry_after_a_failure_does_not_wait_for_traffic_again() {
        let ride = Timing {
            path: 0,
            ride_min_bps: Some(1_000_000),
            ride_max_wait: Some(Duration::from_secs(40)),
            backoff: Duration::from_secs(1),
            jitter: 0.0,
            ..timing(10)
        };
        let mut sch = Scheduler::new(vec![ride], 1, s(0), Duration::ZERO, 5);
        assert_eq!(sch.poll_start(s(0)), None);
        assert_eq!(sch.poll_start(s(40)), Some(0));
        sch.handle_done(0, s(41), &RunEnd::NoEstimate("busy".into()));
        assert!(
            sch.wanting_traffic(s(41), Duration::from_secs(5))
                .is_empty()
        );
        assert_eq!(sch.poll_timeout(), Some(s(42)));
        assert_eq!(sch.poll_start(s(42)), Some(0));
        // Its next due run waits for traffic again.
        sch.handle_done(0, s(43), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(53)), None);
        assert!(matches!(
            sch.state(0),
            Some(LinkState::AwaitingTraffic { .. })
        ));
    }

    #[test]
    fn the_wait_for_traffic_may_be_set_apart_from_the_interval() {
        let ride = Timing {
            path: 0,
            ride_min_bps: Some(1_000_000),
            ride_max_wait: Some(Duration::from_secs(60)),
            ..timing(10)
        };
        let mut sch = Scheduler::new(vec![ride], 1, s(0), Duration::ZERO, 5);
        assert_eq!(sch.poll_start(s(0)), None);
        assert_eq!(sch.poll_timeout(), Some(s(60)));
        assert_eq!(sch.poll_start(s(59)), None);
        assert_eq!(sch.poll_start(s(60)), Some(0));
    }

    #[test]
    fn an_exclusive_link_waits_for_another_on_its_path_but_not_for_a_background_one() {
        // Path 0: two exclusive links and a background one; path 1: a background link.
        // Room for two exclusive runs into the node.
        let mut sch = Scheduler::new(
            vec![
                on_path(10, 0),
                on_path(10, 0),
                background(10, 0),
                background(10, 1),
            ],
            2,
            s(0),
            Duration::ZERO,
            3,
        );
        // The first exclusive link starts, and the background link of the other path;
        // the rest of path 0 waits for the exclusive run.
        let mut started = Vec::new();
        while let Some(i) = sch.poll_start(s(0)) {
            started.push(i);
        }
        assert_eq!(started, [0, 3]);
        assert_eq!(sch.waiting_for(1), Some(Wait::Exclusive(0)));
        assert_eq!(sch.waiting_for(2), Some(Wait::Exclusive(0)));
        assert_eq!(sch.waiting_for(0), None, "running, not waiting");
        // It ends: the other exclusive link, due as long, goes next and holds the path.
        sch.handle_done(0, s(1), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(1)), Some(1));
        assert_eq!(sch.poll_start(s(1)), None);
        assert_eq!(sch.waiting_for(2), Some(Wait::Exclusive(1)));
        // Then the background link of path 0 runs, continuously.
        sch.handle_done(1, s(2), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(2)), Some(2));
        // It holds nothing: both exclusive links, due while it runs, run beside it in
        // turn.
        assert_eq!(sch.poll_start(s(11)), Some(0));
        assert_eq!(sch.waiting_for(1), None, "not due yet");
        sch.handle_done(0, s(11), &RunEnd::Estimate);
        assert_eq!(sch.poll_start(s(12)), Some(1));
        assert!(matches!(sch.state(2), Some(LinkState::Running { .. })));
    }

    #[test]
    fn exclusive_runs_into_the_node_are_bounded_and_background_ones_are_not() {
        let links = vec![
            on_path(10, 0),
            on_path(10, 1),
            background(10, 2),
            background(10, 3),
            background(10, 4),
        ];
        let mut sch = Scheduler::new(links, 1, s(0), Duration::ZERO, 9);
        let mut started = Vec::new();
        while let Some(i) = sch.poll_start(s(0)) {
            started.push(i);
        }
        started.sort_unstable();
        assert_eq!(
            started.len(),
            4,
            "one exclusive, every background: {started:?}"
        );
        let waiting = if started.contains(&0) { 1 } else { 0 };
        assert_eq!(sch.waiting_for(waiting), Some(Wait::Node));
    }

    #[test]
    fn jitter_spreads_waits_within_its_band() {
        let t = Timing {
            path: 0,
            jitter: 0.2,
            ..timing(100)
        };
        let paths = (0..50).map(|path| Timing { path, ..t.clone() }).collect();
        let mut sch = Scheduler::new(paths, 50, s(0), Duration::from_secs(30), 11);
        let mut firsts: Vec<u64> = Vec::new();
        for i in 0..50 {
            match sch.state(i) {
                Some(LinkState::Waiting { due }) => firsts.push(due.as_nanos()),
                other => panic!("{other:?}"),
            }
        }
        assert!(firsts.iter().all(|&d| d <= s(30).as_nanos()));
        firsts.sort_unstable();
        firsts.dedup();
        assert!(firsts.len() > 40, "first runs spread out");
        let mut started = Vec::new();
        while let Some(i) = sch.poll_start(s(30)) {
            started.push(i);
        }
        assert_eq!(started.len(), 50);
        for &i in &started {
            sch.handle_done(i, s(30), &RunEnd::Estimate);
            let Some(LinkState::Waiting { due }) = sch.state(i) else {
                panic!()
            };
            let wait = due.saturating_since(s(30)).as_secs_f64();
            assert!((80.0..=120.0).contains(&wait), "{wait}");
        }
    }
}
