//! What a bulk TCP transfer from a neighbour will get (its bulk transfer capacity,
//! BTC), from what the node knows of the path: the latest available bandwidth
//! (pathload-rs, pathChirp), the path's shape (btc-rs: capacity and the squeezed-pair
//! class), the loss rate (badabing) and what the neighbour's kernel says of TCP flows
//! it sends here now. Every value says which method made it and what it stands on;
//! the prediction to use is [`btc_rs::model::predict`]'s: the kernel's rate where a
//! network-limited flow runs, else the scaled available bandwidth, capped by Mathis's
//! bound and the capacity.
//!
//! No I/O here: the node hands in its records and the kernel's last answer.

use std::net::IpAddr;

use btc_rs::model::{Basis, Factors, Inputs as ModelInputs, predict};
use btc_rs::squeezed::PathClass;
use mgrp_tool::control::TcpFlow;
use mgrp_views::prediction::{
    Available, Inputs, KernelInput, LossInput, Predicted, Prediction, ShapeInput,
};

use crate::config::{Link, PredictionSettings};
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

/// The prediction for the path from `neighbour`, from the latest runs of the links
/// from it (`runs`: each link with its latest answered run) and what its kernel last
/// said, at `now` (Unix seconds). A kernel answer counts for three polls.
pub fn for_neighbour(
    neighbour: IpAddr,
    runs: &[(&Link, Option<&Estimate>)],
    kernel: Option<&KernelView>,
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
    let inputs = Inputs {
        available,
        shape,
        loss,
        kernel,
        kernel_note,
    };
    let describe = |basis: Basis| describe(basis, &inputs, &settings.factors, settings.mss, rtt_s);
    let value = |p: &btc_rs::model::Prediction, basis: String| Predicted {
        method: p.basis,
        bps: p.bps(),
        low_bps: p.low_bps,
        high_bps: p.high_bps,
        basis,
    };
    let values: Vec<Predicted> = all.iter().map(|p| value(p, describe(p.basis))).collect();
    let prediction = combined.map(|p| {
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
        value(&p, words)
    });
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
        let b = for_neighbour(n, &runs, None, s, now);
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
        let b = for_neighbour(n, &runs, None, s, now);
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
        let b = for_neighbour(n, &runs, None, s, 990.0 + s.max_age.as_secs_f64() + 1.0);
        assert!(b.inputs.available.is_none() && b.prediction.is_none());
        // The kernel: an application-limited flow says nothing; a network-limited
        // one is the prediction.
        let view = KernelView {
            at: now - 1.0,
            flows: vec![flow(2e6, true)],
            error: None,
        };
        let b = for_neighbour(n, &runs, Some(&view), s, now);
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
        let b = for_neighbour(n, &runs, Some(&view), s, now);
        let p = b.prediction.unwrap();
        assert_eq!((p.method, p.bps), (Basis::Kernel, 6e6));
        assert!(p.basis.contains("2 of 3 flows"), "{}", p.basis);
        // ... for three polls only.
        let late = now + 3.0 * s.kernel_poll.unwrap().as_secs_f64() + 1.0;
        let b = for_neighbour(n, &runs, Some(&view), s, late);
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
            for_neighbour(n, &[], Some(&view), s, now)
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
}
