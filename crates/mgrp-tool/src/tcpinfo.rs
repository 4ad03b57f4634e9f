//! What the kernel says of a live TCP connection: the fields of Linux's `struct
//! tcp_info` (as `ss -ti` shows them) that tell what the path gives a bulk flow, read
//! from the bytes `sock_diag` returns (`INET_DIAG_INFO`). An older kernel returns a
//! shorter struct; fields it does not have are `None`.
//!
//! The delivery rate is the kernel's own estimate of the rate data was delivered at,
//! over the latest round trip; a sample taken while the application had nothing to
//! send says how fast the application was, not the path, and the kernel flags it
//! (`app_limited`). Time limited by the receiver's window or the send buffer says the
//! same of the ends.

use serde::{Deserialize, Serialize};

use crate::netlink::{u32_at, u64_at};

/// BBR's model of the path, as the kernel gives it for a connection that runs BBR
/// (`struct tcp_bbr_info`, BBR v1 and the kernel's own BBR alike).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BbrInfo {
    /// Its estimate of the bottleneck's bandwidth (the windowed highest delivery
    /// rate), bit/s.
    pub bandwidth_bps: f64,
    /// Its estimate of the path's least round trip, s.
    pub min_rtt_s: f64,
    /// The gain it paces at now (1.0 in its steady phase, above in probing).
    pub pacing_gain: f64,
    /// The gain on its congestion window.
    pub cwnd_gain: f64,
}

impl BbrInfo {
    /// Reads the kernel's `struct tcp_bbr_info` (bandwidth in bytes a second as two
    /// 32-bit halves, least round trip in µs, gains in 1/256); `None` when shorter.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let bytes_per_s = (u64::from(u32_at(b, 4)?) << 32) | u64::from(u32_at(b, 0)?);
        Some(Self {
            bandwidth_bps: bytes_per_s as f64 * 8.0,
            min_rtt_s: f64::from(u32_at(b, 8)?) * 1e-6,
            pacing_gain: f64::from(u32_at(b, 12)?) / 256.0,
            cwnd_gain: f64::from(u32_at(b, 16)?) / 256.0,
        })
    }
}

/// One reading of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpSample {
    /// The kernel's delivery rate, bit/s.
    pub delivery_bps: Option<f64>,
    /// Whether that rate's sample was limited by the application.
    pub app_limited: bool,
    /// Smoothed round trip, s.
    pub rtt_s: f64,
    /// Least round trip seen, s.
    pub min_rtt_s: Option<f64>,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Sender's MSS, bytes.
    pub snd_mss: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Bytes acknowledged.
    pub bytes_acked: Option<u64>,
    /// Time with data in flight, s.
    pub busy_s: Option<f64>,
    /// Of that, time limited by the receiver's window, s.
    pub rwnd_limited_s: Option<f64>,
    /// Of that, time limited by the send buffer, s.
    pub sndbuf_limited_s: Option<f64>,
}

/// The bytes of `struct tcp_info` of a socket of this process (`TCP_INFO`), as long
/// as the running kernel has it: what [`parse`] and the readers below take.
pub fn read(s: &std::net::TcpStream) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd as _;
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: TCP_INFO writes at most `len` bytes into the buffer and says how many.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info[..(len as usize).min(info.len())].to_vec())
}

/// The data segments the connection has sent (`tcpi_data_segs_out`, Linux 4.6 and
/// later).
pub fn data_segs_out(b: &[u8]) -> Option<u32> {
    u32_at(b, 156)
}

/// The receive window the peer advertises now and the segment size this end sends
/// with, bytes (`tcpi_snd_wnd`, Linux 6.2 and later, and `tcpi_snd_mss`).
pub fn peer_window(b: &[u8]) -> Option<(u32, u32)> {
    u32_at(b, 228).zip(u32_at(b, 16))
}

/// Reads `struct tcp_info` from its bytes; `None` when even the fields every kernel
/// since 2.6 has (up to `tcpi_total_retrans`) are not there.
pub fn parse(b: &[u8]) -> Option<TcpSample> {
    let us = |v: u64| v as f64 / 1e6;
    Some(TcpSample {
        delivery_bps: u64_at(b, 160).map(|r| r as f64 * 8.0),
        app_limited: b.get(7).is_some_and(|f| f & 1 == 1),
        rtt_s: us(u64::from(u32_at(b, 68)?)),
        min_rtt_s: u32_at(b, 148).map(|v| us(u64::from(v))),
        total_retrans: u32_at(b, 100)?,
        snd_mss: u32_at(b, 16)?,
        cwnd: u32_at(b, 80)?,
        bytes_acked: u64_at(b, 120),
        busy_s: u64_at(b, 168).map(us),
        rwnd_limited_s: u64_at(b, 176).map(us),
        sndbuf_limited_s: u64_at(b, 184).map(us),
    })
}

impl TcpSample {
    /// Whether the sample says something about the path: a delivery rate not limited
    /// by the application, and the ends not limiting most of the busy time.
    pub fn network_limited(&self) -> bool {
        let ends = self.rwnd_limited_s.unwrap_or(0.0) + self.sndbuf_limited_s.unwrap_or(0.0);
        self.delivery_bps.is_some_and(|r| r > 0.0)
            && !self.app_limited
            && self.busy_s.is_none_or(|b| ends <= 0.5 * b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        let put32 = |b: &mut Vec<u8>, i: usize, v: u32| {
            if i + 4 <= b.len() {
                b[i..i + 4].copy_from_slice(&v.to_ne_bytes());
            }
        };
        put32(&mut b, 16, 1448);
        put32(&mut b, 68, 40_000);
        put32(&mut b, 80, 30);
        put32(&mut b, 100, 7);
        put32(&mut b, 148, 20_500);
        let put64 = |b: &mut Vec<u8>, i: usize, v: u64| {
            if i + 8 <= b.len() {
                b[i..i + 8].copy_from_slice(&v.to_ne_bytes());
            }
        };
        put64(&mut b, 120, 9_000_000);
        put64(&mut b, 160, 1_250_000);
        put64(&mut b, 168, 10_000_000);
        put64(&mut b, 176, 1_000_000);
        put64(&mut b, 184, 0);
        b
    }

    #[test]
    fn a_full_struct_is_read() {
        let s = parse(&info(232)).unwrap();
        assert_eq!(s.delivery_bps, Some(10e6));
        assert!(!s.app_limited);
        assert!((s.rtt_s - 0.04).abs() < 1e-12);
        assert_eq!(s.min_rtt_s, Some(0.0205));
        assert_eq!((s.total_retrans, s.snd_mss, s.cwnd), (7, 1448, 30));
        assert_eq!(s.bytes_acked, Some(9_000_000));
        assert_eq!(s.busy_s, Some(10.0));
        assert_eq!(s.rwnd_limited_s, Some(1.0));
        assert!(s.network_limited());
    }

    #[test]
    fn app_limited_or_receiver_limited_samples_say_nothing_of_the_path() {
        let mut b = info(232);
        b[7] |= 1;
        assert!(!parse(&b).unwrap().network_limited());
        let mut b = info(232);
        b[176..184].copy_from_slice(&8_000_000u64.to_ne_bytes());
        assert!(!parse(&b).unwrap().network_limited());
    }

    #[test]
    fn an_old_kernels_short_struct_leaves_new_fields_out() {
        // Up to tcpi_total_retrans (104 bytes): no delivery rate, no min RTT.
        let s = parse(&info(104)).unwrap();
        assert_eq!(s.delivery_bps, None);
        assert_eq!(s.min_rtt_s, None);
        assert!(!s.network_limited());
        assert_eq!(parse(&info(100)), None);
        for n in 0..240 {
            let _ = parse(&info(n));
        }
    }
}
