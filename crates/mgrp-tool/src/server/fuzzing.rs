//! A sender's connections driven request by request without sockets, for the fuzz
//! target `sender_protocol`; not an API. Several requesters (IPv4 hosts, and IPv6
//! hosts two of which share a /64) open connections and send any request in any
//! order (hello with any version, transport and address, proofs right and wrong,
//! batches, queries, bye), hang up, and let time pass. The connections run
//! `Connection` against the sender's real places (`Slots`), connection counts
//! and budgets; only the probe sender and the answers to queries are stand-ins.
//!
//! After every input: the places keep their caps and match the connections holding
//! them; no batch leaves unless its connection has a measurement, its probe address
//! is the requester's own or was proven by echoing the cookie sent there, and its
//! bytes were charged to the requester's budget just before; at most one proof
//! leaves per connection, never to a group, loopback or this host; no requester has
//! more than its hourly budget; a query is answered only about the asker's own
//! address; a connection past its deadline is served nothing more.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::connection::{Connection, Host, Query, Step};
use super::{
    MAX_CONNECTIONS, MAX_EXCLUSIVE, MAX_MEASUREMENTS, MAX_MEASUREMENTS_PER_HOST,
    MAX_WAITING_EXCLUSIVE, OpenConnection, ServeEvent, ServeOptions, Slot, Slots, unprovable,
};
use crate::budget::{Budgets, Limits};
use crate::control::{
    Batch, CONTROL_VERSION, PROOF_PROBE_BYTES, Reply, Request, SentReport, Tag, Transport,
};
use crate::requester::Requester;

/// Small limits, so that short inputs reach them.
const LIMITS: Limits = Limits {
    bytes_per_hour: 2_000_000,
    bits_per_second: 8_000_000,
    rate_window: Duration::from_secs(2),
};

/// The requesters' addresses: the last three are IPv6, the first two of them in one
/// /64 (one requester).
const HOSTS: [IpAddr; 6] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 2)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1)),
];

/// What the sender around one connection did, as the checks need it.
struct Fake<'s> {
    slots: &'s Slots,
    budgets: &'s Mutex<Budgets>,
    claimed: Option<Slot<'s>>,
    key: Requester,
    own: IpAddr,
    now: Instant,
    /// Where the probe sender sends, if one is open.
    sender: Option<SocketAddr>,
    /// The cookie of the proof sent through it, and whether it came back.
    proof: Option<u64>,
    echoed: bool,
    proofs: u32,
    /// Bytes granted by the last `spend`, not yet sent.
    granted: Option<u64>,
    next_cookie: u64,
}

impl Host for Fake<'_> {
    fn claim(&mut self, exclusive: bool) -> Result<(), String> {
        if self.claimed.is_none() {
            self.claimed = Some(self.slots.claim_at(self.key, exclusive, self.now)?);
        }
        Ok(())
    }

    fn open_sender(
        &mut self,
        transport: Transport,
        dst: SocketAddr,
        _: bool,
    ) -> Result<(), String> {
        assert_eq!(transport, Transport::Udp, "a sender of another transport");
        self.sender = None;
        self.proof = None;
        self.echoed = false;
        if dst.port() == 0 {
            return Err("no probe port".into());
        }
        self.sender = Some(dst);
        Ok(())
    }

    fn close_sender(&mut self) {
        self.sender = None;
        self.proof = None;
        self.echoed = false;
    }

    fn send_proof(&mut self, cookie: u64) -> Result<(), String> {
        let dst = self.sender.expect("a proof without a probe sender");
        assert_ne!(dst.ip(), self.own, "a proof to the asker's own address");
        assert!(unprovable(dst.ip()).is_none(), "a proof to {dst}");
        assert_eq!(
            self.granted.take(),
            Some(u64::from(PROOF_PROBE_BYTES)),
            "a proof not charged"
        );
        self.proofs += 1;
        assert!(self.proofs <= 1, "a second proof on one connection");
        if dst.port() == 1 {
            return Err("the network refused it".into());
        }
        self.proof = Some(cookie);
        Ok(())
    }

    fn spend(&mut self, bytes: u64) -> Result<(), Reply> {
        let mut b = mgrp_rt::lock(self.budgets);
        b.take(self.key, self.now, bytes)
            .map_err(|_| Reply::Error {
                message: "refused: over budget".into(),
            })?;
        assert!(b.spent(self.key, self.now) <= LIMITS.bytes_per_hour);
        self.granted = Some(bytes);
        Ok(())
    }

    fn meter(&mut self, free: bool) -> Result<(), Reply> {
        if free {
            return Ok(());
        }
        mgrp_rt::lock(self.budgets)
            .ask(self.key, self.now)
            .map_err(|_| Reply::Error {
                message: "refused: over the query rate".into(),
            })
    }

    fn send_batch(&mut self, batch: &Batch, _: u32) -> Reply {
        let dst = self.sender.expect("a batch without a probe sender");
        assert!(self.claimed.is_some(), "a batch outside a measurement");
        assert!(
            dst.ip() == self.own || (self.proof.is_some() && self.echoed),
            "a batch to {dst}, never proven"
        );
        assert_eq!(
            self.granted.take(),
            Some(batch.bytes()),
            "a batch not charged"
        );
        Reply::Sent(SentReport {
            tag: batch.tag,
            sent: 0,
            sender_stamps: Vec::new(),
            competing_rider_bytes: 0,
            rider_bytes: 0,
            riding_probe_bytes: 0,
            kernel_stamps: false,
        })
    }

    fn query(&mut self, _: Query, to: IpAddr) -> Reply {
        assert_eq!(to, self.own, "a question about another host");
        Reply::Pong
    }

    fn max_size(&self) -> u32 {
        1500
    }

    fn cookie(&mut self) -> u64 {
        self.next_cookie = self
            .next_cookie
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1);
        self.next_cookie
    }

    fn unprovable(&self, ip: IpAddr) -> Option<&'static str> {
        unprovable(ip)
    }

    fn udp_warning(&self) -> Option<String> {
        None
    }

    fn report(&mut self, _: ServeEvent) {}
}

/// One open connection.
struct Open<'s> {
    machine: Connection,
    host: Fake<'s>,
    _counted: OpenConnection<'s>,
}

/// The request `(a, b, c)` encodes, on a connection whose host is `host`.
fn request(a: u8, b: u8, c: u8, host: &mut Fake<'_>) -> Request {
    let other = |c: u8| match c % 4 {
        0 => host.own,
        1 => IpAddr::V4(Ipv4Addr::new(192, 0, 2, c)),
        2 => IpAddr::V4(Ipv4Addr::LOCALHOST),
        _ => IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)),
    };
    match a % 8 {
        0 => Request::Hello {
            version: if b & 0x40 == 0 { CONTROL_VERSION } else { 999 },
            transport: if b & 0x20 == 0 {
                Transport::Udp
            } else {
                Transport::Mgrp
            },
            address: (b & 1 == 1).then(|| other(c)),
            probe_port: u16::from(c >> 2),
            piggyback: false,
            tool: String::new(),
            exclusive: b & 0x10 != 0,
        },
        1 => {
            let cookie = match host.proof {
                Some(p) if b & 1 == 1 => p,
                _ => u64::from(b) << 8 | u64::from(c),
            };
            host.echoed |= host.proof == Some(cookie);
            Request::Proof { cookie }
        }
        2 => Request::Probes(Batch::even(
            Tag {
                kind: 1,
                fleet: 0,
                stream: 0,
            },
            u32::from(b) + 1,
            100 + u32::from(c) * 8,
            1_000,
            0,
        )),
        3 => Request::Ping,
        4 => Request::Traffic {
            address: (b & 1 == 1).then(|| other(c)),
        },
        5 => Request::Tcp {
            address: (b & 1 == 1).then(|| other(c)),
        },
        6 => Request::Stamps {
            address: (b & 1 == 1).then(|| other(c)),
            after: u64::from(c),
        },
        _ => Request::Bye,
    }
}

/// Checks the places against the connections that hold them.
fn check_places(slots: &Slots, conns: &[Option<Open<'_>>]) {
    let r = mgrp_rt::lock(&slots.0);
    let held: Vec<&Slot<'_>> = conns
        .iter()
        .flatten()
        .filter_map(|o| o.host.claimed.as_ref())
        .collect();
    let all: usize = r.per_host.values().sum();
    assert_eq!(all, held.len(), "places not held by any connection");
    assert!(all <= MAX_MEASUREMENTS);
    assert!(r.per_host.values().all(|&n| n <= MAX_MEASUREMENTS_PER_HOST));
    assert_eq!(r.exclusive, held.iter().filter(|s| s.exclusive).count());
    assert!(r.exclusive <= MAX_EXCLUSIVE);
    assert!(r.waiting.len() <= MAX_WAITING_EXCLUSIVE);
}

/// Runs the records of `data` (five bytes each: what, then four arguments) and
/// checks the caps after each; returns the batches sent.
pub fn run(data: &[u8]) -> usize {
    let epoch = Instant::now();
    let opts = ServeOptions::new(Transport::Udp);
    let slots = Slots::default();
    let budgets = Mutex::new(Budgets::starting_at(LIMITS, epoch));
    let open = Mutex::new(HashMap::new());
    let mut conns: Vec<Option<Open<'_>>> = Vec::new();
    let mut t = Duration::ZERO;
    let mut sent = 0;
    for rec in data.chunks_exact(5) {
        let (what, a, b, c, d) = (rec[0], rec[1], rec[2], rec[3], rec[4]);
        let now = epoch + t;
        match what % 4 {
            // A host connects, if the sender takes it.
            0 => {
                let ip = HOSTS[usize::from(a) % HOSTS.len()];
                let key = Requester::of(ip, opts.ipv6_prefix);
                let live = conns.iter().flatten().count();
                if live >= MAX_CONNECTIONS {
                    continue;
                }
                let Ok(counted) =
                    OpenConnection::count(&open, key, super::MAX_CONNECTIONS_PER_HOST)
                else {
                    continue;
                };
                let peer = SocketAddr::new(ip, 40_000 + u16::from(b));
                conns.push(Some(Open {
                    machine: Connection::new(peer, now),
                    host: Fake {
                        slots: &slots,
                        budgets: &budgets,
                        claimed: None,
                        key,
                        own: ip,
                        now,
                        sender: None,
                        proof: None,
                        echoed: false,
                        proofs: 0,
                        granted: None,
                        next_cookie: u64::from(c) + 1,
                    },
                    _counted: counted,
                }));
            }
            // A request on a connection: served only before its deadline.
            1 => {
                let n = conns.len();
                let Some(slot) = conns.get_mut(usize::from(a) % n.max(1)) else {
                    continue;
                };
                let Some(o) = slot.as_mut() else {
                    continue;
                };
                o.host.now = now;
                let (deadline, ending) = o.machine.deadline(&opts);
                if now >= deadline {
                    let reply = o.machine.expired(ending, &opts, &mut o.host);
                    assert!(matches!(reply, Reply::Error { .. }));
                    *slot = None;
                } else {
                    let req = request(b, c, d, &mut o.host);
                    let step = o.machine.on_request(req, now, &opts, &mut o.host);
                    let h = &o.host;
                    assert!(h.granted.is_none(), "charged for nothing sent");
                    // A batch would leave exactly when it may.
                    let proven = h
                        .sender
                        .is_some_and(|d| d.ip() == h.own || (h.proof.is_some() && h.echoed));
                    assert_eq!(o.machine.may_send(), proven && h.claimed.is_some());
                    sent += usize::from(matches!(step, Step::Answer(Reply::Sent(_))));
                    if !matches!(step, Step::Answer(_)) {
                        *slot = None;
                    }
                }
            }
            // The receiver hangs up.
            2 => {
                let n = conns.len();
                if let Some(slot) = conns.get_mut(usize::from(a) % n.max(1)) {
                    *slot = None;
                }
            }
            // Time passes: none to about 18 minutes, most of it short.
            _ => t += Duration::from_millis(u64::from(a).pow(2) * 17),
        }
        conns.retain(Option::is_some);
        check_places(&slots, &conns);
        assert!(
            mgrp_rt::lock(&open)
                .values()
                .all(|&n| n <= super::MAX_CONNECTIONS_PER_HOST)
        );
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measurement from the asker's own address, one to a proven address, and
    /// one to an address whose proof was never echoed: the harness's own checks
    /// pass, and the second connection's batches leave only after its proof.
    #[test]
    fn the_harness_runs_a_measurement_and_a_proof() {
        let mut data = Vec::new();
        // Connect host 0; hello from its own address; a batch.
        data.extend_from_slice(&[0, 0, 1, 0, 0]);
        data.extend_from_slice(&[1, 0, 0, 0, 40]);
        data.extend_from_slice(&[1, 0, 2, 0, 10]);
        // Connect host 1; hello naming 192.0.2.x (port 9); proof echoed; a batch.
        data.extend_from_slice(&[0, 1, 2, 0, 0]);
        data.extend_from_slice(&[1, 1, 0, 1, 37]);
        data.extend_from_slice(&[1, 1, 1, 1, 0]);
        data.extend_from_slice(&[1, 1, 2, 0, 10]);
        assert_eq!(run(&data), 2);
        // The same with a wrong cookie: the connection ends, its batch never leaves.
        let n = data.len();
        data[n - 8] = 0;
        assert_eq!(run(&data), 1);
    }
}
