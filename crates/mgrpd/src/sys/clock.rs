//! The clocks: where kernel times become the two clock types of mgrp-core,
//! `CLOCK_MONOTONIC` → [`MonoTime`] and `CLOCK_REALTIME` → [`WallTime`].

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, clock_gettime};

use mgrp_core::{MonoTime, WallTime};

fn clock(id: ClockId) -> u64 {
    // Cannot fail for these two clocks, which always exist on Linux.
    let ts = clock_gettime(id).unwrap_or_else(|_| TimeSpec::new(0, 0));
    timespec_nanos(&ts)
}

pub(super) fn timespec_nanos(ts: &TimeSpec) -> u64 {
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Now, on the monotonic clock.
pub fn mono_now() -> MonoTime {
    MonoTime::from_nanos(clock(ClockId::CLOCK_MONOTONIC))
}

/// Now, on the realtime clock.
pub fn wall_now() -> WallTime {
    WallTime::from_nanos(clock(ClockId::CLOCK_REALTIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let a = mono_now();
        let b = mono_now();
        assert!(b >= a);
        // Realtime is after 2020.
        assert!(wall_now().as_nanos() > 1_577_836_800_000_000_000);
    }
}
