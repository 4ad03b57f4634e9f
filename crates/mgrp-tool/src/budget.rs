//! What each requester may take of a sender, counted without I/O or a clock of its
//! own: the probe bytes it had sent over the last hour (in minute buckets, so a
//! requester's memory is the same whatever it sends), its probe rate averaged over a
//! window (a token bucket as deep as the window), and how often it asks questions (a
//! token bucket too). Requesters are [`Requester`]s, and the table of them is bounded.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::requester::Requester;

/// The window a budget counts over.
pub const BUDGET_WINDOW: Duration = Duration::from_secs(3600);

/// How coarse a budget's clock is: what was sent is counted per bucket this long.
pub const BUCKET: Duration = Duration::from_secs(60);

/// Buckets a budget keeps: the current one and the [`BUDGET_WINDOW`] before it, so a
/// spend counts for at least the window (and at most a bucket more).
const BUCKETS: usize = (BUDGET_WINDOW.as_secs() / BUCKET.as_secs()) as usize + 1;

/// Requesters remembered at most (about 600 bytes each); the one whose last spend is
/// oldest goes first, once those with nothing left to count have gone.
pub const MAX_REQUESTERS: usize = 16_384;

/// Questions (`tcp`, `stamps`, `traffic`) a requester may ask per second, on
/// average: a node of the overlay asks a neighbour about traffic once a second for
/// each link waiting to ride, about its TCP flows and stamps every few seconds, so
/// one that measures a sender with every method asks a handful a second.
pub const QUERIES_PER_SECOND: f64 = 10.0;

/// Questions a requester may ask at once after a quiet while.
pub const QUERY_BURST: f64 = 20.0;

/// What a requester may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Probe bytes per [`BUDGET_WINDOW`].
    pub bytes_per_hour: u64,
    /// Probe bits per second, averaged over `rate_window`.
    pub bits_per_second: u64,
    /// The window the rate is averaged over: a requester may send the rate times the
    /// window at once after a quiet window, then the rate.
    pub rate_window: Duration,
}

impl Limits {
    /// Bytes the rate's bucket holds: the rate over its window.
    fn rate_depth(&self) -> f64 {
        self.bits_per_second as f64 / 8.0 * self.rate_window.as_secs_f64()
    }
}

/// Probe bytes and questions each requester has had.
#[derive(Debug)]
pub struct Budgets {
    limits: Limits,
    /// The start of bucket 0.
    epoch: Instant,
    spent: HashMap<Requester, Spent>,
}

/// One requester's spending.
#[derive(Debug)]
struct Spent {
    /// Bytes sent per bucket, bucket `n` at `n % BUCKETS`.
    buckets: [u64; BUCKETS],
    /// The newest bucket counted.
    newest: u64,
    /// Their sum.
    total: u64,
    /// When it last sent.
    last: Instant,
    /// Bytes its rate allows now, and when that was counted.
    rate_tokens: f64,
    rate_at: Instant,
    /// Questions it may ask now, and when that was counted.
    query_tokens: f64,
    query_at: Instant,
}

impl Spent {
    fn new(limits: &Limits, now: Instant, bucket: u64) -> Self {
        Self {
            buckets: [0; BUCKETS],
            newest: bucket,
            total: 0,
            last: now,
            rate_tokens: limits.rate_depth(),
            rate_at: now,
            query_tokens: QUERY_BURST,
            query_at: now,
        }
    }

    /// Drops the buckets that left the window by bucket `now`.
    fn expire(&mut self, now: u64) {
        if now <= self.newest {
            return;
        }
        if now - self.newest >= BUCKETS as u64 {
            self.buckets = [0; BUCKETS];
            self.total = 0;
        } else {
            for b in self.newest + 1..=now {
                let slot = &mut self.buckets[(b % BUCKETS as u64) as usize];
                self.total -= *slot;
                *slot = 0;
            }
        }
        self.newest = now;
    }

    /// Refills the rate's bucket up to `now`.
    fn refill(&mut self, limits: &Limits, now: Instant) {
        let dt = now.saturating_duration_since(self.rate_at).as_secs_f64();
        self.rate_tokens =
            (self.rate_tokens + dt * limits.bits_per_second as f64 / 8.0).min(limits.rate_depth());
        self.rate_at = self.rate_at.max(now);
        let dt = now.saturating_duration_since(self.query_at).as_secs_f64();
        self.query_tokens = (self.query_tokens + dt * QUERIES_PER_SECOND).min(QUERY_BURST);
        self.query_at = self.query_at.max(now);
    }

    /// Whether it has nothing left to count: no spend in the window, its buckets
    /// full.
    fn idle(&self, limits: &Limits) -> bool {
        self.total == 0
            && self.rate_tokens >= limits.rate_depth()
            && self.query_tokens >= QUERY_BURST
    }
}

/// Why a send was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Over {
    /// The hourly budget.
    Budget(OverBudget),
    /// The probe rate.
    Rate(OverRate),
}

/// A send beyond the hourly budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// Bytes the requester has had over the window.
    pub spent: u64,
    /// The limit.
    pub limit: u64,
    /// When enough of the spend will have left the window for this send.
    pub retry_after: Duration,
}

/// A send beyond the probe rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverRate {
    /// The rate, bit/s.
    pub bits_per_second: u64,
    /// The window it is averaged over.
    pub window: Duration,
    /// When the rate allows this send; `None` if it never does (more than the rate
    /// over its window).
    pub retry_after: Option<Duration>,
}

impl Budgets {
    /// Budgets of `limits` per requester, their buckets counted from now.
    pub fn new(limits: Limits) -> Self {
        Self::starting_at(limits, Instant::now())
    }

    /// Budgets of `limits` per requester, their buckets counted from `epoch`.
    pub fn starting_at(limits: Limits, epoch: Instant) -> Self {
        Self {
            limits,
            epoch,
            spent: HashMap::new(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// New limits, from the next question on; what each requester spent stays
    /// counted.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The bucket `now` falls in.
    fn bucket(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs() / BUCKET.as_secs()
    }

    /// The requester's entry, made (and room for it) if it has none.
    fn entry(&mut self, who: Requester, now: Instant) -> &mut Spent {
        if !self.spent.contains_key(&who) && self.spent.len() >= MAX_REQUESTERS {
            self.forget_one(now);
        }
        let (limits, bucket) = (self.limits, self.bucket(now));
        let s = self
            .spent
            .entry(who)
            .or_insert_with(|| Spent::new(&limits, now, bucket));
        s.expire(bucket);
        s.refill(&limits, now);
        s
    }

    /// Takes `bytes` for `who` at `now` if they fit both its hourly budget and its
    /// rate; else takes nothing and says which limit and when to try again.
    pub fn take(&mut self, who: Requester, now: Instant, bytes: u64) -> Result<(), Over> {
        let (limits, epoch, bucket) = (self.limits, self.epoch, self.bucket(now));
        let s = self.entry(who, now);
        if s.total.saturating_add(bytes) > limits.bytes_per_hour {
            // The buckets that must leave the window before this one fits, oldest
            // first; bucket `b` leaves it when bucket `b + BUCKETS` begins.
            let need = s
                .total
                .saturating_add(bytes)
                .saturating_sub(limits.bytes_per_hour);
            let mut freed = 0u64;
            let mut retry_after = BUDGET_WINDOW;
            let oldest = bucket.saturating_sub(BUCKETS as u64 - 1);
            for b in (oldest..=bucket).filter(|_| bytes <= limits.bytes_per_hour) {
                freed += s.buckets[(b % BUCKETS as u64) as usize];
                if freed >= need {
                    let leaves =
                        epoch + BUCKET * u32::try_from(b + BUCKETS as u64).unwrap_or(u32::MAX);
                    retry_after = leaves.saturating_duration_since(now);
                    break;
                }
            }
            return Err(Over::Budget(OverBudget {
                spent: s.total,
                limit: limits.bytes_per_hour,
                retry_after,
            }));
        }
        let b = bytes as f64;
        if b > s.rate_tokens {
            let rate = limits.bits_per_second as f64 / 8.0;
            let retry_after = (b <= limits.rate_depth() && rate > 0.0)
                .then(|| Duration::from_secs_f64((b - s.rate_tokens) / rate));
            return Err(Over::Rate(OverRate {
                bits_per_second: limits.bits_per_second,
                window: limits.rate_window,
                retry_after,
            }));
        }
        s.rate_tokens -= b;
        s.buckets[(bucket % BUCKETS as u64) as usize] += bytes;
        s.total += bytes;
        s.last = now;
        Ok(())
    }

    /// Takes one question for `who` at `now`, or says when it may ask again.
    pub fn ask(&mut self, who: Requester, now: Instant) -> Result<(), Duration> {
        let s = self.entry(who, now);
        if s.query_tokens < 1.0 {
            return Err(Duration::from_secs_f64(
                (1.0 - s.query_tokens) / QUERIES_PER_SECOND,
            ));
        }
        s.query_tokens -= 1.0;
        s.last = now;
        Ok(())
    }

    /// Bytes `who` has had over the window ending at `now`.
    pub fn spent(&mut self, who: Requester, now: Instant) -> u64 {
        let bucket = self.bucket(now);
        self.spent.get_mut(&who).map_or(0, |s| {
            s.expire(bucket);
            s.total
        })
    }

    /// Time buckets held, for every requester together: what the table's memory
    /// grows with.
    pub fn records(&self) -> usize {
        self.spent.len() * BUCKETS
    }

    /// Forgets the requesters with nothing left to count, or else the one that last
    /// took anything longest ago.
    fn forget_one(&mut self, now: Instant) {
        let (limits, bucket) = (self.limits, self.bucket(now));
        self.spent.retain(|_, s| {
            s.expire(bucket);
            s.refill(&limits, now);
            !s.idle(&limits)
        });
        if self.spent.len() < MAX_REQUESTERS {
            return;
        }
        let oldest = self
            .spent
            .iter()
            .min_by_key(|(_, s)| s.last)
            .map(|(who, _)| *who);
        if let Some(who) = oldest {
            self.spent.remove(&who);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn ip(last: u8) -> Requester {
        Requester::of(IpAddr::from([10, 0, 0, last]), 64)
    }

    /// An hourly budget of `bytes`, with a rate that never refuses.
    fn hourly(bytes: u64) -> Limits {
        Limits {
            bytes_per_hour: bytes,
            bits_per_second: u64::MAX / 16,
            rate_window: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_requester_gets_its_limit_per_window_and_no_more() {
        let t0 = Instant::now();
        let mut b = Budgets::starting_at(hourly(1000), t0);
        assert!(b.take(ip(1), t0, 600).is_ok());
        assert!(b.take(ip(1), t0 + Duration::from_secs(70), 400).is_ok());
        let Err(Over::Budget(over)) = b.take(ip(1), t0 + Duration::from_secs(80), 1) else {
            panic!("over the limit")
        };
        assert_eq!((over.spent, over.limit), (1000, 1000));
        // The first spend leaves the window when the bucket an hour after its own
        // ends (buckets are a minute long).
        assert_eq!(
            over.retry_after,
            BUDGET_WINDOW + BUCKET - Duration::from_secs(80)
        );
        // Another requester has its own budget.
        assert!(b.take(ip(2), t0 + Duration::from_secs(80), 1000).is_ok());
        // Once the first spend has left the window, 600 bytes fit again.
        let later = t0 + BUDGET_WINDOW + BUCKET;
        assert_eq!(b.spent(ip(1), later), 400);
        assert!(b.take(ip(1), later, 600).is_ok());
        assert!(b.take(ip(1), later, 1).is_err());
        // Nothing is counted for less than the window.
        assert_eq!(b.spent(ip(1), t0 + 2 * BUDGET_WINDOW), 600);
    }

    #[test]
    fn a_send_larger_than_the_limit_never_fits() {
        let mut b = Budgets::new(hourly(1000));
        let Err(Over::Budget(over)) = b.take(ip(1), Instant::now(), 1001) else {
            panic!("too large")
        };
        assert_eq!(over.spent, 0);
        assert_eq!(over.retry_after, BUDGET_WINDOW);
    }

    #[test]
    fn a_requester_sending_many_small_batches_takes_bounded_memory() {
        let t0 = Instant::now();
        let mut b = Budgets::starting_at(hourly(u64::MAX), t0);
        // A batch every 10 ms for an hour.
        for i in 0..360_000u64 {
            b.take(ip(1), t0 + Duration::from_millis(i * 10), 76)
                .unwrap();
        }
        assert!(
            b.records() <= 64,
            "{} records for one requester",
            b.records()
        );
        assert_eq!(
            b.spent(ip(1), t0 + Duration::from_millis(3_599_990)),
            360_000 * 76
        );
    }

    #[test]
    fn the_table_of_requesters_is_bounded() {
        let t0 = Instant::now();
        let mut b = Budgets::starting_at(hourly(u64::MAX), t0);
        let who = |i: u32| Requester::of(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), 64);
        for i in 0..(MAX_REQUESTERS as u32 + 10) {
            b.take(who(i), t0 + Duration::from_millis(u64::from(i)), 1)
                .unwrap();
        }
        assert!(b.spent.len() <= MAX_REQUESTERS);
        // The newest stays, the oldest went.
        let now = t0 + Duration::from_secs(30);
        assert_eq!(b.spent(who(MAX_REQUESTERS as u32 + 9), now), 1);
        assert_eq!(b.spent(who(0), now), 0);
    }

    #[test]
    fn the_probe_rate_is_averaged_over_its_window() {
        let t0 = Instant::now();
        // 8 Mbit/s over 10 s: 10 MB at once, then 1 MB a second.
        let mut b = Budgets::starting_at(
            Limits {
                bytes_per_hour: u64::MAX,
                bits_per_second: 8_000_000,
                rate_window: Duration::from_secs(10),
            },
            t0,
        );
        assert!(b.take(ip(1), t0, 6_000_000).is_ok());
        assert!(b.take(ip(1), t0, 4_000_000).is_ok());
        let Err(Over::Rate(over)) = b.take(ip(1), t0, 500_000) else {
            panic!("over the rate")
        };
        assert_eq!(over.bits_per_second, 8_000_000);
        let retry = over.retry_after.expect("fits later");
        assert!(
            (retry.as_secs_f64() - 0.5).abs() < 1e-6,
            "half a megabyte comes back in half a second, not {retry:?}"
        );
        // Nothing of a refused send is counted.
        assert_eq!(b.spent(ip(1), t0), 10_000_000);
        assert!(b.take(ip(1), t0 + retry, 500_000).is_ok());
        // Another requester has its own rate.
        assert!(b.take(ip(2), t0, 10_000_000).is_ok());
        // A send beyond what the window holds never fits.
        let Err(Over::Rate(never)) = b.take(ip(3), t0, 10_000_001) else {
            panic!("beyond the window")
        };
        assert_eq!(never.retry_after, None);
        // Sustained, it gets the rate: 100 sends of 100 kB a tenth of a second apart.
        for i in 1..=100u64 {
            let at = t0 + Duration::from_secs(20) + Duration::from_millis(i * 100);
            b.take(ip(2), at, 100_000).unwrap();
        }
    }

    #[test]
    fn refused_by_the_budget_takes_nothing_of_the_rate() {
        let t0 = Instant::now();
        let mut b = Budgets::starting_at(
            Limits {
                bytes_per_hour: 1000,
                bits_per_second: 8000,
                rate_window: Duration::from_secs(1),
            },
            t0,
        );
        assert!(matches!(b.take(ip(1), t0, 1001), Err(Over::Budget(_))));
        assert!(b.take(ip(1), t0, 1000).is_ok());
    }

    #[test]
    fn questions_are_metered_per_requester() {
        let t0 = Instant::now();
        let mut b = Budgets::starting_at(hourly(0), t0);
        let burst = QUERY_BURST as usize;
        for _ in 0..burst {
            b.ask(ip(1), t0).unwrap();
        }
        let wait = b.ask(ip(1), t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert!(b.ask(ip(2), t0).is_ok(), "another requester asks on");
        assert!(b.ask(ip(1), t0 + wait).is_ok());
        // Over ten seconds, about the rate and the burst.
        let mut asked = 0;
        for i in 0..10_000u64 {
            if b.ask(ip(3), t0 + Duration::from_millis(i)).is_ok() {
                asked += 1;
            }
        }
        let most = burst + (QUERIES_PER_SECOND * 10.0) as usize + 1;
        assert!(
            (most - 2..=most).contains(&asked),
            "{asked} of at most {most}"
        );
    }
}
