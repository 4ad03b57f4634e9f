//! TLS for the node's API with its certificate and key ([`ServerTls`], read with the
//! configuration): rustls with the ring provider (as route control's polls of
//! members' APIs, `mgrp_service::tls`), TLS 1.2 and 1.3, no client certificates
//! (requests carry the bearer token, now only inside TLS). Handshakes run in tasks of
//! their own, each bounded in time, their number bounded in all and per host, so a
//! client that stalls in one holds up no other.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};

use crate::api::conns::{ConnLimits, Open, Place, serve_connections};

pub use crate::config::tls::ServerTls;

/// How long a client may take over its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Handshakes in progress at most; further connections wait to be accepted.
pub const MAX_HANDSHAKES: usize = 64;

/// Handshakes in progress from one network (an IPv4 address, an IPv6 /64) at most;
/// its further connections are closed at once, so one host cannot take every
/// handshake slot.
pub const MAX_HANDSHAKES_PER_HOST: usize = 8;

/// A listener for `axum::serve` that hands out TLS streams: connections are taken
/// as they come and each handshake runs in a task of its own, [`MAX_HANDSHAKES`] at
/// most (those done and not yet taken by the server included).
#[derive(Debug)]
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        SocketAddr,
    )>,
}

impl TlsListener {
    /// Serves TLS with `tls` on `tcp`'s connections.
    pub fn new(tcp: tokio::net::TcpListener, tls: &ServerTls) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
        let (tx, ready) = mpsc::channel(MAX_HANDSHAKES);
        let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let per_host: Arc<std::sync::Mutex<Open>> = Arc::default();
        tokio::spawn(async move {
            loop {
                // Ends with the server (its listener dropped), even while idle.
                let permit = tokio::select! {
                    p = handshakes.clone().acquire_owned() => p,
                    () = tx.closed() => return,
                };
                let Ok(permit) = permit else { return };
                let accepted = tokio::select! {
                    a = tcp.accept() => a,
                    () = tx.closed() => return,
                };
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors, mostly: wait rather than spin.
                        tracing::warn!("accepting an API connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Some(slot) =
                    Place::take(&per_host, (usize::MAX, MAX_HANDSHAKES_PER_HOST), peer.ip())
                else {
                    tracing::debug!(
                        "{} has {MAX_HANDSHAKES_PER_HOST} TLS handshakes under way: connection closed",
                        peer.ip()
                    );
                    continue;
                };
                let (acceptor, done_tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let done =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    drop(slot);
                    match done {
                        Ok(Ok(tls)) => {
                            // The permit is held until the stream is handed over.
                            let _ = done_tx.send((tls, peer)).await;
                            drop(permit);
                        }
                        Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => tracing::debug!(
                            "TLS handshake with {peer} took over {HANDSHAKE_TIMEOUT:?}: dropped"
                        ),
                    }
                });
            }
        });
        Ok(Self { local, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(x) => x,
            // The accepting task is gone only when the runtime is: nothing comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Serves `app` on `listener` until `shutdown` resolves: over TLS with `tls`, else in
/// clear HTTP, with the connection bounds of [`ConnLimits::default`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<&ServerTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, tls, ConnLimits::default(), shutdown).await
}

/// [`serve`] under other connection bounds.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<&ServerTls>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => serve_connections(listener, app, limits, shutdown).await,
        Some(t) => serve_connections(TlsListener::new(listener, t)?, app, limits, shutdown).await,
    }
}
