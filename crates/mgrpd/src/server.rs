//! The Unix-socket API server: JSON lines (see `mgrp_core::api`), one task per
//! connection, a writer task per connection so that reports and probe notifications
//! interleave safely. A bad request gets an error answer and never disturbs other
//! connections; a connection that goes away takes its listeners with it.

use mgrp_rt::lock;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mgrp_core::api::{
    ApiError, ErrorKind, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION, Request, RequestFrame,
    Response, ResponseFrame, TrainLimits, TrainRequest,
};
use mgrp_core::endpoint::SubmitError;
use mgrp_core::planner::{ProbeSpec, Transaction};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

use crate::config::Config;
use crate::counters::Stats;
use crate::exchange::Outgoing;
use crate::lifecycle::Lifecycle;
use crate::listeners::{ListenError, Listeners};
use crate::trains::{TrainRefusal, Trains};

/// What the API server uses.
#[derive(Debug, Clone)]
pub struct Api {
    pub(crate) config: Arc<Config>,
    pub(crate) trains: Arc<Trains>,
    pub(crate) listeners: Arc<Listeners>,
    pub(crate) stats: Stats,
    pub(crate) life: Arc<Lifecycle>,
}

/// Binds the API socket at `path`, creating its directory, mode 0660, owned by
/// `group` if given.
pub fn bind(path: &Path, group: Option<&str>) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!("cannot create the socket directory {}: {e}", dir.display())
        })?;
    }
    if path.exists() {
        // A live daemon answers; a stale socket from a crashed one does not.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "another mgrpd is listening on {}; stop it or choose another --socket",
                path.display()
            );
        }
        std::fs::remove_file(path).map_err(|e| {
            anyhow::anyhow!("cannot remove the stale socket {}: {e}", path.display())
        })?;
    }
    let listener = UnixListener::bind(path)
        .map_err(|e| anyhow::anyhow!("cannot bind the API socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| anyhow::anyhow!("cannot make {} mode 0660: {e}", path.display()))?;
    if let Some(group) = group {
        let gid = crate::sys::group_id(group).ok_or_else(|| {
            anyhow::anyhow!("socket-group {group:?} does not exist; create it or remove the key")
        })?;
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
            anyhow::anyhow!(
                "cannot give the API socket {} to socket-group {group:?}: {e} (it takes CAP_CHOWN)",
                path.display()
            )
        })?;
    }
    Ok(listener)
}

/// How long a stopping daemon waits for its API connections to answer what they
/// have in flight and close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Accepts connections until the daemon stops, then waits (at most [`CLOSE_WAIT`])
/// until every connection has answered what it had in flight and closed.
pub async fn serve(listener: UnixListener, api: Api) {
    let api = Arc::new(api);
    let ids = AtomicU64::new(1);
    let max = api.config.max_connections;
    let permits = Arc::new(Semaphore::new(max));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = api.life.stopped() => break,
        };
        let mut stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                warn!("accepting an API connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        if let Ok(cred) = stream.peer_cred() {
            debug!(
                "API connection {id} from pid {:?} uid {} gid {}",
                cred.pid(),
                cred.uid(),
                cred.gid()
            );
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let msg = error(
                ErrorKind::Busy,
                format!(
                    "{max} API connections are open, the most allowed (limits.max-connections)"
                ),
            );
            if let Ok(mut line) = serde_json::to_vec(&msg) {
                line.push(b'\n');
                let _ = stream.write_all(&line).await;
            }
            continue;
        };
        let api = api.clone();
        tokio::spawn(async move {
            connection(id, uid, stream, api).await;
            drop(permit);
        });
    }
    drop(listener);
    // Every permit back means every connection closed.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(CLOSE_WAIT, permits.acquire_many(all))
        .await
        .is_err()
    {
        warn!(
            "{} API connections still open {CLOSE_WAIT:?} after shutdown began; closing them",
            max - permits.available_permits()
        );
    }
}

fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
    Response::Error(ApiError {
        kind,
        message: message.into(),
    })
}

/// What the daemon remembers of one connection.
#[derive(Debug, Default)]
struct Conn {
    last_report: Option<mgrp_core::stats::TransactionReport>,
    /// Trains submitted and not yet reported, with the peer they go to.
    pending: std::collections::HashSet<u32>,
    /// Submissions accepted from this connection and not yet answered.
    in_flight: usize,
    /// The connecting user, whose rate budget its trains are charged to.
    uid: Option<u32>,
}

async fn connection(id: u64, uid: Option<u32>, stream: UnixStream, api: Arc<Api>) {
    let conn = Arc::new(std::sync::Mutex::new(Conn {
        uid,
        ..Conn::default()
    }));
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Outgoing>(4096);
    let writer = tokio::spawn(async move {
        let mut line = Vec::with_capacity(512);
        while let Some((id, response)) = rx.recv().await {
            line.clear();
            if serde_json::to_writer(&mut line, &ResponseFrame { id, response }).is_err() {
                continue;
            }
            line.push(b'\n');
            if write.write_all(&line).await.is_err() {
                break;
            }
        }
    });
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let max_line = api.config.max_request_bytes;
    loop {
        line.clear();
        // A stopping daemon takes no more requests; what is in flight is answered
        // (trains with their reports, which the pacer gives every train as it stops).
        let mut limited = (&mut reader).take(max_line as u64 + 1);
        let read = tokio::select! {
            r = limited.read_until(b'\n', &mut line) => r,
            () = api.life.stopped() => break,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if n > max_line {
            warn!(
                "API connection {id}: refused a request longer than {max_line} bytes (limits.max-request-bytes, --max-request-bytes)"
            );
            let _ = tx
                .send((
                    None,
                    error(
                        ErrorKind::BadRequest,
                        format!(
                            "request longer than {max_line} bytes (mgrpd's limits.max-request-bytes, or --max-request-bytes); fold equal probes into counts (protocol 3) or split the train"
                        ),
                    ),
                ))
                .await;
            break;
        }
        let frame: RequestFrame = match serde_json::from_slice(&line) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx
                    .send((
                        None,
                        error(ErrorKind::BadRequest, format!("bad request: {e}")),
                    ))
                    .await;
                continue;
            }
        };
        let reply = Reply {
            tx: tx.clone(),
            id: frame.id,
        };
        handle(id, frame.request, &api, &reply, &conn).await;
    }
    api.listeners.forget(id, None);
    // A client that left does not want its trains any more.
    let pending: Vec<_> = lock(&conn).pending.iter().copied().collect();
    for tx_id in pending {
        api.trains.cancel(id, tx_id);
        debug!("API connection {id} left: train {tx_id} cancelled");
    }
    drop(tx);
    let _ = writer.await;
    debug!("API connection {id} closed");
}

/// Where the answer to one request goes.
#[derive(Debug, Clone)]
struct Reply {
    tx: mpsc::Sender<Outgoing>,
    id: Option<u64>,
}

impl Reply {
    async fn send(&self, response: Response) {
        let _ = self.tx.send((self.id, response)).await;
    }
}

async fn handle(
    id: u64,
    req: Request,
    api: &Arc<Api>,
    tx: &Reply,
    conn: &Arc<std::sync::Mutex<Conn>>,
) {
    let reply = match req {
        Request::Hello { version, client } => {
            if !(OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
                error(
                    ErrorKind::Version,
                    format!(
                        "client speaks protocol {version}, this mgrpd speaks {OLDEST_PROTOCOL_VERSION} to {PROTOCOL_VERSION}; upgrade the older side"
                    ),
                )
            } else {
                debug!("API connection {id} is {client:?}");
                let c = &api.config;
                let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                Response::Hello {
                    version,
                    daemon: format!("mgrpd {}", env!("CARGO_PKG_VERSION")),
                    limits: Some(TrainLimits {
                        max_probes: u32::try_from(c.max_probes_per_train).unwrap_or(u32::MAX),
                        min_gap_ns: ns(c.min_gap),
                        max_gap_ns: ns(c.max_gap),
                        max_duration_ns: ns(c.max_train_duration),
                        max_request_bytes: c.max_request_bytes as u64,
                    }),
                }
            }
        }
        Request::SubmitTrain(train) => {
            let admitted = {
                let mut c = lock(conn);
                let ok = c.in_flight < api.config.max_trains_per_client;
                if ok {
                    c.in_flight += 1;
                }
                ok
            };
            if !admitted {
                let msg = format!(
                    "this connection has {} trains queued, the most allowed (limits.max-trains-per-client); wait for their reports",
                    api.config.max_trains_per_client
                );
                tx.send(error(ErrorKind::Busy, msg)).await;
                return;
            }
            let api = api.clone();
            let tx = tx.clone();
            let conn = conn.clone();
            // The report comes when the train has been sent; other requests go on.
            tokio::spawn(async move {
                let reply = submit(id, train, &api, &conn).await;
                {
                    let mut c = lock(&conn);
                    c.in_flight -= 1;
                    if let Response::Report(r) = &reply {
                        c.last_report = Some(r.clone());
                    }
                }
                tx.send(reply).await;
            });
            return;
        }
        Request::LastReport => match lock(conn).last_report.clone() {
            Some(r) => Response::Report(r),
            None => Response::NoReport,
        },
        Request::Listen { port, source } => {
            match api
                .listeners
                .listen(id, port, source, &tx.tx, api.config.max_listeners)
            {
                Ok(()) => Response::Listening { port },
                Err(ListenError::TooMany(total)) => error(
                    ErrorKind::Busy,
                    format!(
                        "{total} probe listeners are open, the most this mgrpd allows (limits.max-listeners); close one or raise the limit"
                    ),
                ),
                Err(ListenError::PortInUse) => error(
                    ErrorKind::PortInUse,
                    format!("another tool listens on port {port}; choose another port"),
                ),
            }
        }
        Request::Unlisten { port } => {
            api.listeners.forget(id, Some(port));
            Response::Unlistened { port }
        }
        Request::Stats => Response::Stats(Box::new(api.stats.get())),
        Request::Traffic => {
            let (window, peers) = api.stats.traffic(mgrp_rt::mono_now());
            Response::Traffic {
                window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
                peers,
            }
        }
    };
    tx.send(reply).await;
}

async fn submit(
    client: u64,
    train: TrainRequest,
    api: &Api,
    conn: &std::sync::Mutex<Conn>,
) -> Response {
    // Counts are checked before they are unfolded: a count may be large.
    if let Err(e) = api.trains.check_probe_count(train.probe_count()) {
        return error(ErrorKind::InvalidTrain, e.to_string());
    }
    if train.probes.iter().any(|p| p.count == 0) {
        return error(
            ErrorKind::InvalidTrain,
            "a probe with count 0: leave it out instead",
        );
    }
    let tx = Transaction {
        id: 0,
        src_port: train.src_port,
        dst_port: train.dst_port,
        probes: train
            .unfolded()
            .map(|p| ProbeSpec {
                header: p.header.clone().into(),
                size: p.size,
                gap: Duration::from_nanos(p.gap_ns),
                piggyback: p.piggyback,
            })
            .collect(),
    };
    let peer = api.config.peer_of(train.destination);
    // A train to a non-peer, or over its user's rate, is refused before any route
    // changes.
    if let Err(e) = api.trains.check_peer(peer) {
        return error(ErrorKind::InvalidTrain, e.to_string());
    }
    let probes = tx.probes.len() as u64;
    let bytes: u64 = tx.probes.iter().map(|p| u64::from(p.size)).sum();
    let uid = lock(conn).uid;
    if let Err(e) = api.trains.charge(uid, probes, bytes) {
        return error(ErrorKind::Busy, e.to_string());
    }
    // With routes on demand the train waits until its destination is routed.
    match api.trains.submit(client, train.destination, tx).await {
        Ok(s) => {
            lock(conn).pending.insert(s.id);
            let reply = match s.report.await {
                Ok(r) => Response::Report(r),
                Err(_) => error(
                    ErrorKind::ShuttingDown,
                    "mgrpd stopped before the train was sent",
                ),
            };
            lock(conn).pending.remove(&s.id);
            reply
        }
        Err(e) => {
            let kind = match e {
                TrainRefusal::Invalid(_) | TrainRefusal::Endpoint(SubmitError::Invalid(_)) => {
                    ErrorKind::InvalidTrain
                }
                TrainRefusal::RateLimited(_)
                | TrainRefusal::Endpoint(SubmitError::Busy(_) | SubmitError::ClientBusy(_)) => {
                    ErrorKind::Busy
                }
                TrainRefusal::Endpoint(SubmitError::ShuttingDown) => ErrorKind::ShuttingDown,
            };
            error(kind, e.to_string())
        }
    }
}
