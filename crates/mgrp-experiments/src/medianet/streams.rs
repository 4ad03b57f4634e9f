//! The streams on the network: at the source, one local scheduler per stream (a
//! thread that generates the stream's frames on time, drops what its level excludes,
//! writes the rest into the stream's TCP connection and reports once a second what it
//! achieved); at the receiver, a thread per connection that reads frames, checks
//! every byte and decides each frame's fate with a [`Decoder`].

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use mgrp_testbed::link::realtime_ns;

use super::media::{Decoder, FRAME_HEADER, Fate, Frame, GOP, Kind, Level, emitted_at};
use super::scheduler::LocalReport;

/// Unsent bytes a connection may hold before writes block: the backlog stays at the
/// sender, where the local scheduler sees it, rather than in the socket.
const NOT_SENT_LOWAT: libc::c_int = 16 * 1024;

/// How often a local scheduler reports, seconds.
const REPORT_EVERY_NS: i64 = 1_000_000_000;

/// Frames by fate, for one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fates {
    /// Decoded in time.
    pub decoded: u64,
    /// Arrived after the deadline.
    pub late: u64,
    /// Arrived in time, a reference missing.
    pub undecodable: u64,
    /// Dropped by the adaptation.
    pub adapted: u64,
    /// Dropped at the sender once its deadline had passed.
    pub stale: u64,
}

impl Fates {
    fn add(&mut self, f: Fate) {
        match f {
            Fate::Decoded => self.decoded += 1,
            Fate::Late => self.late += 1,
            Fate::Undecodable => self.undecodable += 1,
            Fate::Adapted => self.adapted += 1,
            Fate::Stale => self.stale += 1,
        }
    }

    /// Every frame counted.
    pub fn total(&self) -> u64 {
        self.decoded + self.late + self.undecodable + self.adapted + self.stale
    }
}

/// Encodes a level for an atomic.
pub(crate) fn level_code(l: Level) -> u8 {
    match l {
        Level::IOnly => 0,
        Level::DropB => 1,
        Level::Full => 2,
    }
}

fn level_of(code: u8) -> Level {
    match code {
        0 => Level::IOnly,
        1 => Level::DropB,
        _ => Level::Full,
    }
}

/// What a local scheduler counted at the sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Frames generated.
    pub generated: u64,
    /// Frames written whole into the connection.
    pub written: u64,
    /// Frames the level excluded.
    pub adapted: u64,
    /// Frames dropped because their deadline passed while they waited.
    pub stale: u64,
    /// Frame bytes written.
    pub bytes: u64,
}

/// One stream's local scheduler at the source.
#[derive(Debug)]
pub struct LocalScheduler {
    level: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<Sent>>>,
}

/// A stream's settings at the source.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// Its number (0, 1, 2).
    pub stream: u8,
    /// Wall-clock time of its frame 0, ns.
    pub start_ns: i64,
    /// Wall-clock time the run's second 0 began, ns (reports count from it).
    pub run_start_ns: i64,
    /// How long after capture a frame is played, ns.
    pub playout_ns: i64,
    /// Its level at the start.
    pub level: Level,
}

impl LocalScheduler {
    /// Starts streaming `spec` into `conn` (a connected TCP stream), reporting to
    /// `reports`.
    pub fn start(
        conn: TcpStream,
        spec: StreamSpec,
        reports: mpsc::Sender<LocalReport>,
    ) -> anyhow::Result<Self> {
        conn.set_nodelay(true)?;
        set_not_sent_lowat(&conn)?;
        conn.set_nonblocking(true)?;
        let level = Arc::new(AtomicU8::new(level_code(spec.level)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (level, stop) = (level.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("medianet-ls{}", spec.stream))
                .spawn(move || send_loop(conn, spec, &level, &stop, &reports))?
        };
        Ok(Self {
            level,
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the level from the next group of pictures on.
    pub fn set_level(&self, l: Level) {
        self.level.store(level_code(l), Ordering::Relaxed);
    }

    /// Stops generating frames, sends what still may arrive in time, closes the
    /// connection and returns the counts.
    pub fn finish(mut self) -> anyhow::Result<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => anyhow::bail!("a local scheduler panicked"),
            None => Ok(Sent::default()),
        }
    }
}

impl Drop for LocalScheduler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn set_not_sent_lowat(conn: &TcpStream) -> anyhow::Result<()> {
    // SAFETY: a plain setsockopt with a pointer to a local int and its size, on a
    // socket this function borrows; neither nix nor socket2 wraps this option.
    let value = NOT_SENT_LOWAT;
    let r = unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    anyhow::ensure!(
        r == 0,
        "TCP_NOTSENT_LOWAT: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// A frame waiting at the sender, with when it was handed over.
struct Queued {
    frame: Frame,
    emitted_ns: i64,
}

fn frame_bytes(f: &Frame) -> Vec<u8> {
    let mut b = Vec::with_capacity(f.size as usize);
    b.extend_from_slice(&f.header());
    b.extend((FRAME_HEADER..f.size as usize).map(|i| f.payload_byte(i)));
    b
}

fn send_loop(
    mut conn: TcpStream,
    spec: StreamSpec,
    level: &AtomicU8,
    stop: &AtomicBool,
    reports: &mpsc::Sender<LocalReport>,
) -> anyhow::Result<Sent> {
    let mut sent = Sent::default();
    let mut queue: VecDeque<Queued> = VecDeque::new();
    // The frame being written: its bytes, how far, when it was handed over.
    let mut current: Option<(Vec<u8>, usize, i64)> = None;
    // The level of each group of pictures, latched at its I frame: (group, level).
    let mut groups: VecDeque<(u64, Level)> = VecDeque::new();
    let mut next = 0u64;
    let mut window = (0u64, 0u32); // bytes written, frames gone stale in this report
    let mut next_report = spec.run_start_ns + REPORT_EVERY_NS;
    let mut generating = true;
    loop {
        let now = realtime_ns();
        if generating && stop.load(Ordering::Relaxed) {
            generating = false;
        }
        // Frames captured by now.
        while generating && spec.start_ns + super::media::capture_offset_ns(next) <= now {
            for index in emitted_at(next) {
                let frame = Frame::new(spec.stream, index, spec.start_ns);
                sent.generated += 1;
                let group = index / GOP;
                if frame.kind == Kind::I {
                    groups.push_back((group, level_of(level.load(Ordering::Relaxed))));
                    if groups.len() > 2 {
                        groups.pop_front();
                    }
                }
                let l = groups
                    .iter()
                    .find(|(g, _)| *g == group)
                    .map_or(spec.level, |(_, l)| *l);
                if l.admits(frame.kind) {
                    queue.push_back(Queued {
                        frame,
                        emitted_ns: now,
                    });
                } else {
                    sent.adapted += 1;
                }
            }
            next += 1;
        }
        // Write what the connection takes.
        let mut blocked = false;
        loop {
            if current.is_none() {
                let Some(q) = queue.pop_front() else { break };
                if now > q.frame.captured_ns + spec.playout_ns {
                    sent.stale += 1;
                    window.1 += 1;
                    continue;
                }
                current = Some((frame_bytes(&q.frame), 0, q.emitted_ns));
            }
            let Some((bytes, done, _)) = current.as_mut() else {
                break;
            };
            match conn.write(&bytes[*done..]) {
                Ok(0) => anyhow::bail!("stream {}: the receiver closed", spec.stream),
                Ok(n) => {
                    *done += n;
                    window.0 += n as u64;
                    sent.bytes += n as u64;
                    if *done == bytes.len() {
                        sent.written += 1;
                        current = None;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    blocked = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("stream {}: write", spec.stream));
                }
            }
        }
        if now >= next_report {
            let oldest = current
                .as_ref()
                .map(|c| c.2)
                .or_else(|| queue.front().map(|q| q.emitted_ns));
            let _ = reports.send(LocalReport {
                stream: usize::from(spec.stream),
                at: (now - spec.run_start_ns) as f64 / 1e9,
                achieved_bps: window.0 as f64 * 8.0 * 1e9 / REPORT_EVERY_NS as f64,
                queue_delay: oldest.map_or(0.0, |o| (now - o).max(0) as f64 / 1e9),
                stale: window.1,
            });
            window = (0, 0);
            next_report += REPORT_EVERY_NS;
        }
        if !generating && current.is_none() && queue.is_empty() {
            break;
        }
        let until_frame = spec.start_ns + super::media::capture_offset_ns(next) - now;
        let pause = if blocked {
            1_000_000
        } else {
            until_frame.clamp(0, 5_000_000)
        };
        std::thread::sleep(Duration::from_nanos(u64::try_from(pause).unwrap_or(0)));
    }
    let _ = conn.shutdown(std::net::Shutdown::Write);
    Ok(sent)
}

/// What the receiver counted, per stream.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// Fates of the frames that arrived.
    pub fates: Vec<Fates>,
    /// Frames decoded in each second of the run, per stream.
    pub decoded_per_second: Vec<Vec<u32>>,
    /// Bytes of decoded frames in each second of the run, per stream.
    pub decoded_bytes_per_second: Vec<Vec<u64>>,
}

impl Received {
    fn new(streams: usize) -> Self {
        Self {
            fates: vec![Fates::default(); streams],
            decoded_per_second: vec![Vec::new(); streams],
            decoded_bytes_per_second: vec![Vec::new(); streams],
        }
    }

    fn record(&mut self, stream: usize, second: usize, size: u32, fate: Fate) {
        if let Some(f) = self.fates.get_mut(stream) {
            f.add(fate);
        }
        if fate == Fate::Decoded {
            let (frames, bytes) = (
                &mut self.decoded_per_second[stream],
                &mut self.decoded_bytes_per_second[stream],
            );
            if frames.len() <= second {
                frames.resize(second + 1, 0);
                bytes.resize(second + 1, 0);
            }
            frames[second] += 1;
            bytes[second] += u64::from(size);
        }
    }
}

/// The receiver at `m5`: takes `streams` connections on a listener and decodes them.
#[derive(Debug)]
pub struct Sink {
    received: Arc<Mutex<Received>>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Sink {
    /// Accepts `streams` connections on `listener` on a thread of its own and reads
    /// each on its own thread.
    pub fn start(
        listener: TcpListener,
        streams: usize,
        run_start_ns: i64,
        playout_ns: i64,
    ) -> anyhow::Result<Self> {
        let received = Arc::new(Mutex::new(Received::new(streams)));
        let acceptor = {
            let received = received.clone();
            std::thread::Builder::new()
                .name("medianet-sink".into())
                .spawn(move || -> anyhow::Result<()> {
                    let mut readers = Vec::new();
                    for _ in 0..streams {
                        let (conn, _) = listener.accept().context("accept a stream")?;
                        let received = received.clone();
                        readers.push(std::thread::spawn(move || {
                            read_loop(conn, run_start_ns, playout_ns, &received)
                        }));
                    }
                    for r in readers {
                        r.join()
                            .map_err(|_| anyhow::anyhow!("a stream reader panicked"))??;
                    }
                    Ok(())
                })?
        };
        Ok(Self {
            received,
            threads: vec![acceptor],
        })
    }

    /// Waits for every stream to end (the senders close their connections) and
    /// returns what arrived.
    pub fn finish(self) -> anyhow::Result<Received> {
        for t in self.threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("the sink panicked"))??;
        }
        Ok(self.received.lock().map(|r| r.clone()).unwrap_or_default())
    }
}

fn read_loop(
    mut conn: TcpStream,
    run_start_ns: i64,
    playout_ns: i64,
    received: &Mutex<Received>,
) -> anyhow::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut decoder = Decoder::new(playout_ns);
    let mut header = [0u8; FRAME_HEADER];
    let mut payload = Vec::new();
    let mut stream: Option<u8> = None;
    loop {
        match conn.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e).context("read a frame header"),
        }
        let frame = Frame::parse_header(&header)
            .with_context(|| format!("not a frame header: {header:02x?}"))?;
        anyhow::ensure!(
            stream.is_none_or(|s| s == frame.stream),
            "frames of streams {stream:?} and {} on one connection",
            frame.stream
        );
        let known = received.lock().map_or(0, |r| r.fates.len());
        anyhow::ensure!(
            usize::from(frame.stream) < known,
            "a frame of stream {} when {known} streams are expected",
            frame.stream
        );
        stream = Some(frame.stream);
        payload.resize(frame.size as usize - FRAME_HEADER, 0);
        conn.read_exact(&mut payload)
            .with_context(|| format!("read frame {} of stream {}", frame.index, frame.stream))?;
        let complete = realtime_ns();
        let intact = payload
            .iter()
            .enumerate()
            .all(|(i, b)| *b == frame.payload_byte(i + FRAME_HEADER));
        anyhow::ensure!(
            intact,
            "frame {} of stream {} arrived corrupted",
            frame.index,
            frame.stream
        );
        let fate = decoder.arrive(&frame, complete);
        let second = usize::try_from((complete - run_start_ns).max(0) / 1_000_000_000).unwrap_or(0);
        if let Ok(mut r) = received.lock() {
            r.record(usize::from(frame.stream), second, frame.size, fate);
        }
    }
}
