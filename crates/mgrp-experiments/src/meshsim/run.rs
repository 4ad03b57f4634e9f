//! One simulated run: the description written, its budget planned as the overlay
//! plans it, each member's links run by the overlay's own scheduler at the planned
//! timings, each run's estimate drawn about the truth, senders taking exclusive
//! runs one at a time, and every pair's value (its own estimate, or inferred)
//! sampled for its age and judged against the truth.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;
use std::time::Duration;

use mgrp_core::MonoTime;
use mgrp_core::draw::Draws;
use mgrp_mesh::Mesh;
use mgrp_mesh::budget::BudgetPlan;
use mgrp_mesh::infer::{Inference, Measured};
use mgrp_overlay::measure::registry::Method;
use mgrp_overlay::measure::schedule::{Class, RunEnd, Scheduler, Timing};

use super::Setup;
use super::truth::{ESTIMATE_SIGMA, RUN_FAILS, Truth, normal};

/// How long a typical run takes, by method, in the simulation: pathChirp and
/// badabing run their whole time limit; pathload-fast 44 s and btc 8.4 s, as
/// measured (docs/btc/results.md).
fn typical_run(method: &str, time_limit: Duration) -> Duration {
    match method {
        "pathload-fast" => Duration::from_secs(44).min(time_limit),
        "pathload-slow" => Duration::from_secs(88).min(time_limit),
        "btc" => Duration::from_millis(8400).min(time_limit),
        _ => time_limit,
    }
}

/// A histogram of ages, by the second.
#[derive(Debug, Clone, Default)]
pub struct Ages(Vec<u64>);

impl Ages {
    fn add(&mut self, secs: f64) {
        let i = secs.max(0.0) as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] += 1;
    }

    /// Adds another's ages.
    pub fn merge(&mut self, other: &Self) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a += b;
        }
    }

    /// How many ages it holds.
    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The CDF as steps of `(seconds, share)`, each bin's share at its upper edge;
    /// empty when it holds nothing.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let n = self.count();
        let mut steps = Vec::new();
        if n == 0 {
            return steps;
        }
        let mut seen = 0;
        for (i, &c) in self.0.iter().enumerate() {
            if c == 0 {
                continue;
            }
            steps.push((i as f64, seen as f64 / n as f64));
            seen += c;
            steps.push((i as f64 + 1.0, seen as f64 / n as f64));
        }
        steps
    }

    /// The `q` quantile in seconds (the upper edge of its bin).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let want = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.0.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(i as f64 + 1.0);
            }
        }
        None
    }
}

/// What one method did.
#[derive(Debug, Clone, Default)]
pub struct MethodReport {
    /// Its links.
    pub links: usize,
    /// Runs that ended in the judged window, and those without an estimate.
    pub runs: u64,
    /// See `runs`.
    pub failed: u64,
    /// Probe bytes an hour per link of its, in the judged window, less what
    /// riders filled.
    pub bytes_per_link_hour: f64,
    /// Due runs in the judged window a passive estimate stood in for.
    pub covered: u64,
    /// Ages of its links' newest estimates, sampled.
    pub ages: Ages,
    /// The planned interval, least and most (seconds).
    pub interval: (f64, f64),
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Its setup.
    pub setup: Setup,
    /// The age the plan affords, and where it falls short.
    pub affords: Duration,
    /// See `affords`.
    pub shortfalls: Vec<String>,
    /// Ordered pairs, and those measured (paths with a link).
    pub pairs: usize,
    /// See `pairs`.
    pub measured_paths: usize,
    /// Per method.
    pub methods: BTreeMap<String, MethodReport>,
    /// Bytes an hour over the whole mesh: probes (as run, less what riders
    /// filled), heartbeats and polls (as planned).
    pub probe_bytes_per_hour: f64,
    /// Bytes an hour of application packets riding in probes: the share of the
    /// probes' bytes that cost nothing more.
    pub rider_bytes_per_hour: f64,
    /// See `probe_bytes_per_hour`.
    pub heartbeat_bytes_per_hour: f64,
    /// See `probe_bytes_per_hour`.
    pub poll_bytes_per_hour: f64,
    /// Ages of every pair's value, sampled: measured, inferred.
    pub measured_ages: Ages,
    /// See `measured_ages`.
    pub inferred_ages: Ages,
    /// Samples of pairs with no value at all.
    pub without_value: u64,
    /// Pairs at the last sample: measured within ±50 % of the truth, of how many.
    pub measured_within: (usize, usize),
    /// The same for inferred pairs.
    pub inferred_within: (usize, usize),
    /// Inferred pairs read high (above 1.5 × the truth): a bottleneck of their own.
    pub inferred_high: usize,
    /// Pairs of pairs (drawn at random) ordered as the truth orders them, of how
    /// many: all, more than 20 % apart.
    pub ordered: (usize, usize),
    /// See `ordered`.
    pub ordered_far: (usize, usize),
    /// Inferred pairs' values: within ±50 % when the truth has no own bottleneck.
    pub inferred_within_no_own: (usize, usize),
    /// Every pair's |error| against the truth at the last sample, in per cent:
    /// measured, inferred.
    pub measured_errors: Vec<f64>,
    /// See `measured_errors`.
    pub inferred_errors: Vec<f64>,
    /// Simulated events, for the record.
    pub events: u64,
}

impl Report {
    /// Bytes per link-hour over all ordered pairs.
    pub fn per_pair_hour(&self, bytes: f64) -> f64 {
        bytes / self.pairs.max(1) as f64
    }
}

/// The description of the setup: members (regions given when the setup says so),
/// one spread group, the routing members, the budget.
pub fn description(setup: &Setup, truth: &Truth) -> String {
    let mut t = String::new();
    for i in 0..setup.members {
        let _ = write!(
            t,
            "[[member]]\nname = \"m{i}\"\naddress = \"10.{}.{}.{}\"\n",
            100 + i / 65_536,
            (i / 256) % 256,
            i % 256
        );
        if setup.regions_given {
            let _ = writeln!(t, "region = \"r{}\"", truth.region[i]);
        }
        if setup.routing > 0 {
            let mut seed = [0u8; 32];
            // Past the first byte, which the key's clamping partly clears.
            seed[1..9].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            let _ = writeln!(
                t,
                "public-key = \"{}\"",
                mgrp_core::pair::PrivateKey::from_bytes(seed).public()
            );
        }
        if i < setup.routing {
            let _ = writeln!(t, "networks = [\"172.{}.{}.0/24\"]", 16 + i / 256, i % 256);
        }
    }
    let names: Vec<String> = (0..setup.members).map(|i| format!("\"m{i}\"")).collect();
    let methods: Vec<String> = setup.methods.iter().map(|m| format!("\"{m}\"")).collect();
    let _ = write!(
        t,
        "[[group]]\nname = \"spread\"\nkind = \"spread\"\nk = {}\nmethods = [{}]\nmembers = [{}]\n",
        setup.k,
        methods.join(", "),
        names.join(", ")
    );
    if setup.routing >= 2 {
        let _ = writeln!(
            t,
            "[routing]\nmembers = [{}]",
            names[..setup.routing].join(", ")
        );
    }
    let _ = write!(
        t,
        "[budget]\nnode-mb-per-hour = {}\nage = \"{}s\"\nride-share = {}\npassive-share = {}\n",
        setup.node_mb_per_hour,
        setup.age.as_secs(),
        setup.ride_share,
        setup.passive_share
    );
    t
}

struct SimLink {
    from: usize,
    method: usize,
    exclusive: bool,
    available: bool,
    run: Duration,
    bytes: u64,
    newest: Option<(f64, f64)>,
}

struct Node {
    sched: Scheduler,
    links: Vec<SimLink>,
    wake: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Wake(usize),
    End(usize, usize, bool),
}

const T0: u64 = 1_000_000_000;

fn mono(t: u64) -> MonoTime {
    MonoTime::from_nanos(T0 + t)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs the setup.
pub fn run(setup: &Setup) -> anyhow::Result<Report> {
    let n = setup.members;
    let truth = Truth::draw(n, setup.seed);
    let text = description(setup, &truth);
    let mesh = Mesh::parse(&text)?;
    let costs = mgrp_overlay::config::budget_costs();
    let plan: BudgetPlan = mesh
        .plan_budget(&costs)
        .ok_or_else(|| anyhow::anyhow!("the description has no budget"))?;
    let index = |name: &str| name[1..].parse::<usize>().expect("m<i>");
    let method_names: Vec<String> = setup.methods.iter().map(|m| (*m).to_owned()).collect();
    let mut methods: BTreeMap<String, MethodReport> = BTreeMap::new();
    // Each member's links into it, in the plan's order, as its overlay holds them.
    let mut per_node: Vec<Vec<(SimLink, Timing)>> = (0..n).map(|_| Vec::new()).collect();
    for (k, t) in &plan.links {
        let into = index(&k.0);
        let from = index(&k.1);
        let m = Method::named(&k.2).ok_or_else(|| anyhow::anyhow!("no method {}", k.2))?;
        let cost = m.cost();
        let r = methods.entry(k.2.clone()).or_default();
        r.links += 1;
        let i = t.interval.as_secs_f64();
        r.interval = if r.links == 1 {
            (i, i)
        } else {
            (r.interval.0.min(i), r.interval.1.max(i))
        };
        let timing = Timing {
            interval: t.interval,
            jitter: costs.jitter,
            path: from,
            class: m.class(),
            passive: setup.passive_share > 0.0 && cost.available_bandwidth,
            ..Timing::default()
        };
        per_node[into].push((
            SimLink {
                from,
                method: method_names.iter().position(|x| x == &k.2).unwrap_or(0),
                exclusive: m.class() == Class::Exclusive,
                available: cost.available_bandwidth,
                run: typical_run(&k.2, t.time_limit),
                bytes: cost.bytes_per_run,
                newest: None,
            },
            timing,
        ));
    }
    let mut nodes: Vec<Node> = per_node
        .into_iter()
        .enumerate()
        .map(|(j, links)| {
            let (links, timings): (Vec<SimLink>, Vec<Timing>) = links.into_iter().unzip();
            let running = plan.nodes[&format!("m{j}")].max_running;
            Node {
                sched: Scheduler::new(
                    timings,
                    running,
                    mono(0),
                    mgrp_overlay::node::FIRST_WITHIN,
                    setup.seed ^ (j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
                links,
                wake: None,
            }
        })
        .collect();
    let mut draws = Draws::new(setup.seed ^ 0x7275_6e73);
    let mut queue: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for (j, node) in nodes.iter_mut().enumerate() {
        queue.push(Reverse((0, Event::Wake(j))));
        node.wake = Some(0);
    }
    let mut sender_free = vec![0u64; n];
    let judged = nanos(setup.judged_from);
    let end = nanos(setup.duration);
    let mut probe_bytes = 0u64;
    let mut rider_bytes = 0.0f64;
    let mut covered = vec![0u64; method_names.len()];
    let mut runs = vec![(0u64, 0u64); method_names.len()];
    let mut bytes_by_method = vec![0u64; method_names.len()];
    let regions: Vec<Option<usize>> = (0..n)
        .map(|i| setup.regions_given.then_some(truth.region[i]))
        .collect();
    let mut report = Report {
        setup: setup.clone(),
        affords: plan.affords,
        shortfalls: plan.shortfalls.iter().map(ToString::to_string).collect(),
        pairs: n * (n - 1),
        measured_paths: 0,
        methods: BTreeMap::new(),
        probe_bytes_per_hour: 0.0,
        rider_bytes_per_hour: 0.0,
        heartbeat_bytes_per_hour: plan
            .nodes
            .values()
            .map(|b| b.heartbeat_bytes_per_hour)
            .sum::<f64>()
            / 2.0,
        poll_bytes_per_hour: plan
            .nodes
            .values()
            .map(|b| b.poll_bytes_per_hour)
            .sum::<f64>()
            / 2.0,
        measured_ages: Ages::default(),
        inferred_ages: Ages::default(),
        without_value: 0,
        measured_within: (0, 0),
        inferred_within: (0, 0),
        inferred_high: 0,
        ordered: (0, 0),
        ordered_far: (0, 0),
        inferred_within_no_own: (0, 0),
        measured_errors: Vec::new(),
        inferred_errors: Vec::new(),
        events: 0,
    };
    let mut method_ages: Vec<Ages> = vec![Ages::default(); method_names.len()];
    let mut sample_at = judged;
    let step = nanos(setup.sample_every);
    loop {
        let next = queue.peek().map(|Reverse((t, _))| *t);
        if next.is_none_or(|t| t > sample_at) {
            if sample_at > end {
                break;
            }
            let last = sample_at + step > end;
            sample(
                &mut report,
                &mut method_ages,
                &nodes,
                &regions,
                &truth,
                sample_at,
                last,
                &mut draws,
            );
            sample_at += step;
            continue;
        }
        let Reverse((now, ev)) = queue.pop().expect("peeked");
        report.events += 1;
        match ev {
            Event::Wake(j) => {
                if nodes[j].wake != Some(now) {
                    continue;
                }
                nodes[j].wake = None;
                // Whether the applications' own flows on a path give a fresh passive
                // estimate when its run falls due: drawn anew at each wake, so that
                // `passive_share` of due runs find one. The estimate stands in with
                // an active run's error.
                if setup.passive_share > 0.0 {
                    for i in 0..nodes[j].links.len() {
                        let fresh = draws.uniform() < setup.passive_share;
                        nodes[j].sched.handle_passive(i, fresh);
                    }
                }
                while let Some(i) = nodes[j].sched.poll_start(mono(now)) {
                    let l = &nodes[j].links[i];
                    let begin = if l.exclusive {
                        let b = now.max(sender_free[l.from]);
                        sender_free[l.from] = b + nanos(l.run);
                        b
                    } else {
                        now
                    };
                    let ok = draws.uniform() >= RUN_FAILS;
                    queue.push(Reverse((begin + nanos(l.run), Event::End(j, i, ok))));
                }
                for i in nodes[j].sched.take_covered() {
                    let l = &mut nodes[j].links[i];
                    if now >= judged {
                        covered[l.method] += 1;
                    }
                    let bps =
                        truth.available(l.from, j) * (ESTIMATE_SIGMA * normal(&mut draws)).exp();
                    l.newest = Some((bps, now as f64 / 1e9));
                }
                if let Some(t) = nodes[j].sched.poll_timeout() {
                    let t = t.as_nanos().saturating_sub(T0).max(now + 1);
                    if nodes[j].wake.is_none_or(|w| t < w) {
                        nodes[j].wake = Some(t);
                        queue.push(Reverse((t, Event::Wake(j))));
                    }
                }
            }
            Event::End(j, i, ok) => {
                let l = &mut nodes[j].links[i];
                if now >= judged {
                    // Riders fill `ride_share` of the probes' bytes (every simulated
                    // link is over MGRP): bytes the applications sent anyway.
                    let ridden = l.bytes as f64 * setup.ride_share;
                    let active = l.bytes - ridden.round() as u64;
                    rider_bytes += ridden;
                    probe_bytes += active;
                    bytes_by_method[l.method] += active;
                    runs[l.method].0 += 1;
                    if !ok {
                        runs[l.method].1 += 1;
                    }
                }
                let end = if ok {
                    let bps =
                        truth.available(l.from, j) * (ESTIMATE_SIGMA * normal(&mut draws)).exp();
                    l.newest = Some((bps, now as f64 / 1e9));
                    RunEnd::Estimate
                } else {
                    RunEnd::NoEstimate("simulated failure".into())
                };
                nodes[j].sched.handle_done(i, mono(now), &end);
                if nodes[j].wake.is_none_or(|w| now < w) {
                    nodes[j].wake = Some(now);
                    queue.push(Reverse((now, Event::Wake(j))));
                }
            }
        }
    }
    let hours = (end - judged) as f64 / 3.6e12;
    report.probe_bytes_per_hour = probe_bytes as f64 / hours;
    report.rider_bytes_per_hour = rider_bytes / hours;
    let mut paths = std::collections::HashSet::new();
    for (j, node) in nodes.iter().enumerate() {
        for l in &node.links {
            paths.insert((l.from, j));
        }
    }
    report.measured_paths = paths.len();
    for (m, name) in method_names.iter().enumerate() {
        if let Some(r) = methods.get_mut(name) {
            r.runs = runs[m].0;
            r.failed = runs[m].1;
            r.covered = covered[m];
            r.bytes_per_link_hour = bytes_by_method[m] as f64 / hours / r.links.max(1) as f64;
            r.ages = std::mem::take(&mut method_ages[m]);
        }
    }
    report.methods = methods;
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn sample(
    report: &mut Report,
    method_ages: &mut [Ages],
    nodes: &[Node],
    regions: &[Option<usize>],
    truth: &Truth,
    at: u64,
    last: bool,
    draws: &mut Draws,
) {
    let now = at as f64 / 1e9;
    let n = nodes.len();
    // Each path's newest available-bandwidth estimate.
    let mut newest: BTreeMap<(usize, usize), (f64, f64)> = BTreeMap::new();
    for (j, node) in nodes.iter().enumerate() {
        for l in &node.links {
            if let Some((bps, t)) = l.newest {
                method_ages[l.method].add(now - t);
                if l.available {
                    let e = newest.entry((l.from, j)).or_insert((bps, t));
                    if t > e.1 {
                        *e = (bps, t);
                    }
                }
            }
        }
    }
    let measured: Vec<Measured> = newest
        .iter()
        .map(|(&(from, into), &(bps, at))| Measured {
            from,
            into,
            bps,
            at,
        })
        .collect();
    // Estimates older than the age goal are bounds of last resort.
    let stale = report
        .setup
        .stale_bounds_last
        .then_some(now - report.setup.age.as_secs_f64());
    let inf = Inference::new(regions, &measured, stale);
    let mut values: Vec<(f64, f64, bool)> = Vec::new();
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            match inf.value(i, j) {
                None => report.without_value += 1,
                Some(v) => {
                    if v.inferred() {
                        report.inferred_ages.add(now - v.at);
                    } else {
                        report.measured_ages.add(now - v.at);
                    }
                    if last {
                        let t = truth.available(i, j);
                        let within = (v.bps - t).abs() <= 0.5 * t;
                        let tally = if v.inferred() {
                            &mut report.inferred_within
                        } else {
                            &mut report.measured_within
                        };
                        tally.1 += 1;
                        tally.0 += usize::from(within);
                        let error = 100.0 * (v.bps - t).abs() / t;
                        if v.inferred() {
                            report.inferred_errors.push(error);
                        } else {
                            report.measured_errors.push(error);
                        }
                        if v.inferred() {
                            report.inferred_high += usize::from(v.bps > 1.5 * t);
                            if !truth.own.contains_key(&(i, j)) {
                                report.inferred_within_no_own.1 += 1;
                                report.inferred_within_no_own.0 += usize::from(within);
                            }
                        }
                        values.push((v.bps, t, v.inferred()));
                    }
                }
            }
        }
    }
    if last && values.len() >= 2 {
        for _ in 0..200_000 {
            let a = values[(draws.uniform() * values.len() as f64) as usize % values.len()];
            let b = values[(draws.uniform() * values.len() as f64) as usize % values.len()];
            if a.1 == b.1 {
                continue;
            }
            let right = (a.0 - b.0) * (a.1 - b.1) > 0.0;
            report.ordered.1 += 1;
            report.ordered.0 += usize::from(right);
            if a.1.max(b.1) > 1.2 * a.1.min(b.1) {
                report.ordered_far.1 += 1;
                report.ordered_far.0 += usize::from(right);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ages;

    #[test]
    fn ages_step_up_to_all_at_the_upper_edge_of_the_last_bin() {
        assert!(Ages::default().cdf().is_empty());
        let mut a = Ages::default();
        for s in [0.5, 2.2, 2.9, 7.0] {
            a.add(s);
        }
        assert_eq!(
            a.cdf(),
            [
                (0.0, 0.0),
                (1.0, 0.25),
                (2.0, 0.25),
                (3.0, 0.75),
                (7.0, 0.75),
                (8.0, 1.0)
            ]
        );
        assert_eq!(a.quantile(0.5), Some(3.0));
    }
}
