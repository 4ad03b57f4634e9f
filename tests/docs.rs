//! The documentation's links and paths lead somewhere: every relative link in the
//! README and the guides names a file of the repository (and, with `#anchor`, one of
//! its headings), and every repository path written in backticks exists. The guides
//! the code and `--help` point to exist too.

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
