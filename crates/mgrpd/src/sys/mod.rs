//! The daemon's own system calls that the standard library and socket2 do not wrap.
//! Most go through nix (`recvmsg` with timestamp and error control messages, socket
//! options, poll, user switching); what nix does not cover is written here by hand,
//! and these are the daemon's only `unsafe` blocks: `sendmsg` with a transmit-stamp
//! id, the packet socket, capability sets and the ambient set, dissolving a
//! datagram socket's connection.
//!
//! Clocks, the pacing wait and thread scheduling are the workspace's one family of
//! real-time helpers, `mgrp_rt`, shared with pathload-rs and the testbed.
//!
//! By topic: [`sockets`], [`stamps`] (transmit stamps, error queues, receive
//! stamps), [`link`] (the packet socket), [`process`] (capabilities, users,
//! sysctls).

#![allow(unsafe_code)]

mod link;
mod process;
mod sockets;
mod stamps;

pub use link::*;
pub use process::*;
pub use sockets::*;
pub use stamps::*;

/// The result of a libc call that returns -1 and sets errno on failure.
fn check(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
