//! The estimator on simulated paths (no network): a token-bucket shaper with and
//! without cross traffic, both onset readings, the smoothed estimate against the
//! truth. `cargo run -p pathchirp-rs --example chirp_simulate`.

use pathchirp_rs::analysis::Params;
use pathchirp_rs::sim::{Cross, Path, run};
use pathchirp_rs::{Config, Estimator, Onset};

fn main() {
    mgrp_rt::outln!(
        "{:<34} {:>7} {:>10} {:>10} {:>8}",
        "path",
        "onset",
        "truth",
        "smoothed",
        "error"
    );
    for (name, rate, bucket, cross) in [
        ("tbf 10M, bucket 1540", 10e6, 1540, Cross::None),
        ("tbf 10M, bucket 1028", 10e6, 1028, Cross::None),
        ("tbf 10M, bucket 15140", 10e6, 15_140, Cross::None),
        (
            "tbf 10M + CBR 4M",
            10e6,
            1540,
            Cross::Cbr {
                bps: 4e6,
                size: 1028,
            },
        ),
        (
            "tbf 10M + Poisson 4M",
            10e6,
            1540,
            Cross::Poisson {
                bps: 4e6,
                size: 1028,
            },
        ),
        (
            "tbf 100M + Poisson 40M",
            100e6,
            15_140,
            Cross::Poisson {
                bps: 40e6,
                size: 1500,
            },
        ),
    ] {
        for onset in [Onset::FirstRise, Onset::Output, Onset::Tail] {
            let cfg = Config {
                analysis: Params {
                    onset,
                    ..Params::default()
                },
                ..Config::default()
            };
            let mut est = Estimator::new(cfg).expect("valid");
            let mut path = Path::new(rate, bucket, cross);
            let reports = run(&mut est, &mut path, 200);
            let means: Vec<f64> = reports
                .iter()
                .filter_map(|r| r.smoothed.map(|s| s.bps))
                .collect();
            let tail = &means[means.len() / 2..];
            let mean = tail.iter().sum::<f64>() / tail.len() as f64;
            mgrp_rt::outln!(
                "{name:<34} {:>7} {:>10.2} {:>10.2} {:>+7.1}%",
                format!("{onset:?}").chars().take(7).collect::<String>(),
                path.truth() / 1e6,
                mean / 1e6,
                (mean / path.truth() - 1.0) * 100.0
            );
        }
    }
}
