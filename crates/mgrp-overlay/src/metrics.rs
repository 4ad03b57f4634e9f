//! `/metrics`: the node's links in Prometheus' text format, in base units (bytes,
//! seconds), drawn fresh from the node's state at each scrape.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::estimate::RunOutcome;
use crate::node::Shared;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkLabels {
    node: String,
    link: String,
    transport: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    node: String,
    link: String,
    transport: String,
    bound: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    node: String,
    link: String,
    transport: String,
    outcome: &'static str,
}

type GaugeF = Gauge<f64, AtomicU64>;

/// The text exposition of the node's metrics.
pub fn render(s: &Shared) -> String {
    let mut r = Registry::default();
    let available = Family::<BoundLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_available_bandwidth_bytes_per_second",
        "Latest estimate of the link's available bandwidth (bound low or high), less the application traffic that rode in the probes",
        available.clone(),
    );
    let measured = Family::<BoundLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_measured_bandwidth_bytes_per_second",
        "Latest estimate's range as the probes measured it, riders included",
        measured.clone(),
    );
    let stamp = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_estimate_timestamp_seconds",
        "Unix time the latest estimate's run ended",
        stamp.clone(),
    );
    let duration = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_last_run_duration_seconds",
        "How long the link's latest run took",
        duration.clone(),
    );
    let runs = Family::<OutcomeLabels, Counter>::default();
    r.register(
        "mgrp_overlay_runs",
        "Runs of the link by outcome (estimate, no_estimate, peer_down)",
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
    let up = Family::<LinkLabels, GaugeF>::default();
    r.register(
        "mgrp_overlay_link_up",
        "0 while the link backs off from a neighbour that is down, else 1",
        up.clone(),
    );
    let node = s.config().name.clone();
    for v in s.links() {
        let l = LinkLabels {
            node: node.clone(),
            link: v.name.clone(),
            transport: v.transport.clone(),
        };
        let bound = |b| BoundLabels {
            node: node.clone(),
            link: v.name.clone(),
            transport: v.transport.clone(),
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
            stamp.get_or_create(&l).set(e.ended_at);
        }
        if let Some(last) = s.history(&v.name, 1).and_then(|h| h.into_iter().next()) {
            duration.get_or_create(&l).set(last.duration_s);
        }
        for (o, n) in
            RunOutcome::ALL
                .into_iter()
                .zip([v.runs.estimate, v.runs.no_estimate, v.runs.peer_down])
        {
            runs.get_or_create(&OutcomeLabels {
                node: node.clone(),
                link: v.name.clone(),
                transport: v.transport.clone(),
                outcome: o.name(),
            })
            .inc_by(n);
        }
        probe.get_or_create(&l).inc_by(v.probe_bytes);
        riding.get_or_create(&l).inc_by(v.riding_probe_bytes);
        up.get_or_create(&l)
            .set(if v.peer_down && v.state == "backing_off" {
                0.0
            } else {
                1.0
            });
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}
