//! What a tool's two roles say to each other, the probe batches the receiver asks
//! for, and the header every probe carries.
//!
//! The receiver drives, as in pathload: it connects to the sender's control port
//! (TCP), and asks for each batch of probes; the sender sends it and answers with
//! what it sent (every sender stamp and, over MGRP, the riders the transaction report
//! counted). Messages are JSON objects, one per line, each written with one `write`
//! on a socket with `TCP_NODELAY` (pathload 1.3.2 wrote 4-byte words one by one
//! without it and stalled ~40 ms per stream).
//!
//! The sender knows no tool: a batch is runs of equal probes with a gap before each,
//! so a pathload stream, a pathChirp chirp and a badabing experiment are each one
//! request, and one sender serves every tool's receivers.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Version of the control protocol (2: tool-neutral probe batches; 3: probes go to an
/// address other than the asker's only once the asker proved it receives there).
///
/// The upgrade rule: what a sender honours beyond version 3 it names in its hello's
/// [`FEATURES`], and a receiver that needs one checks for it (a sender that does not
/// name it is older and ignores it); an older receiver ignores the list. So a mesh
/// upgrades host by host with both versions running. The version changes only for
/// what an older end would misread, and the sender then serves the version before
/// it as well.
pub const CONTROL_VERSION: u32 = 3;

/// The features this sender honours, each a field a receiver may send that an older
/// sender ignores: listed in its [`Reply::Hello`].
pub mod feature {
    /// The hello's `exclusive`: one exclusive measurement at a time.
    pub const EXCLUSIVE: &str = "exclusive";
    /// A batch's `lead_ns`: quiet time before its first probe.
    pub const LEAD: &str = "lead_ns";
}

/// Every feature of [`feature`], as a sender of this version lists them.
pub const FEATURES: [&str; 2] = [feature::EXCLUSIVE, feature::LEAD];

/// The probe header's kind of the one probe a sender sends to an address a receiver
/// named as its own but did not connect from: its tag's two numbers carry a cookie the
/// receiver must echo ([`Request::Proof`]) before any other probe goes there. The
/// tools' own kinds lie below it ([`crate::kind`]).
pub const PROOF_KIND: u8 = crate::kind::PROOF;

/// IP bytes of that probe.
pub const PROOF_PROBE_BYTES: u32 = 128;

/// The sender's control port (pathload's).
pub const DEFAULT_CONTROL_PORT: u16 = 55002;

/// The receiver's probe port (pathload's).
pub const DEFAULT_PROBE_PORT: u16 = 55001;

/// The sender's own probe port.
pub const DEFAULT_SENDER_PROBE_PORT: u16 = 55003;

/// Longest control line accepted, bytes.
pub const MAX_CONTROL_LINE: usize = 1 << 20;

/// Largest probe, in IP bytes, on a 1500-byte MTU path.
pub const MAX_PROBE_IP_BYTES: u32 = 1500;

/// Probes per batch the sender accepts.
pub const MAX_BATCH_PROBES: u32 = 10_000;

/// Longest gap between two probes of a batch the sender accepts, ns (mgrpd's
/// default `max-gap`).
pub const MAX_GAP_NS: u64 = 1_000_000_000;

/// How probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// Probe transactions through `mgrpd` (riders allowed).
    #[default]
    Mgrp,
    /// Plain UDP datagrams paced by the tool (the no-MGRP baseline).
    Udp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Mgrp => "mgrp",
            Self::Udp => "udp",
        })
    }
}

/// Which batch a probe belongs to: a kind of the tool's own (pathload's trains and
/// streams, pathChirp's chirps, badabing's experiments) and two numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Tag {
    /// The tool's kind of batch.
    pub kind: u8,
    /// A group number (pathload's fleet, pathChirp's parameter generation).
    pub fleet: u32,
    /// The batch's number within the group.
    pub stream: u32,
}

/// Equal probes in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// How many.
    pub count: u32,
    /// IP bytes each.
    pub size: u32,
    /// Gap before each, from the previous probe's departure, ns (ignored for the
    /// batch's first probe).
    pub gap_ns: u64,
    /// Whether application traffic may ride in them (MGRP).
    pub ride: bool,
}

/// Probes to send, in order: one probe transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Which batch it is; every probe carries it.
    pub tag: Tag,
    /// The probes, as runs.
    pub runs: Vec<Run>,
    /// Quiet time before the first probe, ns, from when the batch's turn comes: over
    /// MGRP when mgrpd starts its train, which is right after the last probe of the
    /// train before it to the same receiver (any tool's); over UDP when the sender
    /// takes it up. A tool that needs the path to be quiet when its batch starts asks
    /// for it here (at most [`MAX_GAP_NS`]); 0, the default, sends at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lead_ns: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One probe of a [`Batch`], as [`Batch::probes`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    /// IP bytes.
    pub size: u32,
    /// Gap before it, ns (for the first: the batch's lead, from its start).
    pub gap_ns: u64,
    /// Whether riders may ride in it.
    pub ride: bool,
}

impl Batch {
    /// A batch of `packets` probes of `size` bytes `spacing_ns` apart, the first
    /// `rider_probes` of which may carry riders.
    pub fn even(tag: Tag, packets: u32, size: u32, spacing_ns: u64, rider_probes: u32) -> Self {
        let riding = rider_probes.min(packets);
        let mut runs = Vec::with_capacity(2);
        if riding > 0 {
            runs.push(Run {
                count: riding,
                size,
                gap_ns: spacing_ns,
                ride: true,
            });
        }
        if packets > riding {
            runs.push(Run {
                count: packets - riding,
                size,
                gap_ns: spacing_ns,
                ride: false,
            });
        }
        Self {
            tag,
            runs,
            lead_ns: 0,
        }
    }

    /// Probes in it.
    pub fn packets(&self) -> u32 {
        self.runs
            .iter()
            .fold(0u32, |n, r| n.saturating_add(r.count))
    }

    /// Every probe in order.
    pub fn probes(&self) -> impl Iterator<Item = ProbeSpec> + '_ {
        self.runs
            .iter()
            .flat_map(|r| {
                (0..r.count).map(move |_| ProbeSpec {
                    size: r.size,
                    gap_ns: r.gap_ns,
                    ride: r.ride,
                })
            })
            .enumerate()
            .map(|(i, mut p)| {
                if i == 0 {
                    p.gap_ns = self.lead_ns;
                }
                p
            })
    }

    /// Time from the first probe's departure to the last one's, ns (the lead not
    /// counted).
    pub fn duration_ns(&self) -> u64 {
        self.probes()
            .skip(1)
            .fold(0u64, |d, p| d.saturating_add(p.gap_ns))
    }

    /// IP bytes of all its probes.
    pub fn bytes(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| u64::from(r.count) * u64::from(r.size))
            .sum()
    }

    /// Why the sender would refuse it, in words; `None` if it is within the limits.
    pub fn refusal(&self, max_size: u32) -> Option<String> {
        if !crate::kind::is_tools(self.tag.kind) {
            return Some(format!(
                "refused: probes of kind {} (a tool's kinds lie below {})",
                self.tag.kind,
                crate::kind::RESERVED
            ));
        }
        let n = self.packets();
        if n == 0 || n > MAX_BATCH_PROBES {
            return Some(format!(
                "refused: a batch of {n} probes (1 to {MAX_BATCH_PROBES} accepted)"
            ));
        }
        if let Some(r) = self
            .runs
            .iter()
            .find(|r| r.size > max_size || r.size < MIN_PROBE_IP_BYTES)
        {
            return Some(format!(
                "refused: probes of {} bytes ({MIN_PROBE_IP_BYTES} to {max_size} accepted)",
                r.size
            ));
        }
        if let Some(r) = self.runs.iter().find(|r| r.gap_ns > MAX_GAP_NS) {
            return Some(format!(
                "refused: a gap of {} ms between probes (at most {} ms)",
                r.gap_ns / 1_000_000,
                MAX_GAP_NS / 1_000_000
            ));
        }
        if self.lead_ns > MAX_GAP_NS {
            return Some(format!(
                "refused: a lead of {} ms before the first probe (at most {} ms)",
                self.lead_ns / 1_000_000,
                MAX_GAP_NS / 1_000_000
            ));
        }
        None
    }
}

/// Smallest probe, IP bytes: the [`ProbeHeader`] in an IPv6 UDP datagram.
pub const MIN_PROBE_IP_BYTES: u32 = PROBE_HEADER_LEN as u32 + 48;

/// From the receiver to the sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Request {
    /// Opens a measurement.
    Hello {
        /// Control protocol version.
        version: u32,
        /// The transport the receiver listens on.
        transport: Transport,
        /// Where probes go: the receiver's address as the sender should reach it.
        /// `None` means the address the control connection comes from.
        #[serde(default)]
        address: Option<IpAddr>,
        /// The receiver's probe port.
        probe_port: u16,
        /// Whether riders may ride in probes that allow them (MGRP).
        piggyback: bool,
        /// The receiving tool, for the sender's log.
        #[serde(default)]
        tool: String,
        /// Whether the measurement loads what it measures (pathload's fleets, btc's
        /// bunches): a sender runs one such at a time, beside any number of light
        /// ones.
        #[serde(default)]
        exclusive: bool,
    },
    /// Echoes the cookie of the probe the sender sent to the address the hello named
    /// (after a [`Reply::Prove`]).
    Proof {
        /// The cookie: the probe tag's `fleet` in the high 32 bits, `stream` in the low.
        cookie: u64,
    },
    /// Send a batch of probes.
    Probes(Batch),
    /// Asks for a [`Reply::Pong`], to time the control path's round trip.
    Ping,
    /// Asks how much application traffic the sender's mgrpd routes to `address` (the
    /// connection's address if `None`), for a receiver that waits for traffic to ride
    /// in its probes. Answered with [`Reply::Traffic`] on a connection of its own or
    /// within a measurement, and even while another receiver measures.
    Traffic {
        /// The receiver's address as the sender's mgrpd knows it (its MGRP peer).
        #[serde(default)]
        address: Option<IpAddr>,
    },
    /// Asks what the sender's kernel says of the TCP connections it has to `address`
    /// (the connection's address if `None`): each one's delivery rate, round trip and
    /// what limited it. Answered with [`Reply::Tcp`], like [`Request::Traffic`]
    /// whatever runs.
    Tcp {
        /// The receiver's address as the sender's connections see it.
        #[serde(default)]
        address: Option<IpAddr>,
    },
    /// Asks for the kernel's stamps of the TCP segments the sender sent to `address`
    /// (the connection's address if `None`) after cursor `after`: the sender starts
    /// capturing them at the first such request (headers only) and stops when no one
    /// has asked for [`STAMPS_IDLE_S`] seconds. Answered with [`Reply::Stamps`],
    /// whatever runs.
    Stamps {
        /// The receiver's address as the sender's packets carry it.
        #[serde(default)]
        address: Option<IpAddr>,
        /// The cursor the last answer gave (0 at first).
        #[serde(default)]
        after: u64,
    },
    /// The measurement is over.
    Bye,
}

/// From the sender to the receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Reply {
    /// Accepts a measurement.
    Hello {
        /// Control protocol version.
        version: u32,
        /// Largest probe the sender can send, IP bytes.
        max_size: u32,
        /// The sender's name and version, for logs.
        sender: String,
        /// The features it honours ([`FEATURES`]); none from a sender older than
        /// them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    /// Answer to a hello naming an address the connection does not come from: one
    /// probe of kind [`PROOF_KIND`] went there, and the measurement starts (with a
    /// [`Reply::Hello`]) once the receiver echoes its cookie.
    Prove {
        /// Where the probe went.
        address: IpAddr,
    },
    /// A batch was sent.
    Sent(SentReport),
    /// Answer to [`Request::Ping`].
    Pong,
    /// Answer to [`Request::Traffic`]: what the sender's mgrpd routes to the address.
    Traffic {
        /// IP bytes per second over the last `window_ms`.
        bytes_per_second: u64,
        /// The window of that rate, ms.
        window_ms: u64,
        /// Riders held for the address now.
        held_riders: u64,
        /// Their bytes.
        held_bytes: u64,
    },
    /// Answer to [`Request::Tcp`]: the sender's TCP connections to the address, as
    /// its kernel reports them (its own control connections left out).
    Tcp {
        /// At most [`MAX_TCP_FLOWS`] connections, the busiest first.
        flows: Vec<TcpFlow>,
    },
    /// Answer to [`Request::Stamps`].
    Stamps {
        /// The newest stamps after the cursor, at most [`MAX_STAMPS`], oldest first
        /// (the sender's own control connections left out); older ones are skipped
        /// and counted in `missed`.
        stamps: Vec<crate::capture::Stamp>,
        /// The cursor to ask from next.
        next: u64,
        /// Stamps that were gone before they were asked for.
        missed: u64,
        /// Packets the kernel dropped from the capture since it started.
        kernel_drops: u64,
    },
    /// The request could not be served; the message says why.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// Stamps a [`Reply::Stamps`] carries at most (about 80 bytes each as JSON, well
/// inside [`MAX_CONTROL_LINE`]): every segment at up to 5,000 a second polled every
/// 2 s, the latest stretch beyond (so the answers cost the path at most ~3 Mbit/s).
pub const MAX_STAMPS: usize = 10_000;

/// A sender's capture for a receiver stops when no one asked for its stamps this
/// long, seconds.
pub const STAMPS_IDLE_S: u64 = 60;

/// Connections a [`Reply::Tcp`] lists at most.
pub const MAX_TCP_FLOWS: usize = 64;

/// One TCP connection as the sender's kernel reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpFlow {
    /// The sender's end.
    pub local: std::net::SocketAddr,
    /// The receiver's end.
    pub remote: std::net::SocketAddr,
    /// Its congestion control, when the kernel said.
    pub congestion: Option<String>,
    /// What `tcp_info` says.
    pub sample: crate::tcpinfo::TcpSample,
    /// BBR's model of the path, for a flow that runs BBR. Absent from a sender older
    /// than this field (its flows say `congestion` "bbr" and nothing here) and for
    /// other congestion controls; an older receiver ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbr: Option<crate::tcpinfo::BbrInfo>,
}

/// What the sender sent of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SentReport {
    /// The batch's tag.
    pub tag: Tag,
    /// Probes handed to the network (those the local kernel refused count as lost,
    /// as they would on a link).
    pub sent: u32,
    /// Sender stamp of each probe that left, realtime ns; `None` for one that did
    /// not (listed in order, so `sender_stamps[i]` is probe `i`'s).
    pub sender_stamps: Vec<Option<i64>>,
    /// Application bytes that rode and would have competed (MGRP §2.4).
    pub competing_rider_bytes: u64,
    /// Application bytes that rode.
    pub rider_bytes: u64,
    /// IP bytes of the probes that carried riders.
    pub riding_probe_bytes: u64,
    /// Whether the stamps are the kernel's, taken as each probe entered the sending
    /// host's egress queue (MGRP with kernel stamps, every probe stamped);
    /// otherwise every one was read in user space just before its send.
    #[serde(default)]
    pub kernel_stamps: bool,
}

impl SentReport {
    /// Why a receiver that asked for `asked` must not believe this report, in words;
    /// `None` when it is within what was asked (probes sent and stamps at most the
    /// probes asked for).
    pub fn mismatch(&self, asked: &Batch) -> Option<String> {
        let n = asked.packets();
        (self.sent > n || self.sender_stamps.len() > n as usize).then(|| {
            format!(
                "the sender's report does not match the batch: {} probes sent and {} stamps for {n} asked",
                self.sent,
                self.sender_stamps.len()
            )
        })
    }

    /// The stamps of the probes that left, in order, ns.
    pub fn stamps(&self) -> Vec<i64> {
        self.sender_stamps.iter().flatten().copied().collect()
    }
}

/// Bytes of [`ProbeHeader`] on the wire.
pub const PROBE_HEADER_LEN: usize = 24;

const MAGIC: [u8; 2] = *b"MT";
const HEADER_VERSION: u8 = 2;

/// The header at the start of every probe's payload: which batch it belongs to, its
/// position, and (over UDP) the sender's stamp. Over MGRP the daemon's own sequence
/// number and stamp are used instead of the last two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeHeader {
    /// The batch.
    pub tag: Tag,
    /// Position in the batch.
    pub seq: u32,
    /// Sender stamp, realtime ns.
    pub sent_ns: i64,
}

impl ProbeHeader {
    /// Writes the header into the first [`PROBE_HEADER_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..PROBE_HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = HEADER_VERSION;
        b[3] = self.tag.kind;
        b[4..8].copy_from_slice(&self.tag.fleet.to_be_bytes());
        b[8..12].copy_from_slice(&self.tag.stream.to_be_bytes());
        b[12..16].copy_from_slice(&self.seq.to_be_bytes());
        b[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// Reads a header; `None` if `buf` is not one.
    pub fn parse(buf: &[u8]) -> Option<Self> {
        let b = buf.get(..PROBE_HEADER_LEN)?;
        if b[0..2] != MAGIC || b[2] != HEADER_VERSION {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[16..24]);
        Some(Self {
            tag: Tag {
                kind: b[3],
                fleet: u32_at(4),
                stream: u32_at(8),
            },
            seq: u32_at(12),
            sent_ns: i64::from_be_bytes(t),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_claiming_more_than_was_asked_is_not_believed() {
        let batch = Batch::even(Tag::default(), 3, 228, 1000, 0);
        let report = |sent: u32, stamps: usize| SentReport {
            sent,
            sender_stamps: vec![Some(1); stamps],
            ..SentReport::default()
        };
        assert_eq!(report(3, 3).mismatch(&batch), None);
        assert_eq!(report(2, 3).mismatch(&batch), None);
        assert!(report(u32::MAX, 0).mismatch(&batch).is_some());
        assert!(report(3, 4).mismatch(&batch).is_some());
    }

    #[test]
    fn probe_header_round_trip_and_rejects() {
        let h = ProbeHeader {
            tag: Tag {
                kind: 1,
                fleet: 7,
                stream: 11,
            },
            seq: 99,
            sent_ns: 1_700_000_000_123_456_789,
        };
        let mut buf = [0u8; 40];
        h.emit(&mut buf);
        assert_eq!(ProbeHeader::parse(&buf), Some(h));
        assert_eq!(ProbeHeader::parse(&buf[..23]), None);
        let mut bad = buf;
        bad[0] = b'X';
        assert_eq!(ProbeHeader::parse(&bad), None);
        let mut bad = buf;
        bad[2] = 1;
        assert_eq!(
            ProbeHeader::parse(&bad),
            None,
            "a version 1 header is refused"
        );
    }

    #[test]
    fn a_batch_lists_its_probes_with_gaps() {
        let tag = Tag::default();
        let b = Batch::even(tag, 5, 300, 1000, 2);
        assert_eq!(b.packets(), 5);
        assert_eq!(b.duration_ns(), 4000);
        assert_eq!(b.bytes(), 1500);
        let p: Vec<ProbeSpec> = b.probes().collect();
        assert_eq!(p[0].gap_ns, 0);
        assert!(p[0].ride && p[1].ride && !p[2].ride);
        assert!(p[1..].iter().all(|p| p.gap_ns == 1000));
        assert_eq!(Batch::even(tag, 3, 300, 10, 0).runs.len(), 1);
        assert_eq!(b.refusal(1500), None);
        assert!(b.refusal(200).unwrap().contains("300 bytes"));
        let long = Batch::even(tag, 2, 300, MAX_GAP_NS + 1, 0);
        assert!(long.refusal(1500).unwrap().contains("at most 1000 ms"));
        let none = Batch {
            tag,
            runs: vec![],
            lead_ns: 0,
        };
        assert!(none.refusal(1500).unwrap().contains("0 probes"));
        let proof = Batch::even(
            Tag {
                kind: PROOF_KIND,
                ..tag
            },
            1,
            300,
            0,
            0,
        );
        assert!(proof.refusal(1500).unwrap().contains("kind 255"));
        let led = Batch {
            lead_ns: 20_000_000,
            ..b.clone()
        };
        assert_eq!(led.refusal(1500), None);
        assert_eq!(led.probes().next().map(|p| p.gap_ns), Some(20_000_000));
        assert_eq!(
            led.duration_ns(),
            4000,
            "the lead is not the batch's duration"
        );
        let too_long = Batch {
            lead_ns: MAX_GAP_NS + 1,
            ..b
        };
        assert!(
            too_long
                .refusal(1500)
                .unwrap()
                .contains("lead of 1000 ms before the first probe (at most 1000 ms)")
        );
    }

    #[test]
    fn control_lines_read_as_documented() {
        let r: Request = serde_json::from_str(
            r#"{"msg":"probes","tag":{"kind":1,"fleet":1,"stream":0},"runs":[{"count":100,"size":228,"gap_ns":182400,"ride":true}]}"#,
        )
        .unwrap();
        let Request::Probes(b) = r else {
            panic!("{r:?}")
        };
        assert_eq!((b.tag.fleet, b.packets(), b.lead_ns), (1, 100, 0));
        let led: Request = serde_json::from_str(
            r#"{"msg":"probes","tag":{"kind":1,"fleet":1,"stream":0},"runs":[{"count":2,"size":228,"gap_ns":1000,"ride":true}],"lead_ns":20000000}"#,
        )
        .unwrap();
        assert!(matches!(
            led,
            Request::Probes(Batch {
                lead_ns: 20_000_000,
                ..
            })
        ));
        assert!(
            !serde_json::to_string(&Request::Probes(Batch::even(
                Tag::default(),
                2,
                228,
                1000,
                0
            )))
            .unwrap()
            .contains("lead_ns"),
            "a batch without a lead is the line it always was"
        );
        let line = serde_json::to_string(&Request::Bye).unwrap();
        assert_eq!(line, r#"{"msg":"bye"}"#);
        let h: Request = serde_json::from_str(
            r#"{"msg":"hello","version":2,"transport":"udp","probe_port":5,"piggyback":false}"#,
        )
        .unwrap();
        assert!(matches!(
            h,
            Request::Hello {
                transport: Transport::Udp,
                address: None,
                ..
            }
        ));
        let t: Request = serde_json::from_str(r#"{"msg":"traffic"}"#).unwrap();
        assert_eq!(t, Request::Traffic { address: None });
        let line = serde_json::to_string(&Reply::Traffic {
            bytes_per_second: 1,
            window_ms: 2000,
            held_riders: 3,
            held_bytes: 4,
        })
        .unwrap();
        assert_eq!(
            line,
            r#"{"msg":"traffic","bytes_per_second":1,"window_ms":2000,"held_riders":3,"held_bytes":4}"#
        );
        let t: Request = serde_json::from_str(r#"{"msg":"tcp","address":"10.0.0.2"}"#).unwrap();
        assert_eq!(
            t,
            Request::Tcp {
                address: Some("10.0.0.2".parse().unwrap())
            }
        );
        let flow = TcpFlow {
            local: "10.0.0.1:5001".parse().unwrap(),
            remote: "10.0.0.2:40000".parse().unwrap(),
            congestion: Some("cubic".into()),
            bbr: None,
            sample: crate::tcpinfo::TcpSample {
                delivery_bps: Some(9.5e6),
                app_limited: false,
                rtt_s: 0.041,
                min_rtt_s: Some(0.04),
                total_retrans: 3,
                snd_mss: 1448,
                cwnd: 40,
                bytes_acked: Some(1 << 20),
                busy_s: Some(2.0),
                rwnd_limited_s: Some(0.0),
                sndbuf_limited_s: None,
            },
        };
        let bbr = TcpFlow {
            congestion: Some("bbr".into()),
            bbr: Some(crate::tcpinfo::BbrInfo {
                bandwidth_bps: 9.6e6,
                min_rtt_s: 0.04,
                pacing_gain: 1.0,
                cwnd_gain: 2.0,
            }),
            ..flow.clone()
        };
        let reply = Reply::Tcp {
            flows: vec![flow, bbr],
        };
        let line = serde_json::to_string(&reply).unwrap();
        assert!(
            line.starts_with(r#"{"msg":"tcp","flows":[{"local":"10.0.0.1:5001""#),
            "{line}"
        );
        assert_eq!(line.matches("\"bbr\":{").count(), 1, "{line}");
        assert_eq!(serde_json::from_str::<Reply>(&line).unwrap(), reply);
        let sent = serde_json::to_string(&Reply::Sent(SentReport {
            sent: 2,
            sender_stamps: vec![Some(5), None],
            ..SentReport::default()
        }))
        .unwrap();
        assert!(sent.starts_with(r#"{"msg":"sent","tag":"#), "{sent}");
        assert!(sent.contains(r#""sender_stamps":[5,null]"#), "{sent}");
    }
}
