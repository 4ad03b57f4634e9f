//! `mgrpctl`: look at a running mgrpd from the shell.
//!
//! ```text
//! mgrpctl stats            # counters, one per line
//! mgrpctl stats --json     # the same as one JSON object
//! mgrpctl traffic          # application traffic to each peer, and riders held for it
//! mgrpctl listen 7001      # print probes arriving for port 7001 as JSON lines
//! ```

use std::process::ExitCode;

use clap::Parser as _;
use mgrp_client::blocking::Client;
use mgrpd::ctl::{Args, Cmd};

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgrpctl: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::connect(&args.socket)?;
    match &args.cmd {
        Cmd::Stats { json } => {
            let stats = client.stats()?;
            if *json {
                mgrp_rt::outln!("{}", serde_json::to_string(&stats)?);
                return Ok(());
            }
            let value = serde_json::to_value(stats)?;
            for (group, fields) in value.as_object().into_iter().flatten() {
                for (name, v) in fields.as_object().into_iter().flatten() {
                    mgrp_rt::outln!("{group}.{name} {v}");
                }
            }
            mgrp_rt::outln!(
                "riders_balance {}",
                if stats.conserved() { "ok" } else { "MISMATCH" }
            );
            mgrp_rt::outln!(
                "receive_balance {}",
                if stats.receive_conserved() {
                    "ok"
                } else {
                    "MISMATCH"
                }
            );
        }
        Cmd::Traffic { json } => {
            let (window, peers) = client.traffic()?;
            if *json {
                mgrp_rt::outln!(
                    "{}",
                    serde_json::json!({ "window_ms": window.as_millis() as u64, "peers": peers })
                );
                return Ok(());
            }
            mgrp_rt::outln!(
                "{:<40} {:>12} {:>14} {:>12} {:>8} {:>10}",
                "peer",
                "packets",
                "bytes",
                format!("bit/s ({}s)", window.as_secs_f64()),
                "held",
                "held_bytes"
            );
            for p in peers {
                mgrp_rt::outln!(
                    "{:<40} {:>12} {:>14} {:>12} {:>8} {:>10}",
                    p.peer.to_string(),
                    p.packets,
                    p.bytes,
                    p.bytes_per_second * 8,
                    p.held_riders,
                    p.held_bytes
                );
            }
        }
        Cmd::Listen { port } => {
            let mut probes = client.listen(*port)?;
            while let Some(p) = probes.next_probe()? {
                mgrp_rt::outln!("{}", serde_json::to_string(&p)?);
            }
        }
    }
    Ok(())
}
