//! How the daemon's parts are put together. Each thread owns its state and gets
//! only the parts it uses:
//!
//! - the **TUN reader** (`crate::tun_reader`) reads application packets and hands
//!   them, in batches, to the pacer through a lock-free queue (or sends them on);
//! - the **pacer** (`crate::pacer`, a real-time thread when permitted) owns the
//!   endpoint (`mgrp_core::endpoint`) and sends the probes; the **dispatcher**
//!   (`crate::dispatcher`) does what the endpoint decides besides: riders sent
//!   unchanged, continuations, reports, route changes;
//! - each **receiver** (`crate::receiver`) owns its reassembler and replay windows,
//!   writes riders to the TUN and hands probes to the listening tools
//!   (`crate::listeners`);
//! - the **liveness** threads (`crate::liveness`) read the MGRP sockets' error
//!   queues: ICMP errors and the kernel's transmit stamps;
//! - the **API server** (`crate::server`) queues trains through `crate::trains`.
//!
//! They meet at the pacer's queues (`crate::exchange`), and otherwise only at small
//! parts with one job each: the counters, the listener registry, the peers' health,
//! the transmit stamps, the sockets. The pacer waits for no other thread.

use std::sync::Arc;

use tokio::sync::mpsc;
use tun_rs::SyncDevice;

use crate::config::Config;
use crate::counters::{Counters, LimitedLog, ReassemblySlots, Stats};
use crate::dispatcher::Dispatcher;
use crate::exchange::{Queues, RouteEvent};
use crate::fastpath::FastPath;
use crate::lifecycle::Lifecycle;
use crate::listeners::Listeners;
use crate::liveness::{Departures, ErrorQueues, PeerHealth};
use crate::net::{LoopbackSource, Net, TunWriter};
use crate::receiver::Receiver;
use crate::trains::Trains;
use crate::tun_reader::TunReader;

/// The daemon's parts, before they are handed to its threads.
#[derive(Debug)]
pub struct Daemon {
    pub(crate) config: Arc<Config>,
    pub(crate) life: Arc<Lifecycle>,
    counters: Arc<Counters>,
    pub(crate) queues: Arc<Queues>,
    net: Arc<Net>,
    listeners: Arc<Listeners>,
    health: Arc<PeerHealth>,
    departures: Arc<Departures>,
    reassembly: Arc<ReassemblySlots>,
    route_events: mpsc::UnboundedSender<RouteEvent>,
    bounds_log: Arc<LimitedLog>,
    trains: Arc<Trains>,
    /// Where unchanged super-packets leave whole (see `crate::fastpath`).
    fast: Option<Arc<FastPath>>,
    /// What a loopback data path sent, until its receiver takes it.
    looped: Option<LoopbackSource>,
}

impl Daemon {
    /// Opens the sockets the data path needs.
    pub fn new(
        config: Config,
        tun: Arc<SyncDevice>,
        events: mpsc::UnboundedSender<RouteEvent>,
    ) -> anyhow::Result<Self> {
        let config = Arc::new(config);
        let counters = Arc::new(Counters::default());
        let net = Net::open(&config, tun, counters.clone())?;
        let mut daemon = Self::assemble(config, counters, net, events)?;
        if daemon.config.super_packets && daemon.config.tun_offload {
            let (tx, rx) = mpsc::unbounded_channel();
            match FastPath::new(tx, daemon.config.fwmark) {
                Ok(fast) => {
                    let fast = Arc::new(fast);
                    tokio::spawn(crate::fastpath::resolve(
                        fast.clone(),
                        rx,
                        daemon.config.fwmark,
                    ));
                    daemon.fast = Some(fast);
                }
                Err(e) => tracing::warn!(
                    "cannot open a link-layer socket ({e}); unchanged super-packets are split and sent one by one"
                ),
            }
        }
        Ok(daemon)
    }

    /// A daemon whose data path loops back in-process: each MGRP packet it sends is
    /// received by its loopback receiver as if from the peer it was sent to, and
    /// riders are counted instead of written to a TUN. No TUN, no raw sockets, no
    /// privileges needed. The loopback addresses are its peers.
    pub fn loopback(
        config: Config,
        events: mpsc::UnboundedSender<RouteEvent>,
    ) -> anyhow::Result<Self> {
        use mgrp_core::peers::{Peer, Prefix};
        let config = config.detach();
        config.update_peering(|p| {
            for lo in [
                Prefix::host(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
                Prefix::host(std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
            ] {
                p.peers.add_peer(Peer::new(lo));
            }
        });
        let config = Arc::new(config);
        let counters = Arc::new(Counters::default());
        let (net, looped) = Net::loopback(&config, counters.clone());
        let mut daemon = Self::assemble(config, counters, net, events)?;
        daemon.looped = Some(looped);
        Ok(daemon)
    }

    /// The loopback receiver: takes in what the loopback data path sends, until that
    /// is gone. One receiver serves both families here: one counter slot. `None`
    /// for a kernel data path, or once taken.
    pub(crate) fn loopback_receiver(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        let source = self.looped.take()?;
        let mut receiver = self.receiver(false, false);
        Some(move || {
            for p in source {
                receiver.handle_mgrp(p.peer, None, Some(p.peer), &p.packet, p.ip_len, p.at);
            }
        })
    }

    fn assemble(
        config: Arc<Config>,
        counters: Arc<Counters>,
        net: Net,
        events: mpsc::UnboundedSender<RouteEvent>,
    ) -> anyhow::Result<Self> {
        let listeners = Arc::<Listeners>::default();
        let reassembly = Arc::<ReassemblySlots>::default();
        let queues = Arc::new(
            Queues::new(&config)
                .map_err(|e| anyhow::anyhow!("cannot create the pacer's eventfds: {e}"))?,
        );
        let life = Arc::new(Lifecycle::default());
        let trains = Arc::new(Trains::new(
            config.clone(),
            counters.clone(),
            queues.clone(),
            life.clone(),
        ));
        Ok(Self {
            config,
            life,
            counters,
            queues,
            net: Arc::new(net),
            listeners,
            health: Arc::default(),
            departures: Arc::default(),
            reassembly,
            route_events: events,
            bounds_log: Arc::default(),
            trains,
            fast: None,
            looped: None,
        })
    }

    /// Where the counters are read.
    pub fn stats(&self) -> Stats {
        Stats {
            counters: self.counters.clone(),
            queues: self.queues.clone(),
            reassembly: self.reassembly.clone(),
        }
    }

    /// Asks every thread and task to stop; the pacer flushes held riders unchanged
    /// first.
    pub fn begin_shutdown(&self) {
        self.life.begin();
        self.queues.wake_pacer();
    }

    /// The TUN reader's parts.
    pub(crate) fn tun_reader(&self) -> TunReader {
        TunReader {
            config: self.config.clone(),
            queues: self.queues.clone(),
            counters: self.counters.clone(),
            net: self.net.clone(),
            health: self.health.clone(),
            life: self.life.clone(),
            fast: self.fast.clone(),
            next_hop: None,
        }
    }

    /// The reader of a next-hop device, whose every packet goes to `peer`.
    pub(crate) fn next_hop_reader(
        &self,
        device: Arc<SyncDevice>,
        peer: std::net::IpAddr,
    ) -> TunReader {
        TunReader {
            next_hop: Some(crate::tun_reader::NextHop { device, peer }),
            ..self.tun_reader()
        }
    }

    /// Takes in packets as if read from the TUN (for a loopback daemon in tests).
    pub fn handle_tun_packet(&self, pkt: &[u8]) {
        self.tun_reader().handle_packets(std::iter::once(pkt));
    }

    /// Whether UDP peers' packets of one family have a socket to arrive at.
    pub(crate) fn has_udp_socket(&self, v6: bool) -> bool {
        self.net.udp_socket(v6).is_some()
    }

    /// The data path's sending side.
    pub(crate) fn net(&self) -> Arc<Net> {
        self.net.clone()
    }

    /// The daemon's counters.
    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// A receiver of IPv4 or IPv6 MGRP packets (from the raw socket, or from the UDP
    /// socket with `udp`), writing riders into the TUN.
    pub(crate) fn receiver(&self, v6: bool, udp: bool) -> Receiver {
        let tun = match self.net.tun() {
            Some(tun) => TunWriter::Kernel {
                tun: tun.clone(),
                vnet: self.config.tun_offload,
            },
            None => TunWriter::Nowhere,
        };
        Receiver::new(
            self.config.clone(),
            self.counters.clone(),
            self.listeners.clone(),
            tun,
            self.reassembly.clone(),
            (self.net.endpoints().clone(), self.net.keyring.clone()),
            (v6, udp),
        )
    }

    /// The readers of the MGRP sockets' error queues.
    pub(crate) fn error_queues(&self) -> ErrorQueues {
        ErrorQueues {
            net: self.net.clone(),
            health: self.health.clone(),
            departures: self.departures.clone(),
            counters: self.counters.clone(),
        }
    }

    /// The dispatcher's parts (the pacer uses them too, when the dispatcher is
    /// behind).
    pub(crate) fn dispatcher(&self) -> Dispatcher {
        Dispatcher {
            config: self.config.clone(),
            queues: self.queues.clone(),
            net: self.net.clone(),
            counters: self.counters.clone(),
            route_events: self.route_events.clone(),
            errors: self.error_queues(),
            bounds_log: self.bounds_log.clone(),
            fast: self.fast.clone(),
        }
    }

    /// The API server's parts.
    pub(crate) fn api(&self) -> crate::server::Api {
        crate::server::Api {
            config: self.config.clone(),
            trains: self.trains.clone(),
            listeners: self.listeners.clone(),
            stats: self.stats(),
            life: self.life.clone(),
        }
    }
}
