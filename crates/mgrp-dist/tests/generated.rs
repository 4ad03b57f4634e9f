//! The man pages and completions `mgrp-dist` makes: each page renders without a
//! warning and names every flag of its command; each shell takes its completions
//! (bash, zsh and fish parse them, and bash then completes the program).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `program` (its package, in scripts/system-packages, is named if it is
/// missing).
fn run(program: &str, args: &[&str]) -> std::process::Output {
    mgrp_testbed::packages::require(&[program]).unwrap();
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// Every long flag of `command` and of its arguments that take one.
fn long_flags(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

#[test]
fn every_page_renders_and_names_each_flag_of_its_command() {
    let dir = mgrp_testbed::TempDir::new("mgrp-dist-man").unwrap();
    let files = mgrp_dist::write_man_pages(dir.path()).unwrap();
    let mut pages = 0;
    for p in mgrp_dist::programs() {
        for (name, command) in mgrp_dist::pages(p.command) {
            let path = dir.path().join(format!("{name}.{}", p.section));
            assert!(files.contains(&path), "{} not written", path.display());
            let source = std::fs::read_to_string(&path).unwrap();
            for flag in long_flags(&command) {
                // roff writes a hyphen as \-.
                let roff = format!("\\-\\-{}", flag.replace('-', "\\-"));
                assert!(source.contains(&roff), "{name}'s page lacks --{flag}");
            }
            // -k: through preconv, as man reads a page (the help texts hold UTF-8).
            let out = run(
                "groff",
                &[
                    "-k",
                    "-man",
                    "-Tutf8",
                    "-ww",
                    "-P-bcou",
                    path.to_str().unwrap(),
                ],
            );
            let warnings = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && warnings.is_empty(),
                "{name}: {warnings}"
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("NAME") && text.contains(&name),
                "{name}: {text}"
            );
            pages += 1;
        }
    }
    assert_eq!(pages, files.len());
    // The daemons in section 8, their subcommands with them.
    for page in [
        "mgrpd.8",
        "mgrpd-genkey.8",
        "mgrp-overlay.8",
        "mgrpctl.1",
        "mgrpctl-stats.1",
        "pathload-rs-rcv.1",
    ] {
        assert!(dir.path().join(page).exists(), "{page} missing: {files:?}");
    }
}

fn completions(dir: &Path, shell: clap_complete::Shell, program: &str) -> PathBuf {
    let (_, sub) = mgrp_dist::SHELLS.iter().find(|(s, _)| *s == shell).unwrap();
    dir.join(sub)
        .join(mgrp_dist::completion_file(shell, program))
}

#[test]
fn each_shell_takes_the_completions() {
    use clap_complete::Shell;
    let dir = mgrp_testbed::TempDir::new("mgrp-dist-completions").unwrap();
    let files = mgrp_dist::write_completions(dir.path()).unwrap();
    let names: Vec<String> = mgrp_dist::programs()
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    assert_eq!(files.len(), names.len() * mgrp_dist::SHELLS.len());
    for name in &names {
        let bash = completions(dir.path(), Shell::Bash, name);
        let zsh = completions(dir.path(), Shell::Zsh, name);
        let fish = completions(dir.path(), Shell::Fish, name);
        for (shell, file) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish)] {
            let out = run(shell, &["-n", file.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{shell} does not parse {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Sourced, bash completes the program with the function the file defines.
        let script = format!("source '{}' && complete -p {name}", bash.display());
        let out = run("bash", &["-c", &script]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains(name.as_str()),
            "{name}: {said}"
        );
    }
}
