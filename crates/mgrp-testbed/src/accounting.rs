//! What crossed a link, second by second and by kind of traffic, read off the link
//! itself: a thread reads every frame a device receives (an `AF_PACKET` socket, with
//! kernel stamps) and sorts its bytes into the source's own packets, cross traffic,
//! probe bytes, and application bytes riding inside probes (by parsing the MGRP
//! header). Placed after a bottleneck, it counts what the bottleneck let through,
//! after its losses, with no help from the daemons.
//!
//! Bytes are counted as the link carries them: the Ethernet header included, and a
//! super-packet counted as the segments it stands for.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mgrp_core::ip::Ip;
use mgrp_core::wire::{Kind as WireKind, Packet};

use crate::Netns;
use crate::link::{Direction, LinkSocket, MAX_FRAME, VNET_HDR_LEN, VnetHdr, realtime_ns};
use crate::threads::{Stoppable, halt_checked};

/// A kind of traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The measured application's own packets (from a source address, not in probes).
    Source,
    /// Every other IP packet.
    Cross,
    /// Probe bytes that carry no application data: headers and padding.
    ProbeOnly,
    /// Application bytes riding inside probes, and continuation packets.
    Piggybacked,
    /// Frames that are not IP (ARP, say).
    Other,
}

impl Kind {
    /// All kinds, in the order of [`Second::bytes`].
    pub const ALL: [Self; 5] = [
        Self::Source,
        Self::Cross,
        Self::ProbeOnly,
        Self::Piggybacked,
        Self::Other,
    ];

    /// A short name (CSV column).
    pub fn name(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Cross => "cross",
            Self::ProbeOnly => "probe_only",
            Self::Piggybacked => "piggybacked",
            Self::Other => "other",
        }
    }
}

/// Bytes of each kind in one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    /// Bytes per kind, indexed as [`Kind::ALL`].
    pub bytes: [u64; 5],
    /// Frames seen.
    pub frames: u64,
    /// MGRP packets (probes and continuations) seen.
    pub mgrp_frames: u64,
    /// Application bytes inside them (the riders' own bytes, no MGRP overhead): what
    /// the receiving daemon should count as delivered.
    pub rider_bytes: u64,
    /// Zero padding in probes: probe bytes that could have carried riders but did
    /// not (the rest of [`Kind::ProbeOnly`] is headers no probe can do without).
    pub probe_padding: u64,
}

impl Second {
    /// Counts one frame.
    pub fn add(&mut self, sorted: &Sorted) {
        self.frames += 1;
        for (kind, bytes) in sorted.parts {
            self.bytes[kind as usize] += bytes;
        }
        self.mgrp_frames += u64::from(sorted.mgrp);
        self.rider_bytes += sorted.rider_bytes;
        self.probe_padding += sorted.padding;
    }

    /// Bytes of `kind`.
    pub fn get(&self, kind: Kind) -> u64 {
        self.bytes[kind as usize]
    }

    /// Mbit/s of `kind` over the second.
    pub fn mbps(&self, kind: Kind) -> f64 {
        self.get(kind) as f64 * 8.0 / 1e6
    }
}

/// How frames are sorted.
#[derive(Debug, Clone)]
pub struct Classifier {
    /// Addresses whose packets (outside probes) are the source's.
    pub source: Vec<IpAddr>,
    /// The IP protocol number of MGRP.
    pub mgrp_protocol: u8,
}

/// What one frame adds to a second's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sorted {
    /// Its bytes on the link by kind (at most two kinds; the rest are zero).
    pub parts: [(Kind, u64); 2],
    /// Whether it is an MGRP packet (a damaged one included).
    pub mgrp: bool,
    /// The riders' own bytes inside it.
    pub rider_bytes: u64,
    /// Its zero padding (probes only): bytes that could have carried riders.
    pub padding: u64,
}

impl Sorted {
    fn plain(kind: Kind, bytes: u64) -> Self {
        Self {
            parts: [(kind, bytes), (Kind::Other, 0)],
            mgrp: false,
            rider_bytes: 0,
            padding: 0,
        }
    }
}

impl Classifier {
    /// Sorts the bytes of one frame (Ethernet header first) that occupies
    /// `wire_bytes` on the link, parsing it once.
    pub fn classify(&self, frame: &[u8], wire_bytes: u64) -> Sorted {
        let Some((src, proto, payload)) = ip_of(frame) else {
            return Sorted::plain(Kind::Other, wire_bytes);
        };
        if proto != self.mgrp_protocol {
            let kind = if self.source.contains(&src) {
                Kind::Source
            } else {
                Kind::Cross
            };
            return Sorted::plain(kind, wire_bytes);
        }
        let Ok(p) = Packet::new_checked(payload) else {
            // A damaged probe is still probe bytes on the link.
            return Sorted {
                mgrp: true,
                ..Sorted::plain(Kind::ProbeOnly, wire_bytes)
            };
        };
        let rider_bytes = p.rider_bytes() as u64;
        if p.kind() == WireKind::Continuation {
            return Sorted {
                mgrp: true,
                rider_bytes,
                ..Sorted::plain(Kind::Piggybacked, wire_bytes)
            };
        }
        let riders = rider_bytes.min(wire_bytes);
        Sorted {
            parts: [
                (Kind::Piggybacked, riders),
                (Kind::ProbeOnly, wire_bytes - riders),
            ],
            mgrp: true,
            rider_bytes,
            padding: p.padding_len() as u64,
        }
    }
}

/// The source address, protocol and payload of an Ethernet frame's IP packet (the
/// payload as far as the capture holds it).
fn ip_of(frame: &[u8]) -> Option<(IpAddr, u8, &[u8])> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = Ip::parse(frame.get(14..)?).ok()?;
    match (ethertype, ip.is_v4()) {
        (0x0800, true) | (0x86dd, false) => Some((ip.src, ip.protocol, ip.payload)),
        _ => None,
    }
}

/// A running count of one device's incoming frames; stopped and joined on drop.
#[derive(Debug)]
pub struct Accounting {
    thread: Stoppable<anyhow::Result<()>>,
    series: Arc<Mutex<Series>>,
}

/// Per-second counts from the start of the accounting.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Realtime nanoseconds of second 0's start.
    pub start_ns: i64,
    /// One entry per second since then.
    pub seconds: Vec<Second>,
}

impl Series {
    /// Totals over seconds `from..to` (clamped to what was seen).
    pub fn total(&self, from: usize, to: usize) -> Second {
        let mut t = Second::default();
        let to = to.min(self.seconds.len());
        for s in self.seconds.get(from.min(to)..to).unwrap_or_default() {
            for (a, b) in t.bytes.iter_mut().zip(s.bytes) {
                *a += b;
            }
            t.frames += s.frames;
            t.mgrp_frames += s.mgrp_frames;
            t.rider_bytes += s.rider_bytes;
            t.probe_padding += s.probe_padding;
        }
        t
    }
}

impl Accounting {
    /// Starts counting the frames `dev` in `ns` receives, sorted by `classifier`.
    pub fn start(ns: &Netns, dev: &str, classifier: Classifier) -> anyhow::Result<Self> {
        let socket = LinkSocket::open(ns, dev, Direction::Incoming)?;
        let stop = Arc::new(AtomicBool::new(false));
        let start_ns = realtime_ns();
        let series = Arc::new(Mutex::new(Series {
            start_ns,
            seconds: Vec::new(),
        }));
        let thread = {
            let (stop, series) = (stop.clone(), series.clone());
            ns.spawn("accounting", move || {
                count(&socket, &classifier, start_ns, &stop, &series)
            })?
        };
        Ok(Self {
            thread: Stoppable::new(stop, vec![thread]),
            series,
        })
    }

    /// The counts so far.
    pub fn snapshot(&self) -> Series {
        self.series.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops counting and returns the counts; an error if the thread failed.
    pub fn stop(mut self) -> anyhow::Result<Series> {
        self.halt()?;
        Ok(self.snapshot())
    }

    fn halt(&mut self) -> anyhow::Result<()> {
        halt_checked(&mut self.thread, "accounting")
    }
}

fn count(
    socket: &LinkSocket,
    classifier: &Classifier,
    start_ns: i64,
    stop: &AtomicBool,
    series: &Mutex<Series>,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; MAX_FRAME];
    while !stop.load(Ordering::Relaxed) {
        if !socket.wait(Some(Duration::from_millis(50)))? {
            continue;
        }
        while let Some(r) = socket.recv(&mut buf)? {
            if r.len < VNET_HDR_LEN {
                continue;
            }
            let vnet = VnetHdr::parse(&buf);
            let frame = &buf[VNET_HDR_LEN..r.len];
            let wire = vnet.wire_bytes(frame.len());
            let stamp = if r.stamp_ns > 0 {
                r.stamp_ns
            } else {
                realtime_ns()
            };
            let Ok(second) = usize::try_from((stamp - start_ns) / 1_000_000_000) else {
                continue;
            };
            let sorted = classifier.classify(frame, wire);
            let mut s = series.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            if s.seconds.len() <= second {
                s.seconds.resize(second + 1, Second::default());
            }
            s.seconds[second].add(&sorted);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn frame(src: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + payload.len()) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&[10, 0, 0, 9]);
        f.extend_from_slice(&ip);
        f.extend_from_slice(payload);
        f
    }

    fn classifier() -> Classifier {
        Classifier {
            source: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
            mgrp_protocol: 253,
        }
    }

    #[test]
    fn plain_packets_are_source_cross_or_other() {
        let c = classifier();
        let f = frame([10, 0, 0, 1], 6, &[0; 100]);
        assert_eq!(c.classify(&f, 134), Sorted::plain(Kind::Source, 134));
        let f = frame([10, 0, 0, 2], 17, &[0; 100]);
        assert_eq!(c.classify(&f, 134), Sorted::plain(Kind::Cross, 134));
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(c.classify(&arp, 42), Sorted::plain(Kind::Other, 42));
        assert_eq!(c.classify(&[1, 2, 3], 3), Sorted::plain(Kind::Other, 3));
    }

    #[test]
    fn probes_split_into_riders_and_the_rest() {
        use mgrp_core::WallTime;
        use mgrp_core::wire::{Chunk, Header, Repr};
        let c = classifier();
        let rider = [7u8; 300];
        let repr = Repr {
            version: mgrp_core::wire::Version::V1,
            header: Header {
                kind: WireKind::Probe,
                last_in_train: false,
                src_port: 1,
                dst_port: 2,
                transaction: 3,
                seq: 0,
                train_len: 1,
                sender_time: WallTime::from_nanos(5),
            },
            tool_header: &[],
            chunks: vec![Chunk {
                rider_id: 9,
                offset: 0,
                rider_len: 300,
                data: &rider,
            }],
            trailer_len: 0,
        };
        let mut payload = vec![0u8; 1000];
        repr.emit(&mut payload).expect("probe fits");
        let f = frame([10, 0, 0, 1], 253, &payload);
        let wire = f.len() as u64;
        assert_eq!(
            c.classify(&f, wire),
            Sorted {
                parts: [(Kind::Piggybacked, 300), (Kind::ProbeOnly, wire - 300)],
                mgrp: true,
                rider_bytes: 300,
                // 1000 bytes: 28 of header, 12 of descriptor, 300 of rider, the rest
                // padding.
                padding: 1000 - 28 - 12 - 300,
            }
        );
        let mut second = Second::default();
        second.add(&c.classify(&f, wire));
        second.add(&c.classify(&frame([10, 0, 0, 1], 6, &[0; 40]), 74));
        assert_eq!(
            (second.frames, second.mgrp_frames, second.rider_bytes),
            (2, 1, 300)
        );
        assert_eq!(second.get(Kind::Source), 74);
        // Not MGRP after all: still probe bytes, and an MGRP packet.
        let f = frame([10, 0, 0, 1], 253, &[9; 40]);
        assert_eq!(
            c.classify(&f, 74),
            Sorted {
                mgrp: true,
                ..Sorted::plain(Kind::ProbeOnly, 74)
            }
        );
    }

    #[test]
    fn totals_add_up() {
        let mut s = Series::default();
        for i in 0..3 {
            let mut sec = Second::default();
            sec.bytes[Kind::Cross as usize] = 10 * (i + 1);
            sec.frames = 1;
            s.seconds.push(sec);
        }
        assert_eq!(s.total(1, 10).get(Kind::Cross), 50);
        assert_eq!(s.total(5, 10).frames, 0);
        assert!((s.seconds[2].mbps(Kind::Cross) - 30.0 * 8.0 / 1e6).abs() < 1e-12);
    }
}
