//! Released riders put back together into super-packets before they leave.

use mgrp_core::ip;
use tracing::debug;
use tun_rs::VirtioNetHdr;

use super::FastPath;
use super::frames::{frame_header, split_frame};
use crate::counters::Counters;
use crate::net::Net;

/// Packets that go on unchanged one by one (riders released by the planners), put
/// back together into super-packets before they leave: consecutive TCP segments of
/// one flow in a batch become one GSO packet (the coalescing a TUN's own writer does,
/// `tun_rs::handle_gro`), which then leaves like a super-packet read from the TUN.
#[derive(Debug)]
pub(crate) struct Coalescer {
    fast: std::sync::Arc<FastPath>,
    /// Each packet after room for its virtio-net header.
    bufs: Vec<Vec<u8>>,
    len: usize,
    to_write: Vec<usize>,
    split: Vec<Vec<u8>>,
    sizes: Vec<usize>,
}

/// Packets coalesced at most at once.
const BATCH: usize = 64;
/// Room of each batch buffer: a packet coalesces only into a buffer with room for
/// the whole super-packet.
const ROOM: usize = tun_rs::VIRTIO_NET_HDR_LEN + 65_535;

impl Coalescer {
    pub(crate) fn new(fast: std::sync::Arc<FastPath>, mtu: u16) -> Self {
        // Split packets are at most an MTU.
        let room = tun_rs::VIRTIO_NET_HDR_LEN + usize::from(mtu) + 64;
        Self {
            fast,
            bufs: (0..BATCH).map(|_| Vec::with_capacity(ROOM)).collect(),
            len: 0,
            to_write: Vec::with_capacity(BATCH),
            split: vec![vec![0u8; room]; BATCH],
            sizes: vec![0; BATCH],
        }
    }

    /// Adds a packet; sends the batch first if it is full.
    pub(crate) fn push(&mut self, packet: &[u8], net: &Net, counters: &Counters) {
        if packet.len() < 20 {
            // Not an IP packet anyone could coalesce; it must not make the batch fail.
            net.send_unchanged(packet);
            return;
        }
        if self.len == BATCH {
            self.flush(net, counters);
        }
        let b = &mut self.bufs[self.len];
        b.clear();
        b.resize(tun_rs::VIRTIO_NET_HDR_LEN, 0);
        b.extend_from_slice(packet);
        self.len += 1;
    }

    /// Coalesces and sends what is batched. Each packet is counted once, in
    /// `unchanged_sent` or `unchanged_send_errors`, whether it left inside a
    /// super-packet or alone.
    pub(crate) fn flush(&mut self, net: &Net, counters: &Counters) {
        let n = std::mem::take(&mut self.len);
        if n == 0 {
            return;
        }
        self.to_write.clear();
        let bufs = &mut self.bufs[..n];
        // Fresh tables each time: their entries point into this batch.
        let coalesced = tun_rs::handle_gro(
            bufs,
            tun_rs::VIRTIO_NET_HDR_LEN,
            &mut Default::default(),
            &mut Default::default(),
            false,
            &mut self.to_write,
        );
        if let Err(e) = coalesced {
            // Some buffers may be merged already: resending them could duplicate
            // riders, so the batch counts as failed.
            debug!("coalescing {n} packets failed ({e}); they are dropped");
            counters
                .unchanged_send_errors
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        for &i in &self.to_write {
            let (head, packet) = bufs[i].split_at_mut(tun_rs::VIRTIO_NET_HDR_LEN);
            let checked = VirtioNetHdr::decode(head)
                .map_err(|e| e.to_string())
                .and_then(|h| frame_header(h, packet));
            let Ok((hdr, segments)) = checked else {
                net.send_unchanged(packet);
                continue;
            };
            if ip::destination(packet).is_some_and(|dst| {
                self.fast
                    .send_counted(dst, &hdr, packet, segments, counters)
            }) {
                continue;
            }
            // Apart again, through the raw socket.
            match split_frame(hdr, packet, &mut self.split, &mut self.sizes) {
                Ok(packets) => packets.for_each(|p| net.send_unchanged(p)),
                Err(e) => {
                    debug!("splitting a coalesced packet failed: {e}");
                    counters
                        .unchanged_send_errors
                        .fetch_add(segments, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }
}
