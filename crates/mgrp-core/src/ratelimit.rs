//! Token buckets: how many probes and probe bytes a user of the daemon, and all users
//! together, may hand to the pacer per second. Time comes in as an argument.

use std::time::Duration;

use crate::MonoTime;

/// A token bucket: `rate` tokens per second, holding at most `burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<MonoTime>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate_per_sec: f64, burst: f64) -> Self {
        Self {
            rate: rate_per_sec.max(0.0),
            burst: burst.max(0.0),
            tokens: burst.max(0.0),
            last: None,
        }
    }

    fn refill(&mut self, now: MonoTime) {
        if let Some(last) = self.last {
            let dt = now.saturating_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        self.last = Some(now);
    }

    /// How long until `amount` tokens are there, at `now`; zero if they are.
    pub fn wait_for(&mut self, now: MonoTime, amount: f64) -> Duration {
        self.refill(now);
        if self.tokens >= amount {
            return Duration::ZERO;
        }
        if amount > self.burst || self.rate <= 0.0 {
            return Duration::MAX;
        }
        Duration::from_secs_f64((amount - self.tokens) / self.rate)
    }

    /// Takes `amount` tokens (call after [`Self::wait_for`] said zero).
    pub fn take(&mut self, amount: f64) {
        self.tokens = (self.tokens - amount).max(0.0);
    }

    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Largest amount it can ever hold.
    pub fn burst(&self) -> f64 {
        self.burst
    }
}

/// A pair of buckets, probes and bytes, taken from together or not at all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainBudget {
    /// Probes per second.
    pub probes: TokenBucket,
    /// Probe bytes per second.
    pub bytes: TokenBucket,
}

/// Why a train does not fit a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// Too many probes: retry after this long (`Duration::MAX`: never, the train is
    /// larger than the burst).
    Probes(Duration),
    /// Too many bytes: retry after this long.
    Bytes(Duration),
}

impl TrainBudget {
    /// A budget of `probes` and `bytes` per second, with bursts of `probe_burst` and
    /// `byte_burst`.
    pub fn new(probes: f64, probe_burst: f64, bytes: f64, byte_burst: f64) -> Self {
        Self {
            probes: TokenBucket::new(probes, probe_burst),
            bytes: TokenBucket::new(bytes, byte_burst),
        }
    }

    /// Whether a train of `probes` probes and `bytes` bytes fits at `now`, without
    /// taking anything.
    pub fn check(&mut self, now: MonoTime, probes: u64, bytes: u64) -> Result<(), OverBudget> {
        let wp = self.probes.wait_for(now, probes as f64);
        if wp > Duration::ZERO {
            return Err(OverBudget::Probes(wp));
        }
        let wb = self.bytes.wait_for(now, bytes as f64);
        if wb > Duration::ZERO {
            return Err(OverBudget::Bytes(wb));
        }
        Ok(())
    }

    /// Takes a train's probes and bytes.
    pub fn take(&mut self, probes: u64, bytes: u64) {
        self.probes.take(probes as f64);
        self.bytes.take(bytes as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> MonoTime {
        MonoTime::from_nanos(n * 1_000_000)
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let mut b = TokenBucket::new(1000.0, 100.0);
        assert_eq!(b.wait_for(ms(0), 100.0), Duration::ZERO);
        b.take(100.0);
        assert_eq!(b.wait_for(ms(0), 50.0), Duration::from_millis(50));
        assert_eq!(b.wait_for(ms(50), 50.0), Duration::ZERO);
        // Never more than the burst, however long it rests.
        assert_eq!(b.wait_for(ms(10_000), 100.0), Duration::ZERO);
        assert_eq!(b.wait_for(ms(10_000), 101.0), Duration::MAX);
        assert_eq!(
            TokenBucket::new(0.0, 5.0).wait_for(ms(0), 6.0),
            Duration::MAX
        );
    }

    #[test]
    fn a_budget_takes_both_or_nothing() {
        let mut b = TrainBudget::new(100.0, 20.0, 10_000.0, 15_000.0);
        assert_eq!(b.check(ms(0), 10, 10_000), Ok(()));
        b.take(10, 10_000);
        // Probes would fit, bytes not: nothing is taken.
        assert!(matches!(
            b.check(ms(0), 10, 10_000),
            Err(OverBudget::Bytes(_))
        ));
        assert!(matches!(
            b.check(ms(0), 11, 100),
            Err(OverBudget::Probes(_))
        ));
        assert_eq!(b.check(ms(0), 10, 5_000), Ok(()));
        assert!(matches!(
            b.check(ms(0), 21, 1),
            Err(OverBudget::Probes(Duration::MAX))
        ));
    }
}
