//! The tools' `--json` output: one JSON object per line on standard output, each with
//! the schema version (`schema`), the tool (`tool`) and what the line says (`event`),
//! in base units throughout: rates in bit/s (`_bps`), durations and times in seconds
//! (`_s`), sizes in bytes (`_bytes`, or a count of bytes). A failure is a line too
//! (`error`, with the exit status), and a warning (`warning`), beside the text on
//! standard error. Each tool's guide lists its events and their fields; the tests
//! check every line a tool prints against that list.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

/// The version of the lines' layout. It changes when a field is removed or changes
/// its meaning; new fields and events may come without it.
pub const SCHEMA: u32 = 1;

/// Key suffixes of units that are not base units, which no line may use, with the
/// base unit's suffix and the factor to it.
pub const NOT_BASE_UNITS: [(&str, &str, f64); 5] = [
    ("_ns", "_s", 1e-9),
    ("_us", "_s", 1e-6),
    ("_ms", "_s", 1e-3),
    ("_mbps", "_bps", 1e6),
    ("_kbps", "_bps", 1e3),
];

static ON: AtomicBool = AtomicBool::new(false);

/// Turns the JSON lines on for this process (a tool's `--json`): failures and
/// warnings are then written as lines too.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether `--json` is on.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// `v` in base units: every key at any depth that names another unit (`slot_ns`,
/// `rtt_ms`) renamed to the base unit's (`slot_s`, `rtt_s`), its numbers (or arrays
/// of numbers) converted. The estimators' own types keep the units they compute in;
/// their lines do not.
pub fn base_units(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let Some((from, to, factor)) = NOT_BASE_UNITS.iter().find(|u| k.ends_with(u.0))
                else {
                    if let Some(x) = m.get_mut(&k) {
                        base_units(x);
                    }
                    continue;
                };
                let Some(mut x) = m.remove(&k) else { continue };
                scale(&mut x, *factor);
                m.insert(format!("{}{to}", &k[..k.len() - from.len()]), x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(base_units),
        _ => {}
    }
}

fn scale(v: &mut Value, factor: f64) {
    match v {
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                *v = json!(x * factor);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| scale(x, factor)),
        _ => {}
    }
}

/// The line of `tool`'s `event` with `fields` (an object; anything else is put under
/// `value`), in base units ([`base_units`]).
pub fn line(tool: &str, event: &str, mut fields: Value) -> String {
    base_units(&mut fields);
    let mut out = Map::new();
    out.insert("schema".into(), json!(SCHEMA));
    out.insert("tool".into(), json!(tool));
    out.insert("event".into(), json!(event));
    match fields {
        Value::Object(m) => out.extend(m),
        Value::Null => {}
        other => {
            out.insert("value".into(), other);
        }
    }
    Value::Object(out).to_string()
}

/// Prints the line of `tool`'s `event` with `fields` on standard output.
pub fn emit(tool: &str, event: &str, fields: Value) {
    mgrp_rt::outln!("{}", line(tool, event, fields));
}

/// Prints `tool`'s `start` line: the sender, the transport, the round trip and the
/// measurement's `config`.
pub fn start(
    tool: &str,
    session: &crate::SessionOptions,
    rtt: std::time::Duration,
    config: impl serde::Serialize,
) {
    emit(
        tool,
        "start",
        json!({"sender": format!("{}:{}", session.sender, session.port),
            "transport": session.transport.to_string(),
            "rtt_s": rtt.as_secs_f64(), "config": config}),
    );
}

/// With `--json` on, prints that `tool` fails with `status` because of `message`.
pub fn error(tool: &str, status: i32, message: &str) {
    if enabled() {
        emit(
            tool,
            "error",
            json!({"error": message, "exit_status": status}),
        );
    }
}

/// With `--json` on, prints `tool`'s warning `message`, with `fields` beside it.
pub fn warning(tool: &str, message: &str, fields: Value) {
    if enabled() {
        let mut v = json!({ "warning": message });
        if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
            o.extend(f);
        }
        emit(tool, "warning", v);
    }
}

/// The keys anywhere in `v` (objects inside objects and arrays too) that name a unit
/// other than a base unit.
pub fn non_base_keys(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![v];
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if NOT_BASE_UNITS.iter().any(|u| k.ends_with(u.0)) {
                        out.push(k.clone());
                    }
                    todo.push(x);
                }
            }
            Value::Array(a) => todo.extend(a),
            _ => {}
        }
    }
    out
}

/// Bit/s from Mbit/s.
pub fn bps(mbps: f64) -> f64 {
    mbps * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_says_its_schema_tool_and_event() {
        let v: Value =
            serde_json::from_str(&line("pathload-rs", "start", json!({"rtt_s": 0.01}))).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["tool"], "pathload-rs");
        assert_eq!(v["event"], "start");
        assert_eq!(v["rtt_s"], 0.01);
        let v: Value = serde_json::from_str(&line("t", "x", json!(3))).unwrap();
        assert_eq!(v["value"], 3);
    }

    #[test]
    fn lines_are_in_base_units_at_any_depth() {
        let v: Value = serde_json::from_str(&line(
            "t",
            "x",
            json!({"rtt_ms": 20, "config": {"slot_ns": 5_000_000, "gaps_us": [1, 2]},
                "rates": [{"low_mbps": 1.5}], "probe_bytes": 7, "t_s": 1.0}),
        ))
        .unwrap();
        assert_eq!(v["rtt_s"], 0.02);
        assert_eq!(v["config"]["slot_s"], 0.005);
        assert_eq!(v["config"]["gaps_s"], json!([1e-6, 2e-6]));
        assert_eq!(v["rates"][0]["low_bps"], 1.5e6);
        assert_eq!(
            (v["probe_bytes"].clone(), v["t_s"].clone()),
            (json!(7), json!(1.0))
        );
        assert!(non_base_keys(&v).is_empty(), "{v}");
    }

    #[test]
    fn units_other_than_base_ones_are_found_at_any_depth() {
        let v = json!({"low_bps": 1, "a": [{"rtt_ms": 2}], "b": {"c": {"slot_ns": 3}}});
        let mut k = non_base_keys(&v);
        k.sort();
        assert_eq!(k, ["rtt_ms", "slot_ns"]);
        assert!(non_base_keys(&json!({"elapsed_s": 1, "probe_bytes": 2})).is_empty());
    }
}
