//! One connection of a sender's, request by request, without its socket: which
//! request it takes in which state (a hello claims a measurement's place and opens a
//! probe sender; a hello naming another address waits for its proof; batches only
//! within a proven measurement; queries metered), what it asks of the sender around
//! it ([`Host`]), and when it ends ([`Connection::deadline`]). `serve_one` runs it
//! over a TCP connection; the fuzzing harness runs it against any order of requests
//! from many requesters, with the sender's caps checked after each.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::{Ending, ServeEvent, ServeOptions, hello, own_address};
use crate::control::{
    Batch, CONTROL_VERSION, MAX_PROBE_IP_BYTES, PROOF_KIND, PROOF_PROBE_BYTES, Reply, Request, Tag,
    Transport,
};

/// A question a receiver may ask about its own address, whatever runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Query {
    /// What the sender's mgrpd routes there.
    Traffic,
    /// The sender's TCP connections there.
    Tcp,
    /// The stamps of the segments sent there after this cursor.
    Stamps(u64),
}

/// What a connection asks of the sender that serves it.
pub(super) trait Host {
    /// A measurement's place, once per connection (a second hello keeps the first
    /// place), or the refusal naming the limit.
    fn claim(&mut self, exclusive: bool) -> Result<(), String>;
    /// Opens a probe sender to `dst`; the message says why it could not be.
    fn open_sender(
        &mut self,
        transport: Transport,
        dst: SocketAddr,
        piggyback: bool,
    ) -> Result<(), String>;
    /// Closes the probe sender, if one is open.
    fn close_sender(&mut self);
    /// Sends the address proof with `cookie` through the probe sender just opened.
    fn send_proof(&mut self, cookie: u64) -> Result<(), String>;
    /// Takes `bytes` of the requester's budget and probe rate, or the refusal.
    fn spend(&mut self, bytes: u64) -> Result<(), Reply>;
    /// Takes one of the requester's questions (unless `free`), or the refusal.
    fn meter(&mut self, free: bool) -> Result<(), Reply>;
    /// Sends a batch through the open probe sender.
    fn send_batch(&mut self, batch: &Batch, max_size: u32) -> Reply;
    /// Answers a question about `to` (the asker's own address).
    fn query(&mut self, query: Query, to: IpAddr) -> Reply;
    /// Largest probe the connection's path carries.
    fn max_size(&self) -> u32;
    /// A fresh cookie for an address proof.
    fn cookie(&mut self) -> u64;
    /// Why no proof may go to `ip`, if none may.
    fn unprovable(&self, ip: IpAddr) -> Option<&'static str>;
    /// What to warn a UDP measurement of, if anything.
    fn udp_warning(&self) -> Option<String>;
    /// Reports an event of the connection's.
    fn report(&mut self, event: ServeEvent);
}

/// What the connection does after a request.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    /// Answers and waits for the next request.
    Answer(Reply),
    /// Answers and ends.
    Last(Reply),
    /// Ends without a word (the receiver said bye).
    End,
}

/// One connection's state.
#[derive(Debug, Clone)]
pub(super) struct Connection {
    peer: SocketAddr,
    accepted: Instant,
    /// When it claimed its measurement's place, and whether that place is exclusive.
    claimed: Option<(Instant, bool)>,
    /// When the measurement last had a batch sent (or began).
    last_batch: Instant,
    batches: u32,
    /// The cookie of the proof probe sent to the address the hello named, until the
    /// receiver echoes it.
    proof: Option<u64>,
    /// Proofs sent: one per connection.
    proofs: u32,
    /// Whether a probe sender is open for its measurement.
    sending: bool,
    /// Largest probe its batches may hold.
    max: u32,
    /// A traffic query right after a batch is not metered: pathChirp asks what rode
    /// in each chirp.
    after_batch: bool,
}

impl Connection {
    /// A connection from `peer`, accepted at `now`.
    pub(super) fn new(peer: SocketAddr, now: Instant) -> Self {
        Self {
            peer,
            accepted: now,
            claimed: None,
            last_batch: now,
            batches: 0,
            proof: None,
            proofs: 0,
            sending: false,
            max: MAX_PROBE_IP_BYTES,
            after_batch: false,
        }
    }

    /// Batches it had sent.
    pub(super) fn batches(&self) -> u32 {
        self.batches
    }

    /// Whether it has a measurement's place.
    pub(super) fn claimed(&self) -> bool {
        self.claimed.is_some()
    }

    /// Whether a batch would be sent now: a probe sender is open and no proof is
    /// awaited.
    pub(super) fn may_send(&self) -> bool {
        self.sending && self.proof.is_none()
    }

    /// When it ends however it trickles its requests, and why: without a
    /// measurement its lifetime; with one the session limit, or sooner an exclusive
    /// measurement's idle limit after its last batch.
    pub(super) fn deadline(&self, opts: &ServeOptions) -> (Instant, Ending) {
        match self.claimed {
            None => (self.accepted + opts.unclaimed_lifetime, Ending::Unclaimed),
            Some((at, exclusive)) => {
                let session = (at + opts.max_session, Ending::Session);
                let idle = (self.last_batch + opts.exclusive_idle, Ending::ExclusiveIdle);
                if exclusive && idle.0 < session.0 {
                    idle
                } else {
                    session
                }
            }
        }
    }

    /// What its receiver is told when its deadline passed (reported as a refusal).
    pub(super) fn expired(
        &self,
        ending: Ending,
        opts: &ServeOptions,
        host: &mut dyn Host,
    ) -> Reply {
        let message = ending.message(opts);
        host.report(ServeEvent::Refused(self.peer, message.clone()));
        Reply::Error { message }
    }

    /// Takes one request at `now`.
    pub(super) fn on_request(
        &mut self,
        req: Request,
        now: Instant,
        opts: &ServeOptions,
        host: &mut dyn Host,
    ) -> Step {
        let reply = match req {
            Request::Hello {
                version,
                transport,
                address,
                probe_port,
                piggyback,
                tool,
                exclusive,
            } => {
                if version != CONTROL_VERSION {
                    Reply::Error {
                        message: format!(
                            "control protocol {version} not spoken here (this sender speaks {CONTROL_VERSION}); use the same version of the tools on both hosts"
                        ),
                    }
                } else if transport != opts.transport {
                    Reply::Error {
                        message: format!(
                            "this sender sends {} probes; run the receiver with --transport {}",
                            opts.transport, opts.transport
                        ),
                    }
                } else {
                    let ask = Hello {
                        address,
                        probe_port,
                        transport,
                        piggyback,
                        tool,
                        exclusive,
                    };
                    match self.hello(now, opts, ask, host) {
                        Ok(reply) => reply,
                        Err(last) => return last,
                    }
                }
            }
            Request::Proof { cookie } => match self.proof {
                Some(c) if c == cookie && self.sending => {
                    self.proof = None;
                    hello(opts, self.max)
                }
                _ => {
                    return self.refuse_and_end(
                        "refused: the address proof does not match the probe sent there".into(),
                        host,
                    );
                }
            },
            Request::Probes(_) if self.proof.is_some() => Reply::Error {
                message: "refused: prove the probe address first (echo the cookie of the probe sent there)".into(),
            },
            // Nothing is spent or counted for it.
            Request::Probes(_) if !self.sending => Reply::Error {
                message: "refused: a batch is sent only within a measurement; say hello first".into(),
            },
            Request::Ping => Reply::Pong,
            Request::Traffic { address } => {
                let free = std::mem::take(&mut self.after_batch);
                self.query(Query::Traffic, address, free, host)
            }
            Request::Tcp { address } => self.query(Query::Tcp, address, false, host),
            Request::Stamps { address, after } => {
                self.query(Query::Stamps(after), address, false, host)
            }
            Request::Probes(batch) => {
                self.batches += 1;
                // A batch refused for its shape or a limit costs nothing.
                let reply = match batch.refusal(self.max) {
                    Some(why) => Reply::Error { message: why },
                    None => match host.spend(batch.bytes()) {
                        Ok(()) => host.send_batch(&batch, self.max),
                        Err(refusal) => refusal,
                    },
                };
                if matches!(reply, Reply::Sent(_)) {
                    self.last_batch = now;
                    self.after_batch = true;
                }
                reply
            }
            Request::Bye => return Step::End,
        };
        if let Reply::Error { message } = &reply {
            // A refusal is the receiver's doing (a limit of this sender); any other
            // error lies on this host.
            host.report(if message.starts_with("refused:") {
                ServeEvent::Refused(self.peer, message.clone())
            } else {
                ServeEvent::Failed(self.peer, message.clone())
            });
        }
        Step::Answer(reply)
    }

    /// A hello of the control version and transport this sender speaks: claims the
    /// measurement's place (once), opens a probe sender to the address it names, and
    /// starts the measurement there, or sends that address its proof first. `Err` is
    /// the connection's last step.
    fn hello(
        &mut self,
        now: Instant,
        opts: &ServeOptions,
        ask: Hello,
        host: &mut dyn Host,
    ) -> Result<Reply, Step> {
        if let Err(message) = host.claim(ask.exclusive) {
            return Err(self.refuse_and_end(message, host));
        }
        if self.claimed.is_none() {
            self.claimed = Some((now, ask.exclusive));
            self.last_batch = now;
            host.report(ServeEvent::Connected(self.peer, ask.tool));
            if ask.transport == Transport::Udp
                && let Some(e) = host.udp_warning()
            {
                host.report(ServeEvent::Warning(self.peer, e));
            }
        }
        // A dual-stack listener sees IPv4 receivers as IPv4-mapped IPv6.
        let own = self.peer.ip().to_canonical();
        let ip = ask.address.map_or(own, |a| a.to_canonical());
        if ip != own
            && let Some(why) = host.unprovable(ip)
        {
            return Err(self.refuse_and_end(
                format!(
                    "refused: no address proof goes to {ip} ({why}); name an address of the asking host that this sender can reach"
                ),
                host,
            ));
        }
        host.close_sender();
        self.sending = false;
        self.proof = None;
        if let Err(message) = host.open_sender(
            ask.transport,
            SocketAddr::new(ip, ask.probe_port),
            ask.piggyback,
        ) {
            return Ok(Reply::Error { message });
        }
        if ip == own {
            self.sending = true;
            self.max = host.max_size();
            return Ok(hello(opts, self.max));
        }
        // Another address: a probe with a cookie goes there, and nothing more until
        // the receiver shows it got it.
        if self.proofs > 0 {
            host.close_sender();
            return Err(self.refuse_and_end(
                format!("refused: one address proof per connection ({ip} was not proven)"),
                host,
            ));
        }
        if let Err(refusal) = host.spend(u64::from(PROOF_PROBE_BYTES)) {
            host.close_sender();
            return Ok(refusal);
        }
        self.proofs += 1;
        let c = host.cookie();
        match host.send_proof(c) {
            Ok(()) => {
                self.proof = Some(c);
                self.sending = true;
                self.max = host.max_size();
                Ok(Reply::Prove { address: ip })
            }
            Err(e) => {
                host.close_sender();
                Ok(Reply::Error {
                    message: format!("sending the address proof failed: {e}"),
                })
            }
        }
    }

    /// A question about the asker's own address, metered unless `free`.
    fn query(
        &mut self,
        query: Query,
        address: Option<IpAddr>,
        free: bool,
        host: &mut dyn Host,
    ) -> Reply {
        match own_address(self.peer, address).and_then(|a| host.meter(free).map(|()| a)) {
            Ok(a) => host.query(query, a),
            Err(r) => r,
        }
    }

    /// Reports `message` as a refusal and makes it the last answer.
    fn refuse_and_end(&self, message: String, host: &mut dyn Host) -> Step {
        host.report(ServeEvent::Refused(self.peer, message.clone()));
        Step::Last(Reply::Error { message })
    }
}

/// What a hello asks for.
struct Hello {
    address: Option<IpAddr>,
    probe_port: u16,
    transport: Transport,
    piggyback: bool,
    tool: String,
    exclusive: bool,
}

/// The tag of an address proof with `cookie`.
pub(super) fn proof_tag(cookie: u64) -> Tag {
    Tag {
        kind: PROOF_KIND,
        fleet: (cookie >> 32) as u32,
        stream: cookie as u32,
    }
}
