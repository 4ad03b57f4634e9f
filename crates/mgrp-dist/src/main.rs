//! `mgrp-dist`: writes the man pages and shell completions of mgrp's programs, for a
//! package or an install by hand, and builds the Debian packages.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser as _;

/// Writes the man pages and shell completions of mgrp's programs, and builds its
/// Debian packages.
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
    /// Build the Debian packages mgrpd (with mgrpctl), mgrp-overlay and mgrp-tools
    /// into DIR, from programs already built (`cargo build --release --bins`, or
    /// `scripts/package`, which does both). Needs dpkg-deb, gzip and md5sum.
    Deb {
        /// Where the built programs are.
        #[arg(long, value_name = "DIR", default_value = "target/release")]
        bins: PathBuf,
        /// Where the packages go.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The packages' version (default: the programs' own).
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        version: String,
        /// The Debian architecture (default: this build's, as dpkg names it).
        #[arg(long)]
        arch: Option<String>,
        /// How dpkg-deb compresses the files: xz (smallest), gzip or none (fastest,
        /// for a test that only installs them).
        #[arg(long, default_value = "xz", value_parser = ["xz", "gzip", "none"])]
        compression: String,
    },
}

fn main() -> ExitCode {
    let result = match Args::parse() {
        Args::Man { out } => mgrp_dist::write_man_pages(&out),
        Args::Completions { out } => mgrp_dist::write_completions(&out),
        Args::Deb {
            bins,
            out,
            version,
            arch,
            compression,
        } => arch
            .map_or_else(mgrp_dist::deb::host_arch, Ok)
            .and_then(|arch| mgrp_dist::deb::build(&bins, &out, &version, &arch, &compression)),
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
