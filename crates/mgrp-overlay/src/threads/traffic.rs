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
/// routes to this node, every [`TRAFFIC_POLL`], and tells the scheduler (nothing
/// while no link waits for traffic). A neighbour
/// that cannot say counts as no traffic: the link then runs at the end of its wait.
pub(crate) fn watch_traffic(s: &Shared) {
    while !s.stopping() {
        let (wanting, config, generation) = {
            let sched = lock(&s.sched);
            let w = sched.wanting_traffic(mgrp_rt::mono_now(), TRAFFIC_POLL);
            (w, s.config(), sched.generation())
        };
        for i in wanting {
            let link = &config.links[i];
            let bps = match sender_traffic(&link.from.to_string(), link.port, None) {
                Ok(t) => t.bytes_per_second.saturating_mul(8),
                Err(e) => {
                    debug!("{}: no traffic figures from {}: {e}", link.name, link.from);
                    0
                }
            };
            let min = link.timing.ride_min_bps.unwrap_or(0);
            debug!("{}: {bps} bit/s to ride (waiting for {min})", link.name);
            let mut sched = lock(&s.sched);
            // After a reload the index may name another link: its answer waits for
            // the next poll.
            if sched.generation() == generation {
                sched.handle_traffic(i, bps);
            }
            drop(sched);
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
