//! `/metrics`: the node's links for Prometheus, in base units (bytes, seconds), drawn
//! fresh from the node's state at each scrape, in the text format or OpenMetrics as the
//! scraper asks. As mgrpd's, the families are tables: `LINK_FAMILIES`, each with
//! what it reads of a link, and `SERVE_FAMILIES`, what the node's sender counts per
//! transport; beside them the node's start, build and links (`_info`), and route
//! control's families.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::state::shared::{Served, Shared};
use mgrp_views::estimate::{Estimate, Loss, RunOutcome};
use mgrp_views::link::{LinkState, LinkView};
use mgrp_views::passive::PassiveTiming;
use pathload_rs::tool::Refusal;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    node: String,
    destination: String,
    path: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SwitchLabels {
    node: String,
    destination: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DestinationLabels {
    node: String,
    destination: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    node: String,
    /// The member at the hop's other end (`neighbour`, as every series names the
    /// other end; `member` is the target label Prometheus' mesh targets give the
    /// node scraped).
    neighbour: String,
}

type GaugeF = Gauge<f64, AtomicU64>;

/// Route control's metrics: each destination's candidate paths with their scores,
/// the chosen one and its flows, switches by reason, and each member's heartbeats.
fn register_routes(r: &mut Registry, node: &str, c: &mgrp_route::control::Control) {
    let Some(v) = c.view() else { return };
    let now = mgrp_rt::clock::unix_now();
    let gauge = |r: &mut Registry, name: &str, help: &str| {
        let f = Family::<PathLabels, GaugeF>::default();
        r.register(name, help, f.clone());
        f
    };
    let score = gauge(
        r,
        "mgrp_overlay_route_path_score_bytes_per_second",
        "What the throughput model gives a TCP flow on the candidate path (absent while nothing is known of it)",
    );
    let alive = gauge(
        r,
        "mgrp_overlay_route_path_up",
        "1 while every hop of the candidate path answers heartbeats, else 0",
    );
    let chosen = gauge(
        r,
        "mgrp_overlay_route_path_chosen",
        "1 for the path new flows to the destination take, else 0",
    );
    let flows = gauge(
        r,
        "mgrp_overlay_route_path_flows",
        "Connections on the path (conntrack marks)",
    );
    let switches = Family::<SwitchLabels, Counter>::default();
    r.register(
        "mgrp_overlay_route_switches",
        "Changes of the destination's path by reason: first, better (the bandwidth-ratio rule), failed, all_down, recovered, manual",
        switches.clone(),
    );
    let since = Family::<DestinationLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_route_last_switch_timestamp_seconds",
        "Unix time of the destination's last change of path",
        since.clone(),
    );
    let up = Family::<MemberLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_member_up",
        "1 while the member answers heartbeats over the hop from this node, else 0",
        up.clone(),
    );
    let rtt = Family::<MemberLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_member_rtt_seconds",
        "Heartbeats' round trip to the member",
        rtt.clone(),
    );
    let loss = Family::<MemberLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_member_loss_ratio",
        "Forward loss of heartbeats to the member over the loss window, 0 to 1",
        loss.clone(),
    );
    for d in &v.destinations {
        for p in &d.paths {
            let l = PathLabels {
                node: node.to_string(),
                destination: d.prefix.clone(),
                path: p.name.clone(),
            };
            if let Some(b) = p.score.bps {
                score.get_or_create(&l).set(b / 8.0);
            }
            alive
                .get_or_create(&l)
                .set(if p.score.alive { 1.0 } else { 0.0 });
            chosen
                .get_or_create(&l)
                .set(if p.chosen { 1.0 } else { 0.0 });
            if let Some(n) = p.flows {
                flows.get_or_create(&l).set(n as f64);
            }
        }
        if let Some(t) = d.since_switch_s {
            since
                .get_or_create(&DestinationLabels {
                    node: node.to_string(),
                    destination: d.prefix.clone(),
                })
                .set(now - t);
        }
    }
    for ((destination, reason), n) in c.switch_counts() {
        switches
            .get_or_create(&SwitchLabels {
                node: node.to_string(),
                destination,
                reason,
            })
            .inc_by(n);
    }
    for m in &v.members {
        let Some(h) = &m.heartbeat else { continue };
        let l = MemberLabels {
            node: node.to_string(),
            neighbour: m.name.clone(),
        };
        up.get_or_create(&l).set(if h.alive { 1.0 } else { 0.0 });
        if let Some(x) = h.rtt_s {
            rtt.get_or_create(&l).set(x);
        }
        if let Some(x) = h.loss {
            loss.get_or_create(&l).set(x);
        }
    }
}

/// Whether a family counts up or is a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// A series' labels, in order: the node's (and the link's: `link`, `transport`,
/// `method`), then the family's own.
type Labels = Vec<(&'static str, String)>;

/// What a family reads: each series' value of the family's own label (`""` for a
/// family without one) and its value, in base units.
type Values = Vec<(&'static str, f64)>;

/// A link as the per-link families read it: its view, and how long its latest run
/// took.
struct LinkRead<'a> {
    v: &'a LinkView,
    last_duration_s: Option<f64>,
}

/// A family every link has a series in (or none, when the link has nothing to say).
struct LinkFamily {
    /// Its name, without `_total` for a counter.
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// Its own label beside the link's, if it has one.
    label: Option<&'static str>,
    read: fn(&LinkRead<'_>) -> Values,
}

/// A value without a label of the family's own, if there is one.
fn one(x: Option<f64>) -> Values {
    x.map(|x| ("", x)).into_iter().collect()
}

/// Bit/s as bytes a second.
fn bytes(bps: f64) -> f64 {
    bps / 8.0
}

/// The latest estimate's range by `bound`, in bytes a second: `low` and `high`.
fn bounds(e: Option<&Estimate>, low_high: fn(&Estimate) -> (Option<f64>, Option<f64>)) -> Values {
    let Some(e) = e else { return Vec::new() };
    let (low, high) = low_high(e);
    [("low", low), ("high", high)]
        .into_iter()
        .filter_map(|(b, x)| Some((b, bytes(x?))))
        .collect()
}

/// The latest estimate's loss-episode figures (badabing links: no shape, a loss).
fn loss<'a>(l: &LinkRead<'a>) -> Option<&'a Loss> {
    l.v.latest
        .as_ref()
        .filter(|e| e.shape.is_none())
        .and_then(|e| e.loss.as_ref())
}

/// The link's passive estimates by source, each with when it was made.
fn passive(l: &LinkRead<'_>) -> Vec<(&'static str, f64, f64)> {
    let Some(p) = &l.v.passive else {
        return Vec::new();
    };
    let tcp = p.last.as_ref().and_then(|t| Some((t.bps?, t.at)));
    let timing =
        |f: fn(&PassiveTiming) -> Option<f64>| p.timing.as_ref().and_then(|t| Some((f(t)?, t.at)));
    [
        (crate::derive::passive::PASSIVE_TCP, tcp),
        (
            crate::derive::timing::PASSIVE_DISPERSION,
            timing(|t| t.dispersion_bps),
        ),
        (
            crate::derive::timing::PASSIVE_TREND,
            timing(|t| t.trend_bps),
        ),
    ]
    .into_iter()
    .filter_map(|(source, x)| x.map(|(bps, at)| (source, bps, at)))
    .collect()
}

/// Every per-link family, in the order served.
const LINK_FAMILIES: &[LinkFamily] = &[
    LinkFamily {
        name: "mgrp_overlay_available_bandwidth_bytes_per_second",
        kind: Kind::Gauge,
        help: "Latest answer for the link's available bandwidth, less the application traffic that rode in the probes: bound low and high of a range, or low alone for a lower bound",
        label: Some("bound"),
        read: |l| bounds(l.v.latest.as_ref(), |e| (e.low_bps, e.high_bps)),
    },
    LinkFamily {
        name: "mgrp_overlay_measured_bandwidth_bytes_per_second",
        kind: Kind::Gauge,
        help: "Latest answer as the probes measured it, riders included (bound low and high, or low alone for a lower bound)",
        label: Some("bound"),
        read: |l| {
            bounds(l.v.latest.as_ref(), |e| {
                (e.unadjusted_low_bps, e.unadjusted_high_bps)
            })
        },
    },
    LinkFamily {
        name: "mgrp_overlay_estimate_lower_bound",
        kind: Kind::Gauge,
        help: "1 when the latest answer is a lower bound (the available bandwidth is above the highest rate the neighbour sends), 0 for a range",
        label: None,
        read: |l| {
            one(l
                .v
                .latest
                .as_ref()
                .filter(|e| e.shape.is_none() && e.loss.is_none())
                .map(|e| if e.lower_bound { 1.0 } else { 0.0 }))
        },
    },
    LinkFamily {
        name: "mgrp_overlay_estimate_timestamp_seconds",
        kind: Kind::Gauge,
        help: "Unix time the run of the latest answer ended (absent while the link has none)",
        label: None,
        read: |l| one(l.v.latest.as_ref().map(|e| e.ended_at)),
    },
    LinkFamily {
        name: "mgrp_overlay_last_run_duration_seconds",
        kind: Kind::Gauge,
        help: "How long the link's latest run took, whatever its outcome",
        label: None,
        read: |l| one(l.last_duration_s),
    },
    LinkFamily {
        name: "mgrp_overlay_runs",
        kind: Kind::Counter,
        help: "Runs of the link by outcome (estimate, lower_bound, limit, rate_unreachable, cross_traffic, sender_failed, busy, peer_down, error)",
        label: Some("outcome"),
        read: |l| {
            RunOutcome::ALL
                .iter()
                .map(|&o| (o.name(), l.v.runs.get(o) as f64))
                .collect()
        },
    },
    LinkFamily {
        name: "mgrp_overlay_probe_bytes",
        kind: Kind::Counter,
        help: "IP bytes of every probe the link's runs sent",
        label: None,
        read: |l| one(Some(l.v.probe_bytes as f64)),
    },
    LinkFamily {
        name: "mgrp_overlay_riding_probe_bytes",
        kind: Kind::Counter,
        help: "IP bytes of the link's probes that carried application traffic",
        label: None,
        read: |l| one(Some(l.v.riding_probe_bytes as f64)),
    },
    LinkFamily {
        name: "mgrp_overlay_loss_episode_frequency_ratio",
        kind: Kind::Gauge,
        help: "Latest share of time the link was in a loss episode (badabing), 0 to 1",
        label: None,
        read: |l| one(loss(l).map(|x| x.episode_frequency)),
    },
    LinkFamily {
        name: "mgrp_overlay_loss_episode_duration_seconds",
        kind: Kind::Gauge,
        help: "Latest mean duration of the link's loss episodes (badabing; absent when none began or ended)",
        label: None,
        read: |l| one(loss(l).and_then(|x| x.episode_duration_s)),
    },
    LinkFamily {
        name: "mgrp_overlay_loss_ratio",
        kind: Kind::Gauge,
        help: "Latest share of the link's probe packets lost (badabing), 0 to 1",
        label: None,
        read: |l| one(loss(l).map(|x| x.loss_rate)),
    },
    LinkFamily {
        name: "mgrp_overlay_link_up",
        kind: Kind::Gauge,
        help: "0 while the link backs off from a neighbour that is down, else 1",
        label: None,
        read: |l| {
            let down = l.v.peer_down && l.v.state == LinkState::BackingOff;
            one(Some(if down { 0.0 } else { 1.0 }))
        },
    },
    LinkFamily {
        name: "mgrp_overlay_btc_bytes_per_second",
        kind: Kind::Gauge,
        help: "What a bulk TCP transfer from the link's neighbour gets, by each predictor the measurements allow: kernel (a running network-limited flow's delivery rate), scaled-abw (available bandwidth scaled by the squeezed-pair class), mathis (Reno-like bound from loss and round trip); the middle of its range",
        label: Some("predictor"),
        read: |l| {
            l.v.prediction
                .values
                .iter()
                .map(|x| (x.method.name(), bytes(x.bps)))
                .collect()
        },
    },
    LinkFamily {
        name: "mgrp_overlay_btc_prediction_bytes_per_second",
        kind: Kind::Gauge,
        help: "The transfer-rate prediction to use for the link's neighbour, labelled with the predictor it comes from",
        label: Some("predictor"),
        read: |l| {
            l.v.prediction
                .prediction
                .iter()
                .map(|p| (p.method.name(), bytes(p.bps)))
                .collect()
        },
    },
    LinkFamily {
        name: "mgrp_overlay_btc_history_weight",
        kind: Kind::Gauge,
        help: "The weight, 0 to 1, an earlier TCP flow from the link's neighbour has in the transfer-rate prediction (0: too old, conditions changed, or a flow runs now); absent when there is no earlier flow",
        label: None,
        read: |l| {
            one(l
                .v
                .prediction
                .prediction
                .as_ref()
                .and_then(|p| p.history_weight))
        },
    },
    LinkFamily {
        name: "mgrp_overlay_path_capacity_bytes_per_second",
        kind: Kind::Gauge,
        help: "The narrow link's capacity on the path from the link's neighbour, from btc-rs's packet bunches",
        label: None,
        read: |l| {
            one(l
                .v
                .latest
                .as_ref()
                .and_then(|e| e.shape.as_ref())
                .map(|s| bytes(s.capacity_bps)))
        },
    },
    LinkFamily {
        name: "mgrp_overlay_squeeze_score",
        kind: Kind::Gauge,
        help: "btc-rs's squeezed-pair score: above 0, queues form at the narrow link; below 0, at a faster link; 0 undecided",
        label: None,
        read: |l| {
            one(l
                .v
                .latest
                .as_ref()
                .and_then(|e| e.shape.as_ref()?.score)
                .map(f64::from))
        },
    },
    LinkFamily {
        name: "mgrp_overlay_passive_estimates",
        kind: Kind::Counter,
        help: "Passive estimates (from the applications' own TCP flows) recorded in place of the link's due runs",
        label: None,
        read: |l| one(l.v.passive.as_ref().map(|p| p.covered as f64)),
    },
    LinkFamily {
        name: "mgrp_overlay_passive_coverage_ratio",
        kind: Kind::Gauge,
        help: "Share of the link's due runs a passive estimate stood in for, 0 to 1",
        label: None,
        read: |l| one(l.v.passive.as_ref().map(|p| p.coverage)),
    },
    LinkFamily {
        name: "mgrp_overlay_passive_bytes_per_second",
        kind: Kind::Gauge,
        help: "The latest passive estimate of the path from the link's neighbour, by source: passive-tcp (its network-limited TCP flows' rate, from its kernel), passive-dispersion (back-to-back segments the path spread out: a bound from above), passive-trend (the rate separating steady streams with rising one-way delays from the others)",
        label: Some("source"),
        read: |l| {
            passive(l)
                .into_iter()
                .map(|(s, bps, _)| (s, bytes(bps)))
                .collect()
        },
    },
    LinkFamily {
        name: "mgrp_overlay_passive_timestamp_seconds",
        kind: Kind::Gauge,
        help: "Unix time of the neighbour's answer (passive-tcp) or the end of the window (timing sources) the passive estimate comes from",
        label: Some("source"),
        read: |l| passive(l).into_iter().map(|(s, _, at)| (s, at)).collect(),
    },
];

/// A family of the node's sender, a series per transport served (and per value of
/// its own label, if it has one).
struct ServeFamily {
    /// Its name, without `_total` for a counter.
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// Its own label beside the transport, if it has one.
    label: Option<&'static str>,
    /// Each series' value of its own label (`""` without one) and its value.
    read: fn(&Served) -> Vec<(&'static str, u64)>,
}

/// Every family of the node's sender, in the order served.
const SERVE_FAMILIES: &[ServeFamily] = &[
    ServeFamily {
        name: "mgrp_overlay_serve_measurements",
        kind: Kind::Counter,
        help: "Neighbours' measurements of the path from this node that ended, by the transport served (one refused or failing partway counts here too)",
        label: None,
        read: |t| vec![("", t.measurements)],
    },
    ServeFamily {
        name: "mgrp_overlay_serve_refusals",
        kind: Kind::Counter,
        help: "Receivers turned away or requests refused by this node's sender, by transport and reason: not_allowed (not in [serve] allow), busy (at a limit of connections or measurements), over_budget (the requester's budget, probe, query or capture rate), expired (a connection's or measurement's time), address (not the asker's own or not proven), other",
        label: Some("reason"),
        read: |t| {
            Refusal::ALL
                .iter()
                .map(|r| (r.label(), t.refused[r.index()]))
                .collect()
        },
    },
    ServeFamily {
        name: "mgrp_overlay_serve_failures",
        kind: Kind::Counter,
        help: "Neighbours' requests that failed on this node (mgrpd refused a train, a socket could not be opened), by transport",
        label: None,
        read: |t| vec![("", t.failures)],
    },
    ServeFamily {
        name: "mgrp_overlay_serve_requesters",
        kind: Kind::Gauge,
        help: "Distinct requesters (an IPv4 address, an IPv6 prefix of [serve] ipv6-prefix) whose measurements this node's sender started since the node did, by transport; counting stops at 16384",
        label: None,
        read: |t| vec![("", t.requesters)],
    },
];

/// The collected matrix (`[matrix]`): each pair's value and age, measured or
/// inferred (`basis`), the loss measured, and the members not read.
fn register_matrix(r: &mut Registry, node: &str, m: &mgrp_views::matrix::Matrix) {
    let bandwidth = Registered::new(
        r,
        "mgrp_overlay_matrix_bandwidth_bytes_per_second",
        Kind::Gauge,
        "The mesh's pair from a member into another: available bandwidth, measured or inferred (basis)",
    );
    let age = Registered::new(
        r,
        "mgrp_overlay_matrix_age_seconds",
        Kind::Gauge,
        "Seconds since the oldest measurement the pair's value rests on",
    );
    let loss = Registered::new(
        r,
        "mgrp_overlay_matrix_loss_episode_frequency_ratio",
        Kind::Gauge,
        "The pair's share of time in a loss episode, where a loss method measures it",
    );
    let unread = Registered::new(
        r,
        "mgrp_overlay_matrix_unread_members",
        Kind::Gauge,
        "Members whose links the last collection could not read",
    );
    for c in &m.cells {
        let labels = vec![
            ("node", node.to_owned()),
            ("from", c.from.clone()),
            ("to", c.to.clone()),
            (
                "basis",
                if c.inferred() { "inferred" } else { "measured" }.to_owned(),
            ),
        ];
        bandwidth.set(&labels, bytes(c.bps));
        age.set(&labels, c.age_s);
    }
    for l in &m.losses {
        let labels = vec![
            ("node", node.to_owned()),
            ("from", l.from.clone()),
            ("to", l.to.clone()),
        ];
        loss.set(&labels, l.episode_frequency);
    }
    unread.set(&vec![("node", node.to_owned())], m.unread.len() as f64);
}

/// A family registered, of either kind.
enum Registered {
    Counter(Family<Labels, Counter>),
    Gauge(Family<Labels, GaugeF>),
}

impl Registered {
    fn new(r: &mut Registry, name: &str, kind: Kind, help: &str) -> Self {
        match kind {
            Kind::Counter => {
                let f = Family::<Labels, Counter>::default();
                r.register(name, help, f.clone());
                Self::Counter(f)
            }
            Kind::Gauge => {
                let f = Family::<Labels, GaugeF>::default();
                r.register(name, help, f.clone());
                Self::Gauge(f)
            }
        }
    }

    fn set(&self, labels: &Labels, value: f64) {
        match self {
            // Counters are counts of bytes or runs, whole and below 2^53.
            Self::Counter(f) => {
                f.get_or_create(labels).inc_by(value as u64);
            }
            Self::Gauge(f) => {
                f.get_or_create(labels).set(value);
            }
        }
    }
}

/// The exposition of the node's metrics in `format`.
pub fn render(s: &Shared, format: mgrp_core::exposition::Format) -> String {
    let node = s.config().name.clone();
    let mut r = Registry::default();
    let started = Registered::new(
        &mut r,
        "mgrp_overlay_start_time_seconds",
        Kind::Gauge,
        "Unix time this overlay node started",
    );
    started.set(&vec![("node", node.clone())], s.started_at());
    let info = Registered::new(
        &mut r,
        "mgrp_overlay_link_info",
        Kind::Gauge,
        "1 for every configured link, with the neighbour it is measured from, whether or not it has an estimate",
    );
    let links: Vec<_> = LINK_FAMILIES
        .iter()
        .map(|f| (f, Registered::new(&mut r, f.name, f.kind, f.help)))
        .collect();
    for v in s.links() {
        let labels = vec![
            ("node", node.clone()),
            ("link", v.name.clone()),
            ("transport", v.transport.clone()),
            ("method", v.method.clone()),
        ];
        let neighbour = s
            .config()
            .links
            .iter()
            .find(|c| c.name == v.name)
            .and_then(|c| c.neighbour.clone())
            .unwrap_or_default();
        let mut described = labels.clone();
        described.extend([("from", v.from.clone()), ("neighbour", neighbour)]);
        info.set(&described, 1.0);
        let read = LinkRead {
            v: &v,
            last_duration_s: s
                .history(&v.name, 1)
                .and_then(|h| h.into_iter().next())
                .map(|last| last.duration_s),
        };
        for (f, family) in &links {
            for (value_of_label, x) in (f.read)(&read) {
                let mut l = labels.clone();
                if let Some(name) = f.label {
                    l.push((name, value_of_label.to_string()));
                }
                family.set(&l, x);
            }
        }
    }
    let build = Registered::new(
        &mut r,
        "mgrp_overlay_build_info",
        Kind::Gauge,
        "1, labelled with this overlay's version",
    );
    build.set(
        &vec![
            ("node", node.clone()),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
        ],
        1.0,
    );
    let served = s.served();
    for f in SERVE_FAMILIES {
        let family = Registered::new(&mut r, f.name, f.kind, f.help);
        for (transport, t) in &served {
            for (value_of_label, x) in (f.read)(t) {
                let mut l = vec![("node", node.clone()), ("transport", transport.clone())];
                if let Some(name) = f.label {
                    l.push((name, value_of_label.to_string()));
                }
                family.set(&l, x as f64);
            }
        }
    }
    if let Some(c) = s.routes() {
        register_routes(&mut r, &node, c);
    }
    if s.config().matrix.as_ref().is_some_and(|m| m.metrics)
        && let Some(Ok(m)) = s.matrix()
    {
        register_matrix(&mut r, &node, &m);
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    mgrp_core::exposition::render(out, format)
}
