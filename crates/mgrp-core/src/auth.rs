//! Keyed authentication of MGRP packets: a counter and a tag in the trailer the wire
//! format reserves, and a replay window over the counter.
//!
//! With a key configured, every MGRP packet (probe or continuation) ends in a
//! [`TRAILER_LEN`]-byte trailer: the sender's 64-bit counter, big-endian, then the
//! first 16 bytes of the keyed BLAKE3 hash of everything before the tag (header,
//! chunk descriptors, tool header, rider bytes, padding, counter). The trailer takes
//! the place of padding: a probe keeps its requested size, and a probe too small for
//! header and trailer is refused by the planner.
//!
//! The receiver checks the tag first, in constant time, and only then the counter
//! against a sliding window of recently seen counters ([`ReplayWindow`], after RFC
//! 6479), so a forged packet cannot move the window. Senders start their counter at
//! their clock's nanoseconds, so a restarted sender is not taken for a replayer.

use std::fmt;
use std::str::FromStr;

use crate::wire::Packet;

/// Bytes of the authentication trailer: counter and tag.
pub const TRAILER_LEN: u16 = 24;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

const TAG_LEN: usize = 16;

/// A 32-byte secret key. Its `Debug` form never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

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
        Self(bytes)
    }

    /// The key as 64 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl FromStr for Key {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
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
            .map(Self)
            .ok_or(KeyError::Format(t.len()))
    }
}

fn hex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(*p.get(1)?)?))
        .collect()
}

fn base64(s: &str) -> Option<Vec<u8>> {
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

fn tag(key: &Key, covered: &[u8]) -> [u8; TAG_LEN] {
    let h = blake3::keyed_hash(&key.0, covered);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h.as_bytes()[..TAG_LEN]);
    t
}

/// Whether a checked packet ends in an authentication trailer.
fn has_trailer<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<(), AuthError> {
    if packet.trailer().len() == usize::from(TRAILER_LEN) {
        Ok(())
    } else {
        Err(AuthError::Unauthenticated)
    }
}

/// Writes `counter` and the tag into the trailer of `packet`, whose trailer is
/// [`TRAILER_LEN`] bytes long. Call it after the last change to the packet (the
/// sender stamp). Works on the view the caller has: nothing is parsed again.
pub fn seal<T: AsRef<[u8]> + AsMut<[u8]>>(
    key: &Key,
    packet: &mut Packet<T>,
    counter: u64,
) -> Result<(), AuthError> {
    has_trailer(packet)?;
    let packet = packet.as_bytes_mut();
    let n = packet.len();
    let t0 = n - usize::from(TRAILER_LEN);
    packet[t0..t0 + 8].copy_from_slice(&counter.to_be_bytes());
    let t = tag(key, &packet[..n - TAG_LEN]);
    packet[n - TAG_LEN..].copy_from_slice(&t);
    Ok(())
}

/// Checks the tag of `packet` and returns its counter (still to be checked against a
/// [`ReplayWindow`]). Works on the view the caller has: nothing is parsed again.
pub fn open<T: AsRef<[u8]>>(key: &Key, packet: &Packet<T>) -> Result<u64, AuthError> {
    has_trailer(packet)?;
    let packet = packet.as_bytes();
    let n = packet.len();
    let want = tag(key, &packet[..n - TAG_LEN]);
    // Constant time: every byte is compared whatever the first difference.
    let diff = want
        .iter()
        .zip(&packet[n - TAG_LEN..])
        .fold(0u8, |d, (a, b)| d | (a ^ b));
    if diff != 0 {
        return Err(AuthError::BadTag);
    }
    let t0 = n - usize::from(TRAILER_LEN);
    let mut c = [0u8; 8];
    c.copy_from_slice(&packet[t0..t0 + 8]);
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

impl ReplayWindow {
    /// Whether `counter` is new; if so it is remembered.
    pub fn check_and_update(&mut self, counter: u64) -> bool {
        if self.seen_any && counter.saturating_add(REPLAY_WINDOW) < self.top {
            return false;
        }
        let index = counter / BLOCK_BITS;
        if !self.seen_any || counter > self.top {
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
            return false;
        }
        self.bitmap[block] |= bit;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WallTime;
    use crate::wire::{Chunk, Header, Kind, Repr};

    fn key(b: u8) -> Key {
        Key::from_bytes([b; KEY_LEN])
    }

    fn packet(trailer_len: u16) -> Packet<Vec<u8>> {
        let rider = [0x45u8; 40];
        let repr = Repr {
            version: crate::wire::Version::V1,
            header: Header {
                kind: Kind::Probe,
                last_in_train: false,
                src_port: 1,
                dst_port: 2,
                transaction: 3,
                seq: 4,
                train_len: 5,
                sender_time: WallTime::from_nanos(6),
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

    #[test]
    fn sealed_packets_open_with_their_key_only() {
        let mut p = packet(TRAILER_LEN);
        seal(&key(1), &mut p, 42).unwrap();
        assert_eq!(open(&key(1), &p), Ok(42));
        assert_eq!(open(&key(2), &p), Err(AuthError::BadTag));
        // Any changed byte breaks the tag, counter and padding included.
        for i in [0, 5, 30, 150, 280, 299] {
            let mut q = p.clone().into_inner();
            q[i] ^= 0x10;
            let opened = Packet::new_checked(&q[..]).map(|v| open(&key(1), &v));
            assert!(!matches!(opened, Ok(Ok(_))), "byte {i}");
        }
        let plain = packet(0);
        assert_eq!(open(&key(1), &plain), Err(AuthError::Unauthenticated));
        let mut plain = plain;
        assert_eq!(
            seal(&key(1), &mut plain, 1),
            Err(AuthError::Unauthenticated)
        );
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
