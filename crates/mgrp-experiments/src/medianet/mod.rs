//! The MGRP paper's §5 application: an adaptive streaming overlay in the spirit of
//! MediaNet that streams three MPEG-like streams from `m3` to `m5` over TCP, adapts
//! them by dropping frames at the sender, and learns about available bandwidth from
//! its local schedulers' reports and from the Measurement Overlay.
//!
//! - [`media`]: the frames (the paper's Table 2), the adaptations and the receiver's
//!   decoding rule (sans-IO).
//! - [`scheduler`]: the global scheduler (sans-IO).
//! - [`streams`]: the local schedulers at the source and the receiver at `m5`.
//! - [`run`]: one run on the paper's testbed in one of Table 3's modes.

pub mod media;
pub mod run;
pub mod scheduler;
pub mod streams;

/// A directory of one run's files, removed on drop.
#[derive(Debug)]
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl TempDir {
    /// A fresh directory named after `tag`, this process and the time.
    pub(crate) fn new(tag: &str) -> std::io::Result<Self> {
        let p = std::env::temp_dir().join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            mgrp_testbed::link::realtime_ns()
        ));
        std::fs::create_dir_all(&p)?;
        Ok(Self(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
