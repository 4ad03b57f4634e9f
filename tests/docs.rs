//! The documentation's links and paths lead somewhere: every relative link in the
//! README and the guides names a file of the repository (and, with `#anchor`, one of
//! its headings), and every repository path written in backticks exists. The guides
//! the code and `--help` point to exist too, and the lists the guides keep by hand
//! (fuzz targets, examples, the flags the example configuration names) match what is
//! there. Every flag the guides give one of the project's binaries is one of its
//! flags, and the metric families the guides name are the ones served.

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
    // The daemon's flags and its subcommands' (`genkey --private`).
    let flags: Vec<String> = cli
        .get_arguments()
        .chain(cli.get_subcommands().flat_map(clap::Command::get_arguments))
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

/// Every long flag of `cmd` and of its subcommands, `--help` and `--version` included.
fn flags_of(mut cmd: clap::Command) -> std::collections::BTreeSet<String> {
    cmd.build();
    let mut out = std::collections::BTreeSet::new();
    let mut todo = vec![cmd];
    while let Some(c) = todo.pop() {
        out.extend(
            c.get_arguments()
                .filter_map(|a| a.get_long().map(|l| format!("--{l}"))),
        );
        out.insert("--help".to_owned());
        todo.extend(c.get_subcommands().cloned());
    }
    out
}

/// The project's binaries with their flags.
fn binaries() -> Vec<(&'static str, std::collections::BTreeSet<String>)> {
    use clap::CommandFactory as _;
    let mut mgrpd = flags_of(mgrpd::config::Cli::command());
    mgrpd.insert("--version".to_owned());
    vec![
        ("mgrpd", mgrpd),
        ("pathload-rs", flags_of(pathload_rs::tool::command())),
        ("pathchirp-rs", flags_of(pathchirp_rs::tool::command())),
        ("badabing-rs", flags_of(badabing_rs::tool::command())),
        ("btc-rs", flags_of(btc_rs::tool::command())),
        ("mgrp-overlay", flags_of(mgrp_overlay::cli::command())),
    ]
}

/// The command lines of a Markdown text with their line numbers: each inline code span
/// and each line of a fenced block (a line ending in `\` joined with the next).
fn command_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let (n, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
            joined.push_str(line.trim_end_matches('\\'));
            joined.push(' ');
            if line.ends_with('\\') {
                pending = Some((n, joined));
            } else {
                out.push((n, joined));
            }
            continue;
        }
        out.extend(
            line.split('`')
                .skip(1)
                .step_by(2)
                .map(|span| (i + 1, span.to_owned())),
        );
    }
    out
}

/// The flags `line` gives each of the project's binaries it runs: the words from
/// the binary's name to the end of its command (`|`, `&&`, `;`). After `cargo run -p
/// NAME` or `--bin NAME`, the flags after `--` are the binary's (unless a bench or an
/// example is what runs).
fn flags_given<'a>(line: &'a str, names: &[&str]) -> Vec<(String, &'a str)> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut after_dashes: Option<String> = None;
    let mut previous = "";
    for word in line.split_whitespace() {
        let name = word.rsplit('/').next().unwrap_or(word);
        if matches!(word, "|" | "&&" | ";" | "||" | "&") {
            current = None;
            after_dashes = None;
        } else if names.contains(&name) {
            if matches!(previous, "-p" | "--package" | "--bin" | "install") {
                after_dashes = Some(name.to_owned());
                current = None;
            } else {
                current = Some(name.to_owned());
            }
        } else if matches!(word, "--bench" | "--example" | "--test") {
            // What follows `--` is the bench's or example's, not the binary's.
            after_dashes = None;
        } else if word == "--" {
            if let Some(n) = after_dashes.take() {
                current = Some(n);
            }
        } else if let Some(bin) = &current
            && word.starts_with("--")
            && word.len() > 2
        {
            let flag = word.split(['=', ',', ')', '`']).next().unwrap_or(word);
            // `--no-KEY` and the like stand for a family of flags.
            if !flag.chars().any(|c| c.is_ascii_uppercase()) {
                out.push((bin.clone(), flag));
            }
        }
        previous = word;
    }
    out
}

#[test]
fn the_flags_the_guides_give_the_binaries_exist() {
    let bins = binaries();
    let names: Vec<&str> = bins.iter().map(|(n, _)| *n).collect();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (line, command) in command_lines(&text) {
            for (bin, flag) in flags_given(&command, &names) {
                checked += 1;
                let flags = &bins.iter().find(|(n, _)| *n == bin).unwrap().1;
                if !flags.contains(flag) {
                    wrong.push(format!(
                        "{}:{line}: {bin} has no {flag} ({command:?})",
                        doc.strip_prefix(root()).unwrap().display()
                    ));
                }
            }
        }
    }
    // A flag written alone in a binary's guide (`--json`) is one of the project's
    // binaries', unless the guide names it as a bench's or an example's.
    let all: std::collections::BTreeSet<&String> = bins.iter().flat_map(|(_, f)| f).collect();
    let not_a_binarys = [
        ("mgrpd.md", "--bench"),
        ("pathchirp-rs.md", "--runs"),
        ("pathload-rs.md", "--cross"),
        ("pathload-rs.md", "--load"),
        ("pathload-rs.md", "--original"),
        ("overlay.md", "--rate"),
        ("overlay.md", "--burst"),
        ("overlay.md", "--outage"),
    ];
    for guide in [
        "mgrpd.md",
        "pathload-rs.md",
        "pathchirp-rs.md",
        "badabing-rs.md",
        "btc-rs.md",
        "overlay.md",
    ] {
        let doc = root().join("docs").join(guide);
        let text = std::fs::read_to_string(&doc).unwrap();
        for (line, span) in command_lines(&text) {
            let Some(flag) = span
                .strip_prefix("--")
                .map(|_| span.split([' ', '=']).next().unwrap_or(&span))
            else {
                continue;
            };
            if flag.len() > 2
                && !flag.chars().any(|c| c.is_ascii_uppercase())
                && !not_a_binarys.contains(&(guide, flag))
            {
                checked += 1;
                if !all.contains(&flag.to_owned()) {
                    wrong.push(format!(
                        "{}:{line}: no binary has {flag}",
                        doc.strip_prefix(root()).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked > 80, "only {checked} flags checked");
}

#[test]
fn the_flag_check_reads_commands_as_a_shell_would() {
    let names = ["mgrpd", "pathload-rs"];
    assert_eq!(
        flags_given(
            "sudo ip netns exec a mgrpd --config x.toml --hold 5ms | grep --color x",
            &names
        ),
        vec![
            ("mgrpd".to_owned(), "--config"),
            ("mgrpd".to_owned(), "--hold")
        ]
    );
    assert_eq!(
        flags_given(
            "cargo run --release -p pathload-rs --features plot -- rcv --json --no-KEY",
            &names
        ),
        vec![("pathload-rs".to_owned(), "--json")]
    );
    assert!(
        flags_given(
            "cargo bench -p pathload-rs --bench accuracy -- --runs 3",
            &names
        )
        .is_empty()
    );
    let lines = command_lines("a `mgrpd --x`\n```\nmgrpd \\\n  --y\n```\n");
    assert_eq!(
        lines,
        vec![(1, "mgrpd --x".to_owned()), (3, "mgrpd    --y ".to_owned())]
    );
}

/// The metric families a source file registers (its code, not its tests): the string
/// literals that begin with `prefix`.
fn registered(path: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.starts_with(prefix)
                && w.len() > prefix.len()
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// The families a guide's tables list (rows whose first cell is a family in
/// backticks), `_total` taken off counters, outside its "Upgrading" section.
fn tabled(guide: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(guide)).unwrap();
    current_text(&text)
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with(prefix))
        .map(|n| n.strip_suffix("_total").unwrap_or(n).to_owned())
        .collect()
}

/// `text` without its "Upgrading" sections (which name families as they were).
fn current_text(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = None;
    for line in text.lines() {
        let level = line.chars().take_while(|c| *c == '#').count();
        if level > 0 && line[level..].starts_with(' ') {
            if skipping.is_some_and(|l| level <= l) {
                skipping = None;
            }
            if line.contains("Upgrading") {
                skipping = Some(level);
            }
        }
        if skipping.is_none() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn the_metric_families_the_guides_name_are_served_and_every_served_one_is_named() {
    let sources = [
        ("crates/mgrpd/src/metrics.rs", "mgrpd_", "docs/mgrpd.md"),
        (
            "crates/mgrp-overlay/src/api/metrics.rs",
            "mgrp_overlay_",
            "docs/overlay.md",
        ),
    ];
    let mut served = std::collections::BTreeSet::new();
    for (source, prefix, guide) in sources {
        let families = registered(source, prefix);
        assert!(families.len() > 30, "{source}: {families:?}");
        let listed = tabled(guide, prefix);
        let unlisted: Vec<_> = families.difference(&listed).collect();
        let gone: Vec<_> = listed.difference(&families).collect();
        assert!(unlisted.is_empty(), "{guide}'s table lacks {unlisted:?}");
        assert!(
            gone.is_empty(),
            "{guide} lists {gone:?}, which {source} does not serve"
        );
        served.extend(families);
    }
    // Every family named anywhere (the guides, the README, the alert rules) is served;
    // a name ending in `_` (`mgrpd_peer_traffic_*`) begins one.
    let mut files = documents();
    for rules in [
        "mgrpd-alerts.yml",
        "overlay-alerts.yml",
        "mgrpd-alerts.test.yml",
        "overlay-alerts.test.yml",
    ] {
        files.push(root().join("crates/mgrp-overlay/prometheus").join(rules));
    }
    let mut wrong = Vec::new();
    let mut named = 0;
    for file in files {
        let text = current_text(&std::fs::read_to_string(&file).unwrap());
        let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for word in words.filter(|w| w.starts_with("mgrpd_") || w.starts_with("mgrp_overlay_")) {
            named += 1;
            let family = word.strip_suffix("_total").unwrap_or(word);
            let ok = served.contains(family)
                || (family.ends_with('_') && served.iter().any(|f| f.starts_with(family)));
            if !ok {
                wrong.push(format!(
                    "{}: {word}",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "named but not served:\n{}",
        wrong.join("\n")
    );
    assert!(named > 100, "only {named} names read");
}

/// `docs/threat-model.md` gives each bound as the code has it: every sentence below,
/// built from the constants, is in the page (its whitespace aside), so changing a
/// limit without the page fails here.
#[test]
fn the_threat_model_gives_the_limits_the_code_has() {
    use mgrp_overlay::api::{conns, tls};
    use mgrp_tool::budget;
    use mgrp_tool::server as snd;
    let text = std::fs::read_to_string(root().join("docs/threat-model.md")).unwrap();
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let page = flat(&text);
    let thousands = |n: usize| {
        let s = n.to_string();
        let (head, tail) = s.split_at(s.len() % 3);
        let groups: Vec<&str> = tail
            .as_bytes()
            .chunks(3)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        if head.is_empty() {
            groups.join(",")
        } else {
            format!("{head},{}", groups.join(","))
        }
    };
    let sentences = [
        format!(
            "at most {} packet captures in all, {} per requester",
            snd::MAX_CAPTURES,
            snd::MAX_CAPTURES_PER_REQUESTER
        ),
        format!(
            "at most {} questions a second per requester ({} at once)",
            budget::QUERIES_PER_SECOND,
            budget::QUERY_BURST
        ),
        format!("an IPv6 /{} (`--ipv6-prefix`)", snd::DEFAULT_IPV6_PREFIX),
        format!(
            "{} MB) of probes per requester over a sliding hour (minute buckets, {} requesters remembered)",
            snd::DEFAULT_BYTES_PER_HOUR / 1_000_000,
            thousands(budget::MAX_REQUESTERS)
        ),
        format!(
            "`--max-probe-mbps` ({} Mbit/s) averaged over {} s",
            snd::DEFAULT_PROBE_BPS / 1_000_000,
            snd::PROBE_RATE_WINDOW.as_secs()
        ),
        format!(
            "{} measurements at once, {} per requester, one exclusive",
            snd::MAX_MEASUREMENTS,
            snd::MAX_MEASUREMENTS_PER_HOST
        ),
        format!(
            "{} connections at once, {} per requester",
            snd::MAX_CONNECTIONS,
            snd::MAX_CONNECTIONS_PER_HOST
        ),
        format!(
            "claims no measurement lasts at most {} s",
            snd::UNCLAIMED_LIFETIME.as_secs()
        ),
        format!(
            "a measurement holds the sender at most {} minutes",
            snd::MAX_SESSION.as_secs() / 60
        ),
        format!(
            "gives its place up after {} s without a batch",
            snd::EXCLUSIVE_IDLE.as_secs()
        ),
        format!(
            "wait in line for it ({} at most, each for as long as it asks again within {} s, the first given {} s to take it)",
            snd::MAX_WAITING_EXCLUSIVE,
            snd::WAITING_FORGOTTEN.as_secs(),
            snd::EXCLUSIVE_TURN.as_secs()
        ),
        format!(
            "{} connections at once in all and {} from one network",
            conns::MAX_CONNECTIONS,
            conns::MAX_CONNECTIONS_PER_NETWORK
        ),
        format!(
            "A client has {} s to send a request's headers",
            conns::HEADER_READ_TIMEOUT.as_secs()
        ),
        format!(
            "({} at once, {} from one network, {} s each)",
            tls::MAX_HANDSHAKES,
            tls::MAX_HANDSHAKES_PER_HOST,
            tls::HANDSHAKE_TIMEOUT.as_secs()
        ),
        format!(
            "bounded to {} a second, {} from one address",
            mgrpd::endpoints::TRIALS_PER_SECOND,
            mgrpd::endpoints::TRIALS_PER_SOURCE_PER_SECOND
        ),
        format!(
            "at most {} probes wait for it",
            thousands(mgrp_tool::MAX_QUEUED_PROBES)
        ),
        format!(
            "quotes the first {} bytes of an MGRP packet this daemon sent there within {} s",
            mgrpd::sent::FINGERPRINT_BYTES,
            mgrpd::sent::RECENT.as_secs()
        ),
    ];
    let missing: Vec<&String> = sentences
        .iter()
        .filter(|s| !page.contains(s.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/threat-model.md does not say (or no longer says) what the code has: {missing:#?}"
    );
}

/// One row of `scripts/test-timings`: a tier's command, the machine it was timed on,
/// and its build and test seconds.
#[derive(Debug, PartialEq)]
struct Timing {
    tier: String,
    command: String,
    machine: String,
    build_s: u64,
    tests_s: u64,
}

/// The rows of a timings file: tab-separated `tier, command, machine, build_s,
/// tests_s`; `#` starts a comment line.
fn timings(text: &str) -> Result<Vec<Timing>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').map(str::trim).collect();
            let [tier, command, machine, build, tests] = f[..] else {
                return Err(format!("not five tab-separated fields: {l:?}"));
            };
            let secs = |v: &str| v.parse::<u64>().map_err(|e| format!("{v:?} in {l:?}: {e}"));
            Ok(Timing {
                tier: tier.into(),
                command: command.into(),
                machine: machine.into(),
                build_s: secs(build)?,
                tests_s: secs(tests)?,
            })
        })
        .collect()
}

/// What the README says of a timing: whole minutes, at least one.
fn said_of(t: &Timing) -> String {
    let min = |s: u64| ((s + 30) / 60).max(1);
    format!(
        "`{}`: about {} min of build, then {} min of tests",
        t.command,
        min(t.build_s),
        min(t.tests_s)
    )
}

#[test]
fn the_readme_gives_the_measured_test_times() {
    let text = std::fs::read_to_string(root().join("scripts/test-timings")).unwrap();
    let rows = timings(&text).unwrap();
    let tiers: Vec<&str> = rows.iter().map(|t| t.tier.as_str()).collect();
    assert_eq!(
        tiers,
        ["fast", "full"],
        "scripts/test-timings: one row per tier"
    );
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    for t in &rows {
        assert!(
            readme.contains(&said_of(t)),
            "the README does not say {:?} (measured on {}: scripts/test-timings)",
            said_of(t),
            t.machine
        );
    }
    // The fast tier is what a newcomer waits for: the issue that made it asks for at
    // most 3 minutes of tests after the build on a 2-vCPU machine.
    assert!(
        rows[0].tests_s <= 180,
        "the fast tier takes {} s",
        rows[0].tests_s
    );
}

#[test]
fn the_timings_check_reads_what_it_should() {
    let rows = timings("# c\nfast\tscripts/test\t2 vCPU\t130\t50\n").unwrap();
    assert_eq!(
        said_of(&rows[0]),
        "`scripts/test`: about 2 min of build, then 1 min of tests"
    );
    assert!(timings("fast\tscripts/test\t130\t50\n").is_err());
    assert!(timings("fast\tscripts/test\tm\tsoon\t50\n").is_err());
}

#[test]
fn the_overlay_guide_gives_the_senders_defaults() {
    use mgrp_tool::server as snd;
    let text = std::fs::read_to_string(root().join("docs/overlay.md")).unwrap();
    let page = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        format!(
            "`max-mb-per-hour` bounds the probe bytes each gets, {} MB by default",
            snd::DEFAULT_BYTES_PER_HOUR / 1_000_000
        ),
        format!(
            "`max-probe-mbps` their rate, {} Mbit/s over {} s",
            snd::DEFAULT_PROBE_BPS / 1_000_000,
            snd::PROBE_RATE_WINDOW.as_secs()
        ),
        format!(
            "`ipv6-prefix` makes an IPv6 /{} one requester",
            snd::DEFAULT_IPV6_PREFIX
        ),
    ] {
        assert!(
            page.contains(&said),
            "docs/overlay.md does not say {said:?}"
        );
    }
}
