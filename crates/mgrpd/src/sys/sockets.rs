//! The daemon's IP sockets: raw MGRP sockets to send and receive, the
//! `IPPROTO_RAW` socket for riders sent unchanged, and the routing lookups they
//! need.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

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

/// The UDP socket of one family that MGRP packets to and from UDP peers go
/// through: bound to `port` on every address (so NATs map what it sends and what
/// comes back to one place), carrying `mark`, with kernel receive stamps, the
/// address each datagram was sent to (`IP_PKTINFO`, `IPV6_RECVPKTINFO`), ICMP
/// errors on its error queue and a read timeout so its receiver can notice
/// shutdown. One socket sends and receives: a second one bound to the port would
/// take some of the arriving datagrams.
pub fn udp_socket(v6: bool, port: u16, mark: u32, timeout: Duration) -> io::Result<Socket> {
    let (domain, addr): (Domain, SocketAddr) = if v6 {
        (Domain::IPV6, (std::net::Ipv6Addr::UNSPECIFIED, port).into())
    } else {
        (Domain::IPV4, (std::net::Ipv4Addr::UNSPECIFIED, port).into())
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if v6 {
        s.set_only_v6(true)?;
    }
    s.set_mark(mark)?;
    s.bind(&addr.into())?;
    setsockopt(&s, sockopt::ReceiveTimestampns, &true)?;
    if v6 {
        setsockopt(&s, sockopt::Ipv6RecvPacketInfo, &true)?;
        setsockopt(&s, sockopt::Ipv6RecvErr, &true)?;
    } else {
        setsockopt(&s, sockopt::Ipv4PacketInfo, &true)?;
        setsockopt(&s, sockopt::Ipv4RecvErr, &true)?;
    }
    s.set_read_timeout(Some(timeout))?;
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(s)
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

/// Finds the source addresses the kernel picks for traffic that carries a mark, on
/// any thread: the marked sockets are made once (setting the mark takes
/// CAP_NET_ADMIN, which the data-path threads give up), and each lookup only
/// connects one (a route lookup, no packet sent).
#[derive(Debug)]
pub struct SourceFinder {
    v4: std::sync::Mutex<Option<Socket>>,
    v6: std::sync::Mutex<Option<Socket>>,
}

impl SourceFinder {
    /// Sockets for both families, marked with `mark` where this process may (without
    /// the mark, lookups follow the routes any socket would).
    pub fn new(mark: u32) -> Self {
        let socket = |domain| {
            let s = Socket::new(domain, Type::DGRAM, None).ok()?;
            let _ = s.set_mark(mark);
            Some(s)
        };
        Self {
            v4: std::sync::Mutex::new(socket(Domain::IPV4)),
            v6: std::sync::Mutex::new(socket(Domain::IPV6)),
        }
    }

    /// The source address for traffic to `dst`.
    pub fn source_for(&self, dst: IpAddr) -> io::Result<IpAddr> {
        let slot = if dst.is_ipv4() { &self.v4 } else { &self.v6 };
        let s = mgrp_rt::lock(slot);
        let s = s
            .as_ref()
            .ok_or_else(|| io::Error::other("no socket to look routes up with"))?;
        // A connected socket keeps the source address of its first connection:
        // dissolve it first, so the kernel picks one for this destination.
        disconnect(s)?;
        s.connect(&SockAddr::from(SocketAddr::new(dst, 9)))?;
        s.local_addr()?
            .as_socket()
            .map(|a| a.ip())
            .ok_or_else(|| io::Error::other("no IP source address"))
    }
}

/// Dissolves a datagram socket's connection (`connect` to `AF_UNSPEC`), which also
/// forgets the source address the connection gave it.
fn disconnect(s: &Socket) -> io::Result<()> {
    // SAFETY: a valid fd and a zeroed sockaddr of the stated size with family
    // AF_UNSPEC, which the kernel reads only the family of.
    let r = unsafe {
        let mut a: libc::sockaddr = std::mem::zeroed();
        a.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(
            s.as_raw_fd(),
            &raw const a,
            size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The socket address raw sockets send to.
pub fn raw_dest(ip: IpAddr) -> SockAddr {
    SockAddr::from(SocketAddr::new(ip, 0))
}

/// Sends `buf` to `dst` as datagrams of `segment` bytes each (the last may be
/// shorter) in one system call: UDP segmentation offload (`UDP_SEGMENT`), done by
/// the device or, failing that, by the kernel just before it. Errors with
/// `EINVAL`/`EIO` where the kernel or device cannot segment; send them one by one then.
pub fn send_segmented(s: &Socket, buf: &[u8], dst: &SockAddr, segment: u16) -> io::Result<usize> {
    send_with_control(
        s,
        buf,
        dst,
        &[(libc::SOL_UDP, libc::UDP_SEGMENT, &segment.to_ne_bytes())],
    )
}

/// Sends `packet` to `dst` with up to two control messages, each `(level, type,
/// data)` with at most 8 bytes of data (in the host's byte order), without
/// allocating.
pub(super) fn send_with_control(
    s: &Socket,
    packet: &[u8],
    dst: &SockAddr,
    messages: &[(libc::c_int, libc::c_int, &[u8])],
) -> io::Result<usize> {
    // Each header plus up to 8 aligned bytes of data takes 24 bytes.
    let mut control = [0u64; 8];
    assert!(messages.len() <= 2 && messages.iter().all(|m| m.2.len() <= 8));
    let mut iov = libc::iovec {
        iov_base: packet.as_ptr().cast_mut().cast(),
        iov_len: packet.len(),
    };
    // SAFETY: zeroed msghdr is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = dst.as_ptr().cast_mut().cast();
    msg.msg_namelen = dst.len();
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = messages
        .iter()
        // SAFETY: CMSG_SPACE is pure arithmetic.
        .map(|m| unsafe { libc::CMSG_SPACE(m.2.len() as u32) } as usize)
        .sum();
    // SAFETY: msg_control points at a zeroed, aligned buffer of at least
    // msg_controllen bytes (checked above), which holds every header and its data
    // written here.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        for &(level, kind, data) in messages {
            (*c).cmsg_level = level;
            (*c).cmsg_type = kind;
            (*c).cmsg_len = libc::CMSG_LEN(data.len() as u32) as usize;
            std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
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
