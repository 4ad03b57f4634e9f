//! The loopback daemon: the real API server, planner and pacer with an in-process
//! data path, for testing tools and the API without privileges.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::{Config, PacerCpu};
use crate::daemon::Daemon;
use crate::demand::Demand;
use crate::{pacer, server};

/// A daemon whose data path loops back in-process: the real API server, planners and
/// pacer, with each MGRP packet received by the same daemon as if from the peer it
/// was sent to (127.0.0.1 and ::1 are its peers), and riders counted instead of
/// written to a TUN. Needs no privileges; for testing tools
/// and the API without namespaces.
#[derive(Debug)]
pub struct LoopbackDaemon {
    /// The daemon (inject riders with [`Daemon::handle_tun_packet`], read counters
    /// with [`Daemon::stats`]).
    pub daemon: Daemon,
    pacer: std::thread::JoinHandle<()>,
    dispatcher: std::thread::JoinHandle<()>,
    receiver: std::thread::JoinHandle<()>,
    server: tokio::task::JoinHandle<()>,
}

impl LoopbackDaemon {
    /// Starts it on the current tokio runtime, serving the API at `config.socket`.
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let mut daemon = Daemon::loopback(config.clone(), events_tx)?;
        let demand = Demand::new(None, &config);
        let listener = server::bind(&config.socket, config.socket_group.as_deref())?;
        let receive = daemon
            .loopback_receiver()
            .expect("a loopback daemon has a loopback receiver");
        let receiver = std::thread::Builder::new()
            .name("mgrp-loopback".into())
            .spawn(receive)?;
        let dispatcher = Arc::new(daemon.dispatcher());
        let (l, d) = (daemon.life.clone(), dispatcher.clone());
        // It shares its process with whoever started it: it moves none of their
        // threads, and pins its pacer only where asked.
        let cpu = match config.pacer_cpu {
            PacerCpu::Cpu(c) => Some(c),
            PacerCpu::Auto | PacerCpu::Unpinned => None,
        };
        let pacer = std::thread::Builder::new()
            .name("mgrp-pacer".into())
            .spawn(move || pacer::run_pacer(&d, &l, cpu, || {}))?;
        let dispatcher = std::thread::Builder::new()
            .name("mgrp-dispatch".into())
            .spawn(move || dispatcher.run())?;
        tokio::spawn(demand.watch(events_rx, daemon.queues.clone()));
        let server = tokio::spawn(server::serve(listener, daemon.api()));
        Ok(Self {
            daemon,
            pacer,
            dispatcher,
            receiver,
            server,
        })
    }

    /// Stops it the way SIGTERM stops mgrpd: held riders leave, clients get their
    /// answers, the socket goes.
    pub async fn stop(self) {
        let Self {
            daemon,
            pacer,
            dispatcher,
            receiver,
            server,
        } = self;
        daemon.begin_shutdown();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = pacer.join();
            let _ = dispatcher.join();
        })
        .await;
        let _ = server.await;
        let _ = std::fs::remove_file(&daemon.config.socket);
        // The receiver ends once the data path is gone: after the last probe and
        // continuation it carried.
        drop(daemon);
        let _ = tokio::task::spawn_blocking(move || receiver.join()).await;
    }
}
