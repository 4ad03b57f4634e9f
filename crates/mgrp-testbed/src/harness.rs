//! The runner of the workspace's namespace tests, which have their own `main` (no
//! libtest harness) so that the test binary can also be the daemons it starts. It
//! speaks enough of libtest's interface for `cargo test` and `scripts/test`: name
//! filters, `--list`, one `test NAME ... ok|FAILED` line each and the `test result:`
//! summary. Without root every test is ignored and says why (CI runs as root).

use std::process::ExitCode;
use std::time::Instant;

/// A named test.
pub type Test = (&'static str, fn() -> anyhow::Result<()>);

/// A program a test binary can also be, by name: its entry point, given its own
/// arguments with its name first.
pub type Role = (&'static str, fn(&[std::ffi::OsString]) -> ExitCode);

/// When this process was started as `PROGRAM NAME ARGS..` for one of `roles` (the
/// daemons a test starts are the test binary itself, so never a stale build), runs
/// that role with `NAME ARGS..` and gives its exit code; else `None`, and the binary
/// goes on to its tests.
pub fn acting_as(roles: &[Role]) -> Option<ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let asked = args.get(1)?;
    roles
        .iter()
        .find(|(name, _)| asked == name)
        .map(|(_, entry)| entry(&args[1..]))
}

/// The start of a namespace bench's `main`: runs one of `roles` when started as one
/// ([`acting_as`]), and without root says that `bench` needs it and fails. `None`:
/// go on and measure.
pub fn bench_start(bench: &str, roles: &[Role]) -> Option<ExitCode> {
    if let Some(code) = acting_as(roles) {
        return Some(code);
    }
    if !crate::is_root() {
        eprintln!("{bench}: needs root to create network namespaces; nothing measured");
        return Some(ExitCode::FAILURE);
    }
    None
}

/// The `main` of a namespace test binary: one of `roles` when started as it
/// ([`acting_as`]), else the `tests` ([`run`]).
pub fn main(roles: &[Role], tests: &[Test]) -> ExitCode {
    acting_as(roles).unwrap_or_else(|| run(tests))
}

/// Runs the `tests` the command line chooses (arguments that are not flags filter by
/// name) and reports as libtest does.
pub fn run(tests: &[Test]) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let chosen: Vec<&Test> = tests
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f)))
        .collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: {} [FILTER...] [--list]\n\nRuns the cases whose names contain a FILTER (every case without one), as root: each makes its own network namespaces. Other flags are libtest's and are ignored.\n\ncases:",
            std::env::args().next().unwrap_or_default()
        );
        for (name, _) in tests {
            println!("  {name}");
        }
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--list") {
        for (name, _) in &chosen {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let start = Instant::now();
    println!("\nrunning {} tests", chosen.len());
    let mut failures = Vec::new();
    let mut ignored = 0;
    for (name, test) in &chosen {
        if !crate::is_root() {
            println!("test {name} ... ignored, needs root to create network namespaces");
            ignored += 1;
            continue;
        }
        let outcome =
            std::panic::catch_unwind(test).unwrap_or_else(|_| Err(anyhow::anyhow!("panicked")));
        match outcome {
            Ok(()) => println!("test {name} ... ok"),
            Err(e) => {
                println!("test {name} ... FAILED");
                failures.push(format!("---- {name} ----\n{e:#}"));
            }
        }
    }
    for f in &failures {
        println!("\n{f}");
    }
    let failed = failures.len();
    println!(
        "\ntest result: {}. {} passed; {failed} failed; {ignored} ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed == 0 { "ok" } else { "FAILED" },
        chosen.len() - failed - ignored,
        tests.len() - chosen.len(),
        start.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The flag cargo gives a bench it runs (`--bench`): every bench's clap command
/// flattens this in, so cargo's flag is taken and anything else unknown is refused.
#[derive(Debug, Clone, clap::Args)]
pub struct CargoBench {
    /// Given by `cargo bench`.
    #[arg(long, hide = true)]
    pub bench: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(Debug, clap::Parser)]
    struct Opts {
        #[arg(long, default_value_t = 3)]
        runs: u32,
        #[arg(long, value_delimiter = ',', default_values = ["sender", "router"], value_parser = ["sender", "router"])]
        shapers: Vec<String>,
        #[command(flatten)]
        cargo: CargoBench,
    }

    #[test]
    fn bench_flags_are_checked_not_ignored() {
        let o =
            Opts::try_parse_from(["b", "--bench", "--runs", "5", "--shapers", "router"]).unwrap();
        assert_eq!(
            (o.runs, o.shapers.as_slice()),
            (5, ["router".to_owned()].as_slice())
        );
        assert!(o.cargo.bench);
        let o = Opts::try_parse_from(["b"]).unwrap();
        assert_eq!(o.shapers, ["sender", "router"]);
        for bad in [
            &["b", "--runs", "x"][..],
            &["b", "--shapers", "sender,nowhere"],
            &["b", "--rnus", "3"],
        ] {
            assert!(Opts::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
