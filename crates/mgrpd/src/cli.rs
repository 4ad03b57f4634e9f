//! The `mgrpd` command line: `genkey`, `--check-config`, and starting the daemon
//! with the configuration the file and the flags give.

use crate::config::{self, Config};
use crate::service;

/// The whole `mgrpd` command: parses `args` (the first is the program name), checks
/// or loads the configuration, and runs the daemon. Exit codes: 0 after a clean
/// shutdown, 1 when the daemon could not start or failed, 2 for bad configuration.
pub fn main_with_args<I, T>(args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    use std::process::ExitCode;

    let cli = match config::Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Some(config::Command::Genkey) = cli.command {
        return match genkey() {
            Ok(key) => {
                mgrp_rt::outln!("{}", key.to_hex());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mgrpd: cannot read random bytes from /dev/urandom: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mgrpd: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &cli.check_config {
        mgrp_rt::outln!("{}: configuration is valid", path.display());
        mgrp_rt::outln!("{}", config.summary().trim_end());
        return ExitCode::SUCCESS;
    }
    if let Err(e) = mgrp_service::logging::init(config.log_level, config.log_format) {
        eprintln!("mgrpd: {e}");
        return ExitCode::from(2);
    }
    match service::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgrpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A new random key (`mgrpd genkey > FILE; chmod 600 FILE`).
fn genkey() -> std::io::Result<mgrp_core::auth::Key> {
    use std::io::Read as _;
    let mut bytes = [0u8; mgrp_core::auth::KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(mgrp_core::auth::Key::from_bytes(bytes))
}
