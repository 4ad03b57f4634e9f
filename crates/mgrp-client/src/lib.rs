//! `mgrp-client`: the probe-transaction API of MGRP for measurement tools.
//!
//! A tool builds a [`Train`] — per probe the tool's own header bytes, the probe's size
//! on the wire (IP total length), the gap before it, and whether application packets
//! may ride in its padding — and hands it to `mgrpd` whole. The call returns once the
//! train has been sent, with a [`TransactionReport`]: every probe's departure, how long
//! queueing and sending took, how many probes carried riders, how many rider bytes
//! rode, and how many of those would have competed with the train without MGRP. On the
//! far side, the tool's receiving half [`listen`](Client::listen)s on a measurement
//! port and gets every probe with its header, sequence number, sender stamp and the
//! kernel's receive stamp.
//!
//! # Example
//!
//! A sender and a receiver of a pathload-style stream (run the receiver on the far
//! host, against its own `mgrpd`):
//!
//! ```no_run
//! use std::time::Duration;
//! use mgrp_client::{Client, Probe, Train};
//!
//! # async fn sender() -> Result<(), mgrp_client::Error> {
//! let client = Client::connect(mgrp_client::DEFAULT_SOCKET).await?;
//! let mut train = Train::new("192.0.2.7".parse().unwrap()).ports(5000, 5001);
//! for i in 0u32..100 {
//!     // 200-byte probes, 182 µs apart (about 8.8 Mbit/s), riders welcome.
//!     train = train.probe(Probe::new(200).gap(Duration::from_micros(182)).header(i.to_be_bytes()));
//! }
//! let report = client.send_train(train).await?;
//! println!(
//!     "sent {} probes in {} µs, {} carried riders, {} competing rider bytes",
//!     report.probes_sent,
//!     report.send_ns / 1000,
//!     report.probes_with_riders,
//!     report.competing_rider_bytes
//! );
//! # Ok(()) }
//!
//! # async fn receiver() -> Result<(), mgrp_client::Error> {
//! let client = Client::connect(mgrp_client::DEFAULT_SOCKET).await?;
//! let mut probes = client.listen(5001).await?;
//! while let Some(p) = probes.next_probe().await? {
//!     let owd = p.receive_time.signed_nanos_since(p.sender_time);
//!     println!("probe {} of train {}: one-way delay {} ns", p.seq, p.transaction, owd);
//! }
//! # Ok(()) }
//! ```
//!
//! Tools that do not use tokio take the [`blocking`] module's `Client`, which has the
//! same methods without `async`.
//!
//! # Trains beside other trains
//!
//! mgrpd runs trains to different destinations at the same time (up to its
//! `limits.max-trains-in-flight`), their probes in one schedule, the earliest due
//! first; trains to one destination run one at a time, in the order they came. So a
//! tool's probe may leave a little after its deadline because another tool's probe to
//! another host fell due at nearly the same instant: it leaves as soon as that one is
//! out. Read the gaps from the report's departures
//! ([`TransactionReport::departure_times`]), never from the gaps asked for; the report
//! counts such probes in `probes_displaced` (and all probes that left later than the
//! daemon's threshold in `probes_late`); a tool that needs exact gaps may drop the
//! gaps around them. `competing_rider_bytes` counts only traffic to the train's own
//! destination, whatever runs beside it. A train to a destination starts right after
//! the last probe of the train before it to that destination, whoever sent that one,
//! while its probes (and any traffic it set off, a tool's report say) may still be
//! queued at the narrow link: a tool that needs a quiet path gives its first probe a
//! gap, which the daemon keeps from the train's start.
//!
//! Every call talks to the daemon over its Unix socket (JSON lines, see
//! [`mgrp_core::api`]). Each call carries an id that its answer echoes, so one
//! [`Client`] may have several calls in flight (several trains, say, from tasks of
//! its own) and a call given up on (a timeout dropping its future) harms no other;
//! its answer is dropped when it comes. Each [`ProbeStream`] has a connection of its
//! own.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use mgrp_core::api::{
    ApiError, ErrorKind, MAX_ANSWER, PROTOCOL_VERSION, ProbeRequest, Request, RequestFrame,
    Response, ResponseFrame, TrainRequest,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

pub mod blocking;

pub use mgrp_core::api::{DaemonStats, PeerTraffic, ReceivedProbe, TrainLimits};
pub use mgrp_core::stats::{DepartureClock, Outcome, ProbeDeparture, TransactionReport};
pub use mgrp_core::{MonoTime, WallTime};

/// Where `mgrpd` listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/mgrp/mgrpd.sock";

/// What can go wrong talking to `mgrpd`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing listens on the socket.
    #[error(
        "mgrpd is not running at {path} ({error}); start it (as root) with `mgrpd --socket {path}`, or point this program at the socket mgrpd uses (pathload-rs's --socket, the overlay's `socket` key)"
    )]
    DaemonNotRunning {
        /// The socket tried.
        path: PathBuf,
        /// The connect error (in the message, not a source: said once).
        error: std::io::Error,
    },
    /// The socket exists but this user may not use it.
    #[error(
        "no permission to use {path}; run as root or as a member of the group set by mgrpd's socket-group"
    )]
    PermissionDenied {
        /// The socket tried.
        path: PathBuf,
    },
    /// The daemon speaks another protocol version.
    #[error("{0}")]
    Version(String),
    /// The daemon refused the train; the message says which rule it broke.
    #[error("train refused: {0}")]
    InvalidTrain(String),
    /// The daemon has too many trains or listeners; retry later.
    #[error("mgrpd is busy: {0}")]
    Busy(String),
    /// Another tool listens on the port.
    #[error("{0}")]
    PortInUse(String),
    /// The daemon is shutting down.
    #[error("mgrpd is shutting down: {0}")]
    ShuttingDown(String),
    /// The daemon did not understand a request (a bug on one side).
    #[error("mgrpd rejected the request: {0}")]
    BadRequest(String),
    /// The request is longer than the daemon reads (`limits.max-request-bytes`): a
    /// train whose probes all differ, too long for one request.
    #[error(
        "the request takes {bytes} bytes, more than mgrpd reads ({limit}, limits.max-request-bytes); split the train or raise the limit"
    )]
    RequestTooLarge {
        /// Its length.
        bytes: usize,
        /// The daemon's limit.
        limit: u64,
    },
    /// The daemon sent something this client does not understand.
    #[error("unexpected answer from mgrpd: {0}")]
    Protocol(String),
    /// The connection broke.
    #[error("connection to mgrpd lost: {0}")]
    Io(#[from] std::io::Error),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        match e.kind {
            ErrorKind::BadRequest => Self::BadRequest(e.message),
            ErrorKind::Version => Self::Version(e.message),
            ErrorKind::InvalidTrain => Self::InvalidTrain(e.message),
            ErrorKind::Busy => Self::Busy(e.message),
            ErrorKind::ShuttingDown => Self::ShuttingDown(e.message),
            ErrorKind::PortInUse => Self::PortInUse(e.message),
        }
    }
}

/// One probe of a [`Train`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    header: Vec<u8>,
    size: u16,
    gap: Duration,
    piggyback: bool,
}

impl Probe {
    /// A probe of `size` bytes on the wire (IP total length, headers included), with no
    /// tool header, no gap before it, riders allowed. The daemon refuses sizes below its
    /// headers (48 bytes over IPv4 plus the tool header) or above the path MTU.
    pub fn new(size: u16) -> Self {
        Self {
            header: Vec::new(),
            size,
            gap: Duration::ZERO,
            piggyback: true,
        }
    }

    /// The gap between the previous probe's departure and this one's (for the first
    /// probe: between the train's start and its departure). Gaps are kept against an
    /// absolute timeline, so errors do not add up.
    #[must_use]
    pub fn gap(mut self, gap: Duration) -> Self {
        self.gap = gap;
        self
    }

    /// The tool's header bytes, delivered to the receiving tool as they are.
    #[must_use]
    pub fn header(mut self, header: impl Into<Vec<u8>>) -> Self {
        self.header = header.into();
        self
    }

    /// Keeps riders out of this probe's padding.
    #[must_use]
    pub fn no_piggyback(mut self) -> Self {
        self.piggyback = false;
        self
    }
}

/// A probe train to one destination, submitted whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Train {
    destination: IpAddr,
    src_port: u16,
    dst_port: u16,
    probes: Vec<Probe>,
}

impl Train {
    /// An empty train to `destination`, from measurement port 0 to port 0.
    pub fn new(destination: IpAddr) -> Self {
        Self {
            destination,
            src_port: 0,
            dst_port: 0,
            probes: Vec::new(),
        }
    }

    /// `n` equal probes of `size` bytes, `gap` apart, with no tool header (the
    /// receiver tells them apart by [`ReceivedProbe::seq`]). Such a train travels as
    /// two runs of equal probes, so any length fits one request.
    pub fn uniform(destination: IpAddr, n: u32, size: u16, gap: Duration) -> Self {
        let mut t = Self::new(destination);
        for i in 0..n {
            let g = if i == 0 { Duration::ZERO } else { gap };
            t = t.probe(Probe::new(size).gap(g));
        }
        t
    }

    /// Sets the sending tool's port and the port the receiving tool listens on.
    #[must_use]
    pub fn ports(mut self, src: u16, dst: u16) -> Self {
        self.src_port = src;
        self.dst_port = dst;
        self
    }

    /// Appends a probe.
    #[must_use]
    pub fn probe(mut self, p: Probe) -> Self {
        self.probes.push(p);
        self
    }

    /// Appends probes.
    #[must_use]
    pub fn probes(mut self, ps: impl IntoIterator<Item = Probe>) -> Self {
        self.probes.extend(ps);
        self
    }

    /// Keeps riders out of every probe (the no-MGRP baseline with the same pacing).
    #[must_use]
    pub fn no_piggyback(mut self) -> Self {
        for p in &mut self.probes {
            p.piggyback = false;
        }
        self
    }

    /// Number of probes.
    pub fn len(&self) -> usize {
        self.probes.len()
    }

    /// Whether the train has no probes.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    /// The destination.
    pub fn destination(&self) -> IpAddr {
        self.destination
    }

    fn into_request(self) -> TrainRequest {
        TrainRequest {
            destination: self.destination,
            src_port: self.src_port,
            dst_port: self.dst_port,
            probes: self
                .probes
                .into_iter()
                .map(|p| ProbeRequest {
                    header: p.header,
                    size: p.size,
                    gap_ns: u64::try_from(p.gap.as_nanos()).unwrap_or(u64::MAX),
                    piggyback: p.piggyback,
                    count: 1,
                })
                .collect(),
        }
    }
}

/// What a connection's hello agreed on.
#[derive(Debug, Clone, Copy)]
struct Agreed {
    version: u32,
    limits: Option<TrainLimits>,
}

#[derive(Debug)]
struct Conn {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    line: Vec<u8>,
}

impl Conn {
    /// Connects and says hello; returns the connection and the daemon's train limits
    /// if it tells them.
    async fn open(path: &Path) -> Result<(Self, Agreed), Error> {
        let stream = UnixStream::connect(path).await.map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                Error::PermissionDenied {
                    path: path.to_owned(),
                }
            } else {
                Error::DaemonNotRunning {
                    path: path.to_owned(),
                    error: source,
                }
            }
        })?;
        let (r, w) = stream.into_split();
        let mut c = Self {
            reader: BufReader::new(r),
            writer: w,
            line: Vec::with_capacity(512),
        };
        // A daemon of protocol 3 speaks everything but `traffic`, one of protocol 2
        // everything but counts as well.
        for version in [PROTOCOL_VERSION, 3, 2] {
            let hello = Request::Hello {
                version,
                client: format!("mgrp-client {}", env!("CARGO_PKG_VERSION")),
            };
            match c.call(&hello).await {
                Ok(Response::Hello {
                    version, limits, ..
                }) => {
                    return Ok((c, Agreed { version, limits }));
                }
                Ok(other) => return Err(Error::Protocol(format!("{other:?}"))),
                Err(Error::Version(_)) if version > 2 => {}
                Err(e) => return Err(e),
            }
        }
        Err(Error::Version(format!(
            "mgrpd speaks none of protocols {PROTOCOL_VERSION}, 3 and 2; upgrade it"
        )))
    }

    async fn send(&mut self, req: &Request) -> Result<(), Error> {
        let mut buf = serde_json::to_vec(req).map_err(|e| Error::Protocol(e.to_string()))?;
        buf.push(b'\n');
        self.writer.write_all(&buf).await?;
        Ok(())
    }

    /// Reads one answer. Cancel-safe: a line cut short by a timeout stays buffered and
    /// is completed by the next call.
    async fn recv(&mut self) -> Result<Option<Response>, Error> {
        let n = self.reader.read_until(b'\n', &mut self.line).await?;
        if n == 0 {
            return if self.line.is_empty() {
                Ok(None)
            } else {
                Err(Error::Protocol("connection closed mid-answer".into()))
            };
        }
        if self.line.len() > MAX_ANSWER {
            return Err(Error::Protocol(format!(
                "answer of {} bytes",
                self.line.len()
            )));
        }
        let parsed = serde_json::from_slice::<Response>(&self.line);
        self.line.clear();
        match parsed.map_err(|e| Error::Protocol(e.to_string()))? {
            Response::Error(e) => Err(e.into()),
            r => Ok(Some(r)),
        }
    }

    /// One request and its answer, in order (for the hello and for listening
    /// connections, which carry no other calls).
    async fn call(&mut self, req: &Request) -> Result<Response, Error> {
        self.send(req).await?;
        self.recv().await?.ok_or_else(|| {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "mgrpd closed the connection",
            ))
        })
    }
}

/// The calls waiting for their answers on a [`Mux`].
#[derive(Debug, Default)]
struct Waiting {
    calls: HashMap<u64, oneshot::Sender<Result<Response, Error>>>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
}

/// A connection on which every call carries an id: a writer task sends whole lines
/// (so a call dropped halfway cannot cut one), a reader task hands each answer to the
/// call that waits for its id.
#[derive(Debug)]
struct Mux {
    lines: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Arc<std::sync::Mutex<Waiting>>,
    next_id: AtomicU64,
}

impl Mux {
    /// Takes over a connection that has said hello.
    fn start(conn: Conn) -> Self {
        let Conn {
            mut reader,
            mut writer,
            mut line,
        } = conn;
        let waiting = Arc::new(std::sync::Mutex::new(Waiting::default()));
        let (lines, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(l) = outgoing.recv().await {
                if writer.write_all(&l).await.is_err() {
                    break;
                }
            }
        });
        let w = waiting.clone();
        tokio::spawn(async move {
            let why = loop {
                line.clear();
                match reader.read_until(b'\n', &mut line).await {
                    Ok(0) => break "mgrpd closed the connection".to_string(),
                    Err(e) => break e.to_string(),
                    Ok(_) if line.len() > MAX_ANSWER => {
                        break format!("answer of {} bytes", line.len());
                    }
                    Ok(_) => {}
                }
                let Ok(frame) = serde_json::from_slice::<ResponseFrame>(&line) else {
                    continue;
                };
                // Answers without an id (none are expected here) and answers to calls
                // given up on are dropped.
                let Some(id) = frame.id else { continue };
                let call = w
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .calls
                    .remove(&id);
                if let Some(call) = call {
                    let _ = call.send(match frame.response {
                        Response::Error(e) => Err(e.into()),
                        r => Ok(r),
                    });
                }
            };
            let mut w = w.lock().unwrap_or_else(PoisonError::into_inner);
            w.calls.clear();
            w.closed = Some(why);
        });
        Self {
            lines,
            waiting,
            next_id: AtomicU64::new(1),
        }
    }

    async fn call(&self, request: Request) -> Result<Response, Error> {
        self.call_within(request, 0).await
    }

    /// A call whose request line may be at most `limit` bytes long (0: no limit).
    async fn call_within(&self, request: Request, limit: u64) -> Result<Response, Error> {
        let closed = |why: &str| {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                why.to_string(),
            ))
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut line = serde_json::to_vec(&RequestFrame {
            id: Some(id),
            request,
        })
        .map_err(|e| Error::Protocol(e.to_string()))?;
        line.push(b'\n');
        if limit > 0 && line.len() as u64 > limit {
            return Err(Error::RequestTooLarge {
                bytes: line.len(),
                limit,
            });
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(why) = &w.closed {
                return Err(closed(why));
            }
            w.calls.insert(id, tx);
        }
        if self.lines.send(line).is_err() {
            return Err(closed("mgrpd closed the connection"));
        }
        // Dropped here (a timeout), the call leaves its entry; the answer removes it.
        match rx.await {
            Ok(answer) => answer,
            Err(_) => {
                let w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
                Err(closed(
                    w.closed.as_deref().unwrap_or("mgrpd closed the connection"),
                ))
            }
        }
    }
}

/// A connection to `mgrpd` for submitting trains and reading counters.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    mux: Mux,
    agreed: Agreed,
}

impl Client {
    /// Connects to the daemon's socket at `path` and agrees on a protocol version.
    pub async fn connect(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_owned();
        let (conn, agreed) = Conn::open(&path).await?;
        Ok(Self {
            path,
            mux: Mux::start(conn),
            agreed,
        })
    }

    /// What the daemon accepts in a train (`None` from a daemon too old to say).
    /// Back-to-back probes should ask for [`TrainLimits::min_gap`].
    pub fn limits(&self) -> Option<TrainLimits> {
        self.agreed.limits
    }

    /// The protocol version agreed with the daemon.
    pub fn protocol_version(&self) -> u32 {
        self.agreed.version
    }

    /// Submits a train and waits until it has been sent. Runs of equal probes travel
    /// as one probe with a count where the daemon speaks protocol 3.
    pub async fn send_train(&self, train: Train) -> Result<TransactionReport, Error> {
        let mut train = train.into_request();
        if self.agreed.version >= 3 {
            train.fold_runs();
        }
        let limit = self.agreed.limits.map_or(0, |l| l.max_request_bytes);
        let req = Request::SubmitTrain(train);
        match self.mux.call_within(req, limit).await? {
            Response::Report(r) => Ok(r),
            other => Err(Error::Protocol(format!("{other:?}"))),
        }
    }

    /// The report of this client's most recent finished train, if any.
    pub async fn last_report(&self) -> Result<Option<TransactionReport>, Error> {
        match self.mux.call(Request::LastReport).await? {
            Response::Report(r) => Ok(Some(r)),
            Response::NoReport => Ok(None),
            other => Err(Error::Protocol(format!("{other:?}"))),
        }
    }

    /// The daemon's counters.
    pub async fn stats(&self) -> Result<DaemonStats, Error> {
        match self.mux.call(Request::Stats).await? {
            Response::Stats(s) => Ok(*s),
            other => Err(Error::Protocol(format!("{other:?}"))),
        }
    }

    /// The application traffic routed into the tunnel for each peer, and the window
    /// its rates are taken over. Needs a daemon of protocol 4.
    pub async fn traffic(&self) -> Result<(Duration, Vec<PeerTraffic>), Error> {
        if self.agreed.version < 4 {
            return Err(Error::Version(format!(
                "this mgrpd speaks protocol {}, which does not report traffic (4 does); upgrade it",
                self.agreed.version
            )));
        }
        match self.mux.call(Request::Traffic).await? {
            Response::Traffic { window_ms, peers } => Ok((Duration::from_millis(window_ms), peers)),
            other => Err(Error::Protocol(format!("{other:?}"))),
        }
    }

    /// Starts receiving the probes that arrive for measurement port `port`, on a
    /// connection of its own.
    pub async fn listen(&self, port: u16) -> Result<ProbeStream, Error> {
        self.listen_from(port, None).await
    }

    /// Like [`Self::listen`], only for probes sent by `source` if given.
    pub async fn listen_from(
        &self,
        port: u16,
        source: Option<IpAddr>,
    ) -> Result<ProbeStream, Error> {
        let (mut conn, _) = Conn::open(&self.path).await?;
        match conn.call(&Request::Listen { port, source }).await? {
            Response::Listening { .. } => Ok(ProbeStream { conn, port }),
            other => Err(Error::Protocol(format!("{other:?}"))),
        }
    }
}

/// The probes arriving for one measurement port.
#[derive(Debug)]
pub struct ProbeStream {
    conn: Conn,
    port: u16,
}

impl ProbeStream {
    /// The next probe; `None` when the daemon closed the stream.
    pub async fn next_probe(&mut self) -> Result<Option<ReceivedProbe>, Error> {
        loop {
            match self.conn.recv().await? {
                Some(Response::Probe(p)) => return Ok(Some(p)),
                Some(Response::Listening { .. } | Response::Unlistened { .. }) => {}
                Some(other) => return Err(Error::Protocol(format!("{other:?}"))),
                None => return Ok(None),
            }
        }
    }

    /// The next probe, or `None` if none arrives within `timeout`.
    pub async fn next_probe_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<ReceivedProbe>, Error> {
        match tokio::time::timeout(timeout, self.next_probe()).await {
            Ok(r) => r,
            Err(_) => Ok(None),
        }
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }
}
