//! Keepalives: to each UDP peer configured with `keepalive`, an authenticated empty
//! MGRP packet at that interval, the first at start. A host behind a NAT uses them
//! to open the NAT's mapping and keep it open, so its peer can reach it any time,
//! and so the peer learns where it is.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::counters::{Counters, LimitedLog, bump};
use crate::lifecycle::Lifecycle;
use crate::net::Net;

/// The peers that get keepalives, and how often.
#[derive(Debug)]
pub(crate) struct Keepalives {
    peers: Vec<(IpAddr, Duration)>,
}

impl Keepalives {
    pub(crate) fn new(config: &Config) -> Self {
        let peering = config.peering();
        Self {
            peers: peering
                .udp
                .peers
                .iter()
                .filter_map(|p| p.keepalive.map(|k| (p.prefix.addr(), k)))
                .collect(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Sends keepalives until shutdown.
    pub(crate) fn run(&self, net: &Net, counters: &Counters, life: &Lifecycle) {
        let log = LimitedLog::default();
        let start = Instant::now();
        let mut due: Vec<Instant> = vec![start; self.peers.len()];
        while !life.is_stopping() {
            let now = Instant::now();
            for ((peer, every), due) in self.peers.iter().zip(&mut due) {
                if *due > now {
                    continue;
                }
                *due = now + *every;
                match net.send_keepalive(*peer) {
                    Ok(()) => bump(&counters.keepalives_sent),
                    Err(e) => {
                        bump(&counters.keepalive_send_errors);
                        log.warn(format_args!("cannot send a keepalive to peer {peer}: {e}"));
                    }
                }
            }
            let next = due.iter().min().copied().unwrap_or(now);
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(200));
            std::thread::sleep(wait);
        }
    }
}
