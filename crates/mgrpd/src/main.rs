//! The `mgrpd` binary: parses flags and configuration, then runs the daemon.

use std::process::ExitCode;

use clap::Parser;
use mgrpd::config::{Cli, Config};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mgrpd: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &cli.check_config {
        println!("{}: configuration is valid", path.display());
        println!("{config:#?}");
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_max_level(config.log_level)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match mgrpd::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgrpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
