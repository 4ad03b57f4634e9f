//! Clocks and real-time helpers, one family for the whole workspace: the daemon's
//! pacer, pathload-rs's sender and receiver, and the testbed's delay line all keep
//! time and wait the same way.
//!
//! - [`clock`]: `CLOCK_MONOTONIC` as [`MonoTime`] (deadlines),
//!   `CLOCK_REALTIME` as [`WallTime`] (the clock of the kernel's
//!   packet stamps), and sleeping until a monotonic deadline.
//! - [`wait`]: the timerfd armed with absolute deadlines, the eventfd one thread
//!   signals and another sleeps on, and the pacing wait (sleep, then spin).
//! - [`thread`]: real-time scheduling, timer slack, CPU pinning, memory locking.
//! - [`rx`]: datagrams received with the kernel's receive stamp, and which receive
//!   errors only mean nothing came yet.
//! - [`stdout`]: printing that survives a closed pipe ([`outln!`], [`out!`]).
//! - [`sync`]: a mutex's guard even after a thread panicked holding it.
//! - [`caps`]: the capabilities the process holds.
//!
//! Everything goes through nix but SCHED_FIFO, the one call it does not wrap.

#![warn(missing_docs)]

pub mod caps;
pub mod clock;
pub mod rx;
pub mod stdout;
pub mod sync;
pub mod thread;
pub mod wait;

pub use clock::{mono_now, sleep_until, unix_now, wall_now};
pub use mgrp_core::{MonoTime, WallTime};
pub use sync::lock;
pub use wait::{EventFd, Timer, spin_until, wait_until};
