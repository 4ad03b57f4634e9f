//! Traffic for experiments: constant-rate and stepwise UDP cross traffic, web-like TCP
//! cross traffic, and a rate-limited or greedy TCP source, each on its own threads
//! until told to stop, each counting what it delivered so the truth of an experiment
//! can be computed from what really crossed.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::threads::Stoppable;
use crate::{Netns, fill_pattern, read_pattern, tcp_listen};

/// A traffic source running on its own thread; stopped and joined on drop.
#[derive(Debug)]
pub struct Source {
    bytes: Arc<AtomicU64>,
    retransmits: Arc<AtomicU64>,
    /// Paced TCP sources: the most data segments the sender left within one
    /// millisecond since the start or the last reset, plus one (0: none read).
    burst: Arc<AtomicU64>,
    started: Instant,
    threads: Stoppable<()>,
}

impl Source {
    /// Payload bytes the receiving side read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Segments the sender retransmitted so far (TCP sources; 0 for others): its
    /// losses as TCP saw them.
    pub fn retransmits(&self) -> u64 {
        self.retransmits.load(Ordering::Relaxed)
    }

    /// Paced TCP sources ([`tcp_paced_source`]): the most data segments the sender
    /// left within one millisecond since it started (or since
    /// [`Self::reset_max_segments_per_ms`]), read from its `tcp_info` every
    /// millisecond. A flow paced one segment at a time leaves 1 (2 when a reading
    /// straddles two); one whose sends the kernel sizes up leaves its bursts. `None`
    /// for other sources, or before the first reading.
    pub fn max_segments_per_ms(&self) -> Option<u64> {
        self.burst.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Forgets the bursts read so far ([`Self::max_segments_per_ms`] counts from now):
    /// a connection's start leaves its initial window at once.
    pub fn reset_max_segments_per_ms(&self) {
        self.burst.store(0, Ordering::Relaxed);
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

    /// Stops the source and waits for its threads; its counts stay readable, final
    /// (a TCP source reads its retransmissions once more as it closes).
    pub fn halt(&mut self) {
        self.threads.halt();
    }
}

/// A UDP rate that changes in steps: `mbps[i]` (at the IP level) during the `i`-th
/// `step` of time, the sequence repeating.
#[derive(Debug, Clone, PartialEq)]
pub struct Steps {
    /// The rates, Mbit/s.
    pub mbps: Vec<f64>,
    /// How long each holds.
    pub step: Duration,
}

impl Steps {
    /// The MGRP paper's STEP cross traffic: 1, 3, 5, 6, 4, 2 Mbit/s (45 s each there).
    pub fn paper(step: Duration) -> Self {
        Self {
            mbps: vec![1.0, 3.0, 5.0, 6.0, 4.0, 2.0],
            step,
        }
    }

    /// One rate for ever.
    pub fn constant(mbps: f64) -> Self {
        Self {
            mbps: vec![mbps],
            step: Duration::from_secs(3600),
        }
    }

    /// On/off bursts: `mbps` for `on`, then off for an exponential time whose mean
    /// makes bursts start every `mean_period` on average, over `total` (then the
    /// sequence repeats), in 1 ms steps; the draws come from `seed`, so a run repeats.
    pub fn on_off(
        mbps: f64,
        on: Duration,
        mean_period: Duration,
        total: Duration,
        seed: u64,
    ) -> Self {
        let step = Duration::from_millis(1);
        let n = (total.as_millis() as usize).max(1);
        let on_steps = (on.as_millis() as usize).max(1);
        let mean_off = mean_period.saturating_sub(on).as_secs_f64() * 1e3;
        let mut rng = crate::Seeded::new(seed);
        let mut v = vec![0.0; n];
        let mut i = 0usize;
        loop {
            let off = -mean_off * (1.0 - rng.next_f64()).ln();
            i += off.round() as usize;
            if i >= n {
                break;
            }
            for x in v.iter_mut().skip(i).take(on_steps) {
                *x = mbps;
            }
            i += on_steps;
        }
        Self { mbps: v, step }
    }

    /// The rate `t` after the start.
    pub fn at(&self, t: Duration) -> f64 {
        if self.mbps.is_empty() || self.step.is_zero() {
            return 0.0;
        }
        let i = (t.as_nanos() / self.step.as_nanos()) as usize % self.mbps.len();
        self.mbps[i]
    }

    /// One full pass through the steps.
    pub fn period(&self) -> Duration {
        self.step * u32::try_from(self.mbps.len()).unwrap_or(u32::MAX)
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
    udp_steps(from, to_ns, to, port, Steps::constant(mbps), ip_size)
}

/// UDP whose rate follows `steps` (the paper's STEP traffic with [`Steps::paper`]);
/// otherwise as [`udp_cbr`]. The sender runs at real-time priority when it may, so
/// the rate holds on a loaded host; the receiver counts the payload bytes that arrive.
pub fn udp_steps(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    steps: Steps,
    ip_size: usize,
) -> anyhow::Result<Source> {
    udp_paced(from, to_ns, to, port, steps, ip_size, None)
}

/// UDP at `mbps` on average (IP level) whose datagrams leave at Poisson times
/// (exponential gaps drawn from `seed`), as many independent small senders would
/// send; otherwise as [`udp_cbr`]. Unlike constant-rate traffic it builds a queue now
/// and then below a link's rate, and its packets fall between two probes at random.
pub fn udp_poisson(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    mbps: f64,
    ip_size: usize,
    seed: u64,
) -> anyhow::Result<Source> {
    udp_paced(
        from,
        to_ns,
        to,
        port,
        Steps::constant(mbps),
        ip_size,
        Some(seed),
    )
}

fn udp_paced(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    steps: Steps,
    ip_size: usize,
    poisson: Option<u64>,
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
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // Real-time, as the delay line: at normal priority the sender lost the CPU
            // to mgrpd's real-time pacer and the probes' kernel work exactly while
            // trains ran, sent less then and caught up between them, so the traffic
            // riding in the probes was below the rate the tests take as the truth
            // (pathload-rs's `sender_mgrp_cbr_riding` failed under load). Without the
            // privilege it runs as before.
            mgrp_rt::thread::set_timer_slack(1);
            let _ = mgrp_rt::thread::set_realtime(20);
            let buf = vec![0x5a; payload];
            let mut draws = poisson.map(crate::Seeded::new);
            let t0 = Instant::now();
            // The next datagram's due time, as an offset from t0.
            let mut due = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let now = t0.elapsed();
                if due > now {
                    std::thread::sleep((due - now).min(Duration::from_millis(50)));
                    continue;
                }
                let mbps = steps.at(due);
                if mbps <= 0.0 {
                    due += steps.step.min(Duration::from_millis(10));
                    continue;
                }
                let _ = tx.send(&buf);
                let mean = ip_size as f64 * 8.0 / (mbps * 1e6);
                let factor = draws.as_mut().map_or(1.0, |d| -(1.0 - d.next_f64()).ln());
                due += Duration::from_secs_f64(mean * factor);
            }
        })
    };
    let drain = {
        let (stop, bytes) = (stop.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !stop.load(Ordering::Relaxed) {
                if let Ok(n) = sink.recv(&mut buf) {
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        })
    };
    Ok(Source {
        bytes,
        retransmits: Arc::default(),
        burst: Arc::default(),
        started: Instant::now(),
        threads: Stoppable::new(stop, vec![sender, drain]),
    })
}

/// Web-like TCP traffic: flows start at Poisson arrivals whose rate is drawn anew for
/// every 5 s interval, at most `max_flows` at once (an arrival beyond is skipped);
/// each sends a size drawn from 64 KB to 5 MB, weighted towards 64–200 KB, then closes.
#[derive(Debug, Clone, PartialEq)]
pub struct Web {
    /// Mean flow arrivals per second over the long run.
    pub flows_per_second: f64,
    /// Flows open at once, at most.
    pub max_flows: usize,
    /// Seed of every draw, so runs repeat their schedule.
    pub seed: u64,
}

impl Default for Web {
    /// The MGRP paper's setting (NTools, at most ten flows); 1.2 flows a second gives
    /// about 4 Mbit/s on average.
    fn default() -> Self {
        Self {
            flows_per_second: 1.2,
            max_flows: 10,
            seed: 42,
        }
    }
}

impl Web {
    /// The flows' start times (from the start) and sizes, without end: the schedule
    /// the traffic follows, a pure function of the settings.
    pub fn flows(&self) -> impl Iterator<Item = (Duration, u64)> + use<> {
        let mut rng = crate::Seeded::new(self.seed);
        let mean = self.flows_per_second;
        let (mut t, mut interval_end, mut rate) = (0.0_f64, 0.0, mean);
        std::iter::from_fn(move || {
            if t >= interval_end {
                // Each 5 s interval has its own arrival rate, a quarter to twice the mean
                // (mean 1.125 of it; scaled back to the mean).
                rate = mean * (0.25 + 1.75 * rng.next_f64()) / 1.125;
                interval_end += 5.0;
            }
            t += -(1.0 - rng.next_f64()).ln() / rate.max(1e-6);
            // 80 % in 64–200 KB, 20 % in 200 KB–5 MB, log-uniform within each.
            let (lo, hi): (f64, f64) = if rng.next_f64() < 0.8 {
                (64e3, 200e3)
            } else {
                (200e3, 5e6)
            };
            let size = (lo.ln() + (hi.ln() - lo.ln()) * rng.next_f64()).exp();
            Some((Duration::from_secs_f64(t), size as u64))
        })
    }

    /// The flows that start within `duration`.
    pub fn schedule(&self, duration: Duration) -> Vec<(Duration, u64)> {
        self.flows().take_while(|&(t, _)| t < duration).collect()
    }
}

/// Starts [`Web`] traffic from `from` to `to:port` (a listener in `to_ns` reads every
/// flow to its end). The source's byte count is what the receivers read.
pub fn web(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    cfg: &Web,
) -> anyhow::Result<Source> {
    let listener = tcp_listen(to_ns, to, port)?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let acceptor = {
        let (stop, bytes) = (stop.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut readers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let bytes = bytes.clone();
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                        readers.push(std::thread::spawn(move || {
                            let mut buf = vec![0u8; 65_536];
                            while let Ok(n @ 1..) = s.read(&mut buf) {
                                bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for r in readers {
                let _ = r.join();
            }
        })
    };
    let schedule = cfg.flows();
    let max_flows = cfg.max_flows;
    let generator = {
        let stop = stop.clone();
        // Created in `from`, so the flows' threads and sockets are there too.
        from.spawn("web-flows", move || {
            let t0 = Instant::now();
            let mut flows: Vec<JoinHandle<()>> = Vec::new();
            for (at, size) in schedule {
                while t0.elapsed() < at && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep((at - t0.elapsed().min(at)).min(Duration::from_millis(50)));
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                flows.retain(|f| !f.is_finished());
                if flows.len() >= max_flows {
                    continue;
                }
                let stop = stop.clone();
                flows.push(std::thread::spawn(move || {
                    let Ok(mut s) = TcpStream::connect_timeout(
                        &SocketAddr::new(to, port),
                        Duration::from_secs(5),
                    ) else {
                        return;
                    };
                    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
                    let chunk = vec![0x77u8; 16_384];
                    let mut left = size;
                    while left > 0 && !stop.load(Ordering::Relaxed) {
                        let n = left.min(chunk.len() as u64) as usize;
                        match s.write(&chunk[..n]) {
                            Ok(w) => left -= w as u64,
                            Err(e) if mgrp_rt::rx::nothing_yet(&e) => {}
                            Err(_) => break,
                        }
                    }
                }));
            }
            for f in flows {
                let _ = f.join();
            }
            Ok(())
        })?
    };
    let generator = std::thread::spawn(move || {
        let _ = generator.join();
    });
    Ok(Source {
        bytes,
        retransmits: Arc::default(),
        burst: Arc::default(),
        started: Instant::now(),
        threads: Stoppable::new(stop, vec![generator, acceptor]),
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
    tcp_flow(from, to_ns, to, port, mbps, None, None)
}

/// A bulk TCP flow as [`tcp_source`] with no rate, whose socket uses the congestion
/// control `congestion` ("cubic", "bbr", "reno") whatever the namespace's default (a
/// namespace other than the host's may not change its default to one the host does
/// not allow, but a socket of a privileged process may use any the kernel has).
pub fn tcp_bulk(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    congestion: &str,
) -> anyhow::Result<Source> {
    tcp_flow(from, to_ns, to, port, None, None, Some(congestion))
}

/// A TCP flow from `from` to `to:port` whose sender paces it to `mbps` of payload: the
/// application writes all it can and the kernel spaces the segments out
/// (`SO_MAX_PACING_RATE`, which turns on TCP's own pacing without an fq qdisc), one
/// segment at a time. Unlike [`tcp_source`] with a rate, whose application writes a
/// burst every 10 ms, it reaches a bottleneck as a smooth flow, like a server that
/// paces its connections.
///
/// One segment at a time takes a setting, because a namespace's path has a round trip
/// of microseconds, which no real path has: TCP sizes each send (TSO autosizing) as
/// about a millisecond of its pacing rate plus `gso_max_size >> (min_rtt_us >>
/// tcp_tso_rtt_log)` bytes (Linux 5.18 and later), so below a few microseconds of least
/// round trip it sends several segments at once even with `tcp_tso_rtt_log = 0`
/// (measured on a 2-vCPU host, kernel 6.18: a least round trip of 4 µs, which 7 of 8
/// connections of the router placement measured, made 3 segments at line rate every
/// 8.4 ms at 4 Mbit/s, and 6 µs one; 3 µs makes 5 by the same sum; with the default
/// `tcp_tso_rtt_log` of 9, 6–10 every 17–25 ms). Those bursts put a sawtooth of 1–4 ms
/// into a probe stream's delays, which hides its trend. So the device the flow leaves
/// by gets `gso_max_segs 1`, which caps every send at one segment whatever the sizing
/// finds (set before the connection is made: a socket takes the cap when it
/// connects); the flow uses CUBIC whatever the host's default.
/// [`Source::max_segments_per_ms`] says whether that held.
/// [`tcp_paced_source_sized_by_kernel`] leaves the sizing to the kernel.
pub fn tcp_paced_source(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    mbps: f64,
) -> anyhow::Result<Source> {
    let dev = route_device(from, to)?;
    from.ip(&["link", "set", "dev", &dev, "gso_max_segs", "1"])
        .with_context(|| format!("cannot cap {dev}'s sends at one segment"))?;
    tcp_paced_source_sized_by_kernel(from, to_ns, to, port, mbps)
}

/// [`tcp_paced_source`] with its sends sized as the kernel sizes them on this path by
/// default (nothing capped: `tcp_tso_rtt_log`, `tcp_min_tso_segs` and the device's
/// `gso_max_segs` as they are): on a namespace path the paced flow then leaves bursts
/// of segments at line rate, as a real server's paced flow would only on a path of
/// microseconds. For experiments on bursty responsive cross traffic.
pub fn tcp_paced_source_sized_by_kernel(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    mbps: f64,
) -> anyhow::Result<Source> {
    tcp_flow(from, to_ns, to, port, None, Some(mbps), Some("cubic"))
}

/// The device `from` sends packets for `to` by (`ip route get`).
fn route_device(from: &Netns, to: IpAddr) -> anyhow::Result<String> {
    let to = to.to_string();
    let route = from.ip(&["-o", "route", "get", &to])?;
    let mut words = route.split_whitespace();
    while let Some(w) = words.next() {
        if w == "dev"
            && let Some(dev) = words.next()
        {
            return Ok(dev.to_owned());
        }
    }
    anyhow::bail!("no device in the route to {to}: {route}")
}

fn tcp_flow(
    from: &Netns,
    to_ns: &Netns,
    to: IpAddr,
    port: u16,
    mbps: Option<f64>,
    paced: Option<f64>,
    congestion: Option<&str>,
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
    if let Some(rate) = paced {
        // The pacing rate counts the segments' bytes with their TCP and IP headers:
        // 1500 per 1448 of payload.
        let bytes_per_s = (rate * 1e6 / 8.0 * 1500.0 / 1448.0) as libc::c_ulong;
        set_max_pacing_rate(&stream, bytes_per_s)?;
    }
    if let Some(cc) = congestion {
        nix::sys::socket::setsockopt(
            &stream,
            nix::sys::socket::sockopt::TcpCongestion,
            &std::ffi::OsString::from(cc),
        )
        .with_context(|| format!("cannot make the TCP flow use {cc} (not in this kernel?)"))?;
    }
    let retransmits = Arc::new(AtomicU64::new(0));
    let burst = Arc::new(AtomicU64::new(0));
    // A paced flow is watched for bursts: its data segments out, read every
    // millisecond from a second handle on its socket.
    let watcher = match paced {
        Some(_) => {
            let (watched, stop, burst) = (stream.try_clone()?, stop.clone(), burst.clone());
            Some(std::thread::spawn(move || {
                let mut last = data_segs_out(&watched);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    let now = data_segs_out(&watched);
                    if let (Some(a), Some(b)) = (last, now) {
                        burst.fetch_max(u64::from(b.wrapping_sub(a)) + 1, Ordering::Relaxed);
                    }
                    last = now;
                }
            }))
        }
        None => None,
    };
    let sender = {
        let (stop, retransmits) = (stop.clone(), retransmits.clone());
        std::thread::spawn(move || {
            let step = Duration::from_millis(10);
            let chunk = mbps.map_or(1 << 16, |r| ((r * 1e6 / 8.0) * step.as_secs_f64()) as usize);
            let mut buf = vec![0u8; chunk.max(1)];
            let t0 = Instant::now();
            let mut sent = 0u64;
            let mut last_info = t0;
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
                if last_info.elapsed() >= Duration::from_millis(100) {
                    last_info = Instant::now();
                    if let Some(r) = total_retransmits(&stream) {
                        retransmits.store(r, Ordering::Relaxed);
                    }
                }
                sent += buf.len() as u64;
                n += 1;
            }
            if let Some(r) = total_retransmits(&stream) {
                retransmits.store(r, Ordering::Relaxed);
            }
            let _ = stream.shutdown(std::net::Shutdown::Write);
        })
    };
    let mut threads = vec![sender, receiver];
    threads.extend(watcher);
    Ok(Source {
        bytes,
        retransmits,
        burst,
        started: Instant::now(),
        threads: Stoppable::new(stop, threads),
    })
}

/// Caps `stream`'s sending rate at `bytes_per_s` (`SO_MAX_PACING_RATE`).
fn set_max_pacing_rate(stream: &TcpStream, bytes_per_s: libc::c_ulong) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket and an option value of the size given.
    let r = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&raw const bytes_per_s).cast(),
            size_of::<libc::c_ulong>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The connection's retransmitted segments so far (`TCP_INFO`).
fn total_retransmits(stream: &TcpStream) -> Option<u64> {
    let b = mgrp_tool::tcpinfo::read(stream).ok()?;
    mgrp_tool::tcpinfo::parse(&b).map(|t| u64::from(t.total_retrans))
}

/// The data segments `stream` has sent (`tcpi_data_segs_out`, Linux 4.6 and later).
fn data_segs_out(stream: &TcpStream) -> Option<u32> {
    mgrp_tool::tcpinfo::data_segs_out(&mgrp_tool::tcpinfo::read(stream).ok()?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_the_paper_and_repeat() {
        let s = Steps::paper(Duration::from_secs(45));
        let at = |secs: u64| s.at(Duration::from_secs(secs));
        assert_eq!(
            [at(0), at(44), at(45), at(100), at(135), at(180), at(269)],
            [1.0, 1.0, 3.0, 5.0, 6.0, 4.0, 2.0]
        );
        assert_eq!(at(270), 1.0);
        assert_eq!(s.period(), Duration::from_secs(270));
        assert_eq!(Steps::constant(2.5).at(Duration::from_secs(10_000)), 2.5);
    }

    #[test]
    fn on_off_bursts_last_on_and_start_at_the_mean_period() {
        let on = Duration::from_millis(8);
        let s = Steps::on_off(
            50.0,
            on,
            Duration::from_millis(200),
            Duration::from_secs(600),
            3,
        );
        assert_eq!(s.step, Duration::from_millis(1));
        assert!(s.mbps.iter().all(|&r| r == 0.0 || r == 50.0));
        let starts = s
            .mbps
            .windows(2)
            .filter(|w| w[0] == 0.0 && w[1] > 0.0)
            .count();
        // 600 s at one burst per 200 ms: 3000 bursts, each 8 ms (a burst that starts
        // right after another merges with it, which exponential gaps make rare).
        assert!((2700..3300).contains(&starts), "{starts} bursts");
        let busy = s.mbps.iter().filter(|&&r| r > 0.0).count();
        let mean_on = busy as f64 / starts as f64;
        assert!((8.0..8.5).contains(&mean_on), "{mean_on} ms on");
        assert_eq!(
            s,
            Steps::on_off(
                50.0,
                on,
                Duration::from_millis(200),
                Duration::from_secs(600),
                3
            )
        );
    }

    #[test]
    fn web_flows_are_poisson_sized_as_the_paper_and_repeat() {
        let cfg = Web::default();
        let day = cfg.schedule(Duration::from_secs(2000));
        assert_eq!(day, cfg.schedule(Duration::from_secs(2000)));
        let per_second = day.len() as f64 / 2000.0;
        assert!(
            (0.8 * cfg.flows_per_second..1.2 * cfg.flows_per_second).contains(&per_second),
            "{per_second} flows a second"
        );
        assert!(day.iter().all(|&(_, s)| (64_000..=5_000_000).contains(&s)));
        let small = day.iter().filter(|&&(_, s)| s <= 200_000).count() as f64 / day.len() as f64;
        assert!(
            (0.75..0.85).contains(&small),
            "{small} of flows up to 200 KB"
        );
        assert!(day.windows(2).all(|w| w[0].0 <= w[1].0));
        let other = Web {
            seed: 7,
            ..Web::default()
        };
        assert_ne!(day, other.schedule(Duration::from_secs(2000)));
    }
}
