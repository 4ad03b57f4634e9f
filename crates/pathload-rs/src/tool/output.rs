//! What the receiver prints: pathload's familiar lines, or JSON lines, and a progress
//! line while it runs on a terminal.

use std::io::{IsTerminal, Write};

use crate::search::{Bound, Bounds};
use crate::{Adjustment, Event, FleetReport, FleetVerdict, Outcome, StreamSpec};
use mgrp_tool::json::{bps, emit};
use serde_json::{Value, json};

use super::TOOL;

/// Where and how results are printed.
#[derive(Debug)]
pub(crate) struct Output {
    json: bool,
    verbose: bool,
    progress: bool,
    progress_shown: bool,
    pub(crate) fleets: Vec<FleetReport>,
}

fn range(lo: Option<f64>, hi: Option<f64>) -> String {
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    format!("{} - {}", f(lo), f(hi))
}

/// The search's bounds as JSON, in bit/s.
fn bounds_json(b: &Bounds) -> Value {
    let one = |x: Option<Bound>| {
        x.map_or(Value::Null, |x| {
            json!({"rate_bps": bps(x.rate), "competing_bps": bps(x.competing),
                "unaccounted_bps": bps(x.unaccounted)})
        })
    };
    json!({"rmin": one(b.rmin), "rmax": one(b.rmax), "gmin": one(b.gmin), "gmax": one(b.gmax)})
}

/// A fleet's report as JSON, in bit/s.
fn fleet_json(f: &FleetReport) -> Value {
    json!({"fleet": f.fleet, "requested_rate_bps": bps(f.requested_rate),
        "actual_rate_bps": bps(f.actual_rate), "competing_rate_bps": bps(f.competing_rate),
        "verdict": f.verdict, "end": f.end, "streams": f.streams, "trends": f.trends,
        "bounds": bounds_json(&f.bounds), "aim_bps": f.aim.map(bps),
        "hidden_trend": f.hidden_trend})
}

fn bounds_lines(b: &Bounds) -> (String, String) {
    (
        range(b.rmin.map(|x| x.rate), b.rmax.map(|x| x.rate)),
        range(b.gmin.map(|x| x.rate), b.gmax.map(|x| x.rate)),
    )
}

impl Output {
    pub(crate) fn new(json: bool, verbose: bool) -> Self {
        Self {
            json,
            verbose,
            progress: !json && std::io::stderr().is_terminal(),
            progress_shown: false,
            fleets: Vec::new(),
        }
    }

    fn line(&mut self, s: &str) {
        self.clear_progress();
        mgrp_rt::outln!("{s}");
    }

    fn clear_progress(&mut self) {
        if self.progress_shown {
            eprint!("\r\x1b[K");
            self.progress_shown = false;
        }
    }

    /// The run's header.
    pub(crate) fn start(&mut self, sender: &str, transport: &str, mode: &str, rtt_s: f64) {
        if self.json {
            self.emit(
                "start",
                json!({"sender": sender, "transport": transport, "mode": mode, "rtt_s": rtt_s}),
            );
        } else {
            self.line(&format!(
                "Receiver: sender {sender}, transport {transport}, mode {mode}, RTT {:.2} ms",
                rtt_s * 1e3
            ));
        }
    }

    fn emit(&mut self, event: &str, fields: Value) {
        self.clear_progress();
        emit(TOOL, event, fields);
    }

    /// A stream is about to be asked for.
    pub(crate) fn stream_start(&mut self, s: &StreamSpec, elapsed: f64, bounds: &Bounds) {
        if s.stream == 0 && !self.json {
            self.line(&format!(
                "Receiving Fleet {}, Rate {:.2}Mbps",
                s.fleet, s.rate
            ));
        }
        if self.progress {
            let (r, _) = bounds_lines(bounds);
            eprint!(
                "\r\x1b[Kfleet {} at {:.2} Mbps, stream {}, range {r}, {elapsed:.1} s",
                s.fleet,
                s.rate,
                s.stream + 1
            );
            let _ = std::io::stderr().flush();
            self.progress_shown = true;
        }
    }

    /// Something happened in the estimator.
    pub(crate) fn event(&mut self, ev: &Event) {
        match ev {
            Event::Train {
                id,
                adr,
                coalescence,
            } => {
                if self.json && self.verbose {
                    self.emit(
                        "train",
                        json!({"id": id, "adr_bps": adr.map(bps), "coalescence": coalescence}),
                    );
                } else if !self.json {
                    match adr {
                        Some(a) if self.verbose => self.line(&format!(
                            "  Back-to-back train {id}: {a:.2} Mbps{}",
                            if *coalescence { " (interrupt coalescence)" } else { "" }
                        )),
                        Some(_) => {}
                        None => self.line(&format!(
                            "  Back-to-back train {id} lost or reordered packets; trying a shorter one"
                        )),
                    }
                }
            }
            Event::Start {
                adr,
                omega,
                chi,
                max_rate,
            } => {
                if self.json {
                    self.emit(
                        "initial_rate",
                        json!({"adr_bps": bps(*adr), "omega_bps": bps(*omega),
                            "chi_bps": bps(*chi), "max_rate_bps": bps(*max_rate)}),
                    );
                } else {
                    self.line(&format!("ADR [Mbps] : {adr:.2}"));
                    self.line(&format!(
                        "Resolution {omega:.2} Mbps, grey resolution {chi:.2} Mbps, highest rate {max_rate:.2} Mbps"
                    ));
                }
            }
            Event::Stream {
                fleet,
                stream,
                analysis,
            } => {
                if self.json && self.verbose {
                    let mut v = serde_json::to_value(analysis).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("fleet".into(), json!(fleet));
                        o.insert("stream".into(), json!(stream));
                    }
                    self.emit("stream", v);
                } else if self.verbose {
                    let f = |v: Option<f64>| {
                        v.map_or_else(|| "  -  ".to_string(), |v| format!("{v:5.2}"))
                    };
                    self.line(&format!(
                        "  Stream {stream:2}: PCT {} PDT {} loss {:4.1}% : {}",
                        f(analysis.pct),
                        f(analysis.pdt),
                        analysis.loss * 100.0,
                        analysis
                            .trend
                            .map_or_else(|| "discarded".to_string(), |t| t.letter().to_string())
                    ));
                }
            }
            Event::Fleet(f) => {
                self.fleets.push(f.clone());
                if self.json {
                    self.emit("fleet", fleet_json(f));
                } else {
                    let verdict = match f.verdict {
                        FleetVerdict::Increasing => "INCREASING",
                        FleetVerdict::NoTrend => "NO TREND",
                        FleetVerdict::Grey => "GREY",
                        FleetVerdict::Unusable => "UNUSABLE (repeated)",
                        FleetVerdict::RateMissed => {
                            "DISCARDED: far from the rate asked for (repeated)"
                        }
                    };
                    let competing = if f.competing_rate > 0.0 {
                        format!(", riders {:.2} Mbps", f.competing_rate)
                    } else {
                        String::new()
                    };
                    let asked = if f.verdict == FleetVerdict::RateMissed {
                        format!(" (asked {:.2})", f.requested_rate)
                    } else {
                        String::new()
                    };
                    let hidden = if f.hidden_trend {
                        " (yet its delays grew: trend hidden)"
                    } else {
                        ""
                    };
                    self.line(&format!(
                        "  Fleet {}: sent at {:.2} Mbps{asked}{competing}: {verdict}{hidden} [{}]",
                        f.fleet, f.actual_rate, f.trends
                    ));
                    if self.verbose {
                        let (r, g) = bounds_lines(&f.bounds);
                        self.line(&format!("  Rmin-Rmax : {r} Mbps"));
                        self.line(&format!("  Gmin-Gmax : {g} Mbps"));
                    }
                }
            }
        }
    }

    /// The result.
    pub(crate) fn result(
        &mut self,
        o: &Outcome,
        seconds: f64,
        show_unadjusted: bool,
        note: Option<&str>,
    ) {
        let converged = o.reason.converged();
        if self.json {
            let mut v = json!({
                "converged": converged,
                "stop_reason": o.reason,
                "elapsed_s": seconds,
                "fleets": o.fleets,
                "streams": o.streams,
                "streams_kernel_stamped": o.streams_kernel_stamped,
                "probe_bytes": o.probe_bytes,
                "rider_bytes": o.rider_bytes,
                "riding_probe_bytes": o.riding_probe_bytes,
                "adjustment": o.adjustment,
                "unaccounted_bps": bps(o.unaccounted),
                "hidden_trend_fleets": o.hidden_trend_fleets,
                "adr_bps": o.adr.map(bps),
                "omega_bps": bps(o.omega),
                "chi_bps": bps(o.chi),
                "stopped_early": note,
            });
            if let Some(obj) = v.as_object_mut() {
                if converged {
                    obj.insert("low_bps".into(), json!(bps(o.low)));
                    obj.insert("high_bps".into(), json!(bps(o.high)));
                    obj.insert("unadjusted_low_bps".into(), json!(bps(o.unadjusted_low)));
                    obj.insert("unadjusted_high_bps".into(), json!(bps(o.unadjusted_high)));
                } else {
                    if o.lower_bound {
                        // Not a range, but an answer: at least the highest rate.
                        obj.insert("lower_bound_bps".into(), json!(bps(o.low)));
                        obj.insert(
                            "unadjusted_lower_bound_bps".into(),
                            json!(bps(o.unadjusted_low)),
                        );
                    }
                    // No range that reads like an answer: what the search had seen.
                    obj.insert("no_estimate".into(), json!(o.reason.describe()));
                    obj.insert(
                        "bounds".into(),
                        json!({
                            "above_bps": bps(o.low),
                            "below_bps": bps(o.high),
                            "unadjusted_above_bps": bps(o.unadjusted_low),
                            "unadjusted_below_bps": bps(o.unadjusted_high),
                        }),
                    );
                }
            }
            self.emit("result", v);
            return;
        }
        self.line("");
        self.line("*****  RESULT *****");
        if let Some(n) = note {
            self.line(&format!("Stopped early: {n}"));
        }
        if converged {
            self.line(&format!(
                "Available bandwidth range : {:.2} - {:.2} (Mbps)",
                o.low, o.high
            ));
            if show_unadjusted {
                self.line(&format!(
                    "Unadjusted range          : {:.2} - {:.2} (Mbps)  (application traffic rode in the probes)",
                    o.unadjusted_low, o.unadjusted_high
                ));
            }
            if o.hidden_trend_fleets > 0 {
                self.line(&format!(
                    "Trend hidden              : {} fleet(s) judged no trend had delays growing beneath; cross traffic that comes in bursts hides the trend, and the range may read high",
                    o.hidden_trend_fleets
                ));
            }
            if o.adjustment == Adjustment::Incomplete {
                self.line(&format!(
                    "Adjustment incomplete     : {:.2} Mbps of application traffic rode in streams during which the sender counted none arriving; the range may read high by up to that",
                    o.unaccounted
                ));
            }
        } else if o.lower_bound {
            self.line(&format!(
                "Available bandwidth       : at least {:.2} (Mbps), the highest rate the sender reached (no trend there)",
                o.low
            ));
        } else {
            self.line(&format!("No estimate: {}.", o.reason.describe()));
            self.line(&format!(
                "Bounds seen so far        : above {:.2}, below {:.2} (Mbps); not a measurement",
                o.low, o.high
            ));
        }
        self.line(&format!("Ended because: {}", o.reason.describe()));
        self.line(&format!("Measurements finished at {}", utc_now_string()));
        self.line(&format!("Measurement latency is {seconds:.2} sec"));
        let share = if o.probe_bytes > 0 {
            o.riding_probe_bytes as f64 * 100.0 / o.probe_bytes as f64
        } else {
            0.0
        };
        self.line(&format!(
            "Fleets {}, streams {}, probe bytes {} ({share:.0} % carried riders), rider bytes {}",
            o.fleets, o.streams, o.probe_bytes, o.rider_bytes
        ));
    }
}

/// Now as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc_now_string() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_string(secs)
}

/// A Unix time as `YYYY-MM-DD HH:MM:SS UTC` (days to a civil date after Howard
/// Hinnant's algorithm).
fn utc_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc_string(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc_string(1_795_000_000), "2026-11-18 11:06:40 UTC");
        assert_eq!(super::utc_string(951_782_400), "2000-02-29 00:00:00 UTC");
    }
}
