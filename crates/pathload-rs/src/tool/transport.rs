//! The two ways probes travel, on both sides: probe transactions through `mgrpd`
//! (`mgrp-client`), or plain UDP paced by this tool against absolute deadlines.
//!
//! Either way the receiver gets, per probe, the sender's stamp and the kernel's receive
//! stamp, and the sender reports every departure's stamp; so the estimator sees the
//! same data whichever transport carried it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Arrival;
use crate::control::{PROBE_HEADER_LEN, ProbeHeader, ProbeKind, Transport};
use anyhow::Context;
use mgrp_client::DepartureClock;
use mgrp_client::blocking::Client;
use mgrp_client::{Probe, Train};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::tool::sys;

/// Sleep until this close to a deadline, then spin (the pacing this machine measured
/// best: timer wake-ups cost 20–50 µs, a 50 µs margin is too small).
const SPIN_MARGIN_NS: i64 = 150_000;

/// The first probe leaves this long after the stream is set up, so that probe 0 is
/// paced like every other one.
const LEAD_NS: i64 = 200_000;

/// How often listener threads look at their stop flag.
const POLL: Duration = Duration::from_millis(100);

/// A probe as the receiver saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) kind: ProbeKind,
    pub(crate) fleet: u32,
    pub(crate) stream: u32,
    pub(crate) arrival: Arrival,
}

/// What the sender reports of a train or stream it sent.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sent {
    pub(crate) stamps: Vec<i64>,
    pub(crate) competing_rider_bytes: u64,
    pub(crate) rider_bytes: u64,
    pub(crate) riding_probe_bytes: u64,
    /// Whether `stamps` are the kernel's, taken as each probe entered the sending
    /// host's egress queue (over MGRP, when every probe has one); otherwise they were
    /// read in user space just before each send.
    pub(crate) kernel_clock: bool,
}

/// One train or stream to send.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batch {
    pub(crate) kind: ProbeKind,
    pub(crate) fleet: u32,
    pub(crate) stream: u32,
    pub(crate) packets: u32,
    pub(crate) size: u32,
    pub(crate) spacing_ns: u64,
    pub(crate) rider_probes: u32,
}

impl Batch {
    fn header(&self, seq: u32, sent_ns: i64) -> ProbeHeader {
        ProbeHeader {
            kind: self.kind,
            fleet: self.fleet,
            stream: self.stream,
            seq,
            sent_ns,
        }
    }
}

/// IP and UDP header bytes for a destination: what a probe's payload leaves out of its
/// IP size.
fn udp_overhead(ip: IpAddr) -> u32 {
    if ip.is_ipv4() { 28 } else { 48 }
}

/// The sending half.
#[derive(Debug)]
pub(crate) enum Sender {
    /// Plain UDP, paced here.
    Udp {
        socket: Socket,
        overhead: u32,
        buf: Vec<u8>,
    },
    /// Probe transactions through mgrpd.
    Mgrp {
        client: Box<Client>,
        destination: IpAddr,
        ports: (u16, u16),
        piggyback: bool,
    },
}

impl Sender {
    /// A UDP sender from `src_port` to `dst`.
    pub(crate) fn udp(dst: SocketAddr, src_port: u16) -> anyhow::Result<Self> {
        let domain = if dst.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        let any: IpAddr = if dst.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        socket
            .bind(&SockAddr::from(SocketAddr::new(any, src_port)))
            .with_context(|| {
                format!("cannot bind UDP probe port {src_port}; pick another with --probe-port")
            })?;
        let _ = socket.set_send_buffer_size(1 << 20);
        socket
            .connect(&SockAddr::from(dst))
            .with_context(|| format!("cannot send UDP probes to {dst}"))?;
        Ok(Self::Udp {
            socket,
            overhead: udp_overhead(dst.ip()),
            buf: vec![0; 65_536],
        })
    }

    /// A sender through the mgrpd at `socket`.
    pub(crate) fn mgrp(
        socket: &PathBuf,
        destination: IpAddr,
        ports: (u16, u16),
        piggyback: bool,
    ) -> anyhow::Result<Self> {
        let client = Client::connect(socket)?;
        Ok(Self::Mgrp {
            client: Box::new(client),
            destination,
            ports,
            piggyback,
        })
    }

    /// Sends a train or stream; returns when the last probe has left.
    pub(crate) fn send(&mut self, b: &Batch) -> anyhow::Result<Sent> {
        match self {
            Self::Udp {
                socket,
                overhead,
                buf,
            } => Ok(send_udp(socket, *overhead, buf, b)),
            Self::Mgrp {
                client,
                destination,
                ports,
                piggyback,
            } => send_mgrp(client, *destination, *ports, *piggyback, b),
        }
    }
}

fn send_udp(socket: &Socket, overhead: u32, buf: &mut [u8], b: &Batch) -> Sent {
    let payload = (b.size.saturating_sub(overhead) as usize).clamp(PROBE_HEADER_LEN, buf.len());
    let spacing = i64::try_from(b.spacing_ns).unwrap_or(i64::MAX / 4);
    let mut stamps = Vec::with_capacity(b.packets as usize);
    let mut deadline = sys::mono_now() + LEAD_NS;
    for seq in 0..b.packets {
        if seq > 0 {
            deadline += spacing;
        }
        if deadline - sys::mono_now() > SPIN_MARGIN_NS {
            sys::sleep_until(deadline - SPIN_MARGIN_NS);
        }
        let mut now = sys::mono_now();
        while now < deadline {
            std::hint::spin_loop();
            now = sys::mono_now();
        }
        // Later than half a gap (the thread was kept from running): the rest keeps
        // its spacing from here. Catching up would send a burst, which queues on
        // the path and reads as a rate above the available bandwidth; the long gap
        // instead splits the stream where the receiver analyses it.
        if now - deadline > spacing / 2 {
            deadline = now;
        }
        let stamp = sys::wall_now();
        b.header(seq, stamp).emit(buf);
        // A probe the kernel refuses (a full queue) has no departure stamp; the
        // receiver counts it lost.
        if socket.send(&buf[..payload]).is_ok() {
            stamps.push(stamp);
        }
    }
    Sent {
        stamps,
        ..Sent::default()
    }
}

fn send_mgrp(
    client: &Client,
    destination: IpAddr,
    ports: (u16, u16),
    piggyback: bool,
    b: &Batch,
) -> anyhow::Result<Sent> {
    let mut train = Train::new(destination).ports(ports.0, ports.1);
    let mut header = [0u8; PROBE_HEADER_LEN];
    let size = u16::try_from(b.size).context("probe size over 65535")?;
    // Back-to-back trains go as close as the daemon allows; the sender stamps say how
    // close that was, and streams are never closer than trains.
    let min_gap = client.limits().map_or(0, |l| l.min_gap_ns);
    // MGRP stamps and numbers each probe itself; the header says only which stream,
    // so it is the same for every probe and the train travels to mgrpd as a few runs
    // of equal probes with counts (a header per probe made a 1 Gbit/s stream a
    // 100 KB request, over mgrpd's limits.max-request-bytes).
    b.header(0, 0).emit(&mut header);
    for seq in 0..b.packets {
        let gap = if seq == 0 {
            0
        } else {
            b.spacing_ns.max(min_gap)
        };
        let mut p = Probe::new(size)
            .gap(Duration::from_nanos(gap))
            .header(header.to_vec());
        if !piggyback || b.kind == ProbeKind::Train || seq >= b.rider_probes {
            p = p.no_piggyback();
        }
        train = train.probe(p);
    }
    let report = client.send_train(train)?;
    let mut sent = Sent {
        competing_rider_bytes: report.competing_rider_bytes,
        rider_bytes: report.rider_bytes,
        kernel_clock: report.departure_clock == DepartureClock::KernelQueue,
        ..Sent::default()
    };
    // One clock for the whole stream: the kernel's queue-entry stamps where every
    // probe has one (the departure into the path), else the daemon's for all.
    sent.stamps = report
        .departure_times()
        .map(|(_, t)| t.as_nanos() as i64)
        .collect();
    sent.riding_probe_bytes = report
        .departures
        .iter()
        .filter(|d| d.departed.is_some() && d.rider_bytes > 0)
        .map(|_| u64::from(b.size))
        .sum();
    if sent.stamps.is_empty() {
        anyhow::bail!(
            "mgrpd could not send any of the {} probes to {destination} (its log says why)",
            b.packets
        );
    }
    Ok(sent)
}

/// The receiving half: a thread that hands every probe it gets to a channel.
#[derive(Debug)]
pub(crate) struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Probes that arrived without a kernel stamp (stamped in user space instead).
    pub(crate) unstamped: Arc<AtomicU64>,
}

impl Listener {
    /// Starts listening on `port` for probes of `transport` (through the mgrpd at
    /// `socket` for MGRP; for UDP on the address family of `peer`).
    pub(crate) fn start(
        transport: Transport,
        port: u16,
        peer: IpAddr,
        socket: &PathBuf,
    ) -> anyhow::Result<(Self, mpsc::Receiver<Seen>)> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let unstamped = Arc::new(AtomicU64::new(0));
        let thread = match transport {
            Transport::Udp => {
                let s = udp_listen_socket(peer, port)?;
                let (stop, unstamped) = (stop.clone(), unstamped.clone());
                std::thread::spawn(move || udp_listen(&s, &tx, &stop, &unstamped))
            }
            Transport::Mgrp => {
                let client = Client::connect(socket)?;
                let mut probes = client
                    .listen(port)
                    .with_context(|| format!("mgrpd would not deliver probes for port {port}"))?;
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let _client = client;
                    while !stop.load(Ordering::Relaxed) {
                        match probes.next_probe_timeout(POLL) {
                            Ok(Some(p)) => {
                                let Some(h) = ProbeHeader::parse(&p.header) else {
                                    continue;
                                };
                                let seen = Seen {
                                    kind: h.kind,
                                    fleet: h.fleet,
                                    stream: h.stream,
                                    arrival: Arrival {
                                        seq: u32::from(p.seq),
                                        sent_ns: p.sender_time.as_nanos() as i64,
                                        received_ns: p.receive_time.as_nanos() as i64,
                                    },
                                };
                                if tx.send(seen).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => {}
                            Err(e) => {
                                eprintln!("pathload-rs: probe stream from mgrpd ended: {e}");
                                return;
                            }
                        }
                    }
                })
            }
        };
        Ok((
            Self {
                stop,
                thread: Some(thread),
                unstamped,
            },
            rx,
        ))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn udp_listen_socket(peer: IpAddr, port: u16) -> anyhow::Result<Socket> {
    let (domain, any): (Domain, IpAddr) = if peer.is_ipv4() {
        (Domain::IPV4, Ipv4Addr::UNSPECIFIED.into())
    } else {
        (Domain::IPV6, Ipv6Addr::UNSPECIFIED.into())
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.bind(&SockAddr::from(SocketAddr::new(any, port)))
        .with_context(|| format!("cannot listen for UDP probes on port {port}; is another pathload-rs running? pick another with --probe-port"))?;
    // A whole 300-packet stream of full-size probes fits.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_read_timeout(Some(POLL))?;
    sys::enable_rx_timestamps(&s).context("the kernel refused receive timestamps")?;
    Ok(s)
}

fn udp_listen(s: &Socket, tx: &mpsc::Sender<Seen>, stop: &AtomicBool, unstamped: &AtomicU64) {
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        match sys::recv_stamped(s, &mut buf) {
            Ok((n, stamp)) => {
                let Some(h) = ProbeHeader::parse(&buf[..n]) else {
                    continue;
                };
                let received_ns = stamp.unwrap_or_else(|| {
                    unstamped.fetch_add(1, Ordering::Relaxed);
                    sys::wall_now()
                });
                let seen = Seen {
                    kind: h.kind,
                    fleet: h.fleet,
                    stream: h.stream,
                    arrival: Arrival {
                        seq: h.seq,
                        sent_ns: h.sent_ns,
                        received_ns,
                    },
                };
                if tx.send(seen).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                eprintln!("pathload-rs: UDP probe socket failed: {e}");
                return;
            }
        }
    }
}
