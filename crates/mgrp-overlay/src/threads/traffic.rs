//! Links that wait for application traffic to ride in their probes: their
//! neighbours asked how much their mgrpd routes to this node.

use std::time::Duration;

use mgrp_rt::lock;
use pathload_rs::tool::sender_traffic;
use tracing::debug;

use crate::state::shared::Shared;

/// How often a link waiting for traffic to ride asks its neighbour for it, and how
/// long before it falls due it starts asking.
const TRAFFIC_POLL: Duration = Duration::from_secs(1);

/// Asks the neighbours of links that wait for traffic to ride how much their mgrpd
/// routes to this node, every [`TRAFFIC_POLL`], and tells the scheduler. A neighbour
/// that cannot say counts as no traffic: the link then runs at the end of its wait.
pub(crate) fn watch_traffic(s: &Shared) {
    while !s.stopping() {
        let wanting = lock(&s.sched).wanting_traffic(mgrp_rt::mono_now(), TRAFFIC_POLL);
        for i in wanting {
            let link = &s.config.links[i];
            let bps = match sender_traffic(&link.from.to_string(), link.port, None) {
                Ok(t) => t.bytes_per_second.saturating_mul(8),
                Err(e) => {
                    debug!("{}: no traffic figures from {}: {e}", link.name, link.from);
                    0
                }
            };
            let min = link.timing.ride_min_bps.unwrap_or(0);
            debug!("{}: {bps} bit/s to ride (waiting for {min})", link.name);
            lock(&s.sched).handle_traffic(i, bps);
            if bps >= min {
                s.wake.notify_all();
            }
        }
        // Sleeps in steps, so that a stop is seen soon.
        let until = std::time::Instant::now() + TRAFFIC_POLL;
        while !s.stopping() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
