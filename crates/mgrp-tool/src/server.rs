//! The sender role: wait for a receiver on the control port and send the batches it
//! asks for. [`Server`] is the sender as a library (the Measurement Overlay serves its
//! neighbours with it); every tool's `snd` runs one through [`serve_command`]. It
//! knows no tool: one sender serves pathload-rs, pathChirp and badabing receivers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::time::Instant;

use crate::capture::{Capture, Direction};
use crate::control::{
    Batch, CONTROL_VERSION, DEFAULT_CONTROL_PORT, DEFAULT_SENDER_PROBE_PORT, MAX_PROBE_IP_BYTES,
    MAX_STAMPS, MAX_TCP_FLOWS, MIN_PROBE_IP_BYTES, PROOF_PROBE_BYTES, Reply, Request,
    STAMPS_IDLE_S, TcpFlow, Transport,
};
use anyhow::Context;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::budget::{Budgets, Limits, Over};
use crate::conn::Conn;
use crate::requester::Requester;
use crate::sys;
use crate::transport::Sender;
use mgrp_core::peers::Prefix;

mod connection;
#[doc(hidden)]
pub mod fuzzing;

use connection::{Connection, Host, Query, Step, proof_tag};

/// A receiver that says nothing for this long is gone.
const IDLE_LIMIT: Duration = Duration::from_secs(120);

/// A receiver that does not read an answer within this long is gone: the sender's
/// thread (and its shutdown) never waits on a receiver longer.
const WRITE_LIMIT: Duration = Duration::from_secs(10);

/// Longest one measurement may last: its receiver is then told so and its place goes
/// to the next (pathload's longest run is a minute; the continuous methods run for
/// their time limit, a few minutes).
pub const MAX_SESSION: Duration = Duration::from_secs(600);

/// Packet captures for stamps queries at once, for every receiver together; each is an
/// AF_PACKET socket with a ring of its own.
pub const MAX_CAPTURES: usize = 16;

/// Packet captures one requester may have at once: one per address it asks from (a
/// host with a second address, or a prefix's hosts), so that no requester takes
/// every capture.
pub const MAX_CAPTURES_PER_REQUESTER: usize = 2;

/// Largest probe a connection's path carries: its TCP segment size plus the IP and
/// TCP headers with timestamps (pathload 1.3.2 reads TCP_MAXSEG), at most
/// [`MAX_PROBE_IP_BYTES`].
fn max_size(conn: &Conn) -> u32 {
    let mss = socket2::SockRef::from(conn.stream())
        .tcp_mss()
        .unwrap_or(1448);
    let v6 = conn.stream().peer_addr().is_ok_and(|a| a.is_ipv6());
    let headers = if v6 { 72 } else { 52 };
    (mss + headers).clamp(MIN_PROBE_IP_BYTES, MAX_PROBE_IP_BYTES)
}

/// How a sender serves measurements. [`ServeOptions::new`] gives the tool's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// Control port to listen on.
    pub port: u16,
    /// Address to listen on (default: every address, IPv6 and IPv4).
    pub bind: Option<IpAddr>,
    /// How probes travel; receivers must use the same.
    pub transport: Transport,
    /// mgrpd's API socket (MGRP transport).
    pub socket: PathBuf,
    /// The sender's probe port (UDP source port; MGRP measurement port).
    pub probe_port: u16,
    /// Whether application traffic may ride in the probes when a receiver asks.
    pub piggyback: bool,
    /// What serves, for the hello and for messages ("pathload-rs snd").
    pub name: String,
    /// Longest one measurement may hold this sender ([`MAX_SESSION`] by default).
    pub max_session: Duration,
    /// The hosts it serves: any (empty, the default) or those inside these prefixes;
    /// the others are told so and turned away.
    pub allow: Vec<Prefix>,
    /// Probe bytes each requester may have per hour ([`DEFAULT_BYTES_PER_HOUR`]).
    pub max_bytes_per_hour: u64,
    /// Probe bits per second each requester may have, averaged over
    /// `probe_rate_window` ([`DEFAULT_PROBE_BPS`]).
    pub max_probe_bps: u64,
    /// The window a requester's probe rate is averaged over ([`PROBE_RATE_WINDOW`]).
    pub probe_rate_window: Duration,
    /// How many leading bits of an IPv6 address make one requester
    /// ([`DEFAULT_IPV6_PREFIX`]): every limit counts a requester, not an address.
    pub ipv6_prefix: u8,
    /// How long a connection may last before it claims a measurement
    /// ([`UNCLAIMED_LIFETIME`]).
    pub unclaimed_lifetime: Duration,
    /// How long the measurement holding the exclusive place may go without a batch
    /// before it loses it ([`EXCLUSIVE_IDLE`]).
    pub exclusive_idle: Duration,
    /// How much it serves at once ([`SenderLimits::default`]).
    pub limits: SenderLimits,
}

/// Probe bytes a requester may have per hour unless configured otherwise: 100 MB, a
/// pathload run every minute on a 10 Mbit/s path (about 1.3 MB each) with room to
/// spare; a path of 1 Gbit/s needs about 90 MB for one run, so a sender measured over
/// such paths raises it.
pub const DEFAULT_BYTES_PER_HOUR: u64 = 100_000_000;

/// Probe bits per second a requester may have unless configured otherwise, averaged
/// over [`PROBE_RATE_WINDOW`]: 300 Mbit/s, 375 MB in any 10 s. A pathload run over a
/// 1 Gbit/s path draws about 90 MB in all (fleets of 12 streams of at most 1000
/// probes of 1500 bytes, 18 MB a fleet at 1 Gbit/s, sent in a fraction of a second in
/// its fast mode), so it fits four times over in a window, beside the light methods
/// (pathChirp's 0.25 Mbit/s, badabing's less); what it stops is a requester drawing
/// probes at line rate for longer than a measurement ever does.
pub const DEFAULT_PROBE_BPS: u64 = 300_000_000;

/// The window a requester's probe rate is averaged over (iperf3's
/// `--server-bitrate-limit` averages over 5 s by default; a pathload fleet is
/// bursty, so twice that).
pub const PROBE_RATE_WINDOW: Duration = Duration::from_secs(10);

/// The IPv6 prefix length that makes one requester: a /64 is what one site or one
/// host gets, and every address in it is that host's for the asking.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// How long a connection may last before it claims a measurement: a receiver says
/// hello after five pings (a few round trips), and a query is one request and its
/// answer, so 30 s is ample on any path, and a host that opens connections and only
/// pings on them gives each back within that.
pub const UNCLAIMED_LIFETIME: Duration = Duration::from_secs(30);

/// How long the measurement holding the exclusive place (pathload, btc) may go
/// without asking for a batch before the place goes to the next: pathload idles at
/// most 9 stream durations between streams (a stream lasts 40 ms, longer only at
/// rates below a few hundred kbit/s) and btc's runs take a few seconds, so 30 s
/// without a batch is a receiver that holds the place and measures nothing.
pub const EXCLUSIVE_IDLE: Duration = Duration::from_secs(30);

impl ServeOptions {
    /// The tool's defaults for serving over `transport`.
    pub fn new(transport: Transport) -> Self {
        Self {
            port: DEFAULT_CONTROL_PORT,
            bind: None,
            transport,
            socket: PathBuf::from(mgrp_client::DEFAULT_SOCKET),
            probe_port: DEFAULT_SENDER_PROBE_PORT,
            piggyback: true,
            name: "mgrp-tool".into(),
            max_session: MAX_SESSION,
            allow: Vec::new(),
            max_bytes_per_hour: DEFAULT_BYTES_PER_HOUR,
            max_probe_bps: DEFAULT_PROBE_BPS,
            probe_rate_window: PROBE_RATE_WINDOW,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            unclaimed_lifetime: UNCLAIMED_LIFETIME,
            exclusive_idle: EXCLUSIVE_IDLE,
            limits: SenderLimits::default(),
        }
    }

    /// What to warn of at start when no allow-list bounds who may measure: a node's
    /// links name the paths into it, so its own configuration cannot know who
    /// measures it, and without `allow` any host that reaches the port may.
    pub fn open_to_all(&self) -> Option<String> {
        self.allow.is_empty().then(|| {
            format!(
                "any host that reaches control port {} may measure this host ({} MB of probes an hour and {} Mbit/s over {} s to each requester, an IPv4 address or an IPv6 /{}): name the hosts that measure it with an allow-list to serve only them",
                self.port,
                self.max_bytes_per_hour / 1_000_000,
                self.max_probe_bps / 1_000_000,
                self.probe_rate_window.as_secs(),
                self.ipv6_prefix
            )
        })
    }
}

/// What a serving sender reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeEvent {
    /// A receiver connected, running this tool (empty if it did not say).
    Connected(SocketAddr, String),
    /// Its measurement ended after this many batches, or with this error.
    Done(SocketAddr, Result<u32, String>),
    /// A receiver was turned away (over a limit, shutting down), with the message it
    /// got.
    Refused(SocketAddr, String),
    /// A request of a receiver's failed here (mgrpd refused a train, a probe socket
    /// could not be opened): the receiver got the message, and the fix lies on this
    /// host.
    Failed(SocketAddr, String),
    /// The measurement for this receiver runs, but not as well as it could; the
    /// message says why and what to do.
    Warning(SocketAddr, String),
}

/// A sender listening for receivers; it serves several measurements at once, up to
/// [`MAX_MEASUREMENTS`] in all and [`MAX_MEASUREMENTS_PER_HOST`] per receiving host,
/// each paced on its own (over MGRP by mgrpd, which interleaves trains to different
/// receivers; over UDP by the one pacing thread of this process).
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    opts: ServeOptions,
    /// Whom it serves: `opts.allow` until [`Server::set_access`] changes it.
    allow: std::sync::RwLock<Vec<Prefix>>,
    captures: Captures,
    budgets: Mutex<Budgets>,
    /// The measurements running, and how many it serves at once (`opts.limits`
    /// until [`Server::set_limits`]).
    slots: Slots,
    accept_errors: std::sync::atomic::AtomicU64,
}

/// The captures of segments sent to receivers that asked for stamps, by address, each
/// with when it was last asked and the requester that asked.
type Captures = Mutex<HashMap<IpAddr, (Capture, Instant, Requester)>>;

/// How often a waiting server looks at its stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

impl Server {
    /// Listens on the control port `opts` names.
    pub fn bind(opts: ServeOptions) -> anyhow::Result<Self> {
        opts.limits
            .check()
            .map_err(|e| anyhow::anyhow!("the sender's limits: {e}"))?;
        let bind = opts.bind.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let domain = if bind.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        if bind.is_ipv6() {
            // Receivers over IPv4 too, unless the host has IPv6 off.
            let _ = s.set_only_v6(false);
        }
        s.set_reuse_address(true)?;
        let addr = SocketAddr::new(bind, opts.port);
        s.bind(&SockAddr::from(addr)).with_context(|| {
            format!("cannot listen on control port {addr}; is another measurement sender running? pick another with --port")
        })?;
        s.listen(16)?;
        // Accepts wait in short polls, so that a stop is noticed.
        s.set_nonblocking(true)?;
        Ok(Self {
            listener: s.into(),
            budgets: Mutex::new(Budgets::new(Limits {
                bytes_per_hour: opts.max_bytes_per_hour,
                bits_per_second: opts.max_probe_bps,
                rate_window: opts.probe_rate_window,
            })),
            allow: std::sync::RwLock::new(opts.allow.clone()),
            slots: Slots::new(opts.limits),
            opts,
            captures: Mutex::new(HashMap::new()),
            accept_errors: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Whom it serves (any host when `allow` is empty) and each requester's budget,
    /// from the next connection on, while it serves: for a configuration reloaded. A
    /// measurement in flight keeps running; what each requester spent stays counted.
    pub fn set_access(&self, allow: Vec<Prefix>, bytes_per_hour: u64, probe_bps: u64) {
        *self
            .allow
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = allow;
        let mut budgets = mgrp_rt::lock(&self.budgets);
        let limits = Limits {
            bytes_per_hour,
            bits_per_second: probe_bps,
            rate_window: self.opts.probe_rate_window,
        };
        budgets.set_limits(limits);
    }

    /// How much it serves at once, from the next connection on (a configuration
    /// reloaded): measurements in flight keep their places, and a count lowered
    /// below what runs refuses new ones until enough have ended.
    pub fn set_limits(&self, limits: SenderLimits) -> anyhow::Result<()> {
        limits
            .check()
            .map_err(|e| anyhow::anyhow!("the sender's limits: {e}"))?;
        mgrp_rt::lock(&self.slots.0).limits = limits;
        Ok(())
    }

    /// How much it serves at once now.
    pub fn limits(&self) -> SenderLimits {
        mgrp_rt::lock(&self.slots.0).limits
    }

    /// Accept errors waited out so far.
    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.load(Ordering::Relaxed)
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves measurements until `stop` is set (until the first ends, unless
    /// `keep_serving`). Each connection is served by a thread of its own; measurements
    /// run side by side up to [`MAX_MEASUREMENTS`], [`MAX_MEASUREMENTS_PER_HOST`] of
    /// them from one requester, and a receiver that says hello beyond a limit is told
    /// at once that this sender is busy and which limit says so (an error starting
    /// with [`BUSY`]) rather than left waiting. A traffic query ([`Request::Traffic`])
    /// is answered whatever runs. A connection this sender will not serve (outside
    /// `allow`, over a connection limit) is told why without a byte of it read here:
    /// nothing a client sends holds up the others. When `stop` is set every
    /// connection ends within a second: a measurement in flight ends at once, and its
    /// receiver is told why.
    pub fn serve(
        &self,
        keep_serving: bool,
        stop: &AtomicBool,
        report: &mut dyn FnMut(ServeEvent),
    ) -> anyhow::Result<()> {
        let slots = &self.slots;
        let measured = AtomicBool::new(false);
        // Connections open per requester.
        let open: Mutex<HashMap<Requester, usize>> = Mutex::new(HashMap::new());
        let live: Live = Mutex::new(HashMap::new());
        let mut refused = Refused::default();
        let mut backoff = Duration::ZERO;
        let mut next_id = 0u64;
        std::thread::scope(|scope| {
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let mut conns: Vec<std::thread::ScopedJoinHandle<'_, ()>> = Vec::new();
            let result = loop {
                for ev in done_rx.try_iter() {
                    report(ev);
                }
                conns.retain(|t| !t.is_finished());
                refused.drain();
                if stop.load(Ordering::Relaxed)
                    || (!keep_serving && measured.load(Ordering::Relaxed))
                {
                    break Ok(());
                }
                let (stream, peer) = match self.listener.accept() {
                    Ok(x) => {
                        backoff = Duration::ZERO;
                        x
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(ACCEPT_POLL);
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if accept_error_is_fatal(&e) => break Err(e.into()),
                    // Out of descriptors or buffers, a connection reset while queued, a
                    // firewall's veto: they pass, so wait a little and go on.
                    Err(_) => {
                        self.accept_errors.fetch_add(1, Ordering::Relaxed);
                        backoff = (backoff * 2).clamp(ACCEPT_BACKOFF.0, ACCEPT_BACKOFF.1);
                        std::thread::sleep(backoff);
                        continue;
                    }
                };
                let from = peer.ip().to_canonical();
                let key = Requester::of(from, self.opts.ipv6_prefix);
                let limits = self.limits();
                let allowed = {
                    let allow = self
                        .allow
                        .read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    allow.is_empty() || allow.iter().any(|p| p.contains(from))
                };
                let counted = if !allowed {
                    Err(format!(
                        "refused: this sender serves only the hosts it was told to (--allow); {from} is not one of them"
                    ))
                } else if conns.len() >= limits.connections {
                    Err(format!(
                        "{BUSY}: this sender serves {} connections already; try again later",
                        limits.connections
                    ))
                } else {
                    OpenConnection::count(&open, key, limits.connections_per_requester)
                };
                let counted = match counted {
                    Ok(c) => c,
                    Err(message) => {
                        refused.add(stream, &message);
                        report(ServeEvent::Refused(peer, message));
                        continue;
                    }
                };
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let Ok(registered) = Registered::new(&live, next_id, &stream) else {
                    continue;
                };
                next_id += 1;
                let (opts, done_tx, slots, measured, captures, budgets) = (
                    &self.opts,
                    done_tx.clone(),
                    slots,
                    &measured,
                    &self.captures,
                    &self.budgets,
                );
                conns.push(scope.spawn(move || {
                    let _counted = counted;
                    let _registered = registered;
                    let mut events = |ev: ServeEvent| {
                        let _ = done_tx.send(ev);
                    };
                    let mut claimed = None;
                    let done = serve_one(
                        opts,
                        captures,
                        budgets,
                        stream,
                        (peer, key),
                        stop,
                        slots,
                        &mut claimed,
                        &mut events,
                    );
                    if let Some(slot) = claimed {
                        drop(slot);
                        measured.store(true, Ordering::Relaxed);
                        events(ServeEvent::Done(peer, done.map_err(|e| format!("{e:#}"))));
                    }
                }));
            };
            end_connections(&live, &conns);
            for t in conns {
                let _ = t.join();
            }
            for ev in done_rx.try_iter() {
                report(ev);
            }
            result
        })
    }
}

/// How long the accept loop waits after an accept error: twice as long after each in
/// a row, between these bounds.
const ACCEPT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_millis(100));

/// Whether an accept error says the listening socket itself is broken (nothing to wait
/// out); every other error passes.
fn accept_error_is_fatal(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EFAULT | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP)
    )
}

/// The connections being served, by number, so that a stop can end them.
type Live = Mutex<HashMap<u64, std::net::TcpStream>>;

/// One connection among the [`Live`] ones; gone from them when dropped.
struct Registered<'a> {
    live: &'a Live,
    id: u64,
}

impl<'a> Registered<'a> {
    fn new(live: &'a Live, id: u64, stream: &std::net::TcpStream) -> std::io::Result<Self> {
        mgrp_rt::lock(live).insert(id, stream.try_clone()?);
        Ok(Self { live, id })
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        mgrp_rt::lock(self.live).remove(&self.id);
    }
}

/// How long connections have to end by themselves once serving stops (a reader
/// blocked on its socket sees the end of its input at once; a writer waits for its
/// receiver) before their sockets are shut both ways.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// Ends every live connection: their input first (a thread waiting for a request wakes
/// and tells its receiver the sender stops), then, after [`STOP_GRACE`], their output
/// too (a thread waiting on a receiver that does not read gives up).
fn end_connections(live: &Live, conns: &[std::thread::ScopedJoinHandle<'_, ()>]) {
    for s in mgrp_rt::lock(live).values() {
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
    let until = Instant::now() + STOP_GRACE;
    while Instant::now() < until && conns.iter().any(|t| !t.is_finished()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for s in mgrp_rt::lock(live).values() {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// Refused connections lingering at most (the rest are closed at once).
const MAX_REFUSED: usize = 64;

/// How long a refused connection lingers after its refusal was written, its input read
/// and thrown away, so that closing it does not reset the connection before the
/// client has read why.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// Bytes read of a refused connection at most.
const REFUSED_READ: usize = 4096;

/// Connections told they are refused, closing: each with when it goes and what was
/// read of it. Only the accept loop touches them, and never waits on one.
#[derive(Debug, Default)]
struct Refused(Vec<(std::net::TcpStream, Instant, usize)>);

impl Refused {
    /// Writes `message` to `stream` as the answer to whatever it asks, without
    /// reading it or waiting, and closes its output.
    fn add(&mut self, stream: std::net::TcpStream, message: &str) {
        use std::io::Write;
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let Ok(mut line) = serde_json::to_vec(&Reply::Error {
            message: message.to_string(),
        }) else {
            return;
        };
        line.push(b'\n');
        // A new connection's send buffer takes a line at once; a refusal that does
        // not fit is not sent.
        let _ = (&stream).write(&line);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        if self.0.len() < MAX_REFUSED {
            self.0.push((stream, Instant::now() + REFUSED_LINGER, 0));
        }
    }

    /// Reads what the refused connections sent, without waiting; closes those that
    /// closed, sent [`REFUSED_READ`] or lingered [`REFUSED_LINGER`].
    fn drain(&mut self) {
        use std::io::Read;
        let now = Instant::now();
        let mut buf = [0u8; 1024];
        self.0.retain_mut(|(stream, until, read)| {
            if now >= *until {
                return false;
            }
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => {
                        *read += n;
                        if *read >= REFUSED_READ {
                            return false;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
                }
            }
        });
    }
}

/// How the error a busy sender answers with begins.
pub const BUSY: &str = "busy";

/// Why a sender turned a receiver or one of its requests away
/// ([`ServeEvent::Refused`]), as its metrics count it: read from the refusal's own
/// words, which this module writes (each kind's wording is its own; the tests hold
/// every refusal they meet to its kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The sender serves only the hosts it was told to (`--allow`).
    NotAllowed,
    /// At a limit of connections or of measurements running: try again later
    /// ([`BUSY`]).
    Busy,
    /// Over the requester's budget, probe rate, query rate or captures.
    OverBudget,
    /// A connection or measurement past its time: a connection that started no
    /// measurement, the session limit, an exclusive measurement gone idle.
    Expired,
    /// An address that is not the asker's own, or not proven to be.
    Address,
    /// Anything else asked out of turn or out of bounds.
    Other,
}

impl Refusal {
    /// Every kind, in the order the metrics list them.
    pub const ALL: [Self; 6] = [
        Self::NotAllowed,
        Self::Busy,
        Self::OverBudget,
        Self::Expired,
        Self::Address,
        Self::Other,
    ];

    /// The kind of the refusal worded `message`.
    pub fn of(message: &str) -> Self {
        let has = |w: &str| message.contains(w);
        if message.starts_with(BUSY) {
            Self::Busy
        } else if has("(--allow)") {
            Self::NotAllowed
        } else if has("budget") || has("probe rate") || has("query rate") || has("captures for") {
            Self::OverBudget
        } else if has("lasts at most") || has("session limit") || has("gave up its place") {
            Self::Expired
        } else if has("address") {
            Self::Address
        } else {
            Self::Other
        }
    }

    /// Its name as a metric's label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::NotAllowed => "not_allowed",
            Self::Busy => "busy",
            Self::OverBudget => "over_budget",
            Self::Expired => "expired",
            Self::Address => "address",
            Self::Other => "other",
        }
    }

    /// Its place in [`Self::ALL`] (which lists the kinds as they are declared).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How much a sender serves at once: connections and measurements, in all and for
/// one requester (an IPv4 address or an IPv6 prefix, as every limit counts), the
/// exclusive places and the line for them. The defaults are the constants below; a
/// mesh's budget planner raises them for a sender its plan needs more of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderLimits {
    /// Connections open at once ([`MAX_CONNECTIONS`]).
    pub connections: usize,
    /// Connections one requester may have open ([`MAX_CONNECTIONS_PER_HOST`]).
    pub connections_per_requester: usize,
    /// Measurements at once for every receiver together ([`MAX_MEASUREMENTS`]).
    pub measurements: usize,
    /// Measurements one requester may have at once ([`MAX_MEASUREMENTS_PER_HOST`]).
    pub measurements_per_requester: usize,
    /// Exclusive measurements at once ([`MAX_EXCLUSIVE`]).
    pub exclusive: usize,
    /// Receivers waiting in line for the exclusive place ([`MAX_WAITING_EXCLUSIVE`]).
    pub waiting: usize,
}

impl Default for SenderLimits {
    fn default() -> Self {
        Self {
            connections: MAX_CONNECTIONS,
            connections_per_requester: MAX_CONNECTIONS_PER_HOST,
            measurements: MAX_MEASUREMENTS,
            measurements_per_requester: MAX_MEASUREMENTS_PER_HOST,
            exclusive: MAX_EXCLUSIVE,
            waiting: MAX_WAITING_EXCLUSIVE,
        }
    }
}

/// The most any of [`SenderLimits`]' counts may be set to: each place is a thread
/// and a socket at most, and a sender asked for more serves no one well.
pub const MAX_SENDER_LIMIT: usize = 4096;

impl SenderLimits {
    /// The limits of the counts given, the defaults for those not: the connections,
    /// in all and per requester, [`MAX_CONNECTIONS`] and [`MAX_CONNECTIONS_PER_HOST`]
    /// or twice the measurements where that is more (each measurement holds one, and
    /// queries and refusals need room beside them). Not checked ([`Self::check`]).
    pub fn given(
        measurements: Option<usize>,
        measurements_per_requester: Option<usize>,
        exclusive: Option<usize>,
        waiting: Option<usize>,
        connections: Option<usize>,
        connections_per_requester: Option<usize>,
    ) -> Self {
        let d = Self::default();
        let measurements = measurements.unwrap_or(d.measurements);
        let measurements_per_requester =
            measurements_per_requester.unwrap_or(d.measurements_per_requester);
        Self {
            connections: connections
                .unwrap_or_else(|| MAX_CONNECTIONS.max(measurements.saturating_mul(2))),
            connections_per_requester: connections_per_requester.unwrap_or_else(|| {
                MAX_CONNECTIONS_PER_HOST.max(measurements_per_requester.saturating_mul(2))
            }),
            measurements,
            measurements_per_requester,
            exclusive: exclusive.unwrap_or(d.exclusive),
            waiting: waiting.unwrap_or(d.waiting),
        }
    }

    /// The first count that is out of its bounds, by its name (`measurements`):
    /// every count at least 1 and at most [`MAX_SENDER_LIMIT`], a requester's no
    /// more than the whole's, connections enough for the measurements.
    pub fn check(&self) -> Result<(), String> {
        let counts = [
            ("connections", self.connections),
            ("connections per requester", self.connections_per_requester),
            ("measurements", self.measurements),
            (
                "measurements per requester",
                self.measurements_per_requester,
            ),
            ("exclusive measurements", self.exclusive),
            ("receivers waiting", self.waiting),
        ];
        for (name, n) in counts {
            if !(1..=MAX_SENDER_LIMIT).contains(&n) {
                return Err(format!("{name}: {n}; give 1 to {MAX_SENDER_LIMIT}"));
            }
        }
        if self.measurements_per_requester > self.measurements {
            return Err(format!(
                "measurements per requester: {} is more than the {} measurements in all",
                self.measurements_per_requester, self.measurements
            ));
        }
        if self.connections_per_requester > self.connections {
            return Err(format!(
                "connections per requester: {} is more than the {} connections in all",
                self.connections_per_requester, self.connections
            ));
        }
        if self.exclusive > self.measurements {
            return Err(format!(
                "exclusive measurements: {} is more than the {} measurements in all",
                self.exclusive, self.measurements
            ));
        }
        if self.connections < self.measurements {
            return Err(format!(
                "connections: {} cannot hold the {} measurements (each holds a connection)",
                self.connections, self.measurements
            ));
        }
        if self.connections_per_requester < self.measurements_per_requester {
            return Err(format!(
                "connections per requester: {} cannot hold the {} measurements per requester",
                self.connections_per_requester, self.measurements_per_requester
            ));
        }
        Ok(())
    }
}

/// Connections served at once: measurements, traffic queries and receivers being
/// told the sender is busy.
pub const MAX_CONNECTIONS: usize = 64;

/// Connections one host may have open at once: its measurements and a few queries
/// beside them, so no host can take every connection and keep the others out.
pub const MAX_CONNECTIONS_PER_HOST: usize = 8;

/// Measurements served at once, for every receiver together (a node measured by its
/// neighbours with two continuous methods each and a pathload run now and then).
pub const MAX_MEASUREMENTS: usize = 32;

/// Measurements one host may have at once: one per method it measures this sender
/// with, so one host cannot take every place.
pub const MAX_MEASUREMENTS_PER_HOST: usize = 4;

/// Exclusive measurements (those that load what they measure: pathload, btc) served
/// at once: their probes would disturb each other's pacing and each other's reading.
pub const MAX_EXCLUSIVE: usize = 1;

/// Receivers told `busy` for the exclusive place that wait their turn for it, at
/// most: beyond, one is told busy without a place in line.
pub const MAX_WAITING_EXCLUSIVE: usize = 64;

/// A waiting receiver that has not asked again for this long has left the line.
pub const WAITING_FORGOTTEN: Duration = Duration::from_secs(60);

/// Once the exclusive place is free, the first in line has this long to ask again
/// for it before the next one's turn comes.
pub const EXCLUSIVE_TURN: Duration = Duration::from_secs(10);

/// The measurements running, per requester, and how many are exclusive; the
/// receivers waiting for the exclusive place, in the order they were first refused.
#[derive(Debug, Default)]
struct Running {
    per_host: HashMap<Requester, usize>,
    exclusive: usize,
    /// Who waits, with when it last asked.
    waiting: std::collections::VecDeque<(Requester, Instant)>,
    /// Since when the first in line may take the free exclusive place.
    turn_since: Option<Instant>,
    /// How many of each it holds.
    limits: SenderLimits,
}

impl Running {
    /// Whether `from` may take the exclusive place at `now`, which is free: the line
    /// is empty or `from` is first in it; the first in line whose turn has passed
    /// gives it up to the next.
    fn exclusive_turn(&mut self, from: Requester, now: Instant) -> bool {
        loop {
            let Some(&(first, _)) = self.waiting.front() else {
                return true;
            };
            if first == from {
                return true;
            }
            let since = *self.turn_since.get_or_insert(now);
            if now.saturating_duration_since(since) < EXCLUSIVE_TURN {
                return false;
            }
            self.waiting.pop_front();
            self.turn_since = Some(now);
        }
    }

    /// Puts `from` in line for the exclusive place (or notes that it asked again);
    /// returns its place, counting from 1, or `None` when the line is full.
    fn wait_in_line(&mut self, from: Requester, now: Instant) -> Option<usize> {
        if let Some(i) = self.waiting.iter().position(|(w, _)| *w == from) {
            self.waiting[i].1 = now;
            return Some(i + 1);
        }
        if self.waiting.len() >= self.limits.waiting {
            return None;
        }
        self.waiting.push_back((from, now));
        Some(self.waiting.len())
    }
}

/// The measurements running.
#[derive(Debug, Default)]
struct Slots(Mutex<Running>);

impl Slots {
    /// None running, holding up to `limits`.
    fn new(limits: SenderLimits) -> Self {
        Self(Mutex::new(Running {
            limits,
            ..Running::default()
        }))
    }

    /// A place for a measurement from `from` (exclusive or not), or the refusal naming
    /// the limit that says no.
    fn claim(&self, from: Requester, exclusive: bool) -> Result<Slot<'_>, String> {
        self.claim_at(from, exclusive, Instant::now())
    }

    /// [`Self::claim`] at `now`. Receivers refused the exclusive place wait for it in
    /// line, first refused first served, each as long as it keeps asking.
    fn claim_at(&self, from: Requester, exclusive: bool, now: Instant) -> Result<Slot<'_>, String> {
        let mut guard = mgrp_rt::lock(&self.0);
        let r = &mut *guard;
        if exclusive {
            r.waiting
                .retain(|(_, asked)| now.saturating_duration_since(*asked) < WAITING_FORGOTTEN);
            if r.waiting.is_empty() {
                r.turn_since = None;
            }
            let limits = r.limits;
            let busy = r.exclusive >= limits.exclusive;
            if busy || !r.exclusive_turn(from, now) {
                let line = match r.wait_in_line(from, now) {
                    Some(n) => format!(
                        "it is number {n} in line for it (ask again within {} s to keep the place)",
                        WAITING_FORGOTTEN.as_secs()
                    ),
                    None => format!("the line for it is full ({} receivers)", limits.waiting),
                };
                let what = if !busy {
                    "keeps the place of a measurement that loads its path for a receiver that waited longer".to_string()
                } else if limits.exclusive == 1 {
                    "runs a measurement that loads its path (pathload, btc) already, and runs one such at a time".to_string()
                } else {
                    format!(
                        "runs {} measurements that load their paths (pathload, btc) already, the most it runs at once",
                        r.exclusive
                    )
                };
                return Err(format!(
                    "{BUSY}: this sender {what}; {line}; try again when it is done"
                ));
            }
        }
        let limits = r.limits;
        let running = &mut r.per_host;
        let all: usize = running.values().sum();
        if all >= limits.measurements {
            return Err(format!(
                "{BUSY}: this sender runs {all} measurements, the most it runs at once for all receivers together; try again when one is done"
            ));
        }
        let mine = running.entry(from).or_insert(0);
        if *mine >= limits.measurements_per_requester {
            return Err(format!(
                "{BUSY}: {from} runs {mine} measurements from this sender, the most one host may at once; try again when one of them is done"
            ));
        }
        *mine += 1;
        if exclusive {
            r.exclusive += 1;
            if r.waiting.front().is_some_and(|(w, _)| *w == from) {
                r.waiting.pop_front();
            }
            r.turn_since = None;
        }
        Ok(Slot {
            slots: self,
            from,
            exclusive,
        })
    }

    /// A place for the measurement of a connection that has none yet in `claimed`.
    fn claim_once<'s>(
        &'s self,
        claimed: &mut Option<Slot<'s>>,
        from: Requester,
        exclusive: bool,
    ) -> Result<(), String> {
        if claimed.is_none() {
            *claimed = Some(self.claim(from, exclusive)?);
        }
        Ok(())
    }
}

/// One measurement's place; given back when dropped.
#[derive(Debug)]
struct Slot<'a> {
    slots: &'a Slots,
    from: Requester,
    exclusive: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut r = mgrp_rt::lock(&self.slots.0);
        if self.exclusive {
            r.exclusive = r.exclusive.saturating_sub(1);
        }
        if let Some(n) = r.per_host.get_mut(&self.from) {
            *n -= 1;
            if *n == 0 {
                r.per_host.remove(&self.from);
            }
        }
    }
}

/// One counted connection of a requester's; uncounted when dropped.
struct OpenConnection<'a> {
    open: &'a Mutex<HashMap<Requester, usize>>,
    from: Requester,
}

impl<'a> OpenConnection<'a> {
    /// Counts a connection of `from`'s, or says why not (it has its share open).
    fn count(
        open: &'a Mutex<HashMap<Requester, usize>>,
        from: Requester,
        most: usize,
    ) -> Result<Self, String> {
        let mut open_now = mgrp_rt::lock(open);
        let n = open_now.entry(from).or_insert(0);
        if *n >= most {
            return Err(format!(
                "{BUSY}: {from} has {most} connections open to this sender already; close one first"
            ));
        }
        *n += 1;
        Ok(Self { open, from })
    }
}

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        let mut open = mgrp_rt::lock(self.open);
        if let Some(n) = open.get_mut(&self.from) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.from);
            }
        }
    }
}

/// How long a new connection may take to say what it wants.
const FIRST_REQUEST: Duration = Duration::from_secs(5);

/// Waits for a new connection's first bytes, up to [`FIRST_REQUEST`], looking at
/// `stop` as it waits; false if they did not come or the sender stops.
fn first_bytes(stream: &std::net::TcpStream, stop: &AtomicBool) -> std::io::Result<bool> {
    let until = Instant::now() + FIRST_REQUEST;
    stream.set_read_timeout(Some(ACCEPT_POLL))?;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        match stream.peek(&mut [0u8; 1]) {
            Ok(n) => return Ok(n > 0),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// What the sender's mgrpd routes to `to`.
fn traffic(opts: &ServeOptions, to: IpAddr) -> Reply {
    let answer = mgrp_client::blocking::Client::connect(&opts.socket).and_then(|c| c.traffic());
    match answer {
        Ok((window, peers)) => {
            let p = peers.iter().find(|p| p.peer == to);
            Reply::Traffic {
                bytes_per_second: p.map_or(0, |p| p.bytes_per_second),
                window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
                held_riders: p.map_or(0, |p| p.held_riders),
                held_bytes: p.map_or(0, |p| p.held_bytes),
            }
        }
        Err(e) => Reply::Error {
            message: format!(
                "no traffic figures: mgrpd at {}: {e}",
                opts.socket.display()
            ),
        },
    }
}

/// What this host's kernel says of its TCP connections to `to`, leaving out those
/// from `control_port` (the receivers' control connections: they say nothing of the
/// path), busiest first.
fn tcp(to: IpAddr, control_port: Option<u16>) -> Reply {
    match crate::sockdiag::connections_to(to) {
        Ok(conns) => {
            let mut flows: Vec<TcpFlow> = conns
                .into_iter()
                .filter(|c| Some(c.local.port()) != control_port)
                .filter_map(|c| {
                    Some(TcpFlow {
                        sample: crate::tcpinfo::parse(&c.info)?,
                        local: c.local,
                        remote: c.remote,
                        congestion: c.congestion,
                        bbr: c.bbr,
                    })
                })
                .collect();
            flows.sort_by(|a, b| {
                let r = |f: &TcpFlow| f.sample.delivery_bps.unwrap_or(0.0);
                r(b).total_cmp(&r(a))
            });
            flows.truncate(MAX_TCP_FLOWS);
            Reply::Tcp { flows }
        }
        Err(e) => Reply::Error {
            message: format!("cannot read this host's TCP connections (sock_diag): {e}"),
        },
    }
}

/// The kernel's stamps of the segments this host sent to `to` (of requester `who`)
/// after cursor `after` (the newest [`MAX_STAMPS`] of them), leaving out those from
/// `control_port`; the capture starts at the first request for `to`, at most
/// [`MAX_CAPTURES`] in all and [`MAX_CAPTURES_PER_REQUESTER`] per requester, and
/// captures no one asked for in [`STAMPS_IDLE_S`] seconds stop.
fn stamps(
    captures: &Captures,
    (to, who): (IpAddr, Requester),
    after: u64,
    control_port: Option<u16>,
) -> Reply {
    let mut caps = mgrp_rt::lock(captures);
    let now = Instant::now();
    caps.retain(|_, (_, asked, _)| now.duration_since(*asked).as_secs() < STAMPS_IDLE_S);
    let full = caps.len() >= MAX_CAPTURES;
    let mine = caps.values().filter(|(_, _, w)| *w == who).count();
    let cap = match caps.entry(to) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(_) if full => {
            return Reply::Error {
                message: format!(
                    "no packet stamps: this sender captures for {MAX_CAPTURES} receivers already; ask again once one has stopped asking ({STAMPS_IDLE_S} s)"
                ),
            };
        }
        std::collections::hash_map::Entry::Vacant(_) if mine >= MAX_CAPTURES_PER_REQUESTER => {
            return Reply::Error {
                message: format!(
                    "refused: this sender captures for {mine} addresses of {who} already, the most one requester may have; ask again once one has stopped asking ({STAMPS_IDLE_S} s)"
                ),
            };
        }
        std::collections::hash_map::Entry::Vacant(e) => match Capture::start(to, Direction::To) {
            Ok(c) => e.insert((c, now, who)),
            Err(err) => {
                return Reply::Error {
                    message: format!("no packet stamps: {err}"),
                };
            }
        },
    };
    cap.1 = now;
    let mut t = cap.0.newest_since(after, MAX_STAMPS);
    t.stamps.retain(|s| Some(s.src_port) != control_port);
    Reply::Stamps {
        stamps: t.stamps,
        next: t.next,
        missed: t.missed,
        kernel_drops: t.kernel_drops,
    }
}

/// The address a query is about: the asker's own (the one its connection comes
/// from), or an error if it named another. A sender tells nobody about a third host.
fn own_address(peer: SocketAddr, address: Option<IpAddr>) -> Result<IpAddr, Reply> {
    let own = peer.ip().to_canonical();
    match address.map(|a| a.to_canonical()) {
        None => Ok(own),
        Some(a) if a == own => Ok(own),
        Some(a) => Err(Reply::Error {
            message: format!(
                "refused: this sender answers only about the asking host's own address ({own}), not {a}"
            ),
        }),
    }
}

/// Why an address proof may not go to `ip`, if it may not: a proof is a probe to a
/// host that has not shown it wants one, so it goes only to one unicast host that is
/// not this one (never to a group, a broadcast, loopback, a link-local address that
/// names no link, or an address of this host's own: the sender would probe itself).
fn unprovable(ip: IpAddr) -> Option<&'static str> {
    let special = match ip {
        IpAddr::V4(a) => {
            (a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast())
                .then_some("not one unicast host")
                .or_else(|| a.is_link_local().then_some("link-local"))
        }
        IpAddr::V6(a) => (a.is_unspecified() || a.is_loopback() || a.is_multicast())
            .then_some("not one unicast host")
            .or_else(|| a.is_unicast_link_local().then_some("link-local")),
    };
    special.or_else(|| {
        let own = nix::ifaddrs::getifaddrs().ok()?.any(|i| {
            i.address.is_some_and(|a| {
                a.as_sockaddr_in()
                    .map(|v4| IpAddr::V4(v4.ip()))
                    .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
                    == Some(ip)
            })
        });
        own.then_some("an address of this sender's own")
    })
}

/// A cookie for a proof probe, from the kernel's random source.
fn cookie() -> u64 {
    sys::random_u64()
}

/// A tool's `snd` command: serves one measurement, or every one with
/// `keep_serving`, until SIGINT or SIGTERM, logging to standard error as `name`.
pub fn serve_command(opts: &ServeOptions, keep_serving: bool, verbose: bool) -> anyhow::Result<()> {
    let server = Server::bind(opts.clone())?;
    let name = opts.name.split(' ').next().unwrap_or("sender").to_string();
    if let Some(warning) = opts.open_to_all() {
        eprintln!("{name}: warning: {warning} (--allow PREFIX)");
    }
    eprintln!(
        "{name}: sender waiting on {} ({} probes)",
        server.local_addr()?,
        opts.transport
    );
    server.serve(keep_serving, sys::interrupt_flag(), &mut |ev| match ev {
        ServeEvent::Connected(peer, tool) => {
            eprintln!("{name}: receiver {peer} connected ({tool})");
        }
        ServeEvent::Done(peer, Ok(n)) => {
            eprintln!("{name}: measurement for {peer} done ({n} batches of probes)");
        }
        ServeEvent::Done(peer, Err(e)) => {
            eprintln!("{name}: measurement for {peer} ended: {e}");
        }
        ServeEvent::Warning(peer, message) => {
            eprintln!("{name}: warning: measurement for {peer}: {message}");
        }
        ServeEvent::Refused(_, message) if verbose => {
            eprintln!("{name}: refused: {message}");
        }
        ServeEvent::Refused(..) => {}
        ServeEvent::Failed(peer, message) => {
            eprintln!("{name}: error: measurement for {peer}: {message}");
        }
    })
}

/// What ends a connection that is still talking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// It claimed no measurement within its lifetime.
    Unclaimed,
    /// Its measurement reached the session limit.
    Session,
    /// Its exclusive measurement asked for no batch for too long.
    ExclusiveIdle,
}

impl Ending {
    /// What its receiver is told.
    fn message(self, opts: &ServeOptions) -> String {
        match self {
            Self::Unclaimed => format!(
                "refused: a connection that starts no measurement lasts at most {} s on this sender; open another to ask more",
                opts.unclaimed_lifetime.as_secs()
            ),
            Self::Session => format!(
                "the measurement reached this sender's session limit ({} s); start a new one",
                opts.max_session.as_secs()
            ),
            Self::ExclusiveIdle => format!(
                "refused: the measurement asked for no probes in {} s and gave up its place (one measurement that loads the path runs at a time, and others wait for it); start a new one",
                opts.exclusive_idle.as_secs()
            ),
        }
    }
}

/// Serves one connection: a measurement once it has a place among `slots` (then it
/// is in `claimed`; the batches sent are returned), or traffic queries. It lasts at
/// most [`ServeOptions::unclaimed_lifetime`] without a measurement, then at most
/// [`ServeOptions::max_session`], and an exclusive measurement that asks for no
/// batch for [`ServeOptions::exclusive_idle`] ends there: however it trickles its
/// requests.
#[allow(clippy::too_many_arguments)]
fn serve_one<'s>(
    opts: &ServeOptions,
    captures: &Captures,
    budgets: &Mutex<Budgets>,
    stream: std::net::TcpStream,
    (peer, key): (SocketAddr, Requester),
    stop: &AtomicBool,
    slots: &'s Slots,
    claimed: &mut Option<Slot<'s>>,
    report: &mut dyn FnMut(ServeEvent),
) -> anyhow::Result<u32> {
    let accepted = Instant::now();
    if !first_bytes(&stream, stop)? {
        return Ok(0);
    }
    stream.set_write_timeout(Some(WRITE_LIMIT))?;
    let mut conn = Conn::new(stream)?;
    conn.set_read_timeout(Some(FIRST_REQUEST))?;
    conn.set_answer_limit(Some(WRITE_LIMIT));
    let mut host = Serving {
        opts,
        captures,
        budgets,
        slots,
        claimed,
        key,
        sender: None,
        stop,
        report,
        max_size: max_size(&conn),
        control_port: conn.stream().local_addr().ok().map(|a| a.port()),
    };
    let mut connection = Connection::new(peer, accepted);
    loop {
        let (deadline, ending) = connection.deadline(opts);
        if Instant::now() < deadline {
            conn.set_deadline(Some(deadline));
        }
        let received = if Instant::now() < deadline {
            conn.recv::<Request>()
        } else {
            Err(anyhow::anyhow!("time is up"))
        };
        let req = match received {
            _ if stop.load(Ordering::Relaxed) => {
                let _ = conn.send(&Reply::Error {
                    message: "the sender is shutting down".into(),
                });
                break;
            }
            Ok(Some(req)) if Instant::now() < deadline => req,
            Ok(None) => break,
            Ok(Some(_)) | Err(_) if Instant::now() >= deadline => {
                let _ = conn.send(&connection.expired(ending, opts, &mut host));
                break;
            }
            Ok(Some(req)) => req,
            Err(e) => return Err(e),
        };
        let was_claimed = connection.claimed();
        match connection.on_request(req, Instant::now(), opts, &mut host) {
            Step::Answer(reply) => {
                if !was_claimed && connection.claimed() {
                    conn.set_read_timeout(Some(IDLE_LIMIT))?;
                }
                conn.send(&reply)?;
            }
            Step::Last(reply) => {
                conn.send(&reply)?;
                break;
            }
            Step::End => break,
        }
    }
    Ok(connection.batches())
}

/// The sender around one connection: its places, budgets, captures and probe
/// sender, for [`Connection`].
struct Serving<'a, 's> {
    opts: &'a ServeOptions,
    captures: &'a Captures,
    budgets: &'a Mutex<Budgets>,
    slots: &'s Slots,
    claimed: &'a mut Option<Slot<'s>>,
    key: Requester,
    sender: Option<Sender>,
    stop: &'a AtomicBool,
    report: &'a mut dyn FnMut(ServeEvent),
    max_size: u32,
    /// The control connection's own port, left out of what queries answer.
    control_port: Option<u16>,
}

impl Host for Serving<'_, '_> {
    fn claim(&mut self, exclusive: bool) -> Result<(), String> {
        self.slots.claim_once(self.claimed, self.key, exclusive)
    }

    fn open_sender(
        &mut self,
        transport: Transport,
        dst: SocketAddr,
        piggyback: bool,
    ) -> Result<(), String> {
        let made = match transport {
            Transport::Udp => Sender::udp(dst, self.opts.probe_port),
            Transport::Mgrp => Sender::mgrp(
                &self.opts.socket,
                dst.ip(),
                (self.opts.probe_port, dst.port()),
                piggyback && self.opts.piggyback,
            ),
        };
        self.sender = Some(made.map_err(|e| format!("{e:#}"))?);
        Ok(())
    }

    fn close_sender(&mut self) {
        self.sender = None;
    }

    fn send_proof(&mut self, cookie: u64) -> Result<(), String> {
        let s = self.sender.as_mut().ok_or("no probe sender")?;
        let batch = Batch::even(proof_tag(cookie), 1, PROOF_PROBE_BYTES, 0, 0);
        s.send(&batch).map(|_| ()).map_err(|e| format!("{e:#}"))
    }

    fn spend(&mut self, bytes: u64) -> Result<(), Reply> {
        spend(self.budgets, self.key, bytes)
    }

    fn meter(&mut self, free: bool) -> Result<(), Reply> {
        meter(self.budgets, self.key, free)
    }

    fn send_batch(&mut self, batch: &Batch, max_size: u32) -> Reply {
        send(&mut self.sender, batch, max_size, self.stop)
    }

    fn query(&mut self, query: Query, to: IpAddr) -> Reply {
        match query {
            Query::Traffic => traffic(self.opts, to),
            Query::Tcp => tcp(to, self.control_port),
            Query::Stamps(after) => stamps(self.captures, (to, self.key), after, self.control_port),
        }
    }

    fn max_size(&self) -> u32 {
        self.max_size
    }

    fn cookie(&mut self) -> u64 {
        cookie()
    }

    fn unprovable(&self, ip: IpAddr) -> Option<&'static str> {
        unprovable(ip)
    }

    fn udp_warning(&self) -> Option<String> {
        crate::udp_pacer::udp_pacing_warning()
    }

    fn report(&mut self, event: ServeEvent) {
        (self.report)(event);
    }
}

/// Takes `bytes` of `who`'s hourly budget and probe rate, or says why not.
fn spend(budgets: &Mutex<Budgets>, who: Requester, bytes: u64) -> Result<(), Reply> {
    let mut b = mgrp_rt::lock(budgets);
    b.take(who, Instant::now(), bytes).map_err(|over| {
        let message = match over {
            Over::Budget(o) => format!(
                "refused: over this sender's budget for {who}: {:.2} MB of {:.2} MB an hour sent, {:.2} MB asked; try again in {} s",
                o.spent as f64 / 1e6,
                o.limit as f64 / 1e6,
                bytes as f64 / 1e6,
                o.retry_after.as_secs()
            ),
            Over::Rate(o) => {
                let rate = format!(
                    "refused: over this sender's probe rate for {who}: at most {:.1} Mbit/s averaged over {} s",
                    o.bits_per_second as f64 / 1e6,
                    o.window.as_secs_f64()
                );
                match o.retry_after {
                    Some(t) => format!(
                        "{rate}, and {:.2} MB asked does not fit now; try again in {:.1} s",
                        bytes as f64 / 1e6,
                        t.as_secs_f64()
                    ),
                    None => format!(
                        "{rate}: {:.2} MB asked at once is more than that window holds; ask for smaller batches",
                        bytes as f64 / 1e6
                    ),
                }
            }
        };
        Reply::Error { message }
    })
}

/// Takes one of `who`'s questions (unless `free`), or says when it may ask again.
fn meter(budgets: &Mutex<Budgets>, who: Requester, free: bool) -> Result<(), Reply> {
    if free {
        return Ok(());
    }
    mgrp_rt::lock(budgets)
        .ask(who, Instant::now())
        .map_err(|wait| Reply::Error {
            message: format!(
                "refused: over this sender's query rate for {who}: at most {} queries a second (tcp, stamps, traffic); try again in {:.1} s",
                crate::budget::QUERIES_PER_SECOND,
                wait.as_secs_f64().max(0.1)
            ),
        })
}

/// The answer that starts a measurement.
fn hello(opts: &ServeOptions, max_size: u32) -> Reply {
    Reply::Hello {
        version: CONTROL_VERSION,
        max_size,
        sender: format!("{} {}", opts.name, env!("CARGO_PKG_VERSION")),
        features: crate::control::FEATURES.map(str::to_owned).to_vec(),
    }
}

fn send(sender: &mut Option<Sender>, b: &Batch, max_size: u32, stop: &AtomicBool) -> Reply {
    let Some(s) = sender.as_mut() else {
        return Reply::Error {
            message: "no hello yet".into(),
        };
    };
    if let Some(why) = b.refusal(max_size) {
        return Reply::Error { message: why };
    }
    match s.send_unless(b, stop) {
        Ok(sent) => Reply::Sent(sent),
        Err(e) => Reply::Error {
            message: format!("sending failed: {e:#}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// Every refusal this crate words (the string literals that begin `refused:` or
    /// `{BUSY}:`, and the session limit's), each with the kind the metrics count it
    /// as: a new wording without a row here fails, so no refusal falls into `other`
    /// unseen.
    #[test]
    fn every_refusal_has_its_kind() {
        let kinds: &[(&str, Refusal)] = &[
            ("serves only the hosts it was told to", Refusal::NotAllowed),
            ("connections already; try again later", Refusal::Busy),
            ("try again when it is done", Refusal::Busy),
            ("for all receivers together", Refusal::Busy),
            ("the most one host may at once", Refusal::Busy),
            ("connections open to this sender already", Refusal::Busy),
            ("captures for", Refusal::OverBudget),
            ("over this sender's budget", Refusal::OverBudget),
            ("over this sender's probe rate", Refusal::OverBudget),
            ("over this sender's query rate", Refusal::OverBudget),
            ("lasts at most", Refusal::Expired),
            ("session limit", Refusal::Expired),
            ("gave up its place", Refusal::Expired),
            ("only about the asking host's own address", Refusal::Address),
            ("the address proof does not match", Refusal::Address),
            ("prove the probe address first", Refusal::Address),
            ("no address proof goes to", Refusal::Address),
            ("one address proof per connection", Refusal::Address),
            ("only within a measurement; say hello first", Refusal::Other),
            ("probes of kind", Refusal::Other),
            ("a batch of", Refusal::Other),
            ("probes of {} bytes", Refusal::Other),
            ("a gap of", Refusal::Other),
            ("a lead of", Refusal::Other),
        ];
        let sources = [
            include_str!("server.rs"),
            include_str!("server/connection.rs"),
            include_str!("control.rs"),
        ];
        let mut seen = 0;
        for text in sources {
            // The code, not its tests (whose assertions quote refusals in part).
            let code = text.split("#[cfg(test)]").next().unwrap_or(text);
            for line in code.lines() {
                let Some(start) = ["\"refused: ", "\"{BUSY}: ", "\"the measurement reached"]
                    .iter()
                    .find_map(|p| line.find(p))
                else {
                    continue;
                };
                let literal = &line[start + 1..];
                let literal = literal.split('"').next().unwrap_or(literal);
                let message = literal.replace("{BUSY}", BUSY);
                let Some(&(_, kind)) = kinds.iter().find(|(w, _)| message.contains(w)) else {
                    panic!("a refusal without a kind (add it to this table): {message}");
                };
                assert_eq!(Refusal::of(&message), kind, "{message}");
                seen += 1;
            }
        }
        // The table's rows are all met (the literals, not a second copy of them).
        assert!(seen >= kinds.len(), "{seen} refusals found");
        let labels: std::collections::BTreeSet<_> =
            Refusal::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), Refusal::ALL.len());
        assert!(Refusal::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }

    /// A sender without an allow-list says at start that any host may measure it,
    /// and with what limits; with one it says nothing.
    /// Proofs go to one unicast host other than this one.
    #[test]
    fn proofs_go_to_no_group_no_loopback_and_not_to_this_host() {
        for bad in [
            "224.0.0.1",
            "255.255.255.255",
            "127.0.0.2",
            "0.0.0.0",
            "169.254.1.1",
            "ff02::1",
            "::1",
            "fe80::1",
        ] {
            assert!(unprovable(bad.parse().unwrap()).is_some(), "{bad}");
        }
        // This host's own addresses (loopback's is one it always has).
        assert!(unprovable("127.0.0.1".parse().unwrap()).is_some());
        assert_eq!(unprovable("192.0.2.77".parse().unwrap()), None);
        assert_eq!(unprovable("2001:db8::77".parse().unwrap()), None);
    }

    #[test]
    fn serving_everyone_is_said_out_loud() {
        let mut opts = ServeOptions::new(Transport::Udp);
        let warning = opts.open_to_all().expect("a warning without an allow-list");
        assert!(
            warning.contains("any host") && warning.contains("/64"),
            "{warning}"
        );
        opts.allow = vec!["10.0.0.0/8".parse().unwrap()];
        assert_eq!(opts.open_to_all(), None);
    }

    #[test]
    fn measurement_places_are_bounded_per_host_and_in_all_and_given_back() {
        let slots = Slots::default();
        let host = |n: u8| Requester::of(IpAddr::from([10, 0, n / 200, n % 200 + 1]), 64);
        let mut held: Vec<Slot<'_>> = (0..MAX_MEASUREMENTS_PER_HOST)
            .map(|_| slots.claim(host(0), false).unwrap())
            .collect();
        let e = slots.claim(host(0), false).unwrap_err();
        assert!(
            e.starts_with(BUSY) && e.contains("the most one host may"),
            "{e}"
        );
        // Other hosts fill the rest, two places each.
        let mut n = 2;
        while held.len() < MAX_MEASUREMENTS {
            held.push(slots.claim(host(n / 2), false).unwrap());
            n += 1;
        }
        let e = slots.claim(host(99), false).unwrap_err();
        assert!(
            e.starts_with(BUSY) && e.contains("for all receivers together"),
            "{e}"
        );
        // A place given back is taken again, by any host.
        held.swap_remove(0);
        let again = slots.claim(host(99), false).unwrap();
        drop((held, again));
        assert!(
            mgrp_rt::lock(&slots.0).per_host.is_empty(),
            "every place given back"
        );
        // A connection claims once, however many hellos it says.
        let mut claimed = None;
        for _ in 0..3 {
            slots.claim_once(&mut claimed, host(0), true).unwrap();
        }
        assert_eq!(mgrp_rt::lock(&slots.0).per_host.get(&host(0)), Some(&1));
        // One exclusive measurement at a time, beside any light ones, from any host.
        let e = slots.claim(host(5), true).unwrap_err();
        assert!(
            e.starts_with(BUSY) && e.contains("one such at a time"),
            "{e}"
        );
        let light = slots.claim(host(5), false).unwrap();
        drop(claimed);
        let next = slots.claim(host(5), true).unwrap();
        assert_eq!(mgrp_rt::lock(&slots.0).exclusive, 1);
        drop((light, next));
        assert_eq!(mgrp_rt::lock(&slots.0).exclusive, 0);
    }

    /// Limits set otherwise than the defaults hold from the next claim: more places
    /// per requester and two exclusive ones, then fewer again with the places taken
    /// kept and new ones refused until enough are given back.
    #[test]
    fn measurement_places_follow_the_limits_set() {
        let host = |n: u8| Requester::of(IpAddr::from([10, 0, 0, n]), 64);
        let slots = Slots::new(SenderLimits {
            measurements: 10,
            measurements_per_requester: 6,
            exclusive: 2,
            waiting: 1,
            ..SenderLimits::default()
        });
        let mut held: Vec<Slot<'_>> = (0..6)
            .map(|_| slots.claim(host(1), false).unwrap())
            .collect();
        let e = slots.claim(host(1), false).unwrap_err();
        assert!(e.contains("the most one host may"), "{e}");
        held.push(slots.claim(host(2), true).unwrap());
        held.push(slots.claim(host(3), true).unwrap());
        let e = slots.claim(host(4), true).unwrap_err();
        assert!(
            e.starts_with(BUSY) && e.contains("runs 2 measurements that load their paths"),
            "{e}"
        );
        // One waits in line; the line holds one.
        let e = slots.claim(host(5), true).unwrap_err();
        assert!(e.contains("the line for it is full (1 receivers)"), "{e}");
        held.extend((0..2).map(|_| slots.claim(host(6), false).unwrap()));
        let e = slots.claim(host(7), false).unwrap_err();
        assert!(e.contains("runs 10 measurements"), "{e}");
        // Lowered below what runs: nothing taken away, nothing new.
        mgrp_rt::lock(&slots.0).limits = SenderLimits::default();
        let e = slots.claim(host(1), false).unwrap_err();
        assert!(e.contains("runs 6 measurements from this sender"), "{e}");
        held.retain(|s| s.from != host(1));
        assert!(slots.claim(host(1), false).is_ok());
    }

    /// Counts out of their bounds, or that do not fit each other, are refused by name.
    #[test]
    fn sender_limits_out_of_bounds_are_refused_by_name() {
        assert_eq!(SenderLimits::default().check(), Ok(()));
        let with = |f: fn(&mut SenderLimits)| {
            let mut l = SenderLimits::default();
            f(&mut l);
            l.check().unwrap_err()
        };
        assert!(with(|l| l.measurements = 0).starts_with("measurements: 0"));
        assert!(with(|l| l.waiting = MAX_SENDER_LIMIT + 1).starts_with("receivers waiting"));
        assert!(with(|l| l.measurements_per_requester = 33).contains("more than the 32"));
        assert!(with(|l| l.exclusive = 40).starts_with("exclusive measurements: 40"));
        assert!(with(|l| l.measurements = 100).contains("cannot hold the 100 measurements"));
        assert!(
            with(|l| l.measurements_per_requester = 9).starts_with("connections per requester")
        );
    }

    #[test]
    fn receivers_waiting_for_the_exclusive_place_get_it_in_turn() {
        let slots = Slots::default();
        let host = |n: u8| Requester::of(IpAddr::from([10, 0, 0, n]), 64);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let a = slots.claim_at(host(1), true, at(0)).unwrap();
        let e = slots.claim_at(host(2), true, at(1)).unwrap_err();
        assert!(e.starts_with(BUSY) && e.contains("number 1 in line"), "{e}");
        let e = slots.claim_at(host(3), true, at(2)).unwrap_err();
        assert!(e.contains("number 2 in line"), "{e}");
        // Asking again keeps one's place.
        let e = slots.claim_at(host(2), true, at(3)).unwrap_err();
        assert!(e.contains("number 1 in line"), "{e}");
        // Light measurements pass the line.
        let light = slots.claim_at(host(4), false, at(3)).unwrap();
        drop((a, light));
        // Free now: kept for the first in line, not taken by the second or a newcomer.
        let e = slots.claim_at(host(3), true, at(4)).unwrap_err();
        assert!(e.contains("for a receiver that waited longer"), "{e}");
        let e = slots.claim_at(host(5), true, at(4)).unwrap_err();
        assert!(e.contains("number 3 in line"), "{e}");
        let b = slots.claim_at(host(2), true, at(5)).unwrap();
        drop(b);
        // The second's turn; it does not come back within it, so then the third's.
        let e = slots.claim_at(host(5), true, at(6)).unwrap_err();
        assert!(e.contains("number 2 in line"), "{e}");
        let e = slots.claim_at(host(5), true, at(15)).unwrap_err();
        assert!(e.contains("waited longer"), "{e}");
        let c = slots
            .claim_at(host(5), true, at(6) + EXCLUSIVE_TURN)
            .unwrap();
        drop(c);
        assert!(mgrp_rt::lock(&slots.0).waiting.is_empty());
        // One that stops asking leaves the line.
        let a = slots.claim_at(host(1), true, at(100)).unwrap();
        slots.claim_at(host(2), true, at(100)).unwrap_err();
        let e = slots
            .claim_at(host(3), true, at(100) + WAITING_FORGOTTEN)
            .unwrap_err();
        assert!(e.contains("number 1 in line"), "{e}");
        drop(a);
        // The line is bounded (the one above has left it by now).
        let a = slots.claim_at(host(1), true, at(300)).unwrap();
        for n in 0..MAX_WAITING_EXCLUSIVE {
            let who = Requester::of(
                IpAddr::from([10, 1, (n / 250) as u8, (n % 250) as u8 + 1]),
                64,
            );
            slots.claim_at(who, true, at(300)).unwrap_err();
        }
        let e = slots.claim_at(host(9), true, at(300)).unwrap_err();
        assert!(e.contains("the line for it is full"), "{e}");
        assert_eq!(mgrp_rt::lock(&slots.0).waiting.len(), MAX_WAITING_EXCLUSIVE);
        drop(a);
    }

    proptest::proptest! {
        /// Any sequence of claims (from a few hosts, exclusive or not, after any
        /// pause) and places given back keeps every cap: places per host and in all,
        /// one exclusive, the line's length; and a free exclusive place with nobody
        /// in line goes to whoever asks within the other caps.
        #[test]
        fn measurement_places_keep_their_caps_whatever_is_asked(
            ops in proptest::collection::vec((0u8..8, proptest::bool::ANY, 0u64..40_000, 0usize..64), 1..200)
        ) {
            let slots = Slots::default();
            let t0 = Instant::now();
            let mut t = Duration::ZERO;
            let mut held: Vec<Slot<'_>> = Vec::new();
            for (host, exclusive, pause_ms, give_back) in ops {
                t += Duration::from_millis(pause_ms);
                if give_back < held.len() && give_back % 3 == 0 {
                    held.swap_remove(give_back);
                    continue;
                }
                let who = Requester::of(IpAddr::from([10, 0, 0, host]), 64);
                let free = {
                    let r = mgrp_rt::lock(&slots.0);
                    r.exclusive == 0
                        && r.waiting.iter().all(|(_, asked)| {
                            (t0 + t).saturating_duration_since(*asked) >= WAITING_FORGOTTEN
                        })
                        && r.per_host.values().sum::<usize>() < MAX_MEASUREMENTS
                        && r.per_host.get(&who).copied().unwrap_or(0) < MAX_MEASUREMENTS_PER_HOST
                };
                match slots.claim_at(who, exclusive, t0 + t) {
                    Ok(slot) => held.push(slot),
                    Err(e) => {
                        proptest::prop_assert!(e.starts_with(BUSY), "{}", e);
                        proptest::prop_assert!(!(exclusive && free), "refused a free place: {}", e);
                    }
                }
                let r = mgrp_rt::lock(&slots.0);
                proptest::prop_assert!(r.exclusive <= MAX_EXCLUSIVE);
                proptest::prop_assert_eq!(r.exclusive, held.iter().filter(|s| s.exclusive).count());
                proptest::prop_assert_eq!(r.per_host.values().sum::<usize>(), held.len());
                proptest::prop_assert!(held.len() <= MAX_MEASUREMENTS);
                proptest::prop_assert!(r.per_host.values().all(|&n| (1..=MAX_MEASUREMENTS_PER_HOST).contains(&n)));
                proptest::prop_assert!(r.waiting.len() <= MAX_WAITING_EXCLUSIVE);
            }
            drop(held);
            let r = mgrp_rt::lock(&slots.0);
            proptest::prop_assert!(r.per_host.is_empty() && r.exclusive == 0);
        }
    }

    #[test]
    fn measurement_places_count_an_ipv6_slash_64_as_one_host() {
        let slots = Slots::default();
        let in_64 = |n: u16| Requester::of(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, n]), 64);
        let _held: Vec<Slot<'_>> = (1..=MAX_MEASUREMENTS_PER_HOST as u16)
            .map(|n| slots.claim(in_64(n), false).unwrap())
            .collect();
        let e = slots.claim(in_64(999), false).unwrap_err();
        assert!(e.contains("the most one host may"), "{e}");
        // Another /64 is another host.
        let other = Requester::of(IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]), 64);
        assert!(slots.claim(other, false).is_ok());
    }

    #[test]
    fn connections_count_an_ipv6_slash_64_as_one_host() {
        let open = Mutex::new(HashMap::new());
        let in_64 = |n: u16| Requester::of(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, n]), 64);
        let held: Vec<OpenConnection<'_>> = (1..=MAX_CONNECTIONS_PER_HOST as u16)
            .map(|n| OpenConnection::count(&open, in_64(n), MAX_CONNECTIONS_PER_HOST).unwrap())
            .collect();
        let e = OpenConnection::count(&open, in_64(999), MAX_CONNECTIONS_PER_HOST)
            .err()
            .unwrap();
        assert!(
            e.starts_with(BUSY) && e.contains("2001:db8:0:1::/64 has 8 connections"),
            "{e}"
        );
        // An IPv4 host, mapped or not, is one requester of its own.
        let v4 = IpAddr::from([192, 0, 2, 1]);
        let mapped = IpAddr::V6(std::net::Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        let a =
            OpenConnection::count(&open, Requester::of(v4, 64), MAX_CONNECTIONS_PER_HOST).unwrap();
        let b = OpenConnection::count(&open, Requester::of(mapped, 64), MAX_CONNECTIONS_PER_HOST)
            .unwrap();
        assert_eq!(mgrp_rt::lock(&open).get(&Requester::of(v4, 64)), Some(&2));
        drop((held, a, b));
        assert!(
            mgrp_rt::lock(&open).is_empty(),
            "every connection uncounted"
        );
    }

    #[test]
    fn accept_errors_pass_unless_the_listener_is_broken() {
        let os = std::io::Error::from_raw_os_error;
        for transient in [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOBUFS,
            libc::ENOMEM,
            libc::ECONNABORTED,
            libc::EPERM,
            libc::EPROTO,
        ] {
            assert!(!accept_error_is_fatal(&os(transient)), "{transient}");
        }
        for fatal in [libc::EBADF, libc::EINVAL, libc::ENOTSOCK] {
            assert!(accept_error_is_fatal(&os(fatal)), "{fatal}");
        }
    }

    /// Loopback, as root: the first stamps query starts the sender's capture, the
    /// next one brings the segments of a flow sent in between, and none of the
    /// control connections' own.
    #[test]
    fn a_stamps_query_brings_what_was_sent_since() {
        if !mgrp_testbed::root_or_skip("a_stamps_query_brings_what_was_sent_since") {
            return;
        }
        let server = Server::bind(ServeOptions {
            port: 0,
            bind: Some("127.0.0.1".parse().unwrap()),
            ..ServeOptions::new(Transport::Udp)
        })
        .unwrap();
        let control = server.local_addr().unwrap().port();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| server.serve(true, &stop, &mut |_| {}));
            let first = crate::sender_stamps("127.0.0.1", control, None, 0).unwrap();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let reader = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                std::io::copy(&mut s, &mut std::io::sink()).unwrap()
            });
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(&vec![1u8; 300_000]).unwrap();
            drop(c);
            assert_eq!(reader.join().unwrap(), 300_000);
            std::thread::sleep(Duration::from_millis(200));
            let then = crate::sender_stamps("127.0.0.1", control, None, first.next).unwrap();
            let flow: u64 = then
                .stamps
                .iter()
                .filter(|s| s.dst_port == port)
                .map(|s| u64::from(s.payload_len))
                .sum();
            assert_eq!(flow, 300_000);
            assert!(then.stamps.iter().all(|s| s.src_port != control));
            assert_eq!(then.missed, 0);
            stop.store(true, Ordering::Relaxed);
        });
    }
}
