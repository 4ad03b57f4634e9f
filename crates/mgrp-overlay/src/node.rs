//! One node running, wired: the servers its neighbours measure from, the
//! scheduler's thread ([`crate::measure`]), the neighbours' kernels asked
//! ([`crate::derive`]), route control (`mgrp_route`), around the state the API reads
//! ([`crate::state`]). [`Node::stop`] ends them all.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use mgrp_rt::unix_now;
use pathload_rs::control::Transport;
use pathload_rs::tool::{ServeOptions, Server};
use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::config::Config;
use crate::measure::schedule::Scheduler;
use crate::state::shared::{Event, STREAM_BACKLOG, Shared};
use crate::state::store::{Record, Store};
use crate::threads::neighbours::watch_kernels;
use crate::threads::runner::schedule;
use crate::threads::serve::serve;
use crate::threads::traffic::watch_traffic;

/// Links' first runs are spread over this much time after start.
const FIRST_WITHIN: Duration = Duration::from_secs(5);

/// A running node; [`Node::stop`] ends it.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    serving: Vec<(Transport, SocketAddr)>,
}

impl Node {
    /// Binds the servers the configuration asks for (an error if a port is taken) and
    /// starts serving and measuring.
    pub fn start(config: Config) -> anyhow::Result<Self> {
        let config_serve = config.serve.clone();
        let servers = config
            .serve
            .iter()
            .map(|&(transport, port)| {
                let opts = ServeOptions {
                    port,
                    transport,
                    socket: config.socket.clone(),
                    piggyback: config.serve_piggyback,
                    allow: config.serve_allow.clone(),
                    max_bytes_per_hour: config.serve_bytes_per_hour,
                    max_probe_bps: config.serve_probe_bps,
                    ipv6_prefix: config.serve_ipv6_prefix,
                    ..ServeOptions::new(transport)
                };
                if let Some(warning) = opts.open_to_all() {
                    warn!("serving {transport}: {warning} ([serve] allow)");
                }
                Server::bind(opts).with_context(|| {
                    format!("cannot serve {transport} measurements on port {port}")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let serving = config
            .serve
            .iter()
            .zip(&servers)
            .map(|(&(transport, _), server)| Ok((transport, server.local_addr()?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let seed = mgrp_rt::wall_now().as_nanos() ^ u64::from(std::process::id());
        let sched = Scheduler::new(
            config.links.iter().map(|l| l.timing.clone()).collect(),
            config.max_running,
            mgrp_rt::mono_now(),
            FIRST_WITHIN,
            seed,
        );
        let store = match &config.state_dir {
            Some(dir) => Some(Store::open(dir).with_context(|| {
                format!(
                    "cannot keep history in {} (state-dir): create it writable for this user, or change state-dir",
                    dir.display()
                )
            })?),
            None => {
                info!("history is kept in memory only: set state-dir to keep it across restarts");
                None
            }
        };
        let records: Vec<Record> = config
            .links
            .iter()
            .map(
                |l| match store.as_ref().map(|s| s.load(&l.name, config.history)) {
                    Some(Ok(Some(r))) => {
                        info!("{}: {} runs of history restored", l.name, r.history.len());
                        r
                    }
                    Some(Err(e)) => {
                        warn!("{}: {e}", l.name);
                        Record::default()
                    }
                    Some(Ok(None)) | None => Record::default(),
                },
            )
            .collect();
        let last_seq = records
            .iter()
            .filter_map(|r| r.history.back().map(|e| e.seq))
            .max()
            .unwrap_or(0);
        let shared_routing = config
            .routing
            .as_ref()
            .map(|r| Arc::new(mgrp_route::control::Control::new(r.clone(), &config.name)));
        let shared = Arc::new(Shared {
            config,
            sched: Mutex::new(sched),
            wake: Condvar::new(),
            records: Mutex::new(records),
            kernel: Mutex::new(HashMap::new()),
            passive: Mutex::new(HashMap::new()),
            passive_good: Mutex::new(HashMap::new()),
            timing: Mutex::new(HashMap::new()),
            events: broadcast::channel(STREAM_BACKLOG).0,
            stop: AtomicBool::new(false),
            seq: AtomicU64::new(last_seq),
            store,
            started_at: unix_now(),
            routes: shared_routing.clone(),
            served: Mutex::default(),
        });
        let mut threads = Vec::new();
        if let Some(control) = shared_routing {
            let s = shared.clone();
            threads.extend(mgrp_route::control::start(control, move |sw| {
                let _ = s.events.send(Event::Route(sw));
            })?);
        }
        for (server, (transport, _)) in servers.into_iter().zip(&config_serve) {
            let (s, transport) = (shared.clone(), transport.to_string());
            threads.push(
                std::thread::Builder::new()
                    .name("overlay-serve".into())
                    .spawn(move || serve(&server, &transport, &s))?,
            );
        }
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("overlay-schedule".into())
                .spawn(move || schedule(&s))?,
        );
        if shared
            .config
            .links
            .iter()
            .any(|l| l.timing.ride_min_bps.is_some())
        {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("overlay-traffic".into())
                    .spawn(move || watch_traffic(&s))?,
            );
        }
        let every = shared
            .config
            .prediction
            .kernel_poll
            .or(shared.config.passive.then_some(Duration::from_secs(2)));
        if let Some(every) = every
            && !shared.config.links.is_empty()
        {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("overlay-kernel".into())
                    .spawn(move || watch_kernels(&s, every))?,
            );
        }
        Ok(Self {
            shared,
            threads,
            serving,
        })
    }

    /// The transports this node serves and the control addresses they listen on (the
    /// port the kernel chose when the configuration gave port 0).
    pub fn serving(&self) -> &[(Transport, SocketAddr)] {
        &self.serving
    }

    /// The state the API reads.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops serving and measuring: runs in flight end at their next step (their
    /// neighbours are told), then every thread is joined.
    pub fn stop(self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(r) = &self.shared.routes {
            r.stop();
        }
        self.shared.wake.notify_all();
        for t in self.threads {
            let _ = t.join();
        }
    }
}
