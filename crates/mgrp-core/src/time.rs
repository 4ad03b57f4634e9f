//! The two clocks of MGRP as two types, so they cannot be mixed up: monotonic time
//! schedules departures and hold timeouts; wall-clock (realtime) nanoseconds are what
//! the kernel stamps received packets with, so sender stamps use the same clock.
//! Neither type reads a clock: the daemon converts at its `sys` boundary.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point on a monotonic clock, in nanoseconds since an arbitrary origin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct MonoTime(u64);

impl MonoTime {
    /// The clock's origin.
    pub const ZERO: Self = Self(0);

    /// The point `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Signed nanoseconds from `other` to `self`.
    pub fn signed_nanos_since(self, other: Self) -> i64 {
        // Two's-complement difference, exact for any two points less than 292 years apart.
        self.0.wrapping_sub(other.0) as i64
    }

    /// `self + d`, saturating at the end of the clock.
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_nanos(d)))
    }
}

impl fmt::Debug for MonoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MonoTime({}ns)", self.0)
    }
}

/// A point on the realtime clock (`CLOCK_REALTIME`), in nanoseconds since the Unix epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct WallTime(u64);

impl WallTime {
    /// The Unix epoch; also what an unstamped probe carries.
    pub const UNIX_EPOCH: Self = Self(0);

    /// The point `nanos` nanoseconds after the Unix epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Signed nanoseconds from `other` to `self` (for one-way delays, which can be
    /// negative when the two hosts' clocks disagree).
    pub fn signed_nanos_since(self, other: Self) -> i64 {
        self.0.wrapping_sub(other.0) as i64
    }
}

impl fmt::Debug for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WallTime({}ns)", self.0)
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Parses a duration as configuration files and flags write it, humantime's way:
/// `10ms`, `150us`, `150µs`, `1.5s`, `5m`, `1h`, `1m 30s`, `500ns` (at most an hour).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_duration_within(s, Duration::from_secs(3600))
}

/// [`parse_duration`] up to `most` (a link's interval may be a day).
pub fn parse_duration_within(s: &str, most: Duration) -> Result<Duration, String> {
    let s = s.trim();
    let d = humantime::parse_duration(s).map_err(|e| {
        format!("{s:?} is not a duration ({e}); write a number and a unit, e.g. 10ms, 1.5s, 5m")
    })?;
    if d > most {
        return Err(format!(
            "{s:?} is out of range: at most {}",
            humantime::format_duration(most)
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_differences() {
        let a = MonoTime::from_nanos(1_000);
        let b = MonoTime::from_nanos(1_500);
        assert_eq!(b.signed_nanos_since(a), 500);
        assert_eq!(a.signed_nanos_since(b), -500);
        assert_eq!(a.saturating_since(b), Duration::ZERO);
        assert_eq!(b.saturating_since(a), Duration::from_nanos(500));
        let w = WallTime::from_nanos(10);
        assert_eq!(WallTime::UNIX_EPOCH.signed_nanos_since(w), -10);
    }

    #[test]
    fn add_saturates() {
        let t = MonoTime::from_nanos(u64::MAX - 1);
        assert_eq!(
            t.saturating_add(Duration::from_secs(1)).as_nanos(),
            u64::MAX
        );
        assert_eq!(duration_nanos(Duration::MAX), u64::MAX);
    }
}
