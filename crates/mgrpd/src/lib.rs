//! `mgrpd`, the MGRP daemon.
//!
//! Its job: read application packets ("riders") from a TUN device, hand them to the
//! `mgrp-core` endpoint, which plans them into the probe trains that tools submit;
//! pace those trains on a real-time thread onto a raw IP socket (protocol 253 by
//! default); and on the receiving side take riders out of probes, write them back
//! through the TUN and hand the probes, with kernel receive timestamps, to the tools
//! listening for them.
//!
//! - [`config`]: the TOML file and the flags.
//! - [`daemon`]: how the parts are put together and handed to the threads.
//! - [`tun_reader`], [`pacer`] (the pacer, which owns the endpoint, and the sender
//!   thread), [`receiver`], [`liveness`]: the data-path threads.
//! - [`server`] and [`trains`]: the Unix-socket API and its way to the pacer;
//!   [`listeners`]: the tools waiting for probes.
//! - [`counters`], [`lifecycle`], [`net`]: the counters, the shutdown signal, the
//!   sockets.
//! - [`routes`] and [`demand`]: policy routing into the TUN, permanent or on demand.
//! - [`sys`]: every raw system call.

// Only `sys` may use `unsafe`, for the few calls nix does not cover.
#![deny(unsafe_code)]

pub mod config;
pub mod counters;
pub mod daemon;
pub mod demand;
pub mod fastpath;
pub mod lifecycle;
pub mod listeners;
pub mod liveness;
pub mod net;
pub mod pacer;
pub mod receiver;
pub mod routes;
pub mod server;
pub mod sys;
pub mod trains;
pub mod tun_reader;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{info, warn};
use tun_rs::DeviceBuilder;

use crate::config::Config;
use crate::daemon::Daemon;
use crate::demand::Demand;
use crate::routes::Routes;

/// The whole `mgrpd` command: parses `args` (the first is the program name), checks
/// or loads the configuration, and runs the daemon. Exit codes: 0 after a clean
/// shutdown, 1 when the daemon could not start or failed, 2 for bad configuration.
pub fn main_with_args<I, T>(args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    use std::process::ExitCode;

    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|a| a == "genkey") {
        return match genkey() {
            Ok(key) => {
                println!("{}", key.to_hex());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mgrpd: cannot read random bytes from /dev/urandom: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = match config::Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mgrpd: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &cli.check_config {
        println!("{}: configuration is valid", path.display());
        println!("{config:#?}");
        return ExitCode::SUCCESS;
    }
    // A second subscriber (when embedded) is not an error worth stopping for.
    let _ = tracing_subscriber::fmt()
        .with_max_level(config.log_level)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgrpd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A new random key (`mgrpd genkey > FILE; chmod 600 FILE`).
fn genkey() -> std::io::Result<mgrp_core::auth::Key> {
    use std::io::Read as _;
    let mut bytes = [0u8; mgrp_core::auth::KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(mgrp_core::auth::Key::from_bytes(bytes))
}

fn create_tun(config: &Config) -> anyhow::Result<tun_rs::SyncDevice> {
    let dev = DeviceBuilder::new()
        .name(config.tun.clone())
        .mtu(config.mtu)
        .ipv4(config.tun_address, 32u8, None)
        .offload(config.tun_offload)
        .enable(false)
        .build_sync()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot create TUN {}: {e}; is another mgrpd using that name, or does an interface of that name exist? choose another with --tun",
                config.tun
            )
        })?;
    // No IPv6 link-local address, so the kernel sends no IPv6 housekeeping into the
    // TUN. Reverse-path filtering as strict as the routes allow: loose where the route
    // back to a rider's source may lead elsewhere (riders were admitted by source
    // already). The kernel applies the larger of this value and `all`'s, so a host
    // with `all` at 2 stays loose.
    let _ = sys::set_if_sysctl("ipv6", &config.tun, "addr_gen_mode", "1");
    let rp = match config.strict_rp_filter() {
        Ok(()) => {
            info!("strict reverse-path filtering on {}", config.tun);
            "1"
        }
        Err(why) => {
            info!("loose reverse-path filtering on {}: {why}", config.tun);
            "2"
        }
    };
    sys::set_if_sysctl("ipv4", &config.tun, "rp_filter", rp)
        .with_context(|| format!("cannot set rp_filter on {}", config.tun))?;
    dev.enabled(true)
        .with_context(|| format!("cannot bring {} up", config.tun))?;
    Ok(dev)
}

/// What each thread keeps once the daemon is set up (masks of [`sys::cap_bit`]s).
#[derive(Debug, Clone, Copy)]
struct Privileges {
    /// While threads start: the pacer still asks for real-time priority.
    start: u64,
    /// The main thread afterwards: it installs and removes routes.
    main: u64,
    /// The data-path threads: nothing, unless memory is locked (allocating beyond
    /// RLIMIT_MEMLOCK under `mlockall(MCL_FUTURE)` needs CAP_IPC_LOCK).
    worker: u64,
}

impl Privileges {
    fn after_setup(config: &Config, memory_locked: bool) -> Self {
        use sys::{cap, cap_bit};
        let lock = if memory_locked {
            cap_bit(cap::IPC_LOCK)
        } else {
            0
        };
        let routes = if config.manage_routes {
            cap_bit(cap::NET_ADMIN)
        } else {
            0
        };
        let nice = if config.realtime {
            cap_bit(cap::SYS_NICE)
        } else {
            0
        };
        Self {
            start: routes | lock | nice,
            main: routes | lock,
            worker: lock,
        }
    }

    /// Limits the calling (main) thread to what starting the threads needs, as
    /// `user` if given; threads started afterwards inherit it.
    fn enter(&self, user: Option<&str>) -> anyhow::Result<()> {
        match user {
            Some(name) => {
                let (uid, gid) = sys::user_ids(name).ok_or_else(|| {
                    anyhow::anyhow!("user {name:?} does not exist; create it or drop --user")
                })?;
                sys::switch_user(uid, gid, self.start)
                    .with_context(|| format!("cannot become user {name}"))?;
                info!("running as user {name} (uid {uid}, gid {gid})");
            }
            None => sys::limit_capabilities(self.start).context("cannot drop capabilities")?,
        }
        Ok(())
    }

    /// Limits a data-path thread, once it no longer needs more.
    fn worker(self) {
        if let Err(e) = sys::limit_capabilities(self.worker) {
            warn!("a data-path thread cannot drop its capabilities: {e}");
        }
    }

    /// Limits the main thread, once every thread has started.
    fn main(self) {
        match sys::limit_capabilities(self.main) {
            Ok(()) => info!(
                "capabilities kept: main thread {}, data path {}",
                cap_names(self.main),
                cap_names(self.worker)
            ),
            Err(e) => warn!("the main thread cannot drop its capabilities: {e}"),
        }
    }
}

/// The names of the capabilities in `mask`, for logs.
fn cap_names(mask: u64) -> String {
    use sys::{cap, cap_bit};
    let names: Vec<&str> = [
        (cap::NET_ADMIN, "CAP_NET_ADMIN"),
        (cap::NET_RAW, "CAP_NET_RAW"),
        (cap::IPC_LOCK, "CAP_IPC_LOCK"),
        (cap::SYS_NICE, "CAP_SYS_NICE"),
    ]
    .into_iter()
    .filter(|(c, _)| mask & cap_bit(*c) != 0)
    .map(|(_, n)| n)
    .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(" ")
    }
}

/// Runs the daemon until SIGINT, SIGTERM or SIGHUP (all three shut it down cleanly).
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
    let tun = Arc::new(create_tun(&config)?);
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
        .await?;
        let v6 = config
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
    let result = serve(&config, &daemon, &demand, recv4, events_rx).await;
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
    events: mpsc::UnboundedReceiver<daemon::RouteEvent>,
) -> anyhow::Result<()> {
    if config.manage_routes && !config.route_on_demand {
        let mut st = demand.clone();
        for net in &config.routes {
            st.add_permanent(*net).await?;
        }
    }
    let listener = server::bind(&config.socket, config.socket_group.as_deref())?;
    let fatal = daemon.life.fatal_channel();
    let locked = match sys::lock_memory() {
        Ok(()) => true,
        Err(e) => {
            warn!("cannot lock memory ({e}); page faults may delay probes");
            false
        }
    };
    let recv6 = sys::mgrp_recv_socket(true, config.protocol, Duration::from_millis(100));
    // Set up: from here on every thread keeps only what it needs.
    let privileges = Privileges::after_setup(config, locked);
    privileges.enter(config.user.as_deref())?;
    let life = &daemon.life;
    let (l, reader) = (life.clone(), daemon.tun_reader());
    std::thread::Builder::new()
        .name("mgrp-tun".into())
        .spawn(move || {
            let _ends = lifecycle::EndsDaemon::new(&l, "TUN reader");
            privileges.worker();
            reader.run();
        })?;
    let (l, receiver) = (life.clone(), daemon.receiver(false));
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
            let (l, receiver) = (life.clone(), daemon.receiver(true));
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
    let sender = Arc::new(daemon.sender());
    let (l, s) = (life.clone(), sender.clone());
    let pacer = std::thread::Builder::new()
        .name("mgrp-pacer".into())
        .spawn(move || {
            let _ends = lifecycle::EndsDaemon::new(&l, "pacer");
            pacer::run_pacer(&s, &l, || privileges.worker());
        })?;
    let l = life.clone();
    let sender = std::thread::Builder::new()
        .name("mgrp-sender".into())
        .spawn(move || {
            let _ends = lifecycle::EndsDaemon::new(&l, "sender");
            privileges.worker();
            sender.run();
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
    let server = tokio::spawn(server::serve(listener, daemon.api()));
    info!(
        "mgrpd ready: tun {} mtu {}, protocol {}, fwmark {:#x}, table {}, hold {:?} ({:?}{}), socket {}",
        config.tun,
        config.mtu,
        config.protocol,
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
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // SIGHUP would otherwise end the daemon without removing its rule and routes.
    // There is no reload: a changed configuration takes a restart, which this clean
    // exit makes safe under `Restart=` supervision.
    let mut hup = signal(SignalKind::hangup())?;
    let mut failure = None;
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = int.recv() => info!("SIGINT: shutting down"),
        _ = hup.recv() => info!("SIGHUP: shutting down cleanly (configuration is read at start; restart to apply changes)"),
        why = fatal => failure = why.ok(),
    }
    daemon.begin_shutdown();
    // The pacer sends every held rider unchanged before it returns.
    let _ = tokio::task::spawn_blocking(move || {
        let _ = pacer.join();
        let _ = sender.join();
        for r in receivers {
            let _ = r.join();
        }
    })
    .await;
    // Clients get the answers to what they had in flight (the reports of trains cut
    // short by the shutdown) before the socket goes.
    let _ = server.await;
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

/// A daemon whose data path loops back in-process: the real API server, planners and
/// pacer, with MGRP packets received by the same daemon as if from 127.0.0.1 and
/// riders counted instead of written to a TUN. Needs no privileges; for testing tools
/// and the API without namespaces.
#[derive(Debug)]
pub struct LoopbackDaemon {
    /// The daemon (inject riders with [`Daemon::handle_tun_packet`], read counters
    /// with [`Daemon::stats`]).
    pub daemon: Daemon,
    pacer: Option<std::thread::JoinHandle<()>>,
    sender: Option<std::thread::JoinHandle<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl LoopbackDaemon {
    /// Starts it on the current tokio runtime, serving the API at `config.socket`.
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let daemon = Daemon::loopback(config.clone(), events_tx)?;
        let demand = Demand::new(None, &config);
        let listener = server::bind(&config.socket, config.socket_group.as_deref())?;
        let sender = Arc::new(daemon.sender());
        let (l, s) = (daemon.life.clone(), sender.clone());
        let pacer = std::thread::Builder::new()
            .name("mgrp-pacer".into())
            .spawn(move || pacer::run_pacer(&s, &l, || {}))?;
        let sender = std::thread::Builder::new()
            .name("mgrp-sender".into())
            .spawn(move || sender.run())?;
        tokio::spawn(demand.watch(events_rx, daemon.queues.clone()));
        let server = tokio::spawn(server::serve(listener, daemon.api()));
        Ok(Self {
            daemon,
            pacer: Some(pacer),
            sender: Some(sender),
            server,
        })
    }

    /// Stops it the way SIGTERM stops mgrpd: held riders leave, clients get their
    /// answers, the socket goes.
    pub async fn stop(mut self) {
        self.daemon.begin_shutdown();
        let threads = [self.pacer.take(), self.sender.take()];
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads.into_iter().flatten() {
                let _ = t.join();
            }
        })
        .await;
        let _ = self.server.await;
        let _ = std::fs::remove_file(&self.daemon.config.socket);
    }
}
