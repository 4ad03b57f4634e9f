//! What the long-running services share (mgrpd, mgrp-overlay and its route control),
//! and a measurement tool does not need:
//!
//! - [`settings`]: the checks configuration files share (names, durations, token
//!   files);
//! - [`secret`]: files holding keys and tokens, read only when only their owner may;
//! - [`logging`]: the daemons' log lines (text or JSON, `RUST_LOG` honoured).

#![warn(missing_docs)]

pub mod logging;
pub mod notify;
pub mod secret;
pub mod settings;
