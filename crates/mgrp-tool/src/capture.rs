//! The kernel's view of the application's own TCP segments to or from one peer, for
//! passive packet timing: a packet socket that every interface's traffic passes,
//! with a classic BPF filter that keeps only TCP to (or from) the peer and cuts each
//! packet right after its TCP header, so no payload byte leaves the kernel; each
//! segment comes with the kernel's stamp (`SO_TIMESTAMPNS`: as it was handed to the
//! device going out, as it arrived coming in).
//!
//! A thread reads the socket in batches (`recvmmsg`) into a bounded ring of
//! [`Stamp`]s, in the order the kernel queued them (packets handled on two CPUs at
//! once may come with their stamps slightly out of order); [`Capture::since`] hands
//! out what came after a cursor, [`Capture::newest_since`] the latest stretch of it. Segments without payload (pure
//! acknowledgements) are not kept. A full ring drops its oldest stamps and counts
//! them; so does the kernel when the socket's buffer fills ([`Taken::kernel_drops`]).

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which packets a capture keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Those this host sends to the peer.
    To,
    /// Those this host receives from the peer.
    From,
}

/// One TCP segment with payload, as captured. Addresses are the capture's (this
/// host and its peer); the ports say which flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The sender's port.
    #[serde(rename = "sp")]
    pub src_port: u16,
    /// The receiver's port.
    #[serde(rename = "dp")]
    pub dst_port: u16,
    /// Sequence number of its first payload byte.
    pub seq: u32,
    /// Payload bytes.
    #[serde(rename = "len")]
    pub payload_len: u32,
    /// IP bytes of the whole packet.
    #[serde(rename = "ip")]
    pub ip_len: u32,
    /// The kernel's stamp, realtime clock, ns.
    #[serde(rename = "t")]
    pub at_ns: i64,
}

/// Stamps a ring holds at most.
pub const RING: usize = 1 << 16;

/// What [`Capture::since`] hands out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// The stamps after the cursor, oldest first.
    pub stamps: Vec<Stamp>,
    /// The cursor to ask from next time.
    pub next: u64,
    /// Stamps between the asked cursor and the oldest still held, gone before they
    /// were asked for.
    pub missed: u64,
    /// Packets the kernel dropped because the socket's buffer was full, since the
    /// capture started.
    pub kernel_drops: u64,
    /// Packets the filter passed, since the capture started.
    pub packets: u64,
    /// Packets that came with more than their headers (the filter failed to cut
    /// them), since the capture started: dropped unread. Always 0 unless the kernel
    /// ignores the filter's length.
    pub uncut: u64,
}

#[derive(Debug, Default)]
struct Ring {
    stamps: VecDeque<Stamp>,
    /// Cursor of `stamps[0]`.
    first: u64,
    packets: u64,
    kernel_drops: u64,
    uncut: u64,
}

#[derive(Debug)]
struct Inner {
    ring: Mutex<Ring>,
    stop: AtomicBool,
    fd: OwnedFd,
}

/// A running capture; dropping it stops its thread.
#[derive(Debug)]
pub struct Capture {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
    direction: Direction,
}

impl Capture {
    /// Starts capturing the TCP segments this host sends to (`Direction::To`) or
    /// receives from (`Direction::From`) `peer`, on every interface of the calling
    /// thread's network namespace. Needs CAP_NET_RAW.
    pub fn start(peer: IpAddr, direction: Direction) -> io::Result<Self> {
        let peer = peer.to_canonical();
        // Protocol 0 receives nothing until bound, so nothing passes before the
        // filter is attached.
        // SAFETY: plain socket creation; the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot open a packet socket to time {peer}'s packets ({e}); it needs root or CAP_NET_RAW"
                ),
            ));
        }
        // SAFETY: fd was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let program = filter(peer, direction);
        let prog = libc::sock_fprog {
            len: u16::try_from(program.len()).expect("a short program"),
            filter: program.as_ptr().cast_mut(),
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)?;
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &(4i32 << 20))?;
        mgrp_rt::rx::enable_rx_timestamps(&fd)?;
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
        // SAFETY: a zeroed sockaddr_ll is a valid value; the fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: binds to a sockaddr_ll we own, with its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&sll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let inner = Arc::new(Inner {
            ring: Mutex::new(Ring::default()),
            stop: AtomicBool::new(false),
            fd,
        });
        let i = inner.clone();
        let thread = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || read(&i))?;
        Ok(Self {
            inner,
            thread: Some(thread),
            direction,
        })
    }

    /// Which way.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The stamps after `cursor` (0 for all it holds), at most `max`.
    pub fn since(&self, cursor: u64, max: usize) -> Taken {
        let drops = self.read_kernel_drops();
        let mut ring = mgrp_rt::lock(&self.inner.ring);
        ring.kernel_drops += drops;
        let from = cursor.max(ring.first);
        let skip = usize::try_from(from - ring.first).unwrap_or(usize::MAX);
        let stamps: Vec<Stamp> = ring.stamps.iter().skip(skip).take(max).copied().collect();
        Taken {
            next: from + stamps.len() as u64,
            missed: from - cursor.min(from),
            stamps,
            kernel_drops: ring.kernel_drops,
            packets: ring.packets,
            uncut: ring.uncut,
        }
    }

    /// The newest `max` stamps after `cursor`, oldest first: those between the
    /// cursor and them are skipped (counted in `missed`). What a sender hands a
    /// receiver that polls: at a high packet rate the latest stretch, not a backlog
    /// that grows with the rate.
    pub fn newest_since(&self, cursor: u64, max: usize) -> Taken {
        let end = {
            let ring = mgrp_rt::lock(&self.inner.ring);
            ring.first + ring.stamps.len() as u64
        };
        let from = cursor.max(end.saturating_sub(max as u64));
        let mut t = self.since(from, max);
        t.missed += from - cursor.min(from);
        t
    }

    /// Packets the kernel dropped for a full socket buffer since the last call (the
    /// kernel resets its counts as they are read).
    fn read_kernel_drops(&self) -> u64 {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: reads into a struct we own, with its size.
        let r = unsafe {
            libc::getsockopt(
                self.inner.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                std::ptr::from_mut(&mut st).cast(),
                &mut len,
            )
        };
        if r < 0 { 0 } else { u64::from(st.tp_drops) }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn setsockopt<T>(fd: &OwnedFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: passes a value we own, with its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Packets read per system call at most.
const BATCH: usize = 64;
/// Bytes of room per packet: more than the filter lets through (120 at most), so
/// that a packet not cut at its headers would show (counted, never kept).
const ROOM: usize = 256;
/// Room for one `SCM_TIMESTAMPNS` control message (a header and a timespec).
const CONTROL_ROOM: usize = 64;

/// The capture thread: reads batches of packets (`recvmmsg`) until stopped, and
/// files each batch under one lock.
fn read(inner: &Inner) {
    let mut bufs = vec![[0u8; ROOM]; BATCH];
    let mut controls = vec![[0u8; CONTROL_ROOM]; BATCH];
    let mut iovs: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: ROOM,
        })
        .collect();
    // SAFETY: a zeroed mmsghdr is a valid value; its pointers are set below.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (i, m) in msgs.iter_mut().enumerate() {
        m.msg_hdr.msg_iov = std::ptr::from_mut(&mut iovs[i]);
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_control = controls[i].as_mut_ptr().cast();
    }
    let mut batch: Vec<Kept> = Vec::with_capacity(BATCH);
    while !inner.stop.load(Ordering::Relaxed) {
        for m in &mut msgs {
            m.msg_hdr.msg_controllen = CONTROL_ROOM;
            m.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points into buffers owned above that outlive the
        // call, with their lengths; the socket's read timeout ends a wait.
        let n = unsafe {
            libc::recvmmsg(
                inner.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if !crate::sys::nothing_yet(&e) {
                // A packet socket's errors are transient (ENOBUFS, ENETDOWN of an
                // interface going away); a short pause keeps a persistent one from
                // spinning.
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        batch.clear();
        for (i, m) in msgs
            .iter()
            .enumerate()
            .take(usize::try_from(n).unwrap_or(0))
        {
            let len = (m.msg_len as usize).min(ROOM);
            let cut = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            if let Some(s) = stamp_of(&bufs[i][..len], cut, &m.msg_hdr) {
                batch.push(s);
            }
        }
        if batch.is_empty() {
            continue;
        }
        let mut ring = mgrp_rt::lock(&inner.ring);
        for s in batch.drain(..) {
            match s {
                Kept::Uncut => ring.uncut += 1,
                Kept::Stamp(s) => {
                    ring.packets += 1;
                    if ring.stamps.len() == RING {
                        ring.stamps.pop_front();
                        ring.first += 1;
                    }
                    ring.stamps.push_back(s);
                }
            }
        }
    }
}

/// What a received packet gives the ring.
enum Kept {
    /// A segment with payload, stamped.
    Stamp(Stamp),
    /// A packet that came with more than its headers: counted, never kept.
    Uncut,
}

/// One received packet: `None` if it is not a segment with payload or came without
/// the kernel's stamp; [`Kept::Uncut`] if it came with more than its headers
/// (`truncated`: longer than the room for it).
fn stamp_of(packet: &[u8], truncated: bool, hdr: &libc::msghdr) -> Option<Kept> {
    let seg = mgrp_core::segment::parse(packet).ok()?;
    let headers = mgrp_core::segment::header_len(packet)?;
    if truncated || packet.len() > headers {
        return Some(Kept::Uncut);
    }
    if seg.payload_len == 0 {
        return None;
    }
    let at_ns = kernel_stamp(hdr)?;
    Some(Kept::Stamp(Stamp {
        src_port: seg.src.port(),
        dst_port: seg.dst.port(),
        seq: seg.seq,
        payload_len: seg.payload_len,
        ip_len: seg.ip_len,
        at_ns,
    }))
}

/// The `SCM_TIMESTAMPNS` stamp among a received message's control messages, ns.
fn kernel_stamp(hdr: &libc::msghdr) -> Option<i64> {
    // SAFETY: the header's control buffer and length are the kernel's answer into
    // a buffer this thread owns; CMSG_* walk inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
}

// Classic BPF, as <linux/filter.h> spells it.
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MSH: u16 = 0xa0;
const ADD: u16 = 0x00;
const LSH: u16 = 0x60;
const RSH: u16 = 0x70;
const JEQ: u16 = 0x10;
const JSET: u16 = 0x40;
const K: u16 = 0x00;
const X: u16 = 0x08;
const A: u16 = 0x10;
/// `SKF_AD_OFF`: where the ancillary loads start.
const AD: u32 = 0xffff_f000;
const AD_PROTOCOL: u32 = AD;
const AD_PKTTYPE: u32 = AD + 4;
const PACKET_OUTGOING: u32 = 4;

fn op(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The filter: packets of the direction asked for, TCP, to or from `peer`, not
/// fragments; returns the length of the IP and TCP headers (the kernel cuts the
/// packet there) or 0 (dropped).
pub(crate) fn filter(peer: IpAddr, direction: Direction) -> Vec<libc::sock_filter> {
    // Jumps are written with DROP and patched to the final "ret #0".
    const DROP: u8 = u8::MAX;
    let jeq = |k: u32, drop_if_equal: bool| libc::sock_filter {
        code: JMP | JEQ | K,
        jt: if drop_if_equal { DROP } else { 0 },
        jf: if drop_if_equal { 0 } else { DROP },
        k,
    };
    let mut p = vec![
        op(LD | W | ABS, AD_PKTTYPE),
        jeq(PACKET_OUTGOING, direction == Direction::From),
    ];
    match peer {
        IpAddr::V4(a) => {
            let at = if direction == Direction::To { 16 } else { 12 };
            p.extend([
                op(LD | W | ABS, AD_PROTOCOL),
                jeq(0x0800, false),
                op(LD | B | ABS, 9),
                jeq(6, false),
                op(LD | W | ABS, at),
                jeq(u32::from(a), false),
                op(LD | H | ABS, 6),
                libc::sock_filter {
                    code: JMP | JSET | K,
                    jt: DROP,
                    jf: 0,
                    k: 0x3fff,
                },
                op(LDX | B | MSH, 0),
                op(LD | B | IND, 12),
                op(ALU | RSH | K, 4),
                op(ALU | LSH | K, 2),
                op(ALU | ADD | X, 0),
            ]);
        }
        IpAddr::V6(a) => {
            let at = if direction == Direction::To { 24 } else { 8 };
            p.extend([
                op(LD | W | ABS, AD_PROTOCOL),
                jeq(0x86dd, false),
                op(LD | B | ABS, 6),
                jeq(6, false),
            ]);
            for (i, w) in a.octets().chunks(4).enumerate() {
                p.push(op(LD | W | ABS, at + 4 * i as u32));
                p.push(jeq(u32::from_be_bytes([w[0], w[1], w[2], w[3]]), false));
            }
            p.extend([
                op(LD | B | ABS, 40 + 12),
                op(ALU | RSH | K, 4),
                op(ALU | LSH | K, 2),
                op(ALU | ADD | K, 40),
            ]);
        }
    }
    p.push(op(RET | A, 0));
    let drop_at = p.len();
    p.push(op(RET | K, 0));
    for (i, ins) in p.iter_mut().enumerate().take(drop_at) {
        let to_drop = u8::try_from(drop_at - i - 1).expect("a short program");
        if ins.jt == DROP {
            ins.jt = to_drop;
        }
        if ins.jf == DROP {
            ins.jf = to_drop;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// Whether this process may open packet sockets (CI runs as root).
    #[test]
    fn the_filter_ends_in_its_two_returns_and_jumps_stay_inside() {
        for peer in [
            "10.1.2.3".parse().unwrap(),
            "fd00::7".parse::<IpAddr>().unwrap(),
        ] {
            for d in [Direction::To, Direction::From] {
                let p = filter(peer, d);
                let n = p.len();
                assert_eq!(p[n - 1].code, RET | K);
                assert_eq!(p[n - 2].code, RET | A);
                for (i, ins) in p.iter().enumerate() {
                    if ins.code & 0x07 == JMP {
                        assert!(i + 1 + usize::from(ins.jt) < n && i + 1 + usize::from(ins.jf) < n);
                    }
                }
            }
        }
    }

    /// Loopback: what one end sends, both captures see, headers only, each segment
    /// once, with the stamps in order.
    #[test]
    fn both_ends_of_a_loopback_flow_see_its_segments() {
        if !mgrp_testbed::root_or_skip("both_ends_of_a_loopback_flow_see_its_segments") {
            return;
        }
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let before = crate::sys::wall_now();
        let out = Capture::start(lo, Direction::To).unwrap();
        let inn = Capture::start(lo, Direction::From).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            all.len()
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let chunk = vec![0x5au8; 100_000];
        for _ in 0..20 {
            c.write_all(&chunk).unwrap();
        }
        drop(c);
        assert_eq!(reader.join().unwrap(), 2_000_000);
        let after = crate::sys::wall_now();
        std::thread::sleep(Duration::from_millis(300));
        for cap in [&out, &inn] {
            let t = cap.since(0, RING);
            let flow: Vec<&Stamp> = t.stamps.iter().filter(|s| s.dst_port == port).collect();
            let bytes: u64 = flow.iter().map(|s| u64::from(s.payload_len)).sum();
            assert_eq!(
                bytes,
                2_000_000,
                "{:?} saw every payload byte once",
                cap.direction()
            );
            // Stamped by the kernel while the flow ran (their order in the ring is
            // the kernel's queueing order, which packets handled on two CPUs at once
            // may swap).
            assert!(flow.iter().all(|s| (before..=after).contains(&s.at_ns)));
            assert!(flow.iter().all(|s| s.ip_len > s.payload_len));
            assert_eq!(t.next, t.stamps.len() as u64);
            assert_eq!(t.uncut, 0, "the filter keeps headers only");
            let again = cap.since(t.next, RING);
            assert!(again.stamps.iter().all(|s| s.dst_port != port));
        }
    }
}
