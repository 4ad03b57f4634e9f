//! The two clocks, as mgrp-core's time types.

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, ClockNanosleepFlags, clock_gettime, clock_nanosleep};

use mgrp_core::{MonoTime, WallTime};

fn now(id: ClockId) -> u64 {
    // Cannot fail for these two clocks, which always exist on Linux.
    let ts = clock_gettime(id).unwrap_or_else(|_| TimeSpec::new(0, 0));
    nanos(&ts)
}

/// A kernel time in nanoseconds (0 for one before the epoch, which the kernel does
/// not hand out).
pub fn nanos(ts: &TimeSpec) -> u64 {
    u64::try_from(ts.tv_sec()).unwrap_or(0) * 1_000_000_000
        + u64::try_from(ts.tv_nsec()).unwrap_or(0)
}

/// A realtime kernel stamp as a [`WallTime`].
pub fn wall_time(ts: &TimeSpec) -> WallTime {
    WallTime::from_nanos(nanos(ts))
}

/// Now, on the monotonic clock (for deadlines).
pub fn mono_now() -> MonoTime {
    MonoTime::from_nanos(now(ClockId::CLOCK_MONOTONIC))
}

/// Now, on the realtime clock (the clock of the kernel's packet stamps).
pub fn wall_now() -> WallTime {
    WallTime::from_nanos(now(ClockId::CLOCK_REALTIME))
}

/// The CPU time the calling thread has used.
pub fn thread_cpu_time() -> std::time::Duration {
    std::time::Duration::from_nanos(now(ClockId::CLOCK_THREAD_CPUTIME_ID))
}

/// Now, on the realtime clock, in Unix seconds (what the overlay's API and the
/// experiments' records show).
pub fn unix_now() -> f64 {
    wall_now().as_nanos() as f64 / 1e9
}

/// Sleeps until the monotonic clock reads `deadline` (absolute, so a late wake-up
/// does not push later deadlines); returns at once if it has.
pub fn sleep_until(deadline: MonoTime) {
    let n = deadline.as_nanos();
    let ts = TimeSpec::new(
        (n / 1_000_000_000) as libc::time_t,
        (n % 1_000_000_000) as libc::c_long,
    );
    // Interrupted by a signal: sleep on to the same absolute deadline.
    while let Err(nix::errno::Errno::EINTR) = clock_nanosleep(
        ClockId::CLOCK_MONOTONIC,
        ClockNanosleepFlags::TIMER_ABSTIME,
        &ts,
    ) {}
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn clocks_move_forward_and_sleeps_end_on_time() {
        let a = mono_now();
        let b = mono_now();
        assert!(b >= a);
        // Realtime is after 2020.
        assert!(wall_now().as_nanos() > 1_577_836_800_000_000_000);
        let deadline = mono_now().saturating_add(Duration::from_millis(2));
        sleep_until(deadline);
        assert!(mono_now() >= deadline);
        // A deadline in the past returns at once.
        sleep_until(MonoTime::from_nanos(1));
    }
}

/// The host clock's discipline as the kernel keeps it (`adjtimex`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Discipline {
    /// Whether a time service synchronises the clock (no `STA_UNSYNC`).
    pub synchronized: bool,
    /// The kernel's bound on the clock's error, in seconds (`maxerror`; grows by
    /// 500 µs a second while nothing synchronises it, up to 16 s).
    pub max_error_s: f64,
}

/// The host clock's discipline, read without changing anything (any user may); `None`
/// if the kernel refuses.
#[allow(unsafe_code)]
pub fn discipline() -> Option<Discipline> {
    // SAFETY: timex is plain data; zeroed, its `modes` is 0, which asks the kernel
    // to read the clock's state into it and change nothing.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid, writable timex for the call's duration.
    let state = unsafe { libc::adjtimex(&mut t) };
    (state >= 0).then(|| Discipline {
        synchronized: t.status & libc::STA_UNSYNC == 0,
        max_error_s: t.maxerror as f64 / 1e6,
    })
}

#[cfg(test)]
mod discipline_tests {
    #[test]
    fn the_kernel_answers_with_a_bounded_error() {
        let d = super::discipline().expect("adjtimex reads for any user");
        assert!((0.0..=16.5).contains(&d.max_error_s), "{d:?}");
    }
}
