//! This host's TCP connections as the kernel sees them, through `sock_diag`
//! (`NETLINK_SOCK_DIAG`, the interface `ss` uses): for every connection to a given
//! peer, its addresses, congestion control, the raw `struct tcp_info`, which
//! [`crate::tcpinfo`] reads, and BBR's own model of the path where the connection
//! runs BBR. One dump lists every socket of the namespace without
//! touching them; it needs no privilege for the caller's own sockets and
//! `CAP_NET_ADMIN` for nothing here.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::netlink::{self, End};

/// One TCP connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// Its local address.
    pub local: SocketAddr,
    /// Its peer's address.
    pub remote: SocketAddr,
    /// TCP state (1 established, …, as in the kernel).
    pub state: u8,
    /// Congestion control ("cubic", "bbr"), if the kernel said.
    pub congestion: Option<String>,
    /// The raw `struct tcp_info`.
    pub info: Vec<u8>,
    /// BBR's model of the path, for a connection that runs BBR.
    pub bbr: Option<crate::tcpinfo::BbrInfo>,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_VEGASINFO: u16 = 3;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_BBRINFO: u16 = 16;

/// Every established TCP connection of this namespace whose peer is `peer` (any
/// port), IPv4 or IPv6 as `peer` is.
pub fn connections_to(peer: IpAddr) -> io::Result<Vec<Connection>> {
    let family = if peer.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    Ok(dump(family as u8)?
        .into_iter()
        .filter(|c| c.remote.ip() == peer)
        .collect())
}

/// Every established TCP connection of `family`.
pub fn dump(family: u8) -> io::Result<Vec<Connection>> {
    let mut socket = netlink::Socket::open(libc::NETLINK_SOCK_DIAG)?;
    let mut out = Vec::new();
    socket.dump(&request(family), |kind, body| {
        if kind == SOCK_DIAG_BY_FAMILY
            && let Some(c) = connection(body)
        {
            out.push(c);
        }
    })?;
    Ok(out)
}

/// A dump request for established TCP sockets of `family`, with `tcp_info`, the
/// congestion control and its own information.
fn request(family: u8) -> Vec<u8> {
    // struct inet_diag_req_v2: family, protocol, extensions, pad, states, then the
    // socket id (48 bytes of zeros: any).
    let mut r = vec![0u8; 56];
    r[0] = family;
    r[1] = libc::IPPROTO_TCP as u8;
    // The extensions are one byte, so BBR's (16) cannot be asked for by its own bit:
    // the kernel gives each congestion control's information (BBR's, Vegas's, DCTCP's,
    // each under its own attribute) to a request with the Vegas bit, as `ss` asks.
    r[2] = (1 << (INET_DIAG_INFO - 1))
        | (1 << (INET_DIAG_VEGASINFO - 1))
        | (1 << (INET_DIAG_CONG - 1));
    // States: established only (TCP_ESTABLISHED = 1).
    r[4..8].copy_from_slice(&(1u32 << 1).to_ne_bytes());
    netlink::dump_request(SOCK_DIAG_BY_FAMILY, &r)
}

/// Adds the connections of one buffer of a `sock_diag` dump (as `recv` returned it)
/// to `out`; true when the dump ended. Malformed messages are skipped, never trusted.
pub fn parse(buf: &[u8], out: &mut Vec<Connection>) -> io::Result<bool> {
    let end = netlink::walk(buf, |kind, body| {
        if kind == SOCK_DIAG_BY_FAMILY
            && let Some(c) = connection(body)
        {
            out.push(c);
        }
    });
    match end {
        End::More => Ok(false),
        End::Done => Ok(true),
        End::Error(e) => Err(io::Error::from_raw_os_error(e)),
    }
}

/// One `inet_diag_msg` and its attributes.
fn connection(m: &[u8]) -> Option<Connection> {
    if m.len() < 72 {
        return None;
    }
    let family = i32::from(m[0]);
    let state = m[1];
    let port = |i: usize| u16::from_be_bytes([m[i], m[i + 1]]);
    let addr = |i: usize| -> Option<IpAddr> {
        Some(if family == libc::AF_INET {
            IpAddr::V4(Ipv4Addr::new(m[i], m[i + 1], m[i + 2], m[i + 3]))
        } else if family == libc::AF_INET6 {
            let b: [u8; 16] = m.get(i..i + 16)?.try_into().ok()?;
            IpAddr::V6(Ipv6Addr::from(b))
        } else {
            return None;
        })
    };
    let local = SocketAddr::new(addr(8)?, port(4));
    let remote = SocketAddr::new(addr(24)?, port(6));
    let (mut info, mut congestion, mut bbr) = (Vec::new(), None, None);
    for (kind, body) in netlink::attributes(&m[72..]) {
        match kind {
            INET_DIAG_INFO => info = body.to_vec(),
            INET_DIAG_CONG => {
                let s = body.split(|&c| c == 0).next().unwrap_or_default();
                congestion = Some(String::from_utf8_lossy(s).into_owned());
            }
            INET_DIAG_BBRINFO => bbr = crate::tcpinfo::BbrInfo::parse(body),
            _ => {}
        }
    }
    Some(Connection {
        local,
        remote,
        state,
        congestion,
        info,
        bbr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(info: &[u8]) -> Vec<u8> {
        message_with(info, None)
    }

    fn message_with(info: &[u8], bbr: Option<&[u8]>) -> Vec<u8> {
        let mut m = vec![0u8; 72];
        m[0] = libc::AF_INET as u8;
        m[1] = 1;
        m[4..6].copy_from_slice(&5000u16.to_be_bytes());
        m[6..8].copy_from_slice(&80u16.to_be_bytes());
        m[8..12].copy_from_slice(&[10, 0, 0, 1]);
        m[24..28].copy_from_slice(&[10, 0, 0, 2]);
        let mut attr = |kind: u16, body: &[u8]| {
            let len = 4 + body.len();
            m.extend_from_slice(&(len as u16).to_ne_bytes());
            m.extend_from_slice(&kind.to_ne_bytes());
            m.extend_from_slice(body);
            m.resize(m.len() + ((4 - len % 4) % 4), 0);
        };
        attr(INET_DIAG_CONG, b"cubic\0");
        attr(INET_DIAG_INFO, info);
        if let Some(b) = bbr {
            attr(INET_DIAG_BBRINFO, b);
        }
        let mut out = vec![0u8; 16];
        out[0..4].copy_from_slice(&((16 + m.len()) as u32).to_ne_bytes());
        out[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        out.extend_from_slice(&m);
        out
    }

    #[test]
    fn a_dump_is_read_into_connections() {
        let info: Vec<u8> = (0..=231u8).collect();
        let mut buf = message(&info);
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&netlink::NLMSG_DONE.to_ne_bytes());
        buf.extend_from_slice(&done);
        let mut out = Vec::new();
        assert!(parse(&buf, &mut out).unwrap());
        assert_eq!(out.len(), 1);
        let c = &out[0];
        assert_eq!(c.local, "10.0.0.1:5000".parse().unwrap());
        assert_eq!(c.remote, "10.0.0.2:80".parse().unwrap());
        assert_eq!(c.congestion.as_deref(), Some("cubic"));
        assert_eq!(c.info, info);
        for n in 0..buf.len() {
            let _ = parse(&buf[..n], &mut Vec::new());
        }
    }

    /// `struct tcp_bbr_info`: bandwidth 1.25e9 bytes/s (its high half 0), least
    /// round trip 40 ms, pacing gain 1.25, cwnd gain 2; a truncated one is no reading.
    #[test]
    fn bbrs_model_is_read_from_its_attribute() {
        let mut b = Vec::new();
        for v in [1_250_000_000u32, 0, 40_000, 320, 512] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let mut out = Vec::new();
        parse(&message_with(&[0; 8], Some(&b)), &mut out).unwrap();
        let bbr = out[0].bbr.expect("a BBR reading");
        assert_eq!(bbr.bandwidth_bps, 10e9);
        assert!((bbr.min_rtt_s - 0.04).abs() < 1e-12);
        assert_eq!((bbr.pacing_gain, bbr.cwnd_gain), (1.25, 2.0));
        // Above 4 GB/s the high half counts.
        b[4..8].copy_from_slice(&1u32.to_ne_bytes());
        out.clear();
        parse(&message_with(&[0; 8], Some(&b)), &mut out).unwrap();
        assert_eq!(
            out[0].bbr.unwrap().bandwidth_bps,
            ((1u64 << 32) + 1_250_000_000) as f64 * 8.0
        );
        out.clear();
        parse(&message_with(&[0; 8], Some(&b[..19])), &mut out).unwrap();
        assert_eq!(out[0].bbr, None);
        out.clear();
        parse(&message(&[0; 8]), &mut out).unwrap();
        assert_eq!(out[0].bbr, None);
    }

    /// A BBR connection on loopback after a few megabytes: the dump carries BBR's
    /// model (the request asks with the Vegas bit); a CUBIC one carries none.
    #[test]
    fn the_kernel_gives_a_bbr_connections_model() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // Only this test's own connection is taken: anything else on loopback that
        // reaches the listener is dropped unread.
        let mut s = loop {
            let (s, from) = l.accept().unwrap();
            if from == c.local_addr().unwrap() {
                break s;
            }
        };
        nix::sys::socket::setsockopt(
            &c,
            nix::sys::socket::sockopt::TcpCongestion,
            &std::ffi::OsString::from("bbr"),
        )
        .expect("this kernel does not let the test use BBR");
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let mut n = 0;
            while n < 8 << 20 {
                n += s.read(&mut buf).unwrap();
            }
            s
        });
        let chunk = vec![7u8; 1 << 16];
        for _ in 0..128 {
            (&c).write_all(&chunk).unwrap();
        }
        let _s = reader.join().unwrap();
        let all = connections_to(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let mine = all
            .iter()
            .find(|x| x.local == c.local_addr().unwrap())
            .expect("the connection is in the dump");
        assert_eq!(mine.congestion.as_deref(), Some("bbr"));
        let bbr = mine.bbr.expect("BBR's model in the dump");
        assert!(bbr.bandwidth_bps > 0.0, "{bbr:?}");
        assert!(bbr.min_rtt_s > 0.0 && bbr.min_rtt_s < 1.0, "{bbr:?}");
        assert!(bbr.pacing_gain > 0.0 && bbr.cwnd_gain > 0.0, "{bbr:?}");
        let other = all
            .iter()
            .find(|x| x.remote == c.local_addr().unwrap())
            .expect("the other end is in the dump");
        if other.congestion.as_deref() != Some("bbr") {
            assert_eq!(other.bbr, None, "{other:?}");
        }
    }

    #[test]
    fn the_kernels_dump_has_this_hosts_own_connection() {
        // A connection on loopback, then the dump: it must list it with a tcp_info.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let all = connections_to(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let mine = all
            .iter()
            .find(|x| x.local == c.local_addr().unwrap())
            .expect("the connection is in the dump");
        assert_eq!(mine.remote, l.local_addr().unwrap());
        assert!(
            mine.info.len() >= 104,
            "{} bytes of tcp_info",
            mine.info.len()
        );
        assert!(mine.congestion.is_some());
    }
}
