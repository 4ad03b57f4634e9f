//! What each requester may take of a sender, counted without I/O or a clock of its
//! own: the probe bytes it had sent over the last hour (a sliding window), against a
//! limit.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The window a budget counts over.
pub const BUDGET_WINDOW: Duration = Duration::from_secs(3600);

/// Requesters remembered at most; the one whose last spend is oldest goes first.
pub const MAX_REQUESTERS: usize = 4096;

/// Probe bytes sent for each requester over the last [`BUDGET_WINDOW`].
#[derive(Debug)]
pub struct Budgets {
    limit: u64,
    spent: HashMap<IpAddr, Spent>,
}

#[derive(Debug, Default)]
struct Spent {
    /// What was sent, when; oldest first.
    sends: VecDeque<(Instant, u64)>,
    total: u64,
}

impl Spent {
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, bytes)) = self.sends.front() {
            if now.saturating_duration_since(at) < BUDGET_WINDOW {
                break;
            }
            self.sends.pop_front();
            self.total -= bytes;
        }
    }
}

/// Why a send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// Bytes the requester has had over the window.
    pub spent: u64,
    /// The limit.
    pub limit: u64,
    /// When enough of the spend will have left the window for this send.
    pub retry_after: Duration,
}

impl Budgets {
    /// Budgets of `limit` bytes per requester per window.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            spent: HashMap::new(),
        }
    }

    /// Takes `bytes` for `who` at `now` if they fit its budget; else says how much it
    /// had and when to try again.
    pub fn take(&mut self, who: IpAddr, now: Instant, bytes: u64) -> Result<(), OverBudget> {
        if !self.spent.contains_key(&who) && self.spent.len() >= MAX_REQUESTERS {
            self.forget_one(now);
        }
        let s = self.spent.entry(who).or_default();
        s.expire(now);
        if s.total.saturating_add(bytes) > self.limit {
            // The spends that must leave the window before this one fits.
            let mut freed = 0u64;
            let need = s.total.saturating_add(bytes).saturating_sub(self.limit);
            let mut retry_after = BUDGET_WINDOW;
            for &(at, b) in &s.sends {
                freed += b;
                if freed >= need {
                    retry_after = BUDGET_WINDOW.saturating_sub(now.saturating_duration_since(at));
                    break;
                }
            }
            return Err(OverBudget {
                spent: s.total,
                limit: self.limit,
                retry_after,
            });
        }
        s.sends.push_back((now, bytes));
        s.total += bytes;
        Ok(())
    }

    /// Bytes `who` has had over the window ending at `now`.
    pub fn spent(&mut self, who: IpAddr, now: Instant) -> u64 {
        self.spent.get_mut(&who).map_or(0, |s| {
            s.expire(now);
            s.total
        })
    }

    /// Forgets the requesters with nothing in the window, or else the one whose last
    /// spend is oldest.
    fn forget_one(&mut self, now: Instant) {
        self.spent.retain(|_, s| {
            s.expire(now);
            s.total > 0
        });
        if self.spent.len() < MAX_REQUESTERS {
            return;
        }
        let oldest = self
            .spent
            .iter()
            .min_by_key(|(_, s)| s.sends.back().map(|&(at, _)| at))
            .map(|(ip, _)| *ip);
        if let Some(ip) = oldest {
            self.spent.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_requester_gets_its_limit_per_window_and_no_more() {
        let t0 = Instant::now();
        let mut b = Budgets::new(1000);
        assert!(b.take(ip(1), t0, 600).is_ok());
        assert!(b.take(ip(1), t0 + Duration::from_secs(10), 400).is_ok());
        let over = b
            .take(ip(1), t0 + Duration::from_secs(20), 1)
            .expect_err("over the limit");
        assert_eq!((over.spent, over.limit), (1000, 1000));
        // The first spend leaves the window an hour after it was made.
        assert_eq!(over.retry_after, BUDGET_WINDOW - Duration::from_secs(20));
        // Another requester has its own budget.
        assert!(b.take(ip(2), t0 + Duration::from_secs(20), 1000).is_ok());
        // Once the first spend has left the window, 600 bytes fit again.
        let later = t0 + BUDGET_WINDOW;
        assert_eq!(b.spent(ip(1), later), 400);
        assert!(b.take(ip(1), later, 600).is_ok());
        assert!(b.take(ip(1), later, 1).is_err());
    }

    #[test]
    fn a_send_larger_than_the_limit_never_fits() {
        let mut b = Budgets::new(1000);
        let over = b.take(ip(1), Instant::now(), 1001).expect_err("too large");
        assert_eq!(over.spent, 0);
        assert_eq!(over.retry_after, BUDGET_WINDOW);
    }

    #[test]
    fn the_table_of_requesters_is_bounded() {
        let t0 = Instant::now();
        let mut b = Budgets::new(u64::MAX);
        for i in 0..(MAX_REQUESTERS as u32 + 10) {
            let who = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            b.take(who, t0 + Duration::from_millis(u64::from(i)), 1)
                .unwrap();
        }
        assert!(b.spent.len() <= MAX_REQUESTERS);
        // The newest stays, the oldest went.
        let newest = IpAddr::from((0x0a00_0000 + MAX_REQUESTERS as u32 + 9).to_be_bytes());
        assert_eq!(b.spent(newest, t0), 1);
        assert_eq!(b.spent(IpAddr::from([10, 0, 0, 0]), t0), 0);
    }
}
