//! The sender's control port as an outsider meets it. Three hosts around a router
//! (`mgrp_testbed::Star`): A serves measurements over plain UDP (the server every
//! tool's `snd` and the overlay's `[serve]` run), B is any host that reaches A's
//! control port, C a third host that asked for nothing and listens on the probe port.
//!
//! - B cannot aim A's probes at C: a hello naming C's address gets one small proof
//!   probe sent there and nothing more until B echoes its cookie, which it never saw.
//! - A receiver that names another address of its own proves it and is measured.
//! - B's questions about C (its TCP flows, its packet stamps, the traffic routed to it)
//!   are refused, and open no capture on A.
//! - A measurement cannot hold the sender past its session limit.
//! - A sender told which hosts it serves turns the others away, and a requester gets
//!   no more probe bytes an hour than its budget.
//! - A batch that asks the sender to hold it longer than any gap may last (its lead)
//!   is refused, and nothing of it is sent.
//!
//! Its own `main` (no libtest harness): it needs root, as CI has; without root each
//! test is ignored and says so. Arguments that are not flags filter the tests by name.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use mgrp_testbed::Star;
use mgrp_testbed::harness::Test;
use mgrp_tool::conn::Conn;
use mgrp_tool::control::{CONTROL_VERSION, PROOF_PROBE_BYTES, Reply, Request};
use mgrp_tool::{Batch, ServeOptions, Server, Session, SessionOptions, Tag, Transport};

const CONTROL: u16 = 55002;
const PROBE_PORT: u16 = 55001;

/// A serves on its control port for as long as the guard lives.
struct Serving {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Serving {
    /// Serves with `opts` on the control port.
    fn start(star: &Star, opts: ServeOptions) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = star.hosts[0].spawn("sender", move || {
            let server = Server::bind(ServeOptions {
                port: CONTROL,
                ..opts
            })?;
            server.serve(true, &flag, &mut |ev| eprintln!("    sender: {ev:?}"))
        })?;
        // Until it listens.
        let a = SocketAddr::new(IpAddr::V4(star.addrs[0]), CONTROL);
        let until = Instant::now() + Duration::from_secs(5);
        while star.hosts[1]
            .run(|| TcpStream::connect_timeout(&a, Duration::from_millis(200)))?
            .is_err()
        {
            ensure!(Instant::now() < until, "the sender did not listen on {a}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Serving {
    /// Stops serving and says how long the server took to end, failing past `bound`.
    fn stop_within(&mut self, bound: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().context("stopped twice")?;
        while !thread.is_finished() {
            ensure!(
                t.elapsed() < bound,
                "the sender still served {bound:?} after it was told to stop"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("the sender panicked"))??;
        Ok(t.elapsed())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Datagrams and bytes that reach a host's probe port, counted by a thread in its
/// namespace until the guard is dropped.
struct Counter {
    datagrams: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Counter {
    fn start(ns: &mgrp_testbed::Netns) -> anyhow::Result<Self> {
        let (datagrams, bytes, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (d, b, s) = (datagrams.clone(), bytes.clone(), stop.clone());
        let socket = ns.run(|| UdpSocket::bind(("0.0.0.0", PROBE_PORT)))??;
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buf) {
                    d.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Ok(())
        });
        Ok(Self {
            datagrams,
            bytes,
            stop,
            thread: Some(thread),
        })
    }

    fn counts(&self) -> (u64, u64) {
        (
            self.datagrams.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A control connection from B to A, speaking the protocol by hand as an attacker
/// would.
fn connect(star: &Star) -> anyhow::Result<Conn> {
    connect_from(star, 1)
}

/// A control connection to the sender on host 0 from host `host`.
fn connect_from(star: &Star, host: usize) -> anyhow::Result<Conn> {
    let a = SocketAddr::new(IpAddr::V4(star.addrs[0]), CONTROL);
    let stream =
        star.hosts[host].run(|| TcpStream::connect_timeout(&a, Duration::from_secs(5)))??;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    Conn::new(stream)
}

fn hello(address: Option<IpAddr>) -> Request {
    hello_on(address, PROBE_PORT)
}

/// A hello asking for probes to `probe_port`.
fn hello_on(address: Option<IpAddr>, probe_port: u16) -> Request {
    Request::Hello {
        version: CONTROL_VERSION,
        transport: Transport::Udp,
        address,
        probe_port,
        piggyback: false,
        tool: "an outsider".into(),
        exclusive: false,
    }
}

/// A batch of 1000 probes of 1500 bytes, back to back: 1.5 MB asked in one line.
fn flood() -> Request {
    Request::Probes(Batch::even(Tag::default(), 1000, 1500, 0, 0))
}

fn reflection_to_a_third_host_is_refused() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let c = Counter::start(&star.hosts[2])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    let victim = IpAddr::V4(star.addrs[2]);
    let mut conn = connect(&star)?;
    conn.send(&hello(Some(victim)))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Prove { address }) => ensure!(address == victim, "proof to {address}"),
        other => bail!("a hello naming a third host was answered {other:?}"),
    }
    // Probes asked for before a proof are refused.
    conn.send(&flood())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => eprintln!("    answered: {message}"),
        other => bail!("probes to an unproven address were answered {other:?}"),
    }
    // A guessed cookie ends the connection.
    conn.send(&Request::Proof { cookie: 42 })?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => eprintln!("    answered: {message}"),
        other => bail!("a wrong proof was answered {other:?}"),
    }
    ensure!(
        conn.recv::<Reply>().map(|r| r.is_none()).unwrap_or(true),
        "the connection stayed open after a wrong proof"
    );
    // A second connection cannot make the sender send more than its one proof probe.
    let mut again = connect(&star)?;
    again.send(&hello(Some(victim)))?;
    let _ = again.recv::<Reply>()?;
    again.send(&hello(Some(victim)))?;
    match again.recv::<Reply>()? {
        Some(Reply::Error { message }) => eprintln!("    answered: {message}"),
        other => bail!("a second proof on one connection was answered {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(300));
    let (datagrams, bytes) = c.counts();
    eprintln!("    the third host got {datagrams} datagrams, {bytes} bytes");
    // One proof probe per connection, each the size of a proof (its UDP payload).
    ensure!(
        datagrams <= 2 && bytes <= 2 * u64::from(PROOF_PROBE_BYTES),
        "the third host got {datagrams} datagrams ({bytes} bytes)"
    );
    Ok(())
}

fn a_receiver_proves_its_second_address_and_is_measured() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    let second = IpAddr::V4(star.outside[1]);
    let opts = SessionOptions {
        address: Some(second),
        ..SessionOptions::new(
            star.addrs[0].to_string(),
            Transport::Udp,
            "control-plane test",
        )
    };
    let arrivals = star.hosts[1].run(|| -> anyhow::Result<usize> {
        let mut session = Session::open(&opts).context("the session did not open")?;
        // This version's sender honours every feature a receiver may need.
        for f in mgrp_tool::control::FEATURES {
            ensure!(session.sender_honours(f), "the sender does not name {f}");
        }
        let x = session
            .exchange(&Batch::even(Tag::default(), 50, 500, 200_000, 0))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        session.close();
        Ok(x.arrivals.len())
    })??;
    ensure!(
        arrivals >= 45,
        "only {arrivals} of 50 probes reached the proven address"
    );
    Ok(())
}

fn questions_about_a_third_host_are_refused() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    let victim = IpAddr::V4(star.addrs[2]);
    // A keeps a TCP flow to C.
    let listener = star.hosts[2].run(|| TcpListener::bind(("0.0.0.0", 9100)))??;
    let flow = star.hosts[0].run(|| {
        TcpStream::connect_timeout(&SocketAddr::new(victim, 9100), Duration::from_secs(5))
    })??;
    let (_accepted, _) = listener.accept()?;
    let packet_sockets = || -> anyhow::Result<usize> {
        Ok(star.hosts[0]
            .exec(&["cat", "/proc/net/packet"])?
            .lines()
            .count())
    };
    let before = packet_sockets()?;
    for request in [
        Request::Tcp {
            address: Some(victim),
        },
        Request::Stamps {
            address: Some(victim),
            after: 0,
        },
        Request::Traffic {
            address: Some(victim),
        },
    ] {
        let mut conn = connect(&star)?;
        conn.send(&request)?;
        match conn.recv::<Reply>()? {
            Some(Reply::Error { message }) => {
                ensure!(message.contains("own address"), "{message}");
            }
            other => bail!("{request:?} was answered {other:?}"),
        }
    }
    ensure!(
        packet_sockets()? == before,
        "a question about a third host opened a packet capture on the sender"
    );
    // About itself the asker is answered: B has no flow with A, so none is listed.
    let mut conn = connect(&star)?;
    conn.send(&Request::Tcp { address: None })?;
    match conn.recv::<Reply>()? {
        Some(Reply::Tcp { flows }) => ensure!(flows.is_empty(), "{flows:?}"),
        other => bail!("a question about the asker was answered {other:?}"),
    }
    drop(flow);
    Ok(())
}

fn a_measurement_cannot_hold_the_sender_past_its_session_limit() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            max_session: Duration::from_secs(2),
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let mut hog = connect(&star)?;
    hog.send(&hello(None))?;
    match hog.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the hello was answered {other:?}"),
    }
    // Pings keep the connection alive, but not the measurement past its limit.
    let until = Instant::now() + Duration::from_secs(10);
    let ended = loop {
        ensure!(
            Instant::now() < until,
            "pings held the sender for 10 s against a 2 s session limit"
        );
        hog.send(&Request::Ping)?;
        match hog.recv::<Reply>()? {
            Some(Reply::Pong) => std::thread::sleep(Duration::from_millis(250)),
            Some(Reply::Error { message }) => break message,
            other => bail!("a ping was answered {other:?}"),
        }
    };
    ensure!(ended.contains("session limit"), "{ended}");
    // The slot is free again: another receiver is served.
    let mut next = connect(&star)?;
    next.send(&hello(None))?;
    match next.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => Ok(()),
        other => bail!("the next receiver was answered {other:?}"),
    }
}

fn a_host_outside_the_allow_list_is_turned_away() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            allow: vec![format!("{}/32", star.addrs[2]).parse()?],
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let mut conn = connect(&star)?;
    conn.send(&hello(None))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => ensure!(message.contains("--allow"), "{message}"),
        other => bail!("a host outside the allow list was answered {other:?}"),
    }
    // The allowed host is served.
    let mut allowed = connect_from(&star, 2)?;
    allowed.send(&hello(None))?;
    match allowed.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => Ok(()),
        other => bail!("the allowed host was answered {other:?}"),
    }
}

/// A host that opens as many connections as it may (and says nothing on them) is
/// turned away at the next, saying why; another host is still served, and the first
/// is once its idle connections are closed.
fn one_host_cannot_take_every_connection() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    // The connection that found the sender listening is closed: let the sender see it.
    std::thread::sleep(Duration::from_millis(300));
    let idle: Vec<Conn> = (0..mgrp_tool::server::MAX_CONNECTIONS_PER_HOST)
        .map(|_| connect(&star))
        .collect::<anyhow::Result<_>>()?;
    // The sender counts a connection once it takes it: give it time to.
    std::thread::sleep(Duration::from_millis(300));
    let mut more = connect(&star)?;
    more.send(&hello(None))?;
    match more.recv::<Reply>()? {
        Some(Reply::Error { message }) => ensure!(
            message.starts_with(mgrp_tool::BUSY) && message.contains("connections open"),
            "{message}"
        ),
        other => bail!("a connection over the host's limit was answered {other:?}"),
    }
    let mut other = connect_from(&star, 2)?;
    other.send(&hello(None))?;
    match other.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("another host was answered {other:?}"),
    }
    other.send(&Request::Bye)?;
    drop((idle, other));
    std::thread::sleep(Duration::from_millis(300));
    let mut again = connect(&star)?;
    again.send(&hello(None))?;
    match again.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => Ok(()),
        other => bail!("the host, its connections closed, was answered {other:?}"),
    }
}

/// A sender set to serve more for one host than the default 4 serves that many and
/// refuses the next, naming the count; another host is served beside them.
fn a_sender_set_to_serve_more_serves_that_many() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let limits = mgrp_tool::server::SenderLimits {
        measurements_per_requester: 6,
        connections_per_requester: 12,
        ..Default::default()
    };
    let _serving = Serving::start(
        &star,
        ServeOptions {
            limits,
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let said_hello = |conn: &mut Conn, port: u16| -> anyhow::Result<Option<Reply>> {
        conn.send(&hello_on(None, port))?;
        conn.recv::<Reply>()
    };
    let mut held = Vec::new();
    for i in 0..6 {
        let mut c = connect(&star)?;
        match said_hello(&mut c, PROBE_PORT + i)? {
            Some(Reply::Hello { .. }) => held.push(c),
            other => bail!("hello {} of 6 was answered {other:?}", i + 1),
        }
    }
    let mut seventh = connect(&star)?;
    match said_hello(&mut seventh, PROBE_PORT + 6)? {
        Some(Reply::Error { message }) => ensure!(
            message.starts_with(mgrp_tool::BUSY) && message.contains("runs 6 measurements"),
            "{message}"
        ),
        other => bail!("a seventh measurement was answered {other:?}"),
    }
    let mut other = connect_from(&star, 2)?;
    match said_hello(&mut other, PROBE_PORT)? {
        Some(Reply::Hello { .. }) => Ok(()),
        other => bail!("another host was answered {other:?}"),
    }
}

/// A receiver that holds a measurement and stops reading its answers (pings sent and
/// their pongs never read, until every buffer between is full) holds its place only
/// until one of its writes has waited 10 s without progress: with the rest of its
/// host's places held, its host is then served again, long before the idle (120 s) or
/// session (10 min) limit would end it. (The receiving kernel compacts what it queues
/// now and then, which lets a write progress: the release comes 10 to 20 s after the
/// last progress, not at 10 s.)
fn a_receiver_that_stops_reading_is_let_go() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    let a = SocketAddr::new(IpAddr::V4(star.addrs[0]), CONTROL);
    // A receive buffer of its own, small and fixed: with the kernel's autotuning (up
    // to net.ipv4.tcp_rmem's 32 MB on some hosts) the hog's kernel could take in every
    // answer, and the sender would only see a receiver that stopped asking.
    let stream = star.hosts[1].run(|| -> std::io::Result<TcpStream> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_recv_buffer_size(16 * 1024)?;
        s.connect_timeout(&a.into(), Duration::from_secs(5))?;
        Ok(s.into())
    })??;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    // Long enough that only a sender that stopped reading stops these writes.
    stream.set_write_timeout(Some(Duration::from_secs(3)))?;
    let mut hog = Conn::new(stream)?;
    hog.send(&hello(None))?;
    match hog.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the hello was answered {other:?}"),
    }
    // Pings until the sender's answers fill every buffer up to its socket's largest
    // send buffer (4 MB), it stops reading, and so its requests back up too.
    let started = Instant::now();
    let mut sent = 0u32;
    while hog.send(&Request::Ping).is_ok() {
        sent += 1;
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "{sent} pings in 120 s and the sender still reads them"
        );
    }
    eprintln!(
        "    {sent} pings in {:?} until the sender stopped reading",
        started.elapsed()
    );

    // The host's other places, held by receivers that do read.
    let mut others = Vec::new();
    for _ in 1..mgrp_tool::server::MAX_MEASUREMENTS_PER_HOST {
        let mut c = connect_from(&star, 1)?;
        c.send(&hello(None))?;
        match c.recv::<Reply>()? {
            Some(Reply::Hello { .. }) => others.push(c),
            other => bail!("a measurement beside the hog was answered {other:?}"),
        }
    }
    let held = Instant::now();
    let b_addr = star.addrs[1];
    let other = |what: &str| -> anyhow::Result<Reply> {
        let mut c = connect_from(&star, 1)?;
        c.send(&hello(None))?;
        c.recv::<Reply>()?
            .with_context(|| format!("{b_addr} got no answer {what}"))
    };
    // Held while the sender waits on its write.
    match other("while the sender waits")? {
        Reply::Error { message }
            if message.starts_with(mgrp_tool::BUSY)
                && message.contains("the most one host may") => {}
        r => bail!("the hog's host was answered {r:?} while its places were held"),
    }
    let until = held + Duration::from_secs(60);
    loop {
        match other("after the write limit")? {
            Reply::Hello { .. } => break,
            Reply::Error { message } if message.starts_with(mgrp_tool::BUSY) => {
                ensure!(
                    Instant::now() < until,
                    "the sender was held over 60 s by a receiver that does not read ({sent} pings)"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            r => bail!("the hog's host was answered {r:?}"),
        }
    }
    eprintln!(
        "    let go {:?} after the sender stopped reading",
        held.elapsed()
    );
    drop((hog, others));
    Ok(())
}

fn a_lead_longer_than_a_gap_is_refused() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let c = Counter::start(&star.hosts[1])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    let mut conn = connect(&star)?;
    conn.send(&hello(None))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the hello was answered {other:?}"),
    }
    let batch = |lead_ns| {
        Request::Probes(Batch {
            lead_ns,
            ..Batch::even(Tag::default(), 3, 200, 1_000_000, 0)
        })
    };
    conn.send(&batch(mgrp_tool::control::MAX_GAP_NS + 1))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => ensure!(message.contains("lead"), "{message}"),
        other => bail!("a lead over the longest gap was answered {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(300));
    ensure!(c.counts().0 == 0, "a refused batch sent {:?}", c.counts());
    // The same batch with a lead within bounds is sent, and counted.
    conn.send(&batch(10_000_000))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Sent(r)) => ensure!(r.sent == 3, "{r:?}"),
        other => bail!("a batch with a short lead was answered {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(300));
    ensure!(c.counts().0 == 3, "the batch arrived as {:?}", c.counts());
    Ok(())
}

fn a_requester_over_its_hourly_budget_is_refused() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _c = Counter::start(&star.hosts[1])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            max_bytes_per_hour: 200_000,
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let mut conn = connect(&star)?;
    conn.send(&hello(None))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the hello was answered {other:?}"),
    }
    // 150 kB fits the 200 kB budget; the next 150 kB does not.
    let batch = || Request::Probes(Batch::even(Tag::default(), 100, 1500, 100_000, 0));
    conn.send(&batch())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Sent(r)) => ensure!(r.sent == 100, "{r:?}"),
        other => bail!("the first batch was answered {other:?}"),
    }
    conn.send(&batch())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => {
            ensure!(message.contains("budget"), "{message}");
            Ok(())
        }
        other => bail!("a batch over the budget was answered {other:?}"),
    }
}

/// Connections of a host that trickle one byte at a time, without ever ending a line,
/// until the guard is dropped.
struct Trickle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Trickle {
    fn start(ns: &mgrp_testbed::Netns, to: SocketAddr, connections: usize) -> anyhow::Result<Self> {
        let streams: Vec<TcpStream> = ns.run(|| {
            (0..connections)
                .map(|_| TcpStream::connect_timeout(&to, Duration::from_secs(5)))
                .collect::<std::io::Result<_>>()
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut streams = streams;
            while !flag.load(Ordering::Relaxed) {
                for s in &mut streams {
                    let _ = std::io::Write::write_all(s, b"{");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A host the sender refuses (outside `--allow`) that trickles a byte at a time on
/// several connections holds up no one: the allowed host is answered at once, and the
/// sender stops when told, with the trickles still going and the allowed host's
/// measurement open.
fn a_refused_host_trickling_bytes_holds_up_no_one() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let mut serving = Serving::start(
        &star,
        ServeOptions {
            allow: vec![format!("{}/32", star.addrs[2]).parse()?],
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let a = SocketAddr::new(IpAddr::V4(star.addrs[0]), CONTROL);
    let _trickle = Trickle::start(&star.hosts[1], a, 6)?;
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let mut allowed = connect_from(&star, 2)?;
    allowed.send(&hello(None))?;
    match allowed.recv::<Reply>() {
        Ok(Some(Reply::Hello { .. })) => {}
        Ok(other) => bail!(
            "the allowed host was answered {} after {:?} while a refused host trickled",
            brief(&other),
            asked.elapsed()
        ),
        Err(e) => bail!(
            "the allowed host got no answer ({e:#}) after {:?} while a refused host trickled",
            asked.elapsed()
        ),
    }
    let answered = asked.elapsed();
    eprintln!("    the allowed host was answered in {answered:?}");
    ensure!(
        answered < Duration::from_secs(2),
        "the allowed host waited {answered:?} for its answer while a refused host trickled"
    );
    // The refused host was told why, without a line of its own read.
    let mut refused = connect(&star)?;
    match refused.recv::<Reply>()? {
        Some(Reply::Error { message }) => ensure!(message.contains("--allow"), "{message}"),
        other => bail!("the refused host was answered {}", brief(&other)),
    }
    let took = serving.stop_within(Duration::from_secs(5))?;
    eprintln!("    stopped in {took:?}");
    ensure!(
        took < Duration::from_secs(2),
        "the sender took {took:?} to stop while a refused host trickled"
    );
    drop(allowed);
    Ok(())
}

/// A batch asked for before any hello is refused, saying so, and costs nothing of the
/// requester's budget: the same batch after the hello is sent, where the budget has
/// room for one such batch and no more.
fn a_batch_before_hello_is_refused_and_costs_nothing() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let c = Counter::start(&star.hosts[1])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            max_bytes_per_hour: 200_000,
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let batch = || Request::Probes(Batch::even(Tag::default(), 100, 1500, 100_000, 0));
    let mut conn = connect(&star)?;
    conn.send(&batch())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => ensure!(message.contains("hello"), "{message}"),
        other => bail!("a batch before the hello was answered {}", brief(&other)),
    }
    conn.send(&hello(None))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the hello was answered {}", brief(&other)),
    }
    ensure!(
        c.counts().0 == 0,
        "probes before the hello: {:?}",
        c.counts()
    );
    conn.send(&batch())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Sent(r)) => ensure!(r.sent == 100, "{r:?}"),
        other => bail!("the batch after the hello was answered {}", brief(&other)),
    }
    Ok(())
}

/// A requester that asks for probes faster than the sender's rate limit (averaged over
/// its window) is refused, told what it exceeded and when to try again, and served
/// again then.
fn a_requester_over_its_probe_rate_is_refused() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _c = Counter::start(&star.hosts[1])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            // 2 MB in any second.
            max_probe_bps: 16_000_000,
            probe_rate_window: Duration::from_secs(1),
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let mut conn = connect(&star)?;
    conn.send(&hello(None))?;
    match conn.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the hello was answered {}", brief(&other)),
    }
    // 1.5 MB at once fits; the next 1.5 MB right after does not.
    let batch = || Request::Probes(Batch::even(Tag::default(), 1000, 1500, 0, 0));
    conn.send(&batch())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Sent(r)) => ensure!(r.sent == 1000, "{r:?}"),
        other => bail!("the first batch was answered {}", brief(&other)),
    }
    conn.send(&batch())?;
    let message = match conn.recv::<Reply>()? {
        Some(Reply::Error { message }) => message,
        other => bail!("a batch over the probe rate was answered {}", brief(&other)),
    };
    eprintln!("    answered: {message}");
    ensure!(
        message.contains("probe rate") && message.contains("try again in"),
        "{message}"
    );
    // Once the rate has room again, it is served.
    std::thread::sleep(Duration::from_millis(1500));
    conn.send(&batch())?;
    match conn.recv::<Reply>()? {
        Some(Reply::Sent(r)) => ensure!(r.sent == 1000, "{r:?}"),
        other => bail!(
            "a batch once the rate had room was answered {}",
            brief(&other)
        ),
    }
    Ok(())
}

/// A requester that asks questions (`tcp`, `stamps`, `traffic`) as fast as it can is
/// refused beyond the sender's query rate, told so, and answered again a little later.
fn a_requester_over_its_query_rate_is_refused() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(&star, ServeOptions::new(Transport::Udp))?;
    let mut conn = connect(&star)?;
    let mut answered = 0;
    let refusal = loop {
        ensure!(answered < 200, "{answered} queries in a row answered");
        conn.send(&Request::Tcp { address: None })?;
        match conn.recv::<Reply>()? {
            Some(Reply::Tcp { .. }) => answered += 1,
            Some(Reply::Error { message }) => break message,
            other => bail!("a query was answered {}", brief(&other)),
        }
    };
    eprintln!("    {answered} answered, then: {refusal}");
    ensure!(
        refusal.contains("queries") && refusal.contains("try again in"),
        "{refusal}"
    );
    ensure!(
        answered >= 5,
        "only {answered} queries answered before a refusal"
    );
    std::thread::sleep(Duration::from_millis(1500));
    conn.send(&Request::Tcp { address: None })?;
    match conn.recv::<Reply>()? {
        Some(Reply::Tcp { .. }) => Ok(()),
        other => bail!("a query a while later was answered {}", brief(&other)),
    }
}

/// A connection that never claims a measurement, pinging all the while, is closed
/// once its lifetime is over.
fn a_connection_that_claims_nothing_ends() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            unclaimed_lifetime: Duration::from_secs(2),
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let mut conn = connect(&star)?;
    let opened = Instant::now();
    let ended = loop {
        ensure!(
            opened.elapsed() < Duration::from_secs(15),
            "pings kept an unclaimed connection 15 s against a 2 s lifetime"
        );
        if conn.send(&Request::Ping).is_err() {
            break "the connection closed".to_string();
        }
        match conn.recv::<Reply>() {
            Ok(Some(Reply::Pong)) => std::thread::sleep(Duration::from_millis(250)),
            Ok(Some(Reply::Error { message })) => break message,
            Ok(None) => break "the connection closed".to_string(),
            Ok(other) => bail!("a ping was answered {}", brief(&other)),
            Err(e) => break format!("{e:#}"),
        }
    };
    eprintln!("    ended after {:?}: {ended}", opened.elapsed());
    ensure!(
        opened.elapsed() >= Duration::from_millis(1500),
        "ended too soon ({:?}): {ended}",
        opened.elapsed()
    );
    Ok(())
}

/// The receiver holding the one exclusive place that asks for no batch loses the
/// place after the sender's idle limit, and the next exclusive receiver, told `busy`
/// meanwhile, gets it.
fn an_idle_exclusive_measurement_gives_its_place_up() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let _serving = Serving::start(
        &star,
        ServeOptions {
            exclusive_idle: Duration::from_secs(2),
            ..ServeOptions::new(Transport::Udp)
        },
    )?;
    let exclusive = || {
        let mut h = hello(None);
        if let Request::Hello { exclusive, .. } = &mut h {
            *exclusive = true;
        }
        h
    };
    let mut holder = connect(&star)?;
    holder.send(&exclusive())?;
    match holder.recv::<Reply>()? {
        Some(Reply::Hello { .. }) => {}
        other => bail!("the first exclusive hello was answered {}", brief(&other)),
    }
    let held = Instant::now();
    let mut busy = 0;
    loop {
        ensure!(
            held.elapsed() < Duration::from_secs(15),
            "an idle holder kept the exclusive place 15 s against a 2 s idle limit"
        );
        let mut next = connect_from(&star, 2)?;
        next.send(&exclusive())?;
        match next.recv::<Reply>()? {
            Some(Reply::Hello { .. }) => break,
            Some(Reply::Error { message }) if message.starts_with(mgrp_tool::BUSY) => {
                busy += 1;
                std::thread::sleep(Duration::from_millis(250));
            }
            other => bail!("the next exclusive hello was answered {}", brief(&other)),
        }
    }
    eprintln!("    the place went on after {:?}", held.elapsed());
    ensure!(busy > 0, "the place was never held");
    ensure!(
        held.elapsed() >= Duration::from_millis(1500),
        "the place went on before the holder was idle for its limit"
    );
    Ok(())
}

/// Accept errors (here EMFILE: the sender's descriptors all taken) are waited out and
/// counted; the sender goes on and serves the connection once it can take it.
fn the_sender_waits_out_accept_errors() -> anyhow::Result<()> {
    let ns = mgrp_testbed::Netns::new("accept")?;
    let server = ns.run(|| {
        Server::bind(ServeOptions {
            port: 0,
            bind: Some("127.0.0.1".parse().unwrap()),
            ..ServeOptions::new(Transport::Udp)
        })
    })??;
    let addr = server.local_addr()?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let served = scope.spawn(|| server.serve(true, &stop, &mut |_| {}));
        // The client's socket is made first: with the descriptors all taken it only
        // connects, and the sender's accept finds none for its end.
        let client =
            ns.run(|| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None))??;
        {
            let _limit = FdLimit::lower()?;
            let mut held = Vec::new();
            while let Ok(f) = std::fs::File::open("/dev/null") {
                held.push(f);
            }
            client.connect_timeout(&addr.into(), Duration::from_secs(5))?;
            std::thread::sleep(Duration::from_millis(500));
        }
        let client: TcpStream = client.into();
        client.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut conn = Conn::new(client)?;
        conn.send(&hello(None))?;
        let r = conn.recv::<Reply>();
        stop.store(true, Ordering::Relaxed);
        let ended = served
            .join()
            .map_err(|_| anyhow::anyhow!("the sender panicked"))?;
        ended.context("the sender stopped serving")?;
        match r {
            Ok(Some(Reply::Hello { .. })) => {}
            Ok(other) => bail!(
                "the hello after the accept errors was answered {}",
                brief(&other)
            ),
            Err(e) => bail!("the hello after the accept errors got no answer: {e:#}"),
        }
        let errors = server.accept_errors();
        eprintln!("    {errors} accept errors waited out");
        ensure!(errors > 0, "no accept error was seen");
        Ok(())
    })
}

/// The soft limit on descriptors lowered to a few above those open; restored when
/// dropped.
struct FdLimit(libc::rlimit);

impl FdLimit {
    fn lower() -> anyhow::Result<Self> {
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with valid pointers.
        ensure!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) } == 0);
        let open = std::fs::read_dir("/proc/self/fd")?.count() as u64;
        let low = libc::rlimit {
            rlim_cur: open + 8,
            rlim_max: old.rlim_max,
        };
        // SAFETY: as above.
        ensure!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) } == 0);
        Ok(Self(old))
    }
}

impl Drop for FdLimit {
    fn drop(&mut self) {
        // SAFETY: restores the limit read before.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &self.0) };
    }
}

/// A reply as a test's message says it: its first 200 characters.
fn brief(reply: &Option<Reply>) -> String {
    let s = format!("{reply:?}");
    if s.chars().count() > 200 {
        format!("{}...", s.chars().take(200).collect::<String>())
    } else {
        s
    }
}

const TESTS: &[Test] = &[
    (
        "a_sender_set_to_serve_more_serves_that_many",
        a_sender_set_to_serve_more_serves_that_many,
    ),
    (
        "a_refused_host_trickling_bytes_holds_up_no_one",
        a_refused_host_trickling_bytes_holds_up_no_one,
    ),
    (
        "a_batch_before_hello_is_refused_and_costs_nothing",
        a_batch_before_hello_is_refused_and_costs_nothing,
    ),
    (
        "a_requester_over_its_probe_rate_is_refused",
        a_requester_over_its_probe_rate_is_refused,
    ),
    (
        "a_requester_over_its_query_rate_is_refused",
        a_requester_over_its_query_rate_is_refused,
    ),
    (
        "a_connection_that_claims_nothing_ends",
        a_connection_that_claims_nothing_ends,
    ),
    (
        "an_idle_exclusive_measurement_gives_its_place_up",
        an_idle_exclusive_measurement_gives_its_place_up,
    ),
    (
        "the_sender_waits_out_accept_errors",
        the_sender_waits_out_accept_errors,
    ),
    (
        "a_host_outside_the_allow_list_is_turned_away",
        a_host_outside_the_allow_list_is_turned_away,
    ),
    (
        "a_requester_over_its_hourly_budget_is_refused",
        a_requester_over_its_hourly_budget_is_refused,
    ),
    (
        "a_lead_longer_than_a_gap_is_refused",
        a_lead_longer_than_a_gap_is_refused,
    ),
    (
        "reflection_to_a_third_host_is_refused",
        reflection_to_a_third_host_is_refused,
    ),
    (
        "a_receiver_proves_its_second_address_and_is_measured",
        a_receiver_proves_its_second_address_and_is_measured,
    ),
    (
        "questions_about_a_third_host_are_refused",
        questions_about_a_third_host_are_refused,
    ),
    (
        "a_measurement_cannot_hold_the_sender_past_its_session_limit",
        a_measurement_cannot_hold_the_sender_past_its_session_limit,
    ),
    (
        "one_host_cannot_take_every_connection",
        one_host_cannot_take_every_connection,
    ),
    (
        "a_receiver_that_stops_reading_is_let_go",
        a_receiver_that_stops_reading_is_let_go,
    ),
    (
        "a_sender_trickling_other_reports_cannot_hold_a_receiver",
        a_sender_trickling_other_reports_cannot_hold_a_receiver,
    ),
];

/// A sender that answers a batch only with reports of other batches, one every
/// half second, forever: the receiver gives the batch up once its time, the round
/// trip and the slack (10 s) have passed, rather than waiting for as long as the
/// trickle goes on (each report came well within a read's timeout, so before the
/// batch had a deadline of its own the receiver never returned).
fn a_sender_trickling_other_reports_cannot_hold_a_receiver() -> anyhow::Result<()> {
    let star = Star::new(&[None, None, None])?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let listener = star.hosts[0].run(|| TcpListener::bind(("0.0.0.0", CONTROL)))??;
    let fake = star.hosts[0].spawn("trickling sender", move || {
        let (stream, _) = listener.accept()?;
        let mut conn = Conn::new(stream)?;
        let mut stream_no = 1000u32;
        while !flag.load(Ordering::Relaxed) {
            let Some(req) = conn.recv::<Request>()? else {
                break;
            };
            match req {
                Request::Ping => conn.send(&Reply::Pong)?,
                Request::Hello { .. } => conn.send(&Reply::Hello {
                    version: CONTROL_VERSION,
                    max_size: 1500,
                    sender: "trickling".into(),
                    features: Vec::new(),
                })?,
                Request::Probes(batch) => loop {
                    stream_no += 1;
                    let tag = Tag {
                        stream: batch.tag.stream ^ stream_no,
                        ..batch.tag
                    };
                    let report = mgrp_tool::control::SentReport {
                        tag,
                        sent: 1,
                        sender_stamps: vec![Some(0)],
                        competing_rider_bytes: 0,
                        rider_bytes: 0,
                        riding_probe_bytes: 0,
                        kernel_stamps: false,
                    };
                    if flag.load(Ordering::Relaxed) || conn.send(&Reply::Sent(report)).is_err() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(500));
                },
                _ => {}
            }
        }
        Ok(())
    })?;
    let opts = SessionOptions::new(
        star.addrs[0].to_string(),
        Transport::Udp,
        "control-plane test",
    );
    let opts = SessionOptions {
        port: CONTROL,
        ..opts
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let receiver = star.hosts[1].spawn("receiver", move || {
        let mut session = Session::open(&opts).context("the session did not open")?;
        let t = Instant::now();
        let result = session.exchange(&Batch::even(Tag::default(), 1, 500, 0, 0));
        let _ = done_tx.send((t.elapsed(), result.map(|_| ())));
        Ok(())
    })?;
    let outcome = done_rx.recv_timeout(Duration::from_secs(40));
    stop.store(true, Ordering::Relaxed);
    let (took, result) = outcome.context("the receiver still waits after 40 s")?;
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))??;
    let _ = fake.join();
    ensure!(
        result.is_err(),
        "the batch was taken from reports of other batches"
    );
    eprintln!("    the receiver gave the batch up after {took:.1?}: {result:?}");
    Ok(())
}

fn main() -> ExitCode {
    mgrp_testbed::harness::run(TESTS)
}
