//! `mgrp-client`: the probe-transaction API that measurement tools link against.
//!
//! Its job: let a tool build a probe train (per probe: the tool's header bytes, the
//! requested IP size, the gap before it, whether riders may use its padding), submit it
//! to `mgrpd` over the daemon's Unix socket, and read back the transaction report; and
//! let the receiving side of a tool listen for probes with their sender and kernel
//! receive timestamps.
//!
//! The socket protocol is not defined yet; the shared types the API will return
//! (transaction reports) live in [`mgrp_core::stats`].

pub use mgrp_core::stats::TransactionReport;
