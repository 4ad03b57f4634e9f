//! Whole frames read from and written to one device with an `AF_PACKET` socket, each
//! read frame with its kernel receive stamp: the building block of the delay line and
//! of the bottleneck's accounting.
//!
//! Sockets carry a virtio-net header before each frame (`PACKET_VNET_HDR`), so a GSO
//! super-packet that a veth passes on whole is read and written whole, with its
//! segmentation and checksum state intact, rather than refused for its size.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use anyhow::Context;
use nix::sys::socket::{setsockopt, sockopt};

use crate::Netns;

/// Size of the virtio-net header before each frame.
pub const VNET_HDR_LEN: usize = 10;
/// A buffer that holds any frame a device passes, header included.
pub const MAX_FRAME: usize = VNET_HDR_LEN + 65_536 + 64;

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20), not in every libc release.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Which frames a [`LinkSocket`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Frames the device receives.
    Incoming,
    /// Frames the device sends (after its queueing discipline).
    Outgoing,
}

/// What [`LinkSocket::recv`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Bytes in the buffer: the virtio-net header, then the frame.
    pub len: usize,
    /// The kernel's software stamp of the frame, realtime nanoseconds (0 if none).
    pub stamp_ns: i64,
}

/// The fields of a virtio-net header the accounting needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    /// GSO type (0 = not a super-packet).
    pub gso_type: u8,
    /// Length of the headers repeated in every segment.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
}

impl VnetHdr {
    /// Reads the header at the start of `buf` (little-endian, as the kernel writes it
    /// for packet sockets on this architecture family).
    pub fn parse(buf: &[u8]) -> Self {
        if buf.len() < VNET_HDR_LEN {
            return Self::default();
        }
        Self {
            gso_type: buf[1],
            hdr_len: u16::from_le_bytes([buf[2], buf[3]]),
            gso_size: u16::from_le_bytes([buf[4], buf[5]]),
        }
    }

    /// The bytes the `frame_len`-byte frame (link header included) occupies on the
    /// link once segmented: every segment repeats the headers, as a qdisc counts it.
    pub fn wire_bytes(&self, frame_len: usize) -> u64 {
        let hdr = usize::from(self.hdr_len);
        let size = usize::from(self.gso_size);
        if self.gso_type == 0 || size == 0 || frame_len <= hdr {
            return frame_len as u64;
        }
        let segments = (frame_len - hdr).div_ceil(size);
        (frame_len + (segments - 1) * hdr) as u64
    }
}

/// An `AF_PACKET` raw socket bound to one device of one namespace.
#[derive(Debug)]
pub struct LinkSocket {
    fd: OwnedFd,
    direction: Direction,
}

fn check(r: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}

/// A socket option neither nix nor socket2 covers (the packet socket's own).
fn set_int(
    fd: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
    what: &str,
) -> io::Result<()> {
    // SAFETY: a plain int option on a socket we own.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(r, what).map(drop)
}

impl LinkSocket {
    /// Opens a socket on `dev` in `ns` that reads the frames going in `direction`
    /// (stamped by the kernel) and writes frames out of `dev`.
    pub fn open(ns: &Netns, dev: &str, direction: Direction) -> anyhow::Result<Self> {
        let dev_c = std::ffi::CString::new(dev)?;
        ns.run(|| Self::open_here(&dev_c, direction))?
            .with_context(|| format!("cannot open a packet socket on {dev} in {}", ns.name()))
    }

    fn open_here(dev: &std::ffi::CStr, direction: Direction) -> io::Result<Self> {
        // SAFETY: if_nametoindex reads a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(dev.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0: the socket sees nothing until it is bound to its device, so no
        // frame of another device slips in first.
        // SAFETY: plain socket creation; the fd is owned at once.
        let fd = unsafe {
            let raw = check(
                libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0),
                "socket(AF_PACKET)",
            )?;
            OwnedFd::from_raw_fd(raw)
        };
        set_int(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            1,
            "PACKET_VNET_HDR",
        )?;
        mgrp_rt::rx::enable_rx_timestamps(&fd)?;
        setsockopt(&fd, sockopt::RcvBufForce, &(8 << 20))?;
        setsockopt(&fd, sockopt::SndBufForce, &(8 << 20))?;
        if direction == Direction::Incoming {
            set_int(
                &fd,
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                1,
                "PACKET_IGNORE_OUTGOING",
            )?;
        }
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: binding our socket to a sockaddr_ll of the right size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(r, "bind")?;
        Ok(Self { fd, direction })
    }

    /// Waits up to `timeout` for the socket to become readable (`None`: forever);
    /// true if it is.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        wait_any([self], timeout).map(|r| r.is_some())
    }

    /// Reads one frame of this socket's direction without waiting: `None` if none is
    /// queued. `buf` should hold [`MAX_FRAME`] bytes; a longer frame is cut short.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        loop {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: plain data.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut control = [0u64; 16];
            // SAFETY: plain data.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&raw mut sll).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = size_of::<[u64; 16]>();
            // SAFETY: every pointer in msg refers to a live local buffer of the stated size.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let outgoing = sll.sll_pkttype == libc::PACKET_OUTGOING;
            if outgoing != (self.direction == Direction::Outgoing) {
                continue;
            }
            let mut stamp_ns = 0;
            // SAFETY: walking the control messages the kernel wrote into `control`,
            // with the libc macros that bound every step by msg_controllen.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET
                        && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                    {
                        let ts: libc::timespec =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                        stamp_ns = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
                    }
                    c = libc::CMSG_NXTHDR(&raw const msg, c);
                }
            }
            return Ok(Some(Received {
                len: (n as usize).min(buf.len()),
                stamp_ns,
            }));
        }
    }

    /// Writes one frame, its virtio-net header first, out of the device.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: sending from a live buffer of the stated length.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Waits up to `timeout` (`None`: forever) for any of `sockets` to become readable;
/// the index of the first that is, or `None` on timeout. Timeouts have nanosecond
/// resolution (`ppoll`).
pub fn wait_any<const N: usize>(
    sockets: [&LinkSocket; N],
    timeout: Option<Duration>,
) -> io::Result<Option<usize>> {
    let mut fds = sockets.map(|s| libc::pollfd {
        fd: s.fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: fds is a live array of N pollfds; tsp is null or a live timespec.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), N as libc::nfds_t, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(fds.iter().position(|p| p.revents & libc::POLLIN != 0))
}

/// Realtime nanoseconds, the clock of the kernel's receive stamps.
pub fn realtime_ns() -> i64 {
    i64::try_from(mgrp_rt::wall_now().as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn super_packets_count_their_repeated_headers() {
        let plain = VnetHdr::default();
        assert_eq!(plain.wire_bytes(1514), 1514);
        // 66 bytes of headers and 3 segments of 1448, 1448 and 100 bytes.
        let gso = VnetHdr {
            gso_type: 1,
            hdr_len: 66,
            gso_size: 1448,
        };
        assert_eq!(gso.wire_bytes(66 + 2996), 66 + 2996 + 2 * 66);
        let mut raw = [0u8; VNET_HDR_LEN];
        raw[1] = 1;
        raw[2..4].copy_from_slice(&66u16.to_le_bytes());
        raw[4..6].copy_from_slice(&1448u16.to_le_bytes());
        assert_eq!(VnetHdr::parse(&raw), gso);
        assert_eq!(VnetHdr::parse(&raw[..3]), VnetHdr::default());
    }
}
