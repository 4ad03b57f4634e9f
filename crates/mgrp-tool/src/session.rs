//! The receiver's side of a measurement: connect to the sender, time the round trip,
//! say hello, then ask for batches of probes one at a time and collect each batch's
//! arrivals with the sender's report. Every tool's receiver is an estimator driven
//! through a [`Session`].

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::conn::Conn;
use crate::control::{
    Batch, CONTROL_VERSION, DEFAULT_CONTROL_PORT, DEFAULT_PROBE_PORT, PROOF_KIND, Reply, Request,
    SentReport, Tag, TcpFlow, Transport, feature,
};
use crate::transport::{Arrival, Listener, Seen};
use anyhow::{anyhow, bail};

mod driver;
#[doc(hidden)]
pub mod fuzzing;
mod steps;

pub use driver::{Bounds, Driven, Halt, Method, Next, Probes, drive};

use steps::{Arrivals, Awaiting, Opened, Opening};

/// How long to wait for the sender to answer beyond the time its probes take.
const REPLY_SLACK: Duration = Duration::from_secs(10);

/// After the sender says a batch is out, wait at most this long (or a round trip, if
/// longer) for its last probes: the socket is drained before the batch is judged, so
/// no probe still in flight or in a buffer counts as lost.
const DRAIN: Duration = Duration::from_millis(30);

/// Round trips timed before the run, the smallest kept.
const PINGS: u32 = 5;

/// Where the sender is and how probes travel. [`SessionOptions::new`] gives the
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// The sending host (name or address) serving measurements.
    pub sender: String,
    /// The sender's control port.
    pub port: u16,
    /// How probes travel; the sender must use the same.
    pub transport: Transport,
    /// mgrpd's API socket (MGRP transport).
    pub socket: PathBuf,
    /// This host's probe port.
    pub probe_port: u16,
    /// The address the sender should send probes to (default: the one the control
    /// connection comes from).
    pub address: Option<IpAddr>,
    /// Whether application traffic may ride in the probes that allow it (MGRP).
    pub piggyback: bool,
    /// What serves measurements at the sender, for the message when it cannot be
    /// reached ("is X running there?").
    pub sender_is: String,
    /// The receiving tool, named in the sender's log.
    pub tool: String,
    /// Whether the measurement loads what it measures (pathload's fleets, btc's
    /// bunches): the sender then runs it alone among such measurements, and answers
    /// `busy` while another runs.
    pub exclusive: bool,
}

impl SessionOptions {
    /// Defaults for measuring from `sender` over `transport` with `tool`.
    pub fn new(sender: impl Into<String>, transport: Transport, tool: impl Into<String>) -> Self {
        let tool = tool.into();
        Self {
            sender: sender.into(),
            port: DEFAULT_CONTROL_PORT,
            transport,
            socket: PathBuf::from(mgrp_client::DEFAULT_SOCKET),
            probe_port: DEFAULT_PROBE_PORT,
            address: None,
            piggyback: true,
            sender_is: format!("`{tool} snd`"),
            tool,
            exclusive: false,
        }
    }
}

/// Why a measurement could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The sender answered before any probe with an error: it is there, but cannot
    /// serve this measurement (its mgrpd or its probe socket failed, a limit of its
    /// refused this requester, the versions differ).
    #[error("the sender refused: {0}")]
    Refused(String),
    /// The sender serves others now: it is at its limit of measurements, in all or
    /// from this host, or another measurement holds the exclusive place (its message
    /// starts with [`crate::BUSY`]). Try again later.
    #[error("the sender refused: {0}")]
    Busy(String),
    /// The sender could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// The exchange failed before the measurement could start.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl MeasureError {
    /// Whether the sender turned this receiver away because it serves another.
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Busy(_))
    }

    /// The sender's refusal `message`: [`Self::Busy`] when it says it is busy (its
    /// wire text starts with [`crate::BUSY`] and a colon), [`Self::Refused`]
    /// otherwise.
    pub fn refusal(message: String) -> Self {
        if message
            .strip_prefix(crate::BUSY)
            .is_some_and(|rest| rest.starts_with(':'))
        {
            Self::Busy(message)
        } else {
            Self::Refused(message)
        }
    }

    /// Says why on standard error as `tool` (and with `--json` in a JSON line) and
    /// gives the receiver's exit status.
    pub fn report(&self, tool: &str) -> i32 {
        use crate::exit::fail;
        match self {
            Self::Unreachable(e) => fail(tool, crate::exit::PEER, &e.to_string()),
            Self::Refused(_) | Self::Busy(_) => fail(tool, crate::exit::SENDER, &self.to_string()),
            Self::Failed(e) => fail(tool, crate::exit::ERROR, &format!("{e:#}")),
        }
    }
}

/// Why a batch brought nothing back, once the measurement runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The sender, still there, could not send it (its mgrpd refused the train, or a
    /// limit there): the fix lies on the sending host.
    #[error("the sender failed: {0}")]
    SenderFailed(String),
    /// The sender went away, or the control connection broke.
    #[error("{0}")]
    Gone(String),
}

/// A batch's probes as they came, with what the sender reported of it.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The sender's report: how many left, and when.
    pub report: SentReport,
    /// The probes that arrived, in the order they came.
    pub arrivals: Vec<Arrival>,
    /// When the report came (the batch had left by then).
    pub replied: Instant,
}

/// Connects to a sender's control port.
fn connect(sender: &str, port: u16, sender_is: &str) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = (sender, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve sender {sender}: {e}"))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(format!(
        "cannot reach the sender at {sender} port {port} ({last}); is {sender_is} running there?"
    ))
}

/// The application traffic a sender's mgrpd routes towards a receiver, as
/// [`sender_traffic`] learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderTraffic {
    /// IP bytes per second over the last `window`.
    pub bytes_per_second: u64,
    /// The window of that rate.
    pub window: Duration,
    /// Riders held for the receiver now, waiting for a probe.
    pub held_riders: u64,
    /// Their bytes.
    pub held_bytes: u64,
}

/// One question to the sender at `sender`:`port` on a connection of its own: its
/// answer, an error it sent, or why none came. `what` names the question in errors.
fn ask(sender: &str, port: u16, request: &Request, what: &str) -> Result<Reply, MeasureError> {
    let stream =
        connect(sender, port, "a measurement sender").map_err(MeasureError::Unreachable)?;
    stream
        .set_read_timeout(Some(REPLY_SLACK))
        .map_err(|e| MeasureError::Unreachable(e.to_string()))?;
    let mut conn = Conn::new(stream)?;
    conn.send(request)?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => Err(anyhow!("the sender says: {message}").into()),
        Some(reply) => Ok(reply),
        None => Err(anyhow!(
            "the sender closed the connection without an answer to a {what}; is it an older version?"
        )
        .into()),
    }
}

/// Asks the sender at `sender`:`port` how much application traffic its mgrpd routes to
/// `address` (this end of the connection if `None`): the traffic that would ride in
/// probes sent now. Answered even while another receiver measures.
pub fn sender_traffic(
    sender: &str,
    port: u16,
    address: Option<IpAddr>,
) -> Result<SenderTraffic, MeasureError> {
    let what = "traffic query";
    match ask(sender, port, &Request::Traffic { address }, what)? {
        Reply::Traffic {
            bytes_per_second,
            window_ms,
            held_riders,
            held_bytes,
        } => Ok(SenderTraffic {
            bytes_per_second,
            window: Duration::from_millis(window_ms),
            held_riders,
            held_bytes,
        }),
        other => Err(anyhow!("the sender answered {other:?} to a {what}").into()),
    }
}

/// Asks the sender at `sender`:`port` what its kernel says of the TCP connections it
/// has to `address` (this end of the connection if `None`): the flows whose delivery
/// rate tells what a transfer from there gets now. Answered even while another
/// receiver measures.
pub fn sender_tcp(
    sender: &str,
    port: u16,
    address: Option<IpAddr>,
) -> Result<Vec<TcpFlow>, MeasureError> {
    let what = "TCP query";
    match ask(sender, port, &Request::Tcp { address }, what)? {
        Reply::Tcp { flows } => Ok(flows),
        other => Err(anyhow!("the sender answered {other:?} to a {what}").into()),
    }
}

/// What [`sender_stamps`] brings back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SenderStamps {
    /// The sender's kernel stamps of the segments it sent, oldest first.
    pub stamps: Vec<crate::capture::Stamp>,
    /// The cursor to ask from next.
    pub next: u64,
    /// Stamps gone before they were asked for.
    pub missed: u64,
    /// Packets the sender's kernel dropped from its capture since it started.
    pub kernel_drops: u64,
}

/// Asks the sender at `sender`:`port` for its kernel's stamps of the TCP segments it
/// sent to `address` (this end of the connection if `None`) since cursor `after` (0
/// at first: the sender then starts capturing, headers only): the newest
/// [`MAX_STAMPS`](crate::control::MAX_STAMPS) of them. Answered even while another
/// receiver measures.
pub fn sender_stamps(
    sender: &str,
    port: u16,
    address: Option<IpAddr>,
    after: u64,
) -> Result<SenderStamps, MeasureError> {
    let what = "stamps query";
    match ask(sender, port, &Request::Stamps { address, after }, what)? {
        Reply::Stamps {
            stamps,
            next,
            missed,
            kernel_drops,
        } => Ok(SenderStamps {
            stamps,
            next,
            missed,
            kernel_drops,
        }),
        other => Err(anyhow!("the sender answered {other:?} to a {what}").into()),
    }
}

/// How long a receiver waits for the sender's proof probe.
const PROOF_WAIT: Duration = Duration::from_secs(5);

/// The cookie of the first proof probe that arrives within `wait`.
fn proof_cookie(rx: &Receiver<Seen>, wait: Duration) -> Option<u64> {
    let until = Instant::now() + wait;
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        match rx.recv_timeout(left) {
            Ok(s) if s.tag.kind == PROOF_KIND => {
                return Some((u64::from(s.tag.fleet) << 32) | u64::from(s.tag.stream));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

/// A measurement in progress: the control connection and the probe listener.
#[derive(Debug)]
pub struct Session {
    conn: Conn,
    listener: Listener,
    rx: Receiver<Seen>,
    rtt: Duration,
    max_size: u32,
    started: Instant,
    address: Option<IpAddr>,
    /// Mixed into the fleet and stream of every batch's tag on the wire (and taken
    /// out of the report again), so a host that spoofs the sender's address must
    /// also guess 64 random bits to have a probe of its own counted; the sender only
    /// echoes tags, so it needs to know nothing of it.
    tag_mask: u64,
    /// The features the sender named in its hello
    /// ([`crate::control::FEATURES`]).
    features: Vec<String>,
    /// The tool, for warnings.
    tool: String,
    /// Whether a batch's lead the sender may ignore was warned of.
    lead_warned: bool,
}

impl Session {
    /// Connects, starts listening for probes, times the round trip and says hello.
    pub fn open(opts: &SessionOptions) -> Result<Self, MeasureError> {
        let started = Instant::now();
        let stream =
            connect(&opts.sender, opts.port, &opts.sender_is).map_err(MeasureError::Unreachable)?;
        let peer = stream.peer_addr().map_err(|e| {
            MeasureError::Unreachable(format!("the control connection broke at once: {e}"))
        })?;
        let mut conn = Conn::new(stream)?;
        conn.stream()
            .set_read_timeout(Some(REPLY_SLACK))
            .map_err(anyhow::Error::from)?;
        let (listener, rx) =
            Listener::start(opts.transport, opts.probe_port, peer.ip(), &opts.socket)?;
        let mut opening = Opening::new();
        for _ in 0..PINGS {
            let t = Instant::now();
            conn.send(&Request::Ping)?;
            let reply = conn.recv::<Reply>()?;
            opening.pong(reply, t.elapsed())?;
        }
        conn.send(&Request::Hello {
            version: CONTROL_VERSION,
            transport: opts.transport,
            address: opts.address,
            probe_port: opts.probe_port,
            piggyback: opts.piggyback,
            tool: opts.tool.clone(),
            exclusive: opts.exclusive,
        })?;
        let (max_size, features) = loop {
            match opening.hello_answer(conn.recv::<Reply>()?)? {
                Opened::Ready(max_size, features) => break (max_size, features),
                Opened::Prove(address) => {
                    let cookie = proof_cookie(&rx, PROOF_WAIT).ok_or_else(|| {
                        MeasureError::Failed(anyhow!(
                            "the sender's proof probe to {address} port {} did not arrive within {} s: is that address this host's, and does it reach here?",
                            opts.probe_port,
                            PROOF_WAIT.as_secs()
                        ))
                    })?;
                    conn.send(&Request::Proof { cookie })?;
                }
            }
        };
        let session = Self {
            conn,
            listener,
            rx,
            rtt: opening.rtt(),
            max_size,
            started,
            address: opts.address,
            tag_mask: crate::sys::random_u64(),
            features,
            tool: opts.tool.clone(),
            lead_warned: false,
        };
        if opts.exclusive && !session.sender_honours(feature::EXCLUSIVE) {
            session.warn_older(
                &opts.sender,
                feature::EXCLUSIVE,
                "it may run another heavy measurement beside this one, and both read low",
            );
        }
        Ok(session)
    }

    /// Whether the sender named `feature` ([`crate::control::feature`]) in its hello:
    /// a sender that does not is older and ignores what the feature asks.
    pub fn sender_honours(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }

    /// Warns that the sender at `sender` is older than `feature`, and what follows.
    fn warn_older(&self, sender: &str, feature: &str, consequence: &str) {
        crate::exit::warn(
            &self.tool,
            &format!(
                "warning: the sender at {sender} is older than this receiver (its hello names no feature `{feature}`): {consequence}; upgrade it"
            ),
        );
    }

    /// `tag` as it travels in this session: its fleet and stream mixed with the
    /// session's mask (the same call takes the mask out again).
    fn masked(&self, tag: Tag) -> Tag {
        Tag {
            fleet: tag.fleet ^ (self.tag_mask >> 32) as u32,
            stream: tag.stream ^ self.tag_mask as u32,
            ..tag
        }
    }

    /// What the sender's mgrpd routes to this receiver now (over the last two
    /// seconds): the application traffic that rides in probes that allow it.
    pub fn traffic(&mut self) -> Result<SenderTraffic, BatchError> {
        let gone = |e: anyhow::Error| BatchError::Gone(format!("{e:#}"));
        self.conn
            .send(&Request::Traffic {
                address: self.address,
            })
            .map_err(gone)?;
        match self.conn.recv::<Reply>().map_err(gone)? {
            Some(Reply::Traffic {
                bytes_per_second,
                window_ms,
                held_riders,
                held_bytes,
            }) => Ok(SenderTraffic {
                bytes_per_second,
                window: Duration::from_millis(window_ms),
                held_riders,
                held_bytes,
            }),
            Some(Reply::Error { message }) => Err(BatchError::SenderFailed(message)),
            Some(other) => Err(BatchError::Gone(format!(
                "the sender answered {other:?} to a traffic query"
            ))),
            None => Err(BatchError::Gone("the sender closed the connection".into())),
        }
    }

    /// The smallest of the round trips timed before the run.
    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// Largest probe the sender's path carries, IP bytes.
    pub fn max_size(&self) -> u32 {
        self.max_size
    }

    /// When the first connection attempt began.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Time since the first connection attempt.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Probes so far that came without a kernel receive stamp and were stamped on
    /// reading.
    pub fn unstamped(&self) -> u64 {
        self.listener.unstamped.load(Ordering::Relaxed)
    }

    /// Datagrams so far at the UDP probe port from an address other than the
    /// sender's, dropped.
    pub fn foreign(&self) -> u64 {
        self.listener.foreign.load(Ordering::Relaxed)
    }

    /// Probes so far dropped because [`crate::MAX_QUEUED_PROBES`] were waiting to be
    /// read.
    pub fn overflowed(&self) -> u64 {
        self.listener.overflowed.load(Ordering::Relaxed)
    }

    /// Asks for one batch, waits for the sender's report, then drains the probes that
    /// belong to it.
    pub fn exchange(&mut self, batch: &Batch) -> Result<Exchange, BatchError> {
        self.exchange_inner(batch)
            .map_err(|e| match e.downcast::<BatchError>() {
                Ok(b) => b,
                Err(e) => BatchError::Gone(format!("{e:#}")),
            })
    }

    fn exchange_inner(&mut self, batch: &Batch) -> anyhow::Result<Exchange> {
        if batch.lead_ns > 0 && !self.lead_warned && !self.sender_honours(feature::LEAD) {
            self.lead_warned = true;
            let peer = self
                .conn
                .stream()
                .peer_addr()
                .map_or_else(|_| "?".into(), |a| a.ip().to_string());
            self.warn_older(
                &peer,
                feature::LEAD,
                "its batches start without the quiet time this tool asks for, on a path still busy with the train before",
            );
        }
        let asked = batch;
        let batch = &Batch {
            tag: self.masked(asked.tag),
            ..asked.clone()
        };
        // Anything still queued belongs to earlier batches.
        while self.rx.try_recv().is_ok() {}
        let now = Instant::now();
        let awaiting = Awaiting::new(batch, now, self.rtt, REPLY_SLACK);
        // However the sender trickles reports of other batches, the wait ends then.
        self.conn
            .set_read_timeout(Some(awaiting.deadline().saturating_duration_since(now)))?;
        self.conn.set_deadline(Some(awaiting.deadline()));
        let report = self.report(&awaiting, batch);
        self.conn.set_deadline(None);
        let report = report?;
        let replied = Instant::now();
        let deadline = replied + DRAIN.max(self.rtt);
        let mut arrivals = Arrivals::new(batch.tag, &report);
        while !arrivals.complete() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match self.rx.recv_timeout(deadline - now) {
                Ok(s) => arrivals.take(s),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => bail!(
                    "the probe listener stopped: {}",
                    self.listener
                        .failure()
                        .unwrap_or_else(|| "no reason given".into())
                ),
            }
        }
        Ok(Exchange {
            report: SentReport {
                tag: asked.tag,
                ..report
            },
            arrivals: arrivals.into_vec(),
            replied,
        })
    }

    /// Asks for `batch` and waits for its report.
    fn report(&mut self, awaiting: &Awaiting<'_>, batch: &Batch) -> anyhow::Result<SentReport> {
        self.conn.send(&Request::Probes(batch.clone()))?;
        loop {
            let reply = match self.conn.recv::<Reply>() {
                Ok(reply) => reply,
                Err(_) if Instant::now() >= awaiting.deadline() => {
                    return Err(BatchError::Gone(format!(
                        "the sender did not report the batch within {:.1} s",
                        awaiting.allowed().as_secs_f64()
                    ))
                    .into());
                }
                Err(e) => return Err(e),
            };
            if let Some(report) = awaiting.answer(reply, Instant::now())? {
                return Ok(report);
            }
        }
    }

    /// Ends the measurement: tells the sender, stops listening, and returns the count
    /// of probes stamped on reading.
    pub fn close(mut self) -> u64 {
        let _ = self.conn.send(&Request::Bye);
        self.unstamped()
    }
}
