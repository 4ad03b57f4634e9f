//! Running a node: the HTTP server on the tokio runtime beside the node's threads,
//! until SIGINT or SIGTERM; then the event streams end, the server drains, runs in
//! flight end (their neighbours are told) and the threads are joined. SIGHUP reads
//! the configuration again and puts its links and serving limits in force
//! ([`Node::reload`]).

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::http;
use crate::config::Config;
use crate::node::Node;

/// Reads the configuration again for a reload, or says why it cannot.
pub type Reread = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// Serves `config`'s node until a signal stops it; at SIGHUP `reread` gives the
/// configuration to reload.
pub fn run(config: Config, reread: Reread) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(serve(config, reread))
}

/// Reads the configuration again and reloads the node with it, saying what changed
/// (`why`: what asked). A periodic read (`quiet`) that changes no link says nothing.
fn reload(reloader: &crate::node::Reloader, reread: &Reread, why: &str, quiet: bool) {
    let config = match reread() {
        Ok(c) => c,
        Err(e) => {
            warn!("{why}: the configuration is not reloaded, nothing changed: {e}");
            return;
        }
    };
    match reloader.reload(config) {
        Ok(r)
            if quiet
                && r.added.is_empty()
                && r.removed.is_empty()
                && r.changed.is_empty()
                && r.need_restart.is_empty() =>
        {
            tracing::debug!("{why}: no link changed");
        }
        Ok(r) => {
            let list = |v: &[String]| {
                if v.is_empty() {
                    "none".to_owned()
                } else {
                    v.join(", ")
                }
            };
            info!(
                "{why}: configuration reloaded: {} links go on, added: {}, removed: {}, changed: {}",
                r.kept,
                list(&r.added),
                list(&r.removed),
                list(&r.changed)
            );
            if !r.need_restart.is_empty() {
                warn!(
                    "{why}: {} changed but take a restart; they stay as they were",
                    r.need_restart.join(", ")
                );
            }
        }
        Err(e) => warn!("{why}: the configuration is not reloaded, nothing changed: {e}"),
    }
}

async fn serve(config: Config, reread: Reread) -> anyhow::Result<()> {
    config.check_exposure()?;
    let listen = config.listen;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| {
        format!("cannot listen on {listen}; is another mgrp-overlay running? choose another with --listen")
    })?;
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    // The API's connections and the measurement senders' share one table.
    match mgrp_rt::thread::raise_descriptor_limit() {
        Ok(n) if n < 4096 => tracing::warn!(
            "at most {n} open descriptors: the API and the measurement senders may run short under many connections (raise LimitNOFILE or `ulimit -Hn`)"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the limit of open descriptors: {e}"),
    }
    let (name, links, tls) = (config.name.clone(), config.links.len(), config.tls.clone());
    let refresh = config.mesh_refresh;
    for f in crate::features::check(&config) {
        match f.off {
            None => tracing::info!("{}", crate::features::describe(&f)),
            Some(_) => tracing::warn!("{}", crate::features::describe(&f)),
        }
    }
    let node = Node::start(config)?;
    let (stopping, shutdown) = watch::channel(false);
    let app = http::router(node.shared(), shutdown);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let reloader = node.reloader();
    let reread = std::sync::Arc::new(reread);
    if let Some(every) = refresh {
        let (r, again) = (reloader.clone(), reread.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let (r, again) = (r.clone(), again.clone());
                // Files read, a description fetched: off the runtime's one thread.
                let _ = tokio::task::spawn_blocking(move || {
                    reload(&r, &again, "mesh-refresh", true);
                })
                .await;
            }
        });
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    info!("mgrp-overlay {name}: {links} links, API on {scheme}://{listen}/");
    for (transport, addr) in node.serving() {
        info!("serving {transport} measurements on control port {addr}");
    }
    let notifier = mgrp_service::notify::Notifier::from_env();
    notifier.ready(&format!(
        "{name}: {links} links, API on {scheme}://{listen}/"
    ));
    // The watchdog's keep-alive, when the unit asks for one.
    let mut watchdog = tokio::time::interval(
        notifier
            .watchdog()
            .unwrap_or(std::time::Duration::from_secs(3600)),
    );
    let served = crate::api::tls::serve(listener, app, tls.as_ref(), async move {
        loop {
            tokio::select! {
                _ = term.recv() => break info!("SIGTERM: shutting down"),
                _ = int.recv() => break info!("SIGINT: shutting down"),
                _ = hup.recv() => {
                    notifier.reloading();
                    let (r, again) = (reloader.clone(), reread.clone());
                    // Files are read and locks taken: off the runtime's one thread.
                    if let Err(e) = tokio::task::spawn_blocking(move || reload(&r, &again, "SIGHUP", false)).await {
                        warn!("SIGHUP: the reload failed: {e}");
                    }
                    notifier.ready("configuration reloaded");
                }
                _ = watchdog.tick(), if notifier.watchdog().is_some() => notifier.alive(),
            }
        }
        notifier.stopping();
        let _ = stopping.send(true);
    })
    .await;
    tokio::task::spawn_blocking(move || node.stop())
        .await
        .context("stopping the node")?;
    info!("stopped");
    served.context("the HTTP server failed")
}
