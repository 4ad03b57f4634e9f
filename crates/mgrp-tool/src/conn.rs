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
        })
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
