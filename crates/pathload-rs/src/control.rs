//! What the two roles say to each other, and the header every probe carries.
//!
//! The receiver drives, as in pathload: it connects to the sender's control port
//! (TCP), and asks for each train and stream; the sender sends it and answers with
//! what it sent (every sender stamp and, over MGRP, the riders the transaction report
//! counted). Messages are JSON objects, one per line, each written with one `write`
//! on a socket with `TCP_NODELAY` (the original wrote 4-byte words one by one without
//! it and stalled ~40 ms per stream).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Version of the control protocol.
pub const CONTROL_VERSION: u32 = 1;

/// The sender's control port (pathload's).
pub const DEFAULT_CONTROL_PORT: u16 = 55002;

/// The receiver's probe port (pathload's).
pub const DEFAULT_PROBE_PORT: u16 = 55001;

/// The sender's own probe port.
pub const DEFAULT_SENDER_PROBE_PORT: u16 = 55003;

/// Longest control line accepted, bytes.
pub const MAX_CONTROL_LINE: usize = 1 << 20;

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
        /// Whether riders may ride in stream probes (MGRP).
        piggyback: bool,
    },
    /// Send a back-to-back train.
    Train {
        /// Train number.
        id: u32,
        /// Packets.
        packets: u32,
        /// IP bytes each.
        size: u32,
    },
    /// Send a stream.
    Stream {
        /// Fleet number.
        fleet: u32,
        /// Stream number.
        stream: u32,
        /// Packets.
        packets: u32,
        /// IP bytes each.
        size: u32,
        /// Gap between departures, ns.
        spacing_ns: u64,
        /// How many of the first probes may carry riders.
        rider_probes: u32,
    },
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
    /// The measurement is over.
    Bye,
}

/// From the sender to the receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    },
    /// A train or stream was sent.
    Sent {
        /// Fleet number (0 for a back-to-back train).
        fleet: u32,
        /// Stream number (the train number for a train).
        stream: u32,
        /// Probes handed to the network.
        sent: u32,
        /// Sender stamp of each, realtime ns.
        sender_stamps: Vec<i64>,
        /// Application bytes that rode and would have competed (MGRP §2.4).
        competing_rider_bytes: u64,
        /// Application bytes that rode.
        rider_bytes: u64,
        /// IP bytes of the probes that carried riders.
        riding_probe_bytes: u64,
        /// Whether `sender_stamps` are the kernel's, taken as each probe entered the
        /// sending host's egress queue (MGRP with kernel stamps, every probe stamped);
        /// otherwise every one was read in user space just before its send.
        #[serde(default)]
        kernel_stamps: bool,
    },
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
    /// The request could not be served; the message says why.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// Bytes of [`ProbeHeader`] on the wire.
pub const PROBE_HEADER_LEN: usize = 24;

const MAGIC: [u8; 2] = *b"PL";
const HEADER_VERSION: u8 = 1;

/// Kind of probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// Part of a back-to-back train.
    Train,
    /// Part of a stream.
    Stream,
}

/// The header at the start of every probe's payload: which train or stream it belongs
/// to, its position, and (over UDP) the sender's stamp. Over MGRP the daemon's own
/// sequence number and stamp are used instead of the last two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeHeader {
    /// Train or stream.
    pub kind: ProbeKind,
    /// Fleet number (0 for trains).
    pub fleet: u32,
    /// Stream (or train) number.
    pub stream: u32,
    /// Position in the stream.
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
        b[3] = match self.kind {
            ProbeKind::Train => 0,
            ProbeKind::Stream => 1,
        };
        b[4..8].copy_from_slice(&self.fleet.to_be_bytes());
        b[8..12].copy_from_slice(&self.stream.to_be_bytes());
        b[12..16].copy_from_slice(&self.seq.to_be_bytes());
        b[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// Reads a header; `None` if `buf` is not one.
    pub fn parse(buf: &[u8]) -> Option<Self> {
        let b = buf.get(..PROBE_HEADER_LEN)?;
        if b[0..2] != MAGIC || b[2] != HEADER_VERSION {
            return None;
        }
        let kind = match b[3] {
            0 => ProbeKind::Train,
            1 => ProbeKind::Stream,
            _ => return None,
        };
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[16..24]);
        Some(Self {
            kind,
            fleet: u32_at(4),
            stream: u32_at(8),
            seq: u32_at(12),
            sent_ns: i64::from_be_bytes(t),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_header_round_trip_and_rejects() {
        let h = ProbeHeader {
            kind: ProbeKind::Stream,
            fleet: 7,
            stream: 11,
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
        bad[3] = 9;
        assert_eq!(ProbeHeader::parse(&bad), None);
    }

    #[test]
    fn control_lines_read_as_documented() {
        let r: Request = serde_json::from_str(
            r#"{"msg":"stream","fleet":1,"stream":0,"packets":100,"size":228,"spacing_ns":182400,"rider_probes":100}"#,
        )
        .unwrap();
        assert!(matches!(r, Request::Stream { fleet: 1, .. }));
        let line = serde_json::to_string(&Request::Bye).unwrap();
        assert_eq!(line, r#"{"msg":"bye"}"#);
        let h: Request = serde_json::from_str(
            r#"{"msg":"hello","version":1,"transport":"udp","probe_port":5,"piggyback":false}"#,
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
    }
}
