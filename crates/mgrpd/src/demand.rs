//! Route on demand: with on-demand hold, a destination is routed into the tunnel only
//! while a train to it is queued or in flight, plus the hold time, so that when nobody
//! measures, application traffic stays in the kernel at full speed. Established
//! connections follow the route change on their next packet.
//!
//! Without route on demand this handle does nothing but own the permanent routes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::{Mutex, mpsc};
use tracing::{debug, warn};

use crate::config::Config;
use crate::daemon::TrainEvent;
use crate::routes::{RouteError, Routes};

#[derive(Debug)]
struct State {
    routes: Option<Routes>,
    /// Trains queued or in flight per peer.
    trains: HashMap<IpAddr, usize>,
    /// Bumped whenever a peer's count changes, so a pending removal can tell that a
    /// new train came meanwhile.
    generation: HashMap<IpAddr, u64>,
}

/// Shared handle on the routes mgrpd installed.
#[derive(Debug, Clone)]
pub struct Demand {
    state: Arc<Mutex<State>>,
    on_demand: bool,
    hold: Duration,
    /// Destinations whose MGRP peer is not themselves, by peer.
    via: Arc<HashMap<IpAddr, Vec<IpAddr>>>,
}

impl Demand {
    /// Takes ownership of the installed routes (if mgrpd manages routes).
    pub fn new(routes: Option<Routes>, config: &Config) -> Self {
        let mut via: HashMap<IpAddr, Vec<IpAddr>> = HashMap::new();
        for (dst, peer) in &config.via {
            via.entry(*peer).or_default().push(*dst);
        }
        Self {
            on_demand: config.route_on_demand && routes.is_some(),
            state: Arc::new(Mutex::new(State {
                routes,
                trains: HashMap::new(),
                generation: HashMap::new(),
            })),
            hold: config.policy.hold,
            via: Arc::new(via),
        }
    }

    fn nets(&self, peer: IpAddr) -> Vec<IpNet> {
        let mut nets = vec![IpNet::from(peer)];
        if let Some(dsts) = self.via.get(&peer) {
            nets.extend(dsts.iter().map(|d| IpNet::from(*d)));
        }
        nets
    }

    /// A train to `peer` is about to be queued: make sure its traffic enters the TUN.
    pub async fn train_queued(&self, peer: IpAddr) {
        if !self.on_demand {
            return;
        }
        let mut st = self.state.lock().await;
        *st.trains.entry(peer).or_default() += 1;
        *st.generation.entry(peer).or_default() += 1;
        if let Some(routes) = st.routes.as_mut() {
            for net in self.nets(peer) {
                if !routes.has_route(&net) {
                    match routes.add_route(net).await {
                        Ok(()) => debug!("route on demand: {net} into the tunnel"),
                        Err(e) => warn!("route on demand: {e}"),
                    }
                }
            }
        }
    }

    /// A train counted by [`Self::train_queued`] was refused.
    pub fn train_refused(&self, peer: IpAddr) {
        self.train_done(peer);
    }

    fn train_done(&self, peer: IpAddr) {
        if !self.on_demand {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let generation = {
                let mut st = this.state.lock().await;
                let n = st.trains.entry(peer).or_default();
                *n = n.saturating_sub(1);
                if *n > 0 {
                    return;
                }
                let g = st.generation.entry(peer).or_default();
                *g += 1;
                *g
            };
            // Riders that arrived during the train may still be held this long.
            tokio::time::sleep(this.hold + Duration::from_millis(1)).await;
            let mut st = this.state.lock().await;
            if st.generation.get(&peer) != Some(&generation) {
                return;
            }
            if let Some(routes) = st.routes.as_mut() {
                for net in this.nets(peer) {
                    match routes.del_route(net).await {
                        Ok(()) => debug!("route on demand: {net} back to the kernel path"),
                        Err(e) => warn!("route on demand: {e}"),
                    }
                }
            }
        });
    }

    /// Follows the pacer's train events until the daemon stops.
    pub async fn watch(self, mut events: mpsc::UnboundedReceiver<TrainEvent>) {
        while let Some(TrainEvent::Done(peer)) = events.recv().await {
            self.train_done(peer);
        }
    }

    /// Installs a permanent route into the tunnel.
    pub async fn add_permanent(&mut self, net: IpNet) -> Result<(), RouteError> {
        let mut st = self.state.lock().await;
        match st.routes.as_mut() {
            Some(r) => r.add_route(net).await,
            None => Ok(()),
        }
    }

    /// Removes every rule and route mgrpd installed.
    pub async fn remove_all(&self) -> Vec<RouteError> {
        let mut st = self.state.lock().await;
        match st.routes.as_mut() {
            Some(r) => r.remove_all().await,
            None => Vec::new(),
        }
    }
}
