//! Serving the neighbours' measurements of the paths out of this node: one
//! server per transport, what each did counted for the API and the metrics.

use std::collections::HashSet;

use mgrp_core::requester::Requester;
use mgrp_rt::lock;
use pathload_rs::tool::{Refusal, ServeEvent, Server};
use tracing::{debug, info, warn};

use crate::state::shared::{COUNTED_REQUESTERS, Served, Shared};

/// Serves on `server` (`transport`) until the node stops.
pub(crate) fn serve(server: &Server, transport: &str, s: &Shared) {
    let addr = server
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    info!("serving measurements on {addr}");
    let tally =
        |f: &dyn Fn(&mut Served)| f(lock(&s.served).entry(transport.to_string()).or_default());
    tally(&|_| {});
    // Who measures this node: said at start when anyone may, so counted.
    let mut seen: HashSet<Requester> = HashSet::new();
    let prefix = s.config().serve_ipv6_prefix;
    let result = server.serve(true, &s.stop, &mut |ev| match ev {
        ServeEvent::Connected(peer, tool) => {
            debug!("{addr}: receiver {peer} measuring ({tool})");
            if seen.len() < COUNTED_REQUESTERS && seen.insert(Requester::of(peer.ip(), prefix)) {
                let n = seen.len() as u64;
                lock(&s.served)
                    .entry(transport.to_string())
                    .or_default()
                    .requesters = n;
            }
        }
        ServeEvent::Done(peer, Ok(n)) => {
            tally(&|t| t.measurements += 1);
            debug!("{addr}: {peer} done, {n} batches of probes");
        }
        ServeEvent::Done(peer, Err(e)) => {
            tally(&|t| t.measurements += 1);
            info!("{addr}: measurement for {peer} ended: {e}");
        }
        ServeEvent::Refused(peer, why) => {
            let kind = Refusal::of(&why).index();
            tally(&|t| t.refused[kind] += 1);
            debug!("{addr}: refused {peer}: {why}");
        }
        ServeEvent::Failed(peer, why) => {
            tally(&|t| t.failures += 1);
            warn!("{addr}: could not serve {peer}'s measurement of the path from here: {why}");
        }
        ServeEvent::Warning(peer, why) => warn!("{addr}: measurement for {peer}: {why}"),
    });
    if let Err(e) = result {
        warn!("serving on {addr} stopped: {e:#}");
    }
}
