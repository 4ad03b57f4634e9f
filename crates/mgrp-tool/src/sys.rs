//! The tool's clocks, sleeps, real-time priority and stamped receives, as the
//! nanosecond integers its code counts in (the workspace's `mgrp_rt` does the work),
//! the interrupt flag (an `unsafe` block: the signal handler), how much a TCP
//! socket still has to send and what its peer's window is (others: the `SIOCOUTQ`
//! ioctl and `TCP_INFO`), and random bits (a last: `getrandom`).

#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::Socket;

/// Now on the realtime clock (the clock of the kernel's packet stamps), ns.
pub(crate) fn wall_now() -> i64 {
    ns(mgrp_rt::wall_now().as_nanos())
}

/// Now on the monotonic clock (for deadlines), ns.
pub(crate) fn mono_now() -> i64 {
    ns(mgrp_rt::mono_now().as_nanos())
}

fn ns(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) use mgrp_rt::rx::nothing_yet;

/// Sleeps until the monotonic clock reads `deadline` ns (absolute, so a late wake-up
/// does not push later deadlines).
pub(crate) fn sleep_until(deadline: i64) {
    mgrp_rt::sleep_until(mgrp_rt::MonoTime::from_nanos(
        u64::try_from(deadline).unwrap_or(0),
    ));
}

/// Puts the calling thread under SCHED_FIFO and removes its timer slack. Returns the
/// error when the first is not permitted (the slack is removed regardless).
pub(crate) fn make_realtime() -> io::Result<()> {
    mgrp_rt::thread::set_timer_slack(1);
    mgrp_rt::thread::set_realtime(40)
}

/// Asks the kernel to stamp every datagram `s` receives (`SO_TIMESTAMPNS`).
pub(crate) fn enable_rx_timestamps(s: &Socket) -> io::Result<()> {
    mgrp_rt::rx::enable_rx_timestamps(s)
}

/// Receives one datagram into `buf`: its length, the kernel's receive stamp
/// (realtime ns), or `None` for the stamp if the kernel gave none, and where it came
/// from. A read timeout set on the socket surfaces as `WouldBlock`.
pub(crate) fn recv_stamped(
    s: &Socket,
    buf: &mut [u8],
) -> io::Result<(usize, Option<i64>, Option<std::net::SocketAddr>)> {
    let (n, stamp, from) = mgrp_rt::rx::recv_stamped_from(s, buf)?;
    Ok((n, stamp.map(|t| ns(t.as_nanos())), from))
}

/// Bytes `s` holds that its peer has not acknowledged yet (sent or not): what a
/// peer that does not read leaves behind.
pub(crate) fn unacknowledged_bytes(s: &std::net::TcpStream) -> io::Result<usize> {
    use std::os::fd::AsRawFd as _;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int through a valid pointer.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// 64 bits from the kernel's random source (the clock and the process id, mixed,
/// should it ever fail, which it does not on Linux for 8 bytes).
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: the buffer is valid for its length; getrandom writes at most that.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        return wall_now() as u64 ^ u64::from(std::process::id()).rotate_left(32);
    }
    u64::from_ne_bytes(b)
}

/// The receive window `s`'s peer advertises now and the segment size it sends with,
/// bytes (`tcpi_snd_wnd`, Linux 6.2 and later, and `tcpi_snd_mss`); `None` from a
/// kernel that does not say.
pub(crate) fn peer_window(s: &std::net::TcpStream) -> io::Result<Option<(u32, u32)>> {
    crate::tcpinfo::read(s).map(|b| crate::tcpinfo::peer_window(&b))
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to the flag [`interrupt_flag`] gives, so a run can end
/// with its best range instead of dying mid-stream.
pub(crate) fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an atomic,
        // which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&raw mut sa.sa_mask);
            libc::sigaction(sig, &raw const sa, std::ptr::null_mut());
        }
    }
}

/// The flag SIGINT and SIGTERM set, as the stop flag of the command's measurement.
pub(crate) fn interrupt_flag() -> &'static AtomicBool {
    &INTERRUPTED
}
