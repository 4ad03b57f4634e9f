//! The control connection: JSON lines over TCP with `TCP_NODELAY`, one write per
//! message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use crate::control::MAX_CONTROL_LINE;
use anyhow::{Context, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One end of the control connection.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: Vec<u8>,
}

impl Conn {
    /// Wraps a connected stream.
    pub fn new(stream: TcpStream) -> anyhow::Result<Self> {
        stream.set_nodelay(true)?;
        let writer = stream.try_clone()?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
            line: Vec::with_capacity(4096),
        })
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
