//! IPv4 and IPv6 headers as the workspace reads them: the one parser behind rider
//! admission, the daemon's sockets and fast path, and the testbed's accounting of
//! captures.
//!
//! [`Ip::parse`] reads a header and takes the payload up to the packet's stated
//! length, or to the end of the buffer when that is shorter (a capture cut short);
//! [`Ip::parse_exact`] also requires the buffer to be the whole packet and an IPv4
//! header checksum to be right — what a packet from someone else must pass.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of the IPv6 fixed header.
pub const IPV6_HEADER_LEN: usize = 40;

/// Why bytes are not an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpError {
    /// Shorter than its header.
    Short,
    /// Neither version 4 nor 6.
    Version(u8),
    /// An IPv4 header length below 20 bytes or beyond the buffer.
    HeaderLength,
    /// A stated length that does not match the buffer (`parse_exact`), or that is
    /// shorter than the header.
    Length,
    /// A wrong IPv4 header checksum (`parse_exact`).
    Checksum,
    /// IPv6 extension headers that run past the packet.
    Extension,
}

impl std::fmt::Display for IpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Short => f.write_str("shorter than an IP header"),
            Self::Version(v) => write!(f, "IP version {v}"),
            Self::HeaderLength => f.write_str("bad IPv4 header length"),
            Self::Length => f.write_str("stated length does not match the packet"),
            Self::Checksum => f.write_str("bad IPv4 header checksum"),
            Self::Extension => f.write_str("IPv6 extension headers run past the packet"),
        }
    }
}

impl std::error::Error for IpError {}

/// The IP version of a packet from its first byte, if it is 4 or 6.
pub fn version(packet: &[u8]) -> Option<u8> {
    packet
        .first()
        .map(|b| b >> 4)
        .filter(|v| *v == 4 || *v == 6)
}

/// The destination of an IP packet, if it is one (reads no more than that).
pub fn destination(packet: &[u8]) -> Option<IpAddr> {
    match version(packet)? {
        4 => {
            let a: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
            Some(IpAddr::from(a))
        }
        _ => {
            let a: [u8; 16] = packet.get(24..40)?.try_into().ok()?;
            Some(IpAddr::from(a))
        }
    }
}

/// A parsed IP header and the payload behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip<'a> {
    /// Where it comes from.
    pub src: IpAddr,
    /// Where it goes.
    pub dst: IpAddr,
    /// IPv4's protocol field; IPv6's first next-header field (see
    /// [`Ip::upper_protocol`]).
    pub protocol: u8,
    /// Bytes of header before the payload (IPv4 with options; IPv6's fixed 40).
    pub header_len: usize,
    /// The packet after its header, up to its stated length (or the buffer's end).
    pub payload: &'a [u8],
    /// The length of the whole packet as its header states it.
    total: usize,
    packet: &'a [u8],
}

impl<'a> Ip<'a> {
    /// Reads the header; the payload ends at the stated length or the buffer's end,
    /// whichever comes first.
    pub fn parse(packet: &'a [u8]) -> Result<Self, IpError> {
        match packet.first().map(|b| b >> 4) {
            None => Err(IpError::Short),
            Some(4) => {
                if packet.len() < IPV4_HEADER_LEN {
                    return Err(IpError::Short);
                }
                let header_len = usize::from(packet[0] & 0x0f) * 4;
                if header_len < IPV4_HEADER_LEN || header_len > packet.len() {
                    return Err(IpError::HeaderLength);
                }
                let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
                if total < header_len {
                    return Err(IpError::Length);
                }
                let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
                let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
                Ok(Self {
                    src: src.into(),
                    dst: dst.into(),
                    protocol: packet[9],
                    header_len,
                    payload: &packet[header_len..total.min(packet.len())],
                    total,
                    packet,
                })
            }
            Some(6) => {
                if packet.len() < IPV6_HEADER_LEN {
                    return Err(IpError::Short);
                }
                let len = usize::from(u16::from_be_bytes([packet[4], packet[5]]));
                let mut a = [0u8; 16];
                a.copy_from_slice(&packet[8..24]);
                let src = Ipv6Addr::from(a);
                a.copy_from_slice(&packet[24..40]);
                let dst = Ipv6Addr::from(a);
                let end = (IPV6_HEADER_LEN + len).min(packet.len());
                Ok(Self {
                    src: src.into(),
                    dst: dst.into(),
                    protocol: packet[6],
                    header_len: IPV6_HEADER_LEN,
                    payload: &packet[IPV6_HEADER_LEN..end],
                    total: IPV6_HEADER_LEN + len,
                    packet,
                })
            }
            Some(v) => Err(IpError::Version(v)),
        }
    }

    /// Reads the header of a packet that must be whole and well formed: the buffer
    /// is exactly the stated length, and an IPv4 header's checksum is right.
    pub fn parse_exact(packet: &'a [u8]) -> Result<Self, IpError> {
        let ip = Self::parse(packet)?;
        if ip.total != packet.len() {
            return Err(IpError::Length);
        }
        if ip.is_v4() && !checksum_ok(&packet[..ip.header_len]) {
            return Err(IpError::Checksum);
        }
        Ok(ip)
    }

    /// Whether it is an IPv4 packet.
    pub fn is_v4(&self) -> bool {
        self.src.is_ipv4()
    }

    /// The length of the whole packet as its header states it.
    pub fn total_len(&self) -> usize {
        self.total
    }

    /// The upper-layer protocol: IPv4's protocol, or IPv6's next header past its
    /// hop-by-hop, routing, fragment and destination-options headers.
    pub fn upper_protocol(&self) -> Result<u8, IpError> {
        if self.is_v4() {
            return Ok(self.protocol);
        }
        let p = self.packet;
        let mut next = self.protocol;
        let mut at = IPV6_HEADER_LEN;
        // Each extension header is at least 8 bytes, so this ends.
        loop {
            match next {
                0 | 43 | 60 => {
                    let h = p.get(at..at + 2).ok_or(IpError::Extension)?;
                    next = h[0];
                    at += (usize::from(h[1]) + 1) * 8;
                }
                44 => {
                    let h = p.get(at..at + 8).ok_or(IpError::Extension)?;
                    next = h[0];
                    at += 8;
                }
                proto => return Ok(proto),
            }
            if at > p.len() {
                return Err(IpError::Extension);
            }
        }
    }
}

/// The ones' complement sum of `header` folded to 16 bits.
fn ones_sum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum to write into an IPv4 header whose checksum field is zero.
pub fn header_checksum(header: &[u8]) -> u16 {
    !ones_sum(header)
}

/// Whether an IPv4 header's checksum is right (its ones' complement sum is all ones).
pub fn checksum_ok(header: &[u8]) -> bool {
    ones_sum(header) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(payload: usize, proto: u8) -> Vec<u8> {
        let total = 20 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let sum = header_checksum(&p[..20]);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        p
    }

    fn v6(payload: usize, next: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
        p[6] = next;
        p[23] = 1;
        p[39] = 2;
        p
    }

    #[test]
    fn reads_both_versions() {
        let p = v4(8, 17);
        let ip = Ip::parse_exact(&p).unwrap();
        assert_eq!(ip.src, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(ip.dst, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((ip.protocol, ip.header_len, ip.payload.len()), (17, 20, 8));
        assert_eq!(destination(&p), Some(ip.dst));
        let p = v6(8, 6);
        let ip = Ip::parse_exact(&p).unwrap();
        assert_eq!(ip.dst, "::2".parse::<IpAddr>().unwrap());
        assert_eq!((ip.upper_protocol(), ip.total_len()), (Ok(6), 48));
        assert_eq!(destination(&p), Some(ip.dst));
    }

    #[test]
    fn a_cut_packet_parses_but_is_not_exact() {
        let p = v4(100, 6);
        let ip = Ip::parse(&p[..60]).unwrap();
        assert_eq!(ip.payload.len(), 40);
        assert_eq!(Ip::parse_exact(&p[..60]), Err(IpError::Length));
        let p = v6(100, 6);
        assert_eq!(Ip::parse(&p[..60]).unwrap().payload.len(), 20);
        assert_eq!(Ip::parse_exact(&p[..60]), Err(IpError::Length));
    }

    #[test]
    fn refusals() {
        assert_eq!(Ip::parse(&[]), Err(IpError::Short));
        assert_eq!(Ip::parse(&[0x45; 19]), Err(IpError::Short));
        assert_eq!(Ip::parse(&[0x10; 40]), Err(IpError::Version(1)));
        let mut p = v4(8, 17);
        p[0] = 0x44;
        assert_eq!(Ip::parse(&p), Err(IpError::HeaderLength));
        let mut p = v4(8, 17);
        p[11] ^= 1;
        assert!(Ip::parse(&p).is_ok());
        assert_eq!(Ip::parse_exact(&p), Err(IpError::Checksum));
        let mut p = v4(8, 17);
        p.push(0);
        assert_eq!(Ip::parse_exact(&p), Err(IpError::Length));
        assert_eq!(version(&[0x70]), None);
        assert_eq!(destination(&[0x45; 10]), None);
    }

    #[test]
    fn v6_extension_headers_are_walked() {
        // Hop-by-hop (8 bytes) then a fragment header, then UDP.
        let mut p = v6(24, 0);
        p[40] = 44;
        p[41] = 0;
        p[48] = 17;
        assert_eq!(Ip::parse(&p).unwrap().upper_protocol(), Ok(17));
        let mut p = v6(8, 0);
        p[40] = 60;
        p[41] = 3;
        assert_eq!(
            Ip::parse(&p).unwrap().upper_protocol(),
            Err(IpError::Extension)
        );
    }
}
