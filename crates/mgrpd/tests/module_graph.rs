//! mgrpd's modules import downward only: reads every `crate::` path in `src/` and
//! fails on an import circle, naming it. A module is a file of `src/` or a folder
//! with its files; `lib.rs` only declares them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The source without comments (line, block and doc comments) and without the
/// contents of string literals, so neither can add an edge.
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
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (c, _) => {
                out.push(char::from(c));
                i += 1;
            }
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of every item in a `{ ... }` group that starts `s`.
fn group_heads(s: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => {
                depth += 1;
                item_start = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => item_start = true,
            c if item_start && depth == 1 && (c.is_ascii_alphabetic() || c == '_') => {
                heads.push(ident_at(&s[i..]));
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

/// The top-level modules a file's code names through `crate::`.
fn imports(source: &str) -> BTreeSet<String> {
    let code = strip(source);
    let mut names = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        // `$crate::` in macros and `mycrate::` are other crates.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if rest.starts_with('{') {
            names.extend(group_heads(rest).into_iter().map(str::to_owned));
        } else {
            names.insert(ident_at(rest).to_owned());
        }
    }
    names
}

/// The module graph of a `src/` folder.
fn graph_of(src: &Path) -> Graph {
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if matches!(name.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let mut paths = Vec::new();
        if path.is_dir() {
            files(&path, &mut paths);
        } else if path.extension().is_some_and(|e| e == "rs") {
            paths.push(path);
        }
        for p in paths {
            sources
                .entry(name.clone())
                .or_default()
                .push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(m, code)| {
            let edges = imports(code)
                .into_iter()
                .filter(|to| to != m && modules.contains(to))
                .collect();
            (m.clone(), edges)
        })
        .collect()
}

/// A circle of imports, if there is one, from its first module back to it.
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
        if marks.get(m).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(g, m, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn mgrpd_modules_import_downward_only() {
    let g = graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.len() > 10, "too few modules found: {g:?}");
    assert!(
        g["pacer"].contains("exchange"),
        "the reader misses imports: {g:#?}"
    );
    if let Some(cycle) = find_cycle(&g) {
        panic!(
            "mgrpd's modules import in a circle: {}; move what both need into a module below them",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn imports_are_read_from_code_only() {
    let src = r#"
        //! Talks to `crate::doc_only`.
        use crate::{a::X, b::{Y, Z}, c};
        use crate::d;
        fn f() { crate::e::go(); let s = "crate::in_string"; }
        /* crate::in_block */
        macro_rules! m { () => { $crate::macro_path } }
    "#;
    let got: Vec<String> = imports(src).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "d", "e"]);
}

#[test]
fn a_circle_is_found_and_named() {
    let g: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    let mut acyclic = g.clone();
    acyclic.get_mut("c").unwrap().remove("a");
    assert_eq!(find_cycle(&acyclic), None);
}
