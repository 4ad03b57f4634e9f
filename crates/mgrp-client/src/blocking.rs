//! The same API without `async`, for tools that do not use tokio. Each client runs a
//! small single-threaded runtime of its own.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};

use crate::{DaemonStats, Error, PeerTraffic, ReceivedProbe, Train, TransactionReport};

fn runtime() -> Result<Runtime, Error> {
    Ok(Builder::new_current_thread().enable_all().build()?)
}

/// A blocking connection to `mgrpd`; see [`crate::Client`].
#[derive(Debug)]
pub struct Client {
    rt: Runtime,
    inner: crate::Client,
}

impl Client {
    /// Connects to the daemon's socket at `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, Error> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Client::connect(path))?;
        Ok(Self { rt, inner })
    }

    /// What the daemon accepts in a train; see [`crate::Client::limits`].
    pub fn limits(&self) -> Option<crate::TrainLimits> {
        self.inner.limits()
    }

    /// Submits a train and waits until it has been sent.
    pub fn send_train(&self, train: Train) -> Result<TransactionReport, Error> {
        self.rt.block_on(self.inner.send_train(train))
    }

    /// The report of this client's most recent finished train, if any.
    pub fn last_report(&self) -> Result<Option<TransactionReport>, Error> {
        self.rt.block_on(self.inner.last_report())
    }

    /// The daemon's counters.
    pub fn stats(&self) -> Result<DaemonStats, Error> {
        self.rt.block_on(self.inner.stats())
    }

    /// The traffic routed to each peer; see [`crate::Client::traffic`].
    pub fn traffic(&self) -> Result<(Duration, Vec<PeerTraffic>), Error> {
        self.rt.block_on(self.inner.traffic())
    }

    /// Starts receiving the probes that arrive for `port`.
    pub fn listen(&self, port: u16) -> Result<ProbeStream, Error> {
        self.listen_from(port, None)
    }

    /// Like [`Self::listen`], only for probes from `source` if given.
    pub fn listen_from(&self, port: u16, source: Option<IpAddr>) -> Result<ProbeStream, Error> {
        let rt = runtime()?;
        let inner = rt.block_on(self.inner.listen_from(port, source))?;
        Ok(ProbeStream { rt, inner })
    }
}

/// A blocking stream of probes; see [`crate::ProbeStream`].
#[derive(Debug)]
pub struct ProbeStream {
    rt: Runtime,
    inner: crate::ProbeStream,
}

impl ProbeStream {
    /// The next probe; `None` when the daemon closed the stream.
    pub fn next_probe(&mut self) -> Result<Option<ReceivedProbe>, Error> {
        self.rt.block_on(self.inner.next_probe())
    }

    /// The next probe, or `None` if none arrives within `timeout`.
    pub fn next_probe_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<ReceivedProbe>, Error> {
        self.rt.block_on(self.inner.next_probe_timeout(timeout))
    }
}
