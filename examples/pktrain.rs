//! `pktrain`: the MGRP paper's synthetic packet-train tool (Table 1) on mgrp-client.
//!
//! ```text
//! pktrain send --to 10.77.0.2 --preset pk2 --duration 20s
//! pktrain recv --duration 25s
//! ```
//!
//! The sender prints a summary of its transaction reports; the receiver prints each
//! train's loss and one-way-delay variation, then totals.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mgrp_client::Client;
use mgrp_core::schedule::percentile;
use mgrp_experiments::pktrain::{self, TrainShape};

#[derive(Debug, Parser)]
#[command(about = "Synthetic probe trains over MGRP (the paper's pk1, pk2, pk3 or custom)")]
struct Args {
    /// mgrpd's API socket.
    #[arg(long, global = true, default_value = mgrp_client::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Measurement port the receiver listens on.
    #[arg(long, global = true, default_value_t = 7001)]
    port: u16,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Send trains and summarise their reports.
    Send {
        /// Destination host.
        #[arg(long)]
        to: IpAddr,
        /// pk1, pk2 or pk3 (overridden by the custom flags below).
        #[arg(long, default_value = "pk2")]
        preset: TrainShape,
        /// Probes per train.
        #[arg(long)]
        probes: Option<u32>,
        /// Probe size in bytes (IP total length).
        #[arg(long)]
        size: Option<u16>,
        /// Gap between probes, in µs.
        #[arg(long)]
        gap_us: Option<u64>,
        /// Idle time from a train's last probe to the next train's first, in ms.
        #[arg(long)]
        train_gap_ms: Option<u64>,
        /// How long to send, in seconds.
        #[arg(long, default_value_t = 20.0)]
        duration: f64,
        /// Keep riders out of the probes (the no-MGRP baseline with the same pacing).
        #[arg(long)]
        no_piggyback: bool,
    },
    /// Receive probes and report per-train loss and delay variation.
    Recv {
        /// How long to listen, in seconds.
        #[arg(long, default_value_t = 25.0)]
        duration: f64,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = Client::connect(&args.socket).await?;
    match args.cmd {
        Cmd::Send {
            to,
            preset,
            probes,
            size,
            gap_us,
            train_gap_ms,
            duration,
            no_piggyback,
        } => {
            let shape = TrainShape {
                probes: probes.unwrap_or(preset.probes),
                size: size.unwrap_or(preset.size),
                gap: gap_us.map_or(preset.gap, Duration::from_micros),
                train_gap: train_gap_ms.map_or(preset.train_gap, Duration::from_millis),
            };
            let d = Duration::try_from_secs_f64(duration).context("--duration")?;
            let s = pktrain::send(
                &client,
                to,
                (args.port.saturating_sub(1), args.port),
                shape,
                !no_piggyback,
                d,
            )
            .await?;
            s.print();
        }
        Cmd::Recv { duration } => {
            let d = Duration::try_from_secs_f64(duration).context("--duration")?;
            let mut stream = client.listen(args.port).await?;
            let trains = pktrain::receive(&mut stream, d).await?;
            let mut variation = Vec::new();
            let (mut sent, mut got) = (0u64, 0u64);
            for ((src, tx), t) in &trains {
                mgrp_rt::outln!(
                    "train {tx} from {src}: {}/{} probes, loss {:.1} %, owd variation {:.1} µs, {} rider bytes",
                    t.received,
                    t.train_len,
                    100.0 * t.loss(),
                    t.owd_variation_us(),
                    t.rider_bytes
                );
                variation.push(t.owd_variation_us());
                sent += u64::from(t.train_len);
                got += u64::from(t.received);
            }
            variation.sort_by(f64::total_cmp);
            mgrp_rt::outln!(
                "{} trains, {got}/{sent} probes, owd variation median {:.1} µs p99 {:.1} µs",
                trains.len(),
                percentile(&variation, 50.0).unwrap_or(0.0),
                percentile(&variation, 99.0).unwrap_or(0.0)
            );
        }
    }
    Ok(())
}
