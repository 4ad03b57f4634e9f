//! Running a node: the HTTP server on the tokio runtime beside the node's threads,
//! until SIGINT or SIGTERM; then the event streams end, the server drains, runs in
//! flight end (their neighbours are told) and the threads are joined.

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::info;

use crate::api::http;
use crate::config::Config;
use crate::node::Node;

/// Serves `config`'s node until a signal stops it.
pub fn run(config: Config) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
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
    let node = Node::start(config)?;
    let (stopping, shutdown) = watch::channel(false);
    let app = http::router(node.shared(), shutdown);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    info!("mgrp-overlay {name}: {links} links, API on {scheme}://{listen}/");
    for (transport, addr) in node.serving() {
        info!("serving {transport} measurements on control port {addr}");
    }
    let served = crate::api::tls::serve(listener, app, tls.as_ref(), async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: shutting down"),
            _ = int.recv() => info!("SIGINT: shutting down"),
        }
        let _ = stopping.send(true);
    })
    .await;
    tokio::task::spawn_blocking(move || node.stop())
        .await
        .context("stopping the node")?;
    info!("stopped");
    served.context("the HTTP server failed")
}
