//! The messages tools and `mgrpd` exchange over the daemon's Unix socket.
//!
//! Framing: one JSON object per line (`\n`-terminated), in both directions. JSON lines
//! were chosen over a compact binary encoding because a probe notification encodes
//! and decodes in about a microsecond, two orders of magnitude below the gaps of any
//! probe train, and because the socket can then be debugged with `socat`. Requests
//! carry an `op` tag, responses a `type` tag. A connection starts with
//! [`Request::Hello`]; the daemon answers [`Response::Hello`] with the version it
//! speaks, or an error if it speaks none the client offered.
//!
//! Since version 2 a request may carry an `id` ([`RequestFrame`]), which the answer
//! to it echoes ([`ResponseFrame`]): a client may then have several calls in flight
//! on one connection and give up on one without confusing the others. Probe
//! notifications carry no id. Version 1 clients send no ids and get answers in order,
//! as before.
//!
//! Since version 3 a probe of a train may stand for several equal probes in a row
//! ([`ProbeRequest::count`]), so long uniform trains fit in a short request: the
//! daemon reads request lines of at most [`DEFAULT_MAX_REQUEST`] bytes unless
//! configured otherwise, and says its limit in [`TrainLimits::max_request_bytes`].
//! A version 2 daemon would ignore `count`, so clients send it only to daemons that
//! agreed on version 3.
//!
//! Since version 4 a client may ask how much application traffic goes to each peer
//! ([`Request::Traffic`]), to time its measurements for when there is traffic to
//! ride in them.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::WallTime;
use crate::stats::{PlannerCounters, ReassemblyCounters, TransactionReport};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 4;

/// The oldest version the daemon still speaks (version 1 had no request ids).
pub const OLDEST_PROTOCOL_VERSION: u32 = 1;

/// A request as it travels: the request and, since version 2, an id for its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    /// Echoed in the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The request.
    #[serde(flatten)]
    pub request: Request,
}

/// An answer as it travels: the id of the request it answers, if that had one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseFrame {
    /// The id of the request answered; none for probe notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The answer.
    #[serde(flatten)]
    pub response: Response,
}

/// Longest request line the daemon reads unless configured otherwise, in bytes.
pub const DEFAULT_MAX_REQUEST: usize = 64 << 10;

/// Longest answer line a client reads, in bytes: a report of a long train, with
/// every probe's departure, takes about 130 bytes per probe.
pub const MAX_ANSWER: usize = 16 << 20;

/// A request from a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Opens the conversation.
    Hello {
        /// Protocol version the client speaks.
        version: u32,
        /// Free-form client name, for the daemon's logs.
        #[serde(default)]
        client: String,
    },
    /// Submits a whole train; answered with [`Response::Report`] once it was sent.
    SubmitTrain(TrainRequest),
    /// Starts delivering probes that arrive for `port` as [`Response::Probe`].
    Listen {
        /// Measurement port.
        port: u16,
        /// Only probes from this sender, if given.
        #[serde(default)]
        source: Option<IpAddr>,
    },
    /// Stops delivering probes for `port`.
    Unlisten {
        /// Measurement port.
        port: u16,
    },
    /// Asks for the daemon's counters.
    Stats,
    /// Asks for the report of this connection's most recent finished train (the
    /// paper's `ioctl`); answered with [`Response::Report`] or [`Response::NoReport`].
    LastReport,
    /// Asks for the application traffic routed to each peer; answered with
    /// [`Response::Traffic`] (since version 4).
    Traffic,
}

/// A train as a tool submits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainRequest {
    /// Where the probes go.
    pub destination: IpAddr,
    /// Measurement port of the sending tool.
    pub src_port: u16,
    /// Measurement port of the receiving tool.
    pub dst_port: u16,
    /// The probes, in sending order.
    pub probes: Vec<ProbeRequest>,
}

/// One probe of a [`TrainRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRequest {
    /// The tool's header bytes.
    #[serde(default)]
    pub header: Vec<u8>,
    /// IP total length of the probe on the wire.
    pub size: u16,
    /// Gap before this probe, in nanoseconds.
    #[serde(default)]
    pub gap_ns: u64,
    /// Whether riders may use this probe's padding.
    #[serde(default = "yes")]
    pub piggyback: bool,
    /// How many such probes follow one another (each with this gap before it);
    /// since version 3.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl TrainRequest {
    /// The number of probes the train stands for (counts included), saturating.
    pub fn probe_count(&self) -> u64 {
        self.probes
            .iter()
            .fold(0u64, |n, p| n.saturating_add(u64::from(p.count)))
    }

    /// Folds runs of equal probes into one probe with a count, for a daemon that
    /// speaks version 3.
    pub fn fold_runs(&mut self) {
        let mut folded: Vec<ProbeRequest> = Vec::with_capacity(self.probes.len());
        for p in self.probes.drain(..) {
            match folded.last_mut() {
                Some(last)
                    if last.header == p.header
                        && last.size == p.size
                        && last.gap_ns == p.gap_ns
                        && last.piggyback == p.piggyback
                        && last.count.checked_add(p.count).is_some() =>
                {
                    last.count += p.count;
                }
                _ => folded.push(p),
            }
        }
        self.probes = folded;
    }

    /// The probes one by one, counts unfolded. Check [`Self::probe_count`] against a
    /// limit first: a count may be large.
    pub fn unfolded(&self) -> impl Iterator<Item = &ProbeRequest> {
        self.probes
            .iter()
            .flat_map(|p| std::iter::repeat_n(p, p.count as usize))
    }
}

fn yes() -> bool {
    true
}

/// A response or notification from the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// Answer to [`Request::Hello`].
    Hello {
        /// Version the daemon speaks on this connection.
        version: u32,
        /// Daemon name and version.
        daemon: String,
        /// What a train may ask for (absent from daemons older than this field).
        #[serde(default)]
        limits: Option<TrainLimits>,
    },
    /// The report of a submitted train.
    Report(TransactionReport),
    /// A listen request took effect.
    Listening {
        /// Measurement port.
        port: u16,
    },
    /// An unlisten request took effect.
    Unlistened {
        /// Measurement port.
        port: u16,
    },
    /// A probe arrived for a port this connection listens on.
    Probe(ReceivedProbe),
    /// The daemon's counters.
    Stats(Box<DaemonStats>),
    /// No train of this connection has finished yet.
    NoReport,
    /// The application traffic routed to each peer that had some since the daemon
    /// started, in the order of their addresses.
    Traffic {
        /// The window `bytes_per_second` is taken over, in milliseconds.
        window_ms: u64,
        /// One entry per peer.
        peers: Vec<PeerTraffic>,
    },
    /// A request failed.
    Error(ApiError),
}

/// What the daemon accepts in a train, so that a tool can shape its trains to fit
/// rather than have them refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainLimits {
    /// Most probes in one train.
    pub max_probes: u32,
    /// Smallest gap between probes, in ns: back-to-back probes go this far apart.
    pub min_gap_ns: u64,
    /// Largest gap between probes, in ns.
    pub max_gap_ns: u64,
    /// Largest sum of a train's gaps, in ns.
    pub max_duration_ns: u64,
    /// Longest request line the daemon reads, in bytes (0 from a daemon too old to
    /// say: it read up to 4 MiB).
    #[serde(default)]
    pub max_request_bytes: u64,
}

impl TrainLimits {
    /// The smallest gap.
    pub fn min_gap(&self) -> Duration {
        Duration::from_nanos(self.min_gap_ns)
    }
}

/// A probe as the receiving tool gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedProbe {
    /// Sending daemon's address.
    pub source: IpAddr,
    /// Measurement port of the sending tool.
    pub src_port: u16,
    /// Measurement port it was sent to.
    pub dst_port: u16,
    /// Transaction id.
    pub transaction: u32,
    /// Sequence number within the train.
    pub seq: u16,
    /// Probes in the train.
    pub train_len: u16,
    /// IP total length of the probe as received.
    pub size: u16,
    /// The tool's header bytes.
    pub header: Vec<u8>,
    /// Sender stamp (realtime clock of the sending host).
    pub sender_time: WallTime,
    /// Kernel receive stamp (realtime clock of this host).
    pub receive_time: WallTime,
    /// Rider bytes the probe carried (already handed to the kernel; the padding the
    /// tool sees is zero).
    pub rider_bytes: u32,
}

/// What went wrong with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The line was not a request this daemon understands.
    BadRequest,
    /// No common protocol version.
    Version,
    /// The train breaks a rule (probe sizes, limits).
    InvalidTrain,
    /// Too many trains or listeners.
    Busy,
    /// The daemon is shutting down.
    ShuttingDown,
    /// Another connection listens on that port already.
    PortInUse,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// Its kind.
    pub kind: ErrorKind,
    /// What was wrong and what to do, in one line.
    pub message: String,
}

/// The application traffic routed into the tunnel for one peer: every packet a
/// train to it could carry, whether it then rode, waited, or went on unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTraffic {
    /// The peer (the MGRP address the traffic is tunnelled to).
    pub peer: IpAddr,
    /// Packets routed to it since the daemon started.
    pub packets: u64,
    /// IP bytes of those packets.
    pub bytes: u64,
    /// IP bytes per second over the last `window_ms` of the answer.
    pub bytes_per_second: u64,
    /// Riders held for it now, waiting for a probe.
    pub held_riders: u64,
    /// Bytes of those riders.
    pub held_bytes: u64,
}

/// Counters of the daemon as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonCounters {
    /// Packets read from the TUN.
    pub tun_packets_in: u64,
    /// Of those, packets that were not application traffic (not IP, or multicast and
    /// link-local housekeeping) and were dropped.
    pub tun_ignored: u64,
    /// Probes handed to the network.
    pub probes_sent: u64,
    /// Probes whose send failed.
    pub probe_send_errors: u64,
    /// Riders that had a chunk in a probe whose send failed and were sent unchanged
    /// instead (they also count as piggybacked in the planner's counters).
    pub riders_resent_after_failed_probe: u64,
    /// Riders sent unchanged.
    pub unchanged_sent: u64,
    /// Unchanged riders whose send failed.
    pub unchanged_send_errors: u64,
    /// Continuation packets sent.
    pub continuations_sent: u64,
    /// Continuation packets whose send failed.
    pub continuation_send_errors: u64,
    /// MGRP packets received.
    pub mgrp_received: u64,
    /// MGRP packets dropped as malformed.
    pub mgrp_malformed: u64,
    /// Riders written to the TUN.
    pub riders_delivered: u64,
    /// Rider bytes written to the TUN.
    pub rider_bytes_delivered: u64,
    /// Riders whose write to the TUN failed.
    pub tun_write_errors: u64,
    /// Probes handed to listening tools.
    pub probes_delivered: u64,
    /// Probes that arrived for a port nobody listens on.
    pub probes_unclaimed: u64,
    /// Probes dropped because their listener did not keep up.
    pub probes_dropped_slow_listener: u64,
    /// Trains submitted and accepted.
    pub trains_accepted: u64,
    /// Trains refused.
    pub trains_rejected: u64,
    /// Of `trains_rejected`, trains to a destination that is no peer.
    pub trains_refused_not_peer: u64,
    /// Of `trains_rejected`, trains over their user's or the total rate limit.
    pub trains_refused_rate_limit: u64,
    /// Of `trains_rejected`, trains refused for any other reason (a malformed or
    /// oversized request, limits on the train itself, the queue full).
    #[serde(default)]
    pub trains_refused_other: u64,
    /// MGRP packets dropped unread because their sender is no peer.
    pub mgrp_not_peer: u64,
    /// Riders refused as not sound IP packets.
    pub riders_refused_malformed: u64,
    /// Riders refused because their source is not an address their peer may speak for.
    pub riders_refused_foreign_source: u64,
    /// Riders refused because their destination is not the address their MGRP packet
    /// was sent to (nor a local prefix).
    pub riders_refused_foreign_destination: u64,
    /// Riders refused because they are MGRP packets themselves.
    pub riders_refused_inner_mgrp: u64,
    /// Riders refused for a broadcast, multicast, loopback, link-local or unspecified
    /// destination.
    pub riders_refused_special_destination: u64,
    /// MGRP packets from a peer with a key that carried no authentication trailer.
    pub mgrp_unauthenticated: u64,
    /// MGRP packets whose tag did not match (another key, or altered).
    pub mgrp_bad_tag: u64,
    /// MGRP packets whose counter was seen already or is too old.
    pub mgrp_replayed: u64,
    /// Authenticated MGRP packets from a peer for which no key is configured.
    pub mgrp_unexpected_auth: u64,
    /// MGRP packets this daemon sealed for the peer they claim to come from, sent
    /// back to it.
    pub mgrp_reflected: u64,
    /// MGRP packets tagged the way daemons before keys per direction did, refused.
    pub mgrp_old_auth: u64,
    /// ICMP errors saying a peer does not take MGRP packets (its mgrpd is gone).
    pub peer_unreachable: u64,
    /// Riders read from the TUN while their peer was unreachable, sent unchanged
    /// without entering a planner.
    pub riders_bypassed_peer_down: u64,
    /// Riders read from the TUN for a destination beyond `limits.max-destinations`,
    /// sent unchanged without entering a planner.
    pub riders_bypassed_too_many_destinations: u64,
    /// Trains that spun the pacer for `limits.max-train-spin` and were paced by the
    /// timer alone for the rest.
    pub trains_spin_capped: u64,
    /// Packets read from the TUN and sent on at once, with on-demand hold while no
    /// train was queued or in flight anywhere.
    pub riders_sent_direct: u64,
    /// Packets read from the TUN and sent on at once because the pacer's queue was
    /// full.
    pub riders_bypassed_pacer_busy: u64,
    /// Outputs (riders sent unchanged, continuations, reports) the pacer did itself
    /// because the dispatcher's queue was full.
    pub outputs_done_by_pacer: u64,
    /// MGRP probes that passed the peer check, parsing and authentication.
    pub probes_received: u64,
    /// MGRP continuation packets that passed the peer check, parsing and
    /// authentication.
    pub continuations_received: u64,
    /// TUN super-packets (TCP segments the application's stack offloaded) sent on
    /// whole through the link-layer socket. Every other counter counts them as the
    /// segments they stand for.
    pub super_packets_sent: u64,
    /// Super-packets the link-layer socket refused; they were split and sent through
    /// the raw socket instead.
    pub link_send_errors: u64,
    /// Frames read from the TUN and dropped whole because they were malformed (too
    /// short, a virtio-net header that does not fit the packet, or a super-packet
    /// that could not be split). Not riders: they are counted nowhere else.
    pub tun_frames_dropped: u64,
    /// Probes that left without a kernel queue-entry stamp in their report although
    /// kernel stamps are on (their trains' reports fall back to the daemon's stamps).
    #[serde(default)]
    pub probes_unstamped: u64,
    /// Probes that left later than the late threshold after their deadline (the sum of
    /// the trains' reports' `probes_late`).
    #[serde(default)]
    pub probes_late: u64,
    /// Probes that fell due while another train's probe was being sent and left after
    /// it (the sum of the trains' reports' `probes_displaced`).
    #[serde(default)]
    pub probes_displaced: u64,
    /// System calls that sent several continuations to a UDP peer at once (UDP
    /// segmentation offload).
    #[serde(default)]
    pub segmented_sends: u64,
    /// The datagrams those system calls carried.
    #[serde(default)]
    pub segmented_datagrams: u64,
    /// Keepalives sent to UDP peers (to keep a NAT's mapping open).
    #[serde(default)]
    pub keepalives_sent: u64,
    /// Keepalives that could not be sent.
    #[serde(default)]
    pub keepalive_send_errors: u64,
    /// Keepalives that passed the peer check, parsing and authentication.
    #[serde(default)]
    pub keepalives_received: u64,
    /// Times a roaming UDP peer was heard from a new endpoint and its packets went
    /// there from then on.
    #[serde(default)]
    pub peer_endpoint_changes: u64,
    /// Of `riders_delivered`, riders bound beyond this host that a member peer sent
    /// through it (its `relay-to` prefixes): the kernel forwards them.
    #[serde(default)]
    pub riders_relayed: u64,
    /// Receives on a UDP socket that returned an ICMP error for an earlier send (a
    /// peer's daemon gone) instead of a packet; the receiver goes on.
    #[serde(default)]
    pub peer_unreachable_reported: u64,
    /// ICMP errors saying a peer takes no MGRP that quote no MGRP packet the daemon
    /// sent there in the last 10 s (forged, or quoting too little to tell): they mark
    /// no peer down.
    #[serde(default)]
    pub icmp_errors_unproven: u64,
    /// UDP datagrams from an endpoint no peer is known at, dropped unopened because
    /// the second's trials against the roaming peers' keys were spent (64 a second,
    /// 4 from one address): a flood of them costs the receiver no tag checks. Also
    /// counted in `mgrp_not_peer`.
    #[serde(default)]
    pub trials_refused: u64,
    /// Tags computed to check received MGRP packets (each a keyed hash over the
    /// packet): about one per authentic packet, more only while a peer's key rotates
    /// or a NAT in front of this host rewrites addresses. A packet whose key index
    /// (`auth = 3`) names none of its peer's keys costs none, so forged packets show
    /// here only when they copy a real index.
    #[serde(default)]
    pub tag_checks: u64,
    /// Errors the daemon's sockets reported, by reason (`mgrpd_socket_errors_total`),
    /// each survived: every ICMP error about an MGRP packet it sent, once, as its
    /// error queue gave it, and the receives that failed for another reason a network
    /// or a short host can cause. This one: port or protocol unreachable.
    #[serde(default)]
    pub socket_errors_refused: u64,
    /// No route; host or network unreachable or down; time exceeded.
    #[serde(default)]
    pub socket_errors_unreachable: u64,
    /// A firewall's refusal: administratively prohibited, failed policy, reject route.
    #[serde(default)]
    pub socket_errors_prohibited: u64,
    /// Packet too big for the path.
    #[serde(default)]
    pub socket_errors_too_big: u64,
    /// A parameter problem, a failed source route, a host isolated.
    #[serde(default)]
    pub socket_errors_protocol: u64,
    /// This host ran short of buffers or memory.
    #[serde(default)]
    pub socket_errors_resources: u64,
    /// Any other error a network or the kernel reported.
    #[serde(default)]
    pub socket_errors_other: u64,
}

/// Everything the daemon counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStats {
    /// The daemon's own counters.
    pub daemon: DaemonCounters,
    /// The planners' counters, summed over destinations.
    pub planner: PlannerCounters,
    /// Reassembly counters.
    pub reassembly: ReassemblyCounters,
}

impl DaemonStats {
    /// Whether the rider conservation identities hold: every rider read from the TUN
    /// is ignored, sent straight on (its peer unreachable, too many destinations
    /// holding riders already, no train to ride in, or the pacer behind), or handed
    /// to a planner, and every rider handed to a planner is
    /// piggybacked, sent unchanged, dropped with a reason, or still held.
    pub fn conserved(&self) -> bool {
        self.planner.riders_accounted()
            && self.daemon.tun_packets_in
                == self.daemon.tun_ignored
                    + self.daemon.riders_bypassed_peer_down
                    + self.daemon.riders_bypassed_too_many_destinations
                    + self.daemon.riders_sent_direct
                    + self.daemon.riders_bypassed_pacer_busy
                    + self.planner.riders_in
    }

    /// Whether the receiving side's identities hold: every MGRP packet received is
    /// refused by one reason or taken as a probe or a continuation; every probe taken
    /// is delivered to its listener, unclaimed, or dropped for a slow listener; and
    /// every rider reassembly completed is written into the host, failed to be, or
    /// was refused by admission. (Quiescent counters only: the receivers and the
    /// reassembly counters are read at slightly different moments.)
    pub fn receive_conserved(&self) -> bool {
        let d = &self.daemon;
        d.mgrp_received
            == d.mgrp_not_peer
                + d.mgrp_malformed
                + d.mgrp_unauthenticated
                + d.mgrp_bad_tag
                + d.mgrp_replayed
                + d.mgrp_unexpected_auth
                + d.mgrp_reflected
                + d.mgrp_old_auth
                + d.probes_received
                + d.continuations_received
                + d.keepalives_received
            && d.probes_received
                == d.probes_delivered + d.probes_unclaimed + d.probes_dropped_slow_listener
            && self.reassembly.riders_delivered
                == d.riders_delivered
                    + d.tun_write_errors
                    + d.riders_refused_malformed
                    + d.riders_refused_foreign_source
                    + d.riders_refused_foreign_destination
                    + d.riders_refused_inner_mgrp
                    + d.riders_refused_special_destination
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_ids_beside_the_tags() {
        let f: RequestFrame = serde_json::from_str(r#"{"op":"stats","id":7}"#).unwrap();
        assert_eq!((f.id, f.request), (Some(7), Request::Stats));
        let f: RequestFrame = serde_json::from_str(r#"{"op":"last_report"}"#).unwrap();
        assert_eq!((f.id, f.request), (None, Request::LastReport));
        let text = serde_json::to_string(&ResponseFrame {
            id: Some(9),
            response: Response::NoReport,
        })
        .unwrap();
        assert_eq!(text, r#"{"id":9,"type":"no_report"}"#);
        let back: ResponseFrame = serde_json::from_str(&text).unwrap();
        assert_eq!(back.id, Some(9));
        // Without an id a frame is exactly the old message.
        let text = serde_json::to_string(&ResponseFrame {
            id: None,
            response: Response::Listening { port: 3 },
        })
        .unwrap();
        assert_eq!(
            serde_json::from_str::<Response>(&text).unwrap(),
            Response::Listening { port: 3 }
        );
        let stats = ResponseFrame {
            id: Some(1),
            response: Response::Stats(Box::default()),
        };
        let back: ResponseFrame =
            serde_json::from_str(&serde_json::to_string(&stats).unwrap()).unwrap();
        assert_eq!(back, stats);
    }

    #[test]
    fn requests_read_as_documented() {
        let r: Request = serde_json::from_str(
            r#"{"op":"submit_train","destination":"10.0.0.2","src_port":1,"dst_port":2,
                "probes":[{"header":[1,2],"size":500,"gap_ns":1000}]}"#,
        )
        .unwrap();
        let Request::SubmitTrain(t) = r else {
            panic!("{r:?}")
        };
        assert_eq!(t.probes[0].header, [1, 2]);
        assert!(t.probes[0].piggyback);
        let r: Request = serde_json::from_str(r#"{"op":"listen","port":9}"#).unwrap();
        assert_eq!(
            r,
            Request::Listen {
                port: 9,
                source: None
            }
        );
        let line = serde_json::to_string(&Response::Listening { port: 9 }).unwrap();
        assert_eq!(line, r#"{"type":"listening","port":9}"#);
        let r: Request = serde_json::from_str(r#"{"op":"traffic"}"#).unwrap();
        assert_eq!(r, Request::Traffic);
        let t = Response::Traffic {
            window_ms: 2000,
            peers: vec![PeerTraffic {
                peer: "10.0.0.2".parse().unwrap(),
                packets: 3,
                bytes: 4500,
                bytes_per_second: 2250,
                held_riders: 1,
                held_bytes: 1500,
            }],
        };
        let line = serde_json::to_string(&t).unwrap();
        assert!(
            line.starts_with(r#"{"type":"traffic","window_ms":2000,"peers":[{"peer":"10.0.0.2","#)
        );
        assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), t);
    }
}
