//! The API's way to the pacer: the checks a train passes before it is queued (its
//! shape, its peer, its user's rate budget), its submission through the pacer's
//! control queue, and cancellation.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mgrp_core::endpoint::SubmitError;
use mgrp_core::planner::Transaction;
use mgrp_core::ratelimit::{OverBudget, TrainBudget};
use mgrp_core::stats::TransactionReport;
use tokio::sync::oneshot;

use crate::config::Config;
use crate::counters::{Counters, bump};
use crate::exchange::{Control, Queues};
use crate::lifecycle::Lifecycle;

/// A train accepted by [`Trains::submit`].
#[derive(Debug)]
pub struct Submitted {
    /// Its transaction id.
    pub id: u32,
    /// Where its report arrives once it was sent (or cancelled).
    pub report: oneshot::Receiver<TransactionReport>,
}

/// Why a train was refused: one of the daemon's own rules (its limits, its peers,
/// its users' rates), or the endpoint's refusal.
#[derive(Debug, thiserror::Error)]
pub enum TrainRefusal {
    /// The train breaks one of the daemon's limits or is not for a peer.
    #[error("{0}")]
    Invalid(String),
    /// Over the user's or the total rate limit.
    #[error("{0}")]
    RateLimited(String),
    /// The endpoint refused it (or would: the pacer's queue is full, or the daemon
    /// is stopping).
    #[error(transparent)]
    Endpoint(#[from] SubmitError),
}

/// What the API server uses to queue trains.
#[derive(Debug)]
pub(crate) struct Trains {
    config: Arc<Config>,
    counters: Arc<Counters>,
    queues: Arc<Queues>,
    life: Arc<Lifecycle>,
    /// Rate budgets of the API's users (by uid) and of all of them.
    budgets: Mutex<Budgets>,
}

impl Trains {
    pub(crate) fn new(
        config: Arc<Config>,
        counters: Arc<Counters>,
        queues: Arc<Queues>,
        life: Arc<Lifecycle>,
    ) -> Self {
        Self {
            budgets: Mutex::new(Budgets::new(&config)),
            config,
            counters,
            queues,
            life,
        }
    }

    /// Refuses trains to a host that is no peer (it would drop the probes, and with
    /// route on demand the host's traffic to it would be diverted into probes).
    pub(crate) fn check_peer(&self, peer: IpAddr) -> Result<(), TrainRefusal> {
        let peering = self.config.peering();
        if peering.peers.is_peer(peer) {
            return Ok(());
        }
        bump(&self.counters.trains_refused_not_peer);
        Err(TrainRefusal::Invalid(format!(
            "{peer} is not a peer of this mgrpd: probes would go to a host that drops them; add it with --peer or a --route that covers it"
        )))
    }

    /// Charges a train of `probes` probes and `bytes` bytes to user `uid` and to the
    /// total, or refuses it (nothing is charged then) with when to retry.
    pub(crate) fn charge(
        &self,
        uid: Option<u32>,
        probes: u64,
        bytes: u64,
    ) -> Result<(), TrainRefusal> {
        let now = mgrp_rt::mono_now();
        let mut b = mgrp_rt::lock(&self.budgets);
        let Budgets {
            per_user,
            total,
            user_rate,
            burst,
        } = &mut *b;
        let user = per_user
            .entry(uid.unwrap_or(u32::MAX))
            .or_insert_with(|| TrainBudget::new(user_rate.0, burst.0, user_rate.1, burst.1));
        let who = uid.map_or_else(|| "this client".to_string(), |u| format!("user {u}"));
        let refused = match (
            user.check(now, probes, bytes),
            total.check(now, probes, bytes),
        ) {
            (Ok(()), Ok(())) => None,
            (Err(e), _) => Some((e, who, "-per-user")),
            (_, Err(e)) => Some((e, "all users together".to_string(), "")),
        };
        if let Some((e, who, key)) = refused {
            bump(&self.counters.trains_refused_rate_limit);
            let (what, wait) = match e {
                OverBudget::Probes(w) => (format!("limits.probes-per-second{key}"), w),
                OverBudget::Bytes(w) => (format!("limits.probe-bytes-per-second{key}"), w),
            };
            let when = if wait == Duration::MAX {
                "never: the train is larger than the burst; split it".to_string()
            } else {
                format!("in {} ms", wait.as_millis().max(1))
            };
            return Err(TrainRefusal::RateLimited(format!(
                "{who} reached the rate limit ({what}) with a train of {probes} probes, {bytes} bytes; retry {when}"
            )));
        }
        user.take(probes, bytes);
        total.take(probes, bytes);
        drop(b);
        Ok(())
    }

    /// Refuses a train of more probes than allowed. Called on a request's counts
    /// before they are unfolded too: a count may be large.
    pub(crate) fn check_probe_count(&self, probes: u64) -> Result<(), TrainRefusal> {
        let most = self.config.max_probes_per_train;
        if probes <= most as u64 {
            return Ok(());
        }
        bump(&self.counters.trains_refused_other);
        Err(TrainRefusal::Invalid(format!(
            "train of {probes} probes exceeds the limit of {most} (limits.max-probes-per-train)"
        )))
    }

    /// Queues `client`'s train; the report arrives on the returned channel once it was
    /// sent.
    pub(crate) async fn submit(
        &self,
        client: u64,
        destination: IpAddr,
        tx: Transaction,
    ) -> Result<Submitted, TrainRefusal> {
        let peering = self.config.peering();
        let limits = &self.config;
        self.check_probe_count(tx.probes.len() as u64)?;
        if let Some((i, p)) = tx
            .probes
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, p)| p.gap < limits.min_gap)
        {
            bump(&self.counters.trains_refused_other);
            return Err(TrainRefusal::Invalid(format!(
                "probe {i} has a gap of {:?}, below the smallest allowed {:?} (limits.min-gap)",
                p.gap, limits.min_gap
            )));
        }
        if let Some((i, p)) = tx
            .probes
            .iter()
            .enumerate()
            .find(|(_, p)| p.gap > limits.max_gap)
        {
            bump(&self.counters.trains_refused_other);
            return Err(TrainRefusal::Invalid(format!(
                "probe {i} has a gap of {:?}, above the largest allowed {:?} (limits.max-gap)",
                p.gap, limits.max_gap
            )));
        }
        let total: Duration = tx.probes.iter().map(|p| p.gap).sum();
        if total > limits.max_train_duration {
            bump(&self.counters.trains_refused_other);
            return Err(TrainRefusal::Invalid(format!(
                "the train's gaps add up to {total:?}, more than {:?} (limits.max-train-duration)",
                limits.max_train_duration
            )));
        }
        let peer = peering.peer_of(destination);
        self.check_peer(peer)?;
        if self.life.is_stopping() {
            return Err(SubmitError::ShuttingDown.into());
        }
        let (reply, accepted) = oneshot::channel();
        let (done, report) = oneshot::channel();
        let control = Control::Submit {
            client,
            peer,
            tx,
            reply,
            report: done,
        };
        if self.queues.push_control(control).is_err() {
            bump(&self.counters.trains_refused_other);
            return Err(SubmitError::Busy(self.config.max_queued_trains).into());
        }
        let refused = match accepted.await {
            Ok(Ok(id)) => {
                bump(&self.counters.trains_accepted);
                return Ok(Submitted { id, report });
            }
            Ok(Err(e)) => e,
            // The pacer stopped before it took the train.
            Err(_) => SubmitError::ShuttingDown,
        };
        bump(&self.counters.trains_refused_other);
        Err(refused.into())
    }

    /// Cancels `client`'s train `id` if it has not finished; its submitter gets a
    /// report that says so.
    pub(crate) fn cancel(&self, client: u64, id: u32) {
        // A full queue means a busy pacer; the train then runs to its end.
        let _ = self.queues.push_control(Control::Cancel { client, id });
    }
}

/// The API's rate budgets.
#[derive(Debug)]
struct Budgets {
    per_user: HashMap<u32, TrainBudget>,
    total: TrainBudget,
    user_rate: (f64, f64),
    /// Bursts of every budget: two of the largest trains.
    burst: (f64, f64),
}

impl Budgets {
    fn new(config: &Config) -> Self {
        let probes = 2.0 * config.max_probes_per_train as f64;
        let burst = (probes, probes * f64::from(config.mtu));
        Self {
            per_user: HashMap::new(),
            total: TrainBudget::new(config.total_rate.0, burst.0, config.total_rate.1, burst.1),
            user_rate: config.per_user_rate,
            burst,
        }
    }
}
