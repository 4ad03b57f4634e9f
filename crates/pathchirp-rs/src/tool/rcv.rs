//! The `rcv` command: one measurement ([`super::receiver::measure`]) printed as text
//! or JSON lines, with its exit code.

use std::sync::atomic::AtomicBool;

use mgrp_tool::cli::RcvError;
use mgrp_tool::control::Transport;
use mgrp_tool::json::emit;
use serde_json::json;

use super::cli::RcvArgs;
use super::receiver::{Measurement, Progress, measure};
use super::{TOOL, plot};
use crate::Discard;

fn mbps(bps: f64) -> String {
    format!("{:.2}", bps / 1e6)
}

fn reason(d: Discard) -> &'static str {
    match d {
        Discard::Loss => "a probe was lost",
        Discard::Reorder => "probes came out of order",
        Discard::Stale => "planned before the range changed",
        Discard::Coalesced => "the receiving interface coalesced the probes",
        Discard::Unusable => "too few probes, or stamps that did not advance",
        Discard::Disturbed => "a probe of its final queue was held up beyond the path",
    }
}

/// The `rcv` command; gives the exit code.
pub(crate) fn run(args: &RcvArgs, stop: &AtomicBool) -> Result<i32, RcvError> {
    let opts = args.options().map_err(RcvError::options)?;
    let mgrp = opts.session.transport == Transport::Mgrp;
    let sender = format!("{}:{}", opts.session.sender, opts.session.port);
    let (json, verbose) = (args.json, args.verbose);
    let measured = measure(&opts, stop, &mut |p| match p {
        Progress::Started { rtt, .. } => {
            if json {
                mgrp_tool::json::start(TOOL, &opts.session, rtt, opts.config);
            } else {
                mgrp_rt::outln!(
                    "Chirping from {sender} over {} (round trip {:.2} ms): {} to {} Mbit/s by {}, {} B probes, smoothed over {} chirps",
                    opts.session.transport,
                    rtt.as_secs_f64() * 1e3,
                    mbps(opts.config.low_bps),
                    mbps(opts.config.high_bps),
                    opts.config.spread,
                    opts.config.size,
                    opts.config.smooth
                );
            }
        }
        Progress::Chirp { at, spec, report } => {
            let t = at.as_secs_f64();
            if json {
                let mut v = json!({"t_s": t, "id": spec.id, "probes": spec.packets(),
                    "smoothed": report.smoothed, "new_range_bps": report.new_range});
                match &report.outcome {
                    Ok(e) => {
                        v["estimate_bps"] = json!(e.bps);
                        v["adjusted_bps"] = json!(e.adjusted_bps);
                        v["competing_bps"] = json!(e.competing_bps);
                        v["onset_bps"] = json!(e.analysis.onset_bps);
                        v["output_bps"] = json!(e.analysis.output_bps);
                        v["tail_bps"] = json!(e.analysis.tail_bps);
                        v["excursions"] = json!(e.analysis.excursions);
                    }
                    Err(d) => v["discarded"] = json!(d),
                }
                emit(TOOL, "chirp", v);
                return;
            }
            if verbose {
                match &report.outcome {
                    Ok(e) => mgrp_rt::outln!(
                        "{t:8.2} s  chirp {:>5}: {} Mbit/s{}",
                        spec.id,
                        mbps(e.bps),
                        if mgrp {
                            format!(" (adjusted {})", mbps(e.adjusted_bps))
                        } else {
                            String::new()
                        }
                    ),
                    Err(d) => mgrp_rt::outln!(
                        "{t:8.2} s  chirp {:>5}: discarded, {}",
                        spec.id,
                        reason(*d)
                    ),
                }
            }
            if let Some(s) = report.smoothed {
                mgrp_rt::outln!(
                    "{t:8.2} s  available bandwidth {} Mbit/s{}",
                    mbps(if mgrp { s.adjusted_bps } else { s.bps }),
                    if mgrp {
                        format!(" (measured {}, less the traffic that rode)", mbps(s.bps))
                    } else {
                        String::new()
                    }
                );
            }
            if let Some((lo, hi)) = report.new_range {
                mgrp_rt::outln!(
                    "{t:8.2} s  probing range now {} to {} Mbit/s",
                    mbps(lo),
                    mbps(hi)
                );
            }
        }
    });
    let m = measured?;
    summary(&m, json, mgrp);
    mgrp_tool::exit::warn_unstamped(TOOL, m.end.unstamped);
    if let Some(path) = &args.plot
        && let Err(e) = plot::draw(path, &m, mgrp)
    {
        mgrp_tool::exit::warn(TOOL, &format!("{e:#}"));
    }
    Ok(m.exit_code())
}

fn summary(m: &Measurement, json: bool, mgrp: bool) {
    let c = &m.counts;
    let minutes = m.elapsed.as_secs_f64() / 60.0;
    let per_minute = if minutes > 0.0 {
        c.probe_bytes as f64 / minutes
    } else {
        0.0
    };
    if json {
        emit(
            TOOL,
            "result",
            json!({"last": m.last, "counts": c, "range_bps": m.range,
                "first_estimate_s": m.first_estimate, "elapsed_s": m.elapsed.as_secs_f64(),
                "probe_bytes_per_second": per_minute / 60.0, "peer_gone": m.end.peer_gone,
                "sender_failed": m.end.sender_failed}),
        );
        return;
    }
    match m.last {
        Some(s) => mgrp_rt::outln!(
            "Available bandwidth: {} Mbit/s (last estimate, over {} chirps){}",
            mbps(if mgrp { s.adjusted_bps } else { s.bps }),
            s.chirps,
            if mgrp {
                format!("; measured {} Mbit/s", mbps(s.bps))
            } else {
                String::new()
            }
        ),
        None => mgrp_rt::outln!("Available bandwidth: no estimate"),
    }
    mgrp_rt::outln!(
        "Chirps: {} ({} estimates; discarded: {} loss, {} reordering, {} stale, {} coalescence, {} unusable, {} disturbed)",
        c.chirps,
        c.estimates,
        c.loss,
        c.reorder,
        c.stale,
        c.coalesced,
        c.unusable,
        c.disturbed
    );
    mgrp_rt::outln!(
        "Probes: {:.2} MB in {:.1} s ({:.2} MB a minute); riders {:.2} MB",
        c.probe_bytes as f64 / 1e6,
        m.elapsed.as_secs_f64(),
        per_minute / 1e6,
        c.rider_bytes as f64 / 1e6
    );
    if let Some(why) = m.end.peer_gone.as_ref().or(m.end.sender_failed.as_ref()) {
        mgrp_rt::outln!("Stopped: {why}");
    }
}
