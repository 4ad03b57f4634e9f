//! The system commands the demo, the experiments and the tests run, found on this
//! host or named with the Debian package that brings them. The list is the
//! repository's `scripts/system-packages`, which `scripts/test` installs from; it is
//! read here at build time so that the two never disagree.

use std::path::{Path, PathBuf};

use anyhow::bail;

const LIST: &str = include_str!("../../../scripts/system-packages");

/// One line of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// The Debian package.
    pub package: &'static str,
    /// The command it brings.
    pub command: &'static str,
    /// Who needs it: `demo` (the demo, the experiments and the tests) or `tests`.
    pub used_by: &'static str,
}

/// Every line of `scripts/system-packages`.
pub fn list() -> Vec<Package> {
    LIST.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(Package {
                package: f.next()?,
                command: f.next()?,
                used_by: f.next()?,
            })
        })
        .collect()
}

/// Where `command` is: on the `PATH`, or in the system directories a user's `PATH`
/// may lack.
pub fn find(command: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(command))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why `command`'s package cannot be installed on this system, if the test command
/// (`scripts/test`) found it cannot: it names each such command and the reason in
/// `MGRP_UNAVAILABLE` (`command: why` lines), and a test that needs one skips
/// instead of failing. Not set (as under `cargo test` alone): `None`.
pub fn unavailable(command: &str) -> Option<String> {
    unavailable_in(&std::env::var("MGRP_UNAVAILABLE").ok()?, command)
}

/// [`unavailable`] in the text `list`.
fn unavailable_in(list: &str, command: &str) -> Option<String> {
    list.lines().find_map(|l| {
        let (c, why) = l.split_once(':')?;
        (c.trim() == command).then(|| why.trim().to_owned())
    })
}

/// Checks that every command in `commands` is installed, and otherwise says which
/// packages bring the missing ones and how to install them. A command that is not
/// in the list is looked for all the same and named as itself.
pub fn require(commands: &[&str]) -> anyhow::Result<()> {
    match missing(commands, &list(), |c| find(c).is_some()) {
        None => Ok(()),
        Some(text) => bail!("{text}"),
    }
}

fn missing(commands: &[&str], known: &[Package], present: impl Fn(&str) -> bool) -> Option<String> {
    let mut missing_commands = Vec::new();
    let mut packages: Vec<&str> = Vec::new();
    for &c in commands.iter().filter(|c| !present(c)) {
        missing_commands.push(format!("`{c}`"));
        let package = known
            .iter()
            .find(|p| p.command == c)
            .map_or(c, |p| p.package);
        if !packages.contains(&package) {
            packages.push(package);
        }
    }
    if missing_commands.is_empty() {
        return None;
    }
    Some(format!(
        "{} not installed: install {} with `apt-get install --no-install-recommends {}` \
         (scripts/test installs every package the tests use)",
        missing_commands.join(", ")
            + if missing_commands.len() == 1 {
                " is"
            } else {
                " are"
            },
        if packages.len() == 1 {
            "its package"
        } else {
            "their packages"
        },
        packages.join(" ")
    ))
}

/// Checks the commands that the demo and the experiments run (`used by` demo).
pub fn require_for_demo() -> anyhow::Result<()> {
    let commands: Vec<&str> = list()
        .into_iter()
        .filter(|p| p.used_by == "demo")
        .map(|p| p.command)
        .collect();
    require(&commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_the_test_command_found_unavailable_is_named_with_its_reason() {
        let list = "chromium: Ubuntu ships chromium only as a snap\nfoo: bar: baz\n";
        assert_eq!(
            unavailable_in(list, "chromium").as_deref(),
            Some("Ubuntu ships chromium only as a snap")
        );
        assert_eq!(unavailable_in(list, "foo").as_deref(), Some("bar: baz"));
        assert_eq!(unavailable_in(list, "chrom"), None);
        assert_eq!(unavailable_in("", "chromium"), None);
    }

    #[test]
    fn the_list_names_a_package_and_a_use_for_every_command() {
        let l = list();
        assert!(l.len() >= 9, "{l:?}");
        for p in &l {
            assert!(matches!(p.used_by, "demo" | "tests"), "{p:?}");
        }
        assert!(
            l.iter()
                .any(|p| p.command == "promtool" && p.package == "prometheus")
        );
        assert!(
            l.iter()
                .any(|p| p.command == "tc" && p.package == "iproute2")
        );
    }

    #[test]
    fn a_missing_command_is_named_with_its_package_and_the_install_command() {
        let known = list();
        let absent = ["promtool", "prometheus", "nft", "not-in-the-list"];
        let text = missing(
            &["ip", "promtool", "prometheus", "nft", "not-in-the-list"],
            &known,
            |c| !absent.contains(&c),
        )
        .unwrap();
        assert!(
            text.starts_with(
                "`promtool`, `prometheus`, `nft`, `not-in-the-list` are not installed"
            ),
            "{text}"
        );
        // One package named once for its two commands; an unknown command as itself.
        assert!(
            text.contains(
                "apt-get install --no-install-recommends prometheus nftables not-in-the-list`"
            ),
            "{text}"
        );
        let one = missing(&["tc"], &known, |_| false).unwrap();
        assert!(
            one.starts_with("`tc` is not installed: install its package"),
            "{one}"
        );
        assert_eq!(missing(&["ip", "tc"], &known, |_| true), None);
        // The real lookup finds a command every system has.
        assert!(require(&["sh"]).is_ok());
    }
}
