//! Traffic for experiments: constant-rate UDP cross traffic and a rate-limited TCP
//! source, each on its own thread until told to stop, each counting what it sent so
//! the truth of an experiment can be computed from what really left.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Netns, fill_pattern, read_pattern, tcp_listen};

/// A traffic source running on its own thread; stopped and joined on drop.
#[derive(Debug)]
pub struct Source {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    started: Instant,
    threads: Vec<JoinHandle<()>>,
}

impl Source {
    /// Payload bytes sent so far (UDP payload, or TCP bytes the receiver read).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Payload rate so far, Mbit/s.
    pub fn mbps(&self) -> f64 {
        self.bytes() as f64 * 8.0 / self.started.elapsed().as_secs_f64().max(1e-9) / 1e6
    }

    /// Stops the source and waits for its threads.
    pub fn stop(mut self) -> u64 {
        self.halt();
        self.bytes()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Constant-rate UDP from `from` to `to:port` (a socket in `to_ns` drains it):
/// datagrams of `ip_size` IP bytes (IPv4 or IPv6, as `to` is) at `mbps` Mbit/s counted
/// at the IP level, paced against absolute deadlines.
pub fn udp_cbr(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    mbps: f64,
    ip_size: usize,
) -> anyhow::Result<Source> {
    let sink = to_ns.run(|| UdpSocket::bind(SocketAddr::new(to, port)))??;
    sink.set_read_timeout(Some(Duration::from_millis(100)))?;
    let any: IpAddr = if to.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let tx = from.run(|| UdpSocket::bind(SocketAddr::new(any, 0)))??;
    tx.connect(SocketAddr::new(to, port))?;
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let headers = if to.is_ipv4() { 28 } else { 48 };
    let payload = ip_size.saturating_sub(headers).max(1);
    let gap = Duration::from_secs_f64(ip_size as f64 * 8.0 / (mbps * 1e6));
    let sender = {
        let (stop, bytes) = (stop.clone(), bytes.clone());
        std::thread::spawn(move || {
            let buf = vec![0x5a; payload];
            let t0 = Instant::now();
            let mut n: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                let due = t0 + gap * n;
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if tx.send(&buf).is_ok() {
                    bytes.fetch_add(payload as u64, Ordering::Relaxed);
                }
                n += 1;
            }
        })
    };
    let drain = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !stop.load(Ordering::Relaxed) {
                let _ = sink.recv(&mut buf);
            }
        })
    };
    Ok(Source {
        stop,
        bytes,
        started: Instant::now(),
        threads: vec![sender, drain],
    })
}

/// A TCP stream from `from` to `to:port` (a listener in `to_ns`) that writes the test
/// pattern at `mbps` Mbit/s of payload (or as fast as it can with `None`), in 10 ms
/// steps; the receiver checks every byte and counts it.
pub fn tcp_source(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    mbps: Option<f64>,
) -> anyhow::Result<Source> {
    let listener = tcp_listen(to_ns, to, port)?;
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let receiver = {
        let bytes = bytes.clone();
        std::thread::spawn(move || {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            let mut counted = CountingReader {
                inner: &mut s,
                bytes: &bytes,
            };
            let (_, intact) = read_pattern(&mut counted).unwrap_or((0, false));
            assert!(intact, "TCP source bytes arrived corrupted");
        })
    };
    let mut stream = from.run(|| {
        TcpStream::connect_timeout(&SocketAddr::new(to, port), Duration::from_secs(10))
    })??;
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let step = Duration::from_millis(10);
            let chunk = mbps.map_or(1 << 16, |r| ((r * 1e6 / 8.0) * step.as_secs_f64()) as usize);
            let mut buf = vec![0u8; chunk.max(1)];
            let t0 = Instant::now();
            let mut sent = 0u64;
            let mut n: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                if mbps.is_some() {
                    let due = t0 + step * n;
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                }
                fill_pattern(&mut buf, sent);
                if stream.write_all(&buf).is_err() {
                    break;
                }
                sent += buf.len() as u64;
                n += 1;
            }
            let _ = stream.shutdown(std::net::Shutdown::Write);
        })
    };
    Ok(Source {
        stop,
        bytes,
        started: Instant::now(),
        threads: vec![sender, receiver],
    })
}

struct CountingReader<'a, R> {
    inner: &'a mut R,
    bytes: &'a AtomicU64,
}

impl<R: Read> Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The available bandwidth at the IP level for `probe_size`-byte probes on a
/// bottleneck of `capacity_mbps` that counts 14 bytes of Ethernet header per packet
/// (tbf on a veth), with `cross` = (Mbit/s, IP bytes per packet) of other traffic.
pub fn ip_level_truth(capacity_mbps: f64, probe_size: u32, cross: &[(f64, u32)]) -> f64 {
    let wire: f64 = cross
        .iter()
        .map(|&(r, s)| r * f64::from(s + 14) / f64::from(s))
        .sum();
    (capacity_mbps - wire).max(0.0) * f64::from(probe_size) / f64::from(probe_size + 14)
}
