//! `mgrp-dist`: writes the man pages and shell completions of mgrp's programs, for a
//! package or an install by hand.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser as _;

/// Writes the man pages and shell completions of mgrp's programs.
#[derive(Debug, clap::Parser)]
#[command(name = "mgrp-dist", version)]
enum Args {
    /// Write each program's man page into DIR (NAME.8 for the daemons, NAME.1 for
    /// the rest); install them under /usr/share/man/man8 and man1.
    Man {
        /// Where the pages go.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Write each program's bash, zsh and fish completions under DIR, in the
    /// directories those shells read below /usr/share
    /// (bash-completion/completions, zsh/vendor-completions,
    /// fish/vendor_completions.d).
    Completions {
        /// Where the completions go (a `share` directory).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let result = match Args::parse() {
        Args::Man { out } => mgrp_dist::write_man_pages(&out),
        Args::Completions { out } => mgrp_dist::write_completions(&out),
    };
    match result {
        Ok(files) => {
            for f in files {
                mgrp_rt::outln!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mgrp-dist: {e:#}");
            ExitCode::FAILURE
        }
    }
}
