//! Kernel timestamps and error queues: transmit stamps named per send, ICMP errors
//! about sent packets, and datagrams received with their receive stamps.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag, recvmsg, setsockopt, sockopt,
};

use mgrp_core::WallTime;
use socket2::{SockAddr, Socket};

use mgrp_rt::clock::wall_time;
use mgrp_rt::wait::poll_timeout;

use crate::sent::FINGERPRINT_BYTES;

/// An ICMP error about a packet a socket sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError {
    /// Where the packet that drew it was going.
    pub destination: IpAddr,
    /// Its destination port (UDP), or 0.
    pub port: u16,
    /// ICMP (or ICMPv6) type.
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// The error number the kernel made of it (`ee_errno`).
    pub errno: i32,
    /// The start of the packet it quotes (from the MGRP header on), as far as it
    /// quotes it, up to [`FINGERPRINT_BYTES`].
    pub quoted: [u8; FINGERPRINT_BYTES],
    /// How many bytes of `quoted` it quoted.
    pub quoted_len: usize,
}

impl IcmpError {
    /// The bytes it quotes of the packet that drew it.
    pub fn quoted(&self) -> &[u8] {
        &self.quoted[..self.quoted_len]
    }
}

/// What a socket's error queue held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuedError {
    /// An ICMP error about a packet it sent.
    Icmp(IcmpError),
    /// A kernel transmit stamp of the packet sent with this id (see
    /// [`send_with_tx_id`]).
    Departed {
        id: u32,
        at: WallTime,
        point: StampPoint,
    },
    /// Something else (read and dropped).
    Other,
}

/// Where on its way out the kernel stamped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampPoint {
    /// As it entered the device's egress queue (`SCM_TSTAMP_SCHED`).
    Queued,
    /// As the device took it from that queue (`SCM_TSTAMP_SND`).
    Sent,
}

/// `ee_info` of a stamp taken as the device took the packet (linux/errqueue.h; not
/// in libc).
const SCM_TSTAMP_SND: u32 = 0;
/// `ee_info` of a stamp taken as the packet entered the egress queue.
const SCM_TSTAMP_SCHED: u32 = 1;

/// `SCM_TS_OPT_ID` (Linux 6.13): the timestamp id of one `sendmsg`, given as a
/// control message. Not in libc yet; the value of the generic socket header, which
/// x86-64 and arm64 use.
const SCM_TS_OPT_ID: libc::c_int = 81;

/// Whether the running kernel takes [`SCM_TS_OPT_ID`] (Linux 6.13 and later). Older
/// kernels refuse a `sendmsg` that carries it, so it must be known before the first
/// probe.
pub fn kernel_takes_tx_ids() -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 13)
}

/// Asks the kernel for two software transmit stamps of every packet `s` sends, read
/// back from its error queue with [`next_error`]: one as the packet enters the
/// device's egress queue (`TX_SCHED`), taken inside the send call, and one as the
/// device takes it (`TX_SOFTWARE`), which a shaper on that device delays; only the
/// stamps and the send's id (`SOFTWARE | OPT_ID | OPT_TSONLY`), not the packet. The
/// error queue gets a large buffer so a long train's stamps fit while they wait.
pub fn enable_tx_stamps(s: &Socket) -> io::Result<()> {
    // nix names no TX_SCHED flag; the bit is the kernel's.
    let flags = TimestampingFlag::from_bits_retain(libc::SOF_TIMESTAMPING_TX_SCHED)
        | TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_ID
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_TSONLY;
    set_tx_stamping(s, flags)
}

/// Sets `s`'s stamping `flags` and gives its error queue room for a long train's
/// stamps.
fn set_tx_stamping(s: &Socket, flags: TimestampingFlag) -> io::Result<()> {
    setsockopt(s, sockopt::Timestamping, &flags)?;
    // Above net.core.rmem_max needs CAP_NET_ADMIN, which mgrpd has while it sets up.
    if setsockopt(s, sockopt::RcvBufForce, &(8 << 20)).is_err() {
        let _ = s.set_recv_buffer_size(8 << 20);
    }
    Ok(())
}

/// Makes `s` report the transmit stamps a send asks for with [`send_with_tx_id`]
/// (`per_packet`), and stamp nothing else it sends: for a socket that sends probes
/// and other packets alike (the UDP socket). Its error queue gets a large buffer.
pub fn enable_tx_stamp_reports(s: &Socket) -> io::Result<()> {
    let flags = TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_ID
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_TSONLY;
    set_tx_stamping(s, flags)
}

/// Sends `packet` to `dst` with the transmit-stamp id `id` (`SCM_TS_OPT_ID`), so its
/// stamp on the error queue names it whatever else the socket sent or failed to send.
/// With `per_packet` the send also asks for its two stamps itself (an `SO_TIMESTAMPING`
/// control message), on a socket set up with [`enable_tx_stamp_reports`].
pub fn send_with_tx_id(
    s: &Socket,
    packet: &[u8],
    dst: &SockAddr,
    id: u32,
    per_packet: bool,
) -> io::Result<usize> {
    let id = id.to_ne_bytes();
    let flags =
        (libc::SOF_TIMESTAMPING_TX_SCHED | libc::SOF_TIMESTAMPING_TX_SOFTWARE).to_ne_bytes();
    let messages: [(libc::c_int, libc::c_int, &[u8]); 2] = [
        (libc::SOL_SOCKET, SCM_TS_OPT_ID, &id),
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags),
    ];
    super::sockets::send_with_control(s, packet, dst, &messages[..if per_packet { 2 } else { 1 }])
}

/// Waits up to `timeout` until one of `fds` has something on its error queue;
/// returns which (`POLLERR` set).
pub fn wait_errors(fds: &[BorrowedFd<'_>], timeout: Duration) -> Vec<bool> {
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::empty()))
        .collect();
    let ready = poll(&mut pfds, poll_timeout(timeout)).unwrap_or(0) > 0;
    pfds.iter()
        .map(|p| ready && p.revents().is_some_and(|r| r.contains(PollFlags::POLLERR)))
        .collect()
}

/// Takes one entry off `fd`'s error queue without waiting; `Ok(None)` when it is
/// empty.
pub fn next_error(fd: BorrowedFd<'_>) -> io::Result<Option<QueuedError>> {
    let mut data = [0u8; 256];
    // An ICMP error on a socket that asks for packet info and receive stamps (the
    // UDP sockets) comes with those of the packet that carried it too: without room
    // for them the kernel cuts the control messages short and the error is lost.
    let mut cmsgs = nix::cmsg_space!(
        libc::sock_extended_err,
        libc::sockaddr_in6,
        [libc::timespec; 3],
        libc::in6_pktinfo,
        libc::in_pktinfo,
        libc::timespec
    );
    let mut icmp = None;
    let mut stamp = None;
    let mut stamp_id = None;
    let mut extended = |ee: &libc::sock_extended_err| match ee.ee_origin {
        libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6 => {
            icmp = Some((ee.ee_type, ee.ee_code, ee.ee_errno as i32));
        }
        // `ee_info` says which stamp it is.
        libc::SO_EE_ORIGIN_TIMESTAMPING => {
            let point = match ee.ee_info {
                SCM_TSTAMP_SND => Some(StampPoint::Sent),
                SCM_TSTAMP_SCHED => Some(StampPoint::Queued),
                _ => None,
            };
            stamp_id = point.map(|p| (ee.ee_data, p));
        }
        _ => {}
    };
    let got = receive(
        fd.as_raw_fd(),
        &mut data,
        &mut cmsgs,
        MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        |c| match c {
            // The software stamp is the first of three.
            ControlMessageOwned::ScmTimestampsns(ts) => {
                stamp = Some(wall_time(&ts.system));
            }
            ControlMessageOwned::Ipv4RecvErr(ee, _) | ControlMessageOwned::Ipv6RecvErr(ee, _) => {
                extended(&ee);
            }
            _ => {}
        },
    )?;
    let Some((len, to)) = got else {
        return Ok(None);
    };
    let (destination, port) = (to.ip(), to.port());
    Ok(Some(match (icmp, stamp_id, stamp) {
        // The address is the destination of the packet that drew the error; the data
        // read is what the error quotes of that packet past its IP (and UDP) header.
        (Some((icmp_type, icmp_code, errno)), _, _) => {
            let quoted_len = len.min(FINGERPRINT_BYTES).min(data.len());
            let mut quoted = [0; FINGERPRINT_BYTES];
            quoted[..quoted_len].copy_from_slice(&data[..quoted_len]);
            QueuedError::Icmp(IcmpError {
                destination,
                port,
                icmp_type,
                icmp_code,
                errno,
                quoted,
                quoted_len,
            })
        }
        (None, Some((id, point)), Some(at)) if at != WallTime::UNIX_EPOCH => {
            QueuedError::Departed { id, at, point }
        }
        _ => QueuedError::Other,
    }))
}

/// One datagram from [`recv_stamped`].
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes read.
    pub len: usize,
    /// Sender address.
    pub from: IpAddr,
    /// Sender's port (0 for raw sockets).
    pub port: u16,
    /// Kernel receive stamp, if the kernel gave one.
    pub stamp: Option<WallTime>,
    /// The address the packet was sent to, when the kernel said (IPv6 packet info).
    pub to: Option<IpAddr>,
}

/// Room for the control messages of one received MGRP packet.
pub fn recv_cmsg_buffer() -> Vec<u8> {
    // A socket that also reports transmit stamps adds its receive stamps as three
    // timespecs.
    nix::cmsg_space!(libc::timespec, libc::in6_pktinfo, [libc::timespec; 3])
}

/// Receives one datagram with its kernel timestamp, using `cmsgs` (from
/// [`recv_cmsg_buffer`]) for the control messages. Returns `Ok(None)` on timeout, or
/// at once when none is waiting if `wait` is false.
pub fn recv_stamped(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    cmsgs: &mut Vec<u8>,
    wait: bool,
) -> io::Result<Option<Received>> {
    let mut stamp = None;
    let mut to = None;
    let flags = if wait {
        MsgFlags::empty()
    } else {
        MsgFlags::MSG_DONTWAIT
    };
    let got = receive(fd.as_raw_fd(), buf, cmsgs, flags, |c| match c {
        ControlMessageOwned::ScmTimestampns(ts) => {
            stamp = Some(wall_time(&ts));
        }
        ControlMessageOwned::Ipv6PacketInfo(info) => {
            to = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
        }
        ControlMessageOwned::Ipv4PacketInfo(info) => {
            to = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                info.ipi_addr.s_addr,
            ))));
        }
        _ => {}
    })?;
    Ok(got.map(|(len, from)| Received {
        len,
        from: from.ip(),
        port: from.port(),
        stamp,
        to,
    }))
}

/// One `recvmsg` into `buf` with `flags`, handing each control message to `cmsg`.
/// Returns the bytes read and the address the kernel gave (the sender, or for the
/// error queue the original destination), or `None` when the call would block, timed
/// out or was interrupted.
// nix takes the control buffer as a Vec (it sizes the call by its capacity).
#[allow(clippy::ptr_arg)]
fn receive(
    fd: RawFd,
    buf: &mut [u8],
    cmsgs: &mut Vec<u8>,
    flags: MsgFlags,
    mut cmsg: impl FnMut(ControlMessageOwned),
) -> io::Result<Option<(usize, SocketAddr)>> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = match recvmsg::<SockaddrStorage>(fd, &mut iov, Some(cmsgs), flags) {
        Ok(m) => m,
        Err(Errno::EAGAIN | Errno::EINTR | Errno::ETIMEDOUT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    for c in msg.cmsgs()? {
        cmsg(c);
    }
    let unspecified = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
    let from = msg.address.as_ref().map_or(unspecified, |a| {
        if let Some(v4) = a.as_sockaddr_in() {
            SocketAddr::from((v4.ip(), v4.port()))
        } else if let Some(v6) = a.as_sockaddr_in6() {
            SocketAddr::from((v6.ip(), v6.port()))
        } else {
            unspecified
        }
    });
    Ok(Some((msg.bytes, from)))
}
