//! The tools listening for probes: registered by API connections, used by the
//! receivers to hand each probe to its tool.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use mgrp_core::api::{ReceivedProbe, Response};
use tokio::sync::mpsc;

use crate::counters::{Counters, bump};
use crate::exchange::Outgoing;

/// A listener registered by an API connection.
#[derive(Debug)]
struct Listener {
    conn: u64,
    source: Option<IpAddr>,
    tx: mpsc::Sender<Outgoing>,
}

/// Why a listener was not registered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ListenError {
    /// This many listeners are open, the most allowed.
    TooMany(usize),
    /// Another connection listens on the port (for overlapping sources).
    PortInUse,
}

/// The listeners, by destination port.
#[derive(Debug, Default)]
pub(crate) struct Listeners(Mutex<HashMap<u16, Vec<Listener>>>);

impl Listeners {
    fn lock(&self) -> MutexGuard<'_, HashMap<u16, Vec<Listener>>> {
        mgrp_rt::lock(&self.0)
    }

    /// Registers connection `conn` for probes to `port` (from `source`, or from
    /// anyone), at most `max` listeners in all; renewing one's own is always allowed.
    pub(crate) fn listen(
        &self,
        conn: u64,
        port: u16,
        source: Option<IpAddr>,
        tx: &mpsc::Sender<Outgoing>,
        max: usize,
    ) -> Result<(), ListenError> {
        let mut listeners = self.lock();
        let total: usize = listeners.values().map(Vec::len).sum();
        let renewing = listeners
            .get(&port)
            .is_some_and(|ls| ls.iter().any(|l| l.conn == conn && l.source == source));
        if total >= max && !renewing {
            return Err(ListenError::TooMany(total));
        }
        let ls = listeners.entry(port).or_default();
        if ls.iter().any(|l| {
            l.conn != conn && (l.source.is_none() || source.is_none() || l.source == source)
        }) {
            return Err(ListenError::PortInUse);
        }
        ls.retain(|l| l.conn != conn || l.source != source);
        ls.push(Listener {
            conn,
            source,
            tx: tx.clone(),
        });
        Ok(())
    }

    /// Drops connection `conn`'s listeners on `port`, or on every port.
    pub(crate) fn forget(&self, conn: u64, port: Option<u16>) {
        let mut listeners = self.lock();
        for (p, ls) in listeners.iter_mut() {
            if port.is_none_or(|port| port == *p) {
                ls.retain(|l| l.conn != conn);
            }
        }
        listeners.retain(|_, ls| !ls.is_empty());
    }

    /// Hands a received probe to its listener, or counts why it could not.
    pub(crate) fn deliver(&self, probe: ReceivedProbe, counters: &Counters) {
        let listeners = self.lock();
        let Some(l) = listeners.get(&probe.dst_port).and_then(|ls| {
            ls.iter()
                .find(|l| l.source.is_none_or(|s| s == probe.source))
        }) else {
            bump(&counters.probes_unclaimed);
            return;
        };
        // Counted before the probe can reach the tool: a tool that has every probe and
        // then asks for the counters finds every one delivered.
        match l.tx.try_reserve() {
            Ok(slot) => {
                bump(&counters.probes_delivered);
                slot.send((None, Response::Probe(probe)));
            }
            Err(_) => bump(&counters.probes_dropped_slow_listener),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_bounded_exclusive_per_source_and_forgotten() {
        let l = Listeners::default();
        let (tx, _rx) = mpsc::channel(8);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(l.listen(1, 9000, Some(a), &tx, 3), Ok(()));
        // Another connection may take the port for another source only.
        assert_eq!(l.listen(2, 9000, Some(b), &tx, 3), Ok(()));
        assert_eq!(l.listen(2, 9000, None, &tx, 3), Err(ListenError::PortInUse));
        assert_eq!(l.listen(2, 9001, None, &tx, 3), Ok(()));
        assert_eq!(
            l.listen(3, 9002, None, &tx, 3),
            Err(ListenError::TooMany(3))
        );
        // Renewing one's own listener is no new one.
        assert_eq!(l.listen(1, 9000, Some(a), &tx, 3), Ok(()));
        l.forget(2, Some(9001));
        assert_eq!(l.listen(3, 9002, None, &tx, 3), Ok(()));
        l.forget(1, None);
        l.forget(2, None);
        l.forget(3, None);
        assert!(l.lock().is_empty());
    }
}
