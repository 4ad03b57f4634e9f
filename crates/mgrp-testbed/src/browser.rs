//! Headless chromium, drawing the pages the overlays serve inside a testbed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context as _, ensure};

use crate::Netns;

/// A PNG of `url` as headless chromium draws it from inside `ns`, in a window of
/// `size` (width, height) pixels, into `path`: chromium must be installed (an error
/// says how to install it otherwise).
pub fn screenshot(ns: &Netns, url: &str, path: &Path, size: (u32, u32)) -> anyhow::Result<()> {
    static PROFILES: AtomicU32 = AtomicU32::new(0);
    crate::packages::require(&["chromium"])?;
    let chromium = crate::packages::find("chromium").context("chromium")?;
    let profile = std::env::temp_dir().join(format!(
        "mgrp-chromium-{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, Ordering::Relaxed)
    ));
    let path = std::path::absolute(path)?;
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=8000",
        ])
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", path.display()))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let _ = std::fs::remove_dir_all(&profile);
    let out = out.context("cannot run chromium")?;
    ensure!(
        out.status.success() && path.exists(),
        "chromium drew no screenshot of {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
