//! Every system call of the daemon that the standard library and socket2 do not wrap.
//! Most go through nix (clocks, `recvmsg` with timestamp and error control messages,
//! socket options, timerfd, eventfd, poll, CPU affinity, memory locking, user
//! switching); what nix does not cover is written here by hand, and these are the
//! daemon's only `unsafe` blocks: `sendmsg` with a transmit-stamp id, SCHED_FIFO,
//! capability sets and the ambient set.
//!
//! This is also the one place where kernel times become the two clock types of
//! mgrp-core: `CLOCK_MONOTONIC` → [`MonoTime`], `CLOCK_REALTIME` → [`WallTime`].

#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CpuSet, sched_setaffinity};
use nix::sys::eventfd::EfdFlags;
use nix::sys::mman::{MlockAllFlags, mlockall};
use nix::sys::prctl;
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag, recvmsg, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{
    ClockId as TimerClock, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags,
};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{self, Pid};

use mgrp_core::{MonoTime, WallTime};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

fn clock(id: ClockId) -> u64 {
    // Cannot fail for these two clocks, which always exist on Linux.
    let ts = clock_gettime(id).unwrap_or_else(|_| TimeSpec::new(0, 0));
    timespec_nanos(&ts)
}

fn timespec_nanos(ts: &TimeSpec) -> u64 {
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Now, on the monotonic clock.
pub fn mono_now() -> MonoTime {
    MonoTime::from_nanos(clock(ClockId::CLOCK_MONOTONIC))
}

/// Now, on the realtime clock.
pub fn wall_now() -> WallTime {
    WallTime::from_nanos(clock(ClockId::CLOCK_REALTIME))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A raw IP socket of protocol `protocol` for sending MGRP packets (the kernel writes
/// the IP header), carrying `mark` so policy routing keeps it out of the tunnel.
pub fn mgrp_send_socket(v6: bool, protocol: u8, mark: u32) -> io::Result<Socket> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::RAW, Some(Protocol::from(i32::from(protocol))))?;
    s.set_mark(mark)?;
    s.set_nonblocking(false)?;
    // A raw socket gets a copy of every arriving packet of its protocol, and this one
    // is never read: the copies would fill its receive buffer, which the error queue
    // shares, and transmit stamps and ICMP errors would be dropped from then on. A
    // filter that accepts nothing keeps it empty (the error queue is not filtered).
    s.attach_filter(&[socket2::SockFilter::new(
        (libc::BPF_RET | libc::BPF_K) as u16,
        0,
        0,
        0,
    )])?;
    // Large enough for a long back-to-back train.
    let _ = s.set_send_buffer_size(4 << 20);
    // ICMP errors about what it sent (a peer whose mgrpd is gone answers "protocol
    // unreachable") queue on its error queue, read by `recv_error`.
    if v6 {
        setsockopt(&s, sockopt::Ipv6RecvErr, &true)?;
    } else {
        setsockopt(&s, sockopt::Ipv4RecvErr, &true)?;
    }
    Ok(s)
}

/// An ICMP error about a packet a socket sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError {
    /// Where the packet that drew it was going.
    pub destination: IpAddr,
    /// ICMP (or ICMPv6) type.
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
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
    setsockopt(s, sockopt::Timestamping, &flags)?;
    // Above net.core.rmem_max needs CAP_NET_ADMIN, which mgrpd has while it sets up.
    if setsockopt(s, sockopt::RcvBufForce, &(8 << 20)).is_err() {
        let _ = s.set_recv_buffer_size(8 << 20);
    }
    Ok(())
}

/// Sends `packet` to `dst` with the transmit-stamp id `id` (`SCM_TS_OPT_ID`), so its
/// stamp on the error queue names it whatever else the socket sent or failed to send.
pub fn send_with_tx_id(s: &Socket, packet: &[u8], dst: &SockAddr, id: u32) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: packet.as_ptr().cast_mut().cast(),
        iov_len: packet.len(),
    };
    // One control message with a u32: header plus aligned data fit in 32 bytes.
    let mut control = [0u64; 4];
    // SAFETY: zeroed msghdr is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = dst.as_ptr().cast_mut().cast();
    msg.msg_namelen = dst.len();
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is pure arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u32>() as u32) } as usize;
    // SAFETY: msg_control points at a zeroed, aligned buffer of at least
    // msg_controllen bytes, so the first header and its data lie inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = SCM_TS_OPT_ID;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u32>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u32>(), id);
    }
    // SAFETY: every pointer in msg refers to live buffers of the stated sizes; the
    // kernel only reads them.
    let n = unsafe { libc::sendmsg(s.as_raw_fd(), &raw const msg, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Waits up to `timeout` until one of `fds` has something on its error queue;
/// returns which (`POLLERR` set).
pub fn wait_errors<const N: usize>(fds: [BorrowedFd<'_>; N], timeout: Duration) -> [bool; N] {
    let mut pfds = fds.map(|fd| PollFd::new(fd, PollFlags::empty()));
    let ready = poll(&mut pfds, poll_timeout(timeout)).unwrap_or(0) > 0;
    pfds.map(|p| ready && p.revents().is_some_and(|r| r.contains(PollFlags::POLLERR)))
}

fn poll_timeout(d: Duration) -> PollTimeout {
    PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX)
}

/// Takes one entry off `fd`'s error queue without waiting; `Ok(None)` when it is
/// empty.
pub fn next_error(fd: BorrowedFd<'_>) -> io::Result<Option<QueuedError>> {
    let mut data = [0u8; 256];
    let mut cmsgs = nix::cmsg_space!(
        libc::sock_extended_err,
        libc::sockaddr_in6,
        [libc::timespec; 3]
    );
    let mut icmp = None;
    let mut stamp = None;
    let mut stamp_id = None;
    let mut extended = |ee: &libc::sock_extended_err| match ee.ee_origin {
        libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6 => {
            icmp = Some((ee.ee_type, ee.ee_code));
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
                stamp = Some(WallTime::from_nanos(timespec_nanos(&ts.system)));
            }
            ControlMessageOwned::Ipv4RecvErr(ee, _) | ControlMessageOwned::Ipv6RecvErr(ee, _) => {
                extended(&ee);
            }
            _ => {}
        },
    )?;
    let Some((_, destination)) = got else {
        return Ok(None);
    };
    Ok(Some(match (icmp, stamp_id, stamp) {
        // The address is the destination of the packet that drew the error.
        (Some((icmp_type, icmp_code)), _, _) => QueuedError::Icmp(IcmpError {
            destination,
            icmp_type,
            icmp_code,
        }),
        (None, Some((id, point)), Some(at)) if at != WallTime::UNIX_EPOCH => {
            QueuedError::Departed { id, at, point }
        }
        _ => QueuedError::Other,
    }))
}

/// An `AF_PACKET` raw socket that takes a virtio-net header before each frame
/// (`PACKET_VNET_HDR`, which the kernel allows on raw packet sockets only): a TCP
/// super-packet read from a TUN with offloads leaves through it as one GSO packet,
/// segmented (if at all) by the device it goes out of.
pub fn link_gso_socket() -> io::Result<Socket> {
    // Protocol 0: it sends only, and receives nothing.
    let s = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0)))?;
    let one: libc::c_int = 1;
    // SAFETY: valid fd; the option value is a c_int of the stated size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(s)
}

/// Sends the frame `link_header` + `packet` (an IP packet, `ethertype` `ETH_P_IP` or
/// `ETH_P_IPV6`) with the virtio-net header `vnet` out of interface `ifindex`,
/// through a [`link_gso_socket`]. `link_header` is empty for a device without link
/// headers.
pub fn send_link(
    s: &Socket,
    ifindex: u32,
    ethertype: u16,
    vnet: &[u8],
    link_header: &[u8],
    packet: &[u8],
) -> io::Result<usize> {
    // SAFETY: a zeroed sockaddr_ll is valid; its fields are set below.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as libc::c_ushort;
    addr.sll_protocol = ethertype.to_be();
    addr.sll_ifindex = ifindex as libc::c_int;
    let mut iov = [
        libc::iovec {
            iov_base: vnet.as_ptr().cast_mut().cast(),
            iov_len: vnet.len(),
        },
        libc::iovec {
            iov_base: link_header.as_ptr().cast_mut().cast(),
            iov_len: link_header.len(),
        },
        libc::iovec {
            iov_base: packet.as_ptr().cast_mut().cast(),
            iov_len: packet.len(),
        },
    ];
    // SAFETY: zeroed msghdr is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&raw mut addr).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len();
    // SAFETY: every pointer in msg refers to live buffers of the stated sizes; the
    // kernel only reads them.
    let n = unsafe { libc::sendmsg(s.as_raw_fd(), &raw const msg, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// An `IPPROTO_RAW` socket for sending riders unchanged (the packet brings its own IP
/// header), carrying `mark`.
pub fn raw_ip_socket(v6: bool, mark: u32) -> io::Result<Socket> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
    s.set_mark(mark)?;
    if v6 {
        s.set_header_included_v6(true)?;
    }
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(s)
}

/// A raw IP socket receiving MGRP packets, with kernel receive timestamps
/// (`SO_TIMESTAMPNS`), for IPv6 the address each packet was sent to
/// (`IPV6_RECVPKTINFO`; an IPv4 raw socket hands over the whole header), and a read
/// timeout so its thread can notice shutdown.
pub fn mgrp_recv_socket(v6: bool, protocol: u8, timeout: Duration) -> io::Result<Socket> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::RAW, Some(Protocol::from(i32::from(protocol))))?;
    setsockopt(&s, sockopt::ReceiveTimestampns, &true)?;
    if v6 {
        setsockopt(&s, sockopt::Ipv6RecvPacketInfo, &true)?;
    }
    s.set_read_timeout(Some(timeout))?;
    let _ = s.set_recv_buffer_size(8 << 20);
    Ok(s)
}

/// One datagram from [`recv_stamped`].
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes read.
    pub len: usize,
    /// Sender address.
    pub from: IpAddr,
    /// Kernel receive stamp, if the kernel gave one.
    pub stamp: Option<WallTime>,
    /// The address the packet was sent to, when the kernel said (IPv6 packet info).
    pub to: Option<IpAddr>,
}

/// Room for the control messages of one received MGRP packet.
pub fn recv_cmsg_buffer() -> Vec<u8> {
    nix::cmsg_space!(libc::timespec, libc::in6_pktinfo)
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
            stamp = Some(WallTime::from_nanos(timespec_nanos(&ts)));
        }
        ControlMessageOwned::Ipv6PacketInfo(info) => {
            to = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
        }
        _ => {}
    })?;
    Ok(got.map(|(len, from)| Received {
        len,
        from,
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
) -> io::Result<Option<(usize, IpAddr)>> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = match recvmsg::<SockaddrStorage>(fd, &mut iov, Some(cmsgs), flags) {
        Ok(m) => m,
        Err(Errno::EAGAIN | Errno::EINTR | Errno::ETIMEDOUT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    for c in msg.cmsgs()? {
        cmsg(c);
    }
    let from = msg
        .address
        .as_ref()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| {
            if let Some(v4) = a.as_sockaddr_in() {
                IpAddr::V4(v4.ip())
            } else if let Some(v6) = a.as_sockaddr_in6() {
                IpAddr::V6(v6.ip())
            } else {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            }
        });
    Ok(Some((msg.bytes, from)))
}

/// The source address the kernel picks for traffic to `dst` that carries `mark`
/// (and so bypasses the tunnel's table): the address riders must keep as their source.
pub fn source_for(dst: IpAddr, mark: u32) -> io::Result<IpAddr> {
    let domain = if dst.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, None)?;
    s.set_mark(mark)?;
    s.connect(&SockAddr::from(SocketAddr::new(dst, 9)))?;
    s.local_addr()?
        .as_socket()
        .map(|a| a.ip())
        .ok_or_else(|| io::Error::other("no IP source address"))
}

/// The socket address raw sockets send to.
pub fn raw_dest(ip: IpAddr) -> SockAddr {
    SockAddr::from(SocketAddr::new(ip, 0))
}

/// A `CLOCK_MONOTONIC` timerfd armed with absolute deadlines.
#[derive(Debug)]
pub struct Timer {
    fd: TimerFd,
}

impl Timer {
    /// A new, disarmed timer.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: TimerFd::new(TimerClock::CLOCK_MONOTONIC, TimerFlags::TFD_CLOEXEC)?,
        })
    }

    /// Arms the timer to fire at `at` (absolute, and at least 1 ns: zero would disarm
    /// it). Arming also clears an expiry that was never read.
    fn arm(&self, at: MonoTime) -> io::Result<()> {
        let n = at.as_nanos().max(1);
        let when = TimeSpec::new(
            (n / 1_000_000_000) as libc::time_t,
            (n % 1_000_000_000) as libc::c_long,
        );
        self.fd.set(
            Expiration::OneShot(when),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )?;
        Ok(())
    }

    /// Blocks until the monotonic clock reaches `at` (returns at once if it has).
    pub fn sleep_until(&self, at: MonoTime) -> io::Result<()> {
        if at.as_nanos() == 0 {
            return Ok(());
        }
        self.arm(at)?;
        self.fd.wait()?;
        Ok(())
    }

    /// Blocks until the monotonic clock reaches `at` or `event` is signalled,
    /// whichever comes first; returns whether `event` was (its count is then cleared).
    pub fn sleep_until_or(&self, at: MonoTime, event: &EventFd) -> io::Result<bool> {
        self.arm(at)?;
        let mut fds = [
            PollFd::new(self.fd.as_fd(), PollFlags::POLLIN),
            PollFd::new(event.fd.as_fd(), PollFlags::POLLIN),
        ];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => break,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let signalled = fds[1]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if signalled {
            event.clear();
        }
        Ok(signalled)
    }
}

/// An eventfd: one thread signals, another sleeps until it is signalled.
#[derive(Debug)]
pub struct EventFd {
    fd: nix::sys::eventfd::EventFd,
}

impl EventFd {
    /// A new, unsignalled eventfd (non-blocking).
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: nix::sys::eventfd::EventFd::from_flags(
                EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
            )?,
        })
    }

    /// Signals it (a no-op if it is signalled already, short of 2^64 signals).
    pub fn signal(&self) {
        // Only fails when the count would overflow, which leaves it signalled anyway.
        let _ = self.fd.write(1);
    }

    /// Clears it (non-blocking: an unsignalled eventfd returns at once).
    pub fn clear(&self) {
        let _ = self.fd.read();
    }

    /// Blocks until it is signalled or `timeout` passes, then clears it; returns
    /// whether it was signalled.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        let signalled = poll(&mut fds, poll_timeout(timeout)).unwrap_or(0) > 0
            && fds[0]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if signalled {
            self.clear();
        }
        signalled
    }
}

/// Sleeps on the timer until `margin` before `deadline`, then spins on the monotonic
/// clock until `deadline`. Returns how long it spun.
pub fn wait_until(timer: &Timer, deadline: MonoTime, margin: Duration) -> Duration {
    let wake = MonoTime::from_nanos(
        deadline
            .as_nanos()
            .saturating_sub(u64::try_from(margin.as_nanos()).unwrap_or(u64::MAX)),
    );
    if mono_now() < wake {
        let _ = timer.sleep_until(wake);
    }
    let start = mono_now();
    spin_until(deadline).saturating_since(start)
}

/// Spins on the monotonic clock until `deadline`; returns the time the spin ended.
pub fn spin_until(deadline: MonoTime) -> MonoTime {
    loop {
        let now = mono_now();
        if now >= deadline {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// Asks for SCHED_FIFO at `priority` for the calling thread.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 = calling thread; param is valid.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) }).map(drop)
}

/// Sets the calling thread's timer slack (nanoseconds); 1 is the smallest.
pub fn set_timer_slack(ns: u64) {
    let _ = prctl::set_timerslack(ns);
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU index out of range"))?;
    sched_setaffinity(Pid::from_raw(0), &set)?;
    Ok(())
}

/// Locks the process's memory so the pacer never takes a page fault mid-train.
pub fn lock_memory() -> io::Result<()> {
    mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE)?;
    Ok(())
}

/// Capability numbers mgrpd cares about (linux/capability.h).
pub mod cap {
    /// Interfaces, routes, rules, sysctls of the network namespace.
    pub const NET_ADMIN: u32 = 12;
    /// Raw sockets.
    pub const NET_RAW: u32 = 13;
    /// Locking memory beyond RLIMIT_MEMLOCK.
    pub const IPC_LOCK: u32 = 14;
    /// Real-time scheduling.
    pub const SYS_NICE: u32 = 23;
}

/// The process's effective capability set, from `/proc/self/status`.
pub fn effective_capabilities() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| io::Error::other("no CapEff line in /proc/self/status"))
}

/// The bit of capability `cap` in a mask.
pub const fn cap_bit(cap: u32) -> u64 {
    1 << cap
}

/// Header of capget/capset (linux/capability.h, version 3: two 32-bit words).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// One 32-bit word of the three capability sets.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Keeps only the capabilities in `keep` (a mask of [`cap_bit`]s) in the calling
/// thread's effective and permitted sets, for good: nothing is inheritable or
/// ambient afterwards. Capabilities belong to threads, so each thread limits its
/// own, and threads it starts later inherit what is left.
pub fn limit_capabilities(keep: u64) -> io::Result<()> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut now = [CapData::default(); 2];
    // SAFETY: header and two data words as the version-3 ABI requires.
    check(unsafe {
        libc::syscall(libc::SYS_capget, &raw mut header, now.as_mut_ptr()) as libc::c_int
    })?;
    let had = u64::from(now[0].permitted) | (u64::from(now[1].permitted) << 32);
    let keep = keep & had;
    let data = [
        CapData {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        CapData {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: as above; capset only reads both.
    check(unsafe {
        libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) as libc::c_int
    })?;
    let zero: libc::c_ulong = 0;
    // SAFETY: integer arguments only. Fails on kernels without ambient sets, which
    // then have nothing to clear.
    let _ = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            zero,
            zero,
            zero,
        )
    };
    Ok(())
}

/// User and group ids of the user called `name`.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let user = unistd::User::from_name(name).ok()??;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// Becomes user `uid` with group `gid` and no supplementary groups, keeping the
/// capabilities in `keep`. Call it before starting threads: the ids change for the
/// whole process, the capabilities only for the calling thread.
pub fn switch_user(uid: u32, gid: u32, keep: u64) -> io::Result<()> {
    // Keeps the permitted set across setuid.
    prctl::set_keepcaps(true)?;
    unistd::setgroups(&[])?;
    let gid = unistd::Gid::from_raw(gid);
    unistd::setresgid(gid, gid, gid)?;
    let uid = unistd::Uid::from_raw(uid);
    unistd::setresuid(uid, uid, uid)?;
    prctl::set_keepcaps(false)?;
    // The change of user emptied the effective set; take back what is kept.
    limit_capabilities(keep)
}

/// Forbids this process and its children ever gaining privileges through exec.
pub fn no_new_privileges() -> io::Result<()> {
    prctl::set_no_new_privs()?;
    Ok(())
}

/// The id of the group called `name`.
pub fn group_id(name: &str) -> Option<u32> {
    Some(unistd::Group::from_name(name).ok()??.gid.as_raw())
}

/// Sets a /proc/sys knob of an interface, e.g. `("ipv4", "mgrp0", "rp_filter", "2")`.
pub fn set_if_sysctl(family: &str, ifname: &str, key: &str, value: &str) -> io::Result<()> {
    std::fs::write(format!("/proc/sys/net/{family}/conf/{ifname}/{key}"), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let a = mono_now();
        let b = mono_now();
        assert!(b >= a);
        // Realtime is after 2020.
        assert!(wall_now().as_nanos() > 1_577_836_800_000_000_000);
    }

    #[test]
    fn users_and_groups_by_name() {
        assert_eq!(user_ids("root"), Some((0, 0)));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(user_ids("no-such-user-mgrp"), None);
        assert_eq!(group_id("no-such-group-mgrp"), None);
    }

    #[test]
    fn timer_waits_until_deadline() {
        let t = Timer::new().unwrap();
        let deadline = mono_now().saturating_add(Duration::from_micros(500));
        let spun = wait_until(&t, deadline, Duration::from_micros(150));
        assert!(mono_now() >= deadline);
        assert!(spun <= Duration::from_micros(500), "{spun:?}");
        // Without a margin it only sleeps (the timer never fires early).
        let deadline = mono_now().saturating_add(Duration::from_micros(500));
        let spun = wait_until(&t, deadline, Duration::ZERO);
        assert!(mono_now() >= deadline);
        assert!(spun < Duration::from_micros(100), "{spun:?}");
    }
}
