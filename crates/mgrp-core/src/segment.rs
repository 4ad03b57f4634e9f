//! A TCP segment's headers as a capture sees them: the packet cut right after its
//! TCP header (the capture's kernel filter keeps no payload), read for what passive
//! packet timing needs — the flow, the sequence number, how many payload bytes the
//! segment carried (from the IP header's stated length, since the payload itself is
//! not there) and its flags.
//!
//! IPv6 packets with extension headers, IPv4 fragments and anything that is not TCP
//! are not read: a capture that filters for TCP to one address rarely sees them, and
//! their timing would not be comparable anyway.

use std::net::SocketAddr;

use crate::ip::Ip;

/// TCP's protocol number.
pub const TCP: u8 = 6;
/// Shortest TCP header.
pub const TCP_HEADER_LEN: usize = 20;

/// The SYN flag.
pub const SYN: u8 = 0x02;
/// The FIN flag.
pub const FIN: u8 = 0x01;
/// The RST flag.
pub const RST: u8 = 0x04;

/// One TCP segment's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Where it comes from.
    pub src: SocketAddr,
    /// Where it goes.
    pub dst: SocketAddr,
    /// Its sequence number.
    pub seq: u32,
    /// Payload bytes it carried (the IP length less both headers).
    pub payload_len: u32,
    /// Bytes of the whole IP packet, as its header states.
    pub ip_len: u32,
    /// The flags byte (FIN, SYN, RST, PSH, ACK, URG, ECE, CWR).
    pub flags: u8,
}

/// Why a captured packet is not read as a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentError {
    /// Not an IP packet, or its header is cut.
    Ip,
    /// Not TCP (or IPv6 with extension headers).
    NotTcp,
    /// An IPv4 fragment.
    Fragment,
    /// The TCP header is cut, or its stated length is wrong.
    Header,
}

impl std::fmt::Display for SegmentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Ip => "not an IP packet",
            Self::NotTcp => "not TCP",
            Self::Fragment => "an IPv4 fragment",
            Self::Header => "a cut or malformed TCP header",
        })
    }
}

impl std::error::Error for SegmentError {}

/// Reads the headers of a captured TCP segment: `packet` starts at the IP header and
/// may end anywhere after the TCP header.
pub fn parse(packet: &[u8]) -> Result<Segment, SegmentError> {
    let ip = Ip::parse(packet).map_err(|_| SegmentError::Ip)?;
    if ip.protocol != TCP {
        return Err(SegmentError::NotTcp);
    }
    if ip.is_v4() {
        let frag = u16::from_be_bytes([packet[6], packet[7]]);
        // More fragments, or an offset: either way not a whole segment.
        if frag & 0x3fff != 0 {
            return Err(SegmentError::Fragment);
        }
    }
    let tcp = &packet[ip.header_len..];
    if tcp.len() < TCP_HEADER_LEN {
        return Err(SegmentError::Header);
    }
    let tcp_len = usize::from(tcp[12] >> 4) * 4;
    let ip_len = ip.total_len();
    if tcp_len < TCP_HEADER_LEN || tcp_len > tcp.len() || ip.header_len + tcp_len > ip_len {
        return Err(SegmentError::Header);
    }
    let port = |at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
    Ok(Segment {
        src: SocketAddr::new(ip.src, port(0)),
        dst: SocketAddr::new(ip.dst, port(2)),
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
        payload_len: u32::try_from(ip_len - ip.header_len - tcp_len).unwrap_or(u32::MAX),
        ip_len: u32::try_from(ip_len).unwrap_or(u32::MAX),
        flags: tcp[13],
    })
}

/// Bytes a capture keeps of a TCP segment: its IP and TCP headers, never payload.
/// `None` if the headers do not parse.
pub fn header_len(packet: &[u8]) -> Option<usize> {
    let ip = Ip::parse(packet).ok()?;
    let tcp = packet.get(ip.header_len + 12)?;
    Some(ip.header_len + usize::from(tcp >> 4) * 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4 or IPv6 TCP segment with `options` bytes of TCP options and `payload`
    /// bytes of payload.
    fn packet(v6: bool, seq: u32, options: usize, payload: usize, flags: u8) -> Vec<u8> {
        let tcp_len = TCP_HEADER_LEN + options;
        let mut p = if v6 {
            let mut p = vec![0u8; 40];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((tcp_len + payload) as u16).to_be_bytes());
            p[6] = TCP;
            p[8..24].copy_from_slice(&"fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
            p[24..40].copy_from_slice(&"fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
            p
        } else {
            let mut p = vec![0u8; 20];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&((20 + tcp_len + payload) as u16).to_be_bytes());
            p[9] = TCP;
            p[12..16].copy_from_slice(&[10, 0, 0, 1]);
            p[16..20].copy_from_slice(&[10, 0, 0, 2]);
            p
        };
        let mut tcp = vec![0u8; tcp_len];
        tcp[0..2].copy_from_slice(&5001u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = ((tcp_len / 4) as u8) << 4;
        tcp[13] = flags;
        p.extend(tcp);
        p.extend(std::iter::repeat_n(0xab, payload));
        p
    }

    #[test]
    fn reads_a_cut_segment() {
        let p = packet(false, 7, 12, 1448, 0x10);
        let keep = header_len(&p).unwrap();
        assert_eq!(keep, 52);
        let s = parse(&p[..keep]).unwrap();
        assert_eq!(s.src, "10.0.0.1:5001".parse().unwrap());
        assert_eq!(s.dst, "10.0.0.2:80".parse().unwrap());
        assert_eq!(
            (s.seq, s.payload_len, s.ip_len, s.flags),
            (7, 1448, 1500, 0x10)
        );
        let s6 = parse(&packet(true, 9, 0, 100, SYN)[..60]).unwrap();
        assert_eq!((s6.seq, s6.payload_len, s6.flags), (9, 100, SYN));
    }

    #[test]
    fn refusals() {
        let p = packet(false, 1, 0, 10, 0);
        assert_eq!(parse(&p[..30]), Err(SegmentError::Header));
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(parse(&udp), Err(SegmentError::NotTcp));
        let mut frag = p.clone();
        frag[6] = 0x20; // more fragments
        assert_eq!(parse(&frag), Err(SegmentError::Fragment));
        let mut short = p.clone();
        short[3] = 30; // the stated length leaves no room for the TCP header
        assert_eq!(parse(&short), Err(SegmentError::Header));
        let mut off = p.clone();
        off[20 + 12] = 0x30; // a TCP header of 12 bytes
        assert_eq!(parse(&off), Err(SegmentError::Header));
        let mut long = p;
        long[20 + 12] = 0xf0; // a TCP header of 60 bytes, cut at 30
        assert_eq!(parse(&long[..50]), Err(SegmentError::Header));
        assert_eq!(parse(&[]), Err(SegmentError::Ip));
    }

    proptest! {
        #[test]
        fn what_is_kept_reads_back(v6: bool, seq: u32, opt_words in 0usize..11, payload in 0usize..1500, flags: u8) {
            let p = packet(v6, seq, opt_words * 4, payload, flags);
            let keep = header_len(&p).unwrap();
            prop_assert_eq!(keep, p.len() - payload);
            let s = parse(&p[..keep]).unwrap();
            prop_assert_eq!(s.seq, seq);
            prop_assert_eq!(s.payload_len as usize, payload);
            prop_assert_eq!(s.ip_len as usize, p.len());
            prop_assert_eq!(s.flags, flags);
        }

        #[test]
        fn any_bytes_are_safe(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(s) = parse(&bytes) {
                let h = header_len(&bytes).unwrap();
                prop_assert!(h <= bytes.len());
                prop_assert_eq!(s.payload_len as usize + h, s.ip_len as usize);
            }
            let _ = header_len(&bytes);
        }
    }
}
