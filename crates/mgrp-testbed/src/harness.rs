//! The runner of the workspace's namespace tests, which have their own `main` (no
//! libtest harness) so that the test binary can also be the daemons it starts. It
//! speaks enough of libtest's interface for `cargo test` and `scripts/test`: name
//! filters, `--list`, one `test NAME ... ok|FAILED` line each and the `test result:`
//! summary. Without root every test fails and says why: CI runs as root.

use std::process::ExitCode;
use std::time::Instant;

/// A named test.
pub type Test = (&'static str, fn() -> anyhow::Result<()>);

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
    if args.iter().any(|a| a == "--list") {
        for (name, _) in &chosen {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let start = Instant::now();
    println!("\nrunning {} tests", chosen.len());
    let mut failures = Vec::new();
    for (name, test) in &chosen {
        let outcome = if crate::is_root() {
            std::panic::catch_unwind(test).unwrap_or_else(|_| Err(anyhow::anyhow!("panicked")))
        } else {
            Err(anyhow::anyhow!(
                "needs root to create network namespaces (CI runs as root)"
            ))
        };
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
        "\ntest result: {}. {} passed; {failed} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed == 0 { "ok" } else { "FAILED" },
        chosen.len() - failed,
        tests.len() - chosen.len(),
        start.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
