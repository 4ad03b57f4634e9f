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
    match cli.command {
        Some(config::Command::Genkey { private }) => return genkey(private),
        Some(config::Command::Pubkey) => return pubkey(),
        None => {}
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

/// 32 random bytes.
fn random_bytes() -> std::io::Result<[u8; mgrp_core::auth::KEY_LEN]> {
    use std::io::Read as _;
    let mut bytes = [0u8; mgrp_core::auth::KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `mgrpd genkey [--private]`: prints a new random key (`mgrpd genkey > FILE; chmod
/// 600 FILE`), or a new private key of a key pair.
fn genkey(private: bool) -> std::process::ExitCode {
    match random_bytes() {
        Ok(bytes) if private => {
            mgrp_rt::outln!(
                "{}",
                mgrp_core::pair::PrivateKey::from_bytes(bytes).to_hex()
            );
            std::process::ExitCode::SUCCESS
        }
        Ok(bytes) => {
            mgrp_rt::outln!("{}", mgrp_core::auth::Key::from_bytes(bytes).to_hex());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mgrpd: cannot read random bytes from /dev/urandom: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `mgrpd pubkey`: the public key of the private key on standard input.
fn pubkey() -> std::process::ExitCode {
    use std::io::Read as _;
    let mut text = String::new();
    if let Err(e) = std::io::stdin().take(4096).read_to_string(&mut text) {
        eprintln!("mgrpd: cannot read a private key on standard input: {e}");
        return std::process::ExitCode::from(2);
    }
    match text.parse::<mgrp_core::pair::PrivateKey>() {
        Ok(key) => {
            mgrp_rt::outln!("{}", key.public());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "mgrpd: standard input holds no private key: {e} (give the file: `mgrpd pubkey < FILE`)"
            );
            std::process::ExitCode::from(2)
        }
    }
}
