//! Keyed authentication of MGRP packets: a counter, a key index and a tag in the
//! trailer the wire format reserves, and a replay window over the counter.
//!
//! With a key configured, every MGRP packet (probe or continuation) ends in a
//! [`TRAILER_LEN`]-byte trailer. The trailer takes the place of padding: a probe keeps
//! its requested size, and a probe too small for header and trailer is refused by the
//! planner. Its layout depends on the [`Scheme`]:
//!
//! | scheme | bytes 0–7 | bytes 8–11 | then |
//! |---|---|---|---|
//! | [`Scheme::V3`] | counter | key index | 12-byte tag |
//! | [`Scheme::V2`], [`Scheme::V1`] | counter | 16-byte tag (from byte 8) | |
//!
//! The counter is the sender's 64-bit packet counter, big-endian. The *key index*
//! ([`Key::index`], scheme 3) names the key that sealed the packet without giving it
//! away: the first four bytes of the keyed BLAKE3 hash of a fixed label under that
//! key. A receiver keeps its keys by index, so a packet from an endpoint it does not
//! know costs one table lookup, and one tag check only when the index is one of its
//! keys', where scheme 2 had it try every key it holds (as WireGuard's receiver index
//! spares its receivers). The index is the same on every packet sealed with a key: an
//! observer learns which packets share a key, not the key.
//!
//! The tag (schemes 2 and 3) is the keyed BLAKE3 hash of a label, the packet's
//! [`Direction`] (the sealing daemon and the one it sealed for, each named by the
//! address the other knows it by, 16 bytes each) and everything before the tag
//! (header, chunk descriptors, tool header, rider bytes, padding, counter, index),
//! cut to 16 bytes (scheme 2) or 12 (scheme 3: a forger's chance per packet is
//! 2⁻⁹⁶, as with IPsec's 96-bit tags). The direction is not sent: the receiver knows
//! who the packet comes from and who it is itself, and a packet sealed for another
//! direction does not open. So a packet sent back to its sender, or passed to a third
//! daemon under another peer's address, is refused even when every daemon holds the
//! same key. The label and the fixed-length direction make the hashed message
//! unambiguous; keying the hash with the shared key and the direction is a key per
//! direction without storing one. [`Scheme::V1`] (the tag of the packet alone) is what
//! daemons before keys per direction sent, and [`Scheme::V2`] what daemons before key
//! indexes sent; both are kept for a stated transition only.
//!
//! The receiver checks the tag first, in constant time, and only then the counter
//! against a sliding window of recently seen counters ([`ReplayWindow`], after RFC
//! 6479), so a forged packet cannot move the window.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::wire::Packet;

/// Bytes of the authentication trailer: counter, key index (scheme 3) and tag.
pub const TRAILER_LEN: u16 = 24;

/// Bytes of the key index in a [`Scheme::V3`] trailer.
pub const INDEX_LEN: usize = 4;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

/// Bytes of a scheme 1 or 2 tag.
const TAG_LEN: usize = 16;

/// Bytes of a scheme 3 tag.
const TAG3_LEN: usize = 12;

/// Bytes of the counter, at the trailer's start.
const COUNTER_LEN: usize = 8;

/// The label hashed under a key to make its index.
const INDEX_LABEL: &[u8; 16] = b"mgrp key index 3";

/// A 32-byte secret key and its index. Its `Debug` form never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    bytes: [u8; KEY_LEN],
    index: u32,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Why a key does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Neither 64 hex digits nor 44 characters of base64.
    #[error(
        "a key is 32 bytes written as 64 hex digits or 44 characters of base64 (make one with `mgrpd genkey`); got {0} characters"
    )]
    Format(usize),
}

impl Key {
    /// A key of these bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let h = blake3::keyed_hash(&bytes, INDEX_LABEL);
        let mut index = [0u8; INDEX_LEN];
        index.copy_from_slice(&h.as_bytes()[..INDEX_LEN]);
        Self {
            bytes,
            index: u32::from_be_bytes(index),
        }
    }

    /// The key as 64 hex digits.
    pub fn to_hex(&self) -> String {
        hex_of(&self.bytes)
    }

    /// The index a [`Scheme::V3`] trailer names this key by: made from the key, so
    /// both ends know it without a word, and no help in guessing it.
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl FromStr for Key {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        key_bytes(s).map(Self::from_bytes).map_err(KeyError::Format)
    }
}

/// 32 bytes written as 64 hex digits or 44 characters of base64 (a key, or a key
/// pair's half), blanks around them aside; else the length that was given.
pub(crate) fn key_bytes(s: &str) -> Result<[u8; KEY_LEN], usize> {
    let t = s.trim();
    let bytes = if t.len() == 2 * KEY_LEN {
        hex(t)
    } else if t.len() == 44 {
        base64(t)
    } else {
        None
    };
    bytes
        .and_then(|b| <[u8; KEY_LEN]>::try_from(b).ok())
        .ok_or(t.len())
}

/// 32 bytes as 64 hex digits.
pub(crate) fn hex_of(bytes: &[u8; KEY_LEN]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn hex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(*p.get(1)?)?))
        .collect()
}

pub(crate) fn base64(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let body = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in body.bytes() {
        acc = acc << 6 | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Why a packet failed authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The packet has no authentication trailer.
    #[error("the packet is not authenticated")]
    Unauthenticated,
    /// The tag does not match: another key, or the packet was changed.
    #[error("wrong tag (another key, or the packet was altered)")]
    BadTag,
}

/// Who sealed a packet and for whom, each daemon named by the address the other
/// knows it by (its peer address in the other's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Direction {
    /// The daemon that seals.
    pub from: IpAddr,
    /// The daemon it seals for.
    pub to: IpAddr,
}

impl Direction {
    /// The other way.
    #[must_use]
    pub fn reversed(self) -> Self {
        Self {
            from: self.to,
            to: self.from,
        }
    }
}

/// How the tag is computed, and what a daemon seals with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Scheme {
    /// The packet alone (daemons before keys per direction): a packet opens in
    /// either direction, so a reflected one is believed.
    V1,
    /// The packet and its [`Direction`], a 16-byte tag (daemons before key indexes).
    V2,
    /// The packet and its [`Direction`], the key's index and a 12-byte tag.
    #[default]
    V3,
}

impl Scheme {
    /// The scheme of this number (1, 2 or 3).
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            3 => Some(Self::V3),
            _ => None,
        }
    }

    /// Its number.
    pub fn number(self) -> u8 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
            Self::V3 => 3,
        }
    }

    /// What a packet sealed under this scheme for `direction` is bound to.
    pub fn binding(self, direction: Direction) -> Binding {
        match self {
            Self::V1 => Binding::None,
            Self::V2 => Binding::To(direction),
            Self::V3 => Binding::Indexed(direction),
        }
    }
}

/// What a tag binds the packet to, which is also how its trailer is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// [`Scheme::V1`].
    None,
    /// [`Scheme::V2`] for this direction.
    To(Direction),
    /// [`Scheme::V3`] for this direction: the trailer names the key by its index.
    Indexed(Direction),
}

impl Binding {
    /// Bytes of the tag at the trailer's end.
    fn tag_len(self) -> usize {
        match self {
            Self::None | Self::To(_) => TAG_LEN,
            Self::Indexed(_) => TAG3_LEN,
        }
    }
}

/// The labels that start every [`Scheme::V2`] and [`Scheme::V3`] hashed message.
const LABEL: &[u8; 16] = b"mgrp tag 2 dir\0\0";
const LABEL3: &[u8; 16] = b"mgrp tag 3 dir\0\0";

fn address_bytes(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The tag of `covered` (everything before the tag) under `key` and `binding`, as
/// long as the binding's scheme cuts it.
fn tag(key: &Key, binding: Binding, covered: &[u8]) -> ([u8; TAG_LEN], usize) {
    let directed = |label: &[u8; 16], d: Direction| {
        let mut h = blake3::Hasher::new_keyed(&key.bytes);
        h.update(label);
        h.update(&address_bytes(d.from));
        h.update(&address_bytes(d.to));
        h.update(covered);
        h.finalize()
    };
    let h = match binding {
        Binding::None => blake3::keyed_hash(&key.bytes, covered),
        Binding::To(d) => directed(LABEL, d),
        Binding::Indexed(d) => directed(LABEL3, d),
    };
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h.as_bytes()[..TAG_LEN]);
    (t, binding.tag_len())
}

/// Whether a checked packet ends in an authentication trailer.
fn has_trailer<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<(), AuthError> {
    if packet.trailer().len() == usize::from(TRAILER_LEN) {
        Ok(())
    } else {
        Err(AuthError::Unauthenticated)
    }
}

/// The key index a [`Scheme::V3`] trailer names, read without any check: a packet
/// of another scheme, or a forgery, has some number there too.
pub fn index_of<T: AsRef<[u8]>>(packet: &Packet<T>) -> Option<u32> {
    has_trailer(packet).ok()?;
    let t = packet.trailer();
    let mut i = [0u8; INDEX_LEN];
    i.copy_from_slice(&t[COUNTER_LEN..COUNTER_LEN + INDEX_LEN]);
    Some(u32::from_be_bytes(i))
}

/// Writes `counter` (and, for [`Binding::Indexed`], `key`'s index) and the tag
/// binding `packet` to `binding` into its trailer, which is [`TRAILER_LEN`] bytes
/// long. Call it after the last change to the packet (the sender stamp). Works on
/// the view the caller has: nothing is parsed again.
pub fn seal<T: AsRef<[u8]> + AsMut<[u8]>>(
    key: &Key,
    binding: Binding,
    packet: &mut Packet<T>,
    counter: u64,
) -> Result<(), AuthError> {
    has_trailer(packet)?;
    let packet = packet.as_bytes_mut();
    let n = packet.len();
    let t0 = n - usize::from(TRAILER_LEN);
    packet[t0..t0 + COUNTER_LEN].copy_from_slice(&counter.to_be_bytes());
    if let Binding::Indexed(_) = binding {
        packet[t0 + COUNTER_LEN..t0 + COUNTER_LEN + INDEX_LEN]
            .copy_from_slice(&key.index.to_be_bytes());
    }
    let len = binding.tag_len();
    let (t, _) = tag(key, binding, &packet[..n - len]);
    packet[n - len..].copy_from_slice(&t[..len]);
    Ok(())
}

/// Checks the tag of `packet` against `binding` and returns its counter (still to be
/// checked against a [`ReplayWindow`]). A [`Binding::Indexed`] packet that names
/// another key's index is refused without hashing anything. Works on the view the
/// caller has: nothing is parsed again.
pub fn open<T: AsRef<[u8]>>(
    key: &Key,
    binding: Binding,
    packet: &Packet<T>,
) -> Result<u64, AuthError> {
    has_trailer(packet)?;
    if matches!(binding, Binding::Indexed(_)) && index_of(packet) != Some(key.index) {
        return Err(AuthError::BadTag);
    }
    let packet = packet.as_bytes();
    let n = packet.len();
    let (want, len) = tag(key, binding, &packet[..n - binding.tag_len()]);
    // Constant time: every byte is compared whatever the first difference.
    let diff = want[..len]
        .iter()
        .zip(&packet[n - len..])
        .fold(0u8, |d, (a, b)| d | (a ^ b));
    if diff != 0 {
        return Err(AuthError::BadTag);
    }
    let t0 = n - usize::from(TRAILER_LEN);
    let mut c = [0u8; COUNTER_LEN];
    c.copy_from_slice(&packet[t0..t0 + COUNTER_LEN]);
    Ok(u64::from_be_bytes(c))
}

const BLOCKS: usize = 32;
const BLOCK_BITS: u64 = 64;

/// Counters this far below the highest seen are refused as too old.
pub const REPLAY_WINDOW: u64 = (BLOCKS as u64 - 1) * BLOCK_BITS;

/// A sliding window over a peer's counters (RFC 6479's bitmap): each counter is
/// accepted once, and counters more than [`REPLAY_WINDOW`] below the highest seen
/// are refused.
#[derive(Debug, Clone, Default)]
pub struct ReplayWindow {
    top: u64,
    bitmap: [u64; BLOCKS],
    seen_any: bool,
}

/// What a [`ReplayWindow`] makes of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Above every counter seen: the peer's newest packet.
    Newest,
    /// Not seen before, but below the highest seen (reordered on the way).
    Late,
    /// Seen before, or too old to tell.
    Replayed,
}

impl ReplayWindow {
    /// A window that refuses every counter up to `top`: the state of one saved
    /// before a restart (which counters below it were still missing is not kept).
    pub fn resumed(top: u64) -> Self {
        let mut bitmap = [u64::MAX; BLOCKS];
        // In the top's own block, the counters above it are still to come.
        let bit = top % BLOCK_BITS;
        bitmap[((top / BLOCK_BITS) % BLOCKS as u64) as usize] = if bit == BLOCK_BITS - 1 {
            u64::MAX
        } else {
            (1u64 << (bit + 1)) - 1
        };
        Self {
            top,
            bitmap,
            seen_any: true,
        }
    }

    /// The highest counter seen, if any.
    pub fn top(&self) -> Option<u64> {
        self.seen_any.then_some(self.top)
    }

    /// Whether `counter` is new; if so it is remembered.
    pub fn check_and_update(&mut self, counter: u64) -> bool {
        self.check(counter) != Freshness::Replayed
    }

    /// How fresh `counter` is; a new one is remembered.
    pub fn check(&mut self, counter: u64) -> Freshness {
        if self.seen_any && counter.saturating_add(REPLAY_WINDOW) < self.top {
            return Freshness::Replayed;
        }
        let newest = !self.seen_any || counter > self.top;
        let index = counter / BLOCK_BITS;
        if newest {
            let current = self.top / BLOCK_BITS;
            let steps = if self.seen_any {
                (index - current).min(BLOCKS as u64)
            } else {
                BLOCKS as u64
            };
            for i in 1..=steps {
                self.bitmap[((current + i) % BLOCKS as u64) as usize] = 0;
            }
            self.top = counter;
            self.seen_any = true;
        }
        let block = (index % BLOCKS as u64) as usize;
        let bit = 1u64 << (counter % BLOCK_BITS);
        if self.bitmap[block] & bit != 0 {
            return Freshness::Replayed;
        }
        self.bitmap[block] |= bit;
        if newest {
            Freshness::Newest
        } else {
            Freshness::Late
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WallTime;
    use crate::wire::{Chunk, Header, Repr};

    fn key(b: u8) -> Key {
        Key::from_bytes([b; KEY_LEN])
    }

    fn packet(trailer_len: u16) -> Packet<Vec<u8>> {
        let rider = [0x45u8; 40];
        let repr = Repr {
            version: crate::wire::Version::V1,
            header: Header {
                sender_time: WallTime::from_nanos(6),
                ..Header::probe(1, 2, 3, 4, 5)
            },
            tool_header: &[9, 9],
            chunks: vec![Chunk {
                rider_id: 7,
                offset: 0,
                rider_len: 40,
                data: &rider,
            }],
            trailer_len,
        };
        repr.emit_into(vec![0u8; 300]).unwrap()
    }

    fn dir(from: &str, to: &str) -> Direction {
        Direction {
            from: from.parse().unwrap(),
            to: to.parse().unwrap(),
        }
    }

    #[test]
    fn sealed_packets_open_with_their_key_only() {
        let ab = Binding::To(dir("10.0.0.1", "10.0.0.2"));
        let mut p = packet(TRAILER_LEN);
        seal(&key(1), ab, &mut p, 42).unwrap();
        assert_eq!(open(&key(1), ab, &p), Ok(42));
        assert_eq!(open(&key(2), ab, &p), Err(AuthError::BadTag));
        // Any changed byte breaks the tag, counter and padding included.
        for i in [0, 5, 30, 150, 280, 299] {
            let mut q = p.clone().into_inner();
            q[i] ^= 0x10;
            let opened = Packet::new_checked(&q[..]).map(|v| open(&key(1), ab, &v));
            assert!(!matches!(opened, Ok(Ok(_))), "byte {i}");
        }
        let plain = packet(0);
        assert_eq!(open(&key(1), ab, &plain), Err(AuthError::Unauthenticated));
        let mut plain = plain;
        assert_eq!(
            seal(&key(1), ab, &mut plain, 1),
            Err(AuthError::Unauthenticated)
        );
    }

    #[test]
    fn a_packet_opens_only_in_the_direction_it_was_sealed_for() {
        let ab = dir("10.0.0.1", "10.0.0.2");
        let mut p = packet(TRAILER_LEN);
        seal(&key(1), Binding::To(ab), &mut p, 7).unwrap();
        // Sent back to its sender, or to a third daemon under either name.
        for other in [
            ab.reversed(),
            dir("10.0.0.1", "10.0.0.3"),
            dir("10.0.0.3", "10.0.0.2"),
            dir("::ffff:10.0.0.1", "10.0.0.3"),
        ] {
            assert_eq!(
                open(&key(1), Binding::To(other), &p),
                Err(AuthError::BadTag),
                "{other:?}"
            );
        }
        assert_eq!(open(&key(1), Binding::None, &p), Err(AuthError::BadTag));
        // An IPv4 address and its IPv4-mapped IPv6 form name the same daemon.
        assert_eq!(
            open(
                &key(1),
                Binding::To(dir("::ffff:10.0.0.1", "::ffff:10.0.0.2")),
                &p
            ),
            Ok(7)
        );
        // Version 1 tags bind nothing: they open either way.
        let mut q = packet(TRAILER_LEN);
        seal(&key(1), Binding::None, &mut q, 8).unwrap();
        assert_eq!(open(&key(1), Binding::None, &q), Ok(8));
        assert_eq!(open(&key(1), Binding::To(ab), &q), Err(AuthError::BadTag));
    }

    #[test]
    fn scheme_3_names_its_key_and_opens_with_that_key_only() {
        let ab = dir("10.0.0.1", "10.0.0.2");
        let mut p = packet(TRAILER_LEN);
        seal(&key(1), Binding::Indexed(ab), &mut p, 42).unwrap();
        assert_eq!(index_of(&p), Some(key(1).index()));
        assert_ne!(key(1).index(), key(2).index());
        let t = p.trailer();
        assert_eq!(&t[..8], &42u64.to_be_bytes());
        assert_eq!(&t[8..12], &key(1).index().to_be_bytes());
        assert_eq!(open(&key(1), Binding::Indexed(ab), &p), Ok(42));
        // Another key, another direction, another scheme: none opens it.
        assert_eq!(
            open(&key(2), Binding::Indexed(ab), &p),
            Err(AuthError::BadTag)
        );
        for b in [
            Binding::Indexed(ab.reversed()),
            Binding::To(ab),
            Binding::None,
        ] {
            assert_eq!(open(&key(1), b, &p), Err(AuthError::BadTag), "{b:?}");
        }
        // Every byte is covered, the index's included.
        for i in [0, 5, 150, 280, 283, 284, 287, 288, 299] {
            let mut q = p.clone().into_inner();
            q[i] ^= 0x10;
            let opened =
                Packet::new_checked(&q[..]).map(|v| open(&key(1), Binding::Indexed(ab), &v));
            assert!(!matches!(opened, Ok(Ok(_))), "byte {i}");
        }
        // A scheme 2 packet does not open as scheme 3, whatever its bytes 8..12 say.
        let mut q = packet(TRAILER_LEN);
        seal(&key(1), Binding::To(ab), &mut q, 9).unwrap();
        assert_eq!(
            open(&key(1), Binding::Indexed(ab), &q),
            Err(AuthError::BadTag)
        );
        assert_eq!(open(&key(1), Binding::To(ab), &q), Ok(9));
        assert_eq!(index_of(&packet(0)), None);
    }

    #[test]
    fn a_key_keeps_its_index_however_it_is_written() {
        let k = key(0x5a);
        assert_eq!(k.to_hex().parse::<Key>().unwrap().index(), k.index());
        assert_eq!(k.to_hex().parse::<Key>().unwrap(), k);
        // The index is no prefix of the key.
        assert_ne!(k.index().to_be_bytes(), [0x5a; 4]);
    }

    #[test]
    fn schemes_are_ordered_and_numbered() {
        assert!(Scheme::V1 < Scheme::V2 && Scheme::V2 < Scheme::V3);
        assert_eq!(Scheme::default(), Scheme::V3);
        for n in 1..=3 {
            assert_eq!(Scheme::from_number(n).unwrap().number(), n);
        }
        assert_eq!(Scheme::from_number(4), None);
        let d = dir("10.0.0.1", "10.0.0.2");
        assert_eq!(Scheme::V3.binding(d), Binding::Indexed(d));
        assert_eq!(Scheme::V2.binding(d), Binding::To(d));
        assert_eq!(Scheme::V1.binding(d), Binding::None);
    }

    #[test]
    fn a_resumed_window_refuses_what_came_before_and_takes_what_follows() {
        for top in [0u64, 63, 64, 1_000_005, u64::MAX / 2] {
            let mut w = ReplayWindow::resumed(top);
            assert_eq!(w.top(), Some(top));
            assert_eq!(w.check(top), Freshness::Replayed, "{top}");
            if top > 0 {
                assert_eq!(w.check(top - 1), Freshness::Replayed, "{top}");
            }
            assert_eq!(w.check(top + 1), Freshness::Newest, "{top}");
            assert_eq!(w.check(top + 3), Freshness::Newest, "{top}");
            assert_eq!(w.check(top + 2), Freshness::Late, "{top}");
            assert_eq!(w.check(top + 2), Freshness::Replayed, "{top}");
            assert_eq!(w.check(top + 200), Freshness::Newest, "{top}");
            assert_eq!(w.check(top + 150), Freshness::Late, "{top}");
        }
        assert_eq!(ReplayWindow::default().top(), None);
    }

    #[test]
    fn keys_parse_from_hex_and_base64() {
        let k = key(0xab);
        let hex = k.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex.parse::<Key>().unwrap(), k);
        // 32 bytes of 0xab in base64.
        let b64 = "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=";
        assert_eq!(b64.parse::<Key>().unwrap(), k);
        assert_eq!(format!("{k:?}"), "Key(..)");
        assert!(matches!("abc".parse::<Key>(), Err(KeyError::Format(3))));
        assert!("zz".repeat(32).parse::<Key>().is_err());
        assert!("!".repeat(44).parse::<Key>().is_err());
    }

    #[test]
    fn the_replay_window() {
        let mut w = ReplayWindow::default();
        assert!(w.check_and_update(1_000_000));
        assert!(!w.check_and_update(1_000_000), "a replay");
        assert!(w.check_and_update(1_000_002));
        assert!(w.check_and_update(1_000_001), "late but inside the window");
        assert!(!w.check_and_update(1_000_001));
        assert!(w.check_and_update(1_000_000 + 5_000));
        assert!(!w.check_and_update(1_000_003), "too old now");
        assert!(w.check_and_update(1_000_000 + 5_000 - REPLAY_WINDOW + 64));
        // A big jump clears the whole bitmap.
        assert!(w.check_and_update(u64::MAX / 2));
        assert!(w.check_and_update(u64::MAX / 2 - 1));
        assert!(!w.check_and_update(u64::MAX / 2));
        let mut w = ReplayWindow::default();
        assert!(w.check_and_update(0));
        assert!(!w.check_and_update(0));
    }

    #[test]
    fn every_counter_in_order_and_reordered_once() {
        let mut w = ReplayWindow::default();
        for c in (10u64..3_000).step_by(2) {
            assert!(w.check_and_update(c));
        }
        for c in (2_001u64..3_000).step_by(2) {
            assert!(w.check_and_update(c), "{c}");
        }
        for c in 2_001u64..3_000 {
            assert!(!w.check_and_update(c), "{c}");
        }
    }
}
