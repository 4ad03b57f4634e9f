//! The MGRP packet: the payload of an IP packet of protocol 253, or of a UDP datagram.
//!
//! A probe travels with exactly the IP total length its tool asked for. Its MGRP payload
//! starts with a fixed header, then one descriptor per rider chunk, then the tool's own
//! probe header, then the chunk bytes, then zero padding up to the requested size, and
//! at the very end a trailer reserved for authentication data. Rider chunks and their
//! descriptors only ever replace padding: they never make a probe bigger. A
//! *continuation* packet has the same layout with no tool header and no padding; it
//! carries the rest of a rider that started riding in a probe but whose hold time ran
//! out before the train could take all of it.
//!
//! Riders are whole IPv4 or IPv6 packets; nothing here looks inside them.
//!
//! Two versions of the format exist ([`Version`]); a receiver takes both, told apart by
//! the first byte, and a sender uses the one its peer is configured for. Version 2 is
//! the lean one: every byte of header is a byte of padding a rider cannot use, and a
//! small probe (the paper's pk1 is 314 bytes on the link) loses an eighth of its
//! padding to version 1's 28-byte header and 12-byte descriptor.
//!
//! All integers are big-endian (network order).
//!
//! # Version 1
//!
//! ## Fixed header (28 bytes)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | `version` | 1 |
//! | 1 | 1 | `kind` | 1 = probe, 2 = continuation (rider chunks only), 3 = keepalive (nothing but the header and trailer: keeps a NAT's mapping open and tells the peer where its sender is) |
//! | 2 | 1 | `flags` | bit 0 = last probe of its train; other bits reserved, sent as 0, ignored |
//! | 3 | 1 | `chunk_count` | number of chunk descriptors that follow (0–255) |
//! | 4 | 2 | `src_port` | measurement port of the sending tool |
//! | 6 | 2 | `dst_port` | measurement port the receiving daemon hands the probe to |
//! | 8 | 4 | `transaction` | transaction (train) id, chosen by the sending daemon |
//! | 12 | 2 | `seq` | probe sequence number in its train, `0..train_len` |
//! | 14 | 2 | `train_len` | number of probes in the train (≥ 1 for a probe) |
//! | 16 | 8 | `sender_time` | realtime nanoseconds since the Unix epoch, written right before sending |
//! | 24 | 2 | `tool_header_len` | length of the tool's probe header |
//! | 26 | 2 | `trailer_len` | length of the trailer at the end of the packet (0 = none) |
//!
//! ## Chunk descriptor (12 bytes each, `chunk_count` of them from offset 28)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 4 | `rider_id` | id of the rider, unique per sending daemon and destination until it wraps; ids below 2³¹ are riders planned into probes, ids with the top bit set ([`TUNNELED_RIDER_ID`]) riders a daemon sends whole in continuations because their path takes nothing but MGRP (UDP encapsulation), so the two never collide |
//! | 4 | 2 | `offset` | offset of this chunk's first byte within the rider |
//! | 6 | 2 | `rider_len` | total length of the rider (its IP total length), ≥ 1 |
//! | 8 | 2 | `chunk_len` | bytes of rider data in this chunk, ≥ 1 |
//! | 10 | 1 | `chunk_flags` | bit 0 = last chunk (`offset + chunk_len == rider_len`); others reserved |
//! | 11 | 1 | reserved | sent as 0, ignored |
//!
//! # Version 2
//!
//! Designed from what each field is for. A probe needs what its receiving tool is
//! told ([`crate::api::ReceivedProbe`]: ports, transaction, sequence, train length,
//! tool header, sender stamp); a continuation or keepalive needs none of it. A whole
//! rider, the common case, needs only its length; only a rider cut across packets
//! needs an id and a position.
//!
//! ## Header: 16 bytes for a probe, 2 for a continuation or keepalive
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | `version·kind·flags` | bits 7–4: version, 2; bits 3–2: kind (1 probe, 2 continuation, 3 keepalive); bit 1: last probe of its train; bit 0: the packet ends in the [`V2_TRAILER_LEN`]-byte authentication trailer |
//! | 1 | 1 | `chunk_count` | number of chunk descriptors (0–255) |
//! | 2 | 2 | `dst_port` | probes only, from here on |
//! | 4 | 2 | `src_port` | |
//! | 6 | 2 | `transaction` | the low 16 bits of the sending daemon's transaction id: trains to one destination leave one after another, so 16 bits tell apart any that could be in the network together |
//! | 8 | 4 | `seq·train·tool` | bits 31–20: `seq`; bits 19–8: `train_len` (1–4095); bits 7–0: `tool_header_len` (0–255). A train longer or a tool header larger goes as version 1 |
//! | 12 | 4 | `sender_time` | the low 32 bits of the realtime nanoseconds stamp; the receiver takes the full stamp within ±2.1 s of its own receive stamp ([`widen_sender_time`]), so sender and receiver clocks must agree to better than that, less the one-way delay |
//!
//! ## Chunk descriptor: 2, 6 or 8 bytes
//!
//! The first two bytes: bits 15–14 the chunk's place in its rider (0 whole, 1 first,
//! 2 middle, 3 last), bits 13–0 `chunk_len` (1–16383). Then, by place:
//!
//! | place | then | size |
//! |---|---|---:|
//! | whole | nothing: `offset` 0, `rider_len` = `chunk_len` | 2 |
//! | first | `rider_id` (2), `rider_len` (2); `offset` 0 | 6 |
//! | middle | `rider_id` (2), `offset` (2), `rider_len` (2) | 8 |
//! | last | `rider_id` (2), `offset` (2); `rider_len` = `offset + chunk_len` | 6 |
//!
//! `rider_id` here is 16 bits: bit 15 is [`TUNNELED_RIDER_ID`]'s bit, bits 14–0 the low
//! bits of the id. Only riders cut across packets are numbered, so the ids wrap only
//! after 32768 such riders (one per probe at most). A whole rider has no id: a receiver
//! cannot recognise it if the network duplicates its packet (with a key, replayed
//! packets are refused before their riders are looked at).
//!
//! # Body (both versions)
//!
//! | offset | size | content |
//! |---:|---:|---|
//! | header + descriptors | `tool_header_len` | the tool's probe header, delivered to the receiving tool |
//! | … | Σ `chunk_len` | chunk data, in descriptor order |
//! | … | rest | padding, sent as zeros, not checked on receipt |
//! | end − `trailer_len` | `trailer_len` | trailer: authentication data; with a key (`auth`) a 24-byte trailer holds the sender's packet counter, the index of its key (tags version 3) and a keyed tag over everything before it, without one the trailer is absent |
//!
//! Parsing ([`Packet::new_checked`]) checks every length against the buffer and every
//! descriptor for consistency once; after that no getter can panic, on any input.

use std::fmt;

use crate::WallTime;

/// Length of version 1's fixed header.
pub const HEADER_LEN: usize = 28;
/// Length of one version-1 chunk descriptor.
pub const CHUNK_DESC_LEN: usize = 12;
/// The bit set in the id of every rider sent whole in continuations outside any
/// planner (see the chunk descriptor's `rider_id`); planners use the ids below it.
pub const TUNNELED_RIDER_ID: u32 = 1 << 31;
/// The most chunk descriptors one packet can hold.
pub const MAX_CHUNKS: usize = u8::MAX as usize;
/// The only trailer length version 2 knows (the authentication trailer's, see `auth`).
pub const V2_TRAILER_LEN: u16 = 24;
/// Length of a version-2 probe's header.
pub const V2_PROBE_HEADER_LEN: usize = 16;
/// Length of a version-2 continuation's or keepalive's header.
pub const V2_SHORT_HEADER_LEN: usize = 2;
/// Longest train version 2 numbers (12-bit sequence and length).
pub const V2_MAX_TRAIN_LEN: u16 = 4095;
/// Longest tool header version 2 carries.
pub const V2_MAX_TOOL_HEADER_LEN: usize = 255;
/// Longest chunk version 2 describes (14 bits).
pub const V2_MAX_CHUNK_LEN: usize = (1 << 14) - 1;
/// The rider id a version-2 whole rider is read with: it has none on the wire, and a
/// reassembler must neither remember nor look it up.
pub const UNNUMBERED_RIDER_ID: u32 = u32::MAX;

const FLAG_LAST_PROBE: u8 = 0x01;
const CHUNK_FLAG_LAST: u8 = 0x01;
const V2_LAST_PROBE: u8 = 0x02;
const V2_TRAILER: u8 = 0x01;
const V2_ID_TUNNELED: u16 = 0x8000;

/// A format version. The default is version 1, which every MGRP daemon speaks; a
/// daemon chooses its own default for its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Version {
    /// The original 28-byte header and 12-byte descriptors.
    #[default]
    V1,
    /// The lean header (16 bytes for a probe) and 2- to 8-byte descriptors.
    V2,
}

impl Version {
    /// The version's number.
    pub const fn number(self) -> u8 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }

    /// The version numbered `n`, if this implementation speaks it.
    pub const fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            _ => None,
        }
    }

    /// Length of the fixed header of a packet of `kind`.
    pub const fn header_len(self, kind: Kind) -> usize {
        match (self, kind) {
            (Self::V1, _) => HEADER_LEN,
            (Self::V2, Kind::Probe) => V2_PROBE_HEADER_LEN,
            (Self::V2, _) => V2_SHORT_HEADER_LEN,
        }
    }

    /// Length of the descriptor of a chunk of `len` bytes at `offset` in a rider of
    /// `rider_len` bytes.
    pub fn desc_len(self, offset: usize, len: usize, rider_len: usize) -> usize {
        match self {
            Self::V1 => CHUNK_DESC_LEN,
            Self::V2 => self.desc_len_of(Place::of(offset, len, rider_len)),
        }
    }

    /// Length of a version-2 descriptor of a chunk in this place (version 1's are all
    /// one length).
    const fn desc_len_of(self, place: Place) -> usize {
        match (self, place) {
            (Self::V1, _) => CHUNK_DESC_LEN,
            (Self::V2, Place::Whole) => 2,
            (Self::V2, Place::First | Place::Last) => 6,
            (Self::V2, Place::Middle) => 8,
        }
    }

    /// The longest descriptor of the version.
    pub const fn max_desc_len(self) -> usize {
        match self {
            Self::V1 => CHUNK_DESC_LEN,
            Self::V2 => 8,
        }
    }

    /// Whether a train of `train_len` probes with a tool header of `tool_header_len`
    /// bytes and a trailer of `trailer_len` fits this version's fields.
    pub fn fits(self, train_len: usize, tool_header_len: usize, trailer_len: u16) -> bool {
        match self {
            Self::V1 => u16::try_from(train_len).is_ok() && u16::try_from(tool_header_len).is_ok(),
            Self::V2 => {
                train_len <= usize::from(V2_MAX_TRAIN_LEN)
                    && tool_header_len <= V2_MAX_TOOL_HEADER_LEN
                    && (trailer_len == 0 || trailer_len == V2_TRAILER_LEN)
            }
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// A chunk's place in its rider (version 2 descriptors say it, in their top two
/// bits: the discriminants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Whole = 0,
    First = 1,
    Middle = 2,
    Last = 3,
}

impl Place {
    fn of(offset: usize, len: usize, rider_len: usize) -> Self {
        match (offset == 0, offset + len >= rider_len) {
            (true, true) => Self::Whole,
            (true, false) => Self::First,
            (false, false) => Self::Middle,
            (false, true) => Self::Last,
        }
    }
}

mod field {
    use std::ops::Range;

    pub(super) const VERSION: usize = 0;
    pub(super) const KIND: usize = 1;
    pub(super) const FLAGS: usize = 2;
    pub(super) const CHUNK_COUNT: usize = 3;
    pub(super) const SRC_PORT: Range<usize> = 4..6;
    pub(super) const DST_PORT: Range<usize> = 6..8;
    pub(super) const TRANSACTION: Range<usize> = 8..12;
    pub(super) const SEQ: Range<usize> = 12..14;
    pub(super) const TRAIN_LEN: Range<usize> = 14..16;
    pub(super) const SENDER_TIME: Range<usize> = 16..24;
    pub(super) const TOOL_HEADER_LEN: Range<usize> = 24..26;
    pub(super) const TRAILER_LEN: Range<usize> = 26..28;

    pub(super) const RIDER_ID: Range<usize> = 0..4;
    pub(super) const OFFSET: Range<usize> = 4..6;
    pub(super) const RIDER_LEN: Range<usize> = 6..8;
    pub(super) const CHUNK_LEN: Range<usize> = 8..10;
    pub(super) const CHUNK_FLAGS: usize = 10;

    pub(super) mod v2 {
        use std::ops::Range;

        pub(crate) const FIRST: usize = 0;
        pub(crate) const CHUNK_COUNT: usize = 1;
        pub(crate) const DST_PORT: Range<usize> = 2..4;
        pub(crate) const SRC_PORT: Range<usize> = 4..6;
        pub(crate) const TRANSACTION: Range<usize> = 6..8;
        pub(crate) const SEQ_TRAIN_TOOL: Range<usize> = 8..12;
        pub(crate) const SENDER_TIME: Range<usize> = 12..16;
    }
}
/// What was wrong with a packet that failed to parse or emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The packet is shorter than the fixed header.
    #[error("packet of {len} bytes is shorter than the {HEADER_LEN}-byte MGRP header")]
    TruncatedHeader {
        /// Length of the packet.
        len: usize,
    },
    /// The first byte names a format this implementation does not speak.
    #[error("unsupported MGRP version {0} (this implementation speaks versions 1 and 2)")]
    UnsupportedVersion(u8),
    /// The kind byte is neither probe nor continuation.
    #[error("unknown MGRP packet kind {0}")]
    UnknownKind(u8),
    /// The header's lengths add up to more than the packet holds.
    #[error(
        "header claims {claimed} bytes (descriptors, tool header, chunks, trailer) but the packet has {len}"
    )]
    LengthsExceedPacket {
        /// Bytes the header and descriptors account for.
        claimed: usize,
        /// Length of the packet.
        len: usize,
    },
    /// A probe's sequence number is not below its train length.
    #[error("probe sequence number {seq} is not below train length {train_len}")]
    SeqOutOfRange {
        /// Sequence number.
        seq: u16,
        /// Train length.
        train_len: u16,
    },
    /// A continuation packet carries a tool header or no chunk at all.
    #[error("continuation packet must carry at least one chunk and no tool header")]
    MalformedContinuation,
    /// A keepalive carries a chunk or a tool header.
    #[error("keepalive packet must carry no chunk and no tool header")]
    MalformedKeepalive,
    /// A chunk descriptor has a zero chunk or rider length.
    #[error("chunk {index} has a zero chunk length or rider length")]
    EmptyChunk {
        /// Index of the descriptor.
        index: usize,
    },
    /// A chunk reaches past the end of its rider.
    #[error("chunk {index} covers bytes {offset}..{end} of a rider of {rider_len} bytes")]
    ChunkOutOfRange {
        /// Index of the descriptor.
        index: usize,
        /// Offset of the chunk.
        offset: u16,
        /// End of the chunk (offset + length).
        end: u32,
        /// Claimed rider length.
        rider_len: u16,
    },
    /// A chunk's last-chunk flag disagrees with its offset and length.
    #[error("chunk {index}: last-chunk flag disagrees with offset + length vs rider length")]
    LastFlagMismatch {
        /// Index of the descriptor.
        index: usize,
    },
    /// More chunks than one packet can describe.
    #[error("{0} chunks do not fit the 8-bit chunk count")]
    TooManyChunks(usize),
    /// The buffer given to `emit` is too small for the representation.
    #[error("buffer of {len} bytes cannot hold the {needed} bytes this packet needs")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        len: usize,
    },
    /// The tool header, trailer, chunk or train does not fit its length field.
    #[error("a tool header, trailer, chunk or train of {0} does not fit its field in this version")]
    FieldTooLong(usize),
    /// A version-2 packet with a trailer other than the authentication trailer.
    #[error("version 2 carries a trailer of {V2_TRAILER_LEN} bytes or none, not {0}")]
    TrailerLen(u16),
}

/// The kind of an MGRP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A probe of a tool's train, possibly carrying rider chunks in its padding.
    Probe,
    /// Rider chunks only: the rest of a rider whose hold time ran out mid-train, or
    /// over a path that takes only MGRP, a rider that did not ride.
    Continuation,
    /// Nothing but the header (and trailer): sent to keep a NAT's mapping open, so
    /// a peer behind it stays reachable.
    Keepalive,
}

impl Kind {
    const fn to_byte(self) -> u8 {
        match self {
            Self::Probe => 1,
            Self::Continuation => 2,
            Self::Keepalive => 3,
        }
    }

    const fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Probe),
            2 => Some(Self::Continuation),
            3 => Some(Self::Keepalive),
            _ => None,
        }
    }
}

fn be16(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_be_bytes(a)
}

fn be32(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_be_bytes(a)
}

fn be64(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_be_bytes(a)
}

/// The version a packet's first byte names.
fn version_of(b0: u8) -> Result<Version, WireError> {
    if b0 == 1 {
        Ok(Version::V1)
    } else if b0 >> 4 == 2 {
        Ok(Version::V2)
    } else {
        Err(WireError::UnsupportedVersion(if b0 >> 4 == 0 {
            b0
        } else {
            b0 >> 4
        }))
    }
}

/// A version-2 descriptor as read.
struct V2Desc {
    len: u16,
    id: u32,
    offset: u16,
    /// The rider's length; for a last piece, `offset + len`, saturated at `u16::MAX`
    /// (so an end past it reads as a chunk out of range).
    rider_len: u16,
    place: Place,
    /// The descriptor's own length.
    size: usize,
}

/// Reads the version-2 descriptor at the start of `d`; `None` if it does not fit.
fn v2_desc(d: &[u8]) -> Option<V2Desc> {
    let w = be16(d.get(..2)?, 0..2);
    let len = w & 0x3fff;
    let place = [Place::Whole, Place::First, Place::Middle, Place::Last][usize::from(w >> 14)];
    let size = Version::V2.desc_len_of(place);
    let d = d.get(..size)?;
    let id = || {
        let raw = be16(d, 2..4);
        (u32::from(raw & V2_ID_TUNNELED) << 16) | u32::from(raw & 0x7fff)
    };
    let (id, offset, rider_len) = match place {
        Place::Whole => (UNNUMBERED_RIDER_ID, 0, len),
        Place::First => (id(), 0, be16(d, 4..6)),
        Place::Middle => (id(), be16(d, 4..6), be16(d, 6..8)),
        Place::Last => {
            let offset = be16(d, 4..6);
            let end = u32::from(offset) + u32::from(len);
            (id(), offset, u16::try_from(end).unwrap_or(u16::MAX))
        }
    };
    Some(V2Desc {
        len,
        id,
        offset,
        rider_len,
        place,
        size,
    })
}

/// The full sender stamp of a version-2 probe, whose packet holds only its low 32
/// bits: the stamp within ±2.1 s of `near` (the receive stamp) with those low bits.
pub fn widen_sender_time(low: u32, near: WallTime) -> WallTime {
    let near_ns = near.as_nanos();
    // near − sent, modulo 2³², read as signed: the sender's clock may be ahead.
    let behind = (near_ns as u32).wrapping_sub(low) as i32;
    let sent = i128::from(near_ns) - i128::from(behind);
    WallTime::from_nanos(u64::try_from(sent.max(0)).unwrap_or(u64::MAX))
}

/// A checked, zero-copy view of an MGRP packet of either version.
///
/// Construct it with [`Packet::new_checked`], or get one from [`Repr::emit_into`];
/// every getter is then infallible.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    version: Version,
    /// Where the descriptors end (version 2's have several lengths).
    desc_end: usize,
}

impl<T: AsRef<[u8]>> fmt::Debug for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
            .field("version", &self.version)
            .field("kind", &self.kind())
            .field("transaction", &self.transaction())
            .field("seq", &self.seq())
            .field("train_len", &self.train_len())
            .field("chunks", &self.chunk_count())
            .field("len", &self.buffer.as_ref().len())
            .finish()
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks every length and descriptor of `buffer` and wraps it.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let len = b.len();
        let Some(&b0) = b.first() else {
            return Err(WireError::TruncatedHeader { len });
        };
        let version = version_of(b0)?;
        let desc_end = match version {
            Version::V1 => check_v1(b)?,
            Version::V2 => check_v2(b)?,
        };
        Ok(Self {
            buffer,
            version,
            desc_end,
        })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The packet's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Length of the whole MGRP packet.
    pub fn len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// Always false: a checked packet holds at least the fixed header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The packet's format version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Probe, continuation or keepalive.
    pub fn kind(&self) -> Kind {
        let b = self.buffer.as_ref();
        let byte = match self.version {
            Version::V1 => b[field::KIND],
            Version::V2 => (b[field::v2::FIRST] >> 2) & 3,
        };
        // Checked in `check`.
        Kind::from_byte(byte).unwrap_or(Kind::Continuation)
    }

    fn is_v2_probe(&self) -> bool {
        self.version == Version::V2 && self.kind() == Kind::Probe
    }

    /// Whether this probe is the last of its train.
    pub fn last_in_train(&self) -> bool {
        let b = self.buffer.as_ref();
        match self.version {
            Version::V1 => b[field::FLAGS] & FLAG_LAST_PROBE != 0,
            Version::V2 => b[field::v2::FIRST] & V2_LAST_PROBE != 0,
        }
    }

    /// Number of rider chunks.
    pub fn chunk_count(&self) -> usize {
        let b = self.buffer.as_ref();
        usize::from(match self.version {
            Version::V1 => b[field::CHUNK_COUNT],
            Version::V2 => b[field::v2::CHUNK_COUNT],
        })
    }

    /// A version-2 probe's 16-bit field at `r`, 0 in any other packet.
    fn v2_probe16(&self, r: std::ops::Range<usize>) -> u16 {
        if self.is_v2_probe() {
            be16(self.buffer.as_ref(), r)
        } else {
            0
        }
    }

    fn v2_seq_train_tool(&self) -> u32 {
        if self.is_v2_probe() {
            be32(self.buffer.as_ref(), field::v2::SEQ_TRAIN_TOOL)
        } else {
            0
        }
    }

    /// Measurement port of the sending tool.
    pub fn src_port(&self) -> u16 {
        match self.version {
            Version::V1 => be16(self.buffer.as_ref(), field::SRC_PORT),
            Version::V2 => self.v2_probe16(field::v2::SRC_PORT),
        }
    }

    /// Measurement port of the receiving tool.
    pub fn dst_port(&self) -> u16 {
        match self.version {
            Version::V1 => be16(self.buffer.as_ref(), field::DST_PORT),
            Version::V2 => self.v2_probe16(field::v2::DST_PORT),
        }
    }

    /// Transaction id (its low 16 bits in version 2).
    pub fn transaction(&self) -> u32 {
        match self.version {
            Version::V1 => be32(self.buffer.as_ref(), field::TRANSACTION),
            Version::V2 => u32::from(self.v2_probe16(field::v2::TRANSACTION)),
        }
    }

    /// Probe sequence number within its train.
    pub fn seq(&self) -> u16 {
        match self.version {
            Version::V1 => be16(self.buffer.as_ref(), field::SEQ),
            Version::V2 => (self.v2_seq_train_tool() >> 20) as u16,
        }
    }

    /// Number of probes in the train.
    pub fn train_len(&self) -> u16 {
        match self.version {
            Version::V1 => be16(self.buffer.as_ref(), field::TRAIN_LEN),
            Version::V2 => ((self.v2_seq_train_tool() >> 8) & 0xfff) as u16,
        }
    }

    /// The sender's realtime stamp as the packet holds it: whole in version 1, its low
    /// 32 bits in version 2 (see [`Packet::sender_time_near`]).
    pub fn sender_time(&self) -> WallTime {
        let b = self.buffer.as_ref();
        match self.version {
            Version::V1 => WallTime::from_nanos(be64(b, field::SENDER_TIME)),
            Version::V2 if self.kind() == Kind::Probe => {
                WallTime::from_nanos(u64::from(be32(b, field::v2::SENDER_TIME)))
            }
            Version::V2 => WallTime::UNIX_EPOCH,
        }
    }

    /// The sender's full realtime stamp, given the receive stamp `near` (version 2
    /// holds only the low 32 bits; see [`widen_sender_time`]).
    pub fn sender_time_near(&self, near: WallTime) -> WallTime {
        match self.version {
            Version::V1 => self.sender_time(),
            Version::V2 => widen_sender_time(self.sender_time().as_nanos() as u32, near),
        }
    }

    fn tool_header_len(&self) -> usize {
        match self.version {
            Version::V1 => usize::from(be16(self.buffer.as_ref(), field::TOOL_HEADER_LEN)),
            Version::V2 => (self.v2_seq_train_tool() & 0xff) as usize,
        }
    }

    fn trailer_len(&self) -> usize {
        let b = self.buffer.as_ref();
        match self.version {
            Version::V1 => usize::from(be16(b, field::TRAILER_LEN)),
            Version::V2 if b[field::v2::FIRST] & V2_TRAILER != 0 => usize::from(V2_TRAILER_LEN),
            Version::V2 => 0,
        }
    }

    /// The tool's probe header.
    pub fn tool_header(&self) -> &[u8] {
        &self.buffer.as_ref()[self.desc_end..self.chunk_data_start()]
    }

    /// Where the chunks' data begins, after the descriptors and the tool header.
    fn chunk_data_start(&self) -> usize {
        self.desc_end + self.tool_header_len()
    }

    /// The authentication trailer (see `auth`; empty without a key).
    pub fn trailer(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - self.trailer_len()..]
    }

    /// The rider chunks, in descriptor order.
    pub fn chunks(&self) -> Chunks<'_> {
        self.chunks_of(self.buffer.as_ref())
    }

    fn chunks_of<'a>(&self, b: &'a [u8]) -> Chunks<'a> {
        Chunks {
            buffer: b,
            version: self.version,
            index: 0,
            count: self.chunk_count(),
            desc_at: self.version.header_len(self.kind()),
            data_at: self.chunk_data_start(),
        }
    }

    /// Total bytes of rider data carried.
    pub fn rider_bytes(&self) -> usize {
        self.chunks().map(|c| c.data.len()).sum()
    }

    /// Bytes of padding: what the header, descriptors, tool header, chunks and
    /// trailer leave of the packet.
    pub fn padding_len(&self) -> usize {
        // Checked: they fit the packet.
        self.len() - self.chunk_data_start() - self.rider_bytes() - self.trailer_len()
    }
}

/// Checks a version-1 packet; returns where its descriptors end.
fn check_v1(b: &[u8]) -> Result<usize, WireError> {
    let len = b.len();
    if len < HEADER_LEN {
        return Err(WireError::TruncatedHeader { len });
    }
    let kind = Kind::from_byte(b[field::KIND]).ok_or(WireError::UnknownKind(b[field::KIND]))?;
    let count = usize::from(b[field::CHUNK_COUNT]);
    let tool = usize::from(be16(b, field::TOOL_HEADER_LEN));
    let trailer = usize::from(be16(b, field::TRAILER_LEN));
    let desc_end = HEADER_LEN + count * CHUNK_DESC_LEN;
    let fixed = desc_end + tool + trailer;
    if fixed > len {
        return Err(WireError::LengthsExceedPacket {
            claimed: fixed,
            len,
        });
    }
    check_kind(
        kind,
        be16(b, field::SEQ),
        be16(b, field::TRAIN_LEN),
        count,
        tool,
    )?;
    let mut claimed = fixed;
    for index in 0..count {
        let d = &b[HEADER_LEN + index * CHUNK_DESC_LEN..][..CHUNK_DESC_LEN];
        let offset = be16(d, field::OFFSET);
        let rider_len = be16(d, field::RIDER_LEN);
        let chunk_len = be16(d, field::CHUNK_LEN);
        let end = chunk_end(index, offset, chunk_len, rider_len)?;
        let last = d[field::CHUNK_FLAGS] & CHUNK_FLAG_LAST != 0;
        if last != (end == u32::from(rider_len)) {
            return Err(WireError::LastFlagMismatch { index });
        }
        claimed += usize::from(chunk_len);
    }
    if claimed > len {
        return Err(WireError::LengthsExceedPacket { claimed, len });
    }
    Ok(desc_end)
}

/// What every version requires of each kind.
fn check_kind(
    kind: Kind,
    seq: u16,
    train_len: u16,
    count: usize,
    tool: usize,
) -> Result<(), WireError> {
    match kind {
        Kind::Probe if seq >= train_len => Err(WireError::SeqOutOfRange { seq, train_len }),
        Kind::Continuation if count == 0 || tool != 0 => Err(WireError::MalformedContinuation),
        Kind::Keepalive if count != 0 || tool != 0 => Err(WireError::MalformedKeepalive),
        _ => Ok(()),
    }
}

/// Checks a version-2 packet; returns where its descriptors end.
fn check_v2(b: &[u8]) -> Result<usize, WireError> {
    let len = b.len();
    if len < V2_SHORT_HEADER_LEN {
        return Err(WireError::TruncatedHeader { len });
    }
    let first = b[field::v2::FIRST];
    let kind_bits = (first >> 2) & 3;
    let kind = Kind::from_byte(kind_bits).ok_or(WireError::UnknownKind(kind_bits))?;
    let header = Version::V2.header_len(kind);
    if len < header {
        return Err(WireError::TruncatedHeader { len });
    }
    let count = usize::from(b[field::v2::CHUNK_COUNT]);
    let (seq, train_len, tool) = if kind == Kind::Probe {
        let w = be32(b, field::v2::SEQ_TRAIN_TOOL);
        (
            (w >> 20) as u16,
            ((w >> 8) & 0xfff) as u16,
            (w & 0xff) as usize,
        )
    } else {
        (0, 0, 0)
    };
    check_kind(kind, seq, train_len, count, tool)?;
    let trailer = if first & V2_TRAILER != 0 {
        usize::from(V2_TRAILER_LEN)
    } else {
        0
    };
    let mut at = header;
    let mut data = 0;
    for index in 0..count {
        let Some(V2Desc {
            len: chunk_len,
            offset,
            rider_len,
            place,
            size,
            ..
        }) = b.get(at..).and_then(v2_desc)
        else {
            return Err(WireError::LengthsExceedPacket {
                claimed: at + Version::V2.max_desc_len(),
                len,
            });
        };
        chunk_end(index, offset, chunk_len, rider_len)?;
        // The place must be the one offset and length give (so each chunk has one
        // encoding): a first chunk starts but does not end its rider, and so on.
        let says = Place::of(
            usize::from(offset),
            usize::from(chunk_len),
            usize::from(rider_len),
        );
        if says != place {
            return Err(WireError::LastFlagMismatch { index });
        }
        at += size;
        data += usize::from(chunk_len);
    }
    let claimed = at + tool + data + trailer;
    if claimed > len {
        return Err(WireError::LengthsExceedPacket { claimed, len });
    }
    Ok(at)
}

/// Where chunk `index` ends in its rider, if it holds bytes of a rider that has some
/// and ends within it: the range check both versions make of every descriptor.
fn chunk_end(index: usize, offset: u16, chunk_len: u16, rider_len: u16) -> Result<u32, WireError> {
    if chunk_len == 0 || rider_len == 0 {
        return Err(WireError::EmptyChunk { index });
    }
    let end = u32::from(offset) + u32::from(chunk_len);
    if end > u32::from(rider_len) {
        return Err(WireError::ChunkOutOfRange {
            index,
            offset,
            end,
            rider_len,
        });
    }
    Ok(end)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the sender's realtime stamp (all of it in version 1, its low 32 bits in
    /// a version-2 probe; other version-2 packets have none); called right before the
    /// packet is sent.
    pub fn set_sender_time(&mut self, t: WallTime) {
        match self.version {
            Version::V1 => self.buffer.as_mut()[field::SENDER_TIME]
                .copy_from_slice(&t.as_nanos().to_be_bytes()),
            Version::V2 if self.kind() == Kind::Probe => self.buffer.as_mut()
                [field::v2::SENDER_TIME]
                .copy_from_slice(&(t.as_nanos() as u32).to_be_bytes()),
            Version::V2 => {}
        }
    }

    /// The packet's bytes, to write what the view has no setter for (the trailer).
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}

/// One rider chunk carried in an MGRP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Rider id, unique per sender and destination until it wraps
    /// ([`UNNUMBERED_RIDER_ID`] for a whole rider in version 2).
    pub rider_id: u32,
    /// Offset of `data` within the rider.
    pub offset: u16,
    /// Total length of the rider.
    pub rider_len: u16,
    /// The chunk's bytes.
    pub data: &'a [u8],
}

impl Chunk<'_> {
    /// Whether this chunk ends its rider.
    pub fn is_last(&self) -> bool {
        usize::from(self.offset) + self.data.len() == usize::from(self.rider_len)
    }

    /// Whether this chunk is a whole rider.
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.is_last()
    }
}

/// Iterator over the chunks of a checked packet.
#[derive(Debug, Clone)]
pub struct Chunks<'a> {
    buffer: &'a [u8],
    version: Version,
    index: usize,
    count: usize,
    desc_at: usize,
    data_at: usize,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.index >= self.count {
            return None;
        }
        let (len, rider_id, offset, rider_len) = match self.version {
            Version::V1 => {
                let d = &self.buffer[self.desc_at..][..CHUNK_DESC_LEN];
                self.desc_at += CHUNK_DESC_LEN;
                (
                    be16(d, field::CHUNK_LEN),
                    be32(d, field::RIDER_ID),
                    be16(d, field::OFFSET),
                    be16(d, field::RIDER_LEN),
                )
            }
            Version::V2 => {
                // Checked: every descriptor fits.
                let d = v2_desc(&self.buffer[self.desc_at..])?;
                self.desc_at += d.size;
                (d.len, d.id, d.offset, d.rider_len)
            }
        };
        let len = usize::from(len);
        let chunk = Chunk {
            rider_id,
            offset,
            rider_len,
            data: &self.buffer[self.data_at..self.data_at + len],
        };
        self.index += 1;
        self.data_at += len;
        Some(chunk)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.count - self.index;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Chunks<'_> {}

/// The fixed-header fields of an MGRP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Probe or continuation.
    pub kind: Kind,
    /// Whether this probe is the last of its train.
    pub last_in_train: bool,
    /// Measurement port of the sending tool.
    pub src_port: u16,
    /// Measurement port of the receiving tool.
    pub dst_port: u16,
    /// Transaction id.
    pub transaction: u32,
    /// Sequence number within the train.
    pub seq: u16,
    /// Probes in the train.
    pub train_len: u16,
    /// Sender's realtime stamp.
    pub sender_time: WallTime,
}

impl Header {
    /// The header of probe `seq` of a train of `train_len` (the last one says so), of
    /// `transaction` between measurement ports `src_port` and `dst_port`; no stamp yet.
    pub fn probe(src_port: u16, dst_port: u16, transaction: u32, seq: u16, train_len: u16) -> Self {
        Self {
            kind: Kind::Probe,
            last_in_train: u32::from(seq) + 1 == u32::from(train_len),
            src_port,
            dst_port,
            transaction,
            seq,
            train_len,
            sender_time: WallTime::UNIX_EPOCH,
        }
    }

    /// The header of a keepalive: no probe fields, no stamp yet.
    pub fn keepalive() -> Self {
        Self {
            kind: Kind::Keepalive,
            ..Self::continuation()
        }
    }

    /// The header of a continuation packet: no probe fields, no stamp yet.
    pub fn continuation() -> Self {
        Self {
            kind: Kind::Continuation,
            last_in_train: false,
            src_port: 0,
            dst_port: 0,
            transaction: 0,
            seq: 0,
            train_len: 0,
            sender_time: WallTime::UNIX_EPOCH,
        }
    }
}

/// A parsed MGRP packet; the input of [`Repr::emit`] and the output of [`Repr::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Format version.
    pub version: Version,
    /// Fixed-header fields.
    pub header: Header,
    /// The tool's probe header (empty for a continuation).
    pub tool_header: &'a [u8],
    /// Rider chunks, in order.
    pub chunks: Vec<Chunk<'a>>,
    /// Length of the authentication trailer.
    pub trailer_len: u16,
}

impl<'a> Repr<'a> {
    /// Parses a checked packet.
    pub fn parse(packet: &Packet<&'a [u8]>) -> Self {
        let b: &'a [u8] = packet.buffer;
        let view = packet;
        Self {
            version: view.version,
            header: Header {
                kind: view.kind(),
                last_in_train: view.last_in_train(),
                src_port: view.src_port(),
                dst_port: view.dst_port(),
                transaction: view.transaction(),
                seq: view.seq(),
                train_len: view.train_len(),
                sender_time: view.sender_time(),
            },
            // From the buffer rather than the view's getters, which borrow the view:
            // the parts live as long as the buffer.
            tool_header: &b[view.desc_end..view.chunk_data_start()],
            chunks: view.chunks_of(b).collect(),
            // Fits: at most the packet's length, and v2's is 24.
            trailer_len: u16::try_from(view.trailer_len()).unwrap_or(u16::MAX),
        }
    }

    /// The smallest buffer this packet fits in: header, descriptors, tool header,
    /// chunk data and trailer, with no padding.
    pub fn buffer_len(&self) -> usize {
        min_packet_len(
            self.version,
            self.header.kind,
            self.tool_header.len(),
            self.trailer_len,
        ) + self
            .chunks
            .iter()
            .map(|c| {
                self.version.desc_len(
                    usize::from(c.offset),
                    c.data.len(),
                    usize::from(c.rider_len),
                ) + c.data.len()
            })
            .sum::<usize>()
    }

    /// Writes the packet into `buf`, which is exactly as long as the packet is to be
    /// on the wire: everything beyond [`Self::buffer_len`] becomes zero padding, with
    /// the zeroed trailer at the very end.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        self.emit_unviewed(buf).map(|_| ())
    }

    /// Emits into `buf` (as [`Repr::emit`]) and returns it as a checked view: what
    /// was just written needs no second check.
    pub fn emit_into<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        mut buf: T,
    ) -> Result<Packet<T>, WireError> {
        let desc_end = self.emit_unviewed(buf.as_mut())?;
        debug_assert!(
            Packet::new_checked(buf.as_ref()).is_ok(),
            "emitted a packet its own check refuses"
        );
        Ok(Packet {
            buffer: buf,
            version: self.version,
            desc_end,
        })
    }

    /// Writes the packet; returns where its descriptors end.
    fn emit_unviewed(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if self.chunks.len() > MAX_CHUNKS {
            return Err(WireError::TooManyChunks(self.chunks.len()));
        }
        let tool_len = u16::try_from(self.tool_header.len())
            .map_err(|_| WireError::FieldTooLong(self.tool_header.len()))?;
        if self.version == Version::V2 {
            self.check_v2_fits()?;
        }
        let needed = self.buffer_len();
        if needed > buf.len() {
            return Err(WireError::BufferTooSmall {
                needed,
                len: buf.len(),
            });
        }
        let mut at = match self.version {
            Version::V1 => self.emit_v1_header(buf, tool_len),
            Version::V2 => self.emit_v2_header(buf),
        };
        for c in &self.chunks {
            let chunk_len =
                u16::try_from(c.data.len()).map_err(|_| WireError::FieldTooLong(c.data.len()))?;
            at += match self.version {
                Version::V1 => emit_v1_desc(&mut buf[at..], c, chunk_len),
                Version::V2 => emit_v2_desc(&mut buf[at..], c, chunk_len),
            };
        }
        let desc_end = at;
        buf[at..at + self.tool_header.len()].copy_from_slice(self.tool_header);
        at += self.tool_header.len();
        for c in &self.chunks {
            buf[at..at + c.data.len()].copy_from_slice(c.data);
            at += c.data.len();
        }
        buf[at..].fill(0);
        Ok(desc_end)
    }

    /// Refuses what version 2's fields cannot hold.
    fn check_v2_fits(&self) -> Result<(), WireError> {
        let h = &self.header;
        if self.trailer_len != 0 && self.trailer_len != V2_TRAILER_LEN {
            return Err(WireError::TrailerLen(self.trailer_len));
        }
        match h.kind {
            Kind::Probe => {
                if h.train_len > V2_MAX_TRAIN_LEN || h.seq > V2_MAX_TRAIN_LEN {
                    return Err(WireError::FieldTooLong(usize::from(h.train_len.max(h.seq))));
                }
                if self.tool_header.len() > V2_MAX_TOOL_HEADER_LEN {
                    return Err(WireError::FieldTooLong(self.tool_header.len()));
                }
            }
            Kind::Continuation if !self.tool_header.is_empty() => {
                return Err(WireError::MalformedContinuation);
            }
            Kind::Keepalive if !self.tool_header.is_empty() => {
                return Err(WireError::MalformedKeepalive);
            }
            _ => {}
        }
        match self.chunks.iter().find(|c| c.data.len() > V2_MAX_CHUNK_LEN) {
            Some(c) => Err(WireError::FieldTooLong(c.data.len())),
            None => Ok(()),
        }
    }

    fn emit_v1_header(&self, buf: &mut [u8], tool_len: u16) -> usize {
        let h = &self.header;
        buf[field::VERSION] = 1;
        buf[field::KIND] = h.kind.to_byte();
        buf[field::FLAGS] = if h.last_in_train { FLAG_LAST_PROBE } else { 0 };
        // Fits: checked against MAX_CHUNKS.
        buf[field::CHUNK_COUNT] = self.chunks.len() as u8;
        buf[field::SRC_PORT].copy_from_slice(&h.src_port.to_be_bytes());
        buf[field::DST_PORT].copy_from_slice(&h.dst_port.to_be_bytes());
        buf[field::TRANSACTION].copy_from_slice(&h.transaction.to_be_bytes());
        buf[field::SEQ].copy_from_slice(&h.seq.to_be_bytes());
        buf[field::TRAIN_LEN].copy_from_slice(&h.train_len.to_be_bytes());
        buf[field::SENDER_TIME].copy_from_slice(&h.sender_time.as_nanos().to_be_bytes());
        buf[field::TOOL_HEADER_LEN].copy_from_slice(&tool_len.to_be_bytes());
        buf[field::TRAILER_LEN].copy_from_slice(&self.trailer_len.to_be_bytes());
        HEADER_LEN
    }

    fn emit_v2_header(&self, buf: &mut [u8]) -> usize {
        let h = &self.header;
        let mut first = (2 << 4) | (h.kind.to_byte() << 2);
        if h.last_in_train {
            first |= V2_LAST_PROBE;
        }
        if self.trailer_len != 0 {
            first |= V2_TRAILER;
        }
        buf[field::v2::FIRST] = first;
        // Fits: checked against MAX_CHUNKS.
        buf[field::v2::CHUNK_COUNT] = self.chunks.len() as u8;
        if h.kind != Kind::Probe {
            return V2_SHORT_HEADER_LEN;
        }
        buf[field::v2::DST_PORT].copy_from_slice(&h.dst_port.to_be_bytes());
        buf[field::v2::SRC_PORT].copy_from_slice(&h.src_port.to_be_bytes());
        buf[field::v2::TRANSACTION].copy_from_slice(&(h.transaction as u16).to_be_bytes());
        // Fit: checked by check_v2_fits.
        let w = (u32::from(h.seq) << 20)
            | (u32::from(h.train_len) << 8)
            | self.tool_header.len() as u32;
        buf[field::v2::SEQ_TRAIN_TOOL].copy_from_slice(&w.to_be_bytes());
        buf[field::v2::SENDER_TIME]
            .copy_from_slice(&(h.sender_time.as_nanos() as u32).to_be_bytes());
        V2_PROBE_HEADER_LEN
    }
}

fn emit_v1_desc(d: &mut [u8], c: &Chunk<'_>, chunk_len: u16) -> usize {
    d[field::RIDER_ID].copy_from_slice(&c.rider_id.to_be_bytes());
    d[field::OFFSET].copy_from_slice(&c.offset.to_be_bytes());
    d[field::RIDER_LEN].copy_from_slice(&c.rider_len.to_be_bytes());
    d[field::CHUNK_LEN].copy_from_slice(&chunk_len.to_be_bytes());
    d[field::CHUNK_FLAGS] = if c.is_last() { CHUNK_FLAG_LAST } else { 0 };
    d[11] = 0;
    CHUNK_DESC_LEN
}

fn emit_v2_desc(d: &mut [u8], c: &Chunk<'_>, chunk_len: u16) -> usize {
    let place = Place::of(
        usize::from(c.offset),
        c.data.len(),
        usize::from(c.rider_len),
    );
    let tag = place as u16;
    d[0..2].copy_from_slice(&((tag << 14) | chunk_len).to_be_bytes());
    let id = (((c.rider_id >> 31) as u16) << 15) | (c.rider_id & 0x7fff) as u16;
    match place {
        Place::Whole => {}
        Place::First => {
            d[2..4].copy_from_slice(&id.to_be_bytes());
            d[4..6].copy_from_slice(&c.rider_len.to_be_bytes());
        }
        Place::Middle => {
            d[2..4].copy_from_slice(&id.to_be_bytes());
            d[4..6].copy_from_slice(&c.offset.to_be_bytes());
            d[6..8].copy_from_slice(&c.rider_len.to_be_bytes());
        }
        Place::Last => {
            d[2..4].copy_from_slice(&id.to_be_bytes());
            d[4..6].copy_from_slice(&c.offset.to_be_bytes());
        }
    }
    Version::V2.desc_len_of(place)
}

/// The smallest MGRP packet of this version and kind with this tool header and
/// trailer and no chunks.
pub fn min_packet_len(
    version: Version,
    kind: Kind,
    tool_header_len: usize,
    trailer_len: u16,
) -> usize {
    version.header_len(kind) + tool_header_len + usize::from(trailer_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe: seq 2 of 5, last-flag clear, one whole 4-byte rider, a 3-byte tool
    /// header, 5 bytes of padding, no trailer; 52 bytes in all.
    const PROBE_ONE_RIDER: [u8; 52] = [
        0x01, 0x01, 0x00, 0x01, // version 1, probe, no flags, 1 chunk
        0x9c, 0x41, 0x9c, 0x42, // ports 40001 -> 40002
        0x00, 0x00, 0x00, 0x07, // transaction 7
        0x00, 0x02, 0x00, 0x05, // seq 2, train of 5
        0x00, 0x00, 0x00, 0x00, 0x3b, 0x9a, 0xca, 0x01, // sender time 1_000_000_001 ns
        0x00, 0x03, 0x00, 0x00, // tool header 3 bytes, trailer 0
        // descriptor: rider 0x0a0b0c0d, offset 0, rider len 4, chunk len 4, last
        0x0a, 0x0b, 0x0c, 0x0d, 0x00, 0x00, 0x00, 0x04, 0x00, 0x04, 0x01, 0x00, //
        0xaa, 0xbb, 0xcc, // tool header
        0x45, 0x00, 0x00, 0x04, // rider bytes
        0x00, 0x00, 0x00, 0x00, 0x00, // padding
    ];

    /// A continuation of rider 9: bytes 100..102 of a 102-byte rider, with a 2-byte
    /// trailer.
    const CONTINUATION: [u8; 44] = [
        0x01, 0x02, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x02, //
        0x00, 0x00, 0x00, 0x09, 0x00, 0x64, 0x00, 0x66, 0x00, 0x02, 0x01, 0x00, //
        0xde, 0xad, // chunk
        0x00, 0x00, // trailer
    ];

    #[test]
    fn parse_probe_vector() {
        let p = Packet::new_checked(&PROBE_ONE_RIDER[..]).unwrap();
        assert_eq!(p.kind(), Kind::Probe);
        assert!(!p.last_in_train());
        assert_eq!((p.src_port(), p.dst_port()), (40001, 40002));
        assert_eq!(p.transaction(), 7);
        assert_eq!((p.seq(), p.train_len()), (2, 5));
        assert_eq!(p.sender_time(), WallTime::from_nanos(1_000_000_001));
        assert_eq!(p.tool_header(), &[0xaa, 0xbb, 0xcc]);
        let chunks: Vec<_> = p.chunks().collect();
        assert_eq!(
            chunks,
            [Chunk {
                rider_id: 0x0a0b_0c0d,
                offset: 0,
                rider_len: 4,
                data: &[0x45, 0, 0, 4]
            }]
        );
        assert!(chunks[0].is_whole());
        assert_eq!(p.rider_bytes(), 4);
        assert!(p.trailer().is_empty());
    }

    #[test]
    fn emit_probe_vector() {
        let tool = [0xaa, 0xbb, 0xcc];
        let rider = [0x45, 0, 0, 4];
        let repr = Repr {
            version: Version::V1,
            header: Header {
                kind: Kind::Probe,
                last_in_train: false,
                src_port: 40001,
                dst_port: 40002,
                transaction: 7,
                seq: 2,
                train_len: 5,
                sender_time: WallTime::from_nanos(1_000_000_001),
            },
            tool_header: &tool,
            chunks: vec![Chunk {
                rider_id: 0x0a0b_0c0d,
                offset: 0,
                rider_len: 4,
                data: &rider,
            }],
            trailer_len: 0,
        };
        assert_eq!(repr.buffer_len(), 47);
        let mut buf = [0xffu8; 52];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, PROBE_ONE_RIDER);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p), repr);
    }

    #[test]
    fn keepalives_carry_nothing() {
        let repr = Repr {
            version: Version::V1,
            header: Header::keepalive(),
            tool_header: &[],
            chunks: vec![],
            trailer_len: 24,
        };
        let packet = repr.emit_into(vec![0u8; repr.buffer_len()]).unwrap();
        assert_eq!(packet.len(), HEADER_LEN + 24);
        assert_eq!(packet.kind(), Kind::Keepalive);
        assert_eq!(packet.chunks().count(), 0);
        // A chunk or a tool header makes it malformed.
        let mut b = PROBE_ONE_RIDER;
        b[1] = 3;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::MalformedKeepalive
        );
    }

    #[test]
    fn continuation_vector() {
        let p = Packet::new_checked(&CONTINUATION[..]).unwrap();
        assert_eq!(p.kind(), Kind::Continuation);
        let c = p.chunks().next().unwrap();
        assert_eq!(
            (c.rider_id, c.offset, c.rider_len, c.data),
            (9, 100, 102, &[0xde, 0xad][..])
        );
        assert!(c.is_last() && !c.is_whole());
        assert_eq!(p.trailer(), &[0, 0]);
        let repr = Repr::parse(&p);
        let mut buf = [0u8; 44];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, CONTINUATION);
    }

    #[test]
    fn rejects_with_named_reason() {
        assert_eq!(
            Packet::new_checked(&PROBE_ONE_RIDER[..27]).unwrap_err(),
            WireError::TruncatedHeader { len: 27 }
        );
        let mut b = PROBE_ONE_RIDER;
        b[0] = 2;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::UnsupportedVersion(2)
        );
        let mut b = PROBE_ONE_RIDER;
        b[1] = 9;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::UnknownKind(9)
        );
        // Chunk data runs past the end.
        assert_eq!(
            Packet::new_checked(&PROBE_ONE_RIDER[..45]).unwrap_err(),
            WireError::LengthsExceedPacket {
                claimed: 47,
                len: 45
            }
        );
        let mut b = PROBE_ONE_RIDER;
        b[13] = 5; // seq 5 of 5
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::SeqOutOfRange {
                seq: 5,
                train_len: 5
            }
        );
        let mut b = PROBE_ONE_RIDER;
        b[38] = 0; // last flag cleared on a whole rider
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::LastFlagMismatch { index: 0 }
        );
        let mut b = PROBE_ONE_RIDER;
        b[33] = 1; // offset 1 + len 4 > rider len 4
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::ChunkOutOfRange {
                index: 0,
                offset: 1,
                end: 5,
                rider_len: 4
            }
        );
        let mut b = PROBE_ONE_RIDER;
        b[37] = 0; // chunk len 0
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::EmptyChunk { index: 0 }
        );
        let mut b = CONTINUATION;
        b[25] = 1; // continuation with a tool header
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::MalformedContinuation
        );
        let mut b = PROBE_ONE_RIDER;
        b[3] = 200; // 200 descriptors claimed
        assert!(matches!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::LengthsExceedPacket { .. }
        ));
    }

    #[test]
    fn errors_read_well() {
        let e = WireError::LengthsExceedPacket {
            claimed: 47,
            len: 45,
        };
        assert_eq!(
            e.to_string(),
            "header claims 47 bytes (descriptors, tool header, chunks, trailer) but the packet has 45"
        );
    }

    #[test]
    fn emit_refuses_small_buffer() {
        let repr = Repr {
            version: Version::V1,
            header: Header {
                kind: Kind::Probe,
                last_in_train: true,
                src_port: 1,
                dst_port: 2,
                transaction: 3,
                seq: 0,
                train_len: 1,
                sender_time: WallTime::UNIX_EPOCH,
            },
            tool_header: &[1, 2, 3, 4],
            chunks: vec![],
            trailer_len: 8,
        };
        let mut buf = [0u8; 39];
        assert_eq!(
            repr.emit(&mut buf),
            Err(WireError::BufferTooSmall {
                needed: 40,
                len: 39
            })
        );
    }

    #[test]
    fn stamp_writes_only_the_time() {
        let mut b = PROBE_ONE_RIDER;
        Packet::new_checked(&mut b[..])
            .unwrap()
            .set_sender_time(WallTime::from_nanos(42));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.sender_time(), WallTime::from_nanos(42));
        assert_eq!(b[..16], PROBE_ONE_RIDER[..16]);
        assert_eq!(b[24..], PROBE_ONE_RIDER[24..]);
    }

    /// A version-2 probe: seq 2 of 5, last-flag set, with the authentication-trailer
    /// flag, ports 40001 -> 40002, transaction 7, a 3-byte tool header, a whole 4-byte
    /// rider and the last 2 bytes of a 10-byte rider (id 5), 3 bytes of padding and
    /// the 24-byte trailer; 60 bytes in all.
    const V2_PROBE: [u8; 60] = [
        0x27, 0x02, // version 2, probe (1 << 2), last (0x02), trailer (0x01); 2 chunks
        0x9c, 0x42, 0x9c, 0x41, // dst 40002, src 40001
        0x00, 0x07, // transaction 7
        0x00, 0x20, 0x05, 0x03, // seq 2, train 5, tool header 3
        0x3b, 0x9a, 0xca, 0x01, // sender time, low 32 bits
        0x00, 0x04, // whole, 4 bytes
        0xc0, 0x02, 0x00, 0x05, 0x00, 0x08, // last, 2 bytes, id 5, offset 8
        0xaa, 0xbb, 0xcc, // tool header
        0x45, 0x00, 0x00, 0x04, // whole rider
        0xde, 0xad, // end of rider 5
        0x00, 0x00, 0x00, // padding
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // trailer
    ];

    #[test]
    fn v2_probe_vector() {
        let p = Packet::new_checked(&V2_PROBE[..]).unwrap();
        assert_eq!(p.version(), Version::V2);
        assert_eq!(p.kind(), Kind::Probe);
        assert!(p.last_in_train());
        assert_eq!((p.src_port(), p.dst_port()), (40001, 40002));
        assert_eq!(p.transaction(), 7);
        assert_eq!((p.seq(), p.train_len()), (2, 5));
        assert_eq!(p.sender_time(), WallTime::from_nanos(1_000_000_001));
        assert_eq!(p.tool_header(), &[0xaa, 0xbb, 0xcc]);
        assert_eq!(p.trailer().len(), 24);
        let chunks: Vec<_> = p.chunks().collect();
        assert_eq!(
            chunks,
            [
                Chunk {
                    rider_id: UNNUMBERED_RIDER_ID,
                    offset: 0,
                    rider_len: 4,
                    data: &[0x45, 0, 0, 4]
                },
                Chunk {
                    rider_id: 5,
                    offset: 8,
                    rider_len: 10,
                    data: &[0xde, 0xad]
                }
            ]
        );
        let repr = Repr::parse(&p);
        assert_eq!(repr.buffer_len(), 57);
        let mut buf = [0xffu8; 60];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, V2_PROBE);
        // Header 16 bytes, descriptors 2 + 6: against version 1's 28 + 2 × 12.
        assert_eq!(
            p.tool_header().as_ptr() as usize - V2_PROBE.as_ptr() as usize,
            24
        );
    }

    #[test]
    fn v2_descriptors_by_place() {
        let rider = [7u8; 10];
        let repr = |offset: u16, len: usize, id: u32| Repr {
            version: Version::V2,
            header: Header::continuation(),
            tool_header: &[],
            chunks: vec![Chunk {
                rider_id: id,
                offset,
                rider_len: 10,
                data: &rider[..len],
            }],
            trailer_len: 0,
        };
        // first, middle, last: 6, 8, 6 bytes after the 2-byte header; ids keep the
        // tunneled bit and 15 low bits.
        for (offset, len, id, desc) in [
            (0, 4, 0x8000_0003, vec![0x40, 0x04, 0x80, 0x03, 0x00, 0x0a]),
            (
                4,
                3,
                3,
                vec![0x80, 0x03, 0x00, 0x03, 0x00, 0x04, 0x00, 0x0a],
            ),
            (7, 3, 3, vec![0xc0, 0x03, 0x00, 0x03, 0x00, 0x07]),
        ] {
            let r = repr(offset, len, id);
            let p = r.emit_into(vec![0u8; r.buffer_len()]).unwrap();
            assert_eq!(p.as_bytes()[..2], [0x28, 1]);
            assert_eq!(p.as_bytes()[2..2 + desc.len()], desc[..]);
            assert_eq!(Repr::parse(&Packet::new_checked(p.as_bytes()).unwrap()), r);
        }
        // A descriptor whose place disagrees with its numbers is refused: a "first"
        // chunk that ends its rider.
        let mut b = vec![0x28, 1, 0x40, 0x02, 0, 1, 0, 2, 9, 9];
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::LastFlagMismatch { index: 0 }
        );
        b[7] = 3;
        assert!(Packet::new_checked(&b[..]).is_ok());
        // A last piece whose end passes 65535.
        let b = [0x28, 1, 0xc0, 0x02, 0, 1, 0xff, 0xff, 9, 9];
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            WireError::ChunkOutOfRange {
                index: 0,
                offset: 0xffff,
                end: 0x1_0001,
                rider_len: u16::MAX
            }
        );
    }

    #[test]
    fn v2_refuses_what_it_cannot_hold() {
        let tool = [0u8; 256];
        let mut r = Repr {
            version: Version::V2,
            header: Header::probe(1, 2, 3, 0, 4096),
            tool_header: &tool[..8],
            chunks: vec![],
            trailer_len: 0,
        };
        let mut buf = vec![0u8; 400];
        assert_eq!(r.emit(&mut buf), Err(WireError::FieldTooLong(4096)));
        r.header.train_len = 4095;
        r.emit(&mut buf).unwrap();
        r.tool_header = &tool;
        assert_eq!(r.emit(&mut buf), Err(WireError::FieldTooLong(256)));
        r.tool_header = &[];
        r.trailer_len = 8;
        assert_eq!(r.emit(&mut buf), Err(WireError::TrailerLen(8)));
        assert!(!Version::V2.fits(4096, 0, 0));
        assert!(!Version::V2.fits(1, 256, 0));
        assert!(Version::V2.fits(4095, 255, 24));
        assert!(Version::V1.fits(65535, 1000, 8));
    }

    #[test]
    fn v2_short_packets() {
        let r = Repr {
            version: Version::V2,
            header: Header::keepalive(),
            tool_header: &[],
            chunks: vec![],
            trailer_len: 24,
        };
        let p = r.emit_into(vec![0u8; r.buffer_len()]).unwrap();
        assert_eq!(p.len(), 2 + 24);
        assert_eq!(p.as_bytes()[0], 0x2d);
        assert_eq!(p.kind(), Kind::Keepalive);
        assert_eq!((p.src_port(), p.seq(), p.transaction()), (0, 0, 0));
        assert_eq!(
            Packet::new_checked(&[0x28u8, 0][..]).unwrap_err(),
            WireError::MalformedContinuation
        );
        assert_eq!(
            Packet::new_checked(&[0x2cu8, 1, 0, 1, 9][..]).unwrap_err(),
            WireError::MalformedKeepalive
        );
        assert_eq!(
            Packet::new_checked(&[0x20u8, 0][..]).unwrap_err(),
            WireError::UnknownKind(0)
        );
        assert_eq!(
            Packet::new_checked(&[0x24u8, 0, 0, 0][..]).unwrap_err(),
            WireError::TruncatedHeader { len: 4 }
        );
        assert_eq!(
            Packet::new_checked(&[0x31u8; 40][..]).unwrap_err(),
            WireError::UnsupportedVersion(3)
        );
        assert_eq!(
            Packet::new_checked(&[0u8; 40][..]).unwrap_err(),
            WireError::UnsupportedVersion(0)
        );
    }

    #[test]
    fn sender_times_widen_around_the_receive_stamp() {
        let sent = 1_700_000_000_123_456_789u64;
        let low = sent as u32;
        for delta in [0i64, 1, 1_000_000, 2_000_000_000, -1, -2_000_000_000] {
            let near = WallTime::from_nanos((sent as i64 + delta) as u64);
            assert_eq!(widen_sender_time(low, near).as_nanos(), sent, "{delta}");
        }
        // Beyond ±2.1 s the low bits are ambiguous: the answer is off by 2^32 ns.
        let near = WallTime::from_nanos(sent + 3_000_000_000);
        assert_eq!(widen_sender_time(low, near).as_nanos(), sent + (1u64 << 32));
        // Near the epoch, nothing underflows.
        assert_eq!(widen_sender_time(5, WallTime::from_nanos(1)).as_nanos(), 5);
        assert_eq!(
            widen_sender_time(u32::MAX, WallTime::from_nanos(1)).as_nanos(),
            0
        );
    }
}
