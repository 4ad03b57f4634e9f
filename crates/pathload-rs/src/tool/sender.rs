//! The sender role: wait for a receiver on the control port and send what it asks for.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::Duration;

use crate::control::{CONTROL_VERSION, Reply, Request, Transport};
use crate::params::{MAX_PROBE_IP_BYTES, MIN_PROBE_IP_BYTES};
use anyhow::Context;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::tool::cli::SndArgs;
use crate::tool::conn::Conn;
use crate::tool::sys;
use crate::tool::transport::{Batch, Sender};

/// A receiver that says nothing for this long is gone.
const IDLE_LIMIT: Duration = Duration::from_secs(120);

/// Largest probe a connection's path carries: its TCP segment size plus the IP and
/// TCP headers with timestamps (pathload 1.3.2 reads TCP_MAXSEG), within pathload's
/// bounds.
fn max_size(conn: &Conn) -> u32 {
    let mss = socket2::SockRef::from(conn.stream())
        .tcp_mss()
        .unwrap_or(1448);
    let v6 = conn.stream().peer_addr().is_ok_and(|a| a.is_ipv6());
    let headers = if v6 { 72 } else { 52 };
    (mss + headers).clamp(MIN_PROBE_IP_BYTES, MAX_PROBE_IP_BYTES)
}

fn listen(args: &SndArgs) -> anyhow::Result<TcpListener> {
    let bind = args.bind.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    let domain = if bind.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    if bind.is_ipv6() {
        // Receivers over IPv4 too, unless the host has IPv6 off.
        let _ = s.set_only_v6(false);
    }
    s.set_reuse_address(true)?;
    let addr = SocketAddr::new(bind, args.port);
    s.bind(&SockAddr::from(addr)).with_context(|| {
        format!("cannot listen on control port {addr}; is another pathload-rs snd running? pick another with --port")
    })?;
    s.listen(4)?;
    Ok(s.into())
}

/// Serves one measurement, or every one with `--keep-serving`.
pub(crate) fn run(args: &SndArgs) -> anyhow::Result<()> {
    let listener = listen(args)?;
    if args.transport() == Transport::Udp {
        if let Err(e) = sys::make_realtime() {
            eprintln!(
                "pathload-rs: warning: probes are paced without real-time priority ({e}); run as root or with CAP_SYS_NICE for steadier gaps"
            );
        }
    }
    eprintln!(
        "pathload-rs: sender waiting on {} ({} probes)",
        listener.local_addr()?,
        args.transport()
    );
    loop {
        if sys::interrupted() {
            return Ok(());
        }
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        eprintln!("pathload-rs: receiver {peer} connected");
        match serve(args, stream, peer) {
            Ok(n) => eprintln!("pathload-rs: measurement for {peer} done ({n} streams)"),
            Err(e) => eprintln!("pathload-rs: measurement for {peer} ended: {e:#}"),
        }
        if !args.keep_serving {
            return Ok(());
        }
    }
}

fn serve(args: &SndArgs, stream: std::net::TcpStream, peer: SocketAddr) -> anyhow::Result<u32> {
    stream.set_read_timeout(Some(IDLE_LIMIT))?;
    let mut conn = Conn::new(stream)?;
    let mut sender: Option<Sender> = None;
    let mut streams = 0;
    while let Some(req) = conn.recv::<Request>()? {
        if sys::interrupted() {
            conn.send(&Reply::Error {
                message: "the sender is shutting down".into(),
            })?;
            break;
        }
        let reply = match req {
            Request::Hello {
                version,
                transport,
                address,
                probe_port,
                piggyback,
            } => {
                if version != CONTROL_VERSION {
                    Reply::Error {
                        message: format!(
                            "control protocol {version} not spoken here (this sender speaks {CONTROL_VERSION}); use the same pathload-rs version on both hosts"
                        ),
                    }
                } else if transport != args.transport() {
                    Reply::Error {
                        message: format!(
                            "this sender sends {} probes; run the receiver with --transport {}",
                            args.transport(),
                            args.transport()
                        ),
                    }
                } else {
                    // A dual-stack listener sees IPv4 receivers as IPv4-mapped IPv6.
                    let ip = address.unwrap_or(peer.ip()).to_canonical();
                    let dst = SocketAddr::new(ip, probe_port);
                    let made = match transport {
                        Transport::Udp => Sender::udp(dst, args.probe_port),
                        Transport::Mgrp => Sender::mgrp(
                            &args.socket,
                            dst.ip(),
                            (args.probe_port, probe_port),
                            piggyback && !args.no_piggyback,
                        ),
                    };
                    match made {
                        Ok(s) => {
                            sender = Some(s);
                            Reply::Hello {
                                version: CONTROL_VERSION,
                                max_size: max_size(&conn),
                                sender: format!("pathload-rs {}", env!("CARGO_PKG_VERSION")),
                            }
                        }
                        Err(e) => Reply::Error {
                            message: format!("{e:#}"),
                        },
                    }
                }
            }
            Request::Ping => Reply::Pong,
            Request::Train { id, packets, size } => send(
                &mut sender,
                &Batch {
                    kind: crate::control::ProbeKind::Train,
                    fleet: 0,
                    stream: id,
                    packets,
                    size,
                    spacing_ns: 0,
                    rider_probes: 0,
                },
            ),
            Request::Stream {
                fleet,
                stream,
                packets,
                size,
                spacing_ns,
                rider_probes,
            } => {
                streams += 1;
                send(
                    &mut sender,
                    &Batch {
                        kind: crate::control::ProbeKind::Stream,
                        fleet,
                        stream,
                        packets,
                        size,
                        spacing_ns,
                        rider_probes,
                    },
                )
            }
            Request::Bye => break,
        };
        if args.verbose {
            if let Reply::Error { message } = &reply {
                eprintln!("pathload-rs: refused: {message}");
            }
        }
        conn.send(&reply)?;
    }
    Ok(streams)
}

/// Probes per train or stream the sender accepts.
const MAX_PACKETS: u32 = 10_000;

fn send(sender: &mut Option<Sender>, b: &Batch) -> Reply {
    let Some(s) = sender.as_mut() else {
        return Reply::Error {
            message: "no hello yet".into(),
        };
    };
    if b.packets == 0 || b.packets > MAX_PACKETS || b.size > MAX_PROBE_IP_BYTES {
        return Reply::Error {
            message: format!(
                "refused: {} probes of {} bytes (at most {MAX_PACKETS} of {MAX_PROBE_IP_BYTES})",
                b.packets, b.size
            ),
        };
    }
    match s.send(b) {
        Ok(sent) => Reply::Sent {
            fleet: b.fleet,
            stream: b.stream,
            // Probes the local kernel refused count as lost, as they would on a link.
            sent: b.packets,
            sender_stamps: sent.stamps,
            competing_rider_bytes: sent.competing_rider_bytes,
            rider_bytes: sent.rider_bytes,
            riding_probe_bytes: sent.riding_probe_bytes,
            kernel_stamps: sent.kernel_clock,
        },
        Err(e) => Reply::Error {
            message: format!("sending failed: {e:#}"),
        },
    }
}
