//! The MGRP packet: the payload of an IP packet of protocol 253 (or, later, of a UDP
//! datagram).
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
//! All integers are big-endian (network order).
//!
//! # Fixed header (28 bytes)
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 1 | `version` | format version, [`VERSION`] (1); any other value is rejected |
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
//! # Chunk descriptor (12 bytes each, `chunk_count` of them from offset 28)
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
//! # Body
//!
//! | offset | size | content |
//! |---:|---:|---|
//! | 28 + 12·`chunk_count` | `tool_header_len` | the tool's probe header, delivered to the receiving tool |
//! | … | Σ `chunk_len` | chunk data, in descriptor order |
//! | … | rest | padding, sent as zeros, not checked on receipt |
//! | end − `trailer_len` | `trailer_len` | trailer: authentication data; with a key (`auth`) a 24-byte trailer holds the sender's packet counter and a keyed tag over everything before it, without one the trailer is absent |
//!
//! Parsing ([`Packet::new_checked`]) checks every length against the buffer and every
//! descriptor for consistency once; after that no getter can panic, on any input.

use std::fmt;

use crate::WallTime;

/// The only format version this crate speaks.
pub const VERSION: u8 = 1;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 28;
/// Length of one chunk descriptor.
pub const CHUNK_DESC_LEN: usize = 12;
/// The bit set in the id of every rider sent whole in continuations outside any
/// planner (see the chunk descriptor's `rider_id`); planners use the ids below it.
pub const TUNNELED_RIDER_ID: u32 = 1 << 31;
/// The most chunk descriptors one packet can hold.
pub const MAX_CHUNKS: usize = u8::MAX as usize;

const FLAG_LAST_PROBE: u8 = 0x01;
const CHUNK_FLAG_LAST: u8 = 0x01;

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
    /// The version byte names a format this implementation does not speak.
    #[error("unsupported MGRP version {0} (this implementation speaks version {VERSION})")]
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
    /// The tool header or trailer does not fit its 16-bit length field.
    #[error("tool header or trailer of {0} bytes exceeds 65535")]
    FieldTooLong(usize),
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

/// A checked, zero-copy view of an MGRP packet.
///
/// Construct it with [`Packet::new_checked`], or get one from [`Repr::emit_into`];
/// every getter is then infallible.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> fmt::Debug for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
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
        let packet = Self { buffer };
        packet.check()?;
        Ok(packet)
    }

    fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let len = b.len();
        if len < HEADER_LEN {
            return Err(WireError::TruncatedHeader { len });
        }
        if b[field::VERSION] != VERSION {
            return Err(WireError::UnsupportedVersion(b[field::VERSION]));
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
        match kind {
            Kind::Probe => {
                let (seq, train_len) = (be16(b, field::SEQ), be16(b, field::TRAIN_LEN));
                if seq >= train_len {
                    return Err(WireError::SeqOutOfRange { seq, train_len });
                }
            }
            Kind::Continuation => {
                if count == 0 || tool != 0 {
                    return Err(WireError::MalformedContinuation);
                }
            }
            Kind::Keepalive => {
                if count != 0 || tool != 0 {
                    return Err(WireError::MalformedKeepalive);
                }
            }
        }
        let mut claimed = fixed;
        for index in 0..count {
            let d = &b[HEADER_LEN + index * CHUNK_DESC_LEN..][..CHUNK_DESC_LEN];
            let offset = be16(d, field::OFFSET);
            let rider_len = be16(d, field::RIDER_LEN);
            let chunk_len = be16(d, field::CHUNK_LEN);
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
            let last = d[field::CHUNK_FLAGS] & CHUNK_FLAG_LAST != 0;
            if last != (end == u32::from(rider_len)) {
                return Err(WireError::LastFlagMismatch { index });
            }
            claimed += usize::from(chunk_len);
        }
        if claimed > len {
            return Err(WireError::LengthsExceedPacket { claimed, len });
        }
        Ok(())
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

    /// Probe or continuation.
    pub fn kind(&self) -> Kind {
        // Checked in `check`; a continuation is the only other kind.
        Kind::from_byte(self.buffer.as_ref()[field::KIND]).unwrap_or(Kind::Continuation)
    }

    /// Whether this probe is the last of its train.
    pub fn last_in_train(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_LAST_PROBE != 0
    }

    /// Number of rider chunks.
    pub fn chunk_count(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::CHUNK_COUNT])
    }

    /// Measurement port of the sending tool.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Measurement port of the receiving tool.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Transaction id.
    pub fn transaction(&self) -> u32 {
        be32(self.buffer.as_ref(), field::TRANSACTION)
    }

    /// Probe sequence number within its train.
    pub fn seq(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SEQ)
    }

    /// Number of probes in the train.
    pub fn train_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TRAIN_LEN)
    }

    /// The sender's realtime stamp.
    pub fn sender_time(&self) -> WallTime {
        WallTime::from_nanos(be64(self.buffer.as_ref(), field::SENDER_TIME))
    }

    fn tool_header_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), field::TOOL_HEADER_LEN))
    }

    fn trailer_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), field::TRAILER_LEN))
    }

    fn body_start(&self) -> usize {
        HEADER_LEN + self.chunk_count() * CHUNK_DESC_LEN
    }

    /// The tool's probe header.
    pub fn tool_header(&self) -> &[u8] {
        &self.buffer.as_ref()[self.body_start()..self.chunk_data_start()]
    }

    /// Where the chunks' data begins, after the descriptors and the tool header.
    fn chunk_data_start(&self) -> usize {
        self.body_start() + self.tool_header_len()
    }

    /// The authentication trailer (see `auth`; empty without a key).
    pub fn trailer(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - self.trailer_len()..]
    }

    /// The rider chunks, in descriptor order.
    pub fn chunks(&self) -> Chunks<'_> {
        let b = self.buffer.as_ref();
        Chunks {
            buffer: b,
            index: 0,
            count: self.chunk_count(),
            data_at: self.chunk_data_start(),
        }
    }

    /// Total bytes of rider data carried.
    pub fn rider_bytes(&self) -> usize {
        self.chunks().map(|c| c.data.len()).sum()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the sender's realtime stamp; called right before the packet is sent.
    pub fn set_sender_time(&mut self, t: WallTime) {
        self.buffer.as_mut()[field::SENDER_TIME].copy_from_slice(&t.as_nanos().to_be_bytes());
    }

    /// The packet's bytes, to write what the view has no setter for (the trailer).
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}

/// One rider chunk carried in an MGRP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Rider id, unique per sender and destination until it wraps.
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
    index: usize,
    count: usize,
    data_at: usize,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.index >= self.count {
            return None;
        }
        let d = &self.buffer[HEADER_LEN + self.index * CHUNK_DESC_LEN..][..CHUNK_DESC_LEN];
        let len = usize::from(be16(d, field::CHUNK_LEN));
        let chunk = Chunk {
            rider_id: be32(d, field::RIDER_ID),
            offset: be16(d, field::OFFSET),
            rider_len: be16(d, field::RIDER_LEN),
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
            tool_header: &b[view.body_start()..view.chunk_data_start()],
            chunks: Chunks {
                buffer: b,
                index: 0,
                count: view.chunk_count(),
                data_at: view.chunk_data_start(),
            }
            .collect(),
            trailer_len: be16(b, field::TRAILER_LEN),
        }
    }

    /// The smallest buffer this packet fits in: header, descriptors, tool header,
    /// chunk data and trailer, with no padding.
    pub fn buffer_len(&self) -> usize {
        min_packet_len(self.tool_header.len(), self.trailer_len)
            + self
                .chunks
                .iter()
                .map(|c| CHUNK_DESC_LEN + c.data.len())
                .sum::<usize>()
    }

    /// Writes the packet into `buf`, which is exactly as long as the packet is to be
    /// on the wire: everything beyond [`Self::buffer_len`] becomes zero padding, with
    /// the zeroed trailer at the very end.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        self.emit_unviewed(buf)
    }

    /// Emits into `buf` (as [`Repr::emit`]) and returns it as a checked view: what
    /// was just written needs no second check.
    pub fn emit_into<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        mut buf: T,
    ) -> Result<Packet<T>, WireError> {
        self.emit_unviewed(buf.as_mut())?;
        debug_assert!(
            Packet::new_checked(buf.as_ref()).is_ok(),
            "emitted a packet its own check refuses"
        );
        Ok(Packet { buffer: buf })
    }

    fn emit_unviewed(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if self.chunks.len() > MAX_CHUNKS {
            return Err(WireError::TooManyChunks(self.chunks.len()));
        }
        let tool_len = u16::try_from(self.tool_header.len())
            .map_err(|_| WireError::FieldTooLong(self.tool_header.len()))?;
        let needed = self.buffer_len();
        if needed > buf.len() {
            return Err(WireError::BufferTooSmall {
                needed,
                len: buf.len(),
            });
        }
        let h = &self.header;
        buf[field::VERSION] = VERSION;
        buf[field::KIND] = h.kind.to_byte();
        buf[field::FLAGS] = if h.last_in_train { FLAG_LAST_PROBE } else { 0 };
        // Fits: checked against MAX_CHUNKS above.
        buf[field::CHUNK_COUNT] = self.chunks.len() as u8;
        buf[field::SRC_PORT].copy_from_slice(&h.src_port.to_be_bytes());
        buf[field::DST_PORT].copy_from_slice(&h.dst_port.to_be_bytes());
        buf[field::TRANSACTION].copy_from_slice(&h.transaction.to_be_bytes());
        buf[field::SEQ].copy_from_slice(&h.seq.to_be_bytes());
        buf[field::TRAIN_LEN].copy_from_slice(&h.train_len.to_be_bytes());
        buf[field::SENDER_TIME].copy_from_slice(&h.sender_time.as_nanos().to_be_bytes());
        buf[field::TOOL_HEADER_LEN].copy_from_slice(&tool_len.to_be_bytes());
        buf[field::TRAILER_LEN].copy_from_slice(&self.trailer_len.to_be_bytes());
        let mut at = HEADER_LEN;
        for c in &self.chunks {
            let d = &mut buf[at..at + CHUNK_DESC_LEN];
            d[field::RIDER_ID].copy_from_slice(&c.rider_id.to_be_bytes());
            d[field::OFFSET].copy_from_slice(&c.offset.to_be_bytes());
            d[field::RIDER_LEN].copy_from_slice(&c.rider_len.to_be_bytes());
            let chunk_len =
                u16::try_from(c.data.len()).map_err(|_| WireError::FieldTooLong(c.data.len()))?;
            d[field::CHUNK_LEN].copy_from_slice(&chunk_len.to_be_bytes());
            d[field::CHUNK_FLAGS] = if c.is_last() { CHUNK_FLAG_LAST } else { 0 };
            d[11] = 0;
            at += CHUNK_DESC_LEN;
        }
        buf[at..at + self.tool_header.len()].copy_from_slice(self.tool_header);
        at += self.tool_header.len();
        for c in &self.chunks {
            buf[at..at + c.data.len()].copy_from_slice(c.data);
            at += c.data.len();
        }
        buf[at..].fill(0);
        Ok(())
    }
}

/// The smallest MGRP packet with this tool header and trailer and no chunks.
pub fn min_packet_len(tool_header_len: usize, trailer_len: u16) -> usize {
    HEADER_LEN + tool_header_len + usize::from(trailer_len)
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
}
