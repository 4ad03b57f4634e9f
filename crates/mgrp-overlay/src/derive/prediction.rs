//! What a bulk TCP transfer from a neighbour will get (its bulk transfer capacity,
//! BTC), from what the node knows of the path: the latest available bandwidth
//! (pathload-rs, pathChirp), the path's shape (btc-rs: capacity and the squeezed-pair
//! class), the loss rate (badabing) and what the neighbour's kernel says of TCP flows
//! it sends here now. Every value says which method made it and what it stands on;
//! the prediction to use is [`btc_rs::model::predict`]'s: the kernel's rate where a
//! network-limited flow runs, else the scaled available bandwidth, capped by Mathis's
//! bound and the capacity. When no flow runs, an earlier flow of the congestion
//! control predicted is blended in by its weight (`btc_rs::history`: less with age,
//! none when the probes say conditions changed since it began).
//!
//! No I/O here: the node hands in its records, the kernel's last answer and the
//! neighbour's earlier flows.

use std::net::IpAddr;

use btc_rs::history::{Earlier, Limits, Weight, blend, weight};
use btc_rs::model::{Basis, Factors, Inputs as ModelInputs, predict};
use btc_rs::squeezed::PathClass;
use mgrp_tool::control::TcpFlow;
use mgrp_views::prediction::{
    Available, HistoryInput, Inputs, KernelInput, LossInput, Predicted, Prediction, ShapeInput,
};

use crate::config::{Link, PredictionSettings};
use crate::derive::history::History;
use crate::measure::method::Gives;
use mgrp_views::estimate::Estimate;

/// What a neighbour's kernel last said of its TCP flows to this node.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelView {
    /// When it was asked, Unix seconds.
    pub at: f64,
    /// Its flows; empty when there were none or it could not say.
    pub flows: Vec<TcpFlow>,
    /// Why it could not say, if it could not.
    pub error: Option<String>,
}

fn mbps(b: f64) -> String {
    format!("{:.2} Mbit/s", b / 1e6)
}

fn class_words(c: PathClass) -> &'static str {
    match c {
        PathClass::TightLikeNarrow => "queues at the narrow link",
        PathClass::TightUnlikeNarrow => "queues at a faster link",
        PathClass::Undecided => "undecided where queues form",
    }
}

/// The latest answered run of `links` (with their records) that `pick` accepts,
/// no older than `max_age` at `now`.
fn latest<'a>(
    runs: &[(&'a Link, Option<&'a Estimate>)],
    now: f64,
    max_age: f64,
    pick: impl Fn(&Link, &Estimate) -> bool,
) -> Option<(&'a Link, &'a Estimate)> {
    runs.iter()
        .filter_map(|(l, e)| Some((*l, (*e)?)))
        .filter(|(l, e)| e.outcome.answered() && now - e.ended_at <= max_age && pick(l, e))
        .max_by(|a, b| a.1.ended_at.total_cmp(&b.1.ended_at))
}

/// The kernel's input from `view`, or why there is none.
fn kernel_input(
    view: Option<&KernelView>,
    now: f64,
    fresh: Option<f64>,
) -> Result<KernelInput, String> {
    let Some(fresh) = fresh else {
        return Err("the neighbours' kernels are not asked (btc.kernel-poll = 0s)".into());
    };
    let Some(v) = view else {
        return Err("the neighbour's kernel has not been asked yet".into());
    };
    let age_s = (now - v.at).max(0.0);
    if age_s > fresh {
        return Err(format!(
            "the neighbour's kernel last answered {age_s:.0} s ago{}",
            v.error
                .as_ref()
                .map_or(String::new(), |e| format!(" (since then: {e})"))
        ));
    }
    if let Some(e) = &v.error {
        return Err(format!("the neighbour could not say: {e}"));
    }
    if v.flows.is_empty() {
        return Err("no TCP flow from the neighbour to this node".into());
    }
    let limited: Vec<&TcpFlow> = v
        .flows
        .iter()
        .filter(|f| f.sample.network_limited())
        .collect();
    let Some(best) = limited.iter().max_by(|a, b| {
        let r = |f: &TcpFlow| f.sample.delivery_bps.unwrap_or(0.0);
        r(a).total_cmp(&r(b))
    }) else {
        let app = v.flows.iter().filter(|f| f.sample.app_limited).count();
        return Err(format!(
            "{} TCP flow(s) from the neighbour, none network-limited ({app} limited by the application, the rest by the receiver's window or the send buffer): they say how fast the ends are, not the path",
            v.flows.len()
        ));
    };
    Ok(KernelInput {
        delivery_bps: best.sample.delivery_bps.unwrap_or(0.0),
        bbr_bps: best
            .bbr
            .as_ref()
            .map(|b| b.bandwidth_bps)
            .filter(|b| b.is_finite() && *b > 0.0),
        congestion: best.congestion.clone(),
        min_rtt_s: best.sample.min_rtt_s,
        rtt_s: best.sample.rtt_s,
        total_retrans: best.sample.total_retrans,
        flows: v.flows.len(),
        network_limited: limited.len(),
        age_s,
    })
}

/// The words for why an earlier flow has weight `w`.
fn weight_words(w: Weight, e: &Earlier, l: &Limits) -> String {
    match w {
        Weight::Aged(v) => format!(
            "weight {v:.2}: last seen {:.0} s ago, of the {:.0} s after which it has none (btc.history-max-age)",
            e.age_s, l.max_age_s
        ),
        Weight::TooOld => format!(
            "no weight: last seen {:.0} s ago, at or past the {:.0} s limit (btc.history-max-age)",
            e.age_s, l.max_age_s
        ),
        Weight::Changed { ratio } => format!(
            "no weight: the probes now predict {ratio:.2} times what they did when it began, beyond the factor of {} that marks a change of conditions (btc.history-change)",
            l.change
        ),
    }
}

/// The latest earlier flow in `history` of the congestion control predicted, with
/// its weight beside the probes' prediction `probes` (none while the kernel gives a
/// running flow's rate), when history is used at all.
fn history_input(
    history: Option<&History>,
    settings: &PredictionSettings,
    kernel: bool,
    probes: Option<f64>,
    now: f64,
) -> Option<HistoryInput> {
    let limits = settings.history.as_ref()?;
    let r = history?.latest(settings.bbr)?;
    let e = Earlier {
        bps: r.bps()?,
        age_s: (now - r.last_at).max(0.0),
        probes_bps: r.probes_bps,
    };
    let (w, note) = if kernel {
        (
            0.0,
            "no weight: a flow runs now, and the kernel's rate of it stands".to_string(),
        )
    } else {
        let w = weight(&e, probes, limits);
        (w.value(), weight_words(w, &e, limits))
    };
    Some(HistoryInput {
        bps: e.bps,
        congestion: r.congestion.clone(),
        min_rtt_s: r.min_rtt_s,
        total_retrans: r.total_retrans,
        seen_s: r.seen_s,
        age_s: e.age_s,
        probes_bps: e.probes_bps,
        weight: w,
        note,
    })
}

/// The prediction for the path from `neighbour`, from the latest runs of the links
/// from it (`runs`: each link with its latest answered run), what its kernel last
/// said and its earlier flows (`history`), at `now` (Unix seconds). A kernel answer
/// counts for three polls.
pub fn for_neighbour(
    neighbour: IpAddr,
    runs: &[(&Link, Option<&Estimate>)],
    kernel: Option<&KernelView>,
    history: Option<&History>,
    settings: &PredictionSettings,
    now: f64,
) -> Prediction {
    let max_age = settings.max_age.as_secs_f64();
    let available = latest(runs, now, max_age, |l, e| {
        l.method.gives() == Gives::AvailableBandwidth && e.low_bps.is_some()
    })
    .map(|(l, e)| {
        let low = e.low_bps.unwrap_or(0.0);
        Available {
            low_bps: low,
            high_bps: e.high_bps.unwrap_or(low),
            lower_bound: e.lower_bound,
            method: e.method.clone(),
            link: l.name.clone(),
            age_s: now - e.ended_at,
        }
    });
    let shape = latest(runs, now, max_age, |_, e| e.shape.is_some()).and_then(|(l, e)| {
        let s = e.shape.as_ref()?;
        Some(ShapeInput {
            capacity_bps: s.capacity_bps,
            class: s.class,
            score: s.score,
            rtt_s: s.rtt_s,
            link: l.name.clone(),
            age_s: now - e.ended_at,
        })
    });
    let loss = latest(runs, now, max_age, |_, e| e.loss.is_some()).and_then(|(l, e)| {
        let x = e.loss.as_ref()?;
        Some(LossInput {
            loss_rate: x.loss_rate,
            episode_frequency: x.episode_frequency,
            link: l.name.clone(),
            age_s: now - e.ended_at,
        })
    });
    let fresh = settings.kernel_poll.map(|p| 3.0 * p.as_secs_f64());
    let (kernel, kernel_note) = match kernel_input(kernel, now, fresh) {
        Ok(k) => (Some(k), None),
        Err(why) => (None, Some(why)),
    };
    let rtt_s = shape
        .as_ref()
        .map(|s| s.rtt_s)
        .or_else(|| kernel.as_ref().and_then(|k| k.min_rtt_s));
    let model = ModelInputs {
        abw: available.as_ref().map(|a| (a.low_bps, a.high_bps)),
        class: shape.as_ref().and_then(|s| s.class),
        capacity_bps: shape.as_ref().map(|s| s.capacity_bps),
        loss: loss.as_ref().map(|l| l.loss_rate),
        rtt_s,
        kernel_bps: kernel.as_ref().map(|k| k.bbr_bps.unwrap_or(k.delivery_bps)),
        bbr: settings.bbr,
    };
    let (all, combined) = predict(&model, &settings.factors, settings.mss);
    let history = history_input(
        history,
        settings,
        kernel.is_some(),
        combined.map(|p| p.bps()),
        now,
    );
    let inputs = Inputs {
        available,
        shape,
        loss,
        kernel,
        kernel_note,
        history,
    };
    let describe = |basis: Basis| describe(basis, &inputs, &settings.factors, settings.mss, rtt_s);
    let value = |p: &btc_rs::model::Prediction, basis: String| Predicted {
        method: p.basis,
        bps: p.bps(),
        low_bps: p.low_bps,
        high_bps: p.high_bps,
        basis,
        history_weight: None,
    };
    let values: Vec<Predicted> = all.iter().map(|p| value(p, describe(p.basis))).collect();
    // The combined prediction's words: its method's, and what capped it.
    let words_of = |p: &btc_rs::model::Prediction| {
        let mut words = describe(p.basis);
        if p.basis == Basis::ScaledAbw {
            let scaled = all.iter().find(|q| q.basis == Basis::ScaledAbw);
            if scaled.is_some_and(|q| q.high_bps > p.high_bps + 1.0) {
                let cap = inputs.shape.as_ref().map(|s| s.capacity_bps);
                let by = if cap.is_some_and(|c| (c - p.high_bps).abs() < 1.0) {
                    "the capacity"
                } else {
                    "Mathis's bound"
                };
                words.push_str(&format!("; capped by {by}"));
            }
        }
        words
    };
    let prediction = match &inputs.history {
        // An earlier flow with weight: the blend, in the probes' method (the
        // earlier flow's alone, as the kernel's, when the probes give nothing).
        Some(h) if h.weight > 0.0 => {
            let e = Earlier {
                bps: h.bps,
                age_s: h.age_s,
                probes_bps: h.probes_bps,
            };
            blend(combined, &e, h.weight).map(|b| {
            let of = format!(
                "an earlier {} flow from the neighbour, {:.0} s ago, {} over {:.0} s network-limited",
                h.congestion.as_deref().unwrap_or("TCP"),
                h.age_s,
                mbps(h.bps),
                h.seen_s
            );
            let words = combined.as_ref().map_or_else(
                || format!("{of} (weight {:.2}; the probes predict nothing now)", h.weight),
                |p| {
                    format!(
                        "{}; blended with history (weight {:.2}): {of}",
                        words_of(p),
                        h.weight
                    )
                },
            );
            Predicted {
                history_weight: Some(h.weight),
                ..value(&b, words)
            }
        })
        }
        h => combined.map(|p| Predicted {
            history_weight: h.as_ref().map(|h| h.weight),
            ..value(&p, words_of(&p))
        }),
    };
    Prediction {
        neighbour,
        prediction,
        values,
        inputs,
    }
}

fn describe(basis: Basis, i: &Inputs, f: &Factors, mss: u32, rtt_s: Option<f64>) -> String {
    match basis {
        Basis::Kernel => i.kernel.as_ref().map_or_else(String::new, |k| {
            let what = k.bbr_bps.map_or_else(
                || "delivery rate".to_string(),
                |_| format!("BBR's bottleneck estimate (delivery rate {})", mbps(k.delivery_bps)),
            );
            format!(
                "the neighbour's kernel: {what} of its busiest network-limited TCP flow here ({} of {} flows network-limited{}), {:.0} s ago",
                k.network_limited,
                k.flows,
                k.congestion
                    .as_ref()
                    .map_or(String::new(), |c| format!(", {c}")),
                k.age_s
            )
        }),
        Basis::ScaledAbw => i.available.as_ref().map_or_else(String::new, |a| {
            let class = i
                .shape
                .as_ref()
                .and_then(|s| s.class)
                .unwrap_or(PathClass::Undecided);
            format!(
                "available bandwidth {}{} ({}, {:.0} s old) x {} ({}{})",
                if a.lower_bound { "at least " } else { "" },
                if a.lower_bound || a.low_bps == a.high_bps {
                    mbps(a.low_bps)
                } else {
                    format!("{}-{}", mbps(a.low_bps), mbps(a.high_bps))
                },
                a.method,
                a.age_s,
                f.of(class),
                class_words(class),
                i.shape.as_ref().and_then(|s| s.score).map_or_else(
                    || ", no squeezed pairs yet".to_string(),
                    |s| format!(", score {s}")
                )
            )
        }),
        Basis::Mathis => i.loss.as_ref().map_or_else(String::new, |l| {
            format!(
                "Mathis's bound for Reno-like congestion control (CUBIC and BBR are not): {mss}-byte segments, {:.1} ms round trip, loss rate {:.3} % (badabing, {:.0} s old)",
                rtt_s.unwrap_or(0.0) * 1e3,
                l.loss_rate * 100.0,
                l.age_s
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use mgrp_views::estimate::{Loss, RunOutcome, Shape};

    fn config() -> Config {
        Config::from_toml(
            "[[link]]\nfrom = \"10.0.0.1\"\nmethod = \"pathload-fast\"\n\
             [[link]]\nfrom = \"10.0.0.1\"\nmethod = \"btc\"\n\
             [[link]]\nfrom = \"10.0.0.1\"\nmethod = \"badabing\"\n",
            None,
        )
        .unwrap()
    }

    fn run(link: &Link, ended_at: f64) -> Estimate {
        let mut e = Estimate::empty(
            &link.name,
            "mgrp",
            link.method.name(),
            1,
            ended_at - 10.0,
            ended_at,
        );
        e.converged = true;
        e.outcome = RunOutcome::Estimate;
        e
    }

    fn flow(bps: f64, app_limited: bool) -> TcpFlow {
        crate::derive::passive::tests::flow(40000, bps, 1_000_000, app_limited, 0.0)
    }

    #[test]
    fn each_input_shows_in_the_prediction_with_its_method() {
        let c = config();
        let n: IpAddr = "10.0.0.1".parse().unwrap();
        let now = 1000.0;
        let mut abw = run(&c.links[0], 990.0);
        abw.low_bps = Some(8e6);
        abw.high_bps = Some(10e6);
        let mut shape = run(&c.links[1], 980.0);
        shape.shape = Some(Shape {
            capacity_bps: 10e6,
            class: Some(PathClass::TightUnlikeNarrow),
            score: Some(-2),
            squeezed: Some([0.1, 0.2]),
            pairs_skipped: None,
            rtt_s: 0.04,
        });
        let mut loss = run(&c.links[2], 970.0);
        loss.loss = Some(Loss {
            episode_frequency: 0.01,
            episode_frequency_ci: 0.0,
            episode_duration_s: None,
            episode_duration_ci_s: None,
            loss_rate: 0.01,
            experiments: 100,
        });
        let s = &c.prediction;
        let f = s.factors.unlike_narrow;
        // Available bandwidth alone: scaled as undecided.
        let runs = [
            (&c.links[0], Some(&abw)),
            (&c.links[1], None),
            (&c.links[2], None),
        ];
        let b = for_neighbour(n, &runs, None, None, s, now);
        let p = b.prediction.unwrap();
        assert_eq!(p.method, Basis::ScaledAbw);
        assert!((p.bps - 9e6 * s.factors.undecided).abs() < 1.0);
        assert!(b.inputs.kernel_note.unwrap().contains("not been asked"));
        // With the class, the factor for it; with loss, Mathis beside it and capping.
        let runs = [
            (&c.links[0], Some(&abw)),
            (&c.links[1], Some(&shape)),
            (&c.links[2], Some(&loss)),
        ];
        let b = for_neighbour(n, &runs, None, None, s, now);
        assert_eq!(b.values.len(), 2);
        let mathis = b.values.iter().find(|v| v.method == Basis::Mathis).unwrap();
        // 1448 B, 40 ms, 1 %: 3.55 Mbit/s.
        assert!((mathis.bps - 3_546_860.0).abs() < 100.0, "{}", mathis.bps);
        assert!(mathis.basis.contains("Reno-like"), "{}", mathis.basis);
        let p = b.prediction.unwrap();
        assert_eq!(p.method, Basis::ScaledAbw);
        assert!(p.high_bps <= mathis.bps + 1.0);
        if 10e6 * f > mathis.bps {
            assert!(p.basis.contains("capped by Mathis"), "{}", p.basis);
        }
        // A stale input is not used.
        let b = for_neighbour(
            n,
            &runs,
            None,
            None,
            s,
            990.0 + s.max_age.as_secs_f64() + 1.0,
        );
        assert!(b.inputs.available.is_none() && b.prediction.is_none());
        // The kernel: an application-limited flow says nothing; a network-limited
        // one is the prediction.
        let view = KernelView {
            at: now - 1.0,
            flows: vec![flow(2e6, true)],
            error: None,
        };
        let b = for_neighbour(n, &runs, Some(&view), None, s, now);
        assert_eq!(b.prediction.unwrap().method, Basis::ScaledAbw);
        assert!(
            b.inputs
                .kernel_note
                .unwrap()
                .contains("limited by the application")
        );
        let view = KernelView {
            at: now - 1.0,
            flows: vec![flow(2e6, true), flow(6e6, false), flow(5e6, false)],
            error: None,
        };
        let b = for_neighbour(n, &runs, Some(&view), None, s, now);
        let p = b.prediction.unwrap();
        assert_eq!((p.method, p.bps), (Basis::Kernel, 6e6));
        assert!(p.basis.contains("2 of 3 flows"), "{}", p.basis);
        // ... for three polls only.
        let late = now + 3.0 * s.kernel_poll.unwrap().as_secs_f64() + 1.0;
        let b = for_neighbour(n, &runs, Some(&view), None, s, late);
        assert_ne!(b.prediction.unwrap().method, Basis::Kernel);
    }

    /// The busiest flow runs BBR and its kernel gave BBR's model: the kernel's value
    /// is BBR's bottleneck estimate, and the basis and the inputs say so; a BBR flow
    /// from an older sender (no model) and a CUBIC flow give their delivery rate.
    #[test]
    fn a_bbr_flow_gives_bbrs_own_estimate() {
        let c = config();
        let s = &c.prediction;
        let n: IpAddr = "10.0.0.1".parse().unwrap();
        let now = 1000.0;
        let bbr = |model: Option<f64>| {
            let mut f = flow(6e6, false);
            f.congestion = Some("bbr".into());
            f.bbr = model.map(|bps| mgrp_tool::tcpinfo::BbrInfo {
                bandwidth_bps: bps,
                min_rtt_s: 0.04,
                pacing_gain: 1.0,
                cwnd_gain: 2.0,
            });
            f
        };
        let at = |flows: Vec<TcpFlow>| {
            let view = KernelView {
                at: now - 1.0,
                flows,
                error: None,
            };
            for_neighbour(n, &[], Some(&view), None, s, now)
        };
        let b = at(vec![bbr(Some(7.5e6)), flow(5e6, false)]);
        let p = b.prediction.unwrap();
        assert_eq!((p.method, p.bps), (Basis::Kernel, 7.5e6));
        assert!(
            p.basis
                .contains("BBR's bottleneck estimate (delivery rate 6.00 Mbit/s)")
                && p.basis.contains(", bbr),"),
            "{}",
            p.basis
        );
        let k = b.inputs.kernel.unwrap();
        assert_eq!((k.bbr_bps, k.delivery_bps), (Some(7.5e6), 6e6));
        for flows in [
            vec![bbr(None)],
            vec![flow(6e6, false)],
            vec![bbr(Some(0.0))],
        ] {
            let b = at(flows);
            let p = b.prediction.unwrap();
            assert_eq!((p.method, p.bps), (Basis::Kernel, 6e6));
            assert!(p.basis.contains(": delivery rate of"), "{}", p.basis);
            assert_eq!(b.inputs.kernel.unwrap().bbr_bps, None);
        }
    }

    /// No flow runs now: the latest earlier flow of the congestion control predicted
    /// is blended in by its weight, which falls with age and is none while a flow
    /// runs, when the probes changed since it began, or past the limit.
    #[test]
    fn an_earlier_flow_is_blended_in_by_its_weight() {
        let c = config();
        let s = &c.prediction;
        let n: IpAddr = "10.0.0.1".parse().unwrap();
        let mut abw = run(&c.links[0], 990.0);
        abw.low_bps = Some(9e6);
        abw.high_bps = Some(9e6);
        let runs = [(&c.links[0], Some(&abw))];
        let probes = 9e6 * s.factors.undecided;
        // A CUBIC flow seen at 900 and 902: 1 MB in 2 s, 4 Mbit/s.
        let history = |probes_then: f64| {
            let mut h = History::default();
            h.observe(&[flow(4e6, false)], 900.0, Some(probes_then));
            let mut f = flow(4e6, false);
            f.sample.bytes_acked = Some(2_000_000);
            h.observe(&[f], 902.0, None);
            h
        };
        let h = history(probes);
        let b = for_neighbour(n, &runs, None, Some(&h), s, 1000.0);
        let p = b.prediction.unwrap();
        let w = 1.0 - 98.0 / 1800.0;
        assert!((p.history_weight.unwrap() - w).abs() < 1e-9, "{p:?}");
        let want = (w * 4e6f64.ln() + (1.0 - w) * probes.ln()).exp();
        assert_eq!(p.method, Basis::ScaledAbw);
        assert!((p.bps - want).abs() < 1.0, "{} vs {want}", p.bps);
        assert!(
            p.basis.contains(
                "blended with history (weight 0.95): an earlier cubic flow from the neighbour, 98 s ago, 4.00 Mbit/s over 2 s network-limited"
            ),
            "{}",
            p.basis
        );
        let i = b.inputs.history.unwrap();
        assert_eq!((i.bps, i.seen_s, i.probes_bps), (4e6, 2.0, Some(probes)));
        assert!(
            i.note.starts_with("weight 0.95: last seen 98 s ago"),
            "{}",
            i.note
        );
        // The per-method values stay the probes' own.
        let scaled = b.values.iter().find(|v| v.method == Basis::ScaledAbw);
        assert!((scaled.unwrap().bps - probes).abs() < 1.0);
        // A flow runs now: the kernel's rate, and history has no weight.
        let view = KernelView {
            at: 999.0,
            flows: vec![flow(6e6, false)],
            error: None,
        };
        let b = for_neighbour(n, &runs, Some(&view), Some(&h), s, 1000.0);
        let p = b.prediction.unwrap();
        assert_eq!(
            (p.method, p.bps, p.history_weight),
            (Basis::Kernel, 6e6, Some(0.0))
        );
        assert!(b.inputs.history.unwrap().note.contains("a flow runs now"));
        // The probes read 2 Mbit/s when it began and 9 x the factor now: changed.
        let b = for_neighbour(n, &runs, None, Some(&history(2e6)), s, 1000.0);
        let p = b.prediction.unwrap();
        assert!((p.bps - probes).abs() < 1.0 && p.history_weight == Some(0.0));
        assert!(!p.basis.contains("history"), "{}", p.basis);
        let note = b.inputs.history.unwrap().note;
        assert!(note.contains("btc.history-change"), "{note}");
        // No probes now (stale): the earlier flow alone, as the kernel's reading.
        let b = for_neighbour(n, &runs, None, Some(&h), s, 1700.0);
        let p = b.prediction.unwrap();
        assert_eq!((p.method, p.bps), (Basis::Kernel, 4e6));
        assert!(
            p.basis.contains("the probes predict nothing now"),
            "{}",
            p.basis
        );
        // Past the limit: nothing.
        let b = for_neighbour(n, &runs, None, Some(&h), s, 902.0 + 1800.0);
        assert!(b.prediction.is_none());
        assert!(b.inputs.history.unwrap().note.contains("at or past"));
        // Predicting BBR's transfers: a CUBIC flow is not history for them; and
        // history can be left out.
        let bbr = PredictionSettings {
            bbr: true,
            ..s.clone()
        };
        let b = for_neighbour(n, &runs, None, Some(&h), &bbr, 1000.0);
        assert!(b.inputs.history.is_none() && b.prediction.unwrap().history_weight.is_none());
        let off = PredictionSettings {
            history: None,
            ..s.clone()
        };
        assert!(
            for_neighbour(n, &runs, None, Some(&h), &off, 1000.0)
                .inputs
                .history
                .is_none()
        );
    }
}
