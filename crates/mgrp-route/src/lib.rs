//! Route control on a Measurement Overlay's estimates: which path each configured
//! destination prefix takes — straight to the member it lies behind, or through one
//! other member that relays it (mgrpd next-hop devices and `relay-to`) — chosen from
//! the hops' estimates and heartbeats, installed as the kernel's policy routing with
//! flows pinned by connection-tracking marks. The overlay starts it and serves what
//! it shows; it reads the other members' APIs as [`mgrp_views`] types.
//!
//! Layers, each importing only those above it:
//! - [`model`]: sans-IO — candidate paths scored by a throughput model from the
//!   hops' estimates and heartbeats (`mgrp_core::heartbeat`), switched by SAFIRE's
//!   bandwidth-ratio rule.
//! - [`settings`]: the `[routing]` section, checked.
//! - [`policy`]: the policy routing that steers flows — rules, routes, tables and
//!   conntrack marks.
//! - [`control`]: all of it running — heartbeats, the members' APIs polled, each
//!   destination decided, the kernel steered, the state the API shows.

pub mod control;
pub mod model;
mod netlink;
pub mod policy;
pub mod settings;
