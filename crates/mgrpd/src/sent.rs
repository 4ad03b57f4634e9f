//! What this daemon sent lately, as far as an ICMP error can prove it: a keyed
//! fingerprint of each MGRP packet's first bytes and where it went, kept for a few
//! seconds in a fixed table, so that an ICMP error counts against a peer only when
//! it quotes a packet this daemon really sent there. An off-path host that knows a
//! node's address and a peer's can forge an error quoting a made-up packet; it cannot
//! guess a sent packet's first bytes (its transaction, sequence and nanosecond send
//! time, or a sealed trailer), so its error marks nothing down.
//!
//! Lock-free and lossy: a send writes one slot (a clock read, a keyed hash, an
//! atomic store), the slot chosen by the fingerprint, so a newer packet may take an
//! older one's slot. With [`SLOTS`] slots a packet stays findable for longer than
//! any ICMP error takes to come back at the rates one host sends.

use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How many of a packet's first bytes its fingerprint covers (all of a shorter
/// packet). Enough for a probe's transaction, sequence and send time, or a
/// continuation's rider header; routers quote at least the first 8 bytes past the
/// UDP header and Linux quotes up to 576 bytes of the packet, so an error about a
/// packet this long quotes all of them.
pub const FINGERPRINT_BYTES: usize = 32;

/// Slots of the table (a power of two): 512 KiB, a second of 65,000 packets a
/// second.
const SLOTS: usize = 1 << 16;

/// How long after its send an error about a packet still counts.
pub const RECENT: Duration = Duration::from_secs(10);

/// The low bits of a slot hold the second (since the table's start, modulo 2¹⁶)
/// of the send; the high bits the fingerprint's own.
const TIME_BITS: u32 = 16;

/// The fingerprints of recently sent MGRP packets.
pub struct SentLog {
    slots: Box<[AtomicU64]>,
    key: std::collections::hash_map::RandomState,
    start: Instant,
}

impl std::fmt::Debug for SentLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentLog").finish_non_exhaustive()
    }
}

impl Default for SentLog {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            key: std::collections::hash_map::RandomState::new(),
            start: Instant::now(),
        }
    }
}

impl SentLog {
    /// The fingerprint of `packet`'s first bytes sent to `to` (port 0 over raw IP).
    fn fingerprint(&self, to: SocketAddr, packet: &[u8]) -> u64 {
        let n = packet.len().min(FINGERPRINT_BYTES);
        // The address and port only: an IPv6 error's address may carry a flow label
        // or scope the send's did not.
        self.key.hash_one((to.ip(), to.port(), &packet[..n]))
    }

    /// Seconds since the table started, modulo 2¹⁶.
    fn second(&self, now: Instant) -> u64 {
        now.duration_since(self.start).as_secs() & ((1 << TIME_BITS) - 1)
    }

    /// Notes that `packet` is sent to `to` now.
    pub fn note(&self, to: SocketAddr, packet: &[u8]) {
        self.note_at(to, packet, Instant::now());
    }

    fn note_at(&self, to: SocketAddr, packet: &[u8], now: Instant) {
        let f = self.fingerprint(to, packet);
        let slot = &self.slots[f as usize & (SLOTS - 1)];
        slot.store(
            (f & !((1 << TIME_BITS) - 1)) | self.second(now),
            Ordering::Relaxed,
        );
    }

    /// Whether `quoted`, the start of a packet an ICMP error about a send to `to`
    /// quotes, is the start of a packet noted within [`RECENT`]. A quote shorter
    /// than the packet's fingerprint proves nothing.
    pub fn sent_recently(&self, to: SocketAddr, quoted: &[u8]) -> bool {
        self.sent_within(to, quoted, Instant::now())
    }

    fn sent_within(&self, to: SocketAddr, quoted: &[u8], now: Instant) -> bool {
        let f = self.fingerprint(to, quoted);
        let held = self.slots[f as usize & (SLOTS - 1)].load(Ordering::Relaxed);
        let mask = (1u64 << TIME_BITS) - 1;
        if held == 0 || held & !mask != f & !mask {
            return false;
        }
        let age = self.second(now).wrapping_sub(held & mask) & mask;
        age <= RECENT.as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 2], port))
    }

    #[test]
    fn a_quote_of_a_sent_packet_is_found_and_nothing_else_is() {
        let log = SentLog::default();
        let packet: Vec<u8> = (0..100u8).collect();
        log.note(at(4253), &packet);
        // Quoted whole, or as far as its fingerprint goes.
        assert!(log.sent_recently(at(4253), &packet));
        assert!(log.sent_recently(at(4253), &packet[..FINGERPRINT_BYTES]));
        // Cut short, changed in one byte, or about another destination: not proven.
        assert!(!log.sent_recently(at(4253), &packet[..FINGERPRINT_BYTES - 1]));
        let mut other = packet.clone();
        other[20] ^= 1;
        assert!(!log.sent_recently(at(4253), &other));
        assert!(!log.sent_recently(at(4254), &packet));
        // A packet shorter than the fingerprint is proven by its whole quote.
        log.note(at(0), &packet[..10]);
        assert!(log.sent_recently(at(0), &packet[..10]));
        assert!(!log.sent_recently(at(0), &packet[..9]));
    }

    #[test]
    fn an_old_send_proves_nothing() {
        let log = SentLog::default();
        let t0 = log.start;
        log.note_at(at(1), b"an old packet that went out", t0);
        let later = |s: u64| t0 + Duration::from_secs(s);
        assert!(log.sent_within(
            at(1),
            b"an old packet that went out",
            later(RECENT.as_secs())
        ));
        assert!(!log.sent_within(
            at(1),
            b"an old packet that went out",
            later(RECENT.as_secs() + 1)
        ));
    }

    #[test]
    fn a_quiet_table_proves_nothing() {
        let log = SentLog::default();
        assert!(!log.sent_recently(at(1), &[]));
        assert!(!log.sent_recently(at(1), &[0; 64]));
    }
}
