//! The earlier TCP flows each neighbour sent here, as its kernel reported them at
//! every poll: what each got while network-limited, its congestion control, round
//! trip and retransmissions, and what the probes predicted when it began. The
//! prediction blends the latest of them with the probes' when no flow runs now
//! (`btc_rs::history`).
//!
//! No I/O here: the poller hands in each answer and the probes' prediction then.

use std::collections::VecDeque;
use std::net::SocketAddr;

use mgrp_tool::control::TcpFlow;

/// How many flows are kept per neighbour; the oldest goes first.
pub const KEPT: usize = 16;

/// One earlier (or running) flow from the neighbour.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRecord {
    /// The sender's end.
    pub local: SocketAddr,
    /// The receiver's end.
    pub remote: SocketAddr,
    /// Its congestion control, when the kernel said.
    pub congestion: Option<String>,
    /// When it was last seen network-limited, Unix seconds.
    pub last_at: f64,
    /// Time between consecutive polls that both saw it network-limited, s.
    pub seen_s: f64,
    /// Payload bytes acknowledged over that time.
    pub bytes: u64,
    /// BBR's own bottleneck estimate at its last network-limited poll, bit/s.
    pub bbr_bps: Option<f64>,
    /// The kernel's delivery-rate sample at that poll, bit/s.
    pub delivery_bps: Option<f64>,
    /// Its least round trip, s.
    pub min_rtt_s: Option<f64>,
    /// Its retransmitted segments when last seen.
    pub total_retrans: u32,
    /// The probes' prediction when it was first seen, bit/s: the conditions it met
    /// (runs made while it flows measure the path with it in it).
    pub probes_bps: Option<f64>,
    /// Bytes acknowledged and the time at its last poll, for the next delta.
    last_acked: Option<(u64, f64)>,
}

impl FlowRecord {
    /// Whether it runs BBR.
    pub fn is_bbr(&self) -> bool {
        self.congestion.as_deref() == Some("bbr")
    }

    /// What it got, bit/s: BBR's own estimate for a BBR flow that gave one, else
    /// its delivery over its network-limited time, else (one poll saw it) the
    /// kernel's latest delivery sample.
    pub fn bps(&self) -> Option<f64> {
        let delivered =
            (self.seen_s > 0.0 && self.bytes > 0).then(|| self.bytes as f64 * 8.0 / self.seen_s);
        self.bbr_bps
            .filter(|_| self.is_bbr())
            .or(delivered)
            .or(self.delivery_bps)
    }
}

/// The flows of one neighbour, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    flows: VecDeque<FlowRecord>,
}

impl History {
    /// Adds the kernel's answer `flows` at `at`, when the probes predicted
    /// `probes_bps`: a network-limited flow seen at the poll before as well adds
    /// the bytes acknowledged between them; one not limited by the network adds
    /// nothing (its rate says how fast the ends are) and breaks its run of polls.
    pub fn observe(&mut self, flows: &[TcpFlow], at: f64, probes_bps: Option<f64>) {
        for f in flows {
            let i = self
                .flows
                .iter()
                .position(|r| r.local == f.local && r.remote == f.remote);
            if !f.sample.network_limited() {
                if let Some(i) = i {
                    self.flows[i].last_acked = None;
                }
                continue;
            }
            let i = i.unwrap_or_else(|| {
                if self.flows.len() == KEPT {
                    self.flows.pop_front();
                }
                self.flows.push_back(FlowRecord {
                    local: f.local,
                    remote: f.remote,
                    congestion: f.congestion.clone(),
                    last_at: at,
                    seen_s: 0.0,
                    bytes: 0,
                    bbr_bps: None,
                    delivery_bps: None,
                    min_rtt_s: None,
                    total_retrans: 0,
                    probes_bps,
                    last_acked: None,
                });
                self.flows.len() - 1
            });
            let r = &mut self.flows[i];
            if let (Some((then, t0)), Some(now)) = (r.last_acked, f.sample.bytes_acked)
                && now >= then
                && at > t0
            {
                r.bytes += now - then;
                r.seen_s += at - t0;
            }
            r.last_acked = f.sample.bytes_acked.map(|b| (b, at));
            r.last_at = at;
            r.congestion = f.congestion.clone().or(r.congestion.take());
            r.bbr_bps = f
                .bbr
                .as_ref()
                .map(|b| b.bandwidth_bps)
                .filter(|b| b.is_finite() && *b > 0.0)
                .or(r.bbr_bps);
            r.delivery_bps = f.sample.delivery_bps.or(r.delivery_bps);
            r.min_rtt_s = f.sample.min_rtt_s.or(r.min_rtt_s);
            r.total_retrans = f.sample.total_retrans;
        }
    }

    /// The flow last seen network-limited that ran BBR (`bbr`) or a loss-based
    /// congestion control (not `bbr`).
    pub fn latest(&self, bbr: bool) -> Option<&FlowRecord> {
        self.flows
            .iter()
            .filter(|r| r.is_bbr() == bbr && r.bps().is_some())
            .max_by(|a, b| a.last_at.total_cmp(&b.last_at))
    }

    /// The flows, oldest first.
    #[cfg(test)]
    fn flows(&self) -> impl Iterator<Item = &FlowRecord> {
        self.flows.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::passive::tests::flow;

    #[test]
    fn a_flow_counts_its_network_limited_polls_only() {
        let mut h = History::default();
        // First seen: one poll gives no delta, so the kernel's delivery sample.
        h.observe(&[flow(5001, 8e6, 1_000_000, false, 0.0)], 100.0, Some(5e6));
        assert_eq!(h.latest(false).unwrap().bps(), Some(8e6));
        // 1 MB in 2 s: 4 Mbit/s.
        h.observe(&[flow(5001, 8e6, 2_000_000, false, 0.0)], 102.0, Some(9e6));
        let r = h.latest(false).unwrap();
        assert_eq!((r.bps(), r.seen_s), (Some(4e6), 2.0));
        // The probes' value is the one from when it began.
        assert_eq!(r.probes_bps, Some(5e6));
        // Limited by the application for a poll: nothing added, and the next poll
        // starts a new delta rather than counting the slow time.
        h.observe(&[flow(5001, 1e6, 2_100_000, true, 0.0)], 104.0, None);
        h.observe(&[flow(5001, 8e6, 3_000_000, false, 0.0)], 106.0, None);
        assert_eq!(h.latest(false).unwrap().bps(), Some(4e6));
        h.observe(&[flow(5001, 8e6, 4_500_000, false, 0.0)], 107.0, None);
        let r = h.latest(false).unwrap();
        assert_eq!((r.bytes, r.seen_s, r.last_at), (2_500_000, 3.0, 107.0));
        // A BBR flow gives its own estimate (its delivery sample without one) and
        // is kept apart.
        let mut b = flow(5002, 6e6, 10, false, 0.0);
        b.congestion = Some("bbr".into());
        b.bbr = Some(mgrp_tool::tcpinfo::BbrInfo {
            bandwidth_bps: 7e6,
            min_rtt_s: 0.04,
            pacing_gain: 1.0,
            cwnd_gain: 2.0,
        });
        h.observe(std::slice::from_ref(&b), 108.0, None);
        assert_eq!(h.latest(true).unwrap().bps(), Some(7e6));
        let mut older = b.clone();
        older.remote.set_port(5003);
        older.bbr = None;
        h.observe(&[older], 109.0, None);
        assert_eq!(h.latest(true).unwrap().bps(), Some(6e6));
        assert_eq!(h.latest(false).unwrap().remote.port(), 5001);
        // Only the last KEPT flows stay.
        for port in 6000..6000 + KEPT as u16 {
            h.observe(&[flow(port, 1e6, 0, false, 0.0)], 200.0, None);
        }
        assert_eq!(h.flows().count(), KEPT);
        assert!(h.flows().all(|r| r.remote.port() >= 6000));
    }
}
