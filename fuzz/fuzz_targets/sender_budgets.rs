//! Any sequence of requests from many requesters, fed to a sender's budgets as its
//! connections would: probe batches (`take`) and questions (`ask`), each after a
//! pause. After every input the caps hold, against a record of what was granted:
//! no requester got more probe bytes than its hourly budget within the budget's
//! window, more than its rate allows over any stretch (the bucket's depth plus the
//! rate times the stretch), or more questions than the burst plus their rate; and
//! the table stays within its bound.
#![no_main]

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use mgrp_tool::budget::{
    BUCKET, BUDGET_WINDOW, Budgets, Limits, MAX_REQUESTERS, QUERIES_PER_SECOND, QUERY_BURST,
};
use mgrp_tool::requester::Requester;

/// Small limits, so that short inputs reach them.
const LIMITS: Limits = Limits {
    bytes_per_hour: 2_000_000,
    bits_per_second: 640_000,
    rate_window: Duration::from_secs(2),
};

/// Whether `grants` (time, amount), oldest first and ending at `now`, keep within
/// `depth` plus `rate` a second over every stretch that ends now.
fn within_rate(grants: &[(Duration, f64)], now: Duration, depth: f64, rate: f64) -> bool {
    let mut sum = 0.0;
    grants.iter().rev().all(|&(at, amount)| {
        sum += amount;
        sum <= depth + rate * (now - at).as_secs_f64() + 1e-6 * sum.max(1.0)
    })
}

fuzz_target!(|data: &[u8]| {
    let epoch = Instant::now();
    let mut budgets = Budgets::starting_at(LIMITS, epoch);
    let buckets = (BUDGET_WINDOW.as_secs() / BUCKET.as_secs()) as usize + 1;
    let byte_rate = LIMITS.bits_per_second as f64 / 8.0;
    let depth = byte_rate * LIMITS.rate_window.as_secs_f64();
    let mut taken: HashMap<Requester, Vec<(Duration, f64)>> = HashMap::new();
    let mut asked: HashMap<Requester, Vec<(Duration, f64)>> = HashMap::new();
    let mut t = Duration::ZERO;
    for op in data.chunks_exact(6) {
        // Past the table's bound the oldest spender is forgotten, and with it what
        // the record holds against it.
        if taken.len() + asked.len() > MAX_REQUESTERS {
            return;
        }
        let n = u16::from_le_bytes([op[0], op[1]]);
        // IPv4 hosts, and IPv6 hosts of which several share a /64.
        let ip: IpAddr = if n & 1 == 0 {
            IpAddr::from([10, 0, (n >> 9) as u8, (n >> 1) as u8])
        } else {
            IpAddr::from([0x2001, 0xdb8, 0, n >> 3, 0, 0, 0, n & 6])
        };
        let who = Requester::of(ip, 64);
        // Pauses from none to about 11 minutes, most of them short.
        t += Duration::from_millis(u64::from(op[2]).pow(2) * 10);
        let now = epoch + t;
        if op[5] & 0x80 == 0 {
            let bytes = u64::from(u16::from_le_bytes([op[3], op[4]])) * 16;
            if budgets.take(who, now, bytes).is_ok() {
                let g = taken.entry(who).or_default();
                g.push((t, bytes as f64));
                g.retain(|&(at, _)| t - at < BUDGET_WINDOW);
                let hour: f64 = g.iter().map(|&(_, b)| b).sum();
                assert!(
                    hour <= LIMITS.bytes_per_hour as f64,
                    "{who}: {hour} bytes within an hour"
                );
                assert!(
                    within_rate(g, t, depth, byte_rate),
                    "{who}: over the rate at {t:?}: {g:?}"
                );
                assert!(budgets.spent(who, now) <= LIMITS.bytes_per_hour);
            }
        } else if budgets.ask(who, now).is_ok() {
            let a = asked.entry(who).or_default();
            a.push((t, 1.0));
            a.retain(|&(at, _)| t - at < Duration::from_secs(60));
            assert!(
                within_rate(a, t, QUERY_BURST, QUERIES_PER_SECOND),
                "{who}: over the question rate at {t:?}: {a:?}"
            );
        }
        assert!(budgets.records() <= MAX_REQUESTERS * buckets);
    }
});
