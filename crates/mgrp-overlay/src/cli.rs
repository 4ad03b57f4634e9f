//! The `mgrp-overlay` command line: `--check-config`, `--help`, and running a node
//! from its configuration file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use clap::Parser;

/// One node of the Measurement Overlay.
#[derive(Debug, Parser)]
#[command(
    name = "mgrp-overlay",
    version,
    about = "Measurement Overlay node: measures every link into this node continuously and serves the estimates",
    long_about = "Measurement Overlay node: measures the paths into this node from its neighbours \
        continuously with pathload-rs, pathChirp, badabing or btc-rs over MGRP (or plain \
        UDP) (available bandwidth, loss episodes, the narrow link's capacity and where \
        queues form), predicts the rate a bulk TCP transfer from each neighbour will get \
        (the transfer-rate prediction, `prediction` in the API), serves its neighbours' \
        measurements of the paths out of it, and serves the estimates over an HTTP API \
        (JSON and server-sent events), to Prometheus (/metrics) and on a status page (/). \
        With [routing] it also moves flows onto the paths the measurements favour.\n\n\
        Run one per node, beside that node's mgrpd. See mgrp-overlay.example.toml for a \
        commented configuration file, and docs/overlay.md in the source repository for \
        the guide (API, metrics, scheduling)."
)]
struct Cli {
    /// Read settings from this TOML file.
    #[arg(long, value_name = "FILE", default_value = "/etc/mgrp/overlay.toml")]
    config: PathBuf,
    /// Check this configuration file, print the settings in force (the token left
    /// out) and what looks wrong, and exit.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// Check this mesh description (docs/mesh.md), print every member's part of it as
    /// its mgrpd and this overlay derive it, and exit; or say the first inconsistency
    /// with its line and key.
    #[arg(long, value_name = "FILE")]
    check_mesh: Option<PathBuf>,
    /// Listen on this address instead of the file's `listen`.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Least severe log level written: error, warn, info, debug or trace (RUST_LOG,
    /// when set, overrides it with its directives).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: tracing::Level,
    /// How log lines look: `text`, or `json` (one object a line).
    #[arg(long, value_name = "text|json", default_value = "text")]
    log_format: mgrp_service::logging::LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Write Prometheus' targets for every member of a mesh description: DIR/mgrp-overlay.json
    /// (each member's overlay API, its scheme from `api`) and DIR/mgrpd.json (each
    /// member's mgrpd `metrics`), `file_sd` files labelled with the member's name
    /// (`member`). Run it again when the description changes: Prometheus re-reads them.
    PrometheusTargets {
        /// The mesh description.
        #[arg(long, value_name = "FILE")]
        mesh: PathBuf,
        /// Where to write the two files.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Read every member's links from its API (the description's `api`) and print the
    /// whole mesh as JSON (schema 1, bits per second and seconds): each ordered pair's
    /// available bandwidth, its own newest estimate where it is measured and inferred
    /// where not, with its basis and age; members that could not be read are listed.
    Matrix {
        /// The mesh description.
        #[arg(long, value_name = "FILE")]
        mesh: PathBuf,
        /// A file holding the token the members' APIs ask for.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// The authority that signed the certificates of members whose `api` is
        /// `https://`.
        #[arg(long, value_name = "FILE")]
        ca_file: Option<PathBuf>,
    },
}

/// The command line `mgrp-overlay` reads, with every flag (for the guides' checks).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// The whole `mgrp-overlay` command: parses `args` (the first is the program name),
/// checks or loads the configuration, and runs the node. Exit codes: 0 after a clean
/// shutdown, 1 when the node could not start or failed, 2 for a bad configuration.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
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
    if let Some(Command::PrometheusTargets { mesh, out }) = &cli.command {
        return printed(crate::mesh::write_targets(mesh, out));
    }
    if let Some(Command::Matrix {
        mesh,
        token_file,
        ca_file,
    }) = &cli.command
    {
        return printed(
            crate::matrix::collect(mesh, token_file.as_deref(), ca_file.as_deref())
                .and_then(|m| Ok(serde_json::to_string_pretty(&m)? + "\n")),
        );
    }
    if let Some(path) = &cli.check_mesh {
        return printed(crate::mesh::check(path));
    }
    if let Some(path) = &cli.check_config {
        return match Config::load(path).and_then(|c| c.check_exposure().map(|()| c)) {
            Ok(c) => {
                for w in c.warnings() {
                    eprintln!("mgrp-overlay: warning: {w}");
                }
                mgrp_rt::outln!("{}: configuration is valid", path.display());
                mgrp_rt::out!("{}", c.summary());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mgrp-overlay: {}: {e}", path.display());
                ExitCode::from(2)
            }
        };
    }
    // The file as it is read now and at each reload, with --listen over its own.
    let (path, listen) = (cli.config.clone(), cli.listen);
    let reread: crate::service::Reread = Box::new(move || {
        let mut c = Config::load(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(l) = listen {
            c.listen = l;
        }
        Ok(c)
    });
    let config = match reread() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mgrp-overlay: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = config.check_exposure() {
        eprintln!("mgrp-overlay: {}: {e}", cli.config.display());
        return ExitCode::from(2);
    }
    if let Err(e) = mgrp_service::logging::init(cli.log_level, cli.log_format) {
        eprintln!("mgrp-overlay: {e}");
        return ExitCode::from(2);
    }
    match crate::service::run(config, reread) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgrp-overlay: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A command that only prints: its text and success, or its error and exit code 2.
fn printed(result: anyhow::Result<String>) -> ExitCode {
    match result {
        Ok(text) => {
            mgrp_rt::out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mgrp-overlay: {e:#}");
            ExitCode::from(2)
        }
    }
}
