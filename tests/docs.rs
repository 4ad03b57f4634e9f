//! The documentation's links and paths lead somewhere: every relative link in the
//! README and the guides names a file of the repository (and, with `#anchor`, one of
//! its headings), and every repository path written in backticks exists. The guides
//! the code and `--help` point to exist too, and the lists the guides keep by hand
//! (fuzz targets, examples, the flags the example configuration names) match what is
//! there.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files checked: the README and everything under `docs/` and `crates/`
/// (not the committed results' data).
fn documents() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs"), root().join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// GitHub's anchor of a heading: lower case, spaces to dashes, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of inline links `[text](target)` outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// Repository paths in backticks: words that start with a top-level directory.
fn paths(text: &str) -> Vec<String> {
    const TOP: [&str; 7] = [
        "crates/",
        "docs/",
        "scripts/",
        "examples/",
        "tests/",
        "fuzz/",
        ".ci/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| code.split_whitespace())
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .map(|w| w.trim_end_matches([',', '.', ';', ':', ')']).to_string())
        .filter(|w| !w.contains(['*', '<', '{']))
        .collect()
}

#[test]
fn every_relative_link_and_path_in_the_documentation_exists() {
    let mut broken = Vec::new();
    let docs = documents();
    assert!(docs.len() >= 7, "{docs:?}");
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        let here = doc.parent().unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, frag) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                doc.clone()
            } else {
                here.join(file)
            };
            if !target.exists() {
                broken.push(format!("{name}: link {link}: no such file"));
                continue;
            }
            if !frag.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let heads = anchors(&std::fs::read_to_string(&target).unwrap());
                if !heads.iter().any(|h| h == frag) {
                    broken.push(format!("{name}: link {link}: no heading #{frag}"));
                }
            }
        }
        for path in paths(&text) {
            if !root().join(&path).exists() {
                broken.push(format!("{name}: path `{path}` does not exist"));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_guides_the_code_points_to_exist() {
    for guide in ["mgrpd", "pathload-rs", "overlay", "development", "testbed"] {
        let p = root().join("docs").join(format!("{guide}.md"));
        assert!(Path::new(&p).exists(), "{}", p.display());
    }
    // What --help and the crate docs name.
    for (file, guide) in [
        ("crates/mgrpd/src/config/flags.rs", "docs/mgrpd.md"),
        ("crates/mgrpd/src/lib.rs", "docs/mgrpd.md"),
        ("crates/pathload-rs/src/tool/cli.rs", "docs/pathload-rs.md"),
        ("crates/pathload-rs/src/lib.rs", "docs/pathload-rs.md"),
        ("crates/mgrp-overlay/src/cli.rs", "docs/overlay.md"),
        ("crates/mgrp-overlay/src/lib.rs", "docs/overlay.md"),
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert!(text.contains(guide), "{file} does not point to {guide}");
    }
}

#[test]
fn the_checks_find_what_is_broken() {
    let text = "# A heading, with: punctuation\n[x](README.md) [y](#a-heading-with-punctuation)\n\
                ```\n[not](a-link)\n```\n`crates/nowhere/file.rs` and `cargo run`";
    assert_eq!(links(text), ["README.md", "#a-heading-with-punctuation"]);
    assert_eq!(anchors(text), ["a-heading-with-punctuation"]);
    assert_eq!(paths(text), ["crates/nowhere/file.rs"]);
}

/// The words in backticks of `text` that are plain names (`wire_packet`, not
/// `-timeout=1` or a path).
fn names_in_backticks(text: &str) -> std::collections::BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_fuzz_targets_listed_are_the_ones_there() {
    let guide = std::fs::read_to_string(root().join("docs/development.md")).unwrap();
    let from = guide
        .find("(targets:")
        .expect("development.md lists the fuzz targets");
    let to = from
        + guide[from..]
            .find("`cargo fuzz list`")
            .expect("the list's end");
    let listed = names_in_backticks(&guide[from..to]);
    let manifest = std::fs::read_to_string(root().join("fuzz/Cargo.toml")).unwrap();
    let there: std::collections::BTreeSet<String> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|bin| {
            let line = bin.lines().find(|l| l.trim_start().starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_owned())
        })
        .collect();
    assert!(there.len() >= 10, "{there:?}");
    assert_eq!(
        listed, there,
        "docs/development.md's fuzz targets against fuzz/Cargo.toml"
    );
}

#[test]
fn the_examples_listed_are_the_ones_there() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `examples/`"))
        .expect("the README's layout table has a row for examples/");
    let listed = names_in_backticks(row);
    for entry in std::fs::read_dir(root().join("examples"))
        .unwrap()
        .flatten()
    {
        let p = entry.path();
        let Some(name) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if p.extension().is_some_and(|e| e == "rs") && name != "demo" {
            assert!(
                listed.contains(name),
                "examples/{name}.rs is not in the README's row: {row}"
            );
        }
    }
    for name in &listed {
        assert!(
            root().join("examples").join(format!("{name}.rs")).exists(),
            "the README lists example `{name}`, which does not exist"
        );
    }
}

#[test]
fn the_flags_the_example_configuration_names_exist() {
    use clap::CommandFactory as _;
    let mut cli = mgrpd::config::Cli::command();
    cli.build();
    let flags: Vec<String> = cli
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let example = std::fs::read_to_string(root().join("crates/mgrpd/mgrpd.example.toml")).unwrap();
    let mut named = 0;
    for (i, line) in example.lines().enumerate() {
        for (at, _) in line.match_indices("--") {
            let flag: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            // `--no-KEY` stands for a family of flags.
            let placeholder = flag.chars().any(|c| c.is_ascii_uppercase());
            if flag.len() > 2 && !placeholder {
                named += 1;
                assert!(
                    flags.contains(&flag),
                    "mgrpd.example.toml line {}: {flag} is not a flag of mgrpd",
                    i + 1
                );
            }
        }
    }
    assert!(named >= 20, "only {named} flags named");
}
