//! A probe budget planned for the whole mesh: each link's interval and run length,
//! each node's `max-running` and the budget its sender gives each requester, from
//! the description's `[budget]` and what each method costs.
//!
//! The description says what a node may spend (active probes it sends and receives,
//! route control's heartbeats, the kernel's polls of its neighbours), what one link
//! may spend, and how old a link's newest available-bandwidth estimate may grow.
//! On each path (one member measured from another over one transport) the method
//! that meets that age most cheaply is the path's *primary*: it is run just often
//! enough to meet it. Every other link on the path (a second method, the loss or
//! shape methods) is *secondary*: it shares what the primaries leave of both ends'
//! budgets. A budget too small for the age is planned anyway, within the budget,
//! at the age it affords, and each shortfall is said ([`Shortfall`]).
//!
//! What is free: the share of an MGRP link's probe bytes that application traffic
//! fills (`ride-share`) and the share of due runs a passive estimate stands in for
//! (`passive-share`), both as measured on the mesh, 0 unless the description gives
//! them.
//!
//! Sans-IO: the description and the methods' costs in, a [`BudgetPlan`] out.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Mesh, Transport};

/// The description's `[budget]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// What one node may spend an hour: probes it sends and receives, heartbeats,
    /// polls (bytes).
    pub node_bytes_per_hour: u64,
    /// What one link may spend an hour (bytes).
    pub link_bytes_per_hour: u64,
    /// How old a path's newest available-bandwidth estimate may grow.
    pub age: Duration,
    /// The share of an MGRP link's probe bytes that riders fill, 0 to 0.95.
    pub ride_share: f64,
    /// The share of due runs that passive estimates stand in for, 0 to 0.95.
    pub passive_share: f64,
    /// Route control's heartbeat interval, as the routing members' overlays have it.
    pub heartbeat_interval: Duration,
    /// The costs the description gives for methods, over the overlay's own.
    pub methods: BTreeMap<String, CostOverride>,
}

/// What the description says a method costs, where it knows better.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CostOverride {
    /// Probe bytes of one run.
    pub bytes_per_run: Option<u64>,
    /// The run's time limit.
    pub time_limit: Option<Duration>,
}

/// What a method costs a link, as the overlay knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MethodCost {
    /// Probe bytes of one run (both directions on the path).
    pub bytes_per_run: u64,
    /// The run's time limit: the longest one run takes, set as the link's.
    pub time_limit: Duration,
    /// Whether its runs hold the path and the sender's exclusive turn.
    pub exclusive: bool,
    /// Whether its estimates give the available bandwidth (the age goal's).
    pub available_bandwidth: bool,
}

/// What the planner takes besides the description: each method's cost and the
/// overlay's scheduling constants.
#[derive(Debug, Clone, PartialEq)]
pub struct Costs {
    /// Each method's cost, by its name.
    pub methods: BTreeMap<String, MethodCost>,
    /// The scheduler's jitter (a wait is drawn within `interval × (1 ± jitter)`).
    pub jitter: f64,
    /// Bytes an hour the kernel's polls of one measured neighbour cost each end.
    pub poll_bytes_per_hour: u64,
    /// Bytes one heartbeat and its echo take on the wire.
    pub heartbeat_bytes: u64,
    /// Exclusive measurements a sender runs at once.
    pub sender_exclusive: usize,
    /// Measurements a sender runs at once, in all and for one receiving host,
    /// unless the plan raises them (the sender's defaults).
    pub sender_measurements: usize,
    /// See `sender_measurements`.
    pub sender_measurements_per_host: usize,
    /// The most the plan may raise either to (the most a sender may be set to).
    pub sender_limit_max: usize,
    /// The most `max-running` a node may be given.
    pub max_running: usize,
}

/// Shortest and longest interval the planner sets (the overlay's bounds).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest: a day, as the overlay reads a link's interval.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// A link's key: the member measuring, the member measured from, the method, the
/// transport.
pub type LinkKey = (String, String, String, Transport);

/// Whether a link carries its path's age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The path's cheapest available-bandwidth method: run to meet the age.
    Primary,
    /// Any other: runs on what the primaries leave.
    Secondary,
}

/// One link's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkTiming {
    /// Primary or secondary.
    pub role: Role,
    /// Time from the end of one run to the start of the next (before jitter).
    pub interval: Duration,
    /// The run's time limit.
    pub time_limit: Duration,
    /// Probe bytes an hour, after riders and passive cover.
    pub bytes_per_hour: f64,
    /// The longest its newest estimate grows: a run, the longest jittered
    /// interval, and the exclusive turns it may wait behind.
    pub age: Duration,
}

/// One node's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeBudget {
    /// Probe bytes an hour its links send and receive.
    pub probe_bytes_per_hour: f64,
    /// Heartbeat bytes an hour (routing members).
    pub heartbeat_bytes_per_hour: f64,
    /// Poll bytes an hour.
    pub poll_bytes_per_hour: f64,
    /// Exclusive runs into it at once.
    pub max_running: usize,
    /// The most one requester may take of its sender an hour (bytes): the most
    /// any requester's planned links take, doubled for the runs that cost more
    /// than the typical one.
    pub serve_bytes_per_hour: u64,
    /// Measurements its sender serves at once for every receiver together: the
    /// sender's default, or the peak its planned links reach (their mean in flight
    /// and three standard deviations of it, as of many runs that start
    /// independently) where that is more.
    pub serve_measurements: usize,
    /// Measurements its sender serves at once for one receiver: the default, or
    /// the most one receiver's links may run at once where that is more.
    pub serve_measurements_per_requester: usize,
}

impl NodeBudget {
    /// All it spends an hour.
    pub fn total(&self) -> f64 {
        self.probe_bytes_per_hour + self.heartbeat_bytes_per_hour + self.poll_bytes_per_hour
    }
}

/// Where the budget does not meet the description's own goal.
#[derive(Debug, Clone, PartialEq)]
pub enum Shortfall {
    /// A method the overlay does not have.
    Method(String),
    /// The node cannot meet the age within its budget; its primaries are planned at
    /// `affords`.
    Node {
        /// The member.
        node: String,
        /// What meeting the age would take an hour.
        needs: f64,
        /// The age its budget affords.
        affords: Duration,
    },
    /// A link cannot meet the age within the link budget.
    Link {
        /// The link.
        link: LinkKey,
        /// What meeting the age would take an hour.
        needs: f64,
        /// The age the link budget affords.
        affords: Duration,
    },
    /// Heartbeats and polls alone are over the node's budget.
    Overhead {
        /// The member.
        node: String,
        /// What they take an hour.
        needs: f64,
    },
    /// A path's newest estimate cannot be kept younger than the age however
    /// often it runs (a run and the exclusive turns ahead of it are longer).
    Age {
        /// The link.
        link: LinkKey,
        /// The least it can be.
        least: Duration,
    },
    /// A sender's exclusive runs take more than its turns can hold.
    SenderTurns {
        /// The member.
        node: String,
        /// Exclusive run time per hour of its turns.
        load: f64,
    },
    /// A sender's runs would take more of its measurements at once than it runs
    /// (the mean over time: runs that meet are refused busy).
    SenderMeasurements {
        /// The member.
        node: String,
        /// Measurements in flight, on average.
        load: f64,
    },
    /// One receiver's links from one sender may run more measurements at once than
    /// the sender runs for one host (its background links on the path beside one
    /// exclusive).
    PerHost {
        /// The sender.
        sender: String,
        /// The receiver.
        receiver: String,
        /// How many may run at once.
        needs: usize,
    },
    /// More exclusive runs into a node at once than `max-running` may be.
    Running {
        /// The member.
        node: String,
        /// How many it would take.
        needs: usize,
    },
    /// A secondary link does not fit what is left even at the longest interval.
    Secondary {
        /// The link.
        link: LinkKey,
    },
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: f64| b / 1e6;
        let name = |l: &LinkKey| format!("{} from {} by {} over {}", l.0, l.1, l.2, l.3);
        match self {
            Self::Method(m) => write!(f, "method {m:?}: the overlay has no cost for it"),
            Self::Node {
                node,
                needs,
                affords,
            } => write!(
                f,
                "member {node:?}: the age takes {:.1} MB an hour, over node-mb-per-hour; it affords an age of {}s: raise the budget or the age, or measure fewer pairs (a sparse group)",
                mb(*needs),
                affords.as_secs()
            ),
            Self::Link {
                link,
                needs,
                affords,
            } => write!(
                f,
                "link {}: the age takes {:.1} MB an hour, over link-mb-per-hour; it affords {}s",
                name(link),
                mb(*needs),
                affords.as_secs()
            ),
            Self::Overhead { node, needs } => write!(
                f,
                "member {node:?}: heartbeats and polls alone take {:.1} MB an hour, over node-mb-per-hour",
                mb(*needs)
            ),
            Self::Age { link, least } => write!(
                f,
                "link {}: its newest estimate is at least {}s old (a run and the exclusive turns before it), over the age",
                name(link),
                least.as_secs()
            ),
            Self::SenderTurns { node, load } => write!(
                f,
                "member {node:?}: its sender's exclusive runs would take {:.0} % of its turns; give the exclusive methods fewer pairs or a longer age",
                load * 100.0
            ),
            Self::SenderMeasurements { node, load } => write!(
                f,
                "member {node:?}: its sender would have {load:.1} measurements in flight on average, more than a sender may be set to run at once; measure it from fewer members"
            ),
            Self::PerHost {
                sender,
                receiver,
                needs,
            } => write!(
                f,
                "member {receiver:?} may run {needs} measurements from {sender:?} at once, more than a sender may be set to run for one host; give the pair fewer methods or transports"
            ),
            Self::Running { node, needs } => write!(
                f,
                "member {node:?}: {needs} exclusive runs into it at once, more than max-running may be"
            ),
            Self::Secondary { link } => write!(
                f,
                "link {}: nothing is left for it in its ends' budgets even once a day",
                name(link)
            ),
        }
    }
}

/// The plan of every link and node.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetPlan {
    /// Every link the groups give.
    pub links: BTreeMap<LinkKey, LinkTiming>,
    /// Every member.
    pub nodes: BTreeMap<String, NodeBudget>,
    /// The oldest a primary's newest estimate grows as planned: the age it affords.
    pub affords: Duration,
    /// Where it falls short of the description's goal; empty when it meets it.
    pub shortfalls: Vec<Shortfall>,
}

/// A link before its interval is set.
struct Draft {
    cost: MethodCost,
    /// Hourly bytes per run-per-hour: what a run costs after riders and passive cover.
    effective: f64,
    role: Role,
    /// The exclusive turns it may wait behind.
    wait: Duration,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Seconds to the millisecond, up (bytes stay within what was shared), at least
/// [`MIN_INTERVAL`].
fn ceil_ms(s: f64) -> f64 {
    if s.is_finite() {
        ((s * 1000.0).ceil() / 1000.0).max(secs(MIN_INTERVAL))
    } else {
        s
    }
}

impl Draft {
    /// The longest period (end to end) that keeps its age within `age`, if any.
    fn period_for(&self, age: Duration, jitter: f64) -> Option<f64> {
        let interval = (secs(age) - secs(self.cost.time_limit) - secs(self.wait)) / (1.0 + jitter);
        (interval >= secs(MIN_INTERVAL)).then(|| interval.min(secs(MAX_INTERVAL)))
    }

    /// Bytes an hour at `interval` seconds between runs.
    fn hourly(&self, interval: f64) -> f64 {
        self.effective * 3600.0 / (interval + secs(self.cost.time_limit))
    }

    /// The interval (seconds) at which it takes `bytes` an hour.
    fn interval_for(&self, bytes: f64) -> f64 {
        if bytes <= 0.0 {
            return f64::INFINITY;
        }
        self.effective * 3600.0 / bytes - secs(self.cost.time_limit)
    }

    fn age(&self, interval: f64, jitter: f64) -> Duration {
        Duration::from_secs_f64(
            secs(self.cost.time_limit) + interval * (1.0 + jitter) + secs(self.wait),
        )
    }
}

impl Mesh {
    /// The budget's plan of every link and node, when the description has a
    /// `[budget]`.
    pub fn plan_budget(&self, costs: &Costs) -> Option<BudgetPlan> {
        let budget = self.budget.as_ref()?;
        Some(plan(self, budget, costs))
    }
}

fn plan(mesh: &Mesh, budget: &Budget, costs: &Costs) -> BudgetPlan {
    let mut shortfalls = Vec::new();
    let cost_of = |m: &str| -> Option<MethodCost> {
        let mut c = *costs.methods.get(m)?;
        if let Some(o) = budget.methods.get(m) {
            c.bytes_per_run = o.bytes_per_run.unwrap_or(c.bytes_per_run);
            c.time_limit = o.time_limit.unwrap_or(c.time_limit);
        }
        Some(c)
    };
    // Every link once.
    let mut keys: std::collections::BTreeSet<LinkKey> = std::collections::BTreeSet::new();
    for g in &mesh.groups {
        for l in g.links() {
            keys.insert((
                l.to.to_owned(),
                l.from.to_owned(),
                l.method.to_owned(),
                l.transport,
            ));
        }
    }
    let mut drafts: BTreeMap<LinkKey, Draft> = BTreeMap::new();
    for k in &keys {
        let Some(cost) = cost_of(&k.2) else {
            if !shortfalls.contains(&Shortfall::Method(k.2.clone())) {
                shortfalls.push(Shortfall::Method(k.2.clone()));
            }
            continue;
        };
        let ride = if k.3 == Transport::Mgrp {
            budget.ride_share
        } else {
            0.0
        };
        let effective = cost.bytes_per_run as f64 * (1.0 - ride) * (1.0 - budget.passive_share);
        drafts.insert(
            k.clone(),
            Draft {
                cost,
                effective,
                role: Role::Secondary,
                wait: Duration::ZERO,
            },
        );
    }
    // Exclusive turns: at a sender one at a time, so a run may wait behind every
    // other exclusive link it serves; into a node `max-running` at a time.
    let mut from_sender: BTreeMap<String, Duration> = BTreeMap::new();
    let mut into_node: BTreeMap<String, (Duration, usize)> = BTreeMap::new();
    for (k, d) in &drafts {
        if d.cost.exclusive {
            *from_sender.entry(k.1.clone()).or_default() += d.cost.time_limit;
            let e = into_node.entry(k.0.clone()).or_default();
            e.0 += d.cost.time_limit;
            e.1 += 1;
        }
    }
    // max-running: as many as the exclusive links into a node that its senders
    // could run at once, one per distinct sender, bounded.
    let mut senders_into: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, d) in &drafts {
        if d.cost.exclusive {
            let v = senders_into.entry(k.0.as_str()).or_default();
            if !v.contains(&k.1.as_str()) {
                v.push(k.1.as_str());
            }
        }
    }
    let running: BTreeMap<&str, usize> = mesh
        .members
        .keys()
        .map(|n| {
            let want = senders_into.get(n.as_str()).map_or(1, Vec::len).max(1);
            (n.as_str(), want)
        })
        .collect();
    for (n, want) in &running {
        if *want > costs.max_running {
            shortfalls.push(Shortfall::Running {
                node: (*n).to_owned(),
                needs: *want,
            });
        }
    }
    let sender_slots = costs.sender_exclusive.max(1) as u32;
    let keys_now: Vec<LinkKey> = drafts.keys().cloned().collect();
    for k in &keys_now {
        let d = &drafts[k];
        if !d.cost.exclusive {
            continue;
        }
        let own = d.cost.time_limit;
        let at_sender = from_sender[&k.1].saturating_sub(own) / sender_slots;
        let (into, _) = into_node[&k.0];
        let slots = running[k.0.as_str()].min(costs.max_running).max(1) as u32;
        let at_node = into.saturating_sub(own) / slots;
        drafts.get_mut(k).expect("listed").wait = at_sender.max(at_node);
    }
    // The primary of each path: the available-bandwidth link that meets the age
    // for the fewest bytes.
    let mut paths: BTreeMap<(String, String, Transport), Vec<LinkKey>> = BTreeMap::new();
    for k in drafts.keys() {
        paths
            .entry((k.0.clone(), k.1.clone(), k.3))
            .or_default()
            .push(k.clone());
    }
    let mut intervals: BTreeMap<LinkKey, f64> = BTreeMap::new();
    for links in paths.values() {
        let best = links
            .iter()
            .filter(|k| drafts[*k].cost.available_bandwidth)
            .map(|k| {
                let d = &drafts[k];
                let cost = d
                    .period_for(budget.age, costs.jitter)
                    .map_or(f64::INFINITY, |i| d.hourly(i));
                (k, cost)
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
        if let Some((k, _)) = best {
            let d = drafts.get_mut(k).expect("listed");
            d.role = Role::Primary;
            let interval = match d.period_for(budget.age, costs.jitter) {
                // To the millisecond, down: its age stays within the goal.
                Some(i) => ((i * 1000.0).floor() / 1000.0).max(secs(MIN_INTERVAL)),
                None => {
                    shortfalls.push(Shortfall::Age {
                        link: k.clone(),
                        least: d.age(secs(MIN_INTERVAL), costs.jitter),
                    });
                    secs(MIN_INTERVAL)
                }
            };
            intervals.insert(k.clone(), interval);
        }
    }
    // Each node's fixed spending: heartbeats (routing members, each other routing
    // member one hop) and polls (each measured neighbour, both ends).
    let mut heartbeats: BTreeMap<&str, f64> = BTreeMap::new();
    for r in &mesh.routing {
        let hops = mesh.routing.len().saturating_sub(1) as f64;
        // Each pair of routing members pings both ways: a node sends its own pings
        // and echoes, and receives the others'.
        let per_hop = 2.0 * costs.heartbeat_bytes as f64 * 3600.0 / secs(budget.heartbeat_interval);
        heartbeats.insert(r.as_str(), hops * per_hop);
    }
    let mut polls: BTreeMap<&str, f64> = BTreeMap::new();
    for (to, from, _) in paths.keys() {
        *polls.entry(to.as_str()).or_default() += costs.poll_bytes_per_hour as f64;
        *polls.entry(from.as_str()).or_default() += costs.poll_bytes_per_hour as f64;
    }
    let overhead =
        |n: &str| heartbeats.get(n).copied().unwrap_or(0.0) + polls.get(n).copied().unwrap_or(0.0);
    let node_budget = budget.node_bytes_per_hour as f64;
    let link_budget = budget.link_bytes_per_hour as f64;
    // Primaries over a budget are stretched: by the node's factor at each end and
    // the link's own.
    let mut primary_sum: BTreeMap<String, f64> = BTreeMap::new();
    for (k, i) in &intervals {
        let h = drafts[k].hourly(*i);
        *primary_sum.entry(k.0.clone()).or_default() += h;
        *primary_sum.entry(k.1.clone()).or_default() += h;
    }
    let mut factor: BTreeMap<&str, f64> = BTreeMap::new();
    for n in mesh.members.keys() {
        let n = n.as_str();
        let room = node_budget - overhead(n);
        let need = primary_sum.get(n).copied().unwrap_or(0.0);
        if room <= 0.0 {
            shortfalls.push(Shortfall::Overhead {
                node: n.to_owned(),
                needs: overhead(n),
            });
            factor.insert(n, f64::INFINITY);
        } else if need > room {
            factor.insert(n, need / room);
        }
    }
    let mut node_short: BTreeMap<String, (f64, Duration)> = BTreeMap::new();
    for (k, i) in &mut intervals {
        let d = &drafts[k];
        let h = d.hourly(*i);
        let f_link = if h > link_budget {
            h / link_budget
        } else {
            1.0
        };
        let f_to = factor.get(k.0.as_str()).copied().unwrap_or(1.0);
        let f_from = factor.get(k.1.as_str()).copied().unwrap_or(1.0);
        let f = f_link.max(f_to).max(f_from);
        if f > 1.0 {
            let stretched = if f.is_finite() {
                ceil_ms(d.interval_for(h / f)).min(secs(MAX_INTERVAL))
            } else {
                secs(MAX_INTERVAL)
            };
            let affords = d.age(stretched, costs.jitter);
            if f_link >= f_to.max(f_from) {
                shortfalls.push(Shortfall::Link {
                    link: k.clone(),
                    needs: h,
                    affords,
                });
            } else {
                for (n, fn_) in [(k.0.as_str(), f_to), (k.1.as_str(), f_from)] {
                    if fn_ >= f && fn_.is_finite() {
                        let e = node_short
                            .entry(n.to_owned())
                            .or_insert((primary_sum[n], affords));
                        e.1 = e.1.max(affords);
                    }
                }
            }
            *i = stretched;
        }
    }
    for (n, (needs, affords)) in node_short {
        shortfalls.push(Shortfall::Node {
            node: n,
            needs,
            affords,
        });
    }
    // What the primaries leave, shared among each end's secondaries.
    let mut spent: BTreeMap<String, f64> = BTreeMap::new();
    let mut on_path: BTreeMap<(String, String, Transport), f64> = BTreeMap::new();
    for (k, i) in &intervals {
        let h = drafts[k].hourly(*i);
        *spent.entry(k.0.clone()).or_default() += h;
        *spent.entry(k.1.clone()).or_default() += h;
        *on_path.entry((k.0.clone(), k.1.clone(), k.3)).or_default() += h;
    }
    let mut secondaries: BTreeMap<String, usize> = BTreeMap::new();
    for (k, d) in &drafts {
        if d.role == Role::Secondary {
            *secondaries.entry(k.0.clone()).or_default() += 1;
            *secondaries.entry(k.1.clone()).or_default() += 1;
        }
    }
    let mut per_path_secondaries: BTreeMap<(String, String, Transport), usize> = BTreeMap::new();
    for (k, d) in &drafts {
        if d.role == Role::Secondary {
            *per_path_secondaries
                .entry((k.0.clone(), k.1.clone(), k.3))
                .or_default() += 1;
        }
    }
    let left =
        |n: &str| (node_budget - overhead(n) - spent.get(n).copied().unwrap_or(0.0)).max(0.0);
    for (k, d) in &drafts {
        if d.role != Role::Secondary {
            continue;
        }
        let path = (k.0.clone(), k.1.clone(), k.3);
        let share = [
            left(k.0.as_str()) / secondaries[&k.0] as f64,
            left(k.1.as_str()) / secondaries[&k.1] as f64,
            (link_budget - on_path.get(&path).copied().unwrap_or(0.0)).max(0.0)
                / per_path_secondaries[&path] as f64,
        ]
        .into_iter()
        .fold(f64::INFINITY, f64::min);
        // Never more often than its age needs (it is no primary, but as fresh as
        // the goal is enough) nor than once a second.
        let least = d
            .period_for(budget.age, costs.jitter)
            .unwrap_or(secs(MIN_INTERVAL));
        let interval = ceil_ms(d.interval_for(share)).max(least);
        let interval = if interval > secs(MAX_INTERVAL) {
            // Counted at the longest interval, over the budget, and said.
            shortfalls.push(Shortfall::Secondary { link: k.clone() });
            secs(MAX_INTERVAL)
        } else {
            interval
        };
        intervals.insert(k.clone(), interval);
    }
    // The sender's turns.
    let mut turns: BTreeMap<&str, f64> = BTreeMap::new();
    for (k, i) in &intervals {
        let d = &drafts[k];
        if d.cost.exclusive {
            let period = i + secs(d.cost.time_limit);
            *turns.entry(k.1.as_str()).or_default() +=
                secs(d.cost.time_limit) / period / costs.sender_exclusive.max(1) as f64;
        }
    }
    for (n, load) in &turns {
        if *load > 1.0 {
            shortfalls.push(Shortfall::SenderTurns {
                node: (*n).to_owned(),
                load: *load,
            });
        }
    }
    // The sender's measurements: in flight on average, and at most at once for one
    // receiver (its background links on the path, and one exclusive: links on one
    // path never run two exclusive at once).
    let mut in_flight: BTreeMap<&str, f64> = BTreeMap::new();
    let mut at_once: BTreeMap<(&str, &str), (usize, bool)> = BTreeMap::new();
    for (k, i) in &intervals {
        let d = &drafts[k];
        *in_flight.entry(k.1.as_str()).or_default() +=
            secs(d.cost.time_limit) / (i + secs(d.cost.time_limit));
        let e = at_once.entry((k.1.as_str(), k.0.as_str())).or_default();
        if d.cost.exclusive {
            e.1 = true;
        } else {
            e.0 += 1;
        }
    }
    // What each sender is set to serve: its defaults, raised to what its links
    // need, up to the most a sender may be set to.
    let mut serve_at_once: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (n, load) in &in_flight {
        let peak = (load + 3.0 * load.sqrt()).ceil() as usize;
        if peak > costs.sender_limit_max {
            shortfalls.push(Shortfall::SenderMeasurements {
                node: (*n).to_owned(),
                load: *load,
            });
        }
        serve_at_once.entry(n).or_default().0 = peak.min(costs.sender_limit_max);
    }
    for ((sender, receiver), (background, exclusive)) in &at_once {
        let needs = background + usize::from(*exclusive);
        if needs > costs.sender_limit_max {
            shortfalls.push(Shortfall::PerHost {
                sender: (*sender).to_owned(),
                receiver: (*receiver).to_owned(),
                needs,
            });
        }
        let e = &mut serve_at_once.entry(sender).or_default().1;
        *e = (*e).max(needs.min(costs.sender_limit_max));
    }
    // The links and nodes as planned.
    let mut links = BTreeMap::new();
    let mut nodes: BTreeMap<String, NodeBudget> = mesh
        .members
        .keys()
        .map(|n| {
            (
                n.clone(),
                NodeBudget {
                    probe_bytes_per_hour: 0.0,
                    heartbeat_bytes_per_hour: heartbeats.get(n.as_str()).copied().unwrap_or(0.0),
                    poll_bytes_per_hour: polls.get(n.as_str()).copied().unwrap_or(0.0),
                    max_running: running[n.as_str()].min(costs.max_running),
                    serve_bytes_per_hour: 0,
                    serve_measurements: serve_at_once
                        .get(n.as_str())
                        .map_or(0, |a| a.0)
                        .max(costs.sender_measurements),
                    serve_measurements_per_requester: serve_at_once
                        .get(n.as_str())
                        .map_or(0, |a| a.1)
                        .max(costs.sender_measurements_per_host),
                },
            )
        })
        .collect();
    let mut per_requester: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    let mut affords = Duration::ZERO;
    for (k, i) in &intervals {
        let d = &drafts[k];
        let hourly = d.hourly(*i);
        let t = LinkTiming {
            role: d.role,
            interval: Duration::from_secs_f64(*i),
            time_limit: d.cost.time_limit,
            bytes_per_hour: hourly,
            age: d.age(*i, costs.jitter),
        };
        if t.role == Role::Primary {
            affords = affords.max(t.age);
        }
        nodes.get_mut(&k.0).expect("member").probe_bytes_per_hour += hourly;
        nodes.get_mut(&k.1).expect("member").probe_bytes_per_hour += hourly;
        // What the requester asks of the sender, counted before riders and
        // passive cover take their share: the sender counts every probe byte.
        *per_requester
            .entry((k.1.as_str(), k.0.as_str()))
            .or_default() += d.cost.bytes_per_run as f64 * 3600.0 / (i + secs(d.cost.time_limit));
        links.insert(k.clone(), t);
    }
    // A node or path still over its budget (its links at the longest interval)
    // is said, if nothing said it yet.
    for (n, nb) in &nodes {
        let said = shortfalls.iter().any(|s| match s {
            Shortfall::Node { node, .. } | Shortfall::Overhead { node, .. } => node == n,
            Shortfall::Secondary { link } => &link.0 == n || &link.1 == n,
            _ => false,
        });
        if nb.total() > node_budget && !said {
            shortfalls.push(Shortfall::Node {
                node: n.clone(),
                needs: primary_sum.get(n).copied().unwrap_or(0.0),
                affords: links
                    .iter()
                    .filter(|(k, t)| t.role == Role::Primary && (&k.0 == n || &k.1 == n))
                    .map(|(_, t)| t.age)
                    .max()
                    .unwrap_or_default(),
            });
        }
    }
    for ((sender, _), b) in per_requester {
        let n = nodes.get_mut(sender).expect("member");
        n.serve_bytes_per_hour = n.serve_bytes_per_hour.max((2.0 * b).ceil() as u64);
    }
    BudgetPlan {
        links,
        nodes,
        affords,
        shortfalls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Costs like the overlay's: two light available-bandwidth methods, one
    /// exclusive, one light that gives loss only.
    fn costs() -> Costs {
        let c = |mb: f64, s: u64, exclusive, available_bandwidth| MethodCost {
            bytes_per_run: (mb * 1e6) as u64,
            time_limit: Duration::from_secs(s),
            exclusive,
            available_bandwidth,
        };
        Costs {
            methods: [
                ("chirp", c(0.63, 20, false, true)),
                ("load", c(3.0, 60, true, true)),
                ("loss", c(3.5, 20, false, false)),
                ("pairs", c(0.23, 30, true, true)),
            ]
            .into_iter()
            .map(|(n, c)| (n.to_owned(), c))
            .collect(),
            jitter: 0.1,
            poll_bytes_per_hour: 540_000,
            heartbeat_bytes: 118,
            sender_exclusive: 1,
            sender_measurements: 32,
            sender_measurements_per_host: 4,
            sender_limit_max: 4096,
            max_running: 16,
        }
    }

    fn members(n: usize, routing: usize) -> String {
        let mut t = String::new();
        for i in 0..n {
            t.push_str(&format!(
                "[[member]]\nname = \"m{i}\"\naddress = \"10.1.{}.{}\"\n",
                i / 200,
                i % 200 + 1
            ));
            if i < routing {
                t.push_str(&format!(
                    "public-key = \"{}\"\nnetworks = [\"10.200.{i}.0/24\"]\n",
                    mgrp_core::pair::PrivateKey::from_bytes([i as u8 + 1; 32]).public()
                ));
            } else if routing > 0 {
                t.push_str(&format!(
                    "public-key = \"{}\"\n",
                    mgrp_core::pair::PrivateKey::from_bytes([i as u8 + 1; 32]).public()
                ));
            }
        }
        if routing > 0 {
            let names: Vec<String> = (0..routing).map(|i| format!("\"m{i}\"")).collect();
            t.push_str(&format!("[routing]\nmembers = [{}]\n", names.join(", ")));
        }
        t
    }

    fn mesh(text: &str) -> Mesh {
        Mesh::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn the_cheapest_method_carries_the_age_and_the_others_share_what_is_left() {
        let text = format!(
            "{}[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"m0\", \"m1\", \"m2\"]\nmethods = [\"chirp\", \"load\", \"loss\"]\n\
             [budget]\nnode-mb-per-hour = 200\nage = \"10m\"\n",
            members(3, 0)
        );
        let plan = mesh(&text).plan_budget(&costs()).unwrap();
        assert!(plan.shortfalls.is_empty(), "{:?}", plan.shortfalls);
        let chirp = &plan.links[&("m0".into(), "m1".into(), "chirp".into(), Transport::Mgrp)];
        assert_eq!(chirp.role, Role::Primary);
        // 600 s = 20 s of run + interval × 1.1: the interval 527.27 s.
        assert_eq!(chirp.interval, Duration::from_millis(527_272));
        assert!(chirp.age <= Duration::from_secs(600), "{:?}", chirp.age);
        for m in ["load", "loss"] {
            let l = &plan.links[&("m0".into(), "m1".into(), m.into(), Transport::Mgrp)];
            assert_eq!(l.role, Role::Secondary, "{m}");
        }
        for n in plan.nodes.values() {
            assert!(n.total() <= 200e6 * (1.0 + 1e-9), "{n:?}");
        }
        // Pathload is exclusive into a node from two senders: max-running 2.
        assert_eq!(plan.nodes["m0"].max_running, 2);
        assert!(plan.affords <= Duration::from_secs(600));
        // A budget too small is planned within it, at the age it affords, and said.
        let small = text.replace("node-mb-per-hour = 200", "node-mb-per-hour = 5");
        let plan = mesh(&small).plan_budget(&costs()).unwrap();
        assert!(
            plan.shortfalls
                .iter()
                .any(|s| matches!(s, Shortfall::Node { .. })),
            "{:?}",
            plan.shortfalls
        );
        assert!(plan.affords > Duration::from_secs(600));
        for n in plan.nodes.values() {
            assert!(
                n.total() <= 5e6 * (1.0 + 1e-9)
                    || plan
                        .shortfalls
                        .iter()
                        .any(|s| matches!(s, Shortfall::Secondary { .. })),
                "{n:?}"
            );
        }
    }

    #[test]
    fn a_sender_asked_for_more_at_once_than_it_runs_is_raised_or_said() {
        // Three methods over two transports: four light and one exclusive at once
        // from one sender, more than its default 4 for one host: raised to 5.
        let text = format!(
            "{}[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"m0\", \"m1\"]\nmethods = [\"chirp\", \"loss\", \"load\"]\ntransports = [\"mgrp\", \"udp\"]\n\
             [budget]\nnode-mb-per-hour = 1000\nage = \"10m\"\n",
            members(2, 0)
        );
        let plan = mesh(&text).plan_budget(&costs()).unwrap();
        assert_eq!(plan.shortfalls, []);
        assert_eq!(plan.nodes["m0"].serve_measurements_per_requester, 5);
        assert_eq!(plan.nodes["m0"].serve_measurements, 32);
        // One transport: chirp, loss and one exclusive, 3 at once: the default.
        let one = text.replace("transports = [\"mgrp\", \"udp\"]\n", "");
        let plan = mesh(&one).plan_budget(&costs()).unwrap();
        assert_eq!(plan.nodes["m0"].serve_measurements_per_requester, 4);
        // A sender that may not be set to 5 for one host: said, and set to its most.
        let capped = Costs {
            sender_limit_max: 4,
            ..costs()
        };
        let plan = mesh(&text).plan_budget(&capped).unwrap();
        assert!(
            plan.shortfalls.contains(&Shortfall::PerHost {
                sender: "m0".into(),
                receiver: "m1".into(),
                needs: 5
            }),
            "{:?}",
            plan.shortfalls
        );
        assert_eq!(plan.nodes["m0"].serve_measurements_per_requester, 4);
    }

    /// A sender measured by many raises its measurements at once to the peak its
    /// links reach: each of 60 members measures m0 with a light method that runs a
    /// third of the time, 21 in flight on average, 36 at the peak planned.
    #[test]
    fn a_sender_measured_by_many_serves_their_peak_at_once() {
        let others: Vec<String> = (1..61).map(|i| format!("\"m{i}\"")).collect();
        let text = format!(
            "{}[[group]]\nname = \"star\"\nkind = \"star\"\nhub = \"m0\"\nmembers = [{}]\nmethods = [\"chirp\"]\n\
             [budget]\nnode-mb-per-hour = 100000\nlink-mb-per-hour = 1000\nage = \"1m\"\n",
            members(61, 0),
            others.join(", ")
        );
        let plan = mesh(&text).plan_budget(&costs()).unwrap();
        let n = &plan.nodes["m0"];
        // 60 links of a 20-s limit every 36.363 s: 21.3 in flight, 21.3 + 3 × 4.6.
        assert_eq!(n.serve_measurements, 36, "{n:?}");
        assert_eq!(n.serve_measurements_per_requester, 4, "{n:?}");
    }

    #[test]
    fn a_description_with_a_budget_gives_no_interval_and_its_keys_are_checked() {
        let base = format!(
            "{}[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"m0\", \"m1\"]\nmethods = [\"chirp\"]\n",
            members(2, 0)
        );
        let err = |extra: &str| {
            Mesh::parse(&format!("{base}{extra}"))
                .unwrap_err()
                .to_string()
        };
        assert!(
            Mesh::parse(&format!(
                "{base}interval = \"1m\"\n[budget]\nnode-mb-per-hour = 1\nage = \"1m\"\n"
            ))
            .unwrap_err()
            .to_string()
            .contains("[budget] plans every link's")
        );
        assert!(err("[budget]\nnode-mb-per-hour = 0\nage = \"1m\"\n").contains("above 0"));
        assert!(err("[budget]\nnode-mb-per-hour = 1\nage = \"soon\"\n").contains("budget.age"));
        assert!(
            err("[budget]\nnode-mb-per-hour = 1\nage = \"1m\"\nride-share = 1.5\n")
                .contains("0 to 0.95")
        );
        assert!(
            err("[budget]\nnode-mb-per-hour = 1\nage = \"1m\"\nfast = true\n")
                .contains("unknown field")
        );
        let m = Mesh::parse(&format!(
            "{base}[budget]\nnode-mb-per-hour = 50\nlink-mb-per-hour = 2\nage = \"5m\"\n[budget.method.chirp]\nmb-per-run = 0.1\ntime-limit = \"10s\"\n"
        ))
        .unwrap();
        let b = m.budget.as_ref().unwrap();
        assert_eq!(
            (b.node_bytes_per_hour, b.link_bytes_per_hour),
            (50_000_000, 2_000_000)
        );
        assert_eq!(b.methods["chirp"].bytes_per_run, Some(100_000));
        let plan = m.plan_budget(&costs()).unwrap();
        let l = &plan.links[&("m0".into(), "m1".into(), "chirp".into(), Transport::Mgrp)];
        assert_eq!(l.time_limit, Duration::from_secs(10));
        // A method the overlay has no cost for is said.
        let unknown = Mesh::parse(
            &format!("{base}[budget]\nnode-mb-per-hour = 50\nage = \"5m\"\n")
                .replace("[\"chirp\"]", "[\"other\"]"),
        )
        .unwrap();
        assert_eq!(
            unknown.plan_budget(&costs()).unwrap().shortfalls,
            [Shortfall::Method("other".into())]
        );
    }

    fn arb_mesh() -> impl Strategy<Value = String> {
        let kinds = prop::sample::select(vec!["full-mesh", "ring", "spread", "star"]);
        let methods = prop::sample::subsequence(vec!["chirp", "load", "loss", "pairs"], 1..=3);
        (
            3usize..14,
            0usize..4,
            prop::collection::vec((kinds, methods, any::<bool>()), 1..3),
            0.05f64..400.0,
            prop::option::of(0.05f64..50.0),
            30u64..3600,
            0.0f64..0.9,
            0.0f64..0.9,
        )
            .prop_map(|(n, routing, groups, node_mb, link_mb, age, ride, passive)| {
                let routing = if routing >= 2 { routing } else { 0 };
                let mut t = members(n, routing);
                let all: Vec<String> = (0..n).map(|i| format!("\"m{i}\"")).collect();
                for (gi, (kind, methods, udp)) in groups.iter().enumerate() {
                    let methods: Vec<String> = methods.iter().map(|m| format!("\"{m}\"")).collect();
                    t.push_str(&format!("[[group]]\nname = \"g{gi}\"\nkind = \"{kind}\"\nmethods = [{}]\n", methods.join(", ")));
                    if *udp {
                        t.push_str("transports = [\"mgrp\", \"udp\"]\n");
                    }
                    match *kind {
                        "star" => t.push_str(&format!("hub = \"m0\"\nmembers = [{}]\n", all[1..].join(", "))),
                        "ring" => t.push_str(&format!("members = [{}]\nk = {}\n", all.join(", "), 1 + gi % (n - 1))),
                        "spread" => t.push_str(&format!("members = [{}]\nk = {}\n", all.join(", "), 1 + gi % ((n - 1) / 2))),
                        _ => t.push_str(&format!("members = [{}]\n", all.join(", "))),
                    }
                }
                t.push_str(&format!("[budget]\nnode-mb-per-hour = {node_mb}\nage = \"{age}s\"\nride-share = {ride}\npassive-share = {passive}\n"));
                if let Some(l) = link_mb {
                    t.push_str(&format!("link-mb-per-hour = {l}\n"));
                }
                t
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn never_over_budget_and_never_short_unsaid(text in arb_mesh()) {
            let m = mesh(&text);
            let b = m.budget.clone().unwrap();
            let plan = m.plan_budget(&costs()).unwrap();
            let said = |f: &dyn Fn(&Shortfall) -> bool| plan.shortfalls.iter().any(f);
            let eps = 1.0 + 1e-9;
            // Over a budget only where even the longest interval is too often, and
            // said.
            let longest = |n: &str| plan.links.iter().any(|(k, l)| (k.0 == n || k.1 == n) && l.interval == MAX_INTERVAL);
            for (n, nb) in &plan.nodes {
                let over = nb.total() > b.node_bytes_per_hour as f64 * eps;
                prop_assert!(
                    !over || said(&|s| matches!(s, Shortfall::Overhead { node, .. } if node == n)
                        || (longest(n) && matches!(s, Shortfall::Node { node, .. } | Shortfall::Secondary { link: (node, _, _, _) | (_, node, _, _) } if node == n))),
                    "{n} spends {} of {}: {:?}", nb.total(), b.node_bytes_per_hour, plan.shortfalls
                );
            }
            // Per path, the links' bytes within the link budget unless said.
            let mut per_path: BTreeMap<(String, String, Transport), f64> = BTreeMap::new();
            for (k, l) in &plan.links {
                *per_path.entry((k.0.clone(), k.1.clone(), k.3)).or_default() += l.bytes_per_hour;
            }
            for (p, bytes) in &per_path {
                prop_assert!(
                    *bytes <= b.link_bytes_per_hour as f64 * eps
                        || said(&|s| matches!(s, Shortfall::Secondary { link } if link.0 == p.0 && link.1 == p.1)
                            || matches!(s, Shortfall::Overhead { .. })
                            || matches!(s, Shortfall::Link { link, .. } if link.0 == p.0 && link.1 == p.1 && plan.links[link].interval == MAX_INTERVAL)
                            || matches!(s, Shortfall::Node { node, .. } if (node == &p.0 || node == &p.1) && longest(node))),
                    "{p:?} spends {bytes}: {:?}", plan.shortfalls
                );
            }
            // One primary per path, and a primary older than the age is said.
            let mut primaries: BTreeMap<(String, String, Transport), usize> = BTreeMap::new();
            for (k, l) in &plan.links {
                if l.role == Role::Primary {
                    *primaries.entry((k.0.clone(), k.1.clone(), k.3)).or_default() += 1;
                    prop_assert!(l.age <= b.age || !plan.shortfalls.is_empty(), "{k:?} at {:?}", l.age);
                    prop_assert!(l.age <= plan.affords);
                }
                prop_assert!(l.interval >= MIN_INTERVAL && l.interval <= MAX_INTERVAL);
            }
            prop_assert!(primaries.values().all(|&c| c == 1));
            if plan.shortfalls.is_empty() {
                prop_assert!(plan.affords <= b.age);
            }
            // The plan is a function of the description.
            prop_assert_eq!(&plan, &m.plan_budget(&costs()).unwrap());
        }
    }
}
