//! Waiting precisely: the timerfd armed with absolute deadlines, the eventfd one
//! thread signals and another sleeps on, and the pacing wait (sleep, then spin).

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::EfdFlags;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{
    ClockId as TimerClock, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags,
};

use mgrp_core::MonoTime;

use crate::clock::mono_now;

/// A `CLOCK_MONOTONIC` timerfd armed with absolute deadlines.
#[derive(Debug)]
pub struct Timer {
    fd: TimerFd,
}

impl Timer {
    /// A new, disarmed timer.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: TimerFd::new(TimerClock::CLOCK_MONOTONIC, TimerFlags::TFD_CLOEXEC)?,
        })
    }

    /// Arms the timer to fire at `at` (absolute, and at least 1 ns: zero would disarm
    /// it). Arming also clears an expiry that was never read.
    fn arm(&self, at: MonoTime) -> io::Result<()> {
        let n = at.as_nanos().max(1);
        let when = TimeSpec::new(
            (n / 1_000_000_000) as libc::time_t,
            (n % 1_000_000_000) as libc::c_long,
        );
        self.fd.set(
            Expiration::OneShot(when),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )?;
        Ok(())
    }

    /// Blocks until the monotonic clock reaches `at` (returns at once if it has).
    pub fn sleep_until(&self, at: MonoTime) -> io::Result<()> {
        if at.as_nanos() == 0 {
            return Ok(());
        }
        self.arm(at)?;
        self.fd.wait()?;
        Ok(())
    }

    /// Blocks until the monotonic clock reaches `at` or `event` is signalled,
    /// whichever comes first; returns whether `event` was (its count is then cleared).
    pub fn sleep_until_or(&self, at: MonoTime, event: &EventFd) -> io::Result<bool> {
        self.arm(at)?;
        let mut fds = [
            PollFd::new(self.fd.as_fd(), PollFlags::POLLIN),
            PollFd::new(event.fd.as_fd(), PollFlags::POLLIN),
        ];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => break,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let signalled = fds[1]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if signalled {
            event.clear();
        }
        Ok(signalled)
    }
}

/// An eventfd: one thread signals, another sleeps until it is signalled.
#[derive(Debug)]
pub struct EventFd {
    fd: nix::sys::eventfd::EventFd,
}

impl EventFd {
    /// A new, unsignalled eventfd (non-blocking).
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: nix::sys::eventfd::EventFd::from_flags(
                EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
            )?,
        })
    }

    /// Signals it (a no-op if it is signalled already, short of 2^64 signals).
    pub fn signal(&self) {
        // Only fails when the count would overflow, which leaves it signalled anyway.
        let _ = self.fd.write(1);
    }

    /// Clears it (non-blocking: an unsignalled eventfd returns at once).
    pub fn clear(&self) {
        let _ = self.fd.read();
    }

    /// Blocks until it is signalled or `timeout` passes, then clears it; returns
    /// whether it was signalled.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        let signalled = poll(&mut fds, poll_timeout(timeout)).unwrap_or(0) > 0
            && fds[0]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if signalled {
            self.clear();
        }
        signalled
    }
}

/// A poll timeout of `d`, or the longest poll allows.
pub fn poll_timeout(d: Duration) -> PollTimeout {
    PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX)
}

/// Sleeps on the timer until `margin` before `deadline`, then spins on the monotonic
/// clock until `deadline`. Returns how long it spun.
pub fn wait_until(timer: &Timer, deadline: MonoTime, margin: Duration) -> Duration {
    let wake = MonoTime::from_nanos(
        deadline
            .as_nanos()
            .saturating_sub(u64::try_from(margin.as_nanos()).unwrap_or(u64::MAX)),
    );
    if mono_now() < wake {
        let _ = timer.sleep_until(wake);
    }
    let start = mono_now();
    spin_until(deadline).saturating_since(start)
}

/// Spins on the monotonic clock until `deadline`; returns the time the spin ended.
pub fn spin_until(deadline: MonoTime) -> MonoTime {
    loop {
        let now = mono_now();
        if now >= deadline {
            return now;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_waits_until_deadline() {
        let t = Timer::new().unwrap();
        let deadline = mono_now().saturating_add(Duration::from_micros(500));
        let spun = wait_until(&t, deadline, Duration::from_micros(150));
        assert!(mono_now() >= deadline);
        assert!(spun <= Duration::from_micros(500), "{spun:?}");
        // Without a margin it only sleeps (the timer never fires early).
        let deadline = mono_now().saturating_add(Duration::from_micros(500));
        let spun = wait_until(&t, deadline, Duration::ZERO);
        assert!(mono_now() >= deadline);
        assert!(spun < Duration::from_micros(100), "{spun:?}");
    }
}
