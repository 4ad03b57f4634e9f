//! Rebuilding riders from the chunks that probes and continuation packets carry.
//!
//! Chunks may arrive in any order, more than once, or never. A rider is released only
//! when every one of its bytes arrived, and only once; chunks that disagree with what
//! was already received (another rider length, other bytes at the same offsets) get
//! the whole rider discarded rather than delivered wrong. Memory is bounded per peer and
//! in total (a rider reserves its full length when its first chunk arrives); incomplete
//! riders time out. Every discard is counted by its reason in [`ReassemblyCounters`].
//!
//! The peer type `P` is whatever identifies a sender (an IP address in the daemon).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use crate::MonoTime;
use crate::stats::ReassemblyCounters;
use crate::wire::{Chunk, UNNUMBERED_RIDER_ID};

/// Bounds of a reassembler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes reserved for one peer's incomplete riders.
    pub per_peer_bytes: usize,
    /// Most bytes reserved for all incomplete riders.
    pub total_bytes: usize,
    /// How long an incomplete rider may wait for its missing chunks; also how long a
    /// delivered rider is remembered so that late duplicates are recognised.
    pub timeout: Duration,
    /// Most delivered riders remembered for duplicate detection.
    pub remembered: usize,
    /// Longest rider accepted, bytes (the path MTU: no sender makes a longer one, so
    /// a longer claimed length is a forgery that would reserve memory for nothing).
    pub max_rider_len: usize,
}

/// Bytes an incomplete rider costs beyond its own length (entry, range list, order
/// queues), counted against the memory bounds so that a flood of tiny riders is
/// bounded as well as a few large ones.
pub const ENTRY_OVERHEAD: usize = 160;

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_peer_bytes: 1 << 20,
            total_bytes: 16 << 20,
            timeout: Duration::from_secs(1),
            remembered: 16_384,
            max_rider_len: usize::from(u16::MAX),
        }
    }
}

type Key<P> = (P, u32);

#[derive(Debug)]
struct Entry {
    started: MonoTime,
    generation: u64,
    data: Vec<u8>,
    /// Received byte ranges, sorted and disjoint (merged when adjacent).
    have: Vec<(usize, usize)>,
}

impl Entry {
    fn received(&self) -> usize {
        self.have.iter().map(|(s, e)| e - s).sum()
    }
}

/// What happened to a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// The rider is complete: here are its bytes.
    Complete(Vec<u8>),
    /// Stored; the rider still misses bytes.
    Pending,
    /// The chunk repeated bytes already held or delivered.
    Duplicate,
    /// The chunk contradicted earlier ones; the rider was discarded.
    Inconsistent,
    /// The rider alone exceeds a memory bound; the chunk was refused.
    TooLarge,
}

/// Reassembles riders from chunks, for any number of peers.
#[derive(Debug)]
pub struct Reassembler<P> {
    limits: Limits,
    entries: HashMap<Key<P>, Entry>,
    /// Entries in the order they started, with their generation; stale pairs (entries
    /// since completed or discarded) are skipped lazily.
    order: VecDeque<(Key<P>, u64)>,
    /// The same per peer, so that evicting a peer's oldest rider costs O(1) amortised
    /// instead of a scan past every other peer's riders.
    peer_order: HashMap<P, VecDeque<(u32, u64)>>,
    per_peer: HashMap<P, usize>,
    total: usize,
    delivered: HashSet<Key<P>>,
    delivered_order: VecDeque<(MonoTime, Key<P>)>,
    generation: u64,
    counters: ReassemblyCounters,
}

impl<P: Copy + Eq + Hash> Reassembler<P> {
    /// An empty reassembler.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            entries: HashMap::new(),
            order: VecDeque::new(),
            peer_order: HashMap::new(),
            per_peer: HashMap::new(),
            total: 0,
            delivered: HashSet::new(),
            delivered_order: VecDeque::new(),
            generation: 0,
            counters: ReassemblyCounters::default(),
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> ReassemblyCounters {
        ReassemblyCounters {
            riders_pending: self.entries.len() as u64,
            bytes_pending: self.total as u64,
            ..self.counters
        }
    }

    /// Takes in one chunk received from `peer` at `now`.
    pub fn handle_chunk(&mut self, now: MonoTime, peer: P, chunk: &Chunk<'_>) -> ChunkOutcome {
        self.counters.chunks_in += 1;
        self.expire(now);
        // A whole rider in version 2 has no id: nothing to look up or remember it by.
        let unnumbered = chunk.rider_id == UNNUMBERED_RIDER_ID && chunk.is_whole();
        let key = (peer, chunk.rider_id);
        if !unnumbered && self.delivered.contains(&key) {
            self.counters.chunks_duplicate += 1;
            return ChunkOutcome::Duplicate;
        }
        let rider_len = usize::from(chunk.rider_len);
        let start = usize::from(chunk.offset);
        let end = start + chunk.data.len();
        if chunk.data.is_empty() || end > rider_len {
            // A checked packet never yields such a chunk; refuse rather than panic.
            self.counters.riders_inconsistent += 1;
            return ChunkOutcome::Inconsistent;
        }
        if rider_len > self.limits.max_rider_len {
            // Whole or in pieces: no sender makes a rider over the MTU.
            self.counters.chunks_too_large += 1;
            return ChunkOutcome::TooLarge;
        }
        if unnumbered || !self.entries.contains_key(&key) {
            if chunk.is_whole() {
                self.deliver(now, key, chunk.data.len(), !unnumbered);
                return ChunkOutcome::Complete(chunk.data.to_vec());
            }
            let cost = rider_len + ENTRY_OVERHEAD;
            if cost > self.limits.per_peer_bytes || cost > self.limits.total_bytes {
                self.counters.chunks_too_large += 1;
                return ChunkOutcome::TooLarge;
            }
            self.make_room(peer, cost);
            self.generation += 1;
            self.entries.insert(
                key,
                Entry {
                    started: now,
                    generation: self.generation,
                    data: vec![0; rider_len],
                    have: Vec::new(),
                },
            );
            self.order.push_back((key, self.generation));
            self.peer_order
                .entry(peer)
                .or_default()
                .push_back((chunk.rider_id, self.generation));
            *self.per_peer.entry(peer).or_insert(0) += cost;
            self.total += cost;
        }
        let Some(entry) = self.entries.get_mut(&key) else {
            return ChunkOutcome::Pending;
        };
        if entry.data.len() != rider_len || !agrees(entry, start, chunk.data) {
            self.remove(&key);
            self.counters.riders_inconsistent += 1;
            return ChunkOutcome::Inconsistent;
        }
        if covered(&entry.have, start, end) {
            self.counters.chunks_duplicate += 1;
            return ChunkOutcome::Duplicate;
        }
        entry.data[start..end].copy_from_slice(chunk.data);
        insert_range(&mut entry.have, start, end);
        if entry.received() < rider_len {
            return ChunkOutcome::Pending;
        }
        let data = self.remove(&key).map(|e| e.data).unwrap_or_default();
        self.deliver(now, key, data.len(), true);
        ChunkOutcome::Complete(data)
    }

    /// Counts a delivered rider, and remembers it for duplicate detection if `remember`.
    fn deliver(&mut self, now: MonoTime, key: Key<P>, len: usize, remember: bool) {
        self.counters.riders_delivered += 1;
        self.counters.rider_bytes_delivered += len as u64;
        if !remember || self.limits.remembered == 0 {
            return;
        }
        if self.delivered.len() >= self.limits.remembered
            && let Some((_, old)) = self.delivered_order.pop_front()
        {
            self.delivered.remove(&old);
        }
        self.delivered.insert(key);
        self.delivered_order.push_back((now, key));
    }

    fn remove(&mut self, key: &Key<P>) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        let cost = e.data.len() + ENTRY_OVERHEAD;
        self.total -= cost;
        if let Some(n) = self.per_peer.get_mut(&key.0) {
            *n -= cost;
            if *n == 0 {
                self.per_peer.remove(&key.0);
                self.peer_order.remove(&key.0);
            }
        }
        Some(e)
    }

    /// Evicts the oldest incomplete riders until `len` more bytes for `peer` fit.
    fn make_room(&mut self, peer: P, len: usize) {
        while self.per_peer.get(&peer).copied().unwrap_or(0) + len > self.limits.per_peer_bytes {
            let Some(q) = self.peer_order.get_mut(&peer) else {
                break;
            };
            let Some((id, g)) = q.pop_front() else {
                break;
            };
            let k = (peer, id);
            if self.is_live(&k, g) {
                self.remove(&k);
                self.counters.riders_evicted_peer_limit += 1;
            }
        }
        while self.total + len > self.limits.total_bytes {
            let Some((k, g)) = self.order.pop_front() else {
                break;
            };
            if self.is_live(&k, g) {
                self.remove(&k);
                self.counters.riders_evicted_total_limit += 1;
            }
        }
    }

    fn is_live(&self, key: &Key<P>, generation: u64) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| e.generation == generation)
    }

    fn expire(&mut self, now: MonoTime) {
        while let Some(&(key, g)) = self.order.front() {
            match self.entries.get(&key) {
                Some(e) if e.generation == g => {
                    if now < e.started.saturating_add(self.limits.timeout) {
                        break;
                    }
                    self.remove(&key);
                    self.counters.riders_timed_out += 1;
                }
                _ => {}
            }
            self.order.pop_front();
        }
        while let Some(&(at, key)) = self.delivered_order.front() {
            if now < at.saturating_add(self.limits.timeout) {
                break;
            }
            self.delivered.remove(&key);
            self.delivered_order.pop_front();
        }
    }

    /// Discards incomplete riders whose time is up at `now`.
    pub fn handle_timeout(&mut self, now: MonoTime) {
        self.expire(now);
    }

    /// When the oldest incomplete rider times out, if there is one.
    pub fn poll_timeout(&self) -> Option<MonoTime> {
        self.order
            .iter()
            .find_map(|(k, g)| {
                self.entries
                    .get(k)
                    .filter(|e| e.generation == *g)
                    .map(|e| e.started)
            })
            .map(|t| t.saturating_add(self.limits.timeout))
    }
}

/// Whether `data` at `start` agrees with every byte already received there.
fn agrees(entry: &Entry, start: usize, data: &[u8]) -> bool {
    let end = start + data.len();
    entry.have.iter().all(|&(s, e)| {
        let (lo, hi) = (s.max(start), e.min(end));
        lo >= hi || entry.data[lo..hi] == data[lo - start..hi - start]
    })
}

fn covered(have: &[(usize, usize)], start: usize, end: usize) -> bool {
    have.iter().any(|&(s, e)| s <= start && end <= e)
}

fn insert_range(have: &mut Vec<(usize, usize)>, start: usize, end: usize) {
    let mut merged = (start, end);
    have.retain(|&(s, e)| {
        if e < merged.0 || s > merged.1 {
            true
        } else {
            merged = (merged.0.min(s), merged.1.max(e));
            false
        }
    });
    let at = have.partition_point(|&(s, _)| s < merged.0);
    have.insert(at, merged);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: u32, offset: u16, rider_len: u16, data: &[u8]) -> Chunk<'_> {
        Chunk {
            rider_id: id,
            offset,
            rider_len,
            data,
        }
    }

    fn t(ms: u64) -> MonoTime {
        MonoTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn unnumbered_whole_riders_are_neither_remembered_nor_looked_up() {
        use crate::wire::UNNUMBERED_RIDER_ID as NO_ID;
        let mut r = Reassembler::new(Limits {
            max_rider_len: 4,
            ..Limits::default()
        });
        for _ in 0..2 {
            assert_eq!(
                r.handle_chunk(t(0), 1u8, &chunk(NO_ID, 0, 3, b"abc")),
                ChunkOutcome::Complete(b"abc".to_vec())
            );
        }
        assert_eq!(
            r.handle_chunk(t(0), 1u8, &chunk(NO_ID, 0, 5, b"abcde")),
            ChunkOutcome::TooLarge
        );
        let c = r.counters();
        assert_eq!(
            (
                c.riders_delivered,
                c.rider_bytes_delivered,
                c.chunks_duplicate
            ),
            (2, 6, 0)
        );
        assert!(r.delivered.is_empty());
    }

    #[test]
    fn whole_rider_passes_straight_through() {
        let mut r = Reassembler::new(Limits::default());
        assert_eq!(
            r.handle_chunk(t(0), 1u8, &chunk(5, 0, 3, b"abc")),
            ChunkOutcome::Complete(b"abc".to_vec())
        );
        assert_eq!(
            r.handle_chunk(t(1), 1u8, &chunk(5, 0, 3, b"abc")),
            ChunkOutcome::Duplicate
        );
        // Another peer's rider 5 is a different rider.
        assert!(matches!(
            r.handle_chunk(t(1), 2u8, &chunk(5, 0, 3, b"xyz")),
            ChunkOutcome::Complete(_)
        ));
        let c = r.counters();
        assert_eq!(
            (c.riders_delivered, c.chunks_duplicate, c.riders_pending),
            (2, 1, 0)
        );
    }

    #[test]
    fn out_of_order_and_overlapping_chunks() {
        let mut r = Reassembler::new(Limits::default());
        let rider = b"0123456789";
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 6, 10, &rider[6..])),
            ChunkOutcome::Pending
        );
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 2, 10, &rider[2..7])),
            ChunkOutcome::Pending
        );
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 3, 10, &rider[3..5])),
            ChunkOutcome::Duplicate
        );
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 0, 10, &rider[..2])),
            ChunkOutcome::Complete(rider.to_vec())
        );
        assert_eq!(r.counters().bytes_pending, 0);
    }

    #[test]
    fn disagreeing_chunks_discard_the_rider() {
        let mut r = Reassembler::new(Limits::default());
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 0, 4, b"ab")),
            ChunkOutcome::Pending
        );
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 1, 4, b"Xc")),
            ChunkOutcome::Inconsistent
        );
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(2, 0, 4, b"ab")),
            ChunkOutcome::Pending
        );
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(2, 2, 5, b"cde")),
            ChunkOutcome::Inconsistent
        );
        let c = r.counters();
        assert_eq!(
            (c.riders_inconsistent, c.riders_pending, c.bytes_pending),
            (2, 0, 0)
        );
    }

    #[test]
    fn incomplete_riders_time_out() {
        let limits = Limits {
            timeout: Duration::from_millis(100),
            ..Limits::default()
        };
        let mut r = Reassembler::new(limits);
        r.handle_chunk(t(0), 0u8, &chunk(1, 0, 4, b"ab"));
        assert_eq!(r.poll_timeout(), Some(t(100)));
        r.handle_timeout(t(99));
        assert_eq!(r.counters().riders_pending, 1);
        r.handle_timeout(t(100));
        let c = r.counters();
        assert_eq!(
            (c.riders_timed_out, c.riders_pending, c.bytes_pending),
            (1, 0, 0)
        );
        assert_eq!(r.poll_timeout(), None);
        // The late half starts a new rider that will time out too, never a wrong one.
        assert_eq!(
            r.handle_chunk(t(150), 0u8, &chunk(1, 2, 4, b"cd")),
            ChunkOutcome::Pending
        );
    }

    #[test]
    fn memory_bounds_evict_oldest() {
        let o = ENTRY_OVERHEAD;
        let limits = Limits {
            per_peer_bytes: 2 * (10 + o),
            total_bytes: 3 * (10 + o),
            max_rider_len: 30,
            ..Limits::default()
        };
        let mut r = Reassembler::new(limits);
        r.handle_chunk(t(0), 0u8, &chunk(1, 0, 10, b"a"));
        r.handle_chunk(t(1), 0u8, &chunk(2, 0, 10, b"b"));
        // A third 10-byte rider of peer 0 evicts rider 1.
        r.handle_chunk(t(2), 0u8, &chunk(3, 0, 10, b"c"));
        assert_eq!(r.counters().riders_evicted_peer_limit, 1);
        // Peer 1 needs 15 more bytes: the total would be over, so rider 2 goes.
        r.handle_chunk(t(3), 1u8, &chunk(1, 0, 15, b"d"));
        let c = r.counters();
        assert_eq!(c.riders_evicted_total_limit, 1);
        assert_eq!(
            (c.riders_pending, c.bytes_pending),
            (2, (25 + 2 * o) as u64)
        );
        // Longer than any rider a sender makes.
        assert_eq!(
            r.handle_chunk(t(4), 1u8, &chunk(9, 0, 31, b"e")),
            ChunkOutcome::TooLarge
        );
    }

    #[test]
    fn ranges_merge() {
        let mut h = Vec::new();
        insert_range(&mut h, 5, 7);
        insert_range(&mut h, 0, 2);
        insert_range(&mut h, 2, 5);
        assert_eq!(h, [(0, 7)]);
        insert_range(&mut h, 9, 10);
        assert_eq!(h, [(0, 7), (9, 10)]);
        assert!(covered(&h, 1, 7));
        assert!(!covered(&h, 6, 9));
    }

    #[test]
    fn a_whole_rider_over_the_longest_is_refused_too() {
        // Found by the receive fuzz target: a rider in one chunk skipped the length
        // bound, so a forged 64 KB MGRP packet could hand the TUN a rider over the MTU.
        let limits = Limits {
            max_rider_len: 1500,
            ..Limits::default()
        };
        let mut r = Reassembler::new(limits);
        let big = vec![0x45; 1501];
        assert_eq!(
            r.handle_chunk(t(0), 0u8, &chunk(1, 0, 1501, &big)),
            ChunkOutcome::TooLarge
        );
        assert!(matches!(
            r.handle_chunk(t(0), 0u8, &chunk(2, 0, 1500, &big[..1500])),
            ChunkOutcome::Complete(v) if v.len() == 1500
        ));
        assert_eq!(r.counters().chunks_too_large, 1);
    }

    #[test]
    fn a_flood_of_tiny_chunks_stays_within_its_bounds() {
        let limits = Limits {
            max_rider_len: 1500,
            ..Limits::default()
        };
        let mut r = Reassembler::new(limits);
        // 100,000 one-byte chunks of distinct 1500-byte riders from one peer, and one
        // honest rider of another peer in the middle.
        for id in 0..100_000u32 {
            r.handle_chunk(t(0), 0u8, &chunk(id, 0, 1500, b"x"));
            if id == 50_000 {
                r.handle_chunk(t(0), 1u8, &chunk(7, 0, 4, b"ab"));
            }
            assert!(r.counters().bytes_pending as usize <= limits.total_bytes);
        }
        let c = r.counters();
        assert!(c.bytes_pending as usize <= limits.per_peer_bytes + 1500 + ENTRY_OVERHEAD);
        assert!(c.riders_evicted_peer_limit > 90_000);
        // The other peer's rider was not evicted by the flood and completes.
        assert_eq!(
            r.handle_chunk(t(1), 1u8, &chunk(7, 2, 4, b"cd")),
            ChunkOutcome::Complete(b"abcd".to_vec())
        );
        // A claimed length beyond the MTU reserves nothing.
        assert_eq!(
            r.handle_chunk(t(1), 2u8, &chunk(1, 0, 60_000, b"x")),
            ChunkOutcome::TooLarge
        );
    }
}
