//! Threads that run until told to stop: the one guard the testbed's delay line,
//! accounting and traffic sources share. It raises their stop flag and joins them
//! when asked, and on drop, so no test leaves one running.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Threads watching one stop flag; stopped and joined on drop.
#[derive(Debug)]
pub struct Stoppable<T> {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<T>>,
}

impl<T> Stoppable<T> {
    /// Guards `threads`, which end once `stop` is set.
    pub fn new(stop: Arc<AtomicBool>, threads: Vec<JoinHandle<T>>) -> Self {
        Self { stop, threads }
    }

    /// Sets the flag and waits for every thread; what each returned, or `None` for
    /// one that panicked. Empty once halted.
    pub fn halt(&mut self) -> Vec<Option<T>> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.drain(..).map(|t| t.join().ok()).collect()
    }
}

impl<T> Drop for Stoppable<T> {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Halts a guard of threads that return results: the first error, or an error
/// naming `what` if a thread panicked.
pub fn halt_checked(threads: &mut Stoppable<anyhow::Result<()>>, what: &str) -> anyhow::Result<()> {
    for r in threads.halt() {
        match r {
            Some(r) => r?,
            None => anyhow::bail!("the {what} thread panicked"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halting_stops_and_joins_and_reports_panics() {
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
                Ok(())
            })
        };
        let mut g = Stoppable::new(stop.clone(), vec![watcher]);
        assert!(halt_checked(&mut g, "watcher").is_ok());
        assert!(g.halt().is_empty());
        let failing = std::thread::spawn(|| anyhow::bail!("no device"));
        let mut g = Stoppable::new(stop.clone(), vec![failing]);
        assert_eq!(
            halt_checked(&mut g, "x").unwrap_err().to_string(),
            "no device"
        );
        let panicking = std::thread::spawn(|| -> anyhow::Result<()> { panic!("boom") });
        let mut g = Stoppable::new(stop, vec![panicking]);
        assert_eq!(
            halt_checked(&mut g, "x").unwrap_err().to_string(),
            "the x thread panicked"
        );
    }
}
