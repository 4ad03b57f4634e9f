//! Keepalives: to each UDP peer configured with `keepalive`, an authenticated empty
//! MGRP packet at that interval, the first at start. A host behind a NAT uses them
//! to open the NAT's mapping and keep it open, so its peer can reach it any time,
//! and so the peer learns where it is.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::counters::{Counters, LimitedLog, bump};
use crate::lifecycle::Lifecycle;
use crate::net::Net;

/// Longest sleep between looks at what is due (and at a stop).
const IDLE: Duration = Duration::from_millis(200);

/// Sends keepalives to the UDP peers in force that ask for them.
#[derive(Debug)]
pub(crate) struct Keepalives {
    config: Arc<Config>,
}

impl Keepalives {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Self { config }
    }

    /// The peers that get keepalives now, and how often (a reload may change them).
    fn peers(&self) -> Vec<(IpAddr, Duration)> {
        self.config
            .peering()
            .udp
            .peers
            .iter()
            .filter_map(|p| p.keepalive.map(|k| (p.prefix.addr(), k)))
            .collect()
    }

    /// Sends keepalives until shutdown; a peer added by a reload gets its first at
    /// once.
    pub(crate) fn run(&self, net: &Net, counters: &Counters, life: &Lifecycle) {
        let log = LimitedLog::default();
        let mut due: HashMap<IpAddr, Instant> = HashMap::new();
        while !life.is_stopping() {
            let now = Instant::now();
            let peers = self.peers();
            due.retain(|peer, _| peers.iter().any(|(p, _)| p == peer));
            for (peer, every) in &peers {
                let due = due.entry(*peer).or_insert(now);
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
            let next = due.values().min().copied().unwrap_or(now + IDLE);
            let wait = next.saturating_duration_since(Instant::now()).min(IDLE);
            std::thread::sleep(wait);
        }
    }
}
