//! The `rcv` command: one measurement ([`super::receiver::measure`]) printed as text
//! or JSON lines, with its exit code.

use std::sync::atomic::AtomicBool;

use mgrp_tool::cli::RcvError;
use mgrp_tool::json::emit;
use serde_json::json;

use super::TOOL;
use super::cli::RcvArgs;
use super::receiver::{Progress, measure};
use crate::Estimate;

/// The estimate in words, one line.
fn line(e: &Estimate, slot_ms: f64) -> String {
    let o = e.outcomes;
    let duration = match (e.duration_slots, e.duration_ci_slots) {
        (Some(d), Some(ci)) => format!(
            "mean episode {d:.2} ± {ci:.2} slots ({:.1} ± {:.1} ms)",
            d * slot_ms,
            ci * slot_ms
        ),
        _ => "no episode boundary seen".to_string(),
    };
    format!(
        "loss-episode frequency {:.4} ± {:.4}, {duration}; loss rate {:.4}; experiments {} (00 {}, 01 {}, 10 {}, 11 {})",
        e.frequency,
        e.frequency_ci,
        e.loss_rate,
        o.total(),
        o.n00,
        o.n01,
        o.n10,
        o.n11
    )
}

/// The `rcv` command; gives the exit code.
pub(crate) fn run(args: &RcvArgs, stop: &AtomicBool) -> Result<i32, RcvError> {
    let opts = args.options().map_err(RcvError::options)?;
    let slot_ms = opts.config.slot_ns as f64 / 1e6;
    let sender = format!("{}:{}", opts.session.sender, opts.session.port);
    let json = args.json;
    let measured = measure(&opts, stop, &mut |p| match p {
        Progress::Started { rtt } => {
            if json {
                mgrp_tool::json::start(TOOL, &opts.session, rtt, opts.config);
            } else {
                mgrp_rt::outln!(
                    "Probing from {sender} over {} (round trip {:.2} ms): slots of {slot_ms} ms, p = {}, {} packets of {} B per probe",
                    opts.session.transport,
                    rtt.as_secs_f64() * 1e3,
                    opts.config.p,
                    opts.config.packets,
                    opts.config.size
                );
            }
        }
        Progress::Report { at, estimate } => {
            if json {
                emit(
                    TOOL,
                    "estimate",
                    json!({"t_s": at.as_secs_f64(), "estimate": estimate}),
                );
            } else {
                mgrp_rt::outln!("{:8.1} s  {}", at.as_secs_f64(), line(estimate, slot_ms));
            }
        }
    });
    let m = measured?;
    let e = &m.estimate;
    if json {
        emit(
            TOOL,
            "result",
            json!({"estimate": e, "windows": m.windows,
                "sampled_s": m.sampled.as_secs_f64(), "elapsed_s": m.elapsed.as_secs_f64(),
                "peer_gone": m.end.peer_gone, "sender_failed": m.end.sender_failed}),
        );
    } else {
        mgrp_rt::outln!("Result: {}", line(e, slot_ms));
        mgrp_rt::outln!(
            "Slots: {} probed ({} congested by loss, {} by delay alone), {:.1} s sampled of {:.1} s; probes {:.2} MB ({} packets, {} lost), riders {:.2} MB",
            e.slots,
            e.congested_by_loss,
            e.congested_by_delay,
            m.sampled.as_secs_f64(),
            m.elapsed.as_secs_f64(),
            e.probe_bytes as f64 / 1e6,
            e.packets_sent,
            e.packets_lost,
            e.rider_bytes as f64 / 1e6
        );
        if let Some(why) = m.end.peer_gone.as_ref().or(m.end.sender_failed.as_ref()) {
            mgrp_rt::outln!("Stopped: {why}");
        }
    }
    mgrp_tool::exit::warn_unstamped(TOOL, m.end.unstamped);
    Ok(m.exit_code())
}
