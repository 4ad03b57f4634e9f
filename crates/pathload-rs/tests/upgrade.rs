//! Mixed versions, as a rolling upgrade has them: this version's pathload-rs beside
//! release 0.1.0's (`mgrp_testbed::previous`, built from its commit), each way, over
//! plain UDP on the tools' 10 Mbit/s path. The receiver of this version names a sender
//! older than its features (`exclusive`) and measures; the older receiver measures
//! through this version's sender, whose hello's feature list it does not know.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::ensure;
use mgrp_testbed::previous;
use mgrp_testbed::tool::{Rcv, snd_rcv_mixed, ten_mbit_path};

const THIS: &str = env!("CARGO_BIN_EXE_pathload-rs");
const LIMIT: Duration = Duration::from_secs(70);

/// A converged estimate whose middle lies on the 10 Mbit/s path (a wide band: the
/// point is that the versions work together, not the estimate's accuracy).
fn measured(rcv: &Rcv) -> anyhow::Result<f64> {
    rcv.succeeded()?;
    let r = rcv.result()?;
    ensure!(r["converged"] == true, "no estimate: {r}");
    let mid = (r["low_bps"].as_f64().unwrap_or(0.0) + r["high_bps"].as_f64().unwrap_or(0.0)) / 2e6;
    ensure!(
        (5.0..=12.0).contains(&mid),
        "{mid:.2} Mbit/s on a 10 Mbit/s path: {r}"
    );
    Ok(mid)
}

fn this_receiver_measures_through_the_previous_sender() -> anyhow::Result<()> {
    let old = previous::program("pathload-rs", "pathload-rs")?;
    let net = ten_mbit_path(false)?;
    let rcv = snd_rcv_mixed(
        &net,
        &old,
        Path::new(THIS),
        "udp",
        None,
        &["--mode", "fast"],
        LIMIT,
    )?;
    let mid = measured(&rcv)?;
    let warned = rcv.events("warning").any(|w| {
        w["warning"]
            .as_str()
            .is_some_and(|m| m.contains("older than this receiver") && m.contains("`exclusive`"))
    });
    ensure!(warned, "no warning of the older sender: {}", rcv.log);
    eprintln!(
        "    {} sender, this receiver: {mid:.2} Mbit/s, the older sender named",
        previous::PREVIOUS_VERSION
    );
    Ok(())
}

fn the_previous_receiver_measures_through_this_sender() -> anyhow::Result<()> {
    let old = previous::program("pathload-rs", "pathload-rs")?;
    let net = ten_mbit_path(false)?;
    let rcv = snd_rcv_mixed(
        &net,
        Path::new(THIS),
        &old,
        "udp",
        None,
        &["--mode", "fast"],
        LIMIT,
    )?;
    let mid = measured(&rcv)?;
    eprintln!(
        "    this sender, {} receiver: {mid:.2} Mbit/s",
        previous::PREVIOUS_VERSION
    );
    Ok(())
}

fn main() -> ExitCode {
    mgrp_testbed::harness::main(
        &[],
        &[
            (
                "this_receiver_measures_through_the_previous_sender",
                this_receiver_measures_through_the_previous_sender,
            ),
            (
                "the_previous_receiver_measures_through_this_sender",
                the_previous_receiver_measures_through_this_sender,
            ),
        ],
    )
}
