//! Telling the service manager how a service is: systemd's notification protocol
//! (`Type=notify`). A service started with `NOTIFY_SOCKET` in its environment says
//! when it is ready (so units ordered after it start only then), when it reloads and
//! stops, and, when the unit has `WatchdogSec=`, that it is alive, at half that
//! period. Without `NOTIFY_SOCKET` every call does nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where the notifications go, if anywhere.
#[derive(Debug)]
pub struct Notifier {
    to: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier the environment asks for: `NOTIFY_SOCKET` (a path, or an
    /// abstract name after `@`) and `WATCHDOG_USEC` (for this process, if
    /// `WATCHDOG_PID` names one). A socket that cannot be opened is said, and then
    /// nothing is sent.
    pub fn from_env() -> Self {
        let watchdog = watchdog_period(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Self { to: None, watchdog };
        };
        let to = address(&path.to_string_lossy()).and_then(|addr| {
            let socket = UnixDatagram::unbound()?;
            Ok((socket, addr))
        });
        match to {
            Ok(to) => Self {
                to: Some(to),
                watchdog,
            },
            Err(e) => {
                tracing::warn!(
                    "NOTIFY_SOCKET {path:?} cannot be used ({e}): the service manager is not told when this service is ready"
                );
                Self { to: None, watchdog }
            }
        }
    }

    /// The service is ready; `status` is what `systemctl status` shows.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// The service reloads its configuration; [`Self::ready`] follows when done.
    pub fn reloading(&self) {
        self.send("RELOADING=1");
    }

    /// The service is stopping.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    /// How often [`Self::alive`] must be called: half the unit's `WatchdogSec=`.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// The service is alive (the watchdog's keep-alive).
    pub fn alive(&self) {
        self.send("WATCHDOG=1");
    }

    fn send(&self, message: &str) {
        if let Some((socket, addr)) = &self.to
            && let Err(e) = socket.send_to_addr(message.as_bytes(), addr)
        {
            tracing::debug!("cannot notify the service manager: {e}");
        }
    }
}

/// `NOTIFY_SOCKET`'s address: a path, or an abstract name after `@`.
fn address(text: &str) -> std::io::Result<SocketAddr> {
    match text.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => SocketAddr::from_pathname(text),
    }
}

/// Half the watchdog's period `usec` (microseconds), if it is set for `pid`.
fn watchdog_period(usec: Option<&str>, for_pid: Option<&str>, pid: u32) -> Option<Duration> {
    if for_pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(pid)) {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_half_its_period_and_only_for_this_process() {
        let half = Some(Duration::from_secs(15));
        assert_eq!(watchdog_period(Some("30000000"), None, 7), half);
        assert_eq!(watchdog_period(Some("30000000"), Some("7"), 7), half);
        assert_eq!(watchdog_period(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_period(Some("0"), None, 7), None);
        assert_eq!(watchdog_period(Some("soon"), None, 7), None);
        assert_eq!(watchdog_period(None, None, 7), None);
    }

    #[test]
    fn messages_reach_the_socket_by_path_and_by_abstract_name() {
        let dir = std::env::temp_dir().join(format!("mgrp-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let by_path = UnixDatagram::bind(&path).unwrap();
        let name = format!("@mgrp-notify-test-{}", std::process::id());
        let by_name = UnixDatagram::bind_addr(&address(&name).unwrap()).unwrap();
        for (text, socket) in [
            (path.to_str().unwrap(), &by_path),
            (name.as_str(), &by_name),
        ] {
            let n = Notifier {
                to: Some((UnixDatagram::unbound().unwrap(), address(text).unwrap())),
                watchdog: None,
            };
            n.ready("up");
            n.alive();
            let mut buf = [0u8; 64];
            let len = socket.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], b"READY=1\nSTATUS=up");
            let len = socket.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], b"WATCHDOG=1");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
