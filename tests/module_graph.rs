//! Every crate's files import downward only: reads every `crate::`,
//! `super::` and `self::` path in a crate's `src/` and fails on an import circle
//! between files, naming it. A path names the deepest file it reaches
//! (`crate::measure::method::Gives` is `measure/method.rs`, `crate::config::Link` is
//! `config/mod.rs`); `lib.rs` and `mod` declarations only declare, and a file's
//! `#[cfg(test)]` modules, inline or in files of their own, may import anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every crate of the workspace, by its folder under `crates/`.
fn crates() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut all: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("src").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    all.sort();
    all
}

/// The crates whose modules (a folder counting as one with its files) import
/// downward too, with no circle between them.
const BY_MODULE: [&str; 5] = [
    "mgrp-overlay",
    "mgrp-route",
    "mgrp-testbed",
    "mgrp-views",
    "mgrpd",
];

/// The source without comments, without the contents of string, raw-string and
/// char literals (so none can add an edge or a brace), and without inline
/// `#[cfg(test)]` modules.
fn strip(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1).copied()) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            (b'r', Some(b'"' | b'#'))
                if !out
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                // r"…", r#"…"#: ends at a quote followed by as many hashes.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                while j < b.len()
                    && !(b[j] == b'"'
                        && b.len() >= j + 1 + hashes
                        && b[j + 1..j + 1 + hashes].iter().all(|&c| c == b'#'))
                {
                    j += 1;
                }
                i = j + 1 + hashes;
                out.push_str("\"\"");
            }
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (b'\'', Some(b'\\')) => {
                // '\n', '\'', '\u{…}'
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            }
            (b'\'', Some(_)) if b.get(i + 2) == Some(&b'\'') => {
                i += 3;
                out.push_str("' '");
            }
            (c, _) => {
                out.push(char::from(c));
                i += 1;
            }
        }
    }
    drop_test_modules(&out)
}

/// `code` without `#[cfg(test)] mod NAME { … }` blocks.
fn drop_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let is_mod = head.starts_with("mod ") || head.starts_with("pub mod ");
        // `mod NAME;` declares a file, which `test_files` leaves out; only a body
        // that follows here is dropped.
        let open = after
            .find('{')
            .filter(|&o| is_mod && !after[..o].contains(';'));
        let Some(open) = open else {
            out.push_str(&rest[..at + "#[cfg(test)]".len()]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        let body = &after[open..];
        let mut depth = 0;
        let mut end = body.len();
        for (k, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every path a use tree starting at `s` names, as segments (groups expanded,
/// `*` and `self` in groups ending the path at their group).
fn paths_at(s: &str) -> Vec<Vec<String>> {
    fn tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let mut segs = prefix.to_vec();
        let mut i = 0;
        let b = s.as_bytes();
        loop {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && b[i] == b'{' {
                i += 1;
                loop {
                    while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                        i += 1;
                    }
                    if i >= b.len() || b[i] == b'}' {
                        return i + 1;
                    }
                    i += tree(&s[i..], &segs, out);
                }
            }
            let id = ident_at(&s[i..]);
            if id.is_empty() {
                out.push(segs);
                return i;
            }
            i += id.len();
            if id != "self" {
                segs.push(id.to_owned());
            }
            if s[i..].starts_with("::") {
                i += 2;
            } else {
                out.push(segs);
                // Skip `as NAME` and generic arguments up to the item's end.
                while i < b.len() && !matches!(b[i], b',' | b'}' | b';') {
                    if b[i] == b'{' {
                        break;
                    }
                    i += 1;
                }
                return i;
            }
        }
    }
    let mut out = Vec::new();
    tree(s, &[], &mut out);
    out
}

/// The module paths (from the crate root) a file's code names, given the file's
/// own module path `here` (`["measure", "method"]`; `a/b.rs` and `a/b/mod.rs` are
/// both `a::b`).
fn imports(source: &str, here: &[String]) -> BTreeSet<Vec<String>> {
    let code = strip(source);
    let mut found = BTreeSet::new();
    for anchor in ["crate::", "super::", "self::"] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(anchor) {
            // `$crate::`, `mycrate::`, `Self::` are other things.
            let before = rest[..at].chars().next_back();
            rest = &rest[at + anchor.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let base: Vec<String> = match anchor {
                "crate::" => Vec::new(),
                "self::" => here.to_vec(),
                _ => here[..here.len().saturating_sub(1)].to_vec(),
            };
            let mut super_rest = rest;
            let mut base = base;
            // `super::super::x`
            while anchor == "super::" && super_rest.starts_with("super::") {
                base.pop();
                super_rest = &super_rest["super::".len()..];
            }
            for p in paths_at(super_rest) {
                let mut full = base.clone();
                full.extend(p);
                found.insert(full);
            }
        }
    }
    found
}

/// The file-level import graph of a `src/` folder: each file (`measure/method.rs`)
/// with the files it imports from.
fn graph_of(src: &Path) -> Graph {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut all = Vec::new();
    files(src, &mut all);
    let name = |p: &Path| p.strip_prefix(src).unwrap().to_string_lossy().into_owned();
    let known: BTreeSet<String> = all.iter().map(|p| name(p)).collect();
    // The file a module path is, if any.
    let file_of = |segs: &[String]| -> Option<String> {
        if segs.is_empty() {
            return None;
        }
        let stem = segs.join("/");
        [format!("{stem}.rs"), format!("{stem}/mod.rs")]
            .into_iter()
            .find(|f| known.contains(f))
    };
    let tests = test_files(&all, &name);
    let mut g = Graph::new();
    for path in &all {
        let file = name(path);
        if file == "lib.rs"
            || file == "main.rs"
            || file.starts_with("bin/")
            || tests.contains(&file)
        {
            continue;
        }
        let here: Vec<String> = file
            .trim_end_matches(".rs")
            .trim_end_matches("/mod")
            .split('/')
            .map(str::to_owned)
            .collect();
        let source = std::fs::read_to_string(path).unwrap();
        let edges = imports(&source, &here)
            .into_iter()
            // The deepest file the path reaches.
            .filter_map(|segs| (1..=segs.len()).rev().find_map(|k| file_of(&segs[..k])))
            .filter(|to| *to != file && to != "lib.rs")
            .collect();
        g.insert(file, edges);
    }
    g
}

/// The files that are `#[cfg(test)] mod NAME;` of another: `NAME.rs` or
/// `NAME/mod.rs` in the declaring module's folder.
fn test_files(all: &[PathBuf], name: &dyn Fn(&Path) -> String) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in all {
        let file = name(path);
        let folder = match file.as_str() {
            "lib.rs" | "main.rs" => String::new(),
            f => format!("{}/", f.trim_end_matches(".rs").trim_end_matches("/mod")),
        };
        let source = strip(&std::fs::read_to_string(path).unwrap());
        for (at, _) in source.match_indices("#[cfg(test)]") {
            let head = source[at + "#[cfg(test)]".len()..].trim_start();
            let head = head.strip_prefix("pub ").unwrap_or(head);
            if let Some(rest) = head.strip_prefix("mod ") {
                let module = ident_at(rest.trim_start());
                if rest.trim_start()[module.len()..]
                    .trim_start()
                    .starts_with(';')
                {
                    out.insert(format!("{folder}{module}.rs"));
                    out.insert(format!("{folder}{module}/mod.rs"));
                }
            }
        }
    }
    out
}

/// A circle of imports, if there is one, from its first file back to it.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        g: &Graph,
        m: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(m.to_owned(), Mark::Open);
        path.push(m.to_owned());
        for to in g.get(m).into_iter().flatten() {
            match marks.get(to).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let start = path.iter().position(|p| p == to).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(to.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(g, to, marks, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(m.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in g.keys() {
        if marks.get(m).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(g, m, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// `g` with each folder's files taken as one module (`fastpath/lookup.rs` is
/// `fastpath`).
fn modules(g: &Graph) -> Graph {
    let module = |f: &str| {
        f.split_once('/').map_or_else(
            || f.trim_end_matches(".rs").to_owned(),
            |(m, _)| m.to_owned(),
        )
    };
    let mut out = Graph::new();
    for (from, to) in g {
        let m = module(from);
        let edges = out.entry(m.clone()).or_default();
        edges.extend(to.iter().map(|t| module(t)).filter(|t| *t != m));
    }
    out
}

fn graph(krate: &str) -> Graph {
    graph_of(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates")
            .join(krate)
            .join("src"),
    )
}

#[test]
fn every_crates_files_import_downward_only() {
    let mut circles = Vec::new();
    let all = crates();
    assert!(all.len() >= 14, "too few crates found: {all:?}");
    for krate in &all {
        let g = graph(krate);
        assert!(!g.is_empty(), "{krate}: no files found");
        if let Some(cycle) = find_cycle(&g) {
            circles.push(format!("{krate}: {}", cycle.join(" -> ")));
        }
        if BY_MODULE.contains(&krate.as_str())
            && let Some(cycle) = find_cycle(&modules(&g))
        {
            circles.push(format!("{krate}'s modules: {}", cycle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "files import in a circle; move what both need into a file below them:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_sees_the_imports_it_must() {
    let overlay = graph("mgrp-overlay");
    let edge = |from: &str, to: &str| {
        assert!(
            overlay[from].contains(to),
            "{from} -> {to} missed: {:#?}",
            overlay[from]
        );
    };
    // `use super::method::{…}`, `use crate::config::Link`, `pub use self::check::…`,
    // an inline `crate::derive::prediction::for_neighbour(…)` call.
    edge("measure/pathload.rs", "measure/method.rs");
    edge("threads/runner.rs", "config/mod.rs");
    edge("config/mod.rs", "config/check.rs");
    edge("state/shared.rs", "derive/prediction.rs");
    edge("config/prediction.rs", "config/check.rs");
    let mgrpd = graph("mgrpd");
    // Read past `#[cfg(test)] mod tests;`: the imports after it count.
    assert!(mgrpd["config/mod.rs"].contains("config/settings.rs"));
    assert!(
        !mgrpd.contains_key("config/tests.rs"),
        "a #[cfg(test)] module's file is test code"
    );
    assert!(mgrpd["pacer.rs"].contains("exchange.rs"));
    assert!(modules(&mgrpd)["dispatcher"].contains("fastpath"));
}

#[test]
fn imports_are_read_from_code_only() {
    let src = r##"
        //! Talks to `crate::doc_only`.
        use crate::{a::X, b::{c::Y, Z}, d};
        use super::e::{self, F};
        fn f() { crate::g::go(); let s = "crate::in_string"; let r = r#"crate::raw " "#; }
        /* crate::in_block */
        macro_rules! m { () => { $crate::macro_path } }
        fn h() -> Self { Self::new() }
        #[cfg(test)]
        mod tests { use crate::only_in_tests; fn t() { let _ = '{'; } }
        use self::k::L;
    "##;
    let got: Vec<String> = imports(src, &["x".into(), "y".into()])
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "a::X",
            "b::Z",
            "b::c::Y",
            "d",
            "g::go",
            "x::e",
            "x::e::F",
            "x::y::k::L"
        ]
    );
}

#[test]
fn a_circle_is_found_and_named() {
    let g: Graph = [
        ("a.rs", vec!["b/mod.rs"]),
        ("b/mod.rs", vec!["c.rs"]),
        ("c.rs", vec!["a.rs", "d.rs"]),
        ("d.rs", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        find_cycle(&g).unwrap(),
        ["a.rs", "b/mod.rs", "c.rs", "a.rs"]
    );
    let mut acyclic = g.clone();
    acyclic.get_mut("c.rs").unwrap().remove("a.rs");
    assert_eq!(find_cycle(&acyclic), None);
}

/// The crates of a crate's `[dependencies]` table (not its dev-dependencies).
fn dependencies(krate: &str) -> BTreeSet<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_deps = false;
    let mut deps = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps && let Some((name, _)) = line.split_once('=') {
            deps.insert(name.trim().trim_end_matches(".workspace").to_owned());
        }
    }
    deps
}

/// What the API serves and route control stand on no measurement tool: the views'
/// words for a path come from `mgrp-core`, so a member that only routes does not
/// build the tools.
#[test]
fn the_views_and_route_control_depend_on_no_tool() {
    let tools = ["pathload-rs", "pathchirp-rs", "badabing-rs", "btc-rs"];
    for krate in ["mgrp-views", "mgrp-route"] {
        let deps = dependencies(krate);
        assert!(deps.contains("mgrp-core"), "{krate}: {deps:?}");
        for t in tools {
            assert!(!deps.contains(t), "{krate} depends on the tool {t}");
        }
    }
}
