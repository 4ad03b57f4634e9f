//! `mgrpctl`'s command line (the program is `src/bin/mgrpctl.rs`), here so that its
//! man page and completions are made from it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `mgrpctl`'s arguments.
#[derive(Debug, Parser)]
#[command(
    name = "mgrpctl",
    version,
    about = "Inspect a running mgrpd through its API socket",
    long_about = None
)]
pub struct Args {
    /// mgrpd's API socket.
    #[arg(long, default_value = mgrp_client::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// What `mgrpctl` is asked to do.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Print the daemon's counters and whether the rider counters balance.
    Stats {
        /// Print one JSON object instead of a line per counter.
        #[arg(long)]
        json: bool,
    },
    /// Print the application traffic routed to each peer (packets and bytes since
    /// the daemon started, the recent rate) and the riders held for it now.
    Traffic {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print every probe that arrives for a measurement port, as JSON lines.
    Listen {
        /// The measurement port.
        port: u16,
    },
}

/// `mgrpctl`'s command line, with every subcommand and flag.
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}
