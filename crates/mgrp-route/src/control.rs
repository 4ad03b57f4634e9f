//! Route control running: heartbeats to and from the members, the members' APIs
//! read every poll, each destination decided, the policy routing's steering replaced when a
//! choice changes, and the state the API, the events, the metrics and the status page
//! show.
//!
//! Threads: one answers heartbeats (the echo), one per member this node has a device
//! towards sends them, one per member without a device that owns a destination
//! sends it stamped pings alone by the normal route (the acknowledgements' way
//! back), and the controller polls, decides and steers; on stop it removes every
//! rule, route and table it installed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mgrp_core::heartbeat::{Echo, HopState, Message, Pinger};
use mgrp_rt::{lock, unix_now};
use mgrp_views::link::{LinkView, Links};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use crate::model::{Choice, Hop, LossSource, RateSource, Reason, Switch, score_acked};
use crate::policy::{Policy, Steering};
use crate::settings::{Candidate, Routing};
pub use mgrp_views::routes::{
    DestinationView, HopView, MemberView, PathView, RoutesView, SwitchView,
};

/// How a destination's path is set by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manual {
    /// Candidate `i`.
    Path(usize),
    /// The kernel's normal route.
    Normal,
}

/// Why a hand-set path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChooseError {
    /// No destination has that prefix.
    #[error("no destination {0}; GET /v1/routes lists them")]
    NoDestination(String),
    /// No candidate has that name.
    #[error("destination {0} has no path {1:?}; its paths are {2}, or \"normal\" or \"auto\"")]
    NoPath(String, String, String),
}

/// Route control's shared state.
#[derive(Debug)]
pub struct Control {
    routing: Routing,
    tun: String,
    node: String,
    epoch: Instant,
    pingers: Mutex<HashMap<usize, Pinger>>,
    /// Stamps-only pingers by the normal route to members this node has no hop to
    /// that own a destination: the acknowledgements' way back from them.
    ack_pingers: Mutex<HashMap<usize, Pinger>>,
    view: Mutex<Option<RoutesView>>,
    manual: Mutex<HashMap<usize, Manual>>,
    switches: Mutex<Vec<SwitchView>>,
    /// Switches so far by destination and reason.
    counts: Mutex<std::collections::BTreeMap<(String, &'static str), u64>>,
    stop: AtomicBool,
    /// Set (and the controller woken) when a path is chosen by hand or on stop.
    poke: Mutex<bool>,
    /// The members' latest answers (empty before the first poll).
    remotes: Mutex<Vec<Remote>>,
    wake: std::sync::Condvar,
}

/// Switches kept for the API.
const KEPT_SWITCHES: usize = 200;

/// Polls a member's last answer stands for when it does not answer.
const REMOTE_POLLS: u32 = 3;

impl Control {
    /// Route control for `routing` on node `node`.
    pub fn new(routing: Routing, node: &str) -> Self {
        Self {
            tun: routing.tun.clone(),
            routing,
            node: node.to_string(),
            epoch: Instant::now(),
            pingers: Mutex::default(),
            ack_pingers: Mutex::default(),
            view: Mutex::default(),
            manual: Mutex::default(),
            switches: Mutex::default(),
            counts: Mutex::default(),
            stop: AtomicBool::new(false),
            poke: Mutex::new(false),
            remotes: Mutex::default(),
            wake: std::sync::Condvar::new(),
        }
    }

    /// Asks its threads to stop; the controller removes what it installed first.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.poke();
    }

    /// Wakes the controller for a poll now.
    fn poke(&self) {
        *lock(&self.poke) = true;
        self.wake.notify_all();
    }

    /// Sleeps until `until`, or until poked.
    fn sleep_until(&self, until: Instant) {
        let mut poked = lock(&self.poke);
        while !*poked {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            poked = self
                .wake
                .wait_timeout(poked, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *poked = false;
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// The state now (`None` before the first poll).
    pub fn view(&self) -> Option<RoutesView> {
        lock(&self.view).clone()
    }

    /// Switches so far by destination and reason (`Reason::kind`).
    pub fn switch_counts(&self) -> Vec<((String, &'static str), u64)> {
        lock(&self.counts)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Sets destination `prefix`'s path by hand (`path`: a candidate's name,
    /// `normal`), or gives it back to the rule (`auto`).
    pub fn choose(&self, prefix: &str, path: &str) -> Result<(), ChooseError> {
        let r = &self.routing;
        let d = r
            .destinations
            .iter()
            .position(|d| d.prefix.to_string() == prefix)
            .ok_or_else(|| ChooseError::NoDestination(prefix.to_string()))?;
        let names: Vec<String> = r.destinations[d]
            .paths
            .iter()
            .map(|p| r.path_name(*p))
            .collect();
        let m = match path {
            "auto" => None,
            "normal" => Some(Manual::Normal),
            name => Some(Manual::Path(
                names.iter().position(|n| n == name).ok_or_else(|| {
                    ChooseError::NoPath(
                        prefix.to_string(),
                        name.to_string(),
                        names
                            .iter()
                            .map(|n| format!("{n:?}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    )
                })?,
            )),
        };
        {
            let mut manual = lock(&self.manual);
            match m {
                None => manual.remove(&d),
                Some(m) => manual.insert(d, m),
            };
        }
        self.poke();
        Ok(())
    }
}

/// Starts route control's threads: the kernel's paths are installed first (an error
/// if they cannot be). `switched` is told of every switch.
pub fn start(
    control: Arc<Control>,
    switched: impl Fn(SwitchView) + Send + 'static,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut policy = Policy::plan(&control.routing, &control.tun);
    if let Err(e) = policy.install() {
        for e in policy.remove() {
            warn!("route control: cleanup: {e}");
        }
        anyhow::bail!(
            "route control cannot install its routes: {e}; it needs CAP_NET_ADMIN, the nft command, and mgrpd running with the next-hop devices of [[routing.member]]"
        );
    }
    let echo = UdpSocket::bind(SocketAddr::new(
        if control.routing.address.is_ipv4() {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        },
        control.routing.heartbeat_port,
    ))
    .map_err(|e| {
        for e in policy.remove() {
            warn!("route control: cleanup: {e}");
        }
        anyhow::anyhow!(
            "route control cannot answer heartbeats on UDP port {}: {e}; set routing.heartbeat-port",
            control.routing.heartbeat_port
        )
    })?;
    let mut threads = Vec::new();
    let c = control.clone();
    threads.push(
        std::thread::Builder::new()
            .name("route-echo".into())
            .spawn(move || answer(&echo, &c.stop))?,
    );
    for (i, m) in control.routing.members.iter().enumerate() {
        // A member with a device gets a hop's heartbeats through it; one without that
        // owns a destination, stamped pings alone by the normal route (the way a
        // flow's acknowledgements come back from it).
        let owns = control.routing.destinations.iter().any(|d| d.owner == i);
        type Pingers = fn(&Control) -> &Mutex<HashMap<usize, Pinger>>;
        let (mark, pingers, pinger, what, otherwise): (_, Pingers, _, _, _) = match &m.device {
            Some(device) => (
                Some(crate::policy::heartbeat_mark(i)),
                |c| &c.pingers,
                Pinger::default(),
                format!("send heartbeats to {} through {device}", m.name),
                "the hop counts as down",
            ),
            None if owns => (
                None,
                |c| &c.ack_pingers,
                Pinger::stamps_only(),
                format!("time the way back from {}", m.name),
                "its paths count the hops' ways back",
            ),
            None => continue,
        };
        let r = &control.routing;
        let socket = match ping_socket(r.address, m.address, r.heartbeat_port, mark) {
            Ok(s) => s,
            Err(e) => {
                warn!("route control: cannot {what}: {e}; {otherwise}");
                continue;
            }
        };
        lock(pingers(&control)).insert(i, pinger);
        let c = control.clone();
        threads.push(
            std::thread::Builder::new()
                .name("route-ping".into())
                .spawn(move || ping(&socket, i, &c, pingers))?,
        );
    }
    let c = control.clone();
    threads.push(
        std::thread::Builder::new()
            .name("route-poll".into())
            .spawn(move || poll_members(&c))?,
    );
    let c = control;
    threads.push(
        std::thread::Builder::new()
            .name("route-control".into())
            .spawn(move || {
                decide_loop(&c, &mut policy, &switched);
                for e in policy.remove() {
                    warn!("route control: cleanup: {e}");
                }
                info!("route control: its rules, routes and steering table are removed");
            })?,
    );
    Ok(threads)
}

/// A socket from `from` to the echo at `to`:`port`, connected (the kernel hands it
/// only datagrams from there). With `mark`, marked for the rule that sends it into the
/// next-hop device, so each ping crosses this node's mgrpd and the member's (a socket
/// bound to the device would not hear the answers, which come back the normal way);
/// without, by the normal route.
fn ping_socket(
    from: IpAddr,
    to: IpAddr,
    port: u16,
    mark: Option<u32>,
) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if to.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(mark) = mark {
        s.set_mark(mark)?;
    }
    // From the address the member knows this node by.
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect(&SocketAddr::new(to, port).into())?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(10)))?;
    Ok(s)
}

fn answer(socket: &UdpSocket, stop: &AtomicBool) {
    let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
    let mut echo = Echo::default();
    let mut buf = [0u8; 64];
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let now = started.elapsed().as_secs_f64();
        let pong = match Message::parse(&buf[..n]) {
            Ok(Message::Ping { seq }) => echo.answer(from, seq, now),
            Ok(Message::StampedPing { seq }) => echo.answer_stamped(from, seq, now),
            _ => None,
        };
        if let Some(pong) = pong
            && let Err(e) = socket.send_to(&pong, from)
        {
            debug!("route control: cannot answer {from}'s heartbeat: {e}");
        }
    }
}

/// Sends `member`'s heartbeats and takes in their answers, with its pinger in
/// `pingers` of `c`.
fn ping(
    socket: &UdpSocket,
    member: usize,
    c: &Control,
    pingers: fn(&Control) -> &Mutex<HashMap<usize, Pinger>>,
) {
    let stop = &c.stop;
    let s = c.routing.heartbeats;
    let mut buf = [0u8; 64];
    let mut alive = false;
    while !stop.load(Ordering::Relaxed) {
        let now = c.now();
        let (due, next, up) = {
            let mut pingers = lock(pingers(c));
            let Some(p) = pingers.get_mut(&member) else {
                return;
            };
            let mut due = Vec::new();
            while let Some(b) = p.poll(now, &s) {
                due.push(b);
            }
            (due, p.next_due(), p.state(now, &s).alive)
        };
        // A hop found down or answering again is decided on now, not at the next poll.
        if up != alive {
            alive = up;
            c.poke();
        }
        for bytes in due {
            // A send that fails (a device gone) is a ping lost.
            let _ = socket.send(&bytes);
        }
        // Wait for a pong until the next ping is due (a burst's are 10 ms apart).
        let wait = next.map_or(0.01, |t| t - c.now()).clamp(0.001, 0.01);
        let _ = socket.set_read_timeout(Some(Duration::from_secs_f64(wait)));
        if let Ok(n) = socket.recv(&mut buf)
            && let Some(p) = lock(pingers(c)).get_mut(&member)
        {
            match Message::parse(&buf[..n]) {
                Ok(Message::Pong { seq, received }) => {
                    p.pong(c.now(), seq, received, &s);
                }
                Ok(Message::StampedPong { seq, at_ns }) => {
                    p.stamped_pong(c.now(), seq, at_ns, &s);
                }
                _ => {}
            }
        }
    }
}

/// What one member's API gave at a poll.
#[derive(Debug, Clone, Default)]
struct Remote {
    links: Option<Links>,
    routes: Option<RoutesView>,
    error: Option<String>,
}

/// What route control asks a member's API: `GET path` with its token, over TLS when
/// the member has a `ca-file`; the JSON answer of a 200 read as a `T`, else why not.
pub fn http_get<T: DeserializeOwned>(
    api: SocketAddr,
    path: &str,
    token: Option<&str>,
    tls: Option<&mgrp_service::tls::ClientTls>,
) -> Result<T, String> {
    let timeout = Duration::from_millis(700);
    let s = TcpStream::connect_timeout(&api, timeout).map_err(|e| format!("{api}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    match tls {
        None => exchange(s, api, path, token),
        Some(t) => exchange(
            t.wrap(s).map_err(|e| format!("{api}: {e}"))?,
            api,
            path,
            token,
        ),
    }
}

/// One GET over `s` (clear or TLS), its JSON answer.
fn exchange<T: DeserializeOwned>(
    s: impl Read + Write,
    api: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<T, String> {
    let text = mgrp_service::http::get(s, &api.to_string(), path, token, 16 << 20)
        .map_err(|e| format!("{api}{path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{api}{path}: {e}"))
}

/// A hop's estimates from the receiving member's links: the rate (the TCP
/// prediction, else the available bandwidth, else the capacity) and badabing's loss
/// when younger than `max_loss_age_s`, of the first link from `from` that has them.
pub fn hop_estimates(links: &Links, from: IpAddr, max_loss_age_s: f64) -> Hop {
    let mut hop = Hop::default();
    let from_here = |l: &&LinkView| {
        l.from
            .parse::<SocketAddr>()
            .map(|s| s.ip())
            .ok()
            .or_else(|| l.from.parse::<IpAddr>().ok())
            .is_some_and(|ip| ip == from)
    };
    // A member's figures are believed only within what a path can be: a rate above
    // nothing and below 10 Tbit/s.
    let rate = |v: f64| Some(v).filter(|r| *r > 0.0 && *r < MAX_RATE_BPS);
    for l in links.links.iter().filter(from_here) {
        let inputs = &l.prediction.inputs;
        if hop.rate_bps.is_none() {
            if let Some(b) = l.prediction.prediction.as_ref().and_then(|p| rate(p.bps)) {
                hop.rate_bps = Some(b);
                hop.rate_source = Some(RateSource::Prediction);
            } else if let Some((lo, hi)) = inputs
                .available
                .as_ref()
                .and_then(|a| Some((rate(a.low_bps)?, rate(a.high_bps)?)))
            {
                hop.rate_bps = Some((lo + hi) / 2.0);
                hop.rate_source = Some(RateSource::Available);
            } else if let Some(c) = inputs.shape.as_ref().and_then(|s| rate(s.capacity_bps)) {
                hop.rate_bps = Some(c);
                hop.rate_source = Some(RateSource::Capacity);
            }
        }
        if hop.loss.is_none()
            && let Some(loss) = &inputs.loss
            && (0.0..=1.0).contains(&loss.loss_rate)
            && (0.0..=max_loss_age_s).contains(&loss.age_s)
        {
            hop.loss = Some(loss.loss_rate);
            hop.loss_source = Some(LossSource::Badabing);
        }
    }
    hop
}

/// Rates a member's answer may give a hop, bits per second (exclusive).
const MAX_RATE_BPS: f64 = 1e13;

/// What a member's published heartbeats say of its hop to `to`; figures out of
/// range (a negative round trip, a loss outside 0 to 1) are left out.
pub fn remote_heartbeat(routes: &RoutesView, to: IpAddr) -> Option<HopState> {
    routes
        .members
        .iter()
        .find(|m| m.address == to)
        .and_then(|m| m.heartbeat)
        .map(|h| HopState {
            rtt_s: h.rtt_s.filter(|r| (0.0..3600.0).contains(r)),
            rtt_var_s: h.rtt_var_s.filter(|r| (0.0..3600.0).contains(r)),
            loss: h.loss.filter(|l| (0.0..=1.0).contains(l)),
            forward_s: h.forward_s.filter(|d| (0.0..3600.0).contains(d)),
            back_s: h.back_s.filter(|d| (0.0..3600.0).contains(d)),
            ..h
        })
}

/// Reads every member's API every poll, all at once (a member far away costs its
/// round trips, not everyone's), for the controller to decide on. A member's answer
/// stands for a few polls: one slow answer does not make every path through it
/// unknown.
fn poll_members(c: &Control) {
    let r = &c.routing;
    let mut last: Vec<(Held<Links>, Held<RoutesView>)> = vec![(None, None); r.members.len()];
    while !c.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        type Answers = (Result<Links, String>, Result<RoutesView, String>);
        let answers: Vec<Answers> = std::thread::scope(|scope| {
            let asks: Vec<_> = r
                .members
                .iter()
                .map(|m| {
                    scope.spawn(move || {
                        let (token, tls) = (m.token.as_deref(), m.tls.as_ref());
                        (
                            http_get(m.api, "/v1/links", token, tls),
                            http_get(m.api, "/v1/routes", token, tls),
                        )
                    })
                })
                .collect();
            asks.into_iter()
                .map(|a| {
                    a.join().unwrap_or_else(|_| {
                        (
                            Err("the poll panicked".into()),
                            Err("the poll panicked".into()),
                        )
                    })
                })
                .collect()
        });
        let fresh = r.poll * REMOTE_POLLS;
        let remotes: Vec<Remote> = answers
            .into_iter()
            .zip(&mut last)
            .map(|((links, routes), (last_links, last_routes))| {
                let error = links.as_ref().err().or(routes.as_ref().err()).cloned();
                Remote {
                    links: hold(links, last_links, fresh),
                    routes: hold(routes, last_routes, fresh),
                    error,
                }
            })
            .collect();
        *lock(&c.remotes) = remotes;
        let next = started + r.poll;
        while Instant::now() < next && !c.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20).min(next - Instant::now()));
        }
    }
}

/// A member's last good answer, and when it came.
type Held<T> = Option<(Instant, T)>;

/// `got` when it came, else the last answer while younger than `fresh`.
fn hold<T: Clone>(got: Result<T, String>, last: &mut Held<T>, fresh: Duration) -> Option<T> {
    match got {
        Ok(v) => {
            *last = Some((Instant::now(), v.clone()));
            Some(v)
        }
        Err(_) => last
            .as_ref()
            .filter(|(t, _)| t.elapsed() < fresh)
            .map(|(_, v)| v.clone()),
    }
}

fn decide_loop(c: &Control, policy: &mut Policy, switched: &dyn Fn(SwitchView)) {
    let r = &c.routing;
    let stop = &c.stop;
    // Each destination's hold-downs drawn from a seed of its own, random per process,
    // so members that saw the same change draw apart.
    let mut choices: Vec<Choice> = r
        .destinations
        .iter()
        .map(|d| {
            use std::hash::{BuildHasher, Hasher};
            Choice::seeded(
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish(),
            )
            .with_direct(d.paths.iter().position(|p| p.via.is_none()))
        })
        .collect();
    let mut steering = Steering::default();
    let mut kernel_error: Option<String> = None;
    let ids = r.path_ids();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let mut remotes = lock(&c.remotes).clone();
        // Before the first poll: nothing known of any member.
        remotes.resize(
            r.members.len(),
            Remote {
                error: Some("not asked yet".into()),
                ..Remote::default()
            },
        );
        let now = c.now();
        let own: HashMap<usize, HopState> = lock(&c.pingers)
            .iter_mut()
            .map(|(i, p)| (*i, p.state(now, &r.heartbeats)))
            .collect();
        let acks: HashMap<usize, HopState> = lock(&c.ack_pingers)
            .iter_mut()
            .map(|(i, p)| (*i, p.state(now, &r.heartbeats)))
            .collect();
        let manual = lock(&c.manual).clone();
        let mut destinations = Vec::new();
        let mut next_steering = Steering {
            move_existing: r.move_existing,
            ..Steering::default()
        };
        for (di, d) in r.destinations.iter().enumerate() {
            let mut paths = Vec::new();
            let mut scores = Vec::new();
            // The owner's answers to this node's own heartbeats come back by its
            // normal route, as the flow's acknowledgements do.
            let acks_back = own
                .get(&d.owner)
                .and_then(|h| h.back_s)
                .or_else(|| acks.get(&d.owner).and_then(|h| h.back_s));
            for (pi, p) in d.paths.iter().enumerate() {
                let hops = hops_of(c, &remotes, &own, d.owner, *p);
                let sc = score_acked(
                    &hops.iter().map(|h| h.hop).collect::<Vec<_>>(),
                    acks_back,
                    f64::from(r.mss),
                    r.rule.model,
                );
                if !sc.alive {
                    next_steering.dead.push(ids[di][pi]);
                }
                scores.push(sc.clone());
                paths.push(PathView {
                    name: r.path_name(*p),
                    id: ids[di][pi],
                    chosen: false,
                    hops,
                    score: sc,
                    flows: None,
                });
            }
            let change = match manual.get(&di) {
                Some(m) => {
                    let to = match m {
                        Manual::Path(i) => Some(*i),
                        Manual::Normal => None,
                    };
                    (choices[di].current() != to || choices[di].changed_at().is_none()).then(|| {
                        let from = choices[di].current();
                        choices[di] = choices[di].forced(to, now);
                        Switch {
                            at: now,
                            from,
                            to,
                            reason: Reason::Manual,
                            from_bps: from.and_then(|i| scores[i].bps),
                            to_bps: to.and_then(|i| scores[i].bps),
                        }
                    })
                }
                None => choices[di].decide(now, &scores, &r.rule),
            };
            let names: Vec<String> = paths.iter().map(|p| p.name.clone()).collect();
            let name = |i: Option<usize>| i.map_or("normal".to_string(), |i| names[i].clone());
            if let Some(sw) = change {
                let v = SwitchView {
                    prefix: d.prefix.to_string(),
                    at: unix_now(),
                    from: name(sw.from),
                    to: name(sw.to),
                    reason: sw.reason,
                    reason_text: sw.reason.words(r.rule.eta),
                    from_bps: sw.from_bps,
                    to_bps: sw.to_bps,
                };
                info!(
                    "route control: {} now {} (was {}): {}",
                    v.prefix, v.to, v.from, v.reason_text
                );
                *lock(&c.counts)
                    .entry((v.prefix.clone(), sw.reason.kind()))
                    .or_default() += 1;
                {
                    let mut all = lock(&c.switches);
                    if all.len() == KEPT_SWITCHES {
                        all.remove(0);
                    }
                    all.push(v.clone());
                }
                switched(v);
            }
            let current = choices[di].current();
            if let Some(i) = current {
                paths[i].chosen = true;
            }
            next_steering
                .choices
                .push((d.prefix, current.map(|i| ids[di][i])));
            for p in &mut paths {
                p.flows = policy.flows(Some(p.id)).ok();
            }
            let prefix = d.prefix.to_string();
            destinations.push(DestinationView {
                prefix: prefix.clone(),
                owner: r.members[d.owner].name.clone(),
                current: name(current),
                manual: manual.get(&di).map(|m| match m {
                    Manual::Path(i) => name(Some(*i)),
                    Manual::Normal => "normal".into(),
                }),
                since_switch_s: choices[di].changed_at().map(|t| now - t),
                hold_s: choices[di].hold_s(),
                better_for_s: choices[di].better_since().map(|t| now - t),
                switches: lock(&c.counts)
                    .iter()
                    .filter(|((p, _), _)| *p == prefix)
                    .map(|(_, n)| n)
                    .sum(),
                paths,
                recent: {
                    let all = lock(&c.switches);
                    let mine: Vec<&SwitchView> =
                        all.iter().filter(|s| s.prefix == prefix).collect();
                    mine[mine.len().saturating_sub(10)..]
                        .iter()
                        .map(|s| (*s).clone())
                        .collect()
                },
            });
        }
        if next_steering != steering || kernel_error.is_some() {
            match policy.steer(&next_steering) {
                Ok(()) => {
                    steering = next_steering;
                    kernel_error = None;
                }
                Err(e) => {
                    warn!("route control: cannot steer: {e}");
                    kernel_error = Some(e.to_string());
                }
            }
        }
        let members = r
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| MemberView {
                name: m.name.clone(),
                address: m.address,
                device: m.device.clone(),
                heartbeat: own.get(&i).copied(),
                acks: acks.get(&i).copied(),
                api_ok: remotes[i].error.is_none(),
                api_error: remotes[i].error.clone(),
            })
            .collect();
        *lock(&c.view) = Some(RoutesView {
            node: c.node.clone(),
            address: r.address,
            eta: r.rule.eta,
            t_ch_s: r.rule.t_ch_s,
            rule: Some(r.rule.kind.name().into()),
            model: Some(r.rule.model.name().into()),
            move_existing: r.move_existing,
            members,
            destinations,
            kernel_error: kernel_error.clone(),
            at: unix_now(),
        });
        c.sleep_until(started + r.poll);
    }
}

/// A path's hops with what is known of each.
fn hops_of(
    c: &Control,
    remotes: &[Remote],
    own: &HashMap<usize, HopState>,
    owner: usize,
    p: Candidate,
) -> Vec<HopView> {
    let r = &c.routing;
    let max_loss_age = r.max_loss_age.as_secs_f64();
    // (sender: None for this node, receiver)
    let legs: Vec<(Option<usize>, usize)> = match p.via {
        None => vec![(None, owner)],
        Some(v) => vec![(None, v), (Some(v), owner)],
    };
    legs.into_iter()
        .map(|(from, to)| {
            let from_addr = from.map_or(r.address, |f| r.members[f].address);
            let mut hop = remotes[to]
                .links
                .as_ref()
                .map(|l| hop_estimates(l, from_addr, max_loss_age))
                .unwrap_or_default();
            let beat = match from {
                None => own.get(&to).copied(),
                Some(f) => remotes[f]
                    .routes
                    .as_ref()
                    .and_then(|v| remote_heartbeat(v, r.members[to].address)),
            };
            if let Some(b) = beat {
                hop.alive = b.alive;
                hop.rtt_s = b.rtt_s;
                hop.rtt_var_s = b.rtt_var_s;
                hop.forward_s = b.forward_s;
                hop.back_s = b.back_s;
                if hop.loss.is_none() && b.loss.is_some() {
                    hop.loss = b.loss;
                    hop.loss_source = Some(LossSource::Heartbeats);
                    hop.loss_samples = Some(b.loss_samples);
                }
            }
            HopView {
                from: from.map_or(c.node.clone(), |f| r.members[f].name.clone()),
                to: r.members[to].name.clone(),
                hop,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use mgrp_views::link::Links;
    use mgrp_views::routes::RoutesView;
    use mgrp_views::sample;

    use super::*;

    /// `value` as a member's API serves it, read back as route control reads it.
    fn served<T: serde::Serialize + DeserializeOwned>(value: &T) -> T {
        let text = serde_json::to_string(&serde_json::to_value(value).unwrap()).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn a_ping_socket_hears_its_member_alone() {
        // On loopback: the member's echo, and an outsider who knows the port.
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let echo = UdpSocket::bind((lo, 0)).unwrap();
        let port = echo.local_addr().unwrap().port();
        let socket = ping_socket(lo, lo, port, None).unwrap();
        let outsider = UdpSocket::bind((lo, 0)).unwrap();
        let forged = Message::StampedPong { seq: 0, at_ns: 1 }.emit();
        outsider
            .send_to(&forged, socket.local_addr().unwrap())
            .unwrap();
        socket
            .send(&Message::StampedPing { seq: 0 }.emit())
            .unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = echo.recv_from(&mut buf).unwrap();
        assert_eq!(
            Message::parse(&buf[..n]),
            Ok(Message::StampedPing { seq: 0 })
        );
        let real = Message::StampedPong { seq: 0, at_ns: 7 }.emit();
        echo.send_to(&real, from).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let n = socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &real[..], "the outsider's datagram was read");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        assert!(socket.recv(&mut buf).is_err(), "a second datagram came");
    }

    #[test]
    fn a_hops_estimates_come_from_the_receivers_links_from_its_sender() {
        let mut other = sample::link_view();
        other.from = "10.0.0.9:55002".into();
        other.prediction.prediction.as_mut().unwrap().bps = 1.0;
        let mut mine = sample::link_view();
        mine.prediction.prediction = None;
        let links = served(&Links {
            node: "east0".into(),
            links: vec![other, mine],
        });
        let from: IpAddr = "10.0.0.1".parse().unwrap();
        let h = hop_estimates(&links, from, 30.0);
        // No prediction: the middle of the available bandwidth's range.
        assert_eq!(h.rate_bps, Some((8.5e6 + 9.75e6) / 2.0));
        assert_eq!(h.rate_source, Some(RateSource::Available));
        assert_eq!(h.loss, Some(0.0075));
        assert_eq!(h.loss_source, Some(LossSource::Badabing));
        // Stale loss is not used; a link from elsewhere is not this hop's.
        assert_eq!(hop_estimates(&links, from, 2.0).loss, None);
        let h = hop_estimates(&links, "10.0.0.7".parse().unwrap(), 30.0);
        assert_eq!(h, Hop::default());
        // The prediction first; then the capacity when nothing else is known.
        let h = hop_estimates(&served(&sample::links()), from, 30.0);
        assert_eq!(
            (h.rate_bps, h.rate_source),
            (Some(5.5e6), Some(RateSource::Prediction))
        );
        let mut bare = sample::link_view();
        bare.prediction.prediction = None;
        bare.prediction.inputs.available = None;
        let bare = served(&Links {
            node: "east0".into(),
            links: vec![bare],
        });
        let h = hop_estimates(&bare, from, 30.0);
        assert_eq!(
            (h.rate_bps, h.rate_source),
            (Some(20e6), Some(RateSource::Capacity))
        );
    }

    #[test]
    fn figures_beyond_what_a_path_can_be_are_not_believed() {
        let mut l = sample::link_view();
        l.prediction.prediction.as_mut().unwrap().bps = 1e15;
        l.prediction.inputs.available.as_mut().unwrap().low_bps = -1.0;
        l.prediction.inputs.loss.as_mut().unwrap().loss_rate = 1.5;
        let links = served(&Links {
            node: "east0".into(),
            links: vec![l],
        });
        let h = hop_estimates(&links, "10.0.0.1".parse().unwrap(), 1e9);
        assert_eq!(h.rate_source, Some(RateSource::Capacity));
        assert_eq!(h.loss, None);
    }

    #[test]
    fn a_members_published_heartbeats_are_read_by_address() {
        let mut routes = sample::routes_view();
        let mut silent = routes.members[0].clone();
        silent.address = "10.90.0.9".parse().unwrap();
        silent.heartbeat = None;
        routes.members.push(silent);
        let mut odd = routes.members[0].clone();
        odd.address = "10.90.0.8".parse().unwrap();
        odd.heartbeat.as_mut().unwrap().rtt_s = Some(-1.0);
        routes.members.push(odd);
        let routes: RoutesView = served(&routes);
        let h = remote_heartbeat(&routes, "10.90.0.2".parse().unwrap()).unwrap();
        assert!(h.alive && h.loss == Some(0.01) && h.rtt_s == Some(0.02));
        assert!(remote_heartbeat(&routes, "10.90.0.9".parse().unwrap()).is_none());
        assert!(remote_heartbeat(&routes, "10.90.0.3".parse().unwrap()).is_none());
        let h = remote_heartbeat(&routes, "10.90.0.8".parse().unwrap()).unwrap();
        assert_eq!(h.rtt_s, None);
    }

    #[test]
    fn the_fuzz_seeds_are_answers_route_control_reads() {
        let seed = |name: &str| {
            std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../fuzz/seeds/member_json")
                    .join(name),
            )
            .unwrap()
        };
        let from: IpAddr = "10.0.0.1".parse().unwrap();
        let links: Links = serde_json::from_slice(&seed("links")).unwrap();
        assert!(hop_estimates(&links, from, 60.0).rate_bps.is_some());
        let hostile: Links = serde_json::from_slice(&seed("hostile")).unwrap();
        let h = hop_estimates(&hostile, from, 60.0);
        assert_eq!((h.rate_bps, h.loss), (None, None), "{h:?}");
        let _: RoutesView = serde_json::from_slice(&seed("routes")).unwrap();
        let hostile: RoutesView = serde_json::from_slice(&seed("hostile_routes")).unwrap();
        let h = remote_heartbeat(&hostile, from).unwrap();
        assert_eq!((h.rtt_s, h.loss), (None, None), "{h:?}");
    }

    #[test]
    fn an_answer_that_is_not_the_views_is_refused_with_the_field() {
        let e =
            serde_json::from_str::<Links>(r#"{"node": "x", "links": [{"from": "10.0.0.1:1"}]}"#)
                .unwrap_err();
        assert!(e.to_string().contains("missing field"), "{e}");
    }
}
