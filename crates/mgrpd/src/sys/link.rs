//! The link-layer socket through which unchanged super-packets leave whole.

use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

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
