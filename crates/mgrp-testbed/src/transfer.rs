//! TCP transfers between namespaces that check every byte: a position-dependent
//! pattern written and read back.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::netns::Netns;

/// The byte at position `i` of every test transfer.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Reads `r` to its end, checking every byte against [`pattern`]; returns the bytes
/// read and whether all matched.
pub fn read_pattern(r: &mut impl Read) -> std::io::Result<(u64, bool)> {
    let mut buf = vec![0u8; 1 << 16];
    let (mut at, mut intact) = (0u64, true);
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok((at, intact));
        }
        for &b in &buf[..n] {
            intact &= b == pattern(at);
            at += 1;
        }
    }
}

/// Fills `buf` with the pattern bytes from position `at` on.
pub fn fill_pattern(buf: &mut [u8], at: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(at + i as u64);
    }
}

/// Result of [`tcp_transfer`].
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// Bytes the receiver read.
    pub received: u64,
    /// Whether every byte matched the pattern.
    pub intact: bool,
    /// Seconds from connect to the receiver's end of stream.
    pub seconds: f64,
}

impl Transfer {
    /// Throughput in Mbit/s.
    pub fn mbps(&self) -> f64 {
        self.received as f64 * 8.0 / self.seconds / 1e6
    }
}

/// A TCP listener in `server_ns` on `port`, ready before the client connects.
pub fn tcp_listen(server_ns: &Netns, addr: IpAddr, port: u16) -> anyhow::Result<TcpListener> {
    server_ns
        .run(|| TcpListener::bind(SocketAddr::new(addr, port)))?
        .map_err(Into::into)
}

/// Sends `bytes` of the test pattern from `client_ns` to `listener` (bound in the
/// server's namespace at `addr:port`) and checks every byte on arrival.
pub fn tcp_transfer(
    client_ns: &Netns,
    listener: TcpListener,
    addr: IpAddr,
    port: u16,
    bytes: u64,
) -> anyhow::Result<Transfer> {
    let receiver = std::thread::spawn(move || -> anyhow::Result<(u64, bool)> {
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(read_pattern(&mut s)?)
    });
    let start = Instant::now();
    let stream = client_ns.run(|| {
        TcpStream::connect_timeout(&SocketAddr::new(addr, port), Duration::from_secs(10))
    })??;
    let mut stream = stream;
    let mut buf = vec![0u8; 1 << 16];
    let mut sent = 0u64;
    while sent < bytes {
        let n = ((bytes - sent) as usize).min(buf.len());
        fill_pattern(&mut buf[..n], sent);
        stream.write_all(&buf[..n])?;
        sent += n as u64;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let (received, intact) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
    Ok(Transfer {
        received,
        intact,
        seconds: start.elapsed().as_secs_f64(),
    })
}
