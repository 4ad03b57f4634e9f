//! How the API's connections are served: each in a task of its own on hyper's
//! HTTP/1.1 server with a timer, so a client must send a request's headers within
//! [`HEADER_READ_TIMEOUT`] of connecting or of its last answer (idle keep-alive
//! connections close then too), and bounded in number, in all and per network
//! (an IPv4 address, an IPv6 /64), so that idle or slow clients cannot take every
//! descriptor and leave the node's other ports (its measurement senders) without one.
//! A connection over a bound is closed at once. An event stream is a response being
//! written, not an idle connection: it lasts as long as its client reads it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::serve::Listener;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use mgrp_core::requester::Requester;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// How long a client has to send a request's headers, from its connection or from
/// the end of its last answer.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once at most, in all.
pub const MAX_CONNECTIONS: usize = 4096;

/// Connections open at once at most from one network: an IPv4 address or an IPv6
/// /64. Above what the API's own bounds answer (64 event streams and 64 other
/// requests at once, then 503), so a host that asks for too much is told so before
/// its connections are closed; a browser opens 6, a route controller a few.
pub const MAX_CONNECTIONS_PER_NETWORK: usize = 256;

/// The bounds the API serves under (the constants above by default; tests shorten
/// them).
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`MAX_CONNECTIONS_PER_NETWORK`].
    pub max_per_network: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_per_network: MAX_CONNECTIONS_PER_NETWORK,
        }
    }
}

/// What is open, in all and per network: connections here, TLS handshakes in
/// `tls`.
#[derive(Debug, Default)]
pub(crate) struct Open {
    all: usize,
    per: HashMap<Requester, usize>,
}

/// One open thing's place; given back when dropped.
pub(crate) struct Place {
    open: Arc<Mutex<Open>>,
    who: Requester,
}

impl Place {
    /// A place for one more from `from`, unless `in_all` are open or `per_network`
    /// from its network.
    pub(crate) fn take(
        open: &Arc<Mutex<Open>>,
        (in_all, per_network): (usize, usize),
        from: IpAddr,
    ) -> Option<Self> {
        let who = Requester::of(from, 64);
        let mut o = mgrp_rt::lock(open);
        let mine = o.per.get(&who).copied().unwrap_or(0);
        if o.all >= in_all || mine >= per_network {
            return None;
        }
        o.all += 1;
        *o.per.entry(who).or_insert(0) += 1;
        Some(Self {
            open: open.clone(),
            who,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut o = mgrp_rt::lock(&self.open);
        o.all -= 1;
        if let Some(n) = o.per.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                o.per.remove(&self.who);
            }
        }
    }
}

/// Serves `app` on the connections `listener` hands out, under `limits`, until
/// `shutdown` resolves; then each connection finishes the request it is answering
/// and closes (event streams end as the router's own shutdown tells them), and this
/// returns once all have.
pub async fn serve_connections<L>(
    mut listener: L,
    app: axum::Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
    L::Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let open = Arc::new(Mutex::new(Open::default()));
    let (closing, close) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // The listener waits out accept errors itself (out of descriptors, say).
        let (io, peer) = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let bounds = (limits.max_connections, limits.max_per_network);
        let Some(place) = Place::take(&open, bounds, peer.ip()) else {
            tracing::debug!(
                "API connection from {peer} closed: {} open in all, or {} from its network, the most allowed",
                limits.max_connections,
                limits.max_per_network
            );
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let mut close = close.clone();
        tokio::spawn(async move {
            let _place = place;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let conn = http.serve_connection(TokioIo::new(io), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("API connection from {peer}: {e}");
                    }
                }
                () = async {
                    // The guard it gives is dropped here, before anything awaits.
                    let _ = close.wait_for(|c| *c).await.map(drop);
                } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = closing.send(true);
    drop(close);
    // Every connection's task holds a receiver until it ends.
    closing.closed().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn places_are_bounded_per_network_and_in_all_and_given_back() {
        let open = Arc::new(Mutex::new(Open::default()));
        let limits = (5, 2);
        // Two addresses of one /64 are one network.
        let a = Place::take(&open, limits, ip("2001:db8::1")).unwrap();
        let b = Place::take(&open, limits, ip("2001:db8::2")).unwrap();
        assert!(Place::take(&open, limits, ip("2001:db8::3")).is_none());
        drop(a);
        let a = Place::take(&open, limits, ip("2001:db8::3")).unwrap();
        // In all: five, whatever the networks.
        let more: Vec<Place> = (1..=3)
            .map(|i| Place::take(&open, limits, ip(&format!("192.0.2.{i}"))).unwrap())
            .collect();
        assert!(Place::take(&open, limits, ip("192.0.2.9")).is_none());
        drop((a, b, more));
        let o = mgrp_rt::lock(&open);
        assert_eq!((o.all, o.per.len()), (0, 0));
    }
}
