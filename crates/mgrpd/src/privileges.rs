//! What each of the daemon's threads may still do once it is set up: the
//! capabilities kept by the main thread and by the data-path threads, and the
//! switch to an unprivileged user.

use anyhow::Context as _;
use tracing::{info, warn};

use crate::config::Config;
use crate::sys;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Privileges {
    /// While threads start: the pacer still asks for real-time priority.
    start: u64,
    /// The main thread afterwards: it installs and removes routes.
    main: u64,
    /// The data-path threads: nothing, unless memory is locked (allocating beyond
    /// RLIMIT_MEMLOCK under `mlockall(MCL_FUTURE)` needs CAP_IPC_LOCK).
    worker: u64,
}

impl Privileges {
    pub(crate) fn after_setup(config: &Config, memory_locked: bool) -> Self {
        use sys::{cap, cap_bit};
        let lock = if memory_locked {
            cap_bit(cap::IPC_LOCK)
        } else {
            0
        };
        let routes = if config.manage_routes {
            cap_bit(cap::NET_ADMIN)
        } else {
            0
        };
        let nice = if config.realtime {
            cap_bit(cap::SYS_NICE)
        } else {
            0
        };
        Self {
            start: routes | lock | nice,
            main: routes | lock,
            worker: lock,
        }
    }

    /// Limits the calling (main) thread to what starting the threads needs, as
    /// `user` if given; threads started afterwards inherit it.
    pub(crate) fn enter(&self, user: Option<&str>) -> anyhow::Result<()> {
        match user {
            Some(name) => {
                let (uid, gid) = sys::user_ids(name).ok_or_else(|| {
                    anyhow::anyhow!("user {name:?} does not exist; create it or drop --user")
                })?;
                sys::switch_user(uid, gid, self.start)
                    .with_context(|| format!("cannot become user {name}"))?;
                info!("running as user {name} (uid {uid}, gid {gid})");
            }
            None => sys::limit_capabilities(self.start).context("cannot drop capabilities")?,
        }
        Ok(())
    }

    /// Limits a data-path thread, once it no longer needs more.
    pub(crate) fn worker(self) {
        if let Err(e) = sys::limit_capabilities(self.worker) {
            warn!("a data-path thread cannot drop its capabilities: {e}");
        }
    }

    /// Limits the main thread, once every thread has started.
    pub(crate) fn main(self) {
        match sys::limit_capabilities(self.main) {
            Ok(()) => info!(
                "capabilities kept: main thread {}, data path {}",
                cap_names(self.main),
                cap_names(self.worker)
            ),
            Err(e) => warn!("the main thread cannot drop its capabilities: {e}"),
        }
    }
}

/// The names of the capabilities in `mask`, for logs.
fn cap_names(mask: u64) -> String {
    use sys::{cap, cap_bit};
    let names: Vec<&str> = [
        (cap::NET_ADMIN, "CAP_NET_ADMIN"),
        (cap::NET_RAW, "CAP_NET_RAW"),
        (cap::IPC_LOCK, "CAP_IPC_LOCK"),
        (cap::SYS_NICE, "CAP_SYS_NICE"),
    ]
    .into_iter()
    .filter(|(c, _)| mask & cap_bit(*c) != 0)
    .map(|(_, n)| n)
    .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(" ")
    }
}
