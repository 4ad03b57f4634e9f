//! The system calls the standard library and socket2 do not wrap, and so every
//! `unsafe` block of the tool: clocks, absolute-deadline sleeps, real-time priority,
//! UDP receive with the kernel's timestamp, and the interrupt flag.

#![allow(unsafe_code)]

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::Socket;

fn clock(id: libc::clockid_t) -> libc::timespec {
    let mut ts = MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `ts` is a valid out-pointer; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(id, ts.as_mut_ptr()) };
    // SAFETY: clock_gettime filled it (it cannot fail for these clock ids).
    unsafe { ts.assume_init() }
}

fn nanos(ts: libc::timespec) -> i64 {
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Now on the realtime clock (the clock of the kernel's packet stamps), ns.
pub(crate) fn wall_now() -> i64 {
    nanos(clock(libc::CLOCK_REALTIME))
}

/// Now on the monotonic clock (for deadlines), ns.
pub(crate) fn mono_now() -> i64 {
    nanos(clock(libc::CLOCK_MONOTONIC))
}

/// Sleeps until the monotonic clock reads `deadline` ns (absolute, so a late wake-up
/// does not push later deadlines).
pub(crate) fn sleep_until(deadline: i64) {
    let ts = libc::timespec {
        tv_sec: deadline / 1_000_000_000,
        tv_nsec: deadline % 1_000_000_000,
    };
    loop {
        // SAFETY: a valid timespec; no remaining-time pointer is needed with ABSTIME.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &raw const ts,
                std::ptr::null_mut(),
            )
        };
        if r != libc::EINTR {
            return;
        }
    }
}

/// Puts the calling thread under SCHED_FIFO and removes its timer slack. Returns the
/// error when the first is not permitted (the slack is removed regardless).
pub(crate) fn make_realtime() -> io::Result<()> {
    let one_ns: libc::c_ulong = 1;
    // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, one_ns, 0, 0, 0) };
    let param = libc::sched_param { sched_priority: 40 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to stamp every datagram `s` receives (`SO_TIMESTAMPNS`).
pub(crate) fn enable_rx_timestamps(s: &Socket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: valid fd; the option value points at a c_int of the stated size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Receives one datagram into `buf`: its length and the kernel's receive stamp
/// (realtime ns), or `None` for the stamp if the kernel gave none. A read timeout set
/// on the socket surfaces as `WouldBlock`/`TimedOut`.
pub(crate) fn recv_stamped(s: &Socket, buf: &mut [u8]) -> io::Result<(usize, Option<i64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one timespec control message, aligned.
    let mut control = [0u64; 8];
    // SAFETY: zeroed msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>();
    // SAFETY: msg points at live buffers of the stated sizes for the whole call.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &raw mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel just filled, within
    // msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamp = Some(nanos(ts));
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    Ok((n as usize, stamp))
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to a flag that [`interrupted`] reads, so a run can end
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

/// Whether SIGINT or SIGTERM arrived.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
