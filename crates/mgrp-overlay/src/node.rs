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
use mgrp_rt::{lock, unix_now};
use pathload_rs::control::Transport;
use pathload_rs::tool::{ServeOptions, Server};
use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::config::{Config, Link};
use crate::measure::schedule::Scheduler;
use crate::state::shared::{Event, STREAM_BACKLOG, Shared};
use crate::state::store::{Record, Store};
use crate::threads::neighbours::watch_kernels;
use crate::threads::runner::schedule;
use crate::threads::serve::serve;
use crate::threads::traffic::watch_traffic;

/// Links' first runs are spread over this much time after start.
pub const FIRST_WITHIN: Duration = Duration::from_secs(5);

/// A running node; [`Node::stop`] ends it.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    serving: Vec<(Transport, SocketAddr)>,
    servers: Vec<Arc<Server>>,
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reloaded {
    /// Links that went on as they were.
    pub kept: usize,
    /// Links that started.
    pub added: Vec<String>,
    /// Links that stopped.
    pub removed: Vec<String>,
    /// Links that measure otherwise now (stopped, and started anew).
    pub changed: Vec<String>,
    /// Settings that changed in the file but take a restart (their old values stay).
    pub need_restart: Vec<&'static str>,
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
                    limits: config.serve_limits,
                    ..ServeOptions::new(transport)
                };
                if let Some(warning) = opts.open_to_all() {
                    warn!("serving {transport}: {warning} ([serve] allow)");
                }
                Server::bind(opts).with_context(|| {
                    format!("cannot serve {transport} measurements on port {port}")
                })
            })
            .map(|r| r.map(Arc::new))
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
            .map(|l| restored(store.as_ref(), l, &config))
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
            config: std::sync::RwLock::new(Arc::new(config)),
            sched: Mutex::new(sched),
            wake: Condvar::new(),
            records: Mutex::new(records),
            kernel: Mutex::new(HashMap::new()),
            flows: Mutex::new(HashMap::new()),
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
            runs: Mutex::default(),
            matrix: Mutex::default(),
        });
        let config = shared.config();
        let mut threads = Vec::new();
        if let Some(control) = shared_routing {
            let s = shared.clone();
            threads.extend(mgrp_route::control::start(control, move |sw| {
                let _ = s.events.send(Event::Route(sw));
            })?);
        }
        for (server, (transport, _)) in servers.iter().cloned().zip(&config_serve) {
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
        // Whether links wait for traffic may change with a reload: the thread idles
        // while none does.
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("overlay-traffic".into())
                .spawn(move || watch_traffic(&s))?,
        );
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("overlay-matrix".into())
                .spawn(move || crate::threads::collect::collect(&s))?,
        );
        let every = config
            .prediction
            .kernel_poll
            .or(config.passive.then_some(Duration::from_secs(2)));
        if let Some(every) = every {
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
            servers,
        })
    }

    /// Puts `new` in force while the node runs: links that measure as they did go
    /// on (their schedule, a run in flight, their history), new ones start within
    /// `FIRST_WITHIN`, removed and changed ones stop (a run in flight ends at its
    /// next step, its neighbour told); whom this node serves and how much follow.
    /// Settings that take a restart keep their values and are named. An error (the
    /// API would be left open) changes nothing.
    pub fn reload(&self, new: Config) -> Result<Reloaded, String> {
        self.reloader().reload(new)
    }

    /// What reloads this node, apart from it (for a signal handler).
    pub fn reloader(&self) -> Reloader {
        Reloader {
            shared: self.shared.clone(),
            servers: self.servers.clone(),
        }
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
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.end_runs(None);
        if let Some(r) = &self.shared.routes {
            r.stop();
        }
        self.shared.wake.notify_all();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Reloads a running node ([`Node::reload`]); a clone may live in another thread.
#[derive(Debug, Clone)]
pub struct Reloader {
    shared: Arc<Shared>,
    servers: Vec<Arc<Server>>,
}

impl Reloader {
    /// See [`Node::reload`].
    pub fn reload(&self, new: Config) -> Result<Reloaded, String> {
        let s = &self.shared;
        let mut sched = lock(&s.sched);
        let old = s.config();
        let plan = crate::config::reload::plan(&old, new)?;
        let mut records = lock(&s.records);
        let mut before: Vec<Option<Record>> = std::mem::take(&mut *records)
            .into_iter()
            .map(Some)
            .collect();
        *records = plan
            .config
            .links
            .iter()
            .zip(&plan.carry)
            .map(|(l, c)| {
                c.and_then(|i| before.get_mut(i)?.take())
                    .unwrap_or_else(|| restored(s.store.as_ref(), l, &plan.config))
            })
            .collect();
        drop(records);
        sched.reshape(
            plan.config.links.iter().map(|l| l.timing.clone()).collect(),
            &plan.carry,
            plan.config.max_running,
            mgrp_rt::mono_now(),
            FIRST_WITHIN,
        );
        let config = Arc::new(plan.config.clone());
        *s.config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config.clone();
        // Under the scheduler's lock: no run of a changed link's new self has started.
        s.end_runs(Some(&plan.ended()));
        drop(sched);
        for server in &self.servers {
            server.set_access(
                config.serve_allow.clone(),
                config.serve_bytes_per_hour,
                config.serve_probe_bps,
            );
            // Checked when the file was read.
            if let Err(e) = server.set_limits(config.serve_limits) {
                warn!("{e:#}; the limits in force stay");
            }
        }
        s.wake.notify_all();
        Ok(Reloaded {
            kept: plan.carry.iter().filter(|c| c.is_some()).count(),
            added: plan.added,
            removed: plan.removed,
            changed: plan.changed,
            need_restart: plan.need_restart,
        })
    }
}

/// `link`'s record as `store` kept it (at most `history` runs of `config`), or a new
/// one. A link with a name of its own and no record under it takes the record kept
/// under the name it would have had without one, if no link of `config` has that
/// name: history from before a mesh named the link goes on under its new name.
fn restored(store: Option<&Store>, link: &Link, config: &Config) -> Record {
    let Some(store) = store else {
        return Record::default();
    };
    let name = &link.name;
    let old = link.default_name();
    let found = store.load(name, config.history).and_then(|r| match r {
        None if old != *name && config.link(&old).is_none() => {
            let moved = store.rename(&old, name, config.history)?;
            if moved.is_some() {
                info!("{name}: the history kept as {old} is this link's now");
            }
            Ok(moved)
        }
        r => Ok(r),
    });
    match found {
        Ok(Some(r)) => {
            info!("{name}: {} runs of history restored", r.history.len());
            r
        }
        Err(e) => {
            warn!("{name}: {e}");
            Record::default()
        }
        Ok(None) => Record::default(),
    }
}
