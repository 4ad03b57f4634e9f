//! How well badabing-rs measures loss episodes, against the truth counted at the
//! bottleneck, beside a Poisson probe process of the same rate on the same path at the
//! same time.
//!
//! The path: host A, a router, host B; the router's link to B is a `tbf rate 10mbit
//! burst 1540 limit 25000` (a drop-tail queue of 20 ms). On/off UDP bursts of 1490-byte
//! datagrams at 50 Mbit/s from A to a second address of B (outside the tunnel) fill
//! the queue in about 5 ms and then overflow it until the burst ends; bursts start
//! at exponential intervals. Three regimes, fixed before any run:
//!
//! | regime | burst | mean time between bursts | drops per burst |
//! |---|---|---|---|
//! | short  | 8 ms   | 200 ms | ~3 ms |
//! | medium | 35 ms  | 500 ms | ~30 ms |
//! | long   | 105 ms | 1 s    | ~100 ms |
//!
//! The truth: a thread in the router's namespace reads the tbf's drop counter and
//! backlog over rtnetlink every 200 µs; a 5 ms slot is congested when the qdisc dropped
//! a packet in it, an episode is a run of congested slots
//! ([`mgrp_testbed::qdisc::slot_truth`]); a second truth also counts slots whose
//! backlog reached 90 % of the queue (badabing's own delay criterion at α = 0.1).
//!
//! badabing-rs runs at its defaults (Δ 5 ms, p 0.3, 3 × 600 B per probe). Beside it, on
//! a second sender and session over plain UDP whatever badabing's transport (mgrpd
//! sends one train at a time), single 600-byte probes at exponential gaps at the same
//! packet rate (2·p·3 per slot, 360 a second), read as a ZING-like tool does: the
//! frequency is the share of probes lost, an episode is a run of lost probes, its
//! length the time from its first to its last lost probe plus one mean gap. Not run in
//! CI (minutes of wall time); needs root.
//!
//! ```text
//! cargo bench -p badabing-rs --bench episodes -- [--runs N] [--seconds S]
//!     [--regimes short,medium,long] [--transports udp,mgrp] [--p P]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use badabing_rs::tool::MeasureOptions;
use mgrp_testbed::harness::{Role, bench_start};
use mgrp_testbed::link::realtime_ns;
use mgrp_testbed::qdisc::{QdiscLog, SlotTruth, slot_truth};
use mgrp_testbed::tool::serve_in;
use mgrp_testbed::tool::{OTHER_B, add_other_b, daemons_for};
use mgrp_testbed::traffic::{Steps, udp_steps};
use mgrp_testbed::{ADDR_A, TwoHostOptions, TwoHosts};
use mgrp_tool::control::{Batch, Run, Tag};
use mgrp_tool::{ServeOptions, Session, SessionOptions, Transport};

const QUEUE_BYTES: u32 = 25_000;
const BURST_MBPS: f64 = 50.0;
const POISSON_CONTROL_PORT: u16 = 55012;
const POISSON_SENDER_PORT: u16 = 55013;
const POISSON_PROBE_PORT: u16 = 55011;

/// The bench's options (`cargo bench -p badabing-rs --bench episodes -- --help`).
#[derive(Debug, Clone, clap::Parser)]
struct Opts {
    /// Runs of each case.
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// The loss regimes.
    #[arg(long, value_delimiter = ',', default_values = ["short", "medium", "long"], value_parser = ["short", "medium", "long"])]
    regimes: Vec<String>,
    /// How probes travel.
    #[arg(long, value_delimiter = ',', default_values = ["udp", "mgrp"], value_parser = ["udp", "mgrp"])]
    transports: Vec<String>,
    /// The probability p (badabing-rs's default unless given).
    #[arg(long)]
    p: Option<f64>,
    #[command(flatten)]
    cargo: mgrp_testbed::harness::CargoBench,
}

/// (burst length, mean time between burst starts).
fn regime(name: &str) -> anyhow::Result<(Duration, Duration)> {
    Ok(match name {
        "short" => (Duration::from_millis(8), Duration::from_millis(200)),
        "medium" => (Duration::from_millis(35), Duration::from_millis(500)),
        "long" => (Duration::from_millis(105), Duration::from_secs(1)),
        _ => anyhow::bail!("no regime {name}: short, medium or long"),
    })
}

/// What the Poisson process saw: each probe's send stamp and whether it was lost.
#[derive(Debug, Default)]
struct PoissonLog {
    probes: Vec<(i64, bool)>,
    mean_gap_ns: f64,
}

impl PoissonLog {
    /// (frequency, mean episode duration in seconds, episodes).
    fn read(&self) -> (f64, Option<f64>, usize) {
        let lost = self.probes.iter().filter(|p| p.1).count();
        let mut runs: Vec<f64> = Vec::new();
        let mut first: Option<i64> = None;
        let mut last = 0;
        for &(t, l) in &self.probes {
            match (l, first) {
                (true, None) => {
                    first = Some(t);
                    last = t;
                }
                (true, Some(_)) => last = t,
                (false, Some(f)) => {
                    runs.push((last - f) as f64 + self.mean_gap_ns);
                    first = None;
                }
                (false, None) => {}
            }
        }
        if let Some(f) = first {
            runs.push((last - f) as f64 + self.mean_gap_ns);
        }
        let d = (!runs.is_empty()).then(|| runs.iter().sum::<f64>() / runs.len() as f64 / 1e9);
        (lost as f64 / self.probes.len().max(1) as f64, d, runs.len())
    }
}

/// Single probes at exponential gaps (mean `mean_gap_ns`), a second's worth per batch,
/// until `stop`.
fn poisson(
    session: &SessionOptions,
    mean_gap_ns: f64,
    size: u32,
    stop: &AtomicBool,
) -> anyhow::Result<PoissonLog> {
    let mut s = Session::open(session).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut log = PoissonLog {
        mean_gap_ns,
        ..PoissonLog::default()
    };
    let mut draws = mgrp_testbed::Seeded::new(0x2545_f491_4f6c_dd1d);
    let per_batch = (1e9 / mean_gap_ns).round().max(1.0) as usize;
    let mut id = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let runs: Vec<Run> = (0..per_batch)
            .map(|_| Run {
                count: 1,
                size,
                gap_ns: (-mean_gap_ns * (1.0 - draws.next_f64()).ln()).round() as u64,
                ride: true,
            })
            .collect();
        let batch = Batch {
            tag: Tag {
                kind: 200,
                fleet: 0,
                stream: id,
            },
            runs,
            lead_ns: 0,
        };
        id += 1;
        let x = s.exchange(&batch).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let mut arrived = vec![false; per_batch];
        for a in &x.arrivals {
            if let Some(v) = arrived.get_mut(a.seq as usize) {
                *v = true;
            }
        }
        for (i, stamp) in x.report.sender_stamps.iter().enumerate() {
            if let Some(t) = stamp {
                log.probes
                    .push((*t, !arrived.get(i).copied().unwrap_or(false)));
            }
        }
    }
    s.close();
    Ok(log)
}

/// One run's figures.
#[derive(Debug)]
struct Figures {
    truth: SlotTruth,
    truth_full: SlotTruth,
    bada: badabing_rs::Estimate,
    poisson: (f64, Option<f64>, usize),
}

fn run(o: &Opts, name: &str, transport: &str, seed: u64) -> anyhow::Result<Figures> {
    let (on, period) = regime(name)?;
    let net = TwoHosts::new(&TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "1540".into())),
        router: true,
        delay: None,
    })?;
    let dev = net.bottleneck_dev.clone().context("no bottleneck")?;
    let queue = QUEUE_BYTES.to_string();
    net.bottleneck_ns().exec(&[
        "tc", "qdisc", "replace", "dev", &dev, "root", "tbf", "rate", "10mbit", "burst", "1540",
        "limit", &queue,
    ])?;
    add_other_b(&net)?;
    // Riders wait at most 1 ms for a probe, well below the 5 ms slot.
    let pair = daemons_for(&net, transport, &["--hold", "1ms"])?;
    let t = if transport == "mgrp" {
        Transport::Mgrp
    } else {
        Transport::Udp
    };
    let steps = Steps::on_off(
        BURST_MBPS,
        on,
        period,
        Duration::from_secs(o.seconds + 60),
        seed,
    );
    let log = QdiscLog::start(net.bottleneck_ns(), &dev, Duration::from_micros(200))?;
    let source = udp_steps(&net.a, &net.b, OTHER_B.into(), 9000, steps, 1490)?;
    let stop = Arc::new(AtomicBool::new(false));
    let socket = pair
        .as_ref()
        .map(|(a, b)| (a.socket.clone(), b.socket.clone()));
    let mut main = ServeOptions::new(t);
    // The Poisson prober always goes over plain UDP: mgrpd sends one train at a time,
    // so beside badabing over MGRP it would take turns with it and halve its windows.
    let mut second = ServeOptions::new(Transport::Udp);
    second.port = POISSON_CONTROL_PORT;
    second.probe_port = POISSON_SENDER_PORT;
    if let Some((a, _)) = &socket {
        main.socket.clone_from(a);
    }
    serve_in(&net.a, main, &stop)?;
    serve_in(&net.a, second, &stop)?;
    std::thread::sleep(Duration::from_millis(500));

    let mut bo = MeasureOptions::new(ADDR_A.to_string(), t, Duration::from_secs(o.seconds));
    if let Some(p) = o.p {
        bo.config.p = p;
    }
    let mut po = SessionOptions::new(ADDR_A.to_string(), Transport::Udp, "poisson");
    po.port = POISSON_CONTROL_PORT;
    po.probe_port = POISSON_PROBE_PORT;
    if let Some((_, b)) = &socket {
        bo.session.socket.clone_from(b);
    }
    let c = bo.config;
    let mean_gap_ns =
        c.slot_ns as f64 / (f64::from(c.slots_per_experiment) * c.p * f64::from(c.packets));
    let poisson_stop = Arc::new(AtomicBool::new(false));
    let poisson_thread = {
        let stop = poisson_stop.clone();
        net.b
            .spawn("poisson", move || poisson(&po, mean_gap_ns, c.size, &stop))?
    };
    let never = AtomicBool::new(false);
    let from = realtime_ns();
    let measured = net
        .b
        .run(|| badabing_rs::tool::measure(&bo, &never, &mut |_| {}))?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let to = realtime_ns();
    poisson_stop.store(true, Ordering::Relaxed);
    let poisson_log = poisson_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the Poisson prober panicked"))??;
    stop.store(true, Ordering::Relaxed);
    drop(source);
    let readings = log.stop()?;
    let slot = c.slot_ns as i64;
    let near_full = (f64::from(QUEUE_BYTES) * (1.0 - c.alpha)) as u32;
    Ok(Figures {
        truth: slot_truth(&readings, from, to, slot, None),
        truth_full: slot_truth(&readings, from, to, slot, Some(near_full)),
        bada: measured.estimate,
        poisson: poisson_log.read(),
    })
}

fn pct(x: f64, truth: f64) -> String {
    if truth > 0.0 {
        format!("{:+.0} %", (x / truth - 1.0) * 100.0)
    } else {
        "-".into()
    }
}

fn main() -> ExitCode {
    let roles: &[Role] = &[("mgrpd", |a| mgrpd::main_with_args(a))];
    if let Some(code) = bench_start("episodes", roles) {
        return code;
    }
    let o = <Opts as clap::Parser>::parse();
    println!(
        "| regime | transport | truth F | truth D (slots) | drops | badabing F (err) | badabing D (err) | 95 % CI F / D | lost probes | truth F / D with near-full | Poisson F (err) | Poisson D slots (err) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for name in &o.regimes {
        for transport in &o.transports {
            for k in 0..o.runs {
                let seed = 1 + k as u64;
                match run(&o, name, transport, seed).context("run") {
                    Ok(f) => {
                        let slot_s = f
                            .bada
                            .duration_s
                            .zip(f.bada.duration_slots)
                            .map(|(s, n)| s / n);
                        let tf = f.truth.frequency();
                        let td = f.truth.duration_slots().unwrap_or(0.0);
                        let bd = f.bada.duration_slots.unwrap_or(0.0);
                        let (pf, pd, _) = f.poisson;
                        let pd_slots = pd.zip(slot_s).map_or(0.0, |(d, s)| d / s);
                        println!(
                            "| {name} | {transport} | {tf:.4} | {td:.2} | {} | {:.4} ({}) | {bd:.2} ({}) | ±{:.4} / ±{} | {}/{} | {:.4} / {:.2} | {pf:.4} ({}) | {pd_slots:.2} ({}) |",
                            f.truth.drops,
                            f.bada.frequency,
                            pct(f.bada.frequency, tf),
                            pct(bd, td),
                            f.bada.frequency_ci,
                            f.bada
                                .duration_ci_slots
                                .map_or("-".into(), |c| format!("{c:.2}")),
                            f.bada.packets_lost,
                            f.bada.packets_sent,
                            f.truth_full.frequency(),
                            f.truth_full.duration_slots().unwrap_or(0.0),
                            pct(pf, tf),
                            pct(pd_slots, td),
                        );
                    }
                    Err(e) => println!("| {name} | {transport} | failed: {e:#} |"),
                }
            }
        }
    }
    ExitCode::SUCCESS
}
