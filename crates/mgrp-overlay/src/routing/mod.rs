//! Route control on the overlay's estimates: which path each configured destination
//! prefix takes — straight to the member it lies behind, or through one other member
//! that relays it (mgrpd next-hop devices and `relay-to`) — chosen from the hops'
//! estimates and heartbeats by [`crate::route`], installed as the kernel's policy
//! routing with flows pinned by connection-tracking marks ([`kernel`]).

pub mod control;
pub mod kernel;
pub mod settings;
