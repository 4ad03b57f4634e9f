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
    /// How long the peer may leave a backlog of unread answers (see
    /// [`Conn::set_answer_limit`]), and since when it has.
    answer_limit: Option<Duration>,
    backlog_since: Option<Instant>,
}

/// Bytes of answers a peer may leave unread before [`Conn::set_answer_limit`]'s
/// clock runs: more than the largest answer (the report of a 10,000-probe batch),
/// less than the socket buffers a peer that does not read fills.
const ANSWER_BACKLOG: usize = 1024 * 1024;

/// The read side: each read waits at most the read timeout, and never past the
/// deadline, if one is set.
#[derive(Debug)]
struct Timed {
    stream: TcpStream,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the connection's time is up",
                ));
            }
            self.stream
                .set_read_timeout(Some(self.timeout.map_or(left, |t| t.min(left))))?;
        }
        self.stream.read(buf)
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
            }),
            writer,
            line: Vec::with_capacity(4096),
            answer_limit: None,
            backlog_since: None,
        })
    }

    /// Ends sending with an error once the peer has left over [`ANSWER_BACKLOG`]
    /// bytes unread for `limit`, however the kernel trickles them out meanwhile: a
    /// peer that asks and never reads would otherwise keep this end writing a few
    /// bytes at a time for as long as its kernel makes room for them, which no
    /// write timeout sees (each write makes some progress).
    pub fn set_answer_limit(&mut self, limit: Option<Duration>) {
        self.answer_limit = limit;
        self.backlog_since = None;
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
        if let Some(limit) = self.answer_limit {
            let backlog = crate::sys::unacknowledged_bytes(&self.writer).unwrap_or(0);
            if backlog <= ANSWER_BACKLOG {
                self.backlog_since = None;
            } else {
                let since = *self.backlog_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= limit {
                    bail!(
                        "control connection lost: the peer has left {backlog} bytes of answers unread for over {limit:?}"
                    );
                }
            }
        }
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
