//! The previous release's programs, for mixed-version tests (an upgrade rolls across
//! a mesh host by host, so version N meets N−1): built from [`PREVIOUS`], a commit
//! in this repository's history, taken out with `git archive` and built with
//! `cargo build --locked` into `target/previous` (once: later runs reuse the
//! program). Needs git, cargo and this clone's history (not a shallow clone).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context as _, bail};

/// Version 0.1.0, the release before this one (CHANGELOG.md): the commit, so that a
/// clone without tags finds it too.
pub const PREVIOUS: &str = "29fff124a49cb0aaca2e655d61a2bf4fbd012898";

/// The release [`PREVIOUS`] is.
pub const PREVIOUS_VERSION: &str = "0.1.0";

/// The repository this crate was built from.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the previous release's programs are kept.
fn kept() -> PathBuf {
    repository().join("target/previous")
}

/// Whether `program` is one [`program`] built.
pub fn is_previous(program: &Path) -> bool {
    program.starts_with(kept())
}

/// One build at a time in this process.
static BUILDING: Mutex<()> = Mutex::new(());

/// Program `bin` of package `package` as the previous release built it.
pub fn program(package: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let _one = BUILDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let repo = repository();
    let dir = kept().join(&PREVIOUS[..12]);
    let built = dir.join("bin").join(bin);
    if built.exists() {
        return Ok(built);
    }
    let src = dir.join("src");
    if src.exists() {
        std::fs::remove_dir_all(&src)?;
    }
    std::fs::create_dir_all(&src)?;
    // git archive | tar -x: the commit's files, no worktree to clean up.
    let archive = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["archive", "--format=tar", PREVIOUS])
        .output()
        .context("cannot run git")?;
    if !archive.status.success() {
        bail!(
            "git archive {PREVIOUS} (release {PREVIOUS_VERSION}) failed: {} (a shallow clone lacks it: git fetch --unshallow)",
            String::from_utf8_lossy(&archive.stderr).trim()
        );
    }
    let mut tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&src)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("cannot run tar")?;
    {
        use std::io::Write as _;
        let mut stdin = tar.stdin.take().context("tar's input")?;
        stdin.write_all(&archive.stdout)?;
    }
    if !tar.wait()?.success() {
        bail!("tar could not unpack release {PREVIOUS_VERSION}");
    }
    let target = kept().join("build");
    let out = Command::new("cargo")
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", &target)
        // No debug info: a third of the time and the disk, and no test reads it.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .args(["build", "--locked", "-p", package, "--bin", bin])
        .output()
        .context("cannot run cargo")?;
    if !out.status.success() {
        bail!(
            "cannot build {bin} of release {PREVIOUS_VERSION}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::create_dir_all(dir.join("bin"))?;
    std::fs::copy(target.join("debug").join(bin), &built)?;
    std::fs::remove_dir_all(&src)?;
    Ok(built)
}
