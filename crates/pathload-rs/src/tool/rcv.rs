//! The `rcv` command: one measurement ([`super::receiver::measure`]) printed as text
//! or JSON lines, with its exit code.

use std::sync::atomic::AtomicBool;

use mgrp_tool::cli::RcvError;
use mgrp_tool::control::Transport;

use super::cli::RcvArgs;
use super::output::Output;
use super::plot;
use super::receiver::{Progress, measure};
use crate::Mode;

/// The `rcv` command: a measurement printed as text or JSON; returns the exit code.
pub(crate) fn run(args: &RcvArgs, stop: &AtomicBool) -> Result<i32, RcvError> {
    let opts = args.options();
    let mode = match opts.mode {
        Mode::Slow => "slow",
        Mode::Fast => "fast",
    };
    let mut out = Output::new(args.json, args.verbose);
    let sender = format!("{}:{}", opts.session.sender, opts.session.port);
    let measured = measure(&opts, stop, &mut |p| match p {
        Progress::Started { rtt, .. } => out.start(
            &sender,
            &opts.session.transport.to_string(),
            mode,
            rtt.as_secs_f64(),
        ),
        Progress::Stream {
            spec,
            elapsed,
            bounds,
        } => out.stream_start(spec, elapsed.as_secs_f64(), bounds),
        Progress::Event(ev) => out.event(ev),
    });
    let m = measured?;
    mgrp_tool::exit::warn_unstamped(super::TOOL, m.end.unstamped);
    let o = &m.outcome;
    // Printed when the adjustment moved the range by at least the printed precision.
    let show_unadjusted = opts.session.transport == Transport::Mgrp
        && ((o.unadjusted_low - o.low).abs() >= 0.005
            || (o.unadjusted_high - o.high).abs() >= 0.005);
    out.result(
        o,
        m.elapsed.as_secs_f64(),
        show_unadjusted,
        m.interruption().as_deref(),
    );
    if let Some(path) = &args.plot
        && let Err(e) = plot::draw(path, &out.fleets, o)
    {
        mgrp_tool::exit::warn(super::TOOL, &format!("{e:#}"));
    }
    Ok(m.exit_code())
}
