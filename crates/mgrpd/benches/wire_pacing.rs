//! Pacing as the wire sees it: probes captured as they leave the sender's veth
//! (AF_PACKET, outgoing packets only, kernel receive-path stamps taken when the veth
//! hands a copy to packet sockets), gaps taken between probes `seq` and `seq + 1` of
//! one transaction (read from the MGRP header, so interleaved continuations do not
//! count), against the nominal gap. Also how far the departures mgrpd reports lie
//! from the capture.
//!
//! Settings: quiet; a 4 Mbit/s TCP stream riding; a greedy TCP transfer through the
//! tunnel, with `--hold-mode always` and with `--hold-mode on-demand`. With
//! `--concurrent 1,4,16` instead: one sender and that many receivers on a star, quiet,
//! each receiver's trains sent from a client of its own at the same time, so that
//! many trains run at once on the sender's mgrpd (the gap of each train against its
//! own nominal gap; the probes the reports counted displaced beside it), first all at
//! one gap, then each receiver's trains at a gap of their own (5 % apart).
//!
//! Needs root. `cargo bench -p mgrpd --bench wire_pacing -- [--trains N] [--gap-us G]
//! [--probes N] [--mgrpd PATH] [--pacer-cpu N] [--daemon-flags "FLAGS"] [--encap E] [--only TEXT]
//! [--concurrent N,N,...]`
//! (`--mgrpd` measures another build of the daemon, for before/after figures;
//! `--pacer-cpu` pins both daemons' pacers; `--encap udp[:PORT]` runs both daemons with
//! UDP encapsulation and captures the probes inside it; `--only` runs the settings whose name contains TEXT). Prints one line per
//! setting; note the machine's load.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mgrp_core::schedule::percentile;
use mgrp_core::wire::{Kind, Packet};
use mgrp_testbed::traffic::tcp_source;
use mgrp_testbed::{ADDR_B, Daemon, TwoHostOptions, TwoHosts, uniform_train};

/// One captured probe: transaction, sequence number, capture stamp (ns, realtime).
type Seen = (u32, u16, i64);

/// An AF_PACKET socket on `dev` that sees MGRP probes only: IP protocol 253, or UDP
/// to `udp_port` when the daemons encapsulate in UDP. Only `ETH_P_ALL` sockets see
/// outgoing packets.
fn capture_socket(dev: &str, udp_port: Option<u16>) -> std::io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain syscall; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto)) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(dev).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Classic BPF: the IP header starts at offset 0 of a cooked packet. Keep MGRP
    // probes (protocol 253, or UDP to `udp_port` when given), drop the rest: a greedy
    // transfer's segments and the continuations carrying them would swamp the socket.
    // X holds the offset of the MGRP header; a probe is version 1 with kind 1, or
    // version 2 with kind 1 (first byte 0b0010_01xx).
    let f = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let port = u32::from(udp_port.unwrap_or(0));
    let code = [
        f(0xb1, 0, 0, 0),      // 0: ldxb 4*([0]&0xf)
        f(0x30, 0, 0, 9),      // 1: ldb [9]
        f(0x15, 6, 0, 253),    // 2: jeq #253 -> 9
        f(0x15, 0, 13, 17),    // 3: jeq #17 else -> 17
        f(0x48, 0, 0, 2),      // 4: ldh [x+2]
        f(0x15, 0, 11, port),  // 5: jeq #port else -> 17
        f(0x87, 0, 0, 0),      // 6: txa
        f(0x04, 0, 0, 8),      // 7: add #8
        f(0x07, 0, 0, 0),      // 8: tax
        f(0x50, 0, 0, 0),      // 9: ldb [x+0]
        f(0x54, 0, 0, 0xfc),   // 10: and #0xfc
        f(0x15, 4, 0, 0x24),   // 11: jeq #0x24 -> 16
        f(0x50, 0, 0, 0),      // 12: ldb [x+0]
        f(0x15, 0, 3, 1),      // 13: jeq #1 else -> 17
        f(0x50, 0, 0, 1),      // 14: ldb [x+1]
        f(0x15, 0, 1, 1),      // 15: jeq #1 else -> 17
        f(0x06, 0, 0, 0xffff), // 16: ret #65535
        f(0x06, 0, 0, 0),      // 17: ret #0
    ];
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_ptr().cast_mut(),
    };
    let one: libc::c_int = 1;
    let rcvbuf: libc::c_int = 16 << 20;
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: option values of the sizes given, on a valid socket.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            size_of::<libc::sock_fprog>() as u32,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const one).cast(),
            4,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const rcvbuf).cast(),
            4,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            size_of::<libc::timeval>() as u32,
        );
    }
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: a sockaddr_ll of its size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// Reads probes from `fd` until `stop`; with `udp_port`, from UDP datagrams to it.
fn capture(fd: &OwnedFd, udp_port: Option<u16>, stop: &AtomicBool) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let mut control = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: zeroed msghdr, then pointed at live buffers.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&raw mut sll).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len();
        // SAFETY: msg points at live buffers of the sizes given.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &raw mut msg, 0) };
        if n <= 0 {
            continue;
        }
        if sll.sll_pkttype != libc::PACKET_OUTGOING {
            continue;
        }
        let mut stamp = None;
        // SAFETY: walking the control messages recvmsg filled in.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    stamp = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
                }
                c = libc::CMSG_NXTHDR(&raw const msg, c);
            }
        }
        let data = &buf[..n as usize];
        let Ok(ip) = mgrp_core::ip::Ip::parse(data) else {
            continue;
        };
        let Some(stamp) = stamp.filter(|_| ip.is_v4()) else {
            continue;
        };
        let payload = match udp_port {
            None if ip.protocol == 253 => ip.payload,
            Some(port)
                if ip.protocol == 17
                    && ip.payload.len() >= 8
                    && u16::from_be_bytes([ip.payload[2], ip.payload[3]]) == port =>
            {
                &ip.payload[8..]
            }
            _ => continue,
        };
        if let Ok(p) = Packet::new_checked(payload)
            && p.kind() == Kind::Probe
        {
            seen.push((p.transaction(), p.seq(), stamp));
        }
    }
    seen
}

struct Figures {
    gaps: usize,
    err_p50: f64,
    err_p99: f64,
    err_max: f64,
    over_500: usize,
    report_p50: f64,
    report_p99: f64,
    report_max: f64,
    /// The same for the kernel's transmit stamps in the reports, and how many probes
    /// had one.
    kernel_p50: f64,
    kernel_p99: f64,
    kernel_max: f64,
    kernel_stamped: usize,
    /// Probes the reports counted late, and displaced (another train's probe was
    /// being sent when they fell due).
    late: usize,
    displaced: usize,
    /// Gaps over 500 µs on the wire that the reports show too (time lost before the
    /// send, in user space), and those they do not (lost inside the send).
    stalls_reported: usize,
    stalls_in_send: usize,
    captured: usize,
    sent: usize,
}

/// `gap` gives each transaction's nominal gap.
fn figures(
    seen: &[Seen],
    reports: &[mgrp_core::stats::TransactionReport],
    gap: &dyn Fn(u32) -> Duration,
) -> Figures {
    let mut by_tx: BTreeMap<u32, BTreeMap<u16, i64>> = BTreeMap::new();
    for &(tx, seq, t) in seen {
        by_tx.entry(tx).or_default().insert(seq, t);
    }
    let mut errors = Vec::new();
    let mut offsets = Vec::new();
    let mut kernel = Vec::new();
    let mut late = 0;
    let mut displaced = 0;
    let mut sent = 0;
    let (mut stalls_reported, mut stalls_in_send) = (0, 0);
    for r in reports {
        let Some(stamps) = by_tx.get(&r.transaction) else {
            continue;
        };
        let nominal = gap(r.transaction).as_nanos() as f64;
        let reported = |seq: u16| {
            r.departures
                .get(usize::from(seq))
                .filter(|d| d.departed.is_some())
                .map(|d| d.stamp.as_nanos() as i64)
        };
        for (&seq, &t) in stamps {
            if let Some(&next) = stamps.get(&(seq + 1)) {
                let error = ((next - t) as f64 - nominal).abs() / 1e3;
                errors.push(error);
                if error > 500.0 {
                    match (reported(seq), reported(seq + 1)) {
                        (Some(a), Some(b)) if ((b - a) as f64 - nominal).abs() / 1e3 > 250.0 => {
                            stalls_reported += 1;
                        }
                        _ => stalls_in_send += 1,
                    }
                }
            }
            if let Some(d) = r.departures.get(usize::from(seq))
                && d.departed.is_some()
            {
                offsets.push((t - d.stamp.as_nanos() as i64) as f64 / 1e3);
                if let Some(k) = d.kernel_queued {
                    kernel.push((t - k.as_nanos() as i64) as f64 / 1e3);
                }
            }
        }
        sent += r.departures.iter().filter(|d| d.departed.is_some()).count();
        late += usize::from(r.probes_late);
        displaced += usize::from(r.probes_displaced);
    }
    let mut kernel_abs: Vec<f64> = kernel.iter().map(|o| o.abs()).collect();
    kernel_abs.sort_by(f64::total_cmp);
    kernel.sort_by(f64::total_cmp);
    errors.sort_by(f64::total_cmp);
    let mut abs: Vec<f64> = offsets.iter().map(|o| o.abs()).collect();
    abs.sort_by(f64::total_cmp);
    offsets.sort_by(f64::total_cmp);
    Figures {
        gaps: errors.len(),
        err_p50: percentile(&errors, 50.0).unwrap_or(f64::NAN),
        err_p99: percentile(&errors, 99.0).unwrap_or(f64::NAN),
        err_max: errors.last().copied().unwrap_or(f64::NAN),
        over_500: errors.iter().filter(|&&e| e > 500.0).count(),
        report_p50: percentile(&offsets, 50.0).unwrap_or(f64::NAN),
        report_p99: percentile(&abs, 99.0).unwrap_or(f64::NAN),
        report_max: abs.last().copied().unwrap_or(f64::NAN),
        kernel_p50: percentile(&kernel, 50.0).unwrap_or(f64::NAN),
        kernel_p99: percentile(&kernel_abs, 99.0).unwrap_or(f64::NAN),
        kernel_max: kernel_abs.last().copied().unwrap_or(f64::NAN),
        kernel_stamped: kernel.len(),
        late,
        displaced,
        stalls_reported,
        stalls_in_send,
        captured: seen.len(),
        sent,
    }
}

#[derive(Clone, Copy)]
enum Traffic {
    Quiet,
    Stream,
    Greedy,
}

/// What every setting shares.
struct Run<'a> {
    mgrpd: &'a Path,
    /// More flags for both daemons.
    extra: &'a [String],
    /// The UDP port probes go to, when the daemons encapsulate in UDP.
    udp_port: Option<u16>,
    trains: usize,
    probes: usize,
    gap: Duration,
}

fn setting(run: &Run<'_>, name: &str, hold: &str, traffic: Traffic) {
    let Run {
        mgrpd,
        extra,
        udp_port,
        trains,
        probes,
        gap,
    } = *run;
    let net = TwoHosts::new(&TwoHostOptions::default()).expect("topology");
    let mut args = vec!["--log-level", "warn", "--hold-mode", hold];
    args.extend(extra.iter().map(String::as_str));
    let (a, _b): (Daemon, Daemon) =
        mgrp_testbed::daemon_pair(&net, mgrpd, &[], &args).expect("mgrpd on A and B");
    let dev = net.veth_a.clone();
    let fd = net
        .a
        .run(|| capture_socket(&dev, udp_port))
        .expect("thread in A")
        .expect("AF_PACKET socket");
    let stop = Arc::new(AtomicBool::new(false));
    let capturer = {
        let stop = stop.clone();
        std::thread::spawn(move || capture(&fd, udp_port, &stop))
    };
    let source = match traffic {
        Traffic::Quiet => None,
        Traffic::Stream => {
            Some(tcp_source(&net.a, &net.b, IpAddr::V4(ADDR_B), 9300, Some(4.0)).unwrap())
        }
        Traffic::Greedy => {
            Some(tcp_source(&net.a, &net.b, IpAddr::V4(ADDR_B), 9300, None).unwrap())
        }
    };
    std::thread::sleep(Duration::from_millis(500));
    let api = a.api().expect("API of A");
    let mut reports = Vec::new();
    for _ in 0..trains {
        reports.push(
            api.send_train(uniform_train(IpAddr::V4(ADDR_B), probes, 300, gap))
                .expect("report"),
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mbps = source.as_ref().map(mgrp_testbed::traffic::Source::mbps);
    drop(source);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let seen = capturer.join().expect("capture thread");
    let f = figures(&seen, &reports, &|_| gap);
    print_figures(name, &f, mbps);
}

fn print_figures(name: &str, f: &Figures, mbps: Option<f64>) {
    println!(
        "{name:<30} gap error p50 {:5.2} µs p99 {:6.1} µs max {:6.0} µs, >500 µs: {:2} ({} before the send, {} in it) | reported−wire p50 {:4.1} µs |p99| {:5.1} µs max {:6.0} µs | kernel−wire p50 {:4.1} µs |p99| {:5.1} µs max {:6.0} µs ({} stamped) | {} late, {} displaced | {} gaps, {}/{} probes captured{}",
        f.err_p50,
        f.err_p99,
        f.err_max,
        f.over_500,
        f.stalls_reported,
        f.stalls_in_send,
        f.report_p50,
        f.report_p99,
        f.report_max,
        f.kernel_p50,
        f.kernel_p99,
        f.kernel_max,
        f.kernel_stamped,
        f.late,
        f.displaced,
        f.gaps,
        f.captured,
        f.sent,
        mbps.map_or(String::new(), |m| format!(", TCP {m:.0} Mbit/s"))
    );
}

/// One sender and `n` receivers on a star, quiet: `trains` trains to each receiver,
/// every receiver's from a client of its own, all at once; with `spread`, receiver
/// `i`'s trains (from 0) at `gap × (1 + i / 20)` rather than all at `gap`.
fn concurrent(run: &Run<'_>, n: usize, spread: bool) {
    let Run {
        mgrpd,
        extra,
        udp_port,
        trains,
        probes,
        gap,
    } = *run;
    let star = mgrp_testbed::Star::new(&vec![None; n + 1]).expect("topology");
    // Room for every train at once in the rate limits (one user sends them all).
    let conf = std::env::temp_dir().join(format!("{}.toml", mgrp_testbed::unique("wp")));
    std::fs::write(
        &conf,
        "[limits]\nprobes-per-second-per-user = 1000000.0\nprobe-bytes-per-second-per-user = 1000000000.0\nprobes-per-second = 1000000.0\nprobe-bytes-per-second = 1000000000.0\n",
    )
    .expect("configuration");
    let conf_arg = conf.display().to_string();
    let mut args = vec!["--config", conf_arg.as_str(), "--log-level", "warn"];
    args.extend(extra.iter().map(String::as_str));
    let daemons = star
        .daemons(mgrpd, &[], &args)
        .expect("mgrpd on every host");
    let _ = std::fs::remove_file(&conf);
    let dev = star.devs[0].clone();
    let fd = star.hosts[0]
        .run(|| capture_socket(&dev, udp_port))
        .expect("thread in the sender")
        .expect("AF_PACKET socket");
    let stop = Arc::new(AtomicBool::new(false));
    let capturer = {
        let stop = stop.clone();
        std::thread::spawn(move || capture(&fd, udp_port, &stop))
    };
    std::thread::sleep(Duration::from_millis(500));
    let gap_of = |i: usize| {
        if spread {
            gap.mul_f64(1.0 + i as f64 / 20.0)
        } else {
            gap
        }
    };
    let reports: Vec<(Duration, mgrp_core::stats::TransactionReport)> = std::thread::scope(|s| {
        let senders: Vec<_> = star.addrs[1..]
            .iter()
            .enumerate()
            .map(|(i, to)| {
                let sender = &daemons[0];
                let gap = gap_of(i);
                s.spawn(move || {
                    let api = sender.api().expect("API of the sender");
                    let mut mine = Vec::new();
                    for _ in 0..trains {
                        let r = api
                            .send_train(uniform_train(IpAddr::V4(*to), probes, 300, gap))
                            .expect("report");
                        mine.push((gap, r));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    mine
                })
            })
            .collect();
        senders
            .into_iter()
            .flat_map(|t| t.join().expect("a sending thread"))
            .collect()
    });
    let gaps: BTreeMap<u32, Duration> = reports.iter().map(|(g, r)| (r.transaction, *g)).collect();
    let reports: Vec<_> = reports.into_iter().map(|(_, r)| r).collect();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let seen = capturer.join().expect("capture thread");
    let f = figures(&seen, &reports, &|tx| gaps.get(&tx).copied().unwrap_or(gap));
    let how = if spread { "gaps apart" } else { "one gap" };
    print_figures(&format!("{n} trains at once, {how}"), &f, None);
}

fn main() {
    if !mgrp_testbed::is_root() {
        eprintln!("wire_pacing: needs root (network namespaces, AF_PACKET)");
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let trains: usize = value("--trains").map_or(14, |v| v.parse().expect("--trains N"));
    let probes: usize = value("--probes").map_or(1000, |v| v.parse().expect("--probes N"));
    let gap_us: u64 = value("--gap-us").map_or(200, |v| v.parse().expect("--gap-us G"));
    let mgrpd: PathBuf =
        value("--mgrpd").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mgrpd")), PathBuf::from);
    let gap = Duration::from_micros(gap_us);
    let mut extra: Vec<String> = value("--pacer-cpu")
        .map(|c| vec!["--pacer-cpu".to_string(), c])
        .unwrap_or_default();
    // More daemon flags, e.g. --daemon-flags "--busy-poll-margin 300us".
    if let Some(flags) = value("--daemon-flags") {
        extra.extend(flags.split_whitespace().map(str::to_string));
    }
    // --encap udp[:PORT]: both daemons encapsulate in UDP; probes are read from it.
    let udp_port = value("--encap").and_then(|e| {
        extra.extend(["--encap".to_string(), e.clone()]);
        let port = e.strip_prefix("udp")?;
        Some(
            port.strip_prefix(':')
                .map_or(mgrpd::config::DEFAULT_UDP_PORT, |p| {
                    p.parse().expect("--encap udp:PORT")
                }),
        )
    });
    let only = value("--only");
    let concurrent_counts: Option<Vec<usize>> = value("--concurrent").map(|v| {
        v.split(',')
            .map(|n| n.trim().parse().expect("--concurrent N,N,..."))
            .collect()
    });
    println!(
        "wire pacing: {trains} trains x {probes} probes of 300 B at {gap_us} µs, mgrpd {} {}, load {}",
        mgrpd.display(),
        extra.join(" "),
        mgrp_testbed::host::load()
    );
    if let Some(counts) = concurrent_counts {
        let run = Run {
            mgrpd: &mgrpd,
            extra: &extra,
            udp_port,
            trains,
            probes,
            gap,
        };
        for spread in [false, true] {
            for &n in &counts {
                concurrent(&run, n, spread);
            }
        }
        println!("load after {}", mgrp_testbed::host::load());
        return;
    }
    for (name, hold, traffic) in [
        ("quiet, on-demand", "on-demand", Traffic::Quiet),
        ("4 Mbit/s TCP riding, always", "always", Traffic::Stream),
        ("greedy TCP, always", "always", Traffic::Greedy),
        ("greedy TCP, on-demand", "on-demand", Traffic::Greedy),
    ] {
        if only.as_ref().is_none_or(|o| name.contains(o.as_str())) {
            let run = Run {
                mgrpd: &mgrpd,
                extra: &extra,
                udp_port,
                trains,
                probes,
                gap,
            };
            setting(&run, name, hold, traffic);
        }
    }
    println!("load after {}", mgrp_testbed::host::load());
}
