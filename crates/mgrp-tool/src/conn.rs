//! The control connection: JSON lines over TCP with `TCP_NODELAY`, one write per
//! message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::control::MAX_CONTROL_LINE;
use anyhow::{Context, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One end of the control connection.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<Timed>,
    writer: TcpStream,
    line: Vec<u8>,
}

/// Bytes of answers a peer may leave unacknowledged before
/// [`Conn::set_answer_limit`]'s clock runs, on a kernel that does not say what window
/// the peer advertises. A receiver asks and reads in turn: by the time its next
/// request comes, or soon after an answer while it waits for the next, its kernel has
/// acknowledged the answer before, however large.
const ANSWER_BACKLOG: usize = 64 * 1024;

/// The read side: each read waits at most the read timeout, and never past the
/// deadline, if one is set; with an answer limit it also ends, with an error, once
/// the peer has left a backlog of answers unread for that long.
#[derive(Debug)]
struct Timed {
    stream: TcpStream,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    /// How long the peer may leave a backlog of answers unread, and since when it has.
    answer_limit: Option<Duration>,
    backlog_since: Option<Instant>,
}

/// How often a read that waits looks at the backlog of answers.
const BACKLOG_CHECK: Duration = Duration::from_secs(1);

impl Timed {
    /// Whether the peer leaves answers unread now: some are unacknowledged while its
    /// advertised window is below one segment (its kernel holds what came unread and
    /// opens the window a few bytes at a time at most), or, where the kernel does not
    /// say the window, over [`ANSWER_BACKLOG`] bytes are unacknowledged.
    fn backlogged(&self) -> bool {
        let unacked = crate::sys::unacknowledged_bytes(&self.stream).unwrap_or(0);
        match crate::sys::peer_window(&self.stream) {
            Ok(Some((window, mss))) => unacked > 0 && window < mss.max(536),
            _ => unacked > ANSWER_BACKLOG,
        }
    }

    /// An error once the peer has left answers unread ([`Timed::backlogged`]) for the
    /// answer limit, at every look.
    fn check_backlog(&mut self) -> std::io::Result<()> {
        let Some(limit) = self.answer_limit else {
            return Ok(());
        };
        if !self.backlogged() {
            self.backlog_since = None;
            return Ok(());
        }
        let since = *self.backlog_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the peer has left its answers unread for over {limit:?}"),
            ));
        }
        Ok(())
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.deadline.is_none() && self.answer_limit.is_none() {
            return self.stream.read(buf);
        }
        let started = Instant::now();
        loop {
            // What is left of the read timeout and of the deadline.
            let mut left = self.timeout.map(|t| t.saturating_sub(started.elapsed()));
            if let Some(d) = self.deadline {
                let to_deadline = d.saturating_duration_since(Instant::now());
                if to_deadline.is_zero() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the connection's time is up",
                    ));
                }
                left = Some(left.map_or(to_deadline, |l| l.min(to_deadline)));
            }
            if left.is_some_and(|l| l.is_zero()) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "no message within the read timeout",
                ));
            }
            let slice = match (left, self.answer_limit) {
                (Some(l), Some(_)) => Some(l.min(BACKLOG_CHECK)),
                (None, Some(_)) => Some(BACKLOG_CHECK),
                (l, None) => l,
            };
            self.stream.set_read_timeout(slice)?;
            match self.stream.read(buf) {
                Err(e) if self.answer_limit.is_some() && crate::sys::nothing_yet(&e) => {
                    self.check_backlog()?;
                }
                r => return r,
            }
        }
    }
}

impl Conn {
    /// Wraps a connected stream.
    pub fn new(stream: TcpStream) -> anyhow::Result<Self> {
        stream.set_nodelay(true)?;
        let writer = stream.try_clone()?;
        let timeout = stream.read_timeout()?;
        Ok(Self {
            reader: BufReader::new(Timed {
                stream,
                timeout,
                deadline: None,
                answer_limit: None,
                backlog_since: None,
            }),
            writer,
            line: Vec::with_capacity(4096),
        })
    }

    /// Ends sending and receiving with an error once the peer has left its answers
    /// unread for `limit` (answers unacknowledged while its window is shut). A peer
    /// that asks and never reads would otherwise hold this end: its kernel makes room
    /// for a few bytes at a time as it compacts its queue, so each write makes some
    /// progress and no write timeout fires, and once the answers are out this end
    /// waits for the next request with them still unread.
    pub fn set_answer_limit(&mut self, limit: Option<Duration>) {
        let r = self.reader.get_mut();
        r.answer_limit = limit;
        r.backlog_since = None;
    }

    /// How long one read may wait (`None`: for ever); the deadline, if set, still
    /// holds.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        let r = self.reader.get_mut();
        r.timeout = timeout;
        r.stream.set_read_timeout(timeout)
    }

    /// When receiving must end whatever the peer sends, however slowly (`None`: only
    /// the read timeout bounds it): a message not whole by then is an error.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        let r = self.reader.get_mut();
        r.deadline = deadline;
        if deadline.is_none() {
            let _ = r.stream.set_read_timeout(r.timeout);
        }
    }

    /// The stream, for timeouts and addresses.
    pub fn stream(&self) -> &TcpStream {
        &self.writer
    }

    /// Sends one message in one write.
    pub fn send(&mut self, msg: &impl Serialize) -> anyhow::Result<()> {
        self.reader
            .get_mut()
            .check_backlog()
            .context("control connection lost")?;
        let mut buf = serde_json::to_vec(msg)?;
        buf.push(b'\n');
        self.writer
            .write_all(&buf)
            .context("control connection lost")?;
        Ok(())
    }

    /// Receives one message; `None` when the peer closed the connection.
    pub fn recv<T: DeserializeOwned>(&mut self) -> anyhow::Result<Option<T>> {
        self.line.clear();
        let limit = MAX_CONTROL_LINE as u64 + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.line)
            .context("control connection lost")?;
        if n == 0 {
            return Ok(None);
        }
        if self.line.last() != Some(&b'\n') {
            if n as u64 >= limit {
                bail!("control message over {MAX_CONTROL_LINE} bytes");
            }
            bail!("control connection closed mid-message");
        }
        let msg = serde_json::from_slice(&self.line).with_context(|| {
            format!(
                "unreadable control message: {}",
                String::from_utf8_lossy(&self.line[..self.line.len().min(200)]).trim()
            )
        })?;
        Ok(Some(msg))
    }
}
