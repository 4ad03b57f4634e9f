//! The little of netlink the tools read: walking the messages of a buffer and the
//! attributes of a message, and a dump request answered until its end. Readers of
//! particular dumps (`sockdiag`, the testbed's qdisc counters) sit on top; nothing
//! here trusts a length it has not checked against the buffer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// Length of `struct nlmsghdr`.
pub const HEADER_LEN: usize = 16;

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

/// A native-endian u32 at `i`, if the buffer holds it.
pub fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// A native-endian u64 at `i`, if the buffer holds it.
pub fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

/// The messages of a buffer as `(type, payload after the header)`, up to the first
/// one whose length does not fit.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let len = u32_at(buf, off)? as usize;
        let kind = u16_at(buf, off + 4)?;
        if len < HEADER_LEN || off + len > buf.len() {
            return None;
        }
        let body = &buf[off + HEADER_LEN..off + len];
        off += (len + 3) & !3;
        Some((kind, body))
    })
}

/// The attributes (`struct rtattr`/`nlattr`) of a buffer as `(type, payload)`, the
/// nested and byte-order flags masked off, up to the first that does not fit.
pub fn attributes(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut b = buf;
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(b, 0)?);
        let kind = u16_at(b, 2)? & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let body = &b[4..len];
        b = &b[((len + 3) & !3).min(b.len())..];
        Some((kind, body))
    })
}

/// What one buffer of a dump ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// More buffers follow.
    More,
    /// `NLMSG_DONE`.
    Done,
    /// The kernel refused the request (`NLMSG_ERROR` with this errno).
    Error(i32),
}

/// Hands `each` the messages of one buffer of a dump that are neither `NLMSG_DONE`
/// nor `NLMSG_ERROR`, and says how the buffer ended.
pub fn walk(buf: &[u8], mut each: impl FnMut(u16, &[u8])) -> End {
    for (kind, body) in messages(buf) {
        match kind {
            NLMSG_DONE => return End::Done,
            NLMSG_ERROR => {
                let errno = u32_at(body, 0).map_or(0, |e| e as i32);
                if errno != 0 {
                    return End::Error(errno.wrapping_neg());
                }
            }
            _ => each(kind, body),
        }
    }
    End::More
}

/// A netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_SOCK_DIAG`) in the
/// calling thread's network namespace.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Socket {
    /// Opens it.
    pub fn open(protocol: i32) -> io::Result<Self> {
        // SAFETY: plain socket creation; the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: fd was just created and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// Sends the dump request `request` (a whole message, header included) and hands
    /// `each` every message of the answer until its end.
    pub fn dump(&mut self, request: &[u8], mut each: impl FnMut(u16, &[u8])) -> io::Result<()> {
        // SAFETY: sends a buffer we own.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                request.as_ptr().cast(),
                request.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            // SAFETY: receives into a buffer we own, at most its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            match walk(&self.buf[..n as usize], &mut each) {
                End::More => {}
                End::Done => return Ok(()),
                End::Error(e) => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

/// A dump request: `nlmsghdr` of `kind` with `NLM_F_REQUEST | NLM_F_DUMP`, then `body`.
pub fn dump_request(kind: u16, body: &[u8]) -> Vec<u8> {
    let len = HEADER_LEN + body.len();
    let mut r = Vec::with_capacity(len);
    r.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    r.extend_from_slice(&kind.to_ne_bytes());
    r.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    r.extend_from_slice(&[0u8; 8]);
    r.extend_from_slice(body);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut m = dump_request(kind, body);
        m.resize((m.len() + 3) & !3, 0);
        m
    }

    #[test]
    fn messages_and_attributes_are_walked_and_cut_buffers_stop_the_walk() {
        let mut attrs = Vec::new();
        attrs.extend_from_slice(&7u16.to_ne_bytes());
        attrs.extend_from_slice(&(1u16 | 0x8000).to_ne_bytes());
        attrs.extend_from_slice(b"abc\0");
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&2u16.to_ne_bytes());
        attrs.extend_from_slice(&42u32.to_ne_bytes());
        let got: Vec<(u16, &[u8])> = attributes(&attrs).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (1, &b"abc"[..]));
        assert_eq!(u32_at(got[1].1, 0), Some(42));

        let mut buf = message(20, &attrs);
        buf.extend(message(NLMSG_DONE, &[0; 4]));
        let mut seen = Vec::new();
        assert_eq!(walk(&buf, |k, b| seen.push((k, b.len()))), End::Done);
        assert_eq!(seen, vec![(20, attrs.len())]);
        for n in 0..buf.len() {
            let _ = walk(&buf[..n], |_, _| {});
        }
        let err = message(NLMSG_ERROR, &(-13i32).to_ne_bytes());
        assert_eq!(walk(&err, |_, _| {}), End::Error(13));
        let err = message(NLMSG_ERROR, &i32::MIN.to_ne_bytes());
        assert_eq!(walk(&err, |_, _| {}), End::Error(i32::MIN));
    }
}
