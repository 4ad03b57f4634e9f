//! Debian packages: `mgrpd` (mgrpd and mgrpctl), `mgrp-overlay` and `mgrp-tools`
//! (pathload-rs, pathchirp-rs, badabing-rs, btc-rs), each with its programs' man
//! pages and completions, its unit, its example configuration under `/etc/mgrp` as a
//! conffile, the `mgrp` user and group by sysusers.d, and the Prometheus rules.
//!
//! The packages are laid out here and built by `dpkg-deb`; the units, examples and
//! rules are the repository's own, compiled in, so that a package always carries the
//! files of the programs it was built with.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};

use crate::{Program, programs, write, write_completions_of, write_man_pages_of};

/// A file a package installs besides its programs, man pages and completions.
#[derive(Debug, Clone)]
pub struct PackageFile {
    /// Where it is installed (absolute).
    pub path: &'static str,
    /// What it holds.
    pub contents: String,
    /// Its mode.
    pub mode: u32,
    /// Whether dpkg keeps an administrator's changes to it across upgrades.
    pub conffile: bool,
}

/// One Debian package.
#[derive(Debug, Clone)]
pub struct Package {
    /// Its name.
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    /// What it holds, a paragraph.
    pub description: &'static str,
    /// The programs it installs in /usr/bin.
    pub programs: &'static [&'static str],
    /// Its other files.
    pub files: Vec<PackageFile>,
    /// Packages it needs.
    pub depends: &'static str,
    /// Packages it works better with.
    pub recommends: &'static str,
    /// The unit it ships (restarted on upgrade), if any.
    pub unit: Option<&'static str>,
    /// Its sysusers.d file, if it makes the `mgrp` user or group.
    pub sysusers: Option<&'static str>,
}

const MGRPD_UNIT: &str = include_str!("../../mgrpd/mgrpd.service");
const OVERLAY_UNIT: &str = include_str!("../../mgrp-overlay/mgrp-overlay.service");
const MGRPD_EXAMPLE: &str = include_str!("../../mgrpd/mgrpd.example.toml");
const OVERLAY_EXAMPLE: &str = include_str!("../../mgrp-overlay/mgrp-overlay.example.toml");
const MGRPD_ALERTS: &str = include_str!("../../mgrp-overlay/prometheus/mgrpd-alerts.yml");
const OVERLAY_ALERTS: &str = include_str!("../../mgrp-overlay/prometheus/overlay-alerts.yml");
const PROMETHEUS: &str = include_str!("../../mgrp-overlay/prometheus/prometheus.yml");
const DASHBOARD: &str = include_str!("../../mgrp-overlay/prometheus/mgrp-mesh.grafana.json");
const PASSIVE_TIMING_DROP_IN: &str = include_str!("../../mgrp-overlay/systemd/passive-timing.conf");
const ROUTE_CONTROL_DROP_IN: &str = include_str!("../../mgrp-overlay/systemd/route-control.conf");
const MIT: &str = include_str!("../../../LICENSE-MIT");
const APACHE: &str = include_str!("../../../LICENSE-APACHE");
const CHANGELOG: &str = include_str!("../../../CHANGELOG.md");

/// The `mgrp` user (mgrpd's `user`, if set) and group (its socket's, the overlay's).
const MGRPD_SYSUSERS: &str = "\
# The user mgrpd becomes once set up when its configuration says user = \"mgrp\",
# and the group that may use its socket (socket-group = \"mgrp\").
g mgrp -
u mgrp -:mgrp \"MGRP daemon\" /var/lib/mgrp
";
/// The group the overlay's unit joins to reach mgrpd's socket.
const OVERLAY_SYSUSERS: &str = "\
# The group that may use mgrpd's socket: the overlay's unit joins it.
g mgrp -
";

/// A unit as installed by a package: its programs in /usr/bin, and the header's
/// install-by-hand steps replaced by the package's.
fn packaged_unit(unit: &str, package: &str, config: &str) -> String {
    let mut out = format!(
        "# Installed by the Debian package {package}. Edit {config}\n\
         # (`--check-config` checks it), then\n\
         #   systemctl enable --now {}\n",
        unit_name(unit)
    );
    let mut skipping = false;
    for line in unit.lines() {
        // The header's `sudo ...` lines install by hand: the package did that.
        if line.starts_with("#   sudo ") {
            skipping = true;
            continue;
        }
        if skipping && line == "#" {
            skipping = false;
            continue;
        }
        skipping = false;
        out.push_str(&line.replace("/usr/local/bin/", "/usr/bin/"));
        out.push('\n');
    }
    out
}

/// The unit's file name, from its `ExecStart`.
fn unit_name(unit: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.rsplit('/').next())
        .map(|p| format!("{p}.service"))
        .unwrap_or_default()
}

/// mgrpd's example configuration as the package installs it: its socket given to
/// the `mgrp` group the package makes, so that the overlay's unit (in that group)
/// reaches it.
fn packaged_mgrpd_config() -> String {
    let commented = "# socket-group = \"mgrp\"\n";
    assert!(
        MGRPD_EXAMPLE.contains(commented),
        "mgrpd's example no longer has {commented:?}"
    );
    MGRPD_EXAMPLE.replacen(commented, "socket-group = \"mgrp\"\n", 1)
}

/// The copyright file Debian asks for (machine-readable format).
fn copyright() -> String {
    let mut s = String::from(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: mgrp\n\
         Source: https://github.com/mgrp-rs/mgrp\n\n\
         Files: *\n\
         Copyright: the mgrp developers\n\
         License: MIT or Apache-2.0\n\n\
         License: MIT\n",
    );
    for l in MIT.lines() {
        s.push_str(if l.is_empty() { " ." } else { " " });
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("\nLicense: Apache-2.0\n On Debian systems the full text is in\n /usr/share/common-licenses/Apache-2.0; also:\n");
    for l in APACHE.lines() {
        s.push_str(if l.is_empty() { " ." } else { " " });
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn file(path: &'static str, contents: impl Into<String>, mode: u32) -> PackageFile {
    PackageFile {
        path,
        contents: contents.into(),
        mode,
        conffile: false,
    }
}

fn conffile(path: &'static str, contents: &str) -> PackageFile {
    PackageFile {
        path,
        contents: contents.to_owned(),
        // Keys' and tokens' paths live here: the mgrp group reads, others do not.
        mode: 0o640,
        conffile: true,
    }
}

/// The three packages.
pub fn packages() -> Vec<Package> {
    vec![
        Package {
            name: "mgrpd",
            summary: "MGRP daemon: application packets ride in measurement probe trains",
            description: "mgrpd sends measurement tools' probe trains with exact gaps over raw IP \
                (or UDP), fills their padding with application packets routed into its TUN \
                device, and on the far side takes the packets out again and hands the tools \
                their probes with kernel timestamps. mgrpctl asks a running mgrpd for its \
                peers, trains and counters.",
            programs: &["mgrpd", "mgrpctl"],
            files: vec![
                file(
                    "/usr/lib/systemd/system/mgrpd.service",
                    packaged_unit(MGRPD_UNIT, "mgrpd", "/etc/mgrp/mgrpd.toml"),
                    0o644,
                ),
                conffile("/etc/mgrp/mgrpd.toml", &packaged_mgrpd_config()),
                file("/usr/lib/sysusers.d/mgrpd.conf", MGRPD_SYSUSERS, 0o644),
                file(
                    "/usr/share/mgrp/prometheus/mgrpd-alerts.yml",
                    MGRPD_ALERTS,
                    0o644,
                ),
            ],
            depends: "libc6",
            recommends: "",
            unit: Some("mgrpd.service"),
            sysusers: Some("mgrpd.conf"),
        },
        Package {
            name: "mgrp-overlay",
            summary: "MGRP Measurement Overlay node: every link measured continuously",
            description: "mgrp-overlay measures the paths into this node from its neighbours \
                (pathload, pathChirp, badabing, BTC; over MGRP through mgrpd or over plain \
                UDP), serves the estimates over HTTP, events and a status page and to \
                Prometheus, and can move flows onto the paths the measurements favour.",
            programs: &["mgrp-overlay"],
            files: vec![
                file(
                    "/usr/lib/systemd/system/mgrp-overlay.service",
                    packaged_unit(OVERLAY_UNIT, "mgrp-overlay", "/etc/mgrp/overlay.toml"),
                    0o644,
                ),
                conffile("/etc/mgrp/overlay.toml", OVERLAY_EXAMPLE),
                file(
                    "/usr/lib/sysusers.d/mgrp-overlay.conf",
                    OVERLAY_SYSUSERS,
                    0o644,
                ),
                file(
                    "/usr/share/mgrp/prometheus/overlay-alerts.yml",
                    OVERLAY_ALERTS,
                    0o644,
                ),
                file(
                    "/usr/share/mgrp/prometheus/prometheus.yml",
                    PROMETHEUS,
                    0o644,
                ),
                file("/usr/share/mgrp/grafana/mgrp-mesh.json", DASHBOARD, 0o644),
                file(
                    "/usr/share/mgrp/systemd/mgrp-overlay.service.d/passive-timing.conf",
                    PASSIVE_TIMING_DROP_IN,
                    0o644,
                ),
                file(
                    "/usr/share/mgrp/systemd/mgrp-overlay.service.d/route-control.conf",
                    ROUTE_CONTROL_DROP_IN,
                    0o644,
                ),
            ],
            depends: "libc6",
            // Over MGRP it measures through mgrpd; route control runs nft and
            // conntrack.
            recommends: "mgrpd, nftables, conntrack",
            unit: Some("mgrp-overlay.service"),
            sysusers: Some("mgrp-overlay.conf"),
        },
        Package {
            name: "mgrp-tools",
            summary: "Available-bandwidth, loss and throughput measurement tools on MGRP",
            description: "pathload-rs, pathchirp-rs, badabing-rs and btc-rs measure a path's \
                available bandwidth, loss episodes and bulk TCP throughput, their probes sent \
                through mgrpd (application packets riding in them) or over plain UDP.",
            programs: &["pathload-rs", "pathchirp-rs", "badabing-rs", "btc-rs"],
            files: vec![],
            depends: "libc6",
            recommends: "mgrpd",
            unit: None,
            sysusers: None,
        },
    ]
}

/// The maintainer scripts of `p`: (name, text).
fn scripts(p: &Package) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut postinst = String::from("#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n");
    if let Some(sysusers) = p.sysusers {
        let user = p.name == "mgrpd";
        let _ = write!(
            postinst,
            "    if command -v systemd-sysusers >/dev/null 2>&1; then\n\
             \x20       systemd-sysusers {sysusers}\n\
             \x20   else\n\
             \x20       getent group mgrp >/dev/null || addgroup --system mgrp\n{}\
             \x20   fi\n",
            if user {
                "        getent passwd mgrp >/dev/null || adduser --system --ingroup mgrp --home /var/lib/mgrp --no-create-home mgrp\n"
            } else {
                ""
            }
        );
    }
    let confs: Vec<&str> = p
        .files
        .iter()
        .filter(|f| f.conffile)
        .map(|f| f.path)
        .collect();
    if !confs.is_empty() {
        // Once, at the first install: an administrator's later choice stands.
        let _ = writeln!(
            postinst,
            "    if [ -z \"$2\" ]; then\n\
             \x20       chgrp mgrp /etc/mgrp {}\n\
             \x20       chmod 0750 /etc/mgrp\n\
             \x20   fi",
            confs.join(" ")
        );
    }
    if let Some(unit) = p.unit {
        // Not enabled: its configuration must be edited first. An upgrade restarts
        // it if it runs.
        let _ = writeln!(
            postinst,
            "    if [ -d /run/systemd/system ]; then\n\
             \x20       systemctl daemon-reload >/dev/null || true\n\
             \x20       if [ -n \"$2\" ]; then systemctl try-restart {unit} || true; fi\n\
             \x20   fi"
        );
    }
    postinst.push_str("fi\nexit 0\n");
    if p.sysusers.is_some() || !confs.is_empty() || p.unit.is_some() {
        out.push(("postinst", postinst));
    }
    if let Some(unit) = p.unit {
        out.push((
            "prerm",
            format!(
                "#!/bin/sh\nset -e\n\
                 if [ \"$1\" = remove ] && [ -d /run/systemd/system ]; then\n\
                 \x20   systemctl stop {unit} || true\n\
                 fi\nexit 0\n"
            ),
        ));
        let state = if p.name == "mgrpd" {
            "/var/lib/mgrp"
        } else {
            "/var/lib/mgrp-overlay /var/lib/private/mgrp-overlay"
        };
        out.push((
            "postrm",
            format!(
                "#!/bin/sh\nset -e\n\
                 if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi\n\
                 if [ \"$1\" = purge ]; then\n\
                 \x20   rm -rf {state}\n\
                 \x20   rmdir --ignore-fail-on-non-empty /etc/mgrp 2>/dev/null || true\n\
                 fi\nexit 0\n"
            ),
        ));
    }
    out
}

/// The Debian architecture of this build (as `dpkg --print-architecture` says it).
pub fn host_arch() -> anyhow::Result<String> {
    Ok(match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "i386",
        "arm" => "armhf",
        "riscv64" => "riscv64",
        "powerpc64" => "ppc64el",
        "s390x" => "s390x",
        other => bail!("no Debian architecture known for {other}: give --arch"),
    }
    .to_owned())
}

/// Lays out package `p` under `root` (its files and DEBIAN/), taking its programs
/// from `bins`.
pub fn stage(
    p: &Package,
    root: &Path,
    bins: &Path,
    version: &str,
    arch: &str,
) -> anyhow::Result<()> {
    let mkdir = |d: &Path| {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))
    };
    let chmod = |f: &Path, mode: u32| {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set the mode of {}", f.display()))
    };
    let at = |path: &str| root.join(path.trim_start_matches('/'));
    mkdir(&at("/usr/bin"))?;
    for name in p.programs {
        let from = bins.join(name);
        let to = at(&format!("/usr/bin/{name}"));
        std::fs::copy(&from, &to).with_context(|| {
            format!(
                "cannot copy {} (build the programs first: cargo build --release --bins)",
                from.display()
            )
        })?;
        chmod(&to, 0o755)?;
    }
    let chosen: Vec<Program> = programs()
        .into_iter()
        .filter(|x| p.programs.contains(&x.name()))
        .collect();
    ensure!(
        chosen.len() == p.programs.len(),
        "{}: a program has no command line here",
        p.name
    );
    let man = at("/usr/share/man");
    for page in write_man_pages_of(&man, chosen.clone())? {
        let section = page
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("1")
            .to_owned();
        let dir = man.join(format!("man{section}"));
        mkdir(&dir)?;
        let bytes = std::fs::read(&page)?;
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        write(&dir.join(format!("{name}.gz")), &gzip(&bytes)?)?;
        std::fs::remove_file(&page)?;
    }
    write_completions_of(&at("/usr/share"), &chosen)?;
    let doc = at(&format!("/usr/share/doc/{}", p.name));
    mkdir(&doc)?;
    write(&doc.join("copyright"), copyright().as_bytes())?;
    write(&doc.join("changelog.gz"), &gzip(CHANGELOG.as_bytes())?)?;
    for f in &p.files {
        let to = at(f.path);
        if let Some(dir) = to.parent() {
            mkdir(dir)?;
        }
        write(&to, f.contents.as_bytes())?;
        chmod(&to, f.mode)?;
    }

    let debian = root.join("DEBIAN");
    mkdir(&debian)?;
    let size_kib = tree_size(root)?.div_ceil(1024);
    let mut control = format!(
        "Package: {}\nVersion: {version}\nArchitecture: {arch}\n\
         Maintainer: mgrp developers <mgrp@users.noreply.github.com>\n\
         Installed-Size: {size_kib}\nDepends: {}\n",
        p.name, p.depends
    );
    if !p.recommends.is_empty() {
        let _ = writeln!(control, "Recommends: {}", p.recommends);
    }
    let _ = write!(
        control,
        "Section: net\nPriority: optional\nHomepage: https://github.com/mgrp-rs/mgrp\n\
         Description: {}\n{}\n",
        p.summary,
        wrap(p.description)
    );
    write(&debian.join("control"), control.as_bytes())?;
    let confs: String = p
        .files
        .iter()
        .filter(|f| f.conffile)
        .map(|f| format!("{}\n", f.path))
        .collect();
    if !confs.is_empty() {
        write(&debian.join("conffiles"), confs.as_bytes())?;
    }
    for (name, text) in scripts(p) {
        let path = debian.join(name);
        write(&path, text.as_bytes())?;
        chmod(&path, 0o755)?;
    }
    md5sums(root, &debian.join("md5sums"))
}

/// A control file's long description: lines of at most 79 characters, each
/// starting with a space.
fn wrap(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > 78 {
            let _ = writeln!(out, " {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = write!(out, " {line}");
    }
    out.trim_end_matches('\n').to_owned()
}

/// The bytes of the files under `root`, DEBIAN/ aside.
fn tree_size(root: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for f in files_under(root)? {
        total += std::fs::metadata(root.join(&f))?.len();
    }
    Ok(total)
}

/// The files under `root` (relative, sorted), DEBIAN/ aside.
fn files_under(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(root.join(&d))
            .with_context(|| format!("cannot read {}", root.join(&d).display()))?
        {
            let e = e?;
            let rel = d.join(e.file_name());
            if rel == Path::new("DEBIAN") {
                continue;
            }
            if e.file_type()?.is_dir() {
                dirs.push(rel);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// DEBIAN/md5sums (`dpkg --verify` checks the installed files against it), by
/// coreutils' md5sum.
fn md5sums(root: &Path, to: &Path) -> anyhow::Result<()> {
    let files = files_under(root)?;
    let out = Command::new("md5sum")
        .current_dir(root)
        .args(&files)
        .output()
        .context("cannot run md5sum (coreutils)")?;
    ensure!(
        out.status.success(),
        "md5sum failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    write(to, &out.stdout)
}

/// `bytes` compressed by gzip -9n (no name or time: the same input, the same file).
fn gzip(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = Command::new("gzip")
        .args(["-9n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot run gzip")?;
    let mut stdin = child.stdin.take().context("gzip's input")?;
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().context("gzip")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip's writer panicked"))?
        .context("cannot feed gzip")?;
    ensure!(out.status.success(), "gzip failed");
    Ok(out.stdout)
}

/// Builds every package from the programs in `bins` into `out`
/// (`NAME_VERSION_ARCH.deb`), its files compressed by `compression` (dpkg-deb's
/// `-Z`: xz, gzip or none); returns the files.
pub fn build(
    bins: &Path,
    out: &Path,
    version: &str,
    arch: &str,
    compression: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut built = Vec::new();
    for p in packages() {
        let root = out.join(format!(".{}-root", p.name));
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .with_context(|| format!("cannot remove {}", root.display()))?;
        }
        stage(&p, &root, bins, version, arch)?;
        let deb = out.join(format!("{}_{version}_{arch}.deb", p.name));
        let o = Command::new("dpkg-deb")
            .arg("--root-owner-group")
            .arg(format!("-Z{compression}"))
            .arg("--build")
            .arg(&root)
            .arg(&deb)
            .output()
            .context("cannot run dpkg-deb (Debian's dpkg package)")?;
        ensure!(
            o.status.success(),
            "dpkg-deb could not build {}: {}",
            p.name,
            String::from_utf8_lossy(&o.stderr).trim()
        );
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("cannot remove {}", root.display()))?;
        built.push(deb);
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packaged_unit_runs_the_packaged_program_and_keeps_its_settings() {
        let u = packaged_unit(MGRPD_UNIT, "mgrpd", "/etc/mgrp/mgrpd.toml");
        assert!(u.contains("ExecStart=/usr/bin/mgrpd --config /etc/mgrp/mgrpd.toml"));
        assert!(!u.contains("/usr/local"), "{u}");
        assert!(!u.contains("cargo install"), "{u}");
        assert!(u.contains("systemctl enable --now mgrpd.service"));
        // Every line but the header's install steps is kept.
        for line in MGRPD_UNIT.lines().filter(|l| !l.starts_with("#   sudo ")) {
            assert!(
                u.contains(&line.replace("/usr/local/bin/", "/usr/bin/")),
                "lost: {line}"
            );
        }
        let o = packaged_unit(OVERLAY_UNIT, "mgrp-overlay", "/etc/mgrp/overlay.toml");
        assert!(o.contains("ExecStart=/usr/bin/mgrp-overlay --config /etc/mgrp/overlay.toml"));
    }

    #[test]
    fn every_program_is_in_one_package_and_each_unit_config_is_a_conffile() {
        let all: Vec<&str> = packages()
            .iter()
            .flat_map(|p| p.programs.to_vec())
            .collect();
        let mut names: Vec<String> = programs().iter().map(|p| p.name().to_owned()).collect();
        names.sort();
        let mut packaged: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        packaged.sort();
        assert_eq!(names, packaged);
        for p in packages() {
            for f in p.files.iter().filter(|f| f.conffile) {
                assert!(f.path.starts_with("/etc/mgrp/"), "{}", f.path);
                // The unit reads it.
                let unit = p
                    .files
                    .iter()
                    .find(|u| u.path.ends_with(".service"))
                    .unwrap();
                assert!(
                    unit.contents.contains(f.path),
                    "{} not in {}",
                    f.path,
                    unit.path
                );
            }
        }
    }

    #[test]
    fn the_packaged_mgrpd_gives_its_socket_to_the_group_the_overlay_joins() {
        let c = packaged_mgrpd_config();
        assert!(c.lines().any(|l| l == "socket-group = \"mgrp\""), "{c}");
        assert!(OVERLAY_UNIT.contains("SupplementaryGroups=mgrp"));
        assert!(MGRPD_SYSUSERS.contains("g mgrp -") && OVERLAY_SYSUSERS.contains("g mgrp -"));
        // Its directory lets the group in.
        assert!(MGRPD_UNIT.contains("RuntimeDirectoryMode=0755"));
    }

    #[test]
    fn a_long_description_is_wrapped_as_control_files_want() {
        for p in packages() {
            let w = wrap(p.description);
            for l in w.lines() {
                assert!(l.starts_with(' ') && l.len() <= 79, "{l:?}");
            }
            assert_eq!(
                w.split_whitespace().collect::<Vec<_>>(),
                p.description.split_whitespace().collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn the_scripts_make_the_group_before_they_give_it_the_configuration() {
        let p = &packages()[0];
        let s = scripts(p);
        let postinst = &s.iter().find(|(n, _)| *n == "postinst").unwrap().1;
        let made = postinst.find("systemd-sysusers mgrpd.conf").unwrap();
        let given = postinst
            .find("chgrp mgrp /etc/mgrp /etc/mgrp/mgrpd.toml")
            .unwrap();
        assert!(made < given, "{postinst}");
        assert!(postinst.contains("adduser --system --ingroup mgrp"));
        assert!(!postinst.contains("systemctl enable"), "{postinst}");
        let tools = packages()
            .into_iter()
            .find(|p| p.name == "mgrp-tools")
            .unwrap();
        assert!(scripts(&tools).is_empty());
    }
}
