//! Home of the workspace's benches (`benches/`) and examples (`examples/`), and of the
//! pieces the examples share: [`pktrain`], the paper's synthetic packet-train tool.
//!
//! The protocol lives in `mgrp-core`, the daemon in `mgrpd`, the tool API in
//! `mgrp-client`, the namespace test hosts in `mgrp-testbed`.

pub mod experiment;
pub mod pktrain;
pub mod plot;
