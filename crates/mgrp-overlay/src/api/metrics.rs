//! `/metrics`: the node's links for Prometheus, in base units (bytes, seconds), drawn
//! fresh from the node's state at each scrape, in the text format or OpenMetrics as the
//! scraper asks.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::state::shared::Shared;
use mgrp_views::estimate::RunOutcome;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServeLabels {
    node: String,
    transport: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    node: String,
    link: String,
    transport: String,
    method: String,
    from: String,
    /// The neighbour's name, empty unless the link's table gives one.
    neighbour: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    node: String,
    version: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkLabels {
    node: String,
    link: String,
    transport: String,
    method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    node: String,
    link: String,
    transport: String,
    method: String,
    bound: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    node: String,
    link: String,
    transport: String,
    method: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    node: String,
    link: String,
    transport: String,
    method: String,
    source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BtcLabels {
    node: String,
    link: String,
    transport: String,
    method: String,
    /// `kernel`, `scaled-abw` or `mathis`.
    predictor: &'static str,
}

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
    member: String,
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
            member: m.name.clone(),
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

/// The exposition of the node's metrics in `format`.
pub fn render(s: &Shared, format: mgrp_core::exposition::Format) -> String {
    let mut r = Registry::default();
    let started = Family::<NodeLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_start_time_seconds",
        "Unix time this overlay node started",
        started.clone(),
    );
    let info = Family::<InfoLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_link_info",
        "1 for every configured link, with the neighbour it is measured from, whether or not it has an estimate",
        info.clone(),
    );
    let available = Family::<BoundLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_available_bandwidth_bytes_per_second",
        "Latest answer for the link's available bandwidth, less the application traffic that rode in the probes: bound low and high of a range, or low alone for a lower bound",
        available.clone(),
    );
    let measured = Family::<BoundLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_measured_bandwidth_bytes_per_second",
        "Latest answer as the probes measured it, riders included (bound low and high, or low alone for a lower bound)",
        measured.clone(),
    );
    let lower = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_estimate_lower_bound",
        "1 when the latest answer is a lower bound (the available bandwidth is above the highest rate the neighbour sends), 0 for a range",
        lower.clone(),
    );
    let stamp = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_estimate_timestamp_seconds",
        "Unix time the run of the latest answer ended (absent while the link has none)",
        stamp.clone(),
    );
    let duration = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_last_run_duration_seconds",
        "How long the link's latest run took, whatever its outcome",
        duration.clone(),
    );
    let runs = Family::<OutcomeLabels, Counter>::default();
    r.register(
        "mgrp_overlay_runs",
        "Runs of the link by outcome (estimate, lower_bound, limit, rate_unreachable, cross_traffic, sender_failed, busy, peer_down, error)",
        runs.clone(),
    );
    let probe = Family::<LinkLabels, Counter>::default();
    r.register(
        "mgrp_overlay_probe_bytes",
        "IP bytes of every probe the link's runs sent",
        probe.clone(),
    );
    let riding = Family::<LinkLabels, Counter>::default();
    r.register(
        "mgrp_overlay_riding_probe_bytes",
        "IP bytes of the link's probes that carried application traffic",
        riding.clone(),
    );
    let episodes = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_loss_episode_frequency_ratio",
        "Latest share of time the link was in a loss episode (badabing), 0 to 1",
        episodes.clone(),
    );
    let episode_duration = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_loss_episode_duration_seconds",
        "Latest mean duration of the link's loss episodes (badabing; absent when none began or ended)",
        episode_duration.clone(),
    );
    let loss_rate = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_loss_ratio",
        "Latest share of the link's probe packets lost (badabing), 0 to 1",
        loss_rate.clone(),
    );
    let up = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_link_up",
        "0 while the link backs off from a neighbour that is down, else 1",
        up.clone(),
    );
    let btc = Family::<BtcLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_btc_bytes_per_second",
        "What a bulk TCP transfer from the link's neighbour gets, by each predictor the measurements allow: kernel (a running network-limited flow's delivery rate), scaled-abw (available bandwidth scaled by the squeezed-pair class), mathis (Reno-like bound from loss and round trip); the middle of its range",
        btc.clone(),
    );
    let predicted = Family::<BtcLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_btc_prediction_bytes_per_second",
        "The transfer-rate prediction to use for the link's neighbour, labelled with the predictor it comes from",
        predicted.clone(),
    );
    let capacity = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_path_capacity_bytes_per_second",
        "The narrow link's capacity on the path from the link's neighbour, from btc-rs's packet bunches",
        capacity.clone(),
    );
    let score = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_squeeze_score",
        "btc-rs's squeezed-pair score: above 0, queues form at the narrow link; below 0, at a faster link; 0 undecided",
        score.clone(),
    );
    let passive = Family::<LinkLabels, Counter>::default();
    r.register(
        "mgrp_overlay_passive_estimates",
        "Passive estimates (from the applications' own TCP flows) recorded in place of the link's due runs",
        passive.clone(),
    );
    let coverage = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_passive_coverage_ratio",
        "Share of the link's due runs a passive estimate stood in for, 0 to 1",
        coverage.clone(),
    );
    let passive_rate = Family::<SourceLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_passive_bytes_per_second",
        "The latest passive estimate of the path from the link's neighbour, by source: passive-tcp (its network-limited TCP flows' rate, from its kernel), passive-dispersion (back-to-back segments the path spread out: a bound from above), passive-trend (the rate separating steady streams with rising one-way delays from the others)",
        passive_rate.clone(),
    );
    let passive_stamp = Family::<SourceLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_passive_timestamp_seconds",
        "Unix time of the neighbour's answer (passive-tcp) or the end of the window (timing sources) the passive estimate comes from",
        passive_stamp.clone(),
    );
    let build = Family::<BuildLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_build_info",
        "1, labelled with this overlay's version",
        build.clone(),
    );
    let node = s.config().name.clone();
    started
        .get_or_create(&NodeLabels { node: node.clone() })
        .set(s.started_at());
    build
        .get_or_create(&BuildLabels {
            node: node.clone(),
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1.0);
    let served = |r: &mut Registry, name: &str, help: &str| {
        let f = Family::<ServeLabels, Counter>::default();
        r.register(name, help, f.clone());
        f
    };
    let measurements = served(
        &mut r,
        "mgrp_overlay_serve_measurements",
        "Neighbours' measurements of the path from this node that ended, by the transport served (one refused or failing partway counts here too)",
    );
    let refusals = served(
        &mut r,
        "mgrp_overlay_serve_refusals",
        "Receivers turned away or requests refused by this node's sender (not allowed, busy, over a budget or the session limit, an address not proven), by transport",
    );
    let failures = served(
        &mut r,
        "mgrp_overlay_serve_failures",
        "Neighbours' requests that failed on this node (mgrpd refused a train, a socket could not be opened), by transport",
    );
    let requesters = Family::<ServeLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_serve_requesters",
        "Distinct requesters (an IPv4 address, an IPv6 prefix of [serve] ipv6-prefix) whose measurements this node's sender started since the node did, by transport; counting stops at 16384",
        requesters.clone(),
    );
    for (transport, t) in s.served() {
        let l = ServeLabels {
            node: node.clone(),
            transport,
        };
        requesters.get_or_create(&l).set(t.requesters as f64);
        measurements.get_or_create(&l).inc_by(t.measurements);
        refusals.get_or_create(&l).inc_by(t.refusals);
        failures.get_or_create(&l).inc_by(t.failures);
    }
    for v in s.links() {
        let l = LinkLabels {
            node: node.clone(),
            link: v.name.clone(),
            transport: v.transport.clone(),
            method: v.method.clone(),
        };
        info.get_or_create(&InfoLabels {
            node: node.clone(),
            link: v.name.clone(),
            transport: v.transport.clone(),
            method: v.method.clone(),
            from: v.from.clone(),
            neighbour: s
                .config()
                .links
                .iter()
                .find(|c| c.name == v.name)
                .and_then(|c| c.neighbour.clone())
                .unwrap_or_default(),
        })
        .set(1.0);
        let bound = |b| BoundLabels {
            node: node.clone(),
            link: v.name.clone(),
            transport: v.transport.clone(),
            method: v.method.clone(),
            bound: b,
        };
        if let Some(e) = &v.latest {
            for (b, adj, raw) in [
                ("low", e.low_bps, e.unadjusted_low_bps),
                ("high", e.high_bps, e.unadjusted_high_bps),
            ] {
                if let Some(x) = adj {
                    available.get_or_create(&bound(b)).set(x / 8.0);
                }
                if let Some(x) = raw {
                    measured.get_or_create(&bound(b)).set(x / 8.0);
                }
            }
            if let Some(sh) = &e.shape {
                capacity.get_or_create(&l).set(sh.capacity_bps / 8.0);
                if let Some(x) = sh.score {
                    score.get_or_create(&l).set(f64::from(x));
                }
            } else if let Some(loss) = &e.loss {
                episodes.get_or_create(&l).set(loss.episode_frequency);
                if let Some(d) = loss.episode_duration_s {
                    episode_duration.get_or_create(&l).set(d);
                }
                loss_rate.get_or_create(&l).set(loss.loss_rate);
            } else {
                lower
                    .get_or_create(&l)
                    .set(if e.lower_bound { 1.0 } else { 0.0 });
            }
            stamp.get_or_create(&l).set(e.ended_at);
        }
        if let Some(last) = s.history(&v.name, 1).and_then(|h| h.into_iter().next()) {
            duration.get_or_create(&l).set(last.duration_s);
        }
        for o in RunOutcome::ALL {
            runs.get_or_create(&OutcomeLabels {
                node: node.clone(),
                link: v.name.clone(),
                transport: v.transport.clone(),
                method: v.method.clone(),
                outcome: o.name(),
            })
            .inc_by(v.runs.get(o));
        }
        let by = |predictor| BtcLabels {
            node: node.clone(),
            link: v.name.clone(),
            transport: v.transport.clone(),
            method: v.method.clone(),
            predictor,
        };
        for x in &v.prediction.values {
            btc.get_or_create(&by(x.method.name())).set(x.bps / 8.0);
        }
        if let Some(p) = &v.prediction.prediction {
            predicted
                .get_or_create(&by(p.method.name()))
                .set(p.bps / 8.0);
        }
        if let Some(p) = &v.passive {
            passive.get_or_create(&l).inc_by(p.covered);
            coverage.get_or_create(&l).set(p.coverage);
            let by = |source| SourceLabels {
                node: node.clone(),
                link: v.name.clone(),
                transport: v.transport.clone(),
                method: v.method.clone(),
                source,
            };
            let tcp = p.last.as_ref().and_then(|t| Some((t.bps?, t.at)));
            let timing = |f: fn(&mgrp_views::passive::PassiveTiming) -> Option<f64>| {
                p.timing.as_ref().and_then(|t| Some((f(t)?, t.at)))
            };
            for (source, estimate) in [
                (crate::derive::passive::PASSIVE_TCP, tcp),
                (
                    crate::derive::timing::PASSIVE_DISPERSION,
                    timing(|t| t.dispersion_bps),
                ),
                (
                    crate::derive::timing::PASSIVE_TREND,
                    timing(|t| t.trend_bps),
                ),
            ] {
                if let Some((bps, at)) = estimate {
                    passive_rate.get_or_create(&by(source)).set(bps / 8.0);
                    passive_stamp.get_or_create(&by(source)).set(at);
                }
            }
        }
        probe.get_or_create(&l).inc_by(v.probe_bytes);
        riding.get_or_create(&l).inc_by(v.riding_probe_bytes);
        up.get_or_create(&l).set(
            if v.peer_down && v.state == mgrp_views::link::LinkState::BackingOff {
                0.0
            } else {
                1.0
            },
        );
    }
    if let Some(c) = s.routes() {
        register_routes(&mut r, &node, c);
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    mgrp_core::exposition::render(out, format)
}
