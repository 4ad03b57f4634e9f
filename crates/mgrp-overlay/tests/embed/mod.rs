//! What the namespace test and the mesh bench share: they are mgrpd and the overlay
//! themselves (started as `<binary> mgrpd ...` and `<binary> overlay ...`, so never a
//! stale build), a directory removed on drop, and the wall clock in Unix seconds.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mgrp_testbed::{Netns, Process};

/// Runs mgrpd or the overlay if this process was started as one (their exit code);
/// `None` for the binary's own work.
pub fn embedded() -> Option<ExitCode> {
    mgrp_testbed::harness::acting_as(&[
        ("mgrpd", |a| mgrpd::main_with_args(a)),
        ("overlay", |a| mgrp_overlay::cli::main_with_args(a)),
    ])
}

/// This binary as an overlay in `ns` with the configuration at `config`, logging at
/// `level`.
pub fn overlay(ns: &Netns, config: &Path, level: &str) -> anyhow::Result<Process> {
    let me = std::env::current_exe()?;
    Process::spawn(
        ns,
        &me,
        &[
            "overlay".into(),
            "--config".into(),
            config.display().to_string(),
            "--log-level".into(),
            level.into(),
        ],
    )
}

/// A directory of one run's files, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory named after `tag` and this process.
    pub fn new(tag: &str) -> std::io::Result<Self> {
        let p = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(Self(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
