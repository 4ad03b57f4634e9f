//! Frames read from a TUN with offloads (a virtio-net header, then a packet or a
//! super-packet): checked against their packet, counted as the MTU-sized packets
//! they stand for, split into those for sockets that do no offloads, and
//! checksummed where the header asks for it.

use mgrp_core::ip;
use tun_rs::VirtioNetHdr;

/// The MTU-sized packets a frame stands for, from [`split_frame`].
#[derive(Debug)]
pub(crate) struct Packets<'a> {
    whole: Option<&'a [u8]>,
    bufs: &'a [Vec<u8>],
    sizes: &'a [usize],
}

impl<'a> Iterator for Packets<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if let Some(p) = self.whole.take() {
            return Some(p);
        }
        let ((b, bufs), (&n, sizes)) = (self.bufs.split_first()?, self.sizes.split_first()?);
        (self.bufs, self.sizes) = (bufs, sizes);
        Some(&b[..n])
    }
}

/// Cuts a frame checked by [`frame_header`] into the packets it stands for, to send
/// through a socket that does no offloads: the packet itself, its checksum completed
/// if the header asks for that, or its segments, split into `bufs`.
pub(crate) fn split_frame<'a>(
    hdr: VirtioNetHdr,
    packet: &'a mut [u8],
    bufs: &'a mut [Vec<u8>],
    sizes: &'a mut [usize],
) -> std::io::Result<Packets<'a>> {
    if hdr.gso_type == GSO_NONE {
        if hdr.flags & F_NEEDS_CSUM != 0 {
            complete_checksum(packet, hdr.csum_start, hdr.csum_offset);
        }
        return Ok(Packets {
            whole: Some(packet),
            bufs: &[],
            sizes: &[],
        });
    }
    let v6 = ip::version(packet) == Some(6);
    let k = tun_rs::gso_split(packet, hdr, bufs, sizes, 0, v6)?;
    Ok(Packets {
        whole: None,
        bufs: &bufs[..k],
        sizes: &sizes[..k],
    })
}

/// The largest packet a frame leaves as: itself, or its largest segment.
pub(super) fn largest_packet(hdr: &VirtioNetHdr, packet: &[u8]) -> usize {
    if hdr.gso_type == GSO_NONE {
        packet.len()
    } else {
        usize::from(hdr.hdr_len) + usize::from(hdr.gso_size)
    }
}

pub(super) const ETH_P_IP: u16 = 0x0800;
pub(super) const ETH_P_IPV6: u16 = 0x86dd;

const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_UDP_L4: u8 = 5;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;
pub(super) const F_NEEDS_CSUM: u8 = 1;

/// Checks a frame's virtio-net header against its packet, the way the TUN's own
/// readers do (the kernel's `hdr_len` is not to be trusted: recomputed from the
/// transport header), and says how many MTU-sized packets it stands for.
pub(crate) fn frame_header(
    mut hdr: VirtioNetHdr,
    packet: &[u8],
) -> Result<(VirtioNetHdr, u64), String> {
    let len = packet.len();
    if hdr.flags & F_NEEDS_CSUM != 0 {
        let at = usize::from(hdr.csum_start) + usize::from(hdr.csum_offset);
        if at + 2 > len {
            return Err("checksum field beyond the packet".into());
        }
    }
    if hdr.gso_type == GSO_NONE {
        return Ok((hdr, 1));
    }
    if hdr.gso_size == 0 {
        return Err("GSO frame with a segment size of 0".into());
    }
    let v6 = match ip::version(packet) {
        Some(4) => false,
        Some(_) => true,
        None => return Err("GSO frame that is not IP".into()),
    };
    let transport_len = match (hdr.gso_type & !GSO_ECN, v6) {
        (GSO_TCPV4, false) | (GSO_TCPV6, true) => {
            let off = usize::from(hdr.csum_start) + 12;
            let tcp = usize::from(*packet.get(off).ok_or("GSO frame too short")? >> 4) * 4;
            if !(20..=60).contains(&tcp) {
                return Err(format!("TCP header length {tcp}"));
            }
            tcp
        }
        (GSO_UDP_L4, _) if hdr.gso_type & GSO_ECN == 0 => 8,
        (t, _) => return Err(format!("GSO type {t:#x} for IPv{}", if v6 { 6 } else { 4 })),
    };
    let hdr_len = usize::from(hdr.csum_start) + transport_len;
    if hdr_len > len {
        return Err("GSO headers longer than the frame".into());
    }
    hdr.hdr_len = hdr_len as u16;
    let payload = (len - hdr_len) as u64;
    let segments = payload.div_ceil(u64::from(hdr.gso_size)).max(1);
    Ok((hdr, segments))
}

/// Completes the checksum of a packet whose header asks for it, for sending it
/// through a socket that will not.
pub(super) fn complete_checksum(packet: &mut [u8], start: u16, offset: u16) {
    let at = usize::from(start) + usize::from(offset);
    let initial = u16::from_be_bytes([packet[at], packet[at + 1]]);
    packet[at] = 0;
    packet[at + 1] = 0;
    let sum = !tun_rs::checksum(&packet[usize::from(start)..], u64::from(initial));
    packet[at..at + 2].copy_from_slice(&sum.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4(payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x45;
        p[9] = 6;
        p[20 + 12] = 0x50; // data offset: 5 words
        p
    }

    fn gso(gso_type: u8, gso_size: u16) -> VirtioNetHdr {
        VirtioNetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            hdr_len: 9999,
            gso_size,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn frames_count_as_their_segments_and_bad_headers_are_refused() {
        // 3000 bytes of payload at 1448 a segment: 3 segments; hdr_len recomputed.
        let (h, n) = frame_header(gso(GSO_TCPV4, 1448), &tcp4(3000)).unwrap();
        assert_eq!((h.hdr_len, n), (40, 3));
        let (_, n) = frame_header(gso(GSO_TCPV4, 1000), &tcp4(3000)).unwrap();
        assert_eq!(n, 3);
        // Not a GSO frame: one packet, whatever its size.
        let (_, n) = frame_header(gso(GSO_NONE, 0), &tcp4(100)).unwrap();
        assert_eq!(n, 1);
        assert!(frame_header(gso(GSO_TCPV4, 0), &tcp4(3000)).is_err());
        assert!(frame_header(gso(GSO_TCPV6, 1448), &tcp4(3000)).is_err());
        let mut bad = tcp4(3000);
        bad[32] = 0x10; // a 4-byte TCP header
        assert!(frame_header(gso(GSO_TCPV4, 1448), &bad).is_err());
        // The checksum field must lie inside the packet.
        assert!(frame_header(gso(GSO_NONE, 0), &tcp4(0)[..30]).is_err());
    }

    #[test]
    fn the_largest_packet_of_a_super_packet_is_one_segment() {
        let (h, _) = frame_header(gso(GSO_TCPV4, 1448), &tcp4(30_000)).unwrap();
        assert_eq!(largest_packet(&h, &tcp4(30_000)), 1488);
        let (h, _) = frame_header(gso(GSO_NONE, 0), &tcp4(1000)).unwrap();
        assert_eq!(largest_packet(&h, &tcp4(1000)), 1040);
    }

    #[test]
    fn frames_split_into_the_packets_they_stand_for() {
        let mut bufs = vec![vec![0u8; 1600]; 8];
        let mut sizes = vec![0; 8];
        let mut frame = tcp4(3000);
        let (h, n) = frame_header(gso(GSO_TCPV4, 1448), &frame).unwrap();
        let lens: Vec<usize> = split_frame(h, &mut frame, &mut bufs, &mut sizes)
            .unwrap()
            .map(<[u8]>::len)
            .collect();
        assert_eq!(lens, [1488, 1488, 144]);
        assert_eq!(lens.len() as u64, n);
        // A plain frame is itself, its checksum completed.
        let mut frame = tcp4(13);
        let (h, _) = frame_header(gso(GSO_NONE, 0), &frame).unwrap();
        let one: Vec<Vec<u8>> = split_frame(h, &mut frame, &mut bufs, &mut sizes)
            .unwrap()
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(one.len(), 1);
        assert_eq!(tun_rs::checksum(&one[0][20..], 0), 0xffff);
    }

    #[test]
    fn a_completed_checksum_verifies() {
        let mut p = tcp4(13);
        p[40..].copy_from_slice(b"hello, riders");
        complete_checksum(&mut p, 20, 16);
        // Summing over the segment, checksum included, gives all ones.
        assert_eq!(tun_rs::checksum(&p[20..], 0), 0xffff);
    }
}
