//! `mgrpd`, the MGRP daemon.
//!
//! Its job: read application packets ("riders") from a TUN device, hand them to the
//! `mgrp-core` planner of their destination, pace the probe trains that tools submit
//! over a real-time thread onto a raw IP socket (protocol 253 by default), and on the
//! receiving side take riders out of probes, write them back through the TUN and hand
//! the probes, with kernel receive timestamps, to the tools listening for them.
//!
//! The data path is not built yet: this crate currently holds only its name and its
//! place in the workspace. See the project's `DESIGN.md` for the architecture.
