//! The two ways probes travel, on both sides: probe transactions through `mgrpd`
//! (`mgrp-client`), or plain UDP paced here against absolute deadlines.
//!
//! Either way the receiver gets, per probe, the sender's stamp and the kernel's receive
//! stamp, and the sender reports every departure's stamp; so the estimator sees the
//! same data whichever transport carried it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::control::{Batch, PROBE_HEADER_LEN, ProbeHeader, SentReport, Tag, Transport};
use anyhow::Context;
use mgrp_client::DepartureClock;
use mgrp_client::blocking::Client;
use mgrp_client::{Probe, Train};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::sys;

/// How often listener threads look at their stop flag.
const POLL: Duration = Duration::from_millis(100);

/// A probe as the receiver saw it.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// The batch it belongs to.
    pub tag: Tag,
    /// Its position and stamps.
    pub arrival: Arrival,
}

/// A probe's position in its batch and its two stamps: the sender's (over MGRP the
/// daemon's departure stamp; over UDP the one in the header) and the receiver's
/// kernel stamp, in ns (each on its own host's realtime clock; only differences
/// matter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Position in the batch, from 0.
    pub seq: u32,
    /// Sender stamp, ns.
    pub sent_ns: i64,
    /// Receive stamp, ns.
    pub received_ns: i64,
}

fn header(tag: Tag, seq: u32, sent_ns: i64) -> ProbeHeader {
    ProbeHeader { tag, seq, sent_ns }
}

/// IP and UDP header bytes for a destination: what a probe's payload leaves out of its
/// IP size.
fn udp_overhead(ip: IpAddr) -> u32 {
    if ip.is_ipv4() { 28 } else { 48 }
}

/// The sending half.
#[derive(Debug)]
pub(crate) enum Sender {
    /// Plain UDP, paced by this process's UDP pacing thread.
    Udp {
        /// The connected socket.
        socket: Arc<Socket>,
        /// IP and UDP header bytes per probe.
        overhead: u32,
    },
    /// Probe transactions through mgrpd.
    Mgrp {
        /// mgrpd's API.
        client: Box<Client>,
        /// The receiver.
        destination: IpAddr,
        /// Source and destination measurement ports.
        ports: (u16, u16),
        /// Whether riders may ride at all.
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
        // Several senders on one host (two overlay nodes, a tool's `snd` beside an
        // overlay, two measurements of one server to different receivers) may send
        // from the same probe port at once: the socket only sends, each to its own
        // receiver, so sharing the port is harmless and a second sender is not refused.
        socket.set_reuse_port(true)?;
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
            socket: Arc::new(socket),
            overhead: udp_overhead(dst.ip()),
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

    /// Sends a batch; returns when the last probe has left.
    pub(crate) fn send(&mut self, b: &Batch) -> anyhow::Result<SentReport> {
        self.send_unless(b, &AtomicBool::new(false))
    }

    /// Sends a batch, stopping early once `stop` is set (over UDP; a train handed to
    /// mgrpd runs to its end, within mgrpd's own limits): the probes not sent have no
    /// stamp. Returns when the last probe has left.
    pub(crate) fn send_unless(
        &mut self,
        b: &Batch,
        stop: &AtomicBool,
    ) -> anyhow::Result<SentReport> {
        match self {
            Self::Udp { socket, overhead } => {
                Ok(crate::udp_pacer::send(socket, *overhead, b, stop))
            }
            Self::Mgrp {
                client,
                destination,
                ports,
                piggyback,
            } => send_mgrp(client, *destination, *ports, *piggyback, b),
        }
    }
}

fn send_mgrp(
    client: &Client,
    destination: IpAddr,
    ports: (u16, u16),
    piggyback: bool,
    b: &Batch,
) -> anyhow::Result<SentReport> {
    let mut train = Train::new(destination).ports(ports.0, ports.1);
    let mut head = [0u8; PROBE_HEADER_LEN];
    // Back-to-back probes go as close as the daemon allows; the sender stamps say how
    // close that was.
    let min_gap = client.limits().map_or(0, |l| l.min_gap_ns);
    // MGRP stamps and numbers each probe itself; the header says only which batch,
    // so it is the same for every probe and the train travels to mgrpd as a few runs
    // of equal probes with counts (a header per probe made a 1 Gbit/s stream a
    // 100 KB request, over mgrpd's limits.max-request-bytes).
    header(b.tag, 0, 0).emit(&mut head);
    let mut sizes = Vec::with_capacity(b.packets() as usize);
    for (i, p) in b.probes().enumerate() {
        let size = u16::try_from(p.size).context("probe size over 65535")?;
        // The first probe's gap is the batch's lead, which mgrpd keeps from the
        // train's start.
        let gap = if i == 0 {
            p.gap_ns
        } else {
            p.gap_ns.max(min_gap)
        };
        let mut probe = Probe::new(size)
            .gap(Duration::from_nanos(gap))
            .header(head.to_vec());
        if !piggyback || !p.ride {
            probe = probe.no_piggyback();
        }
        train = train.probe(probe);
        sizes.push(u64::from(p.size));
    }
    let report = client.send_train(train)?;
    // One clock for the whole batch: the kernel's queue-entry stamps where every
    // probe has one (the departure into the path), else the daemon's for all.
    let mut stamps = vec![None; sizes.len()];
    for (seq, t) in report.departure_times() {
        if let Some(s) = stamps.get_mut(usize::from(seq)) {
            *s = Some(t.as_nanos() as i64);
        }
    }
    if stamps.iter().all(Option::is_none) {
        anyhow::bail!(
            "mgrpd could not send any of the {} probes to {destination} (its log says why)",
            sizes.len()
        );
    }
    let riding_probe_bytes = report
        .departures
        .iter()
        .filter(|d| d.departed.is_some() && d.rider_bytes > 0)
        .map(|d| sizes.get(usize::from(d.seq)).copied().unwrap_or(0))
        .sum();
    Ok(SentReport {
        tag: b.tag,
        sent: b.packets(),
        sender_stamps: stamps,
        competing_rider_bytes: report.competing_rider_bytes,
        rider_bytes: report.rider_bytes,
        riding_probe_bytes,
        kernel_stamps: report.departure_clock == DepartureClock::KernelQueue,
    })
}

/// Probes a listener holds for its session at most: a whole batch of the largest
/// kind (10,000 probes) fits; beyond, arrivals are dropped and counted, so a flood
/// at the probe port costs this process no memory.
pub const MAX_QUEUED_PROBES: usize = 16_384;

/// The receiving half: a thread that hands every probe it gets to a channel.
#[derive(Debug)]
pub(crate) struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Probes that arrived without a kernel stamp (stamped in user space instead).
    pub unstamped: Arc<AtomicU64>,
    /// Datagrams at the UDP probe port from an address other than the sender's,
    /// dropped: only the sender's probes count as arrivals.
    pub foreign: Arc<AtomicU64>,
    /// Probes dropped because [`MAX_QUEUED_PROBES`] were waiting.
    pub overflowed: Arc<AtomicU64>,
    /// Why the listening thread ended, if it ended on its own (its channel is then
    /// closed): the library prints nothing, the session says it.
    failure: Arc<Mutex<Option<String>>>,
}

impl Listener {
    /// Why the listening thread ended on its own, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        mgrp_rt::lock(&self.failure).clone()
    }

    /// Starts listening on `port` for probes of `transport` (through the mgrpd at
    /// `socket` for MGRP; for UDP on the address family of `peer`).
    pub(crate) fn start(
        transport: Transport,
        port: u16,
        peer: IpAddr,
        socket: &PathBuf,
    ) -> anyhow::Result<(Self, mpsc::Receiver<Seen>)> {
        let (tx, rx) = mpsc::sync_channel(MAX_QUEUED_PROBES);
        let stop = Arc::new(AtomicBool::new(false));
        let unstamped = Arc::new(AtomicU64::new(0));
        let foreign = Arc::new(AtomicU64::new(0));
        let overflowed = Arc::new(AtomicU64::new(0));
        let failure = Arc::new(Mutex::new(None));
        let thread = match transport {
            Transport::Udp => {
                let s = udp_listen_socket(peer, port)?;
                let counts = UdpCounts {
                    unstamped: unstamped.clone(),
                    foreign: foreign.clone(),
                    overflowed: overflowed.clone(),
                    failure: failure.clone(),
                };
                let stop = stop.clone();
                std::thread::spawn(move || udp_listen(&s, peer, &tx, &stop, &counts))
            }
            Transport::Mgrp => {
                let client = Client::connect(socket)?;
                let mut probes = client
                    .listen(port)
                    .with_context(|| format!("mgrpd would not deliver probes for port {port}"))?;
                let (stop, overflowed) = (stop.clone(), overflowed.clone());
                let failure = failure.clone();
                std::thread::spawn(move || {
                    let _client = client;
                    while !stop.load(Ordering::Relaxed) {
                        match probes.next_probe_timeout(POLL) {
                            Ok(Some(p)) => {
                                let Some(h) = ProbeHeader::parse(&p.header) else {
                                    continue;
                                };
                                let seen = Seen {
                                    tag: h.tag,
                                    arrival: Arrival {
                                        seq: u32::from(p.seq),
                                        sent_ns: p.sender_time.as_nanos() as i64,
                                        received_ns: p.receive_time.as_nanos() as i64,
                                    },
                                };
                                match tx.try_send(seen) {
                                    Ok(()) => {}
                                    Err(mpsc::TrySendError::Full(_)) => {
                                        overflowed.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(mpsc::TrySendError::Disconnected(_)) => return,
                                }
                            }
                            Ok(None) => {}
                            Err(e) => {
                                fail(&failure, format!("probe stream from mgrpd ended: {e}"));
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
                foreign,
                overflowed,
                failure,
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
        .with_context(|| format!("cannot listen for UDP probes on port {port}; is another measurement tool listening there? pick another with --probe-port"))?;
    // A whole 1000-probe batch of full-size probes fits.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_read_timeout(Some(POLL))?;
    sys::enable_rx_timestamps(&s).context("the kernel refused receive timestamps")?;
    Ok(s)
}

/// What a UDP listener counts, and where it says why it ended.
struct UdpCounts {
    unstamped: Arc<AtomicU64>,
    foreign: Arc<AtomicU64>,
    overflowed: Arc<AtomicU64>,
    failure: Arc<Mutex<Option<String>>>,
}

/// Records why a listening thread ends.
fn fail(failure: &Mutex<Option<String>>, why: String) {
    *failure
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
}

/// Takes the probes arriving at `s` from `sender` until `stop`; datagrams from any
/// other address are dropped (an off-path host could otherwise skew an estimate or
/// answer a proof), and no error a network can cause ends the thread.
fn udp_listen(
    s: &Socket,
    sender: IpAddr,
    tx: &mpsc::SyncSender<Seen>,
    stop: &AtomicBool,
    counts: &UdpCounts,
) {
    let mut buf = vec![0u8; 65_536];
    let sender = sender.to_canonical();
    while !stop.load(Ordering::Relaxed) {
        match sys::recv_stamped(s, &mut buf) {
            Ok((n, stamp, from)) => {
                if from.map(|f| f.ip().to_canonical()) != Some(sender) {
                    counts.foreign.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let Some(h) = ProbeHeader::parse(&buf[..n]) else {
                    continue;
                };
                let received_ns = stamp.unwrap_or_else(|| {
                    counts.unstamped.fetch_add(1, Ordering::Relaxed);
                    sys::wall_now()
                });
                let seen = Seen {
                    tag: h.tag,
                    arrival: Arrival {
                        seq: h.seq,
                        sent_ns: h.sent_ns,
                        received_ns,
                    },
                };
                match tx.try_send(seen) {
                    Ok(()) => {}
                    Err(mpsc::TrySendError::Full(_)) => {
                        counts.overflowed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(mpsc::TrySendError::Disconnected(_)) => return,
                }
            }
            Err(e) if sys::nothing_yet(&e) => {}
            // Only a broken socket ends the listener; what the host or a network
            // makes a receive fail with (buffers short, say) is waited out.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EBADF | libc::EFAULT | libc::EINVAL | libc::ENOTSOCK)
                ) =>
            {
                fail(&counts.failure, format!("UDP probe socket failed: {e}"));
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two senders on one host share the probe port (two overlay nodes, or a `snd`
    /// beside an overlay): the second is not refused with "address in use", which
    /// turned a neighbour's measurement into a refusal whenever two overlapped.
    /// Only the sender's datagrams count as arrivals: the same probe from another
    /// address is dropped and counted.
    #[test]
    fn probes_from_anyone_but_the_sender_are_dropped() {
        let port = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        };
        let sender = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (listener, rx) =
            Listener::start(Transport::Udp, port, sender, &PathBuf::new()).unwrap();
        let mut probe = vec![0u8; PROBE_HEADER_LEN];
        let tag = Tag::default();
        ProbeHeader {
            tag,
            seq: 7,
            sent_ns: 1,
        }
        .emit(&mut probe);
        let from = |a: [u8; 4]| std::net::UdpSocket::bind((Ipv4Addr::from(a), 0)).unwrap();
        from([127, 0, 0, 2])
            .send_to(&probe, (Ipv4Addr::LOCALHOST, port))
            .unwrap();
        from([127, 0, 0, 1])
            .send_to(&probe, (Ipv4Addr::LOCALHOST, port))
            .unwrap();
        let seen = rx
            .recv_timeout(Duration::from_secs(2))
            .expect("the sender's probe");
        assert_eq!(seen.arrival.seq, 7);
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        assert_eq!(listener.foreign.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn two_udp_senders_share_the_probe_port() {
        let port = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        };
        let to = |p: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, p));
        let a = Sender::udp(to(9), port).expect("the first sender");
        let b = Sender::udp(to(10), port).expect("a second sender on the same port");
        drop((a, b));
    }
}
