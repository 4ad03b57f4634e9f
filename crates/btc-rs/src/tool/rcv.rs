//! The `rcv` command: one measurement ([`super::receiver::measure`]) printed as text
//! or JSON lines, with its exit code.

use std::sync::atomic::AtomicBool;

use mgrp_tool::cli::RcvError;
use mgrp_tool::json::emit;
use serde_json::json;

use super::TOOL;
use super::cli::RcvArgs;
use super::receiver::{Measurement, measure};
use crate::squeezed;

/// The `rcv` command; gives the exit code.
pub(crate) fn run(args: &RcvArgs, stop: &AtomicBool) -> Result<i32, RcvError> {
    let opts = args.options().map_err(RcvError::options)?;
    let m = measure(&opts, stop)?;
    if args.json {
        emit(
            TOOL,
            "result",
            json!({"sender": opts.session.sender,
                "transport": opts.session.transport.to_string(),
                "rtt_s": m.rtt.as_secs_f64(),
                "capacity_bps": m.capacity_bps, "capacity": m.capacity,
                "squeezed": m.squeeze, "squeezed_skipped": m.squeeze_skipped,
                "probe_bytes": m.probe_bytes, "rider_bytes": m.rider_bytes,
                "elapsed_s": m.elapsed.as_secs_f64(),
                "peer_gone": m.end.peer_gone, "sender_failed": m.end.sender_failed}),
        );
    } else {
        print_text(&m);
    }
    if let (Some(path), Some(s), Some(bps)) = (&args.plot, &m.squeeze, m.capacity_bps)
        && let Err(e) = crate::tool::plot::histograms(path, s, bps)
    {
        mgrp_tool::exit::warn(TOOL, &format!("cannot draw {}: {e:#}", path.display()));
    }
    if let Some(g) = &m.end.peer_gone {
        eprintln!("{TOOL}: the sender went away: {g}");
    }
    if let Some(f) = &m.end.sender_failed {
        eprintln!("{TOOL}: the sender could not send: {f}");
    }
    Ok(m.exit_code())
}

fn print_text(m: &Measurement) {
    match (&m.capacity, m.capacity_bps) {
        (Some(c), Some(bps)) => mgrp_rt::outln!(
            "Capacity {:.2} Mbit/s (median of {} gaps, interquartile spread {:.2}); bunch averages {}; {} lost",
            bps / 1e6,
            c.gaps,
            c.spread.unwrap_or(0.0),
            c.bunch_bps
                .iter()
                .map(|b| b.map_or("-".into(), |b| format!("{:.2}", b / 1e6)))
                .collect::<Vec<_>>()
                .join(", "),
            c.lost
        ),
        (None, Some(bps)) => mgrp_rt::outln!("Capacity {:.2} Mbit/s (given)", bps / 1e6),
        (_, None) => {
            mgrp_rt::outln!("Capacity: none (no two consecutive bunch packets arrived apart)");
        }
    }
    if let Some(s) = &m.squeeze {
        mgrp_rt::outln!(
            "Squeezed pairs: {} (score {:+}); pairs 500/1500: {}/{}, {} lost; squeezed {:.0} % / {:.0} %; modes at {:?} / {:?} µs",
            match s.class {
                squeezed::PathClass::TightLikeNarrow =>
                    "tight like narrow (queues at the narrow link)",
                squeezed::PathClass::TightUnlikeNarrow =>
                    "tight unlike narrow (queues at a faster link)",
                squeezed::PathClass::Undecided => "undecided",
            },
            s.score,
            s.pairs[0],
            s.pairs[1],
            s.lost,
            s.squeezed[0] * 100.0,
            s.squeezed[1] * 100.0,
            s.modes[0]
                .iter()
                .map(|&b| b as u64 * s.bin_ns / 1000)
                .collect::<Vec<_>>(),
            s.modes[1]
                .iter()
                .map(|&b| b as u64 * s.bin_ns / 1000)
                .collect::<Vec<_>>(),
        );
    }
    if let Some(why) = &m.squeeze_skipped {
        mgrp_rt::outln!("Squeezed pairs not sent: {why}");
    }
    mgrp_rt::outln!(
        "Probes {:.3} MB (riders {:.3} MB) in {:.1} s; round trip {:.2} ms",
        m.probe_bytes as f64 / 1e6,
        m.rider_bytes as f64 / 1e6,
        m.elapsed.as_secs_f64(),
        m.rtt.as_secs_f64() * 1e3
    );
}
