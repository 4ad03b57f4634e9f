//! Route on demand: with on-demand hold, a destination is routed into the tunnel only
//! while a train to it is queued or in flight, plus the hold time, so that when nobody
//! measures, application traffic stays in the kernel at full speed. Established
//! connections follow the route change on their next packet. The endpoint decides
//! when (`mgrp_core::endpoint`, [`RouteEvent`]); this handle carries it out.
//!
//! Without route on demand this handle does nothing but own the permanent routes.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use tokio::sync::{Mutex, mpsc};
use tracing::{debug, warn};

use crate::config::Config;
use crate::exchange::{Queues, RouteEvent};
use crate::routes::{RouteError, Routes};

/// Shared handle on the routes mgrpd installed.
#[derive(Debug, Clone)]
pub struct Demand {
    routes: Arc<Mutex<Option<Routes>>>,
    /// Where the destinations whose MGRP peer is not themselves are read (a reload
    /// may change them).
    config: Config,
}

impl Demand {
    /// Takes ownership of the installed routes (if mgrpd manages routes).
    pub fn new(routes: Option<Routes>, config: &Config) -> Self {
        Self {
            routes: Arc::new(Mutex::new(routes)),
            config: config.clone(),
        }
    }

    /// The peer's own address and the destinations it carries.
    fn nets(&self, peer: IpAddr) -> Vec<IpNet> {
        let mut nets = vec![IpNet::from(peer)];
        let peering = self.config.peering();
        nets.extend(
            peering
                .via
                .iter()
                .filter(|(_, p)| **p == peer)
                .map(|(d, _)| IpNet::from(*d)),
        );
        nets
    }

    /// Carries out the endpoint's route changes until the daemon stops. A route that
    /// cannot be added is logged, and its trains run anyway (without riders).
    pub(crate) async fn watch(
        self,
        mut events: mpsc::UnboundedReceiver<RouteEvent>,
        queues: Arc<Queues>,
    ) {
        while let Some(event) = events.recv().await {
            let mut routes = self.routes.lock().await;
            match event {
                RouteEvent::In(peer) => {
                    if let Some(routes) = routes.as_mut() {
                        for net in self.nets(peer) {
                            if !routes.has_route(&net) {
                                match routes.add_route(net).await {
                                    Ok(()) => debug!("route on demand: {net} into the tunnel"),
                                    Err(e) => warn!("route on demand: {e}"),
                                }
                            }
                        }
                    }
                    drop(routes);
                    queues.routed(peer).await;
                }
                RouteEvent::Out(peer) => {
                    if let Some(routes) = routes.as_mut() {
                        for net in self.nets(peer) {
                            match routes.del_route(net).await {
                                Ok(()) => debug!("route on demand: {net} back to the kernel path"),
                                Err(e) => warn!("route on demand: {e}"),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Checks every `period` that each route's source address is still the one its
    /// peer admits riders from, and replaces the routes whose source changed.
    pub(crate) async fn refresh_sources(self, period: std::time::Duration) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Some(routes) = self.routes.lock().await.as_mut() {
                for e in routes.refresh_sources().await {
                    warn!("{e}");
                }
            }
        }
    }

    /// Installs a permanent route into the tunnel.
    pub async fn add_permanent(&mut self, net: IpNet) -> Result<(), RouteError> {
        match self.routes.lock().await.as_mut() {
            Some(r) => r.add_route(net).await,
            None => Ok(()),
        }
    }

    /// Puts a reload's permanent routes in place: removes `gone`, adds `new`. Each
    /// failure is returned; the others go on.
    pub(crate) async fn reroute(&self, gone: &[IpNet], new: &[IpNet]) -> Vec<RouteError> {
        let mut errors = Vec::new();
        if let Some(r) = self.routes.lock().await.as_mut() {
            for net in gone {
                if let Err(e) = r.del_route(*net).await {
                    errors.push(e);
                }
            }
            for net in new {
                if let Err(e) = r.add_route(*net).await {
                    errors.push(e);
                }
            }
        }
        errors
    }

    /// Removes every rule and route mgrpd installed.
    pub async fn remove_all(&self) -> Vec<RouteError> {
        match self.routes.lock().await.as_mut() {
            Some(r) => r.remove_all().await,
            None => Vec::new(),
        }
    }
}
