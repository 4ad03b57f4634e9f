//! One shutdown signal for every thread and task, and the way a failing thread stops
//! the daemon.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{oneshot, watch};

/// Whether the daemon is stopping, and why it must stop if a thread failed.
#[derive(Debug)]
pub struct Lifecycle {
    /// Polled by the threads; set at the same moment as `stopping`, which the API's
    /// tasks wait on.
    stopping_now: AtomicBool,
    stopping: watch::Sender<bool>,
    fatal: Mutex<Option<oneshot::Sender<String>>>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            stopping_now: AtomicBool::new(false),
            stopping: watch::Sender::new(false),
            fatal: Mutex::new(None),
        }
    }
}

impl Lifecycle {
    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping_now.load(Ordering::SeqCst)
    }

    /// Begins shutdown: every thread and task hears it.
    pub fn begin(&self) {
        self.stopping_now.store(true, Ordering::SeqCst);
        self.stopping.send_replace(true);
    }

    /// Returns once shutdown has begun (at once if it has).
    pub async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        // Only an error if the sender is gone, which it is not while `self` lives.
        let _ = rx.wait_for(|&stopping| stopping).await;
    }

    /// A channel on which the daemon hears that a data-path thread died.
    pub fn fatal_channel(&self) -> oneshot::Receiver<String> {
        let (tx, rx) = oneshot::channel();
        *mgrp_rt::lock(&self.fatal) = Some(tx);
        rx
    }

    /// Reports that a data-path thread cannot go on; the daemon shuts down.
    pub fn fatal(&self, why: String) {
        if self.is_stopping() {
            return;
        }
        tracing::error!("{why}; mgrpd stops");
        if let Some(tx) = mgrp_rt::lock(&self.fatal).take() {
            let _ = tx.send(why);
        }
    }
}

/// Held by each data-path thread: when the thread ends while the daemon is not
/// shutting down, a panic included, the daemon stops in order (rules and routes
/// removed) instead of running on with a black-holed TUN.
#[derive(Debug)]
pub struct EndsDaemon<'a> {
    life: &'a Lifecycle,
    name: &'static str,
}

impl<'a> EndsDaemon<'a> {
    /// A guard for the thread called `name`.
    pub fn new(life: &'a Lifecycle, name: &'static str) -> Self {
        Self { life, name }
    }
}

impl Drop for EndsDaemon<'_> {
    fn drop(&mut self) {
        let how = if std::thread::panicking() {
            "panicked"
        } else {
            "stopped"
        };
        self.life.fatal(format!("the {} thread {how}", self.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_thread_stops_the_daemon_and_a_shutdown_does_not() {
        let life = Lifecycle::default();
        let mut fatal = life.fatal_channel();
        std::thread::scope(|s| {
            let r = s
                .spawn(|| {
                    let _ends = EndsDaemon::new(&life, "test");
                    panic!("on purpose");
                })
                .join();
            assert!(r.is_err());
        });
        assert_eq!(fatal.try_recv().unwrap(), "the test thread panicked");
        // During shutdown a thread ending is expected and says nothing.
        let mut fatal = life.fatal_channel();
        life.begin();
        assert!(life.is_stopping());
        drop(EndsDaemon::new(&life, "quiet"));
        assert!(fatal.try_recv().is_err());
    }
}
