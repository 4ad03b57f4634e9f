//! Datagrams received with the kernel's receive stamp (`SO_TIMESTAMPNS`, taken as
//! the packet arrived, on the realtime clock).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use nix::sys::time::TimeSpec;

use mgrp_core::WallTime;

use crate::clock::wall_time;

/// Asks the kernel to stamp every datagram `s` receives.
pub fn enable_rx_timestamps<F: AsFd>(s: &F) -> io::Result<()> {
    setsockopt(s, sockopt::ReceiveTimestampns, &true)?;
    Ok(())
}

/// Receives one datagram into `buf`: its length and the kernel's receive stamp, or
/// `None` for the stamp if the kernel gave none. A read timeout set on the socket
/// surfaces as `WouldBlock`.
pub fn recv_stamped<F: AsRawFd>(s: &F, buf: &mut [u8]) -> io::Result<(usize, Option<WallTime>)> {
    recv_stamped_from(s, buf).map(|(n, stamp, _)| (n, stamp))
}

/// [`recv_stamped`], and the address the datagram came from (when the socket has
/// one: an IP socket's sender).
pub fn recv_stamped_from<F: AsRawFd>(
    s: &F,
    buf: &mut [u8],
) -> io::Result<(usize, Option<WallTime>, Option<std::net::SocketAddr>)> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut cmsgs = nix::cmsg_space!(TimeSpec);
    let msg = recvmsg::<nix::sys::socket::SockaddrStorage>(
        s.as_raw_fd(),
        &mut iov,
        Some(&mut cmsgs),
        MsgFlags::empty(),
    )?;
    let stamp = msg.cmsgs()?.find_map(|c| match c {
        ControlMessageOwned::ScmTimestampns(ts) => Some(wall_time(&ts)),
        _ => None,
    });
    let from = msg.address.and_then(|a| {
        a.as_sockaddr_in()
            .map(|v4| std::net::SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
            .or_else(|| {
                a.as_sockaddr_in6()
                    .map(|v6| std::net::SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
            })
    });
    Ok((msg.bytes, stamp, from))
}

/// Whether a receive's (or a send's) error only says nothing came in time (a read
/// timeout, a non-blocking socket with nothing ready, an interrupted call): the caller
/// goes on waiting.
pub fn nothing_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Duration;

    use super::*;
    use crate::clock::wall_now;

    #[test]
    fn a_datagram_arrives_with_its_stamp() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        enable_rx_timestamps(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = wall_now();
        tx.send_to(b"stamped", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 64];
        let (n, stamp, from) = recv_stamped_from(&rx, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"stamped");
        assert_eq!(from, Some(tx.local_addr().unwrap()));
        let stamp = stamp.expect("the kernel stamps what it receives");
        assert!(stamp >= before && stamp <= wall_now());
        // Nothing waiting: the read timeout ends the call.
        rx.set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let e = recv_stamped(&rx, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
