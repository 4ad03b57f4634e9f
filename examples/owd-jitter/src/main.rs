//! `owd-jitter`: how much the one-way delay along a path varies, from trains of
//! evenly spaced probes, over MGRP (application traffic rides in the probes' padding)
//! or plain UDP.
//!
//! It is a measurement tool outside the mgrp workspace, in one file, on the published
//! `mgrp-tool`:
//!
//! - its probe kind, chosen with `mgrp_tool::kind::tool`;
//! - its estimator ([`Jitter`]), sans-IO: it takes each train's send and receive
//!   stamps and gives the delay variation (RFC 5481's PDV, each probe's delay less
//!   the smallest seen) and the mean difference between neighbours' delays (RFC 3393's
//!   IPDV, as RFC 3550's jitter before smoothing);
//! - its method ([`Trains`]): which batch to ask for next and what to make of the
//!   answer; `mgrp_tool::session::drive` runs it;
//! - its command line: `snd`, the sender every mgrp tool shares, and `rcv` with its
//!   own flags, through `mgrp_tool::cli::Tool`.
//!
//! The clocks of the two hosts need not agree: an offset between them is in every
//! probe's delay alike and drops out of both figures (a drift over the run does not).

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::{Args, Parser};
use mgrp_tool::cli::{Millis, PeerArgs, RcvError, Role, Tool};
use mgrp_tool::control::{Batch, Tag, Transport};
use mgrp_tool::session::{Bounds, Method, Next, drive};
use mgrp_tool::{Arrival, BatchError, Exchange, Session};
use serde_json::json;

/// The tool's name, in the sender's log and in messages.
const TOOL: &str = "owd-jitter";

/// The probe header's kind of a train: the tool's only one.
const TRAIN: u8 = mgrp_tool::kind::tool(0);

/// The most probes a run may ask for (the estimator keeps every delay).
const MAX_PROBES_PER_RUN: u64 = 1_000_000;

/// One-way delay variation from trains of evenly spaced probes, over MGRP or plain UDP.
///
/// Run `owd-jitter snd` (or any mgrp tool's `snd`) on the sending host and
/// `owd-jitter rcv --sender HOST` on the receiving one. The receiver asks for --trains
/// trains of --probes probes, --gap apart, one every --every, and prints each train's
/// figures and then the run's: the delay variation (each probe's one-way delay less
/// the smallest seen; median and 99th percentile) and the mean difference between
/// consecutive probes' delays.
///
/// Exit status of `rcv`: 0 figures printed; 5 no train came back; 6 the sender could
/// not be reached or went away; 7 the sender turned this receiver away (busy) or could
/// not send; 1 any other error; 2 bad arguments.
#[derive(Debug, Parser)]
#[command(name = "owd-jitter", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    role: Role<RcvArgs>,
}

/// Send trains from a sender to this host and print their one-way delay variation.
#[derive(Debug, Args)]
struct RcvArgs {
    #[command(flatten)]
    peer: PeerArgs,
    /// Trains to ask for.
    #[arg(long, default_value_t = 20)]
    trains: u32,
    /// Probes in a train (2 to 10000).
    #[arg(long, default_value_t = 50)]
    probes: u32,
    /// Gap between a train's probes (milliseconds, or 500us).
    #[arg(long, value_name = "DURATION", default_value_t = Millis(Duration::from_millis(1)))]
    gap: Millis,
    /// Time from one train's start to the next's (milliseconds, or 1s).
    #[arg(long, value_name = "DURATION", default_value_t = Millis(Duration::from_millis(250)))]
    every: Millis,
    /// IP bytes of each probe.
    #[arg(long, default_value_t = 200)]
    size: u32,
    /// Print each train's figures as well as the run's.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Print JSON lines on standard output: the start, each train, then the result.
    #[arg(long)]
    json: bool,
}

impl Tool for Cli {
    const NAME: &'static str = TOOL;
    type Rcv = RcvArgs;

    fn role(self) -> Role<RcvArgs> {
        self.role
    }

    fn json(args: &RcvArgs) -> bool {
        args.json
    }

    fn receive(args: &RcvArgs, stop: &AtomicBool) -> Result<i32, RcvError> {
        rcv(args, stop)
    }
}

fn main() {
    std::process::exit(mgrp_tool::cli::main::<Cli>(std::env::args_os()));
}

impl RcvArgs {
    /// What is wrong with the flags, if anything.
    fn check(&self) -> Result<(), String> {
        if !(2..=10_000).contains(&self.probes) {
            return Err(format!("--probes {}: 2 to 10000", self.probes));
        }
        if self.trains == 0 {
            return Err("--trains 0: ask for one at least".into());
        }
        let total = u64::from(self.trains) * u64::from(self.probes);
        if total > MAX_PROBES_PER_RUN {
            return Err(format!(
                "{total} probes in a run: at most {MAX_PROBES_PER_RUN}; fewer --trains or --probes"
            ));
        }
        if self.gap.0.is_zero() {
            return Err("--gap 0: probes sent back to back measure the link, not the delay".into());
        }
        mgrp_tool::params::probe_size(self.size).map_err(|e| e.0)
    }
}

/// `rcv`: the run the flags ask for, printed; gives the exit status.
fn rcv(args: &RcvArgs, stop: &AtomicBool) -> Result<i32, RcvError> {
    args.check().map_err(RcvError::options)?;
    let opts = args.peer.options(TOOL);
    let session = Session::open(&opts)?;
    if args.size > session.max_size() {
        return Err(RcvError::options(format!(
            "--size {}: the sender's path carries probes of at most {} bytes",
            args.size,
            session.max_size()
        )));
    }
    let config = json!({"trains": args.trains, "probes": args.probes,
        "gap_s": args.gap.0.as_secs_f64(), "every_s": args.every.0.as_secs_f64(),
        "size": args.size});
    if args.json {
        mgrp_tool::json::start(TOOL, &opts, session.rtt(), &config);
    } else {
        say(&format!(
            "Trains from {}:{} over {} (round trip {:.2} ms): {} of {} probes of {} B, {} apart, one every {}",
            opts.sender,
            opts.port,
            opts.transport,
            session.rtt().as_secs_f64() * 1e3,
            args.trains,
            args.probes,
            args.size,
            args.gap,
            args.every
        ));
    }
    let bounds = Bounds::new(stop, None);
    let mut method = Trains {
        args,
        asked: 0,
        next_at: bounds.started,
        started: bounds.started,
        jitter: Jitter::default(),
        rider_bytes: 0,
    };
    let run = drive(session, &mut method, bounds);
    let j = &method.jitter;
    let result = j.result();
    if args.json {
        mgrp_tool::json::emit(
            TOOL,
            "result",
            json!({"trains": j.trains, "sent": j.sent, "received": j.received,
                "pdv_p50_s": result.map(|r| seconds(r.pdv_p50_ns)),
                "pdv_p99_s": result.map(|r| seconds(r.pdv_p99_ns)),
                "ipdv_mean_s": result.and_then(|r| r.ipdv_mean_ns).map(seconds),
                "rider_bytes": method.rider_bytes, "elapsed_s": run.elapsed.as_secs_f64(),
                "peer_gone": run.end.peer_gone, "sender_failed": run.end.sender_failed}),
        );
    } else {
        summary(j, method.rider_bytes, opts.transport);
        if let Some(why) = run
            .end
            .peer_gone
            .as_ref()
            .or(run.end.sender_failed.as_ref())
        {
            say(&format!("Stopped: {why}"));
        }
    }
    mgrp_tool::exit::warn_unstamped(TOOL, run.end.unstamped);
    let measured = if result.is_some() {
        0
    } else {
        mgrp_tool::exit::UNUSABLE
    };
    Ok(run.end.exit_code(measured))
}

/// Prints a line on standard output; a closed pipe ends nothing.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn seconds(ns: i64) -> f64 {
    ns as f64 / 1e9
}

/// A delay difference in words: microseconds below a millisecond, else milliseconds.
fn ms(ns: i64) -> String {
    if ns.abs() < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

fn summary(j: &Jitter, rider_bytes: u64, transport: Transport) {
    let lost = j.sent.saturating_sub(j.received);
    say(&format!(
        "Probes: {} received of {} sent in {} trains ({lost} lost)",
        j.received, j.sent, j.trains
    ));
    match j.result() {
        Some(r) => {
            say(&format!(
                "Delay variation: median {}, 99th percentile {} (above the smallest delay)",
                ms(r.pdv_p50_ns),
                ms(r.pdv_p99_ns)
            ));
            if let Some(ipdv) = r.ipdv_mean_ns {
                say(&format!(
                    "Mean difference between consecutive probes' delays: {}",
                    ms(ipdv)
                ));
            }
        }
        None => say("Delay variation: no probe came back"),
    }
    if transport == Transport::Mgrp {
        say(&format!(
            "Application bytes that rode in the probes: {rider_bytes}"
        ));
    }
}

/// The run as a [`Method`]: a train when its time comes, until all were asked.
struct Trains<'a> {
    args: &'a RcvArgs,
    asked: u32,
    next_at: Instant,
    started: Instant,
    jitter: Jitter,
    rider_bytes: u64,
}

impl Method for Trains<'_> {
    fn next(&mut self) -> Result<Next, BatchError> {
        if self.asked == self.args.trains {
            return Ok(Next::Done);
        }
        let now = Instant::now();
        if now < self.next_at {
            return Ok(Next::Wait(self.next_at));
        }
        self.next_at = now + self.args.every.0;
        let tag = Tag {
            kind: TRAIN,
            fleet: 0,
            stream: self.asked,
        };
        self.asked += 1;
        let gap_ns = u64::try_from(self.args.gap.0.as_nanos()).unwrap_or(u64::MAX);
        let a = self.args;
        Ok(Next::Ask(Batch::even(
            tag, a.probes, a.size, gap_ns, a.probes,
        )))
    }

    fn answer(&mut self, batch: &Batch, x: Exchange, _: &mut Session) -> Result<(), BatchError> {
        self.rider_bytes += x.report.rider_bytes;
        let train = self.jitter.train(x.report.sent, &x.arrivals);
        let t = self.started.elapsed().as_secs_f64();
        if self.args.json {
            mgrp_tool::json::emit(
                TOOL,
                "train",
                json!({"t_s": t, "train": batch.tag.stream, "sent": train.sent,
                    "received": train.received,
                    "ipdv_mean_s": train.ipdv_mean_ns.map(seconds),
                    "rider_bytes": x.report.rider_bytes}),
            );
        } else if self.args.verbose {
            say(&format!(
                "{t:8.2} s  train {:>4}: {}/{} probes, consecutive delays differ by {}",
                batch.tag.stream,
                train.received,
                train.sent,
                train.ipdv_mean_ns.map_or_else(|| "-".into(), ms)
            ));
        }
        Ok(())
    }
}

/// The estimator: every probe's one-way delay and the differences between
/// consecutive probes' delays, over all trains. Sans-IO: it is given stamps.
#[derive(Debug, Default)]
struct Jitter {
    trains: u32,
    sent: u64,
    received: u64,
    /// Every received probe's delay (receive stamp less send stamp), ns.
    delays: Vec<i64>,
    /// Sum and count of |d(i) − d(i−1)| over consecutive probes that both came.
    ipdv_sum_ns: i128,
    ipdv_pairs: u64,
}

/// One train's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TrainFigures {
    sent: u32,
    received: u32,
    /// Mean |d(i) − d(i−1)|, ns; `None` without two consecutive probes.
    ipdv_mean_ns: Option<i64>,
}

/// The run's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    pdv_p50_ns: i64,
    pdv_p99_ns: i64,
    ipdv_mean_ns: Option<i64>,
}

impl Jitter {
    /// Takes in a train of which `sent` probes left and `arrivals` came (in any order).
    fn train(&mut self, sent: u32, arrivals: &[Arrival]) -> TrainFigures {
        let mut by_seq: Vec<(u32, i64)> = arrivals
            .iter()
            .map(|a| (a.seq, a.received_ns - a.sent_ns))
            .collect();
        by_seq.sort_unstable_by_key(|&(seq, _)| seq);
        by_seq.dedup_by_key(|&mut (seq, _)| seq);
        let (mut sum, mut pairs) = (0i128, 0u64);
        for w in by_seq.windows(2) {
            if w[1].0 == w[0].0 + 1 {
                sum += i128::from((w[1].1 - w[0].1).abs());
                pairs += 1;
            }
        }
        self.trains += 1;
        self.sent += u64::from(sent);
        self.received += by_seq.len() as u64;
        self.delays.extend(by_seq.iter().map(|&(_, d)| d));
        self.ipdv_sum_ns += sum;
        self.ipdv_pairs += pairs;
        TrainFigures {
            sent,
            received: u32::try_from(by_seq.len()).unwrap_or(u32::MAX),
            ipdv_mean_ns: mean(sum, pairs),
        }
    }

    /// The run's figures so far; `None` before any probe came.
    fn result(&self) -> Option<Figures> {
        let min = *self.delays.iter().min()?;
        let mut pdv: Vec<i64> = self.delays.iter().map(|d| d - min).collect();
        pdv.sort_unstable();
        let at = |q: f64| pdv[((pdv.len() - 1) as f64 * q).round() as usize];
        Some(Figures {
            pdv_p50_ns: at(0.5),
            pdv_p99_ns: at(0.99),
            ipdv_mean_ns: mean(self.ipdv_sum_ns, self.ipdv_pairs),
        })
    }
}

fn mean(sum: i128, n: u64) -> Option<i64> {
    (n > 0).then(|| i64::try_from(sum / i128::from(n)).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(delays_us: &[Option<i64>]) -> Vec<Arrival> {
        delays_us
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let sent_ns = 1_000_000 * i as i64;
                d.map(|d| Arrival {
                    seq: i as u32,
                    sent_ns,
                    received_ns: sent_ns + d * 1000 + 7_000_000_000,
                })
            })
            .collect()
    }

    #[test]
    fn a_steady_delay_varies_by_nothing_whatever_the_clock_offset() {
        let mut j = Jitter::default();
        let t = j.train(5, &arrivals(&[Some(300); 5]));
        assert_eq!((t.sent, t.received, t.ipdv_mean_ns), (5, 5, Some(0)));
        let r = j.result().unwrap();
        assert_eq!(
            (r.pdv_p50_ns, r.pdv_p99_ns, r.ipdv_mean_ns),
            (0, 0, Some(0))
        );
    }

    #[test]
    fn neighbours_differences_skip_a_lost_probe_and_ignore_the_order_of_arrival() {
        let mut j = Jitter::default();
        let mut a = arrivals(&[Some(100), Some(300), None, Some(200), Some(600)]);
        a.reverse();
        let t = j.train(5, &a);
        // Pairs (0,1) and (3,4): 200 us and 400 us.
        assert_eq!(t.received, 4);
        assert_eq!(t.ipdv_mean_ns, Some(300_000));
        let r = j.result().unwrap();
        // Variation above 100 us: 0, 100, 200, 500 us.
        assert_eq!(r.pdv_p50_ns, 200_000);
        assert_eq!(r.pdv_p99_ns, 500_000);
    }

    #[test]
    fn the_variation_is_over_every_train_and_nothing_came_is_no_figure() {
        let mut j = Jitter::default();
        assert_eq!(j.result(), None);
        assert_eq!(j.train(3, &[]).ipdv_mean_ns, None);
        assert_eq!(j.result(), None);
        j.train(2, &arrivals(&[Some(1000), Some(1000)]));
        j.train(2, &arrivals(&[Some(5000), Some(5000)]));
        let r = j.result().unwrap();
        assert_eq!((j.trains, j.sent, j.received), (3, 7, 4));
        assert_eq!(r.pdv_p99_ns, 4_000_000);
        assert_eq!(r.ipdv_mean_ns, Some(0), "each train was steady in itself");
    }

    #[test]
    fn flags_that_make_no_run_are_refused() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["owd-jitter", "rcv", "--sender", "a"];
            args.extend(extra);
            match Cli::try_parse_from(args).unwrap().role {
                Role::Rcv(r) => r.check(),
                Role::Snd(_) => unreachable!(),
            }
        };
        assert_eq!(parse(&[]), Ok(()));
        assert!(
            parse(&["--probes", "1"])
                .unwrap_err()
                .contains("2 to 10000")
        );
        assert!(parse(&["--trains", "0"]).is_err());
        assert!(parse(&["--trains", "1000", "--probes", "10000"]).is_err());
        assert!(
            parse(&["--gap", "0ms"])
                .unwrap_err()
                .contains("back to back")
        );
        assert!(parse(&["--size", "10"]).is_err());
    }

    #[test]
    fn small_differences_read_in_microseconds() {
        assert_eq!(ms(1_500), "1.5 µs");
        assert_eq!(ms(2_345_678), "2.346 ms");
    }
}
