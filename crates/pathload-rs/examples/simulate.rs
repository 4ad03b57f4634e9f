//! Runs the estimator against the simulated bottleneck and prints every stream and
//! fleet, to see how the method behaves on a path without a network:
//!
//! ```text
//! cargo run -p pathload-rs --example simulate -- [capacity Mbit/s] [cross Mbit/s] [cross bytes] [seed] [fast|slow] [burst]
//! ```

use pathload_rs::sim::{Link, LinkConfig, run_with};
use pathload_rs::{Config, Estimator, Event, Mode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: f64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let link = LinkConfig {
        capacity_mbps: num(0, 10.0),
        cross_mbps: num(1, 0.0),
        cross_size: num(2, 1500.0) as u32,
        seed: num(3, 1.0) as u64,
        cross_burst: num(5, 1.0) as u32,
        ..LinkConfig::default()
    };
    let mode = if args.get(4).is_some_and(|m| m == "slow") {
        Mode::Slow
    } else {
        Mode::Fast
    };
    println!("truth for 228-byte probes: {:.2} Mbit/s", link.truth(228));
    let mut est = Estimator::new(Config {
        mode,
        rtt_ns: 2 * link.delay_ns as u64,
        ..Config::default()
    });
    let (outcome, seconds) = run_with(&mut est, &mut Link::new(link), |ev| match ev {
        Event::Stream { analysis: a, .. } => print!(
            "{}({:.2},{:.2}) ",
            a.trend.map_or('-', pathload_rs::Trend::letter),
            a.pct.unwrap_or(f64::NAN),
            a.pdt.unwrap_or(f64::NAN)
        ),
        Event::Fleet(f) => println!(
            "\nfleet {}: asked {:.2}, sent {:.2} Mbit/s: {:?} ({:?}){}",
            f.fleet,
            f.requested_rate,
            f.actual_rate,
            f.verdict,
            f.end,
            if f.hidden_trend { ", trend hidden" } else { "" }
        ),
        other => println!("{other:?}"),
    });
    println!(
        "range {:.2} - {:.2} Mbit/s ({}), {} fleets ({} with a hidden trend), {seconds:.1} s simulated",
        outcome.low,
        outcome.high,
        outcome.reason.describe(),
        outcome.fleets,
        outcome.hidden_trend_fleets
    );
}
