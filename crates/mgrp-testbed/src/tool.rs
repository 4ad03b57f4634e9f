//! A measurement tool's two commands on a two-host testbed, as every tool's namespace
//! tests run them: the daemons a transport needs, `snd` on A, `rcv --json` on B, and
//! what `rcv` printed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use crate::{ADDR_A, Daemon, Netns, Process, TwoHosts, daemon_pair};

/// The path the tools' namespace tests measure: A and B with a 10 Mbit/s tbf
/// bottleneck of one packet's burst, on a router between them (`router`) or on A's
/// egress.
pub fn ten_mbit_path(router: bool) -> anyhow::Result<TwoHosts> {
    TwoHosts::new(&crate::TwoHostOptions {
        bottleneck: Some(("10mbit".into(), "1540".into())),
        router,
        delay: None,
    })
}

/// A second address of B, outside the tunnel's routes: traffic to it crosses the
/// bottleneck beside the probes, as another host's traffic would.
pub const OTHER_B: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 77, 0, 3);

/// Gives B its [`OTHER_B`] address.
pub fn add_other_b(net: &TwoHosts) -> anyhow::Result<()> {
    net.b
        .ip(&["addr", "add", &format!("{OTHER_B}/24"), "dev", &net.veth_b])?;
    Ok(())
}

/// On/off UDP from A to [`OTHER_B`], across the bottleneck beside the probes: 40 Mbit/s
/// for 100 ms every second. On [`ten_mbit_path`] it fills the 100 ms queue and drops
/// for tens of ms each second, then the queue drains.
pub fn bursts_to_other_b(net: &TwoHosts) -> anyhow::Result<crate::traffic::Source> {
    let mut mbps = vec![0.0; 10];
    mbps[0] = 40.0;
    let steps = crate::traffic::Steps {
        mbps,
        step: Duration::from_millis(100),
    };
    crate::traffic::udp_steps(&net.a, &net.b, OTHER_B.into(), 9000, steps, 1490)
}

/// The workspace's sender (`snd`) as a thread in `ns`, serving receivers one after
/// another with `so` (named "bench snd") until `stop` is set.
pub fn serve_in(
    ns: &Netns,
    mut so: mgrp_tool::ServeOptions,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    let stop = stop.clone();
    so.name = "bench snd".into();
    ns.spawn("sender", move || {
        let server = mgrp_tool::Server::bind(so)?;
        server.serve(true, &stop, &mut |_| {})
    })
}

/// The daemons `transport` needs: over `mgrp` one on each host (this program acting
/// as mgrpd when started as `PROGRAM mgrpd …`, given `args`), none over `udp`.
pub fn daemons_for(
    net: &TwoHosts,
    transport: &str,
    args: &[&str],
) -> anyhow::Result<Option<(Daemon, Daemon)>> {
    if transport != "mgrp" {
        return Ok(None);
    }
    let me = std::env::current_exe()?;
    daemon_pair(net, &me, &["mgrpd"], args).map(Some)
}

/// What `rcv` printed and how it ended.
#[derive(Debug)]
pub struct Rcv {
    /// Everything it printed.
    pub log: String,
    /// The JSON lines of it.
    pub lines: Vec<Value>,
    /// Its exit code (-1 if a signal ended it).
    pub code: i32,
    /// Its wall time.
    pub wall: Duration,
}

impl Rcv {
    /// The lines whose `event` is `event`.
    pub fn events<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.lines.iter().filter(move |v| v["event"] == event)
    }

    /// The `"event": "result"` line.
    pub fn result(&self) -> anyhow::Result<&Value> {
        self.events("result")
            .next()
            .with_context(|| format!("no result line (exit {}): {}", self.code, self.log))
    }

    /// Fails, with the log, unless `rcv` exited with 0.
    pub fn succeeded(&self) -> anyhow::Result<&Self> {
        ensure!(
            self.code == 0,
            "rcv exited with {}: {}",
            self.code,
            self.log
        );
        Ok(self)
    }
}

/// [`snd_rcv`] for a tool that measures for `--duration SECONDS`: `rcv` gets
/// `rcv_args` and that flag, and 30 s beyond it to end.
pub fn snd_rcv_for(
    net: &TwoHosts,
    bin: &Path,
    transport: &str,
    daemons: Option<&(Daemon, Daemon)>,
    rcv_args: &[&str],
    seconds: u64,
) -> anyhow::Result<Rcv> {
    let duration = seconds.to_string();
    let mut args = rcv_args.to_vec();
    args.extend(["--duration", &duration]);
    snd_rcv(
        net,
        bin,
        transport,
        daemons,
        &args,
        Duration::from_secs(seconds + 30),
    )
}

/// Runs `bin snd --transport T` on A and `bin rcv --sender A --transport T --json
/// RCV_ARGS` on B, each with its host's daemon socket when `daemons` are given; waits
/// up to `limit` for `rcv` and then for `snd`, which serves one measurement and must
/// end cleanly. `MGRP_TEST_LOG=1` prints both logs.
pub fn snd_rcv(
    net: &TwoHosts,
    bin: &Path,
    transport: &str,
    daemons: Option<&(Daemon, Daemon)>,
    rcv_args: &[&str],
    limit: Duration,
) -> anyhow::Result<Rcv> {
    snd_rcv_mixed(net, bin, bin, transport, daemons, rcv_args, limit)
}

/// [`snd_rcv`] with `snd` from one build and `rcv` from another (a mixed-version
/// test: one of them is [`crate::previous::program`]). `rcv`'s JSON lines are
/// checked against this version's guide only when `rcv` is this version's.
pub fn snd_rcv_mixed(
    net: &TwoHosts,
    snd_bin: &Path,
    rcv_bin: &Path,
    transport: &str,
    daemons: Option<&(Daemon, Daemon)>,
    rcv_args: &[&str],
    limit: Duration,
) -> anyhow::Result<Rcv> {
    let mut snd: Vec<String> = ["snd", "--transport", transport].map(String::from).to_vec();
    let mut rcv: Vec<String> = ["rcv", "--sender", &ADDR_A.to_string(), "--transport"]
        .map(String::from)
        .to_vec();
    rcv.extend([transport.into(), "--json".into()]);
    rcv.extend(rcv_args.iter().map(ToString::to_string));
    if let Some((a, b)) = daemons {
        snd.extend(["--socket".into(), a.socket.display().to_string()]);
        rcv.extend(["--socket".into(), b.socket.display().to_string()]);
    }
    let mut sender = Process::spawn(&net.a, snd_bin, &snd)?;
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut receiver = Process::spawn(&net.b, rcv_bin, &rcv)?;
    let Some(status) = receiver.wait(limit) else {
        bail!("rcv did not end within {limit:?}: {}", receiver.log());
    };
    let wall = started.elapsed();
    let log = receiver.log();
    if std::env::var_os("MGRP_TEST_LOG").is_some() {
        eprintln!("--- rcv ---\n{log}--- snd ---\n{}", sender.log());
    }
    ensure!(
        sender
            .wait(Duration::from_secs(10))
            .is_some_and(|s| s.success()),
        "snd did not end cleanly: {}",
        sender.log()
    );
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if !crate::previous::is_previous(rcv_bin) {
        check_schema(&lines).with_context(|| format!("rcv's JSON lines: {log}"))?;
    }
    Ok(Rcv {
        log,
        lines,
        code: status.code().unwrap_or(-1),
        wall,
    })
}

/// An event of a tool's JSON lines: its name and its fields, each with whether it is
/// always there.
pub type DocumentedEvent = (String, Vec<(String, bool)>);

/// The events of `tool`'s JSON lines as its guide (`docs/TOOL.md`, its "JSON lines"
/// table) lists them: each event with its fields, and whether each is always there.
pub fn documented_schema(tool: &str) -> anyhow::Result<Vec<DocumentedEvent>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(format!("{tool}.md"));
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let section = text
        .split("### JSON lines")
        .nth(1)
        .with_context(|| format!("{}: no \"JSON lines\" section", path.display()))?;
    let mut events = Vec::new();
    for row in section.lines().skip_while(|l| !l.starts_with('|')) {
        let Some(row) = row.strip_prefix("| `") else {
            if row.starts_with('|') {
                continue;
            }
            break;
        };
        let mut cells = row.split(" | ");
        let event = cells.next().unwrap_or("").split('`').next().unwrap_or("");
        let fields = cells
            .next()
            .unwrap_or("")
            .trim_end_matches(" |")
            .split(", ")
            .filter_map(|f| {
                let always = !f.ends_with('?');
                let name = f.trim_end_matches('?').trim_matches('`');
                (!name.is_empty()).then(|| (name.to_owned(), always))
            })
            .collect();
        events.push((event.to_owned(), fields));
    }
    ensure!(events.len() >= 3, "{}: only {events:?}", path.display());
    Ok(events)
}

/// Checks JSON lines against their tool's guide: the schema version, the tool and an
/// event the guide lists on every line, every field always there present, no field
/// the guide does not list, and no unit but base units at any depth.
pub fn check_schema(lines: &[Value]) -> anyhow::Result<()> {
    let mut guides = std::collections::BTreeMap::new();
    for line in lines {
        ensure!(
            line["schema"] == mgrp_tool::json::SCHEMA,
            "no schema {}: {line}",
            mgrp_tool::json::SCHEMA
        );
        let tool = line["tool"].as_str().context("no tool")?;
        let event = line["event"].as_str().context("no event")?;
        if !guides.contains_key(tool) {
            guides.insert(tool.to_owned(), documented_schema(tool)?);
        }
        let (_, fields) = guides[tool]
            .iter()
            .find(|(e, _)| e == event)
            .with_context(|| format!("{tool}'s guide lists no {event} event: {line}"))?;
        let keys = line.as_object().context("not an object")?;
        for (name, always) in fields {
            ensure!(
                !always || keys.contains_key(name),
                "{tool} {event} line without {name}: {line}"
            );
        }
        for key in keys.keys() {
            ensure!(
                ["schema", "tool", "event"].contains(&key.as_str())
                    || fields.iter().any(|(n, _)| n == key),
                "{tool}'s guide does not list {key} in {event} lines: {line}"
            );
        }
        let odd = mgrp_tool::json::non_base_keys(line);
        ensure!(odd.is_empty(), "{tool} {event}: not base units: {odd:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(tool: &str, event: &str, fields: Value) -> Value {
        serde_json::from_str(&mgrp_tool::json::line(tool, event, fields)).unwrap()
    }

    #[test]
    fn every_guide_has_its_table_with_errors_and_warnings() {
        for tool in ["pathload-rs", "pathchirp-rs", "badabing-rs", "btc-rs"] {
            let events = documented_schema(tool).unwrap();
            for e in ["result", "error", "warning"] {
                assert!(events.iter().any(|(n, _)| n == e), "{tool}: {e}");
            }
        }
    }

    #[test]
    fn lines_are_held_to_the_guide() {
        let ok = line("btc-rs", "error", json!({"error": "x", "exit_status": 6}));
        check_schema(&[ok]).unwrap();
        for (bad, says) in [
            (
                line("btc-rs", "error", json!({"error": "x"})),
                "without exit_status",
            ),
            (
                line(
                    "btc-rs",
                    "error",
                    json!({"error": "x", "exit_status": 6, "why": 1}),
                ),
                "does not list why",
            ),
            (line("btc-rs", "nonsense", json!({})), "no nonsense event"),
            (json!({"tool": "btc-rs", "event": "error"}), "no schema"),
        ] {
            let e = check_schema(&[bad]).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        let optional = line(
            "pathchirp-rs",
            "chirp",
            json!({"t_s": 1.0, "id": 3, "probes": 20, "smoothed": null, "new_range_bps": null}),
        );
        check_schema(&[optional]).unwrap();
    }
}
