//! Running the daemon: checks what it is allowed to do, sets up the TUN, the routes
//! and the sockets, starts every thread and task with only the privileges it needs,
//! and on a signal (or a thread's failure) stops them in order, so held riders leave
//! and clients get their answers before the socket goes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::Config;
use crate::daemon::Daemon;
use crate::demand::Demand;
use crate::exchange::RouteEvent;
use crate::privileges::Privileges;
use crate::routes::Routes;
use crate::{lifecycle, metrics, pacer, server, sys, tun};

/// How often the routes' source addresses are checked against the peers' endpoints
/// (a roaming peer heard from, a changed address of this host).
const SOURCE_REFRESH: Duration = Duration::from_secs(2);

/// Runs the daemon until SIGINT or SIGTERM (both shut it down cleanly); SIGHUP loads
/// the keys again.
pub fn run(config: Config) -> anyhow::Result<()> {
    use sys::cap;
    let caps = sys::effective_capabilities().context("cannot read this process's capabilities")?;
    let missing: Vec<&str> = [
        (cap::NET_ADMIN, "CAP_NET_ADMIN"),
        (cap::NET_RAW, "CAP_NET_RAW"),
    ]
    .into_iter()
    .filter(|(bit, _)| caps & (1 << bit) == 0)
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "mgrpd lacks {} (to create its TUN, routes and raw sockets); run it as root, under the shipped mgrpd.service, or with those ambient capabilities",
            missing.join(" and ")
        );
    }
    for (bit, name, what) in [
        (
            cap::SYS_NICE,
            "CAP_SYS_NICE",
            "the pacer runs without real-time priority",
        ),
        (cap::IPC_LOCK, "CAP_IPC_LOCK", "memory may not be locked"),
    ] {
        if caps & (1 << bit) == 0 {
            tracing::warn!("no {name}: {what}");
        }
    }
    if let Some(name) = &config.user {
        // Checked before anything is set up, so a typo costs no TUN and no rule.
        if sys::user_ids(name).is_none() {
            anyhow::bail!("user {name:?} does not exist; create it or drop --user");
        }
    }
    // mgrpd never executes anything; make sure nothing it could be tricked into
    // running gains privileges.
    sys::no_new_privileges().context("cannot set no-new-privileges")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(run_async(config))
}

async fn run_async(config: Config) -> anyhow::Result<()> {
    let peering = config.peering();
    let tun = Arc::new(tun::create(&config)?);
    let next_hops = config
        .next_hops
        .iter()
        .map(|d| Ok((Arc::new(tun::create_next_hop(&config, d)?), d.peer)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    warn_if_not_forwarding(&config);
    warn_about_keys(&config);
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let daemon = Daemon::new(config.clone(), tun, events_tx)?;
    let recv4 = sys::mgrp_recv_socket(false, config.protocol, Duration::from_millis(100))
        .context("cannot open the MGRP receive socket")?;
    let routes = if config.manage_routes {
        let mut r = Routes::new(
            &config.tun,
            config.table,
            config.fwmark,
            config.rule_priority,
        )
        .await?
        .with_route_mtu({
            let config = config.clone();
            move |net| config.route_mtu(net)
        })
        .with_route_source(config.tun_address, {
            let config = config.clone();
            let endpoints = daemon.net().endpoints().clone();
            move |net| Some(config.source_plan(net, |peer| endpoints.endpoint(peer)))
        });
        let v6 = peering
            .routes
            .iter()
            .any(|n| matches!(n, ipnet::IpNet::V6(_)));
        if let Err(e) = r.add_rules(v6).await {
            let _ = r.remove_all().await;
            anyhow::bail!(
                "{e}; is another mgrpd running with the same --fwmark/--table/--rule-priority?"
            );
        }
        Some(r)
    } else {
        None
    };
    let demand = Demand::new(routes, &config);
    let result = serve(&config, &daemon, &demand, recv4, events_rx, next_hops).await;
    daemon.begin_shutdown();
    for e in demand.remove_all().await {
        warn!("cleanup: {e}");
    }
    let _ = std::fs::remove_file(&config.socket);
    result
}

async fn serve(
    config: &Config,
    daemon: &Daemon,
    demand: &Demand,
    recv4: socket2::Socket,
    events: mpsc::UnboundedReceiver<RouteEvent>,
    next_hops: Vec<(Arc<tun_rs::SyncDevice>, std::net::IpAddr)>,
) -> anyhow::Result<()> {
    let peering = config.peering();
    if config.manage_routes && !config.route_on_demand {
        let mut st = demand.clone();
        for net in &peering.routes {
            st.add_permanent(*net).await?;
        }
    }
    let listener = server::bind(&config.socket, config.socket_group.as_deref())?;
    let exporter = match config.metrics {
        Some(addr) => Some(metrics::bind(addr).await?),
        None => None,
    };
    let fatal = daemon.life.fatal_channel();
    let locked = match mgrp_rt::thread::lock_memory() {
        Ok(()) => true,
        Err(e) => {
            warn!("cannot lock memory ({e}); page faults may delay probes");
            false
        }
    };
    let recv6 = sys::mgrp_recv_socket(true, config.protocol, Duration::from_millis(100));
    let keyring = daemon.net().keyring.clone();
    keyring.prepare(config.user.as_deref());
    // Set up: from here on every thread keeps only what it needs.
    let privileges = Privileges::after_setup(config, locked);
    privileges.enter(config.user.as_deref())?;
    // Before any other thread starts, so that each starts off the pacer's CPU.
    let pacer_cpu = pacer::keep_cpu_for_pacer(config);
    let life = &daemon.life;
    let (l, reader) = (life.clone(), daemon.tun_reader());
    std::thread::Builder::new()
        .name("mgrp-tun".into())
        .spawn(move || {
            let _ends = lifecycle::EndsDaemon::new(&l, "TUN reader");
            privileges.worker();
            reader.run();
        })?;
    for (device, peer) in next_hops {
        let (l, reader) = (life.clone(), daemon.next_hop_reader(device, peer));
        std::thread::Builder::new()
            .name("mgrp-nexthop".into())
            .spawn(move || {
                let _ends = lifecycle::EndsDaemon::new(&l, "next-hop device reader");
                privileges.worker();
                reader.run();
            })?;
    }
    let (l, receiver) = (life.clone(), daemon.receiver(false, false));
    let mut receivers =
        vec![
            std::thread::Builder::new()
                .name("mgrp-rx4".into())
                .spawn(move || {
                    let _ends = lifecycle::EndsDaemon::new(&l, "IPv4 receiver");
                    privileges.worker();
                    receiver.run(&recv4, &l);
                })?,
        ];
    match recv6 {
        Ok(recv6) => {
            let (l, receiver) = (life.clone(), daemon.receiver(true, false));
            receivers.push(std::thread::Builder::new().name("mgrp-rx6".into()).spawn(
                move || {
                    let _ends = lifecycle::EndsDaemon::new(&l, "IPv6 receiver");
                    privileges.worker();
                    receiver.run(&recv6, &l);
                },
            )?);
        }
        Err(e) => warn!("no IPv6 MGRP receive socket ({e}); IPv6 peers cannot reach this host"),
    }
    for v6 in [false, true] {
        if !daemon.has_udp_socket(v6) {
            continue;
        }
        let (l, receiver, net) = (life.clone(), daemon.receiver(v6, true), daemon.net());
        let name = if v6 { "mgrp-udp6" } else { "mgrp-udp4" };
        receivers.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let _ends = lifecycle::EndsDaemon::new(&l, "UDP receiver");
                    privileges.worker();
                    if let Some(sock) = net.udp_socket(v6) {
                        receiver.run(sock, &l);
                    }
                })?,
        );
    }
    // Whenever there is a UDP socket: a reload may add a peer that wants keepalives.
    if daemon.has_udp_socket(false) || daemon.has_udp_socket(true) {
        let keepalives = crate::keepalive::Keepalives::new(daemon.config.clone());
        let (l, net, counters) = (life.clone(), daemon.net(), daemon.counters());
        std::thread::Builder::new()
            .name("mgrp-keepalive".into())
            .spawn(move || {
                privileges.worker();
                keepalives.run(&net, &counters, &l);
            })?;
    }
    let dispatcher = Arc::new(daemon.dispatcher());
    let (l, s) = (life.clone(), dispatcher.clone());
    let pacer = std::thread::Builder::new()
        .name("mgrp-pacer".into())
        .spawn(move || {
            let _ends = lifecycle::EndsDaemon::new(&l, "pacer");
            pacer::run_pacer(&s, &l, pacer_cpu, || privileges.worker());
        })?;
    let l = life.clone();
    let dispatcher = std::thread::Builder::new()
        .name("mgrp-dispatch".into())
        .spawn(move || {
            let _ends = lifecycle::EndsDaemon::new(&l, "dispatcher");
            privileges.worker();
            dispatcher.run();
        })?;
    for v6 in [false, true] {
        let (l, errors) = (life.clone(), daemon.error_queues());
        std::thread::Builder::new()
            .name("mgrp-liveness".into())
            .spawn(move || {
                privileges.worker();
                errors.run(v6, &l);
            })?;
    }
    // Every thread has started with what it needs; the pacer's real-time priority
    // was the last use of CAP_SYS_NICE.
    privileges.main();
    tokio::spawn(demand.clone().watch(events, daemon.queues.clone()));
    tokio::spawn(demand.clone().refresh_sources(SOURCE_REFRESH));
    if keyring.enabled() {
        let keyring = keyring.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SOURCE_REFRESH);
            loop {
                tick.tick().await;
                // Route lookups and a file write: off the runtime's one thread.
                let k = keyring.clone();
                let _ = tokio::task::spawn_blocking(move || k.refresh()).await;
            }
        });
    }
    let server = tokio::spawn(server::serve(listener, daemon.api()));
    if let Some(exporter) = exporter {
        tokio::spawn(metrics::serve(
            exporter,
            daemon.stats(),
            config.clone(),
            daemon.life.clone(),
        ));
    }
    info!(
        "mgrpd ready: tun {} mtu {}, protocol {}{}, fwmark {:#x}, table {}, hold {:?} ({:?}{}), socket {}",
        config.tun,
        config.mtu,
        config.protocol,
        if peering.encap.any_udp() {
            format!(", UDP port {}", peering.udp.port)
        } else {
            String::new()
        },
        config.fwmark,
        config.table,
        config.policy.hold,
        config.policy.hold_mode,
        if config.route_on_demand {
            ", routes on demand"
        } else {
            ""
        },
        config.socket.display()
    );
    let notifier = mgrp_service::notify::Notifier::from_env();
    notifier.ready(&format!(
        "ready: tun {}, socket {}",
        config.tun,
        config.socket.display()
    ));
    // The watchdog's keep-alive, when the unit asks for one: sent from this loop,
    // which a daemon stuck in its main thread would not reach.
    let mut watchdog =
        tokio::time::interval(notifier.watchdog().unwrap_or(Duration::from_secs(3600)));
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // SIGHUP loads the configuration again: peers, keys and routes follow it.
    let mut hup = signal(SignalKind::hangup())?;
    // mesh-refresh reads (fetches) the description again on its period and puts
    // what changed in force as SIGHUP does, saying nothing when nothing did.
    let mut refresh = tokio::time::interval(config.mesh_refresh.unwrap_or(Duration::MAX / 4));
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    refresh.tick().await;
    let mut failure = None;
    tokio::pin!(fatal);
    loop {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: shutting down"),
            _ = int.recv() => info!("SIGINT: shutting down"),
            _ = hup.recv() => {
                notifier.reloading();
                reload(config, daemon, demand, &keyring, Trigger::Signal).await;
                notifier.ready("ready: configuration reloaded");
                continue;
            }
            _ = refresh.tick(), if config.mesh_refresh.is_some() => {
                reload(config, daemon, demand, &keyring, Trigger::MeshRefresh).await;
                continue;
            }
            _ = watchdog.tick(), if notifier.watchdog().is_some() => {
                notifier.alive();
                continue;
            }
            why = &mut fatal => failure = why.ok(),
        }
        break;
    }
    notifier.stopping();
    daemon.begin_shutdown();
    // The pacer sends every held rider unchanged before it returns.
    let _ = tokio::task::spawn_blocking(move || {
        let _ = pacer.join();
        let _ = dispatcher.join();
        for r in receivers {
            let _ = r.join();
        }
    })
    .await;
    // Clients get the answers to what they had in flight (the reports of trains cut
    // short by the shutdown) before the socket goes.
    let _ = server.await;
    keyring.save_at_stop();
    let stats = daemon.stats().get();
    info!(
        "stopped: riders in {}, piggybacked {}, unchanged {}, dropped {}, held {}; probes sent {}",
        stats.planner.riders_in,
        stats.planner.riders_piggybacked,
        stats.planner.riders_sent_unchanged,
        stats.planner.riders_dropped(),
        stats.planner.riders_held,
        stats.daemon.probes_sent
    );
    match failure {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

/// What started a reload: it names the log lines.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// SIGHUP (`systemctl reload`).
    Signal,
    /// `mesh-refresh`'s period.
    MeshRefresh,
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Signal => "SIGHUP",
            Self::MeshRefresh => "mesh-refresh",
        })
    }
}

/// Loads the configuration again and puts in force what a reload may change: the
/// peers, their keys and the routes into the tunnel ([`crate::config::reload`]).
/// A configuration that does not load (a description that cannot be fetched), or
/// whose peers cannot change while mgrpd runs, changes nothing; the log says why.
/// A periodic refresh that changes nothing says nothing.
async fn reload(
    config: &Config,
    daemon: &Daemon,
    demand: &Demand,
    keyring: &crate::keyring::Keyring,
    by: Trigger,
) {
    let Some(cli) = config.reload.clone() else {
        return;
    };
    // Files read, a description perhaps fetched over the network: off the runtime.
    let new = match tokio::task::spawn_blocking(move || Config::load(&cli)).await {
        Ok(Ok(new)) => new,
        Ok(Err(e)) => {
            warn!("{by}: the configuration does not load ({e}); nothing changes");
            return;
        }
        Err(e) => {
            warn!("{by}: the configuration could not be loaded ({e}); nothing changes");
            return;
        }
    };
    let plan = match crate::config::reload::plan(config, &new) {
        Ok(plan) => plan,
        Err(why) => {
            warn!("{by}: nothing changes: {why}");
            return;
        }
    };
    if by == Trigger::MeshRefresh && plan.is_empty() {
        return;
    }
    // The pacer first: no rider reaches a new peer before its route is in place,
    // and by then the pacer plans for the peer's own path.
    if !daemon.queues.encap(plan.peering.encap.clone()).await {
        warn!("{by}: the pacer could not be told the peers' encapsulation; nothing changes");
        return;
    }
    let keys = plan.peering.keys.clone();
    let no_peer = plan.peering.peers.peers().is_empty();
    config.set_peering(plan.peering.clone());
    if no_peer {
        // Nothing to seal for, and the keys in force stay for the peers to come.
        info!("{by}: no peer is left; the keys in force stay");
    } else if let Err(e) = keyring.reload(keys, new.auth, new.auth_accept) {
        warn!("{by}: keys not reloaded: {e}");
    }
    daemon.net().endpoints().reshape();
    if config.manage_routes && !config.route_on_demand {
        for e in demand
            .reroute(&plan.removed_routes, &plan.added_routes)
            .await
        {
            warn!("{by}: {e}");
        }
    }
    info!("{by}: reloaded: {}", plan.describe());
}

/// Says at start what running without keys, or with version 1 tags, exposes.
fn warn_about_keys(config: &Config) {
    let peering = config.peering();
    if !peering.keys.enabled() {
        let exposed = peering
            .peers
            .peers()
            .iter()
            .find(|p| !p.prefix.addr().is_loopback());
        if let Some(p) = exposed {
            warn!(
                "no key: any host that can send IP packets with peer {}'s address (or another peer's) can write packets into this host through the tunnel, deliver forged probes to its tools, and, over UDP, be taken for the peer; give every peer a key (public-key with this host's private-key-file, or key-file: `mgrpd genkey`)",
                p.prefix
            );
        }
    } else if config.auth_accept == mgrp_core::auth::Scheme::V1 {
        warn!(
            "tags of version 1 are taken (auth or auth-accept = 1): they bind no direction, so a packet of this host's sent back to it, or one of another peer's under this peer's address, is believed (it can cut a peer off or move a roaming one); set auth = 3 without auth-accept once every peer seals with version 3"
        );
    } else if config.auth_accept == mgrp_core::auth::Scheme::V2 {
        warn!(
            "tags of version 2 are taken (auth or auth-accept = 2): they name no key, so each datagram from an unknown endpoint is tried against every roaming peer's keys (bounded at 64 a second, so a flood can delay a roamed peer being found); set auth = 3 without auth-accept once every peer seals with version 3"
        );
    }
}

/// Riders a member peer sends through this host to its `relay-to` prefixes are written
/// into the TUN for the kernel to forward: say so when the kernel would not.
fn warn_if_not_forwarding(config: &Config) {
    let peering = config.peering();
    let relays = |v4: bool| {
        peering
            .peers
            .peers()
            .iter()
            .flat_map(|p| p.relay_to.iter().map(move |r| (p.prefix, *r)))
            .find(|(_, r)| r.addr().is_ipv4() == v4)
    };
    for (v4, path) in [
        (true, "/proc/sys/net/ipv4/ip_forward"),
        (false, "/proc/sys/net/ipv6/conf/all/forwarding"),
    ] {
        let Some((peer, to)) = relays(v4) else {
            continue;
        };
        let on = std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "1");
        if !on {
            warn!(
                "peer {peer} may relay to {to} through this host, but {path} is not 1: the kernel will drop what it relays; set it (sysctl) to relay"
            );
        }
    }
}
