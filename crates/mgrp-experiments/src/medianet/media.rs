//! The media: MPEG-like streams of I, P and B frames with the paper's sizes and rates
//! (its Table 2), the adaptations that drop frames at the sender, and the receiver's
//! rule for a frame that decodes. No I/O and no clock: times come in as arguments.
//!
//! A stream runs at 30 frames a second in groups of 15 (0.5 s) in display order
//! `I B B P B B P B B P B B P B B`: I at 2 Hz, P at 8 Hz, B at 20 Hz. A P frame is
//! predicted from the anchor (I or P) three frames before it; a B frame from the
//! anchors on both sides of it. An encoder can send a B frame only once the anchor
//! after it exists, so frames leave in decode order (`I0 P3 B1 B2 P6 B4 B5 ...`), each
//! anchor at its capture time followed at once by the two B frames before it.

/// Frames per second of every stream.
pub const FPS: u32 = 30;
/// Frames in a group of pictures (one I frame each).
pub const GOP: u64 = 15;
/// Frames from one anchor (I or P) to the next.
pub const ANCHOR_SPACING: u64 = 3;
/// Bytes a frame carries in front of its payload on the stream (counted in its size).
pub const FRAME_HEADER: usize = 32;
/// Marks the start of every frame header.
pub const MAGIC: u32 = 0x4d4e_4631;

/// A frame's type, in order of importance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Intra-coded: decodes alone.
    I,
    /// Predicted from the previous anchor.
    P,
    /// Predicted from the anchors on both sides.
    B,
}

impl Kind {
    /// Bytes of a frame of this type (the paper's Table 2).
    pub const fn size(self) -> u32 {
        match self {
            Self::I => 13_500,
            Self::P => 7_625,
            Self::B => 2_850,
        }
    }

    /// Frames of this type per second.
    pub const fn per_second(self) -> u32 {
        match self {
            Self::I => 2,
            Self::P => 8,
            Self::B => 20,
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::I => 0,
            Self::P => 1,
            Self::B => 2,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Self::I),
            1 => Some(Self::P),
            2 => Some(Self::B),
            _ => None,
        }
    }

    /// The type of the frame with display index `index`.
    pub const fn of(index: u64) -> Self {
        if index.is_multiple_of(GOP) {
            Self::I
        } else if index.is_multiple_of(ANCHOR_SPACING) {
            Self::P
        } else {
            Self::B
        }
    }
}

/// How much of a stream is sent: the full stream, or one of its two adaptations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Only I frames (the second adaptation: "drop P and B").
    IOnly,
    /// I and P frames (the first adaptation: "drop B").
    DropB,
    /// Every frame.
    Full,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Self; 3] = [Self::IOnly, Self::DropB, Self::Full];

    /// Whether frames of `kind` are sent at this level.
    pub const fn admits(self, kind: Kind) -> bool {
        match self {
            Self::Full => true,
            Self::DropB => !matches!(kind, Kind::B),
            Self::IOnly => matches!(kind, Kind::I),
        }
    }

    /// Frame bytes per second at this level, as bits per second (the paper's 1160,
    /// 704 and 216 kbit/s).
    pub fn bps(self) -> f64 {
        [Kind::I, Kind::P, Kind::B]
            .into_iter()
            .filter(|k| self.admits(*k))
            .map(|k| f64::from(k.size()) * 8.0 * f64::from(k.per_second()))
            .sum()
    }

    /// Frames per second at this level.
    pub fn fps(self) -> u32 {
        [Kind::I, Kind::P, Kind::B]
            .into_iter()
            .filter(|k| self.admits(*k))
            .map(Kind::per_second)
            .sum()
    }

    /// The user's preference for it: higher is better (the paper's clients ask for the
    /// full stream, then "drop B", then "drop P and B").
    pub const fn utility(self) -> u32 {
        match self {
            Self::IOnly => 1,
            Self::DropB => 2,
            Self::Full => 3,
        }
    }

    /// Its name in tables and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Self::IOnly => "I",
            Self::DropB => "IP",
            Self::Full => "IPB",
        }
    }
}

/// One frame of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Which stream.
    pub stream: u8,
    /// Display index from the stream's start.
    pub index: u64,
    /// Its type.
    pub kind: Kind,
    /// When it was captured (its display time less the playout delay), ns of the
    /// wall clock.
    pub captured_ns: i64,
    /// Bytes on the stream, header included.
    pub size: u32,
}

impl Frame {
    /// Frame `index` of `stream`, for a stream whose frame 0 was captured at
    /// `start_ns`.
    pub fn new(stream: u8, index: u64, start_ns: i64) -> Self {
        let kind = Kind::of(index);
        Self {
            stream,
            index,
            kind,
            captured_ns: start_ns.saturating_add(capture_offset_ns(index)),
            size: kind.size(),
        }
    }

    /// The frame's header as it goes on the stream.
    pub fn header(&self) -> [u8; FRAME_HEADER] {
        let mut h = [0u8; FRAME_HEADER];
        h[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        h[4] = self.stream;
        h[5] = self.kind.code();
        h[8..16].copy_from_slice(&self.index.to_be_bytes());
        h[16..24].copy_from_slice(&self.captured_ns.to_be_bytes());
        h[24..28].copy_from_slice(&self.size.to_be_bytes());
        h
    }

    /// Reads a header; `None` if it is not one (wrong magic, type, or a size that
    /// cannot hold it).
    pub fn parse_header(h: &[u8; FRAME_HEADER]) -> Option<Self> {
        if u32::from_be_bytes(h[0..4].try_into().ok()?) != MAGIC {
            return None;
        }
        let kind = Kind::from_code(h[5])?;
        let index = u64::from_be_bytes(h[8..16].try_into().ok()?);
        let size = u32::from_be_bytes(h[24..28].try_into().ok()?);
        if (size as usize) < FRAME_HEADER || Kind::of(index) != kind {
            return None;
        }
        Some(Self {
            stream: h[4],
            index,
            kind,
            captured_ns: i64::from_be_bytes(h[16..24].try_into().ok()?),
            size,
        })
    }

    /// The payload byte at `offset` of this frame: a pattern the receiver checks.
    pub fn payload_byte(&self, offset: usize) -> u8 {
        (self.index as u8)
            .wrapping_mul(31)
            .wrapping_add(offset as u8)
            .wrapping_add(self.stream)
    }
}

/// When frame `index` is captured, ns after frame 0.
pub fn capture_offset_ns(index: u64) -> i64 {
    let ns = i128::from(index) * 1_000_000_000 / i128::from(FPS);
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// The frames an encoder emits when frame `index` is captured, in decode order: an
/// anchor brings the B frames before it; a B frame emits nothing (it waits for the
/// anchor after it).
pub fn emitted_at(index: u64) -> impl Iterator<Item = u64> {
    let anchor = index.is_multiple_of(ANCHOR_SPACING);
    let first_b = index.saturating_sub(ANCHOR_SPACING - 1);
    let bs = if anchor && index > 0 {
        first_b..index
    } else {
        0..0
    };
    anchor.then_some(index).into_iter().chain(bs)
}

/// The frames frame `index` is predicted from (none for I).
pub fn references(index: u64) -> impl Iterator<Item = u64> {
    let prev = index - index % ANCHOR_SPACING;
    let (a, b) = match Kind::of(index) {
        Kind::I => (None, None),
        Kind::P => (Some(index - ANCHOR_SPACING), None),
        Kind::B => (Some(prev), Some(prev + ANCHOR_SPACING)),
    };
    a.into_iter().chain(b)
}

/// What became of a frame that the sender generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Arrived whole before its playout deadline, with every frame it is predicted
    /// from decoded.
    Decoded,
    /// Arrived whole after its playout deadline.
    Late,
    /// Arrived in time, but a frame it is predicted from did not decode.
    Undecodable,
    /// Never sent: the sender's adaptation dropped it.
    Adapted,
    /// Never sent: its deadline had passed while it waited at the sender.
    Stale,
}

/// The receiver's decoder for one stream: decides each arriving frame's fate from its
/// completion time, its deadline and the frames it depends on. Frames arrive in
/// decode order (anchors before the B frames that need them).
#[derive(Debug, Clone)]
pub struct Decoder {
    playout_ns: i64,
    /// Anchors decoded, by index, recent ones only.
    anchors: std::collections::VecDeque<(u64, bool)>,
}

/// Anchors the decoder remembers: enough for any reference (one group back).
const ANCHORS_KEPT: usize = 16;

impl Decoder {
    /// A decoder that plays frame `n` `playout_ns` after it was captured.
    pub fn new(playout_ns: i64) -> Self {
        Self {
            playout_ns,
            anchors: std::collections::VecDeque::new(),
        }
    }

    fn anchor_decoded(&self, index: u64) -> bool {
        self.anchors
            .iter()
            .rev()
            .find(|(i, _)| *i == index)
            .is_some_and(|(_, ok)| *ok)
    }

    /// The fate of `frame`, complete at `complete_ns` (wall clock).
    pub fn arrive(&mut self, frame: &Frame, complete_ns: i64) -> Fate {
        let in_time = complete_ns <= frame.captured_ns + self.playout_ns;
        let refs_ok = references(frame.index).all(|r| self.anchor_decoded(r));
        let fate = match (in_time, refs_ok) {
            (false, _) => Fate::Late,
            (true, false) => Fate::Undecodable,
            (true, true) => Fate::Decoded,
        };
        if frame.kind != Kind::B {
            if self.anchors.len() == ANCHORS_KEPT {
                self.anchors.pop_front();
            }
            self.anchors.push_back((frame.index, fate == Fate::Decoded));
        }
        fate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_the_papers() {
        assert_eq!(Level::Full.bps(), 1_160_000.0);
        assert_eq!(Level::DropB.bps(), 704_000.0);
        assert_eq!(Level::IOnly.bps(), 216_000.0);
        assert_eq!(Level::Full.fps(), 30);
        assert_eq!(Level::DropB.fps(), 10);
        assert_eq!(Level::IOnly.fps(), 2);
        let gop: Vec<Kind> = (0..GOP).map(Kind::of).collect();
        let count = |k| gop.iter().filter(|x| **x == k).count();
        assert_eq!((count(Kind::I), count(Kind::P), count(Kind::B)), (1, 4, 10));
    }

    #[test]
    fn frames_leave_in_decode_order_once_each() {
        let order: Vec<u64> = (0..30).flat_map(emitted_at).collect();
        assert_eq!(&order[..8], &[0, 3, 1, 2, 6, 4, 5, 9]);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        // Every frame up to the last anchor, exactly once.
        assert_eq!(sorted, (0..28).collect::<Vec<_>>());
        // Every reference leaves before the frame that needs it.
        for (pos, f) in order.iter().enumerate() {
            for r in references(*f) {
                let rpos = order.iter().position(|x| *x == r).unwrap();
                assert!(rpos < pos, "{r} after {f}");
            }
        }
    }

    #[test]
    fn headers_round_trip_and_refuse_garbage() {
        let f = Frame::new(2, 16, 1_000);
        assert_eq!(Frame::parse_header(&f.header()), Some(f));
        let mut h = f.header();
        h[0] ^= 1;
        assert_eq!(Frame::parse_header(&h), None);
        let mut h = f.header();
        h[5] = 0; // says I, but frame 16 is B
        assert_eq!(Frame::parse_header(&h), None);
        let mut h = f.header();
        h[24..28].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(Frame::parse_header(&h), None);
    }

    #[test]
    fn a_frame_decodes_in_time_with_its_references() {
        let ms = 1_000_000;
        let mut d = Decoder::new(500 * ms);
        let f = |i| Frame::new(0, i, 0);
        assert_eq!(d.arrive(&f(0), 10 * ms), Fate::Decoded);
        assert_eq!(d.arrive(&f(3), 400 * ms), Fate::Decoded);
        // B1 needs I0 and P3; in time.
        assert_eq!(d.arrive(&f(1), 400 * ms), Fate::Decoded);
        // B2 after its deadline (2/30 s + 500 ms).
        assert_eq!(d.arrive(&f(2), 600 * ms), Fate::Late);
        // P6 late: P9 and the B frames between cannot decode, even in time.
        assert_eq!(d.arrive(&f(6), 900 * ms), Fate::Late);
        assert_eq!(d.arrive(&f(4), 600 * ms), Fate::Undecodable);
        assert_eq!(d.arrive(&f(9), 600 * ms), Fate::Undecodable);
        // The next I frame starts afresh.
        assert_eq!(d.arrive(&f(15), 600 * ms), Fate::Decoded);
    }

    proptest::proptest! {
        #[test]
        fn any_header_bytes_parse_or_are_refused(bytes in proptest::array::uniform32(proptest::num::u8::ANY)) {
            if let Some(f) = Frame::parse_header(&bytes) {
                proptest::prop_assert_eq!(f.header(), {
                    // Bytes the header does not use read back as zero.
                    let mut b = bytes;
                    b[6] = 0;
                    b[7] = 0;
                    b[28..].fill(0);
                    b
                });
                proptest::prop_assert_eq!(f.kind, Kind::of(f.index));
                proptest::prop_assert!(f.size as usize >= FRAME_HEADER);
            }
        }

        #[test]
        fn every_frame_round_trips(stream in 0u8..3, index in 0u64..1 << 40, start in -(1i64 << 60)..(1i64 << 60)) {
            let f = Frame::new(stream, index, start);
            proptest::prop_assert_eq!(Frame::parse_header(&f.header()), Some(f));
        }

        #[test]
        fn a_stream_counts_each_frame_once(arrivals in proptest::collection::vec(0i64..3_000_000_000, 1..200)) {
            // Frames in decode order, each complete at an arbitrary time: every one
            // gets exactly one fate, and a decoded frame's references decoded.
            let mut d = Decoder::new(1_000_000_000);
            let order: Vec<u64> = (0..arrivals.len() as u64).flat_map(emitted_at).take(arrivals.len()).collect();
            let mut decoded = std::collections::HashSet::new();
            for (i, t) in order.iter().zip(&arrivals) {
                let f = Frame::new(0, *i, 0);
                let fate = d.arrive(&f, *t);
                proptest::prop_assert!(matches!(fate, Fate::Decoded | Fate::Late | Fate::Undecodable));
                if fate == Fate::Decoded {
                    for r in references(*i) {
                        proptest::prop_assert!(decoded.contains(&r), "{} decoded without {}", i, r);
                    }
                    decoded.insert(*i);
                }
            }
        }
    }

    #[test]
    fn a_missing_anchor_breaks_what_depends_on_it() {
        // At "drop B" the B frames never come; at "I only" neither do P frames, so a
        // P frame sent right after a switch up has no reference until the next I.
        let mut d = Decoder::new(1_000_000_000);
        let f = |i| Frame::new(0, i, 0);
        assert_eq!(d.arrive(&f(0), 0), Fate::Decoded);
        assert_eq!(d.arrive(&f(6), 0), Fate::Undecodable);
        assert_eq!(d.arrive(&f(15), 0), Fate::Decoded);
        assert_eq!(d.arrive(&f(18), 0), Fate::Decoded);
    }
}
